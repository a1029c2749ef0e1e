/*
 * rc_demo: an RC verbs program written from rdma-core's documentation
 * (ibv_open_device(3), ibv_reg_mr(3), ibv_create_qp(3), ibv_modify_qp(3),
 * ibv_post_send(3), ibv_post_recv(3), ibv_poll_cq(3), ibv_query_gid(3),
 * ibv_wc_status_str(3)), used by crates/compat-tests/tests/c_program.rs to
 * check softrdma's libibverbs.so.1 with code that is not one of rdma-core's
 * own examples.
 *
 *   rc_demo [-p port] [-g gid_index]          server (passive side)
 *   rc_demo [-p port] [-g gid_index] <host>   client (active side)
 *   rc_demo --strings                         prints ibv_wc_status_str(0..)
 *
 * The two sides exchange QPN, PSN, GID, rkey and buffer address over a TCP
 * side channel, connect one RC QP each and then the client:
 *   1. RDMA WRITE WITH IMMEDIATE of 1024 bytes into the server's buffer: the
 *      server's receive completes as IBV_WC_RECV_RDMA_WITH_IMM with the
 *      immediate value, and the data is in its buffer;
 *   2. SEND with IBV_SEND_INLINE from an unregistered stack buffer that is
 *      overwritten right after posting: the server receives the original;
 *   3. FETCH AND ADD twice and COMPARE AND SWAP twice (one hit, one miss) on
 *      the server's 64-bit words, checking each returned original value;
 *   4. RDMA READ of 1024 bytes of the server's buffer (byte-exact) and of the
 *      two atomic words (their final values);
 *   5. RDMA WRITE with a wrong rkey: completes with IBV_WC_REM_ACCESS_ERR and
 *      the server's bytes stay unchanged.
 * Each side prints "PASS" and exits 0 only if all of its checks hold.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <link.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE 4096
#define DATA_LEN 1024
/* The server's buffer layout. */
#define OFF_WRITE 0      /* target of the write with immediate */
#define OFF_RECV 1024    /* receive buffer of the inline send */
#define OFF_READ 2048    /* source of the RDMA READ */
#define OFF_FAA 3072     /* fetch-and-add counter */
#define OFF_CAS 3080     /* compare-and-swap word */
#define OFF_GUARD 3584   /* target of the wrong-rkey write: must stay 0xEE */
#define GUARD_LEN 512

#define IMM_VALUE 0xC0FFEE01u
#define FAA_START 100u
#define CAS_START 0x1111111111111111ull
#define CAS_SWAP 0x2222222222222222ull
#define INLINE_MSG "inline SEND from rc_demo, 48 bytes long........."
#define INLINE_LEN 48
#define TIMEOUT_SEC 20

static const char *role = "?";
static int failures;

static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "%s: FAIL: ", role);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	failures++;
}

static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "%s: FATAL: ", role);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static uint8_t write_pattern(int i) { return (uint8_t)(i ^ 0x5a); }
static uint8_t read_pattern(int i) { return (uint8_t)(i * 7 + 3); }

/* The path of the libibverbs this process really loaded. */
static int find_verbs(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	if (info->dlpi_name && strstr(info->dlpi_name, "libibverbs.so")) {
		*(const char **)data = info->dlpi_name;
		return 1;
	}
	return 0;
}

/* ---- TCP side channel ---- */

static void write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n <= 0)
			die("side channel write: %s", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

static void read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n == 0)
			die("side channel closed by the peer");
		if (n < 0)
			die("side channel read: %s", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

static int tcp_server(const char *port)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE, .ai_family = AF_INET,
				  .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	int one = 1, lfd, fd;

	if (getaddrinfo(NULL, port, &hints, &res))
		die("getaddrinfo(port %s)", port);
	lfd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
	if (lfd < 0)
		die("socket: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, res->ai_addr, res->ai_addrlen) || listen(lfd, 1))
		die("bind/listen on port %s: %s", port, strerror(errno));
	freeaddrinfo(res);
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept: %s", strerror(errno));
	close(lfd);
	return fd;
}

static int tcp_client(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	int fd;

	if (getaddrinfo(host, port, &hints, &res))
		die("getaddrinfo(%s:%s)", host, port);
	fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
	if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen))
		die("connect to %s:%s: %s", host, port, strerror(errno));
	freeaddrinfo(res);
	return fd;
}

/* What the sides tell each other, as text (no struct layout on the wire). */
struct dest {
	uint32_t qpn, psn, rkey;
	uint64_t addr;
	union ibv_gid gid;
};

#define DEST_MSG_LEN 96

static void send_dest(int fd, const struct dest *d)
{
	char msg[DEST_MSG_LEN + 1];
	char gid[33];
	int i;

	for (i = 0; i < 16; i++)
		sprintf(gid + 2 * i, "%02x", d->gid.raw[i]);
	memset(msg, ' ', sizeof(msg));
	snprintf(msg, sizeof(msg), "%06x:%06x:%08x:%016" PRIx64 ":%s", d->qpn, d->psn, d->rkey,
		 d->addr, gid);
	write_all(fd, msg, DEST_MSG_LEN);
}

static void recv_dest(int fd, struct dest *d)
{
	char msg[DEST_MSG_LEN + 1];
	char gid[33];
	unsigned int b;
	int i;

	read_all(fd, msg, DEST_MSG_LEN);
	msg[DEST_MSG_LEN] = 0;
	if (sscanf(msg, "%x:%x:%x:%" SCNx64 ":%32s", &d->qpn, &d->psn, &d->rkey, &d->addr, gid) != 5
	    || strlen(gid) != 32)
		die("bad peer address message %.96s", msg);
	for (i = 0; i < 16; i++) {
		sscanf(gid + 2 * i, "%2x", &b);
		d->gid.raw[i] = (uint8_t)b;
	}
}

static void send_byte(int fd, char c) { write_all(fd, &c, 1); }

static char recv_byte(int fd)
{
	char c;

	read_all(fd, &c, 1);
	return c;
}

/* ---- verbs ---- */

struct ctx {
	struct ibv_context *verbs;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	uint8_t *buf;
	int gid_index;
	struct dest local;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Busy-polls `cq` for one completion (ibv_poll_cq(3)). */
static struct ibv_wc poll_one(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	double deadline = now() + TIMEOUT_SEC;
	int n;

	do {
		n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			die("ibv_poll_cq failed (%d) waiting for %s", n, what);
		if (n == 0 && now() > deadline)
			die("no completion for %s within %d s", what, TIMEOUT_SEC);
	} while (n == 0);
	return wc;
}

static void expect_wc(const struct ibv_wc *wc, const char *what, uint64_t wr_id,
		      enum ibv_wc_status status, enum ibv_wc_opcode opcode)
{
	if (wc->status != status) {
		fail("%s: status %d (%s), expected %d (%s)", what, wc->status,
		     ibv_wc_status_str(wc->status), status, ibv_wc_status_str(status));
		return;
	}
	if (wc->wr_id != wr_id)
		fail("%s: wr_id %" PRIu64 ", expected %" PRIu64, what, wc->wr_id, wr_id);
	/* The opcode is only defined for successful completions. */
	if (status == IBV_WC_SUCCESS && wc->opcode != opcode)
		fail("%s: opcode %d, expected %d", what, wc->opcode, opcode);
	if (wc->qp_num == 0)
		fail("%s: qp_num 0", what);
}

static void setup(struct ctx *c, int gid_index)
{
	struct ibv_device **list;
	struct ibv_qp_init_attr init = { 0 };
	struct ibv_qp_attr attr = { 0 };
	struct ibv_port_attr port;
	int n;

	list = ibv_get_device_list(&n);
	if (!list || n < 1)
		die("no RDMA device (ibv_get_device_list: %s)", strerror(errno));
	c->verbs = ibv_open_device(list[0]);
	if (!c->verbs)
		die("ibv_open_device(%s): %s", ibv_get_device_name(list[0]), strerror(errno));
	printf("%s: device %s\n", role, ibv_get_device_name(list[0]));
	ibv_free_device_list(list);

	if (ibv_query_port(c->verbs, 1, &port))
		die("ibv_query_port");
	if (port.state != IBV_PORT_ACTIVE || port.link_layer != IBV_LINK_LAYER_ETHERNET)
		die("port 1 is not an active Ethernet (RoCE) port");

	c->pd = ibv_alloc_pd(c->verbs);
	if (!c->pd)
		die("ibv_alloc_pd: %s", strerror(errno));
	if (posix_memalign((void **)&c->buf, 4096, BUF_SIZE))
		die("posix_memalign");
	memset(c->buf, 0, BUF_SIZE);
	c->mr = ibv_reg_mr(c->pd, c->buf, BUF_SIZE,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	if (!c->mr)
		die("ibv_reg_mr: %s", strerror(errno));
	c->scq = ibv_create_cq(c->verbs, 16, NULL, NULL, 0);
	c->rcq = ibv_create_cq(c->verbs, 16, NULL, NULL, 0);
	if (!c->scq || !c->rcq)
		die("ibv_create_cq: %s", strerror(errno));

	init.send_cq = c->scq;
	init.recv_cq = c->rcq;
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 0;
	init.cap.max_send_wr = 16;
	init.cap.max_recv_wr = 16;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.cap.max_inline_data = 64;
	c->qp = ibv_create_qp(c->pd, &init);
	if (!c->qp)
		die("ibv_create_qp: %s", strerror(errno));
	if (init.cap.max_inline_data < INLINE_LEN)
		die("max_inline_data %u < %d", init.cap.max_inline_data, INLINE_LEN);

	attr.qp_state = IBV_QPS_INIT;
	attr.pkey_index = 0;
	attr.port_num = 1;
	attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			       IBV_ACCESS_REMOTE_ATOMIC;
	if (ibv_modify_qp(c->qp, &attr,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT");

	c->gid_index = gid_index;
	if (ibv_query_gid(c->verbs, 1, gid_index, &c->local.gid))
		die("ibv_query_gid(%d)", gid_index);
	c->local.qpn = c->qp->qp_num;
	srand48(getpid() * time(NULL));
	c->local.psn = lrand48() & 0xffffff;
	c->local.rkey = c->mr->rkey;
	c->local.addr = (uintptr_t)c->buf;
}

static void connect_qp(struct ctx *c, const struct dest *rem)
{
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = IBV_MTU_1024,
		.dest_qp_num = rem->qpn,
		.rq_psn = rem->psn,
		.max_dest_rd_atomic = 4,
		.min_rnr_timer = 12,
		.ah_attr = {
			.is_global = 1,
			.grh = { .dgid = rem->gid, .sgid_index = (uint8_t)c->gid_index,
				 .hop_limit = 1 },
			.sl = 0,
			.port_num = 1,
		},
	};

	if (ibv_modify_qp(c->qp, &attr,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify QP to RTR");
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.sq_psn = c->local.psn;
	attr.max_rd_atomic = 4;
	if (ibv_modify_qp(c->qp, &attr,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify QP to RTS");
}

static void post_recv(struct ctx *c, uint64_t wr_id, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(c->buf + off), .length = len,
			       .lkey = c->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	if (ibv_post_recv(c->qp, &wr, &bad))
		die("ibv_post_recv");
}

/* Posts one signaled send WR. */
static void post(struct ctx *c, struct ibv_send_wr *wr, const char *what)
{
	struct ibv_send_wr *bad = NULL;
	int ret;

	wr->send_flags |= IBV_SEND_SIGNALED;
	ret = ibv_post_send(c->qp, wr, &bad);
	if (ret)
		die("ibv_post_send(%s): %s", what, strerror(ret));
}

static uint64_t atomic_op(struct ctx *c, const struct dest *rem, enum ibv_wr_opcode op,
			  uint32_t off, uint64_t compare_add, uint64_t swap, uint64_t wr_id,
			  const char *what)
{
	uint64_t *result = (uint64_t *)(c->buf + 512); /* 8-byte aligned local slot */
	struct ibv_sge sge = { .addr = (uintptr_t)result, .length = 8, .lkey = c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op };
	struct ibv_wc wc;

	*result = 0xdeadbeefdeadbeefull;
	wr.wr.atomic.remote_addr = rem->addr + off;
	wr.wr.atomic.rkey = rem->rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	post(c, &wr, what);
	wc = poll_one(c->scq, what);
	expect_wc(&wc, what, wr_id, IBV_WC_SUCCESS,
		  op == IBV_WR_ATOMIC_FETCH_AND_ADD ? IBV_WC_FETCH_ADD : IBV_WC_COMP_SWAP);
	if (wc.status == IBV_WC_SUCCESS && wc.byte_len != 8)
		fail("%s: byte_len %u, expected 8", what, wc.byte_len);
	return *result;
}

static void run_client(struct ctx *c, const struct dest *rem, int fd)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	struct ibv_wc wc;
	char inline_buf[INLINE_LEN];
	uint64_t got;
	uint64_t *words;
	int i, bad;

	if (recv_byte(fd) != 'R')
		die("server not ready");

	/* 1. RDMA WRITE WITH IMMEDIATE. */
	for (i = 0; i < DATA_LEN; i++)
		c->buf[i] = write_pattern(i);
	sge = (struct ibv_sge){ .addr = (uintptr_t)c->buf, .length = DATA_LEN, .lkey = c->mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.imm_data = htonl(IMM_VALUE);
	wr.wr.rdma.remote_addr = rem->addr + OFF_WRITE;
	wr.wr.rdma.rkey = rem->rkey;
	post(c, &wr, "write with immediate");
	wc = poll_one(c->scq, "write with immediate");
	expect_wc(&wc, "write with immediate", 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);

	/* 2. Inline SEND from an unregistered buffer, reused right after posting. */
	memcpy(inline_buf, INLINE_MSG, INLINE_LEN);
	sge = (struct ibv_sge){ .addr = (uintptr_t)inline_buf, .length = INLINE_LEN, .lkey = 0 };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 2;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_INLINE;
	post(c, &wr, "inline send");
	memset(inline_buf, 'X', INLINE_LEN);
	wc = poll_one(c->scq, "inline send");
	expect_wc(&wc, "inline send", 2, IBV_WC_SUCCESS, IBV_WC_SEND);

	/* 3. Atomics. */
	got = atomic_op(c, rem, IBV_WR_ATOMIC_FETCH_AND_ADD, OFF_FAA, 42, 0, 3, "fetch-and-add 42");
	if (got != FAA_START)
		fail("fetch-and-add 42 returned %" PRIu64 ", expected %u", got, FAA_START);
	got = atomic_op(c, rem, IBV_WR_ATOMIC_FETCH_AND_ADD, OFF_FAA, 8, 0, 4, "fetch-and-add 8");
	if (got != FAA_START + 42)
		fail("fetch-and-add 8 returned %" PRIu64 ", expected %u", got, FAA_START + 42);
	got = atomic_op(c, rem, IBV_WR_ATOMIC_CMP_AND_SWP, OFF_CAS, CAS_START, CAS_SWAP, 5,
			"compare-and-swap (equal)");
	if (got != CAS_START)
		fail("compare-and-swap (equal) returned 0x%" PRIx64 ", expected 0x%llx", got,
		     CAS_START);
	got = atomic_op(c, rem, IBV_WR_ATOMIC_CMP_AND_SWP, OFF_CAS, CAS_START, 0x3333ull, 6,
			"compare-and-swap (different)");
	if (got != CAS_SWAP)
		fail("compare-and-swap (different) returned 0x%" PRIx64 ", expected 0x%llx", got,
		     CAS_SWAP);

	/* 4. RDMA READ of the pattern and of the atomic words. */
	memset(c->buf + 1024, 0, DATA_LEN + 16);
	sge = (struct ibv_sge){ .addr = (uintptr_t)(c->buf + 1024), .length = DATA_LEN,
				.lkey = c->mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 7;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = rem->addr + OFF_READ;
	wr.wr.rdma.rkey = rem->rkey;
	post(c, &wr, "RDMA READ");
	wc = poll_one(c->scq, "RDMA READ");
	expect_wc(&wc, "RDMA READ", 7, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	if (wc.status == IBV_WC_SUCCESS && wc.byte_len != DATA_LEN)
		fail("RDMA READ: byte_len %u, expected %d", wc.byte_len, DATA_LEN);
	for (i = 0, bad = -1; i < DATA_LEN; i++)
		if (c->buf[1024 + i] != read_pattern(i)) {
			bad = i;
			break;
		}
	if (bad >= 0)
		fail("RDMA READ: byte %d is 0x%02x, expected 0x%02x", bad, c->buf[1024 + bad],
		     read_pattern(bad));

	sge = (struct ibv_sge){ .addr = (uintptr_t)(c->buf + 2048), .length = 16,
				.lkey = c->mr->lkey };
	wr.wr_id = 8;
	wr.wr.rdma.remote_addr = rem->addr + OFF_FAA;
	post(c, &wr, "RDMA READ of the atomic words");
	wc = poll_one(c->scq, "RDMA READ of the atomic words");
	expect_wc(&wc, "RDMA READ of the atomic words", 8, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	words = (uint64_t *)(c->buf + 2048);
	if (words[0] != FAA_START + 50)
		fail("counter read back as %" PRIu64 ", expected %u", words[0], FAA_START + 50);
	if (words[1] != CAS_SWAP)
		fail("CAS word read back as 0x%" PRIx64 ", expected 0x%llx", words[1], CAS_SWAP);

	/* 5. RDMA WRITE with a wrong rkey: remote access error (ibv_poll_cq(3)). */
	memset(c->buf, 0x11, GUARD_LEN);
	sge = (struct ibv_sge){ .addr = (uintptr_t)c->buf, .length = GUARD_LEN, .lkey = c->mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 9;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = rem->addr + OFF_GUARD;
	wr.wr.rdma.rkey = rem->rkey ^ 0x5a5a0001u;
	post(c, &wr, "write with a wrong rkey");
	wc = poll_one(c->scq, "write with a wrong rkey");
	expect_wc(&wc, "write with a wrong rkey", 9, IBV_WC_REM_ACCESS_ERR, 0);
	printf("client: wrong-rkey write completed with status %d: %s\n", wc.status,
	       ibv_wc_status_str(wc.status));
	if (strcmp(ibv_wc_status_str(wc.status), "remote access error"))
		fail("ibv_wc_status_str(%d) is \"%s\"", wc.status, ibv_wc_status_str(wc.status));

	/* Let the server check its memory, then hear its verdict. */
	send_byte(fd, 'D');
	switch (recv_byte(fd)) {
	case 'P':
		break;
	case 'F':
		fail("the server reported failures");
		break;
	default:
		die("bad verdict from the server");
	}
}

static void run_server(struct ctx *c, int fd)
{
	struct ibv_wc wc;
	uint64_t *faa = (uint64_t *)(c->buf + OFF_FAA);
	uint64_t *cas = (uint64_t *)(c->buf + OFF_CAS);
	int i, bad;

	/* 1. The write with immediate consumes a receive; its data goes to OFF_WRITE. */
	wc = poll_one(c->rcq, "the write with immediate");
	expect_wc(&wc, "receive of the write with immediate", 101, IBV_WC_SUCCESS,
		  IBV_WC_RECV_RDMA_WITH_IMM);
	if (!(wc.wc_flags & IBV_WC_WITH_IMM))
		fail("write with immediate: IBV_WC_WITH_IMM not set in wc_flags 0x%x", wc.wc_flags);
	else if (ntohl(wc.imm_data) != IMM_VALUE)
		fail("write with immediate: imm_data 0x%08x, expected 0x%08x", ntohl(wc.imm_data),
		     IMM_VALUE);
	if (wc.byte_len != DATA_LEN)
		fail("write with immediate: byte_len %u, expected %d", wc.byte_len, DATA_LEN);
	for (i = 0, bad = -1; i < DATA_LEN; i++)
		if (c->buf[OFF_WRITE + i] != write_pattern(i)) {
			bad = i;
			break;
		}
	if (bad >= 0)
		fail("write with immediate: byte %d is 0x%02x, expected 0x%02x", bad,
		     c->buf[OFF_WRITE + bad], write_pattern(bad));
	else
		printf("server: write with immediate 0x%08x delivered %d bytes\n", ntohl(wc.imm_data),
		       DATA_LEN);

	/* 2. The inline send. */
	wc = poll_one(c->rcq, "the inline send");
	expect_wc(&wc, "receive of the inline send", 102, IBV_WC_SUCCESS, IBV_WC_RECV);
	if (wc.byte_len != INLINE_LEN)
		fail("inline send: byte_len %u, expected %d", wc.byte_len, INLINE_LEN);
	if (wc.wc_flags & IBV_WC_WITH_IMM)
		fail("inline send: IBV_WC_WITH_IMM set");
	if (memcmp(c->buf + OFF_RECV, INLINE_MSG, INLINE_LEN))
		fail("inline send: received \"%.48s\"", (char *)c->buf + OFF_RECV);
	else
		printf("server: inline send received: %.48s\n", (char *)c->buf + OFF_RECV);

	/* 3.-5. happen at the client; then check our memory. */
	if (recv_byte(fd) != 'D')
		die("client did not finish");
	if (*faa != FAA_START + 50)
		fail("counter is %" PRIu64 ", expected %u", *faa, FAA_START + 50);
	if (*cas != CAS_SWAP)
		fail("CAS word is 0x%" PRIx64 ", expected 0x%llx", *cas, CAS_SWAP);
	for (i = 0, bad = -1; i < GUARD_LEN; i++)
		if (c->buf[OFF_GUARD + i] != 0xEE) {
			bad = i;
			break;
		}
	if (bad >= 0)
		fail("the wrong-rkey write changed byte %d of the target to 0x%02x", bad,
		     c->buf[OFF_GUARD + bad]);
	for (i = 0, bad = -1; i < DATA_LEN; i++)
		if (c->buf[OFF_READ + i] != read_pattern(i)) {
			bad = i;
			break;
		}
	if (bad >= 0)
		fail("the READ source changed at byte %d", bad);
	send_byte(fd, failures ? 'F' : 'P');
}

static int print_strings(void)
{
	int s;

	for (s = IBV_WC_SUCCESS; s <= IBV_WC_TM_RNDV_INCOMPLETE + 1; s++)
		printf("%d %s\n", s, ibv_wc_status_str((enum ibv_wc_status)s));
	printf("%d %s\n", 1000, ibv_wc_status_str((enum ibv_wc_status)1000));
	return 0;
}

int main(int argc, char **argv)
{
	const char *port = "18600", *host = NULL, *lib = NULL;
	struct ctx c = { 0 };
	struct dest rem;
	int gid_index = 0, fd, opt;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 2 && !strcmp(argv[1], "--strings"))
		return print_strings();
	while ((opt = getopt(argc, argv, "p:g:")) != -1) {
		switch (opt) {
		case 'p':
			port = optarg;
			break;
		case 'g':
			gid_index = atoi(optarg);
			break;
		default:
			fprintf(stderr, "usage: %s [-p port] [-g gid_index] [server]\n", argv[0]);
			return 2;
		}
	}
	if (optind < argc)
		host = argv[optind];
	role = host ? "client" : "server";

	dl_iterate_phdr(find_verbs, &lib);
	printf("%s: libibverbs %s\n", role, lib ? lib : "(not found)");

	setup(&c, gid_index);
	if (!host) {
		/* The server's buffer: READ source, atomic words, guard bytes;
		 * receives for the write with immediate and the inline send. */
		for (int i = 0; i < DATA_LEN; i++)
			c.buf[OFF_READ + i] = read_pattern(i);
		*(uint64_t *)(c.buf + OFF_FAA) = FAA_START;
		*(uint64_t *)(c.buf + OFF_CAS) = CAS_START;
		memset(c.buf + OFF_GUARD, 0xEE, GUARD_LEN);
		post_recv(&c, 101, OFF_WRITE, 0); /* write with imm: no SGE data */
		post_recv(&c, 102, OFF_RECV, 1024);
		fd = tcp_server(port);
		recv_dest(fd, &rem);
		send_dest(fd, &c.local);
	} else {
		fd = tcp_client(host, port);
		send_dest(fd, &c.local);
		recv_dest(fd, &rem);
	}
	printf("%s: local QPN 0x%06x PSN 0x%06x rkey 0x%08x; remote QPN 0x%06x PSN 0x%06x "
	       "rkey 0x%08x\n", role, c.local.qpn, c.local.psn, c.local.rkey, rem.qpn, rem.psn,
	       rem.rkey);
	connect_qp(&c, &rem);
	if (host) {
		run_client(&c, &rem, fd);
	} else {
		send_byte(fd, 'R');
		run_server(&c, fd);
	}
	close(fd);

	if (ibv_destroy_qp(c.qp) || ibv_destroy_cq(c.scq) || ibv_destroy_cq(c.rcq) ||
	    ibv_dereg_mr(c.mr) || ibv_dealloc_pd(c.pd) || ibv_close_device(c.verbs))
		fail("releasing the verbs objects");
	free(c.buf);
	if (failures) {
		printf("%s: FAIL (%d)\n", role, failures);
		return 1;
	}
	printf("%s: PASS\n", role);
	return 0;
}
