//! Loading the system's `libibverbs.so.1` and `librdmacm.so.1` at run time:
//! `dlopen`, one typed function table per library, filled once with `dlsym`
//! and never unloaded (so `&'static` references to the tables are sound).
//!
//! Only the non-inline entry points are here. The data path (`ibv_post_send`,
//! `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`)
//! is `static inline` in `verbs.h` and goes through the context's ops table;
//! see `sys.rs`.

use core::ffi::{c_char, c_int, c_uint, c_void};
use softrdma_ffi as f;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Declares a table of C functions whose field names are the symbol names,
/// and its loader.
macro_rules! fn_table {
    ($(#[$m:meta])* $name:ident { $($sym:ident : fn($($arg:ty),* $(,)?) -> $ret:ty;)* }) => {
        $(#[$m])*
        #[allow(non_snake_case)]
        pub(crate) struct $name {
            $(pub(crate) $sym: unsafe extern "C" fn($($arg),*) -> $ret,)*
        }

        impl $name {
            /// Resolves every symbol of the table.
            ///
            /// # Safety
            ///
            /// `h` is a live `dlopen` handle of a library that exports these
            /// symbols with exactly these C signatures (rdma-core's ABI).
            unsafe fn load(h: *mut c_void) -> Result<$name, String> {
                Ok($name {
                    $($sym: {
                        let p = sym(h, concat!(stringify!($sym), "\0"))?;
                        // SAFETY: `p` is the non-NULL address of this C
                        // function, whose signature the caller vouches for; a
                        // data pointer and a function pointer have the same
                        // size and representation on every platform
                        // rdma-core supports.
                        unsafe {
                            core::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(p)
                        }
                    },)*
                })
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(stringify!($name))
            }
        }
    };
}

fn_table! {
    /// The libibverbs entry points softrdma uses.
    VerbsFns {
        ibv_get_device_list: fn(*mut c_int) -> *mut *mut f::ibv_device;
        ibv_free_device_list: fn(*mut *mut f::ibv_device) -> ();
        ibv_get_device_name: fn(*mut f::ibv_device) -> *const c_char;
        ibv_open_device: fn(*mut f::ibv_device) -> *mut f::ibv_context;
        ibv_close_device: fn(*mut f::ibv_context) -> c_int;
        ibv_query_device: fn(*mut f::ibv_context, *mut f::ibv_device_attr) -> c_int;
        ibv_query_port: fn(*mut f::ibv_context, u8, *mut f::_compat_ibv_port_attr) -> c_int;
        ibv_query_gid: fn(*mut f::ibv_context, u8, c_int, *mut f::ibv_gid) -> c_int;
        ibv_query_pkey: fn(*mut f::ibv_context, u8, c_int, *mut u16) -> c_int;
        ibv_alloc_pd: fn(*mut f::ibv_context) -> *mut f::ibv_pd;
        ibv_dealloc_pd: fn(*mut f::ibv_pd) -> c_int;
        ibv_reg_mr: fn(*mut f::ibv_pd, *mut c_void, usize, c_int) -> *mut f::ibv_mr;
        ibv_dereg_mr: fn(*mut f::ibv_mr) -> c_int;
        ibv_create_comp_channel: fn(*mut f::ibv_context) -> *mut f::ibv_comp_channel;
        ibv_destroy_comp_channel: fn(*mut f::ibv_comp_channel) -> c_int;
        ibv_create_cq: fn(*mut f::ibv_context, c_int, *mut c_void, *mut f::ibv_comp_channel, c_int)
            -> *mut f::ibv_cq;
        ibv_destroy_cq: fn(*mut f::ibv_cq) -> c_int;
        ibv_get_cq_event: fn(*mut f::ibv_comp_channel, *mut *mut f::ibv_cq, *mut *mut c_void)
            -> c_int;
        ibv_ack_cq_events: fn(*mut f::ibv_cq, c_uint) -> ();
        ibv_create_qp: fn(*mut f::ibv_pd, *mut f::ibv_qp_init_attr) -> *mut f::ibv_qp;
        ibv_modify_qp: fn(*mut f::ibv_qp, *mut f::ibv_qp_attr, c_int) -> c_int;
        ibv_query_qp: fn(*mut f::ibv_qp, *mut f::ibv_qp_attr, c_int, *mut f::ibv_qp_init_attr)
            -> c_int;
        ibv_destroy_qp: fn(*mut f::ibv_qp) -> c_int;
        ibv_create_srq: fn(*mut f::ibv_pd, *mut f::ibv_srq_init_attr) -> *mut f::ibv_srq;
        ibv_modify_srq: fn(*mut f::ibv_srq, *mut f::ibv_srq_attr, c_int) -> c_int;
        ibv_destroy_srq: fn(*mut f::ibv_srq) -> c_int;
        ibv_create_ah: fn(*mut f::ibv_pd, *mut f::ibv_ah_attr) -> *mut f::ibv_ah;
        ibv_destroy_ah: fn(*mut f::ibv_ah) -> c_int;
    }
}

fn_table! {
    /// The librdmacm entry points softrdma uses.
    CmFns {
        rdma_get_devices: fn(*mut c_int) -> *mut *mut f::ibv_context;
        rdma_free_devices: fn(*mut *mut f::ibv_context) -> ();
        rdma_create_event_channel: fn() -> *mut f::rdma_event_channel;
        rdma_destroy_event_channel: fn(*mut f::rdma_event_channel) -> ();
        rdma_create_id: fn(*mut f::rdma_event_channel, *mut *mut f::rdma_cm_id, *mut c_void,
            f::rdma_port_space) -> c_int;
        rdma_destroy_id: fn(*mut f::rdma_cm_id) -> c_int;
        rdma_bind_addr: fn(*mut f::rdma_cm_id, *mut libc::sockaddr) -> c_int;
        rdma_resolve_addr: fn(*mut f::rdma_cm_id, *mut libc::sockaddr, *mut libc::sockaddr, c_int)
            -> c_int;
        rdma_resolve_route: fn(*mut f::rdma_cm_id, c_int) -> c_int;
        rdma_listen: fn(*mut f::rdma_cm_id, c_int) -> c_int;
        rdma_accept: fn(*mut f::rdma_cm_id, *mut f::rdma_conn_param) -> c_int;
        rdma_reject: fn(*mut f::rdma_cm_id, *const c_void, u8) -> c_int;
        rdma_connect: fn(*mut f::rdma_cm_id, *mut f::rdma_conn_param) -> c_int;
        rdma_establish: fn(*mut f::rdma_cm_id) -> c_int;
        rdma_disconnect: fn(*mut f::rdma_cm_id) -> c_int;
        rdma_get_cm_event: fn(*mut f::rdma_event_channel, *mut *mut f::rdma_cm_event) -> c_int;
        rdma_ack_cm_event: fn(*mut f::rdma_cm_event) -> c_int;
        rdma_create_qp: fn(*mut f::rdma_cm_id, *mut f::ibv_pd, *mut f::ibv_qp_init_attr) -> c_int;
        rdma_init_qp_attr: fn(*mut f::rdma_cm_id, *mut f::ibv_qp_attr, *mut c_int) -> c_int;
        rdma_join_multicast: fn(*mut f::rdma_cm_id, *mut libc::sockaddr, *mut c_void) -> c_int;
        rdma_leave_multicast: fn(*mut f::rdma_cm_id, *mut libc::sockaddr) -> c_int;
        rdma_migrate_id: fn(*mut f::rdma_cm_id, *mut f::rdma_event_channel) -> c_int;
        rdma_set_option: fn(*mut f::rdma_cm_id, c_int, c_int, *mut c_void, usize) -> c_int;
    }
}

/// `dlsym`, with the symbol's name in the error.
fn sym(h: *mut c_void, name_nul: &'static str) -> Result<*mut c_void, String> {
    let name = CStr::from_bytes_with_nul(name_nul.as_bytes())
        .map_err(|_| format!("bad symbol name {name_nul:?}"))?;
    // SAFETY: `h` is a live handle (callers' contract) and `name` a
    // NUL-terminated string; dlsym only reads them.
    let p = unsafe { libc::dlsym(h, name.as_ptr()) };
    if p.is_null() {
        Err(format!(
            "symbol {} missing: {}",
            name.to_string_lossy(),
            dl_error()
        ))
    } else {
        Ok(p)
    }
}

/// The last `dlerror()` message.
fn dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the
    // next dl* call on this thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-NULL, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// `dlopen(name, RTLD_NOW | RTLD_NODELETE)`.
fn open(name: &Path) -> Result<*mut c_void, String> {
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(name.as_os_str().as_bytes())
        .map_err(|_| format!("{} contains a NUL byte", name.display()))?;
    // SAFETY: a NUL-terminated path; the library's initializers run, which is
    // what loading rdma-core means. RTLD_NODELETE keeps it mapped for ever,
    // so the function tables stay valid.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NODELETE) };
    if h.is_null() { Err(dl_error()) } else { Ok(h) }
}

/// The file a loaded symbol lives in (`dladdr`), made absolute (symbolic
/// links are kept: `libibverbs.so.1` is what was asked for).
fn path_of(addr: *const c_void, fallback: &Path) -> PathBuf {
    let mut info = libc::Dl_info {
        dli_fname: core::ptr::null(),
        dli_fbase: core::ptr::null_mut(),
        dli_sname: core::ptr::null(),
        dli_saddr: core::ptr::null_mut(),
    };
    // SAFETY: `info` is a valid out-parameter; `addr` is only compared
    // against the loaded objects' ranges.
    let ok = unsafe { libc::dladdr(addr, &mut info) } != 0;
    let p = if ok && !info.dli_fname.is_null() {
        // SAFETY: dladdr set it to the object's NUL-terminated file name,
        // valid while the object is loaded (for ever: RTLD_NODELETE).
        PathBuf::from(
            unsafe { CStr::from_ptr(info.dli_fname) }
                .to_string_lossy()
                .into_owned(),
        )
    } else {
        fallback.to_path_buf()
    };
    std::path::absolute(&p).unwrap_or(p)
}

/// libibverbs, loaded.
#[derive(Debug)]
pub(crate) struct Verbs {
    /// The file it was loaded from.
    pub(crate) path: PathBuf,
    /// It is softrdma's own drop-in (`target/compat`), not a hardware stack.
    pub(crate) softrdma_dropin: bool,
    /// Its entry points.
    pub(crate) f: VerbsFns,
}

/// librdmacm, loaded.
#[derive(Debug)]
pub(crate) struct Cm {
    /// Its entry points.
    pub(crate) f: CmFns,
}

/// Both libraries; librdmacm is optional (verbs work without it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Libs {
    pub(crate) verbs: &'static Verbs,
    pub(crate) cm: Result<&'static Cm, &'static str>,
}

/// The libraries of this process once loaded, and the directory asked for
/// (`None`: the dynamic linker's search path).
static LOADED: Mutex<Option<(Option<PathBuf>, Libs)>> = Mutex::new(None);

/// Loads libibverbs (and, if it can, librdmacm) once per process, from `dir`
/// or from the dynamic linker's search path (`LD_LIBRARY_PATH`, the system).
/// Once loaded, asking for another directory is an error (a process holds
/// one rdma-core); a failed load may be retried.
pub(crate) fn libs(dir: Option<&Path>) -> Result<Libs, String> {
    let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((first, libs)) = &*loaded {
        if dir.is_some() && first.as_deref() != dir {
            return Err(format!(
                "rdma-core is already loaded from {}; a process loads it once",
                libs.verbs.path.display()
            ));
        }
        return Ok(*libs);
    }
    let libs = load(dir)?;
    *loaded = Some((dir.map(Path::to_path_buf), libs));
    Ok(libs)
}

fn load(dir: Option<&Path>) -> Result<Libs, String> {
    let name = |f: &str| dir.map_or_else(|| PathBuf::from(f), |d| d.join(f));
    let vpath = name("libibverbs.so.1");
    let h = open(&vpath).map_err(|e| format!("cannot load {}: {e}", vpath.display()))?;
    // SAFETY: `h` is libibverbs.so.1, whose ABI these signatures mirror.
    let vf = unsafe { VerbsFns::load(h) }
        .map_err(|e| format!("{} is not a usable libibverbs: {e}", vpath.display()))?;
    let softrdma_dropin = sym(h, "__softrdma_rdma_get_devices\0").is_ok();
    let verbs: &'static Verbs = Box::leak(Box::new(Verbs {
        path: path_of(vf.ibv_get_device_list as *const c_void, &vpath),
        softrdma_dropin,
        f: vf,
    }));
    let cpath = name("librdmacm.so.1");
    let cm = open(&cpath)
        .and_then(|h| {
            // SAFETY: `h` is librdmacm.so.1, whose ABI these signatures mirror.
            unsafe { CmFns::load(h) }
        })
        .map(|cf| -> &'static Cm { Box::leak(Box::new(Cm { f: cf })) })
        .map_err(|e| -> &'static str {
            Box::leak(format!("cannot load {}: {e}", cpath.display()).into_boxed_str())
        });
    Ok(Libs { verbs, cm })
}
