//! `rdma_event_str`, with rdma-core 44's strings (`librdmacm/cma.c`).

use core::ffi::{CStr, c_char};

use crate::ffi::*;
use crate::guard::ffi_guard;

const UNKNOWN_EVENT: &CStr = c"UNKNOWN EVENT";

/// Names of `enum rdma_cm_event_type`, indexed by value.
const EVENT_STR: [&CStr; 16] = [
    c"RDMA_CM_EVENT_ADDR_RESOLVED",
    c"RDMA_CM_EVENT_ADDR_ERROR",
    c"RDMA_CM_EVENT_ROUTE_RESOLVED",
    c"RDMA_CM_EVENT_ROUTE_ERROR",
    c"RDMA_CM_EVENT_CONNECT_REQUEST",
    c"RDMA_CM_EVENT_CONNECT_RESPONSE",
    c"RDMA_CM_EVENT_CONNECT_ERROR",
    c"RDMA_CM_EVENT_UNREACHABLE",
    c"RDMA_CM_EVENT_REJECTED",
    c"RDMA_CM_EVENT_ESTABLISHED",
    c"RDMA_CM_EVENT_DISCONNECTED",
    c"RDMA_CM_EVENT_DEVICE_REMOVAL",
    c"RDMA_CM_EVENT_MULTICAST_JOIN",
    c"RDMA_CM_EVENT_MULTICAST_ERROR",
    c"RDMA_CM_EVENT_ADDR_CHANGE",
    c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
];

/// `const char *rdma_event_str(enum rdma_cm_event_type event)` (RDMACM_1.0):
/// the enumerator's name, or `"UNKNOWN EVENT"`.
#[unsafe(no_mangle)]
pub extern "C" fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
    ffi_guard(
        || UNKNOWN_EVENT.as_ptr(),
        || {
            usize::try_from(event)
                .ok()
                .and_then(|i| EVENT_STR.get(i))
                .copied()
                .unwrap_or(UNKNOWN_EVENT)
                .as_ptr()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(e: rdma_cm_event_type) -> &'static str {
        // SAFETY: rdma_event_str returns a pointer to a static C string.
        unsafe { CStr::from_ptr(rdma_event_str(e)) }
            .to_str()
            .unwrap()
    }

    #[test]
    fn event_names() {
        assert_eq!(
            s(RDMA_CM_EVENT_ADDR_RESOLVED),
            "RDMA_CM_EVENT_ADDR_RESOLVED"
        );
        assert_eq!(s(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED");
        assert_eq!(
            s(RDMA_CM_EVENT_TIMEWAIT_EXIT),
            "RDMA_CM_EVENT_TIMEWAIT_EXIT"
        );
        assert_eq!(s(16), "UNKNOWN EVENT");
        assert_eq!(s(u32::MAX), "UNKNOWN EVENT");
    }
}
