//! Received packets from Linux rxe pass the ICRC check although their IPv4 ID
//! (covered by the ICRC, invisible to a UDP socket) is not 0; corrupted ones
//! still fail it.

use softrdma_transport::{Config, Datagram, Endpoint};
use softrdma_wire::PcapReader;
use softrdma_wire::ip::parse_ip_udp;
use std::net::SocketAddr;

const UD_PINGPONG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../testdata/pcaps/ud_pingpong.pcap"
);

#[test]
fn rxe_packets_with_nonzero_ip_id_pass_and_corrupted_ones_fail() {
    let bytes = std::fs::read(UD_PINGPONG)
        .unwrap_or_else(|e| panic!("{UD_PINGPONG} (testdata/pcaps): {e}"));
    let mut checked = 0;
    for rec in PcapReader::new(&bytes).unwrap() {
        let rec = rec.unwrap();
        let ip = rec.ip_packet().unwrap();
        let env = parse_ip_udp(ip).unwrap();
        assert_ne!(u16::from_be_bytes([ip[4], ip[5]]), 0, "rxe sets an IP ID");
        // The receiving endpoint is the capture's destination, on port 4791.
        let ep = Endpoint::new(Config::new(env.dst, 1));
        let d = Datagram {
            src: SocketAddr::new(env.src, env.src_port),
            dst_ip: env.dst,
            payload: env.payload,
        };
        assert!(ep.icrc_ok(&d), "packet {checked}");
        // Without the ID search (what the simulator uses) rxe's packets fail.
        let mut strict = Config::new(env.dst, 1);
        strict.icrc_any_ipv4_id = false;
        assert!(!Endpoint::new(strict).icrc_ok(&d), "packet {checked}");
        let mut bad = env.payload.to_vec();
        bad[20] ^= 0x10;
        let d = Datagram { payload: &bad, ..d };
        assert!(!ep.icrc_ok(&d), "corrupted packet {checked}");
        checked += 1;
    }
    assert_eq!(checked, 40);
}
