//! The `rdma_*` connection-manager API (RDMACM_1.0–1.3). All stubs for now:
//! int functions return `-1` with `errno = ENOSYS`, constructors `NULL` with
//! errno. See `shared/reference/abi.md` §4.2 for what the tools need.

use core::ffi::{c_char, c_int, c_void};

use libc::sockaddr;

use crate::ffi::*;
use crate::guard::{NOT_IMPLEMENTED, ret, stubs};

stubs! {
    /// `struct rdma_event_channel *rdma_create_event_channel(void)`: `NULL` with
    /// `errno = ENODEV` until there is a device ("No RDMA devices were detected").
    fn rdma_create_event_channel() -> *mut rdma_event_channel => ret::null(libc::ENODEV);
    /// `void rdma_destroy_event_channel(struct rdma_event_channel *)`.
    fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) => ();
    /// `int rdma_create_id(struct rdma_event_channel *, struct rdma_cm_id **, void *context,
    /// enum rdma_port_space)`; a NULL channel makes a synchronous id.
    fn rdma_create_id(channel: *mut rdma_event_channel, id: *mut *mut rdma_cm_id, context: *mut c_void,
        ps: rdma_port_space) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_create_ep(struct rdma_cm_id **, struct rdma_addrinfo *, struct ibv_pd *,
    /// struct ibv_qp_init_attr *)`.
    fn rdma_create_ep(id: *mut *mut rdma_cm_id, res: *mut rdma_addrinfo, pd: *mut ibv_pd,
        qp_init_attr: *mut ibv_qp_init_attr) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `void rdma_destroy_ep(struct rdma_cm_id *)`.
    fn rdma_destroy_ep(id: *mut rdma_cm_id) => ();
    /// `int rdma_destroy_id(struct rdma_cm_id *)`.
    fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_bind_addr(struct rdma_cm_id *, struct sockaddr *)`.
    fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_resolve_addr(struct rdma_cm_id *, struct sockaddr *src, struct sockaddr *dst,
    /// int timeout_ms)`.
    fn rdma_resolve_addr(id: *mut rdma_cm_id, src_addr: *mut sockaddr, dst_addr: *mut sockaddr,
        timeout_ms: c_int) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_resolve_route(struct rdma_cm_id *, int timeout_ms)`.
    fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_create_qp(struct rdma_cm_id *, struct ibv_pd *, struct ibv_qp_init_attr *)`.
    fn rdma_create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_create_qp_ex(struct rdma_cm_id *, struct ibv_qp_init_attr_ex *)`.
    fn rdma_create_qp_ex(id: *mut rdma_cm_id, qp_init_attr: *mut ibv_qp_init_attr_ex) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `void rdma_destroy_qp(struct rdma_cm_id *)`.
    fn rdma_destroy_qp(id: *mut rdma_cm_id) => ();
    /// `int rdma_connect(struct rdma_cm_id *, struct rdma_conn_param *)`.
    fn rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_establish(struct rdma_cm_id *)` (RDMACM_1.2).
    fn rdma_establish(id: *mut rdma_cm_id) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_listen(struct rdma_cm_id *, int backlog)`.
    fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)`.
    fn rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_accept(struct rdma_cm_id *, struct rdma_conn_param *)`.
    fn rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_reject(struct rdma_cm_id *, const void *private_data, uint8_t len)`.
    fn rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_reject_ece(struct rdma_cm_id *, const void *private_data, uint8_t len)` (RDMACM_1.3).
    fn rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_notify(struct rdma_cm_id *, enum ibv_event_type)`.
    fn rdma_notify(id: *mut rdma_cm_id, event: ibv_event_type) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_disconnect(struct rdma_cm_id *)`: must move the QP to ERR (flush).
    fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_join_multicast(struct rdma_cm_id *, struct sockaddr *, void *context)`.
    fn rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr, context: *mut c_void) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_leave_multicast(struct rdma_cm_id *, struct sockaddr *)`.
    fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_join_multicast_ex(struct rdma_cm_id *, struct rdma_cm_join_mc_attr_ex *,
    /// void *context)` (RDMACM_1.1).
    fn rdma_join_multicast_ex(id: *mut rdma_cm_id, mc_join_attr: *mut rdma_cm_join_mc_attr_ex,
        context: *mut c_void) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_get_cm_event(struct rdma_event_channel *, struct rdma_cm_event **)`:
    /// blocks in `read()` on the channel fd.
    fn rdma_get_cm_event(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_ack_cm_event(struct rdma_cm_event *)`.
    fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `__be16 rdma_get_src_port(struct rdma_cm_id *)`.
    fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 => 0;
    /// `__be16 rdma_get_dst_port(struct rdma_cm_id *)`.
    fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 => 0;
    /// `struct ibv_context **rdma_get_devices(int *num_devices)`.
    fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context => ret::null(libc::ENODEV);
    /// `void rdma_free_devices(struct ibv_context **list)`.
    fn rdma_free_devices(list: *mut *mut ibv_context) => ();
    /// `int rdma_set_option(struct rdma_cm_id *, int level, int optname, void *optval,
    /// size_t optlen)`.
    fn rdma_set_option(id: *mut rdma_cm_id, level: c_int, optname: c_int, optval: *mut c_void,
        optlen: usize) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_migrate_id(struct rdma_cm_id *, struct rdma_event_channel *)`.
    fn rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_getaddrinfo(const char *node, const char *service,
    /// const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)`.
    fn rdma_getaddrinfo(node: *const c_char, service: *const c_char, hints: *const rdma_addrinfo,
        res: *mut *mut rdma_addrinfo) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `void rdma_freeaddrinfo(struct rdma_addrinfo *)`.
    fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) => ();
    /// `int rdma_init_qp_attr(struct rdma_cm_id *, struct ibv_qp_attr *, int *qp_attr_mask)`
    /// (RDMACM_1.2).
    fn rdma_init_qp_attr(id: *mut rdma_cm_id, qp_attr: *mut ibv_qp_attr, qp_attr_mask: *mut c_int) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_set_local_ece(struct rdma_cm_id *, struct ibv_ece *)` (RDMACM_1.3).
    fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_get_remote_ece(struct rdma_cm_id *, struct ibv_ece *)` (RDMACM_1.3).
    fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_create_srq(struct rdma_cm_id *, struct ibv_pd *, struct ibv_srq_init_attr *)`.
    fn rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rdma_create_srq_ex(struct rdma_cm_id *, struct ibv_srq_init_attr_ex *)`.
    fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `void rdma_destroy_srq(struct rdma_cm_id *)`.
    fn rdma_destroy_srq(id: *mut rdma_cm_id) => ();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::errno;

    #[test]
    fn stubs_fail_in_librdmacm_convention() {
        assert!(rdma_create_event_channel().is_null());
        assert_eq!(errno(), libc::ENODEV);
        assert_eq!(
            rdma_create_id(
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                RDMA_PS_TCP
            ),
            -1
        );
        assert_eq!(errno(), libc::ENOSYS);
        rdma_destroy_event_channel(core::ptr::null_mut());
    }
}
