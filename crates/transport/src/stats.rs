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
    /// NAKs received other than RNR NAKs (sequence error, access, invalid request, ...).
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
    /// Requests sent as direct records (same-host lanes, `qp/direct.rs`).
    pub tx_direct: u64,
    /// Direct records received.
    pub rx_direct: u64,
    /// Requests the responder executed by its express path
    /// (`qp/responder/express.rs`).
    pub rx_express: u64,
    /// Of those, records read in place (`direct::read_request`), without
    /// the `Packet` a record is otherwise read into.
    pub rx_in_place: u64,
    /// Direct records the express post wrote (`qp/express.rs`), counted
    /// when the transport learns of them (settled or taken back).
    pub tx_express: u64,
    /// Receives posted through a QP's express cell (`qp/recv_queue.rs`),
    /// counted when the transport takes them into the QP's queue.
    pub recv_express: u64,
    /// Of `rx_express`, requests a lent responder executed through its
    /// QP's cell (`qp/express/exec.rs`), counted at the reclaim or when
    /// the counters are read.
    pub rx_lent: u64,
}

impl Stats {
    /// Every counter with its field name, in declaration order (dumps, views).
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("tx_packets", self.tx_packets),
            ("tx_bytes", self.tx_bytes),
            ("rx_packets", self.rx_packets),
            ("rx_bytes", self.rx_bytes),
            ("retransmits", self.retransmits),
            ("timeouts", self.timeouts),
            ("tx_nak_seq", self.tx_nak_seq),
            ("tx_nak_other", self.tx_nak_other),
            ("tx_rnr_nak", self.tx_rnr_nak),
            ("rx_nak", self.rx_nak),
            ("rx_rnr_nak", self.rx_rnr_nak),
            ("rx_duplicates", self.rx_duplicates),
            ("drop_bad_icrc", self.drop_bad_icrc),
            ("drop_malformed", self.drop_malformed),
            ("drop_unknown_qpn", self.drop_unknown_qpn),
            ("drop_bad_state", self.drop_bad_state),
            ("drop_bad_pkey", self.drop_bad_pkey),
            ("drop_bad_qkey", self.drop_bad_qkey),
            ("drop_bad_addr", self.drop_bad_addr),
            ("drop_out_of_seq", self.drop_out_of_seq),
            ("drop_no_wqe", self.drop_no_wqe),
            ("access_violations", self.access_violations),
            ("cq_overflows", self.cq_overflows),
            ("tx_direct", self.tx_direct),
            ("rx_direct", self.rx_direct),
            ("rx_express", self.rx_express),
            ("rx_in_place", self.rx_in_place),
            ("tx_express", self.tx_express),
            ("recv_express", self.recv_express),
            ("rx_lent", self.rx_lent),
        ]
    }
}
