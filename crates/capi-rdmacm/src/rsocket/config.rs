//! rdma-core's rsocket configuration files (`rs_configure` in its
//! `rsocket.c`): one number per file in `/etc/rdma/rsocket`
//! (`SOFTRDMA_RS_CONF_DIR` names another directory): `polling_time` (µs a
//! waiter polls before it sleeps), `inline_default`, `sqsize_default`,
//! `rqsize_default`, `mem_default` (receive buffer), `wmem_default` (send
//! buffer) and `iomap_size`, the defaults of new stream sockets. A missing
//! or unreadable file leaves the built-in default (rdma-core's); the bounds
//! are rdma-core's.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use super::conn::Sizes;
use super::proto::{SGE_SIZE, SNDLOWAT, scale_to_value, value_to_scale};

/// What the files set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Config {
    /// `polling_time`, if the file exists (else the adaptive spin).
    pub(super) polling_time: Option<Duration>,
    pub(super) sizes: Sizes,
}

fn read_u32(dir: &Path, name: &str) -> Option<u32> {
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Reads the files of `dir`.
pub(super) fn load(dir: &Path) -> Config {
    let mut s = Sizes::default();
    if let Some(v) = read_u32(dir, "inline_default") {
        s.inline = v.max(SGE_SIZE as u32);
    }
    if let Some(v) = read_u32(dir, "sqsize_default") {
        s.sq = v.min(u16::MAX as u32);
    }
    if let Some(v) = read_u32(dir, "rqsize_default") {
        s.rq = v.min(u16::MAX as u32);
    }
    if let Some(v) = read_u32(dir, "mem_default") {
        s.rbuf = v.max(1);
    }
    if let Some(v) = read_u32(dir, "wmem_default") {
        s.sbuf = if v < SNDLOWAT { SNDLOWAT << 1 } else { v };
    }
    if let Some(v) = read_u32(dir, "iomap_size") {
        s.iomap = scale_to_value(value_to_scale(v.min(u16::MAX as u32), 8), 8);
    }
    Config {
        polling_time: read_u32(dir, "polling_time").map(|us| Duration::from_micros(us.into())),
        sizes: s,
    }
}

/// The process's configuration, read once.
pub(super) fn get() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| {
        let dir =
            std::env::var_os("SOFTRDMA_RS_CONF_DIR").unwrap_or_else(|| "/etc/rdma/rsocket".into());
        load(Path::new(&dir))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_set_defaults_within_rdma_core_bounds() {
        let dir = std::env::temp_dir().join(format!("rs-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let none = load(&dir);
        assert_eq!(none.polling_time, None);
        assert_eq!(none.sizes, Sizes::default());
        for (name, v) in [
            ("polling_time", "25\n"),
            ("inline_default", "4"),
            ("sqsize_default", "100"),
            ("rqsize_default", "200000"),
            ("mem_default", "1048576"),
            ("wmem_default", "100"),
            ("iomap_size", "1000"),
        ] {
            std::fs::write(dir.join(name), v).unwrap();
        }
        let c = load(&dir);
        assert_eq!(c.polling_time, Some(Duration::from_micros(25)));
        assert_eq!(c.sizes.inline, 16, "at least one SGE inline");
        assert_eq!(c.sizes.sq, 100);
        assert_eq!(c.sizes.rq, 65535);
        assert_eq!(c.sizes.rbuf, 1 << 20);
        assert_eq!(c.sizes.sbuf, SNDLOWAT << 1, "below the low-water mark");
        assert_eq!(c.sizes.iomap, 768, "rounded to the 8-bit scale");
        std::fs::write(dir.join("mem_default"), "junk").unwrap();
        assert_eq!(load(&dir).sizes.rbuf, Sizes::default().rbuf);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
