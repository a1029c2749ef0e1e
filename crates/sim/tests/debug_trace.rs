//! Temporary: prints a packet trace for diagnosing failures.
#![allow(missing_docs)]
use softrdma_wire::Packet;

pub fn show(tr: &[(softrdma_transport::Instant, usize, usize, Vec<u8>)], last: usize) {
    let start = tr.len().saturating_sub(last);
    for (t, f, to, d) in &tr[start..] {
        match Packet::parse(d) {
            Ok(p) => {
                let mut s = format!(
                    "{t:?} {f}->{to} {:?} psn={} a={}",
                    p.hdr.bth.opcode, p.hdr.bth.psn, p.hdr.bth.ack_req
                );
                if let Some(a) = p.hdr.aeth {
                    s += &format!(" {:?} msn={}", a.syndrome, a.msn);
                }
                if let Some(r) = p.hdr.reth {
                    s += &format!(" reth(va={:#x} len={})", r.va, r.dma_len);
                }
                s += &format!(" plen={}", p.payload.len());
                println!("{s}");
            }
            Err(e) => println!("{t:?} {f}->{to} corrupt {e:?}"),
        }
    }
}
