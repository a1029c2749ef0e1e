//! A destroyed QP's completions leave the CQs it shared with other QPs, as
//! with mlx5: libfabric's rxm, closing its endpoints at teardown, polled a
//! flush of a receive buffer whose QP it had already destroyed, reposted the
//! buffer to that endpoint and crashed (`fi_pingpong -e rdm` over
//! `verbs;ofi_rxm`, about 1 run in 12 with the same-host lanes).

use softrdma_transport::{
    Access, Config, Endpoint, Instant, QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpState, QpType,
    RecvWr, Sge, WcStatus,
};
use std::net::{IpAddr, Ipv4Addr};

#[test]
fn a_destroyed_qps_flushes_leave_the_shared_cq_and_the_others_stay() {
    let now = Instant::ZERO;
    let mut ep = Endpoint::new(Config::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 1));
    let pd = ep.alloc_pd().unwrap();
    let (cq, _) = ep.create_cq(64).unwrap();
    let mr = ep
        .reg_mr(pd, 0x1000, 4096, 0x1000, Access::LOCAL_WRITE)
        .unwrap();
    let qp = |ep: &mut Endpoint| {
        ep.create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        })
        .unwrap()
        .0
    };
    let (a, b) = (qp(&mut ep), qp(&mut ep));
    for (q, id) in [(a, 10), (a, 11), (b, 20), (b, 21)] {
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            ..QpAttr::default()
        };
        if id % 10 == 0 {
            ep.modify_qp(
                now,
                q,
                &init,
                M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
            )
            .unwrap();
        }
        let sgl = vec![Sge {
            addr: 0x1000,
            length: 64,
            lkey: mr.lkey,
        }];
        ep.post_recv(
            now,
            q,
            RecvWr {
                wr_id: id,
                sgl: sgl.into(),
            },
        )
        .unwrap();
    }
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    for q in [a, b] {
        ep.modify_qp(now, q, &err, M::STATE).unwrap();
    }
    assert_eq!(ep.cq_len(cq), 4, "both QPs' receives were flushed");
    ep.destroy_qp(a).unwrap();
    let mut got = Vec::new();
    ep.poll_cq(cq, 16, |wc| got.push((wc.qp_num, wc.wr_id, wc.status)))
        .unwrap();
    assert_eq!(
        got,
        vec![(b, 20, WcStatus::WrFlushErr), (b, 21, WcStatus::WrFlushErr)],
        "only the live QP's flushes are left"
    );
}
