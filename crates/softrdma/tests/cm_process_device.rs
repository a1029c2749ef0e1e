//! The Connector/Acceptor on the process's own device (one test per binary:
//! it configures the process device through the environment).

mod cm_common;
mod common;

use cm_common::*;
use common::free_udp_port;
use softrdma::cm::{Acceptor, Connector};
use softrdma::verbs::Context;
use std::net::SocketAddr;

#[test]
fn acceptor_names_the_process_device_and_a_connection_to_itself_works() {
    let port = free_udp_port();
    // SAFETY: this binary's only test; no other thread reads the environment yet.
    unsafe {
        std::env::set_var("SOFTRDMA_PORT", port.to_string());
        std::env::remove_var("SOFTRDMA_ADDR");
    }
    // The process device starts on the address the first listener names.
    let acceptor = Acceptor::bind(SocketAddr::new(ip(37), 0)).unwrap();
    let at = acceptor.local_addr();
    assert_eq!(at.ip(), ip(37));
    let ctx = Context::open().unwrap();
    assert_eq!(ctx.local_addr(), SocketAddr::new(ip(37), port));
    // Both ends on the one device.
    let server = std::thread::spawn(move || {
        let conn = acceptor.accept().unwrap();
        assert!(conn.wait_disconnected(Some(T)).unwrap());
        conn.peer_private_data()[0]
    });
    let conn = Connector::new().connect(at, &[42]).unwrap();
    assert_eq!(conn.peer_addr(), Some(at));
    conn.disconnect().unwrap();
    assert_eq!(server.join().unwrap(), 42);
}
