//! The `rdma_*` connection-manager API (RDMACM_1.0–1.3): every function
//! forwards to `__softrdma_rdma_*` in our `libibverbs.so.1` (private version
//! node `SOFTRDMA_PRIVATE_1`), where the one engine of the process lives.
//! `rdma_event_str` is implemented here (crate::strs).

use core::ffi::{c_char, c_int, c_void};

use libc::sockaddr;

use crate::ffi::*;

macro_rules! forward {
    ($( $(#[$m:meta])* fn $name:ident / $target:ident ( $($a:ident : $t:ty),* ) $(-> $r:ty)?; )*) => {
        unsafe extern "C" {
            $( fn $target($($a: $t),*) $(-> $r)?; )*
        }
        $(
            $(#[$m])*
            ///
            /// # Safety
            ///
            /// The contract of the librdmacm function of the same name.
            #[unsafe(no_mangle)]
            pub unsafe extern "C" fn $name($($a: $t),*) $(-> $r)? {
                // SAFETY: same signature and contract; the implementation checks
                // its pointers against the registry of live objects.
                unsafe { $target($($a),*) }
            }
        )*
    };
}

forward! {
    /// `struct rdma_event_channel *rdma_create_event_channel(void)`: `NULL` with
    /// `errno = ENODEV` until there is a device ("No RDMA devices were detected").
    fn rdma_create_event_channel / __softrdma_rdma_create_event_channel() -> *mut rdma_event_channel;
    /// `void rdma_destroy_event_channel(struct rdma_event_channel *)`.
    fn rdma_destroy_event_channel / __softrdma_rdma_destroy_event_channel(channel: *mut rdma_event_channel);
    /// `int rdma_create_id(struct rdma_event_channel *, struct rdma_cm_id **, void *context,
    /// enum rdma_port_space)`; a NULL channel makes a synchronous id.
    fn rdma_create_id / __softrdma_rdma_create_id(channel: *mut rdma_event_channel, id: *mut *mut rdma_cm_id, context: *mut c_void, ps: rdma_port_space) -> c_int;
    /// `int rdma_create_ep(struct rdma_cm_id **, struct rdma_addrinfo *, struct ibv_pd *,
    /// struct ibv_qp_init_attr *)`.
    fn rdma_create_ep / __softrdma_rdma_create_ep(id: *mut *mut rdma_cm_id, res: *mut rdma_addrinfo, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> c_int;
    /// `void rdma_destroy_ep(struct rdma_cm_id *)`.
    fn rdma_destroy_ep / __softrdma_rdma_destroy_ep(id: *mut rdma_cm_id);
    /// `int rdma_destroy_id(struct rdma_cm_id *)`.
    fn rdma_destroy_id / __softrdma_rdma_destroy_id(id: *mut rdma_cm_id) -> c_int;
    /// `int rdma_bind_addr(struct rdma_cm_id *, struct sockaddr *)`.
    fn rdma_bind_addr / __softrdma_rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int;
    /// `int rdma_resolve_addr(struct rdma_cm_id *, struct sockaddr *src, struct sockaddr *dst,
    /// int timeout_ms)`.
    fn rdma_resolve_addr / __softrdma_rdma_resolve_addr(id: *mut rdma_cm_id, src_addr: *mut sockaddr, dst_addr: *mut sockaddr, timeout_ms: c_int) -> c_int;
    /// `int rdma_resolve_route(struct rdma_cm_id *, int timeout_ms)`.
    fn rdma_resolve_route / __softrdma_rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int;
    /// `int rdma_create_qp(struct rdma_cm_id *, struct ibv_pd *, struct ibv_qp_init_attr *)`.
    fn rdma_create_qp / __softrdma_rdma_create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, qp_init_attr: *mut ibv_qp_init_attr) -> c_int;
    /// `int rdma_create_qp_ex(struct rdma_cm_id *, struct ibv_qp_init_attr_ex *)`.
    fn rdma_create_qp_ex / __softrdma_rdma_create_qp_ex(id: *mut rdma_cm_id, qp_init_attr: *mut ibv_qp_init_attr_ex) -> c_int;
    /// `void rdma_destroy_qp(struct rdma_cm_id *)`.
    fn rdma_destroy_qp / __softrdma_rdma_destroy_qp(id: *mut rdma_cm_id);
    /// `int rdma_connect(struct rdma_cm_id *, struct rdma_conn_param *)`.
    fn rdma_connect / __softrdma_rdma_connect(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int;
    /// `int rdma_establish(struct rdma_cm_id *)` (RDMACM_1.2).
    fn rdma_establish / __softrdma_rdma_establish(id: *mut rdma_cm_id) -> c_int;
    /// `int rdma_listen(struct rdma_cm_id *, int backlog)`.
    fn rdma_listen / __softrdma_rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int;
    /// `int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)`.
    fn rdma_get_request / __softrdma_rdma_get_request(listen: *mut rdma_cm_id, id: *mut *mut rdma_cm_id) -> c_int;
    /// `int rdma_accept(struct rdma_cm_id *, struct rdma_conn_param *)`.
    fn rdma_accept / __softrdma_rdma_accept(id: *mut rdma_cm_id, conn_param: *mut rdma_conn_param) -> c_int;
    /// `int rdma_reject(struct rdma_cm_id *, const void *private_data, uint8_t len)`.
    fn rdma_reject / __softrdma_rdma_reject(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int;
    /// `int rdma_reject_ece(struct rdma_cm_id *, const void *private_data, uint8_t len)` (RDMACM_1.3).
    fn rdma_reject_ece / __softrdma_rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8) -> c_int;
    /// `int rdma_notify(struct rdma_cm_id *, enum ibv_event_type)`.
    fn rdma_notify / __softrdma_rdma_notify(id: *mut rdma_cm_id, event: ibv_event_type) -> c_int;
    /// `int rdma_disconnect(struct rdma_cm_id *)`: must move the QP to ERR (flush).
    fn rdma_disconnect / __softrdma_rdma_disconnect(id: *mut rdma_cm_id) -> c_int;
    /// `int rdma_join_multicast(struct rdma_cm_id *, struct sockaddr *, void *context)`.
    fn rdma_join_multicast / __softrdma_rdma_join_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr, context: *mut c_void) -> c_int;
    /// `int rdma_leave_multicast(struct rdma_cm_id *, struct sockaddr *)`.
    fn rdma_leave_multicast / __softrdma_rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int;
    /// `int rdma_join_multicast_ex(struct rdma_cm_id *, struct rdma_cm_join_mc_attr_ex *,
    /// void *context)` (RDMACM_1.1).
    fn rdma_join_multicast_ex / __softrdma_rdma_join_multicast_ex(id: *mut rdma_cm_id, mc_join_attr: *mut rdma_cm_join_mc_attr_ex, context: *mut c_void) -> c_int;
    /// `int rdma_get_cm_event(struct rdma_event_channel *, struct rdma_cm_event **)`:
    /// blocks in `read()` on the channel fd.
    fn rdma_get_cm_event / __softrdma_rdma_get_cm_event(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> c_int;
    /// `int rdma_ack_cm_event(struct rdma_cm_event *)`.
    fn rdma_ack_cm_event / __softrdma_rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int;
    /// `__be16 rdma_get_src_port(struct rdma_cm_id *)`.
    fn rdma_get_src_port / __softrdma_rdma_get_src_port(id: *mut rdma_cm_id) -> u16;
    /// `__be16 rdma_get_dst_port(struct rdma_cm_id *)`.
    fn rdma_get_dst_port / __softrdma_rdma_get_dst_port(id: *mut rdma_cm_id) -> u16;
    /// `struct ibv_context **rdma_get_devices(int *num_devices)`.
    fn rdma_get_devices / __softrdma_rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context;
    /// `void rdma_free_devices(struct ibv_context **list)`.
    fn rdma_free_devices / __softrdma_rdma_free_devices(list: *mut *mut ibv_context);
    /// `int rdma_set_option(struct rdma_cm_id *, int level, int optname, void *optval,
    /// size_t optlen)`.
    fn rdma_set_option / __softrdma_rdma_set_option(id: *mut rdma_cm_id, level: c_int, optname: c_int, optval: *mut c_void, optlen: usize) -> c_int;
    /// `int rdma_migrate_id(struct rdma_cm_id *, struct rdma_event_channel *)`.
    fn rdma_migrate_id / __softrdma_rdma_migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int;
    /// `int rdma_getaddrinfo(const char *node, const char *service,
    /// const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)`.
    fn rdma_getaddrinfo / __softrdma_rdma_getaddrinfo(node: *const c_char, service: *const c_char, hints: *const rdma_addrinfo, res: *mut *mut rdma_addrinfo) -> c_int;
    /// `void rdma_freeaddrinfo(struct rdma_addrinfo *)`.
    fn rdma_freeaddrinfo / __softrdma_rdma_freeaddrinfo(res: *mut rdma_addrinfo);
    /// `int rdma_init_qp_attr(struct rdma_cm_id *, struct ibv_qp_attr *, int *qp_attr_mask)`
    /// (RDMACM_1.2).
    fn rdma_init_qp_attr / __softrdma_rdma_init_qp_attr(id: *mut rdma_cm_id, qp_attr: *mut ibv_qp_attr, qp_attr_mask: *mut c_int) -> c_int;
    /// `int rdma_set_local_ece(struct rdma_cm_id *, struct ibv_ece *)` (RDMACM_1.3).
    fn rdma_set_local_ece / __softrdma_rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int;
    /// `int rdma_get_remote_ece(struct rdma_cm_id *, struct ibv_ece *)` (RDMACM_1.3).
    fn rdma_get_remote_ece / __softrdma_rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int;
    /// `int rdma_create_srq(struct rdma_cm_id *, struct ibv_pd *, struct ibv_srq_init_attr *)`.
    fn rdma_create_srq / __softrdma_rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> c_int;
    /// `int rdma_create_srq_ex(struct rdma_cm_id *, struct ibv_srq_init_attr_ex *)`.
    fn rdma_create_srq_ex / __softrdma_rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> c_int;
    /// `void rdma_destroy_srq(struct rdma_cm_id *)`.
    fn rdma_destroy_srq / __softrdma_rdma_destroy_srq(id: *mut rdma_cm_id);
}
