//! Sleeping and waking: [`EventFd`], [`TimerFd`], and the [`Poller`] the engine's progress
//! thread blocks in.
//!
//! The progress thread calls [`Poller::wait`] with its next timer deadline; the call blocks in
//! `epoll_wait` (0 % CPU) until a registered socket is readable, another thread calls
//! [`Waker::wake`], or the deadline passes. Deadlines have nanosecond precision: through
//! `epoll_pwait2` (Linux ≥ 5.11) when the kernel has it, else through a `timerfd` registered
//! in the epoll set. Neither ever returns before the deadline.
//!
//! Cost note for this VM (reference/baselines.md): waking a thread blocked on the other vCPU
//! costs 40–75 µs, so latency-critical paths should busy-poll instead of waking;
//! [`Waker::wake`] at least skips the `write(2)` when a wake-up is already pending.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::socket::RoceSocket;
use crate::sys::{self, EpollTimeout};

/// Options for [`EventFd::with_options`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventFdOptions {
    /// `EFD_SEMAPHORE`: each read returns 1 and decrements the counter by 1 (instead of
    /// returning and clearing the whole counter).
    pub semaphore: bool,
    /// Make reads block (no `O_NONBLOCK`), as `ibv_get_cq_event`/`rdma_get_cm_event` expect of
    /// a completion or event channel fd unless the application sets `O_NONBLOCK` itself.
    pub blocking: bool,
}

impl EventFdOptions {
    setters! {
        /// Sets [`EventFdOptions::semaphore`].
        semaphore(on: bool) => semaphore;
        /// Sets [`EventFdOptions::blocking`].
        blocking(on: bool) => blocking;
    }
}

/// An `eventfd(2)`: a kernel counter usable as a wake-up or event-channel fd. Always
/// close-on-exec.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
    semaphore: bool,
}

impl EventFd {
    /// A non-blocking counter-mode eventfd.
    pub fn new() -> io::Result<EventFd> {
        Self::with_options(EventFdOptions::default())
    }

    /// An eventfd with the given options.
    pub fn with_options(opts: EventFdOptions) -> io::Result<EventFd> {
        let mut flags = libc::EFD_CLOEXEC;
        if opts.semaphore {
            flags |= libc::EFD_SEMAPHORE;
        }
        if !opts.blocking {
            flags |= libc::EFD_NONBLOCK;
        }
        Ok(EventFd {
            fd: sys::eventfd(flags)?,
            semaphore: opts.semaphore,
        })
    }

    /// Adds 1 to the counter, making the fd readable.
    pub fn notify(&self) -> io::Result<()> {
        self.add(1)
    }

    /// Adds `n` to the counter. A counter already at its maximum stays readable, so the
    /// resulting `EAGAIN` (non-blocking mode) is not an error.
    pub fn add(&self, n: u64) -> io::Result<()> {
        match sys::write_u64(self.fd.as_fd(), n) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            r => r,
        }
    }

    /// One `read(2)`: the counter (then zero), or 1 in semaphore mode. Blocks while the
    /// counter is 0 if the fd is in blocking mode; fails with `WouldBlock` otherwise.
    pub fn read(&self) -> io::Result<u64> {
        sys::read_u64(self.fd.as_fd())
    }

    /// Like [`EventFd::read`], but a signal handler (installed without
    /// `SA_RESTART`) interrupting the wait ends it with `Interrupted`: what
    /// blocking event calls need (qperf ends its tests with `SIGALRM`
    /// interrupting `ibv_get_cq_event`).
    pub fn read_interruptible(&self) -> io::Result<u64> {
        sys::read_u64_once(self.fd.as_fd())
    }

    /// Like [`EventFd::read`] but never blocks: `Ok(None)` if the counter is 0. On a
    /// blocking-mode fd this checks with `poll(2)` first, so it can still block if another
    /// thread reads the fd between the check and the read.
    pub fn try_read(&self) -> io::Result<Option<u64>> {
        if !self.is_nonblocking()? && !sys::poll_readable(self.fd.as_fd(), 0)? {
            return Ok(None);
        }
        match self.read() {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Consumes everything pending and returns the total (0 if nothing). In semaphore mode
    /// this reads one unit per system call.
    pub fn drain(&self) -> io::Result<u64> {
        let mut total = 0u64;
        while let Some(v) = self.try_read()? {
            total = total.saturating_add(v);
            if !self.semaphore {
                break;
            }
        }
        Ok(total)
    }

    /// Blocks until the fd is readable or `timeout` passes (`None` = forever), without
    /// consuming anything. Returns whether it is readable.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let ms = match timeout {
            None => -1,
            Some(d) => d.as_millis().min(i32::MAX as u128) as libc::c_int,
        };
        sys::poll_readable(self.fd.as_fd(), ms)
    }

    /// Whether the fd is in semaphore mode.
    pub fn is_semaphore(&self) -> bool {
        self.semaphore
    }

    /// Switches `O_NONBLOCK`.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        sys::set_nonblocking(self.fd.as_fd(), on)
    }

    /// Whether `O_NONBLOCK` is set (the application may have changed it through the raw fd).
    pub fn is_nonblocking(&self) -> io::Result<bool> {
        sys::is_nonblocking(self.fd.as_fd())
    }
}

impl_as_fd!(EventFd, TimerFd);

impl IntoRawFd for EventFd {
    fn into_raw_fd(self) -> RawFd {
        self.fd.into_raw_fd()
    }
}

impl From<EventFd> for OwnedFd {
    fn from(e: EventFd) -> OwnedFd {
        e.fd
    }
}

/// A one-shot `timerfd(2)` on `CLOCK_MONOTONIC` (the clock `Instant` uses). Non-blocking,
/// close-on-exec.
#[derive(Debug)]
pub struct TimerFd {
    fd: OwnedFd,
}

impl TimerFd {
    /// A disarmed timer.
    pub fn new() -> io::Result<TimerFd> {
        Ok(TimerFd {
            fd: sys::timerfd()?,
        })
    }

    /// Fires once at `deadline` (immediately if it has passed). Never fires early: the
    /// remaining time is computed just before arming.
    pub fn set_deadline(&self, deadline: Instant) -> io::Result<()> {
        self.set_after(deadline.saturating_duration_since(Instant::now()))
    }

    /// Fires once after `after`.
    pub fn set_after(&self, after: Duration) -> io::Result<()> {
        sys::timerfd_set(self.fd.as_fd(), Some(after))
    }

    /// Stops the timer.
    pub fn disarm(&self) -> io::Result<()> {
        sys::timerfd_set(self.fd.as_fd(), None)
    }

    /// Consumes and returns the number of expirations since the last call (0 if none).
    pub fn expirations(&self) -> io::Result<u64> {
        match sys::read_u64(self.fd.as_fd()) {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }
}

/// How [`Poller::wait`] implements deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerMode {
    /// The `epoll_pwait2` timeout (one system call per wait; Linux ≥ 5.11).
    EpollPwait2,
    /// A `timerfd` in the epoll set (re-armed only when the deadline changes).
    TimerFd,
}

/// What woke [`Poller::wait`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Events {
    /// A socket added with [`Poller::add_socket`] is readable.
    pub socket_readable: bool,
    /// A socket whose write interest is on ([`Poller::set_socket_writable`]) is writable.
    pub socket_writable: bool,
    /// [`Waker::wake`] was called (the wake-up is consumed).
    pub woken: bool,
    /// The deadline has passed (checked against `Instant::now()`).
    pub timer: bool,
    /// Readable sources (sockets and fds), one bit per key.
    pub readable: u64,
    /// Writable sources, one bit per key.
    pub writable: u64,
}

impl Events {
    /// Nothing happened.
    pub fn is_empty(&self) -> bool {
        !self.woken && !self.timer && self.readable == 0 && self.writable == 0
    }

    /// Whether the source registered under `key` is readable.
    pub fn is_readable(&self, key: u8) -> bool {
        key <= Poller::MAX_KEY && self.readable & (1 << key) != 0
    }

    /// Whether the source registered under `key` is writable.
    pub fn is_writable(&self, key: u8) -> bool {
        key <= Poller::MAX_KEY && self.writable & (1 << key) != 0
    }
}

/// Which readiness a source is watched for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    /// `EPOLLIN`.
    Readable,
    /// `EPOLLOUT`.
    Writable,
    /// Both.
    ReadWrite,
}

impl Interest {
    fn bits(self) -> u32 {
        let (r, w) = (libc::EPOLLIN as u32, libc::EPOLLOUT as u32);
        match self {
            Interest::Readable => r,
            Interest::Writable => w,
            Interest::ReadWrite => r | w,
        }
    }
}

const KEY_WAKER: u64 = 64;
const KEY_TIMER: u64 = 65;
const EVENTS_PER_WAIT: usize = 32;

#[derive(Debug)]
struct WakerInner {
    efd: EventFd,
    /// A wake-up is signalled and not yet consumed: further wakes skip the `write(2)`.
    pending: AtomicBool,
}

/// Wakes a [`Poller`] from any thread. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Waker {
    inner: Arc<WakerInner>,
}

impl Waker {
    /// Makes the poller's current or next [`Poller::wait`] return with
    /// [`Events::woken`]. Publish the work first (queue, flag), then wake; the waiter must
    /// look at the work after `wait` returns. Repeated wakes before the poller consumes one
    /// cost no system call.
    pub fn wake(&self) -> io::Result<()> {
        if self.inner.pending.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.efd.notify()
    }
}

/// An epoll set with a built-in [`Waker`] and nanosecond deadlines; the engine's progress
/// thread blocks in [`Poller::wait`].
///
/// Sources (sockets and other fds) are registered under a key 0..=63 that [`Events`] reports
/// as a bit. Level-triggered: a socket stays "readable" until drained. `wait` is meant to be
/// called by one thread at a time; registration and waking work from any thread.
#[derive(Debug)]
pub struct Poller {
    epfd: OwnedFd,
    waker: Arc<WakerInner>,
    mode: TimerMode,
    timer: Option<TimerFd>,
    /// Deadline the timerfd is armed for (TimerFd mode).
    armed: Mutex<Option<Instant>>,
    /// Keys registered as sockets.
    sockets: AtomicU64,
}

impl Poller {
    /// Highest source key.
    pub const MAX_KEY: u8 = 63;

    /// A poller using `epoll_pwait2` if the kernel has it, else a timerfd.
    pub fn new() -> io::Result<Poller> {
        match Self::with_mode(TimerMode::EpollPwait2) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                Self::with_mode(TimerMode::TimerFd)
            }
            r => r,
        }
    }

    /// A poller with a given deadline mechanism; `EpollPwait2` fails with `ENOSYS` on kernels
    /// without it.
    pub fn with_mode(mode: TimerMode) -> io::Result<Poller> {
        let epfd = sys::epoll_create()?;
        if mode == TimerMode::EpollPwait2 {
            let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 1];
            sys::epoll_wait(epfd.as_fd(), &mut ev, EpollTimeout::Precise(Duration::ZERO))?;
        }
        let efd = EventFd::new()?;
        let r = libc::EPOLLIN as u32;
        sys::epoll_ctl(
            epfd.as_fd(),
            libc::EPOLL_CTL_ADD,
            efd.as_raw_fd(),
            r,
            KEY_WAKER,
        )?;
        let timer = if mode == TimerMode::TimerFd {
            let t = TimerFd::new()?;
            sys::epoll_ctl(
                epfd.as_fd(),
                libc::EPOLL_CTL_ADD,
                t.as_raw_fd(),
                r,
                KEY_TIMER,
            )?;
            Some(t)
        } else {
            None
        };
        Ok(Poller {
            epfd,
            waker: Arc::new(WakerInner {
                efd,
                pending: AtomicBool::new(false),
            }),
            mode,
            timer,
            armed: Mutex::new(None),
            sockets: AtomicU64::new(0),
        })
    }

    /// The deadline mechanism in use.
    pub fn timer_mode(&self) -> TimerMode {
        self.mode
    }

    /// A handle that wakes this poller from any thread.
    pub fn waker(&self) -> Waker {
        Waker {
            inner: Arc::clone(&self.waker),
        }
    }

    fn check_key(key: u8) -> io::Result<u64> {
        if key > Self::MAX_KEY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "poller keys are 0..=63",
            ));
        }
        Ok(u64::from(key))
    }

    /// Watches `sock` for readability under `key`; reported as [`Events::socket_readable`].
    pub fn add_socket(&self, sock: &RoceSocket, key: u8) -> io::Result<()> {
        self.add_fd(sock.as_fd(), key, Interest::Readable)?;
        self.sockets.fetch_or(1 << key, Ordering::Relaxed);
        Ok(())
    }

    /// Turns write interest on `sock` on or off (turn it on after `send_batch` was pushed
    /// back, off once it drained; left on, a writable socket makes every wait return).
    pub fn set_socket_writable(&self, sock: &RoceSocket, key: u8, on: bool) -> io::Result<()> {
        let i = if on {
            Interest::ReadWrite
        } else {
            Interest::Readable
        };
        self.modify_fd(sock.as_fd(), key, i)
    }

    /// Watches any fd under `key`.
    pub fn add_fd(&self, fd: BorrowedFd<'_>, key: u8, interest: Interest) -> io::Result<()> {
        self.watch(libc::EPOLL_CTL_ADD, fd, key, interest)
    }

    /// Changes the interest (and key) of a registered fd.
    pub fn modify_fd(&self, fd: BorrowedFd<'_>, key: u8, interest: Interest) -> io::Result<()> {
        self.watch(libc::EPOLL_CTL_MOD, fd, key, interest)
    }

    /// `epoll_ctl` `op` (add or modify) for `fd` with `interest`, reported under `key`.
    fn watch(
        &self,
        op: libc::c_int,
        fd: BorrowedFd<'_>,
        key: u8,
        interest: Interest,
    ) -> io::Result<()> {
        let k = Self::check_key(key)?;
        sys::epoll_ctl(self.epfd.as_fd(), op, fd.as_raw_fd(), interest.bits(), k)
    }

    /// Stops watching `fd` (registered under `key`).
    pub fn remove_fd(&self, fd: BorrowedFd<'_>, key: u8) -> io::Result<()> {
        let k = Self::check_key(key)?;
        sys::epoll_ctl(self.epfd.as_fd(), libc::EPOLL_CTL_DEL, fd.as_raw_fd(), 0, 0)?;
        self.sockets.fetch_and(!(1 << k), Ordering::Relaxed);
        Ok(())
    }

    /// Blocks until something happens or `deadline` passes (`None`: no deadline).
    ///
    /// Returns at least one event. [`Events::timer`] is set iff `Instant::now() >= deadline`
    /// on return, so it is never early; spurious kernel wake-ups (signals, a stale timer) are
    /// absorbed. A deadline in the past makes this a non-blocking poll.
    pub fn wait(&self, deadline: Option<Instant>) -> io::Result<Events> {
        self.wait_inner(deadline, false)
    }

    /// Like [`Poller::wait`], but a signal handler (installed without
    /// `SA_RESTART`) interrupting the wait ends it with `Interrupted`, as it
    /// ends the `read(2)` of a blocking event call.
    pub fn wait_interruptible(&self, deadline: Option<Instant>) -> io::Result<Events> {
        self.wait_inner(deadline, true)
    }

    fn wait_inner(&self, deadline: Option<Instant>, interruptible: bool) -> io::Result<Events> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; EVENTS_PER_WAIT];
        loop {
            let timeout = match deadline {
                None => EpollTimeout::Infinite,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => match &self.timer {
                        None => EpollTimeout::Precise(left),
                        Some(t) => {
                            let mut armed =
                                self.armed.lock().unwrap_or_else(PoisonError::into_inner);
                            if *armed != Some(d) {
                                t.set_after(left)?;
                                *armed = Some(d);
                            }
                            EpollTimeout::Infinite
                        }
                    },
                    _ => EpollTimeout::Zero,
                },
            };
            let n = match sys::epoll_wait(self.epfd.as_fd(), &mut evs, timeout) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted && !interruptible => 0,
                r => r?,
            };
            let mut out = Events::default();
            for ev in &evs[..n] {
                let (bits, key) = (ev.events, ev.u64);
                match key {
                    KEY_WAKER => {
                        // Drain first, then clear `pending` (see `Waker::wake`): a wake racing
                        // with this either finds `pending` still set (and its work is seen by
                        // our caller, who looks after we return) or writes the fd again.
                        self.waker.efd.drain()?;
                        self.waker.pending.swap(false, Ordering::AcqRel);
                        out.woken = true;
                    }
                    KEY_TIMER => {
                        if let Some(t) = &self.timer {
                            t.expirations()?;
                        }
                        *self.armed.lock().unwrap_or_else(PoisonError::into_inner) = None;
                    }
                    k if k < 64 => {
                        let bit = 1u64 << k;
                        let err = (libc::EPOLLERR | libc::EPOLLHUP) as u32;
                        if bits & (libc::EPOLLIN as u32 | err) != 0 {
                            out.readable |= bit;
                        }
                        if bits & (libc::EPOLLOUT as u32 | err) != 0 {
                            out.writable |= bit;
                        }
                    }
                    _ => {}
                }
            }
            let sockets = self.sockets.load(Ordering::Relaxed);
            out.socket_readable = out.readable & sockets != 0;
            out.socket_writable = out.writable & sockets != 0;
            out.timer = deadline.is_some_and(|d| Instant::now() >= d);
            if !out.is_empty() {
                return Ok(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_counter_and_semaphore() {
        let e = EventFd::new().unwrap();
        assert_eq!(e.try_read().unwrap(), None);
        assert_eq!(e.drain().unwrap(), 0);
        e.notify().unwrap();
        e.add(4).unwrap();
        assert_eq!(e.drain().unwrap(), 5);
        assert_eq!(e.read().unwrap_err().kind(), io::ErrorKind::WouldBlock);

        let s = EventFd::with_options(EventFdOptions::default().semaphore(true)).unwrap();
        assert!(s.is_semaphore());
        s.add(3).unwrap();
        assert_eq!(s.read().unwrap(), 1);
        assert_eq!(s.try_read().unwrap(), Some(1));
        assert_eq!(s.drain().unwrap(), 1);
        assert_eq!(s.try_read().unwrap(), None);
    }

    #[test]
    fn blocking_eventfd_read_waits_for_notify() {
        let e = Arc::new(EventFd::with_options(EventFdOptions::default().blocking(true)).unwrap());
        assert!(!e.is_nonblocking().unwrap());
        assert_eq!(e.try_read().unwrap(), None, "try_read never blocks");
        let e2 = Arc::clone(&e);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            e2.add(2).unwrap();
        });
        assert_eq!(e.read().unwrap(), 2);
        t.join().unwrap();
        e.set_nonblocking(true).unwrap();
        assert!(e.is_nonblocking().unwrap());
        assert_eq!(e.read().unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert!(!e.wait_readable(Some(Duration::from_millis(1))).unwrap());
    }

    #[test]
    fn timerfd_fires_once() {
        let t = TimerFd::new().unwrap();
        assert_eq!(t.expirations().unwrap(), 0);
        t.set_after(Duration::ZERO).unwrap();
        assert!(sys::poll_readable(t.as_fd(), 1000).unwrap());
        assert_eq!(t.expirations().unwrap(), 1);
        t.set_deadline(Instant::now() + Duration::from_secs(60))
            .unwrap();
        t.disarm().unwrap();
        assert!(!sys::poll_readable(t.as_fd(), 20).unwrap());
    }

    #[test]
    fn repeated_wakes_coalesce() {
        let p = Poller::new().unwrap();
        let w = p.waker();
        for _ in 0..10 {
            w.wake().unwrap();
        }
        let ev = p.wait(None).unwrap();
        assert!(ev.woken && !ev.timer);
        // Consumed: a deadline wait now times out.
        let ev = p.wait(Some(Instant::now())).unwrap();
        assert!(!ev.woken && ev.timer);
        w.wake().unwrap();
        assert!(p.wait(None).unwrap().woken);
    }

    #[test]
    fn bad_keys_are_rejected() {
        let p = Poller::new().unwrap();
        let e = EventFd::new().unwrap();
        let err = p.add_fd(e.as_fd(), 64, Interest::Readable).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(!Events::default().is_readable(200));
    }
}
