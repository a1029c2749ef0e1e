//! The GID table follows the host's addresses: an address that goes away
//! empties its entry and the others keep their indices (QPs name them by
//! index); a new address takes the first empty entry; GID 0 stays.

use softrdma_transport::{Config, Endpoint};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn removed_addresses_leave_empty_entries_that_new_ones_reuse() {
    let mut ep = Endpoint::new(Config::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 1));
    assert_eq!(ep.add_gid(ip("10.0.0.1")), 1);
    assert_eq!(ep.add_gid(ip("fd00::2")), 2);
    assert_eq!(ep.add_gid(ip("10.0.0.1")), 1, "an address has one entry");
    assert_eq!(ep.remove_gid(ip("10.0.0.1")), Some(1));
    let empty: IpAddr = Ipv6Addr::UNSPECIFIED.into();
    assert_eq!(ep.config().gids, [ip("127.0.0.1"), empty, ip("fd00::2")]);
    assert_eq!(ep.remove_gid(ip("10.0.0.1")), None, "already gone");
    assert_eq!(ep.remove_gid(ip("127.0.0.1")), None, "GID 0 stays");
    assert_eq!(ep.add_gid(ip("10.0.0.9")), 1, "the first empty entry");
    assert_eq!(ep.add_gid(ip("10.0.0.10")), 3);
}
