//! Enumerations and `#define`s of `<infiniband/verbs.h>` (rdma-core 44), with
//! exactly rdma-core's values. Each C enum is a type alias plus constants.

use core::ffi::{c_int, c_uint};

// ---------------------------------------------------------------- device / port

/// `enum ibv_node_type` (has a negative member, so `int`).
pub type ibv_node_type = c_int;
pub const IBV_NODE_UNKNOWN: ibv_node_type = -1;
pub const IBV_NODE_CA: ibv_node_type = 1;
pub const IBV_NODE_SWITCH: ibv_node_type = 2;
pub const IBV_NODE_ROUTER: ibv_node_type = 3;
pub const IBV_NODE_RNIC: ibv_node_type = 4;
pub const IBV_NODE_USNIC: ibv_node_type = 5;
pub const IBV_NODE_USNIC_UDP: ibv_node_type = 6;
pub const IBV_NODE_UNSPECIFIED: ibv_node_type = 7;

/// `enum ibv_transport_type` (has a negative member, so `int`).
pub type ibv_transport_type = c_int;
pub const IBV_TRANSPORT_UNKNOWN: ibv_transport_type = -1;
pub const IBV_TRANSPORT_IB: ibv_transport_type = 0;
pub const IBV_TRANSPORT_IWARP: ibv_transport_type = 1;
pub const IBV_TRANSPORT_USNIC: ibv_transport_type = 2;
pub const IBV_TRANSPORT_USNIC_UDP: ibv_transport_type = 3;
pub const IBV_TRANSPORT_UNSPECIFIED: ibv_transport_type = 4;

/// `enum ibv_device_cap_flags`.
pub type ibv_device_cap_flags = c_uint;
pub const IBV_DEVICE_RESIZE_MAX_WR: ibv_device_cap_flags = 1;
pub const IBV_DEVICE_BAD_PKEY_CNTR: ibv_device_cap_flags = 1 << 1;
pub const IBV_DEVICE_BAD_QKEY_CNTR: ibv_device_cap_flags = 1 << 2;
pub const IBV_DEVICE_RAW_MULTI: ibv_device_cap_flags = 1 << 3;
pub const IBV_DEVICE_AUTO_PATH_MIG: ibv_device_cap_flags = 1 << 4;
pub const IBV_DEVICE_CHANGE_PHY_PORT: ibv_device_cap_flags = 1 << 5;
pub const IBV_DEVICE_UD_AV_PORT_ENFORCE: ibv_device_cap_flags = 1 << 6;
pub const IBV_DEVICE_CURR_QP_STATE_MOD: ibv_device_cap_flags = 1 << 7;
pub const IBV_DEVICE_SHUTDOWN_PORT: ibv_device_cap_flags = 1 << 8;
pub const IBV_DEVICE_INIT_TYPE: ibv_device_cap_flags = 1 << 9;
pub const IBV_DEVICE_PORT_ACTIVE_EVENT: ibv_device_cap_flags = 1 << 10;
pub const IBV_DEVICE_SYS_IMAGE_GUID: ibv_device_cap_flags = 1 << 11;
pub const IBV_DEVICE_RC_RNR_NAK_GEN: ibv_device_cap_flags = 1 << 12;
pub const IBV_DEVICE_SRQ_RESIZE: ibv_device_cap_flags = 1 << 13;
pub const IBV_DEVICE_N_NOTIFY_CQ: ibv_device_cap_flags = 1 << 14;
pub const IBV_DEVICE_MEM_WINDOW: ibv_device_cap_flags = 1 << 17;
pub const IBV_DEVICE_UD_IP_CSUM: ibv_device_cap_flags = 1 << 18;
pub const IBV_DEVICE_XRC: ibv_device_cap_flags = 1 << 20;
pub const IBV_DEVICE_MEM_MGT_EXTENSIONS: ibv_device_cap_flags = 1 << 21;
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2A: ibv_device_cap_flags = 1 << 23;
pub const IBV_DEVICE_MEM_WINDOW_TYPE_2B: ibv_device_cap_flags = 1 << 24;
pub const IBV_DEVICE_RC_IP_CSUM: ibv_device_cap_flags = 1 << 25;
pub const IBV_DEVICE_RAW_IP_CSUM: ibv_device_cap_flags = 1 << 26;
pub const IBV_DEVICE_MANAGED_FLOW_STEERING: ibv_device_cap_flags = 1 << 29;
/// `#define IBV_DEVICE_RAW_SCATTER_FCS (1ULL << 34)` (in `device_cap_flags_ex`).
pub const IBV_DEVICE_RAW_SCATTER_FCS: u64 = 1 << 34;
/// `#define IBV_DEVICE_PCI_WRITE_END_PADDING (1ULL << 36)`.
pub const IBV_DEVICE_PCI_WRITE_END_PADDING: u64 = 1 << 36;

/// `enum ibv_fork_status`.
pub type ibv_fork_status = c_uint;
pub const IBV_FORK_DISABLED: ibv_fork_status = 0;
pub const IBV_FORK_ENABLED: ibv_fork_status = 1;
pub const IBV_FORK_UNNEEDED: ibv_fork_status = 2;

/// `enum ibv_atomic_cap`.
pub type ibv_atomic_cap = c_uint;
pub const IBV_ATOMIC_NONE: ibv_atomic_cap = 0;
pub const IBV_ATOMIC_HCA: ibv_atomic_cap = 1;
pub const IBV_ATOMIC_GLOB: ibv_atomic_cap = 2;

/// `enum ibv_dm_mask`.
pub const IBV_DM_MASK_HANDLE: c_uint = 1;

/// `enum ibv_odp_transport_cap_bits`.
pub const IBV_ODP_SUPPORT_SEND: u32 = 1 << 0;
pub const IBV_ODP_SUPPORT_RECV: u32 = 1 << 1;
pub const IBV_ODP_SUPPORT_WRITE: u32 = 1 << 2;
pub const IBV_ODP_SUPPORT_READ: u32 = 1 << 3;
pub const IBV_ODP_SUPPORT_ATOMIC: u32 = 1 << 4;
pub const IBV_ODP_SUPPORT_SRQ_RECV: u32 = 1 << 5;
/// `enum ibv_odp_general_caps`.
pub const IBV_ODP_SUPPORT: u64 = 1 << 0;
pub const IBV_ODP_SUPPORT_IMPLICIT: u64 = 1 << 1;

/// `enum ibv_rx_hash_function_flags`.
pub const IBV_RX_HASH_FUNC_TOEPLITZ: u8 = 1;
/// `enum ibv_rx_hash_fields`.
pub const IBV_RX_HASH_SRC_IPV4: u64 = 1 << 0;
pub const IBV_RX_HASH_DST_IPV4: u64 = 1 << 1;
pub const IBV_RX_HASH_SRC_IPV6: u64 = 1 << 2;
pub const IBV_RX_HASH_DST_IPV6: u64 = 1 << 3;
pub const IBV_RX_HASH_SRC_PORT_TCP: u64 = 1 << 4;
pub const IBV_RX_HASH_DST_PORT_TCP: u64 = 1 << 5;
pub const IBV_RX_HASH_SRC_PORT_UDP: u64 = 1 << 6;
pub const IBV_RX_HASH_DST_PORT_UDP: u64 = 1 << 7;
pub const IBV_RX_HASH_IPSEC_SPI: u64 = 1 << 8;
pub const IBV_RX_HASH_INNER: u64 = 1 << 31;

/// `enum ibv_raw_packet_caps`.
pub const IBV_RAW_PACKET_CAP_CVLAN_STRIPPING: u32 = 1 << 0;
pub const IBV_RAW_PACKET_CAP_SCATTER_FCS: u32 = 1 << 1;
pub const IBV_RAW_PACKET_CAP_IP_CSUM: u32 = 1 << 2;
pub const IBV_RAW_PACKET_CAP_DELAY_DROP: u32 = 1 << 3;

/// `enum ibv_tm_cap_flags`.
pub const IBV_TM_CAP_RC: u32 = 1;

/// `enum ibv_pci_atomic_op_size`.
pub const IBV_PCI_ATOMIC_OPERATION_4_BYTE_SIZE_SUP: u16 = 1 << 0;
pub const IBV_PCI_ATOMIC_OPERATION_8_BYTE_SIZE_SUP: u16 = 1 << 1;
pub const IBV_PCI_ATOMIC_OPERATION_16_BYTE_SIZE_SUP: u16 = 1 << 2;

/// `enum ibv_mtu`.
pub type ibv_mtu = c_uint;
pub const IBV_MTU_256: ibv_mtu = 1;
pub const IBV_MTU_512: ibv_mtu = 2;
pub const IBV_MTU_1024: ibv_mtu = 3;
pub const IBV_MTU_2048: ibv_mtu = 4;
pub const IBV_MTU_4096: ibv_mtu = 5;

/// `enum ibv_port_state`.
pub type ibv_port_state = c_uint;
pub const IBV_PORT_NOP: ibv_port_state = 0;
pub const IBV_PORT_DOWN: ibv_port_state = 1;
pub const IBV_PORT_INIT: ibv_port_state = 2;
pub const IBV_PORT_ARMED: ibv_port_state = 3;
pub const IBV_PORT_ACTIVE: ibv_port_state = 4;
pub const IBV_PORT_ACTIVE_DEFER: ibv_port_state = 5;

/// Anonymous enum: `ibv_port_attr::link_layer` values.
pub const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// `enum ibv_port_cap_flags`.
pub type ibv_port_cap_flags = c_uint;
pub const IBV_PORT_SM: ibv_port_cap_flags = 1 << 1;
pub const IBV_PORT_NOTICE_SUP: ibv_port_cap_flags = 1 << 2;
pub const IBV_PORT_TRAP_SUP: ibv_port_cap_flags = 1 << 3;
pub const IBV_PORT_OPT_IPD_SUP: ibv_port_cap_flags = 1 << 4;
pub const IBV_PORT_AUTO_MIGR_SUP: ibv_port_cap_flags = 1 << 5;
pub const IBV_PORT_SL_MAP_SUP: ibv_port_cap_flags = 1 << 6;
pub const IBV_PORT_MKEY_NVRAM: ibv_port_cap_flags = 1 << 7;
pub const IBV_PORT_PKEY_NVRAM: ibv_port_cap_flags = 1 << 8;
pub const IBV_PORT_LED_INFO_SUP: ibv_port_cap_flags = 1 << 9;
pub const IBV_PORT_SYS_IMAGE_GUID_SUP: ibv_port_cap_flags = 1 << 11;
pub const IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP: ibv_port_cap_flags = 1 << 12;
pub const IBV_PORT_EXTENDED_SPEEDS_SUP: ibv_port_cap_flags = 1 << 14;
pub const IBV_PORT_CAP_MASK2_SUP: ibv_port_cap_flags = 1 << 15;
pub const IBV_PORT_CM_SUP: ibv_port_cap_flags = 1 << 16;
pub const IBV_PORT_SNMP_TUNNEL_SUP: ibv_port_cap_flags = 1 << 17;
pub const IBV_PORT_REINIT_SUP: ibv_port_cap_flags = 1 << 18;
pub const IBV_PORT_DEVICE_MGMT_SUP: ibv_port_cap_flags = 1 << 19;
pub const IBV_PORT_VENDOR_CLASS_SUP: ibv_port_cap_flags = 1 << 20;
pub const IBV_PORT_DR_NOTICE_SUP: ibv_port_cap_flags = 1 << 21;
pub const IBV_PORT_CAP_MASK_NOTICE_SUP: ibv_port_cap_flags = 1 << 22;
pub const IBV_PORT_BOOT_MGMT_SUP: ibv_port_cap_flags = 1 << 23;
pub const IBV_PORT_LINK_LATENCY_SUP: ibv_port_cap_flags = 1 << 24;
pub const IBV_PORT_CLIENT_REG_SUP: ibv_port_cap_flags = 1 << 25;
pub const IBV_PORT_IP_BASED_GIDS: ibv_port_cap_flags = 1 << 26;

/// `enum ibv_port_cap_flags2`.
pub const IBV_PORT_SET_NODE_DESC_SUP: u16 = 1 << 0;
pub const IBV_PORT_INFO_EXT_SUP: u16 = 1 << 1;
pub const IBV_PORT_VIRT_SUP: u16 = 1 << 2;
pub const IBV_PORT_SWITCH_PORT_STATE_TABLE_SUP: u16 = 1 << 3;
pub const IBV_PORT_LINK_WIDTH_2X_SUP: u16 = 1 << 4;
pub const IBV_PORT_LINK_SPEED_HDR_SUP: u16 = 1 << 5;
pub const IBV_PORT_LINK_SPEED_NDR_SUP: u16 = 1 << 10;

/// `enum ibv_gid_type` (`ibv_gid_entry::gid_type`).
pub type ibv_gid_type = c_uint;
pub const IBV_GID_TYPE_IB: ibv_gid_type = 0;
pub const IBV_GID_TYPE_ROCE_V1: ibv_gid_type = 1;
pub const IBV_GID_TYPE_ROCE_V2: ibv_gid_type = 2;

/// `enum ibv_gid_type_sysfs` (rdma-core `driver.h`; `ibv_query_gid_type` output).
pub type ibv_gid_type_sysfs = c_uint;
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: ibv_gid_type_sysfs = 0;
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: ibv_gid_type_sysfs = 1;

/// `IBV_SYSFS_NAME_MAX`.
pub const IBV_SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const IBV_SYSFS_PATH_MAX: usize = 256;

/// `__VERBS_ABI_IS_EXTENDED`: the `ibv_context::abi_compat` marker of a
/// `verbs_context` (`(void *)UINTPTR_MAX`).
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

// ---------------------------------------------------------------- async events

/// `enum ibv_event_type`.
pub type ibv_event_type = c_uint;
pub const IBV_EVENT_CQ_ERR: ibv_event_type = 0;
pub const IBV_EVENT_QP_FATAL: ibv_event_type = 1;
pub const IBV_EVENT_QP_REQ_ERR: ibv_event_type = 2;
pub const IBV_EVENT_QP_ACCESS_ERR: ibv_event_type = 3;
pub const IBV_EVENT_COMM_EST: ibv_event_type = 4;
pub const IBV_EVENT_SQ_DRAINED: ibv_event_type = 5;
pub const IBV_EVENT_PATH_MIG: ibv_event_type = 6;
pub const IBV_EVENT_PATH_MIG_ERR: ibv_event_type = 7;
pub const IBV_EVENT_DEVICE_FATAL: ibv_event_type = 8;
pub const IBV_EVENT_PORT_ACTIVE: ibv_event_type = 9;
pub const IBV_EVENT_PORT_ERR: ibv_event_type = 10;
pub const IBV_EVENT_LID_CHANGE: ibv_event_type = 11;
pub const IBV_EVENT_PKEY_CHANGE: ibv_event_type = 12;
pub const IBV_EVENT_SM_CHANGE: ibv_event_type = 13;
pub const IBV_EVENT_SRQ_ERR: ibv_event_type = 14;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: ibv_event_type = 15;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: ibv_event_type = 16;
pub const IBV_EVENT_CLIENT_REREGISTER: ibv_event_type = 17;
pub const IBV_EVENT_GID_CHANGE: ibv_event_type = 18;
pub const IBV_EVENT_WQ_FATAL: ibv_event_type = 19;

// ---------------------------------------------------------------- completions

/// `enum ibv_wc_status`.
pub type ibv_wc_status = c_uint;
pub const IBV_WC_SUCCESS: ibv_wc_status = 0;
pub const IBV_WC_LOC_LEN_ERR: ibv_wc_status = 1;
pub const IBV_WC_LOC_QP_OP_ERR: ibv_wc_status = 2;
pub const IBV_WC_LOC_EEC_OP_ERR: ibv_wc_status = 3;
pub const IBV_WC_LOC_PROT_ERR: ibv_wc_status = 4;
pub const IBV_WC_WR_FLUSH_ERR: ibv_wc_status = 5;
pub const IBV_WC_MW_BIND_ERR: ibv_wc_status = 6;
pub const IBV_WC_BAD_RESP_ERR: ibv_wc_status = 7;
pub const IBV_WC_LOC_ACCESS_ERR: ibv_wc_status = 8;
pub const IBV_WC_REM_INV_REQ_ERR: ibv_wc_status = 9;
pub const IBV_WC_REM_ACCESS_ERR: ibv_wc_status = 10;
pub const IBV_WC_REM_OP_ERR: ibv_wc_status = 11;
pub const IBV_WC_RETRY_EXC_ERR: ibv_wc_status = 12;
pub const IBV_WC_RNR_RETRY_EXC_ERR: ibv_wc_status = 13;
pub const IBV_WC_LOC_RDD_VIOL_ERR: ibv_wc_status = 14;
pub const IBV_WC_REM_INV_RD_REQ_ERR: ibv_wc_status = 15;
pub const IBV_WC_REM_ABORT_ERR: ibv_wc_status = 16;
pub const IBV_WC_INV_EECN_ERR: ibv_wc_status = 17;
pub const IBV_WC_INV_EEC_STATE_ERR: ibv_wc_status = 18;
pub const IBV_WC_FATAL_ERR: ibv_wc_status = 19;
pub const IBV_WC_RESP_TIMEOUT_ERR: ibv_wc_status = 20;
pub const IBV_WC_GENERAL_ERR: ibv_wc_status = 21;
pub const IBV_WC_TM_ERR: ibv_wc_status = 22;
pub const IBV_WC_TM_RNDV_INCOMPLETE: ibv_wc_status = 23;

/// `enum ibv_wc_opcode`.
pub type ibv_wc_opcode = c_uint;
pub const IBV_WC_SEND: ibv_wc_opcode = 0;
pub const IBV_WC_RDMA_WRITE: ibv_wc_opcode = 1;
pub const IBV_WC_RDMA_READ: ibv_wc_opcode = 2;
pub const IBV_WC_COMP_SWAP: ibv_wc_opcode = 3;
pub const IBV_WC_FETCH_ADD: ibv_wc_opcode = 4;
pub const IBV_WC_BIND_MW: ibv_wc_opcode = 5;
pub const IBV_WC_LOCAL_INV: ibv_wc_opcode = 6;
pub const IBV_WC_TSO: ibv_wc_opcode = 7;
pub const IBV_WC_ATOMIC_WRITE: ibv_wc_opcode = 9;
/// Receive completions have this bit set (`opcode & IBV_WC_RECV`).
pub const IBV_WC_RECV: ibv_wc_opcode = 1 << 7;
pub const IBV_WC_RECV_RDMA_WITH_IMM: ibv_wc_opcode = 129;
pub const IBV_WC_TM_ADD: ibv_wc_opcode = 130;
pub const IBV_WC_TM_DEL: ibv_wc_opcode = 131;
pub const IBV_WC_TM_SYNC: ibv_wc_opcode = 132;
pub const IBV_WC_TM_RECV: ibv_wc_opcode = 133;
pub const IBV_WC_TM_NO_TAG: ibv_wc_opcode = 134;
pub const IBV_WC_DRIVER1: ibv_wc_opcode = 135;
pub const IBV_WC_DRIVER2: ibv_wc_opcode = 136;
pub const IBV_WC_DRIVER3: ibv_wc_opcode = 137;

pub const IBV_WC_IP_CSUM_OK_SHIFT: c_uint = 2;

/// `enum ibv_create_cq_wc_flags` (`ibv_cq_init_attr_ex::wc_flags`).
pub type ibv_create_cq_wc_flags = u64;
pub const IBV_WC_EX_WITH_BYTE_LEN: u64 = 1 << 0;
pub const IBV_WC_EX_WITH_IMM: u64 = 1 << 1;
pub const IBV_WC_EX_WITH_QP_NUM: u64 = 1 << 2;
pub const IBV_WC_EX_WITH_SRC_QP: u64 = 1 << 3;
pub const IBV_WC_EX_WITH_SLID: u64 = 1 << 4;
pub const IBV_WC_EX_WITH_SL: u64 = 1 << 5;
pub const IBV_WC_EX_WITH_DLID_PATH_BITS: u64 = 1 << 6;
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
pub const IBV_WC_EX_WITH_CVLAN: u64 = 1 << 8;
pub const IBV_WC_EX_WITH_FLOW_TAG: u64 = 1 << 9;
pub const IBV_WC_EX_WITH_TM_INFO: u64 = 1 << 10;
pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
pub const IBV_WC_STANDARD_FLAGS: u64 = IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS;
pub const IBV_CREATE_CQ_SUP_WC_FLAGS: u64 = IBV_WC_STANDARD_FLAGS
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    | IBV_WC_EX_WITH_CVLAN
    | IBV_WC_EX_WITH_FLOW_TAG
    | IBV_WC_EX_WITH_TM_INFO
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

/// `enum ibv_wc_flags` (`ibv_wc::wc_flags`).
pub type ibv_wc_flags = c_uint;
pub const IBV_WC_GRH: ibv_wc_flags = 1 << 0;
pub const IBV_WC_WITH_IMM: ibv_wc_flags = 1 << 1;
pub const IBV_WC_IP_CSUM_OK: ibv_wc_flags = 1 << IBV_WC_IP_CSUM_OK_SHIFT;
pub const IBV_WC_WITH_INV: ibv_wc_flags = 1 << 3;
pub const IBV_WC_TM_SYNC_REQ: ibv_wc_flags = 1 << 4;
pub const IBV_WC_TM_MATCH: ibv_wc_flags = 1 << 5;
pub const IBV_WC_TM_DATA_VALID: ibv_wc_flags = 1 << 6;

/// `enum ibv_cq_init_attr_mask`.
pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
pub const IBV_CQ_INIT_ATTR_MASK_PD: u32 = 1 << 1;
/// `enum ibv_create_cq_attr_flags`.
pub const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1 << 0;
pub const IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 1 << 1;
/// `enum ibv_cq_attr_mask`.
pub const IBV_CQ_ATTR_MODERATE: u32 = 1 << 0;
pub const IBV_CQ_ATTR_RESERVED: u32 = 1 << 1;

// ---------------------------------------------------------------- memory

/// `IB_UVERBS_ACCESS_OPTIONAL_FIRST` (`1 << 20`).
pub const IBV_ACCESS_OPTIONAL_FIRST: c_uint = 1 << 20;
/// `IB_UVERBS_ACCESS_OPTIONAL_LAST` (`1 << 29`).
pub const IBV_ACCESS_OPTIONAL_LAST: c_uint = 1 << 29;
/// `IBV_ACCESS_OPTIONAL_RANGE`: bits 20..=29, which a provider may ignore.
pub const IBV_ACCESS_OPTIONAL_RANGE: c_uint =
    ((IBV_ACCESS_OPTIONAL_LAST << 1) - 1) & !(IBV_ACCESS_OPTIONAL_FIRST - 1);

/// `enum ibv_access_flags`.
pub type ibv_access_flags = c_uint;
pub const IBV_ACCESS_LOCAL_WRITE: ibv_access_flags = 1;
pub const IBV_ACCESS_REMOTE_WRITE: ibv_access_flags = 1 << 1;
pub const IBV_ACCESS_REMOTE_READ: ibv_access_flags = 1 << 2;
pub const IBV_ACCESS_REMOTE_ATOMIC: ibv_access_flags = 1 << 3;
pub const IBV_ACCESS_MW_BIND: ibv_access_flags = 1 << 4;
pub const IBV_ACCESS_ZERO_BASED: ibv_access_flags = 1 << 5;
pub const IBV_ACCESS_ON_DEMAND: ibv_access_flags = 1 << 6;
pub const IBV_ACCESS_HUGETLB: ibv_access_flags = 1 << 7;
pub const IBV_ACCESS_RELAXED_ORDERING: ibv_access_flags = IBV_ACCESS_OPTIONAL_FIRST;

/// `enum ibv_rereg_mr_flags`.
pub const IBV_REREG_MR_CHANGE_TRANSLATION: c_int = 1 << 0;
pub const IBV_REREG_MR_CHANGE_PD: c_int = 1 << 1;
pub const IBV_REREG_MR_CHANGE_ACCESS: c_int = 1 << 2;
pub const IBV_REREG_MR_FLAGS_SUPPORTED: c_int = (IBV_REREG_MR_CHANGE_ACCESS << 1) - 1;

/// `enum ibv_rereg_mr_err_code` (return values of `ibv_rereg_mr`).
pub const IBV_REREG_MR_ERR_INPUT: c_int = -1;
pub const IBV_REREG_MR_ERR_DONT_FORK_NEW: c_int = -2;
pub const IBV_REREG_MR_ERR_DO_FORK_OLD: c_int = -3;
pub const IBV_REREG_MR_ERR_CMD: c_int = -4;
pub const IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW: c_int = -5;

/// `enum ibv_mw_type`.
pub type ibv_mw_type = c_uint;
pub const IBV_MW_TYPE_1: ibv_mw_type = 1;
pub const IBV_MW_TYPE_2: ibv_mw_type = 2;

/// `enum ibv_xrcd_init_attr_mask`.
pub const IBV_XRCD_INIT_ATTR_FD: u32 = 1 << 0;
pub const IBV_XRCD_INIT_ATTR_OFLAGS: u32 = 1 << 1;
pub const IBV_XRCD_INIT_ATTR_RESERVED: u32 = 1 << 2;

/// `enum ib_uverbs_advise_mr_advice` (`ibv_advise_mr_advice`).
pub type ibv_advise_mr_advice = c_uint;
pub const IBV_ADVISE_MR_ADVICE_PREFETCH: ibv_advise_mr_advice = 0;
pub const IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE: ibv_advise_mr_advice = 1;
pub const IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT: ibv_advise_mr_advice = 2;
/// `IBV_ADVISE_MR_FLAG_FLUSH`.
pub const IBV_ADVISE_MR_FLAG_FLUSH: u32 = 1;

// ---------------------------------------------------------------- rates

/// `enum ibv_rate` (`ibv_ah_attr::static_rate`).
pub type ibv_rate = c_uint;
pub const IBV_RATE_MAX: ibv_rate = 0;
pub const IBV_RATE_2_5_GBPS: ibv_rate = 2;
pub const IBV_RATE_5_GBPS: ibv_rate = 5;
pub const IBV_RATE_10_GBPS: ibv_rate = 3;
pub const IBV_RATE_20_GBPS: ibv_rate = 6;
pub const IBV_RATE_30_GBPS: ibv_rate = 4;
pub const IBV_RATE_40_GBPS: ibv_rate = 7;
pub const IBV_RATE_60_GBPS: ibv_rate = 8;
pub const IBV_RATE_80_GBPS: ibv_rate = 9;
pub const IBV_RATE_120_GBPS: ibv_rate = 10;
pub const IBV_RATE_14_GBPS: ibv_rate = 11;
pub const IBV_RATE_56_GBPS: ibv_rate = 12;
pub const IBV_RATE_112_GBPS: ibv_rate = 13;
pub const IBV_RATE_168_GBPS: ibv_rate = 14;
pub const IBV_RATE_25_GBPS: ibv_rate = 15;
pub const IBV_RATE_100_GBPS: ibv_rate = 16;
pub const IBV_RATE_200_GBPS: ibv_rate = 17;
pub const IBV_RATE_300_GBPS: ibv_rate = 18;
pub const IBV_RATE_28_GBPS: ibv_rate = 19;
pub const IBV_RATE_50_GBPS: ibv_rate = 20;
pub const IBV_RATE_400_GBPS: ibv_rate = 21;
pub const IBV_RATE_600_GBPS: ibv_rate = 22;
pub const IBV_RATE_800_GBPS: ibv_rate = 23;
pub const IBV_RATE_1200_GBPS: ibv_rate = 24;

// ---------------------------------------------------------------- SRQ / WQ

/// `enum ibv_srq_attr_mask`.
pub type ibv_srq_attr_mask = c_uint;
pub const IBV_SRQ_MAX_WR: ibv_srq_attr_mask = 1 << 0;
pub const IBV_SRQ_LIMIT: ibv_srq_attr_mask = 1 << 1;

/// `enum ibv_srq_type`.
pub type ibv_srq_type = c_uint;
pub const IBV_SRQT_BASIC: ibv_srq_type = 0;
pub const IBV_SRQT_XRC: ibv_srq_type = 1;
pub const IBV_SRQT_TM: ibv_srq_type = 2;

/// `enum ibv_srq_init_attr_mask`.
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1 << 0;
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
pub const IBV_SRQ_INIT_ATTR_XRCD: u32 = 1 << 2;
pub const IBV_SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
pub const IBV_SRQ_INIT_ATTR_TM: u32 = 1 << 4;
pub const IBV_SRQ_INIT_ATTR_RESERVED: u32 = 1 << 5;

/// `enum ibv_wq_type`.
pub type ibv_wq_type = c_uint;
pub const IBV_WQT_RQ: ibv_wq_type = 0;

/// `enum ibv_wq_init_attr_mask`.
pub const IBV_WQ_INIT_ATTR_FLAGS: u32 = 1 << 0;
pub const IBV_WQ_INIT_ATTR_RESERVED: u32 = 1 << 1;

/// `enum ibv_wq_flags`.
pub const IBV_WQ_FLAGS_CVLAN_STRIPPING: u32 = 1 << 0;
pub const IBV_WQ_FLAGS_SCATTER_FCS: u32 = 1 << 1;
pub const IBV_WQ_FLAGS_DELAY_DROP: u32 = 1 << 2;
pub const IBV_WQ_FLAGS_PCI_WRITE_END_PADDING: u32 = 1 << 3;
pub const IBV_WQ_FLAGS_RESERVED: u32 = 1 << 4;

/// `enum ibv_wq_state`.
pub type ibv_wq_state = c_uint;
pub const IBV_WQS_RESET: ibv_wq_state = 0;
pub const IBV_WQS_RDY: ibv_wq_state = 1;
pub const IBV_WQS_ERR: ibv_wq_state = 2;
pub const IBV_WQS_UNKNOWN: ibv_wq_state = 3;

/// `enum ibv_wq_attr_mask`.
pub const IBV_WQ_ATTR_STATE: u32 = 1 << 0;
pub const IBV_WQ_ATTR_CURR_STATE: u32 = 1 << 1;
pub const IBV_WQ_ATTR_FLAGS: u32 = 1 << 2;
pub const IBV_WQ_ATTR_RESERVED: u32 = 1 << 3;

// ---------------------------------------------------------------- QP

/// `enum ibv_qp_type`.
pub type ibv_qp_type = c_uint;
pub const IBV_QPT_RC: ibv_qp_type = 2;
pub const IBV_QPT_UC: ibv_qp_type = 3;
pub const IBV_QPT_UD: ibv_qp_type = 4;
pub const IBV_QPT_RAW_PACKET: ibv_qp_type = 8;
pub const IBV_QPT_XRC_SEND: ibv_qp_type = 9;
pub const IBV_QPT_XRC_RECV: ibv_qp_type = 10;
pub const IBV_QPT_DRIVER: ibv_qp_type = 0xff;

/// `enum ibv_qp_init_attr_mask` (`ibv_qp_init_attr_ex::comp_mask`).
pub type ibv_qp_init_attr_mask = c_uint;
pub const IBV_QP_INIT_ATTR_PD: ibv_qp_init_attr_mask = 1 << 0;
pub const IBV_QP_INIT_ATTR_XRCD: ibv_qp_init_attr_mask = 1 << 1;
pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: ibv_qp_init_attr_mask = 1 << 2;
pub const IBV_QP_INIT_ATTR_MAX_TSO_HEADER: ibv_qp_init_attr_mask = 1 << 3;
pub const IBV_QP_INIT_ATTR_IND_TABLE: ibv_qp_init_attr_mask = 1 << 4;
pub const IBV_QP_INIT_ATTR_RX_HASH: ibv_qp_init_attr_mask = 1 << 5;
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: ibv_qp_init_attr_mask = 1 << 6;

/// `enum ibv_qp_create_flags`.
pub type ibv_qp_create_flags = c_uint;
pub const IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: ibv_qp_create_flags = 1 << 1;
pub const IBV_QP_CREATE_SCATTER_FCS: ibv_qp_create_flags = 1 << 8;
pub const IBV_QP_CREATE_CVLAN_STRIPPING: ibv_qp_create_flags = 1 << 9;
pub const IBV_QP_CREATE_SOURCE_QPN: ibv_qp_create_flags = 1 << 10;
pub const IBV_QP_CREATE_PCI_WRITE_END_PADDING: ibv_qp_create_flags = 1 << 11;

/// `enum ibv_qp_create_send_ops_flags` (`ibv_qp_init_attr_ex::send_ops_flags`).
pub const IBV_QP_EX_WITH_RDMA_WRITE: u64 = 1 << 0;
pub const IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
pub const IBV_QP_EX_WITH_SEND: u64 = 1 << 2;
pub const IBV_QP_EX_WITH_SEND_WITH_IMM: u64 = 1 << 3;
pub const IBV_QP_EX_WITH_RDMA_READ: u64 = 1 << 4;
pub const IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
pub const IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
pub const IBV_QP_EX_WITH_LOCAL_INV: u64 = 1 << 7;
pub const IBV_QP_EX_WITH_BIND_MW: u64 = 1 << 8;
pub const IBV_QP_EX_WITH_SEND_WITH_INV: u64 = 1 << 9;
pub const IBV_QP_EX_WITH_TSO: u64 = 1 << 10;
pub const IBV_QP_EX_WITH_ATOMIC_WRITE: u64 = 1 << 12;

/// `enum ibv_qp_open_attr_mask`.
pub const IBV_QP_OPEN_ATTR_NUM: u32 = 1 << 0;
pub const IBV_QP_OPEN_ATTR_XRCD: u32 = 1 << 1;
pub const IBV_QP_OPEN_ATTR_CONTEXT: u32 = 1 << 2;
pub const IBV_QP_OPEN_ATTR_TYPE: u32 = 1 << 3;
pub const IBV_QP_OPEN_ATTR_RESERVED: u32 = 1 << 4;

/// `enum ibv_qp_attr_mask` (the `attr_mask` of `ibv_modify_qp`/`ibv_query_qp`).
pub type ibv_qp_attr_mask = c_int;
pub const IBV_QP_STATE: ibv_qp_attr_mask = 1 << 0;
pub const IBV_QP_CUR_STATE: ibv_qp_attr_mask = 1 << 1;
pub const IBV_QP_EN_SQD_ASYNC_NOTIFY: ibv_qp_attr_mask = 1 << 2;
pub const IBV_QP_ACCESS_FLAGS: ibv_qp_attr_mask = 1 << 3;
pub const IBV_QP_PKEY_INDEX: ibv_qp_attr_mask = 1 << 4;
pub const IBV_QP_PORT: ibv_qp_attr_mask = 1 << 5;
pub const IBV_QP_QKEY: ibv_qp_attr_mask = 1 << 6;
pub const IBV_QP_AV: ibv_qp_attr_mask = 1 << 7;
pub const IBV_QP_PATH_MTU: ibv_qp_attr_mask = 1 << 8;
pub const IBV_QP_TIMEOUT: ibv_qp_attr_mask = 1 << 9;
pub const IBV_QP_RETRY_CNT: ibv_qp_attr_mask = 1 << 10;
pub const IBV_QP_RNR_RETRY: ibv_qp_attr_mask = 1 << 11;
pub const IBV_QP_RQ_PSN: ibv_qp_attr_mask = 1 << 12;
pub const IBV_QP_MAX_QP_RD_ATOMIC: ibv_qp_attr_mask = 1 << 13;
pub const IBV_QP_ALT_PATH: ibv_qp_attr_mask = 1 << 14;
pub const IBV_QP_MIN_RNR_TIMER: ibv_qp_attr_mask = 1 << 15;
pub const IBV_QP_SQ_PSN: ibv_qp_attr_mask = 1 << 16;
pub const IBV_QP_MAX_DEST_RD_ATOMIC: ibv_qp_attr_mask = 1 << 17;
pub const IBV_QP_PATH_MIG_STATE: ibv_qp_attr_mask = 1 << 18;
pub const IBV_QP_CAP: ibv_qp_attr_mask = 1 << 19;
pub const IBV_QP_DEST_QPN: ibv_qp_attr_mask = 1 << 20;
pub const IBV_QP_RATE_LIMIT: ibv_qp_attr_mask = 1 << 25;

/// `enum ibv_qp_state`.
pub type ibv_qp_state = c_uint;
pub const IBV_QPS_RESET: ibv_qp_state = 0;
pub const IBV_QPS_INIT: ibv_qp_state = 1;
pub const IBV_QPS_RTR: ibv_qp_state = 2;
pub const IBV_QPS_RTS: ibv_qp_state = 3;
pub const IBV_QPS_SQD: ibv_qp_state = 4;
pub const IBV_QPS_SQE: ibv_qp_state = 5;
pub const IBV_QPS_ERR: ibv_qp_state = 6;
pub const IBV_QPS_UNKNOWN: ibv_qp_state = 7;

/// `enum ibv_mig_state`.
pub type ibv_mig_state = c_uint;
pub const IBV_MIG_MIGRATED: ibv_mig_state = 0;
pub const IBV_MIG_REARM: ibv_mig_state = 1;
pub const IBV_MIG_ARMED: ibv_mig_state = 2;

// ---------------------------------------------------------------- work requests

/// `enum ibv_wr_opcode`.
pub type ibv_wr_opcode = c_uint;
pub const IBV_WR_RDMA_WRITE: ibv_wr_opcode = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: ibv_wr_opcode = 1;
pub const IBV_WR_SEND: ibv_wr_opcode = 2;
pub const IBV_WR_SEND_WITH_IMM: ibv_wr_opcode = 3;
pub const IBV_WR_RDMA_READ: ibv_wr_opcode = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: ibv_wr_opcode = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: ibv_wr_opcode = 6;
pub const IBV_WR_LOCAL_INV: ibv_wr_opcode = 7;
pub const IBV_WR_BIND_MW: ibv_wr_opcode = 8;
pub const IBV_WR_SEND_WITH_INV: ibv_wr_opcode = 9;
pub const IBV_WR_TSO: ibv_wr_opcode = 10;
pub const IBV_WR_DRIVER1: ibv_wr_opcode = 11;
pub const IBV_WR_ATOMIC_WRITE: ibv_wr_opcode = 15;

/// `enum ibv_send_flags`.
pub type ibv_send_flags = c_uint;
pub const IBV_SEND_FENCE: ibv_send_flags = 1 << 0;
pub const IBV_SEND_SIGNALED: ibv_send_flags = 1 << 1;
pub const IBV_SEND_SOLICITED: ibv_send_flags = 1 << 2;
pub const IBV_SEND_INLINE: ibv_send_flags = 1 << 3;
pub const IBV_SEND_IP_CSUM: ibv_send_flags = 1 << 4;

/// `enum ibv_ops_wr_opcode`.
pub type ibv_ops_wr_opcode = c_uint;
pub const IBV_WR_TAG_ADD: ibv_ops_wr_opcode = 0;
pub const IBV_WR_TAG_DEL: ibv_ops_wr_opcode = 1;
pub const IBV_WR_TAG_SYNC: ibv_ops_wr_opcode = 2;

/// `enum ibv_ops_flags`.
pub const IBV_OPS_SIGNALED: c_int = 1 << 0;
pub const IBV_OPS_TM_SYNC: c_int = 1 << 1;

// ---------------------------------------------------------------- misc objects

/// `enum ibv_parent_domain_init_attr_mask`.
pub const IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS: u32 = 1 << 0;
pub const IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT: u32 = 1 << 1;
/// `IBV_ALLOCATOR_USE_DEFAULT` (`(void *)-1`).
pub const IBV_ALLOCATOR_USE_DEFAULT: usize = usize::MAX;

/// `enum ibv_counter_description`.
pub type ibv_counter_description = c_uint;
pub const IBV_COUNTER_PACKETS: ibv_counter_description = 0;
pub const IBV_COUNTER_BYTES: ibv_counter_description = 1;

/// `enum ibv_read_counters_flags`.
pub const IBV_READ_COUNTERS_ATTR_PREFER_CACHED: u32 = 1 << 0;

/// `enum ibv_values_mask`.
pub const IBV_VALUES_MASK_RAW_CLOCK: u32 = 1 << 0;
pub const IBV_VALUES_MASK_RESERVED: u32 = 1 << 1;

/// `enum ibv_flow_attr_type`.
pub type ibv_flow_attr_type = c_uint;
pub const IBV_FLOW_ATTR_NORMAL: ibv_flow_attr_type = 0;
pub const IBV_FLOW_ATTR_ALL_DEFAULT: ibv_flow_attr_type = 1;
pub const IBV_FLOW_ATTR_MC_DEFAULT: ibv_flow_attr_type = 2;
pub const IBV_FLOW_ATTR_SNIFFER: ibv_flow_attr_type = 3;

/// `enum ibv_flow_flags`.
pub const IBV_FLOW_ATTR_FLAGS_DONT_TRAP: u32 = 1 << 1;
pub const IBV_FLOW_ATTR_FLAGS_EGRESS: u32 = 1 << 2;

/// `enum ibv_ind_table_init_attr_mask`.
pub const IBV_CREATE_IND_TABLE_RESERVED: u32 = 1 << 0;

/// `IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`: lowest RoCEv2 UDP source port.
pub const IB_ROCE_UDP_ENCAP_VALID_PORT_MIN: u16 = 0xC000;
/// `IB_ROCE_UDP_ENCAP_VALID_PORT_MAX`.
pub const IB_ROCE_UDP_ENCAP_VALID_PORT_MAX: u16 = 0xFFFF;
/// `IB_GRH_FLOWLABEL_MASK`.
pub const IB_GRH_FLOWLABEL_MASK: u32 = 0x000F_FFFF;
/// `ETHERNET_LL_SIZE` (`ibv_resolve_eth_l2_from_gid`'s MAC buffer).
pub const ETHERNET_LL_SIZE: usize = 6;

/// Log levels of `__verbs_log` (rdma-core `driver.h`).
pub const VERBS_LOG_LEVEL_NONE: u32 = 0;
pub const VERBS_LOG_ERR: u32 = 1;
pub const VERBS_LOG_WARN: u32 = 2;
pub const VERBS_LOG_INFO: u32 = 3;
pub const VERBS_LOG_DEBUG: u32 = 4;
