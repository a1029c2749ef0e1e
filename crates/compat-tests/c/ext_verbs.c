/*
 * ext_verbs: the extended verbs of rdma-core 44 that pyverbs' test suite
 * uses, written from verbs.h and the man pages (ibv_create_cq_ex(3),
 * ibv_create_qp_ex(3), ibv_wr_post(3), ibv_alloc_mw(3), ibv_bind_mw(3),
 * ibv_rereg_mr(3), ibv_import_device(3), ibv_alloc_parent_domain(3)), run by
 * crates/compat-tests/tests/c_extended.rs against target/compat.
 *
 * One process, two RC QPs connected to each other through GID 0 ("client" c
 * and "server" s), both created with ibv_create_qp_ex and send-ops flags, on
 * extended CQs polled with ibv_start_poll/ibv_next_poll/ibv_end_poll:
 *   0. completion clocks: query_device_ex's hca_core_clock (1 GHz) and
 *      completion_timestamp_mask, ibv_query_rt_values_ex; CQs with VLAN or
 *      flow tag fields are EOPNOTSUPP; IGNORE_OVERRUN and
 *      SINGLE_THREADED CQs are created;
 *   1. SEND with immediate through ibv_wr_send_imm; the receive's opcode,
 *      length, immediate, QP number and flags through ibv_wc_read_*, and
 *      both sides' completion timestamps (ibv_wc_read_completion_ts between
 *      two ibv_query_rt_values_ex, ibv_wc_read_completion_wallclock_ns
 *      within the CLOCK_REALTIME readings around the exchange);
 *   2. a batch of two work requests (RDMA WRITE, then RDMA READ back) in one
 *      ibv_wr_start/ibv_wr_complete, completing in order; ibv_wr_abort;
 *      an RDMA WRITE gathered from two pieces by ibv_wr_set_sge_list, and
 *      a NULL list making ibv_wr_complete EINVAL;
 *   3. fetch-and-add, compare-and-swap and an 8-byte ATOMIC WRITE;
 *   4. memory windows: type 2 bound with ibv_wr_bind_mw, written through,
 *      invalidated by the peer's SEND WITH INVALIDATE; type 1 bound with
 *      ibv_bind_mw; allocating type 3 is EINVAL;
 *   5. ibv_import_device on a dup of cmd_fd, ibv_import_pd/ibv_import_mr by
 *      handle; a parent domain keeps its PD busy; ibv_advise_mr;
 *   7. (run before 6) device memory: ibv_alloc_dm within max_dm_size,
 *      ibv_memcpy_to/from_dm (4-byte words, inside: else EINVAL), a
 *      zero-based ibv_reg_dm_mr (ZERO_BASED required), the peer's RDMA WRITE
 *      and FETCH_AND_ADD into it, a SEND gathered from it, ibv_free_dm EBUSY
 *      while the region lives, ibv_import_dm of the same bytes;
 *   6. error paths: ibv_wr_complete on a QP in RESET is EINVAL, RDMA WRITE
 *      on a UD QP is EOPNOTSUPP, and a write after ibv_rereg_mr removed
 *      REMOTE_WRITE (same keys) completes with IBV_WC_REM_ACCESS_ERR.
 * Prints one line per check and "PASS" at the end; exits 1 at the first
 * failed check.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "verbs_util.h"

#define BUF 4096
#define IMM 0x1234abcdu

struct side {
	struct ibv_cq_ex *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	struct ibv_mr *mr;
	char *buf;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;

/* Polls one completion (for about `ms` milliseconds); returns its status
 * (-2: none came), fills opcode/wr_id. */
static int poll_for(struct ibv_cq_ex *cq, int ms, enum ibv_wc_opcode *op, uint64_t *wr_id)
{
	struct ibv_poll_cq_attr attr = {};
	for (int i = 0; i < ms * 10; i++) {
		int rc = ibv_start_poll(cq, &attr);
		if (rc == ENOENT) {
			usleep(100);
			continue;
		}
		if (rc)
			return -1;
		int status = cq->status;
		if (op)
			*op = ibv_wc_read_opcode(cq);
		if (wr_id)
			*wr_id = cq->wr_id;
		ibv_end_poll(cq);
		return status;
	}
	return -2;
}

#define TS_FLAGS (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | \
		  IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)

static uint64_t raw_clock(void)
{
	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
	check(!ibv_query_rt_values_ex(ctx, &v) && v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK &&
	      v.raw_clock.tv_nsec >= 0 && v.raw_clock.tv_nsec < 1000000000,
	      "ibv_query_rt_values_ex: raw_clock");
	return (uint64_t)v.raw_clock.tv_sec * 1000000000u + (uint64_t)v.raw_clock.tv_nsec;
}

static uint64_t realtime_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void setup(struct side *s)
{
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 64,
		.wc_flags = IBV_WC_STANDARD_FLAGS | TS_FLAGS,
	};
	s->cq = ibv_create_cq_ex(ctx, &ca);
	check(s->cq != NULL, "ibv_create_cq_ex with IBV_WC_STANDARD_FLAGS and both timestamps");
	s->buf = aligned_alloc(4096, BUF);
	memset(s->buf, 0, BUF);
	s->mr = ibv_reg_mr(pd, s->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
			   IBV_ACCESS_MW_BIND);
	check(s->mr != NULL, "ibv_reg_mr");
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = ibv_cq_ex_to_cq(s->cq),
		.recv_cq = ibv_cq_ex_to_cq(s->cq),
		.cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 2,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
				  IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
				  IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
				  IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
				  IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_BIND_MW |
				  IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV,
	};
	s->qp = ibv_create_qp_ex(ctx, &qa);
	check(s->qp != NULL, "ibv_create_qp_ex with send-ops flags");
	s->qpx = ibv_qp_to_qp_ex(s->qp);
	check(s->qpx != NULL, "ibv_qp_to_qp_ex");
}

static void connect_to(struct side *s, uint32_t dest_qpn)
{
	rc_to_rts(s->qp, dest_qpn, gid, 7);
}

static void post_recv(struct side *s, uint32_t off, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)s->buf + off, len, s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 77, .sg_list = &sge, .num_sge = 1 }, *bad;
	check(!ibv_post_recv(s->qp, &wr, &bad), "ibv_post_recv");
}

/* Starts a signaled work request with id `id` (ibv_wr_start + fields). */
static void start(struct side *s, uint64_t id)
{
	ibv_wr_start(s->qpx);
	s->qpx->wr_id = id;
	s->qpx->wr_flags = IBV_SEND_SIGNALED;
}

static int expect(struct side *s, uint64_t id, enum ibv_wc_opcode op, int status)
{
	enum ibv_wc_opcode got_op = 0;
	uint64_t got_id = 0;
	int st = poll_for(s->cq, 10000, &got_op, &got_id);
	if (st != status || got_id != id || (status == IBV_WC_SUCCESS && got_op != op)) {
		printf("  completion: status %d id %" PRIu64 " opcode %d (wanted %d %" PRIu64
		       " %d)\n", st, got_id, got_op, status, id, op);
		return 0;
	}
	return 1;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct ibv_device **list = ibv_get_device_list(NULL);
	check(list && list[0], "a device");
	ctx = ibv_open_device(list[0]);
	check(ctx != NULL, "ibv_open_device");
	check(!ibv_query_gid(ctx, 1, 0, &gid), "ibv_query_gid 0");
	pd = ibv_alloc_pd(ctx);
	check(pd != NULL, "ibv_alloc_pd");

	/* 0. Completion clocks. */
	struct ibv_device_attr_ex dx;
	check(!ibv_query_device_ex(ctx, NULL, &dx) && dx.hca_core_clock == 1000000 &&
	      dx.completion_timestamp_mask == UINT64_MAX,
	      "query_device_ex: hca_core_clock 1 GHz, 64-bit completion timestamps");
	uint64_t r0 = raw_clock(), r1 = raw_clock();
	check(r0 > 0 && r0 <= r1, "raw_clock moves forward");
	/* (TM info is offered: c/tm_verbs.c.) */
	uint64_t no[] = { IBV_WC_EX_WITH_CVLAN, IBV_WC_EX_WITH_FLOW_TAG };
	for (int i = 0; i < 2; i++) {
		struct ibv_cq_init_attr_ex bad = { .cqe = 4, .wc_flags = no[i] };
		errno = 0;
		check(!ibv_create_cq_ex(ctx, &bad) && errno == EOPNOTSUPP,
		      "VLAN / flow tag CQs are EOPNOTSUPP");
	}
	struct ibv_cq_init_attr_ex ov = { .cqe = 4, .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
		.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN | IBV_CREATE_CQ_ATTR_SINGLE_THREADED };
	struct ibv_cq_ex *ovq = ibv_create_cq_ex(ctx, &ov);
	check(ovq != NULL && !ibv_destroy_cq(ibv_cq_ex_to_cq(ovq)),
	      "IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN | SINGLE_THREADED");
	ov.flags = 1 << 7;
	errno = 0;
	check(!ibv_create_cq_ex(ctx, &ov) && errno == EOPNOTSUPP, "unknown CQ flag: EOPNOTSUPP");

	struct side c, s;
	setup(&c);
	setup(&s);
	connect_to(&c, s.qp->qp_num);
	connect_to(&s, c.qp->qp_num);

	/* 1. SEND with immediate. */
	post_recv(&s, 0, 256);
	memcpy(c.buf, "hello, extended verbs", 22);
	uint64_t raw_before = raw_clock(), wall_before = realtime_ns();
	start(&c, 1);
	ibv_wr_send_imm(c.qpx, htonl(IMM));
	ibv_wr_set_sge(c.qpx, c.mr->lkey, (uintptr_t)c.buf, 22);
	check(!ibv_wr_complete(c.qpx), "ibv_wr_complete (send with immediate)");
	struct ibv_poll_cq_attr pa = {};
	int rc;
	while ((rc = ibv_start_poll(c.cq, &pa)) == ENOENT)
		usleep(1);
	check(rc == 0 && c.cq->status == IBV_WC_SUCCESS && c.cq->wr_id == 1 &&
	      ibv_wc_read_opcode(c.cq) == IBV_WC_SEND, "sender's completion");
	uint64_t send_ts = ibv_wc_read_completion_ts(c.cq);
	uint64_t send_wall = ibv_wc_read_completion_wallclock_ns(c.cq);
	ibv_end_poll(c.cq);
	while ((rc = ibv_start_poll(s.cq, &pa)) == ENOENT)
		usleep(1);
	check(rc == 0 && s.cq->status == IBV_WC_SUCCESS && s.cq->wr_id == 77,
	      "receive completion");
	uint64_t recv_ts = ibv_wc_read_completion_ts(s.cq);
	uint64_t recv_wall = ibv_wc_read_completion_wallclock_ns(s.cq);
	uint64_t raw_after = raw_clock(), wall_after = realtime_ns();
	printf("timestamps: raw %" PRIu64 " <= recv %" PRIu64 " <= send %" PRIu64
	       " <= raw %" PRIu64 "\n", raw_before, recv_ts, send_ts, raw_after);
	/* The receive completes before the ACK completes the send. */
	check(raw_before <= recv_ts && recv_ts <= send_ts && send_ts <= raw_after,
	      "completion timestamps on the device clock, in order");
	/* Wall clock: 1 ms of slack for the two clocks' readings. */
	check(wall_before <= recv_wall + 1000000 && recv_wall <= send_wall + 1000000 &&
	      send_wall <= wall_after + 1000000,
	      "wall-clock completion timestamps within the exchange");
	check(ibv_wc_read_opcode(s.cq) == IBV_WC_RECV && ibv_wc_read_byte_len(s.cq) == 22 &&
	      ntohl(ibv_wc_read_imm_data(s.cq)) == IMM &&
	      ibv_wc_read_qp_num(s.cq) == s.qp->qp_num &&
	      (ibv_wc_read_wc_flags(s.cq) & IBV_WC_WITH_IMM),
	      "ibv_wc_read_* of the receive");
	check(ibv_next_poll(s.cq) == ENOENT, "ibv_next_poll: nothing more");
	ibv_end_poll(s.cq);
	check(!memcmp(s.buf, "hello, extended verbs", 22), "data received");

	/* 2. A batch: WRITE then READ back; and an aborted batch. */
	for (int i = 0; i < 512; i++)
		c.buf[i] = (char)(i * 7);
	start(&c, 2);
	ibv_wr_rdma_write(c.qpx, s.mr->rkey, (uintptr_t)s.buf + 1024);
	ibv_wr_set_sge(c.qpx, c.mr->lkey, (uintptr_t)c.buf, 512);
	c.qpx->wr_id = 3;
	ibv_wr_rdma_read(c.qpx, s.mr->rkey, (uintptr_t)s.buf + 1024);
	ibv_wr_set_sge(c.qpx, c.mr->lkey, (uintptr_t)c.buf + 2048, 512);
	check(!ibv_wr_complete(c.qpx), "ibv_wr_complete (write + read)");
	check(expect(&c, 2, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS) &&
	      expect(&c, 3, IBV_WC_RDMA_READ, IBV_WC_SUCCESS), "both complete in order");
	check(!memcmp(s.buf + 1024, c.buf, 512) && !memcmp(c.buf + 2048, c.buf, 512),
	      "written and read back");
	start(&c, 4);
	ibv_wr_send(c.qpx);
	ibv_wr_abort(c.qpx);
	check(poll_for(c.cq, 100, NULL, NULL) == -2, "ibv_wr_abort posts nothing");
	struct ibv_sge two[2] = {
		{ (uintptr_t)c.buf + 100, 8, c.mr->lkey },
		{ (uintptr_t)c.buf + 300, 8, c.mr->lkey },
	};
	start(&c, 40);
	ibv_wr_rdma_write(c.qpx, s.mr->rkey, (uintptr_t)s.buf + 1600);
	ibv_wr_set_sge_list(c.qpx, 2, two);
	check(!ibv_wr_complete(c.qpx) && expect(&c, 40, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS) &&
	      !memcmp(s.buf + 1600, c.buf + 100, 8) && !memcmp(s.buf + 1608, c.buf + 300, 8),
	      "ibv_wr_set_sge_list: two pieces written in order");
	start(&c, 41);
	ibv_wr_rdma_write(c.qpx, s.mr->rkey, (uintptr_t)s.buf + 1600);
	ibv_wr_set_sge_list(c.qpx, 1, NULL);
	check(ibv_wr_complete(c.qpx) == EINVAL, "ibv_wr_set_sge_list: a NULL list is EINVAL");
	check(poll_for(c.cq, 100, NULL, NULL) == -2, "and posts nothing");

	/* 3. Atomics. */
	uint64_t *word = (uint64_t *)(s.buf + 3072);
	*word = 40;
	start(&c, 5);
	ibv_wr_atomic_fetch_add(c.qpx, s.mr->rkey, (uintptr_t)word, 2);
	ibv_wr_set_sge(c.qpx, c.mr->lkey, (uintptr_t)c.buf + 3072, 8);
	c.qpx->wr_id = 6;
	ibv_wr_atomic_cmp_swp(c.qpx, s.mr->rkey, (uintptr_t)word, 42, 99);
	ibv_wr_set_sge(c.qpx, c.mr->lkey, (uintptr_t)c.buf + 3080, 8);
	check(!ibv_wr_complete(c.qpx), "ibv_wr_complete (atomics)");
	check(expect(&c, 5, IBV_WC_FETCH_ADD, IBV_WC_SUCCESS) &&
	      expect(&c, 6, IBV_WC_COMP_SWAP, IBV_WC_SUCCESS), "atomics complete");
	check(*(uint64_t *)(c.buf + 3072) == 40 && *(uint64_t *)(c.buf + 3080) == 42 &&
	      *word == 99, "fetch-and-add and compare-and-swap values");
	uint64_t value = 0x0102030405060708ull;
	start(&c, 7);
	ibv_wr_atomic_write(c.qpx, s.mr->rkey, (uintptr_t)word, &value);
	check(!ibv_wr_complete(c.qpx), "ibv_wr_complete (atomic write)");
	check(expect(&c, 7, IBV_WC_ATOMIC_WRITE, IBV_WC_SUCCESS) && *word == value,
	      "atomic write placed 8 bytes");

	/* 4. Memory windows. */
	errno = 0;
	check(!ibv_alloc_mw(pd, 3) && errno == EINVAL, "ibv_alloc_mw type 3 is EINVAL");
	struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	check(mw2 != NULL, "ibv_alloc_mw type 2");
	uint32_t key2 = ibv_inc_rkey(mw2->rkey);
	struct ibv_mw_bind_info bi = { s.mr, (uintptr_t)s.buf, 256, IBV_ACCESS_REMOTE_WRITE };
	start(&s, 8);
	ibv_wr_bind_mw(s.qpx, mw2, key2, &bi);
	check(!ibv_wr_complete(s.qpx), "ibv_wr_complete (bind type 2)");
	check(expect(&s, 8, IBV_WC_BIND_MW, IBV_WC_SUCCESS), "bind completion");
	start(&c, 9);
	ibv_wr_rdma_write(c.qpx, key2, (uintptr_t)s.buf + 64);
	ibv_wr_set_sge(c.qpx, c.mr->lkey, (uintptr_t)c.buf, 16);
	check(!ibv_wr_complete(c.qpx) && expect(&c, 9, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS) &&
	      !memcmp(s.buf + 64, c.buf, 16), "write through the type 2 window");

	struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	check(mw1 != NULL, "ibv_alloc_mw type 1");
	uint32_t old1 = mw1->rkey;
	struct ibv_mw_bind b1 = { .wr_id = 10, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { s.mr, (uintptr_t)s.buf + 512, 256, IBV_ACCESS_REMOTE_READ } };
	check(!ibv_bind_mw(s.qp, mw1, &b1) && mw1->rkey == ibv_inc_rkey(old1),
	      "ibv_bind_mw (type 1) moves the key");
	check(expect(&s, 10, IBV_WC_BIND_MW, IBV_WC_SUCCESS), "type 1 bind completion");
	start(&c, 11);
	ibv_wr_rdma_read(c.qpx, mw1->rkey, (uintptr_t)s.buf + 512);
	ibv_wr_set_sge(c.qpx, c.mr->lkey, (uintptr_t)c.buf + 1024, 64);
	check(!ibv_wr_complete(c.qpx) && expect(&c, 11, IBV_WC_RDMA_READ, IBV_WC_SUCCESS),
	      "read through the type 1 window");

	post_recv(&s, 2048, 64);
	start(&c, 12);
	ibv_wr_send_inv(c.qpx, key2);
	ibv_wr_set_sge(c.qpx, c.mr->lkey, (uintptr_t)c.buf, 8);
	check(!ibv_wr_complete(c.qpx) && expect(&c, 12, IBV_WC_SEND, IBV_WC_SUCCESS),
	      "send with invalidate");
	while ((rc = ibv_start_poll(s.cq, &pa)) == ENOENT)
		usleep(1);
	check(rc == 0 && s.cq->status == IBV_WC_SUCCESS &&
	      (ibv_wc_read_wc_flags(s.cq) & IBV_WC_WITH_INV) &&
	      ibv_wc_read_invalidated_rkey(s.cq) == key2,
	      "receive reports the invalidated key");
	ibv_end_poll(s.cq);

	/* 5. Import and parent domain. */
	struct ibv_context *ctx2 = ibv_import_device(dup(ctx->cmd_fd));
	check(ctx2 != NULL, "ibv_import_device(dup(cmd_fd))");
	struct ibv_pd *pd2 = ibv_import_pd(ctx2, pd->handle);
	check(pd2 && pd2->handle == pd->handle, "ibv_import_pd");
	struct ibv_mr *mr2 = ibv_import_mr(pd2, s.mr->handle);
	check(mr2 && mr2->lkey == s.mr->lkey && mr2->rkey == s.mr->rkey &&
	      mr2->length == BUF, "ibv_import_mr");
	ibv_unimport_mr(mr2);
	ibv_unimport_pd(pd2);
	check(!ibv_close_device(ctx2), "close the imported context");
	struct ibv_pd *spare = ibv_alloc_pd(ctx);
	struct ibv_parent_domain_init_attr pda = { .pd = spare };
	struct ibv_pd *parent = ibv_alloc_parent_domain(ctx, &pda);
	check(parent != NULL, "ibv_alloc_parent_domain");
	check(ibv_dealloc_pd(spare) == EBUSY, "the parent domain keeps its PD busy");
	check(!ibv_dealloc_pd(parent) && !ibv_dealloc_pd(spare), "dealloc both");

	struct ibv_sge adv = { (uintptr_t)c.buf, 64, c.mr->lkey };
	check(!ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			     &adv, 1), "ibv_advise_mr (prefetch: nothing to do)");
	adv.lkey ^= 0x7f000000;
	check(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &adv, 1) == EINVAL,
	      "ibv_advise_mr with a bad lkey is EINVAL");

	/* 7. Device memory (before 6, which leaves the QPs in error). */
	struct ibv_device_attr_ex dmx;
	check(!ibv_query_device_ex(ctx, NULL, &dmx) && dmx.max_dm_size >= 8192, "max_dm_size");
	struct ibv_alloc_dm_attr da = { .length = 4096, .log_align_req = 6 };
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
	check(dm != NULL, "ibv_alloc_dm");
	da.comp_mask = 1;
	errno = 0;
	check(!ibv_alloc_dm(ctx, &da) && errno == EINVAL, "ibv_alloc_dm: unknown comp_mask is EINVAL");
	da.comp_mask = 0;
	da.length = dmx.max_dm_size + 1;
	check(!ibv_alloc_dm(ctx, &da), "ibv_alloc_dm beyond max_dm_size fails");
	uint32_t words[4] = { 1, 2, 3, 4 }, back[4] = { 0 };
	check(!ibv_memcpy_to_dm(dm, 16, words, 16) && !ibv_memcpy_from_dm(back, dm, 16, 16) &&
	      !memcmp(words, back, 16), "ibv_memcpy_to_dm / ibv_memcpy_from_dm");
	check(ibv_memcpy_to_dm(dm, 2, words, 4) == EINVAL &&
	      ibv_memcpy_to_dm(dm, 4, words, 6) == EINVAL &&
	      ibv_memcpy_from_dm(back, dm, 4096, 4) == EINVAL,
	      "unaligned or outside copies are EINVAL");
	errno = 0;
	check(!ibv_reg_dm_mr(pd, dm, 0, 4096, IBV_ACCESS_LOCAL_WRITE) && errno == EINVAL,
	      "ibv_reg_dm_mr without IBV_ACCESS_ZERO_BASED is EINVAL");
	errno = 0;
	check(!ibv_reg_dm_mr(pd, dm, 1024, 4096, IBV_ACCESS_ZERO_BASED) && errno == EINVAL,
	      "ibv_reg_dm_mr past the end is EINVAL");
	struct ibv_mr *dmr = ibv_reg_dm_mr(pd, dm, 1024, 2048,
					   IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE |
					   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					   IBV_ACCESS_REMOTE_ATOMIC);
	check(dmr && dmr->addr == NULL && dmr->length == 2048, "ibv_reg_dm_mr: a zero-based region");
	check(ibv_free_dm(dm) == EBUSY, "ibv_free_dm with a region over it is EBUSY");
	for (int i = 0; i < 256; i++)
		c.buf[i] = (char)(i ^ 0x5a);
	start(&c, 20);
	ibv_wr_rdma_write(c.qpx, dmr->rkey, 64); /* offset 64 of the region */
	ibv_wr_set_sge(c.qpx, c.mr->lkey, (uintptr_t)c.buf, 256);
	check(!ibv_wr_complete(c.qpx) && expect(&c, 20, IBV_WC_RDMA_WRITE, IBV_WC_SUCCESS),
	      "RDMA WRITE into the peer's device memory");
	char got[256];
	check(!ibv_memcpy_from_dm(got, dm, 1024 + 64, 256) && !memcmp(got, c.buf, 256),
	      "the bytes are in the device memory, at region offset 64");
	uint64_t v = 40;
	check(!ibv_memcpy_to_dm(dm, 1024 + 512, &v, 8), "ibv_memcpy_to_dm 40");
	start(&c, 21);
	ibv_wr_atomic_fetch_add(c.qpx, dmr->rkey, 512, 2);
	ibv_wr_set_sge(c.qpx, c.mr->lkey, (uintptr_t)c.buf + 1024, 8);
	check(!ibv_wr_complete(c.qpx) && expect(&c, 21, IBV_WC_FETCH_ADD, IBV_WC_SUCCESS),
	      "FETCH_AND_ADD on the peer's device memory");
	memcpy(&v, c.buf + 1024, 8);
	check(v == 40, "it returned 40");
	check(!ibv_memcpy_from_dm(&v, dm, 1024 + 512, 8) && v == 42, "the device memory holds 42");
	post_recv(&c, 2048, 256);
	start(&s, 22);
	ibv_wr_send(s.qpx);
	ibv_wr_set_sge(s.qpx, dmr->lkey, 64, 256);
	check(!ibv_wr_complete(s.qpx) && expect(&s, 22, IBV_WC_SEND, IBV_WC_SUCCESS) &&
	      expect(&c, 77, IBV_WC_RECV, IBV_WC_SUCCESS) && !memcmp(c.buf + 2048, got, 256),
	      "a SEND gathered from device memory (lkey, offset 64)");
	uint32_t handle = dm->handle;
	struct ibv_dm *idm = ibv_import_dm(ctx, handle);
	memset(back, 0, sizeof(back));
	check(idm && !ibv_memcpy_from_dm(back, idm, 16, 16) && !memcmp(back, words, 16),
	      "ibv_import_dm: the same bytes");
	ibv_unimport_dm(idm);
	check(!ibv_dereg_mr(dmr) && !ibv_free_dm(dm), "ibv_dereg_mr, then ibv_free_dm");
	errno = 0;
	check(!ibv_import_dm(ctx, handle) && errno == EINVAL, "freed device memory cannot be imported");

	/* 6. Error paths. */
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = ibv_cq_ex_to_cq(c.cq), .recv_cq = ibv_cq_ex_to_cq(c.cq),
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd, .send_ops_flags = IBV_QP_EX_WITH_SEND,
	};
	struct ibv_qp *idle = ibv_create_qp_ex(ctx, &qa);
	struct ibv_qp_ex *idlex = ibv_qp_to_qp_ex(idle);
	ibv_wr_start(idlex);
	ibv_wr_send(idlex);
	ibv_wr_set_sge(idlex, c.mr->lkey, (uintptr_t)c.buf, 8);
	check(ibv_wr_complete(idlex) == EINVAL, "ibv_wr_complete on a QP in RESET is EINVAL");
	check(!ibv_destroy_qp(idle), "destroy it");
	qa.qp_type = IBV_QPT_UD;
	qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
	errno = 0;
	check(!ibv_create_qp_ex(ctx, &qa) && errno == EOPNOTSUPP,
	      "RDMA WRITE on a UD QP is EOPNOTSUPP");

	check(ibv_rereg_mr(s.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND) == 0,
	      "ibv_rereg_mr drops REMOTE_WRITE");
	start(&c, 13);
	ibv_wr_rdma_write(c.qpx, s.mr->rkey, (uintptr_t)s.buf);
	ibv_wr_set_sge(c.qpx, c.mr->lkey, (uintptr_t)c.buf, 16);
	check(!ibv_wr_complete(c.qpx) && expect(&c, 13, 0, IBV_WC_REM_ACCESS_ERR),
	      "write after rereg: remote access error");

	check(!ibv_dealloc_mw(mw1) && !ibv_dealloc_mw(mw2), "ibv_dealloc_mw");
	printf("PASS\n");
	return 0;
}
