/*
 * cm_paths: an rdma_cm program written from librdmacm's man pages
 * (rdma_create_event_channel(3), rdma_create_id(3), rdma_resolve_addr(3),
 * rdma_resolve_route(3), rdma_create_qp(3), rdma_connect(3), rdma_listen(3),
 * rdma_accept(3), rdma_reject(3), rdma_disconnect(3), rdma_get_cm_event(3),
 * rdma_event_str(3)), used by crates/compat-tests/tests/rdmacm_errors.rs to
 * check the error paths of softrdma's librdmacm.so.1.
 *
 *   cm_paths resolve <dst>                     rdma_resolve_addr to <dst>
 *   cm_paths connect <dst> <port>              connect, report the answer
 *   cm_paths reject-server <addr> <port> <n>   reject <n> requests with
 *                                              private data, then exit
 *                                              (n < 0: until killed)
 *   cm_paths destroy-wait <dst>                rdma_destroy_id while another
 *                                              thread holds an event of the
 *                                              id (acks it 500 ms later)
 *   cm_paths idle-server <addr> <port>         connect, exchange one message,
 *   cm_paths idle-client <dst> <port>          then wait idle for the peer's
 *                                              end (DISCONNECTED + flush)
 *
 * stdout is line-buffered: the test reads "listening" and "idle" while the
 * program runs. Results are "key=value" lines:
 *
 *   resolve:  "event=<name> status=<n> ms=<elapsed>"
 *   destroy-wait: "destroy_ms=<how long rdma_destroy_id blocked>"
 *   connect:  "event=<name> status=<n> connect_ms=<rdma_connect to event>
 *              total_ms=<from the start> private_data_len=<n>
 *              private_data=<hex>"
 *   reject-server: "request private_data=<hex>" per request
 *   idle-*:   "idle", then "event=RDMA_CM_EVENT_DISCONNECTED idle_ms=<n>",
 *             "flushed_before_disconnect=<yes|no>", "rdma_disconnect=<rc>",
 *             "flush wr_id=2 status=<n> (<ibv_wc_status_str>) ms=<n>"
 *
 * Every wait is bounded (poll(2) on the channel's fd, a deadline on the CQ):
 * the program never hangs, it prints "FATAL: timeout ..." and exits 1.
 * It exits 0 when every call it makes works (a REJECTED or ADDR_ERROR answer
 * is a result, not a failure: the test judges the printed results).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WAIT_MS 20000          /* hang protection of a single wait */
#define IDLE_WAIT_MS 60000     /* how long the idle sides wait for the end */
#define FLUSH_WAIT_MS 10000    /* after DISCONNECTED, for the flush */
#define REJ_LEN 100            /* rejection private data (IB REJ holds 148) */
#define REQ_DATA "cm_paths REQ"
#define MSG_LEN 64
#define WR_GREETING 1
#define WR_FLUSHED 2
#define WR_SEND 3

static const char *role = "cm_paths";

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	printf("%s: FATAL: ", role);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	exit(1);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static uint8_t rej_byte(int i)
{
	return (uint8_t)(0xA5 ^ (i * 13 + 7));
}

static void print_hex(const char *key, const void *data, size_t len)
{
	const uint8_t *p = data;
	size_t i;

	printf("%s=", key);
	for (i = 0; i < len; i++)
		printf("%02x", p[i]);
	printf("\n");
}

static void parse_addr(const char *host, const char *port, struct sockaddr_in *sin)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)atoi(port ? port : "0"));
	if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
		die("bad IPv4 address %s", host);
}

/* Waits (bounded) for the next event on `ch`. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int timeout_ms)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int n;

	do {
		n = poll(&pfd, 1, timeout_ms);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		die("poll on the event channel: %s", strerror(errno));
	if (n == 0)
		die("timeout: no CM event within %d ms", timeout_ms);
	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event: %s", strerror(errno));
	return ev;
}

/* Waits for event `want`; anything else is fatal. */
static void expect_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev = next_event(ch, WAIT_MS);

	if (ev->event != want)
		die("expected %s, got %s (status %d)", rdma_event_str(want),
		    rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
}

/* ---- resolve ---- */

static int do_resolve(const char *dst)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	struct sockaddr_in sin;
	double t0;

	if (!ch)
		die("rdma_create_event_channel: %s", strerror(errno));
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id: %s", strerror(errno));
	parse_addr(dst, NULL, &sin);
	t0 = now_ms();
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000)) {
		/* A synchronous failure is an answer too. */
		printf("event=none errno=%d ms=%.3f\n", errno, now_ms() - t0);
	} else {
		ev = next_event(ch, WAIT_MS);
		printf("event=%s status=%d ms=%.3f\n", rdma_event_str(ev->event), ev->status,
		       now_ms() - t0);
		rdma_ack_cm_event(ev);
	}
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return 0;
}

/* ---- destroy-wait ---- */

/*
 * rdma_destroy_id(3): "the user must release any associated QP and acknowledge
 * all events" — librdmacm's rdma_destroy_id blocks until every event it has
 * reported for the id has been acked (events_completed < events_reported),
 * which is what lets rping's main thread destroy its ids and the channel
 * while its cm thread still handles the last event.
 */
static struct rdma_cm_event *held_event;

static void *ack_later(void *arg)
{
	(void)arg;
	usleep(500 * 1000);
	printf("acking\n");
	rdma_ack_cm_event(held_event);
	return NULL;
}

static int do_destroy_wait(const char *dst)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in sin;
	pthread_t t;
	double t0;

	if (!ch)
		die("rdma_create_event_channel: %s", strerror(errno));
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id: %s", strerror(errno));
	parse_addr(dst, NULL, &sin);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000))
		die("rdma_resolve_addr: %s", strerror(errno));
	held_event = next_event(ch, WAIT_MS);
	if (held_event->event != RDMA_CM_EVENT_ADDR_RESOLVED)
		die("expected ADDR_RESOLVED, got %s", rdma_event_str(held_event->event));
	if (pthread_create(&t, NULL, ack_later, NULL))
		die("pthread_create");
	t0 = now_ms();
	if (rdma_destroy_id(id))
		die("rdma_destroy_id: %s", strerror(errno));
	printf("destroy_ms=%.0f\n", now_ms() - t0);
	pthread_join(t, NULL);
	rdma_destroy_event_channel(ch);
	return 0;
}

/* ---- the QP of a connection ---- */

struct conn {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	unsigned done;          /* bit n: wr_id n completed successfully */
	char buf[3][MSG_LEN];   /* greeting, flushed receive, send */
};

static void setup_qp(struct conn *c, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr;

	c->id = id;
	c->done = 0;
	c->pd = ibv_alloc_pd(id->verbs);
	if (!c->pd)
		die("ibv_alloc_pd: %s", strerror(errno));
	c->cq = ibv_create_cq(id->verbs, 16, NULL, NULL, 0);
	if (!c->cq)
		die("ibv_create_cq: %s", strerror(errno));
	c->mr = ibv_reg_mr(c->pd, c->buf, sizeof(c->buf), IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr)
		die("ibv_reg_mr: %s", strerror(errno));
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = c->cq;
	attr.recv_cq = c->cq;
	attr.qp_type = IBV_QPT_RC;
	attr.cap.max_send_wr = 4;
	attr.cap.max_recv_wr = 4;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.sq_sig_all = 1;
	if (rdma_create_qp(id, c->pd, &attr))
		die("rdma_create_qp: %s", strerror(errno));
}

static void post_recv(struct conn *c, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->buf[wr_id - 1], .length = MSG_LEN,
			       .lkey = c->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(c->id->qp, &wr, &bad))
		die("ibv_post_recv");
}

static void post_send(struct conn *c, const char *msg)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->buf[WR_SEND - 1], .length = MSG_LEN,
			       .lkey = c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = WR_SEND, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND }, *bad;

	snprintf(c->buf[WR_SEND - 1], MSG_LEN, "%s", msg);
	if (ibv_post_send(c->id->qp, &wr, &bad))
		die("ibv_post_send");
}

/* Polls the CQ until a completion arrives or `timeout_ms` pass (0: once). */
static int poll_one(struct conn *c, struct ibv_wc *wc, int timeout_ms)
{
	double end = now_ms() + timeout_ms;
	int n;

	for (;;) {
		n = ibv_poll_cq(c->cq, 1, wc);
		if (n < 0)
			die("ibv_poll_cq: %d", n);
		if (n == 1)
			return 1;
		if (now_ms() >= end)
			return 0;
		usleep(1000);
	}
}

/*
 * Waits for a successful completion of `wr_id`. Completions of other work
 * requests that come first (the peer's reply may arrive before the ACK of
 * our send) are remembered in c->done, not lost.
 */
static void wait_ok(struct conn *c, uint64_t wr_id)
{
	struct ibv_wc wc;

	while (!(c->done & (1u << wr_id))) {
		if (!poll_one(c, &wc, WAIT_MS))
			die("timeout waiting for completion of wr_id %llu", (unsigned long long)wr_id);
		if (wc.status != IBV_WC_SUCCESS)
			die("wr_id %llu completed with %s", (unsigned long long)wc.wr_id,
			    ibv_wc_status_str(wc.status));
		if (wc.wr_id < 32)
			c->done |= 1u << wc.wr_id;
	}
}

/*
 * Both sides: idle until the connection ends. The peer is expected to die:
 * DISCONNECTED must arrive and the posted receive WR_FLUSHED must complete
 * with IBV_WC_WR_FLUSH_ERR.
 */
static int idle_until_disconnected(struct rdma_event_channel *ch, struct conn *c)
{
	struct rdma_cm_event *ev;
	struct ibv_wc wc;
	double t0, t1;
	int early, rc;

	printf("idle\n");
	fflush(stdout);
	t0 = now_ms();
	ev = next_event(ch, IDLE_WAIT_MS);
	t1 = now_ms();
	printf("event=%s status=%d idle_ms=%.0f\n", rdma_event_str(ev->event), ev->status,
	       t1 - t0);
	if (ev->event != RDMA_CM_EVENT_DISCONNECTED)
		die("expected RDMA_CM_EVENT_DISCONNECTED");
	rdma_ack_cm_event(ev);
	/* Has the QP flushed on its own already? (informational) */
	early = poll_one(c, &wc, 0);
	printf("flushed_before_disconnect=%s\n", early ? "yes" : "no");
	/* What every rdma_cm application does on DISCONNECTED (rping too). */
	rc = rdma_disconnect(c->id);
	printf("rdma_disconnect=%d\n", rc ? errno : 0);
	if (!early && !poll_one(c, &wc, FLUSH_WAIT_MS))
		die("timeout: no flush of the posted receive within %d ms", FLUSH_WAIT_MS);
	printf("flush wr_id=%llu status=%d (%s) ms=%.0f\n", (unsigned long long)wc.wr_id,
	       wc.status, ibv_wc_status_str(wc.status), now_ms() - t1);
	fflush(stdout);
	return 0;
}

/* ---- active side ---- */

static void client_connect(struct rdma_event_channel *ch, struct rdma_cm_id *id,
			   const char *dst, const char *port, struct conn *c)
{
	struct sockaddr_in sin;

	parse_addr(dst, port, &sin);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000))
		die("rdma_resolve_addr: %s", strerror(errno));
	expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	if (rdma_resolve_route(id, 2000))
		die("rdma_resolve_route: %s", strerror(errno));
	expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	setup_qp(c, id);
}

static struct rdma_conn_param conn_param(void)
{
	struct rdma_conn_param p;

	memset(&p, 0, sizeof(p));
	p.private_data = REQ_DATA;
	p.private_data_len = sizeof(REQ_DATA);
	p.responder_resources = 1;
	p.initiator_depth = 1;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	return p;
}

static int do_connect(const char *dst, const char *port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param p = conn_param();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct conn c;
	double t0, t1, t2;

	t0 = now_ms();
	if (!ch)
		die("rdma_create_event_channel: %s", strerror(errno));
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id: %s", strerror(errno));
	client_connect(ch, id, dst, port, &c);
	t1 = now_ms();
	if (rdma_connect(id, &p))
		die("rdma_connect: %s", strerror(errno));
	ev = next_event(ch, WAIT_MS);
	t2 = now_ms();
	printf("event=%s status=%d connect_ms=%.3f total_ms=%.3f private_data_len=%d\n",
	       rdma_event_str(ev->event), ev->status, t2 - t1, t2 - t0,
	       ev->param.conn.private_data ? ev->param.conn.private_data_len : 0);
	print_hex("private_data", ev->param.conn.private_data,
		  ev->param.conn.private_data ? ev->param.conn.private_data_len : 0);
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return 0;
}

static int do_idle_client(const char *dst, const char *port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param p = conn_param();
	struct rdma_cm_id *id;
	struct conn c;

	role = "idle-client";
	if (!ch)
		die("rdma_create_event_channel: %s", strerror(errno));
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id: %s", strerror(errno));
	client_connect(ch, id, dst, port, &c);
	post_recv(&c, WR_GREETING);
	post_recv(&c, WR_FLUSHED);
	if (rdma_connect(id, &p))
		die("rdma_connect: %s", strerror(errno));
	expect_event(ch, RDMA_CM_EVENT_ESTABLISHED);
	post_send(&c, "hello from the client");
	wait_ok(&c, WR_SEND);
	wait_ok(&c, WR_GREETING);
	printf("received: %s\n", c.buf[WR_GREETING - 1]);
	return idle_until_disconnected(ch, &c);
}

/* ---- passive side ---- */

static struct rdma_cm_id *listen_on(struct rdma_event_channel *ch, const char *addr,
				    const char *port)
{
	struct rdma_cm_id *lid;
	struct sockaddr_in sin;

	if (rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP))
		die("rdma_create_id: %s", strerror(errno));
	parse_addr(addr, port, &sin);
	if (rdma_bind_addr(lid, (struct sockaddr *)&sin))
		die("rdma_bind_addr %s:%s: %s", addr, port, strerror(errno));
	if (rdma_listen(lid, 8))
		die("rdma_listen: %s", strerror(errno));
	printf("listening\n");
	fflush(stdout);
	return lid;
}

static int do_reject_server(const char *addr, const char *port, int count)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	uint8_t data[REJ_LEN];
	struct rdma_cm_event *ev;
	struct rdma_cm_id *lid, *child;
	int i;

	role = "reject-server";
	if (!ch)
		die("rdma_create_event_channel: %s", strerror(errno));
	for (i = 0; i < REJ_LEN; i++)
		data[i] = rej_byte(i);
	lid = listen_on(ch, addr, port);
	while (count != 0) {
		ev = next_event(ch, IDLE_WAIT_MS);
		if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
			printf("event=%s status=%d (ignored)\n", rdma_event_str(ev->event),
			       ev->status);
			rdma_ack_cm_event(ev);
			continue;
		}
		child = ev->id;
		print_hex("request private_data", ev->param.conn.private_data,
			  sizeof(REQ_DATA));
		if (rdma_reject(child, data, REJ_LEN))
			die("rdma_reject: %s", strerror(errno));
		rdma_ack_cm_event(ev);
		rdma_destroy_id(child);
		count--;
	}
	printf("done\n");
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(ch);
	return 0;
}

static int do_idle_server(const char *addr, const char *port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param p = conn_param();
	struct rdma_cm_event *ev;
	struct rdma_cm_id *child;
	struct conn c;

	role = "idle-server";
	if (!ch)
		die("rdma_create_event_channel: %s", strerror(errno));
	listen_on(ch, addr, port);
	ev = next_event(ch, IDLE_WAIT_MS);
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		die("expected a connect request, got %s", rdma_event_str(ev->event));
	child = ev->id;
	rdma_ack_cm_event(ev);
	setup_qp(&c, child);
	post_recv(&c, WR_GREETING);
	post_recv(&c, WR_FLUSHED);
	p.private_data = NULL;
	p.private_data_len = 0;
	if (rdma_accept(child, &p))
		die("rdma_accept: %s", strerror(errno));
	expect_event(ch, RDMA_CM_EVENT_ESTABLISHED);
	wait_ok(&c, WR_GREETING);
	printf("received: %s\n", c.buf[WR_GREETING - 1]);
	post_send(&c, "hello from the server");
	wait_ok(&c, WR_SEND);
	return idle_until_disconnected(ch, &c);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "resolve"))
		return do_resolve(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "destroy-wait"))
		return do_destroy_wait(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "connect"))
		return do_connect(argv[2], argv[3]);
	if (argc == 5 && !strcmp(argv[1], "reject-server"))
		return do_reject_server(argv[2], argv[3], atoi(argv[4]));
	if (argc == 4 && !strcmp(argv[1], "idle-server"))
		return do_idle_server(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "idle-client"))
		return do_idle_client(argv[2], argv[3]);
	fprintf(stderr,
		"usage: cm_paths resolve <dst> | destroy-wait <dst> | connect <dst> <port> |\n"
		"       reject-server <addr> <port> <count> | idle-server <addr> <port> |\n"
		"       idle-client <dst> <port>\n");
	return 2;
}
