//! Fuzzes the RoCEv2 packet parser (input as a UDP payload) and the IP-level
//! decoder with its one-line Display (input as an IP packet).

#![no_main]

use libfuzzer_sys::fuzz_target;
use softrdma_wire::{ICRC_LEN, Packet, decode_ip_packet};

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Packet::parse(data) {
        // A parse promises: the payload sits right after the headers, and
        // headers + payload + pad + ICRC is the whole buffer.
        let hl = p.header_len();
        let start = p.payload.as_ptr() as usize - data.as_ptr() as usize;
        assert_eq!(start, hl);
        assert_eq!(
            hl + p.payload.len() + usize::from(p.hdr.bth.pad) + ICRC_LEN,
            data.len()
        );
        assert!(p.info.has_payload || p.payload.is_empty());
        // Parsing is lossless for the headers.
        let mut re = vec![0u8; hl];
        assert_eq!(p.hdr.write(&mut re), Ok(hl));
        assert_eq!(&re[..], &data[..hl]);
    }
    if let Ok(d) = decode_ip_packet(data) {
        let line = d.to_string();
        assert!(line.contains(" icrc "));
    }
    let _ = softrdma_wire::decode::udp_dst_port(data);
});
