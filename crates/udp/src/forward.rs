//! Datagrams one member of a host device hands to another.
//!
//! The reuseport group's program steers by a table of which member's socket
//! sits at which index. When a member dies the kernel moves sockets at a
//! moment nobody chose, and until a reconciliation rebuilds the table some
//! datagrams reach the wrong member. That member forwards each one to its
//! owner through a unix datagram socket in the registry directory (mode
//! 0700: only the user's processes reach it), with the addresses it
//! arrived with, so a stale table delays a datagram instead of losing it.
//!
//! An envelope is [`HEADER_LEN`] bytes followed by the UDP payload as
//! received:
//!
//! ```text
//!  0  magic "SRFW"
//!  4  version (2)
//!  5  family of both addresses: 4 or 6
//!  6  source UDP port, big-endian
//!  8  source IP (16 bytes; an IPv4 address in the first 4)
//! 24  destination IP (the group address it arrived at), likewise
//! 40  payload length, big-endian u16
//! 42  payload
//! ```
//!
//! One unix datagram (a bundle) carries one or more envelopes back to back:
//! the kernel queues at most `net.unix.max_dgram_qlen` datagrams (10 by
//! default) per socket, and a burst (a GRO batch of a send window) sent one
//! envelope per datagram overflowed it whenever the owner's progress thread
//! was not scheduled within 2 ms, `ROOM_WAIT` (the `forward` test under load:
//! 4 runs in 20 lost datagrams).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bytes before the payload in an envelope.
pub const HEADER_LEN: usize = 42;
const MAGIC: [u8; 4] = *b"SRFW";
const VERSION: u8 = 2;
/// The largest bundle: well under the default socket send buffer (208 KiB),
/// which bounds a unix datagram.
const BUNDLE_MAX: usize = 64 * 1024;

/// How long a forward waits for room when the owner's queue is full (the
/// kernel queues at most `net.unix.max_dgram_qlen`, 10 by default, per
/// socket). Its progress thread drains the queue within one wake-up (tens
/// of µs); a stopped owner must not stall the forwarder for long.
const ROOM_WAIT: Duration = Duration::from_millis(2);

/// The envelope of `payload`, received from `src` at `dst_ip`. `None` if the
/// two addresses are of different families.
pub fn encode(src: SocketAddr, dst_ip: IpAddr, payload: &[u8]) -> Option<Vec<u8>> {
    let len = u16::try_from(payload.len()).ok()?;
    let mut e = Vec::with_capacity(HEADER_LEN + payload.len());
    e.extend_from_slice(&MAGIC);
    e.push(VERSION);
    match (src.ip(), dst_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            e.push(4);
            e.extend_from_slice(&src.port().to_be_bytes());
            e.extend_from_slice(&padded(&s.octets()));
            e.extend_from_slice(&padded(&d.octets()));
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            e.push(6);
            e.extend_from_slice(&src.port().to_be_bytes());
            e.extend_from_slice(&s.octets());
            e.extend_from_slice(&d.octets());
        }
        _ => return None,
    }
    e.extend_from_slice(&len.to_be_bytes());
    e.extend_from_slice(payload);
    Some(e)
}

fn padded(v4: &[u8; 4]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(v4);
    b
}

/// A forwarded datagram: where it came from, the address it arrived at, and
/// the UDP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forwarded<'a> {
    /// The sender's address and port.
    pub src: SocketAddr,
    /// The group address the datagram was sent to.
    pub dst_ip: IpAddr,
    /// The UDP payload (BTH on).
    pub payload: &'a [u8],
}

/// Parses an envelope; `None` for anything else (wrong magic or version, a
/// short or malformed header, a length other than the payload's).
pub fn decode(e: &[u8]) -> Option<Forwarded<'_>> {
    let (first, rest) = split_first(e)?;
    if !rest.is_empty() {
        return None;
    }
    decode_one(first)
}

/// The envelopes of a bundle, in order; it stops at the first malformed one
/// (what follows cannot be delimited).
pub fn envelopes(bundle: &[u8]) -> impl Iterator<Item = Forwarded<'_>> {
    let mut rest = bundle;
    std::iter::from_fn(move || {
        let (first, r) = split_first(rest)?;
        rest = r;
        decode_one(first)
    })
}

/// The first envelope of `b` and what follows it.
fn split_first(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let h = b.get(..HEADER_LEN)?;
    let len = usize::from(u16::from_be_bytes([h[40], h[41]]));
    (b.len() >= HEADER_LEN + len).then(|| b.split_at(HEADER_LEN + len))
}

/// One whole envelope.
fn decode_one(e: &[u8]) -> Option<Forwarded<'_>> {
    let h = e.get(..HEADER_LEN)?;
    if h[..4] != MAGIC || h[4] != VERSION {
        return None;
    }
    let port = u16::from_be_bytes([h[6], h[7]]);
    let ip = |b: &[u8]| -> Option<IpAddr> {
        let b: [u8; 16] = b.try_into().ok()?;
        match h[5] {
            4 => Some(Ipv4Addr::new(b[0], b[1], b[2], b[3]).into()),
            6 => Some(Ipv6Addr::from(b).into()),
            _ => None,
        }
    };
    Some(Forwarded {
        src: SocketAddr::new(ip(&h[8..24])?, port),
        dst_ip: ip(&h[24..40])?,
        payload: &e[HEADER_LEN..],
    })
}

/// Counters of a [`Forwarder`].
#[derive(Debug, Default)]
pub struct ForwardStats {
    /// Datagrams (envelopes) handed to another member.
    pub sent: AtomicU64,
    /// Datagrams that could not be handed over (nobody bound there, the
    /// queue stayed full); the caller decides what becomes of them.
    pub failed: AtomicU64,
    /// Envelopes received from other members.
    pub received: AtomicU64,
}

/// This member's end: the socket others forward to, and the means to
/// forward to them.
#[derive(Debug)]
pub struct Forwarder {
    /// First: forgotten before `inbox` closes.
    _fork_private: crate::fork_private::ForkPrivate,
    inbox: UnixDatagram,
    path: PathBuf,
    /// Connected sockets, one per member forwarded to (by the path it is
    /// bound at): a connected unix datagram socket waits for room in its
    /// peer's queue (up to its send timeout), an unconnected one cannot.
    links: Mutex<Vec<(PathBuf, UnixDatagram)>>,
    stats: ForwardStats,
}

impl Forwarder {
    /// Binds this member's socket at `path`, replacing what a former holder
    /// of the name left (the caller holds the name's member slot). The name
    /// stays when this is dropped: the slot's next holder may have bound it
    /// already, and replaces it anyway.
    pub fn bind(path: &Path) -> io::Result<Forwarder> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let inbox = UnixDatagram::bind(path)?;
        inbox.set_nonblocking(true)?;
        Ok(Forwarder {
            _fork_private: crate::fork_private::ForkPrivate::new(inbox.as_raw_fd()),
            inbox,
            path: path.to_path_buf(),
            links: Mutex::new(Vec::new()),
            stats: ForwardStats::default(),
        })
    }

    /// Where this member's socket is bound.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Counters.
    pub fn stats(&self) -> &ForwardStats {
        &self.stats
    }

    /// Hands `envelope` to the member bound at `to`. Waits up to
    /// `ROOM_WAIT` (2 ms) for room in its queue; an error means the datagram
    /// was not handed over (counted in [`ForwardStats::failed`]).
    pub fn forward(&self, to: &Path, envelope: &[u8]) -> io::Result<()> {
        match self.forward_all(to, &[envelope]) {
            (1, _) => Ok(()),
            (_, e) => Err(e.unwrap_or_else(|| io::Error::other("not forwarded"))),
        }
    }

    /// Hands `envelopes` to the member bound at `to`, in order, as few
    /// bundles as fit (64 KiB each). Returns how many were handed over
    /// (the first ones: after a bundle fails the rest are not tried) and the
    /// error that stopped it.
    pub fn forward_all(&self, to: &Path, envelopes: &[&[u8]]) -> (usize, Option<io::Error>) {
        let mut done = 0;
        let mut bundle = Vec::new();
        let mut err = None;
        while done < envelopes.len() {
            bundle.clear();
            let mut n = 0;
            for e in &envelopes[done..] {
                if n > 0 && bundle.len() + e.len() > BUNDLE_MAX {
                    break;
                }
                bundle.extend_from_slice(e);
                n += 1;
            }
            if let Err(e) = self.send_bundle(to, &bundle) {
                err = Some(e);
                break;
            }
            done += n;
        }
        self.stats.sent.fetch_add(done as u64, Ordering::Relaxed);
        self.stats
            .failed
            .fetch_add((envelopes.len() - done) as u64, Ordering::Relaxed);
        (done, err)
    }

    fn send_bundle(&self, to: &Path, envelope: &[u8]) -> io::Result<()> {
        let mut links = self.links.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = links.iter().position(|(p, _)| p == to) {
            match links[i].1.send(envelope) {
                Ok(_) => return Ok(()),
                // A link to an earlier holder of the name (its socket is
                // closed): connect again, to whoever is bound there now.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ECONNREFUSED | libc::ENOTCONN | libc::ECONNRESET)
                    ) =>
                {
                    links.swap_remove(i);
                }
                Err(e) => return Err(e),
            }
        }
        let l = UnixDatagram::unbound()?;
        l.connect(to)?;
        l.set_write_timeout(Some(ROOM_WAIT))?;
        l.send(envelope)?;
        links.push((to.to_path_buf(), l));
        Ok(())
    }

    /// Receives one bundle into `buf` (resized to hold the largest);
    /// `Ok(None)` when none is waiting. The caller splits it with
    /// [`envelopes`] (which rejects garbage).
    pub fn recv<'b>(&self, buf: &'b mut Vec<u8>) -> io::Result<Option<&'b [u8]>> {
        buf.resize(BUNDLE_MAX.max(HEADER_LEN + crate::MAX_UDP_PAYLOAD), 0);
        match self.inbox.recv(buf) {
            Ok(n) => {
                let bundle = &buf[..n];
                self.stats
                    .received
                    .fetch_add(envelopes(bundle).count() as u64, Ordering::Relaxed);
                Ok(Some(bundle))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl AsFd for Forwarder {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inbox.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "softrdma-fwd-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn envelopes_keep_addresses_and_payload() {
        let src: SocketAddr = "10.1.2.3:49152".parse().unwrap();
        let dst: IpAddr = "127.0.0.1".parse().unwrap();
        let e = encode(src, dst, b"bth and more").unwrap();
        assert_eq!(e.len(), HEADER_LEN + 12);
        let f = decode(&e).unwrap();
        assert_eq!(
            (f.src, f.dst_ip, f.payload),
            (src, dst, &b"bth and more"[..])
        );

        let src6: SocketAddr = "[fd00::7]:4791".parse().unwrap();
        let dst6: IpAddr = "::1".parse().unwrap();
        let e6 = encode(src6, dst6, &[]).unwrap();
        let f6 = decode(&e6).unwrap();
        assert_eq!((f6.src, f6.dst_ip, f6.payload.len()), (src6, dst6, 0));

        assert!(encode(src, dst6, b"x").is_none(), "mixed families");
        assert!(decode(&e[..HEADER_LEN - 1]).is_none(), "short");
        let mut bad = e.clone();
        bad[0] = b'X';
        assert!(decode(&bad).is_none(), "magic");
        let mut bad = e.clone();
        bad[5] = 5;
        assert!(decode(&bad).is_none(), "family");
        let mut bad = e.clone();
        bad[41] += 1;
        assert!(decode(&bad).is_none(), "length past the end");
        let mut long = e.clone();
        long.push(0);
        assert!(decode(&long).is_none(), "bytes after the payload");
    }

    fn numbered(i: usize, len: usize) -> Vec<u8> {
        let payload: Vec<u8> = (0..len).map(|k| (i + k) as u8).collect();
        encode(
            SocketAddr::new([10, 0, 0, (i % 200) as u8].into(), 4791),
            [127, 0, 0, 1].into(),
            &payload,
        )
        .unwrap()
    }

    /// A burst larger than the owner's queue (10 datagrams) arrives whole
    /// and in order with nobody draining meanwhile: it travels in bundles.
    #[test]
    fn a_burst_travels_in_bundles_in_order() {
        let d = dir();
        let a = Forwarder::bind(&d.join("fwd-1")).unwrap();
        let b = Forwarder::bind(&d.join("fwd-2")).unwrap();
        // 200 datagrams of 1100 bytes: 4 bundles.
        let sent: Vec<Vec<u8>> = (0..200).map(|i| numbered(i, 1100)).collect();
        let refs: Vec<&[u8]> = sent.iter().map(|e| &e[..]).collect();
        let (done, err) = a.forward_all(b.path(), &refs);
        assert_eq!((done, err.map(|e| e.kind())), (200, None));
        assert_eq!(a.stats().sent.load(Ordering::Relaxed), 200);
        let mut buf = Vec::new();
        let (mut bundles, mut got) = (0, Vec::new());
        while let Some(bundle) = b.recv(&mut buf).unwrap() {
            bundles += 1;
            assert!(bundle.len() <= BUNDLE_MAX);
            got.extend(envelopes(bundle).map(|f| (f.src, f.payload.to_vec())));
        }
        assert_eq!(bundles, 4);
        assert_eq!(b.stats().received.load(Ordering::Relaxed), 200);
        let want: Vec<_> = sent
            .iter()
            .map(|e| decode(e).map(|f| (f.src, f.payload.to_vec())).unwrap())
            .collect();
        assert_eq!(got, want);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A bundle cut short or with garbage after good envelopes yields the
    /// good ones and stops there.
    #[test]
    fn a_bad_envelope_ends_its_bundle() {
        let mut bundle = numbered(1, 10);
        bundle.extend_from_slice(&numbered(2, 20));
        let whole = bundle.len();
        bundle.extend_from_slice(&numbered(3, 30)[..HEADER_LEN + 5]);
        assert_eq!(envelopes(&bundle).count(), 2, "cut short");
        bundle.truncate(whole);
        bundle.extend_from_slice(b"garbage that is long enough to be a header, or is it");
        assert_eq!(envelopes(&bundle).count(), 2, "garbage");
        assert_eq!(envelopes(&bundle[..5]).count(), 0);
    }

    #[test]
    fn a_forward_reaches_the_member_bound_there() {
        let d = dir();
        let a = Forwarder::bind(&d.join("fwd-1")).unwrap();
        let b = Forwarder::bind(&d.join("fwd-2")).unwrap();
        let mut buf = Vec::new();
        assert_eq!(b.recv(&mut buf).unwrap(), None, "nothing yet");
        let e = encode(
            "127.0.0.1:4791".parse().unwrap(),
            [127, 0, 0, 1].into(),
            b"p",
        )
        .unwrap();
        a.forward(b.path(), &e).unwrap();
        assert_eq!(b.recv(&mut buf).unwrap(), Some(&e[..]));
        assert_eq!(a.stats().sent.load(Ordering::Relaxed), 1);
        assert_eq!(b.stats().received.load(Ordering::Relaxed), 1);

        // The slot's next holder binds the same name: the link reconnects.
        drop(b);
        assert!(a.forward(&d.join("fwd-2"), &e).is_err(), "nobody there");
        let b2 = Forwarder::bind(&d.join("fwd-2")).unwrap();
        a.forward(b2.path(), &e).unwrap();
        assert_eq!(b2.recv(&mut buf).unwrap(), Some(&e[..]));
        assert_eq!(a.stats().failed.load(Ordering::Relaxed), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_full_queue_fails_after_a_short_wait() {
        let d = dir();
        let a = Forwarder::bind(&d.join("fwd-1")).unwrap();
        let b = Forwarder::bind(&d.join("fwd-2")).unwrap();
        let e = encode(
            "127.0.0.1:4791".parse().unwrap(),
            [127, 0, 0, 1].into(),
            b"p",
        )
        .unwrap();
        let t0 = std::time::Instant::now();
        let mut sent = 0;
        while a.forward(b.path(), &e).is_ok() {
            sent += 1;
            assert!(sent < 100_000, "a queue without a limit");
        }
        assert!(sent >= 1, "the queue takes some");
        assert!(t0.elapsed() < Duration::from_secs(5), "bounded wait");
        // Drained, it takes more again.
        let mut buf = Vec::new();
        let mut got = 0;
        while b.recv(&mut buf).unwrap().is_some() {
            got += 1;
        }
        assert_eq!(got, sent, "every forward that succeeded arrived");
        a.forward(b.path(), &e).unwrap();
        let _ = std::fs::remove_dir_all(&d);
    }
}
