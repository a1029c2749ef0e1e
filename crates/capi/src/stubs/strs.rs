//! Pure functions, already real: enum-to-string (`ibv_*_str`) with rdma-core
//! 44's exact strings (`libibverbs/enum_strs.c`) and the rate conversions
//! (`libibverbs/verbs.c`).

use core::ffi::{CStr, c_char, c_int};

use crate::ffi::*;
use crate::guard::ffi_guard;

const UNKNOWN: &CStr = c"unknown";

/// Indexes a string table; out-of-range values give `"unknown"`, as in C.
fn lookup(table: &[&'static CStr], index: i64) -> *const c_char {
    usize::try_from(index)
        .ok()
        .and_then(|i| table.get(i))
        .copied()
        .unwrap_or(UNKNOWN)
        .as_ptr()
}

/// `ibv_node_type_str` table; index 0 is not a node type.
const NODE_TYPE_STR: [&CStr; 8] = [
    UNKNOWN,
    c"InfiniBand channel adapter",
    c"InfiniBand switch",
    c"InfiniBand router",
    c"iWARP NIC",
    c"usNIC",
    c"usNIC UDP",
    c"unspecified",
];

const PORT_STATE_STR: [&CStr; 6] = [
    c"no state change (NOP)",
    c"down",
    c"init",
    c"armed",
    c"active",
    c"active defer",
];

const EVENT_TYPE_STR: [&CStr; 20] = [
    c"CQ error",
    c"local work queue catastrophic error",
    c"invalid request local work queue error",
    c"local access violation work queue error",
    c"communication established",
    c"send queue drained",
    c"path migrated",
    c"path migration request error",
    c"local catastrophic error",
    c"port active",
    c"port error",
    c"LID change",
    c"P_Key change",
    c"SM change",
    c"SRQ catastrophic error",
    c"SRQ limit reached",
    c"last WQE reached",
    c"client reregistration",
    c"GID table change",
    c"WQ fatal",
];

const WC_STATUS_STR: [&CStr; 24] = [
    c"success",
    c"local length error",
    c"local QP operation error",
    c"local EE context operation error",
    c"local protection error",
    c"Work Request Flushed Error",
    c"memory management operation error",
    c"bad response error",
    c"local access error",
    c"remote invalid request error",
    c"remote access error",
    c"remote operation error",
    c"transport retry counter exceeded",
    c"RNR retry counter exceeded",
    c"local RDD violation error",
    c"remote invalid RD request",
    c"aborted error",
    c"invalid EE context number",
    c"invalid EE context state",
    c"fatal error",
    c"response timeout error",
    c"general error",
    c"TM error",
    c"TM software rendezvous",
];

/// `const char *ibv_node_type_str(enum ibv_node_type)` (IBVERBS_1.1).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_node_type_str(node_type: ibv_node_type) -> *const c_char {
    ffi_guard(
        || UNKNOWN.as_ptr(),
        || lookup(&NODE_TYPE_STR, i64::from(node_type)),
    )
}

/// `const char *ibv_port_state_str(enum ibv_port_state)` (IBVERBS_1.1).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_port_state_str(port_state: ibv_port_state) -> *const c_char {
    ffi_guard(
        || UNKNOWN.as_ptr(),
        || lookup(&PORT_STATE_STR, i64::from(port_state)),
    )
}

/// `const char *ibv_event_type_str(enum ibv_event_type)` (IBVERBS_1.1).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_event_type_str(event: ibv_event_type) -> *const c_char {
    ffi_guard(
        || UNKNOWN.as_ptr(),
        || lookup(&EVENT_TYPE_STR, i64::from(event)),
    )
}

/// `const char *ibv_wc_status_str(enum ibv_wc_status)` (IBVERBS_1.1).
#[unsafe(no_mangle)]
pub extern "C" fn ibv_wc_status_str(status: ibv_wc_status) -> *const c_char {
    ffi_guard(
        || UNKNOWN.as_ptr(),
        || lookup(&WC_STATUS_STR, i64::from(status)),
    )
}

/// `(rate, multiple of 2.5 Gb/s)` pairs of `ibv_rate_to_mult`/`mult_to_ibv_rate`.
const RATE_MULT: [(ibv_rate, c_int); 15] = [
    (IBV_RATE_2_5_GBPS, 1),
    (IBV_RATE_5_GBPS, 2),
    (IBV_RATE_10_GBPS, 4),
    (IBV_RATE_20_GBPS, 8),
    (IBV_RATE_30_GBPS, 12),
    (IBV_RATE_40_GBPS, 16),
    (IBV_RATE_60_GBPS, 24),
    (IBV_RATE_80_GBPS, 32),
    (IBV_RATE_120_GBPS, 48),
    (IBV_RATE_28_GBPS, 11),
    (IBV_RATE_50_GBPS, 20),
    (IBV_RATE_400_GBPS, 160),
    (IBV_RATE_600_GBPS, 240),
    (IBV_RATE_800_GBPS, 320),
    (IBV_RATE_1200_GBPS, 480),
];

/// `(rate, Mb/s)` pairs of `ibv_rate_to_mbps`/`mbps_to_ibv_rate`.
const RATE_MBPS: [(ibv_rate, c_int); 23] = [
    (IBV_RATE_2_5_GBPS, 2500),
    (IBV_RATE_5_GBPS, 5000),
    (IBV_RATE_10_GBPS, 10000),
    (IBV_RATE_20_GBPS, 20000),
    (IBV_RATE_30_GBPS, 30000),
    (IBV_RATE_40_GBPS, 40000),
    (IBV_RATE_60_GBPS, 60000),
    (IBV_RATE_80_GBPS, 80000),
    (IBV_RATE_120_GBPS, 120000),
    (IBV_RATE_14_GBPS, 14062),
    (IBV_RATE_56_GBPS, 56250),
    (IBV_RATE_112_GBPS, 112500),
    (IBV_RATE_168_GBPS, 168750),
    (IBV_RATE_25_GBPS, 25781),
    (IBV_RATE_100_GBPS, 103125),
    (IBV_RATE_200_GBPS, 206250),
    (IBV_RATE_300_GBPS, 309375),
    (IBV_RATE_28_GBPS, 28125),
    (IBV_RATE_50_GBPS, 53125),
    (IBV_RATE_400_GBPS, 425000),
    (IBV_RATE_600_GBPS, 637500),
    (IBV_RATE_800_GBPS, 850000),
    (IBV_RATE_1200_GBPS, 1275000),
];

fn rate_to(table: &[(ibv_rate, c_int)], rate: ibv_rate) -> c_int {
    table
        .iter()
        .find(|&&(r, _)| r == rate)
        .map_or(-1, |&(_, v)| v)
}

fn to_rate(table: &[(ibv_rate, c_int)], value: c_int) -> ibv_rate {
    table
        .iter()
        .find(|&&(_, v)| v == value)
        .map_or(IBV_RATE_MAX, |&(r, _)| r)
}

/// `int ibv_rate_to_mult(enum ibv_rate)` (IBVERBS_1.0): -1 for unknown rates.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_rate_to_mult(rate: ibv_rate) -> c_int {
    ffi_guard(|| -1, || rate_to(&RATE_MULT, rate))
}

/// `enum ibv_rate mult_to_ibv_rate(int mult)` (IBVERBS_1.0): `IBV_RATE_MAX` if unknown.
#[unsafe(no_mangle)]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> ibv_rate {
    ffi_guard(|| IBV_RATE_MAX, || to_rate(&RATE_MULT, mult))
}

/// `int ibv_rate_to_mbps(enum ibv_rate)` (IBVERBS_1.1): -1 for unknown rates.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_rate_to_mbps(rate: ibv_rate) -> c_int {
    ffi_guard(|| -1, || rate_to(&RATE_MBPS, rate))
}

/// `enum ibv_rate mbps_to_ibv_rate(int mbps)` (IBVERBS_1.1): `IBV_RATE_MAX` if unknown.
#[unsafe(no_mangle)]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> ibv_rate {
    ffi_guard(|| IBV_RATE_MAX, || to_rate(&RATE_MBPS, mbps))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(p: *const c_char) -> &'static str {
        // SAFETY: every function under test returns a pointer to a static C string.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn wc_status_strings() {
        assert_eq!(s(ibv_wc_status_str(IBV_WC_SUCCESS)), "success");
        assert_eq!(
            s(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR)),
            "Work Request Flushed Error"
        );
        assert_eq!(
            s(ibv_wc_status_str(IBV_WC_RNR_RETRY_EXC_ERR)),
            "RNR retry counter exceeded"
        );
        assert_eq!(
            s(ibv_wc_status_str(IBV_WC_TM_RNDV_INCOMPLETE)),
            "TM software rendezvous"
        );
        assert_eq!(s(ibv_wc_status_str(24)), "unknown");
        assert_eq!(s(ibv_wc_status_str(u32::MAX)), "unknown");
    }

    #[test]
    fn node_port_event_strings() {
        assert_eq!(
            s(ibv_node_type_str(IBV_NODE_CA)),
            "InfiniBand channel adapter"
        );
        assert_eq!(s(ibv_node_type_str(IBV_NODE_UNSPECIFIED)), "unspecified");
        assert_eq!(s(ibv_node_type_str(0)), "unknown");
        assert_eq!(s(ibv_node_type_str(IBV_NODE_UNKNOWN)), "unknown");
        assert_eq!(s(ibv_node_type_str(8)), "unknown");
        assert_eq!(s(ibv_port_state_str(IBV_PORT_NOP)), "no state change (NOP)");
        assert_eq!(s(ibv_port_state_str(IBV_PORT_ACTIVE)), "active");
        assert_eq!(s(ibv_port_state_str(6)), "unknown");
        assert_eq!(s(ibv_event_type_str(IBV_EVENT_CQ_ERR)), "CQ error");
        assert_eq!(s(ibv_event_type_str(IBV_EVENT_WQ_FATAL)), "WQ fatal");
        assert_eq!(s(ibv_event_type_str(20)), "unknown");
    }

    #[test]
    fn rates() {
        assert_eq!(ibv_rate_to_mult(IBV_RATE_2_5_GBPS), 1);
        assert_eq!(ibv_rate_to_mult(IBV_RATE_1200_GBPS), 480);
        assert_eq!(
            ibv_rate_to_mult(IBV_RATE_14_GBPS),
            -1,
            "FDR rates have no multiple"
        );
        assert_eq!(ibv_rate_to_mult(IBV_RATE_MAX), -1);
        assert_eq!(mult_to_ibv_rate(16), IBV_RATE_40_GBPS);
        assert_eq!(mult_to_ibv_rate(3), IBV_RATE_MAX);
        assert_eq!(ibv_rate_to_mbps(IBV_RATE_100_GBPS), 103125);
        assert_eq!(ibv_rate_to_mbps(25), -1);
        assert_eq!(mbps_to_ibv_rate(14062), IBV_RATE_14_GBPS);
        assert_eq!(mbps_to_ibv_rate(100000), IBV_RATE_MAX);
        for &(r, _) in &RATE_MBPS {
            assert_eq!(mbps_to_ibv_rate(ibv_rate_to_mbps(r)), r);
        }
    }
}
