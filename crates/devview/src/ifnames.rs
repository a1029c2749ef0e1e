//! Which interface holds an address (`gid_attrs/ndevs/<i>`).

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The name of the interface holding `addr` (an IPv4-mapped IPv6 address
/// is looked up as IPv4), or `None` if no interface has it. A loopback
/// address no interface lists (`127.0.0.5`: all of 127/8 is local) is on
/// `lo`, where the kernel routes it.
pub fn interface_of(addr: IpAddr) -> Option<String> {
    let want = match addr {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4),
        v4 => v4,
    };
    listed_on(want).or_else(|| want.is_loopback().then(|| "lo".to_string()))
}

/// The interface `getifaddrs` lists `want` on.
fn listed_on(want: IpAddr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    let mut found = None;
    // SAFETY: `getifaddrs` fills `head` with a list it allocated; each node's
    // `ifa_addr` is NULL or a sockaddr of the family it names, `ifa_name` a
    // NUL-terminated string; the list is only read before `freeifaddrs`
    // frees it, once.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return None;
        }
        let mut p = head;
        while let Some(ifa) = p.as_ref() {
            p = ifa.ifa_next;
            if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
                continue;
            }
            let ip = match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
                }
                libc::AF_INET6 => {
                    let sin6 = &*ifa.ifa_addr.cast::<libc::sockaddr_in6>();
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
                }
                _ => continue,
            };
            if ip == want {
                found = Some(CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned());
                break;
            }
        }
        libc::freeifaddrs(head);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_on_lo() {
        assert_eq!(
            interface_of(IpAddr::V4(Ipv4Addr::LOCALHOST)).as_deref(),
            Some("lo")
        );
        assert_eq!(
            interface_of(IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped())).as_deref(),
            Some("lo")
        );
        assert_eq!(
            interface_of("127.9.8.7".parse().unwrap()).as_deref(),
            Some("lo")
        );
        assert_eq!(interface_of("192.0.2.77".parse().unwrap()), None);
    }
}
