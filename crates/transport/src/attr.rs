//! QP attributes and the modify-QP state machine (IBTA 10.3.1, the kernel's
//! `qp_state_table` in `ib_modify_qp_is_ok`): which attributes each transition
//! requires and which it allows.

use crate::error::VerbsError;
use crate::types::{Access, Mtu, QpAttrMask as M, QpState, QpType};
use std::net::IpAddr;

/// Where packets of a QP (RC/UC) or a UD work request go: the RoCEv2 address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressVector {
    /// Destination GID (an IPv4-mapped or native IPv6 address).
    pub dgid: [u8; 16],
    /// Index of the local GID (source address) to send from.
    pub sgid_index: u8,
    /// IPv6 flow label / hop limit / traffic class.
    pub flow_label: u32,
    /// Hop limit (IPv4 TTL).
    pub hop_limit: u8,
    /// Traffic class (IPv4 TOS).
    pub traffic_class: u8,
    /// Whether a GRH (i.e. a GID) is present. RoCE requires it for routing.
    pub is_global: bool,
    /// Destination LID (unused on RoCE; kept for query).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Port number (1).
    pub port_num: u8,
}

impl Default for AddressVector {
    fn default() -> Self {
        AddressVector {
            dgid: [0; 16],
            sgid_index: 0,
            flow_label: 0,
            hop_limit: 64,
            traffic_class: 0,
            is_global: false,
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            port_num: 1,
        }
    }
}

impl AddressVector {
    /// An address vector to an IP address (as a GID) from local GID 0.
    pub fn to_ip(ip: IpAddr) -> AddressVector {
        AddressVector {
            dgid: softrdma_wire::ip::to_v6(ip).octets(),
            is_global: true,
            ..AddressVector::default()
        }
    }
    /// The destination as an IP address.
    pub fn dest_ip(&self) -> IpAddr {
        softrdma_wire::ip::from_gid(self.dgid)
    }
}

/// Work queue capacities (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send WR.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive WR.
    pub max_recv_sge: u32,
    /// Inline payload bytes per send WR.
    pub max_inline_data: u32,
}

/// Attributes for creating a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    /// Transport.
    pub qp_type: QpType,
    /// Protection domain.
    pub pd: crate::PdHandle,
    /// Send completion queue.
    pub send_cq: crate::CqHandle,
    /// Receive completion queue.
    pub recv_cq: crate::CqHandle,
    /// Shared receive queue, if any.
    pub srq: Option<crate::SrqHandle>,
    /// Requested capacities.
    pub cap: QpCap,
    /// Signal every send WR.
    pub sq_sig_all: bool,
}

/// QP attributes (`struct ibv_qp_attr`); which fields matter is given by a mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// Target state.
    pub qp_state: QpState,
    /// Current state (checked when given).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Expected PSN of the first incoming request.
    pub rq_psn: u32,
    /// PSN of the first outgoing request.
    pub sq_psn: u32,
    /// Remote QP (RC/UC).
    pub dest_qp_num: u32,
    /// Remote access rights granted to the peer.
    pub qp_access_flags: Access,
    /// Capacities (query only).
    pub cap: QpCap,
    /// Primary path.
    pub ah_attr: AddressVector,
    /// P_Key index.
    pub pkey_index: u16,
    /// Notify when the SQ drains.
    pub en_sqd_async_notify: bool,
    /// SQ draining (query only).
    pub sq_draining: bool,
    /// Outstanding READ/atomic requests this QP may issue.
    pub max_rd_atomic: u8,
    /// Incoming READ/atomic requests this QP keeps resources for.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this QP sends.
    pub min_rnr_timer: u8,
    /// Port.
    pub port_num: u8,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout; 0 = infinite.
    pub timeout: u8,
    /// Transport retries before RETRY_EXC_ERR.
    pub retry_cnt: u8,
    /// RNR retries before RNR_RETRY_EXC_ERR; 7 = infinite.
    pub rnr_retry: u8,
}

impl Default for QpAttr {
    fn default() -> Self {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::M1024,
            qkey: 0,
            rq_psn: 0,
            sq_psn: 0,
            dest_qp_num: 0,
            qp_access_flags: Access::EMPTY,
            cap: QpCap::default(),
            ah_attr: AddressVector::default(),
            pkey_index: 0,
            en_sqd_async_notify: false,
            sq_draining: false,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            port_num: 1,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
        }
    }
}

/// Attributes a transition needs (`req`) and may take (`opt`), per QP type.
struct Rule {
    req: M,
    opt: M,
}

const fn rule(req: M, opt: M) -> Option<Rule> {
    Some(Rule { req, opt })
}

/// The kernel's `qp_state_table` for RC, UC and UD. `None` = illegal transition.
fn transition_rule(from: QpState, to: QpState, t: QpType) -> Option<Rule> {
    use QpState::*;
    use QpType::*;
    let e = M::EMPTY;
    if t.is_xrc() {
        // XRC follows RC, but each half needs only its own side's attributes
        // (the kernel's table); the other side's are accepted and ignored, as
        // programs such as ibv_xsrq_pingpong pass RC's full set to both.
        let r = transition_rule(from, to, Rc)?;
        let other = match t {
            XrcSend => M::ACCESS_FLAGS | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER,
            _ => M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC,
        };
        let moved = r.req.without(r.req.without(other));
        return rule(r.req.without(other), r.opt | moved);
    }
    match (from, to) {
        (_, Reset) | (_, Err) => rule(e, e),
        (Reset, Init) => match t {
            Ud => rule(M::PKEY_INDEX | M::PORT | M::QKEY, e),
            _ => rule(M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, e),
        },
        (Init, Init) => match t {
            Ud => rule(e, M::PKEY_INDEX | M::PORT | M::QKEY),
            _ => rule(e, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
        },
        (Init, Rtr) => match t {
            Ud => rule(e, M::PKEY_INDEX | M::QKEY),
            Uc => rule(
                M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
                M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
            ),
            _ => rule(
                M::AV
                    | M::PATH_MTU
                    | M::DEST_QPN
                    | M::RQ_PSN
                    | M::MAX_DEST_RD_ATOMIC
                    | M::MIN_RNR_TIMER,
                M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX,
            ),
        },
        (Rtr, Rts) => match t {
            Ud => rule(M::SQ_PSN, M::CUR_STATE | M::QKEY),
            Uc => rule(
                M::SQ_PSN,
                M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::PATH_MIG_STATE,
            ),
            _ => rule(
                M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
                M::CUR_STATE | M::ALT_PATH | M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::PATH_MIG_STATE,
            ),
        },
        (Rts, Rts) | (Sqd, Rts) => match t {
            Ud => rule(e, M::CUR_STATE | M::QKEY),
            Uc => rule(
                e,
                M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE,
            ),
            _ => rule(
                e,
                M::CUR_STATE | M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE | M::MIN_RNR_TIMER,
            ),
        },
        (Rts, Sqd) => rule(e, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => match t {
            Ud => rule(e, M::PKEY_INDEX | M::QKEY),
            Uc => rule(
                e,
                M::AV | M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PATH_MIG_STATE,
            ),
            _ => rule(
                e,
                M::PORT
                    | M::AV
                    | M::TIMEOUT
                    | M::RETRY_CNT
                    | M::RNR_RETRY
                    | M::MAX_QP_RD_ATOMIC
                    | M::MAX_DEST_RD_ATOMIC
                    | M::ALT_PATH
                    | M::ACCESS_FLAGS
                    | M::PKEY_INDEX
                    | M::MIN_RNR_TIMER
                    | M::PATH_MIG_STATE,
            ),
        },
        (Sqe, Rts) => match t {
            Ud => rule(e, M::CUR_STATE | M::QKEY),
            Uc => rule(e, M::CUR_STATE | M::ACCESS_FLAGS),
            _ => None,
        },
        _ => None,
    }
}

/// Checks a modify request against the state machine; returns the target state.
///
/// Errors name the illegal transition or the missing/unexpected attributes,
/// all with errno `EINVAL` as rdma-core returns.
pub fn check_modify(
    cur: QpState,
    t: QpType,
    attr: &QpAttr,
    mask: M,
) -> Result<QpState, VerbsError> {
    let cur = if mask.contains(M::CUR_STATE) {
        if attr.cur_qp_state != cur
            && !(matches!(attr.cur_qp_state, QpState::Rts | QpState::Sqe)
                && matches!(cur, QpState::Rts | QpState::Sqe))
        {
            return Err(VerbsError::InvalidArgument(format!(
                "cur_qp_state {:?} does not match the QP's state {:?}",
                attr.cur_qp_state, cur
            )));
        }
        cur
    } else {
        cur
    };
    let to = if mask.contains(M::STATE) {
        attr.qp_state
    } else {
        cur
    };
    let Some(r) = transition_rule(cur, to, t) else {
        return Err(VerbsError::InvalidArgument(format!(
            "illegal QP transition {cur:?} -> {to:?} for {t:?}"
        )));
    };
    let given = mask.without(M::STATE);
    let missing = r.req.without(given);
    if !missing.is_empty() {
        return Err(VerbsError::InvalidArgument(format!(
            "{cur:?} -> {to:?} ({t:?}) requires attributes {} (missing)",
            missing.names()
        )));
    }
    let extra = given.without(r.req).without(r.opt).without(M::RATE_LIMIT);
    if !extra.is_empty() {
        return Err(VerbsError::InvalidArgument(format!(
            "{cur:?} -> {to:?} ({t:?}) does not accept attributes {}",
            extra.names()
        )));
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(state: QpState) -> QpAttr {
        QpAttr {
            qp_state: state,
            ..QpAttr::default()
        }
    }

    #[test]
    fn xrc_halves_need_only_their_own_attributes() {
        let init = M::STATE | M::PKEY_INDEX | M::PORT;
        // The initiator has no responder: no access flags needed, but accepted.
        assert!(check_modify(QpState::Reset, QpType::XrcSend, &a(QpState::Init), init).is_ok());
        assert!(
            check_modify(
                QpState::Reset,
                QpType::XrcSend,
                &a(QpState::Init),
                init | M::ACCESS_FLAGS
            )
            .is_ok()
        );
        assert!(check_modify(QpState::Reset, QpType::XrcRecv, &a(QpState::Init), init).is_err());
        let rtr = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
        assert!(check_modify(QpState::Init, QpType::XrcSend, &a(QpState::Rtr), rtr).is_ok());
        assert!(check_modify(QpState::Init, QpType::XrcRecv, &a(QpState::Rtr), rtr).is_err());
        // The target sends no requests: SQ_PSN and TIMEOUT only.
        let rts = M::STATE | M::SQ_PSN | M::TIMEOUT;
        assert!(check_modify(QpState::Rtr, QpType::XrcRecv, &a(QpState::Rts), rts).is_ok());
        assert!(check_modify(QpState::Rtr, QpType::XrcSend, &a(QpState::Rts), rts).is_err());
        // Not RC's QKEY, on either.
        assert!(
            check_modify(
                QpState::Rtr,
                QpType::XrcRecv,
                &a(QpState::Rts),
                rts | M::QKEY
            )
            .is_err()
        );
    }

    #[test]
    fn rc_bringup() {
        let init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
        assert_eq!(
            check_modify(QpState::Reset, QpType::Rc, &a(QpState::Init), init).unwrap(),
            QpState::Init
        );
        let rtr = M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER;
        assert!(check_modify(QpState::Init, QpType::Rc, &a(QpState::Rtr), rtr).is_ok());
        let e = check_modify(
            QpState::Init,
            QpType::Rc,
            &a(QpState::Rtr),
            rtr.without(M::DEST_QPN),
        )
        .unwrap_err();
        assert!(e.to_string().contains("DEST_QPN"), "{e}");
        let e = check_modify(QpState::Reset, QpType::Rc, &a(QpState::Rts), M::STATE).unwrap_err();
        assert!(e.to_string().contains("illegal"), "{e}");
        assert_eq!(e.errno(), libc_einval());
        // perftest -R: MIN_RNR_TIMER alone on an RTS QP.
        assert_eq!(
            check_modify(
                QpState::Rts,
                QpType::Rc,
                &a(QpState::Reset),
                M::MIN_RNR_TIMER
            )
            .unwrap(),
            QpState::Rts
        );
        // UD does not take ACCESS_FLAGS at INIT.
        assert!(
            check_modify(
                QpState::Reset,
                QpType::Ud,
                &a(QpState::Init),
                M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY | M::ACCESS_FLAGS
            )
            .unwrap_err()
            .to_string()
            .contains("ACCESS_FLAGS")
        );
    }

    fn libc_einval() -> i32 {
        22
    }
}
