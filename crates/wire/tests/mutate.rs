//! Deterministic mutation testing of every parser on untrusted bytes: the packet
//! parser, the IP-level decoder (and its Display), the CM MAD parser and the pcap
//! reader. A fixed-seed PRNG mutates real and synthetic packets; each result
//! must come back without a panic, and every `Ok` must be self-consistent.

use std::path::Path;

use softrdma_wire::cm::{self, CM_MSG_LEN, CmMad, CmMessage, PrivateData, attr};
use softrdma_wire::ip::{Ipv4Fields, ipv4_header, parse_ip_udp, udp_header};
use softrdma_wire::mad::MAD_LEN;
use softrdma_wire::{
    Bth, Error, HeaderSet, Headers, ICRC_LEN, Opcode, Packet, PcapReader, Psn, decode_ip_packet,
    emit, icrc,
};

const PCAPS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/pcaps");

/// splitmix64: tiny, fixed-seed, good enough to spread mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

/// Applies one to three random mutations. `hot` is a range of offsets worth
/// hitting more often (the headers).
fn mutate(rng: &mut Rng, seed: &[u8], hot: usize) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(3) {
        let at = |rng: &mut Rng, len: usize| {
            if rng.below(2) == 0 {
                rng.below(hot.min(len))
            } else {
                rng.below(len)
            }
        };
        match rng.below(9) {
            0 | 1 => {
                // bit flips
                for _ in 0..1 + rng.below(4) {
                    if !v.is_empty() {
                        let i = at(rng, v.len());
                        v[i] ^= 1 << rng.below(8);
                    }
                }
            }
            2 => {
                let n = rng.below(v.len() + 1);
                v.truncate(n);
            }
            3 => {
                for _ in 0..1 + rng.below(64) {
                    v.push(rng.byte());
                }
            }
            4 if !v.is_empty() => {
                let i = at(rng, v.len());
                v[i] = rng.byte();
            }
            5 if !v.is_empty() => {
                let i = rng.below(v.len());
                v.insert(i, rng.byte());
            }
            6 if !v.is_empty() => {
                let i = rng.below(v.len());
                v.remove(i);
            }
            // BTH-specific: opcode, then SE/M/pad/tver.
            7 if !v.is_empty() => v[0] = rng.byte(),
            8 if v.len() > 1 => v[1] = rng.byte(),
            _ => {}
        }
    }
    v
}

fn real_packets() -> Vec<Vec<u8>> {
    let dir = Path::new(PCAPS);
    assert!(dir.is_dir(), "golden captures not found at {PCAPS}");
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "pcap") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        // A few packets per capture keep the corpus varied without being large.
        for rec in PcapReader::new(&bytes).unwrap().take(6) {
            out.push(rec.unwrap().ip_packet().unwrap().to_vec());
        }
    }
    assert!(out.len() > 50, "{}", out.len());
    out
}

/// One packet per supported opcode, with every header present and a payload
/// where the opcode allows one, wrapped in IPv4/UDP with a valid ICRC.
fn synthetic_packets(rng: &mut Rng) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for v in 0..=255u8 {
        let oc = Opcode(v);
        let Some(info) = oc.info() else { continue };
        let mut h = Headers::new(Bth::new(oc, 0x12_3456, Psn::new(rng.next() as u32)));
        h.bth.ack_req = true;
        let len = if info.has_payload { rng.below(70) } else { 0 };
        let payload: Vec<u8> = (0..len).map(|_| rng.byte()).collect();
        let mut roce = Vec::new();
        emit(&h, &payload, &mut roce).unwrap();
        let ip = ipv4_header(
            &Ipv4Fields {
                src: [10, 0, 0, 1].into(),
                dst: [10, 0, 0, 2].into(),
                id: 7,
                tos: 0,
                ttl: 64,
                df: true,
            },
            8 + roce.len(),
        );
        let udp = udp_header(0xC000, 4791, roce.len());
        icrc::fill(&ip, &udp, &mut roce).unwrap();
        let mut pkt = ip.to_vec();
        pkt.extend_from_slice(&udp);
        pkt.extend_from_slice(&roce);
        out.push(pkt);
    }
    // 63 IBTA opcodes (23 of them XRC) and softrdma's 7 peer-copy ones.
    assert_eq!(out.len(), 70);
    out
}

/// Checks what a successful parse promises about the buffer it came from.
fn check_packet(buf: &[u8], p: &Packet<'_>) {
    let bth = p.hdr.bth;
    assert_eq!(bth.tver, 0);
    assert_eq!(Some(p.info), bth.opcode.info());
    let set = p.info.headers;
    let present = [
        (HeaderSet::DETH, p.hdr.deth.is_some()),
        (HeaderSet::XRCETH, p.hdr.xrceth.is_some()),
        (HeaderSet::RETH, p.hdr.reth.is_some()),
        (HeaderSet::FETH, p.hdr.feth.is_some()),
        (HeaderSet::ATOMIC_ETH, p.hdr.atomic_eth.is_some()),
        (HeaderSet::AETH, p.hdr.aeth.is_some()),
        (HeaderSet::ATOMIC_ACK_ETH, p.hdr.atomic_ack.is_some()),
        (HeaderSet::IMM, p.hdr.imm.is_some()),
        (HeaderSet::IETH, p.hdr.ieth.is_some()),
    ];
    for (h, is) in present {
        assert_eq!(set.contains(h), is, "{h:?} of {:?}", bth.opcode);
    }
    // The payload is the slice right after the headers, inside the buffer.
    let hl = p.header_len();
    let start = p.payload.as_ptr() as usize - buf.as_ptr() as usize;
    assert_eq!(start, hl);
    assert_eq!(
        hl + p.payload.len() + usize::from(bth.pad) + ICRC_LEN,
        buf.len()
    );
    if !p.info.has_payload {
        assert!(p.payload.is_empty());
    }
    // Parsing is lossless: writing the headers back gives the same bytes.
    let mut re = vec![0u8; hl];
    assert_eq!(p.hdr.write(&mut re), Ok(hl));
    assert_eq!(re, buf[..hl]);
    let t = &buf[buf.len() - ICRC_LEN..];
    assert_eq!(p.icrc, u32::from_le_bytes([t[0], t[1], t[2], t[3]]));
}

#[test]
fn packet_parser_survives_mutations() {
    let mut rng = Rng(0x5EED_0001);
    let mut seeds: Vec<Vec<u8>> = real_packets();
    seeds.extend(synthetic_packets(&mut rng));
    // The parser sees UDP payloads: strip IP/UDP from the seeds.
    let payloads: Vec<Vec<u8>> = seeds
        .iter()
        .map(|ip| parse_ip_udp(ip).unwrap().payload.to_vec())
        .collect();
    let (mut ok, mut err) = (0u32, 0u32);
    for i in 0..200_000 {
        let seed = &payloads[i % payloads.len()];
        let buf = mutate(&mut rng, seed, 48);
        match Packet::parse(&buf) {
            Ok(p) => {
                check_packet(&buf, &p);
                ok += 1;
            }
            Err(e) => {
                if let Error::Truncated { need, have } = e {
                    assert_eq!(have, buf.len());
                    assert!(need > have);
                }
                err += 1;
            }
        }
    }
    eprintln!("Packet::parse: {ok} ok, {err} errors");
    // Both outcomes must be common, or the mutations are not reaching the parser.
    assert!(ok > 20_000 && err > 20_000, "ok {ok} err {err}");
}

#[test]
fn ip_decoder_and_display_survive_mutations() {
    let mut rng = Rng(0x5EED_0002);
    let mut seeds = real_packets();
    seeds.extend(synthetic_packets(&mut rng));
    let (mut ok, mut good_icrc) = (0u32, 0u32);
    for i in 0..100_000 {
        let seed = &seeds[i % seeds.len()];
        // Hit the IP/UDP headers (lengths, version, protocol) as well as the BTH.
        let buf = mutate(&mut rng, seed, 64);
        if let Ok(d) = decode_ip_packet(&buf) {
            ok += 1;
            good_icrc += u32::from(d.is_ok());
            let line = d.to_string();
            assert!(line.contains(" icrc "), "{line}");
            assert!(!line.contains('\n'));
            let env = parse_ip_udp(&buf).unwrap();
            check_packet(env.payload, &d.packet);
        }
        let _ = softrdma_wire::decode::udp_dst_port(&buf);
    }
    eprintln!("decode_ip_packet: {ok} ok, {good_icrc} of them with a valid ICRC");
    assert!(ok > 5_000, "ok {ok}");
    // Mutations of ICRC-masked fields (TTL, UDP checksum, FECN...) keep it valid.
    assert!(good_icrc > 100, "{good_icrc}");
}

fn mad_seeds() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for ip in real_packets() {
        let env = parse_ip_udp(&ip).unwrap();
        let p = Packet::parse(env.payload).unwrap();
        if p.hdr.bth.dest_qp == 1 {
            seeds.push(p.payload.to_vec());
        }
    }
    assert_eq!(
        seeds.len(),
        5,
        "REQ REP RTU + SIDR_REQ SIDR_REP within the first frames"
    );
    for attr_id in [
        attr::REQ,
        attr::MRA,
        attr::REJ,
        attr::REP,
        attr::RTU,
        attr::DREQ,
        attr::DREP,
        attr::SIDR_REQ,
        attr::SIDR_REP,
        attr::LAP,
    ] {
        let msg = CmMessage::parse(attr_id, &[0x5A; CM_MSG_LEN]).unwrap();
        seeds.push(CmMad::new(0x1234, msg).to_bytes().to_vec());
    }
    seeds
}

#[test]
fn mad_parser_survives_mutations() {
    let mut rng = Rng(0x5EED_0003);
    let seeds = mad_seeds();
    let mut ok = 0u32;
    for i in 0..100_000 {
        let mut buf = mutate(&mut rng, &seeds[i % seeds.len()], 64);
        if rng.below(5) != 0 {
            // Mostly keep MADs at 256 bytes so the field parsers get exercised.
            buf.resize(MAD_LEN, 0);
        }
        if rng.below(4) == 0 && buf.len() >= 18 {
            // Point the body at another message type.
            let a = [
                0x10u16, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x01,
            ];
            buf[16..18].copy_from_slice(&a[rng.below(a.len())].to_be_bytes());
        }
        let Ok(m) = CmMad::parse(&buf) else { continue };
        ok += 1;
        assert_eq!(buf.len(), MAD_LEN);
        let re = m.to_bytes();
        // Re-encoding only clears reserved bits: it never sets a bit the input lacked,
        // and parsing the re-encoding gives the same message.
        assert!(re.iter().zip(&buf).all(|(r, b)| r & !b == 0));
        assert_eq!(CmMad::parse(&re).as_ref(), Ok(&m));
        if let CmMessage::Req(r) = &m.msg {
            let _ = r.cma_hdr();
        }
    }
    eprintln!("CmMad::parse: {ok} ok");
    assert!(ok > 30_000, "ok {ok}");
    // Message bodies straight from random bytes, for every attribute.
    for _ in 0..5_000 {
        let len = if rng.below(8) == 0 {
            rng.below(300)
        } else {
            CM_MSG_LEN
        };
        let body: Vec<u8> = (0..len).map(|_| rng.byte()).collect();
        let a = rng.below(0x20) as u16;
        match CmMessage::parse(a, &body) {
            Ok(msg) => {
                assert_eq!(len, CM_MSG_LEN);
                let mut b = [0u8; CM_MSG_LEN];
                msg.write_body(&mut b);
                assert_eq!(CmMessage::parse(a, &b), Ok(msg));
            }
            Err(_) => assert_ne!(len, CM_MSG_LEN),
        }
        let _ = cm::CmaHdr::parse(&body);
        let _ = PrivateData::<92>::from_slice(&body);
    }
}

#[test]
fn pcap_reader_survives_mutations() {
    let mut rng = Rng(0x5EED_0004);
    let bytes = std::fs::read(Path::new(PCAPS).join("udaddy.pcap")).expect("udaddy.pcap");
    let small = &bytes[..bytes.len().min(2000)];
    let mut records = 0u32;
    for _ in 0..20_000 {
        let buf = mutate(&mut rng, small, 64);
        let Ok(r) = PcapReader::new(&buf) else {
            continue;
        };
        let base = buf.as_ptr() as usize;
        let mut errors = 0;
        for rec in r {
            match rec {
                Ok(rec) => {
                    records += 1;
                    // Records are slices of the file, never beyond it.
                    let at = rec.data.as_ptr() as usize - base;
                    assert!(at + rec.data.len() <= buf.len());
                    if let Some(ip) = rec.ip_packet() {
                        let _ = decode_ip_packet(ip).map(|d| d.to_string());
                    }
                }
                Err(_) => errors += 1,
            }
        }
        assert!(errors <= 1, "iteration stops after an error");
    }
    eprintln!("PcapReader: {records} records");
    assert!(records > 10_000, "{records}");
}
