/* What each data-path verb costs an application, measured from outside:
 * an LD_PRELOAD shim that wraps ibv_open_device and puts timing wrappers in
 * the context's ops table (ibv_post_send, ibv_post_recv and ibv_poll_cq are
 * inline in applications and call through it). At exit it prints, per
 * process, the calls and their mean cost in ns, polls split into those
 * that returned completions ("full") and those that did not ("empty").
 * The TSC is read around each call (about 9 ns here, included); its rate
 * comes from VERBS_COST_GHZ (default 2.0). Used by
 * scripts/verbs-call-costs.sh; BENCHMARKS.md "A lone post". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <x86intrin.h>

struct cost {
	unsigned long calls, ticks;
};

static int (*real_post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
static int (*real_post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
static int (*real_poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
static struct cost c_send, c_recv, c_full, c_empty;
static double ghz = 2.0;

static void add(struct cost *c, unsigned long t0)
{
	c->ticks += __rdtsc() - t0;
	c->calls++;
}

static int post_send(struct ibv_qp *q, struct ibv_send_wr *w, struct ibv_send_wr **bad)
{
	unsigned long t0 = __rdtsc();
	int r = real_post_send(q, w, bad);
	add(&c_send, t0);
	return r;
}

static int post_recv(struct ibv_qp *q, struct ibv_recv_wr *w, struct ibv_recv_wr **bad)
{
	unsigned long t0 = __rdtsc();
	int r = real_post_recv(q, w, bad);
	add(&c_recv, t0);
	return r;
}

static int poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	unsigned long t0 = __rdtsc();
	int r = real_poll_cq(cq, n, wc);
	add(r > 0 ? &c_full : &c_empty, t0);
	return r;
}

static double mean_ns(const struct cost *c)
{
	return c->calls ? c->ticks / ghz / c->calls : 0;
}

static void report(void)
{
	if (!c_full.calls && !c_send.calls)
		return;
	fprintf(stderr,
		"[verbs-call-costs %d] post_send %lu x %.1f ns; post_recv %lu x %.1f ns; "
		"poll full %lu x %.1f ns; poll empty %lu x %.1f ns\n",
		getpid(), c_send.calls, mean_ns(&c_send), c_recv.calls, mean_ns(&c_recv),
		c_full.calls, mean_ns(&c_full), c_empty.calls, mean_ns(&c_empty));
}

struct ibv_context *ibv_open_device(struct ibv_device *d)
{
	static struct ibv_context *(*real_open)(struct ibv_device *);
	if (!real_open)
		real_open = dlsym(RTLD_NEXT, "ibv_open_device");
	struct ibv_context *c = real_open(d);
	if (!c || real_poll_cq)
		return c;
	const char *g = getenv("VERBS_COST_GHZ");
	if (g && atof(g) > 0)
		ghz = atof(g);
	real_post_send = c->ops.post_send;
	real_post_recv = c->ops.post_recv;
	real_poll_cq = c->ops.poll_cq;
	c->ops.post_send = post_send;
	c->ops.post_recv = post_recv;
	c->ops.poll_cq = poll_cq;
	atexit(report);
	return c;
}
