//! A one-shot socket for reachability probes (`rdma_resolve_addr`).

use crate::sys;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;

/// An unconnected UDP socket on `local` (ephemeral port) that sends like the
/// device socket — DF set, so Linux puts IPv4 ID 0 in the header, which is
/// what softrdma computes ICRCs with — and whose next receive fails with
/// `ECONNREFUSED` when an ICMP port unreachable comes back (`IP_RECVERR`
/// reports errors on unconnected sockets too).
pub fn probe_socket(local: IpAddr) -> io::Result<UdpSocket> {
    let s = sys::kernel_udp_socket(SocketAddr::new(local, 0))?;
    let fd = s.as_fd();
    if local.is_ipv6() {
        sys::setsockopt_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )?;
        sys::setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVERR, 1)?;
    } else {
        sys::setsockopt_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?;
        sys::setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVERR, 1)?;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A datagram to a closed port on loopback: the next receive reports it.
    #[test]
    fn closed_port_is_refused() {
        let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dst = closed.local_addr().unwrap();
        drop(closed);
        let s = probe_socket("127.0.0.1".parse().unwrap()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        s.send_to(b"x", dst).unwrap();
        let e = s.recv(&mut [0u8; 8]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    }
}
