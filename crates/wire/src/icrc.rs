//! The invariant CRC (IBTA 17.4.1.3 / Annex A17), computed exactly as Linux rxe does.
//!
//! CRC-32 (IEEE) over: eight 0xFF bytes standing in for the LRH, the IP header
//! with TOS/TTL/checksum (IPv4) or class/flow/hop limit (IPv6) set to ones, the
//! UDP header with its checksum set to ones, the BTH with byte 4 set to ones,
//! and everything after it up to the ICRC. Stored least-significant byte first.

use crate::error::{Error, Result};
use crate::ip::{IPV4_HDR_LEN, IPV6_HDR_LEN, UDP_HDR_LEN, UdpEnvelope};
use crate::packet::ICRC_LEN;

fn masked_ip(ip: &[u8], out: &mut [u8; IPV6_HDR_LEN]) -> Result<usize> {
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() == IPV4_HDR_LEN => {
            out[..IPV4_HDR_LEN].copy_from_slice(ip);
            out[1] = 0xFF;
            out[8] = 0xFF;
            out[10] = 0xFF;
            out[11] = 0xFF;
            Ok(IPV4_HDR_LEN)
        }
        Some(6) if ip.len() == IPV6_HDR_LEN => {
            out.copy_from_slice(ip);
            out[0] |= 0x0F;
            out[1] = 0xFF;
            out[2] = 0xFF;
            out[3] = 0xFF;
            out[7] = 0xFF;
            Ok(IPV6_HDR_LEN)
        }
        _ => Err(Error::BadField("IP header for ICRC")),
    }
}

/// Computes the ICRC of `roce` (BTH through pad, without the ICRC) sent inside the
/// given raw IP and UDP headers.
pub fn compute(ip_header: &[u8], udp_header: &[u8], roce: &[u8]) -> Result<u32> {
    if udp_header.len() != UDP_HDR_LEN {
        return Err(Error::BadField("UDP header for ICRC"));
    }
    if roce.len() < 12 {
        return Err(Error::Truncated {
            need: 12,
            have: roce.len(),
        });
    }
    let mut ipm = [0u8; IPV6_HDR_LEN];
    let ipl = masked_ip(ip_header, &mut ipm)?;
    let mut udp = [0u8; UDP_HDR_LEN];
    udp.copy_from_slice(udp_header);
    udp[6] = 0xFF;
    udp[7] = 0xFF;
    let mut h = crc32fast::Hasher::new();
    h.update(&[0xFF; 8]);
    h.update(&ipm[..ipl]);
    h.update(&udp);
    h.update(&roce[..4]);
    h.update(&[0xFF]);
    h.update(&roce[5..]);
    Ok(h.finalize())
}

/// Verifies the ICRC of a captured envelope (its payload ends with the ICRC).
pub fn verify(env: &UdpEnvelope<'_>) -> Result<()> {
    let p = env.payload;
    if p.len() < 12 + ICRC_LEN {
        return Err(Error::Truncated {
            need: 12 + ICRC_LEN,
            have: p.len(),
        });
    }
    let (body, tail) = p.split_at(p.len() - ICRC_LEN);
    let carried = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let computed = compute(env.ip_header, env.udp_header, body)?;
    if carried == computed {
        Ok(())
    } else {
        Err(Error::BadIcrc { carried, computed })
    }
}

/// Computes the ICRC of `pkt` (BTH through ICRC) and stores it in its last four bytes.
pub fn fill(ip_header: &[u8], udp_header: &[u8], pkt: &mut [u8]) -> Result<()> {
    if pkt.len() < 12 + ICRC_LEN {
        return Err(Error::Truncated {
            need: 12 + ICRC_LEN,
            have: pkt.len(),
        });
    }
    let n = pkt.len() - ICRC_LEN;
    let c = compute(ip_header, udp_header, &pkt[..n])?;
    pkt[n..].copy_from_slice(&c.to_le_bytes());
    Ok(())
}

/// The IPv4 Identification and DF flag under which `carried` is the ICRC of
/// `roce` (BTH through pad, without the ICRC) in the given IPv4 and UDP headers,
/// whatever those two fields of `ip_header` say.
///
/// The ICRC covers the IPv4 Identification, and Linux rxe sends a non-zero ID
/// that changes per packet, which a UDP socket never sees. The CRC is linear,
/// so the difference between the carried ICRC and the one computed with the
/// assumed header is a linear function of the 17 unknown bits (16 of ID, DF);
/// this solves for them. `Some` means the packet is intact under some ID/DF
/// (a random corruption still fails with probability 1 - 2^-15); `None` means
/// no ID/DF makes the ICRC right, or the header is not a 20-byte IPv4 one.
pub fn ipv4_id_and_df(
    ip_header: &[u8],
    udp_header: &[u8],
    roce: &[u8],
    carried: u32,
) -> Option<(u16, bool)> {
    if ip_header.len() != IPV4_HDR_LEN || ip_header[0] >> 4 != 4 {
        return None;
    }
    let computed = compute(ip_header, udp_header, roce).ok()?;
    let id = u16::from_be_bytes([ip_header[4], ip_header[5]]);
    let df = ip_header[6] & 0x40 != 0;
    let diff = computed ^ carried;
    if diff == 0 {
        return Some((id, df));
    }
    // The covered bytes after the flags byte (offset 14: 8 LRH bytes, then
    // IPv4 offset 6), which shift the difference through the CRC register.
    let covered = 8 + IPV4_HDR_LEN + UDP_HDR_LEN + roce.len();
    let x = id_solver().solve(diff, covered - 15)?;
    Some((id ^ (x & 0xFFFF) as u16, df ^ (x >> 16 != 0)))
}

/// Reflected CRC-32 polynomial.
const POLY: u32 = 0xEDB8_8320;

/// `T[i]`: the register after shifting byte `i` through a zero register.
fn crc_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    for (i, e) in t.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
        }
        *e = c;
    }
    t
}

/// A linear map of 32-bit vectors over GF(2): column `k` is the image of bit `k`.
type Gf2Matrix = [u32; 32];

fn apply(m: &Gf2Matrix, v: u32) -> u32 {
    let mut out = 0;
    for (k, col) in m.iter().enumerate() {
        if v >> k & 1 != 0 {
            out ^= col;
        }
    }
    out
}

/// Precomputed pieces of [`ipv4_id_and_df`].
struct IdSolver {
    /// `Z^-(2^j)`, where `Z` advances the raw CRC register over one zero byte.
    unshift: [Gf2Matrix; 20],
    /// A reduced basis of the register contributions of the 17 unknown bits
    /// (bit `b` of a row's second field: which unknowns make up the row), indexed
    /// by the row's highest set bit.
    basis: [Option<(u32, u32)>; 32],
}

impl IdSolver {
    fn new() -> IdSolver {
        let t = crc_table();
        // Z(r) = T[r & 0xff] ^ (r >> 8) keeps T[r & 0xff]'s top byte, and the top
        // bytes of T are a permutation of 0..=255, so Z is invertible.
        let mut by_top = [0u8; 256];
        for (i, e) in t.iter().enumerate() {
            by_top[(e >> 24) as usize] = i as u8;
        }
        let z_inv = |r: u32| -> u32 {
            let i = by_top[(r >> 24) as usize];
            ((r ^ t[usize::from(i)]) << 8) | u32::from(i)
        };
        let mut unshift = [[0u32; 32]; 20];
        for (k, col) in unshift[0].iter_mut().enumerate() {
            *col = z_inv(1 << k);
        }
        for j in 1..unshift.len() {
            let prev = unshift[j - 1];
            // Z^-(2^j) = Z^-(2^(j-1)) applied twice.
            unshift[j] = prev.map(|col| apply(&prev, col));
        }
        // Register after shifting ID high, ID low and the flags byte through a
        // zero register (everything before them in the difference is zero).
        let contribution = |bytes: [u8; 3]| {
            bytes
                .iter()
                .fold(0u32, |r, b| t[usize::from((r as u8) ^ b)] ^ (r >> 8))
        };
        let mut basis = [None; 32];
        for bit in 0..17u32 {
            let bytes = if bit < 16 {
                let id = 1u16 << bit;
                [(id >> 8) as u8, id as u8, 0]
            } else {
                [0, 0, 0x40]
            };
            let (mut v, mut combo) = (contribution(bytes), 1u32 << bit);
            while v != 0 {
                let top = 31 - v.leading_zeros() as usize;
                match basis[top] {
                    Some((bv, bc)) => {
                        v ^= bv;
                        combo ^= bc;
                    }
                    None => {
                        basis[top] = Some((v, combo));
                        break;
                    }
                }
            }
        }
        IdSolver { unshift, basis }
    }

    /// The unknown bits (ID in bits 0..16, DF in bit 16) whose contribution,
    /// shifted over `zeros` more bytes, is `diff`.
    fn solve(&self, diff: u32, zeros: usize) -> Option<u32> {
        let mut v = diff;
        for (j, m) in self.unshift.iter().enumerate() {
            if zeros >> j & 1 != 0 {
                v = apply(m, v);
            }
        }
        if zeros >> self.unshift.len() != 0 {
            return None;
        }
        let mut x = 0;
        while v != 0 {
            let top = 31 - v.leading_zeros() as usize;
            let (bv, bc) = self.basis[top]?;
            v ^= bv;
            x ^= bc;
        }
        Some(x)
    }
}

fn id_solver() -> &'static IdSolver {
    static SOLVER: std::sync::OnceLock<IdSolver> = std::sync::OnceLock::new();
    SOLVER.get_or_init(IdSolver::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::parse_ip_udp;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn connectx_cnp_vector() {
        // rocev2.md §2.4 vector 1: a CNP generated by a ConnectX-4 Lx.
        let p = hex(
            "45c2003c 718c4000 40119161 0a001101 0a001201 000012b7 00280000
             8100ffff 40000118 00000000 00000000 00000000 00000000 00000000 82fd002a",
        );
        let env = parse_ip_udp(&p).unwrap();
        verify(&env).unwrap();
    }

    #[test]
    fn send_only_vector() {
        let p = hex(
            "45000034123440004011a531c0a80101c0a80102c12312b7002000000430ffff000000118000010068656c6c6f00000078fcce4e",
        );
        let env = parse_ip_udp(&p).unwrap();
        verify(&env).unwrap();
        let mut q = p.clone();
        q[30] ^= 1;
        let env = parse_ip_udp(&q).unwrap();
        assert!(matches!(verify(&env), Err(Error::BadIcrc { .. })));
    }

    #[test]
    fn ack_vector() {
        let p = hex(
            "45000030123440004011a535c0a80102c0a80101c45612b7001c00001100ffff00000012000001001f000001792516be",
        );
        verify(&parse_ip_udp(&p).unwrap()).unwrap();
    }
}
