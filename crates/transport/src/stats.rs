//! Counters: what was sent, received, retried and dropped, by reason.

/// Packet and event counters of an endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Packets handed to the driver for sending.
    pub tx_packets: u64,
    /// Bytes (UDP payload) handed to the driver.
    pub tx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes (UDP payload) received.
    pub rx_bytes: u64,
    /// Request packets sent again by go-back-N.
    pub retransmits: u64,
    /// Retransmit timer expiries.
    pub timeouts: u64,
    /// Sequence-error NAKs sent.
    pub tx_nak_seq: u64,
    /// Other NAKs sent (invalid request, access, operational).
    pub tx_nak_other: u64,
    /// RNR NAKs sent.
    pub tx_rnr_nak: u64,
    /// NAKs received (any code).
    pub rx_nak: u64,
    /// RNR NAKs received.
    pub rx_rnr_nak: u64,
    /// Duplicate requests seen by a responder.
    pub rx_duplicates: u64,
    /// Dropped: the ICRC did not match.
    pub drop_bad_icrc: u64,
    /// Dropped: headers did not parse (length, opcode, pad, version).
    pub drop_malformed: u64,
    /// Dropped: no QP with this number.
    pub drop_unknown_qpn: u64,
    /// Dropped: the QP is not in a state that accepts it, or the opcode is wrong for its type.
    pub drop_bad_state: u64,
    /// Dropped: P_Key mismatch.
    pub drop_bad_pkey: u64,
    /// Dropped: Q_Key mismatch (UD).
    pub drop_bad_qkey: u64,
    /// Dropped: source address is not the QP's peer.
    pub drop_bad_addr: u64,
    /// Dropped: PSN out of sequence (after the one NAK) or stale response.
    pub drop_out_of_seq: u64,
    /// Dropped: UD/UC packet with no receive WQE.
    pub drop_no_wqe: u64,
    /// Remote accesses refused (rkey, PD, rights, bounds).
    pub access_violations: u64,
    /// Completions lost to a full CQ.
    pub cq_overflows: u64,
}
