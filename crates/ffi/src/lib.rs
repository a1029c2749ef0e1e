//! `#[repr(C)]` mirrors of the rdma-core 44 public headers (x86_64 Linux, glibc).
//!
//! Sources: `<infiniband/verbs.h>`, `<infiniband/sa.h>`, `<rdma/rdma_cma.h>`,
//! `<rdma/rdma_verbs.h>`, `<rdma/rsocket.h>` and `<infiniband/umad.h>` as
//! installed by Debian bookworm's `libibverbs-dev`/`librdmacm-dev`/`libibumad-dev`
//! 44.0.
//!
//! Conventions (the same as bindgen's "constified enum" mode):
//! - a C `enum foo` is a type alias `foo` (`c_uint`, or `c_int` when the enum has
//!   a negative value, which is what GCC picks) plus one `pub const` per value;
//! - C anonymous unions become named unions; the field that holds one is named
//!   after what it selects (e.g. [`ibv_send_wr::imm`] holds `imm_data` /
//!   `invalidate_rkey`). Their byte offsets are the C ones;
//! - every function-pointer slot is `Option<unsafe extern "C" fn(..)>` so that a
//!   NULL slot is `None`;
//! - `__be16/32/64` are plain `u16/u32/u64` holding network-order bytes;
//! - `pthread_mutex_t`/`pthread_cond_t` are opaque byte arrays of glibc's size and
//!   alignment ([`pthread_mutex_t`], [`pthread_cond_t`]). Initialise them with
//!   `libc::pthread_*_init` through a cast pointer if a C caller may use them.
//!
//! Every struct has a compile-time size/offset check (`assert_layout!`) against
//! the values gcc prints for the installed headers (`shared/reference/abi/off/
//! offsets.txt`), and `crates/capi/tests/layout.rs` re-checks every mirrored field against
//! the real headers with a C compiler.
//!
//! Plain data: no `#[no_mangle]` items live here, so every library that needs
//! the layouts (`libibverbs.so.1`, `librdmacm.so.1`, a dlopen backend) can
//! depend on it without duplicating an export.

#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

use core::fmt;

pub mod cm;
pub mod consts;
pub mod context;
pub mod device;
pub mod resources;
pub mod sa;
pub mod umad;
pub mod wr;

pub use cm::*;
pub use consts::*;
pub use context::*;
pub use device::*;
pub use resources::*;
pub use sa::*;
pub use umad::*;
pub use wr::*;

/// Checks `size_of`, `align_of` and field offsets of a mirror at compile time.
///
/// `assert_layout!(T, size, align; field => offset, nested.field => offset, ...)`
macro_rules! assert_layout {
    ($t:ty, $size:expr, $align:expr $(; $($($f:ident).+ => $off:expr),* $(,)?)?) => {
        const _: () = {
            assert!(::core::mem::size_of::<$t>() == $size, concat!("size of ", stringify!($t)));
            assert!(::core::mem::align_of::<$t>() == $align, concat!("align of ", stringify!($t)));
            $($(
                assert!(
                    ::core::mem::offset_of!($t, $($f).+) == $off,
                    concat!("offset of ", stringify!($t), ".", stringify!($($f).+))
                );
            )*)?
        };
    };
}
pub(crate) use assert_layout;

/// Declares a `#[repr(C)]` struct and the ones that begin with its fields,
/// the way C declares an extended struct (`ibv_cq_ex`) that starts with the
/// fields of the plain one (`ibv_cq`). The fields stay flat, each under its
/// C name; each extended struct gets `base` and `from_base` to convert.
///
/// `prefixed_structs! { pub struct a { fields, } pub struct a_ex: a { own fields } ... }`
macro_rules! prefixed_structs {
    (
        $(#[$m:meta])* pub struct $base:ident $fields:tt
        $($(#[$xm:meta])* pub struct $ext:ident: $of:ident { $($own:tt)* })+
    ) => {
        $crate::prefixed_structs!(@base $(#[$m])* $base $fields);
        $($crate::prefixed_structs!(@ext $(#[$xm])* $ext $of $fields { $($own)* });)+
    };
    (@base $(#[$m:meta])* $name:ident { $($(#[$fm:meta])* pub $f:ident: $t:ty,)+ }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)+
        }
    };
    (
        @ext $(#[$m:meta])* $name:ident $base:ident
        { $($(#[$fm:meta])* pub $f:ident: $t:ty,)+ } { $($own:tt)* }
    ) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug)]
        pub struct $name {
            $($(#[$fm])* pub $f: $t,)+
            $($own)*
        }

        impl $name {
            #[doc = concat!("The fields it begins with, as a [`", stringify!($base), "`].")]
            pub fn base(&self) -> $base {
                $base { $($f: self.$f,)+ }
            }

            /// A zeroed struct that begins with the fields of `b`.
            pub fn from_base(b: &$base) -> Self {
                let mut s = <Self as $crate::Zeroable>::zeroed();
                $(s.$f = b.$f;)+
                s
            }
        }
    };
}
pub(crate) use prefixed_structs;

/// Declares an opaque C type that is only ever used behind a pointer.
macro_rules! opaque_type {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            _opaque: [u8; 0],
            _not_send_sync_unpin: ::core::marker::PhantomData<(*mut u8, ::core::marker::PhantomPinned)>,
        }
        impl ::core::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(concat!(stringify!($name), " { .. }"))
            }
        }
    };
}
pub(crate) use opaque_type;

/// `Debug` for a union: prints only its name (which member is live is not known).
macro_rules! union_debug {
    ($($name:ident),* $(,)?) => {
        $(impl ::core::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(concat!(stringify!($name), " { union }"))
            }
        })*
    };
}
pub(crate) use union_debug;

/// Types for which the all-zero bit pattern is a valid value.
///
/// # Safety
///
/// Implement only for `#[repr(C)]` plain data whose fields are integers, arrays,
/// raw pointers, `Option<fn>` and other `Zeroable` types (this is what `memset(0)`
/// on the C side produces, and what C code expects of a fresh struct).
pub unsafe trait Zeroable: Sized {
    /// The all-zero value (`memset(&x, 0, sizeof x)` in C).
    fn zeroed() -> Self {
        // SAFETY: the trait's contract says the all-zero pattern is a valid `Self`.
        unsafe { core::mem::zeroed() }
    }
}

macro_rules! zeroable {
    ($($t:ty),* $(,)?) => { $(
        // SAFETY: `$t` is a #[repr(C)] mirror made only of integers, arrays, raw
        // pointers, `Option<extern fn>` and other zeroable mirrors.
        unsafe impl $crate::Zeroable for $t {}
    )* };
}
pub(crate) use zeroable;

/// glibc x86_64 `pthread_mutex_t`: 40 bytes, 8-aligned, opaque.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct pthread_mutex_t {
    /// The raw bytes; `PTHREAD_MUTEX_INITIALIZER` is all zero.
    pub bytes: [u8; 40],
}

/// glibc x86_64 `pthread_cond_t`: 48 bytes, 8-aligned, opaque.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct pthread_cond_t {
    /// The raw bytes; `PTHREAD_COND_INITIALIZER` is all zero.
    pub bytes: [u8; 48],
}

impl fmt::Debug for pthread_mutex_t {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("pthread_mutex_t { .. }")
    }
}
impl fmt::Debug for pthread_cond_t {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("pthread_cond_t { .. }")
    }
}
zeroable!(pthread_mutex_t, pthread_cond_t);
assert_layout!(pthread_mutex_t, 40, 8);
assert_layout!(pthread_cond_t, 48, 8);
const _: () = {
    assert!(size_of::<pthread_mutex_t>() == size_of::<libc::pthread_mutex_t>());
    assert!(align_of::<pthread_mutex_t>() == align_of::<libc::pthread_mutex_t>());
    assert!(size_of::<pthread_cond_t>() == size_of::<libc::pthread_cond_t>());
    assert!(align_of::<pthread_cond_t>() == align_of::<libc::pthread_cond_t>());
};
