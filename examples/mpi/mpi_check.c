/*
 * mpi_check: point-to-point, collectives and one-sided communication, every
 * byte checked. Exit status 0 only if every rank saw exactly what was sent.
 *
 *   mpicc -O2 -o mpi_check examples/mpi/mpi_check.c
 *   softrdma run mpirun -np 4 --mca pml ucx --mca osc ucx \
 *       -x UCX_TLS=rc_verbs,ud_verbs,self ./mpi_check
 *
 * Sizes cross UCX's eager/rendezvous switch, so both protocols (and RDMA
 * READ for rendezvous) are exercised.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;
static long errors;

/* The byte at offset i of a message from rank `from` to rank `to`, test `t`. */
static unsigned char pattern(int t, int from, int to, size_t i)
{
    uint64_t x = (uint64_t)i * 2654435761u + (uint64_t)t * 40503u +
                 (uint64_t)from * 977u + (uint64_t)to * 131u;
    return (unsigned char)(x ^ (x >> 13));
}

static void fill(unsigned char *b, size_t n, int t, int from, int to)
{
    for (size_t i = 0; i < n; i++)
        b[i] = pattern(t, from, to, i);
}

static void check(const char *what, const unsigned char *b, size_t n, int t,
                  int from, int to)
{
    for (size_t i = 0; i < n; i++) {
        if (b[i] != pattern(t, from, to, i)) {
            fprintf(stderr,
                    "mpi_check: rank %d: %s (%zu bytes from rank %d): byte %zu "
                    "is 0x%02x, expected 0x%02x\n",
                    rank, what, n, from, i, b[i], pattern(t, from, to, i));
            errors++;
            return;
        }
    }
}

/* A ring: every rank sends to the next and receives from the previous. */
static void point_to_point(void)
{
    static const size_t sizes[] = {1, 8, 4096, 65536, 1 << 20, 4 << 20};
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    for (int t = 0; t < (int)(sizeof sizes / sizeof sizes[0]); t++) {
        size_t n = sizes[t];
        unsigned char *s = malloc(n), *r = malloc(n);
        fill(s, n, t, rank, next);
        memset(r, 0, n);
        MPI_Request req[2];
        MPI_Irecv(r, (int)n, MPI_BYTE, prev, t, MPI_COMM_WORLD, &req[0]);
        MPI_Isend(s, (int)n, MPI_BYTE, next, t, MPI_COMM_WORLD, &req[1]);
        MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
        check("send/recv", r, n, t, prev, rank);
        free(s);
        free(r);
    }
}

static void collectives(void)
{
    /* Bcast from every root in turn. */
    size_t n = 256 * 1024;
    unsigned char *b = malloc(n);
    for (int root = 0; root < nranks; root++) {
        if (rank == root)
            fill(b, n, 100, root, -1);
        else
            memset(b, 0, n);
        MPI_Bcast(b, (int)n, MPI_BYTE, root, MPI_COMM_WORLD);
        check("bcast", b, n, 100, root, -1);
    }
    free(b);

    /* Allreduce: sum of rank-dependent values, known in closed form. */
    enum { COUNT = 10000 };
    int64_t *in = malloc(COUNT * sizeof *in), *out = malloc(COUNT * sizeof *out);
    for (int i = 0; i < COUNT; i++)
        in[i] = (int64_t)i * (rank + 1);
    MPI_Allreduce(in, out, COUNT, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    int64_t ranks_sum = (int64_t)nranks * (nranks + 1) / 2;
    for (int i = 0; i < COUNT; i++) {
        if (out[i] != (int64_t)i * ranks_sum) {
            fprintf(stderr, "mpi_check: rank %d: allreduce[%d] = %lld, expected %lld\n",
                    rank, i, (long long)out[i], (long long)i * ranks_sum);
            errors++;
            break;
        }
    }
    free(in);
    free(out);

    /* Alltoall: block j of rank r goes to rank j. */
    size_t blk = 32 * 1024;
    unsigned char *s = malloc(blk * nranks), *r = malloc(blk * nranks);
    for (int j = 0; j < nranks; j++)
        fill(s + j * blk, blk, 200, rank, j);
    memset(r, 0, blk * nranks);
    MPI_Alltoall(s, (int)blk, MPI_BYTE, r, (int)blk, MPI_BYTE, MPI_COMM_WORLD);
    for (int j = 0; j < nranks; j++)
        check("alltoall", r + j * blk, blk, 200, j, rank);

    /* Allgather: everyone's block everywhere. */
    fill(s, blk, 300, rank, -1);
    memset(r, 0, blk * nranks);
    MPI_Allgather(s, (int)blk, MPI_BYTE, r, (int)blk, MPI_BYTE, MPI_COMM_WORLD);
    for (int j = 0; j < nranks; j++)
        check("allgather", r + j * blk, blk, 300, j, -1);
    free(s);
    free(r);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* MPI_Put into the next rank's window, MPI_Get from the previous rank's,
 * separated by fences. */
static void one_sided(void)
{
    size_t n = 1 << 20;
    unsigned char *win_mem, *src = malloc(n), *got = malloc(n);
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)n, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win_mem, &win);
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;

    memset(win_mem, 0, n);
    fill(src, n, 400, rank, next);
    MPI_Win_fence(0, win);
    /* Two puts: a small one at the start and the rest, to cover both paths. */
    MPI_Put(src, 64, MPI_BYTE, next, 0, 64, MPI_BYTE, win);
    MPI_Put(src + 64, (int)(n - 64), MPI_BYTE, next, 64, (int)(n - 64), MPI_BYTE, win);
    MPI_Win_fence(0, win);
    check("put", win_mem, n, 400, prev, rank);

    /* Now every window holds what prev put; read prev's window (what
     * prev's own prev put there). */
    int prev2 = (prev + nranks - 1) % nranks;
    memset(got, 0, n);
    MPI_Win_fence(0, win);
    MPI_Get(got, (int)n, MPI_BYTE, prev, 0, (int)n, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    check("get", got, n, 400, prev2, prev);

    MPI_Win_free(&win);
    free(src);
    free(got);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    point_to_point();
    collectives();
    one_sided();

    long total = 0;
    MPI_Reduce(&errors, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (total == 0)
            printf("mpi_check: %d ranks: point-to-point, collectives, one-sided: all bytes OK\n",
                   nranks);
        else
            printf("mpi_check: %d ranks: %ld mismatches\n", nranks, total);
    }
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
