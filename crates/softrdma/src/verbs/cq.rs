//! Completion queues and completion channels.

use super::device::{Context, Dev};
use crate::Result;
use crate::backend::rdma_core::{self, sys};
use softrdma_engine::CompChannel as EngineChannel;
use softrdma_transport::{CqHandle, Wc};
use std::fmt;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

/// A completion channel of one backend.
#[derive(Clone)]
pub(crate) enum ChanImp {
    Native(Arc<EngineChannel>),
    RdmaCore(Arc<sys::CompChannel>),
}

impl ChanImp {
    /// The next event's CQ; `WouldBlock` when non-blocking and none is pending.
    fn get_event(&self) -> std::io::Result<CqId> {
        match self {
            ChanImp::Native(c) => c.get_event().map(CqId),
            // rdma-core channels report the CQ's tag (its `cq_context`).
            ChanImp::RdmaCore(c) => c.get_event().map(|t| CqId(CqHandle(t as u32))),
        }
    }

    fn fd(&self) -> RawFd {
        match self {
            ChanImp::Native(c) => c.as_raw_fd(),
            ChanImp::RdmaCore(c) => c.fd(),
        }
    }

    #[cfg(feature = "tokio")]
    fn set_nonblocking(&self) -> std::io::Result<()> {
        match self {
            ChanImp::Native(c) => c.set_nonblocking(true),
            ChanImp::RdmaCore(c) => sys::set_nonblocking(c.fd()),
        }
    }
}

/// Identifies a CQ in completion channel events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqId(pub(crate) CqHandle);

/// A completion channel (`struct ibv_comp_channel`): a real file descriptor
/// that becomes readable when an armed CQ gets a completion.
#[derive(Clone)]
pub struct CompChannel {
    /// Keeps the device alive while the channel exists.
    _ctx: Context,
    pub(crate) ch: ChanImp,
}

impl fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CompChannel(fd {})", self.ch.fd())
    }
}

impl CompChannel {
    pub(crate) fn new(ctx: &Context) -> Result<CompChannel> {
        let ch = match &ctx.dev {
            Dev::Native(e) => ChanImp::Native(e.create_comp_channel()?),
            Dev::RdmaCore(d) => ChanImp::RdmaCore(Arc::new(sys::CompChannel::new(&d.sys)?)),
        };
        Ok(CompChannel {
            _ctx: ctx.clone(),
            ch,
        })
    }

    /// Blocks until an armed CQ fires (`ibv_get_cq_event`); returns which.
    /// The thread sleeps in the kernel meanwhile (no CPU).
    ///
    /// The event-driven completion loop (arm, check, sleep):
    ///
    /// ```no_run
    /// # use softrdma::verbs::*;
    /// # fn main() -> softrdma::Result<()> {
    /// let ctx = Context::open()?;
    /// let ch = ctx.create_comp_channel()?;
    /// let cq = ctx.create_cq(64, Some(&ch))?;
    /// let mut wcs = Vec::new();
    /// loop {
    ///     cq.req_notify(false)?; // arm before polling, so nothing slips by
    ///     if cq.poll(&mut wcs, 16)? == 0 {
    ///         ch.wait()?; // sleep until the next completion
    ///         continue;
    ///     }
    ///     for wc in wcs.drain(..) {
    ///         println!("{:?} {:?}", wc.opcode, wc.status);
    ///     }
    /// }
    /// # }
    /// ```
    pub fn wait(&self) -> Result<CqId> {
        // `get_event` tells the engine this thread blocks.
        loop {
            match self.ch.get_event() {
                Ok(id) => return Ok(id),
                // A signal handler ran: wait on, as `std`'s blocking waits do.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // A non-blocking fd (after `wait_async`): wait for it.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if let Some(id) = self.poll_then_get(-1)? {
                        return Ok(id);
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits up to `ms` (-1: no limit) for the fd, then reads an event if
    /// one is there.
    fn poll_then_get(&self, ms: libc::c_int) -> Result<Option<CqId>> {
        let mut pfd = libc::pollfd {
            fd: self.ch.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        match n {
            0 => Ok(None),
            n if n > 0 => match self.ch.get_event() {
                Ok(id) => Ok(Some(id)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
                Err(e) => Err(e.into()),
            },
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    Ok(None)
                } else {
                    Err(e.into())
                }
            }
        }
    }

    /// Like [`CompChannel::wait`], giving up after `timeout` (`None`).
    pub fn wait_timeout(&self, timeout: std::time::Duration) -> Result<Option<CqId>> {
        self._ctx.before_block();
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        self.poll_then_get(ms)
    }

    /// Waits asynchronously until an armed CQ fires.
    #[cfg(feature = "tokio")]
    pub async fn wait_async(&self) -> Result<CqId> {
        use tokio::io::Interest;
        use tokio::io::unix::AsyncFd;
        self.ch.set_nonblocking()?;
        self._ctx.before_block();
        // SAFETY: `self` is borrowed for the whole wait, so the channel's fd
        // stays open until the AsyncFd (which never closes a RawFd) is dropped.
        let fd = unsafe { AsyncFd::register_with_interest(self.ch.fd(), Interest::READABLE) }
            .map_err(std::io::Error::from)?;
        loop {
            let mut guard = fd.readable().await?;
            match self.ch.get_event() {
                Ok(cq) => return Ok(cq),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.ch.fd()
    }
}

/// A CQ of one backend.
pub(crate) enum CqImp {
    /// The engine, and the CQ's completions polled without its lock.
    Native(
        Arc<softrdma_engine::Engine>,
        Arc<softrdma_transport::CqRing>,
    ),
    RdmaCore(Arc<sys::Cq>),
}

pub(crate) struct CqInner {
    _ctx: Context,
    /// The engine's handle, or the rdma-core CQ's tag.
    pub(crate) h: CqHandle,
    pub(crate) imp: CqImp,
    cqe: u32,
    _channel: Option<CompChannel>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        if let CqImp::Native(e, _) = &self.imp {
            let h = self.h;
            e.set_cq_channel(h, None);
            let _ = e.destroy_cq(h);
        }
    }
}

/// A completion queue (`struct ibv_cq`). Cheap to clone.
#[derive(Clone)]
pub struct Cq(pub(crate) Arc<CqInner>);

impl fmt::Debug for Cq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cq({}, {} entries)", self.0.h.0, self.0.cqe)
    }
}

impl Cq {
    pub(crate) fn new(ctx: &Context, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        let (h, imp, cqe) = match &ctx.dev {
            Dev::Native(e) => {
                if let Some(ChanImp::RdmaCore(_)) = channel.map(|c| &c.ch) {
                    return Err(softrdma_transport::VerbsError::InvalidArgument(
                        "the completion channel belongs to another device".into(),
                    )
                    .into());
                }
                let (h, cqe, ring) = e.create_cq_with_ring(cqe)?;
                if let Some(ChanImp::Native(c)) = channel.map(|c| &c.ch) {
                    e.set_cq_channel(h, Some(Arc::clone(c)));
                }
                (h, CqImp::Native(Arc::clone(e), ring), cqe)
            }
            Dev::RdmaCore(d) => {
                let ch = match channel.map(|c| &c.ch) {
                    Some(ChanImp::RdmaCore(c)) => Some(c),
                    Some(ChanImp::Native(_)) => {
                        return Err(softrdma_transport::VerbsError::InvalidArgument(
                            "the completion channel belongs to another device".into(),
                        )
                        .into());
                    }
                    None => None,
                };
                let tag = rdma_core::next_cq_tag();
                let cq = sys::Cq::new(&d.sys, cqe, tag, ch)?;
                let cqe = cq.cqe;
                (CqHandle(tag as u32), CqImp::RdmaCore(Arc::new(cq)), cqe)
            }
        };
        Ok(Cq(Arc::new(CqInner {
            _ctx: ctx.clone(),
            h,
            imp,
            cqe,
            _channel: channel.cloned(),
        })))
    }

    /// This CQ's identity in channel events.
    pub fn id(&self) -> CqId {
        CqId(self.0.h)
    }

    /// Number of entries.
    pub fn cqe(&self) -> u32 {
        self.0.cqe
    }

    /// Moves up to `max` completions into `out` (`ibv_poll_cq`); returns how many.
    pub fn poll(&self, out: &mut Vec<Wc>, max: usize) -> Result<usize> {
        match &self.0.imp {
            CqImp::Native(e, r) => Ok(e.poll_cq_ring(r, self.0.h, max, |w| out.push(w))?),
            CqImp::RdmaCore(c) => Ok(c.poll(out, max)?),
        }
    }

    /// One completion, if any.
    pub fn poll_one(&self) -> Result<Option<Wc>> {
        match &self.0.imp {
            CqImp::Native(e, ring) => {
                let mut r = None;
                e.poll_cq_ring(ring, self.0.h, 1, |w| r = Some(w))?;
                Ok(r)
            }
            CqImp::RdmaCore(c) => {
                let mut v = Vec::with_capacity(1);
                c.poll(&mut v, 1)?;
                Ok(v.pop())
            }
        }
    }

    /// Busy-polls until `n` completions arrived or `timeout` passed.
    pub fn poll_blocking(&self, n: usize, timeout: std::time::Duration) -> Result<Vec<Wc>> {
        let t0 = std::time::Instant::now();
        let mut v = Vec::with_capacity(n);
        while v.len() < n {
            let k = v.len();
            self.poll(&mut v, n - k)?;
            if v.len() < n {
                if t0.elapsed() > timeout {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("{} of {n} completions after {timeout:?}", v.len()),
                    )
                    .into());
                }
                std::hint::spin_loop();
            }
        }
        Ok(v)
    }

    /// Arms the CQ: its channel is notified of the next (solicited) completion.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        match &self.0.imp {
            CqImp::Native(e, _) => {
                let h = self.0.h;
                Ok(e.req_notify_cq(h, solicited_only)?)
            }
            CqImp::RdmaCore(c) => Ok(c.req_notify(solicited_only)?),
        }
    }
}
