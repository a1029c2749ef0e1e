//! The device's Performance Management agent (IBTA 16.1): its counters and
//! its answers.

use super::Mad;
use softrdma_wire::mad::{MadHdr, method};
use softrdma_wire::pma;

/// The device's counters as its PMA reports them: the transport's packets
/// and bytes (the UDP path's and the shared-memory lanes'; QP1 MADs are not
/// counted), receive errors (bad ICRC, malformed) and constraint errors
/// (P_Key, Q_Key, source address).
pub(crate) fn pma_counters(s: &softrdma_transport::Stats) -> pma::Counters {
    pma::Counters {
        xmit_bytes: s.tx_bytes,
        rcv_bytes: s.rx_bytes,
        xmit_pkts: s.tx_packets,
        rcv_pkts: s.rx_packets,
        rcv_errors: s.drop_bad_icrc + s.drop_malformed,
        rcv_constraint_errors: s.drop_bad_pkey + s.drop_bad_qkey + s.drop_bad_addr,
    }
}

/// The device's Performance Management agent: answers Get(ClassPortInfo),
/// Get(PortCounters) and Get(PortCountersExtended) for port 1 (PortSelect 1
/// or 0xFF, "all ports"); anything else gets an error status.
pub(super) fn pma_answer(
    hdr: &MadHdr,
    req: &Mad,
    counters: impl FnOnce() -> pma::Counters,
) -> Box<Mad> {
    let mut out = Box::new(*req);
    let data = &mut out[pma::DATA_OFFSET..];
    let port = data[1];
    let status = if hdr.class_version != pma::PERF_CLASS_VERSION {
        pma::status::BAD_VERSION
    } else if hdr.method != method::GET {
        pma::status::BAD_METHOD
    } else {
        let r = match hdr.attr_id {
            pma::attr::CLASS_PORT_INFO => {
                data.fill(0);
                // 2^18 × 4.096 µs ≈ 1 s: well above a loaded host's turnaround.
                pma::write_class_port_info(18, data).map(|_| 0)
            }
            pma::attr::PORT_COUNTERS | pma::attr::PORT_COUNTERS_EXT
                if port != 1 && port != 0xFF =>
            {
                Ok(pma::status::BAD_ATTR_VALUE)
            }
            pma::attr::PORT_COUNTERS => {
                data[2..].fill(0);
                pma::write_port_counters(&counters(), port, data).map(|_| 0)
            }
            pma::attr::PORT_COUNTERS_EXT => {
                data[2..].fill(0);
                pma::write_port_counters_ext(&counters(), port, data).map(|_| 0)
            }
            _ => Ok(pma::status::BAD_METHOD_ATTR),
        };
        r.unwrap_or(pma::status::BAD_METHOD_ATTR)
    };
    // Every answer of the PMA is a GetResp, a Set's too (IBTA 13.4.5).
    let reply = MadHdr {
        method: method::GET | method::RESP,
        status,
        ..*hdr
    };
    let _ = reply.write(&mut out[..]);
    out
}
