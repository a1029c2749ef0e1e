//! The harness of the peer-copy tests: two sans-IO endpoints whose
//! packets a fake lane hands over, with a fake copier that reads the other
//! endpoint's memory, and a fake ticket book and placer for READs placed
//! by their responder.

pub(crate) use softrdma_transport::{
    Access, AddressVector, AtomicOp, Config, CqHandle, Datagram, Endpoint, Instant, Memory, Mtu,
    PEER_COPY_MIN, PeerCopyError, PeerSeg, QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpState,
    QpType, Qpn, RecvWr, SendFlags, SendWr, Sge, Wc, WcStatus, WrOpcode,
};
pub(crate) use softrdma_transport::{PLACE_MAX, PeerFile, PlaceOffer, PlacementTicket, TicketRef};
pub(crate) use std::net::{IpAddr, Ipv4Addr, SocketAddr};
pub(crate) use std::sync::{Arc, Mutex};
pub(crate) use std::time::Duration;

/// Flat memory: host addresses `base..base + buf.len()`.
pub(crate) struct Flat {
    pub(crate) base: u64,
    pub(crate) buf: Vec<u8>,
}

impl Flat {
    pub(crate) fn at(&self, addr: u64, len: usize) -> &[u8] {
        let o = (addr - self.base) as usize;
        &self.buf[o..o + len]
    }
}

impl Memory for Flat {
    fn read(&mut self, addr: u64, dst: &mut [u8]) {
        dst.copy_from_slice(self.at(addr, dst.len()));
    }
    fn write(&mut self, addr: u64, src: &[u8]) {
        let o = (addr - self.base) as usize;
        self.buf[o..o + src.len()].copy_from_slice(src);
    }
    fn atomic(&mut self, _addr: u64, _op: AtomicOp) -> u64 {
        unreachable!("no atomics here")
    }
}

/// A fake placement ticket's state (the engine's ticket word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ticket {
    Armed,
    Taken,
    Placed,
    Revoked,
}

/// What happened to a requester's tickets, in order (`Copy`: its `read_peer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ev {
    Arm(u32),
    Take(u32),
    Settle(u32, bool),
    Drop(u32),
    Copy,
}

#[derive(Debug, Default)]
pub(crate) struct BookState {
    /// Per ticket index: state and arming seq.
    pub(crate) tickets: Vec<(Ticket, u32)>,
    pub(crate) log: Vec<Ev>,
}

/// A fake ticket book, shared by the test, the requester that arms and the
/// responder that places (the engine's shared ticket page).
#[derive(Debug, Clone, Default)]
pub(crate) struct Book(pub(crate) Arc<Mutex<BookState>>);

impl Book {
    pub(crate) fn log(&self) -> Vec<Ev> {
        self.0.lock().unwrap().log.clone()
    }
    pub(crate) fn state(&self, i: u32) -> Ticket {
        self.0.lock().unwrap().tickets[i as usize].0
    }
    fn push(&self, e: Ev) {
        self.0.lock().unwrap().log.push(e);
    }
}

/// Seqs distinct from indexes, so a placer mixing them up refuses.
const SEQ0: u32 = 1000;

#[derive(Debug)]
struct FakeTicket {
    book: Book,
    index: u32,
    settled: bool,
}

impl FakeTicket {
    /// Ends the ticket; whether it was placed.
    fn end(&mut self) -> bool {
        let mut b = self.book.0.lock().unwrap();
        let t = &mut b.tickets[self.index as usize].0;
        if *t != Ticket::Placed {
            *t = Ticket::Revoked;
        }
        *t == Ticket::Placed
    }
}

impl PlacementTicket for FakeTicket {
    fn offer(&self) -> TicketRef {
        TicketRef {
            fd: 5,
            ino: 55,
            index: self.index,
            seq: SEQ0 + self.index,
        }
    }
    fn settle(mut self: Box<Self>) -> bool {
        self.settled = true;
        let placed = self.end();
        self.book.push(Ev::Settle(self.index, placed));
        placed
    }
}

impl Drop for FakeTicket {
    fn drop(&mut self) {
        if !self.settled {
            self.end();
            self.book.push(Ev::Drop(self.index));
        }
    }
}

/// How a responder answers `place_peer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placer {
    /// Takes an armed ticket and writes, else refuses.
    Honest,
    Refuse,
    /// Says "placed" without taking the ticket or writing.
    Lie,
}

/// The other endpoint's memory as a lane reaches it.
enum Peer<'a> {
    None,
    Read(&'a Flat),
    /// Writable: placement into it.
    Write(&'a mut Flat),
}

impl Peer<'_> {
    fn flat(&self) -> &Flat {
        match self {
            Peer::Read(f) => f,
            Peer::Write(f) => f,
            Peer::None => panic!("no peer memory here"),
        }
    }
}

/// The receiver's memory plus a fake copier from the sender's: what the
/// engine's `process_vm_readv` does, or the failure it is told to report;
/// and the fake ticket book (arming with its own, placing with the peer's).
pub(crate) struct Lane<'a> {
    me: &'a mut Flat,
    peer: Peer<'a>,
    pub(crate) fail: Option<PeerCopyError>,
    copies: &'a mut u32,
    book: Option<&'a Book>,
    peer_book: Option<&'a Book>,
    placer: Placer,
    places: &'a mut u32,
}

impl Memory for Lane<'_> {
    fn read(&mut self, addr: u64, dst: &mut [u8]) {
        self.me.read(addr, dst);
    }
    fn write(&mut self, addr: u64, src: &[u8]) {
        self.me.write(addr, src);
    }
    fn atomic(&mut self, addr: u64, op: AtomicOp) -> u64 {
        self.me.atomic(addr, op)
    }
    fn read_peer(
        &mut self,
        _from: u64,
        src: &[PeerSeg],
        dst: &[PeerSeg],
        _dst_on_demand: bool,
    ) -> Result<(), PeerCopyError> {
        *self.copies += 1;
        if let Some(b) = self.book {
            b.push(Ev::Copy);
        }
        if let Some(e) = self.fail {
            return Err(e);
        }
        let peer = self.peer.flat();
        let bytes: Vec<u8> = src
            .iter()
            .flat_map(|s| peer.at(s.addr, s.len as usize).to_vec())
            .collect();
        let mut off = 0;
        for d in dst {
            self.me.write(d.addr, &bytes[off..off + d.len as usize]);
            off += d.len as usize;
        }
        assert_eq!(off, bytes.len(), "source and destination totals differ");
        Ok(())
    }
    fn arm_ticket(&mut self) -> Option<Box<dyn PlacementTicket>> {
        let book = self.book?;
        let mut b = book.0.lock().unwrap();
        let index = b.tickets.len() as u32;
        b.tickets.push((Ticket::Armed, SEQ0 + index));
        b.log.push(Ev::Arm(index));
        Some(Box::new(FakeTicket {
            book: book.clone(),
            index,
            settled: false,
        }))
    }
    fn place_peer(&mut self, _from: u64, offer: &PlaceOffer, src: u64) -> bool {
        *self.places += 1;
        match self.placer {
            Placer::Refuse => return false,
            Placer::Lie => return true,
            Placer::Honest => {}
        }
        let Some(book) = self.peer_book else {
            return false;
        };
        let mut b = book.0.lock().unwrap();
        let i = offer.ticket.index;
        match b.tickets.get_mut(i as usize) {
            Some(t) if *t == (Ticket::Armed, offer.ticket.seq) => t.0 = Ticket::Taken,
            _ => return false,
        }
        b.log.push(Ev::Take(i));
        let bytes = self.me.at(src, offer.dst.len as usize).to_vec();
        let Peer::Write(dst) = &mut self.peer else {
            panic!("placement needs a writable requester (lane_mut)");
        };
        dst.write(offer.dst.addr, &bytes);
        b.tickets[i as usize].0 = Ticket::Placed;
        true
    }
}

pub(crate) struct Node {
    pub(crate) ep: Endpoint,
    pub(crate) mem: Flat,
    pub(crate) ip: IpAddr,
    pub(crate) qpn: Qpn,
    pub(crate) cq: CqHandle,
    pub(crate) key: u32,
    pub(crate) fail: Option<PeerCopyError>,
    pub(crate) copies: u32,
    /// Arms placement tickets for its READs when set.
    pub(crate) book: Option<Book>,
    pub(crate) placer: Placer,
    /// `place_peer` calls as a responder.
    pub(crate) places: u32,
}

pub(crate) const LEN: usize = 1 << 20;
pub(crate) const A_BASE: u64 = 0x10_0000;
pub(crate) const B_BASE: u64 = 0x80_0000;

pub(crate) fn node(last_octet: u8, base: u64, fill: u8) -> Node {
    node_with(last_octet, base, fill, |_| {})
}

/// [`node`], its configuration changed by `tweak` first.
pub(crate) fn node_with(last_octet: u8, base: u64, fill: u8, tweak: impl Fn(&mut Config)) -> Node {
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, last_octet));
    let mut config = Config::new(ip, u64::from(last_octet));
    tweak(&mut config);
    let mut ep = Endpoint::new(config);
    let pd = ep.alloc_pd().unwrap();
    let (cq, _) = ep.create_cq(64).unwrap();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = ep.reg_mr(pd, base, LEN as u64, base, all).unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 4,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: true,
    };
    let (qpn, _) = ep.create_qp(&init).unwrap();
    Node {
        ep,
        mem: Flat {
            base,
            buf: (0..LEN).map(|i| (i % 251) as u8 ^ fill).collect(),
        },
        ip,
        qpn,
        cq,
        key: mr.lkey,
        fail: None,
        copies: 0,
        book: None,
        placer: Placer::Honest,
        places: 0,
    }
}

/// Names a memfd (fake) holding `[addr, addr + len)` of `n`'s region.
pub(crate) fn share(n: &mut Node, addr: u64, len: u64) {
    let f = PeerFile {
        fd: 3,
        ino: 33,
        addr,
        len,
    };
    assert!(n.ep.set_mr_share(n.key, Some(f)));
}

pub(crate) fn connect(n: &mut Node, peer_ip: IpAddr, peer_qpn: Qpn) {
    let now = Instant::ZERO;
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: Access::REMOTE_WRITE | Access::REMOTE_READ,
        ..QpAttr::default()
    };
    let init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    n.ep.modify_qp(now, n.qpn, &a, init).unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = Mtu::M4096;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = 100;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.ah_attr = AddressVector::to_ip(peer_ip);
    let rtr = M::STATE
        | M::AV
        | M::PATH_MTU
        | M::DEST_QPN
        | M::RQ_PSN
        | M::MAX_DEST_RD_ATOMIC
        | M::MIN_RNR_TIMER;
    n.ep.modify_qp(now, n.qpn, &a, rtr).unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = 100;
    a.timeout = 10; // 4.1 ms
    a.retry_cnt = 2;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    let rts = M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC;
    n.ep.modify_qp(now, n.qpn, &a, rts).unwrap();
    n.ep.set_peer_copy(n.qpn, true).unwrap();
}

pub(crate) fn pair() -> (Node, Node) {
    pair_with(|_| {})
}

/// [`pair`], both configurations changed by `tweak`.
pub(crate) fn pair_with(tweak: impl Fn(&mut Config)) -> (Node, Node) {
    let mut a = node_with(1, A_BASE, 0, &tweak);
    let mut b = node_with(2, B_BASE, 0x5A, &tweak);
    let (a_ip, b_ip, a_qpn, b_qpn) = (a.ip, b.ip, a.qpn, b.qpn);
    connect(&mut a, b_ip, b_qpn);
    connect(&mut b, a_ip, a_qpn);
    (a, b)
}

pub(crate) fn drain(n: &mut Node, now: Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    let mut mem = Lane {
        me: &mut n.mem,
        peer: Peer::None,
        fail: n.fail,
        copies: &mut n.copies,
        book: n.book.as_ref(),
        peer_book: None,
        placer: n.placer,
        places: &mut n.places,
    };
    while let Some(t) = n.ep.poll_transmit(now, &mut mem, &mut buf) {
        out.push(buf[..t.len].to_vec());
    }
    out
}

fn deliver(to: &mut Node, from: (IpAddr, Peer<'_>, Option<&Book>), now: Instant, payload: &[u8]) {
    let (ip, peer, peer_book) = from;
    let d = Datagram {
        src: SocketAddr::new(ip, 4791),
        dst_ip: to.ip,
        payload,
    };
    let mut mem = Lane {
        me: &mut to.mem,
        peer,
        fail: to.fail,
        copies: &mut to.copies,
        book: to.book.as_ref(),
        peer_book,
        placer: to.placer,
        places: &mut to.places,
    };
    if softrdma_wire::direct::is_direct(payload) {
        to.ep.handle_direct(now, &d, &mut mem);
    } else {
        to.ep.handle_datagram_unchecked_icrc(now, &d, &mut mem);
    }
}

/// Posts `wr` as the engine does a lone post to an idle QP
/// (`Endpoint::post_send_direct`): the direct record it started, if any.
pub(crate) fn post_direct(n: &mut Node, now: Instant, wr: SendWr) -> Option<Vec<u8>> {
    let mut out = [0u8; softrdma_wire::direct::DIRECT_MAX_LEN];
    let t =
        n.ep.post_send_direct(now, n.qpn, wr, &mut n.mem, &mut out)
            .unwrap()?;
    assert_eq!(
        t.dst.ip(),
        n.ep.query_qp(n.qpn).unwrap().0.ah_attr.dest_ip()
    );
    Some(out[..t.len].to_vec())
}

/// Hands `payload` from `from` to `to` as a lane does.
pub(crate) fn lane(to: &mut Node, from: &Node, now: Instant, payload: &[u8]) {
    let peer = (from.ip, Peer::Read(&from.mem), from.book.as_ref());
    deliver(to, peer, now, payload);
}

/// [`lane`], `to` able to place into `from`'s memory.
pub(crate) fn lane_mut(to: &mut Node, from: &mut Node, now: Instant, payload: &[u8]) {
    let peer = (from.ip, Peer::Write(&mut from.mem), from.book.as_ref());
    deliver(to, peer, now, payload);
}

/// Runs both ways over the lane until neither has anything to send.
pub(crate) fn run(a: &mut Node, b: &mut Node, now: Instant) {
    loop {
        let (to_b, to_a) = (drain(a, now), drain(b, now));
        if to_b.is_empty() && to_a.is_empty() {
            return;
        }
        for p in &to_b {
            lane_mut(b, a, now, p);
        }
        for p in &to_a {
            lane_mut(a, b, now, p);
        }
    }
}

pub(crate) fn wcs(n: &mut Node) -> Vec<Wc> {
    let mut v = Vec::new();
    n.ep.poll_cq(n.cq, 16, |w| v.push(w)).unwrap();
    v
}

pub(crate) fn wr(op: WrOpcode, n: &Node, local: u64, len: u32, remote: u64, rkey: u32) -> SendWr {
    let mut w = SendWr::new(7, op);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [Sge {
        addr: local,
        length: len,
        lkey: n.key,
    }]
    .into();
    w.remote_addr = remote;
    w.rkey = rkey;
    w
}

pub(crate) const T0: Instant = Instant::from_millis(1);

/// The attributes of a move to `state` alone (with `M::STATE`).
pub(crate) fn to(state: QpState) -> QpAttr {
    QpAttr {
        qp_state: state,
        ..QpAttr::default()
    }
}

pub(crate) fn post_recv(n: &mut Node, addr: u64, len: u32) {
    let wr = RecvWr {
        wr_id: 42,
        sgl: [Sge {
            addr,
            length: len,
            lkey: n.key,
        }]
        .into(),
    };
    n.ep.post_recv(T0, n.qpn, wr).unwrap();
}
