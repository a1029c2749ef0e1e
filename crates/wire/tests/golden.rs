//! Every packet of the golden Linux rxe captures in `testdata/pcaps` (a copy
//! of shared/pcaps) must parse, pass our ICRC check against the captured IP/UDP headers, and re-encode from
//! its parsed form to exactly the captured bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use softrdma_wire::cm::{CmMessage, port_space, service_id};
use softrdma_wire::decode::{GsiMad, IcrcStatus};
use softrdma_wire::ip::{ROCEV2_PORT, UdpEnvelope, parse_ip_udp};
use softrdma_wire::pcap::LinkType;
use softrdma_wire::{
    ICRC_LEN, Opcode, Packet, PcapReader, Psn, decode_ip_packet, emit, icrc, pad_for,
};

const PCAPS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/pcaps");

/// Packet counts per capture, as `tshark -r FILE | wc -l` reports them.
const EXPECTED: &[(&str, usize)] = &[
    ("ib_atomic_cas.pcap", 100),
    ("ib_atomic_faa.pcap", 100),
    ("ib_read_bw.pcap", 180),
    ("ib_read_lat.pcap", 100),
    ("ib_send_lat.pcap", 200),
    ("ib_write_bw.pcap", 250),
    ("ib_write_lat.pcap", 200),
    ("live_host_rc_pingpong.pcap", 100),
    ("rc_pingpong_ipv6.pcap", 40),
    ("rc_pingpong_send.pcap", 208),
    ("rc_pingpong_small.pcap", 40),
    ("rping.pcap", 125),
    ("srq_pingpong.pcap", 48),
    ("uc_pingpong.pcap", 80),
    ("ud_pingpong.pcap", 40),
    ("udaddy.pcap", 12),
];

fn pcap_files() -> Vec<PathBuf> {
    let dir = Path::new(PCAPS);
    assert!(
        dir.is_dir(),
        "golden captures not found at {PCAPS} (testdata/pcaps is part of the repository). \
         Refusing to pass without them."
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .pcap files in {PCAPS}");
    files
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// Re-encodes a parsed packet with `Headers::write` + payload + zero pad + ICRC.
fn reencode(env: &UdpEnvelope<'_>, p: &Packet<'_>) -> Vec<u8> {
    let hl = p.header_len();
    let mut buf = vec![0u8; hl];
    assert_eq!(p.hdr.write(&mut buf), Ok(hl));
    buf.extend_from_slice(p.payload);
    buf.resize(buf.len() + usize::from(p.hdr.bth.pad) + ICRC_LEN, 0);
    icrc::fill(env.ip_header, env.udp_header, &mut buf).unwrap();
    buf
}

/// Calls `f` with (file name, frame number from 1, IP packet) for every frame.
fn for_each_packet(mut f: impl FnMut(&str, usize, &[u8])) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for path in pcap_files() {
        let file = name(&path);
        let bytes = std::fs::read(&path).unwrap();
        let reader = PcapReader::new(&bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(reader.header().link, LinkType::ETHERNET, "{file}");
        let mut n = 0;
        for rec in reader {
            let rec = rec.unwrap_or_else(|e| panic!("{file} after frame {n}: {e}"));
            n += 1;
            let ip = rec
                .ip_packet()
                .unwrap_or_else(|| panic!("{file} #{n}: no IP packet"));
            f(&file, n, ip);
        }
        counts.insert(file, n);
    }
    counts
}

#[test]
fn every_golden_packet_parses_verifies_and_reencodes() {
    let mut opcodes = BTreeSet::new();
    let counts = for_each_packet(|file, n, ip| {
        let at = format!("{file} #{n}");
        let env = parse_ip_udp(ip).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(env.dst_port, ROCEV2_PORT, "{at}");
        let p = Packet::parse(env.payload).unwrap_or_else(|e| panic!("{at}: {e}"));
        icrc::verify(&env).unwrap_or_else(|e| panic!("{at}: {e}"));
        // rxe pads to a multiple of four and nothing more.
        assert_eq!(p.hdr.bth.pad, pad_for(p.payload.len()), "{at}");
        assert_eq!(reencode(&env, &p), env.payload, "{at}: Headers::write");
        let mut emitted = Vec::new();
        emit(&p.hdr, p.payload, &mut emitted).unwrap();
        icrc::fill(env.ip_header, env.udp_header, &mut emitted).unwrap();
        assert_eq!(emitted, env.payload, "{at}: emit");
        let d = decode_ip_packet(ip).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert!(d.is_ok(), "{at}: {d}");
        assert!(d.to_string().ends_with(" icrc ok"), "{at}: {d}");
        opcodes.insert(p.hdr.bth.opcode.0);
    });
    for (file, n) in &counts {
        assert!(*n > 0, "{file} holds no packets");
    }
    for (file, want) in EXPECTED {
        assert_eq!(counts.get(*file), Some(want), "packet count of {file}");
    }
    let total: usize = counts.values().sum();
    let expected_total: usize = EXPECTED.iter().map(|e| e.1).sum();
    assert_eq!(expected_total, 1823);
    assert!(total >= expected_total, "{total} packets");
    // The captures exercise these opcodes; losing one means a file went missing.
    for oc in [
        Opcode::RC_SEND_FIRST,
        Opcode::RC_SEND_MIDDLE,
        Opcode::RC_SEND_LAST,
        Opcode::RC_SEND_ONLY,
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        Opcode::RC_RDMA_WRITE_LAST,
        Opcode::RC_RDMA_WRITE_ONLY,
        Opcode::RC_RDMA_READ_REQUEST,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        Opcode::RC_ACKNOWLEDGE,
        Opcode::RC_ATOMIC_ACKNOWLEDGE,
        Opcode::RC_COMPARE_SWAP,
        Opcode::RC_FETCH_ADD,
        Opcode::UC_SEND_FIRST,
        Opcode::UC_SEND_LAST,
        Opcode::UD_SEND_ONLY,
        Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
    ] {
        assert!(opcodes.contains(&oc.0), "no {oc} in the captures");
    }
}

#[test]
fn corrupting_any_covered_byte_breaks_the_icrc() {
    // One packet per capture: flip a bit in every byte the ICRC covers unmasked
    // and check the verdict turns bad; masked fields must not matter.
    let mut checked = 0;
    let mut seen = BTreeSet::new();
    for_each_packet(|file, n, ip| {
        if !seen.insert(file.to_owned()) {
            return;
        }
        let v6 = ip[0] >> 4 == 6;
        let ip_len = if v6 { 40 } else { 20 };
        let masked: &[usize] = if v6 { &[1, 2, 3, 7] } else { &[1, 8, 10, 11] };
        let udp_csum = [ip_len + 6, ip_len + 7];
        let bth4 = ip_len + 8 + 4;
        let end = ip.len() - ICRC_LEN;
        // IPv6 byte 0 mixes the version with masked traffic-class bits: see below.
        for i in usize::from(v6)..end {
            let mut m = ip.to_vec();
            m[i] ^= 0x01;
            let Ok(env) = parse_ip_udp(&m) else {
                continue; // length fields: the envelope itself no longer parses
            };
            let covered = !masked.contains(&i) && !udp_csum.contains(&i) && i != bth4;
            let ok = icrc::verify(&env).is_ok();
            assert_eq!(ok, !covered, "{file} #{n} byte {i}");
            checked += 1;
        }
        // IPv6 byte 0: only the version nibble is covered.
        if v6 {
            let mut m = ip.to_vec();
            m[0] ^= 0x01;
            assert!(icrc::verify(&parse_ip_udp(&m).unwrap()).is_ok());
        }
    });
    assert!(checked > 1000, "{checked}");
}

#[test]
fn rdma_cm_handshake_sets_the_psns_of_the_data_that_follows() {
    // README: the passive side sends from the REQ's starting PSN and the active
    // side from the REP's.
    let bytes = std::fs::read(Path::new(PCAPS).join("rping.pcap")).expect("rping.pcap");
    let active = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 3));
    let (mut req_psn, mut rep_psn) = (None, None);
    let mut first_data: BTreeMap<IpAddr, Psn> = BTreeMap::new();
    for rec in PcapReader::new(&bytes).unwrap() {
        let rec = rec.unwrap();
        let d = decode_ip_packet(rec.ip_packet().unwrap()).unwrap();
        match &d.mad {
            Some(GsiMad::Cm(m)) => match &m.msg {
                CmMessage::Req(r) => {
                    assert_eq!(r.service_id, service_id(port_space::TCP, 7174));
                    req_psn = Some(r.starting_psn);
                }
                CmMessage::Rep(r) => rep_psn = Some(r.starting_psn),
                _ => {}
            },
            Some(other) => panic!("unexpected MAD {other:?}"),
            None if d.packet.info.is_request() => {
                first_data.entry(d.env.src).or_insert(d.packet.hdr.bth.psn);
            }
            None => {}
        }
    }
    assert_eq!(first_data.get(&active).copied(), rep_psn);
    let passive = first_data.keys().find(|a| **a != active).copied().unwrap();
    assert_eq!(first_data[&passive], req_psn.unwrap());
    assert_eq!(req_psn, Some(Psn::new(0xa5_6785)));
    assert_eq!(rep_psn, Some(Psn::new(0x0c_ddad)));
}

/// The first packet of `file` whose summary contains `needle`.
fn line_with(file: &str, needle: &str) -> String {
    let bytes = std::fs::read(Path::new(PCAPS).join(file)).unwrap();
    for rec in PcapReader::new(&bytes).unwrap() {
        let s = decode_ip_packet(rec.unwrap().ip_packet().unwrap())
            .unwrap()
            .to_string();
        if s.contains(needle) {
            return s;
        }
    }
    panic!("no packet of {file} shows {needle:?}")
}

#[test]
fn summary_lines_show_the_key_fields() {
    let req = line_with("rping.pcap", "CM REQ");
    assert!(
        req.starts_with("10.77.0.3:55410 > 10.77.0.2:4791 UD_SEND_ONLY qp=0x000001 psn=0 A "),
        "{req}"
    );
    for part in [
        "DETH[qkey=0x80010000 srcqp=0x000001]",
        "len=256",
        "tid=0x21791f49e",
        "comm=0x9ef49117",
        "sid=0x0000000001061c06(tcp:7174)",
        "qpn=0x000019",
        "spsn=0xa56785",
        "cma=10.77.0.3:46451>10.77.0.2",
    ] {
        assert!(req.contains(part), "{part:?} missing from {req}");
    }
    let dreq = line_with("rping.pcap", "CM DREQ");
    assert!(
        dreq.contains("comm=0x9ef49117 remote=0x23d838f2 qpn=0x000019"),
        "{dreq}"
    );
    let sidr = line_with("udaddy.pcap", "CM SIDR_REP");
    assert!(
        sidr.contains("status=0 qpn=0x00001a qkey=0x01234567"),
        "{sidr}"
    );
    assert!(sidr.contains("(udp:7174)"), "{sidr}");
    let ack = line_with("rc_pingpong_small.pcap", "RC_ACKNOWLEDGE");
    assert!(ack.contains("AETH[ACK credits=31 msn="), "{ack}");
    assert!(ack.contains(" len=0 icrc ok"), "{ack}");
    let rd = line_with("ib_read_lat.pcap", "RC_RDMA_READ_REQUEST");
    assert!(rd.contains("RETH[va=0x") && rd.contains("dlen=64]"), "{rd}");
    let cas = line_with("ib_atomic_cas.pcap", "RC_COMPARE_SWAP");
    assert!(
        cas.contains("AtomicETH[va=0x") && cas.contains(" cmp=0x"),
        "{cas}"
    );
    let faa = line_with("ib_atomic_faa.pcap", "RC_FETCH_ADD");
    assert!(faa.contains(" add=0x") && !faa.contains("cmp="), "{faa}");
    let aack = line_with("ib_atomic_faa.pcap", "RC_ATOMIC_ACKNOWLEDGE");
    assert!(aack.contains("AtomicAckETH[orig=0x"), "{aack}");
    let ud = line_with("udaddy.pcap", "UD_SEND_ONLY_WITH_IMMEDIATE");
    assert!(
        ud.contains(" imm=0x") && ud.contains("qkey=0x01234567"),
        "{ud}"
    );
    let v6 = line_with("rc_pingpong_ipv6.pcap", "RC_SEND_ONLY");
    assert!(v6.starts_with("[fe80::"), "{v6}");
}

#[test]
fn bad_icrc_is_reported_not_rejected() {
    let bytes = std::fs::read(Path::new(PCAPS).join("rc_pingpong_small.pcap")).unwrap();
    let rec = PcapReader::new(&bytes).unwrap().next().unwrap().unwrap();
    let orig = rec.ip_packet().unwrap();
    let mut ip = orig.to_vec();
    let good = decode_ip_packet(orig).unwrap();
    assert_eq!(good.icrc, IcrcStatus::Ok);
    let carried = good.packet.icrc;
    // Corrupt the ICRC's first byte (its least significant byte: it is stored LSB first).
    // IPv4: the UDP datagram ends at the IP total length (Ethernet padding may follow).
    let end = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    ip[end - ICRC_LEN] ^= 0xFF;
    let bad = decode_ip_packet(&ip).unwrap();
    assert_eq!(
        bad.icrc,
        IcrcStatus::Bad {
            carried: carried ^ 0xFF,
            computed: carried
        }
    );
    assert!(!bad.is_ok());
    let s = bad.to_string();
    assert!(
        s.ends_with(&format!(
            "icrc BAD (carried 0x{:08x}, computed 0x{carried:08x})",
            carried ^ 0xFF
        )),
        "{s}"
    );
    // Headers are the same either way.
    assert_eq!(bad.packet.hdr, good.packet.hdr);
}
