//! Completion and async event channels: a real eventfd plus a side queue, so
//! waiters block in `read(2)` (a cancellation point) and can also poll the fd.

use softrdma_transport::{AsyncEventType, CqHandle, Qpn, SrqHandle};
use softrdma_udp::{EventFd, EventFdOptions};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, Weak};

/// The device's side of a blocking [`CompChannel::get_event`]: the waiting
/// thread itself receives the device's packets until its channel fires, so
/// a completion costs one wake-up (the packet's, of the thread that wants
/// it) instead of two (the progress thread's, then the channel's).
pub(crate) trait Receiver: Send + Sync + std::fmt::Debug {
    /// A thread is about to block for an event; `receives`: it will try
    /// [`Receiver::wait_receiving`] (its channel blocks). Otherwise the
    /// progress thread must receive for it.
    fn before_block(&self, receives: bool);
    /// Waits until `efd`, of the channel numbered `channel`, is readable
    /// (without consuming it), receiving the device's packets meanwhile;
    /// `ready`: whether the channel holds an event (its eventfd is
    /// readable, or is about to be), asked while the thread spins instead
    /// of an `epoll_wait`.
    /// `Ok(false)`: this thread cannot receive here (another one does, or
    /// this is a forked child): the caller blocks in `read(2)` as before,
    /// the progress thread receiving. A signal handler ends the wait with
    /// `Interrupted`.
    fn wait_receiving(
        &self,
        channel: u64,
        efd: &EventFd,
        ready: &dyn Fn() -> bool,
    ) -> io::Result<bool>;
    /// The channel numbered `channel` goes away (its `efd` still open).
    fn channel_closed(&self, channel: u64, efd: &EventFd);
}

/// Numbers channels for [`Receiver`]: an fd number may be reused by the
/// next channel once one closes.
static NEXT_CHANNEL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A queue whose eventfd (semaphore mode) counts what it holds: readable
/// while an entry waits. Behind the CM's event channels and libibumad's MAD
/// ports.
#[derive(Debug)]
pub(crate) struct EventQueue<T> {
    efd: EventFd,
    pending: Mutex<VecDeque<T>>,
}

impl<T> EventQueue<T> {
    /// An empty queue; `blocking`: whether `read(2)` on its eventfd blocks.
    pub(crate) fn new(blocking: bool) -> io::Result<EventQueue<T>> {
        Ok(EventQueue {
            efd: EventFd::with_options(
                EventFdOptions::default().semaphore(true).blocking(blocking),
            )?,
            pending: Mutex::new(VecDeque::new()),
        })
    }

    pub(crate) fn efd(&self) -> &EventFd {
        &self.efd
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<T>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `t` and counts it.
    pub(crate) fn push(&self, t: T) {
        self.lock().push_back(t);
        let _ = self.efd.notify();
    }

    /// The oldest entry, once its count was read off the eventfd.
    pub(crate) fn pop_counted(&self) -> Option<T> {
        self.lock().pop_front()
    }

    /// The oldest entry if `take` accepts it (its count goes with it);
    /// `Some(Err(()))` if it stays queued.
    pub(crate) fn pop_if(&self, take: impl FnOnce(&T) -> bool) -> Option<Result<T, ()>> {
        let mut p = self.lock();
        if !take(p.front()?) {
            return Some(Err(()));
        }
        let _ = self.efd.try_read();
        p.pop_front().map(Ok)
    }

    /// Drops the entries `keep` refuses, and their counts.
    pub(crate) fn retain(&self, keep: impl FnMut(&T) -> bool) {
        let mut p = self.lock();
        let before = p.len();
        p.retain(keep);
        for _ in p.len()..before {
            let _ = self.efd.try_read();
        }
    }
}

impl<T> AsRawFd for EventQueue<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }
}

/// A completion channel: CQs armed with it queue themselves here when they fire.
#[derive(Debug)]
pub struct CompChannel {
    id: u64,
    efd: EventFd,
    pending: Mutex<VecDeque<CqHandle>>,
    receiver: Option<Weak<dyn Receiver>>,
}

impl CompChannel {
    /// A channel whose waits only block (tests).
    #[cfg(test)]
    pub(crate) fn new() -> io::Result<CompChannel> {
        Self::with_receiver(None)
    }

    /// A channel whose blocking waits receive through `receiver`.
    pub(crate) fn with_receiver(receiver: Option<Weak<dyn Receiver>>) -> io::Result<CompChannel> {
        Ok(CompChannel {
            id: NEXT_CHANNEL.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            efd: EventFd::with_options(EventFdOptions::default().semaphore(true).blocking(true))?,
            pending: Mutex::new(VecDeque::new()),
            receiver,
        })
    }

    pub(crate) fn notify(&self, cq: CqHandle) {
        self.pending.lock().expect("channel lock").push_back(cq);
        // An eventfd write only fails on counter overflow (2^64 - 2 events).
        let _ = self.efd.notify();
    }

    /// Blocks (unless the fd was made non-blocking) until a CQ fired; returns it.
    /// A signal handler interrupting the wait ends it with `Interrupted`, as
    /// `ibv_get_cq_event` does.
    pub fn get_event(&self) -> io::Result<CqHandle> {
        let receiver = self.receiver.as_ref().and_then(Weak::upgrade);
        // Blocking (a non-blocking fd reads at once, or fails): the
        // device's packets are received in this thread meanwhile.
        let blocking = !self.efd.is_nonblocking()?;
        if let Some(r) = &receiver {
            r.before_block(blocking);
        }
        loop {
            if blocking && let Some(r) = &receiver {
                let ready = || !self.pending.lock().expect("channel lock").is_empty();
                r.wait_receiving(self.id, &self.efd, &ready)?;
            }
            self.efd.read_interruptible()?;
            if let Some(cq) = self.pending.lock().expect("channel lock").pop_front() {
                return Ok(cq);
            }
        }
    }

    /// Forgets pending notifications of `cq` (it is being destroyed).
    pub(crate) fn forget(&self, cq: CqHandle) {
        let mut p = self.pending.lock().expect("channel lock");
        let before = p.len();
        p.retain(|c| *c != cq);
        for _ in p.len()..before {
            let _ = self.efd.try_read();
        }
    }

    /// Makes `get_event` return `WouldBlock` instead of blocking (or back).
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.efd.set_nonblocking(on)
    }
}

impl Drop for CompChannel {
    fn drop(&mut self) {
        if let Some(r) = self.receiver.as_ref().and_then(Weak::upgrade) {
            r.channel_closed(self.id, &self.efd);
        }
    }
}

impl AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }
}

/// An asynchronous event (`struct ibv_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// On a QP.
    Qp(Qpn, AsyncEventType),
    /// On a CQ.
    Cq(CqHandle, AsyncEventType),
    /// On an SRQ.
    Srq(SrqHandle, AsyncEventType),
}

/// One reader's queue of async events: an eventfd of its own and the
/// events behind it.
#[derive(Debug)]
pub struct AsyncQueue {
    efd: EventFd,
    pending: Mutex<VecDeque<AsyncEvent>>,
}

impl AsyncQueue {
    fn new() -> io::Result<AsyncQueue> {
        Ok(AsyncQueue {
            efd: EventFd::with_options(EventFdOptions::default().semaphore(true).blocking(true))?,
            pending: Mutex::new(VecDeque::new()),
        })
    }

    fn push(&self, e: AsyncEvent) {
        let mut p = self.pending.lock().expect("async lock");
        // Bound the queue: nobody may be reading async events at all.
        if p.len() >= 4096 {
            p.pop_front();
            let _ = self.efd.try_read();
        }
        p.push_back(e);
        let _ = self.efd.notify();
    }

    /// Blocks until an async event arrives (unless non-blocking); a signal
    /// handler interrupting the wait ends it with `Interrupted`.
    pub fn get_event(&self) -> io::Result<AsyncEvent> {
        loop {
            self.efd.read_interruptible()?;
            if let Some(e) = self.pending.lock().expect("async lock").pop_front() {
                return Ok(e);
            }
        }
    }

    /// Makes `get_event` non-blocking (or back).
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.efd.set_nonblocking(on)
    }
}

impl AsRawFd for AsyncQueue {
    fn as_raw_fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }
}

/// The device's async events: a queue of its own (the Rust API's) and one
/// per [`AsyncChannel::subscribe`]r, each getting every event. rdma-core
/// gives every opened context its own `async_fd`, and consumers rely on
/// the numbers differing: UCX keys its event handlers by fd, so two
/// contexts sharing one (Open MPI opens two) failed to open the second.
#[derive(Debug)]
pub struct AsyncChannel {
    own: AsyncQueue,
    subscribers: Mutex<Vec<Weak<AsyncQueue>>>,
}

impl AsyncChannel {
    pub(crate) fn new() -> io::Result<AsyncChannel> {
        Ok(AsyncChannel {
            own: AsyncQueue::new()?,
            subscribers: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn push(&self, e: AsyncEvent) {
        self.own.push(e);
        let mut subs = self.subscribers.lock().expect("async lock");
        subs.retain(|s| match s.upgrade() {
            Some(q) => {
                q.push(e);
                true
            }
            None => false,
        });
    }

    /// A queue with an fd of its own that gets every event from now on,
    /// until dropped.
    pub fn subscribe(&self) -> io::Result<Arc<AsyncQueue>> {
        let q = Arc::new(AsyncQueue::new()?);
        self.subscribers
            .lock()
            .expect("async lock")
            .push(Arc::downgrade(&q));
        Ok(q)
    }

    /// Blocks until an async event arrives (unless non-blocking); a signal
    /// handler interrupting the wait ends it with `Interrupted`.
    pub fn get_event(&self) -> io::Result<AsyncEvent> {
        self.own.get_event()
    }

    /// Makes `get_event` non-blocking (or back).
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.own.set_nonblocking(on)
    }
}

impl AsRawFd for AsyncChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.own.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    extern "C" fn on_signal(_: libc::c_int) {}

    /// qperf ends each test with `SIGALRM` (handler without `SA_RESTART`)
    /// and expects `ibv_get_cq_event` to return with `EINTR`: retrying the
    /// read left its server waiting forever for a completion that never came.
    #[test]
    fn a_signal_ends_a_blocked_get_event_with_eintr() {
        // SAFETY: a zeroed sigaction with a handler that does nothing, and no
        // SA_RESTART, installed for a signal only this test sends.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()), 0);
        }
        let ch = Arc::new(CompChannel::new().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let ch = Arc::clone(&ch);
            std::thread::spawn(move || {
                // SAFETY: pthread_self has no preconditions.
                tx.send(unsafe { libc::pthread_self() }).unwrap();
                ch.get_event().map_err(|e| e.kind())
            })
        };
        let t = rx.recv().unwrap();
        // Again and again, as qperf's interval timer does (a signal before
        // the read starts interrupts nothing); the waiter cannot have been
        // woken otherwise: nothing notifies the channel.
        for _ in 0..250 {
            std::thread::sleep(Duration::from_millis(20));
            if waiter.is_finished() {
                break;
            }
            // SAFETY: `t` is the waiter's thread, alive until joined below.
            assert_eq!(unsafe { libc::pthread_kill(t, libc::SIGUSR2) }, 0);
        }
        assert_eq!(
            waiter.join().unwrap(),
            Err(io::ErrorKind::Interrupted),
            "the wait ends on the signal"
        );
        // A notification still arrives afterwards.
        ch.notify(CqHandle(3));
        assert_eq!(ch.get_event().unwrap(), CqHandle(3));
    }

    /// The eventfd counts exactly what the queue holds, through pushes,
    /// refused and accepted pops, and dropped entries.
    #[test]
    fn event_queue_counts_what_it_holds() {
        let q = EventQueue::new(false).unwrap();
        let readable = |q: &EventQueue<u32>| q.efd().wait_readable(Some(Duration::ZERO)).unwrap();
        assert!(!readable(&q));
        for i in 1..=3 {
            q.push(i);
        }
        q.retain(|&i| i != 2);
        assert_eq!(q.pop_if(|&i| i > 1), Some(Err(())), "1 stays queued");
        assert_eq!(q.pop_if(|_| true), Some(Ok(1)));
        assert!(readable(&q));
        assert_eq!(q.efd().try_read().unwrap(), Some(1), "one count left");
        assert_eq!(q.pop_counted(), Some(3));
        assert!(!readable(&q));
        assert_eq!(q.pop_if(|_| true), None);
    }
}
