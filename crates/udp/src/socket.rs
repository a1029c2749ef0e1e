//! [`RoceSocket`]: the device's UDP socket, with batched, GSO/GRO-aware send and receive.

use arrayvec::ArrayVec;
use std::fmt;
use std::io::{self, IoSlice};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::addr::{AddrConfig, BindError};
use crate::cmsg::{self, CmsgBuf};
use crate::steer::SteerProgram;
use crate::sys::{self, MAX_MMSG, RawAddr, RecvResult, SendMsg};

/// Largest UDP payload in one IPv4 datagram (65535 − 20 − 8); also the cap on the total size of
/// one GSO send, since a GSO "super-datagram" must itself be a valid IP packet.
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// Receive slot size needed when `UDP_GRO` is on: a GRO super-datagram is at most one
/// maximal IP packet.
pub const GRO_SLOT_SIZE: usize = 65_536;

/// Receive slot size without GRO: a RoCEv2 packet at the largest IB MTU (4096) plus headers
/// is about 4.2 KiB; 9216 also holds anything a 9000-byte jumbo-frame peer can send.
pub const PLAIN_SLOT_SIZE: usize = 9_216;

/// Default `SO_RCVBUF`/`SO_SNDBUF` request (32 MiB; the kernel reports double).
pub const DEFAULT_BUFFER_SIZE: usize = 32 << 20;

/// Segments per GSO send. Linux's `UDP_MAX_SEGMENTS` was 64 from 4.18 until it was raised to
/// 128 (6.x); 64 is accepted everywhere. With 4 KiB datagrams the 64 KiB size cap
/// ([`MAX_UDP_PAYLOAD`]) binds first anyway (15 segments).
const GSO_MAX_SEGMENTS: usize = 64;

/// iovec entries per `sendmmsg` call (all messages together); 256 × 16 B on the stack.
const MAX_SEND_IOVS: usize = 256;

/// Control bytes for one `UDP_SEGMENT` cmsg (`CMSG_SPACE(sizeof(u16))`).
const SEND_CMSG_LEN: usize = cmsg::space(2);

/// Receive control buffer: pktinfo (≤ 40 B) + UDP_GRO (24 B), with room to spare.
const RECV_CMSG_LEN: usize = 128;

/// When [`RoceSocket::send_batch`] may coalesce datagrams into one GSO send.
///
/// **Why not always:** for IPv4, Linux numbers the IP Identification of the segments a GSO
/// send is cut into as `id, id+1, id+2, …` (`inet_gso_segment`), starting from the 0 an
/// unconnected DF socket uses. The RoCEv2 ICRC covers the IP ID, so every segment after the
/// first carries an ICRC a strict receiver (Linux `rdma_rxe`, a RoCE NIC) rejects. A peer
/// that receives through a UDP socket never sees the IP ID (and cannot check it), and IPv6
/// has no ID at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum GsoPolicy {
    /// Never use GSO.
    Off,
    /// Use GSO only where every segment's ICRC stays valid for any receiver: IPv6
    /// destinations, and IPv4 loopback (127/8) destinations, where segments are never cut
    /// apart on a wire. The default.
    #[default]
    IcrcSafe,
    /// Use GSO for every destination (when the peer is known to be softrdma, which receives
    /// through a UDP socket and cannot see the IP ID).
    Always,
}

/// Options for [`RoceSocket::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketConfig {
    /// Requested `SO_RCVBUF` and `SO_SNDBUF` in bytes. Tried with `SO_*BUFFORCE` first
    /// (needs `CAP_NET_ADMIN`), then the plain option (capped by `net.core.[rw]mem_max`).
    pub buffer_size: usize,
    /// When sends may use GSO (also needs kernel support, detected at open).
    pub gso: GsoPolicy,
    /// Enable `UDP_GRO` on receive (if the kernel has it).
    pub gro: bool,
    /// IPv6 only: send UDP checksum 0 (`UDP_NO_CHECK6_TX`), as `rdma_rxe` does. Off by
    /// default: receivers accept real checksums, the ICRC masks the UDP checksum anyway, and
    /// Linux refuses GSO on such a socket (so GSO is disabled when this is on).
    pub ipv6_zero_checksum_tx: bool,
    /// Set `SO_REUSEPORT` before binding, so that sockets of one user bound to the same
    /// address and port form a kernel reuseport group (one device per host, DESIGN §4);
    /// [`RoceSocket::attach_steering`] then decides which member receives each datagram.
    /// With the default loopback scan this joins an existing group on `127.0.0.1` rather
    /// than moving on to `127.0.0.2`. Off by default: a device binds its address exclusively.
    pub reuseport: bool,
}

impl Default for SocketConfig {
    fn default() -> Self {
        SocketConfig {
            buffer_size: DEFAULT_BUFFER_SIZE,
            gso: GsoPolicy::default(),
            gro: true,
            ipv6_zero_checksum_tx: false,
            reuseport: false,
        }
    }
}

impl SocketConfig {
    /// A config with GSO and GRO both off (plain `sendmmsg`/`recvmmsg`).
    pub fn plain() -> Self {
        SocketConfig {
            gso: GsoPolicy::Off,
            gro: false,
            ..SocketConfig::default()
        }
    }

    setters! {
        /// Sets [`SocketConfig::gso`].
        with_gso(gso: GsoPolicy) => gso;
        /// Sets [`SocketConfig::gro`].
        with_gro(gro: bool) => gro;
        /// Sets [`SocketConfig::buffer_size`].
        with_buffer_size(bytes: usize) => buffer_size;
        /// Sets [`SocketConfig::ipv6_zero_checksum_tx`].
        with_ipv6_zero_checksum_tx(on: bool) => ipv6_zero_checksum_tx;
        /// Sets [`SocketConfig::reuseport`].
        with_reuseport(on: bool) => reuseport;
    }
}

/// What the kernel granted when the socket was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The kernel accepts `UDP_SEGMENT` (GSO) on this socket.
    pub gso: bool,
    /// `UDP_GRO` is enabled on this socket.
    pub gro: bool,
    /// `IP_PKTINFO` / `IPV6_RECVPKTINFO` is on: received datagrams report their destination.
    pub pktinfo: bool,
    /// `IP_MTU_DISCOVER`/`IPV6_MTU_DISCOVER` = `PMTUDISC_DO` is set (DF, no fragmentation;
    /// for IPv4 this makes Linux send IP ID 0 on this unconnected socket).
    pub pmtudisc_do: bool,
    /// `UDP_NO_CHECK6_RX` is on (IPv6 datagrams with UDP checksum 0 are accepted).
    pub zero_checksum_rx: bool,
    /// `UDP_NO_CHECK6_TX` is on (IPv6 datagrams go out with UDP checksum 0).
    pub zero_checksum_tx: bool,
    /// Effective `SO_RCVBUF` as reported by `getsockopt` (Linux reports double the request).
    pub recv_buffer: usize,
    /// Effective `SO_SNDBUF` as reported by `getsockopt`.
    pub send_buffer: usize,
    /// The buffer sizes were set with `SO_*BUFFORCE` (privileged), not capped by `*mem_max`.
    pub buffers_forced: bool,
}

/// One datagram to send: UDP payload (BTH … ICRC) and destination.
#[derive(Clone, Copy)]
pub struct Transmit<'a> {
    /// Destination (peer address, normally port 4791).
    pub dst: SocketAddr,
    /// The UDP payload.
    pub payload: &'a [u8],
}

impl fmt::Debug for Transmit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transmit")
            .field("dst", &self.dst)
            .field("len", &self.payload.len())
            .finish()
    }
}

/// A snapshot of a socket's counters ([`RoceSocket::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SocketStats {
    /// Datagrams handed to the kernel (each GSO segment counts).
    pub datagrams_sent: u64,
    /// UDP payload bytes handed to the kernel.
    pub bytes_sent: u64,
    /// `sendmmsg` calls (including failed ones).
    pub send_syscalls: u64,
    /// Messages sent with `UDP_SEGMENT` (GSO super-datagrams).
    pub gso_batches: u64,
    /// Datagrams sent inside GSO super-datagrams.
    pub gso_segments: u64,
    /// Times `send_batch` stopped early on `EAGAIN`/`ENOBUFS`/`ENOMEM`.
    pub send_would_block: u64,
    /// Datagrams dropped because the kernel refused them (`EMSGSIZE`, `ENETUNREACH`, ...).
    pub send_errors: u64,
    /// The errno of the last such refusal (0 if none).
    pub last_send_errno: i32,
    /// Times GSO was turned off after the kernel refused a GSO send (`EIO`/`EINVAL`).
    pub gso_fallbacks: u64,
    /// Datagrams received (GRO super-datagrams count as their segments).
    pub datagrams_received: u64,
    /// UDP payload bytes received.
    pub bytes_received: u64,
    /// `recvmmsg` calls (including ones that found nothing).
    pub recv_syscalls: u64,
    /// GRO super-datagrams received.
    pub gro_batches: u64,
    /// Datagrams received inside GRO super-datagrams.
    pub gro_segments: u64,
    /// Datagrams dropped because they were larger than the receive slot.
    pub recv_truncated: u64,
    /// `recvmmsg` errors other than "nothing to read".
    pub recv_errors: u64,
    /// ICMP "unreachable" reports read from the error queue (a peer's port is closed).
    pub unreachable: u64,
}

impl SocketStats {
    /// Every counter with its field name, in declaration order (dumps, views).
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("datagrams_sent", self.datagrams_sent),
            ("bytes_sent", self.bytes_sent),
            ("send_syscalls", self.send_syscalls),
            ("gso_batches", self.gso_batches),
            ("gso_segments", self.gso_segments),
            ("send_would_block", self.send_would_block),
            ("send_errors", self.send_errors),
            ("gso_fallbacks", self.gso_fallbacks),
            ("datagrams_received", self.datagrams_received),
            ("bytes_received", self.bytes_received),
            ("recv_syscalls", self.recv_syscalls),
            ("gro_batches", self.gro_batches),
            ("gro_segments", self.gro_segments),
            ("recv_truncated", self.recv_truncated),
            ("recv_errors", self.recv_errors),
            ("unreachable", self.unreachable),
        ]
    }
}

#[derive(Debug, Default)]
struct Counters {
    unreachable: AtomicU64,
    datagrams_sent: AtomicU64,
    bytes_sent: AtomicU64,
    send_syscalls: AtomicU64,
    gso_batches: AtomicU64,
    gso_segments: AtomicU64,
    send_would_block: AtomicU64,
    send_errors: AtomicU64,
    last_send_errno: AtomicI32,
    gso_fallbacks: AtomicU64,
    datagrams_received: AtomicU64,
    bytes_received: AtomicU64,
    recv_syscalls: AtomicU64,
    gro_batches: AtomicU64,
    gro_segments: AtomicU64,
    recv_truncated: AtomicU64,
    recv_errors: AtomicU64,
}

fn add(c: &AtomicU64, v: u64) {
    if v != 0 {
        c.fetch_add(v, Relaxed);
    }
}

/// The device's UDP socket: non-blocking, bound to one local address, configured for RoCEv2.
///
/// All methods take `&self`; the socket is `Send + Sync` and may be shared (e.g. in an `Arc`)
/// between the progress thread and application threads that busy-poll.
#[derive(Debug)]
pub struct RoceSocket {
    fd: OwnedFd,
    local: SocketAddr,
    caps: Capabilities,
    gso_policy: GsoPolicy,
    /// In a steered reuseport group: a GSO send never mixes destination member slots.
    steered: bool,
    /// Segments per GSO send currently allowed; 0 = GSO off (unsupported, by policy, or
    /// after a kernel refusal).
    gso_segments: AtomicUsize,
    c: Counters,
    /// A socket error was reported: the error queue may hold ICMP reports.
    err_pending: std::sync::atomic::AtomicBool,
}

impl Drop for RoceSocket {
    fn drop(&mut self) {
        // Before the descriptor closes and its number can be reused.
        crate::fork_private::unregister(self.fd.as_raw_fd());
    }
}

impl_as_fd!(RoceSocket);

impl RoceSocket {
    /// Opens the socket from `SOFTRDMA_ADDR` / `SOFTRDMA_PORT` (see [`crate::addr`]).
    /// Errors are `InvalidInput` for bad variables and the [`BindError`]'s kind otherwise;
    /// the message names the variable or address.
    pub fn from_env(cfg: &SocketConfig) -> io::Result<RoceSocket> {
        let addr =
            AddrConfig::from_env().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(Self::open(&addr, cfg)?)
    }

    /// Opens and configures a socket, then binds it as `addr` says (exact address, or the
    /// first free `127.0.0.N`).
    pub fn open(addr: &AddrConfig, cfg: &SocketConfig) -> Result<RoceSocket, BindError> {
        let ipv6 = addr.is_ipv6();
        let fd = sys::udp_socket(ipv6).map_err(BindError::Setup)?;
        let caps = configure(fd.as_fd(), ipv6, cfg).map_err(BindError::Setup)?;
        if cfg.reuseport {
            // Must precede bind: the kernel joins the group at bind time.
            sys::setsockopt_int(fd.as_fd(), libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)
                .map_err(BindError::Setup)?;
        }
        let ((), requested) = addr.bind_with(|a| sys::bind(fd.as_fd(), &a))?;
        let local = sys::local_addr(fd.as_fd()).map_err(|source| BindError::Io {
            addr: requested,
            source,
        })?;
        let gso_on = caps.gso && cfg.gso != GsoPolicy::Off;
        crate::fork_private::register(fd.as_raw_fd());
        Ok(RoceSocket {
            fd,
            local,
            caps,
            gso_policy: cfg.gso,
            steered: cfg.reuseport,
            gso_segments: AtomicUsize::new(if gso_on { GSO_MAX_SEGMENTS } else { 0 }),
            c: Counters::default(),
            err_pending: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Opens a socket that receives datagrams sent to multicast `group` on
    /// `port`, joined on the interface holding `iface` (several processes may
    /// do this for one group: every member gets a copy). It is configured like
    /// the device socket (pktinfo, buffers, error queue) so the same receive
    /// path reads it.
    pub fn bind_multicast(
        group: IpAddr,
        port: u16,
        iface: IpAddr,
        cfg: &SocketConfig,
    ) -> io::Result<RoceSocket> {
        if !group.is_multicast() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{group} is not a multicast address"),
            ));
        }
        let ipv6 = group.is_ipv6();
        let fd = sys::udp_socket(ipv6)?;
        let caps = configure(fd.as_fd(), ipv6, cfg)?;
        sys::setsockopt_int(fd.as_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        sys::bind(fd.as_fd(), &SocketAddr::new(group, port))?;
        match (group, iface) {
            (IpAddr::V4(g), IpAddr::V4(i)) => {
                // struct ip_mreq { in_addr multiaddr; in_addr interface; }
                let mut m = [0u8; 8];
                m[..4].copy_from_slice(&g.octets());
                m[4..].copy_from_slice(&i.octets());
                sys::setsockopt_bytes(fd.as_fd(), libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, &m)?;
            }
            (IpAddr::V6(g), _) => {
                // struct ipv6_mreq { in6_addr multiaddr; unsigned int ifindex; } (0: any)
                let mut m = [0u8; 20];
                m[..16].copy_from_slice(&g.octets());
                sys::setsockopt_bytes(
                    fd.as_fd(),
                    libc::IPPROTO_IPV6,
                    libc::IPV6_ADD_MEMBERSHIP,
                    &m,
                )?;
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "IPv4 group on an IPv6 device",
                ));
            }
        }
        let local = sys::local_addr(fd.as_fd())?;
        crate::fork_private::register(fd.as_raw_fd());
        Ok(RoceSocket {
            fd,
            local,
            caps,
            gso_policy: GsoPolicy::Off,
            steered: false,
            gso_segments: AtomicUsize::new(0),
            c: Counters::default(),
            err_pending: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Attaches `prog` (`SO_ATTACH_REUSEPORT_CBPF`) to the reuseport group this socket belongs
    /// to (opened with [`SocketConfig::reuseport`]). The program is the group's, not the
    /// socket's: it replaces any program another member attached and keeps steering after
    /// this socket closes. `EINVAL` if the socket is not in a group or the kernel's checker
    /// refuses the program. See [`crate::steer`].
    pub fn attach_steering(&self, prog: &SteerProgram) -> io::Result<()> {
        sys::attach_reuseport_cbpf(self.fd.as_fd(), prog.instructions())
    }

    /// Closes the socket now, while this value lives on (its descriptor then
    /// refers to `/dev/null`; sends and receives fail). A member leaving a
    /// reuseport group does this right after attaching the program for the
    /// group without it: the kernel moves the last socket into its index at
    /// close, which must happen when the program says, not at the end of the
    /// process's exit (packets for the moved member reached the leaver until
    /// then: a REQ answered with REJ, data dropped). A descriptor duplicated
    /// elsewhere keeps the socket open.
    pub fn close_now(&self) -> io::Result<()> {
        sys::replace_with_dev_null(self.fd.as_fd())
    }

    /// Sends multicast datagrams out of the interface holding `iface` (and
    /// back to local members), as the device's own socket must.
    pub fn set_multicast_source(&self, iface: IpAddr) -> io::Result<()> {
        if let IpAddr::V4(i) = iface {
            sys::setsockopt_bytes(
                self.fd.as_fd(),
                libc::IPPROTO_IP,
                libc::IP_MULTICAST_IF,
                &i.octets(),
            )?;
            sys::setsockopt_int(
                self.fd.as_fd(),
                libc::IPPROTO_IP,
                libc::IP_MULTICAST_LOOP,
                1,
            )?;
        }
        Ok(())
    }

    /// Opens a socket bound to exactly `addr` (port 0 lets the kernel choose).
    pub fn bind(addr: SocketAddr, cfg: &SocketConfig) -> Result<RoceSocket, BindError> {
        Self::open(&AddrConfig::exact(addr), cfg)
    }

    /// Destinations the kernel reported unreachable (ICMP port, host or network
    /// unreachable: nothing listens there) since the last call. Cheap when nothing
    /// happened: the error queue is read only after a receive reported a socket error.
    pub fn take_unreachable(&self) -> Vec<SocketAddr> {
        let mut out = Vec::new();
        if !self.err_pending.swap(false, Relaxed) {
            return out;
        }
        let mut ctrl = [0u8; 256];
        loop {
            let mut name = RawAddr::EMPTY;
            let Ok(Some(clen)) = sys::recv_errqueue(self.fd.as_fd(), &mut name, &mut ctrl) else {
                break;
            };
            for c in cmsg::Iter::new(&ctrl[..clen.min(ctrl.len())]) {
                // struct sock_extended_err { u32 errno; u8 origin, type, code, pad; u32 info, data; }
                let is_err = matches!(
                    (c.level, c.ty),
                    (libc::IPPROTO_IP, libc::IP_RECVERR) | (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
                );
                if !is_err || c.data.len() < 8 {
                    continue;
                }
                let errno = i32::from_ne_bytes([c.data[0], c.data[1], c.data[2], c.data[3]]);
                if matches!(
                    errno,
                    libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH
                ) && let Some(a) = name.decode()
                {
                    self.c.unreachable.fetch_add(1, Relaxed);
                    out.push(a);
                }
            }
        }
        out
    }

    /// The bound local address (the device's address and port).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// What the kernel granted at open.
    pub fn capabilities(&self) -> Capabilities {
        self.caps
    }

    /// Whether sends currently may use GSO (kernel support, policy, and no refusal so far).
    pub fn gso_enabled(&self) -> bool {
        self.gso_segments.load(Relaxed) > 1
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> SocketStats {
        let c = &self.c;
        let g = |a: &AtomicU64| a.load(Relaxed);
        SocketStats {
            datagrams_sent: g(&c.datagrams_sent),
            bytes_sent: g(&c.bytes_sent),
            send_syscalls: g(&c.send_syscalls),
            gso_batches: g(&c.gso_batches),
            gso_segments: g(&c.gso_segments),
            send_would_block: g(&c.send_would_block),
            send_errors: g(&c.send_errors),
            last_send_errno: c.last_send_errno.load(Relaxed),
            gso_fallbacks: g(&c.gso_fallbacks),
            datagrams_received: g(&c.datagrams_received),
            bytes_received: g(&c.bytes_received),
            recv_syscalls: g(&c.recv_syscalls),
            gro_batches: g(&c.gro_batches),
            gro_segments: g(&c.gro_segments),
            recv_truncated: g(&c.recv_truncated),
            recv_errors: g(&c.recv_errors),
            unreachable: g(&c.unreachable),
        }
    }

    fn gso_allowed(&self, dst: &SocketAddr) -> bool {
        match self.gso_policy {
            GsoPolicy::Off => false,
            GsoPolicy::Always => true,
            GsoPolicy::IcrcSafe => match dst.ip().to_canonical() {
                IpAddr::V4(ip) => ip.is_loopback(),
                IpAddr::V6(_) => true,
            },
        }
    }

    /// Rewrites `dst` to the socket's family (IPv4-mapped IPv6 ⇄ IPv4).
    fn map_dst(&self, dst: SocketAddr) -> SocketAddr {
        match (self.local, dst) {
            (SocketAddr::V4(_), SocketAddr::V6(d)) => match d.ip().to_ipv4_mapped() {
                Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, d.port())),
                None => dst,
            },
            (SocketAddr::V6(_), SocketAddr::V4(d)) => {
                SocketAddr::V6(SocketAddrV6::new(d.ip().to_ipv6_mapped(), d.port(), 0, 0))
            }
            _ => dst,
        }
    }

    /// Sends `transmits` in order with as few system calls as possible.
    ///
    /// Uses `sendmmsg` (up to 64 messages per call), and — when GSO is enabled and allowed for
    /// the destination (see [`GsoPolicy`]) — coalesces runs of consecutive datagrams to the
    /// same destination with equal length (the last of a run may be shorter) into one
    /// `UDP_SEGMENT` send, up to 64 segments and [`MAX_UDP_PAYLOAD`] bytes. No payload is
    /// copied: each datagram is one iovec.
    ///
    /// Returns `Ok(n)`: the first `n` transmits are done. `n < transmits.len()` means the
    /// kernel pushed back (`EAGAIN`, `ENOBUFS`, `ENOMEM`): retry `transmits[n..]` later.
    /// "Done" includes datagrams the kernel refused for reasons retrying cannot fix
    /// (`EMSGSIZE`, unreachable, ...): they are dropped, counted in
    /// [`SocketStats::send_errors`] and [`SocketStats::last_send_errno`] — RoCE transport
    /// retransmits, like for any loss. `EINTR` is retried. If the kernel refuses a GSO send
    /// with `EIO`/`EINVAL`, GSO is switched off for this socket and the datagrams are resent
    /// individually. `Err` only for errors that mean the socket itself is unusable (`EBADF`,
    /// `ENOTSOCK`, `EFAULT`).
    pub fn send_batch(&self, transmits: &[Transmit<'_>]) -> io::Result<usize> {
        let mut pos = 0;
        // After a GSO refusal, the run starting at `pos` is resent without GSO.
        let mut plain_until = 0;
        while pos < transmits.len() {
            let gso_max = self.gso_segments.load(Relaxed);
            // Filled as the batch grows, never initialized whole: 12 KiB of stores per call
            // when they were arrays (BENCHMARKS.md, "Issue 16, outcome 6").
            let mut names = ArrayVec::<RawAddr, MAX_MMSG>::new();
            let mut ctrls = ArrayVec::<CmsgBuf<SEND_CMSG_LEN>, MAX_MMSG>::new();
            let mut iovs = ArrayVec::<IoSlice<'_>, MAX_SEND_IOVS>::new();
            let mut runs = ArrayVec::<Run, MAX_MMSG>::new();
            let mut i = pos;
            while i < transmits.len() && !runs.is_full() && !iovs.is_full() {
                let niov = iovs.len();
                let t = &transmits[i];
                let seg = t.payload.len();
                let (mut count, mut bytes) = (1, seg);
                if gso_max > 1 && i >= plain_until && seg > 0 && self.gso_allowed(&t.dst) {
                    let limit = gso_max.min(MAX_SEND_IOVS - niov);
                    while i + count < transmits.len() && count < limit {
                        let u = &transmits[i + count];
                        let len = u.payload.len();
                        if u.dst != t.dst
                            || len == 0
                            || len > seg
                            || bytes + len > MAX_UDP_PAYLOAD
                            || (self.steered && slot_of(u.payload) != slot_of(t.payload))
                        {
                            break;
                        }
                        bytes += len;
                        count += 1;
                        if len < seg {
                            break;
                        }
                    }
                }
                names.push(RawAddr::encode(&self.map_dst(t.dst)));
                iovs.extend(
                    transmits[i..i + count]
                        .iter()
                        .map(|u| IoSlice::new(u.payload)),
                );
                let mut ctrl = CmsgBuf::<SEND_CMSG_LEN>::ZERO;
                let ctrl_len = if count > 1 {
                    // seg <= MAX_UDP_PAYLOAD / 2 here, so it fits the u16 UDP_SEGMENT wants.
                    let seg16 = (seg as u16).to_ne_bytes();
                    cmsg::encode(&mut ctrl.0, libc::SOL_UDP, libc::UDP_SEGMENT, &seg16).unwrap_or(0)
                } else {
                    0
                };
                ctrls.push(ctrl);
                runs.push(Run {
                    iov: niov,
                    count,
                    ctrl_len,
                    bytes,
                });
                i += count;
            }
            let msgs: ArrayVec<SendMsg<'_>, MAX_MMSG> = runs
                .iter()
                .zip(names.iter().zip(&ctrls))
                .map(|(r, (name, ctrl))| SendMsg {
                    name,
                    iov: &iovs[r.iov..r.iov + r.count],
                    control: &ctrl.0[..r.ctrl_len],
                })
                .collect();
            self.c.send_syscalls.fetch_add(1, Relaxed);
            match sys::sendmmsg(self.fd.as_fd(), &msgs) {
                Ok(k) => {
                    let (mut dgrams, mut bytes, mut gso_b, mut gso_s) = (0, 0, 0, 0);
                    for r in &runs[..k.min(runs.len())] {
                        dgrams += r.count as u64;
                        bytes += r.bytes as u64;
                        if r.ctrl_len > 0 {
                            gso_b += 1;
                            gso_s += r.count as u64;
                        }
                    }
                    add(&self.c.datagrams_sent, dgrams);
                    add(&self.c.bytes_sent, bytes);
                    add(&self.c.gso_batches, gso_b);
                    add(&self.c.gso_segments, gso_s);
                    pos += dgrams as usize;
                }
                Err(e) => match e.raw_os_error().unwrap_or(0) {
                    libc::EINTR => {}
                    libc::EAGAIN | libc::ENOBUFS | libc::ENOMEM => {
                        self.c.send_would_block.fetch_add(1, Relaxed);
                        return Ok(pos);
                    }
                    libc::EBADF | libc::ENOTSOCK | libc::EFAULT => return Err(e),
                    // An ICMP report about an earlier datagram (IP_RECVERR parks it in
                    // sk_err, which the next call returns once): note it and resend this one.
                    libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH
                        if !self.err_pending.swap(true, Relaxed) => {}
                    errno => {
                        // The first message of this call failed (sendmmsg reports an error
                        // only when nothing was sent).
                        let r = runs[0];
                        if r.ctrl_len > 0 {
                            if matches!(errno, libc::EIO | libc::EINVAL)
                                && self.gso_segments.swap(0, Relaxed) > 1
                            {
                                self.c.gso_fallbacks.fetch_add(1, Relaxed);
                            }
                            plain_until = pos + r.count;
                        } else {
                            self.c.send_errors.fetch_add(1, Relaxed);
                            self.c.last_send_errno.store(errno, Relaxed);
                            pos += 1;
                        }
                    }
                },
            }
        }
        Ok(pos)
    }

    /// Receives into `batch` with one `recvmmsg(MSG_DONTWAIT)` call; never blocks.
    ///
    /// Returns the number of datagrams now in `batch` (GRO super-datagrams count as their
    /// segments; [`RecvBatch::datagrams`] yields exactly that many), `Ok(0)` if nothing was
    /// waiting (or only truncated datagrams were: if more is queued, the socket stays
    /// readable). Previous contents of `batch` are replaced. A pending socket error (e.g. left
    /// behind by an ICMP report) is counted in [`SocketStats::recv_errors`] and the call
    /// retried a few times. `Err` only for unusable sockets or a `batch` whose slots are too
    /// small for GRO (`InvalidInput`; use [`RecvBatch::for_socket`]).
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.meta.clear();
        if self.caps.gro && batch.slot_len < GRO_SLOT_SIZE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "RecvBatch slots are smaller than 64 KiB but the socket has UDP_GRO on \
                 (use RecvBatch::for_socket)",
            ));
        }
        let mut attempts = 0;
        let k = loop {
            self.c.recv_syscalls.fetch_add(1, Relaxed);
            match sys::recvmmsg(
                self.fd.as_fd(),
                &mut batch.data,
                batch.stride,
                batch.slot_len,
                &mut batch.names,
                &mut batch.ctrls,
                &mut batch.raw,
            ) {
                Ok(k) => break k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EBADF | libc::ENOTSOCK | libc::EFAULT)
                    ) =>
                {
                    return Err(e);
                }
                // Anything else is a pending socket error (`sk_err`) reported once and
                // cleared: an ICMP report, or the error of a `sendmmsg` that stopped part-way
                // (Linux parks it in `sk_err`, where any next call on the socket finds it).
                Err(_) => {
                    self.c.recv_errors.fetch_add(1, Relaxed);
                    self.err_pending.store(true, Relaxed);
                    attempts += 1;
                    if attempts >= 4 {
                        return Ok(0);
                    }
                }
            }
        };
        let (mut dgrams, mut bytes, mut gro_b, mut gro_s, mut trunc) = (0, 0, 0, 0, 0);
        for i in 0..k {
            let r = batch.raw[i];
            let src = batch.names[i]
                .decode()
                .unwrap_or(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)));
            let ctrl = &batch.ctrls[i].0[..r.control_len.min(RECV_CMSG_LEN)];
            let (mut dst_ip, mut seg) = (None, None);
            for c in cmsg::Iter::new(ctrl) {
                match (c.level, c.ty) {
                    (libc::IPPROTO_IP, libc::IP_PKTINFO) if c.data.len() >= 12 => {
                        // struct in_pktinfo { int ifindex; in_addr spec_dst; in_addr addr; }
                        let a: [u8; 4] = c.data[8..12].try_into().unwrap_or_default();
                        dst_ip = Some(IpAddr::V4(Ipv4Addr::from(a)));
                    }
                    (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) if c.data.len() >= 16 => {
                        // struct in6_pktinfo { in6_addr addr; int ifindex; }
                        let a: [u8; 16] = c.data[..16].try_into().unwrap_or_default();
                        dst_ip = Some(IpAddr::V6(Ipv6Addr::from(a)));
                    }
                    (libc::SOL_UDP, libc::UDP_GRO) => {
                        seg = cmsg::read_i32(c.data)
                            .and_then(|s| usize::try_from(s).ok())
                            .filter(|&s| s > 0 && s < r.len);
                    }
                    _ => {}
                }
            }
            let truncated = r.flags & libc::MSG_TRUNC != 0;
            let meta = RecvMeta {
                src,
                dst_ip,
                len: r.len,
                segment_size: seg,
                truncated,
            };
            if truncated {
                trunc += 1;
            } else {
                let n = meta.segments() as u64;
                dgrams += n;
                bytes += r.len as u64;
                if seg.is_some() {
                    gro_b += 1;
                    gro_s += n;
                }
            }
            batch.meta.push(meta);
        }
        add(&self.c.datagrams_received, dgrams);
        add(&self.c.bytes_received, bytes);
        add(&self.c.gro_batches, gro_b);
        add(&self.c.gro_segments, gro_s);
        add(&self.c.recv_truncated, trunc);
        Ok(dgrams as usize)
    }
}

/// One `sendmmsg` message as planned by `send_batch`.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    iov: usize,
    count: usize,
    ctrl_len: usize,
    bytes: usize,
}

/// Applies the RoCEv2 socket options; returns what the kernel granted.
fn configure(fd: BorrowedFd<'_>, ipv6: bool, cfg: &SocketConfig) -> io::Result<Capabilities> {
    use libc::{IPPROTO_IP, IPPROTO_IPV6, SOL_SOCKET, SOL_UDP};
    let on = |level, name| sys::setsockopt_int(fd, level, name, 1).is_ok();
    let (pmtudisc_do, pktinfo, zero_checksum_rx, zero_checksum_tx);
    if ipv6 {
        // Keep the IPv6 device strictly IPv6 (a wildcard bind would otherwise also take IPv4).
        let _ = sys::setsockopt_int(fd, IPPROTO_IPV6, libc::IPV6_V6ONLY, 1);
        sys::setsockopt_int(
            fd,
            IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )?;
        pmtudisc_do = true;
        let _ = sys::setsockopt_int(fd, IPPROTO_IPV6, libc::IPV6_RECVERR, 1);
        pktinfo = on(IPPROTO_IPV6, libc::IPV6_RECVPKTINFO);
        zero_checksum_rx = on(SOL_UDP, libc::UDP_NO_CHECK6_RX);
        zero_checksum_tx = cfg.ipv6_zero_checksum_tx && on(SOL_UDP, libc::UDP_NO_CHECK6_TX);
    } else {
        // DF on every datagram, never fragment. On an unconnected socket Linux then sends
        // IP ID 0 (ip_select_ident), which is what our ICRC is computed with.
        sys::setsockopt_int(fd, IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
        // ICMP reports (a peer's port closed) go to the error queue: take_unreachable.
        let _ = sys::setsockopt_int(fd, IPPROTO_IP, libc::IP_RECVERR, 1);
        pmtudisc_do = true;
        pktinfo = on(IPPROTO_IP, libc::IP_PKTINFO);
        (zero_checksum_rx, zero_checksum_tx) = (false, false);
    }

    let want = cfg.buffer_size.min(i32::MAX as usize / 2) as libc::c_int;
    let mut buffers_forced = true;
    for (force, plain) in [
        (sys::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (sys::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        if sys::setsockopt_int(fd, SOL_SOCKET, force, want).is_err() {
            buffers_forced = false;
            // Capped by net.core.rmem_max / wmem_max; failing is not fatal.
            let _ = sys::setsockopt_int(fd, SOL_SOCKET, plain, want);
        }
    }
    let recv_buffer = sys::getsockopt_int(fd, SOL_SOCKET, libc::SO_RCVBUF)?.max(0) as usize;
    let send_buffer = sys::getsockopt_int(fd, SOL_SOCKET, libc::SO_SNDBUF)?.max(0) as usize;

    let gro = cfg.gro && on(SOL_UDP, libc::UDP_GRO);
    // getsockopt(UDP_SEGMENT) exists exactly when the kernel supports UDP GSO (>= 4.18).
    // Linux refuses GSO on a socket with UDP_NO_CHECK6_TX (EINVAL), so do not offer it there.
    let gso = sys::getsockopt_int(fd, SOL_UDP, libc::UDP_SEGMENT).is_ok() && !zero_checksum_tx;

    Ok(Capabilities {
        gso,
        gro,
        pktinfo,
        pmtudisc_do,
        zero_checksum_rx,
        zero_checksum_tx,
        recv_buffer,
        send_buffer,
        buffers_forced,
    })
}

/// Metadata of one received message (one `recvmmsg` slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecvMeta {
    /// Sender address.
    pub src: SocketAddr,
    /// Destination IP of the datagram (from `IP_PKTINFO`/`IPV6_PKTINFO`), if reported.
    pub dst_ip: Option<IpAddr>,
    /// Bytes in the slot (a GRO super-datagram holds several datagrams).
    pub len: usize,
    /// GRO segment size if this slot holds several coalesced datagrams: every datagram is
    /// `segment_size` bytes except the last, which may be shorter.
    pub segment_size: Option<usize>,
    /// The datagram did not fit the slot and was cut; it is skipped by
    /// [`RecvBatch::datagrams`].
    pub truncated: bool,
}

impl RecvMeta {
    /// Number of datagrams in this slot (0 if truncated).
    pub fn segments(&self) -> usize {
        if self.truncated {
            0
        } else {
            match self.segment_size {
                Some(s) if self.len > 0 => self.len.div_ceil(s),
                _ => 1,
            }
        }
    }
}

/// Reusable receive buffers for [`RoceSocket::recv_batch`]: `slots` messages of up to
/// `slot_size` bytes each, allocated once.
pub struct RecvBatch {
    data: Box<[u8]>,
    /// Distance between slots: slot size rounded up to 64 plus one cache line, so slot starts
    /// do not all map to the same cache set.
    stride: usize,
    slot_len: usize,
    names: Box<[RawAddr]>,
    ctrls: Box<[CmsgBuf<RECV_CMSG_LEN>]>,
    raw: Box<[RecvResult]>,
    meta: Vec<RecvMeta>,
}

impl fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvBatch")
            .field("slots", &self.names.len())
            .field("slot_size", &self.slot_len)
            .field("messages", &self.meta)
            .finish()
    }
}

impl RecvBatch {
    /// Most slots one batch can have (one `recvmmsg` call).
    pub const MAX_SLOTS: usize = MAX_MMSG;

    /// `slots` (clamped to 1..=[`Self::MAX_SLOTS`]) receive slots of `slot_size` bytes.
    pub fn new(slots: usize, slot_size: usize) -> RecvBatch {
        let slots = slots.clamp(1, Self::MAX_SLOTS);
        let slot_len = slot_size.max(1);
        let stride = slot_len.div_ceil(64) * 64 + 64;
        RecvBatch {
            data: vec![0u8; slots * stride].into_boxed_slice(),
            stride,
            slot_len,
            names: vec![RawAddr::EMPTY; slots].into_boxed_slice(),
            ctrls: vec![CmsgBuf::ZERO; slots].into_boxed_slice(),
            raw: vec![RecvResult::default(); slots].into_boxed_slice(),
            meta: Vec::with_capacity(slots),
        }
    }

    /// A batch sized for `sock`: [`GRO_SLOT_SIZE`] slots if it has GRO on, else
    /// [`PLAIN_SLOT_SIZE`].
    pub fn for_socket(sock: &RoceSocket, slots: usize) -> RecvBatch {
        let size = if sock.caps.gro {
            GRO_SLOT_SIZE
        } else {
            PLAIN_SLOT_SIZE
        };
        Self::new(slots, size)
    }

    /// Per-message metadata of the last receive.
    pub fn messages(&self) -> &[RecvMeta] {
        &self.meta
    }

    /// The bytes of message `i` (a GRO super-datagram is returned whole).
    pub fn payload(&self, i: usize) -> &[u8] {
        let m = &self.meta[i];
        &self.data[i * self.stride..i * self.stride + m.len]
    }

    /// The received datagrams, GRO super-datagrams split into their segments, in arrival
    /// order; truncated messages are skipped.
    pub fn datagrams(&self) -> Datagrams<'_> {
        Datagrams {
            batch: self,
            slot: 0,
            seg: 0,
        }
    }

    /// Number of datagrams [`Self::datagrams`] yields.
    pub fn len(&self) -> usize {
        self.meta.iter().map(RecvMeta::segments).sum()
    }

    /// Whether the batch holds no datagram.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets the last receive.
    pub fn clear(&mut self) {
        self.meta.clear();
    }
}

/// One received datagram (UDP payload).
#[derive(Clone, Copy)]
pub struct Datagram<'a> {
    /// Sender address.
    pub src: SocketAddr,
    /// Destination IP, if reported (`IP_PKTINFO`).
    pub dst_ip: Option<IpAddr>,
    /// The UDP payload.
    pub data: &'a [u8],
}

impl fmt::Debug for Datagram<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Datagram")
            .field("src", &self.src)
            .field("dst_ip", &self.dst_ip)
            .field("len", &self.data.len())
            .finish()
    }
}

/// Iterator over the datagrams of a [`RecvBatch`].
#[derive(Debug, Clone)]
pub struct Datagrams<'a> {
    batch: &'a RecvBatch,
    slot: usize,
    seg: usize,
}

impl<'a> Iterator for Datagrams<'a> {
    type Item = Datagram<'a>;

    fn next(&mut self) -> Option<Datagram<'a>> {
        loop {
            let m = self.batch.meta.get(self.slot)?;
            if self.seg >= m.segments() {
                self.slot += 1;
                self.seg = 0;
                continue;
            }
            let whole = self.batch.payload(self.slot);
            let data = match m.segment_size {
                Some(s) => {
                    let start = self.seg * s;
                    &whole[start..(start + s).min(whole.len())]
                }
                None => whole,
            };
            self.seg += 1;
            return Some(Datagram {
                src: m.src,
                dst_ip: m.dst_ip,
                data,
            });
        }
    }
}

/// The destination member slot of a RoCE packet (BTH byte 5: bits 23..16 of
/// the destination QPN). The receiving host's reuseport program steers a
/// whole GSO send by its first segment (`steer`), so a run never crosses it.
fn slot_of(payload: &[u8]) -> Option<u8> {
    payload.get(5).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(cfg: &SocketConfig) -> (RoceSocket, RoceSocket) {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        (
            RoceSocket::bind(any, cfg).unwrap(),
            RoceSocket::bind(any, cfg).unwrap(),
        )
    }

    fn recv_all(rx: &RoceSocket, want: usize) -> Vec<Vec<u8>> {
        let mut batch = RecvBatch::for_socket(rx, 16);
        let mut got = vec![];
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while got.len() < want && std::time::Instant::now() < end {
            if rx.recv_batch(&mut batch).unwrap() == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            got.extend(batch.datagrams().map(|d| d.data.to_vec()));
        }
        got
    }

    /// A GSO send the kernel refuses (more segments than UDP_MAX_SEGMENTS: EINVAL) turns GSO
    /// off and the datagrams still arrive, individually.
    #[test]
    fn gso_refusal_falls_back_to_plain_sends() {
        let (tx, rx) = pair(&SocketConfig::default());
        if !tx.capabilities().gso {
            eprintln!("kernel without UDP GSO: skipping");
            return;
        }
        // Pretend the kernel allows 250 segments: it allows 64 (or 128), so this GSO send of
        // 200 segments is refused with EINVAL.
        tx.gso_segments.store(250, Relaxed);
        let payloads: Vec<Vec<u8>> = (0..200u8).map(|i| vec![i; 16]).collect();
        let dst = rx.local_addr();
        let ts: Vec<_> = payloads
            .iter()
            .map(|p| Transmit { dst, payload: p })
            .collect();
        assert_eq!(tx.send_batch(&ts).unwrap(), 200);
        let s = tx.stats();
        assert_eq!(s.gso_fallbacks, 1, "{s:?}");
        assert!(!tx.gso_enabled());
        assert_eq!(s.datagrams_sent, 200);
        assert_eq!(s.send_errors, 0);
        assert_eq!(recv_all(&rx, 200), payloads);
    }

    #[test]
    fn oversized_datagram_is_dropped_and_counted() {
        let (tx, rx) = pair(&SocketConfig::plain());
        let big = vec![1u8; 70_000];
        let small = [2u8; 10];
        let dst = rx.local_addr();
        let ts = [
            Transmit {
                dst,
                payload: &small,
            },
            Transmit { dst, payload: &big },
            Transmit {
                dst,
                payload: &small,
            },
        ];
        assert_eq!(tx.send_batch(&ts).unwrap(), 3);
        let s = tx.stats();
        assert_eq!((s.datagrams_sent, s.send_errors), (2, 1));
        assert_eq!(s.last_send_errno, libc::EMSGSIZE);
        assert_eq!(recv_all(&rx, 2), vec![small.to_vec(), small.to_vec()]);
    }

    #[test]
    fn gro_socket_rejects_small_slots() {
        let (_, rx) = pair(&SocketConfig::default());
        if rx.capabilities().gro {
            let mut b = RecvBatch::new(4, 2048);
            let e = rx.recv_batch(&mut b).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        }
    }

    #[test]
    fn meta_segment_counts() {
        let m = |len, seg, truncated| RecvMeta {
            src: "127.0.0.1:1".parse().unwrap(),
            dst_ip: None,
            len,
            segment_size: seg,
            truncated,
        };
        assert_eq!(m(0, None, false).segments(), 1);
        assert_eq!(m(100, None, false).segments(), 1);
        assert_eq!(m(100, Some(40), false).segments(), 3);
        assert_eq!(m(120, Some(40), false).segments(), 3);
        assert_eq!(m(100, None, true).segments(), 0);
    }
}
