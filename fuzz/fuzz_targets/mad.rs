//! Fuzzes the CM MAD parser: any accepted MAD must re-encode to 256 bytes that
//! differ from the input only by cleared reserved bits, and parse back equal.

#![no_main]

use libfuzzer_sys::fuzz_target;
use softrdma_wire::cm::{CmMad, CmMessage, CmaHdr};

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = CmMad::parse(data) {
        let re = m.to_bytes();
        assert!(re.iter().zip(data).all(|(r, d)| r & !d == 0));
        assert_eq!(CmMad::parse(&re).as_ref(), Ok(&m));
        match &m.msg {
            CmMessage::Req(r) => {
                let _ = r.cma_hdr();
            }
            CmMessage::SidrReq(r) => {
                let _ = r.cma_hdr();
            }
            _ => {}
        }
    }
    if let Ok(h) = CmaHdr::parse(data) {
        assert_eq!(CmaHdr::parse(&h.to_bytes()), Ok(h));
    }
});
