//! The async API (feature `tokio`): an echo server task and a client task in
//! one process, each on a device of its own (`127.0.0.1` and `127.0.0.2`,
//! on a free UDP port), in event mode on a single-threaded runtime.
//!
//! ```text
//! cargo run -p softrdma-rdmalib --features tokio --example rdmalib_async_echo
//! ```

use rdmalib::softrdma::verbs::{Context, EngineConfig};
use rdmalib::{Client, Config, Error, Mode, Server};
use std::net::SocketAddr;

#[tokio::main(flavor = "current_thread")]
async fn main() -> rdmalib::Result<()> {
    let port = std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let device = |ip: &str| {
        let at = SocketAddr::new(ip.parse().expect("an IP"), port);
        Context::open_with(EngineConfig::bound_to(at))
    };
    let (server_dev, client_dev) = (device("127.0.0.1")?, device("127.0.0.2")?);
    let config = Config::with_mode(Mode::Event);

    let mut server = Server::bind_on(
        &server_dev,
        SocketAddr::new(server_dev.local_addr().ip(), 0),
        config.clone(),
    )?;
    let at = server.local_addr();
    let serve = tokio::spawn(async move {
        let mut conn = server.accept_async().await?;
        let mut n = 0;
        loop {
            match conn.recv_async().await {
                Ok(m) => conn.send_async(&m).await?,
                Err(Error::Disconnected) => break,
                Err(e) => return Err(e),
            }
            n += 1;
        }
        conn.close_async().await?;
        Ok::<_, Error>(n)
    });

    let mut conn = Client::on_async(&client_dev, at, config)
        .await?
        .connect_async()
        .await?;
    for i in 0..100u32 {
        let req = format!("request {i}").into_bytes();
        conn.send_async(&req).await?;
        assert_eq!(conn.recv_async().await?, req);
    }
    conn.close_async().await?;
    let n = serve.await.expect("the server task")?;
    println!("echoed {n} messages asynchronously");
    Ok(())
}
