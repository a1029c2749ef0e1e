//! Fuzzes the pcap reader and, through it, the decoder on every IP packet.

#![no_main]

use libfuzzer_sys::fuzz_target;
use softrdma_wire::{PcapReader, decode_ip_packet};

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = PcapReader::new(data) else {
        return;
    };
    let mut errors = 0;
    for rec in reader {
        match rec {
            Ok(rec) => {
                let at = rec.data.as_ptr() as usize - data.as_ptr() as usize;
                assert!(at + rec.data.len() <= data.len());
                if let Some(ip) = rec.ip_packet() {
                    let _ = decode_ip_packet(ip).map(|d| d.to_string());
                }
            }
            Err(_) => errors += 1,
        }
    }
    // Iteration ends at the first error.
    assert!(errors <= 1);
});
