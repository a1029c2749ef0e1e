/*
 * file_transfer.c - file transfer with one-sided writes over rdmalib (the C
 * twin of crates/rdmalib/examples/file_transfer.rs: same options, same
 * protocol, so either side can talk to either language).
 *
 *   cc -std=c11 -Wall -Wextra -I include -o file_transfer \
 *      crates/rdmalib-capi/examples/file_transfer.c -L target/compat -lrdmalib
 *   SOFTRDMA_ADDR=127.0.0.1 LD_LIBRARY_PATH=target/compat ./file_transfer -o copy
 *   SOFTRDMA_ADDR=127.0.0.2 LD_LIBRARY_PATH=target/compat ./file_transfer -f FILE 127.0.0.1
 *
 * Protocol (rdmalib messages, integers big-endian):
 *  1. client -> server "RDLF" + file size (u64);
 *  2. server -> client "RDLS" + slot size (u64): two chunk slots at offsets
 *     0 and slot size of the server's buffer (here followed by a message
 *     area, so a message copied into the buffer never lands in a slot);
 *  3. per chunk k: the client rdma_write()s it into slot k % 2 and
 *     rdma_notify_write()s (offset, length); the server appends the slot to
 *     the file and acks with an empty message; at most two chunks in flight;
 *  4. client -> server "RDLE" + CRC-32 (IEEE) of the file (u32);
 *  5. server -> client "OK" or "BAD"; the client closes.
 * Exit status 0 only if the checksums match.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdmalib.h>

/* Bytes of the message area after the data. */
#define MSG_AREA 64

static int fail(const char *what)
{
    int e = errno;
    fprintf(stderr, "rdmalib_file_transfer: %s: %s (%s)\n", what, rdmalib_last_error(),
            strerror(e));
    return 1;
}

static int bad(const char *what)
{
    fprintf(stderr, "rdmalib_file_transfer: %s\n", what);
    return 1;
}

/* CRC-32 (IEEE 802.3, as zlib), bit by bit. */
static uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static void put_be(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

static uint64_t get_be(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = (v << 8) | p[i];
    return v;
}

static int server(const char *addr, int port, int events, size_t chunk, const char *out)
{
    struct rdma_context ctx = {0};
    ctx.buffer_size = 2 * chunk + MSG_AREA;
    ctx.cq_notify = events;
    if (rdma_setup_server(&ctx, port, addr))
        return fail("rdma_setup_server");
    printf("listening on %s:%d\n", addr ? addr : "0.0.0.0", ctx.port);
    fflush(stdout);
    if (rdma_wait_for_client(&ctx))
        return fail("rdma_wait_for_client");
    unsigned char *buf = (unsigned char *)ctx.buffer, *msg = buf + 2 * chunk;
    size_t len;
    if (rdma_recv(&ctx, 2 * chunk, &len))
        return fail("rdma_recv (header)");
    if (len != 12 || memcmp(msg, "RDLF", 4) != 0)
        return bad("expected the RDLF header");
    uint64_t size = get_be(msg + 4, 8);
    memcpy(msg, "RDLS", 4);
    put_be(msg + 4, chunk, 8);
    if (rdma_send(&ctx, 2 * chunk, 12))
        return fail("rdma_send (slots)");
    FILE *f = fopen(out, "wb");
    if (!f)
        return bad("cannot create the output file");
    uint32_t crc = 0;
    uint64_t got = 0, chunks = 0;
    while (got < size) {
        int kind;
        size_t off, n;
        if (rdmalib_wait_notify(&ctx, &kind, &off, &n))
            return fail("rdmalib_wait_notify");
        if (kind != RDMALIB_NOTIFY_WRITE || n == 0 || off + n > 2 * chunk || got + n > size)
            return bad("unexpected notification");
        if (fwrite(buf + off, 1, n, f) != n)
            return bad("cannot write the output file");
        crc = crc32_update(crc, buf + off, n);
        got += n;
        chunks++;
        if (rdma_send(&ctx, 2 * chunk, 0)) /* ack: the slot is free */
            return fail("rdma_send (ack)");
    }
    if (fclose(f) != 0)
        return bad("cannot close the output file");
    if (rdma_recv(&ctx, 2 * chunk, &len))
        return fail("rdma_recv (trailer)");
    if (len != 8 || memcmp(msg, "RDLE", 4) != 0)
        return bad("expected the RDLE trailer");
    int ok = (uint32_t)get_be(msg + 4, 4) == crc;
    memcpy(msg, ok ? "OK" : "BAD", ok ? 2 : 3);
    if (rdma_send(&ctx, 2 * chunk, ok ? 2 : 3))
        return fail("rdma_send (verdict)");
    printf("received %llu bytes in %llu chunks, crc32 %08x: %s\n", (unsigned long long)got,
           (unsigned long long)chunks, crc, ok ? "OK" : "MISMATCH");
    /* The client hangs up after reading the verdict. */
    if (rdma_recv(&ctx, 2 * chunk, &len) == 0 || errno != ECONNRESET)
        return fail("waiting for the client to disconnect");
    if (rdma_close(&ctx))
        return fail("rdma_close");
    return ok ? 0 : 1;
}

static int ack(struct rdma_context *ctx, size_t at)
{
    size_t len;
    if (rdma_recv(ctx, at, &len))
        return fail("rdma_recv (ack)");
    if (len != 0)
        return bad("expected an empty ack");
    return 0;
}

static int client(const char *host, int port, int events, size_t chunk, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return bad("cannot open the input file");
    if (fseek(f, 0, SEEK_END) != 0)
        return bad("cannot seek the input file");
    uint64_t size = (uint64_t)ftell(f);
    rewind(f);

    struct rdma_context ctx = {0};
    ctx.buffer_size = chunk + MSG_AREA; /* staging for a chunk, then messages */
    ctx.cq_notify = events;
    if (rdma_setup_client(&ctx, host, port))
        return fail("rdma_setup_client");
    if (rdma_connect_server(&ctx))
        return fail("rdma_connect_server");
    unsigned char *buf = (unsigned char *)ctx.buffer, *msg = buf + chunk;
    memcpy(msg, "RDLF", 4);
    put_be(msg + 4, size, 8);
    if (rdma_send(&ctx, chunk, 12))
        return fail("rdma_send (header)");
    size_t len;
    if (rdma_recv(&ctx, chunk, &len))
        return fail("rdma_recv (slots)");
    if (len != 12 || memcmp(msg, "RDLS", 4) != 0)
        return bad("expected the RDLS answer");
    uint64_t slot = get_be(msg + 4, 8);
    if (slot == 0 || 2 * slot > ctx.remote_size)
        return bad("bad slot size");
    size_t piece = slot < chunk ? (size_t)slot : chunk;

    uint32_t crc = 0;
    uint64_t sent = 0, k = 0;
    int in_flight = 0;
    while (sent < size) {
        size_t n = size - sent < piece ? (size_t)(size - sent) : piece;
        if (fread(buf, 1, n, f) != n)
            return bad("cannot read the input file");
        crc = crc32_update(crc, buf, n);
        if (in_flight == 2) {
            if (ack(&ctx, chunk))
                return 1;
            in_flight--;
        }
        size_t at = (size_t)((k % 2) * slot);
        if (rdma_write(&ctx, 0, at, n))
            return fail("rdma_write");
        if (rdma_notify_write(&ctx, at, n))
            return fail("rdma_notify_write");
        in_flight++;
        sent += n;
        k++;
    }
    fclose(f);
    while (in_flight-- > 0)
        if (ack(&ctx, chunk))
            return 1;
    memcpy(msg, "RDLE", 4);
    put_be(msg + 4, crc, 4);
    if (rdma_send(&ctx, chunk, 8))
        return fail("rdma_send (trailer)");
    if (rdma_recv(&ctx, chunk, &len))
        return fail("rdma_recv (verdict)");
    int ok = len == 2 && memcmp(msg, "OK", 2) == 0;
    printf("sent %llu bytes in %llu chunks, crc32 %08x: server says %.*s\n",
           (unsigned long long)sent, (unsigned long long)k, crc, (int)len, (char *)msg);
    if (rdma_close(&ctx))
        return fail("rdma_close");
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *addr = NULL, *out = NULL, *file = NULL;
    int port = 7472, events = 0, opt;
    size_t chunk = 64 << 10;
    while ((opt = getopt(argc, argv, "a:p:c:o:f:e")) != -1) {
        switch (opt) {
        case 'a': addr = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 'c': chunk = strtoul(optarg, NULL, 0); break;
        case 'o': out = optarg; break;
        case 'f': file = optarg; break;
        case 'e': events = 1; break;
        default: goto usage;
        }
    }
    if (chunk == 0)
        goto usage;
    if (optind == argc && out && !file)
        return server(addr, port, events, chunk, out);
    if (optind + 1 == argc && file && !out)
        return client(argv[optind], port, events, chunk, file);
usage:
    fprintf(stderr, "usage: %s [-p port] [-c chunk] [-e] -o OUT (server) | -f FILE HOST (client)\n",
            argv[0]);
    return 2;
}
