//! rdma-core's `udp_svc` for one datagram rsocket: the kernel UDP socket
//! carries address discovery (`ds_udp_header`: tag, version, op, length,
//! our QPN, our address) and the data sent before it completed.

use core::ffi::c_int;
use std::sync::atomic::Ordering;

use super::addr::*;
use super::*;

/// `ds_sendv_udp`: a datagram over the kernel socket, for a destination
/// without an address handle yet.
pub(super) fn udp_send(fd: c_int, g: &State, key: &[u8], op: u8, data: &[u8]) -> Res<usize> {
    let (a, d) = g.dests.get(key).ok_or(libc::EDESTADDRREQ)?;
    let q = &g.qps[d.qp];
    let key_src = addr_key(&q.src);
    let mut h = Vec::with_capacity(28);
    h.extend_from_slice(&DS_UDP_TAG.to_be_bytes());
    let v6 = q.src.ss_family as c_int == libc::AF_INET6;
    h.extend_from_slice(&[if v6 { 6 } else { 4 }, op, if v6 { 28 } else { 16 }, 0]);
    h.extend_from_slice(&(q.v.qp_num() & 0xFF_FFFF).to_be_bytes());
    if v6 {
        h.extend_from_slice(&key_src[8..24]);
    } else {
        h.extend_from_slice(&key_src[4..8]);
    }
    let mut iov = [
        libc::iovec {
            iov_base: h.as_ptr() as *mut _,
            iov_len: h.len(),
        },
        libc::iovec {
            iov_base: data.as_ptr() as *mut _,
            iov_len: data.len(),
        },
    ];
    let mut m: libc::msghdr = unsafe_zeroed();
    m.msg_name = (a as *const Addr).cast_mut().cast();
    m.msg_namelen = addr_len(a);
    m.msg_iov = iov.as_mut_ptr();
    m.msg_iovlen = 2;
    // SAFETY: our socket; the message's buffers live across the call.
    let n = unsafe { libc::sendmsg(fd, &m, 0) };
    if n < 0 {
        Err(errno())
    } else {
        Ok((n as usize).saturating_sub(h.len()))
    }
}

/// rdma-core's `udp_svc`: datagrams on the kernel socket are address
/// discovery (and the data sent before it completed).
pub(super) fn svc_loop(me: std::sync::Weak<DSock>) {
    let mut buf = vec![0u8; SNDLOWAT as usize];
    loop {
        let Some(s) = me.upgrade() else { return };
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        if !super::super::sock::wait_fd(s.fd, 50) {
            continue;
        }
        let mut from: Addr = unsafe_zeroed();
        let mut fl = size_of::<Addr>() as libc::socklen_t;
        // SAFETY: our socket, local buffers.
        let n = unsafe {
            libc::recvfrom(
                s.fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
                (&raw mut from).cast(),
                &mut fl,
            )
        };
        if n < 16 {
            continue;
        }
        let m = &buf[..n as usize];
        let v6 = from.ss_family as c_int == libc::AF_INET6;
        let hl = m[6] as usize;
        let valid = m[..4] == DS_UDP_TAG.to_be_bytes()
            && ((m[4] == 4 && !v6 && hl == 16) || (m[4] == 6 && v6 && hl == 28))
            && m.len() >= hl;
        if !valid {
            continue;
        }
        let op = m[5] as u32;
        let qpn = u32::from_be_bytes([m[8], m[9], m[10], m[11]]) & 0xFF_FFFF;
        let data = m[hl..].to_vec();
        let mut g = s.lock();
        let Ok(key) = get_dest(&s, &mut g, &from) else {
            continue;
        };
        if op == OP_DATA {
            let _ = udp_send(s.fd, &g, &key, OP_CTRL as u8, &[]);
        }
        let need_ah = g
            .dests
            .get(&key)
            .is_some_and(|(_, d)| d.ah.is_null() || d.qpn != qpn);
        if need_ah {
            let (qi, old) = {
                let (_, d) = &g.dests[&key];
                (d.qp, d.ah)
            };
            if !old.is_null() {
                g.qps[qi].v.destroy_ah(old);
            }
            let sgid = gid_of(&g.qps[qi].src);
            let ah = g.qps[qi]
                .v
                .create_ah(sgid, gid_of(&from))
                .unwrap_or(core::ptr::null_mut());
            if let Some((_, d)) = g.dests.get_mut(&key) {
                d.ah = ah;
                d.qpn = qpn;
            }
        }
        if op == OP_DATA {
            poll_cqs(&mut g);
            let _ = ud_send(&mut g, &key, &data, Some(&from));
        }
    }
}
