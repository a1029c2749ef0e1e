//! The MAD agents and the PMA, without a device.

use super::*;

const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1));
const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));

fn pma_get(attr: u16, port: u8) -> Box<Mad> {
    let mut m = Box::new([0u8; MAD_LEN]);
    MadHdr {
        base_version: 1,
        mgmt_class: pma::MGMT_CLASS_PERF,
        class_version: 1,
        method: method::GET,
        status: 0,
        class_specific: 0,
        tid: 0x1234_5678,
        attr_id: attr,
        resv: 0,
        attr_mod: 0,
    }
    .write(&mut m[..])
    .unwrap();
    m[pma::DATA_OFFSET + 1] = port;
    m
}

fn counters() -> pma::Counters {
    pma::Counters {
        xmit_bytes: 400,
        rcv_bytes: 800,
        xmit_pkts: 7,
        rcv_pkts: 9,
        ..Default::default()
    }
}

fn client(a: &mut MadAgents, port: &Arc<MadPort>) -> u32 {
    let reg = MadRegistration {
        class: pma::MGMT_CLASS_PERF,
        version: 1,
        methods: 0,
        oui: None,
    };
    a.register(port, reg).unwrap()
}

/// A request goes out with the agent's high TID; the device's PMA
/// answers it with the counters; the answer reaches the agent's port.
#[test]
fn pma_get_round_trip() {
    let now = Instant::from_nanos(0);
    let port = Arc::new(MadPort::new().unwrap());
    let mut asker = MadAgents::new(3);
    let id = client(&mut asker, &port);
    asker
        .send(
            now,
            &port,
            id,
            (A, B),
            pma_get(pma::attr::PORT_COUNTERS, 1),
            (Duration::from_millis(100), 2),
        )
        .unwrap();
    let (src, dst, req) = asker.poll_transmit().unwrap();
    assert_eq!((src, dst), (A, B));
    let tid = u64::from_be_bytes(req[8..16].try_into().unwrap());
    assert_eq!(tid, (3u64 << 56) | (u64::from(id) << 32) | 0x1234_5678);

    let mut device = MadAgents::new(1);
    device.handle(A, B, &req[..], counters);
    let (src, dst, resp) = device.poll_transmit().unwrap();
    assert_eq!((src, dst), (B, A));
    let h = MadHdr::parse(&resp[..]).unwrap();
    assert_eq!((h.method, h.status, h.tid), (0x81, 0, tid));
    let pc = pma::PortCounters::parse(&resp[pma::DATA_OFFSET..]).unwrap();
    assert_eq!((pc.port, pc.xmit_data, pc.rcv_data), (1, 100, 200));
    assert_eq!((pc.xmit_pkts, pc.rcv_pkts), (7, 9));

    asker.handle(B, A, &resp[..], || {
        unreachable!("a response is not answered")
    });
    assert!(port.wait(Some(Duration::ZERO)).unwrap());
    let got = port.take(|_| true).unwrap().unwrap();
    assert_eq!((got.agent, got.status, got.peer), (id, 0, B));
    assert_eq!(got.mad, resp);
    assert_eq!(asker.poll_timeout(), None, "answered: no longer in flight");
}

#[test]
fn unanswered_request_is_retried_then_times_out() {
    let t0 = Instant::from_nanos(0);
    let port = Arc::new(MadPort::new().unwrap());
    let mut a = MadAgents::new(1);
    let id = client(&mut a, &port);
    let req = pma_get(pma::attr::PORT_COUNTERS, 1);
    a.send(t0, &port, id, (A, B), req, (Duration::from_millis(10), 1))
        .unwrap();
    assert!(a.poll_transmit().is_some());
    let t1 = a.poll_timeout().unwrap();
    assert_eq!(t1, t0 + Duration::from_millis(10));
    a.handle_timeout(t1);
    assert!(a.poll_transmit().is_some(), "one retry");
    assert!(port.take(|_| true).is_none());
    a.handle_timeout(a.poll_timeout().unwrap());
    assert!(a.poll_transmit().is_none());
    let got = port.take(|_| true).unwrap().unwrap();
    assert_eq!(got.status, libc::ETIMEDOUT as u32);
    assert_eq!(got.peer, B);
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn pma_errors_and_extended_counters() {
    let mut d = MadAgents::new(1);
    let mut answer = |m: Box<Mad>| {
        d.handle(A, B, &m[..], counters);
        d.poll_transmit().unwrap().2
    };
    let r = answer(pma_get(pma::attr::PORT_COUNTERS, 2));
    assert_eq!(
        MadHdr::parse(&r[..]).unwrap().status,
        pma::status::BAD_ATTR_VALUE
    );
    let r = answer(pma_get(0x0016, 1));
    assert_eq!(
        MadHdr::parse(&r[..]).unwrap().status,
        pma::status::BAD_METHOD_ATTR
    );
    let mut set = pma_get(pma::attr::PORT_COUNTERS, 1);
    set[3] = method::SET;
    let r = answer(set);
    let h = MadHdr::parse(&r[..]).unwrap();
    assert_eq!((h.method, h.status), (0x81, pma::status::BAD_METHOD));
    let r = answer(pma_get(pma::attr::PORT_COUNTERS_EXT, 0xFF));
    let e = pma::PortCountersExt::parse(&r[pma::DATA_OFFSET..]).unwrap();
    assert_eq!((e.xmit_data, e.rcv_pkts), (100, 9));
}

#[test]
fn requests_reach_the_registered_server_and_registrations_are_checked() {
    let port = Arc::new(MadPort::new().unwrap());
    let mut a = MadAgents::new(1);
    let get = MadRegistration {
        class: pma::MGMT_CLASS_PERF,
        version: 1,
        methods: 1 << method::GET,
        oui: None,
    };
    let id = a.register(&port, get).unwrap();
    assert_eq!(a.register(&port, get), Err(libc::EINVAL), "Get taken");
    for (class, errno) in [
        (0x01, libc::EPROTONOSUPPORT),
        (0x81, libc::EPROTONOSUPPORT),
        (0x07, libc::EINVAL),
    ] {
        let r = MadRegistration { class, ..get };
        assert_eq!(a.register(&port, r), Err(errno));
    }
    let vendor = MadRegistration { class: 0x30, ..get };
    assert_eq!(a.register(&port, vendor), Err(libc::EINVAL), "needs an OUI");
    a.handle(B, A, &pma_get(pma::attr::PORT_COUNTERS, 1)[..], || {
        unreachable!("a registered server takes it, not the device")
    });
    assert!(a.poll_transmit().is_none());
    assert_eq!(port.take(|_| true).unwrap().unwrap().agent, id);
    assert!(port.take(|_| false).is_none(), "queue empty");
    let other = Arc::new(MadPort::new().unwrap());
    assert_eq!(a.unregister(&other, id), Err(libc::EINVAL));
    a.close(&port);
    assert_eq!(a.unregister(&port, id), Err(libc::EINVAL));
}

/// The registry's part, in memory: (class, version) -> slot.
#[derive(Debug, Clone)]
struct FakeHost {
    me: u8,
    table: Arc<std::sync::Mutex<HashMap<(u8, u8), u8>>>,
}

struct Release(FakeHost, (u8, u8));

impl Drop for Release {
    fn drop(&mut self) {
        self.0.table.lock().unwrap().remove(&self.1);
    }
}

impl MadServers for FakeHost {
    fn claim(&self, class: u8, version: u8) -> Result<Claim, Errno> {
        let mut t = self.table.lock().unwrap();
        if t.contains_key(&(class, version)) {
            return Err(libc::EINVAL);
        }
        t.insert((class, version), self.me);
        Ok(Claim::new(Release(self.clone(), (class, version))))
    }

    fn holder(&self, class: u8, version: u8) -> Option<u8> {
        let t = self.table.lock().unwrap();
        t.get(&(class, version)).copied().filter(|&s| s != self.me)
    }
}

/// A request reaching a member that does not serve its class goes on to
/// the member that does (even for the PMA's class, which the device
/// answers only when nobody serves it); serving is host-wide exclusive
/// per class and version, and ends with the last local server.
#[test]
fn requests_go_to_the_member_serving_their_class() {
    let table = Arc::default();
    let host = |me| {
        let mut a = MadAgents::new(me);
        a.set_servers(Box::new(FakeHost {
            me,
            table: Arc::clone(&table),
        }));
        a
    };
    let (mut first, mut server, mut other) = (host(1), host(2), host(3));
    let port = Arc::new(MadPort::new().unwrap());
    let get = MadRegistration {
        class: pma::MGMT_CLASS_PERF,
        version: 1,
        methods: 1 << method::GET,
        oui: None,
    };
    let id = server.register(&port, get).unwrap();
    let set = MadRegistration {
        methods: 1 << method::SET,
        ..get
    };
    let id2 = server.register(&port, set).unwrap();
    assert_eq!(other.register(&port, get), Err(libc::EINVAL), "host-wide");
    client(&mut other, &port); // a client claims nothing

    let req = pma_get(pma::attr::PORT_COUNTERS, 1);
    first.handle(A, B, &req[..], || {
        unreachable!("not the device's to answer")
    });
    assert!(first.poll_transmit().is_none());
    assert_eq!(first.take_forward(), Some(2));
    assert_eq!(first.take_forward(), None, "taken");
    server.handle(A, B, &req[..], || unreachable!("its agent's"));
    assert_eq!(server.take_forward(), None);
    assert_eq!(port.take(|_| true).unwrap().unwrap().agent, id);

    server.unregister(&port, id).unwrap();
    first.handle(A, B, &req[..], counters);
    assert_eq!(
        first.take_forward(),
        Some(2),
        "the Set server still holds it"
    );
    server.unregister(&port, id2).unwrap();
    first.handle(A, B, &req[..], counters);
    assert_eq!(first.take_forward(), None);
    assert!(first.poll_transmit().is_some(), "the device answers again");
    assert!(other.register(&port, get).is_ok(), "released");
}
