use super::*;
use crate::cm::{Rtu, rej_reason};
use crate::headers::{Aeth, Bth, Deth, Feth};
use crate::ip::{Ipv4Fields, ipv4_header, ipv6_header, udp_header};
use crate::mad::GSI_QKEY;
use crate::opcode::Opcode;
use crate::packet::{Headers, emit};
use crate::psn::Psn;

/// An IPv4/UDP/RoCEv2 packet with a correct ICRC.
fn packet(h: &Headers, payload: &[u8]) -> Vec<u8> {
    let mut roce = Vec::new();
    emit(h, payload, &mut roce).unwrap();
    let f = Ipv4Fields {
        src: [192, 168, 1, 1].into(),
        dst: [192, 168, 1, 2].into(),
        id: 0x1234,
        tos: 0,
        ttl: 64,
        df: true,
    };
    let ip = ipv4_header(&f, 8 + roce.len());
    let udp = udp_header(0xC123, 4791, roce.len());
    icrc::fill(&ip, &udp, &mut roce).unwrap();
    [&ip[..], &udp[..], &roce[..]].concat()
}

fn line(h: &Headers, payload: &[u8]) -> String {
    decode_ip_packet(&packet(h, payload)).unwrap().to_string()
}

fn ack(syndrome: Syndrome) -> Headers {
    let mut h = Headers::new(Bth::new(Opcode::RC_ACKNOWLEDGE, 0x11, Psn::new(7)));
    h.aeth = Some(Aeth { syndrome, msn: 5 });
    h
}

#[test]
fn aeth_syndromes_are_spelled_out() {
    let s = line(&ack(Syndrome::RnrNak { timer: 14 }), &[]);
    assert_eq!(
        s,
        "192.168.1.1:49443 > 192.168.1.2:4791 RC_ACKNOWLEDGE qp=0x000011 psn=7 \
         AETH[RNR-NAK timer=14 (1.28ms) msn=5] len=0 icrc ok"
    );
    let s = line(&ack(Syndrome::Nak(NakCode::PsnSequence)), &[]);
    assert!(
        s.contains("AETH[NAK PSN-sequence-error (0x60) msn=5]"),
        "{s}"
    );
    let s = line(&ack(Syndrome::Nak(NakCode::RemoteAccess)), &[]);
    assert!(s.contains("NAK remote-access-error (0x62)"), "{s}");
    let s = line(&ack(Syndrome::Nak(NakCode::Reserved(9))), &[]);
    assert!(s.contains("NAK reserved-code (0x69)"), "{s}");
    let s = line(&ack(Syndrome::Reserved(0x41)), &[]);
    assert!(s.contains("reserved syndrome 0x41"), "{s}");
    let s = line(&ack(Syndrome::RnrNak { timer: 0 }), &[]);
    assert!(s.contains("(655.36ms)"), "{s}");
}

#[test]
fn flags_and_rarer_headers() {
    let mut h = Headers::new(Bth::new(
        Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        0xABCDEF,
        Psn::new(1),
    ));
    h.bth.se = true;
    h.bth.becn = true;
    h.bth.pkey = 0x8001;
    h.ieth = Some(0x1234);
    let s = line(&h, b"xyz");
    assert!(
        s.contains("RC_SEND_ONLY_WITH_INVALIDATE qp=0xabcdef psn=1 SE BECN pkey=0x8001 IETH[rkey=0x00001234] len=3 icrc ok"),
        "{s}"
    );
    let mut x = Headers::new(Bth::new(Opcode::XRC_SEND_ONLY, 9, Psn::new(4)));
    x.xrceth = Some(0x42);
    let s = line(&x, b"hi");
    assert!(
        s.contains("XRC_SEND_ONLY qp=0x000009 psn=4 XRCETH[srqn=0x000042] len=2"),
        "{s}"
    );
    let mut f = Headers::new(Bth::new(Opcode::RC_FLUSH, 2, Psn::new(3)));
    f.feth = Some(Feth { word: 0x12 });
    let s = line(&f, &[]);
    assert!(
        s.contains("FETH[0x00000012] RETH[va=0x0 rkey=0x00000000 dlen=0]"),
        "{s}"
    );
}

/// A UD datagram to QP1 carrying `payload`.
fn gsi(payload: &[u8]) -> Vec<u8> {
    let mut h = Headers::new(Bth::new(Opcode::UD_SEND_ONLY, GSI_QPN, Psn::new(0)));
    h.deth = Some(Deth {
        qkey: GSI_QKEY,
        resv8: 0,
        src_qp: 1,
    });
    packet(&h, payload)
}

#[test]
fn mads_on_qp1() {
    let rtu = CmMad::new(
        0x77,
        Rtu {
            local_comm_id: 1,
            remote_comm_id: 2,
            ..Rtu::default()
        },
    );
    let p = gsi(&rtu.to_bytes());
    let d = decode_ip_packet(&p).unwrap();
    assert_eq!(d.mad, Some(GsiMad::Cm(Box::new(rtu))));
    assert!(d.is_ok());
    assert!(
        d.to_string()
            .contains("CM RTU[tid=0x77 comm=0x00000001 remote=0x00000002] icrc ok")
    );

    let mut rej = CmMad::new(
        1,
        cm::Rej {
            reason: rej_reason::INVALID_SERVICE_ID,
            ..Default::default()
        },
    )
    .to_bytes();
    let p = gsi(&rej);
    let d = decode_ip_packet(&p).unwrap();
    assert!(
        d.to_string()
            .contains("reason=8 (invalid service ID) msg=0")
    );

    // Subnet administration class: header only, still fine.
    rej[1] = 0x03;
    let p = gsi(&rej);
    let d = decode_ip_packet(&p).unwrap();
    assert!(matches!(d.mad, Some(GsiMad::Other(h)) if h.mgmt_class == 3));
    assert!(d.is_ok());
    assert!(
        d.to_string()
            .contains("MAD[class=0x03 method=0x03 attr=0x0012")
    );

    // A short MAD is malformed: the packet is decoded but not ok.
    let p = gsi(&[1, 7, 2, 3]);
    let d = decode_ip_packet(&p).unwrap();
    assert!(matches!(
        d.mad,
        Some(GsiMad::Malformed(Error::Truncated { .. }))
    ));
    assert!(!d.is_ok());
    assert!(d.to_string().contains("MAD malformed (truncated"));
    let p = gsi(&[0u8; 300]);
    let d = decode_ip_packet(&p).unwrap();
    assert!(matches!(d.mad, Some(GsiMad::Other(_))));
}

#[test]
fn envelope_and_header_errors_are_errors() {
    let mut h = Headers::new(Bth::new(Opcode::RC_SEND_ONLY, 5, Psn::new(0)));
    h.bth.ack_req = true;
    let good = packet(&h, b"hello");
    assert!(decode_ip_packet(&good).unwrap().is_ok());
    assert!(decode_ip_packet(&good[..27]).is_err());
    let mut tver = good.clone();
    tver[28 + 1] |= 0x01;
    assert_eq!(decode_ip_packet(&tver).err(), Some(Error::BadTver(1)));
    let mut tcp = good.clone();
    tcp[9] = 6;
    assert!(decode_ip_packet(&tcp).is_err());
}

#[test]
fn udp_port_peek() {
    let h = Headers::new(Bth::new(Opcode::RC_SEND_ONLY, 5, Psn::new(0)));
    let p = packet(&h, b"");
    assert_eq!(udp_dst_port(&p), Some(4791));
    // IPv4 options shift the UDP header; the peek follows IHL.
    let mut opt = p[..20].to_vec();
    opt[0] = 0x46;
    opt.extend_from_slice(&[1, 1, 1, 1]);
    opt.extend_from_slice(&p[20..]);
    assert_eq!(udp_dst_port(&opt), Some(4791));
    let mut v6 = ipv6_header("::1".parse().unwrap(), "::2".parse().unwrap(), 0, 0, 64, 8).to_vec();
    v6.extend_from_slice(&udp_header(1, 9999, 0));
    assert_eq!(udp_dst_port(&v6), Some(9999));
    let mut tcp = p.clone();
    tcp[9] = 6;
    assert_eq!(udp_dst_port(&tcp), None);
    assert_eq!(udp_dst_port(&p[..21]), None);
    assert_eq!(udp_dst_port(&[]), None);
    assert_eq!(udp_dst_port(&[0x50; 40]), None);
}
