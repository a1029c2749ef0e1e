//! A connection: messages, one-sided transfers, notifications, close.

use crate::buffer::{Buffer, Resources};
use crate::config::{Config, Mode};
use crate::error::{Error, Op, Result};
use crate::wire;
use softrdma::cm::{CmEvent, CmId, EventChannel, EventKind};
use softrdma::verbs::{
    CompChannel, Cq, RecvWr, RemoteBuf, SendFlags, SendWr, Sge, Wc, WcFlags, WcOpcode, WcStatus,
    WrOpcode,
};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Receive work requests carry this bit plus their slot number.
const RECV_TAG: u64 = 1 << 63;
/// RDMA WRITE/READ transfers are split into work requests of at most this.
const CHUNK: usize = 1 << 30;
/// Completions taken from the CQ per poll.
const POLL_BATCH: usize = 32;
/// Low bits of a send-side work request id that name its operation.
const OP_BITS: u32 = 3;

fn op_code(op: Op) -> u64 {
    match op {
        Op::Send => 0,
        Op::Recv => 1,
        Op::Write => 2,
        Op::Read => 3,
        Op::Notify => 4,
    }
}

fn op_of(wr_id: u64) -> Op {
    match wr_id & ((1 << OP_BITS) - 1) {
        1 => Op::Recv,
        2 => Op::Write,
        3 => Op::Read,
        4 => Op::Notify,
        _ => Op::Send,
    }
}
/// How long [`Connection::close`] waits for the CM to confirm the
/// disconnection when the connection has no timeout of its own.
const CLOSE_WAIT: Duration = Duration::from_secs(10);
/// Event mode without a timeout re-arms and re-polls at least this often.
const IDLE_WAIT: Duration = Duration::from_secs(60);

/// What a notification says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotifyKind {
    /// The peer wrote (RDMA WRITE) the range of this side's buffer
    /// ([`Connection::notify_write`]): the data is there.
    Write,
    /// The peer finished reading (RDMA READ) the range of this side's
    /// buffer ([`Connection::notify_read`]): it may be reused.
    Read,
}

/// A notification from the peer about a range of this side's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Notification {
    /// Write or read.
    pub kind: NotifyKind,
    /// Start of the range in this side's buffer.
    pub offset: u64,
    /// Length of the range.
    pub len: u64,
}

/// Why a connection stopped working (the first reason is kept).
#[derive(Debug, Clone)]
enum Down {
    /// Receives were flushed: the QP went to the error state (the peer
    /// disconnected or died, or a disconnect was started here).
    Disconnected,
    /// A work request failed.
    Failed { op: Op, status: WcStatus },
    /// The peer broke the protocol.
    Protocol(String),
}

impl Down {
    fn error(&self) -> Error {
        match self {
            Down::Disconnected => Error::Disconnected,
            Down::Failed { op, status } => Error::Completion {
                op: *op,
                status: *status,
            },
            Down::Protocol(m) => Error::Protocol(m.clone()),
        }
    }
}

/// The first error of the waits for a transfer's work requests.
#[derive(Debug, Default)]
struct FirstError(Option<Error>);

impl FirstError {
    /// Notes one wait's result; false once waiting should stop (after a
    /// timeout).
    fn note(&mut self, r: Result<()>) -> bool {
        if let Err(e) = r
            && self.0.is_none()
        {
            self.0 = Some(e);
        }
        !matches!(self.0, Some(Error::Timeout(_)))
    }

    fn result(self) -> Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// The connected part, dropped by [`Connection::close`].
#[derive(Debug)]
pub(crate) struct Link {
    /// The CM id; owns the QP (dropped first: nothing reaches the buffers after).
    pub(crate) id: CmId,
    /// The id's event channel (DISCONNECTED arrives here).
    pub(crate) channel: EventChannel,
    /// Send and receive completions.
    pub(crate) cq: Cq,
    /// The CQ's completion channel in [`Mode::Event`].
    pub(crate) comp: Option<CompChannel>,
}

/// One rdmalib connection: made by [`crate::Server::accept`] or
/// [`crate::Client::connect`].
///
/// Operations take `&mut self`: one at a time per connection, each returns
/// once it completed (a send or write when the peer's device acknowledged
/// it, a read when the data is in the local buffer). Dropping the connection
/// disconnects it (best effort) and frees everything; [`Connection::close`]
/// does it orderly and reports misuse.
#[derive(Debug)]
pub struct Connection {
    link: Option<Link>,
    /// Registered memory; outlives the link so the buffer stays readable
    /// after close (no QP can reach it then: the PD is this connection's).
    res: Resources,
    remote: RemoteBuf,
    peer_max_message: usize,
    mode: Mode,
    timeout: Option<Duration>,
    established: CmEvent,
    down: Option<Down>,
    messages: VecDeque<Vec<u8>>,
    notifications: VecDeque<Notification>,
    /// Send-side completions not claimed yet.
    sent: Vec<(u64, WcStatus)>,
    next_wr: u64,
    wcs: Vec<Wc>,
}

impl Connection {
    /// A connection whose receives are posted and whose QP is connected.
    pub(crate) fn new(
        link: Link,
        res: Resources,
        peer: wire::Hello,
        config: &Config,
        established: CmEvent,
    ) -> Connection {
        Connection {
            link: Some(link),
            res,
            remote: RemoteBuf {
                addr: peer.addr,
                rkey: peer.rkey,
                len: peer.size,
            },
            peer_max_message: peer.max_message as usize,
            mode: config.mode,
            timeout: config.timeout,
            established,
            down: None,
            messages: VecDeque::new(),
            notifications: VecDeque::new(),
            sent: Vec::new(),
            next_wr: 1,
            wcs: Vec::with_capacity(POLL_BATCH),
        }
    }

    // ---- what the connection is ----

    /// This side's buffer (the one the peer writes into and reads from).
    /// It stays readable after [`Connection::close`].
    pub fn buffer(&self) -> &Buffer {
        &self.res.buffer
    }

    /// The peer's buffer as it advertised it when connecting (address,
    /// rkey, size): the target of [`Connection::write`] and
    /// [`Connection::read`].
    pub fn remote(&self) -> RemoteBuf {
        self.remote
    }

    /// The largest message the peer receives.
    pub fn peer_max_message(&self) -> usize {
        self.peer_max_message
    }

    /// The largest message this side receives.
    pub fn max_message(&self) -> usize {
        self.res.max_message
    }

    /// Polling or event mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The bound on each wait (`None`: no limit).
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Changes the bound on each wait.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// True until [`Connection::close`] was called.
    pub fn is_open(&self) -> bool {
        self.link.is_some()
    }

    /// True once the connection stopped working (the peer disconnected, an
    /// operation failed) or was closed.
    pub fn is_down(&self) -> bool {
        self.link.is_none() || self.down.is_some()
    }

    /// Our address (`None` after close).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.link.as_ref().and_then(|l| l.id.local_addr())
    }

    /// The peer's address (`None` after close).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.link.as_ref().and_then(|l| l.id.peer_addr())
    }

    /// The ESTABLISHED event of the connection (the peer's connection
    /// parameters and private data).
    pub fn established_event(&self) -> &CmEvent {
        &self.established
    }

    /// The CM id (which owns the QP and PD), its event channel, the CQ and
    /// the completion channel (event mode) — `None` after close. For
    /// applications that need the verbs objects themselves.
    pub fn link(&self) -> Option<(&CmId, &EventChannel, &Cq, Option<&CompChannel>)> {
        self.link
            .as_ref()
            .map(|l| (&l.id, &l.channel, &l.cq, l.comp.as_ref()))
    }

    // ---- messages ----

    /// Sends `msg` as one message (a SEND; any length up to
    /// [`Connection::peer_max_message`], segmented at the path MTU by the
    /// device). Returns when the peer's device acknowledged it.
    pub fn send(&mut self, msg: &[u8]) -> Result<()> {
        let id = self.post_message(msg)?;
        self.wait_for(|c| c.take_sent(id))
    }

    /// Waits for the next message from the peer. Messages arrive in order;
    /// notifications that arrive meanwhile are kept for
    /// [`Connection::wait_notification`]. After the peer disconnected, the
    /// messages it sent before are still returned, then
    /// [`Error::Disconnected`].
    pub fn recv(&mut self) -> Result<Vec<u8>> {
        self.wait_for(Connection::take_message)
    }

    /// A message if one has arrived; never blocks.
    pub fn try_recv(&mut self) -> Result<Option<Vec<u8>>> {
        self.try_take(Connection::take_message)
    }

    /// Sends `len` bytes at `offset` of this side's buffer as one message,
    /// straight from the registered buffer (no copy).
    pub fn send_from_buffer(&mut self, offset: usize, len: usize) -> Result<()> {
        self.res.buffer.check(offset, len)?;
        let sge = (len > 0)
            .then(|| self.res.buffer.sge(offset, len))
            .transpose()?;
        let id = self.post_send_sge(len, sge)?;
        self.wait_for(|c| c.take_sent(id))
    }

    /// Waits for the next message and copies it into this side's buffer at
    /// `offset`; returns its length. A message longer than the room there is
    /// [`Error::MessageTooLarge`] and stays queued (receive it elsewhere).
    pub fn recv_to_buffer(&mut self, offset: usize) -> Result<usize> {
        self.res.buffer.check(offset, 0)?;
        self.wait_for(|c| c.take_message_to_buffer(offset))
    }

    // ---- one-sided transfers ----

    /// RDMA WRITE: copies `len` bytes at `local_offset` of this side's
    /// buffer into the peer's buffer at `remote_offset`, without the peer's
    /// CPU. Returns when the peer's device acknowledged the data. The peer
    /// learns about it only through [`Connection::notify_write`] (or its own
    /// protocol). A range outside either buffer fails before anything is
    /// sent.
    pub fn write(&mut self, local_offset: usize, remote_offset: u64, len: usize) -> Result<()> {
        self.rdma(Op::Write, local_offset, remote_offset, len)
    }

    /// RDMA READ: copies `len` bytes at `remote_offset` of the peer's
    /// buffer into this side's buffer at `local_offset`. Returns when the
    /// data is in the local buffer.
    pub fn read(&mut self, local_offset: usize, remote_offset: u64, len: usize) -> Result<()> {
        self.rdma(Op::Read, local_offset, remote_offset, len)
    }

    /// A WRITE or READ, waited for.
    fn rdma(&mut self, op: Op, local_offset: usize, remote_offset: u64, len: usize) -> Result<()> {
        let ids = self.post_rdma(op, local_offset, remote_offset, len)?;
        self.wait_all(ids)
    }

    // ---- notifications ----

    /// Tells the peer that `[offset, offset + len)` of *its* buffer holds
    /// data written by [`Connection::write`]. Delivered as a SEND WITH
    /// IMMEDIATE after the writes (an RC queue pair executes in order, so
    /// the peer sees the notification only after the data is in place).
    pub fn notify_write(&mut self, offset: u64, len: u64) -> Result<()> {
        self.notify(wire::IMM_NOTIFY_WRITE, offset, len)
    }

    /// Tells the peer that this side finished reading `[offset, offset +
    /// len)` of *its* buffer (with [`Connection::read`]): it may reuse it.
    pub fn notify_read(&mut self, offset: u64, len: u64) -> Result<()> {
        self.notify(wire::IMM_NOTIFY_READ, offset, len)
    }

    /// A notification with immediate value `imm`, waited for.
    fn notify(&mut self, imm: u32, offset: u64, len: u64) -> Result<()> {
        let id = self.post_notify(imm, offset, len)?;
        self.wait_for(|c| c.take_sent(id))
    }

    /// Waits for the next notification (polling or sleeping on the
    /// completion channel, per the mode). Messages that arrive meanwhile
    /// are kept for [`Connection::recv`].
    pub fn wait_notification(&mut self) -> Result<Notification> {
        self.wait_for(Connection::take_notification)
    }

    /// A notification if one has arrived; never blocks.
    pub fn try_notification(&mut self) -> Result<Option<Notification>> {
        self.try_take(Connection::take_notification)
    }

    // ---- close ----

    /// Disconnects orderly: the peer's pending and future waits end with
    /// [`Error::Disconnected`], this side's QP, CQ, CM id and channel are
    /// destroyed once the CM confirmed the disconnection (bounded by the
    /// timeout, 10 s without one). Work still in flight is flushed. The
    /// buffer stays readable until the connection is dropped.
    ///
    /// Closing a closed connection is [`Error::Closed`].
    pub fn close(&mut self) -> Result<()> {
        let link = self.link.take().ok_or(Error::Closed)?;
        if link.id.disconnect().is_ok() {
            let deadline = Instant::now() + self.timeout.unwrap_or(CLOSE_WAIT);
            // The CM reports DISCONNECTED when the peer answered (or was
            // already gone); a missing confirmation is no reason to keep
            // anything alive, so errors here end the wait and nothing else.
            while let Ok(Some(ev)) = link
                .channel
                .get_event_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                if ev.kind() == EventKind::Disconnected && ev.is_for(&link.id) {
                    break;
                }
            }
        }
        self.down.get_or_insert(Down::Disconnected);
        drop(link);
        Ok(())
    }

    // ---- posting ----

    fn live(&self) -> Result<&Link> {
        self.link.as_ref().ok_or(Error::Closed)
    }

    /// The link, if the connection is open and up.
    fn usable(&self) -> Result<&Link> {
        let link = self.live()?;
        match &self.down {
            Some(d) => Err(d.error()),
            None => Ok(link),
        }
    }

    /// A new send-side work request id: a sequence number with the
    /// operation in the low bits (a failed completion names its operation
    /// whatever opcode it reports).
    fn wr_id(&mut self, op: Op) -> u64 {
        let seq = self.next_wr;
        self.next_wr = (self.next_wr + 1) & (!RECV_TAG >> OP_BITS);
        (seq << OP_BITS) | op_code(op)
    }

    /// Copies `msg` into the send slot and posts it.
    fn post_message(&mut self, msg: &[u8]) -> Result<u64> {
        self.check_message(msg.len())?;
        let sge = if msg.is_empty() {
            None
        } else {
            self.res.send.write(0, msg)?;
            Some(self.res.send.sge(0, msg.len())?)
        };
        self.post_send_sge(msg.len(), sge)
    }

    fn check_message(&self, len: usize) -> Result<()> {
        self.usable()?;
        if len > self.peer_max_message {
            return Err(Error::MessageTooLarge {
                len,
                max: self.peer_max_message,
            });
        }
        Ok(())
    }

    /// Posts a message of `len` bytes found at `sge`.
    fn post_send_sge(&mut self, len: usize, sge: Option<Sge>) -> Result<u64> {
        self.check_message(len)?;
        let id = self.wr_id(Op::Send);
        let mut wr = SendWr::new(id, WrOpcode::SendWithImm);
        wr.flags = SendFlags::SIGNALED;
        wr.imm_data = wire::IMM_MESSAGE;
        wr.sgl = sge.into_iter().collect();
        self.usable()?
            .id
            .qp()
            .expect("a link has a QP")
            .post_send(wr)?;
        Ok(id)
    }

    fn post_notify(&mut self, imm: u32, offset: u64, len: u64) -> Result<u64> {
        self.usable()?;
        self.check_remote(offset, len)?;
        let id = self.wr_id(Op::Notify);
        let mut wr = SendWr::new(id, WrOpcode::SendWithImm);
        wr.flags = SendFlags::SIGNALED | SendFlags::INLINE;
        wr.imm_data = imm;
        wr.inline = Some(wire::encode_notify(offset, len));
        self.usable()?
            .id
            .qp()
            .expect("a link has a QP")
            .post_send(wr)?;
        Ok(id)
    }

    fn check_remote(&self, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.remote.len => Ok(()),
            _ => Err(Error::RemoteOutOfBounds {
                offset,
                len,
                size: self.remote.len,
            }),
        }
    }

    /// Posts the work requests of a WRITE or READ; returns their ids.
    fn post_rdma(
        &mut self,
        op: Op,
        local_offset: usize,
        remote_offset: u64,
        len: usize,
    ) -> Result<Vec<u64>> {
        self.usable()?;
        self.res.buffer.check(local_offset, len)?;
        self.check_remote(remote_offset, len as u64)?;
        let opcode = match op {
            Op::Read => WrOpcode::RdmaRead,
            _ => WrOpcode::RdmaWrite,
        };
        let mut ids = Vec::new();
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK);
            let id = self.wr_id(op);
            let mut wr = SendWr::new(id, opcode);
            wr.flags = SendFlags::SIGNALED;
            wr.sgl = [self.res.buffer.sge(local_offset + done, n)?].into();
            wr.remote_addr = self.remote.addr + remote_offset + done as u64;
            wr.rkey = self.remote.rkey;
            let link = self.usable()?;
            if let Err(e) = link.id.qp().expect("a link has a QP").post_send(wr) {
                if ids.is_empty() {
                    return Err(e.into());
                }
                // Some chunks are in flight: wait for them, then report.
                let _ = self.wait_all(ids);
                return Err(e.into());
            }
            ids.push(id);
            done += n;
        }
        Ok(ids)
    }

    fn wait_all(&mut self, ids: Vec<u64>) -> Result<()> {
        let mut first = FirstError::default();
        for id in ids {
            if !first.note(self.wait_for(|c| c.take_sent(id))) {
                break;
            }
        }
        first.result()
    }

    // ---- completions ----

    /// Posts receive slot `i`.
    fn post_slot(&self, link: &Link, i: usize) -> Result<()> {
        let wr = RecvWr {
            wr_id: RECV_TAG | i as u64,
            sgl: [self.res.recv_sge(i)?].into(),
        };
        Ok(link.id.qp().expect("a link has a QP").post_recv(wr)?)
    }

    /// Posts every receive slot (before the connection is accepted or
    /// requested, so the peer never waits for one).
    pub(crate) fn post_receives(res: &Resources, id: &CmId) -> Result<()> {
        let qp = id.qp().expect("the id has a QP");
        for i in 0..res.recv_depth {
            qp.post_recv(RecvWr {
                wr_id: RECV_TAG | i as u64,
                sgl: [res.recv_sge(i)?].into(),
            })?;
        }
        Ok(())
    }

    fn go_down(&mut self, d: Down) {
        self.down.get_or_insert(d);
    }

    /// Files one completion.
    fn handle(&mut self, wc: &Wc) {
        if wc.wr_id & RECV_TAG == 0 {
            self.sent.push((wc.wr_id, wc.status));
            match wc.status {
                WcStatus::Success => {}
                WcStatus::WrFlushErr => self.go_down(Down::Disconnected),
                status => self.go_down(Down::Failed {
                    op: op_of(wc.wr_id),
                    status,
                }),
            }
            return;
        }
        let slot = (wc.wr_id & !RECV_TAG) as usize;
        match wc.status {
            WcStatus::Success => {}
            WcStatus::WrFlushErr => return self.go_down(Down::Disconnected),
            status => {
                return self.go_down(Down::Failed {
                    op: Op::Recv,
                    status,
                });
            }
        }
        if let Err(m) = self.take_slot(slot, wc) {
            return self.go_down(Down::Protocol(m));
        }
        if self.down.is_none() {
            let posted = match &self.link {
                Some(link) => self.post_slot(link, slot),
                None => Ok(()),
            };
            if posted.is_err() {
                self.go_down(Down::Disconnected);
            }
        }
    }

    /// Moves what receive slot `slot` holds into the queues.
    fn take_slot(&mut self, slot: usize, wc: &Wc) -> std::result::Result<(), String> {
        if wc.opcode != WcOpcode::Recv || !wc.wc_flags.contains(WcFlags::WITH_IMM) {
            return Err(format!(
                "the peer sent {:?} without rdmalib's immediate value",
                wc.opcode
            ));
        }
        let len = wc.byte_len as usize;
        let data = self
            .res
            .recv
            .to_vec(slot * self.res.max_message, len)
            .map_err(|e| e.to_string())?;
        match wc.imm_data {
            wire::IMM_MESSAGE => self.messages.push_back(data),
            imm @ (wire::IMM_NOTIFY_WRITE | wire::IMM_NOTIFY_READ) => {
                let (offset, len) = wire::decode_notify(&data).map_err(|e| e.to_string())?;
                self.notifications.push_back(Notification {
                    kind: if imm == wire::IMM_NOTIFY_WRITE {
                        NotifyKind::Write
                    } else {
                        NotifyKind::Read
                    },
                    offset,
                    len,
                });
            }
            other => return Err(format!("unknown immediate value {other:#010x}")),
        }
        Ok(())
    }

    /// Files what the CQ holds; returns how many completions there were.
    fn poll_cq(&mut self) -> Result<usize> {
        let mut wcs = std::mem::take(&mut self.wcs);
        wcs.clear();
        let n = self.live()?.cq.poll(&mut wcs, POLL_BATCH);
        for wc in &wcs {
            self.handle(wc);
        }
        self.wcs = wcs;
        Ok(n?)
    }

    fn take_sent(&mut self, id: u64) -> Option<Result<()>> {
        let i = self.sent.iter().position(|(w, _)| *w == id)?;
        let (_, status) = self.sent.swap_remove(i);
        Some(match status {
            WcStatus::Success => Ok(()),
            // Flushed: the connection went down earlier; say why.
            WcStatus::WrFlushErr => {
                Err(self.down.as_ref().map_or(Error::Disconnected, Down::error))
            }
            status => Err(Error::Completion {
                op: op_of(id),
                status,
            }),
        })
    }

    fn take_message(&mut self) -> Option<Result<Vec<u8>>> {
        if let Some(m) = self.messages.pop_front() {
            return Some(Ok(m));
        }
        self.terminal()
    }

    fn take_message_to_buffer(&mut self, offset: usize) -> Option<Result<usize>> {
        let Some(m) = self.messages.front() else {
            return self.terminal();
        };
        let room = self.res.buffer.len() - offset;
        if m.len() > room {
            return Some(Err(Error::MessageTooLarge {
                len: m.len(),
                max: room,
            }));
        }
        let m = self.messages.pop_front().expect("checked above");
        Some(self.res.buffer.write(offset, &m).map(|()| m.len()))
    }

    fn take_notification(&mut self) -> Option<Result<Notification>> {
        if let Some(n) = self.notifications.pop_front() {
            return Some(Ok(n));
        }
        self.terminal()
    }

    /// The error that ends a wait on a closed or broken connection.
    fn terminal<T>(&self) -> Option<Result<T>> {
        if self.link.is_none() {
            return Some(Err(Error::Closed));
        }
        self.down.as_ref().map(|d| Err(d.error()))
    }

    fn try_take<T>(
        &mut self,
        mut ready: impl FnMut(&mut Self) -> Option<Result<T>>,
    ) -> Result<Option<T>> {
        if let Some(r) = ready(self) {
            return r.map(Some);
        }
        self.poll_cq()?;
        ready(self).transpose()
    }

    fn deadline(&self) -> Option<Instant> {
        self.timeout.and_then(|t| Instant::now().checked_add(t))
    }

    fn timed_out(&self) -> Error {
        Error::Timeout(self.timeout.unwrap_or_default())
    }

    /// Waits (per the mode) until `ready` has an answer.
    fn wait_for<T>(&mut self, mut ready: impl FnMut(&mut Self) -> Option<Result<T>>) -> Result<T> {
        let deadline = self.deadline();
        loop {
            if let Some(r) = ready(self) {
                return r;
            }
            self.block(deadline)?;
        }
    }

    /// Returns once at least one completion was filed.
    fn block(&mut self, deadline: Option<Instant>) -> Result<()> {
        match self.mode {
            Mode::Polling => {
                let mut spins = 0u32;
                loop {
                    if self.poll_cq()? > 0 {
                        return Ok(());
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(self.timed_out());
                    }
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(64) {
                        // Let the peer (or the progress thread) run on a busy machine.
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
            Mode::Event => loop {
                if self.arm()? {
                    return Ok(());
                }
                let wait = match deadline {
                    None => IDLE_WAIT,
                    Some(d) => match d.checked_duration_since(Instant::now()) {
                        Some(left) if !left.is_zero() => left,
                        _ => return Err(self.timed_out()),
                    },
                };
                let link = self.live()?;
                let comp = link
                    .comp
                    .as_ref()
                    .expect("event mode has a completion channel");
                match comp.wait_timeout(wait) {
                    // An event, or none yet: look again (and at the deadline).
                    Ok(_) => {}
                    // Another waiter took the event: look again.
                    Err(softrdma::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e.into()),
                }
            },
        }
    }

    /// Event mode: files pending completions, or arms the CQ and checks
    /// once more (a completion between the poll and the arming would
    /// otherwise not wake anybody). True if something was filed.
    fn arm(&mut self) -> Result<bool> {
        if self.poll_cq()? > 0 {
            return Ok(true);
        }
        self.live()?.cq.req_notify(false)?;
        Ok(self.poll_cq()? > 0)
    }
}

#[cfg(feature = "tokio")]
impl Connection {
    /// [`Connection::send`] without blocking the thread.
    pub async fn send_async(&mut self, msg: &[u8]) -> Result<()> {
        let id = self.post_message(msg)?;
        self.wait_for_async(|c| c.take_sent(id)).await
    }

    /// [`Connection::recv`] without blocking the thread.
    pub async fn recv_async(&mut self) -> Result<Vec<u8>> {
        self.wait_for_async(Connection::take_message).await
    }

    /// [`Connection::write`] without blocking the thread.
    pub async fn write_async(
        &mut self,
        local_offset: usize,
        remote_offset: u64,
        len: usize,
    ) -> Result<()> {
        self.rdma_async(Op::Write, local_offset, remote_offset, len)
            .await
    }

    /// [`Connection::read`] without blocking the thread.
    pub async fn read_async(
        &mut self,
        local_offset: usize,
        remote_offset: u64,
        len: usize,
    ) -> Result<()> {
        self.rdma_async(Op::Read, local_offset, remote_offset, len)
            .await
    }

    /// [`Connection::rdma`] without blocking the thread.
    async fn rdma_async(
        &mut self,
        op: Op,
        local_offset: usize,
        remote_offset: u64,
        len: usize,
    ) -> Result<()> {
        let ids = self.post_rdma(op, local_offset, remote_offset, len)?;
        self.wait_all_async(ids).await
    }

    /// [`Connection::notify_write`] without blocking the thread.
    pub async fn notify_write_async(&mut self, offset: u64, len: u64) -> Result<()> {
        self.notify_async(wire::IMM_NOTIFY_WRITE, offset, len).await
    }

    /// [`Connection::notify_read`] without blocking the thread.
    pub async fn notify_read_async(&mut self, offset: u64, len: u64) -> Result<()> {
        self.notify_async(wire::IMM_NOTIFY_READ, offset, len).await
    }

    /// [`Connection::notify`] without blocking the thread.
    async fn notify_async(&mut self, imm: u32, offset: u64, len: u64) -> Result<()> {
        let id = self.post_notify(imm, offset, len)?;
        self.wait_for_async(|c| c.take_sent(id)).await
    }

    /// [`Connection::wait_notification`] without blocking the thread.
    pub async fn wait_notification_async(&mut self) -> Result<Notification> {
        self.wait_for_async(Connection::take_notification).await
    }

    /// [`Connection::close`] without blocking the thread.
    pub async fn close_async(&mut self) -> Result<()> {
        let link = self.link.take().ok_or(Error::Closed)?;
        if link.id.disconnect().is_ok() {
            let wait = self.timeout.unwrap_or(CLOSE_WAIT);
            let confirmed = async {
                while let Ok(ev) = link.channel.get_event_async().await {
                    if ev.kind() == EventKind::Disconnected && ev.is_for(&link.id) {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(wait, confirmed).await;
        }
        self.down.get_or_insert(Down::Disconnected);
        drop(link);
        Ok(())
    }

    async fn wait_all_async(&mut self, ids: Vec<u64>) -> Result<()> {
        let mut first = FirstError::default();
        for id in ids {
            if !first.note(self.wait_for_async(|c| c.take_sent(id)).await) {
                break;
            }
        }
        first.result()
    }

    async fn wait_for_async<T>(
        &mut self,
        mut ready: impl FnMut(&mut Self) -> Option<Result<T>>,
    ) -> Result<T> {
        let deadline = self.deadline();
        loop {
            if let Some(r) = ready(self) {
                return r;
            }
            self.block_async(deadline).await?;
        }
    }

    async fn block_async(&mut self, deadline: Option<Instant>) -> Result<()> {
        match self.mode {
            Mode::Polling => loop {
                if self.poll_cq()? > 0 {
                    return Ok(());
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(self.timed_out());
                }
                tokio::task::yield_now().await;
            },
            Mode::Event => loop {
                if self.arm()? {
                    return Ok(());
                }
                let timed_out = self.timed_out();
                let link = self.live()?;
                let comp = link
                    .comp
                    .as_ref()
                    .expect("event mode has a completion channel");
                let woke = match deadline {
                    None => comp.wait_async().await,
                    Some(d) => tokio::time::timeout_at(
                        tokio::time::Instant::from_std(d),
                        comp.wait_async(),
                    )
                    .await
                    .map_err(|_| timed_out)?,
                };
                woke?;
            },
        }
    }
}
