//! `<rdma/rdma_cma.h>`, `<rdma/rdma_verbs.h>` and `<rdma/rsocket.h>`
//! definitions (librdmacm 44).

use core::ffi::{c_int, c_void};

use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t};

use super::*;

/// `enum rdma_cm_event_type`.
pub type rdma_cm_event_type = core::ffi::c_uint;
pub const RDMA_CM_EVENT_ADDR_RESOLVED: rdma_cm_event_type = 0;
pub const RDMA_CM_EVENT_ADDR_ERROR: rdma_cm_event_type = 1;
pub const RDMA_CM_EVENT_ROUTE_RESOLVED: rdma_cm_event_type = 2;
pub const RDMA_CM_EVENT_ROUTE_ERROR: rdma_cm_event_type = 3;
pub const RDMA_CM_EVENT_CONNECT_REQUEST: rdma_cm_event_type = 4;
pub const RDMA_CM_EVENT_CONNECT_RESPONSE: rdma_cm_event_type = 5;
pub const RDMA_CM_EVENT_CONNECT_ERROR: rdma_cm_event_type = 6;
pub const RDMA_CM_EVENT_UNREACHABLE: rdma_cm_event_type = 7;
pub const RDMA_CM_EVENT_REJECTED: rdma_cm_event_type = 8;
pub const RDMA_CM_EVENT_ESTABLISHED: rdma_cm_event_type = 9;
pub const RDMA_CM_EVENT_DISCONNECTED: rdma_cm_event_type = 10;
pub const RDMA_CM_EVENT_DEVICE_REMOVAL: rdma_cm_event_type = 11;
pub const RDMA_CM_EVENT_MULTICAST_JOIN: rdma_cm_event_type = 12;
pub const RDMA_CM_EVENT_MULTICAST_ERROR: rdma_cm_event_type = 13;
pub const RDMA_CM_EVENT_ADDR_CHANGE: rdma_cm_event_type = 14;
pub const RDMA_CM_EVENT_TIMEWAIT_EXIT: rdma_cm_event_type = 15;

/// `enum rdma_port_space`.
pub type rdma_port_space = core::ffi::c_uint;
pub const RDMA_PS_IPOIB: rdma_port_space = 0x0002;
pub const RDMA_PS_TCP: rdma_port_space = 0x0106;
pub const RDMA_PS_UDP: rdma_port_space = 0x0111;
pub const RDMA_PS_IB: rdma_port_space = 0x013F;

pub const RDMA_IB_IP_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;
pub const RDMA_IB_IP_PORT_MASK: u64 = 0x0000_0000_0000_FFFF;
pub const RDMA_IB_IP_PS_TCP: u64 = 0x0000_0000_0106_0000;
pub const RDMA_IB_IP_PS_UDP: u64 = 0x0000_0000_0111_0000;
pub const RDMA_IB_PS_IB: u64 = 0x0000_0000_013F_0000;

/// The Q_Key librdmacm uses for UD / multicast (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

pub const RDMA_MAX_RESP_RES: u8 = 0xFF;
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xFF;

/// `rdma_addrinfo::ai_flags`.
pub const RAI_PASSIVE: c_int = 0x0000_0001;
pub const RAI_NUMERICHOST: c_int = 0x0000_0002;
pub const RAI_NOROUTE: c_int = 0x0000_0004;
pub const RAI_FAMILY: c_int = 0x0000_0008;

/// `rdma_set_option` levels and option names.
pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_IB: c_int = 1;
pub const RDMA_OPTION_ID_TOS: c_int = 0;
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;
pub const RDMA_OPTION_IB_PATH: c_int = 1;

/// `enum rdma_cm_join_mc_attr_mask`.
pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;
pub const RDMA_CM_JOIN_MC_ATTR_RESERVED: u32 = 1 << 2;

/// `enum rdma_cm_mc_join_flags`.
pub const RDMA_MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
pub const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
pub const RDMA_MC_JOIN_FLAG_RESERVED: u32 = 2;

/// rsocket: `SOL_RDMA` and its option names.
pub const SOL_RDMA: c_int = 0x10000;
pub const RDMA_SQSIZE: c_int = 0;
pub const RDMA_RQSIZE: c_int = 1;
pub const RDMA_INLINE: c_int = 2;
pub const RDMA_IOMAPSIZE: c_int = 3;
pub const RDMA_ROUTE: c_int = 4;

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    /// Big-endian.
    pub pkey: u16,
}

/// First anonymous union of `rdma_addr` (the source address).
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_src {
    pub src_addr: sockaddr,
    pub src_sin: sockaddr_in,
    pub src_sin6: sockaddr_in6,
    pub src_storage: sockaddr_storage,
}

/// Second anonymous union of `rdma_addr` (the destination address).
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_dst {
    pub dst_addr: sockaddr,
    pub dst_sin: sockaddr_in,
    pub dst_sin6: sockaddr_in6,
    pub dst_storage: sockaddr_storage,
}

/// `rdma_addr.addr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_addr {
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_addr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_addr {
    /// C: anonymous union `src_addr`/`src_sin`/`src_sin6`/`src_storage` (offset 0).
    pub src: rdma_addr_src,
    /// C: anonymous union `dst_addr`/`dst_sin`/`dst_sin6`/`dst_storage` (offset 128).
    pub dst: rdma_addr_dst,
    pub addr: rdma_addr_addr,
}

/// `struct rdma_route`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

/// `struct rdma_event_channel`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_cm_id` (416 bytes). Applications read `verbs`, `qp`, `pd`, the CQ
/// and channel pointers, `srq`, `port_num`, `event` and `context` directly, and
/// the inline `rdma_get_local_addr`/`rdma_get_peer_addr` return
/// `&route.addr.src`/`&route.addr.dst`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: rdma_port_space,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: ibv_qp_type,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    /// Ignored when accepting.
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// `rdma_cm_event.param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: rdma_cm_event_type,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: socklen_t,
    pub ai_dst_len: socklen_t,
    pub ai_src_addr: *mut sockaddr,
    pub ai_dst_addr: *mut sockaddr,
    pub ai_src_canonname: *mut core::ffi::c_char,
    pub ai_dst_canonname: *mut core::ffi::c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_cm_join_mc_attr_ex {
    /// `enum rdma_cm_join_mc_attr_mask`.
    pub comp_mask: u32,
    /// `enum rdma_cm_mc_join_flags`.
    pub join_flags: u32,
    pub addr: *mut sockaddr,
}

union_debug!(
    rdma_addr_src,
    rdma_addr_dst,
    rdma_addr_addr,
    rdma_cm_event_param
);

zeroable!(
    rdma_ib_addr,
    rdma_addr_src,
    rdma_addr_dst,
    rdma_addr_addr,
    rdma_addr,
    rdma_route,
    rdma_event_channel,
    rdma_cm_id,
    rdma_conn_param,
    rdma_ud_param,
    rdma_cm_event_param,
    rdma_cm_event,
    rdma_addrinfo,
    rdma_cm_join_mc_attr_ex,
);

assert_layout!(rdma_ib_addr, 40, 8; sgid => 0, dgid => 16, pkey => 32);
assert_layout!(rdma_addr, 296, 8;
    src.src_addr => 0, src.src_sin => 0, src.src_sin6 => 0, src.src_storage => 0,
    dst.dst_addr => 128, dst.dst_sin => 128, dst.dst_sin6 => 128, dst.dst_storage => 128,
    addr => 256, addr.ibaddr => 256);
assert_layout!(rdma_route, 312, 8; addr => 0, path_rec => 296, num_paths => 304);
assert_layout!(rdma_event_channel, 4, 4; fd => 0);
assert_layout!(rdma_cm_id, 416, 8;
    verbs => 0, channel => 8, context => 16, qp => 24, route => 32, route.addr.src => 32,
    route.addr.dst => 160, route.addr.addr.ibaddr => 288, route.path_rec => 328,
    route.num_paths => 336, ps => 344, port_num => 348, event => 352, send_cq_channel => 360,
    send_cq => 368, recv_cq_channel => 376, recv_cq => 384, srq => 392, pd => 400,
    qp_type => 408);
assert_layout!(rdma_conn_param, 24, 8;
    private_data => 0, private_data_len => 8, responder_resources => 9, initiator_depth => 10,
    flow_control => 11, retry_count => 12, rnr_retry_count => 13, srq => 14, qp_num => 16);
assert_layout!(rdma_ud_param, 56, 8;
    private_data => 0, private_data_len => 8, ah_attr => 16, qp_num => 48, qkey => 52);
assert_layout!(rdma_cm_event, 80, 8;
    id => 0, listen_id => 8, event => 16, status => 20, param => 24, param.conn => 24,
    param.ud => 24);
assert_layout!(rdma_addrinfo, 96, 8;
    ai_flags => 0, ai_family => 4, ai_qp_type => 8, ai_port_space => 12, ai_src_len => 16,
    ai_dst_len => 20, ai_src_addr => 24, ai_dst_addr => 32, ai_src_canonname => 40,
    ai_dst_canonname => 48, ai_route_len => 56, ai_route => 64, ai_connect_len => 72,
    ai_connect => 80, ai_next => 88);
assert_layout!(rdma_cm_join_mc_attr_ex, 16, 8; comp_mask => 0, join_flags => 4, addr => 8);
