//! What the two-process examples share: their address and mode options,
//! the server's accept, the client's name resolution, the exit status.

use clap::Args;
use rdmalib::{Connection, Error, Mode, Server};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;

/// Where the server listens and the client connects (`PORT` by default).
#[derive(Debug, Args)]
pub(crate) struct Endpoint<const PORT: u16> {
    /// Server: address to listen on.
    #[arg(short = 'a', long, default_value = "0.0.0.0")]
    pub(crate) addr: IpAddr,
    /// Port to listen on / connect to (server: 0 picks a free one).
    #[arg(short = 'p', long, default_value_t = PORT)]
    pub(crate) port: u16,
}

impl<const PORT: u16> Endpoint<PORT> {
    /// Server: listens, says where on stdout (a "listening on ADDR:PORT"
    /// line) and accepts one client.
    pub(crate) fn accept(&self, config: rdmalib::Config) -> rdmalib::Result<Connection> {
        let mut server = Server::bind(SocketAddr::new(self.addr, self.port), config)?;
        println!("listening on {}", server.local_addr());
        std::io::stdout().flush()?;
        server.accept()
    }

    /// Client: the IPv4 address of the server `host` at the port.
    pub(crate) fn resolve(&self, host: &str) -> rdmalib::Result<SocketAddr> {
        (host, self.port)
            .to_socket_addrs()?
            .find(|s| s.is_ipv4())
            .ok_or_else(|| Error::InvalidArgument(format!("cannot resolve {host}")))
    }
}

/// How the example waits, and which side it is.
#[derive(Debug, Args)]
pub(crate) struct Side {
    /// Sleep on completion events instead of polling.
    #[arg(short = 'e', long)]
    pub(crate) events: bool,
    /// The server to connect to (no host: be the server).
    pub(crate) host: Option<String>,
}

impl Side {
    pub(crate) fn mode(&self) -> Mode {
        if self.events {
            Mode::Event
        } else {
            Mode::Polling
        }
    }
}

/// The exit status of example `name`: success only for `Ok(true)`; an
/// error is printed first.
pub(crate) fn exit(name: &str, r: rdmalib::Result<bool>) -> ExitCode {
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}
