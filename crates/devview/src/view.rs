//! What the device looks like under `/sys/class` and `/dev`: the files, as
//! Linux rdma_rxe lays them out (`drivers/infiniband/core/sysfs.c`).

use std::net::Ipv6Addr;
use std::path::PathBuf;

/// One filled GID table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID (an IPv4 address as `::ffff:a.b.c.d`).
    pub gid: Ipv6Addr,
    /// The network interface holding the address (`gid_attrs/ndevs/<i>`).
    pub ifname: Option<String>,
}

/// The device as the libraries report it; [`DeviceView::entries`] turns it
/// into files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceView {
    /// Device name (`softrdma0`).
    pub name: String,
    /// Node GUID, host order.
    pub node_guid: u64,
    /// Firmware version string.
    pub fw_ver: String,
    /// Port 1's capability flags.
    pub port_cap_flags: u32,
    /// GID table size; entries past `gids` are empty.
    pub gid_tbl_len: usize,
    /// The entries up to the last filled one, index 0 first; an all-zero
    /// GID is an empty entry.
    pub gids: Vec<GidEntry>,
    /// The CPUs the device is "near": all online ones.
    pub cpus: Vec<usize>,
}

/// A file system entry of the view; paths are relative to `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory.
    Dir(PathBuf),
    /// A regular file and its contents.
    File(PathBuf, String),
    /// A symbolic link and its target.
    Symlink(PathBuf, PathBuf),
    /// A character device node (a bind mount of `/dev/null`).
    CharDevice(PathBuf),
}

/// The uverbs node name the C ABI reports (`ibv_device.dev_name`).
pub(crate) const UVERBS_NAME: &str = "uverbs0";

/// `0x0200_7fff_fe00_0001` → `0200:7fff:fe00:0001`.
fn guid_groups(g: u64) -> String {
    let w = |s: u32| (g >> s) & 0xFFFF;
    format!("{:04x}:{:04x}:{:04x}:{:04x}", w(48), w(32), w(16), w(0))
}

/// A GID as sysfs prints it: eight groups of four hex digits.
fn gid_text(gid: &Ipv6Addr) -> String {
    let s = gid.segments();
    s.iter()
        .map(|w| format!("{w:04x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A CPU set as the kernel's `%*pb` prints it: 32-bit hex words, most
/// significant first, comma-separated, the first one without padding.
pub(crate) fn cpumask(cpus: &[usize]) -> String {
    let bits = cpus.iter().max().map_or(1, |m| m + 1);
    let words = bits.div_ceil(32);
    let mut w = vec![0u32; words];
    for &c in cpus {
        w[c / 32] |= 1 << (c % 32);
    }
    let first_digits = (bits - 32 * (words - 1)).div_ceil(4);
    let mut out = format!("{:0first_digits$x}", w[words - 1]);
    for word in w.iter().rev().skip(1) {
        out.push_str(&format!(",{word:08x}"));
    }
    out
}

/// `[0, 1, 2, 5]` → `0-2,5`.
pub(crate) fn cpulist(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

impl DeviceView {
    /// The files of the view, each directory before what it holds.
    pub fn entries(&self) -> Vec<Entry> {
        let mut out = Vec::new();
        let dev = PathBuf::from("sys/class/infiniband").join(&self.name);
        let port = dev.join("ports/1");
        let dir = |out: &mut Vec<Entry>, p: PathBuf| out.push(Entry::Dir(p));
        let file = |out: &mut Vec<Entry>, p: PathBuf, s: &str| {
            out.push(Entry::File(p, format!("{s}\n")));
        };

        dir(&mut out, "sys/class/infiniband".into());
        dir(&mut out, dev.clone());
        file(&mut out, dev.join("node_type"), "1: CA");
        file(
            &mut out,
            dev.join("node_guid"),
            &guid_groups(self.node_guid),
        );
        file(
            &mut out,
            dev.join("sys_image_guid"),
            &guid_groups(self.node_guid),
        );
        file(&mut out, dev.join("node_desc"), &self.name);
        file(&mut out, dev.join("fw_ver"), &self.fw_ver);
        file(&mut out, dev.join("hw_rev"), "0");

        // `device` is the parent device: the CPUs and NUMA node UCX reads,
        // and under `net` the net device pyverbs takes its address from.
        // An rxe device sits on one net device; ours spans them all, and
        // lists the one of GID 0 (its default address) there, while
        // `gid_attrs/ndevs` names each GID's.
        let parent = dev.join("device");
        dir(&mut out, parent.clone());
        file(&mut out, parent.join("local_cpus"), &cpumask(&self.cpus));
        file(&mut out, parent.join("local_cpulist"), &cpulist(&self.cpus));
        file(&mut out, parent.join("numa_node"), "-1");
        dir(&mut out, parent.join("net"));
        if let Some(ifname) = self.gids.first().and_then(|g| g.ifname.as_deref()) {
            out.push(Entry::Symlink(
                parent.join("net").join(ifname),
                PathBuf::from("/sys/class/net").join(ifname),
            ));
        }

        dir(&mut out, dev.join("ports"));
        dir(&mut out, port.clone());
        file(&mut out, port.join("state"), "4: ACTIVE");
        file(&mut out, port.join("phys_state"), "5: LinkUp");
        file(&mut out, port.join("link_layer"), "Ethernet");
        file(&mut out, port.join("rate"), "100 Gb/sec (4X EDR)");
        file(&mut out, port.join("lid"), "0x0");
        file(&mut out, port.join("sm_lid"), "0x0");
        file(&mut out, port.join("lid_mask_count"), "0");
        file(&mut out, port.join("sm_sl"), "0");
        file(
            &mut out,
            port.join("cap_mask"),
            &format!("{:#010x}", self.port_cap_flags),
        );
        dir(&mut out, port.join("pkeys"));
        file(&mut out, port.join("pkeys/0"), "0xffff");
        dir(&mut out, port.join("gids"));
        dir(&mut out, port.join("gid_attrs"));
        dir(&mut out, port.join("gid_attrs/types"));
        dir(&mut out, port.join("gid_attrs/ndevs"));
        for i in 0..self.gid_tbl_len.max(self.gids.len()) {
            let entry = self.gids.get(i).filter(|g| !g.gid.is_unspecified());
            let gid = entry.map_or(Ipv6Addr::UNSPECIFIED, |g| g.gid);
            file(&mut out, port.join(format!("gids/{i}")), &gid_text(&gid));
            // Empty entries have no type or net device (the kernel fails
            // the read; here the file is absent).
            if let Some(g) = entry {
                file(
                    &mut out,
                    port.join(format!("gid_attrs/types/{i}")),
                    "RoCE v2",
                );
                if let Some(ifname) = &g.ifname {
                    file(&mut out, port.join(format!("gid_attrs/ndevs/{i}")), ifname);
                }
            }
        }

        let verbs = PathBuf::from("sys/class/infiniband_verbs");
        dir(&mut out, verbs.clone());
        file(&mut out, verbs.join("abi_version"), "6");
        dir(&mut out, verbs.join(UVERBS_NAME));
        file(&mut out, verbs.join(UVERBS_NAME).join("ibdev"), &self.name);
        file(&mut out, verbs.join(UVERBS_NAME).join("abi_version"), "1");

        dir(&mut out, "dev/infiniband".into());
        out.push(Entry::CharDevice(
            PathBuf::from("dev/infiniband").join(UVERBS_NAME),
        ));
        out.push(Entry::CharDevice("dev/infiniband/rdma_cm".into()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn view() -> DeviceView {
        DeviceView {
            name: "softrdma0".into(),
            node_guid: 0x0200_7fff_fe00_0001,
            fw_ver: "softrdma 0.1.0".into(),
            port_cap_flags: 0x0401_0000,
            gid_tbl_len: 4,
            gids: vec![
                GidEntry {
                    gid: Ipv4Addr::LOCALHOST.to_ipv6_mapped(),
                    ifname: Some("lo".into()),
                },
                GidEntry {
                    gid: Ipv6Addr::LOCALHOST,
                    ifname: Some("lo".into()),
                },
            ],
            cpus: vec![0, 1],
        }
    }

    fn file<'a>(entries: &'a [Entry], path: &str) -> Option<&'a str> {
        entries.iter().find_map(|e| match e {
            Entry::File(p, s) if p == &PathBuf::from(path) => Some(s.as_str()),
            _ => None,
        })
    }

    #[test]
    fn rxe_layout() {
        let e = view().entries();
        let port = "sys/class/infiniband/softrdma0/ports/1";
        assert_eq!(
            file(&e, &format!("{port}/gids/0")),
            Some("0000:0000:0000:0000:0000:ffff:7f00:0001\n")
        );
        assert_eq!(
            file(&e, &format!("{port}/gids/3")),
            Some("0000:0000:0000:0000:0000:0000:0000:0000\n")
        );
        assert_eq!(
            file(&e, &format!("{port}/gid_attrs/types/1")),
            Some("RoCE v2\n")
        );
        assert_eq!(file(&e, &format!("{port}/gid_attrs/types/2")), None);
        assert_eq!(file(&e, &format!("{port}/gid_attrs/ndevs/0")), Some("lo\n"));
        assert_eq!(file(&e, &format!("{port}/state")), Some("4: ACTIVE\n"));
        assert_eq!(
            file(&e, "sys/class/infiniband/softrdma0/node_guid"),
            Some("0200:7fff:fe00:0001\n")
        );
        assert_eq!(
            file(&e, "sys/class/infiniband_verbs/uverbs0/ibdev"),
            Some("softrdma0\n")
        );
        let links: Vec<_> = e
            .iter()
            .filter(|x| matches!(x, Entry::Symlink(..)))
            .collect();
        assert_eq!(
            links,
            [&Entry::Symlink(
                "sys/class/infiniband/softrdma0/device/net/lo".into(),
                "/sys/class/net/lo".into()
            )],
            "GID 0's net device"
        );
        assert!(e.contains(&Entry::CharDevice("dev/infiniband/uverbs0".into())));
        // Every entry's directory comes before it.
        for (i, entry) in e.iter().enumerate() {
            let p = match entry {
                Entry::Dir(p) | Entry::File(p, _) | Entry::Symlink(p, _) | Entry::CharDevice(p) => {
                    p
                }
            };
            let parent = p.parent().unwrap();
            if parent.components().count() > 2 {
                assert!(
                    e[..i].contains(&Entry::Dir(parent.to_path_buf())),
                    "{} before its directory",
                    p.display()
                );
            }
        }
    }

    #[test]
    fn cpu_formats() {
        assert_eq!(cpumask(&[0, 1]), "3");
        assert_eq!(cpumask(&[0]), "1");
        assert_eq!(cpumask(&(0..40).collect::<Vec<_>>()), "ff,ffffffff");
        assert_eq!(cpumask(&(0..64).collect::<Vec<_>>()), "ffffffff,ffffffff");
        assert_eq!(cpulist(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(cpulist(&[3]), "3");
    }
}
