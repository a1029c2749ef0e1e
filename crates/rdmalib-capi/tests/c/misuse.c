/*
 * misuse.c - the C API's answers to misuse, as a C program sees them
 * (run by tests/c_programs.rs as two processes).
 *
 *   misuse server             serve one client: echo messages until it leaves
 *   misuse client HOST PORT   misuse the API around a connection
 *
 * Each prints "<role> ok" and exits 0 when every check held; otherwise it
 * prints the failed check and exits 1.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdmalib.h>

#define SERVER_BUFFER 4096
#define CLIENT_BUFFER 8192

static int failed;

/* The call returned -1 with errno `want`. */
static void expect_fail(int r, int want, const char *what)
{
    int e = errno;
    if (r != -1 || e != want) {
        printf("FAILED %s: returned %d, errno %d (%s), wanted -1 with errno %d (%s); %s\n", what,
               r, e, strerror(e), want, strerror(want), rdmalib_last_error());
        failed = 1;
    } else if (rdmalib_last_error()[0] == '\0') {
        printf("FAILED %s: no error message\n", what);
        failed = 1;
    } else {
        printf("%s: %s\n", what, rdmalib_last_error());
    }
}

static void expect_ok(int r, const char *what)
{
    if (r != 0) {
        printf("FAILED %s: %s (%s)\n", what, rdmalib_last_error(), strerror(errno));
        failed = 1;
    }
}

static int server(void)
{
    struct rdma_context ctx = {0};
    ctx.buffer_size = SERVER_BUFFER;
    ctx.timeout_ms = 30000;
    expect_ok(rdma_setup_server(&ctx, 0, NULL), "rdma_setup_server");
    if (failed)
        return 1;
    printf("listening on 0.0.0.0:%d\n", ctx.port);
    fflush(stdout);
    expect_fail(rdma_connect_server(&ctx), EINVAL, "rdma_connect_server on a server");
    expect_ok(rdma_wait_for_client(&ctx), "rdma_wait_for_client");
    expect_fail(rdma_wait_for_client(&ctx), EISCONN, "a second rdma_wait_for_client");
    for (;;) {
        size_t len;
        if (rdma_recv(&ctx, 0, &len) != 0) {
            expect_fail(-1, ECONNRESET, "rdma_recv after the client left");
            break;
        }
        expect_ok(rdma_send(&ctx, 0, len), "rdma_send (echo)");
    }
    expect_fail(rdma_write(&ctx, 0, 0, 1), ECONNRESET, "rdma_write after the client left");
    expect_ok(rdma_close(&ctx), "rdma_close");
    expect_fail(rdma_close(&ctx), EBADF, "rdma_close twice");
    if (ctx.buffer || ctx.conn || ctx.qp || ctx.listener || ctx.ec || ctx.lib) {
        printf("FAILED: rdma_close left handles behind\n");
        failed = 1;
    }
    if (!failed)
        printf("server ok\n");
    return failed;
}

static int client(const char *host, int port)
{
    struct rdma_context ctx = {0};
    size_t len;
    /* Before anything is set up. */
    expect_fail(rdma_write(&ctx, 0, 0, 1), ENOTCONN, "rdma_write before setup");
    expect_fail(rdma_send(&ctx, 0, 1), ENOTCONN, "rdma_send before setup");
    expect_fail(rdma_close(&ctx), EBADF, "rdma_close before setup");
    expect_fail(rdma_connect_server(&ctx), ENOTCONN, "rdma_connect_server before setup");
    expect_fail(rdma_close(NULL), EINVAL, "rdma_close(NULL)");
    ctx.cq_notify = 2;
    expect_fail(rdma_setup_client(&ctx, host, port), EINVAL, "cq_notify = 2");
    ctx.cq_notify = 1;
    ctx.buffer_size = CLIENT_BUFFER;
    ctx.timeout_ms = 30000;

    expect_ok(rdma_setup_client(&ctx, host, port), "rdma_setup_client");
    expect_fail(rdma_setup_client(&ctx, host, port), EBUSY, "rdma_setup_client twice");
    /* Set up, not connected: the buffer exists, the connection does not. */
    if (!ctx.buffer || ctx.buffer_size != CLIENT_BUFFER) {
        printf("FAILED: no buffer after rdma_setup_client\n");
        failed = 1;
    }
    expect_fail(rdma_write(&ctx, 0, 0, 1), ENOTCONN, "rdma_write before connect");
    expect_fail(rdma_notify_write(&ctx, 0, 1), ENOTCONN, "rdma_notify_write before connect");
    expect_ok(rdma_connect_server(&ctx), "rdma_connect_server");
    if (failed)
        return 1;
    if (ctx.remote_size != SERVER_BUFFER) {
        printf("FAILED: remote_size %zu\n", ctx.remote_size);
        failed = 1;
    }

    /* Beyond the peer's buffer, beyond ours, too large: nothing is sent. */
    expect_fail(rdma_write(&ctx, 0, SERVER_BUFFER - 10, 20), ERANGE, "rdma_write beyond the peer");
    expect_fail(rdma_read(&ctx, 0, SERVER_BUFFER, 1), ERANGE, "rdma_read beyond the peer");
    expect_fail(rdma_notify_write(&ctx, SERVER_BUFFER, 1), ERANGE, "rdma_notify_write beyond");
    expect_fail(rdma_write(&ctx, CLIENT_BUFFER - 1, 0, 2), ERANGE, "rdma_write beyond our buffer");
    expect_fail(rdma_send(&ctx, 0, SERVER_BUFFER + 1), EMSGSIZE, "rdma_send larger than the peer takes");

    /* Still usable: a write into the peer's last bytes, an echo. */
    memcpy(ctx.buffer, "last bytes", 10);
    expect_ok(rdma_write(&ctx, 0, SERVER_BUFFER - 10, 10), "rdma_write at the end");
    expect_ok(rdma_read(&ctx, 100, SERVER_BUFFER - 10, 10), "rdma_read it back");
    if (memcmp(ctx.buffer + 100, "last bytes", 10) != 0) {
        printf("FAILED: the read did not return the written bytes\n");
        failed = 1;
    }
    memcpy(ctx.buffer, "echo me", 7);
    expect_ok(rdma_send(&ctx, 0, 7), "rdma_send");
    expect_ok(rdma_recv(&ctx, 200, &len), "rdma_recv");
    if (len != 7 || memcmp(ctx.buffer + 200, "echo me", 7) != 0) {
        printf("FAILED: wrong echo\n");
        failed = 1;
    }

    expect_ok(rdma_close(&ctx), "rdma_close");
    expect_fail(rdma_close(&ctx), EBADF, "rdma_close twice");
    expect_fail(rdma_write(&ctx, 0, 0, 1), ENOTCONN, "rdma_write after close");
    expect_fail(rdma_recv(&ctx, 0, &len), ENOTCONN, "rdma_recv after close");
    if (!failed)
        printf("client ok\n");
    return failed;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "server") == 0)
        return server();
    if (argc == 4 && strcmp(argv[1], "client") == 0)
        return client(argv[2], atoi(argv[3]));
    fprintf(stderr, "usage: %s server | client HOST PORT\n", argv[0]);
    return 2;
}
