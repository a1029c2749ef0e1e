//! rdmalib between processes: the examples against each other in polling and
//! event mode, and peers SIGKILLed mid-transfer (the survivor gets an
//! error, quickly, instead of hanging). Each process's device has its own
//! address `127.71.x.y` on the RoCE port.

mod common;
#[path = "common/proc.rs"]
mod proc;

use common::pattern;
use proc::{Proc, example_cmd, tmp, unique_addr};
use rdmalib::softrdma::verbs::{Context, EngineConfig};
use rdmalib::*;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

const NET: u8 = 71;
const T: Duration = Duration::from_secs(60);

/// A device of this process at a fresh `127.71.x.y` on the RoCE port.
fn device() -> Context {
    let ip = IpAddr::V4(unique_addr(NET));
    Context::open_with(EngineConfig::bound_to(SocketAddr::new(ip, 4791))).unwrap()
}

#[test]
fn echo_between_two_processes_in_both_modes() {
    for mode in [&[][..], &["-e"][..]] {
        let (a, b) = (unique_addr(NET), unique_addr(NET));
        let a_str = a.to_string();
        // The server names its address with -a instead of SOFTRDMA_ADDR: the
        // device starts on the address it binds (as rdma_bind_addr does).
        let mut server_cmd = example_cmd(
            "rdmalib_echo",
            a,
            &[&["-p", "0", "-a", &a_str], mode].concat(),
        );
        server_cmd.env_remove("SOFTRDMA_ADDR");
        let mut server = Proc::spawn("echo server", server_cmd);
        let port = server.listening_port().to_string();
        assert!(
            server
                .stdout()
                .contains(&format!("listening on {a_str}:{port}")),
            "{}",
            server.report()
        );
        let args = [
            &["-p", &port, "-n", "200", "-s", "10000"],
            mode,
            &[a_str.as_str()],
        ]
        .concat();
        let mut client = Proc::spawn("echo client", example_cmd("rdmalib_echo", b, &args));
        assert!(client.wait(T).success(), "{}", client.report());
        assert!(server.wait(T).success(), "{}", server.report());
        assert!(
            client.stdout().contains("200 round trips of 10000 bytes"),
            "{}",
            client.report()
        );
        assert!(
            server.stdout().contains("echoed 200 messages"),
            "{}",
            server.report()
        );
    }
}

#[test]
fn file_transfer_between_two_processes_in_both_modes() {
    let input = tmp("ft-in");
    let data = pattern(1_234_567, 42);
    std::fs::write(&input, &data).unwrap();
    for mode in [&[][..], &["-e"][..]] {
        let output = tmp("ft-out");
        let _ = std::fs::remove_file(&output);
        let (a, b) = (unique_addr(NET), unique_addr(NET));
        let out = output.to_str().unwrap();
        let mut server = Proc::spawn(
            "file server",
            example_cmd(
                "rdmalib_file_transfer",
                a,
                &[&["-p", "0", "-c", "100000", "-o", out], mode].concat(),
            ),
        );
        let port = server.listening_port().to_string();
        let (a_str, inp) = (a.to_string(), input.to_str().unwrap());
        let args = [
            &["-p", &port, "-c", "100000", "-f", inp],
            mode,
            &[a_str.as_str()],
        ]
        .concat();
        let mut client = Proc::spawn(
            "file client",
            example_cmd("rdmalib_file_transfer", b, &args),
        );
        assert!(client.wait(T).success(), "{}", client.report());
        assert!(server.wait(T).success(), "{}", server.report());
        assert!(
            client.stdout().contains("server says OK"),
            "{}",
            client.report()
        );
        assert!(
            server
                .stdout()
                .contains("received 1234567 bytes in 13 chunks"),
            "{}",
            server.report()
        );
        assert_eq!(std::fs::read(&output).unwrap(), data, "the copy differs");
    }
}

/// The file-transfer server protocol, in this process, until `kill_after`
/// chunks arrived: then the client is SIGKILLed (while it waits for an
/// ack) and the next wait must fail with `Disconnected`.
#[test]
fn a_client_killed_mid_transfer_ends_the_servers_wait_with_an_error() {
    for mode in [Mode::Polling, Mode::Event] {
        let dev = device();
        let cfg = Config {
            buffer_size: 2 * 4096,
            max_message: 64,
            timeout: Some(T),
            ..Config::with_mode(mode)
        };
        let mut srv =
            Server::bind_on(&dev, SocketAddr::new(dev.local_addr().ip(), 0), cfg).unwrap();
        let input = tmp("kill-in");
        std::fs::write(&input, pattern(4 << 20, 1)).unwrap();
        let (at, port) = (
            dev.local_addr().ip().to_string(),
            srv.local_addr().port().to_string(),
        );
        let args = [
            "-p",
            &port,
            "-c",
            "4096",
            "-f",
            input.to_str().unwrap(),
            &at,
        ];
        let mut client = Proc::spawn(
            "file client",
            example_cmd("rdmalib_file_transfer", unique_addr(NET), &args),
        );
        let mut conn = srv.accept().unwrap();
        assert_eq!(&conn.recv().unwrap()[..4], b"RDLF");
        let mut slots = b"RDLS".to_vec();
        slots.extend_from_slice(&4096u64.to_be_bytes());
        conn.send(&slots).unwrap();
        for k in 0..5u64 {
            let n = conn.wait_notification().unwrap();
            assert_eq!((n.offset, n.len), ((k % 2) * 4096, 4096), "{mode:?}");
            let want = pattern(4 << 20, 1);
            let k = k as usize;
            assert_eq!(
                conn.buffer().to_vec(n.offset as usize, 4096).unwrap(),
                want[k * 4096..(k + 1) * 4096]
            );
            if k < 4 {
                conn.send(&[]).unwrap();
            }
        }
        client.kill();
        let killed = Instant::now();
        // Chunk 5 (already written and announced) may still be queued.
        let mut late = 0;
        let e = loop {
            match conn.wait_notification() {
                Ok(_) => late += 1,
                Err(e) => break e,
            }
        };
        assert!(late <= 1, "{mode:?}: {late} notifications after the kill");
        assert!(matches!(e, Error::Disconnected), "{mode:?}: {e:?}");
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "{mode:?}: noticed after {:?}",
            killed.elapsed()
        );
        conn.close().unwrap();
    }
}

/// The file-transfer client protocol, in this process, against the example
/// server, which is SIGKILLed after three chunks: the writer fails fast.
#[test]
fn a_server_killed_mid_transfer_fails_the_writer() {
    for mode in [Mode::Polling, Mode::Event] {
        let sink = tmp("kill-out");
        let a = unique_addr(NET);
        let mut server = Proc::spawn(
            "file server",
            example_cmd(
                "rdmalib_file_transfer",
                a,
                &["-p", "0", "-c", "4096", "-o", sink.to_str().unwrap()],
            ),
        );
        let port = server.listening_port();
        let dev = device();
        let cfg = Config {
            buffer_size: 4096,
            max_message: 64,
            timeout: Some(T),
            ..Config::with_mode(mode)
        };
        let mut conn = Client::on(&dev, SocketAddr::new(IpAddr::V4(a), port), cfg)
            .unwrap()
            .connect()
            .unwrap();
        let mut header = b"RDLF".to_vec();
        header.extend_from_slice(&(1u64 << 30).to_be_bytes());
        conn.send(&header).unwrap();
        assert_eq!(&conn.recv().unwrap()[..4], b"RDLS");
        for k in 0..3u64 {
            conn.write(0, (k % 2) * 4096, 4096).unwrap();
            conn.notify_write((k % 2) * 4096, 4096).unwrap();
            assert!(conn.recv().unwrap().is_empty(), "{mode:?}: the ack");
        }
        server.kill();
        let killed = Instant::now();
        let e = loop {
            let r = conn
                .write(0, 0, 4096)
                .and_then(|()| conn.notify_write(0, 4096))
                .and_then(|()| conn.recv().map(|_| ()));
            if let Err(e) = r {
                break e;
            }
        };
        assert!(
            matches!(e, Error::Disconnected | Error::Completion { .. }),
            "{mode:?}: {e:?}"
        );
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "{mode:?}: failed after {:?}",
            killed.elapsed()
        );
        conn.close().unwrap();
    }
}
