//! CA and port descriptions: `umad_get_ca`, `umad_get_port` and the name
//! lists, from the public verbs of our `libibverbs.so.1`.
//!
//! rdma-core's libibumad reads them from `/sys/class/infiniband/<ca>`; the
//! same facts come here from `ibv_query_device` (firmware, GUIDs),
//! `ibv_query_port` (state, width and speed, LID 0, link layer Ethernet),
//! `ibv_query_gid` (GID 0: the subnet prefix and port GUID) and
//! `ibv_query_pkey`. softrdma has one CA, `softrdma0`, with one port.

use crate::ffi::*;
use crate::guard::ffi_guard;
use core::ffi::{CStr, c_char, c_int};

unsafe extern "C" {
    fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device;
    fn ibv_free_device_list(list: *mut *mut ibv_device);
    fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char;
    fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context;
    fn ibv_close_device(context: *mut ibv_context) -> c_int;
    fn ibv_query_device(context: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int;
    fn ibv_query_port(context: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int;
    fn ibv_query_gid(context: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid)
    -> c_int;
    fn ibv_query_pkey(context: *mut ibv_context, port: u8, index: c_int, pkey: *mut u16) -> c_int;
}

/// The CA name (`UMAD_CA_NAME_LEN` bytes with its NUL).
const CA_NAME: &str = "softrdma0";

/// What one query of the device tells.
struct Facts {
    dev: ibv_device_attr,
    port: ibv_port_attr,
    gid0: [u8; 16],
    pkeys: Vec<u16>,
}

/// Whether `name` (NULL: the default CA) names softrdma's CA.
///
/// # Safety
///
/// `name` must be NULL or a C string.
unsafe fn is_ours(name: *const c_char) -> bool {
    // SAFETY: per the contract.
    name.is_null() || unsafe { CStr::from_ptr(name) }.to_bytes() == CA_NAME.as_bytes()
}

/// Opens `softrdma0` through libibverbs, queries it, closes it.
fn query() -> Result<Facts, c_int> {
    let mut n = 0;
    // SAFETY: `n` is writable; the list is freed below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(libc::ENODEV);
    }
    // SAFETY: `list` holds `n` devices (and a NULL).
    let devs = unsafe { std::slice::from_raw_parts(list, usize::try_from(n).unwrap_or(0)) };
    let dev = devs.iter().copied().find(|&d| {
        // SAFETY: a device of the list; its name is a C string.
        let name = unsafe { ibv_get_device_name(d) };
        // SAFETY: as above.
        !name.is_null() && unsafe { CStr::from_ptr(name) }.to_bytes() == CA_NAME.as_bytes()
    });
    // SAFETY: a device of the live list.
    let ctx = dev.map_or(core::ptr::null_mut(), |d| unsafe { ibv_open_device(d) });
    // SAFETY: from ibv_get_device_list; an open context keeps its device.
    unsafe { ibv_free_device_list(list) };
    if ctx.is_null() {
        return Err(libc::ENODEV);
    }
    // SAFETY: plain integer structs, for which all zeroes is valid.
    let (mut dev, mut port, mut gid) = unsafe {
        (
            core::mem::zeroed::<ibv_device_attr>(),
            core::mem::zeroed::<ibv_port_attr>(),
            core::mem::zeroed::<ibv_gid>(),
        )
    };
    // SAFETY: `ctx` is open; every output is writable (ibv_query_port@1.1
    // writes the 48-byte prefix of the 52-byte `port`).
    let r = unsafe {
        [
            ibv_query_device(ctx, &mut dev),
            ibv_query_port(ctx, 1, &mut port),
            ibv_query_gid(ctx, 1, 0, &mut gid),
        ]
    };
    let mut pkeys = Vec::new();
    for i in 0..c_int::from(port.pkey_tbl_len) {
        let mut p = 0;
        // SAFETY: `ctx` is open, `p` writable.
        if unsafe { ibv_query_pkey(ctx, 1, i, &mut p) } == 0 {
            pkeys.push(u16::from_be(p));
        }
    }
    // SAFETY: opened above, used no more.
    unsafe { ibv_close_device(ctx) };
    if let Some(&e) = r.iter().find(|&&e| e != 0) {
        return Err(e);
    }
    Ok(Facts {
        dev,
        port,
        gid0: gid.raw(),
        pkeys,
    })
}

/// Copies `s` into a fixed C char array, NUL-terminated and truncated.
fn put(dst: &mut [c_char], s: &str) {
    dst.fill(0);
    let room = dst.len().saturating_sub(1);
    for (d, b) in dst.iter_mut().zip(s.bytes().take(room)) {
        *d = b as c_char;
    }
}

/// Gb/s of a port: lanes (`active_width`) × lane speed (`active_speed`),
/// as the kernel's sysfs `rate` file reports it (2.5 Gb/s rounds down).
fn rate(width: u8, speed: u8) -> u32 {
    let lanes = match width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 0,
    };
    // Tenths of Gb/s per lane (IBV_SPEED_SDR .. IBV_SPEED_NDR).
    let tenths = match speed {
        1 => 25,
        2 => 50,
        4 | 8 => 100,
        16 => 140,
        32 => 250,
        64 => 500,
        128 => 1000,
        _ => 0,
    };
    lanes * tenths / 10
}

fn fill_port(f: &Facts, p: &mut umad_port) {
    put(&mut p.ca_name, CA_NAME);
    p.portnum = 1;
    p.base_lid = u32::from(f.port.lid);
    p.lmc = u32::from(f.port.lmc);
    p.sm_lid = u32::from(f.port.sm_lid);
    p.sm_sl = u32::from(f.port.sm_sl);
    p.state = f.port.state;
    p.phys_state = u32::from(f.port.phys_state);
    p.rate = rate(f.port.active_width, f.port.active_speed);
    p.capmask = f.port.port_cap_flags.to_be();
    // Both halves of GID 0 as they lie in memory (big-endian).
    p.gid_prefix = u64::from_ne_bytes(f.gid0[..8].try_into().unwrap_or_default());
    p.port_guid = u64::from_ne_bytes(f.gid0[8..].try_into().unwrap_or_default());
    let pkeys = f.pkeys.clone().into_boxed_slice();
    p.pkeys_size = pkeys.len() as u32;
    p.pkeys = Box::into_raw(pkeys).cast();
    put(
        &mut p.link_layer,
        if f.port.link_layer == IBV_LINK_LAYER_INFINIBAND {
            "InfiniBand"
        } else {
            "Ethernet"
        },
    );
}

/// `int umad_get_port(const char *ca_name, int portnum, umad_port_t *port)`:
/// port 1 of `softrdma0` (`umad_release_port` frees its P_Key table).
///
/// # Safety
///
/// `ca_name` must be NULL or a C string, `port` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_get_port(
    ca_name: *const c_char,
    portnum: c_int,
    port: *mut umad_port,
) -> c_int {
    // SAFETY: per the contract.
    if port.is_null() || !unsafe { is_ours(ca_name) } {
        return -libc::ENODEV;
    }
    if portnum != 1 && portnum != 0 {
        return -libc::EINVAL;
    }
    ffi_guard(
        || -libc::EIO,
        || match query() {
            Ok(f) => {
                // SAFETY: writable per the contract; every field is plain
                // data, so zeroes are a valid start.
                let p = unsafe {
                    port.write(core::mem::zeroed());
                    &mut *port
                };
                fill_port(&f, p);
                0
            }
            Err(e) => -e,
        },
    )
}

/// `int umad_release_port(umad_port_t *port)`.
///
/// # Safety
///
/// `port` must be NULL or filled by `umad_get_port`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_release_port(port: *mut umad_port) -> c_int {
    if port.is_null() {
        return -libc::EINVAL;
    }
    // SAFETY: filled by umad_get_port per the contract.
    let p = unsafe { &mut *port };
    if !p.pkeys.is_null() {
        let table = core::ptr::slice_from_raw_parts_mut(p.pkeys, p.pkeys_size as usize);
        // SAFETY: the boxed slice umad_get_port leaked, freed once.
        drop(unsafe { Box::from_raw(table) });
        p.pkeys = core::ptr::null_mut();
    }
    0
}

/// `int umad_get_ca(const char *ca_name, umad_ca_t *ca)`: `softrdma0` and
/// its port (`umad_release_ca` frees it).
///
/// # Safety
///
/// `ca_name` must be NULL or a C string, `ca` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_get_ca(ca_name: *const c_char, ca: *mut umad_ca) -> c_int {
    // SAFETY: per the contract.
    if ca.is_null() || !unsafe { is_ours(ca_name) } {
        return -libc::ENODEV;
    }
    ffi_guard(
        || -libc::EIO,
        || match query() {
            Ok(f) => {
                // SAFETY: writable per the contract; plain data and NULL
                // pointers, for which zeroes are valid.
                let c = unsafe {
                    ca.write(core::mem::zeroed());
                    &mut *ca
                };
                put(&mut c.ca_name, CA_NAME);
                c.node_type = 1; // a channel adapter
                c.numports = 1;
                // SAFETY: a NUL-terminated C array from ibv_query_device.
                let fw = unsafe { CStr::from_ptr(f.dev.fw_ver.as_ptr()) };
                put(&mut c.fw_ver, &fw.to_string_lossy());
                put(&mut c.ca_type, "softrdma");
                put(&mut c.hw_ver, &format!("0x{:x}", f.dev.hw_ver));
                c.node_guid = f.dev.node_guid;
                c.system_guid = f.dev.sys_image_guid;
                // SAFETY: plain data and a NULL pointer.
                let mut port = Box::new(unsafe { core::mem::zeroed::<umad_port>() });
                fill_port(&f, &mut port);
                c.ports[1] = Box::into_raw(port);
                0
            }
            Err(e) => -e,
        },
    )
}

/// `int umad_release_ca(umad_ca_t *ca)`.
///
/// # Safety
///
/// `ca` must be NULL or filled by `umad_get_ca`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_release_ca(ca: *mut umad_ca) -> c_int {
    if ca.is_null() {
        return -libc::EINVAL;
    }
    // SAFETY: filled by umad_get_ca per the contract.
    let c = unsafe { &mut *ca };
    for p in c.ports.iter_mut().filter(|p| !p.is_null()) {
        // SAFETY: each is a Box umad_get_ca leaked, released once.
        unsafe {
            umad_release_port(*p);
            drop(Box::from_raw(*p));
        }
        *p = core::ptr::null_mut();
    }
    0
}

/// `int umad_get_cas_names(char cas[][UMAD_CA_NAME_LEN], int max)`: 1
/// (`softrdma0`) if `max` >= 1.
///
/// # Safety
///
/// `cas` must hold `max` names.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_get_cas_names(
    cas: *mut [c_char; UMAD_CA_NAME_LEN],
    max: c_int,
) -> c_int {
    if cas.is_null() || max < 1 {
        return if max < 1 { 0 } else { -libc::EINVAL };
    }
    // SAFETY: `max` >= 1 names writable per the contract.
    put(unsafe { &mut *cas }, CA_NAME);
    1
}

/// `int umad_get_ca_portguids(const char *ca_name, __be64 *portguids, int
/// max)`: entry 0 (reserved for switches) is 0, entry 1 port 1's GUID;
/// returns 2.
///
/// # Safety
///
/// `ca_name` must be NULL or a C string, `portguids` hold `max` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_get_ca_portguids(
    ca_name: *const c_char,
    portguids: *mut u64,
    max: c_int,
) -> c_int {
    // SAFETY: per the contract.
    if !unsafe { is_ours(ca_name) } {
        return -libc::ENODEV;
    }
    if portguids.is_null() || max < 2 {
        return -libc::EINVAL;
    }
    ffi_guard(
        || -libc::EIO,
        || match query() {
            Ok(f) => {
                let guid = u64::from_ne_bytes(f.gid0[8..].try_into().unwrap_or_default());
                // SAFETY: `max` >= 2 entries writable per the contract.
                unsafe {
                    portguids.write(0);
                    portguids.add(1).write(guid);
                }
                2
            }
            Err(e) => -e,
        },
    )
}

/// `int umad_get_issm_path(const char *ca_name, int portnum, char path[],
/// int max)`: `-ENODEV`. The IsSM device belongs to an InfiniBand subnet
/// manager; a RoCE port has none.
#[unsafe(no_mangle)]
pub extern "C" fn umad_get_issm_path(
    _ca_name: *const c_char,
    _portnum: c_int,
    _path: *mut c_char,
    _max: c_int,
) -> c_int {
    -libc::ENODEV
}

/// `struct umad_device_node *umad_get_ca_device_list(void)`: one node,
/// `softrdma0`.
#[unsafe(no_mangle)]
pub extern "C" fn umad_get_ca_device_list() -> *mut umad_device_node {
    static NAME: &CStr = c"softrdma0";
    Box::into_raw(Box::new(umad_device_node {
        next: core::ptr::null_mut(),
        ca_name: NAME.as_ptr(),
    }))
}

/// `void umad_free_ca_device_list(struct umad_device_node *head)`.
///
/// # Safety
///
/// `head` must be NULL or from `umad_get_ca_device_list`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn umad_free_ca_device_list(head: *mut umad_device_node) {
    let mut n = head;
    while !n.is_null() {
        // SAFETY: a node umad_get_ca_device_list boxed, freed once.
        let node = unsafe { Box::from_raw(n) };
        n = node.next;
    }
}

/// `int umad_sort_ca_device_list(struct umad_device_node **head, size_t
/// size)`: a list of one is sorted.
#[unsafe(no_mangle)]
pub extern "C" fn umad_sort_ca_device_list(
    _head: *mut *mut umad_device_node,
    _size: usize,
) -> c_int {
    0
}

/// `int umad_init(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn umad_init() -> c_int {
    0
}

/// `int umad_done(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn umad_done() -> c_int {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_match_sysfs() {
        assert_eq!(rate(2, 32), 100, "4X EDR");
        assert_eq!(rate(1, 1), 2, "1X SDR (2.5 rounds down)");
        assert_eq!(rate(8, 64), 600, "12X HDR");
        assert_eq!(rate(0, 32), 0);
    }

    #[test]
    fn names_are_truncated_and_terminated() {
        let mut a = [1 as c_char; 5];
        put(&mut a, "softrdma0");
        assert_eq!(
            a,
            [
                b's' as c_char,
                b'o' as c_char,
                b'f' as c_char,
                b't' as c_char,
                0
            ]
        );
    }
}
