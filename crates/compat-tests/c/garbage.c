/*
 * garbage: libibverbs under garbage input, for
 * crates/compat-tests/tests/garbage.rs. Written from the verbs man pages and
 * rdma-core's sources (libibverbs/verbs.c, providers/rxe/rxe.c, the kernel
 * checks they rely on).
 *
 * Two groups of calls:
 *
 * A. Input rdma-core itself refuses (with the rxe provider and the kernel
 *    behind it): impossible sizes, ports, GID and P_Key indices, access
 *    flags, QP transitions, work requests a QP cannot take, objects still
 *    in use, address handles without a GRH on RoCE, unmapped memory. The
 *    call must fail with the errno rdma-core gives (or one of them, where
 *    the kernel's answer depends on the provider), never crash.
 *
 * B. Input rdma-core does not survive: NULL, destroyed and wrong-kind object
 *    pointers passed to exported functions (rdma-core dereferences them:
 *    `get_ops(pd->context)` and the like). softrdma checks every pointer
 *    against its registry of live objects first, so these fail with EINVAL.
 *    Only exported functions are called this way: the inline ones in
 *    verbs.h (ibv_post_send, ibv_poll_cq, ...) dereference the pointer in
 *    the application itself, for any library.
 *
 * Afterwards the device must still work: an RC QP connected to itself
 * carries an RDMA WRITE and the bytes arrive.
 *
 * Output: one "ok   <check>" or "FAIL <check>: <details>" line per check,
 * then "checks=<n> failures=<m>". Exit 0 iff no failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int n_checks, n_failures;

static void check(int ok, const char *what, const char *fmt, ...)
{
	n_checks++;
	if (ok) {
		printf("ok   %s\n", what);
		return;
	}
	n_failures++;
	printf("FAIL %s: ", what);
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

/* Whether `e` is one of the errnos after it (0-terminated). */
static int one_of(int e, va_list ap)
{
	int want;
	while ((want = va_arg(ap, int)) != 0)
		if (e == want)
			return 1;
	return 0;
}

/* A constructor returned NULL with errno one of the listed ones. */
static void expect_null(const char *what, const void *p, int err, ...)
{
	va_list ap;
	va_start(ap, err);
	int ok = p == NULL && one_of(err, ap);
	va_end(ap);
	check(ok, what, "returned %p, errno %d (%s)", p, err, strerror(err));
}

/* A verb returned one of the listed positive errnos. */
static void expect_rc(const char *what, int rc, ...)
{
	va_list ap;
	va_start(ap, rc);
	int ok = rc != 0 && one_of(rc, ap);
	va_end(ap);
	check(ok, what, "returned %d", rc);
}

/* A verb that returns -1 with errno (or any non-zero) failed. */
static void expect_fail(const char *what, int rc)
{
	check(rc != 0, what, "returned %d", rc);
}

#define NULLP(call, ...)                                                       \
	do {                                                                   \
		errno = 0;                                                     \
		void *p_ = (void *)(call);                                     \
		int e_ = errno;                                                \
		expect_null(#call, p_, e_, __VA_ARGS__, 0);                    \
	} while (0)

#define RC(call, ...) expect_rc(#call, (call), __VA_ARGS__, 0)

static void *xmalloc(size_t n)
{
	void *p = calloc(1, n);
	if (!p) {
		perror("calloc");
		exit(2);
	}
	return p;
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq,
			      enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 2, .max_send_sge = 2,
			 .max_recv_sge = 2 },
		.qp_type = t,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	if (!qp) {
		printf("FATAL: ibv_create_qp: %s\n", strerror(errno));
		exit(2);
	}
	return qp;
}

/* RESET -> INIT -> RTR -> RTS towards `dqpn` at GID 0 of this device. */
static int connect_qp(struct ibv_qp *qp, struct ibv_context *ctx, uint32_t dqpn)
{
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		return -1;
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dqpn;
	a.rq_psn = 0x123;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC |
					  IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0x123;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
					     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	long page = sysconf(_SC_PAGESIZE);

	int n = -1;
	struct ibv_device **list = ibv_get_device_list(NULL);
	check(list != NULL && list[0] != NULL, "ibv_get_device_list(NULL)",
	      "no device list");
	if (!list || !list[0])
		return 1;
	ibv_free_device_list(list);
	list = ibv_get_device_list(&n);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx) {
		printf("FATAL: ibv_open_device: %s\n", strerror(errno));
		return 2;
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq) {
		printf("FATAL: setup: %s\n", strerror(errno));
		return 2;
	}
	char *buf = xmalloc(8192);

	/* ------------------------------------------------ A: rdma-core refuses */

	struct ibv_port_attr pa;
	RC(ibv_query_port(ctx, 0, &pa), EINVAL);
	RC(ibv_query_port(ctx, 2, &pa), EINVAL);
	union ibv_gid gid;
	expect_fail("ibv_query_gid(ctx, 1, 65535, &gid)", ibv_query_gid(ctx, 1, 65535, &gid));
	expect_fail("ibv_query_gid(ctx, 2, 0, &gid)", ibv_query_gid(ctx, 2, 0, &gid));
	uint16_t pkey;
	expect_fail("ibv_query_pkey(ctx, 1, 100, &pkey)",
		    ibv_query_pkey(ctx, 1, 100, &pkey));

	NULLP(ibv_create_cq(ctx, 0, NULL, NULL, 0), EINVAL);
	NULLP(ibv_create_cq(ctx, -1, NULL, NULL, 0), EINVAL);
	NULLP(ibv_create_cq(ctx, INT_MAX, NULL, NULL, 0), EINVAL, ENOMEM);
	RC(ibv_resize_cq(cq, 0), EINVAL);
	RC(ibv_resize_cq(cq, INT_MAX), EINVAL, ENOMEM);

	NULLP(ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_WRITE), EINVAL);
	NULLP(ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_REMOTE_ATOMIC), EINVAL);
	NULLP(ibv_reg_mr(pd, buf, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE), EINVAL,
	      EFAULT, ENOMEM);
	NULLP(ibv_reg_mr(pd, (void *)(UINTPTR_MAX - 4095), 8192,
			 IBV_ACCESS_LOCAL_WRITE),
	      EINVAL, EFAULT);
	/* Memory nobody mapped: the kernel cannot pin it (EFAULT). */
	void *hole = mmap(NULL, 16 * page, PROT_NONE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(hole, 16 * page);
	NULLP(ibv_reg_mr(pd, hole, 16 * page, IBV_ACCESS_LOCAL_WRITE), EFAULT);
	/* ibv_rereg_mr onto that hole, or adding write rights to read-only
	 * memory, fails the same way and leaves the region as it was. */
	{
		static const char ro[8192] __attribute__((aligned(4096))) = "ro";
		struct ibv_mr *rmr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
		check(rmr != NULL, "ibv_reg_mr for rereg", "errno %d", errno);
		errno = 0;
		int r = ibv_rereg_mr(rmr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, hole,
				  16 * page, 0);
		check(r == IBV_REREG_MR_ERR_CMD && errno == EFAULT,
		      "ibv_rereg_mr onto unmapped memory", "rc %d errno %d", r, errno);
		struct ibv_mr *romr = ibv_reg_mr(pd, (void *)ro, sizeof(ro), 0);
		check(romr != NULL, "ibv_reg_mr of read-only memory without write rights",
		      "errno %d", errno);
		errno = 0;
		r = ibv_rereg_mr(romr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				  IBV_ACCESS_LOCAL_WRITE);
		check(r == IBV_REREG_MR_ERR_CMD && errno == EFAULT,
		      "ibv_rereg_mr adding LOCAL_WRITE to read-only memory",
		      "rc %d errno %d", r, errno);
		check(rmr->addr == buf && rmr->length == 4096,
		      "a failed rereg leaves the region", "addr %p length %zu",
		      rmr->addr, rmr->length);
		check(ibv_dereg_mr(romr) == 0 && ibv_dereg_mr(rmr) == 0,
		      "deregister both", "failed");
	}

	struct ibv_qp_init_attr qa = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = { .max_send_wr = 1u << 30, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	NULLP(ibv_create_qp(pd, &qa), EINVAL, ENOMEM);
	qa.cap.max_send_wr = 1;
	qa.cap.max_send_sge = 100000;
	NULLP(ibv_create_qp(pd, &qa), EINVAL, ENOMEM);
	qa.cap.max_send_sge = 1;
	qa.cap.max_inline_data = 1u << 24;
	NULLP(ibv_create_qp(pd, &qa), EINVAL, ENOMEM);
	qa.cap.max_inline_data = 0;
	qa.qp_type = (enum ibv_qp_type)99;
	NULLP(ibv_create_qp(pd, &qa), EINVAL, EOPNOTSUPP);

	struct ibv_qp *qp = make_qp(pd, cq, IBV_QPT_RC);
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_RTS };
	RC(ibv_modify_qp(qp, &at, IBV_QP_STATE), EINVAL);
	at.qp_state = IBV_QPS_INIT;
	at.port_num = 7;
	RC(ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS),
	   EINVAL);

	/* Work requests the QP cannot take (posting through the inline
	 * ibv_post_send with valid QP pointers). */
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192,
				       IBV_ACCESS_LOCAL_WRITE |
					       IBV_ACCESS_REMOTE_WRITE);
	if (!mr) {
		printf("FATAL: ibv_reg_mr: %s\n", strerror(errno));
		return 2;
	}
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64,
			       .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qp, &wr, &bad);
	check(rc == EINVAL && bad == &wr, "ibv_post_send on a QP in RESET",
	      "rc %d bad %p", rc, (void *)bad);
	if (connect_qp(qp, ctx, qp->qp_num)) {
		printf("FATAL: connect_qp: %s\n", strerror(errno));
		return 2;
	}
	wr.opcode = (enum ibv_wr_opcode)99;
	bad = NULL;
	rc = ibv_post_send(qp, &wr, &bad);
	check(rc == EINVAL && bad == &wr, "ibv_post_send with opcode 99",
	      "rc %d bad %p", rc, (void *)bad);
	/* num_sge far above max_send_sge, with one SGE right before a
	 * PROT_NONE page: the provider must refuse before reading the list
	 * (rxe checks num_sge against max_sge first). */
	char *guard = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (guard == MAP_FAILED || mprotect(guard + page, page, PROT_NONE)) {
		perror("mmap");
		return 2;
	}
	struct ibv_sge *last = (struct ibv_sge *)(guard + page) - 1;
	*last = sge;
	wr.opcode = IBV_WR_SEND;
	wr.sg_list = last;
	wr.num_sge = 1000;
	bad = NULL;
	rc = ibv_post_send(qp, &wr, &bad);
	check(rc == EINVAL && bad == &wr,
	      "ibv_post_send with num_sge 1000 > max_send_sge (list ends at a guard page)",
	      "rc %d bad %p", rc, (void *)bad);
	struct ibv_recv_wr rwr = { .wr_id = 2, .sg_list = last, .num_sge = 1000 };
	struct ibv_recv_wr *rbad = NULL;
	rc = ibv_post_recv(qp, &rwr, &rbad);
	check(rc == EINVAL && rbad == &rwr,
	      "ibv_post_recv with num_sge 1000 > max_recv_sge (list ends at a guard page)",
	      "rc %d bad %p", rc, (void *)rbad);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	sge.length = 0xFFFFFFFFu;
	bad = NULL;
	rc = ibv_post_send(qp, &wr, &bad);
	check(rc == EINVAL && bad == &wr, "ibv_post_send of 4 GiB (> max_msg_sz)",
	      "rc %d", rc);
	sge.length = 64;
	char *big = xmalloc(1 << 20);
	struct ibv_sge isge = { .addr = (uintptr_t)big, .length = 1 << 20 };
	struct ibv_send_wr iwr = { .wr_id = 3, .sg_list = &isge, .num_sge = 1,
				   .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_INLINE };
	bad = NULL;
	rc = ibv_post_send(qp, &iwr, &bad);
	check(rc == EINVAL && bad == &iwr, "ibv_post_send of 1 MiB inline",
	      "rc %d", rc);
	/* The receive queue holds max_recv_wr (2): the third is ENOMEM. */
	rwr.sg_list = &sge;
	rwr.num_sge = 1;
	ibv_post_recv(qp, &rwr, &rbad);
	ibv_post_recv(qp, &rwr, &rbad);
	rbad = NULL;
	rc = ibv_post_recv(qp, &rwr, &rbad);
	check(rc == ENOMEM && rbad == &rwr, "ibv_post_recv on a full receive queue",
	      "rc %d", rc);
	struct ibv_wc wc[4];
	check(ibv_poll_cq(cq, -1, wc) == 0, "ibv_poll_cq(cq, -1, wc)", "not 0");
	check(ibv_poll_cq(cq, 0, NULL) == 0, "ibv_poll_cq(cq, 0, NULL)", "not 0");

	/* Objects in use. */
	RC(ibv_destroy_cq(cq), EBUSY);
	RC(ibv_dealloc_pd(pd), EBUSY);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *ccq = ibv_create_cq(ctx, 4, NULL, ch, 0);
	RC(ibv_destroy_comp_channel(ch), EBUSY);
	ibv_destroy_cq(ccq);
	check(ibv_destroy_comp_channel(ch) == 0,
	      "ibv_destroy_comp_channel once its CQ is gone", "failed");

	/* Address handles: RoCE needs a GRH; no port 9; no GID index 200. */
	struct ibv_ah_attr ah = { .port_num = 1 };
	NULLP(ibv_create_ah(pd, &ah), EINVAL);
	ah.is_global = 1;
	ah.grh.dgid = gid;
	ah.grh.hop_limit = 1;
	ah.port_num = 9;
	NULLP(ibv_create_ah(pd, &ah), EINVAL);
	ah.port_num = 1;
	ah.grh.sgid_index = 200;
	NULLP(ibv_create_ah(pd, &ah), EINVAL);

	/* Multicast: UD QPs and multicast GIDs only. */
	union ibv_gid unicast;
	ibv_query_gid(ctx, 1, 0, &unicast);
	RC(ibv_attach_mcast(qp, &unicast, 0), EINVAL);
	struct ibv_qp *ud = make_qp(pd, cq, IBV_QPT_UD);
	RC(ibv_attach_mcast(ud, &unicast, 0), EINVAL);

	/* Shared receive queues. */
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 1u << 30, .max_sge = 1 } };
	NULLP(ibv_create_srq(pd, &sa), EINVAL, ENOMEM);
	sa.attr.max_wr = 4;
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	struct ibv_srq_attr sattr = { .srq_limit = 100 };
	RC(ibv_modify_srq(srq, &sattr, IBV_SRQ_LIMIT), EINVAL);
	/* As for the QP above: more SGEs than max_sge, refused unread. */
	rwr.sg_list = last;
	rwr.num_sge = 1000;
	rbad = NULL;
	rc = ibv_post_srq_recv(srq, &rwr, &rbad);
	check(rc == EINVAL && rbad == &rwr,
	      "ibv_post_srq_recv with num_sge 1000 > max_sge (list ends at a guard page)",
	      "rc %d bad %p", rc, (void *)rbad);
	rwr.num_sge = 1;

	/* Out-of-range enums have names. */
	check(ibv_wc_status_str((enum ibv_wc_status)9999) != NULL,
	      "ibv_wc_status_str(9999)", "NULL");
	check(ibv_event_type_str((enum ibv_event_type)-5) != NULL,
	      "ibv_event_type_str(-5)", "NULL");
	check(ibv_node_type_str((enum ibv_node_type)99) != NULL,
	      "ibv_node_type_str(99)", "NULL");
	check(ibv_port_state_str((enum ibv_port_state)99) != NULL,
	      "ibv_port_state_str(99)", "NULL");

	/* ---------------------------- B: rdma-core would crash, softrdma fails */

	/* NULL objects. */
	RC(ibv_dealloc_pd(NULL), EINVAL);
	RC(ibv_dereg_mr(NULL), EINVAL);
	RC(ibv_destroy_cq(NULL), EINVAL);
	RC(ibv_destroy_qp(NULL), EINVAL);
	RC(ibv_destroy_srq(NULL), EINVAL);
	RC(ibv_destroy_ah(NULL), EINVAL);
	RC(ibv_destroy_comp_channel(NULL), EINVAL);
	NULLP(ibv_alloc_pd(NULL), EINVAL);
	NULLP(ibv_create_cq(NULL, 4, NULL, NULL, 0), EINVAL);
	NULLP(ibv_reg_mr(NULL, buf, 64, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	NULLP(ibv_create_qp(NULL, &qa), EINVAL);
	NULLP(ibv_create_qp(pd, NULL), EINVAL);
	NULLP(ibv_create_ah(pd, NULL), EINVAL);
	NULLP(ibv_create_srq(NULL, &sa), EINVAL);
	struct ibv_device_attr da;
	RC(ibv_query_device(NULL, &da), EINVAL);
	RC(ibv_modify_qp(NULL, &at, IBV_QP_STATE), EINVAL);
	struct ibv_qp_init_attr qia;
	RC(ibv_query_qp(NULL, &at, IBV_QP_STATE, &qia), EINVAL);
	expect_fail("ibv_query_gid(NULL, 1, 0, &gid)", ibv_query_gid(NULL, 1, 0, &gid));
	/* A QP whose CQs are NULL. */
	struct ibv_qp_init_attr nq = { .cap = { .max_send_wr = 1, .max_recv_wr = 1,
						 .max_send_sge = 1, .max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	NULLP(ibv_create_qp(pd, &nq), EINVAL);

	/* Wrong kinds of object. */
	RC(ibv_dealloc_pd((struct ibv_pd *)cq), EINVAL);
	RC(ibv_destroy_qp((struct ibv_qp *)pd), EINVAL);
	RC(ibv_dereg_mr((struct ibv_mr *)qp), EINVAL);
	RC(ibv_destroy_cq((struct ibv_cq *)mr), EINVAL);
	RC(ibv_destroy_srq((struct ibv_srq *)qp), EINVAL);
	RC(ibv_modify_qp((struct ibv_qp *)cq, &at, IBV_QP_STATE), EINVAL);
	NULLP(ibv_create_cq(ctx, 4, NULL, (struct ibv_comp_channel *)pd, 0), EINVAL);
	NULLP(ibv_reg_mr((struct ibv_pd *)ctx, buf, 64, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	nq.send_cq = (struct ibv_cq *)pd;
	nq.recv_cq = cq;
	NULLP(ibv_create_qp(pd, &nq), EINVAL);
	/* Not an object at all: a pointer into our own data, and a wild one. */
	RC(ibv_destroy_qp((struct ibv_qp *)buf), EINVAL);
	RC(ibv_dealloc_pd((struct ibv_pd *)(uintptr_t)0xdeadbeef0ULL), EINVAL);

	/* Destroyed objects (checked right after their destruction). */
	struct ibv_mr *mr2 = ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE);
	check(mr2 && ibv_dereg_mr(mr2) == 0, "dereg a fresh MR", "failed");
	RC(ibv_dereg_mr(mr2), EINVAL);
	struct ibv_cq *cq2 = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	check(cq2 && ibv_destroy_cq(cq2) == 0, "destroy a fresh CQ", "failed");
	RC(ibv_destroy_cq(cq2), EINVAL);
	RC(ibv_resize_cq(cq2, 8), EINVAL);
	nq.send_cq = cq2;
	nq.recv_cq = cq2;
	NULLP(ibv_create_qp(pd, &nq), EINVAL);
	struct ibv_qp *qp2 = make_qp(pd, cq, IBV_QPT_RC);
	check(ibv_destroy_qp(qp2) == 0, "destroy a fresh QP", "failed");
	RC(ibv_destroy_qp(qp2), EINVAL);
	RC(ibv_modify_qp(qp2, &at, IBV_QP_STATE), EINVAL);
	RC(ibv_query_qp(qp2, &at, IBV_QP_STATE, &qia), EINVAL);
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	check(pd2 && ibv_dealloc_pd(pd2) == 0, "dealloc a fresh PD", "failed");
	RC(ibv_dealloc_pd(pd2), EINVAL);
	NULLP(ibv_reg_mr(pd2, buf, 64, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	check(ibv_destroy_srq(srq) == 0, "destroy the SRQ", "failed");
	RC(ibv_destroy_srq(srq), EINVAL);
	struct ibv_context *ctx2 = ibv_open_device(list[0]);
	check(ctx2 && ibv_close_device(ctx2) == 0, "close a second context", "failed");
	NULLP(ibv_alloc_pd(ctx2), EINVAL);
	expect_fail("ibv_close_device(closed context)", ibv_close_device(ctx2));

	/* --------------------------------------------- the device still works */

	ibv_destroy_qp(ud);
	struct ibv_qp *lq = qp; /* in RTS, connected to itself, 2 receives posted */
	memset(buf + 4096, 0, 64);
	memcpy(buf, "after the garbage, a WRITE still lands", 39);
	struct ibv_sge ws = { .addr = (uintptr_t)buf, .length = 39, .lkey = mr->lkey };
	struct ibv_send_wr w = { .wr_id = 9, .sg_list = &ws, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED };
	w.wr.rdma.remote_addr = (uintptr_t)(buf + 4096);
	w.wr.rdma.rkey = mr->rkey;
	rc = ibv_post_send(lq, &w, &bad);
	int got = 0;
	struct ibv_wc one;
	for (int i = 0; i < 5000000 && rc == 0 && !got; i++) {
		int k = ibv_poll_cq(cq, 1, &one);
		if (k < 0)
			break;
		if (k == 1 && one.wr_id == 9)
			got = 1;
		else if (k == 0)
			usleep(1);
	}
	check(rc == 0 && got && one.status == IBV_WC_SUCCESS &&
		      memcmp(buf + 4096, buf, 39) == 0,
	      "an RDMA WRITE on a QP connected to itself, after all of the above",
	      "rc %d got %d status %s", rc, got,
	      got ? ibv_wc_status_str(one.status) : "-");

	ibv_destroy_qp(lq);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	check(ibv_dealloc_pd(pd) == 0, "dealloc the PD once empty", "failed");
	check(ibv_close_device(ctx) == 0, "close the device", "failed");
	ibv_free_device_list(list);
	free(big);
	free(buf);
	munmap(guard, 2 * page);
	(void)n;

	printf("checks=%d failures=%d\n", n_checks, n_failures);
	return n_failures ? 1 : 0;
}
