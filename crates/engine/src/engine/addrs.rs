//! The device's sockets, one per host address, and how the set follows the
//! host's addresses while the engine runs.
//!
//! The device socket (GID 0) is fixed; the other addresses' sockets live in
//! an immutable list behind an `Arc` that is replaced whole when an address
//! appears ([`Shared::refresh_addrs`], on a netlink notification). Readers
//! take a [`Sockets`] snapshot — one mutex acquisition and an `Arc` clone —
//! and index into it, so a batch's socket indices stay valid whatever
//! happens meanwhile, and nobody holds a lock while sending or receiving.
//! The transmit path keeps its snapshot between batches while the list's
//! generation (`more_gen`) is unchanged: one load per batch instead.
//! An address that goes away empties its GID entry (the others keep their
//! indices; a later address takes the first empty one), as rxe does, and
//! this process leaves its group there.

use super::{KEY_SOCKET, Shared, member_config, open_socket};
use crate::host::HostMember;
use softrdma_udp::RoceSocket;
use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;

/// The other host addresses' sockets with their groups (GID 1, 2, ...).
pub(super) type More = Arc<Vec<(Arc<RoceSocket>, Arc<HostMember>)>>;

/// A snapshot of the device's sockets: the device socket (index 0), then
/// the other addresses' in GID order.
pub(super) struct Sockets<'a> {
    dev: &'a RoceSocket,
    host: Option<&'a Arc<HostMember>>,
    more: Cow<'a, More>,
}

impl Sockets<'_> {
    /// Every socket with its group.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&RoceSocket, Option<&Arc<HostMember>>)> {
        std::iter::once((self.dev, self.host)).chain(self.more.iter().map(|(s, h)| (&**s, Some(h))))
    }

    /// The socket to send from `src` (the device socket if none is bound
    /// there).
    pub(super) fn index_of(&self, src: IpAddr) -> usize {
        if src == self.dev.local_addr().ip() {
            return 0;
        }
        self.more
            .iter()
            .position(|(s, _)| s.local_addr().ip() == src)
            .map_or(0, |i| i + 1)
    }

    /// The socket at `index` (the device socket if out of range).
    pub(super) fn at(&self, index: usize) -> &RoceSocket {
        index
            .checked_sub(1)
            .and_then(|i| self.more.get(i))
            .map_or(self.dev, |(s, _)| s)
    }

    /// Whether `ip` is one of the device's addresses.
    pub(super) fn has(&self, ip: IpAddr) -> bool {
        self.iter().any(|(s, _)| s.local_addr().ip() == ip)
    }
}

impl Shared {
    /// A snapshot of the device's sockets.
    pub(super) fn sockets(&self) -> Sockets<'_> {
        Sockets {
            dev: &self.socket,
            host: self.host.as_ref(),
            more: Cow::Owned(Arc::clone(
                &self.more.lock().unwrap_or_else(|p| p.into_inner()),
            )),
        }
    }

    /// [`Shared::sockets`] from `cached`, the transmit path's snapshot of
    /// the list with its generation, taken afresh only when the list changed.
    pub(super) fn sockets_cached<'a>(&'a self, cached: &'a mut Option<(u64, More)>) -> Sockets<'a> {
        let generation = self.more_gen.load(std::sync::atomic::Ordering::Acquire);
        if !matches!(cached, Some((g, _)) if *g == generation) {
            // Read under the lock after the generation: a change after the
            // load shows as a new generation next time.
            *cached = None;
        }
        let (_, more) = cached.get_or_insert_with(|| {
            let more = self.more.lock().unwrap_or_else(|p| p.into_inner());
            (generation, Arc::clone(&more))
        });
        Sockets {
            dev: &self.socket,
            host: self.host.as_ref(),
            more: Cow::Borrowed(more),
        }
    }

    /// Replaces the list (`more`, under its lock) with `next`, and bumps
    /// its generation so the transmit path's snapshot is taken afresh.
    fn replace_more(&self, more: &mut More, next: Vec<(Arc<RoceSocket>, Arc<HostMember>)>) {
        *more = Arc::new(next);
        self.more_gen
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// The netlink watch is readable: drains it, and if addresses changed,
    /// [`Shared::refresh_addrs`].
    pub(super) fn on_addr_change(&self) {
        if self.addr_watch.as_ref().is_some_and(|w| w.drain()) {
            self.refresh_addrs();
        }
    }

    /// The host's addresses changed (netlink said so): joins the device's
    /// group at each new one, adds it to the GID table and the CM's
    /// addresses. Runs on the progress thread.
    pub(super) fn refresh_addrs(&self) {
        let Some(h) = &self.host else { return };
        let primary = self.socket.local_addr();
        let gro = self.socket.capabilities().gro;
        let now = softrdma_udp::host_addrs();
        for &ip in &now {
            if self.sockets().has(ip) || ip.to_canonical() == primary.ip().to_canonical() {
                continue;
            }
            let Some((socket, member, stale)) =
                join_at(h, SocketAddr::new(ip, primary.port()), gro)
            else {
                continue;
            };
            let _ = self.poller.add_socket(&socket, KEY_SOCKET);
            let index = {
                let mut more = self.more.lock().unwrap_or_else(|p| p.into_inner());
                let mut next = Vec::clone(&more);
                next.push((Arc::new(socket), Arc::new(member)));
                self.replace_more(&mut more, next);
                more.len()
            };
            let gid = {
                let mut core = self.lock();
                let gid = core.ep.add_gid(ip);
                core.cm.add_addr(ip, gid);
                gid
            };
            if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
                eprintln!("softrdma: the host device is now also at {ip} (GID {gid})");
            }
            if stale {
                self.reconcile_soon(index);
            }
        }
        self.drop_gone_addrs(&now);
    }

    /// Leaves the groups at addresses the host no longer has (`now`: its
    /// addresses) and empties their GID entries, as rxe does; the device
    /// address (GID 0) stays.
    fn drop_gone_addrs(&self, now: &[IpAddr]) {
        let gone: Vec<(Arc<RoceSocket>, Arc<HostMember>)> = {
            let mut more = self.more.lock().unwrap_or_else(|p| p.into_inner());
            let (kept, gone): (Vec<_>, Vec<_>) = more
                .iter()
                .cloned()
                .partition(|(s, _)| now.contains(&s.local_addr().ip()));
            if gone.is_empty() {
                return;
            }
            self.replace_more(&mut more, kept);
            gone
        };
        for (socket, member) in gone {
            let ip = socket.local_addr().ip();
            let _ = self.poller.remove_fd(socket.as_fd(), KEY_SOCKET);
            member.leave(&socket);
            let gid = {
                let mut core = self.lock();
                let gid = core.ep.remove_gid(ip);
                if let Some(g) = gid {
                    core.cm.remove_addr(g);
                }
                gid
            };
            if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
                eprintln!("softrdma: the host device is no longer at {ip} (GID {gid:?} emptied)");
            }
        }
    }
}

/// Joins the host device's group at `addr` with the member slot of `h` (one
/// of the host's other addresses). `None` if the address cannot be bound (a
/// process of its own holds it, it went away), with a note under
/// `SOFTRDMA_DEBUG`. The bool: the group's table must be reconciled (as
/// `HostMember::join`).
pub(super) fn join_at(
    h: &HostMember,
    addr: SocketAddr,
    primary_gro: bool,
) -> Option<(RoceSocket, HostMember, bool)> {
    // One receive batch serves every socket: GRO only where the device
    // socket has it too.
    let sc = member_config(addr.ip(), primary_gro);
    let open = || open_socket(&softrdma_udp::AddrConfig::exact(addr), &sc);
    match h.join_more(addr, open) {
        Ok((m, s, stale)) => Some((s, m, stale)),
        Err(e) => {
            if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
                eprintln!("softrdma: the host device is not at {addr}: {e}");
            }
            None
        }
    }
}
