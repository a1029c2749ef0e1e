//! Engine configuration from the environment.

use softrdma_udp::AddrConfig;
use std::io;

/// How an engine is set up. [`EngineConfig::from_env`] reads:
///
/// - `SOFTRDMA_ADDR` / `SOFTRDMA_PORT`: the device address and UDP port (see
///   `softrdma_udp::addr`; default: the first free `127.0.0.N:4791`);
/// - `SOFTRDMA_BUSY_POLL=0|1`: whether an empty `poll_cq` reads the socket itself
///   (default 1: lowest latency for applications that spin on their CQ);
/// - `SOFTRDMA_ICRC=verify|ignore`: check the ICRC of received packets (default
///   verify; `ignore` for peers whose IPv4 ID is not 0, such as kernel rxe);
/// - `SOFTRDMA_PCAP=FILE`: write every packet sent and received to a pcap file.
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
        Ok(EngineConfig {
            addr,
            busy_poll: flag("SOFTRDMA_BUSY_POLL", true)?,
            verify_icrc,
            pcap: lookup("SOFTRDMA_PCAP")
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
        }
    }
}
