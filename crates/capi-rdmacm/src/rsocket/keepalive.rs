//! Keepalive, as rdma-core's rsockets do it (its `tcp_svc` thread): one
//! service thread per process keeps the sockets that have `SO_KEEPALIVE` on,
//! and every `TCP_KEEPIDLE` seconds (default 7200) sends each connected one a
//! keepalive control message, a zero-length RDMA WRITE WITH IMMEDIATE
//! `OP_CTRL | CTRL_KEEPALIVE` that the peer ignores. Its only job is the RC
//! transport's acknowledgement: a peer that no longer answers (its host or
//! process hung, the link gone) makes the write fail after the QP's retries,
//! the error completion marks the socket broken (`ETIMEDOUT`), and a reader
//! blocked in `rrecv` or `rpoll` on it wakes up.
//!
//! Beyond rdma-core, the thread also polls the socket's CQ before each
//! keepalive, so a program that makes no rsocket call for a long time does
//! not run out of control-message slots (rdma-core frees them only in the
//! program's own calls, and stops sending once all 4 are in flight).

use core::ffi::c_int;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::proto::CTRL_KEEPALIVE;
use super::sock::{Phase, RSock};

struct Entry {
    fd: c_int,
    sock: Weak<RSock>,
    period: Duration,
    next: Instant,
}

#[derive(Default)]
struct Svc {
    list: Mutex<Vec<Entry>>,
    changed: Condvar,
    /// The process that started the thread (a forked child has no thread
    /// and starts its own, forgetting its parent's sockets).
    started_by: Mutex<Option<u32>>,
}

fn svc() -> &'static Svc {
    static S: OnceLock<Svc> = OnceLock::new();
    S.get_or_init(Svc::default)
}

fn list(s: &Svc) -> MutexGuard<'_, Vec<Entry>> {
    s.list.lock().unwrap_or_else(|e| e.into_inner())
}

/// The period of `TCP_KEEPIDLE` seconds (at least one).
fn period(secs: c_int) -> Duration {
    Duration::from_secs(secs.max(1) as u64)
}

/// `SO_KEEPALIVE` on: keepalives every `secs` seconds from now on (the
/// socket's lock may be held: the service never takes the list's lock while
/// it holds a socket's).
pub(super) fn add(s: &Arc<RSock>, secs: c_int) {
    let svc = svc();
    let mut l = list(svc);
    {
        let mut by = svc.started_by.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::process::id();
        if *by != Some(me) {
            l.clear();
            // Without the thread, keepalives are not sent (as if the option
            // were off); nothing else depends on it.
            let r = std::thread::Builder::new()
                .name("rsocket-keepalive".into())
                .spawn(run);
            if r.is_ok() {
                *by = Some(me);
            }
        }
    }
    l.retain(|e| e.fd != s.fd);
    l.push(Entry {
        fd: s.fd,
        sock: Arc::downgrade(s),
        period: period(secs),
        next: Instant::now() + period(secs),
    });
    svc.changed.notify_all();
}

/// `TCP_KEEPIDLE` changed: the next keepalive is `secs` from now.
pub(super) fn modify(fd: c_int, secs: c_int) {
    let svc = svc();
    let mut l = list(svc);
    if let Some(e) = l.iter_mut().find(|e| e.fd == fd) {
        e.period = period(secs);
        e.next = Instant::now() + e.period;
        svc.changed.notify_all();
    }
}

/// `SO_KEEPALIVE` off, or the socket closed.
pub(super) fn remove(fd: c_int) {
    let svc = svc();
    list(svc).retain(|e| e.fd != fd);
}

/// The service thread: sleeps until the earliest keepalive is due (or the
/// list changes), then sends the due ones.
fn run() {
    let svc = svc();
    loop {
        let due: Vec<Arc<RSock>> = {
            let mut l = list(svc);
            l.retain(|e| e.sock.strong_count() > 0);
            let now = Instant::now();
            let next = l.iter().map(|e| e.next).min();
            match next {
                None => {
                    drop(svc.changed.wait(l));
                    continue;
                }
                Some(t) if t > now => {
                    drop(svc.changed.wait_timeout(l, t - now));
                    continue;
                }
                Some(_) => {}
            }
            let mut due = Vec::new();
            for e in l.iter_mut().filter(|e| e.next <= now) {
                e.next = now + e.period;
                if let Some(s) = e.sock.upgrade() {
                    due.push(s);
                }
            }
            due
        };
        for s in due {
            send(&s);
        }
    }
}

/// One keepalive, if the socket is connected and a control slot is free.
fn send(s: &RSock) {
    let mut g = s.lock();
    if let Phase::Connected(c) = &mut g.phase {
        c.poll_cq();
        if let Err(e) = c.send_ctrl(CTRL_KEEPALIVE) {
            c.fail(e);
        }
    }
}
