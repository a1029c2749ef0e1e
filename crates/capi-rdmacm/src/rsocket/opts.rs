//! `rsetsockopt` / `rgetsockopt`: the options rdma-core's rsockets know,
//! with its meanings (buffer sizes double like Linux's, SOL_RDMA sizes apply
//! before connecting). Options are recorded as bits `1 << optname` per level.

use core::ffi::c_int;

use super::proto::{QP_MAX_SIZE, SNDLOWAT, scale_to_value, value_to_scale};
use super::sock::{self, Phase, settle};
use super::sys::Res;
use crate::ffi::{RDMA_INLINE, RDMA_IOMAPSIZE, RDMA_ROUTE, RDMA_RQSIZE, RDMA_SQSIZE, SOL_RDMA};

fn bit(opts: &mut u64, name: c_int, on: bool) {
    if (0..64).contains(&name) {
        if on {
            *opts |= 1 << name;
        } else {
            *opts &= !(1 << name);
        }
    }
}

/// `val`: the option's bytes.
pub(super) fn set(fd: c_int, level: c_int, name: c_int, val: &[u8]) -> Res<()> {
    if let Some(r) = super::ops::dgram_setsockopt(fd, level, name, val) {
        return r;
    }
    let s = sock::lookup(fd)?;
    let mut g = s.lock();
    settle(&mut g);
    let int = || -> Res<c_int> {
        let b: [u8; 4] = val
            .get(..4)
            .ok_or(libc::EINVAL)?
            .try_into()
            .map_err(|_| libc::EINVAL)?;
        Ok(c_int::from_ne_bytes(b))
    };
    let unconnected = matches!(g.phase, Phase::Init | Phase::Listening(_));
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_OOBINLINE) => {
            let on = int()? != 0;
            bit(&mut g.opts.so, name, on);
        }
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => {
            let on = int()? != 0;
            bit(&mut g.opts.so, name, on);
            if on {
                super::keepalive::add(&s, g.opts.keepalive_time);
            } else {
                super::keepalive::remove(fd);
            }
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
            let v = int()? as u32;
            if unconnected {
                g.sizes.rbuf = v.saturating_mul(2);
            }
        }
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
            let v = int()? as u32;
            if unconnected {
                g.sizes.sbuf = v.saturating_mul(2).max(SNDLOWAT * 2);
            }
        }
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if val.len() < size_of::<libc::linger>() {
                return Err(libc::EINVAL);
            }
            // Inverted like rdma-core: the default (bit clear) is "on".
            let on = int()? == 0;
            bit(&mut g.opts.so, name, on);
        }
        (libc::IPPROTO_IP, libc::IP_TOS) => g.opts.ip_tos = int()?,
        (
            libc::IPPROTO_TCP,
            libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG | libc::TCP_CONGESTION,
        ) => {}
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
            let v = int()?;
            if v <= 0 {
                return Err(libc::EINVAL);
            }
            g.opts.keepalive_time = v;
            super::keepalive::modify(fd, v);
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => {
            let on = int()? != 0;
            bit(&mut g.opts.tcp, name, on);
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
            let on = int()? != 0;
            bit(&mut g.opts.ipv6, name, on);
        }
        (SOL_RDMA, _) => {
            if !unconnected {
                return Err(libc::EINVAL);
            }
            match name {
                RDMA_SQSIZE => g.sizes.sq = (int()? as u32).min(QP_MAX_SIZE),
                RDMA_RQSIZE => g.sizes.rq = (int()? as u32).min(QP_MAX_SIZE),
                RDMA_INLINE => g.sizes.inline = (int()? as u32).min(QP_MAX_SIZE),
                RDMA_IOMAPSIZE => {
                    g.sizes.iomap = scale_to_value(value_to_scale(int()? as u32, 8), 8)
                }
                RDMA_ROUTE => {}
                _ => return Err(libc::ENOTSUP),
            }
        }
        _ => return Err(libc::ENOTSUP),
    }
    Ok(())
}

/// The option's value as bytes (an int, or a `struct linger`).
pub(super) fn get(fd: c_int, level: c_int, name: c_int) -> Res<Vec<u8>> {
    if let Some(r) = super::ops::dgram_getsockopt(fd, level, name) {
        return r;
    }
    let s = sock::lookup(fd)?;
    let mut g = s.lock();
    settle(&mut g);
    let on = |o: u64| c_int::from((0..64).contains(&name) && o & (1 << name) != 0);
    let v: c_int = match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => {
            on(g.opts.so)
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => g.sizes.rbuf as c_int,
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => g.sizes.sbuf as c_int,
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            let l = libc::linger {
                l_onoff: 1 - on(g.opts.so),
                l_linger: 0,
            };
            let mut b = l.l_onoff.to_ne_bytes().to_vec();
            b.extend_from_slice(&l.l_linger.to_ne_bytes());
            return Ok(b);
        }
        (libc::SOL_SOCKET, libc::SO_ERROR) => {
            let e = match &g.phase {
                Phase::Connected(c) if c.s.err != 0 => c.s.err,
                _ => g.err,
            };
            g.err = 0;
            if let Phase::Connected(c) = &mut g.phase {
                c.s.err = 0;
            }
            e
        }
        (libc::SOL_SOCKET, libc::SO_TYPE) => libc::SOCK_STREAM,
        (libc::IPPROTO_IP, libc::IP_TOS) => g.opts.ip_tos,
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL) => 1,
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => g.opts.keepalive_time,
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => on(g.opts.tcp),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => 2048,
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => on(g.opts.ipv6),
        (SOL_RDMA, RDMA_SQSIZE) => g.sizes.sq as c_int,
        (SOL_RDMA, RDMA_RQSIZE) => g.sizes.rq as c_int,
        (SOL_RDMA, RDMA_INLINE) => g.sizes.inline as c_int,
        (SOL_RDMA, RDMA_IOMAPSIZE) => g.sizes.iomap as c_int,
        _ => return Err(libc::ENOTSUP),
    };
    Ok(v.to_ne_bytes().to_vec())
}
