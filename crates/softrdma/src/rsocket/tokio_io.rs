//! [`AsyncRStream`]: an [`RStream`] for tokio ([`AsyncRead`],
//! [`AsyncWrite`]). A task that would block arms the CQ and waits for the
//! connection's completion channel to become readable in the runtime's
//! reactor; it never blocks a thread.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll, Wake, Waker, ready};
use std::time::Duration;

use softrdma_rsocket::stream::{Half, WRITABLE};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{RListener, RStream, io_err};

/// The tasks waiting to read (0) and to write (1). One completion channel
/// serves both directions, and the reactor keeps one waker per descriptor
/// and direction: it gets this one, which wakes both tasks.
#[derive(Debug, Default)]
struct Waiters(Mutex<[Option<Waker>; 2]>);

impl Waiters {
    fn slots(&self) -> std::sync::MutexGuard<'_, [Option<Waker>; 2]> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Wake for Waiters {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        let w = std::mem::take(&mut *self.slots());
        w.into_iter().flatten().for_each(Waker::wake);
    }
}

const READ: usize = 0;
const WRITE: usize = 1;

/// An [`RStream`] for tokio. Made by [`AsyncRStream::new`] (inside a
/// runtime) from a connected stream, or by [`RListener::accept_async`].
/// Reads and writes may wait in two tasks at once (`tokio::io::split`).
#[derive(Debug)]
pub struct AsyncRStream {
    /// Deregistered before `s` closes the descriptor (fields drop in order).
    fd: AsyncFd<RawFd>,
    s: RStream,
    waiters: Arc<Waiters>,
    waker: Waker,
}

impl AsyncRStream {
    /// Wraps `s`; registers its completion channel with the runtime's
    /// reactor (which must be running).
    pub fn new(s: RStream) -> io::Result<AsyncRStream> {
        let raw = s
            .conn
            .comp_channel()
            .map(AsRawFd::as_raw_fd)
            .ok_or_else(|| io::Error::other("the stream has no completion channel"))?;
        // SAFETY: the descriptor is the completion channel's, which `s`
        // keeps open; `s` is stored beside the AsyncFd and dropped after it
        // (fields drop in declaration order), and an AsyncFd never closes a
        // RawFd.
        let fd = unsafe { AsyncFd::register_with_interest(raw, tokio::io::Interest::READABLE) }
            .map_err(io::Error::from)?;
        let waiters = Arc::new(Waiters::default());
        let waker = Waker::from(Arc::clone(&waiters));
        Ok(AsyncRStream {
            fd,
            s,
            waiters,
            waker,
        })
    }

    /// The stream inside.
    pub fn get_ref(&self) -> &RStream {
        &self.s
    }

    /// Processes completions until `test` holds, or registers the task
    /// (waiting to `dir`) for the channel's next event. Completions taken
    /// here may be what the other direction waits for: it is woken to look.
    fn poll_until(
        &mut self,
        cx: &mut TaskContext<'_>,
        dir: usize,
        test: fn(&RStream) -> bool,
    ) -> Poll<io::Result<()>> {
        let r = self.poll_inner(cx, dir, test);
        if r.is_ready()
            && let Some(w) = self.waiters.slots()[1 - dir].take()
        {
            w.wake();
        }
        r
    }

    fn poll_inner(
        &mut self,
        cx: &mut TaskContext<'_>,
        dir: usize,
        test: fn(&RStream) -> bool,
    ) -> Poll<io::Result<()>> {
        loop {
            self.s.update_credits();
            self.s.poll_cq();
            if test(&self.s) {
                self.s.update_credits();
                return Poll::Ready(Ok(()));
            }
            if !self.s.armed {
                // Armed, then polled once more: a completion between the
                // poll above and the arming is found there.
                self.s.conn.cq().req_notify(false).map_err(io_err)?;
                self.s.armed = true;
                continue;
            }
            // About to wait: the device sends what it deferred for this
            // (busy-polling) thread and watches the socket itself again, as
            // before any blocking wait on a channel.
            self.s.conn.context().before_block();
            self.waiters.slots()[dir] = Some(cx.waker().clone());
            let mut both = TaskContext::from_waker(&self.waker);
            let mut guard = ready!(self.fd.poll_read_ready(&mut both))?;
            let channel = self.s.conn.comp_channel().expect("checked in new");
            if channel
                .wait_timeout(Duration::ZERO)
                .map_err(io_err)?
                .is_some()
            {
                self.s.armed = false;
            }
            guard.clear_ready();
        }
    }
}

impl AsRawFd for AsyncRStream {
    /// The completion channel's descriptor.
    fn as_raw_fd(&self) -> RawFd {
        *self.fd.get_ref()
    }
}

impl AsyncRead for AsyncRStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        ready!(me.poll_until(cx, READ, RStream::have_rdata))?;
        let n = me.s.read_ready(buf.initialize_unfilled())?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for AsyncRStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(me.poll_until(cx, WRITE, RStream::can_send))?;
        Poll::Ready(me.s.write_ready(buf))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Stops sending (`shutdown(SHUT_WR)`): the peer reads the end of the
    /// stream after the data before it.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.s.b.stream.state & WRITABLE == 0 {
            return Poll::Ready(Ok(()));
        }
        // The slot first, then the state change (a pending poll changes
        // nothing).
        ready!(me.poll_until(cx, WRITE, RStream::can_send_ctrl))?;
        if let Some(ctrl) = me.s.b.stream.shutdown(Half::Write) {
            me.s.send_ctrl(ctrl)?;
        }
        Poll::Ready(Ok(()))
    }
}

impl RListener {
    /// [`RListener::accept`] for tokio (the connection set-up waits in the
    /// runtime; the stream comes registered with its reactor).
    pub async fn accept_async(&self) -> io::Result<AsyncRStream> {
        loop {
            let req = self.acceptor.incoming_async().await.map_err(io_err)?;
            if softrdma_rsocket::proto::ConnData::decode(req.private_data()).is_none() {
                let _ = req.reject(&[]);
                continue;
            }
            let b = super::Buffers::new(&self.pd).map_err(io_err)?;
            let conn = req.accept_async(&b.conn_data()).await.map_err(io_err)?;
            return AsyncRStream::new(b.connected(conn)?);
        }
    }
}

impl AsyncRStream {
    /// [`RStream::connect_on`] for tokio.
    pub async fn connect_on(
        ctx: &crate::verbs::Context,
        addr: std::net::SocketAddr,
    ) -> io::Result<AsyncRStream> {
        let pd = ctx.alloc_pd().map_err(io_err)?;
        let b = super::Buffers::new(&pd).map_err(io_err)?;
        let conn = crate::cm::Connector::on(ctx)
            .options(super::options(&pd))
            .connect_async(addr, &b.conn_data())
            .await
            .map_err(io_err)?;
        AsyncRStream::new(b.connected(conn)?)
    }
}
