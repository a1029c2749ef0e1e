//! # rdmalib: small RDMA messaging over softrdma
//!
//! Two sides, a [`Server`] and a [`Client`], make one reliable connection
//! (an RC queue pair set up by the RDMA connection manager) and then:
//!
//! - exchange **messages**: [`Connection::send`] / [`Connection::recv`];
//! - move bytes **one-sided** into or out of the peer's buffer without its
//!   CPU: [`Connection::write`] (RDMA WRITE) / [`Connection::read`] (RDMA
//!   READ);
//! - **notify** the peer that a write or read finished:
//!   [`Connection::notify_write`] / [`Connection::notify_read`], which the
//!   peer waits for with [`Connection::wait_notification`];
//! - **close** orderly: [`Connection::close`].
//!
//! ```no_run
//! use rdmalib::{Client, Config, NotifyKind, Server};
//! # fn main() -> rdmalib::Result<()> {
//! // Server: accept, then wait until the client put data into our buffer.
//! let mut server = Server::bind("0.0.0.0:7471".parse().unwrap(), Config::default())?;
//! let mut conn = server.accept()?;
//! let n = conn.wait_notification()?;
//! assert_eq!(n.kind, NotifyKind::Write);
//! let data = conn.buffer().to_vec(n.offset as usize, n.len as usize)?;
//! # let _ = data;
//!
//! // Client: fill our buffer, write it into the server's, tell it.
//! let client = Client::new("127.0.0.1:7471".parse().unwrap(), Config::default())?;
//! client.buffer().write(0, b"hello")?;
//! let mut conn = client.connect()?;
//! conn.write(0, 0, 5)?; // local offset 0 -> remote offset 0, 5 bytes
//! conn.notify_write(0, 5)?;
//! conn.close()?;
//! # Ok(()) }
//! ```
//!
//! ## The contract
//!
//! **Buffers.** Each side has one [`Buffer`] of [`Config::buffer_size`]
//! bytes, registered once per connection (local write, remote write, remote
//! read) together with `recv_depth` receive slots and one send slot of
//! [`Config::max_message`] bytes each; nothing is registered per operation.
//! The buffer's address, rkey and size, and the largest message the side
//! receives, travel in the CM private data of the connection request (client)
//! and reply (server) — layout in [`wire`] — so a write or read needs no
//! extra round trip, and both are checked against the peer's advertised
//! size before anything is posted ([`Error::RemoteOutOfBounds`]).
//!
//! **Completion.** Every operation returns when it completed: a message,
//! write or notification when the peer's device acknowledged it (the data is
//! in the peer's memory), a read when the data is in the local buffer.
//! Operations take `&mut self` (one at a time per connection); different
//! connections are independent and `Send`.
//!
//! **Notifications** are SEND WITH IMMEDIATE work requests: the immediate
//! value says "write" or "read" ([`wire::IMM_NOTIFY_WRITE`],
//! [`wire::IMM_NOTIFY_READ`]) and the 16-byte payload the range of the
//! receiver's buffer. They use the same receive queue as messages, in order
//! with them and after every preceding write (an RC queue pair executes in
//! order), so when the receiver sees a write notification the data is in
//! its buffer. The receiver waits in [`Connection::wait_notification`]:
//! busy-polling its completion queue ([`Mode::Polling`]) or asleep on the
//! completion channel's file descriptor ([`Mode::Event`]). Messages and
//! notifications that arrive while the other kind is awaited are queued,
//! never lost. Flow control beyond that (when may the writer reuse a range)
//! is the application's: the examples answer each write notification with a
//! message or a read notification.
//!
//! **Receive slots.** `recv_depth` slots are posted before connecting and
//! re-posted as soon as their content is taken off the completion queue
//! (copied into the queues of the connection). A peer that sends faster than
//! this side takes messages is held back by RNR retries (forever), not
//! failed.
//!
//! **Failures.** A peer that disconnects, or whose process dies, ends every
//! pending and later wait with [`Error::Disconnected`] (after the messages
//! and notifications it sent before): the CM moves the queue pair to the
//! error state on the peer's disconnect request, on a keepalive that finds
//! the peer's port closed, or the transport gives up after its retries.
//! Nothing waits forever for a dead peer. [`Config::timeout`] bounds every
//! wait in addition ([`Error::Timeout`], the connection stays usable). A
//! failed work request ([`Error::Completion`]) leaves the connection down.
//! Using a closed connection, or closing it twice, is [`Error::Closed`].
//! [`Error::errno`] gives the errno the C API (`rdmalib.h`) sets.
//!
//! **Modes.** [`Mode::Polling`] spins on the completion queue (lowest
//! latency, a core per waiting thread); [`Mode::Event`] arms the CQ and
//! sleeps on its completion channel. Connection setup always sleeps on the
//! CM event channel.
//!
//! **Async.** With the `tokio` feature every blocking call has an `_async`
//! twin (`Server::accept_async`, `Client::connect_async`,
//! `Connection::recv_async`, ...): event mode awaits the completion
//! channel's fd, polling mode polls and yields to the runtime between
//! polls. A timeout needs a runtime with the time driver.
//!
//! **Devices.** One softrdma device per process ([`Server::bind`],
//! [`Client::new`]) or explicit devices ([`Server::bind_on`],
//! [`Client::on`]), e.g. two in one process for tests.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod buffer;
mod config;
mod conn;
mod endpoint;
mod error;
pub mod wire;

pub use buffer::Buffer;
pub use config::{Config, MAX_MESSAGE_LIMIT, Mode};
pub use conn::{Connection, Notification, NotifyKind};
pub use endpoint::{Client, Server, connect};
pub use error::{Error, Op, Result};
pub use softrdma;
