/*
 * rdmalib.h - RDMA lib: a small RDMA messaging library over RDMA-CM.
 *
 * Link with -lrdmalib (target/compat/librdmalib.so, built by
 * `cargo xtask compat`). The library is softrdma's Rust crate rdmalib behind
 * a C ABI: it brings its own user-space RoCEv2 device (one per process,
 * address from SOFTRDMA_ADDR or the first free 127.0.0.N), so it needs
 * neither libibverbs nor librdmacm.
 *
 * Model
 * -----
 * A server and a client make one reliable connection. Each side has one
 * buffer (ctx->buffer, ctx->buffer_size bytes) registered once: the peer may
 * RDMA WRITE into it and RDMA READ from it, and rdma_send/rdma_recv take
 * their data from / put it into it. The buffer's address, rkey and size are
 * exchanged in the connection's private data, so rdma_write/rdma_read need
 * no extra round trip. Every call returns when its operation completed
 * (send/write/notify: acknowledged by the peer's device; read: data in the
 * local buffer). Messages land first in 8 receive slots of
 * min(buffer_size, 1 MiB) bytes that the library registers and posts at
 * setup (a sender that outruns the receiver waits, RNR, instead of failing)
 * and are copied into the buffer by rdma_recv.
 *
 * Notifications
 * -------------
 * rdma_notify_write/rdma_notify_read send a SEND WITH IMMEDIATE: the
 * immediate value says "write" or "read", the 16-byte payload names a range
 * of the receiver's buffer. The queue pair executes in order, so a write
 * notification arrives after the data it announces. The receiver waits with
 * rdmalib_wait_notify(): busy-polling its completion queue (cq_notify = 0) or
 * asleep on the completion channel (cq_notify = 1). Messages and
 * notifications share the receive queue; whichever kind is not being waited
 * for is queued, never lost.
 *
 * Errors
 * ------
 * Every int function returns 0 on success and -1 on failure with errno set;
 * rdmalib_last_error() describes the last failure of the calling thread.
 *   ENOTCONN    not connected yet (e.g. rdma_write before rdma_connect_server)
 *   EBADF       rdma_close on a context that is closed or was never set up
 *   EBUSY       setting up a context that is already set up
 *   ECONNRESET  the peer disconnected (or died): no hang, every wait ends
 *   ERANGE      a range outside the local buffer or the peer's buffer
 *   EMSGSIZE    a message larger than the peer accepts (see rdma_send) or
 *               than the room left in the local buffer
 *   ETIMEDOUT   timeout_ms passed, or the transport gave up retrying
 *   ECONNREFUSED no server listens there, or it rejected the connection
 *   EPROTO      the peer is not an rdmalib peer
 *   EINVAL      a bad argument (NULL context, bad port, ...)
 *   ENODEV      ib_dev names no device of this library
 *   EIO         anything else (an internal error never crashes the caller)
 *
 * Threads: one call at a time per context; distinct contexts are
 * independent. Zero the context before the first call:
 *     struct rdma_context ctx = {0};
 */
#ifndef RDMALIB_H
#define RDMALIB_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The context of one side. The handle fields keep the seed's names; they
 * are opaque handles owned by the library (they point to its own objects,
 * NOT to rdma-core's struct rdma_event_channel, ibv_pd, ... -- never pass
 * them to libibverbs/librdmacm). Each is non-NULL while the library holds
 * that object and NULL otherwise, so they tell what is set up.
 */
struct rdma_context
{
    void *ec;                 /* Event channel (CM events) */
    void *listener;           /* Listener ID (SERVER only) */
    void *conn;               /* Connection ID */
    void *pd;                 /* Protection Domain */
    void *mr;                 /* Memory Region (of buffer) */
    void *cq;                 /* Completion Queue */
    void *qp;                 /* Queue Pair */
    char *buffer;             /* The registered buffer (set by the library) */
    size_t buffer_size;       /* In: bytes to register (0: 4096); out: registered */
    void *event;              /* Last event for connection management */
    int cq_notify;            /* CQ notifications mode: 0 = polling, 1 = event-based */

    /* Extensions (not in the seed). */
    int timeout_ms;           /* In: bound on every wait in ms; 0 = no limit */
    int port;                 /* Out: server: the port it listens on */
    size_t remote_size;       /* Out: size of the peer's buffer once connected */
    void *lib;                /* The library's state: do not touch */
};

/* Notification kinds of rdmalib_wait_notify(). */
#define RDMALIB_NOTIFY_WRITE 1
#define RDMALIB_NOTIFY_READ  2

/* ---------------------------------------------------------------- Server */

/*
 * rdma_setup_server()
 *
 * setup server for RDMA communication:
 * - create an event channel to receive rdma events
 *     - connection request
 *     - connection established notification
 * - bind to an address
 * - create a listener; the port listened on is stored in sctx->port
 *
 * Reads sctx->buffer_size and sctx->cq_notify (used by rdma_wait_for_client).
 *
 * params:
 * - sctx: context to use (zeroed, or closed with rdma_close)
 * - port: port number to listen on (0: a free port, see sctx->port)
 * - ib_dev: device to use: NULL, "" or "softrdma0" for the process's
 *   device (listening on all its addresses), or an IPv4/IPv6 address to
 *   listen on (it becomes the device's address if the device is not running
 *   yet and SOFTRDMA_ADDR is unset)
 *
 * returns:
 * - return 0 on success
 * - return -1 on failure (errno: EBUSY, EINVAL, ENODEV, EADDRINUSE, ...)
 */
int rdma_setup_server(struct rdma_context *sctx, int port, const char *ib_dev);

/*
 * rdma_wait_for_client()
 *
 * wait for a client connection request:
 * - wait for a connection request (at most timeout_ms if set)
 * - create a PD, CQ (with a completion channel if cq_notify = 1), and QP
 * - register the MR: the buffer (sctx->buffer, sctx->buffer_size bytes)
 *   and the receive slots; post the receives
 * - accept the connection request, advertising the buffer
 * - wait for the connection to be established
 *
 * A client that is not an rdmalib client is rejected (-1, EPROTO); call
 * again for the next one.
 *
 * params:
 * - sctx: context to use (after rdma_setup_server)
 *
 * returns:
 * - return 0 on success
 * - return -1 on failure (errno: ENOTCONN without rdma_setup_server,
 *   EISCONN if a client is connected already, ETIMEDOUT, EPROTO, ...)
 */
int rdma_wait_for_client(struct rdma_context *sctx);

/* ---------------------------------------------------------------- Client */

/*
 * rdma_setup_client()
 *
 * setup client for RDMA communication:
 * - create event channel to receive rdma events
 *     - address resolved
 *     - route resolved
 *     - connection established notification
 * - create connection identifier
 * - resolve the peer address which binds the connection identifier to a
 *   local RDMA device
 * - resolve the route to the peer address
 * - create PD, CQ (with a completion channel if cq_notify = 1), and QP
 * - register the MR (cctx->buffer, cctx->buffer_size bytes; fill it now if
 *   you like) and post the receives
 *
 * params:
 * - cctx: context to use (zeroed, or closed with rdma_close)
 * - server: the server's IPv4/IPv6 address or host name
 * - port: the server's port
 *
 * returns:
 * - return 0 on success
 * - return -1 on failure (errno: EBUSY, EINVAL, EADDRNOTAVAIL, ...)
 */
int rdma_setup_client(struct rdma_context *cctx, const char *server, int port);

/*
 * rdma_connect_server()
 *
 * connect to server:
 * - connect to the server, advertising the buffer
 * - wait for the connection to be established (at most timeout_ms if set);
 *   cctx->remote_size is then the size of the server's buffer
 *
 * On failure the connection's resources are released (cctx->buffer is
 * NULL); call rdma_close, then set up again to retry.
 *
 * params:
 * - cctx: context to use (after rdma_setup_client)
 *
 * returns:
 * - return 0 on success
 * - return -1 on failure (errno: ENOTCONN without rdma_setup_client,
 *   ECONNREFUSED, EHOSTUNREACH, ETIMEDOUT, EPROTO, ...)
 */
int rdma_connect_server(struct rdma_context *cctx);

/* ---------------------------------------------------------------- Common */

/*
 * rdma_close()
 *
 * close the RDMA connection:
 * - disconnect (the peer's waits end with ECONNRESET) and wait for the
 *   connection manager to confirm it
 * - destroy the QP
 * - destroy the CQ
 * - destroy the PD
 * - destroy the connection identifier (and the listener)
 * - destroy the event channel
 * - free the buffer
 * and zero every field the library set (input fields are kept).
 *
 * params:
 * - ctx: context to use
 *
 * returns:
 * - return 0 on success
 * - return -1 on failure (errno: EBADF if the context is closed already or
 *   was never set up, EINVAL for NULL)
 */
int rdma_close(struct rdma_context *ctx);

/*
 * rdma_send()
 *
 * send data to the other peer:
 * - post a send of len bytes at ctx->buffer + offset on the SQ of the QP
 *   (one message; the peer receives it with rdma_recv)
 * - wait for its completion on the local CQ (the peer's device has it)
 *
 * params:
 * - ctx: context to use (connected)
 * - offset: where the message starts in ctx->buffer
 * - len: its length (0 allowed; at most what the peer accepts:
 *   min(its buffer_size, 1 MiB), the size of its receive slots)
 *
 * returns:
 * - return 0 on success
 * - return -1 on failure (errno: ENOTCONN, ERANGE, EMSGSIZE, ECONNRESET, ...)
 */
int rdma_send(struct rdma_context *ctx, size_t offset, size_t len);

/*
 * rdma_recv()
 *
 * receive data from the other peer:
 * - receives were posted on the RQ of the QP at setup; on a message the
 *   NIC writes it into a receive slot and posts a completion to the local CQ
 * - wait for the next message (polling or event mode), copy it to
 *   ctx->buffer + offset and post the slot again
 *
 * params:
 * - ctx: context to use (connected)
 * - offset: where to put the message in ctx->buffer
 * - len: out: the message's length (may be NULL)
 *
 * returns:
 * - return 0 on success
 * - return -1 on failure (errno: ENOTCONN, ECONNRESET once the peer
 *   disconnected and every message it sent was received, EMSGSIZE if the
 *   message does not fit at offset (it stays queued), ETIMEDOUT, ...)
 */
int rdma_recv(struct rdma_context *ctx, size_t offset, size_t *len);

/*
 * rdma_write()
 *
 * write data to the peer (RDMA WRITE):
 * - post a write of len bytes at ctx->buffer + local_offset to the peer's
 *   buffer + remote_offset on the SQ of the QP
 * - the NIC writes the data into the remote buffer (no CPU of the peer)
 * - wait for its completion on the local CQ
 *
 * params:
 * - ctx: context to use (connected)
 * - local_offset, remote_offset, len: the range (both ranges are checked
 *   before anything is sent: ERANGE)
 *
 * returns:
 * - return 0 on success
 * - return -1 on failure (errno: ENOTCONN, ERANGE, ECONNRESET, ...)
 */
int rdma_write(struct rdma_context *ctx, size_t local_offset, size_t remote_offset,
               size_t len);

/*
 * rdma_read()
 *
 * read data from the peer (RDMA READ):
 * - post a read of len bytes at the peer's buffer + remote_offset into
 *   ctx->buffer + local_offset on the SQ of the QP
 * - the NIC reads the data from the remote buffer
 * - wait for its completion on the local CQ (the data is in ctx->buffer)
 *
 * params:
 * - ctx: context to use (connected)
 * - local_offset, remote_offset, len: the range (checked: ERANGE)
 *
 * returns:
 * - return 0 on success
 * - return -1 on failure (errno: ENOTCONN, ERANGE, ECONNRESET, ...)
 */
int rdma_read(struct rdma_context *ctx, size_t local_offset, size_t remote_offset,
              size_t len);

/*
 * rdma_notify_write()
 *
 * notify the other peer that a write operation has been completed: the
 * range [remote_offset, remote_offset + len) of the peer's buffer holds the
 * data (the peer gets RDMALIB_NOTIFY_WRITE from rdmalib_wait_notify).
 *
 * params:
 * - ctx: context to use (connected)
 * - remote_offset, len: the range of the peer's buffer (checked: ERANGE)
 *
 * returns:
 * - return 0 on success
 * - return -1 on failure (errno: ENOTCONN, ERANGE, ECONNRESET, ...)
 */
int rdma_notify_write(struct rdma_context *ctx, size_t remote_offset, size_t len);

/*
 * rdma_notify_read()
 *
 * notify the other peer that a read operation has been completed: this
 * side is done reading [remote_offset, remote_offset + len) of the peer's
 * buffer, which may reuse it (the peer gets RDMALIB_NOTIFY_READ).
 *
 * params:
 * - ctx: context to use (connected)
 * - remote_offset, len: the range of the peer's buffer (checked: ERANGE)
 *
 * returns:
 * - return 0 on success
 * - return -1 on failure (errno: ENOTCONN, ERANGE, ECONNRESET, ...)
 */
int rdma_notify_read(struct rdma_context *ctx, size_t remote_offset, size_t len);

/* ------------------------------------------------ Extensions (not in the seed) */

/*
 * rdmalib_wait_notify()
 *
 * wait for the next notification from the peer (polling or event mode per
 * cq_notify; at most timeout_ms if set). Messages that arrive meanwhile are
 * kept for rdma_recv.
 *
 * params:
 * - ctx: context to use (connected)
 * - kind: out: RDMALIB_NOTIFY_WRITE or RDMALIB_NOTIFY_READ (may be NULL)
 * - offset, len: out: the range of THIS side's buffer (may be NULL)
 *
 * returns:
 * - return 0 on success
 * - return -1 on failure (errno: ENOTCONN, ECONNRESET, ETIMEDOUT, ...)
 */
int rdmalib_wait_notify(struct rdma_context *ctx, int *kind, size_t *offset, size_t *len);

/*
 * rdmalib_last_error()
 *
 * returns a description of the last failure of a call of this library in
 * the calling thread ("" if none). Valid until the next failing call in the
 * same thread.
 */
const char *rdmalib_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* RDMALIB_H */
