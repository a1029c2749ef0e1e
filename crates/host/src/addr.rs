//! Address comparison rules for port leases and the filename encoding of addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether a bind to `a` and a bind to `b` (same port space and port) collide.
///
/// The rule is the one `rdma_bind_addr` applies host-wide, made a little stricter where
/// softrdma cannot tell the cases apart:
/// * an unspecified address (`0.0.0.0` or `::`) overlaps **every** address of **either**
///   family, as a dual-stack wildcard bind does on Linux;
/// * an IPv4 address and its IPv4-mapped IPv6 form (`::ffff:a.b.c.d`) are the same
///   address (so `::ffff:0.0.0.0` is a wildcard too);
/// * otherwise two addresses overlap only when equal.
pub fn addrs_overlap(a: IpAddr, b: IpAddr) -> bool {
    let (a, b) = (a.to_canonical(), b.to_canonical());
    a.is_unspecified() || b.is_unspecified() || a == b
}

/// Filename-safe form of an address: IPv4 dotted quad as is, IPv6 in its canonical text
/// form with `:` replaced by `_` (never contains `-`, which separates fields in names).
pub(crate) fn encode_addr(a: IpAddr) -> String {
    match a {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => v6.to_string().replace(':', "_"),
    }
}

/// Inverse of [`encode_addr`]; `None` for anything that is not exactly what
/// [`encode_addr`] produces (so one address has exactly one filename).
pub(crate) fn decode_addr(s: &str) -> Option<IpAddr> {
    let addr = if s.contains('_') {
        IpAddr::V6(s.replace('_', ":").parse::<Ipv6Addr>().ok()?)
    } else {
        IpAddr::V4(s.parse::<Ipv4Addr>().ok()?)
    };
    (encode_addr(addr) == s).then_some(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn overlap_rules() {
        // Same specific address, either spelling.
        assert!(addrs_overlap(ip("10.0.0.1"), ip("10.0.0.1")));
        assert!(addrs_overlap(ip("10.0.0.1"), ip("::ffff:10.0.0.1")));
        assert!(addrs_overlap(ip("::ffff:10.0.0.1"), ip("10.0.0.1")));
        assert!(addrs_overlap(ip("fe80::1"), ip("fe80::1")));
        // Different specific addresses.
        assert!(!addrs_overlap(ip("10.0.0.1"), ip("10.0.0.2")));
        assert!(!addrs_overlap(ip("10.0.0.1"), ip("::ffff:10.0.0.2")));
        assert!(!addrs_overlap(ip("::1"), ip("127.0.0.1")));
        assert!(!addrs_overlap(ip("fe80::1"), ip("fe80::2")));
        // Wildcards overlap everything, both directions, both families.
        for w in ["0.0.0.0", "::", "::ffff:0.0.0.0"] {
            for other in ["0.0.0.0", "::", "10.0.0.1", "::1", "::ffff:10.0.0.1"] {
                assert!(addrs_overlap(ip(w), ip(other)), "{w} vs {other}");
                assert!(addrs_overlap(ip(other), ip(w)), "{other} vs {w}");
            }
        }
    }

    #[test]
    fn address_encoding_round_trips_and_is_unique() {
        for s in [
            "0.0.0.0",
            "127.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "fe80::1:2",
            "::ffff:1.2.3.4",
            "2001:db8::8a2e:370:7334",
        ] {
            let a = ip(s);
            let enc = encode_addr(a);
            assert!(
                !enc.contains('-') && !enc.contains('/') && !enc.contains(':'),
                "{enc}"
            );
            assert_eq!(decode_addr(&enc), Some(a), "{enc}");
        }
        for bad in [
            "",
            "1.2.3",
            "1.2.3.4.5",
            "__1_",
            "0_0_0_0_0_0_0_1",
            "::1",
            "01.2.3.4",
            "x",
        ] {
            assert_eq!(decode_addr(bad), None, "{bad:?}");
        }
    }
}
