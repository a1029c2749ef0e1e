//! How a connection is set up: [`Config`] and the waiting [`Mode`].

use crate::error::{Error, Result};
use std::time::Duration;

/// The largest [`Config::max_message`].
pub const MAX_MESSAGE_LIMIT: usize = 1 << 30;

/// How a connection waits for completions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Busy-poll the completion queue (lowest latency; a waiting thread
    /// keeps a core busy). The seed's `cq_notify = 0`.
    #[default]
    Polling,
    /// Sleep on a completion channel until the device reports a completion
    /// (an idle wait costs no CPU). The seed's `cq_notify = 1`.
    Event,
}

/// What to set a connection up with. Both sides choose their own; what the
/// peer needs to know (buffer address, rkey, size, largest message) is
/// exchanged when connecting.
#[derive(Debug, Clone)]
pub struct Config {
    /// Bytes of the buffer the peer may RDMA WRITE into and READ from
    /// (registered once per connection). At least 1.
    pub buffer_size: usize,
    /// Largest message this side receives (the size of each receive slot);
    /// the peer's [`crate::Connection::send`] refuses larger ones. In
    /// 16..=2^30 (a notification takes 16 bytes).
    pub max_message: usize,
    /// Receive slots kept posted (messages and notifications the peer can
    /// have in flight before it waits for this side to take them).
    pub recv_depth: usize,
    /// Polling or event-driven waits.
    pub mode: Mode,
    /// Longest wait of any one step: connection setup, accepting a client,
    /// a completion, a message or a notification. `None` (the default): no
    /// limit (a dead peer is still noticed: transport retries, the CM's
    /// keepalive and its DREQ end every wait with an error).
    pub timeout: Option<Duration>,
}

impl Default for Config {
    /// A 64 KiB buffer, 64 KiB messages, 8 receive slots, polling, no timeout.
    fn default() -> Self {
        Config {
            buffer_size: 64 << 10,
            max_message: 64 << 10,
            recv_depth: 8,
            mode: Mode::Polling,
            timeout: None,
        }
    }
}

impl Config {
    /// The default configuration with `mode`.
    pub fn with_mode(mode: Mode) -> Config {
        Config {
            mode,
            ..Config::default()
        }
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.buffer_size == 0 {
            return Err(Error::InvalidArgument(
                "buffer_size must be at least 1".into(),
            ));
        }
        if self.max_message < crate::wire::NOTIFY_LEN || self.max_message > MAX_MESSAGE_LIMIT {
            return Err(Error::InvalidArgument(format!(
                "max_message must be in {}..={MAX_MESSAGE_LIMIT}",
                crate::wire::NOTIFY_LEN
            )));
        }
        if self.recv_depth == 0 || self.recv_depth > 4096 {
            return Err(Error::InvalidArgument(
                "recv_depth must be in 1..=4096".into(),
            ));
        }
        if self.recv_depth.checked_mul(self.max_message).is_none() {
            return Err(Error::InvalidArgument(
                "recv_depth * max_message overflows".into(),
            ));
        }
        Ok(())
    }
}
