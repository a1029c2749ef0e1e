//! The exports called directly, in one process on its one device: misuse,
//! arguments, a whole exchange in both modes, the panic barrier, and the
//! struct layout as C compiles `rdmalib.h`.

use super::*;
use std::ffi::CStr;
use std::ptr::{null, null_mut};

fn errno() -> c_int {
    // SAFETY: `__errno_location` returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() }
}

fn zeroed() -> RdmaContext {
    RdmaContext {
        ec: null_mut(),
        listener: null_mut(),
        conn: null_mut(),
        pd: null_mut(),
        mr: null_mut(),
        cq: null_mut(),
        qp: null_mut(),
        buffer: null_mut(),
        buffer_size: 0,
        event: null_mut(),
        cq_notify: 0,
        timeout_ms: 0,
        port: 0,
        remote_size: 0,
        lib: null_mut(),
    }
}

fn last_error() -> String {
    // SAFETY: the library returns a NUL-terminated string valid until the
    // next failing call of this thread.
    unsafe { CStr::from_ptr(rdmalib_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Asserts a call failed with `errno`, and that the message says `what`.
#[track_caller]
fn fails(r: c_int, want: c_int, what: &str) {
    let e = errno();
    assert_eq!((r, e), (-1, want), "{}", last_error());
    let msg = last_error();
    assert!(msg.contains(what), "{msg:?} does not mention {what:?}");
}

#[test]
fn calls_on_a_context_that_is_not_set_up_fail_clearly() {
    let mut c = zeroed();
    let ctx = &mut c as *mut RdmaContext;
    let (mut n, mut kind) = (0usize, 0);
    // SAFETY: `ctx` is a valid context; the out-pointers are valid.
    unsafe {
        fails(rdma_write(ctx, 0, 0, 1), libc::ENOTCONN, "not connected");
        fails(rdma_read(ctx, 0, 0, 1), libc::ENOTCONN, "not connected");
        fails(rdma_send(ctx, 0, 1), libc::ENOTCONN, "not connected");
        fails(rdma_recv(ctx, 0, &mut n), libc::ENOTCONN, "not connected");
        fails(
            rdma_notify_write(ctx, 0, 1),
            libc::ENOTCONN,
            "not connected",
        );
        fails(rdma_notify_read(ctx, 0, 1), libc::ENOTCONN, "not connected");
        fails(
            rdmalib_wait_notify(ctx, &mut kind, null_mut(), null_mut()),
            libc::ENOTCONN,
            "not connected",
        );
        fails(
            rdma_wait_for_client(ctx),
            libc::ENOTCONN,
            "rdma_setup_server",
        );
        fails(
            rdma_connect_server(ctx),
            libc::ENOTCONN,
            "rdma_setup_client",
        );
        fails(
            rdma_close(ctx),
            libc::EBADF,
            "closed already, or was never set up",
        );
        // NULL contexts.
        fails(rdma_close(null_mut()), libc::EINVAL, "NULL context");
        fails(
            rdma_write(null_mut(), 0, 0, 1),
            libc::EINVAL,
            "NULL context",
        );
        fails(
            rdma_setup_server(null_mut(), 0, null()),
            libc::EINVAL,
            "NULL",
        );
    }
    assert!(c.lib.is_null() && c.buffer.is_null());
}

#[test]
fn bad_arguments_leave_the_context_untouched() {
    let mut c = zeroed();
    let ctx = &mut c as *mut RdmaContext;
    // SAFETY: `ctx` is a valid context; the strings are NUL-terminated.
    unsafe {
        fails(rdma_setup_server(ctx, -1, null()), libc::EINVAL, "bad port");
        fails(
            rdma_setup_server(ctx, 70000, null()),
            libc::EINVAL,
            "bad port",
        );
        fails(
            rdma_setup_server(ctx, 0, c"mlx5_0".as_ptr()),
            libc::ENODEV,
            "no device",
        );
        fails(
            rdma_setup_client(ctx, null(), 7471),
            libc::EINVAL,
            "no server",
        );
        fails(
            rdma_setup_client(ctx, c"127.0.0.1".as_ptr(), 0),
            libc::EINVAL,
            "bad port",
        );
        (*ctx).cq_notify = 7;
        fails(rdma_setup_server(ctx, 0, null()), libc::EINVAL, "cq_notify");
        (*ctx).cq_notify = 0;
        (*ctx).timeout_ms = -5;
        fails(
            rdma_setup_server(ctx, 0, null()),
            libc::EINVAL,
            "timeout_ms",
        );
    }
    assert!(c.lib.is_null() && c.ec.is_null() && c.listener.is_null());
}

#[test]
fn a_panic_becomes_minus_one_with_eio() {
    let r = run(|| panic!("boom"));
    fails(r, libc::EIO, "panic");
    assert_eq!(run(|| Ok(())), 0);
}

/// Pointers a C thread can move to another thread (the test's server).
struct Shared(*mut RdmaContext);
// SAFETY: the context is used by one thread at a time (the spawning thread
// waits for the other before touching it again).
unsafe impl Send for Shared {}

fn exchange(events: c_int) {
    let mut s = zeroed();
    s.buffer_size = 8192;
    s.cq_notify = events;
    s.timeout_ms = 20_000;
    let mut c = zeroed();
    c.buffer_size = 4096;
    c.cq_notify = events;
    c.timeout_ms = 20_000;
    let (sp, cp) = (&mut s as *mut RdmaContext, &mut c as *mut RdmaContext);
    let ip = Context::open().unwrap().local_addr().ip().to_string();
    let ip = CString::new(ip).unwrap();
    // SAFETY: both contexts are valid and used by one thread at a time; the
    // buffers are the library's, of the sizes it reports.
    unsafe {
        assert_eq!(rdma_setup_server(sp, 0, null()), 0, "{}", last_error());
        assert!(!s.ec.is_null() && !s.listener.is_null() && s.port > 0);
        assert!(s.conn.is_null() && s.buffer.is_null(), "no client yet");
        fails(
            rdma_setup_server(sp, 0, null()),
            libc::EBUSY,
            "set up already",
        );
        fails(rdma_connect_server(sp), libc::EINVAL, "not a client");
        let server = Shared(sp);
        let t = std::thread::spawn(move || {
            let server = server;
            rdma_wait_for_client(server.0)
        });
        assert_eq!(
            rdma_setup_client(cp, ip.as_ptr(), s.port),
            0,
            "{}",
            last_error()
        );
        assert!(!c.buffer.is_null() && c.buffer_size == 4096 && !c.qp.is_null());
        fails(rdma_wait_for_client(cp), libc::EINVAL, "not a server");
        fails(rdma_write(cp, 0, 0, 1), libc::ENOTCONN, "not connected");
        assert_eq!(rdma_connect_server(cp), 0, "{}", last_error());
        assert_eq!(t.join().unwrap(), 0, "{}", last_error());
        for f in [
            s.conn, s.pd, s.mr, s.cq, s.qp, s.event, c.conn, c.pd, c.mr, c.cq, c.qp,
        ] {
            assert!(!f.is_null());
        }
        assert_eq!((s.remote_size, c.remote_size), (4096, 8192));
        fails(rdma_wait_for_client(sp), libc::EISCONN, "connected already");

        // A message from the buffer into the peer's buffer (larger than the MTU).
        let msg: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        std::ptr::copy_nonoverlapping(msg.as_ptr(), c.buffer.cast(), 4096);
        assert_eq!(rdma_send(cp, 0, 4096), 0, "{}", last_error());
        let mut n = 0;
        assert_eq!(rdma_recv(sp, 100, &mut n), 0, "{}", last_error());
        assert_eq!(n, 4096);
        assert_eq!(
            std::slice::from_raw_parts(s.buffer.add(100).cast::<u8>(), n),
            msg
        );

        // A write, its notification, a read back, its notification.
        assert_eq!(rdma_write(cp, 0, 5000, 3000), 0, "{}", last_error());
        assert_eq!(rdma_notify_write(cp, 5000, 3000), 0);
        let (mut kind, mut off, mut len) = (0, 0, 0);
        assert_eq!(rdmalib_wait_notify(sp, &mut kind, &mut off, &mut len), 0);
        assert_eq!((kind, off, len), (NOTIFY_WRITE, 5000, 3000));
        let landed = std::slice::from_raw_parts(s.buffer.add(5000).cast::<u8>(), 3000);
        assert_eq!(landed, &msg[..3000]);
        assert_eq!(rdma_read(sp, 0, 1, 4095), 0, "{}", last_error());
        assert_eq!(
            std::slice::from_raw_parts(s.buffer.cast::<u8>(), 4095),
            &msg[1..]
        );
        assert_eq!(rdma_notify_read(sp, 1, 4095), 0);
        assert_eq!(
            rdmalib_wait_notify(cp, &mut kind, null_mut(), null_mut()),
            0
        );
        assert_eq!(kind, NOTIFY_READ);

        // Misuse on a live connection: nothing is sent, it stays usable.
        fails(
            rdma_write(cp, 0, 8000, 200),
            libc::ERANGE,
            "peer's 8192-byte buffer",
        );
        fails(
            rdma_read(cp, 4000, 0, 200),
            libc::ERANGE,
            "local 4096-byte buffer",
        );
        fails(
            rdma_notify_write(cp, 8192, 1),
            libc::ERANGE,
            "outside the peer's",
        );
        fails(
            rdma_send(sp, 0, 5000),
            libc::EMSGSIZE,
            "limit of 4096 bytes",
        );
        fails(
            rdma_recv(sp, 9000, &mut n),
            libc::ERANGE,
            "outside the local",
        );
        assert_eq!(rdma_send(sp, 0, 10), 0);
        // No room for it at 4090: it stays queued for a receive with room.
        fails(
            rdma_recv(cp, 4090, &mut n),
            libc::EMSGSIZE,
            "limit of 6 bytes",
        );
        assert_eq!(rdma_recv(cp, 4086, &mut n), 0);
        assert_eq!(n, 10);

        // Close: fields cleared, again is EBADF, the peer sees ECONNRESET.
        assert_eq!(rdma_close(cp), 0, "{}", last_error());
        assert!(c.lib.is_null() && c.buffer.is_null() && c.conn.is_null() && c.qp.is_null());
        fails(rdma_close(cp), libc::EBADF, "closed already");
        fails(rdma_write(cp, 0, 0, 1), libc::ENOTCONN, "not connected");
        fails(rdma_recv(sp, 0, &mut n), libc::ECONNRESET, "disconnected");
        assert_eq!(rdma_close(sp), 0, "{}", last_error());
        assert!(s.lib.is_null() && s.listener.is_null() && s.ec.is_null());
    }
}

#[test]
fn a_whole_exchange_in_polling_mode() {
    exchange(0);
}

#[test]
fn a_whole_exchange_in_event_mode() {
    exchange(1);
}

/// `struct rdma_context` as gcc lays it out from `include/rdmalib.h`.
#[test]
fn the_struct_matches_the_header() {
    use std::mem::{offset_of, size_of};
    use std::process::Command;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let dir = std::env::temp_dir().join(format!("rdmalib-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let probe = dir.join("rdmalib_layout.c");
    let fields = [
        "ec",
        "listener",
        "conn",
        "pd",
        "mr",
        "cq",
        "qp",
        "buffer",
        "buffer_size",
        "event",
        "cq_notify",
        "timeout_ms",
        "port",
        "remote_size",
        "lib",
    ];
    let mut src = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <rdmalib.h>\nint main(void) {\n\
         printf(\"size %zu\\n\", sizeof(struct rdma_context));\n",
    );
    for f in fields {
        src += &format!("printf(\"{f} %zu\\n\", offsetof(struct rdma_context, {f}));\n");
    }
    src += "printf(\"kinds %d %d\\n\", RDMALIB_NOTIFY_WRITE, RDMALIB_NOTIFY_READ);\nreturn 0;\n}\n";
    std::fs::write(&probe, src).unwrap();
    let exe = dir.join("rdmalib_layout");
    let cc = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(format!("{root}/include"))
        .arg("-o")
        .arg(&exe)
        .arg(&probe)
        .output();
    let Ok(cc) = cc else {
        eprintln!(
            "SKIPPED the_struct_matches_the_header: no C compiler `cc` (apt-get install gcc)"
        );
        return;
    };
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let out = String::from_utf8(out.stdout).unwrap();
    let rust = [
        offset_of!(RdmaContext, ec),
        offset_of!(RdmaContext, listener),
        offset_of!(RdmaContext, conn),
        offset_of!(RdmaContext, pd),
        offset_of!(RdmaContext, mr),
        offset_of!(RdmaContext, cq),
        offset_of!(RdmaContext, qp),
        offset_of!(RdmaContext, buffer),
        offset_of!(RdmaContext, buffer_size),
        offset_of!(RdmaContext, event),
        offset_of!(RdmaContext, cq_notify),
        offset_of!(RdmaContext, timeout_ms),
        offset_of!(RdmaContext, port),
        offset_of!(RdmaContext, remote_size),
        offset_of!(RdmaContext, lib),
    ];
    let mut want = format!("size {}\n", size_of::<RdmaContext>());
    for (f, o) in fields.iter().zip(rust) {
        want += &format!("{f} {o}\n");
    }
    want += &format!("kinds {NOTIFY_WRITE} {NOTIFY_READ}\n");
    assert_eq!(out, want);
}
