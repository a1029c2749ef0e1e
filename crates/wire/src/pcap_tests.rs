use super::*;

/// A tiny IPv4 packet (only the version nibble and addresses matter here).
fn ipv4() -> Vec<u8> {
    let mut p = vec![0u8; 28];
    p[0] = 0x45;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    p
}

fn ipv6() -> Vec<u8> {
    let mut p = vec![0u8; 48];
    p[0] = 0x60;
    p[23] = 1;
    p[39] = 2;
    p
}

/// Builds a pcap by hand: `be` selects the byte order, `nanos` the magic.
fn handmade(be: bool, nanos: bool, link: u32, frames: &[(&[u8], u32)]) -> Vec<u8> {
    let w32 = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
    let w16 = |v: u16| if be { v.to_be_bytes() } else { v.to_le_bytes() };
    let mut f = Vec::new();
    f.extend_from_slice(&w32(if nanos { MAGIC_NSEC } else { MAGIC_USEC }));
    f.extend_from_slice(&w16(2));
    f.extend_from_slice(&w16(4));
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&w32(65535));
    f.extend_from_slice(&w32(link));
    for (data, frac) in frames {
        f.extend_from_slice(&w32(1_700_000_000));
        f.extend_from_slice(&w32(*frac));
        f.extend_from_slice(&w32(data.len() as u32));
        f.extend_from_slice(&w32(data.len() as u32 + 4));
        f.extend_from_slice(data);
    }
    f
}

#[test]
fn byte_orders_and_resolutions() {
    let ip = ipv4();
    for be in [false, true] {
        for nanos in [false, true] {
            let f = handmade(be, nanos, 101, &[(&ip, 7)]);
            let r = PcapReader::new(&f).unwrap();
            let h = r.header();
            assert_eq!((h.big_endian, h.nanos), (be, nanos));
            assert_eq!(h.version, (2, 4));
            assert_eq!(h.snaplen, 65535);
            assert_eq!(h.link, LinkType::RAW);
            let recs: Vec<_> = r.collect::<Result<_>>().unwrap();
            assert_eq!(recs.len(), 1);
            assert_eq!(recs[0].ts_sec, 1_700_000_000);
            assert_eq!(recs[0].ts_nsec, if nanos { 7 } else { 7000 });
            assert_eq!(recs[0].orig_len, ip.len() as u32 + 4);
            assert_eq!(recs[0].ip_packet(), Some(&ip[..]));
        }
    }
}

#[test]
fn link_types_strip_their_headers() {
    let ip = ipv4();
    let ip6 = ipv6();
    // Ethernet with one VLAN tag, then untagged IPv6.
    let mut vlan = vec![0u8; 12];
    vlan.extend_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
    vlan.extend_from_slice(&ip);
    let mut eth6 = vec![0u8; 12];
    eth6.extend_from_slice(&[0x86, 0xdd]);
    eth6.extend_from_slice(&ip6);
    let mut arp = vec![0u8; 12];
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0; 28]);
    let f = handmade(false, false, 1, &[(&vlan, 0), (&eth6, 0), (&arp, 0)]);
    let got: Vec<_> = PcapReader::new(&f)
        .unwrap()
        .map(|r| r.unwrap().ip_packet())
        .collect();
    assert_eq!(got, vec![Some(&ip[..]), Some(&ip6[..]), None]);

    // Linux cooked v1: protocol at 14..16, 16-byte header.
    let mut sll = vec![0u8; 14];
    sll.extend_from_slice(&[0x08, 0x00]);
    sll.extend_from_slice(&ip);
    // Linux cooked v2: protocol first, 20-byte header.
    let mut sll2 = vec![0x86, 0xdd];
    sll2.extend_from_slice(&[0; 18]);
    sll2.extend_from_slice(&ip6);
    for (link, frame, want) in [(113, &sll, &ip), (276, &sll2, &ip6)] {
        let f = handmade(true, true, link, &[(frame, 0)]);
        let rec = PcapReader::new(&f).unwrap().next().unwrap().unwrap();
        assert_eq!(rec.ip_packet(), Some(&want[..]), "link {link}");
    }
    // Raw IPv4 / IPv6 link types check the version nibble.
    let f = handmade(false, false, 228, &[(&ip, 0), (&ip6, 0)]);
    let got: Vec<_> = PcapReader::new(&f)
        .unwrap()
        .map(|r| r.unwrap().ip_packet().is_some())
        .collect();
    assert_eq!(got, vec![true, false]);
    let f = handmade(false, false, 229, &[(&ip6, 0)]);
    let rec = PcapReader::new(&f).unwrap().next().unwrap().unwrap();
    assert_eq!(rec.ip_packet(), Some(&ip6[..]));
}

#[test]
fn writer_roundtrips_through_reader() {
    let ip = ipv4();
    let ip6 = ipv6();
    for link in [LinkType::ETHERNET, LinkType::RAW] {
        let w = PcapWriter::new(link).unwrap();
        let mut out = Vec::new();
        w.write_header(&mut out);
        w.write_ip_packet(&mut out, 1_234_567_890_123_456_789, &ip)
            .unwrap();
        w.write_ip_packet(&mut out, 5, &ip6).unwrap();
        let r = PcapReader::new(&out).unwrap();
        assert_eq!(r.header().link, link);
        assert!(r.header().nanos);
        let recs: Vec<_> = r.collect::<Result<_>>().unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].ts_ns(), 1_234_567_890_123_456_789);
        assert_eq!(recs[1].ts_ns(), 5);
        assert_eq!(recs[0].ip_packet(), Some(&ip[..]));
        assert_eq!(recs[1].ip_packet(), Some(&ip6[..]));
        if link == LinkType::ETHERNET {
            // dst MAC from the destination address, src MAC from the source.
            assert_eq!(&recs[0].data[..12], &[2, 0, 10, 0, 0, 2, 2, 0, 10, 0, 0, 1]);
            assert_eq!(&recs[1].data[12..14], &[0x86, 0xdd]);
        }
    }
    let w = PcapWriter::new(LinkType::IPV4).unwrap();
    let mut out = Vec::new();
    assert!(w.write_ip_packet(&mut out, 0, &ip6).is_err());
    assert!(w.write_ip_packet(&mut out, 0, &[]).is_err());
    assert!(w.write_ip_packet(&mut out, 0, &[0x50; 20]).is_err());
    assert!(w.write_ip_packet(&mut out, u64::MAX, &ip).is_err());
    assert!(out.is_empty(), "failed writes append nothing");
    assert_eq!(
        PcapWriter::new(LinkType::LINUX_SLL),
        Err(Error::UnsupportedLinkType(113))
    );
}

#[test]
fn garbage_and_truncation_are_errors() {
    assert!(matches!(PcapReader::new(&[]), Err(Error::Truncated { .. })));
    assert!(matches!(
        PcapReader::new(b"hello world, this is not a pcap"),
        Err(Error::BadFile(_))
    ));
    assert!(matches!(
        PcapReader::new(&[0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0]),
        Err(Error::BadFile(_))
    ));
    let ip = ipv4();
    let good = handmade(false, false, 1, &[(&ip, 0), (&ip, 0)]);
    // A header cut short.
    assert!(matches!(
        PcapReader::new(&good[..20]),
        Err(Error::Truncated { .. })
    ));
    // Unsupported link type.
    let bad_link = handmade(false, false, 147, &[]);
    assert_eq!(
        PcapReader::new(&bad_link).err(),
        Some(Error::UnsupportedLinkType(147))
    );
    // Every truncation of the body: the complete records come out, then at most
    // one error, then nothing.
    for cut in FILE_HDR_LEN..good.len() {
        let items: Vec<_> = PcapReader::new(&good[..cut]).unwrap().collect();
        let oks = items.iter().filter(|r| r.is_ok()).count();
        let errs = items.len() - oks;
        let rec_len = RECORD_HDR_LEN + ip.len();
        let whole = (cut - FILE_HDR_LEN) / rec_len;
        let partial = whole * rec_len != cut - FILE_HDR_LEN;
        assert_eq!(oks, whole, "cut {cut}");
        assert_eq!(errs, usize::from(partial), "cut {cut}");
        assert!(items.last().is_none_or(|r| r.is_err() == partial));
    }
    // An absurd incl_len is an error, not an allocation or a panic.
    let mut huge = handmade(false, false, 1, &[(&ip, 0)]);
    huge[FILE_HDR_LEN + 8..FILE_HDR_LEN + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    let items: Vec<_> = PcapReader::new(&huge).unwrap().collect();
    assert!(matches!(items[..], [Err(Error::Truncated { .. })]));
}

#[test]
fn short_frames_have_no_ip() {
    for (link, frame) in [
        (1u32, &[0u8; 13][..]),
        (1, &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x81, 0, 0, 0][..]),
        (113, &[0u8; 15][..]),
        (276, &[0x08][..]),
        (101, &[][..]),
        (228, &[][..]),
    ] {
        let f = handmade(false, false, link, &[(frame, 0)]);
        let rec = PcapReader::new(&f).unwrap().next().unwrap().unwrap();
        assert_eq!(rec.ip_packet(), None, "link {link} frame {frame:?}");
    }
}
