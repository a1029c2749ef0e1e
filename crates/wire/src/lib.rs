//! # softrdma-wire: the RoCEv2 wire format
//!
//! Contract: pure functions over byte slices. No I/O, no clocks, no `unsafe`.
//! Every parser takes untrusted bytes and returns [`Error`] instead of panicking
//! or reading out of bounds; every emitter produces bytes a Linux `rdma_rxe`
//! peer accepts (see `../shared/reference/rocev2.md` for the facts used).
//!
//! Layout follows smoltcp: plain `Repr` structs for each header
//! ([`headers`]), an open [`Opcode`] enum with a property table ([`opcode`]),
//! a whole-packet parser/emitter ([`packet`]), the invariant CRC ([`icrc`]),
//! the IP/UDP envelope ([`ip`]), management datagrams ([`mad`]) and the
//! connection manager messages in them ([`cm`]), classic pcap files
//! ([`pcap`]) and a one-line packet decoder for tools ([`decode`]).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cm;
pub mod decode;
pub mod direct;
pub mod error;
pub mod headers;
pub mod icrc;
pub mod ip;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod pcap;
pub mod peer;
pub mod pma;
pub mod psn;

// The public interface is:
pub use cm::{CmMad, CmMessage, CmaHdr};
pub use decode::{Decoded, decode_ip_packet};
pub use error::{Error, Result};
pub use headers::{Aeth, AtomicEth, Bth, Deth, Feth, NakCode, Reth, Syndrome, rnr_timer_ns};
pub use mad::MadHdr;
pub use opcode::{HeaderSet, Opcode, OpcodeInfo, Operation, Position, Transport, opcode_for};
pub use packet::{
    Headers, ICRC_LEN, LANE_ACK, LaneAck, Packet, emit, lane_packets, pad_for, xrc_srqn,
};
pub use pcap::{PcapReader, PcapWriter};
pub use peer::{
    MAX_PEER_SEGS, OFFER_LEN, PeerFile, PeerSeg, PeerSegs, PlaceOffer, TicketRef, peer_payload_len,
    read_offer, read_peer_segs, write_offer, write_peer_segs,
};
pub use psn::Psn;
