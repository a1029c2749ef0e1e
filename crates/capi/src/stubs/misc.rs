//! Helpers with no engine behind them: sysfs reading (real), fork support
//! (real: a user-space stack pins nothing, so fork needs no preparation) and
//! the kernel-struct copy helpers of IBVERBS_1.0/1.1 (no-ops: we have no
//! kernel structs; no target binary calls them).

use core::ffi::{CStr, c_char, c_int, c_void};
use std::ffi::CString;
use std::sync::OnceLock;

use super::stubs;
use crate::ffi::*;
use crate::guard::{ffi_guard, ret};

/// `const char *ibv_get_sysfs_path(void)` (IBVERBS_1.0): `$SYSFS_PATH` without
/// trailing slashes (only when not set-uid, at most 256 bytes), else `"/sys"`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    static PATH: OnceLock<CString> = OnceLock::new();
    ffi_guard(
        || c"/sys".as_ptr(),
        || {
            PATH.get_or_init(|| {
                // SAFETY: getuid/geteuid have no preconditions.
                let not_setuid = unsafe { libc::getuid() == libc::geteuid() };
                let env = if not_setuid {
                    std::env::var_os("SYSFS_PATH")
                } else {
                    None
                };
                match env {
                    Some(v) => {
                        use std::os::unix::ffi::OsStrExt;
                        let mut bytes = v.as_bytes();
                        bytes = &bytes[..bytes.len().min(IBV_SYSFS_PATH_MAX)];
                        while let [rest @ .., b'/'] = bytes {
                            bytes = rest;
                        }
                        // An env value cannot contain NUL bytes.
                        CString::new(bytes).unwrap_or_else(|_| c"/sys".to_owned())
                    }
                    None => c"/sys".to_owned(),
                }
            })
            .as_ptr()
        },
    )
}

/// `int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)`
/// (IBVERBS_1.0): reads `dir/file` into `buf`, strips one trailing newline,
/// NUL-terminates, and returns the length; -1 with errno on failure (also if
/// the contents fill `buf` with no room for the terminator).
///
/// # Safety
///
/// `dir` and `file` must be NUL-terminated strings and `buf` must be valid for
/// writes of `size` bytes (the C contract of rdma-core's function).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    ffi_guard(
        || -1,
        || {
            if dir.is_null() || file.is_null() || (buf.is_null() && size > 0) {
                return ret::neg(libc::EINVAL);
            }
            // SAFETY: the caller passes NUL-terminated strings (checked non-NULL).
            let (dir, file) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
            let mut path = dir.to_bytes().to_vec();
            path.push(b'/');
            path.extend_from_slice(file.to_bytes());
            let Ok(path) = CString::new(path) else {
                return ret::neg(libc::EINVAL);
            };
            // SAFETY: `path` is NUL-terminated; flags are plain constants.
            let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            if fd < 0 {
                return -1;
            }
            // SAFETY: the caller guarantees `buf` is writable for `size` bytes.
            let len = unsafe { libc::read(fd, buf.cast::<c_void>(), size) };
            let saved = crate::guard::errno();
            // SAFETY: `fd` is the descriptor opened above, closed exactly once.
            unsafe { libc::close(fd) };
            crate::guard::set_errno(saved);
            if len < 0 {
                return -1;
            }
            let mut len = len as usize; // 0 <= len <= size
            if len > 0 {
                // SAFETY: `len <= size`, so `buf[len - 1]` and (when `len < size`)
                // `buf[len]` are inside the caller's buffer.
                unsafe {
                    if *buf.add(len - 1) == b'\n' as c_char {
                        len -= 1;
                        *buf.add(len) = 0;
                    } else if len < size {
                        *buf.add(len) = 0;
                    } else {
                        return -1;
                    }
                }
            }
            len as c_int
        },
    )
}

/// `int ibv_fork_init(void)` (IBVERBS_1.1): nothing to prepare; returns 0.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_fork_init() -> c_int {
    ffi_guard(|| 0, || 0)
}

/// `enum ibv_fork_status ibv_is_fork_initialized(void)` (IBVERBS_1.13):
/// `IBV_FORK_UNNEEDED`, as rdma-core reports on kernels with copy-on-fork
/// support: registered memory is never pinned by us.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_is_fork_initialized() -> ibv_fork_status {
    ffi_guard(|| IBV_FORK_UNNEEDED, || IBV_FORK_UNNEEDED)
}

/// `int ibv_dontfork_range(void *base, size_t size)` (IBVERBS_1.1; used by
/// libmlx5/libefa): nothing to do; returns 0.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
    let _ = (base, size);
    ffi_guard(|| 0, || 0)
}

/// `int ibv_dofork_range(void *base, size_t size)` (IBVERBS_1.1): returns 0.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
    let _ = (base, size);
    ffi_guard(|| 0, || 0)
}

stubs! {
    /// `void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *, struct ib_uverbs_qp_attr *)`
    /// (IBVERBS_1.0). No-op.
    fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *mut c_void) => ();
    /// `void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *, struct ib_uverbs_ah_attr *)`
    /// (IBVERBS_1.1). No-op.
    fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *mut c_void) => ();
    /// `void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *, struct ib_user_path_rec *)`
    /// (IBVERBS_1.0). No-op.
    fn ibv_copy_path_rec_from_kern(dst: *mut ibv_sa_path_rec, src: *mut c_void) => ();
    /// `void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *, struct ibv_sa_path_rec *)`
    /// (IBVERBS_1.0). No-op.
    fn ibv_copy_path_rec_to_kern(dst: *mut c_void, src: *mut ibv_sa_path_rec) => ();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dir: &CStr, file: &CStr, size: usize) -> (c_int, Vec<u8>) {
        let mut buf = vec![0x55u8; size];
        // SAFETY: NUL-terminated strings and a buffer of `size` bytes.
        let n = unsafe {
            ibv_read_sysfs_file(dir.as_ptr(), file.as_ptr(), buf.as_mut_ptr().cast(), size)
        };
        (n, buf)
    }

    #[test]
    fn read_sysfs_file_like_rdma_core() {
        let dir = std::env::temp_dir().join(format!("softrdma-sysfs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("nl"), b"MT_0000000001\n").unwrap();
        std::fs::write(dir.join("raw"), b"abc").unwrap();
        let d = CString::new(dir.to_str().unwrap()).unwrap();

        let (n, buf) = read(&d, c"nl", 64);
        assert_eq!(n, 13);
        assert_eq!(&buf[..14], b"MT_0000000001\0");

        let (n, buf) = read(&d, c"raw", 64);
        assert_eq!(n, 3);
        assert_eq!(&buf[..4], b"abc\0");

        // Exactly full with no newline: no room for the NUL, so -1.
        assert_eq!(read(&d, c"raw", 3).0, -1);
        // Missing file: -1 with ENOENT.
        assert_eq!(read(&d, c"missing", 8).0, -1);
        assert_eq!(crate::guard::errno(), libc::ENOENT);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sysfs_path_has_no_trailing_slash() {
        // SAFETY: returns a static NUL-terminated string.
        let p = unsafe { CStr::from_ptr(ibv_get_sysfs_path()) }
            .to_str()
            .unwrap()
            .to_owned();
        assert!(!p.is_empty() && !p.ends_with('/'), "{p:?}");
    }

    #[test]
    fn fork_helpers_succeed() {
        assert_eq!(ibv_fork_init(), 0);
        assert_eq!(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
        assert_eq!(ibv_dontfork_range(core::ptr::null_mut(), 0), 0);
        assert_eq!(ibv_dofork_range(core::ptr::null_mut(), 0), 0);
    }
}
