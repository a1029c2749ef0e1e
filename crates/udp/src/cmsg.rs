//! Control messages (`cmsg(3)`) encoded and decoded as bytes, in the kernel ABI, without
//! `unsafe`.
//!
//! Layout (`include/linux/socket.h`): each message is a header
//! `{ size_t cmsg_len; int cmsg_level; int cmsg_type; }` followed by data; `cmsg_len` counts the
//! header and the data; the next header starts at `cmsg_len` rounded up to `sizeof(size_t)`.
//! Offsets are relative to the start of the control buffer, exactly as the kernel's
//! `put_cmsg` walks it, so the buffer's own address alignment does not matter for parsing; we
//! still align it to 8 for the benefit of anything that uses the libc `CMSG_*` macros.

use std::mem::size_of;

const ALIGN: usize = size_of::<usize>();

const fn align(len: usize) -> usize {
    (len + ALIGN - 1) & !(ALIGN - 1)
}

/// `CMSG_ALIGN(sizeof(struct cmsghdr))`: 16 on 64-bit targets.
pub(crate) const HDR_LEN: usize = align(size_of::<usize>() + 2 * size_of::<i32>());

/// `CMSG_SPACE(len)`: bytes a message with `len` data bytes occupies in the buffer.
pub(crate) const fn space(len: usize) -> usize {
    HDR_LEN + align(len)
}

/// `CMSG_LEN(len)`: the value of `cmsg_len` for `len` data bytes.
pub(crate) const fn cmsg_len(len: usize) -> usize {
    HDR_LEN + len
}

/// An 8-byte-aligned control-message buffer of `N` bytes.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(8))]
pub(crate) struct CmsgBuf<const N: usize>(pub(crate) [u8; N]);

impl<const N: usize> CmsgBuf<N> {
    pub(crate) const ZERO: Self = CmsgBuf([0; N]);
}

/// Writes one control message at the start of `buf`; returns the bytes used
/// (`CMSG_SPACE(data.len())`), or `None` if `buf` is too small.
pub(crate) fn encode(buf: &mut [u8], level: i32, ty: i32, data: &[u8]) -> Option<usize> {
    let total = space(data.len());
    let buf = buf.get_mut(..total)?;
    buf.fill(0);
    let len_bytes = cmsg_len(data.len()).to_ne_bytes();
    buf[..size_of::<usize>()].copy_from_slice(&len_bytes);
    let o = size_of::<usize>();
    buf[o..o + 4].copy_from_slice(&level.to_ne_bytes());
    buf[o + 4..o + 8].copy_from_slice(&ty.to_ne_bytes());
    buf[HDR_LEN..HDR_LEN + data.len()].copy_from_slice(data);
    Some(total)
}

/// One decoded control message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cmsg<'a> {
    pub(crate) level: i32,
    pub(crate) ty: i32,
    pub(crate) data: &'a [u8],
}

/// Iterates over the control messages in `buf` (the first `msg_controllen` bytes the kernel
/// returned). Stops at the first malformed header instead of reading out of bounds.
#[derive(Clone, Debug)]
pub(crate) struct Iter<'a> {
    buf: &'a [u8],
}

impl<'a> Iter<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Iter { buf }
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = Cmsg<'a>;

    fn next(&mut self) -> Option<Cmsg<'a>> {
        if self.buf.len() < HDR_LEN {
            return None;
        }
        let mut len_bytes = [0u8; size_of::<usize>()];
        len_bytes.copy_from_slice(&self.buf[..size_of::<usize>()]);
        let len = usize::from_ne_bytes(len_bytes);
        if len < HDR_LEN || len > self.buf.len() {
            self.buf = &[];
            return None;
        }
        let o = size_of::<usize>();
        let level = i32::from_ne_bytes(self.buf[o..o + 4].try_into().ok()?);
        let ty = i32::from_ne_bytes(self.buf[o + 4..o + 8].try_into().ok()?);
        let data = &self.buf[HDR_LEN..len];
        let next = align(len).min(self.buf.len());
        self.buf = &self.buf[next..];
        Some(Cmsg { level, ty, data })
    }
}

/// Reads a native-endian `i32` from the start of a control message's data.
pub(crate) fn read_i32(data: &[u8]) -> Option<i32> {
    Some(i32::from_ne_bytes(data.get(..4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_libc_macros() {
        for len in [0usize, 1, 2, 4, 12, 20, 64] {
            // SAFETY: CMSG_SPACE and CMSG_LEN are pure arithmetic on their argument.
            let (s, l) = unsafe {
                (
                    libc::CMSG_SPACE(len as u32) as usize,
                    libc::CMSG_LEN(len as u32) as usize,
                )
            };
            assert_eq!(space(len), s, "space({len})");
            assert_eq!(cmsg_len(len), l, "len({len})");
        }
        assert_eq!(HDR_LEN, size_of::<libc::cmsghdr>());
    }

    #[test]
    fn encode_then_iterate() {
        let mut buf = CmsgBuf::<64>::ZERO;
        let n1 = encode(&mut buf.0, libc::SOL_UDP, 103, &1400u16.to_ne_bytes()).unwrap();
        let n2 = encode(&mut buf.0[n1..], libc::SOL_UDP, 104, &7i32.to_ne_bytes()).unwrap();
        let msgs: Vec<_> = Iter::new(&buf.0[..n1 + n2]).collect();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].level, libc::SOL_UDP);
        assert_eq!(msgs[0].ty, 103);
        assert_eq!(msgs[0].data, &1400u16.to_ne_bytes());
        assert_eq!(read_i32(msgs[1].data), Some(7));
    }

    #[test]
    fn malformed_headers_stop_iteration() {
        let mut buf = [0u8; 40];
        buf[..8].copy_from_slice(&1000usize.to_ne_bytes());
        assert_eq!(Iter::new(&buf).count(), 0);
        buf[..8].copy_from_slice(&3usize.to_ne_bytes());
        assert_eq!(Iter::new(&buf).count(), 0);
        assert_eq!(Iter::new(&buf[..10]).count(), 0);
        assert!(encode(&mut buf[..20], 0, 0, &[0u8; 8]).is_none());
    }
}
