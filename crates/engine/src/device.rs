//! What the device reports about itself (`ibv_query_device` / `ibv_query_port`).

use softrdma_transport::DeviceLimits;
use std::net::IpAddr;

/// Device name in `ibv_get_device_list`.
pub const DEVICE_NAME: &str = "softrdma0";
/// Not a Mellanox/Intel/Chelsio vendor id, so perftest takes its generic paths.
pub const VENDOR_ID: u32 = 0x00FF_FFFF;
/// Unknown part id (perftest: "old post send", inline 0).
pub const VENDOR_PART_ID: u32 = 0;
/// Firmware version string.
pub const FW_VER: &str = concat!("softrdma ", env!("CARGO_PKG_VERSION"));

/// Static facts about the device.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceInfo {
    /// Name.
    pub name: &'static str,
    /// Node GUID: an EUI-64 built from the address (host order; `to_be_bytes` for the wire).
    pub node_guid: u64,
    /// Limits.
    pub limits: DeviceLimits,
}

impl DeviceInfo {
    /// The description of the device at `addr`.
    pub fn new(addr: IpAddr) -> DeviceInfo {
        let mut limits = DeviceLimits::default();
        limits.port_mtu = path_mtu_for(addr);
        DeviceInfo {
            name: DEVICE_NAME,
            node_guid: guid_for(addr),
            limits,
        }
    }
}

/// EUI-64 from a locally administered MAC derived from the address:
/// 02:xx:aa:bb:cc:dd → 02xx:aaff:febb:ccdd, with xx mixing in IPv6 bits.
pub fn guid_for(addr: IpAddr) -> u64 {
    let o: [u8; 4] = match addr {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => {
            let b = a.octets();
            [b[12] ^ b[0], b[13] ^ b[1], b[14] ^ b[2], b[15] ^ b[3]]
        }
    };
    let mac = [0x02, 0x00, o[0], o[1], o[2], o[3]];
    u64::from_be_bytes([mac[0], mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]])
}

/// Device attributes (`struct ibv_device_attr`), as abi.md §4.1 recommends.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: String,
    /// Node GUID (host order).
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Supported page sizes.
    pub page_size_cap: u64,
    /// Vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// QPs.
    pub max_qp: u32,
    /// WRs per queue.
    pub max_qp_wr: u32,
    /// `enum ibv_device_cap_flags` bits.
    pub device_cap_flags: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// SGEs per READ.
    pub max_sge_rd: u32,
    /// CQs.
    pub max_cq: u32,
    /// Entries per CQ.
    pub max_cqe: u32,
    /// MRs.
    pub max_mr: u32,
    /// PDs.
    pub max_pd: u32,
    /// Outstanding READ/atomic per QP as responder.
    pub max_qp_rd_atom: u32,
    /// Total responder resources.
    pub max_res_rd_atom: u32,
    /// Outstanding READ/atomic per QP as requester.
    pub max_qp_init_rd_atom: u32,
    /// `IBV_ATOMIC_HCA` (1).
    pub atomic_cap: u32,
    /// Memory windows.
    pub max_mw: u32,
    /// Multicast groups.
    pub max_mcast_grp: u32,
    /// QPs per multicast group.
    pub max_mcast_qp_attach: u32,
    /// Total multicast attachments.
    pub max_total_mcast_qp_attach: u32,
    /// Address handles.
    pub max_ah: u32,
    /// SRQs.
    pub max_srq: u32,
    /// WRs per SRQ.
    pub max_srq_wr: u32,
    /// SGEs per SRQ WR.
    pub max_srq_sge: u32,
    /// P_Keys.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Ports.
    pub phys_port_cnt: u8,
}

/// `IBV_DEVICE_*` capability bits the device reports.
pub mod cap_flags {
    /// RC RNR NAK generation.
    pub const RC_RNR_NAK_GEN: u32 = 1 << 12;
    /// SRQ resize.
    pub const SRQ_RESIZE: u32 = 1 << 13;
    /// Port active event.
    pub const PORT_ACTIVE_EVENT: u32 = 1 << 10;
    /// Shutdown port.
    pub const SHUTDOWN_PORT: u32 = 1 << 8;
    /// System image GUID.
    pub const SYS_IMAGE_GUID: u32 = 1 << 11;
    /// Change of physical port state.
    pub const CHANGE_PHY_PORT: u32 = 1 << 5;
}

/// The GID table length port 1 reports, Linux rxe's (`RXE_PORT_GID_TBL_LEN`,
/// 1024): the entries past the device's addresses are empty, reading as zeros
/// (`ibv_query_gid`) or `ENODATA` (`ibv_query_gid_ex`), as rxe's do, and
/// programs that scan the table (`ibv_devinfo`, perftest, pyverbs) find an
/// empty index as they do on rxe.
pub const GID_TBL_LEN: usize = 1024;

/// Port attributes (`struct ibv_port_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PortAttr {
    /// `IBV_PORT_ACTIVE` (4).
    pub state: u32,
    /// `IBV_MTU_4096` (5).
    pub max_mtu: u32,
    /// Active MTU.
    pub active_mtu: u32,
    /// GID table length.
    pub gid_tbl_len: i32,
    /// `IBV_PORT_CM_SUP`.
    pub port_cap_flags: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// SM LID.
    pub sm_lid: u16,
    /// LMC.
    pub lmc: u8,
    /// Virtual lanes.
    pub max_vl_num: u8,
    /// SM SL.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// `IBV_WIDTH_4X` (2).
    pub active_width: u8,
    /// `IBV_SPEED_*`.
    pub active_speed: u8,
    /// Physical state: LinkUp (5).
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_ETHERNET` (2).
    pub link_layer: u8,
    /// Flags.
    pub flags: u8,
    /// Capability flags 2.
    pub port_cap_flags2: u16,
}

impl DeviceInfo {
    /// The attributes `ibv_query_device` reports.
    pub fn attr(&self) -> DeviceAttr {
        let l = &self.limits;
        DeviceAttr {
            fw_ver: FW_VER.to_string(),
            node_guid: self.node_guid,
            sys_image_guid: self.node_guid,
            max_mr_size: 1 << 48,
            page_size_cap: 0xFFFF_F000,
            vendor_id: VENDOR_ID,
            vendor_part_id: VENDOR_PART_ID,
            hw_ver: 0,
            max_qp: l.max_qp,
            max_qp_wr: l.max_qp_wr,
            device_cap_flags: cap_flags::RC_RNR_NAK_GEN
                | cap_flags::SRQ_RESIZE
                | cap_flags::PORT_ACTIVE_EVENT
                | cap_flags::SHUTDOWN_PORT
                | cap_flags::SYS_IMAGE_GUID
                | cap_flags::CHANGE_PHY_PORT,
            max_sge: l.max_sge,
            max_sge_rd: l.max_sge,
            max_cq: l.max_cq,
            max_cqe: l.max_cqe,
            max_mr: l.max_mr,
            max_pd: l.max_pd,
            max_qp_rd_atom: l.max_qp_rd_atom,
            max_res_rd_atom: l.max_res_rd_atom,
            max_qp_init_rd_atom: l.max_qp_rd_atom,
            atomic_cap: 1,
            max_mw: 0,
            max_mcast_grp: 8192,
            max_mcast_qp_attach: 56,
            max_total_mcast_qp_attach: 8192 * 56,
            max_ah: 1 << 20,
            max_srq: l.max_srq,
            max_srq_wr: l.max_srq_wr,
            max_srq_sge: l.max_srq_sge,
            max_pkeys: 1,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
        }
    }

    /// The attributes of port 1, given how many GIDs the device has
    /// (`gids()`, empty entries included): the table is [`GID_TBL_LEN`]
    /// long, or as long as the GIDs if there are more.
    pub fn port_attr(&self, gids: usize) -> PortAttr {
        let gid_tbl_len = gids.max(GID_TBL_LEN);
        PortAttr {
            state: 4,
            max_mtu: self.limits.port_mtu.as_u32(),
            active_mtu: self.limits.port_mtu.as_u32(),
            gid_tbl_len: gid_tbl_len as i32,
            port_cap_flags: 1 << 16, // IBV_PORT_CM_SUP
            max_msg_sz: self.limits.max_msg_sz,
            bad_pkey_cntr: 0,
            qkey_viol_cntr: 0,
            pkey_tbl_len: 1,
            lid: 0,
            sm_lid: 0,
            lmc: 0,
            max_vl_num: 1,
            sm_sl: 0,
            subnet_timeout: 0,
            init_type_reply: 0,
            active_width: 2,
            active_speed: 32, // IBV_SPEED_EDR (25 Gb/s lanes): any valid value
            phys_state: 5,
            link_layer: 2,
            flags: 0,
            port_cap_flags2: 0,
        }
    }
}

/// The IB MTU for the interface that owns `ip`: the interface MTU minus
/// RoCEv2 headers (rxe: `netdev_mtu - 80`), rounded down to an IB MTU.
/// Loopback (65536) gives 4096; a 1500-byte Ethernet link gives 1024.
pub fn path_mtu_for(ip: IpAddr) -> softrdma_transport::Mtu {
    use softrdma_transport::Mtu;
    let mtu = iface_mtu(ip).unwrap_or(if ip.is_loopback() { 65536 } else { 1500 });
    match mtu.saturating_sub(80) {
        m if m >= 4096 => Mtu::M4096,
        m if m >= 2048 => Mtu::M2048,
        m if m >= 1024 => Mtu::M1024,
        m if m >= 512 => Mtu::M512,
        _ => Mtu::M256,
    }
}

/// The MTU of the interface holding `ip` (from getifaddrs and sysfs).
fn iface_mtu(ip: IpAddr) -> Option<usize> {
    let name = iface_of(ip)?;
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn iface_of(ip: IpAddr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` walks the list getifaddrs returned; nodes stay valid until freeifaddrs.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: `ifa_addr` points to a sockaddr whose family says its real type.
            let fam = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            let addr = match fam {
                libc::AF_INET => {
                    // SAFETY: AF_INET addresses are sockaddr_in.
                    let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                    Some(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()))
                }
                libc::AF_INET6 => {
                    // SAFETY: AF_INET6 addresses are sockaddr_in6.
                    let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                    Some(IpAddr::from(a.sin6_addr.s6_addr))
                }
                _ => None,
            };
            if addr == Some(ip) {
                // SAFETY: ifa_name is a NUL-terminated string valid until freeifaddrs.
                let n = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
                found = Some(n.to_string_lossy().into_owned());
                break;
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    found
}
