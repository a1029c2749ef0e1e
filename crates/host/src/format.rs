//! On-disk record formats and file names.
//!
//! Every record is text: a magic line naming the kind and version, `key=value` lines, and
//! a final `end` line. A record without its `end` line, with a wrong magic line, or with a
//! missing or unparsable value is garbage and is treated as absent — never a panic.

use std::net::IpAddr;
use std::str::FromStr;

use crate::GroupState;
use crate::addr::{decode_addr, encode_addr};

const SLOT_MAGIC: &str = "softrdma-slot 1";
const LEASE_MAGIC: &str = "softrdma-lease 1";
const GROUP_MAGIC: &str = "softrdma-group 1";
const REPORT_MAGIC: &str = "softrdma-report 1";
const INBOX_MAGIC: &str = "softrdma-inbox 1";

pub(crate) const LOCK_NAME: &str = "lock";
pub(crate) const SLOT_PREFIX: &str = "slot-";
pub(crate) const LEASE_PREFIX: &str = "port-";
pub(crate) const GROUP_PREFIX: &str = "group-";
pub(crate) const REPORT_PREFIX: &str = "report-";
pub(crate) const INBOX_PREFIX: &str = "inbox-";

struct Fields<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Fields<'a> {
    fn parse(text: &'a str, magic: &str) -> Option<Self> {
        let mut lines = text.split('\n');
        if lines.next()? != magic {
            return None;
        }
        let mut fields = Vec::new();
        for line in lines {
            if line == "end" {
                return Some(Fields(fields));
            }
            fields.push(line.split_once('=')?);
        }
        None
    }

    fn get<T: FromStr>(&self, key: &str) -> Option<T> {
        let (_, v) = self.0.iter().find(|(k, _)| *k == key)?;
        v.parse().ok()
    }
}

/// Contents of `slot-<n>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlotRecord {
    /// Incremented on every take; 1 for the first holder.
    pub(crate) generation: u64,
    /// Process id of the (last) holder.
    pub(crate) pid: u32,
    /// When the (last) holder took the slot.
    pub(crate) taken_ms: u64,
    /// When the slot was released or first seen dead; 0 (or older than `taken_ms`) while
    /// held or before anyone noticed the holder's death.
    pub(crate) freed_ms: u64,
}

impl SlotRecord {
    pub(crate) fn render(&self) -> String {
        format!(
            "{SLOT_MAGIC}\ngeneration={}\npid={}\ntaken_ms={}\nfreed_ms={}\nend\n",
            self.generation, self.pid, self.taken_ms, self.freed_ms
        )
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        let f = Fields::parse(text, SLOT_MAGIC)?;
        Some(SlotRecord {
            generation: f.get("generation")?,
            pid: f.get("pid")?,
            taken_ms: f.get("taken_ms")?,
            freed_ms: f.get("freed_ms")?,
        })
    }

    /// The holder died without releasing the slot and nobody has recorded it yet.
    pub(crate) fn death_unrecorded(&self) -> bool {
        self.freed_ms == 0 || self.freed_ms < self.taken_ms
    }
}

/// Contents of a lease file (its key — space, port, address — is in its name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseRecord {
    pub(crate) slot: u8,
    pub(crate) generation: u64,
    pub(crate) listening: bool,
}

impl LeaseRecord {
    /// Always the same length for a given slot and generation, so flipping `listening`
    /// rewrites the record without changing its size.
    pub(crate) fn render(&self) -> String {
        format!(
            "{LEASE_MAGIC}\nslot={}\ngeneration={}\nlistening={}\nend\n",
            self.slot,
            self.generation,
            u8::from(self.listening)
        )
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        let f = Fields::parse(text, LEASE_MAGIC)?;
        let listening = match f.get::<u8>("listening")? {
            0 => false,
            1 => true,
            _ => return None,
        };
        Some(LeaseRecord {
            slot: f.get::<u8>("slot").filter(|&s| s != 0)?,
            generation: f.get("generation")?,
            listening,
        })
    }
}

pub(crate) fn render_group(s: &GroupState) -> String {
    let members: Vec<String> = s.members.iter().map(u8::to_string).collect();
    format!(
        "{GROUP_MAGIC}\nepoch={}\nmembers={}\nend\n",
        s.epoch,
        members.join(",")
    )
}

pub(crate) fn parse_group(text: &str) -> Option<GroupState> {
    let f = Fields::parse(text, GROUP_MAGIC)?;
    let list: String = f.get("members")?;
    let members = if list.is_empty() {
        Vec::new()
    } else {
        list.split(',')
            .map(|s| s.parse::<u8>().ok().filter(|&n| n != 0))
            .collect::<Option<Vec<u8>>>()?
    };
    Some(GroupState {
        epoch: f.get("epoch")?,
        members,
    })
}

/// Contents of a report file: (epoch, index).
pub(crate) fn render_report(epoch: u32, index: u32) -> String {
    format!("{REPORT_MAGIC}\nepoch={epoch}\nindex={index}\nend\n")
}

pub(crate) fn parse_report(text: &str) -> Option<(u32, u32)> {
    let f = Fields::parse(text, REPORT_MAGIC)?;
    Some((f.get("epoch")?, f.get("index")?))
}

/// Contents of an inbox file: the descriptor of the member's shared-memory inbox.
pub(crate) fn render_inbox(fd: i32) -> String {
    format!("{INBOX_MAGIC}\nfd={fd}\nend\n")
}

pub(crate) fn parse_inbox(text: &str) -> Option<i32> {
    Fields::parse(text, INBOX_MAGIC)?.get("fd")
}

// ---- names -------------------------------------------------------------------------

/// `n.to_string()` parsed back, rejecting non-canonical spellings ("07", "+7") so one
/// value has exactly one file name.
fn canonical<T: FromStr + ToString>(s: &str) -> Option<T> {
    let v: T = s.parse().ok()?;
    (v.to_string() == s).then_some(v)
}

pub(crate) fn slot_name(slot: u8) -> String {
    format!("{SLOT_PREFIX}{slot}")
}

pub(crate) fn parse_slot_name(name: &str) -> Option<u8> {
    canonical::<u8>(name.strip_prefix(SLOT_PREFIX)?).filter(|&n| n != 0)
}

/// `port-<space as 4 hex digits>-<port>-<address>`.
pub(crate) fn lease_name(space: u16, port: u16, addr: IpAddr) -> String {
    format!("{LEASE_PREFIX}{space:04x}-{port}-{}", encode_addr(addr))
}

pub(crate) fn parse_lease_name(name: &str) -> Option<(u16, u16, IpAddr)> {
    let mut parts = name.strip_prefix(LEASE_PREFIX)?.splitn(3, '-');
    let space = parts.next()?;
    let port = canonical::<u16>(parts.next()?)?;
    let addr = decode_addr(parts.next()?)?;
    let space = u16::from_str_radix(space, 16).ok()?;
    (lease_name(space, port, addr) == name).then_some((space, port, addr))
}

pub(crate) fn group_name(addr: IpAddr) -> String {
    format!("{GROUP_PREFIX}{}", encode_addr(addr))
}

pub(crate) fn parse_group_name(name: &str) -> Option<IpAddr> {
    decode_addr(name.strip_prefix(GROUP_PREFIX)?)
}

/// `report-<address>-<slot>-<generation>`: one file per member incarnation, so a new
/// holder of a slot never overwrites (or inherits) its predecessor's report.
pub(crate) fn report_name(addr: IpAddr, slot: u8, generation: u64) -> String {
    format!("{REPORT_PREFIX}{}-{slot}-{generation}", encode_addr(addr))
}

pub(crate) fn parse_report_name(name: &str) -> Option<(IpAddr, u8, u64)> {
    let mut parts = name.strip_prefix(REPORT_PREFIX)?.splitn(3, '-');
    let addr = decode_addr(parts.next()?)?;
    let slot = canonical::<u8>(parts.next()?).filter(|&n| n != 0)?;
    let generation = canonical::<u64>(parts.next()?)?;
    Some((addr, slot, generation))
}

/// `inbox-<slot>-<generation>`: per member incarnation, like reports.
pub(crate) fn inbox_name(slot: u8, generation: u64) -> String {
    format!("{INBOX_PREFIX}{slot}-{generation}")
}

pub(crate) fn parse_inbox_name(name: &str) -> Option<(u8, u64)> {
    let (slot, generation) = name.strip_prefix(INBOX_PREFIX)?.split_once('-')?;
    let slot = canonical::<u8>(slot).filter(|&n| n != 0)?;
    Some((slot, canonical::<u64>(generation)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let s = SlotRecord {
            generation: 7,
            pid: 1234,
            taken_ms: 100,
            freed_ms: 0,
        };
        assert_eq!(SlotRecord::parse(&s.render()), Some(s));
        let l = LeaseRecord {
            slot: 3,
            generation: 9,
            listening: true,
        };
        assert_eq!(LeaseRecord::parse(&l.render()), Some(l));
        let off = LeaseRecord {
            listening: false,
            ..l
        };
        assert_eq!(off.render().len(), l.render().len());
        for g in [
            GroupState::default(),
            GroupState {
                epoch: 4,
                members: vec![3, 1, 255],
            },
        ] {
            assert_eq!(parse_group(&render_group(&g)), Some(g));
        }
        assert_eq!(parse_report(&render_report(5, 2)), Some((5, 2)));
    }

    #[test]
    fn garbage_records_are_absent() {
        let good = SlotRecord {
            generation: 1,
            pid: 1,
            taken_ms: 1,
            freed_ms: 0,
        }
        .render();
        // Torn (no end line), wrong magic, bad numbers, empty, binary.
        let torn = &good[..good.len() - 4];
        for bad in [
            torn,
            "",
            "end\n",
            "softrdma-slot 2\ngeneration=1\npid=1\ntaken_ms=1\nfreed_ms=0\nend\n",
            "softrdma-slot 1\ngeneration=x\npid=1\ntaken_ms=1\nfreed_ms=0\nend\n",
            "softrdma-slot 1\ngeneration=1\nend\n",
            "softrdma-slot 1\ngarbage\nend\n",
            "\u{0}\u{1}\u{2}",
        ] {
            assert_eq!(SlotRecord::parse(bad), None, "{bad:?}");
        }
        // Trailing bytes after `end` (a shorter rewrite over a longer record) are ignored.
        assert!(SlotRecord::parse(&format!("{good}freed_ms=5\n")).is_some());
        assert_eq!(
            parse_group("softrdma-group 1\nepoch=1\nmembers=1,0\nend\n"),
            None
        );
        assert_eq!(
            parse_group("softrdma-group 1\nepoch=1\nmembers=1,,2\nend\n"),
            None
        );
        assert_eq!(
            parse_group("softrdma-group 1\nepoch=1\nmembers=256\nend\n"),
            None
        );
        assert_eq!(
            LeaseRecord::parse("softrdma-lease 1\nslot=1\ngeneration=1\nlistening=2\nend\n"),
            None
        );
    }

    #[test]
    fn names_round_trip_and_reject_garbage() {
        let a: IpAddr = "fe80::1".parse().unwrap();
        let b: IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(parse_slot_name(&slot_name(255)), Some(255));
        for bad in ["slot-0", "slot-256", "slot-07", "slot-", "slot-x", "lock"] {
            assert_eq!(parse_slot_name(bad), None, "{bad}");
        }
        assert_eq!(lease_name(0x0106, 18515, b), "port-0106-18515-10.1.2.3");
        assert_eq!(
            parse_lease_name(&lease_name(0x013f, 0, a)),
            Some((0x013f, 0, a))
        );
        for bad in [
            "port-106-1-10.1.2.3",
            "port-0106-01-10.1.2.3",
            "port-0106-70000-10.1.2.3",
            "port-0106-1-10.1.2",
            "port-0106-1",
            "port-zzzz-1-10.1.2.3",
        ] {
            assert_eq!(parse_lease_name(bad), None, "{bad}");
        }
        assert_eq!(parse_group_name(&group_name(a)), Some(a));
        assert_eq!(parse_report_name(&report_name(b, 9, 12)), Some((b, 9, 12)));
        assert_eq!(parse_report_name("report-10.1.2.3-0-1"), None);
        assert_eq!(parse_inbox_name(&inbox_name(7, 3)), Some((7, 3)));
        assert_eq!(parse_inbox_name("inbox-0-3"), None);
        assert_eq!(parse_inbox(&render_inbox(17)), Some(17));
        assert_eq!(parse_report_name("report-10.1.2.3-1"), None);
    }
}
