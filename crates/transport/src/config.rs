//! Endpoint configuration: addresses, ports and device limits.

use crate::types::Mtu;
use std::net::IpAddr;

/// Limits of the software device (reported by query_device, enforced on create/post).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceLimits {
    /// QPs.
    pub max_qp: u32,
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// Inline bytes per send.
    pub max_inline: u32,
    /// CQs.
    pub max_cq: u32,
    /// Entries per CQ.
    pub max_cqe: u32,
    /// MRs.
    pub max_mr: u32,
    /// PDs.
    pub max_pd: u32,
    /// SRQs.
    pub max_srq: u32,
    /// WRs per SRQ.
    pub max_srq_wr: u32,
    /// SGEs per SRQ WR.
    pub max_srq_sge: u32,
    /// READ/atomic depth of a QP, both directions: the most RDMA READ and
    /// atomic requests a requester may have outstanding (`max_rd_atomic`,
    /// reported as `max_qp_init_rd_atom`) and a responder keeps results for
    /// (`max_dest_rd_atomic`, `max_qp_rd_atom`). 128 as Linux rxe
    /// (`RXE_MAX_QP_RD_ATOM`): perftest and rdma_cm programs ask the peer
    /// for its value and set it on their own QP, so a lower limit here fails
    /// their `modify_qp` against rxe.
    pub max_qp_rd_atom: u32,
    /// READ/atomic responder resources of the whole device, as reported by
    /// `query_device` (`max_res_rd_atom`; rxe's `RXE_MAX_RES_RD_ATOM`).
    /// Each QP keeps its own; this is no further limit on them.
    pub max_res_rd_atom: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// Tags one tag-matching SRQ may hold (`tm_caps.max_num_tags`). Each
    /// tagged message scans the list, so it stays modest; not a tuning
    /// value (no benchmark chose it).
    pub max_num_tags: u32,
    /// Outstanding `ibv_post_srq_ops` operations of a TM SRQ
    /// (`tm_caps.max_ops`); software completes each at once.
    pub max_tm_ops: u32,
    /// Largest rendezvous header (TMH + RVH + user data) a TM SRQ accepts
    /// (`tm_caps.max_rndv_hdr_size`); 64, as mlx5 reports.
    pub max_rndv_hdr_size: u32,
    /// Port MTU (UD packets, upper bound of path MTUs).
    pub port_mtu: Mtu,
}

impl Default for DeviceLimits {
    fn default() -> Self {
        DeviceLimits {
            max_qp: 65536,
            max_qp_wr: 16384,
            max_sge: 32,
            max_inline: 512,
            max_cq: 65536,
            max_cqe: 4 * 1024 * 1024,
            max_mr: 1 << 20,
            max_pd: 65536,
            max_srq: 65536,
            max_srq_wr: 16384,
            max_srq_sge: 32,
            max_qp_rd_atom: 128,
            max_res_rd_atom: 0x3f000,
            max_msg_sz: 1 << 31,
            max_num_tags: 1024,
            max_tm_ops: 1024,
            max_rndv_hdr_size: 64,
            port_mtu: Mtu::M4096,
        }
    }
}

/// How an endpoint is addressed and behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// Local addresses; the GID table is these, in order (index 0 first).
    pub gids: Vec<IpAddr>,
    /// UDP port packets are sent from (covered by the ICRC).
    pub local_port: u16,
    /// UDP port packets are sent to (4791).
    pub dest_port: u16,
    /// Drop received packets whose ICRC does not match (assuming IPv4 ID 0 and DF,
    /// as Linux sends from an unconnected socket with PMTU discovery on).
    pub verify_icrc: bool,
    /// Whether built packets carry their ICRC (default true). An engine
    /// that sends most packets through shared memory, whose receivers do
    /// not check it, turns this off and fills it ([`crate::fill_icrc_between`])
    /// for those that leave through a socket: ~580 instructions a packet
    /// (callgrind, `ib_send_lat` over the lanes).
    pub fill_icrc: bool,
    /// Whether an RC QP whose peer is on a same-host lane (peer copy on,
    /// [`crate::Endpoint::set_peer_copy`]) lets a request it sends carry the
    /// lone ACK its responder has waiting ([`softrdma_wire::LaneAck`]),
    /// instead of sending that ACK as a packet of its own (default false).
    /// The engine turns it on with the lanes, unless it captures packets
    /// (a capture holds RoCE packets only). A ping-pong's ACK then costs
    /// no packet to build, stage, poll, parse and handle: ~1800
    /// instructions an exchange (callgrind of `ib_send_lat` over the lanes).
    pub lane_acks: bool,
    /// Whether a post to an idle RC QP whose peer is on a same-host lane
    /// may start a one-packet SEND or WRITE, or a READ, as a direct record
    /// ([`crate::Endpoint::post_send_direct`], [`softrdma_wire::direct`])
    /// for the engine to push at once, and its responder answer a small
    /// READ with a response record (default false). The engine turns it
    /// on with the lanes, unless it captures packets.
    pub direct: bool,
    /// Whether the responder executes an in-order one-packet RC SEND or
    /// WRITE off a same-host lane by its express path (default false):
    /// the same checks, state, completion and ACK as the generic path,
    /// without its dispatch. The engine turns it on with `direct`, and
    /// then also posts through QPs' express cells
    /// ([`crate::Endpoint::express`]).
    pub express: bool,
    /// With `verify_icrc`, also accept an IPv4 packet whose ICRC matches under
    /// some other IPv4 ID with DF set: Linux rxe sends a per-packet ID, which
    /// the ICRC covers and a UDP socket never sees (default true). The check is
    /// then 16 bits weaker: a corrupted packet passes with probability 2^-16.
    pub icrc_any_ipv4_id: bool,
    /// Device limits.
    pub limits: DeviceLimits,
    /// Seed of the key-tag and QPN generator.
    pub seed: u64,
    /// RC send window: PSNs a requester may have unacknowledged (default 128,
    /// rxe's `RXE_MAX_UNACKED_PSNS`). A local choice the responder never sees.
    pub max_unacked_psns: u32,
    /// The RC send window toward loopback peers (127/8, ::1; default 128). A
    /// larger one keeps a same-host pipeline busy across ACK round trips; the
    /// loopback loses nothing as long as the peer's socket buffer holds a
    /// window, while on lossy paths go-back-N would resend a large window for
    /// every loss.
    pub loopback_unacked_psns: u32,
    /// The host-device member slot (1..=255) this endpoint's QPNs carry in
    /// bits 23..16, so the kernel can steer a packet to the process that owns
    /// its destination QP (`softrdma_udp::steer`); 0: the whole QPN space.
    pub member_slot: u8,
    /// RC: how long (ns) a responder that finds no receive posted for a
    /// SEND holds its RNR NAK back, waiting for one (0: NAK at once, as rxe
    /// does). A receive posted in time answers with a PSN sequence NAK
    /// instead, so the requester resends at once without spending its RNR
    /// retries; otherwise the RNR NAK goes out when the hold ends. A software
    /// responder shares CPUs with the application that reposts receives:
    /// senders that allow no RNR retry (fio's rdma engine connects with
    /// `rnr_retry_count` 0 and one receive per I/O) would fail whenever that
    /// application is scheduled a little late.
    pub rnr_hold_ns: u64,
    /// This endpoint's incarnation on the same-host path (its member
    /// slot's generation; 0 without the path): peer-copy packets carry it,
    /// so a copier never copies a dead member's descriptor from the slot's
    /// next holder.
    pub peer_incarnation: u64,
}

impl Config {
    /// A configuration with one address, port 4791 both ways, ICRC checked.
    pub fn new(addr: IpAddr, seed: u64) -> Config {
        Config {
            gids: vec![addr],
            local_port: softrdma_wire::ip::ROCEV2_PORT,
            dest_port: softrdma_wire::ip::ROCEV2_PORT,
            verify_icrc: true,
            fill_icrc: true,
            lane_acks: false,
            direct: false,
            express: false,
            icrc_any_ipv4_id: true,
            limits: DeviceLimits::default(),
            seed,
            max_unacked_psns: 128,
            loopback_unacked_psns: 128,
            member_slot: 0,
            rnr_hold_ns: 0,
            peer_incarnation: 0,
        }
    }
}
