//! UDP socket layer of the softrdma engine: addressing, batched GSO/GRO datagram I/O, and
//! the fds the engine sleeps and wakes on. Linux only.
//!
//! # Contract
//!
//! **This crate owns every socket system call of softrdma** (and the eventfd/timerfd/epoll
//! calls of the progress machinery). It moves opaque RoCEv2 datagrams — the UDP payload, BTH
//! through ICRC — between the engine and the kernel. It owns:
//!
//! * **Addressing** ([`addr`]): `SOFTRDMA_ADDR` / `SOFTRDMA_PORT` parsing and the default
//!   "first free `127.0.0.N:4791`" selection with exclusive binds (DESIGN §3–§4).
//! * **The socket** ([`RoceSocket`]): IPv4 or IPv6, non-blocking, bound to one address, with
//!   the options RoCEv2 interop needs:
//!   - IPv4: `IP_MTU_DISCOVER = IP_PMTUDISC_DO`. Every datagram carries DF and is never
//!     fragmented, and — because the socket is *unconnected* — Linux then puts **IP ID 0** in
//!     every IPv4 header (`ip_select_ident`). The RoCEv2 ICRC covers the IP ID (it masks
//!     only TOS, TTL and the header checksum), so the engine computes the ICRC of outgoing
//!     packets with ID 0 and a kernel `rdma_rxe` peer accepts them. Never `connect()` this
//!     socket: a connected socket gets a per-socket incrementing ID and every ICRC breaks.
//!   - IPv6: `IPV6_MTU_DISCOVER = IPV6_PMTUDISC_DO`, `IPV6_V6ONLY`, and `UDP_NO_CHECK6_RX`
//!     (rxe sends UDP checksum 0, which Linux otherwise drops on IPv6). `UDP_NO_CHECK6_TX` is
//!     optional ([`SocketConfig::ipv6_zero_checksum_tx`]).
//!   - 32 MiB `SO_RCVBUF`/`SO_SNDBUF` (forced when privileged), `IP_PKTINFO` /
//!     `IPV6_RECVPKTINFO` (each datagram reports its destination IP), `UDP_GRO`.
//! * **Batched I/O**: [`RoceSocket::send_batch`] (`sendmmsg`, with runs of equal-size
//!   datagrams to one destination coalesced into `UDP_SEGMENT` GSO sends) and
//!   [`RoceSocket::recv_batch`] (`recvmmsg` into a reusable [`RecvBatch`], GRO
//!   super-datagrams split back into datagrams by [`RecvBatch::datagrams`] so callers never
//!   see GRO). GSO/GRO support is detected when the socket opens; a GSO send the kernel
//!   refuses turns GSO off for the socket and is retried without it. Counters:
//!   [`RoceSocket::stats`].
//! * **Steering** ([`steer`]): the classic BPF program that, when several processes share
//!   one address and port through a `SO_REUSEPORT` group, hands each datagram to the socket
//!   of the process owning its destination QP ([`RoceSocket::attach_steering`]).
//! * **Forwarding** ([`forward`]): a unix datagram socket per member of a host device,
//!   through which a member hands on what a stale steering table delivered to it.
//! * **Waking** ([`wake`]): [`EventFd`] for completion/CM event channels, [`TimerFd`], and the
//!   [`Poller`] (epoll + built-in [`Waker`] + nanosecond deadlines) the progress thread
//!   blocks in with 0 % CPU when idle.
//!
//! It does **not**: parse or build RoCE headers (beyond the few fixed offsets [`steer`]'s
//! program reads), compute or check the ICRC (crate `softrdma-wire`), demultiplex by QPN
//! inside a process, retransmit, keep timers other than the one deadline
//! it is given (crates `softrdma-transport`/`softrdma-engine`), or decide when to busy-poll.
//!
//! # GSO and the ICRC (read before enabling GSO toward other hosts)
//!
//! When Linux cuts an IPv4 GSO send into segments (on a device without UDP segmentation
//! offload, e.g. a veth or tap toward a VM), the segments get IP IDs 0, 1, 2, … — so all but
//! the first carry an ICRC that `rdma_rxe` or a RoCE NIC rejects. The default
//! [`GsoPolicy::IcrcSafe`] therefore uses GSO only toward IPv6 (no IP ID) and IPv4 loopback
//! (where a GSO send reaches the receiving socket uncut — the case the same-host benchmark
//! measures). [`GsoPolicy::Always`] is for peers known to be softrdma.
//!
//! # Measured on the project VM (`cargo run --release -p softrdma-udp --example udp_bw`)
//!
//! Same host, 4 KiB datagrams, 127.0.0.1, medians of 5–7 idle-gated repetitions (Linux 6.18,
//! 2 vCPUs; run-to-run spread is large on this shared host):
//!
//! | mode | receiver blocks in `Poller` | receiver busy-polls |
//! |---|---|---|
//! | plain `sendmmsg`/`recvmmsg` | 0.92 GB/s | 1.09 GB/s |
//! | GSO send, no GRO | 3.1 GB/s | 3.65 GB/s |
//! | GSO + GRO | 8.0 GB/s (5.3–9.6) | 10.0 GB/s (9.8–10.6) |
//! | ratio GSO+GRO / plain | 8.7× | 9.2× |
//!
//! User space is ~1.5 % of CPU samples in these runs; the rest is the kernel. Under overload
//! the GSO modes lose a few percent of datagrams when the receiver is descheduled (0 % in the
//! medians), so the transport's flow control and retransmission matter on this path.
//! The kernel here supports `UDP_SEGMENT`, `UDP_GRO`, pktinfo and `epoll_pwait2`; buffers
//! reach 64 MiB effective (forced) as root, 8 MiB (`rmem_max` 4 MiB, doubled) otherwise.
//!
//! # Why `libc` and not `nix`
//!
//! `libc` is already a workspace dependency, exposes `sendmmsg`/`recvmmsg`/`UDP_SEGMENT`/
//! `UDP_GRO`/`UDP_NO_CHECK6_*` on every Linux target, and lets us call `epoll_pwait2` through
//! `syscall(2)` without requiring glibc ≥ 2.35 (which matters for the C-ABI libraries loaded
//! into arbitrary programs). `nix` would add a layer whose `cmsg` and `mmsg` types are not a
//! fit for zero-allocation batching. All `unsafe` is in one private module (`sys`): small safe
//! wrappers around single system calls, each with a `// SAFETY:` comment; control messages
//! and socket addresses are encoded and decoded as plain bytes in safe code.

#[cfg(not(target_os = "linux"))]
compile_error!("softrdma-udp supports Linux only");

/// Implements `AsFd` and `AsRawFd` for each type through its `fd: OwnedFd` field.
macro_rules! impl_as_fd {
    ($($t:ty),+ $(,)?) => {$(
        impl std::os::fd::AsFd for $t {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                std::os::fd::AsFd::as_fd(&self.fd)
            }
        }

        impl std::os::fd::AsRawFd for $t {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                std::os::fd::AsRawFd::as_raw_fd(&self.fd)
            }
        }
    )+};
}

/// Builder setters, written `name(arg: T) => field;`: each a
/// `pub fn name(mut self, arg: T) -> Self` that sets `field` to `arg`.
macro_rules! setters {
    ($($(#[$attr:meta])* $name:ident($arg:ident: $t:ty) => $field:ident;)+) => {$(
        $(#[$attr])*
        pub fn $name(mut self, $arg: $t) -> Self {
            self.$field = $arg;
            self
        }
    )+};
}

pub mod addr;
mod cmsg;
pub mod fork_private;
pub mod forward;
mod host_addrs;
mod probe;
pub mod socket;
pub mod steer;
mod sys;
pub mod wake;

pub use addr::{AddrConfig, AddrError, BindError, DEFAULT_PORT, ENV_ADDR, ENV_PORT};
pub use forward::Forwarder;
pub use host_addrs::{AddrWatch, host_addrs};
pub use probe::probe_socket;
pub use socket::{
    Capabilities, Datagram, Datagrams, GRO_SLOT_SIZE, GsoPolicy, MAX_UDP_PAYLOAD, PLAIN_SLOT_SIZE,
    RecvBatch, RecvMeta, RoceSocket, SocketConfig, SocketStats, Transmit,
};
pub use steer::{
    SteerError, SteerProgram, SteerTable, dest_qpn, member_slot, parse_probe, probe_datagram,
    qp1_answer_slot,
};
pub use sys::kernel_udp_socket;
pub use wake::{EventFd, EventFdOptions, Events, Interest, Poller, TimerFd, TimerMode, Waker};
