//! Socket addresses of datagram rsockets: the keys of the destination map,
//! the GIDs for address handles, rdma-core's `ds_header` (the sender's
//! address in front of every datagram), and the source address a datagram
//! to a destination leaves from.

use core::ffi::c_int;

use super::super::sys::{Res, unsafe_zeroed};

pub(in crate::rsocket) type Addr = libc::sockaddr_storage;

pub(super) fn addr_key(a: &Addr) -> Vec<u8> {
    let n = if a.ss_family as c_int == libc::AF_INET6 {
        28
    } else {
        16
    };
    // SAFETY: plain bytes of a sockaddr_storage.
    let b = unsafe { core::slice::from_raw_parts((a as *const Addr).cast::<u8>(), n) };
    let mut v = b.to_vec();
    if n == 28 {
        v[4..8].fill(0); // flowinfo
        v.truncate(24);
    } else {
        v.truncate(8);
    }
    v
}

pub(super) fn addr_len(a: &Addr) -> libc::socklen_t {
    if a.ss_family as c_int == libc::AF_INET6 {
        28
    } else {
        16
    }
}

/// The address part of a GID (IPv4-mapped or IPv6).
pub(super) fn gid_of(a: &Addr) -> [u8; 16] {
    let b = addr_key(a);
    let mut g = [0u8; 16];
    if a.ss_family as c_int == libc::AF_INET6 {
        g.copy_from_slice(&b[8..24]);
    } else {
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&b[4..8]);
    }
    g
}

/// `struct ds_header` for address `a`: version, length, port, address.
pub(super) fn ds_header(a: &Addr) -> Vec<u8> {
    let b = addr_key(a);
    if a.ss_family as c_int == libc::AF_INET6 {
        // SAFETY: an AF_INET6 storage.
        let flow = unsafe { (*(a as *const Addr).cast::<libc::sockaddr_in6>()).sin6_flowinfo };
        let mut h = vec![6, 24, b[2], b[3]];
        h.extend_from_slice(&flow.to_ne_bytes());
        h.extend_from_slice(&b[8..24]);
        h
    } else {
        vec![4, 8, b[2], b[3], b[4], b[5], b[6], b[7]]
    }
}

/// The sender's address from a `ds_header` (`None` if malformed).
pub(super) fn parse_ds_header(h: &[u8]) -> Option<(Addr, usize)> {
    let mut a: Addr = unsafe_zeroed();
    let p = (&raw mut a).cast::<u8>();
    match (h.first(), h.get(1)) {
        (Some(4), Some(8)) if h.len() >= 8 => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: u16::from_ne_bytes([h[2], h[3]]),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes([h[4], h[5], h[6], h[7]]),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: the storage holds a sockaddr_in.
            unsafe { p.cast::<libc::sockaddr_in>().write_unaligned(sin) };
            Some((a, 8))
        }
        (Some(6), Some(24)) if h.len() >= 24 => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: u16::from_ne_bytes([h[2], h[3]]),
                sin6_flowinfo: u32::from_ne_bytes([h[4], h[5], h[6], h[7]]),
                sin6_addr: libc::in6_addr {
                    s6_addr: h[8..24].try_into().ok()?,
                },
                sin6_scope_id: 0,
            };
            // SAFETY: the storage holds a sockaddr_in6.
            unsafe { p.cast::<libc::sockaddr_in6>().write_unaligned(sin6) };
            Some((a, 24))
        }
        _ => None,
    }
}

pub(super) fn errno() -> c_int {
    crate::guard::errno()
}

/// A kernel socket, not through an interposed `socket()` (librspreload).
pub(super) fn raw_socket(domain: c_int, ty: c_int) -> c_int {
    // SAFETY: plain syscall.
    unsafe { libc::syscall(libc::SYS_socket, domain, ty, 0) as c_int }
}

/// The local address datagrams to `dst` leave from (`ds_get_src_addr`).
pub(super) fn src_addr(fd: c_int, dst: &Addr) -> Res<Addr> {
    let mut a: Addr = unsafe_zeroed();
    let mut l = size_of::<Addr>() as libc::socklen_t;
    // SAFETY: our socket, local output.
    if unsafe { libc::getsockname(fd, (&raw mut a).cast(), &mut l) } != 0 {
        return Err(errno());
    }
    if addr_key(&a)[2..4] == [0, 0] {
        // Unbound: take an ephemeral port now (as a first sendto(2) would),
        // so our datagrams name a port the peer can answer.
        let mut any: Addr = unsafe_zeroed();
        any.ss_family = dst.ss_family;
        // SAFETY: our socket; a wildcard address of the destination's family.
        unsafe { libc::bind(fd, (&raw const any).cast(), addr_len(dst)) };
        let mut l = size_of::<Addr>() as libc::socklen_t;
        // SAFETY: our socket, local output.
        if unsafe { libc::getsockname(fd, (&raw mut a).cast(), &mut l) } != 0 {
            return Err(errno());
        }
    }
    let key = addr_key(&a);
    let port = [key[2], key[3]];
    let any = if a.ss_family as c_int == libc::AF_INET {
        key[4..8] == [0; 4]
    } else {
        key[8..24] == [0; 16]
    };
    if !any {
        return Ok(a);
    }
    let t = raw_socket(
        dst.ss_family as c_int,
        libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
    );
    if t < 0 {
        return Err(errno());
    }
    // SAFETY: a temporary socket of ours.
    let r = unsafe {
        let r = libc::connect(t, (dst as *const Addr).cast(), addr_len(dst));
        let mut l = size_of::<Addr>() as libc::socklen_t;
        let r = if r == 0 {
            libc::getsockname(t, (&raw mut a).cast(), &mut l)
        } else {
            r
        };
        libc::close(t);
        r
    };
    if r != 0 {
        return Err(errno());
    }
    let p = (&raw mut a).cast::<u8>();
    // SAFETY: the port field of either family is at offset 2.
    unsafe { core::ptr::copy_nonoverlapping(port.as_ptr(), p.add(2), 2) };
    Ok(a)
}
