//! # librdmalib.so: the C API of rdmalib
//!
//! The functions of the seed document ("RDMA lib": `rdma_setup_server`,
//! `rdma_wait_for_client`, `rdma_setup_client`, `rdma_connect_server`,
//! `rdma_close`, `rdma_send`, `rdma_recv`, `rdma_write`, `rdma_read`,
//! `rdma_notify_write`, `rdma_notify_read`) plus two extensions
//! (`rdmalib_wait_notify`, `rdmalib_last_error`), over the Rust crate
//! `rdmalib`. The contract of each is in `include/rdmalib.h`.
//!
//! - **Context.** `struct rdma_context` ([`RdmaContext`]) keeps the seed's
//!   fields. The handle fields (`ec`, `listener`, `conn`, `pd`, `mr`, `cq`,
//!   `qp`, `event`) point to this library's own Rust objects (event channel,
//!   CM ids, PD, MR, CQ, QP, CM event), not to rdma-core structs: they are
//!   opaque, non-NULL exactly while the object exists. `buffer` points to the
//!   registered buffer itself. Everything lives in a heap state behind the
//!   extension field `lib`, so the addresses stay put until `rdma_close`.
//! - **Errors.** Every function returns 0 or -1 with `errno` set from
//!   [`rdmalib_rs::Error::errno`] (or the context's own misuse codes:
//!   `ENOTCONN`, `EBADF`, `EBUSY`, `EISCONN`, `EINVAL`); the message is kept
//!   per thread for `rdmalib_last_error`.
//! - **No panic crosses the ABI.** Each body runs under `catch_unwind`; a
//!   panic becomes -1 with `EIO` (and Rust 2024 would abort rather than
//!   unwind into C if one ever escaped).
//! - **Symbols.** None of the names is exported by rdma-core 44's
//!   libibverbs/librdmacm (checked against their export lists); the seed's
//!   `rdma_` names are kept, the extensions take the `rdmalib_` prefix.
//!
//! Message size: each side receives messages of up to
//! `min(buffer_size, 1 MiB)` bytes (8 receive slots of that size).

use rdmalib_rs::softrdma::cm::{AddrInfoHints, CmId, getaddrinfo};
use rdmalib_rs::softrdma::verbs::{Context, Cq, devices};
use rdmalib_rs::{Buffer, Client, Config, Connection, Error, Mode, NotifyKind, Server};
use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::net::{IpAddr, SocketAddr};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

/// `struct rdma_context` of `rdmalib.h`, field for field.
#[repr(C)]
#[derive(Debug)]
pub struct RdmaContext {
    /// Event channel (opaque).
    pub ec: *mut c_void,
    /// Listener id, server only (opaque).
    pub listener: *mut c_void,
    /// Connection id (opaque).
    pub conn: *mut c_void,
    /// Protection domain (opaque).
    pub pd: *mut c_void,
    /// Memory region of the buffer (opaque).
    pub mr: *mut c_void,
    /// Completion queue (opaque).
    pub cq: *mut c_void,
    /// Queue pair (opaque).
    pub qp: *mut c_void,
    /// The registered buffer.
    pub buffer: *mut c_char,
    /// In: bytes to register (0: 4096); out: bytes registered.
    pub buffer_size: usize,
    /// The last CM event (opaque).
    pub event: *mut c_void,
    /// 0: polling, 1: event-based.
    pub cq_notify: c_int,
    /// In: bound on every wait in ms (0: none).
    pub timeout_ms: c_int,
    /// Out: the port a server listens on.
    pub port: c_int,
    /// Out: the size of the peer's buffer.
    pub remote_size: usize,
    /// The library's state.
    pub lib: *mut c_void,
}

/// What `ctx->lib` points to.
struct State {
    server: Option<Server>,
    client: Option<Client>,
    conn: Option<Connection>,
}

/// Buffer size when the context asks for 0.
const DEFAULT_BUFFER: usize = 4096;
/// Largest message a side receives.
const MAX_MESSAGE: usize = 1 << 20;
/// Receive slots per connection.
const RECV_DEPTH: usize = 8;
/// `rdmalib.h`'s notification kinds.
const NOTIFY_WRITE: c_int = 1;
const NOTIFY_READ: c_int = 2;

/// A failure as C sees it.
#[derive(Debug)]
struct Fail {
    errno: c_int,
    msg: String,
}

impl Fail {
    fn new(errno: c_int, msg: impl Into<String>) -> Fail {
        Fail {
            errno,
            msg: msg.into(),
        }
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::new(e.errno(), e.to_string())
    }
}

type CResult = Result<(), Fail>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() = e }
}

/// Runs an export's body: 0 on success, -1 with errno and the thread's
/// message on failure or panic.
fn run(f: impl FnOnce() -> CResult) -> c_int {
    let fail = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return 0,
        Ok(Err(fail)) => fail,
        Err(_) => Fail::new(libc::EIO, "internal error in rdmalib (a panic was caught)"),
    };
    let msg = CString::new(fail.msg.replace('\0', " ")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|l| *l.borrow_mut() = msg);
    // Last: nothing after this may change errno.
    set_errno(fail.errno);
    -1
}

/// The context behind a C pointer.
///
/// # Safety
///
/// `ctx` is NULL or points to a `struct rdma_context` the caller lets us
/// use exclusively for the call.
unsafe fn context<'a>(ctx: *mut RdmaContext) -> Result<&'a mut RdmaContext, Fail> {
    // SAFETY: the caller's contract.
    unsafe { ctx.as_mut() }.ok_or_else(|| Fail::new(libc::EINVAL, "NULL context"))
}

/// The state of a set-up context.
fn state(ctx: &mut RdmaContext) -> Option<&mut State> {
    // SAFETY: `lib` is NULL or the `Box<State>` pointer `install` stored, which
    // stays valid until `rdma_close` frees it and resets `lib` (the header
    // tells users not to touch the field); the context is borrowed mutably,
    // so nobody else uses the state meanwhile.
    unsafe { ctx.lib.cast::<State>().as_mut() }
}

fn install(ctx: &mut RdmaContext, st: State) {
    ctx.lib = Box::into_raw(Box::new(st)).cast();
    refresh(ctx);
}

fn not_set_up(ctx: &RdmaContext) -> CResult {
    if ctx.lib.is_null() {
        Ok(())
    } else {
        Err(Fail::new(
            libc::EBUSY,
            "the context is set up already (rdma_close it first)",
        ))
    }
}

fn timeout(ctx: &RdmaContext) -> Option<Duration> {
    (ctx.timeout_ms > 0).then(|| Duration::from_millis(ctx.timeout_ms as u64))
}

fn config(ctx: &RdmaContext) -> Result<Config, Fail> {
    let mode = match ctx.cq_notify {
        0 => Mode::Polling,
        1 => Mode::Event,
        n => {
            return Err(Fail::new(
                libc::EINVAL,
                format!("cq_notify is {n}: 0 (polling) or 1 (events)"),
            ));
        }
    };
    if ctx.timeout_ms < 0 {
        return Err(Fail::new(libc::EINVAL, "timeout_ms is negative"));
    }
    let size = if ctx.buffer_size == 0 {
        DEFAULT_BUFFER
    } else {
        ctx.buffer_size
    };
    Ok(Config {
        buffer_size: size,
        max_message: size.clamp(rdmalib_rs::wire::NOTIFY_LEN, MAX_MESSAGE),
        recv_depth: RECV_DEPTH,
        mode,
        timeout: timeout(ctx),
    })
}

fn handle<T>(r: &T) -> *mut c_void {
    std::ptr::from_ref(r).cast_mut().cast()
}

fn opt_handle<T>(r: Option<&T>) -> *mut c_void {
    r.map_or(std::ptr::null_mut(), handle)
}

/// Sets every output field from the state (all NULL/0 without one).
fn refresh(ctx: &mut RdmaContext) {
    let mut f = RdmaContext {
        ec: std::ptr::null_mut(),
        listener: std::ptr::null_mut(),
        conn: std::ptr::null_mut(),
        pd: std::ptr::null_mut(),
        mr: std::ptr::null_mut(),
        cq: std::ptr::null_mut(),
        qp: std::ptr::null_mut(),
        buffer: std::ptr::null_mut(),
        buffer_size: ctx.buffer_size,
        event: std::ptr::null_mut(),
        cq_notify: ctx.cq_notify,
        timeout_ms: ctx.timeout_ms,
        port: 0,
        remote_size: 0,
        lib: ctx.lib,
    };
    if let Some(st) = state(ctx) {
        if let Some(s) = &st.server {
            f.ec = handle(s.channel());
            f.listener = handle(s.listener());
            f.port = c_int::from(s.local_addr().port());
            f.event = opt_handle(s.last_event());
        }
        if let Some(c) = &st.client {
            let (id, ch, cq, _) = c.link();
            f.ec = handle(ch);
            set_link(&mut f, id, cq);
            set_buffer(&mut f, c.buffer());
            f.event = opt_handle(c.last_event());
        }
        if let Some(c) = &st.conn {
            if let Some((id, ch, cq, _)) = c.link() {
                if st.server.is_none() {
                    f.ec = handle(ch);
                }
                set_link(&mut f, id, cq);
            }
            set_buffer(&mut f, c.buffer());
            f.event = handle(c.established_event());
            f.remote_size = c.remote().len as usize;
        }
    }
    *ctx = f;
}

/// The output fields of a connection's CM id (with its PD and QP) and CQ.
fn set_link(f: &mut RdmaContext, id: &CmId, cq: &Cq) {
    f.conn = handle(id);
    f.pd = opt_handle(id.pd());
    f.qp = opt_handle(id.qp());
    f.cq = handle(cq);
}

/// The output fields of a registered buffer.
fn set_buffer(f: &mut RdmaContext, b: &Buffer) {
    f.mr = handle(b.mr());
    f.buffer = b.as_ptr().cast();
    f.buffer_size = b.len();
}

/// The connection of a connected context, with the context's timeout.
fn connection(ctx: &mut RdmaContext) -> Result<&mut Connection, Fail> {
    let t = timeout(ctx);
    let conn = state(ctx).and_then(|st| st.conn.as_mut()).ok_or_else(|| {
        Fail::new(
            libc::ENOTCONN,
            "not connected (rdma_wait_for_client or rdma_connect_server first)",
        )
    })?;
    conn.set_timeout(t);
    Ok(conn)
}

/// A C string argument.
///
/// # Safety
///
/// `s` is NULL or a NUL-terminated string valid for the call.
unsafe fn c_str<'a>(s: *const c_char) -> Result<Option<&'a str>, Fail> {
    if s.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let s = unsafe { CStr::from_ptr(s) };
    s.to_str()
        .map(Some)
        .map_err(|_| Fail::new(libc::EINVAL, "a string argument is not UTF-8"))
}

fn port_arg(port: c_int, allow_zero: bool) -> Result<u16, Fail> {
    match u16::try_from(port) {
        Ok(p) if p != 0 || allow_zero => Ok(p),
        _ => Err(Fail::new(libc::EINVAL, format!("bad port {port}"))),
    }
}

/// Stores `v` at `out` unless it is NULL.
///
/// # Safety
///
/// `out` is NULL or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, v: T) {
    // SAFETY: the caller's contract.
    if let Some(o) = unsafe { out.as_mut() } {
        *o = v;
    }
}

// ---- server ----

/// See `rdmalib.h`.
///
/// # Safety
///
/// `sctx` is NULL or a valid, exclusively used `struct rdma_context`;
/// `ib_dev` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_setup_server(
    sctx: *mut RdmaContext,
    port: c_int,
    ib_dev: *const c_char,
) -> c_int {
    run(|| {
        // SAFETY: forwarded contract.
        let ctx = unsafe { context(sctx) }?;
        not_set_up(ctx)?;
        let port = port_arg(port, true)?;
        let cfg = config(ctx)?;
        // SAFETY: forwarded contract.
        let dev = unsafe { c_str(ib_dev) }?.unwrap_or("");
        let server = if dev.is_empty() || devices().contains(&dev) {
            let dev = Context::open().map_err(Error::from)?;
            let any = match dev.local_addr().ip() {
                IpAddr::V4(_) => IpAddr::from([0u8; 4]),
                IpAddr::V6(_) => IpAddr::from([0u16; 8]),
            };
            Server::bind_on(&dev, SocketAddr::new(any, port), cfg)?
        } else if let Ok(ip) = dev.parse::<IpAddr>() {
            Server::bind(SocketAddr::new(ip, port), cfg)?
        } else {
            return Err(Fail::new(
                libc::ENODEV,
                format!(
                    "no device {dev:?}: use NULL, {:?} or an IP address of the device",
                    devices()
                ),
            ));
        };
        install(
            ctx,
            State {
                server: Some(server),
                client: None,
                conn: None,
            },
        );
        Ok(())
    })
}

/// See `rdmalib.h`.
///
/// # Safety
///
/// `sctx` is NULL or a valid, exclusively used `struct rdma_context`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_wait_for_client(sctx: *mut RdmaContext) -> c_int {
    run(|| {
        // SAFETY: forwarded contract.
        let ctx = unsafe { context(sctx) }?;
        let connected = "a client is connected already";
        establish(ctx, "rdma_setup_server", connected, |st, t| {
            let server = st
                .server
                .as_mut()
                .ok_or_else(|| Fail::new(libc::EINVAL, "not a server context"))?;
            server.set_timeout(t);
            Ok(server.accept())
        })
    })
}

/// What `rdma_wait_for_client` and `rdma_connect_server` share: `ctx` must
/// be set up (by `setup`, which the error names) and not connected yet
/// (else EISCONN with `connected`); `connect` gets the state and the
/// context's timeout, and the connection it makes is kept.
fn establish(
    ctx: &mut RdmaContext,
    setup: &str,
    connected: &str,
    connect: impl FnOnce(&mut State, Option<Duration>) -> Result<Result<Connection, Error>, Fail>,
) -> CResult {
    let t = timeout(ctx);
    let st = state(ctx)
        .ok_or_else(|| Fail::new(libc::ENOTCONN, format!("not set up ({setup} first)")))?;
    if st.conn.is_some() {
        return Err(Fail::new(libc::EISCONN, connected));
    }
    let r = connect(st, t)?.map(|c| st.conn = Some(c));
    refresh(ctx);
    Ok(r?)
}

// ---- client ----

fn resolve(server: &str, port: u16) -> Result<SocketAddr, Fail> {
    if let Ok(ip) = server.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let ai = getaddrinfo(
        Some(server),
        Some(&port.to_string()),
        &AddrInfoHints::default(),
    )
    .map_err(|e| Fail::from(Error::from(e)))?;
    ai.dst
        .ok_or_else(|| Fail::new(libc::EADDRNOTAVAIL, format!("cannot resolve {server}")))
}

/// See `rdmalib.h`.
///
/// # Safety
///
/// `cctx` is NULL or a valid, exclusively used `struct rdma_context`;
/// `server` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_setup_client(
    cctx: *mut RdmaContext,
    server: *const c_char,
    port: c_int,
) -> c_int {
    run(|| {
        // SAFETY: forwarded contract.
        let ctx = unsafe { context(cctx) }?;
        not_set_up(ctx)?;
        // SAFETY: forwarded contract.
        let server = unsafe { c_str(server) }?
            .filter(|s| !s.is_empty())
            .ok_or_else(|| Fail::new(libc::EINVAL, "no server address"))?;
        let addr = resolve(server, port_arg(port, false)?)?;
        let client = Client::new(addr, config(ctx)?)?;
        install(
            ctx,
            State {
                server: None,
                client: Some(client),
                conn: None,
            },
        );
        Ok(())
    })
}

/// See `rdmalib.h`.
///
/// # Safety
///
/// `cctx` is NULL or a valid, exclusively used `struct rdma_context`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_connect_server(cctx: *mut RdmaContext) -> c_int {
    run(|| {
        // SAFETY: forwarded contract.
        let ctx = unsafe { context(cctx) }?;
        establish(ctx, "rdma_setup_client", "connected already", |st, t| {
            let mut client = st.client.take().ok_or_else(|| {
                Fail::new(
                    libc::EINVAL,
                    "not a client context, or a connect failed before (rdma_close it)",
                )
            })?;
            client.set_timeout(t);
            Ok(client.connect())
        })
    })
}

// ---- common ----

/// See `rdmalib.h`.
///
/// # Safety
///
/// `ctx` is NULL or a valid, exclusively used `struct rdma_context`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_close(ctx: *mut RdmaContext) -> c_int {
    run(|| {
        // SAFETY: forwarded contract.
        let ctx = unsafe { context(ctx) }?;
        if ctx.lib.is_null() {
            return Err(Fail::new(
                libc::EBADF,
                "the context is closed already, or was never set up",
            ));
        }
        // SAFETY: a non-NULL `lib` is the pointer `install` made with
        // `Box::into_raw`, and it is reset below so it is freed only once.
        let mut st = unsafe { Box::from_raw(ctx.lib.cast::<State>()) };
        ctx.lib = std::ptr::null_mut();
        let closed = match st.conn.as_mut() {
            Some(c) if c.is_open() => c.close(),
            _ => Ok(()),
        };
        // Connection first, then the listener (and its channel).
        st.conn = None;
        st.client = None;
        st.server = None;
        drop(st);
        refresh(ctx);
        Ok(closed?)
    })
}

/// Runs an export's body on the connection of a connected context: 0 or
/// -1 as [`run`] says.
///
/// # Safety
///
/// `ctx` is NULL or a valid, exclusively used `struct rdma_context`.
unsafe fn on_connection(
    ctx: *mut RdmaContext,
    body: impl FnOnce(&mut Connection) -> CResult,
) -> c_int {
    run(|| {
        // SAFETY: forwarded contract.
        let ctx = unsafe { context(ctx) }?;
        body(connection(ctx)?)
    })
}

/// Defines exports whose body is one call on the connection (`$c`) of a
/// connected context, each `fn name(args) => |c| call;`.
macro_rules! connection_exports {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) => |$c:ident| $call:expr;)*) => {$(
        /// See `rdmalib.h`.
        ///
        /// # Safety
        ///
        /// `ctx` is NULL or a valid, exclusively used `struct rdma_context`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(ctx: *mut RdmaContext, $($arg: $ty),*) -> c_int {
            // SAFETY: forwarded contract.
            unsafe { on_connection(ctx, |$c| Ok($call?)) }
        }
    )*};
}

connection_exports! {
    fn rdma_send(offset: usize, len: usize) => |c| c.send_from_buffer(offset, len);
    fn rdma_write(local_offset: usize, remote_offset: usize, len: usize) =>
        |c| c.write(local_offset, remote_offset as u64, len);
    fn rdma_read(local_offset: usize, remote_offset: usize, len: usize) =>
        |c| c.read(local_offset, remote_offset as u64, len);
    fn rdma_notify_write(remote_offset: usize, len: usize) =>
        |c| c.notify_write(remote_offset as u64, len as u64);
    fn rdma_notify_read(remote_offset: usize, len: usize) =>
        |c| c.notify_read(remote_offset as u64, len as u64);
}

/// See `rdmalib.h`.
///
/// # Safety
///
/// `ctx` is NULL or a valid, exclusively used `struct rdma_context`; `len`
/// is NULL or valid for writing a `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdma_recv(ctx: *mut RdmaContext, offset: usize, len: *mut usize) -> c_int {
    let body = |c: &mut Connection| {
        let n = c.recv_to_buffer(offset)?;
        // SAFETY: forwarded contract.
        unsafe { put(len, n) };
        Ok(())
    };
    // SAFETY: forwarded contract.
    unsafe { on_connection(ctx, body) }
}

/// See `rdmalib.h`.
///
/// # Safety
///
/// `ctx` is NULL or a valid, exclusively used `struct rdma_context`;
/// `kind`, `offset` and `len` are each NULL or valid for one write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rdmalib_wait_notify(
    ctx: *mut RdmaContext,
    kind: *mut c_int,
    offset: *mut usize,
    len: *mut usize,
) -> c_int {
    let body = |c: &mut Connection| {
        let n = c.wait_notification()?;
        let k = match n.kind {
            NotifyKind::Write => NOTIFY_WRITE,
            NotifyKind::Read => NOTIFY_READ,
        };
        // Ranges of our own buffer, which fits in memory: the casts are exact.
        // SAFETY: forwarded contract.
        unsafe {
            put(kind, k);
            put(offset, n.offset as usize);
            put(len, n.len as usize);
        }
        Ok(())
    };
    // SAFETY: forwarded contract.
    unsafe { on_connection(ctx, body) }
}

/// See `rdmalib.h`.
#[unsafe(no_mangle)]
pub extern "C" fn rdmalib_last_error() -> *const c_char {
    static EMPTY: &CStr = c"";
    catch_unwind(|| {
        LAST_ERROR
            .try_with(|l| l.borrow().as_ptr())
            .unwrap_or(EMPTY.as_ptr())
    })
    .unwrap_or(EMPTY.as_ptr())
}

#[cfg(test)]
mod tests;
