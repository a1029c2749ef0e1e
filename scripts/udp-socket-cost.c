/* What the kernel charges one 8-byte UDP datagram over loopback (sendto, then
 * a busy recv) for three kinds of receiving socket, alternated round by round:
 * a plain socket; one with SO_REUSEPORT (a group of one, no BPF program: a
 * host device member alone); the same, also in an epoll set nobody waits in
 * (the waiter's set of BENCHMARKS.md, "Issue 16, outcome 6").
 *
 *   gcc -O2 -o /tmp/udp-socket-cost scripts/udp-socket-cost.c
 *   unshare -n sh -c 'ip link set lo up; exec /tmp/udp-socket-cost 3000 300'
 *
 * Prints min, 10th percentile and median ns per datagram over the rounds. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static struct sockaddr_in loopback(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int bound(int port, int reuseport) {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0), one = 1;
    struct sockaddr_in a = loopback(port);
    if (s < 0 || (reuseport && setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one)) ||
        bind(s, (struct sockaddr *)&a, sizeof a)) {
        perror("socket");
        exit(1);
    }
    return s;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3000, rounds = argc > 2 ? atoi(argv[2]) : 300;
    const char *kinds[3] = {"plain", "SO_REUSEPORT", "SO_REUSEPORT + idle epoll set"};
    double *ns[3];
    char buf[64] = "12345678";
    int tx = bound(0, 0);
    for (int k = 0; k < 3; k++)
        ns[k] = calloc(rounds, sizeof(double));
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 3; k++) {
            int port = 40000 + k, rx = bound(port, k > 0), ep = -1;
            struct sockaddr_in to = loopback(port);
            if (k == 2) {
                struct epoll_event e = {.events = EPOLLIN};
                ep = epoll_create1(0);
                epoll_ctl(ep, EPOLL_CTL_ADD, rx, &e);
            }
            double t0 = now_ns();
            for (int i = 0; i < n; i++) {
                sendto(tx, buf, 8, 0, (struct sockaddr *)&to, sizeof to);
                while (recv(rx, buf, sizeof buf, 0) < 0) {
                }
            }
            ns[k][r] = (now_ns() - t0) / n;
            close(rx);
            if (ep >= 0)
                close(ep);
        }
    }
    for (int k = 0; k < 3; k++) {
        qsort(ns[k], rounds, sizeof(double), by_value);
        printf("%-30s min %7.1f  p10 %7.1f  median %7.1f ns per datagram\n", kinds[k], ns[k][0],
               ns[k][rounds / 10], ns[k][rounds / 2]);
    }
    return 0;
}
