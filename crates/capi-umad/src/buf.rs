//! The `struct ib_user_mad` buffer helpers and the debug dumps.

use crate::ffi::{ib_mad_addr, ib_user_mad};
use crate::guard::ffi_guard;
use core::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

static DEBUG: AtomicI32 = AtomicI32::new(0);

/// `size_t umad_size(void)`: the header before the MAD in a buffer.
#[unsafe(no_mangle)]
pub extern "C" fn umad_size() -> usize {
    size_of::<ib_user_mad>()
}

/// `void *umad_get_mad(void *umad)`: the MAD after the header.
#[unsafe(no_mangle)]
pub extern "C" fn umad_get_mad(umad: *mut c_void) -> *mut c_void {
    umad.cast::<u8>()
        .wrapping_add(size_of::<ib_user_mad>())
        .cast()
}

/// `ib_mad_addr_t *umad_get_mad_addr(void *umad)`.
#[unsafe(no_mangle)]
pub extern "C" fn umad_get_mad_addr(umad: *mut c_void) -> *mut ib_mad_addr {
    umad.cast::<u8>()
        .wrapping_add(core::mem::offset_of!(ib_user_mad, addr))
        .cast()
}

/// Runs `f` on (a copy of) the header of `umad` and stores the result back
/// (NULL: `-EINVAL`). Copied, since a caller's buffer need not be aligned.
///
/// # Safety
///
/// `umad` must be NULL or point to a writable `struct ib_user_mad`.
unsafe fn with_hdr(umad: *mut c_void, f: impl FnOnce(&mut ib_user_mad) -> c_int) -> c_int {
    if umad.is_null() {
        return -libc::EINVAL;
    }
    let p = umad.cast::<ib_user_mad>();
    ffi_guard(
        || -libc::EIO,
        || {
            // SAFETY: a readable and writable header per the contract.
            let mut h = unsafe { p.read_unaligned() };
            let r = f(&mut h);
            // SAFETY: as above.
            unsafe { p.write_unaligned(h) };
            r
        },
    )
}

/// `int umad_status(void *umad)`: 0, or the errno of a request that got no
/// answer (`ETIMEDOUT`).
///
/// # Safety
///
/// `umad` must be NULL or a umad buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_status(umad: *mut c_void) -> c_int {
    // SAFETY: per the contract.
    unsafe { with_hdr(umad, |h| h.status as c_int) }
}

/// `int umad_set_addr(void *umad, int dlid, int dqp, int sl, int qkey)`
/// (host order).
///
/// # Safety
///
/// `umad` must be NULL or a umad buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_set_addr(
    umad: *mut c_void,
    dlid: c_int,
    dqp: c_int,
    sl: c_int,
    qkey: c_int,
) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        umad_set_addr_net(
            umad,
            (dlid as u16).to_be(),
            (dqp as u32).to_be(),
            sl,
            (qkey as u32).to_be(),
        )
    }
}

/// `int umad_set_addr_net(void *umad, __be16 dlid, __be32 dqp, int sl, __be32 qkey)`.
///
/// # Safety
///
/// `umad` must be NULL or a umad buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_set_addr_net(
    umad: *mut c_void,
    dlid: u16,
    dqp: u32,
    sl: c_int,
    qkey: u32,
) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        with_hdr(umad, |h| {
            h.addr.lid = dlid;
            h.addr.qpn = dqp;
            h.addr.sl = sl as u8;
            h.addr.qkey = qkey;
            0
        })
    }
}

/// `int umad_set_grh(void *umad, void *mad_addr)`: copies the GRH fields of
/// an `ib_mad_addr_t` (host order) into the buffer; NULL clears the GRH.
/// On RoCE the GID is the destination's address.
///
/// # Safety
///
/// `umad` must be NULL or a umad buffer, `mad_addr` NULL or an `ib_mad_addr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_set_grh(umad: *mut c_void, mad_addr: *mut c_void) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        with_hdr(umad, |h| {
            if mad_addr.is_null() {
                h.addr.grh_present = 0;
                return 0;
            }
            // SAFETY: an ib_mad_addr_t per the contract.
            let a = mad_addr.cast::<ib_mad_addr>().read_unaligned();
            h.addr.grh_present = 1;
            h.addr.gid = a.gid;
            h.addr.hop_limit = a.hop_limit;
            h.addr.traffic_class = a.traffic_class;
            h.addr.flow_label = a.flow_label.to_be();
            0
        })
    }
}

/// `int umad_set_pkey(void *umad, int pkey_index)`.
///
/// # Safety
///
/// `umad` must be NULL or a umad buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_set_pkey(umad: *mut c_void, pkey_index: c_int) -> c_int {
    // SAFETY: per the contract.
    unsafe {
        with_hdr(umad, |h| {
            h.addr.pkey_index = pkey_index as u16;
            0
        })
    }
}

/// `int umad_get_pkey(void *umad)`.
///
/// # Safety
///
/// `umad` must be NULL or a umad buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_get_pkey(umad: *mut c_void) -> c_int {
    // SAFETY: per the contract.
    unsafe { with_hdr(umad, |h| c_int::from(h.addr.pkey_index)) }
}

/// `int umad_debug(int level)`: sets the level if `level` >= 0; returns it.
#[unsafe(no_mangle)]
pub extern "C" fn umad_debug(level: c_int) -> c_int {
    if level >= 0 {
        DEBUG.store(level, Ordering::Relaxed);
    }
    DEBUG.load(Ordering::Relaxed)
}

fn addr_text(a: &ib_mad_addr) -> String {
    format!(
        "qpn {} qkey 0x{:x} lid {} sl {} grh_present {} gid_index {} hop_limit {} \
         traffic_class {} gid {} flow_label {} pkey_index {}",
        u32::from_be(a.qpn),
        u32::from_be(a.qkey),
        u16::from_be(a.lid),
        a.sl,
        a.grh_present,
        a.gid_index,
        a.hop_limit,
        a.traffic_class,
        std::net::Ipv6Addr::from(a.gid),
        u32::from_be(a.flow_label),
        a.pkey_index
    )
}

/// `void umad_addr_dump(ib_mad_addr_t *addr)`: the address on stderr.
///
/// # Safety
///
/// `addr` must be NULL or an `ib_mad_addr_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_addr_dump(addr: *mut ib_mad_addr) {
    if addr.is_null() {
        return;
    }
    // SAFETY: per the contract.
    let a = unsafe { addr.read_unaligned() };
    ffi_guard(|| (), || eprintln!("umad address: {}", addr_text(&a)));
}

/// `void umad_dump(void *umad)`: the header and the MAD's first 64 bytes on
/// stderr.
///
/// # Safety
///
/// `umad` must be NULL or a umad buffer holding a MAD.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_dump(umad: *mut c_void) {
    if umad.is_null() {
        return;
    }
    // SAFETY: a umad buffer per the contract: a header, then at least the
    // MAD's 24-byte common header plus its first 40 bytes.
    let (h, mad) = unsafe {
        (
            umad.cast::<ib_user_mad>().read_unaligned(),
            std::slice::from_raw_parts(umad_get_mad(umad).cast::<u8>(), 64),
        )
    };
    ffi_guard(
        || (),
        || {
            eprintln!(
                "umad: agent {} status {} timeout {} retries {} length {}; {}",
                h.agent_id,
                h.status,
                h.timeout_ms,
                h.retries,
                h.length,
                addr_text(&h.addr)
            );
            for row in mad.chunks(16) {
                let hex: Vec<String> = row.iter().map(|b| format!("{b:02x}")).collect();
                eprintln!("  {}", hex.join(" "));
            }
        },
    );
}
