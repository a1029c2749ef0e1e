//! Two [`Stream`]s joined back to back through plain memory: every posted
//! WRITE lands in the peer's buffers at once and completes on both sides at
//! the next step. A stream of bytes crosses byte-exact in both directions,
//! with the receive buffer wrapping many times, credits and buffer grants
//! flowing back, and the receiver never holding more unread messages than
//! the receive queue it granted.

use std::collections::VecDeque;

use softrdma_rsocket::proto::*;
use softrdma_rsocket::stream::*;

struct Table([Sge; SGL_SIZE]);

impl TargetSgl for Table {
    fn get(&self, i: usize) -> Sge {
        self.0[i]
    }
    fn set(&mut self, i: usize, s: Sge) {
        self.0[i] = s;
    }
}

struct Side {
    s: Stream,
    table: Table,
    rbuf: Vec<u8>,
    rbuf_at: u64,
    table_at: u64,
    /// Immediates of writes that arrived (receive completions to come).
    arrived: VecDeque<u32>,
    /// Work requests posted (send completions to come).
    posted: VecDeque<u32>,
}

const LAYOUT: Layout = Layout {
    sbuf: 1 << 14,
    rbuf: 1 << 13,
    sq: 16,
    rq: 16,
    inline: 64,
};

impl Side {
    fn new(base: u64) -> Side {
        let rbuf_at = base;
        let s = Stream::new(
            LAYOUT,
            Sge {
                addr: rbuf_at,
                key: 7,
                length: LAYOUT.rbuf,
            },
        );
        Side {
            s,
            table: Table([Sge::default(); SGL_SIZE]),
            rbuf: vec![0; LAYOUT.rbuf as usize],
            rbuf_at,
            table_at: base + 0x10_0000,
            arrived: VecDeque::new(),
            posted: VecDeque::new(),
        }
    }

    fn conn_data(&self) -> ConnData {
        let cd = self.s.conn_data(
            Sge {
                addr: self.table_at,
                key: 9,
                length: SGL_SIZE as u32,
            },
            0,
        );
        ConnData::decode(&cd.encode()).unwrap()
    }

    /// An RDMA WRITE of `bytes` to `dst` landing in this side's memory.
    fn land(&mut self, dst: Sge, bytes: &[u8]) {
        if dst.addr >= self.table_at {
            let i = ((dst.addr - self.table_at) as usize) / SGE_SIZE;
            let b: [u8; SGE_SIZE] = bytes.try_into().unwrap();
            self.table.0[i] = Sge {
                addr: u64::from_ne_bytes(b[..8].try_into().unwrap()),
                key: u32::from_ne_bytes(b[8..12].try_into().unwrap()),
                length: u32::from_ne_bytes(b[12..].try_into().unwrap()),
            };
        } else {
            let o = (dst.addr - self.rbuf_at) as usize;
            assert!(
                o + bytes.len() <= self.rbuf.len(),
                "a write past the granted buffer"
            );
            self.rbuf[o..o + bytes.len()].copy_from_slice(bytes);
        }
    }
}

/// Moves what each side posted: completions on both sides.
fn complete(a: &mut Side, b: &mut Side) {
    for x in [a, b] {
        while let Some(imm) = x.arrived.pop_front() {
            assert_eq!(x.s.received(imm), Received::Continue);
            assert!(x.s.unread_messages() <= LAYOUT.rq as usize);
        }
        while let Some(wr) = x.posted.pop_front() {
            x.s.sent(wr, None);
        }
    }
}

fn grant(from: &mut Side, to: &mut Side) {
    while let Some(cu) = from.s.credit_update() {
        if let Some((bytes, dst)) = cu.grant {
            to.land(dst, &bytes);
        }
        to.arrived.push_back(cu.imm);
        from.posted.push_back(cu.imm);
    }
}

/// Sends what `from` may of `data[*sent..]` to `to`.
fn send(from: &mut Side, to: &mut Side, data: &[u8], sent: &mut usize) {
    while *sent < data.len() && from.s.can_send(&from.table) {
        let w = from
            .s
            .write(data.len() - *sent, MAX_TRANSFER, &mut from.table);
        assert!(w.len > 0);
        let bytes = &data[*sent..*sent + w.len as usize];
        match w.staging {
            Staging::Inline => assert!(w.len <= LAYOUT.inline),
            Staging::Sbuf(p, n) => {
                let total: u32 = p[..n].iter().map(|&(_, l)| l).sum();
                assert_eq!(total, w.len);
            }
        }
        to.land(w.dst, bytes);
        to.arrived.push_back(w.imm);
        from.posted.push_back(w.imm);
        *sent += w.len as usize;
    }
}

fn read(side: &mut Side, got: &mut Vec<u8>, chunk: usize) {
    let mut buf = vec![0u8; chunk];
    let rbuf = side.rbuf.clone();
    let n = side.s.read(&mut buf, false, |off, dst| {
        dst.copy_from_slice(&rbuf[off as usize..off as usize + dst.len()]);
    });
    got.extend_from_slice(&buf[..n]);
}

/// Two sides that exchanged their connection data (as REQ and REP carry it).
fn connected() -> (Side, Side) {
    let (mut a, mut b) = (Side::new(0x1000_0000), Side::new(0x2000_0000));
    let (ca, cb) = (a.conn_data(), b.conn_data());
    a.s.save_peer(&cb, &mut a.table);
    b.s.save_peer(&ca, &mut b.table);
    (a, b)
}

#[test]
fn a_stream_crosses_byte_exact_both_ways_with_credits_flowing_back() {
    let (mut a, mut b) = connected();
    let ab: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let ba: Vec<u8> = (0..100_000u32).map(|i| (i * 13 + 5) as u8).collect();
    let (mut sent_ab, mut sent_ba) = (0, 0);
    let (mut got_ab, mut got_ba) = (Vec::new(), Vec::new());
    let mut rounds = 0;
    while got_ab.len() < ab.len() || got_ba.len() < ba.len() {
        rounds += 1;
        assert!(
            rounds < 100_000,
            "no progress: {} of {} bytes",
            got_ab.len(),
            ab.len()
        );
        send(&mut a, &mut b, &ab, &mut sent_ab);
        send(&mut b, &mut a, &ba, &mut sent_ba);
        complete(&mut a, &mut b);
        // Reads of odd sizes, so messages are split and the buffer wraps
        // off its halves.
        read(&mut b, &mut got_ab, 1000 + rounds % 3001);
        read(&mut a, &mut got_ba, 37);
        grant(&mut b, &mut a);
        grant(&mut a, &mut b);
        complete(&mut a, &mut b);
    }
    assert!(got_ab == ab, "a -> b differs");
    assert!(got_ba == ba, "b -> a differs");
    assert!(a.s.all_sends_done() && b.s.all_sends_done());
}

#[test]
fn a_disconnect_stops_the_batch_and_ends_both_directions() {
    let (mut a, mut b) = connected();
    assert!(b.s.conn_can_send(&b.table) && !b.s.conn_have_rdata());
    let imm = a.s.ctrl(CTRL_DISCONNECT).unwrap();
    assert_eq!(b.s.received(imm), Received::Stop);
    assert_eq!(b.s.state, DISCONNECTED);
    // Nothing more to wait for on the disconnected side.
    assert!(b.s.conn_have_rdata() && b.s.conn_can_send(&b.table));
    a.s.sent(imm, None);
    assert_eq!(a.s.state, DISCONNECTED);
    // Four control slots at most in flight.
    let (mut c, d) = (Side::new(0x3000_0000), Side::new(0x4000_0000));
    c.s.save_peer(&d.conn_data(), &mut c.table);
    let slots: Vec<_> = (0..5).map(|_| c.s.ctrl(CTRL_KEEPALIVE)).collect();
    assert_eq!(
        slots.iter().filter(|s| s.is_some()).count(),
        QP_CTRL_SIZE as usize
    );
}

#[test]
fn shutdown_halves_and_a_batch_cut_by_a_disconnect() {
    let (mut a, mut b) = connected();
    // Write half first: the peer is told to stop reading; then the read
    // half: nothing left, the whole connection goes.
    assert_eq!(a.s.shutdown(Half::Write), Some(CTRL_SHUTDOWN));
    assert_eq!(a.s.state & WRITABLE, 0);
    assert_eq!(a.s.shutdown(Half::Read), Some(CTRL_DISCONNECT));
    // Reading half alone says nothing to the peer.
    assert_eq!(b.s.shutdown(Half::Read), None);
    assert_eq!(b.s.state & READABLE, 0);
    // b has a data write in flight (as much as a's first grant holds) when
    // a's disconnect arrives in the same batch: the write's send buffer and
    // WR come back, the receive after the disconnect is not counted.
    let mut sent = 0;
    send(&mut b, &mut a, &[7u8; 5000], &mut sent);
    let wr = b.posted.pop_front().unwrap();
    let full = b.s.sbuf_free();
    let batch = [
        Completion {
            wr_id: WR_RECV,
            imm: msg(OP_CTRL, CTRL_DISCONNECT),
            error: None,
        },
        Completion {
            wr_id: u64::from(wr),
            imm: 0,
            error: None,
        },
        Completion {
            wr_id: WR_RECV,
            imm: msg(OP_DATA, 10),
            error: None,
        },
    ];
    assert_eq!(b.s.completions(&batch), (1, true));
    assert_eq!(b.s.state, DISCONNECTED);
    assert_eq!(b.s.sbuf_free(), full + sent as u32);
    assert_eq!(b.s.sbuf_free(), LAYOUT.sbuf);
    assert!(b.s.all_sends_done());
}
