//! MAD I/O: every function forwards to `__softrdma_umad_*` in our
//! `libibverbs.so.1` (private version node `SOFTRDMA_PRIVATE_1`), where the
//! one engine of the process and its QP1 live.

use crate::ffi::umad_reg_attr;
use core::ffi::{c_char, c_int, c_long, c_void};

macro_rules! forward {
    ($( $(#[$m:meta])* fn $name:ident / $target:ident ( $($a:ident : $t:ty),* ) -> $r:ty; )*) => {
        unsafe extern "C" {
            $( fn $target($($a: $t),*) -> $r; )*
        }
        $(
            $(#[$m])*
            ///
            /// # Safety
            ///
            /// The contract of the libibumad function of the same name.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
                // SAFETY: same signature and contract; the implementation
                // checks the port and agent ids it is given.
                unsafe { $target($($a),*) }
            }
        )*
    };
}

forward! {
    /// `int umad_open_port(const char *ca_name, int portnum)`: a descriptor
    /// (an eventfd readable while MADs wait), or a negative errno.
    fn umad_open_port / __softrdma_umad_open_port(ca_name: *const c_char, portnum: c_int) -> c_int;
    /// `int umad_close_port(int portid)`.
    fn umad_close_port / __softrdma_umad_close_port(portid: c_int) -> c_int;
    /// `int umad_register(int portid, int mgmt_class, int mgmt_version,
    /// uint8_t rmpp_version, long method_mask[])`.
    fn umad_register / __softrdma_umad_register(
        portid: c_int, mgmt_class: c_int, mgmt_version: c_int, rmpp_version: u8,
        method_mask: *const c_long
    ) -> c_int;
    /// `int umad_register_oui(int portid, int mgmt_class, uint8_t
    /// rmpp_version, uint8_t oui[3], long method_mask[])`.
    fn umad_register_oui / __softrdma_umad_register_oui(
        portid: c_int, mgmt_class: c_int, rmpp_version: u8, oui: *const u8,
        method_mask: *const c_long
    ) -> c_int;
    /// `int umad_register2(int port_fd, struct umad_reg_attr *attr, uint32_t *agent_id)`.
    fn umad_register2 / __softrdma_umad_register2(
        port_fd: c_int, attr: *const umad_reg_attr, agent_id: *mut u32
    ) -> c_int;
    /// `int umad_unregister(int portid, int agentid)`.
    fn umad_unregister / __softrdma_umad_unregister(portid: c_int, agentid: c_int) -> c_int;
    /// `int umad_send(int portid, int agentid, void *umad, int length, int
    /// timeout_ms, int retries)`.
    fn umad_send / __softrdma_umad_send(
        portid: c_int, agentid: c_int, umad: *const c_void, length: c_int,
        timeout_ms: c_int, retries: c_int
    ) -> c_int;
    /// `int umad_recv(int portid, void *umad, int *length, int timeout_ms)`.
    fn umad_recv / __softrdma_umad_recv(
        portid: c_int, umad: *mut c_void, length: *mut c_int, timeout_ms: c_int
    ) -> c_int;
    /// `int umad_poll(int portid, int timeout_ms)`.
    fn umad_poll / __softrdma_umad_poll(portid: c_int, timeout_ms: c_int) -> c_int;
}

/// `int umad_get_fd(int portid)`: the port's descriptor is its id.
#[unsafe(no_mangle)]
pub extern "C" fn umad_get_fd(portid: c_int) -> c_int {
    portid
}
