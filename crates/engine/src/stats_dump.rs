//! `SOFTRDMA_STATS=FILE`: the device's counters appended to FILE when the
//! process exits (or a non-global engine is dropped), for `softrdma stats`.
//!
//! One block per device, written with one `write(2)` to a file opened with
//! `O_APPEND` so blocks of concurrent processes never interleave:
//!
//! ```text
//! # softrdma-stats 1
//! pid 4242
//! device softrdma0
//! addr 127.0.0.1:4791
//! when exit
//! tx_packets 1234
//! ...
//! ```
//!
//! Counter lines are `Stats::named`, `SocketStats::named` and the same-host
//! path's (`shm_*`, present when it is on); readers ignore
//! keys they do not know.

use crate::Engine;
use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::path::Path;

/// The line that starts a block (followed by the format version).
pub const BLOCK_MARK: &str = "# softrdma-stats";

/// The environment variable naming the dump file.
pub const ENV_STATS: &str = "SOFTRDMA_STATS";

impl Engine {
    /// This device's counters as one dump block labelled `when`.
    pub fn stats_block(&self, when: &str) -> String {
        let (s, k) = self.stats();
        let mut out = format!(
            "{BLOCK_MARK} 1\npid {}\ndevice {}\naddr {}\nwhen {when}\n",
            std::process::id(),
            crate::device::DEVICE_NAME,
            self.local_addr(),
        );
        for (name, v) in s
            .named()
            .into_iter()
            .chain(k.named())
            .chain(self.shm_counters())
            .chain(self.host_counters())
            .chain(self.waiter_counters())
        {
            let _ = writeln!(out, "{name} {v}");
        }
        out
    }

    /// Appends [`Engine::stats_block`] to `path` in one write.
    pub fn append_stats(&self, path: &Path, when: &str) -> io::Result<()> {
        let block = self.stats_block(when);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        f.write_all(block.as_bytes())
    }
}

impl Engine {
    /// Sends what is still queued and writes the counters if configured;
    /// nothing if `exit(3)` interrupted this thread holding an engine lock
    /// (lost like a crash's: peers retransmit or time out).
    pub(crate) fn at_exit(&self) {
        if !self.exit_locks_free() {
            return;
        }
        self.flush_for_exit();
        self.leave_host();
        if let Some(p) = &self.stats_path {
            let _ = self.append_stats(p, "exit");
        }
    }
}

/// Registers, once, what the process-wide engine does at `exit(3)`: send the
/// packets it still holds (a deferred ACK the peer waits for) and write the
/// counters if `SOFTRDMA_STATS` asks for them. The global engine lives in a
/// static and is never dropped, so `Drop` cannot do this for it.
pub(crate) fn register_exit_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: `at_exit` is an `extern "C" fn()` that never unwinds.
        unsafe { libc::atexit(at_exit) };
    });
}

extern "C" fn at_exit() {
    // No unwinding out of an atexit handler.
    let _ = std::panic::catch_unwind(|| {
        if let Some(e) = Engine::global_if_started() {
            e.at_exit();
        }
    });
}
