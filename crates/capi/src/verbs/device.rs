//! Devices and contexts: the device list, open/close, device/port/GID/P_Key
//! queries and async events (abi.md §2.1-2.2, §4).

use super::conv::{device_attr as to_c_device_attr, port_attr, put_str};
use super::objects::{self as o, Ctx, Kind};
use crate::ffi::*;
use crate::guard::{ffi_guard, ret, with_arg};
use core::ffi::{c_char, c_int, c_uint, c_void};
use softrdma_engine::device::DEVICE_NAME;
use softrdma_engine::{AsyncEvent, Engine};
use std::sync::{Arc, LazyLock};

/// The one device, allocated once and never freed (rdma-core keeps devices
/// for the life of the process too).
struct Device(*mut ibv_device);
// SAFETY: the device struct is immutable after creation and only read.
unsafe impl Send for Device {}
// SAFETY: as above.
unsafe impl Sync for Device {}

static DEVICE: LazyLock<Device> = LazyLock::new(|| {
    let mut d = ibv_device::zeroed();
    d.node_type = IBV_NODE_CA;
    d.transport_type = IBV_TRANSPORT_IB;
    put_str(&mut d.name, DEVICE_NAME);
    put_str(&mut d.dev_name, "uverbs0");
    put_str(&mut d.dev_path, "/sys/class/infiniband_verbs/uverbs0");
    put_str(
        &mut d.ibdev_path,
        &format!("/sys/class/infiniband/{DEVICE_NAME}"),
    );
    Device(Box::into_raw(Box::new(d)))
});

fn device() -> *mut ibv_device {
    DEVICE.0
}

/// The one device (for librdmacm's context).
pub(crate) fn the_device() -> *mut ibv_device {
    device()
}

/// [`with_arg`] for calls on a device: `f` runs if `d` is the one device.
fn with_device<R>(d: *mut ibv_device, fail: fn(c_int) -> R, f: impl FnOnce() -> R) -> R {
    let is_device = || (!d.is_null() && d == device()).then_some(());
    with_arg(is_device, fail, |()| f())
}

/// `struct ibv_device **ibv_get_device_list(int *num_devices)`: one device.
///
/// # Safety
///
/// `num_devices` must be NULL or valid for writing an `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    ffi_guard(
        || ret::null(libc::EIO),
        || {
            let list: Box<[*mut ibv_device; 2]> = Box::new([device(), core::ptr::null_mut()]);
            if !num_devices.is_null() {
                // SAFETY: non-NULL and writable per the contract.
                unsafe { num_devices.write(1) };
            }
            Box::into_raw(list).cast()
        },
    )
}

/// `void ibv_free_device_list(struct ibv_device **list)`.
///
/// # Safety
///
/// `list` must come from `ibv_get_device_list` and be freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    ffi_guard(
        || (),
        || {
            if !list.is_null() {
                // SAFETY: allocated in ibv_get_device_list as a boxed 2-element array.
                drop(unsafe { Box::from_raw(list.cast::<[*mut ibv_device; 2]>()) });
            }
        },
    )
}

/// `const char *ibv_get_device_name(struct ibv_device *device)`.
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    with_device(device, ret::null_const, || {
        // SAFETY: the one static device, never freed.
        unsafe { (*device).name.as_ptr() }
    })
}

/// `int ibv_get_device_index(struct ibv_device *device)`.
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    with_device(device, ret::neg, || 0)
}

/// `__be64 ibv_get_device_guid(struct ibv_device *device)`: the node GUID,
/// big-endian (the device's address determines it, so this opens the device).
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    let fail = |e| {
        crate::guard::set_errno(e);
        0
    };
    with_device(device, fail, || {
        Engine::global().map_or(0, |e| e.info().node_guid.to_be())
    })
}

/// `struct ibv_context *ibv_open_device(struct ibv_device *device)`.
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    with_device(device, ret::null, || {
        let engine = match Engine::global() {
            Ok(e) => e,
            Err(e) => {
                eprintln!("{e}");
                return ret::null(libc::ENODEV);
            }
        };
        open_context(engine, device)
    })
}

/// Builds a context over `engine` (also used by librdmacm through the engine).
pub(crate) fn open_context(engine: Arc<Engine>, device: *mut ibv_device) -> *mut ibv_context {
    open_context_with(engine, device, super::import::new_cmd_fd())
}

/// Builds a context whose `cmd_fd` is `cmd_fd` (closed with the context).
pub(crate) fn open_context_with(
    engine: Arc<Engine>,
    device: *mut ibv_device,
    cmd_fd: Option<std::os::fd::OwnedFd>,
) -> *mut ibv_context {
    use std::os::fd::AsRawFd;
    let mut vctx = verbs_context::zeroed();
    vctx.sz = verbs_context::SIZE;
    vctx.query_port = Some(vctx_query_port);
    vctx.query_device_ex = Some(vctx_query_device_ex);
    vctx.query_rt_values = Some(vctx_query_rt_values);
    super::qp::install_vctx_ops(&mut vctx);
    super::cq::install_vctx_ops(&mut vctx);
    super::srq::install_vctx_ops(&mut vctx);
    super::xrc::install_vctx_ops(&mut vctx);
    super::parent::install_vctx_ops(&mut vctx);
    super::pd_mr::install_vctx_ops(&mut vctx);
    super::dm::install_vctx_ops(&mut vctx);
    let c = &mut vctx.context;
    c.device = device;
    c.cmd_fd = cmd_fd.as_ref().map_or(-1, |f| f.as_raw_fd());
    // A queue and fd of its own, as rdma-core gives each context.
    let async_queue = engine.async_channel().subscribe().ok();
    c.async_fd = match &async_queue {
        Some(q) => q.as_raw_fd(),
        None => engine.async_channel().as_raw_fd(),
    };
    c.num_comp_vectors = 1;
    c.abi_compat = usize::MAX as *mut c_void;
    super::post::install_ops(&mut c.ops);
    super::mw::install_ops(&mut c.ops);
    let p = o::publish(
        Ctx {
            vctx,
            engine,
            cmd_fd,
            async_queue,
        },
        Kind::Context,
    );
    // SAFETY: `p` was just allocated; take the address of the embedded context.
    unsafe { &raw mut (*p).vctx.context }
}

/// `int ibv_close_device(struct ibv_context *context)`.
///
/// # Safety
///
/// `context` must be NULL or from `ibv_open_device`, not used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    o::with_ctx(context, ret::pos, |_| {
        let base = (context as usize - o::CTX_OFFSET) as *mut Ctx;
        // SAFETY: the registry confirmed `base` is a live Ctx from `publish`.
        unsafe { o::retire(base) };
        0
    })
}

/// `int ibv_query_device(struct ibv_context *, struct ibv_device_attr *)`.
///
/// # Safety
///
/// `device_attr` must be valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    device_attr: *mut ibv_device_attr,
) -> c_int {
    o::with_ctx(context, ret::pos, |c| {
        if device_attr.is_null() {
            return ret::pos(libc::EINVAL);
        }
        // SAFETY: non-NULL, writable per the contract.
        unsafe { device_attr.write(to_c_device_attr(c.engine.info().attr())) };
        0
    })
}

/// Copies the first `len` bytes of `src` (all of it at most) to `dst`: the
/// queries that fill a caller's buffer of a size the caller names.
///
/// # Safety
///
/// `dst` must be valid for `len` bytes of writes.
unsafe fn write_prefix<T>(src: &T, dst: *mut u8, len: usize) {
    let n = len.min(size_of::<T>());
    // SAFETY: `src` is `size_of::<T>()` readable bytes; `dst` holds `len`
    // writable ones per the contract.
    unsafe { core::ptr::copy_nonoverlapping((src as *const T).cast::<u8>(), dst, n) };
}

/// Writes the first `len` bytes of port 1's `struct ibv_port_attr` to `dst`.
///
/// # Safety
///
/// `dst` must be NULL or valid for `len` bytes of writes.
unsafe fn query_port(context: *mut ibv_context, port_num: u8, dst: *mut u8, len: usize) -> c_int {
    o::with_ctx(context, ret::pos, |c| {
        if port_num != 1 || dst.is_null() {
            return ret::pos(libc::EINVAL);
        }
        let full = port_attr(&c.engine.info().port_attr(c.engine.gids().len()));
        // SAFETY: non-NULL, `len` writable bytes per the contract.
        unsafe { write_prefix(&full, dst, len) };
        0
    })
}

/// `ibv_query_port@IBVERBS_1.1`: writes the 48-byte compat struct only.
///
/// # Safety
///
/// `port_attr` must be valid for 48 bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut _compat_ibv_port_attr,
) -> c_int {
    // SAFETY: the compat struct is the 48-byte prefix of ibv_port_attr; the
    // destination is NULL or valid for that many bytes per the contract.
    unsafe {
        query_port(
            context,
            port_num,
            port_attr.cast(),
            size_of::<_compat_ibv_port_attr>(),
        )
    }
}

/// `verbs_context::query_port`: writes `min(len, sizeof(ibv_port_attr))` bytes.
unsafe extern "C" fn vctx_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    // SAFETY: the caller's buffer is NULL or holds `port_attr_len` bytes.
    unsafe { query_port(context, port_num, port_attr.cast(), port_attr_len) }
}

/// What on-demand-paging regions may serve on RC and XRC: every operation
/// (the engine reaches their memory through the kernel, `memory.rs`).
const RC_ODP_CAPS: u32 = IBV_ODP_SUPPORT_SEND
    | IBV_ODP_SUPPORT_RECV
    | IBV_ODP_SUPPORT_WRITE
    | IBV_ODP_SUPPORT_READ
    | IBV_ODP_SUPPORT_ATOMIC
    | IBV_ODP_SUPPORT_SRQ_RECV;

/// On-demand paging, implicit regions (the whole address space) included,
/// for what each transport does: UC has no READ or atomics, UD only SENDs.
fn odp_caps() -> ibv_odp_caps {
    ibv_odp_caps {
        general_caps: IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT,
        per_transport_caps: ibv_odp_caps_per_transport {
            rc_odp_caps: RC_ODP_CAPS,
            uc_odp_caps: IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE,
            ud_odp_caps: IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV,
        },
    }
}

/// `verbs_context::query_device_ex`: the legacy attributes plus the
/// completion clock, device memory, on-demand paging and tag matching; the other
/// extensions are zero (absent).
unsafe extern "C" fn vctx_query_device_ex(
    context: *mut ibv_context,
    _input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    o::with_ctx(context, ret::pos, |c| {
        if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
            return ret::pos(libc::EINVAL);
        }
        let mut ex = ibv_device_attr_ex::zeroed();
        ex.orig_attr = to_c_device_attr(c.engine.info().attr());
        ex.phys_port_cnt_ex = 1;
        ex.completion_timestamp_mask = softrdma_engine::clock::TIMESTAMP_MASK;
        ex.hca_core_clock = softrdma_engine::clock::HCA_CORE_CLOCK_KHZ;
        ex.max_dm_size = softrdma_engine::dm::MAX_DM_SIZE;
        ex.odp_caps = odp_caps();
        ex.xrc_odp_caps = RC_ODP_CAPS;
        ex.tm_caps = super::tm::tm_caps(&c.engine.info().limits);
        // SAFETY: the caller's buffer holds `attr_size` bytes.
        unsafe { write_prefix(&ex, attr.cast(), attr_size) };
        0
    })
}

/// `verbs_context::query_rt_values` (`ibv_query_rt_values_ex`): the device
/// clock as `raw_clock` (nanoseconds, so a normalised timespec) when
/// `IBV_VALUES_MASK_RAW_CLOCK` is asked for; `comp_mask` comes back as the
/// values filled in.
unsafe extern "C" fn vctx_query_rt_values(
    context: *mut ibv_context,
    values: *mut ibv_values_ex,
) -> c_int {
    o::with_ctx(context, ret::pos, |c| {
        if values.is_null() {
            return ret::pos(libc::EINVAL);
        }
        // SAFETY: non-NULL; the caller passes a whole `ibv_values_ex`.
        let v = unsafe { &mut *values };
        let mut filled = 0;
        if v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK != 0 {
            let ns = c.engine.device_clock_now();
            v.raw_clock.tv_sec = (ns / 1_000_000_000) as libc::time_t;
            v.raw_clock.tv_nsec = (ns % 1_000_000_000) as libc::c_long;
            filled |= IBV_VALUES_MASK_RAW_CLOCK;
        }
        v.comp_mask = filled;
        0
    })
}

fn gid_at(c: &Ctx, port_num: u32, index: usize) -> Result<[u8; 16], c_int> {
    if port_num != 1 {
        return Err(libc::EINVAL);
    }
    let gids = c.engine.gids();
    if index >= gids.len().max(softrdma_engine::device::GID_TBL_LEN) {
        return Err(libc::EINVAL);
    }
    // An empty entry (past the addresses, or its address went away) reads
    // as zeros, as rxe's.
    Ok(match gids.get(index) {
        Some(ip) if !ip.is_unspecified() => softrdma_wire::ip::to_v6(*ip).octets(),
        _ => [0u8; 16],
    })
}

/// `int ibv_query_gid(ctx, port, index, union ibv_gid *)`: 0, or -1 with errno.
///
/// # Safety
///
/// `gid` must be valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    o::with_ctx(context, ret::neg, |c| {
        if gid.is_null() || index < 0 {
            return ret::neg(libc::EINVAL);
        }
        match gid_at(c, u32::from(port_num), index as usize) {
            Ok(raw) => {
                // SAFETY: non-NULL, writable per the contract.
                unsafe { gid.write(ibv_gid { raw }) };
                0
            }
            Err(e) => ret::neg(e),
        }
    })
}

fn gid_entry(c: &Ctx, port_num: u32, index: u32) -> Result<ibv_gid_entry, c_int> {
    let raw = gid_at(c, port_num, index as usize).map_err(|_| libc::ENODATA)?;
    // An entry whose address went away (rxe: ENODATA too).
    if raw == [0u8; 16] {
        return Err(libc::ENODATA);
    }
    let mut e = ibv_gid_entry::zeroed();
    e.gid = ibv_gid { raw };
    e.gid_index = index;
    e.port_num = port_num;
    e.gid_type = IBV_GID_TYPE_ROCE_V2;
    e.ndev_ifindex = 0;
    Ok(e)
}

/// `_ibv_query_gid_ex`: 0 or a positive errno (ENODATA for an empty entry).
///
/// # Safety
///
/// `entry` must be valid for `entry_size` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    _flags: u32,
    entry_size: usize,
) -> c_int {
    o::with_ctx(context, ret::pos, |c| {
        if entry.is_null() || entry_size < size_of::<ibv_gid_entry>() {
            return ret::pos(libc::EINVAL);
        }
        if port_num != 1 {
            return ret::pos(libc::EINVAL);
        }
        match gid_entry(c, port_num, gid_index) {
            Ok(e) => {
                // SAFETY: non-NULL, at least one entry's worth of bytes.
                unsafe { entry.write(e) };
                0
            }
            Err(e) => ret::pos(e),
        }
    })
}

/// `_ibv_query_gid_table`: the number of entries written, or a negative errno.
///
/// # Safety
///
/// `entries` must be valid for `max_entries * entry_size` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    _flags: u32,
    entry_size: usize,
) -> isize {
    let neg = |e: c_int| -(e as isize);
    o::with_ctx(context, neg, |c| {
        if entries.is_null() || entry_size < size_of::<ibv_gid_entry>() {
            return neg(libc::EINVAL);
        }
        // The valid entries only, packed (as rdma-core's); too small a
        // buffer for them is EINVAL, as the kernel's.
        let valid: Vec<ibv_gid_entry> = (0..c.engine.gids().len())
            .filter_map(|i| gid_entry(c, 1, i as u32).ok())
            .collect();
        if valid.len() > max_entries {
            return neg(libc::EINVAL);
        }
        let mut k = 0;
        for e in valid {
            // SAFETY: within the caller's `max_entries` entries of `entry_size` bytes.
            unsafe {
                entries
                    .cast::<u8>()
                    .add(k * entry_size)
                    .cast::<ibv_gid_entry>()
                    .write_unaligned(e)
            };
            k += 1;
        }
        k as isize
    })
}

/// `ibv_query_gid_type`: RoCEv2 for every entry; 0, or -1 with errno.
///
/// # Safety
///
/// `type_` must be valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: c_uint,
    type_: *mut ibv_gid_type_sysfs,
) -> c_int {
    o::with_ctx(context, ret::neg, |c| {
        if type_.is_null() || port_num != 1 {
            return ret::neg(libc::EINVAL);
        }
        let t = if (index as usize) < c.engine.gids().len() {
            IBV_GID_TYPE_SYSFS_ROCE_V2
        } else {
            IBV_GID_TYPE_SYSFS_IB_ROCE_V1
        };
        // SAFETY: non-NULL, writable per the contract.
        unsafe { type_.write(t) };
        0
    })
}

/// `ibv_query_pkey`: the default P_Key 0xFFFF (big-endian) at index 0.
///
/// # Safety
///
/// `pkey` must be valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    o::with_ctx(context, ret::neg, |_| {
        if pkey.is_null() || port_num != 1 || index != 0 {
            return ret::neg(libc::EINVAL);
        }
        // SAFETY: non-NULL, writable per the contract.
        unsafe { pkey.write(0xFFFFu16.to_be()) };
        0
    })
}

/// `ibv_get_pkey_index`: 0 for the default P_Key, else -1 with ENOENT.
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port_num: u8,
    pkey: u16,
) -> c_int {
    o::with_ctx(context, ret::neg, |_| {
        if port_num != 1 {
            return ret::neg(libc::EINVAL);
        }
        if u16::from_be(pkey) & 0x7FFF == 0x7FFF {
            0
        } else {
            ret::neg(libc::ENOENT)
        }
    })
}

/// `ibv_get_async_event`: blocks until an async event arrives.
///
/// # Safety
///
/// `event` must be valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    o::with_ctx(context, ret::neg, |c| {
        if event.is_null() {
            return ret::neg(libc::EINVAL);
        }
        loop {
            let got = match &c.async_queue {
                Some(q) => q.get_event(),
                None => c.engine.async_channel().get_event(),
            };
            let e = match got {
                Ok(e) => e,
                Err(e) => return ret::neg(e.raw_os_error().unwrap_or(libc::EIO)),
            };
            // Events of objects destroyed since are dropped.
            let (element, t) = match e {
                AsyncEvent::Qp(q, t) => (
                    o::qp_ptr(q).map(|p| ibv_async_event_element { qp: p as *mut _ }),
                    t,
                ),
                AsyncEvent::Cq(h, t) => (
                    o::cq_ptr(h).map(|p| ibv_async_event_element { cq: p as *mut _ }),
                    t,
                ),
                AsyncEvent::Srq(h, t) => (
                    o::srq_ptr(h).map(|p| ibv_async_event_element { srq: p as *mut _ }),
                    t,
                ),
            };
            let Some(element) = element else { continue };
            // Every context hears every event; report those of its own objects.
            // SAFETY: the element is a live object from the registry; QPs,
            // CQs and SRQs all start with their `context` pointer.
            let owner = unsafe { *element.qp.cast::<*mut ibv_context>() };
            if owner != context {
                continue;
            }
            // The transport numbers its events as `enum ibv_event_type`.
            let event_type = t as u32;
            // SAFETY: non-NULL, writable per the contract.
            unsafe {
                event.write(ibv_async_event {
                    element,
                    event_type,
                })
            };
            return 0;
        }
    })
}

/// `ibv_ack_async_event`: nothing to release.
///
/// # Safety
///
/// Pointer arguments are checked against the registry of live objects;
/// other pointers must be valid as for the rdma-core call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}
