//! Shared-memory links between the processes of one softrdma host device
//! (DESIGN §6): the same-host path that replaces UDP between two member
//! processes.
//!
//! # Contract
//!
//! * **What travels.** Datagrams — the exact RoCEv2 packets the transport
//!   would send over UDP, with their source address and destination GID — so
//!   the receiving transport runs the same checks (PSN, rkey, PD, rights,
//!   bounds, ICRC) as on the wire, and a capture can record them as packets.
//! * **Shape.** Each process has one [`Inbox`]: a memfd with one
//!   single-producer, single-consumer [`Ring`] ("lane") per member slot. A peer
//!   with member slot `s` attaches an [`Outlet`] to lane `s` of the inbox and is
//!   its only producer; the inbox's owner is the only consumer of every lane.
//!   Order is kept per lane (so per pair of processes), which is what RC needs.
//! * **Access control is the kernel's.** A peer attaches through
//!   `/proc/<pid>/fd/<fd>`, which the kernel opens only for processes allowed
//!   to read the owner's memory (same user, owner not undumpable); anything
//!   else fails with the kernel's error, and the caller falls back to UDP.
//! * **A misbehaving peer cannot make either side access memory outside its
//!   lane**: indexes are reduced modulo the lane size and lengths checked.
//! * **Wake-ups.** A receiver about to sleep calls [`Inbox::want_doorbell`];
//!   a producer that sees [`Outlet::doorbell_wanted`] after a push wakes it by
//!   whatever means the caller has (the engine sends a datagram to the
//!   receiver's socket). Both sides fence, so a push is never left unseen by a
//!   receiver that went to sleep.
//! * **Full lanes** refuse pushes ([`PushError::Full`]); the caller waits or
//!   drops (RC retransmits).
//! * **Channels** ([`Channel`]): a single-producer, single-consumer ring of
//!   records packed densely, for one direction of one QP pair, with two
//!   words the consumer writes for the producer (docs/PLAN-direct-queues.md,
//!   step 2). The same guarantees as a lane's: nothing a peer writes takes
//!   either side outside the channel. The engine does not use them yet.
//!
//! Linux only.

mod channel;
mod inbox;
mod peer;
mod ring;
mod share;
mod ticket;
mod vm;

pub use channel::{Channel, ChannelError};
pub use inbox::{INBOX_BYTES, Inbox, Outlet, can_copy_from};
pub use peer::{CopyError, MAX_RANGES, Range, read_from};
pub use ring::{DATA_CAP, Entry, LANE_BYTES, PushError, Ring, SLOT_BYTES, SLOTS};
pub use share::{
    MAX_SHARED, PeerMap, Refused, Shared, interior, mapping_of, page_size, share, shared_count,
    unshare,
};
pub use ticket::{PeerTickets, TICKETS, Ticket, TicketBook};
