//! The rules every export follows at the C boundary: no panic crosses it, and
//! failures are reported in the caller's convention (errno and a sentinel).
//!
//! Every `extern "C"` function of this crate runs its body inside
//! [`ffi_guard`]. A panic in the body is caught (`catch_unwind`; the workspace
//! builds with the default `panic = "unwind"`, which this relies on), reported
//! once on stderr by the standard panic hook, and turned into the function's
//! failure value. If a panic ever escaped anyway, Rust 2024 `extern "C"`
//! functions abort the process instead of unwinding into C frames.
//!
//! The [`ret`] helpers produce the sentinels of rdma-core's conventions:
//! - constructors: `NULL` with `errno` set ([`ret::null`]),
//! - most verbs (`ibv_modify_qp`, `ibv_destroy_*`, `post_*`, ...): a *positive*
//!   errno as the return value ([`ret::pos`]),
//! - librdmacm and a few verbs (`ibv_get_cq_event`): `-1` with `errno` set
//!   ([`ret::neg`]).

use core::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

/// Runs `f`; if it panics, returns `on_panic()` instead (after setting `errno`
/// to `EIO`, which `on_panic` may override).
///
/// The body is treated as unwind-safe: after a panic the function returns a
/// failure and the caller is expected not to rely on the half-done operation.
/// Shared engine state must therefore be behind poisoning locks or updated so
/// that a panic leaves it consistent.
pub fn ffi_guard<R>(on_panic: impl FnOnce() -> R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            set_errno(libc::EIO);
            // A panic inside `on_panic` itself would escape; the closures used
            // here are trivial constructors of sentinels.
            on_panic()
        }
    }
}

/// The frame of an export that needs one argument: inside [`ffi_guard`], `f`
/// runs on what `get` finds (a live object, a non-NULL struct). When `get`
/// finds nothing the export fails with EINVAL, when anything panics with
/// EIO, both reported by `fail` in the export's convention ([`ret::pos`],
/// [`ret::neg`], [`ret::null`], ...).
pub fn with_arg<A, R>(
    get: impl FnOnce() -> Option<A>,
    fail: fn(c_int) -> R,
    f: impl FnOnce(A) -> R,
) -> R {
    ffi_guard(
        || fail(libc::EIO),
        || match get() {
            Some(a) => f(a),
            None => fail(libc::EINVAL),
        },
    )
}

/// [`with_arg`] for a struct the caller passes by pointer to be read and
/// written (`ibv_create_qp`'s attributes, ...): NULL is EINVAL.
///
/// # Safety
///
/// `p` must be NULL or valid for reads and writes during the call.
pub unsafe fn with_struct<T, R>(p: *mut T, fail: fn(c_int) -> R, f: impl FnOnce(&mut T) -> R) -> R {
    // SAFETY: NULL or valid for reads and writes, per the contract.
    with_arg(|| unsafe { p.as_mut() }, fail, f)
}

/// Sets the calling thread's `errno`.
pub fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() = e }
}

/// Reads the calling thread's `errno`.
pub fn errno() -> c_int {
    // SAFETY: `__errno_location` returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// The errno of a function that is not implemented yet.
pub const NOT_IMPLEMENTED: c_int = libc::ENOSYS;

/// Called by every stub: logs `name` on stderr if `SOFTRDMA_LOG_STUBS` is set.
pub fn stub_hit(name: &str) {
    static LOG: OnceLock<bool> = OnceLock::new();
    if *LOG.get_or_init(|| {
        std::env::var_os("SOFTRDMA_LOG_STUBS").is_some_and(|v| !v.is_empty() && v != "0")
    }) {
        // Keep errno: the stub sets it after this call, but be tidy anyway.
        let saved = errno();
        eprintln!("softrdma: {name}() is not implemented yet");
        set_errno(saved);
    }
}

/// Defines `#[no_mangle] extern "C"` stubs.
///
/// `fn name(arg: Ty, ...) -> Ret => failure_expr;` expands to an exported
/// function that ignores its arguments (never dereferences them), calls
/// [`stub_hit`] and returns `failure_expr`, all inside [`crate::guard::ffi_guard`].
/// The stubs are safe functions because they never touch their pointers; a
/// real implementation that does becomes `unsafe extern "C"` with a
/// `# Safety` section.
#[allow(unused_macros)] // librdmacm (which includes this file) has no stubs left
macro_rules! stubs {
    ($(
        $(#[$meta:meta])*
        fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? => $fail:expr;
    )*) => {$(
        $(#[$meta])*
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($($arg: $ty),*) $(-> $ret)? {
            $crate::guard::ffi_guard(
                || $fail,
                || {
                    let _ = ($($arg,)*);
                    $crate::guard::stub_hit(stringify!($name));
                    $fail
                },
            )
        }
    )*};
}
#[allow(unused_imports)]
pub(crate) use stubs;

/// Failure sentinels in rdma-core's conventions.
pub mod ret {
    use core::ffi::c_int;

    use super::set_errno;

    /// `NULL` with `errno = e` (constructors: `ibv_alloc_pd`, `ibv_create_qp`, ...).
    pub fn null<T>(e: c_int) -> *mut T {
        set_errno(e);
        core::ptr::null_mut()
    }

    /// `NULL` (const) with `errno = e`.
    pub fn null_const<T>(e: c_int) -> *const T {
        set_errno(e);
        core::ptr::null()
    }

    /// The positive errno `e` as the return value (most int-returning verbs).
    /// `errno` is set as well, which rdma-core also does in most paths.
    pub fn pos(e: c_int) -> c_int {
        set_errno(e);
        e
    }

    /// `-1` with `errno = e` (librdmacm, `ibv_get_cq_event`, rsockets).
    pub fn neg(e: c_int) -> c_int {
        set_errno(e);
        -1
    }

    /// `-1` as `ssize_t`/`off_t` with `errno = e`.
    pub fn neg_isize(e: c_int) -> isize {
        set_errno(e);
        -1
    }

    /// `(size_t)-1` with `errno = e` (`riowrite`).
    pub fn neg_usize(e: c_int) -> usize {
        set_errno(e);
        usize::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_passes_value_through() {
        assert_eq!(ffi_guard(|| -1, || 7), 7);
    }

    #[test]
    fn guard_turns_panic_into_fallback_and_eio() {
        set_errno(0);
        let r: *mut u8 = ffi_guard(core::ptr::null_mut, || panic!("boom"));
        assert!(r.is_null());
        assert_eq!(errno(), libc::EIO);
        let r = ffi_guard(|| ret::neg(libc::ENOMEM), || -> c_int { panic!("boom") });
        assert_eq!(r, -1);
        assert_eq!(errno(), libc::ENOMEM);
    }

    #[test]
    fn sentinels() {
        assert!(ret::null::<u8>(libc::ENOSYS).is_null());
        assert_eq!(errno(), libc::ENOSYS);
        assert_eq!(ret::pos(libc::EOPNOTSUPP), libc::EOPNOTSUPP);
        assert_eq!(ret::neg(libc::EINVAL), -1);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(ret::neg_usize(libc::EINVAL), usize::MAX);
    }
}
