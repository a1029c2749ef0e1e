//! libibumad's MAD I/O over the engine: ports, agents, send and receive.
//!
//! Implemented here, inside `libibverbs.so.1`, as `__softrdma_umad_*` at the
//! private node `SOFTRDMA_PRIVATE_1`; `libibumad.so.3` (crate
//! `softrdma-capi-umad`) forwards `umad_open_port`, `umad_register`,
//! `umad_send`, `umad_recv`, ... to them, so MADs travel on QP1 of this
//! process's one engine. Each function keeps libibumad's contract: a
//! negative errno on failure (`umad_register2`: a positive one).
//!
//! A port's descriptor is an eventfd that is readable while MADs wait
//! (applications `poll(2)` it as they would `/dev/infiniband/umadN`).
//! Only single-packet MADs: RMPP (`rmpp_version` != 0, or a `length` over
//! 256) is refused with `EINVAL`. On RoCE a MAD is addressed by GID
//! (`umad_set_grh`): one with no GRH is refused with `EINVAL`, as the
//! kernel's `ib_umad` refuses it on a RoCE port.

use crate::ffi::*;
use crate::guard::ffi_guard;
use core::ffi::{c_char, c_int, c_long};
use softrdma_engine::Engine;
use softrdma_engine::mad::{MadPort, MadRegistration};
use softrdma_wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};
use std::collections::HashMap;
use std::ffi::CStr;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

type Port = (Arc<Engine>, Arc<MadPort>);

/// The open ports by descriptor.
fn ports() -> MutexGuard<'static, HashMap<c_int, Port>> {
    static PORTS: OnceLock<Mutex<HashMap<c_int, Port>>> = OnceLock::new();
    PORTS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn port(fd: c_int) -> Result<Port, c_int> {
    ports().get(&fd).cloned().ok_or(libc::EINVAL)
}

fn neg(r: Result<c_int, c_int>) -> c_int {
    r.unwrap_or_else(|e| -e)
}

/// `int umad_open_port(const char *ca_name, int portnum)`: `ca_name` NULL
/// or `softrdma0`, `portnum` 0 (the first) or 1.
///
/// # Safety
///
/// `ca_name` must be NULL or a C string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_umad_open_port(
    ca_name: *const c_char,
    portnum: c_int,
) -> c_int {
    ffi_guard(
        || -libc::EIO,
        || {
            if !ca_name.is_null() {
                // SAFETY: a C string per the contract.
                let name = unsafe { CStr::from_ptr(ca_name) };
                if name.to_bytes() != softrdma_engine::device::DEVICE_NAME.as_bytes() {
                    return -libc::ENODEV;
                }
            }
            if !(0..=1).contains(&portnum) {
                return -libc::EINVAL;
            }
            let Ok(engine) = Engine::global() else {
                return -libc::ENODEV;
            };
            match engine.mad_open_port() {
                Ok(p) => {
                    let fd = p.as_raw_fd();
                    ports().insert(fd, (engine, p));
                    fd
                }
                Err(e) => -e.raw_os_error().unwrap_or(libc::ENOMEM),
            }
        },
    )
}

/// `int umad_close_port(int portid)`.
#[unsafe(no_mangle)]
pub extern "C" fn __softrdma_umad_close_port(portid: c_int) -> c_int {
    ffi_guard(
        || -libc::EIO,
        || match ports().remove(&portid) {
            Some((engine, p)) => {
                engine.mad_close_port(&p);
                0
            }
            None => -libc::EINVAL,
        },
    )
}

fn register(fd: c_int, reg: MadRegistration, rmpp_version: u8) -> Result<c_int, c_int> {
    if rmpp_version != 0 {
        return Err(libc::EINVAL);
    }
    let (engine, p) = port(fd)?;
    engine
        .mad_register(&p, reg)
        .map(|id| c_int::try_from(id).unwrap_or(c_int::MAX))
}

/// The methods of `long method_mask[16 / sizeof(long)]` (NULL: none).
///
/// # Safety
///
/// `mask` must be NULL or point to 16 readable bytes.
unsafe fn methods(mask: *const c_long) -> u128 {
    if mask.is_null() {
        return 0;
    }
    // SAFETY: 16 readable bytes per the contract (two longs on x86_64).
    let [lo, hi] = unsafe { mask.cast::<[u64; 2]>().read_unaligned() };
    u128::from(lo) | (u128::from(hi) << 64)
}

/// `int umad_register(int portid, int mgmt_class, int mgmt_version,
/// uint8_t rmpp_version, long method_mask[])`: the agent id, or a negative errno.
///
/// # Safety
///
/// `method_mask` must be NULL or point to 16 readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_umad_register(
    portid: c_int,
    mgmt_class: c_int,
    mgmt_version: c_int,
    rmpp_version: u8,
    method_mask: *const c_long,
) -> c_int {
    ffi_guard(
        || -libc::EIO,
        || {
            let (Ok(class), Ok(version)) = (u8::try_from(mgmt_class), u8::try_from(mgmt_version))
            else {
                return -libc::EINVAL;
            };
            let reg = MadRegistration {
                class,
                version,
                // SAFETY: per the contract.
                methods: unsafe { methods(method_mask) },
                oui: None,
            };
            neg(register(portid, reg, rmpp_version))
        },
    )
}

/// `int umad_register_oui(int portid, int mgmt_class, uint8_t rmpp_version,
/// uint8_t oui[3], long method_mask[])`: a vendor class 0x30-0x4F, version 1.
///
/// # Safety
///
/// `oui` must point to 3 readable bytes, `method_mask` be NULL or point to 16.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_umad_register_oui(
    portid: c_int,
    mgmt_class: c_int,
    rmpp_version: u8,
    oui: *const u8,
    method_mask: *const c_long,
) -> c_int {
    ffi_guard(
        || -libc::EIO,
        || {
            let Ok(class) = u8::try_from(mgmt_class) else {
                return -libc::EINVAL;
            };
            if oui.is_null() || !(0x30..=0x4F).contains(&class) {
                return -libc::EINVAL;
            }
            // SAFETY: 3 readable bytes per the contract.
            let oui = unsafe { oui.cast::<[u8; 3]>().read_unaligned() };
            let reg = MadRegistration {
                class,
                version: 1,
                // SAFETY: per the contract.
                methods: unsafe { methods(method_mask) },
                oui: Some(oui),
            };
            neg(register(portid, reg, rmpp_version))
        },
    )
}

/// `int umad_register2(int port_fd, struct umad_reg_attr *attr, uint32_t
/// *agent_id)`: 0, or a *positive* errno.
///
/// # Safety
///
/// `attr` must be readable, `agent_id` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_umad_register2(
    port_fd: c_int,
    attr: *const umad_reg_attr,
    agent_id: *mut u32,
) -> c_int {
    ffi_guard(
        || libc::EIO,
        || {
            if attr.is_null() || agent_id.is_null() {
                return libc::EINVAL;
            }
            // SAFETY: readable per the contract.
            let a = unsafe { attr.read_unaligned() };
            // No flag is supported (UMAD_USER_RMPP: RMPP in user space).
            if a.flags != 0 {
                return libc::EINVAL;
            }
            let vendor = (0x30..=0x4F).contains(&a.mgmt_class);
            let reg = MadRegistration {
                class: a.mgmt_class,
                version: a.mgmt_class_version,
                methods: u128::from(a.method_mask[0]) | (u128::from(a.method_mask[1]) << 64),
                oui: vendor.then(|| {
                    let b = a.oui.to_be_bytes();
                    [b[1], b[2], b[3]]
                }),
            };
            match register(port_fd, reg, a.rmpp_version) {
                Ok(id) => {
                    // SAFETY: writable per the contract.
                    unsafe { agent_id.write(id as u32) };
                    0
                }
                Err(e) => e,
            }
        },
    )
}

/// `int umad_unregister(int portid, int agentid)`.
#[unsafe(no_mangle)]
pub extern "C" fn __softrdma_umad_unregister(portid: c_int, agentid: c_int) -> c_int {
    ffi_guard(
        || -libc::EIO,
        || {
            let r = port(portid).and_then(|(engine, p)| {
                let id = u32::try_from(agentid).map_err(|_| libc::EINVAL)?;
                engine.mad_unregister(&p, id).map(|()| 0)
            });
            neg(r)
        },
    )
}

/// The destination of a MAD buffer: its GRH's GID as an address (RoCEv2
/// GIDs are IPv6 or IPv4-mapped addresses).
fn destination(a: &ib_mad_addr) -> Result<IpAddr, c_int> {
    if a.grh_present == 0 || u32::from_be(a.qpn) != GSI_QPN {
        return Err(libc::EINVAL);
    }
    Ok(Ipv6Addr::from(a.gid).to_canonical())
}

/// `int umad_send(int portid, int agentid, void *umad, int length, int
/// timeout_ms, int retries)`. The destination is QP1 at the GID of the
/// buffer's GRH (another QPN, as a redirected class would use, is
/// `EINVAL`). A request with `timeout_ms` > 0 is sent again up to `retries`
/// times, then returned by `umad_recv` with status `ETIMEDOUT`; with 0 or a
/// negative `timeout_ms` (rdma-core: wait forever) its answer is delivered
/// whenever it comes and nothing times out.
///
/// # Safety
///
/// `umad` must point to a `struct ib_user_mad` followed by `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_umad_send(
    portid: c_int,
    agentid: c_int,
    umad: *const core::ffi::c_void,
    length: c_int,
    timeout_ms: c_int,
    retries: c_int,
) -> c_int {
    ffi_guard(
        || -libc::EIO,
        || {
            let r = (|| {
                let (engine, p) = port(portid)?;
                let len = usize::try_from(length).map_err(|_| libc::EINVAL)?;
                if umad.is_null() || !(24..=MAD_LEN).contains(&len) {
                    return Err(libc::EINVAL);
                }
                // SAFETY: a header followed by `length` bytes per the contract.
                let hdr = unsafe { umad.cast::<ib_user_mad>().read_unaligned() };
                let dst = destination(&hdr.addr)?;
                let mut mad = [0u8; MAD_LEN];
                // SAFETY: as above; `len` <= 256 checked.
                let data = unsafe {
                    std::slice::from_raw_parts(umad.cast::<u8>().add(size_of::<ib_user_mad>()), len)
                };
                mad[..len].copy_from_slice(data);
                let id = u32::try_from(agentid).map_err(|_| libc::EINVAL)?;
                let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
                let retries = u32::try_from(retries).unwrap_or(0);
                engine
                    .mad_send(&p, id, dst, &mad, timeout, retries)
                    .map(|()| 0)
            })();
            neg(r)
        },
    )
}

fn wait(p: &MadPort, timeout_ms: c_int) -> Result<bool, c_int> {
    let t = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
    p.wait(t).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

/// `int umad_recv(int portid, void *umad, int *length, int timeout_ms)`:
/// the agent id; `-EWOULDBLOCK` (timeout 0) or `-ETIMEDOUT` if nothing
/// came; `-ENOSPC` with `*length` the size needed if the buffer is short.
///
/// # Safety
///
/// `length` must be readable and writable, `umad` writable for a
/// `struct ib_user_mad` and `*length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __softrdma_umad_recv(
    portid: c_int,
    umad: *mut core::ffi::c_void,
    length: *mut c_int,
    timeout_ms: c_int,
) -> c_int {
    ffi_guard(
        || -libc::EIO,
        || {
            let r = (|| {
                let (_, p) = port(portid)?;
                if umad.is_null() || length.is_null() {
                    return Err(libc::EINVAL);
                }
                // SAFETY: readable per the contract.
                let room = usize::try_from(unsafe { length.read() }).map_err(|_| libc::EINVAL)?;
                loop {
                    match p.take(|n| n <= room) {
                        Some(Ok(m)) => {
                            let mut h = ib_user_mad {
                                agent_id: m.agent,
                                status: m.status,
                                length: (size_of::<ib_user_mad>() + MAD_LEN) as u32,
                                ..ib_user_mad::default()
                            };
                            h.addr.qpn = GSI_QPN.to_be();
                            h.addr.qkey = GSI_QKEY.to_be();
                            h.addr.grh_present = 1;
                            h.addr.hop_limit = 64;
                            h.addr.gid = match m.peer {
                                IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                                IpAddr::V6(a) => a.octets(),
                            };
                            // SAFETY: writable for the header and `room` >= 256
                            // bytes per the contract.
                            unsafe {
                                umad.cast::<ib_user_mad>().write_unaligned(h);
                                std::ptr::copy_nonoverlapping(
                                    m.mad.as_ptr(),
                                    umad.cast::<u8>().add(size_of::<ib_user_mad>()),
                                    MAD_LEN,
                                );
                                length.write(MAD_LEN as c_int);
                            }
                            return Ok(m.agent as c_int);
                        }
                        Some(Err(need)) => {
                            // SAFETY: writable per the contract.
                            unsafe { length.write(need as c_int) };
                            return Err(libc::ENOSPC);
                        }
                        None if timeout_ms == 0 => return Err(libc::EWOULDBLOCK),
                        None if !wait(&p, timeout_ms)? => return Err(libc::ETIMEDOUT),
                        None => {}
                    }
                }
            })();
            neg(r)
        },
    )
}

/// `int umad_poll(int portid, int timeout_ms)`: 0 once a MAD waits,
/// `-ETIMEDOUT` if none came in time.
#[unsafe(no_mangle)]
pub extern "C" fn __softrdma_umad_poll(portid: c_int, timeout_ms: c_int) -> c_int {
    ffi_guard(
        || -libc::EIO,
        || {
            let r = port(portid).and_then(|(_, p)| match wait(&p, timeout_ms)? {
                true => Ok(0),
                false => Err(libc::ETIMEDOUT),
            });
            neg(r)
        },
    )
}
