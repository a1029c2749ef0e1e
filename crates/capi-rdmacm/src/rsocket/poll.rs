//! `rpoll` / `rselect` over a mix of rsockets and ordinary fds, as
//! rdma-core does it: check every entry without blocking (processing
//! completions, which may post credits), spin briefly, then arm each
//! rsocket's CQ and sleep in `poll(2)` on the fds that signal it (completion
//! channel, accept queue, pending connect) beside the ordinary fds.

use core::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::conn;
use super::sock::{self, Phase, settle};

const WAKE_UP_MS: c_int = 500;
/// Timeouts up to this are spent polling, not sleeping.
const SHORT_MS: c_int = 10;

/// The events of one rsocket now; `None` if `fd` is not an rsocket.
fn revents(fd: c_int, events: i16) -> Option<i16> {
    if let Some(d) = super::dgram::lookup(fd) {
        return Some(super::dgram::poll_events(&d, events));
    }
    let s = sock::lookup(fd).ok()?;
    let mut g = s.lock();
    settle(&mut g);
    let want = |b: i16| events & b;
    Some(match &mut g.phase {
        Phase::Connected(c) => {
            c.update_credits();
            c.poll_cq();
            c.update_credits();
            let mut r = 0;
            if c.conn_have_rdata() {
                r |= want(libc::POLLIN);
            }
            if c.can_send() {
                r |= want(libc::POLLOUT);
            }
            // rdma-core reports the hang-up as soon as the peer's disconnect
            // is seen, while data may still wait to be read; a program that
            // stops at POLLHUP (rstream's async mode) then loses the tail.
            // Like TCP (POLLHUP once nothing is left), it waits here.
            if c.s.state & conn::CONNECTED == 0 && !c.have_rdata() {
                r |= if c.s.state == conn::DISCONNECTED {
                    libc::POLLHUP
                } else {
                    libc::POLLERR
                };
            }
            r
        }
        Phase::Listening(l) if l.ready() => want(libc::POLLIN),
        Phase::Failed => want(libc::POLLIN | libc::POLLOUT) | libc::POLLERR,
        _ => 0,
    })
}

/// The fd to sleep on for an rsocket (arming its CQ); `None` with
/// `again` set if arming found work to look at first.
fn sleep_fd(fd: c_int, again: &mut bool) -> Option<c_int> {
    if let Some(d) = super::dgram::lookup(fd) {
        return Some(super::dgram::sleep_fd(&d, again));
    }
    let s = sock::lookup(fd).ok()?;
    let mut g = s.lock();
    match &mut g.phase {
        Phase::Connected(c) => {
            if !c.arm() || !c.prepare_sleep() {
                *again = true;
            }
            Some(c.fd())
        }
        Phase::Listening(l) => Some(l.efd),
        Phase::Connecting(p) => Some(p.efd),
        _ => None,
    }
}

fn check(fds: &mut [libc::pollfd]) -> c_int {
    let mut n = 0;
    for p in fds.iter_mut() {
        match revents(p.fd, p.events) {
            Some(r) => p.revents = r,
            None => {
                p.revents = 0;
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(p, 1, 0) };
            }
        }
        if p.revents != 0 {
            n += 1;
        }
    }
    n
}

/// Recent `rpoll` waits of the process, averaged (µs; `sock::spin_for`).
static RECENT_US: AtomicU64 = AtomicU64::new(0);

pub(super) fn rpoll(fds: &mut [libc::pollfd], timeout: c_int) -> Result<c_int, c_int> {
    let start = Instant::now();
    let spin = sock::spin_for(Duration::from_micros(RECENT_US.load(Ordering::Relaxed)));
    loop {
        let n = check(fds);
        if n > 0 || timeout == 0 {
            if n > 0 {
                let old = Duration::from_micros(RECENT_US.load(Ordering::Relaxed));
                let avg = sock::average_wait(old, start.elapsed());
                RECENT_US.store(avg.as_micros() as u64, Ordering::Relaxed);
            }
            return Ok(n);
        }
        // A caller that waits at most a few milliseconds (udpong's 1 ms
        // retransmission poll) is after latency: keep polling, which also
        // moves the device's packets (busy poll), for all of it.
        let short = timeout > 0 && timeout <= SHORT_MS;
        if start.elapsed() < spin || (short && start.elapsed().as_millis() < timeout as u128) {
            std::thread::yield_now();
            continue;
        }
        let mut again = false;
        let mut rfds: Vec<libc::pollfd> = fds
            .iter()
            .map(|p| {
                if sock::is_rsocket(p.fd) {
                    let fd = sleep_fd(p.fd, &mut again).unwrap_or(-1);
                    libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    }
                } else {
                    libc::pollfd {
                        fd: p.fd,
                        events: p.events,
                        revents: 0,
                    }
                }
            })
            .collect();
        if again {
            continue;
        }
        let mut ms = WAKE_UP_MS;
        if timeout > 0 {
            let left = timeout as i128 - start.elapsed().as_millis() as i128;
            if left <= 0 {
                return Ok(0);
            }
            ms = ms.min(left as c_int);
        }
        // SAFETY: `rfds` is a valid array of its length.
        let r = unsafe { libc::poll(rfds.as_mut_ptr(), rfds.len() as libc::nfds_t, ms) };
        if r < 0 {
            return Err(crate::guard::errno());
        }
        for (p, rp) in fds.iter().zip(&rfds) {
            if rp.revents != 0
                && let Some(d) = super::dgram::lookup(p.fd)
            {
                super::dgram::after_wake(&d);
            }
            if rp.revents != 0
                && let Ok(s) = sock::lookup(p.fd)
                && let Phase::Connected(c) = &mut s.lock().phase
            {
                c.take_event();
            }
        }
    }
}

/// `rselect` through `rpoll`; `ms` is the timeout (-1: none).
pub(super) fn rselect(
    nfds: c_int,
    rd: Option<&mut libc::fd_set>,
    wr: Option<&mut libc::fd_set>,
    ex: Option<&mut libc::fd_set>,
    ms: c_int,
) -> Result<c_int, c_int> {
    let mut fds = Vec::new();
    for fd in 0..nfds.max(0) {
        let mut ev = 0;
        // SAFETY: fd < nfds <= FD_SETSIZE (checked by the caller).
        unsafe {
            if rd.as_deref().is_some_and(|s| libc::FD_ISSET(fd, s)) {
                ev |= libc::POLLIN;
            }
            if wr.as_deref().is_some_and(|s| libc::FD_ISSET(fd, s)) {
                ev |= libc::POLLOUT;
            }
            if ev != 0 || ex.as_deref().is_some_and(|s| libc::FD_ISSET(fd, s)) {
                fds.push(libc::pollfd {
                    fd,
                    events: ev,
                    revents: 0,
                });
            }
        }
    }
    let n = rpoll(&mut fds, ms)?;
    let (mut rd, mut wr, mut ex) = (rd, wr, ex);
    for s in [rd.as_deref_mut(), wr.as_deref_mut(), ex.as_deref_mut()]
        .into_iter()
        .flatten()
    {
        // SAFETY: a valid fd_set.
        unsafe { libc::FD_ZERO(s) };
    }
    let mut cnt = 0;
    for p in &fds {
        // SAFETY: fds from the sets, below nfds.
        unsafe {
            if let Some(s) = rd.as_deref_mut()
                && p.revents & (libc::POLLIN | libc::POLLHUP) != 0
            {
                libc::FD_SET(p.fd, s);
                cnt += 1;
            }
            if let Some(s) = wr.as_deref_mut()
                && p.revents & libc::POLLOUT != 0
            {
                libc::FD_SET(p.fd, s);
                cnt += 1;
            }
            if let Some(s) = ex.as_deref_mut()
                && p.revents & !(libc::POLLIN | libc::POLLOUT) != 0
            {
                libc::FD_SET(p.fd, s);
                cnt += 1;
            }
        }
    }
    let _ = n;
    Ok(cnt)
}
