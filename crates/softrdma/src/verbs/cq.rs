//! Completion queues and completion channels.

use super::device::Context;
use crate::Result;
use softrdma_engine::CompChannel as EngineChannel;
use softrdma_transport::{CqHandle, Wc};
use std::fmt;
use std::sync::Arc;

/// Identifies a CQ in completion channel events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqId(pub(crate) CqHandle);

/// A completion channel (`struct ibv_comp_channel`): a real file descriptor
/// that becomes readable when an armed CQ gets a completion.
#[derive(Clone)]
pub struct CompChannel {
    /// Keeps the device alive while the channel exists.
    _ctx: Context,
    pub(crate) ch: Arc<EngineChannel>,
}

impl fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use std::os::fd::AsRawFd;
        write!(f, "CompChannel(fd {})", self.ch.as_raw_fd())
    }
}

impl CompChannel {
    pub(crate) fn new(ctx: &Context) -> Result<CompChannel> {
        Ok(CompChannel {
            _ctx: ctx.clone(),
            ch: ctx.engine.create_comp_channel()?,
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
        self._ctx.engine.before_block();
        Ok(CqId(self.ch.get_event()?))
    }

    /// Like [`CompChannel::wait`], giving up after `timeout` (`None`).
    pub fn wait_timeout(&self, timeout: std::time::Duration) -> Result<Option<CqId>> {
        use std::os::fd::AsRawFd;
        self._ctx.engine.before_block();
        let mut pfd = libc::pollfd {
            fd: self.ch.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        match n {
            0 => Ok(None),
            n if n > 0 => Ok(Some(CqId(self.ch.get_event()?))),
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

    /// Waits asynchronously until an armed CQ fires.
    #[cfg(feature = "tokio")]
    pub async fn wait_async(&self) -> Result<CqId> {
        use std::os::fd::AsRawFd;
        use tokio::io::Interest;
        use tokio::io::unix::AsyncFd;
        self.ch.set_nonblocking(true)?;
        self._ctx.engine.before_block();
        // SAFETY: `self` is borrowed for the whole wait, so the channel's fd
        // stays open until the AsyncFd (which never closes a RawFd) is dropped.
        let fd =
            unsafe { AsyncFd::register_with_interest(self.ch.as_raw_fd(), Interest::READABLE) }
                .map_err(std::io::Error::from)?;
        loop {
            let mut guard = fd.readable().await?;
            match self.ch.get_event() {
                Ok(cq) => return Ok(CqId(cq)),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => guard.clear_ready(),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl std::os::fd::AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.ch.as_raw_fd()
    }
}

pub(crate) struct CqInner {
    pub(crate) ctx: Context,
    pub(crate) h: CqHandle,
    cqe: u32,
    _channel: Option<CompChannel>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let h = self.h;
        self.ctx.engine.set_cq_channel(h, None);
        let _ = self.ctx.engine.with(|ep, _| ep.destroy_cq(h));
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
        let (h, cqe) = ctx.engine.with(|ep, _| ep.create_cq(cqe))?;
        if let Some(c) = channel {
            ctx.engine.set_cq_channel(h, Some(Arc::clone(&c.ch)));
        }
        Ok(Cq(Arc::new(CqInner {
            ctx: ctx.clone(),
            h,
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
        Ok(self.0.ctx.engine.poll_cq(self.0.h, max, |w| out.push(w))?)
    }

    /// One completion, if any.
    pub fn poll_one(&self) -> Result<Option<Wc>> {
        let mut r = None;
        self.0.ctx.engine.poll_cq(self.0.h, 1, |w| r = Some(w))?;
        Ok(r)
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
        let h = self.0.h;
        Ok(self
            .0
            .ctx
            .engine
            .with(|ep, _| ep.req_notify_cq(h, solicited_only))?)
    }
}
