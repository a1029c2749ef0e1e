//! Engine configuration from the environment.

use softrdma_udp::AddrConfig;
use std::io;

/// How an engine is set up. [`EngineConfig::from_env`] reads:
///
/// - `SOFTRDMA_ADDR` / `SOFTRDMA_PORT`: the device address and UDP port (see
///   `softrdma_udp::addr`; default: `127.0.0.1:4791`, shared with the host's
///   other processes, or without the host device the first free `127.0.0.N`);
/// - `SOFTRDMA_BUSY_POLL=0|1`: whether an empty `poll_cq` reads the socket itself
///   (default 1: lowest latency for applications that spin on their CQ);
/// - `SOFTRDMA_ICRC=verify|ignore`: check the ICRC of received packets (default
///   verify; it accepts Linux rxe's non-zero IPv4 IDs by solving for them, see
///   `softrdma_wire::icrc::ipv4_id_and_df`);
/// - `SOFTRDMA_PCAP=FILE`: write every packet sent and received to a pcap file;
/// - `SOFTRDMA_STATS=FILE`: append the device's counters to FILE at exit
///   (`softrdma stats` reads it);
/// - `SOFTRDMA_LINGER=auto|on|off`: whether the progress thread keeps polling
///   the socket for a while after packets arrived ([`Linger`]; default auto);
/// - `SOFTRDMA_HOST=0|1`: join the host device (default 1; see `host`);
/// - `SOFTRDMA_RNR_HOLD=MICROSECONDS`: how long an RC responder that finds no
///   receive posted waits for one before it RNR-NAKs (default 10000; 0: at
///   once, as rxe does; see `softrdma_transport::Config::rnr_hold_ns`);
/// - `SOFTRDMA_SHM=0|1`: carry traffic between the host device's processes
///   through shared memory (default 1; `0` keeps every packet on UDP over
///   loopback; see `engine/shm.rs`);
/// - `SOFTRDMA_PEER_COPY=0|1`: with the same-host path on, `0` keeps every byte in
///   packets (no peer copy of large SENDs, WRITEs and READs;
///   see `engine/shm/peer_copy.rs`);
/// - `SOFTRDMA_DIRECT=0|1`: with the same-host path on, a lone small post
///   to an idle RC QP may leave as a direct record (default 1; see
///   `softrdma_transport::Config::direct`);
/// - `SOFTRDMA_EXPRESS=0|1`: with direct records on, a lone small SEND or
///   WRITE to an idle RC QP is written through the QP's express cell
///   without the engine lock (`softrdma_transport::Express`), and the
///   responder executes an in-order one-packet SEND or WRITE off a lane by
///   its express path (default 1; see `softrdma_transport::Config::express`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EngineConfig {
    /// Where to bind.
    pub addr: AddrConfig,
    /// Let `poll_cq` on an empty CQ receive and process packets itself.
    pub busy_poll: bool,
    /// Verify the ICRC of received packets.
    pub verify_icrc: bool,
    /// Capture file.
    pub pcap: Option<std::path::PathBuf>,
    /// Seed for key tags and QPNs (`None`: from the OS).
    pub seed: Option<u64>,
    /// Whether the progress thread polls on after packets arrived.
    pub linger: Linger,
    /// Where to append the counters at exit (`SOFTRDMA_STATS`).
    pub stats: Option<std::path::PathBuf>,
    /// Join the host device: share the address with the host's other
    /// softrdma processes (`SO_REUSEPORT` group, steering by QPN, host-wide
    /// rdma_cm ports; see `host.rs`). Default on; `SOFTRDMA_HOST=0` gives the
    /// process a device of its own (an exclusive bind, the first free
    /// `127.0.0.N` by default).
    pub host: bool,
    /// How long a responder holds an RNR NAK back waiting for a receive
    /// (`SOFTRDMA_RNR_HOLD`, µs).
    pub rnr_hold: std::time::Duration,
    /// Carry traffic to this host device's member processes through shared
    /// memory instead of UDP (`SOFTRDMA_SHM`, default on; needs `host`).
    pub shm: bool,
    /// Copy large SENDs, WRITEs and READs between member processes' memory
    /// directly (`SOFTRDMA_PEER_COPY`, default on; needs `shm`).
    pub peer_copy: bool,
    /// Let a lone small post to an idle RC QP whose peer is on a lane leave
    /// as a direct record (`SOFTRDMA_DIRECT`, default on; needs `shm`).
    pub direct: bool,
    /// The express post through each RC QP's cell, and the responder's
    /// express path for in-order one-packet requests off a lane
    /// (`SOFTRDMA_EXPRESS`, default on; needs `direct`).
    pub express: bool,
}

/// [`EngineConfig::rnr_hold`] by default: a scheduling delay of a busy
/// machine (an application thread woken by a completion reposts its receive
/// within this; 2 ms was not always enough on 2 loaded vCPUs), well under
/// the local ACK timeout rdma_cm and the rdma-core tools use (14: 67 ms),
/// so requesters do not time out while a NAK is held.
pub(crate) const DEFAULT_RNR_HOLD: std::time::Duration = std::time::Duration::from_millis(10);

/// Whether the progress thread keeps polling the socket for a while (200 µs
/// past the last packet) after packets arrived, instead of going back to
/// `epoll_wait` at once: a peer that only receives (a perftest server, sitting
/// in a TCP read) then costs its sender no wake-up per batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Linger {
    /// Only while no application thread polls or runs (measured from CPU
    /// clocks), no thread waits on a completion channel the packets woke, and
    /// the machine has at most one runnable thread more than CPUs.
    #[default]
    Auto,
    /// Whenever no application thread polls and no completion channel was
    /// signalled (whatever the rest of the process and the machine do).
    On,
    /// Never (with `SOFTRDMA_BUSY_POLL=0` too).
    Off,
}

impl EngineConfig {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> io::Result<EngineConfig> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the configuration through `lookup` (tests pass a map).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> io::Result<EngineConfig> {
        let addr = AddrConfig::from_lookup(&lookup)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let flag = |k: &str, default: bool| -> io::Result<bool> {
            match lookup(k).as_deref().map(str::trim) {
                None | Some("") => Ok(default),
                Some("1" | "yes" | "on" | "true") => Ok(true),
                Some("0" | "no" | "off" | "false") => Ok(false),
                Some(v) => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{k}={v}: expected 0 or 1"),
                )),
            }
        };
        let verify_icrc = match lookup("SOFTRDMA_ICRC").as_deref().map(str::trim) {
            None | Some("" | "verify") => true,
            Some("ignore") => false,
            Some(v) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("SOFTRDMA_ICRC={v}: expected verify or ignore"),
                ));
            }
        };
        let linger = match lookup("SOFTRDMA_LINGER").as_deref().map(str::trim) {
            None | Some("" | "auto") => Linger::Auto,
            Some("1" | "on") => Linger::On,
            Some("0" | "off") => Linger::Off,
            Some(v) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("SOFTRDMA_LINGER={v}: expected auto, on or off"),
                ));
            }
        };
        let rnr_hold = match lookup("SOFTRDMA_RNR_HOLD").as_deref().map(str::trim) {
            None | Some("") => DEFAULT_RNR_HOLD,
            Some(v) => match v.parse::<u64>() {
                Ok(us) => std::time::Duration::from_micros(us),
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("SOFTRDMA_RNR_HOLD={v}: expected microseconds"),
                    ));
                }
            },
        };
        Ok(EngineConfig {
            addr,
            rnr_hold,
            busy_poll: flag("SOFTRDMA_BUSY_POLL", true)?,
            host: flag("SOFTRDMA_HOST", true)?,
            shm: flag("SOFTRDMA_SHM", true)?,
            peer_copy: flag("SOFTRDMA_PEER_COPY", true)?,
            direct: flag("SOFTRDMA_DIRECT", true)?,
            express: flag("SOFTRDMA_EXPRESS", true)?,
            linger,
            verify_icrc,
            pcap: lookup("SOFTRDMA_PCAP")
                .filter(|s| !s.is_empty())
                .map(Into::into),
            stats: lookup(crate::ENV_STATS)
                .filter(|s| !s.is_empty())
                .map(Into::into),
            seed: None,
        })
    }

    /// An engine bound to exactly `addr` (tests and the CLI use this).
    pub fn bound_to(addr: std::net::SocketAddr) -> EngineConfig {
        EngineConfig {
            addr: AddrConfig::exact(addr),
            busy_poll: true,
            verify_icrc: true,
            pcap: None,
            seed: None,
            linger: Linger::Auto,
            stats: None,
            host: true,
            rnr_hold: DEFAULT_RNR_HOLD,
            shm: false,
            peer_copy: true,
            direct: true,
            express: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> io::Result<EngineConfig> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        EngineConfig::from_lookup(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn direct_records_are_on_unless_turned_off() {
        assert!(with(&[]).unwrap().direct);
        assert!(with(&[("SOFTRDMA_DIRECT", "1")]).unwrap().direct);
        assert!(!with(&[("SOFTRDMA_DIRECT", "0")]).unwrap().direct);
        assert!(!with(&[("SOFTRDMA_DIRECT", " off ")]).unwrap().direct);
        let e = with(&[("SOFTRDMA_DIRECT", "maybe")]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("SOFTRDMA_DIRECT=maybe"), "{e}");
    }

    #[test]
    fn peer_copy_is_on_unless_turned_off() {
        assert!(with(&[]).unwrap().peer_copy);
        assert!(!with(&[("SOFTRDMA_PEER_COPY", "0")]).unwrap().peer_copy);
        assert!(with(&[("SOFTRDMA_PEER_COPY", "2")]).is_err());
    }
}
