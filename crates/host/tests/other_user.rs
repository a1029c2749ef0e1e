//! Another user's processes can neither read the registry nor join the host
//! device's socket group. Needs root (to run a child as `nobody` with
//! setpriv); other users get a loud SKIPPED line.

use softrdma_host::Registry;
use std::net::UdpSocket;
use std::os::fd::FromRawFd;
use std::process::Command;

fn skip_unless_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return false;
    }
    eprintln!("\n!!!!!!!! SKIPPED (needs root): {test} runs a child as another user !!!!!!!!\n");
    true
}

/// `argv` as user and group 65534 (nobody), with no supplementary groups.
fn as_nobody(argv: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(argv)
        .output()
        .expect("run setpriv (util-linux)")
}

#[test]
fn another_user_cannot_read_the_registry() {
    if skip_unless_root("other_user::another_user_cannot_read_the_registry") {
        return;
    }
    let base = std::env::temp_dir().join(format!("softrdma-other-user-{}", std::process::id()));
    let reg = Registry::open_in(&base).unwrap();
    let _me = reg.join().unwrap();
    let dir = reg.dir().display().to_string();
    let ls = as_nobody(&["ls", &dir]);
    let err = String::from_utf8_lossy(&ls.stderr);
    assert!(
        !ls.status.success() && err.contains("Permission denied"),
        "{err}"
    );
    let touch = as_nobody(&["touch", &format!("{dir}/slot-7")]);
    assert!(!touch.status.success());
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn another_user_cannot_join_the_socket_group() {
    if skip_unless_root("other_user::another_user_cannot_join_the_socket_group") {
        return;
    }
    // A member's socket, as the engine binds it: SO_REUSEPORT before bind.
    // SAFETY: plain socket(2); the fd is owned by the UdpSocket below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
    assert!(fd >= 0);
    // SAFETY: `fd` is a fresh socket nobody else owns.
    let sock = unsafe { UdpSocket::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: a valid fd and a c_int option value of the right size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEPORT,
            (&one as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
    let addr: std::net::SocketAddrV4 = "127.0.0.1:0".parse().unwrap();
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `sa` is a valid sockaddr_in of the length given.
    let r = unsafe {
        libc::bind(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
    let port = sock.local_addr().unwrap().port();
    if !std::path::Path::new("/usr/bin/python3").exists() {
        eprintln!("!!!!!!!! SKIPPED: /usr/bin/python3 (Debian's python3) is missing !!!!!!!!");
        return;
    }
    let join = format!(
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n\
         try:\n    s.bind(('127.0.0.1', {port}))\n    print('JOINED')\n\
         except OSError as e:\n    print('REFUSED', e.errno)\n"
    );
    let out = as_nobody(&["/usr/bin/python3", "-c", &join]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        format!("REFUSED {}", libc::EADDRINUSE),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The same program as root joins: the refusal is about the user.
    let own = Command::new("/usr/bin/python3")
        .args(["-c", &join])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&own.stdout).trim(), "JOINED");
}
