//! Completion and async event channels: a real eventfd plus a side queue, so
//! waiters block in `read(2)` (a cancellation point) and can also poll the fd.

use softrdma_transport::{AsyncEventType, CqHandle, Qpn, SrqHandle};
use softrdma_udp::{EventFd, EventFdOptions};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, Weak};

/// A completion channel: CQs armed with it queue themselves here when they fire.
#[derive(Debug)]
pub struct CompChannel {
    efd: EventFd,
    pending: Mutex<VecDeque<CqHandle>>,
}

impl CompChannel {
    pub(crate) fn new() -> io::Result<CompChannel> {
        Ok(CompChannel {
            efd: EventFd::with_options(EventFdOptions::default().semaphore(true).blocking(true))?,
            pending: Mutex::new(VecDeque::new()),
        })
    }

    pub(crate) fn notify(&self, cq: CqHandle) {
        self.pending.lock().expect("channel lock").push_back(cq);
        // An eventfd write only fails on counter overflow (2^64 - 2 events).
        let _ = self.efd.notify();
    }

    /// Blocks (unless the fd was made non-blocking) until a CQ fired; returns it.
    pub fn get_event(&self) -> io::Result<CqHandle> {
        loop {
            self.efd.read()?;
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

    /// Blocks until an async event arrives (unless non-blocking).
    pub fn get_event(&self) -> io::Result<AsyncEvent> {
        loop {
            self.efd.read()?;
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

    /// Blocks until an async event arrives (unless non-blocking).
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
