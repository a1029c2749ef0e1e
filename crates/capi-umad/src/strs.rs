//! libibumad's name tables (`umad_class_str`, `umad_method_str`,
//! `umad_attribute_str`, the status strings), for the classes and
//! attributes IBTA names; anything else is `"<unknown>"`.

use core::ffi::{CStr, c_char};

const UNKNOWN: &CStr = c"<unknown>";

fn class_name(class: u8) -> &'static CStr {
    match class {
        0x01 => c"Subn",
        0x81 => c"SubnDirectedRoute",
        0x03 => c"SubnAdmin",
        0x04 => c"Perf",
        0x05 => c"BM",
        0x06 => c"DevMgt",
        0x07 => c"ComMgt",
        0x08 => c"SNMP",
        0x21 => c"CongestionManagement",
        0x09..=0x0F | 0x30..=0x4F => c"Vendor",
        _ => UNKNOWN,
    }
}

fn method_name(method: u8) -> &'static CStr {
    match method {
        0x01 => c"Get",
        0x02 => c"Set",
        0x81 => c"GetResp",
        0x03 => c"Send",
        0x05 => c"Trap",
        0x06 => c"Report",
        0x86 => c"ReportResp",
        0x07 => c"TrapRepress",
        0x12 => c"GetTable",
        0x92 => c"GetTableResp",
        0x13 => c"GetTraceTable",
        0x14 => c"GetMulti",
        0x94 => c"GetMultiResp",
        0x15 => c"Delete",
        0x95 => c"DeleteResp",
        _ => UNKNOWN,
    }
}

fn attribute_name(class: u8, attr: u16) -> &'static CStr {
    match (class, attr) {
        (_, 0x0001) => c"ClassPortInfo",
        (_, 0x0002) => c"Notice",
        (_, 0x0003) => c"InformInfo",
        (0x04, 0x0010) => c"PortSamplesControl",
        (0x04, 0x0011) => c"PortSamplesResult",
        (0x04, 0x0012) => c"PortCounters",
        (0x04, 0x001D) => c"PortCountersExtended",
        (0x07, 0x0010) => c"ConnectRequest",
        (0x07, 0x0011) => c"MsgRcptAck",
        (0x07, 0x0012) => c"ConnectReject",
        (0x07, 0x0013) => c"ConnectReply",
        (0x07, 0x0014) => c"ReadyToUse",
        (0x07, 0x0015) => c"DisconnectRequest",
        (0x07, 0x0016) => c"DisconnectReply",
        (0x07, 0x0017) => c"ServiceIDResReq",
        (0x07, 0x0018) => c"ServiceIDResReqResp",
        (0x07, 0x0019) => c"LoadAlternatePath",
        (0x07, 0x001A) => c"AlternatePathResponse",
        _ => UNKNOWN,
    }
}

/// The "invalid field" code of a MAD status (IBTA 13.4.7, bits 2-4), or
/// the busy/redirect bits.
fn common_status(status: u16) -> &'static CStr {
    if status & 0x1 != 0 {
        return c"Busy";
    }
    if status & 0x2 != 0 {
        return c"Redirection required";
    }
    match (status >> 2) & 0x7 {
        0 => c"Success",
        1 => c"Bad Class and/or Base Version",
        2 => c"Method not supported",
        3 => c"Method/Attribute combo not supported",
        7 => c"Invalid Attribute/Modifier value",
        _ => UNKNOWN,
    }
}

/// The SA-specific code of a MAD status (IBTA 15.2.1.1, bits 8-15).
fn sa_status(status: u16) -> &'static CStr {
    match status >> 8 {
        0 => c"Success",
        1 => c"No Resources",
        2 => c"Request Invalid",
        3 => c"No Records",
        4 => c"Too Many Records",
        5 => c"Invalid GID",
        6 => c"Insufficient Components",
        7 => c"Request Denied",
        8 => c"Request Denied, priority",
        _ => UNKNOWN,
    }
}

/// `const char *umad_class_str(uint8_t mgmt_class)`.
#[unsafe(no_mangle)]
pub extern "C" fn umad_class_str(mgmt_class: u8) -> *const c_char {
    class_name(mgmt_class).as_ptr()
}

/// `const char *umad_method_str(uint8_t mgmt_class, uint8_t method)`.
#[unsafe(no_mangle)]
pub extern "C" fn umad_method_str(_mgmt_class: u8, method: u8) -> *const c_char {
    method_name(method).as_ptr()
}

/// `const char *umad_attribute_str(uint8_t mgmt_class, __be16 attr_id)`.
#[unsafe(no_mangle)]
pub extern "C" fn umad_attribute_str(mgmt_class: u8, attr_id: u16) -> *const c_char {
    attribute_name(mgmt_class, u16::from_be(attr_id)).as_ptr()
}

/// `const char *umad_common_mad_status_str(__be16 status)`.
#[unsafe(no_mangle)]
pub extern "C" fn umad_common_mad_status_str(status: u16) -> *const c_char {
    common_status(u16::from_be(status)).as_ptr()
}

/// `const char *umad_sa_mad_status_str(__be16 status)`.
#[unsafe(no_mangle)]
pub extern "C" fn umad_sa_mad_status_str(status: u16) -> *const c_char {
    sa_status(u16::from_be(status)).as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(class_name(0x04), c"Perf");
        assert_eq!(method_name(0x81), c"GetResp");
        assert_eq!(attribute_name(0x04, 0x001D), c"PortCountersExtended");
        assert_eq!(attribute_name(0x03, 0x0012), UNKNOWN);
        assert_eq!(
            common_status(3 << 2),
            c"Method/Attribute combo not supported"
        );
        assert_eq!(common_status(1), c"Busy");
        assert_eq!(sa_status(3 << 8), c"No Records");
    }
}
