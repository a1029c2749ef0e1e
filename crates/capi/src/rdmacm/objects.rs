//! librdmacm's C objects: event channels, CM ids and events.

use crate::ffi::*;
use softrdma_engine::cm_proto::IdHandle;
use softrdma_engine::{CmChannel, Engine};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, LazyLock, Mutex};

/// `struct rdma_event_channel` plus its queue.
#[repr(C)]
pub(crate) struct Chan {
    pub(crate) ch: rdma_event_channel,
    pub(crate) inner: Arc<CmChannel>,
}

/// What softrdma keeps about an id besides the C struct.
pub(crate) struct IdState {
    /// The device, once an operation chose it (bind, resolve, listen).
    pub(crate) engine: Option<Arc<Engine>>,
    /// The engine-side id, created together with `engine`.
    pub(crate) h: Option<IdHandle>,
    /// Where the id's events go: the application's channel or, for
    /// synchronous ids (NULL channel), a private one.
    pub(crate) chan: Arc<CmChannel>,
    pub(crate) sync: bool,
    /// CQs and channels `rdma_create_qp` made (destroyed with the QP).
    pub(crate) own_send_cq: bool,
    pub(crate) own_recv_cq: bool,
    /// `rdma_create_ep` on a passive id: what `rdma_get_request` gives each request.
    pub(crate) ep_pd: *mut ibv_pd,
    pub(crate) ep_attr: Option<ibv_qp_init_attr>,
    /// The SRQ `rdma_create_srq` made.
    pub(crate) own_srq: bool,
    /// Multicast groups joined (addresses).
    pub(crate) mcast: Vec<std::net::IpAddr>,
}

impl IdState {
    /// A new id's state: on `engine` (with its engine-side id) if the device
    /// is known already, with no QP, SRQ or multicast group of its own.
    pub(crate) fn new(
        engine: Option<(Arc<Engine>, IdHandle)>,
        chan: Arc<CmChannel>,
        sync: bool,
    ) -> IdState {
        let (engine, h) = engine.unzip();
        IdState {
            engine,
            h,
            chan,
            sync,
            own_send_cq: false,
            own_recv_cq: false,
            ep_pd: core::ptr::null_mut(),
            ep_attr: None,
            own_srq: false,
            mcast: Vec::new(),
        }
    }
}

/// `struct rdma_cm_id` plus [`IdState`].
#[repr(C)]
pub(crate) struct Id {
    pub(crate) id: rdma_cm_id,
    pub(crate) st: Mutex<IdState>,
    /// Events handed to the application against this id, and how many of
    /// them it acked: `rdma_destroy_id` waits until they match, as librdmacm
    /// does, so no event outlives its id (or the channel another thread is
    /// still reading).
    pub(crate) events: Mutex<EventCount>,
    pub(crate) acked: Condvar,
}

/// Reported and acked events of one id.
#[derive(Default)]
pub(crate) struct EventCount {
    pub(crate) reported: u64,
    pub(crate) acked: u64,
}

impl Id {
    pub(crate) fn new(id: rdma_cm_id, st: IdState) -> Self {
        Self {
            id,
            st: Mutex::new(st),
            events: Mutex::new(EventCount::default()),
            acked: Condvar::new(),
        }
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, IdState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self) -> std::sync::MutexGuard<'_, EventCount> {
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One more event handed out against this id.
    pub(crate) fn reported(&self) {
        self.count().reported += 1;
    }

    /// One of its events was acked (or freed with the id).
    pub(crate) fn ack(&self) {
        self.count().acked += 1;
        self.acked.notify_all();
    }

    /// Blocks until every event handed out against this id was acked.
    pub(crate) fn wait_acked(&self) {
        let mut c = self.count();
        while c.acked < c.reported {
            c = self.acked.wait(c).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// `struct rdma_cm_event` plus the private data it points to.
#[repr(C)]
pub(crate) struct Ev {
    pub(crate) ev: rdma_cm_event,
    pub(crate) private_data: Vec<u8>,
    /// The id the event counts against (the listener for a connection
    /// request, as in librdmacm); it stays alive until the event is acked.
    pub(crate) owner: *const Id,
}

// SAFETY: the raw pointers inside are C-side handles; softrdma only reaches the
// objects they name through the registry.
unsafe impl Send for IdState {}

static IDS: LazyLock<Mutex<HashMap<u32, usize>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Records which C object an engine-side id belongs to.
pub(crate) fn map_id(h: IdHandle, ptr: Option<usize>) {
    let mut m = IDS.lock().unwrap_or_else(|p| p.into_inner());
    match ptr {
        Some(p) => m.insert(h.0, p),
        None => m.remove(&h.0),
    };
}

/// The C object of an engine-side id, counted as having one more event
/// handed out ([`Id::reported`]) under the map's lock: `rdma_destroy_id`
/// unmaps the id under that lock and then waits for the event's ack, so the
/// object outlives the event being built from it on another thread.
pub(crate) fn claim_id(h: IdHandle) -> Option<*mut Id> {
    let m = IDS.lock().unwrap_or_else(|p| p.into_inner());
    let p = *m.get(&h.0)? as *mut Id;
    // SAFETY: mapped ids are live until unmapped, and unmapping takes this lock.
    unsafe { (*p).reported() };
    Some(p)
}
