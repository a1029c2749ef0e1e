//! XRC (IBTA annex A14): XRC domains (`ibv_open_xrcd`/`ibv_close_xrcd`),
//! XRC SRQs (`ibv_create_srq_ex` with `IBV_SRQT_XRC`, `ibv_get_srq_num`) and
//! the XRC receive QP (`ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`). XRC send
//! QPs are made by `qp.rs` like RC ones.
//!
//! A domain opened with a file descriptor is the file's: opening the same
//! file (same device and inode) again gives the same domain, as the kernel
//! does. softrdma keeps a domain's SRQs and target QPs in the process that
//! made them, so "the same domain" holds within one process; a second
//! process opening the file gets a domain of its own (docs/CONFORMANCE.md).

use super::objects::{self as o, Cq, Kind, Pd, Qp, Srq};
use crate::ffi::*;
use crate::guard::{ret, with_struct};
use core::ffi::c_int;
use softrdma_engine::Engine;
use softrdma_engine::transport::QpType;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// An XRC domain; `xrcd` is what the application sees.
#[repr(C)]
pub(crate) struct Xrcd {
    pub(crate) xrcd: ibv_xrcd,
    /// The engine's id for the domain (what its SRQs and target QPs carry).
    pub(crate) id: u32,
    pub(crate) engine: Arc<Engine>,
    /// (st_dev, st_ino) of the file the domain belongs to, if any.
    file: Option<(u64, u64)>,
}

/// Domains of files: (st_dev, st_ino) -> (id, opens).
#[derive(Default)]
struct Domains {
    by_file: HashMap<(u64, u64), (u32, u32)>,
    next_id: u32,
}

static DOMAINS: LazyLock<Mutex<Domains>> = LazyLock::new(|| Mutex::new(Domains::default()));

fn domains() -> std::sync::MutexGuard<'static, Domains> {
    DOMAINS.lock().unwrap_or_else(|p| p.into_inner())
}

impl Domains {
    fn fresh(&mut self) -> u32 {
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.next_id
    }
}

/// Extended-context slots for XRC.
pub(crate) fn install_vctx_ops(v: &mut verbs_context) {
    v.open_xrcd = Some(vctx_open_xrcd);
    v.close_xrcd = Some(vctx_close_xrcd);
    v.get_srq_num = Some(vctx_get_srq_num);
    v.open_qp = Some(vctx_open_qp);
}

/// Handles `ibv_open_qp` gave out that are still open, per QPN.
static OPENED: LazyLock<Mutex<HashMap<u32, u32>>> = LazyLock::new(Default::default);

fn opened() -> std::sync::MutexGuard<'static, HashMap<u32, u32>> {
    OPENED.lock().unwrap_or_else(|p| p.into_inner())
}

/// An `ibv_open_qp` handle of `qpn` was destroyed.
pub(crate) fn close_opened(qpn: u32) {
    let mut m = opened();
    if let Some(n) = m.get_mut(&qpn) {
        *n -= 1;
        if *n == 0 {
            m.remove(&qpn);
        }
    }
}

/// EBUSY while `ibv_open_qp` handles of `qpn` are open (as the kernel
/// refuses to destroy a shared XRC target QP that others still use).
pub(crate) fn check_not_opened(qpn: u32) -> Result<(), softrdma_engine::transport::VerbsError> {
    match opened().get(&qpn) {
        Some(n) => Err(softrdma_engine::transport::VerbsError::Busy(format!(
            "QP {qpn:#x} has {n} handles from ibv_open_qp"
        ))),
        None => Ok(()),
    }
}

/// `verbs_context::open_qp`: another handle on an XRC receive QP of the
/// domain `xrcd` (number, domain and type required). softrdma finds QPs of
/// this process only (module docs).
unsafe extern "C" fn vctx_open_qp(
    context: *mut ibv_context,
    attr: *mut ibv_qp_open_attr,
) -> *mut ibv_qp {
    let open = |a: &mut ibv_qp_open_attr| {
        let need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
        if a.comp_mask & need != need || a.comp_mask >= IBV_QP_OPEN_ATTR_RESERVED {
            return ret::null(libc::EINVAL);
        }
        if a.qp_type != IBV_QPT_XRC_RECV {
            return ret::null(libc::EINVAL);
        }
        // SAFETY: registry-checked.
        let Some(x) = (unsafe { o::obj::<Xrcd>(a.xrcd.cast(), Kind::Xrcd) }) else {
            return ret::null(libc::EINVAL);
        };
        if x.engine.qp_xrcd(a.qp_num) != Some(x.id) {
            return ret::null(libc::ENOENT);
        }
        let qp_context = if a.comp_mask & IBV_QP_OPEN_ATTR_CONTEXT != 0 {
            a.qp_context
        } else {
            core::ptr::null_mut()
        };
        let mut qp = ibv_qp_ex::zeroed();
        let b = &mut qp.qp_base;
        b.context = context;
        b.qp_context = qp_context;
        b.handle = a.qp_num;
        b.qp_num = a.qp_num;
        b.state = IBV_QPS_RESET;
        b.qp_type = IBV_QPT_XRC_RECV;
        *opened().entry(a.qp_num).or_insert(0) += 1;
        let obj = o::publish(
            Qp {
                qp,
                engine: x.engine.clone(),
                qpn: a.qp_num,
                qp_type: QpType::XrcRecv,
                sq_sig_all: false,
                ex: false,
                block_self_mcast: false,
                opened: true,
                max_sge: (0, 0),
                batch: Default::default(),
                express: None,
            },
            Kind::Qp,
        );
        obj.cast()
    };
    // SAFETY: NULL or valid for reads and writes, per the caller's contract.
    unsafe { with_struct(attr, ret::null, open) }
}

/// The file an XRCD fd names, as (st_dev, st_ino).
fn file_of(fd: c_int) -> Result<(u64, u64), c_int> {
    let mut st = core::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a whole `stat` on success and nothing else.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(libc::EBADF);
    }
    // SAFETY: fstat returned 0, so `st` is initialised.
    let st = unsafe { st.assume_init() };
    Ok((st.st_dev, st.st_ino))
}

/// `verbs_context::open_xrcd`: `fd` -1 makes a domain of its own; a file's
/// domain is found again (`O_EXCL`: EEXIST) or made (`O_CREAT`; ENOENT
/// without it).
unsafe extern "C" fn vctx_open_xrcd(
    context: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    let open = |a: &mut ibv_xrcd_init_attr| {
        if a.comp_mask & !(IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS) != 0 {
            return ret::null(libc::EOPNOTSUPP);
        }
        let need = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        if a.comp_mask & need != need || a.oflags & !(libc::O_CREAT | libc::O_EXCL) != 0 {
            return ret::null(libc::EINVAL);
        }
        o::with_ctx(context, ret::null, |c| {
            let mut d = domains();
            let (id, file) = if a.fd == -1 {
                (d.fresh(), None)
            } else {
                let key = match file_of(a.fd) {
                    Ok(k) => k,
                    Err(e) => return ret::null(e),
                };
                match d.by_file.get_mut(&key) {
                    Some(_) if a.oflags & libc::O_EXCL != 0 => return ret::null(libc::EEXIST),
                    Some((id, opens)) => {
                        *opens += 1;
                        (*id, Some(key))
                    }
                    None if a.oflags & libc::O_CREAT == 0 => return ret::null(libc::ENOENT),
                    None => {
                        let id = d.fresh();
                        d.by_file.insert(key, (id, 1));
                        (id, Some(key))
                    }
                }
            };
            let x = o::publish(
                Xrcd {
                    xrcd: ibv_xrcd { context },
                    id,
                    engine: c.engine.clone(),
                    file,
                },
                Kind::Xrcd,
            );
            x.cast()
        })
    };
    // SAFETY: NULL or valid for reads and writes, per the caller's contract.
    unsafe { with_struct(attr, ret::null, open) }
}

/// The XRC domain of this process that librdmacm's XRC ids use (as
/// librdmacm's `ucma_get_xrcd`: one per device, of no file, opened on first
/// use and kept).
pub(crate) fn cm_xrcd(context: *mut ibv_context) -> *mut ibv_xrcd {
    static CM_XRCD: Mutex<usize> = Mutex::new(0);
    let mut x = CM_XRCD.lock().unwrap_or_else(|p| p.into_inner());
    if *x == 0 || !o::is_live(*x, Kind::Xrcd) {
        let mut a = ibv_xrcd_init_attr {
            comp_mask: IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
            fd: -1,
            oflags: libc::O_CREAT,
        };
        // SAFETY: `a` is a local; `context` is checked by the callee.
        *x = unsafe { vctx_open_xrcd(context, &mut a) } as usize;
    }
    *x as *mut ibv_xrcd
}

/// `verbs_context::close_xrcd`. A domain's SRQs and QPs keep their id; the
/// file's domain is forgotten with its last open.
unsafe extern "C" fn vctx_close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    o::destroy(xrcd.cast(), Kind::Xrcd, |x: &Xrcd| {
        if let Some(key) = x.file {
            let mut d = domains();
            if let Some((_, opens)) = d.by_file.get_mut(&key) {
                *opens -= 1;
                if *opens == 0 {
                    d.by_file.remove(&key);
                }
            }
        }
        Ok(())
    })
}

/// `verbs_context::get_srq_num`: EINVAL for an SRQ that is not an XRC SRQ.
unsafe extern "C" fn vctx_get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    o::with_obj(srq.cast(), Kind::Srq, ret::pos, |s: &Srq| {
        let Some(n) = s.engine.srq_num(s.h) else {
            return ret::pos(libc::EINVAL);
        };
        if srq_num.is_null() {
            return ret::pos(libc::EINVAL);
        }
        // SAFETY: non-NULL, writable per the contract.
        unsafe { srq_num.write(n) };
        0
    })
}

/// An XRC SRQ from `ibv_srq_init_attr_ex` (PD, XRCD and CQ required).
pub(crate) fn create_srq(a: &mut ibv_srq_init_attr_ex) -> *mut ibv_srq {
    let need = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    if a.comp_mask & need != need {
        return ret::null(libc::EINVAL);
    }
    // SAFETY: registry-checked.
    let (Some(p), Some(x), Some(cq)) = (
        unsafe { o::obj::<Pd>(a.pd.cast(), Kind::Pd) },
        unsafe { o::obj::<Xrcd>(a.xrcd.cast(), Kind::Xrcd) },
        unsafe { o::obj::<Cq>(a.cq.cast(), Kind::Cq) },
    ) else {
        return ret::null(libc::EINVAL);
    };
    let at = &mut a.attr;
    let made = p
        .engine
        .create_xrc_srq(p.h, x.id, cq.h, at.max_wr, at.max_sge, at.srq_limit);
    super::srq::publish(p, a.pd, a.srq_context, made, at)
}

/// An XRC receive QP of the domain `a.xrcd` (no PD, CQs or queues).
pub(crate) fn create_recv_qp(a: &mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    if a.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0
        || a.comp_mask & !(IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_PD) != 0
    {
        return ret::null(libc::EINVAL);
    }
    // SAFETY: registry-checked.
    let Some(x) = (unsafe { o::obj::<Xrcd>(a.xrcd.cast(), Kind::Xrcd) }) else {
        return ret::null(libc::EINVAL);
    };
    let qpn = match x.engine.create_xrc_recv_qp(x.id) {
        Ok(q) => q,
        Err(e) => return ret::null(e.errno()),
    };
    a.cap = ibv_qp_cap {
        max_send_wr: 0,
        max_recv_wr: 0,
        max_send_sge: 0,
        max_recv_sge: 0,
        max_inline_data: 0,
    };
    let mut qp = ibv_qp_ex::zeroed();
    let b = &mut qp.qp_base;
    b.context = x.xrcd.context;
    b.qp_context = a.qp_context;
    b.handle = qpn;
    b.qp_num = qpn;
    b.state = IBV_QPS_RESET;
    b.qp_type = IBV_QPT_XRC_RECV;
    let obj = o::publish(
        Qp {
            qp,
            engine: x.engine.clone(),
            qpn,
            qp_type: QpType::XrcRecv,
            sq_sig_all: false,
            ex: false,
            block_self_mcast: false,
            opened: false,
            max_sge: (0, 0),
            batch: Default::default(),
            express: None,
        },
        Kind::Qp,
    );
    o::map_qp(qpn, Some(obj as usize));
    obj.cast()
}
