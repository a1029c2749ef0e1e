/*
 * echo.c - request/response echo over rdmalib (the C twin of
 * crates/rdmalib/examples/echo.rs: same options, same output, either side
 * can talk to either language).
 *
 *   cargo xtask compat
 *   cc -std=c11 -Wall -Wextra -I include -o echo crates/rdmalib-capi/examples/echo.c \
 *      -L target/compat -lrdmalib
 *   SOFTRDMA_ADDR=127.0.0.1 LD_LIBRARY_PATH=target/compat ./echo              # server
 *   SOFTRDMA_ADDR=127.0.0.2 LD_LIBRARY_PATH=target/compat ./echo 127.0.0.1    # client
 *
 * The server accepts one client and sends every message back until the
 * client disconnects (rdma_recv fails with ECONNRESET). The client sends -n
 * messages of -s bytes (a different pattern each), checks every answer and
 * prints the average round trip. -e: event mode (cq_notify = 1).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdmalib.h>

/* Largest message the server takes (its buffer). */
#define SERVER_BUFFER (1u << 20)

static int fail(const char *what)
{
    int e = errno;
    fprintf(stderr, "rdmalib_echo: %s: %s (%s)\n", what, rdmalib_last_error(), strerror(e));
    return 1;
}

static unsigned char pattern(uint32_t i, size_t k)
{
    return (unsigned char)((uint32_t)k * 31u + i * 7u);
}

static int server(const char *addr, int port, int events)
{
    struct rdma_context ctx = {0};
    ctx.buffer_size = SERVER_BUFFER;
    ctx.cq_notify = events;
    if (rdma_setup_server(&ctx, port, addr))
        return fail("rdma_setup_server");
    printf("listening on %s:%d\n", addr ? addr : "0.0.0.0", ctx.port);
    fflush(stdout);
    if (rdma_wait_for_client(&ctx))
        return fail("rdma_wait_for_client");
    printf("client connected\n");
    unsigned long n = 0;
    for (;;) {
        size_t len;
        if (rdma_recv(&ctx, 0, &len)) {
            if (errno == ECONNRESET)
                break; /* the client disconnected */
            return fail("rdma_recv");
        }
        if (rdma_send(&ctx, 0, len))
            return fail("rdma_send");
        n++;
    }
    printf("echoed %lu messages; client disconnected\n", n);
    if (rdma_close(&ctx))
        return fail("rdma_close");
    return 0;
}

static int client(const char *host, int port, int events, uint32_t count, size_t size)
{
    struct rdma_context ctx = {0};
    /* The request at 0, the answer right after it. */
    ctx.buffer_size = 2 * size > 32 ? 2 * size : 32;
    ctx.cq_notify = events;
    if (rdma_setup_client(&ctx, host, port))
        return fail("rdma_setup_client");
    if (rdma_connect_server(&ctx))
        return fail("rdma_connect_server");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint32_t i = 0; i < count; i++) {
        for (size_t k = 0; k < size; k++)
            ctx.buffer[k] = (char)pattern(i, k);
        if (rdma_send(&ctx, 0, size))
            return fail("rdma_send");
        size_t len;
        if (rdma_recv(&ctx, size, &len))
            return fail("rdma_recv");
        if (len != size || memcmp(ctx.buffer, ctx.buffer + size, size) != 0) {
            fprintf(stderr, "rdmalib_echo: echo %u differs from the request\n", i);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3) /
                (count ? count : 1);
    printf("%u round trips of %zu bytes: %.1f us each (%s mode)\n", count, size, us,
           events ? "event" : "polling");
    if (rdma_close(&ctx))
        return fail("rdma_close");
    /* Closing twice is an error, not a crash. */
    if (rdma_close(&ctx) != -1 || errno != EBADF) {
        fprintf(stderr, "rdmalib_echo: a second rdma_close did not fail with EBADF\n");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *addr = NULL;
    int port = 7471, events = 0, opt;
    uint32_t count = 1000;
    size_t size = 64;
    while ((opt = getopt(argc, argv, "a:p:n:s:e")) != -1) {
        switch (opt) {
        case 'a': addr = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 'n': count = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 's': size = strtoul(optarg, NULL, 0); break;
        case 'e': events = 1; break;
        default:
            fprintf(stderr, "usage: %s [-a addr] [-p port] [-n count] [-s size] [-e] [host]\n",
                    argv[0]);
            return 2;
        }
    }
    if (optind < argc)
        return client(argv[optind], port, events, count, size);
    return server(addr, port, events);
}
