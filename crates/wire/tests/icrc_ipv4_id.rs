//! `icrc::ipv4_id_and_df`: a receiver that never sees the IPv4 header (a UDP
//! socket) still verifies the ICRC of Linux rxe's packets, whose non-zero,
//! per-packet IPv4 Identification the ICRC covers.

use softrdma_wire::ip::{IPV4_HDR_LEN, Ipv4Fields, ipv4_header, parse_ip_udp, udp_header};
use softrdma_wire::{ICRC_LEN, PcapReader, icrc};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

const PCAPS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/pcaps");

/// The header a UDP-socket receiver assumes: ID 0, DF set, TOS/TTL 0.
fn assumed(src: Ipv4Addr, dst: Ipv4Addr, udp_len: usize) -> [u8; IPV4_HDR_LEN] {
    ipv4_header(
        &Ipv4Fields {
            src,
            dst,
            id: 0,
            tos: 0,
            ttl: 0,
            df: true,
        },
        udp_len,
    )
}

fn split(payload: &[u8]) -> (&[u8], u32) {
    let (body, tail) = payload.split_at(payload.len() - ICRC_LEN);
    (body, u32::from_le_bytes(tail.try_into().unwrap()))
}

/// Every IPv4 packet of the golden rxe captures: the real ID and DF are found
/// from the assumed header, and the packet counts as intact.
#[test]
fn recovers_rxe_ids_from_golden_captures() {
    let dir = Path::new(PCAPS);
    assert!(
        dir.is_dir(),
        "golden captures not found at {PCAPS} (testdata/pcaps)"
    );
    let mut checked = 0;
    let mut nonzero = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pcap") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        for (n, rec) in PcapReader::new(&bytes).unwrap().enumerate() {
            let rec = rec.unwrap();
            let ip = rec.ip_packet().unwrap();
            let env = parse_ip_udp(ip).unwrap();
            let (IpAddr::V4(src), IpAddr::V4(dst)) = (env.src, env.dst) else {
                continue;
            };
            let at = format!("{} #{}", path.display(), n + 1);
            let real_id = u16::from_be_bytes([ip[4], ip[5]]);
            let real_df = ip[6] & 0x40 != 0;
            let udp_len = env.udp_header.len() + env.payload.len();
            let (body, carried) = split(env.payload);
            let hdr = assumed(src, dst, udp_len);
            assert_eq!(
                icrc::ipv4_id_and_df(&hdr, env.udp_header, body, carried),
                Some((real_id, real_df)),
                "{at}"
            );
            checked += 1;
            nonzero += usize::from(real_id != 0);
        }
    }
    assert!(checked > 1000, "only {checked} IPv4 packets");
    assert!(nonzero > 1000, "rxe's IDs are non-zero: {nonzero}");
}

/// A small deterministic generator (no dependency for one test).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
}

#[test]
fn recovers_any_id_and_df_at_any_length() {
    let mut rng = Lcg(7);
    let (src, dst) = (Ipv4Addr::new(10, 77, 0, 2), Ipv4Addr::new(10, 77, 0, 1));
    for len in [12usize, 16, 28, 40, 64, 300, 1036, 1040, 4108, 9000, 65000] {
        for _ in 0..20 {
            let body: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let id = rng.next() as u16;
            let df = rng.next() & 1 == 1;
            let udp_len = 8 + len + ICRC_LEN;
            let udp = udp_header(0xC000 | rng.next() as u16 & 0x3FFF, 4791, len + ICRC_LEN);
            let real = ipv4_header(
                &Ipv4Fields {
                    src,
                    dst,
                    id,
                    tos: 0,
                    ttl: 64,
                    df,
                },
                udp_len,
            );
            let carried = icrc::compute(&real, &udp, &body).unwrap();
            let hdr = assumed(src, dst, udp_len);
            assert_eq!(
                icrc::ipv4_id_and_df(&hdr, &udp, &body, carried),
                Some((id, df)),
                "len {len}"
            );
        }
    }
}

#[test]
fn corrupted_packets_match_no_id() {
    let mut rng = Lcg(11);
    let (src, dst) = (Ipv4Addr::new(10, 77, 0, 2), Ipv4Addr::new(10, 77, 0, 1));
    let mut accepted = 0;
    let trials = 2000;
    for t in 0..trials {
        let len = 12 + (t % 200) * 4;
        let mut body: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let udp_len = 8 + len + ICRC_LEN;
        let udp = udp_header(0xC123, 4791, len + ICRC_LEN);
        let real = ipv4_header(
            &Ipv4Fields {
                src,
                dst,
                id: rng.next() as u16,
                tos: 0,
                ttl: 64,
                df: true,
            },
            udp_len,
        );
        let carried = icrc::compute(&real, &udp, &body).unwrap();
        // One flipped bit anywhere in the payload, or a wrong source address.
        let hdr = if t % 2 == 0 {
            // Byte 4 of the BTH is masked out of the ICRC: flip any other.
            let i = match rng.next() as usize % len {
                4 => 5,
                i => i,
            };
            body[i] ^= 1 << (rng.next() % 8);
            assumed(src, dst, udp_len)
        } else {
            assumed(Ipv4Addr::new(10, 77, 0, 3), dst, udp_len)
        };
        accepted += usize::from(icrc::ipv4_id_and_df(&hdr, &udp, &body, carried).is_some());
    }
    // A false match has probability 2^-15 per packet.
    assert_eq!(
        accepted, 0,
        "{accepted} of {trials} corrupted packets accepted"
    );
}

#[test]
fn not_ipv4_is_none() {
    let v6 = [0x60u8; 40];
    assert_eq!(
        icrc::ipv4_id_and_df(&v6, &[0; 8], &[0; 12], 0),
        None,
        "IPv6 has no ID"
    );
}
