//! Issue 16: a child forked while the device is open does not keep the
//! parent's host-device state alive. Its copies of the parent's descriptors
//! (the member slot, the rdma_cm port leases, the sockets in the reuseport
//! group) point at /dev/null in the child: once the parent is gone, its
//! slot is free (and its death seen by its peers) although the child still
//! runs.

mod common;

use softrdma_engine::transport::QpType;
use softrdma_engine::{Engine, EngineConfig};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// Forks a child that sleeps for `d` and exits; returns its pid.
fn sleeping_child(d: Duration) -> libc::pid_t {
    let ts = libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: 0,
    };
    // SAFETY: the child calls only nanosleep and _exit (async-signal-safe).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: a valid timespec; _exit skips the parent's exit hooks.
        unsafe {
            libc::nanosleep(&ts, std::ptr::null_mut());
            libc::_exit(0);
        }
    }
    assert!(pid > 0, "fork");
    pid
}

#[test]
fn a_forked_child_does_not_keep_the_parents_member_slot_alive() {
    let udp = common::free_udp_port();
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 71));
    let dev = SocketAddr::new(ip, udp);
    let e = Engine::start(EngineConfig::bound_to(dev)).unwrap();
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(4).unwrap();
    let qpn = common::create_qp(&e, QpType::Ud, pd, cq, 1, 1);
    // A member's QPNs carry its slot in bits 23..16.
    let slot = (qpn >> 16) as u8;
    let registry = softrdma_host::Registry::open_for_port(udp).unwrap();
    assert!(registry.is_alive(slot));
    let child = sleeping_child(Duration::from_secs(20));
    // The parent leaves the host device while its child lives on.
    drop(e);
    let alive = registry.is_alive(slot);
    // SAFETY: `child` is our child; killing and reaping it is all we do.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    assert!(!alive, "the slot is free once its member left");
}
