/*
 * odp_verbs: on-demand paging through rdma-core 44's API, written from
 * verbs.h and the man pages (ibv_query_device_ex(3), ibv_reg_mr(3),
 * ibv_advise_mr(3)), run by crates/compat-tests/tests/c_extended.rs against
 * target/compat:
 *   1. ibv_query_device_ex reports ODP (IBV_ODP_SUPPORT and
 *      IBV_ODP_SUPPORT_IMPLICIT; RC: send, receive, write, read, atomic,
 *      SRQ receive; UD: send, receive; XRC as RC);
 *   2. an IBV_ACCESS_ON_DEMAND region over 4 pages whose last two are a
 *      hole registers (an ordinary region there is EFAULT). The hole is
 *      address space reserved with PROT_NONE, which the kernel refuses as it
 *      refuses unmapped memory: a munmapped range could be taken by the
 *      library's own mappings (the same-host path maps its lanes on first
 *      use) before the test maps it again (crates/engine/tests/odp.rs does
 *      munmap, with engines of its own);
 *   3. the peer's RDMA WRITE into its mapped pages lands; into the hole it
 *      completes with IBV_WC_REM_ACCESS_ERR, and the process lives; once
 *      mapped there (after registration) the same WRITE lands;
 *   4. an RDMA READ and a FETCH_AND_ADD in the hole: REM_ACCESS_ERR;
 *   5. an RDMA WRITE gathered from the hole of the sender's on-demand
 *      region: IBV_WC_LOC_PROT_ERR;
 *   6. implicit ODP: ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND | ...) makes
 *      the whole address space a region (mr->addr NULL, mr->length
 *      SIZE_MAX); a WRITE through its rkey reaches memory mapped afterwards;
 *      the implicit form without ON_DEMAND is EINVAL;
 *   7. ibv_advise_mr: PREFETCH and PREFETCH_WRITE with and without
 *      IBV_ADVISE_MR_FLAG_FLUSH return 0; an unknown flag is EINVAL.
 * One process, two RC QPs connected to each other through GID 0; a QP pair
 * that met an error is replaced by a new one. Prints one line per check and
 * "PASS" at the end; exits 1 at the first failed check.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "verbs_util.h"

#define PAGE 4096
#define LEN 2048

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
/* Client c and server s: a CQ and an RC QP each. */
static struct ibv_cq *cq[2];
static struct ibv_qp *qp[2];

/* A new connected QP pair (and CQs), in place of the last one. */
static void fresh_pair(void)
{
	for (int i = 0; i < 2; i++) {
		if (qp[i]) {
			ibv_destroy_qp(qp[i]);
			ibv_destroy_cq(cq[i]);
		}
		cq[i] = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_qp_init_attr qa = {
			.send_cq = cq[i],
			.recv_cq = cq[i],
			.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
			.sq_sig_all = 1,
		};
		qp[i] = ibv_create_qp(pd, &qa);
		check(cq[i] && qp[i], "a CQ and an RC QP");
	}
	rc_to_rts(qp[0], qp[1]->qp_num, gid, 0);
	rc_to_rts(qp[1], qp[0]->qp_num, gid, 0);
}

/* Posts one work request on the client: `op` of `len` bytes from
 * (addr, lkey) to (raddr, rkey); returns its completion's status. */
static int run(enum ibv_wr_opcode op, uint64_t addr, uint32_t lkey, uint32_t len,
	       uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { addr, len, lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op },
			   *bad;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 1;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	check(!ibv_post_send(qp[0], &wr, &bad), "ibv_post_send");
	struct ibv_wc wc;
	for (int i = 0; i < 1000000; i++) {
		int n = ibv_poll_cq(cq[0], 1, &wc);
		if (n == 1)
			return wc.status;
		usleep(10);
	}
	return -1;
}

/* `len` bytes of fresh memory, or NULL. */
static char *map_anywhere(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

int main(void)
{
	ctx = open_first_device(&pd, &gid);

	/* 1. capabilities */
	struct ibv_device_attr_ex dx;
	check(!ibv_query_device_ex(ctx, NULL, &dx), "ibv_query_device_ex");
	struct ibv_odp_caps *oc = &dx.odp_caps;
	uint32_t rc_all = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
			  IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
			  IBV_ODP_SUPPORT_SRQ_RECV;
	check(oc->general_caps == (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT),
	      "general_caps: IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT");
	check(oc->per_transport_caps.rc_odp_caps == rc_all && dx.xrc_odp_caps == rc_all,
	      "rc_odp_caps and xrc_odp_caps: every operation");
	check((oc->per_transport_caps.ud_odp_caps &
	       (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV)) ==
		      (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV),
	      "ud_odp_caps: send and receive");

	/* 2. an on-demand region with a hole */
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC;
	char *buf = map_anywhere(4 * PAGE);
	check(buf != NULL, "mmap 4 pages for an ordinary region");
	for (int i = 0; i < PAGE; i++)
		buf[i] = (char)(i * 7 + 1);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, PAGE, all);
	check(mr != NULL, "an ordinary region");
	char *arena = map_anywhere(4 * PAGE);
	check(arena != NULL, "mmap 4 pages");
	memset(arena, 0x5a, 4 * PAGE);
	char *hole = arena + 2 * PAGE;
	check(!mprotect(hole, 2 * PAGE, PROT_NONE), "the last two pages: a hole");
	check(ibv_reg_mr(pd, arena, 4 * PAGE, all) == NULL && errno == EFAULT,
	      "an ordinary region over the hole: EFAULT");
	struct ibv_mr *odp = ibv_reg_mr(pd, arena, 4 * PAGE, all | IBV_ACCESS_ON_DEMAND);
	check(odp != NULL, "an IBV_ACCESS_ON_DEMAND region over it registers");

	/* 3. WRITEs */
	fresh_pair();
	check(run(IBV_WR_RDMA_WRITE, (uintptr_t)buf, mr->lkey, LEN, (uintptr_t)arena + 100,
		  odp->rkey) == IBV_WC_SUCCESS && !memcmp(arena + 100, buf, LEN),
	      "RDMA WRITE into mapped on-demand memory lands");
	check(run(IBV_WR_RDMA_WRITE, (uintptr_t)buf, mr->lkey, LEN, (uintptr_t)hole,
		  odp->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "RDMA WRITE into the hole: IBV_WC_REM_ACCESS_ERR");
	check(mmap(hole, 2 * PAGE, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == hole,
	      "map fresh memory into the hole after registration");
	fresh_pair();
	check(run(IBV_WR_RDMA_WRITE, (uintptr_t)buf, mr->lkey, LEN, (uintptr_t)hole + 8,
		  odp->rkey) == IBV_WC_SUCCESS && !memcmp(hole + 8, buf, LEN),
	      "the same WRITE lands in memory mapped after registration");
	check(mmap(hole, 2 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
		      hole,
	      "a hole again");

	/* 4. READ and atomics */
	memcpy(buf, "untouched", 10);
	fresh_pair();
	check(run(IBV_WR_RDMA_READ, (uintptr_t)buf, mr->lkey, LEN, (uintptr_t)hole,
		  odp->rkey) == IBV_WC_REM_ACCESS_ERR && !memcmp(buf, "untouched", 10),
	      "RDMA READ from the hole: IBV_WC_REM_ACCESS_ERR, nothing read");
	fresh_pair();
	check(run(IBV_WR_ATOMIC_FETCH_AND_ADD, (uintptr_t)buf, mr->lkey, 8, (uintptr_t)hole,
		  odp->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "FETCH_AND_ADD in the hole: IBV_WC_REM_ACCESS_ERR");
	fresh_pair();
	uint64_t was;
	memcpy(&was, arena + 8, 8);
	check(run(IBV_WR_ATOMIC_FETCH_AND_ADD, (uintptr_t)buf, mr->lkey, 8,
		  (uintptr_t)arena + 8, odp->rkey) == IBV_WC_SUCCESS &&
		      !memcmp(buf, &was, 8),
	      "FETCH_AND_ADD in mapped on-demand memory");

	/* 5. a local SGE in the hole */
	check(run(IBV_WR_RDMA_WRITE, (uintptr_t)hole, odp->lkey, LEN, (uintptr_t)buf,
		  mr->rkey) == IBV_WC_LOC_PROT_ERR,
	      "RDMA WRITE gathered from the hole: IBV_WC_LOC_PROT_ERR");

	/* 6. implicit ODP */
	errno = 0;
	check(ibv_reg_mr(pd, NULL, SIZE_MAX, all) == NULL && errno == EINVAL,
	      "the whole address space without ON_DEMAND: EINVAL");
	struct ibv_mr *imp = ibv_reg_mr(pd, NULL, SIZE_MAX, all | IBV_ACCESS_ON_DEMAND);
	check(imp && imp->addr == NULL && imp->length == SIZE_MAX,
	      "implicit ODP: ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND | ...)");
	char *later = map_anywhere(3 * PAGE);
	check(later != NULL, "memory mapped after the implicit registration");
	fresh_pair();
	check(run(IBV_WR_RDMA_WRITE, (uintptr_t)buf + 16, mr->lkey, LEN,
		  (uintptr_t)later + PAGE, imp->rkey) == IBV_WC_SUCCESS &&
		      !memcmp(later + PAGE, buf + 16, LEN),
	      "RDMA WRITE through the implicit rkey lands there");

	/* 7. prefetch advice */
	struct ibv_sge sge = { (uintptr_t)arena, PAGE, odp->lkey };
	check(!ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH,
			     &sge, 1) &&
		      !ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1),
	      "ibv_advise_mr PREFETCH (flush) and PREFETCH_WRITE (async)");
	check(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 1u << 7, &sge, 1) == EINVAL,
	      "ibv_advise_mr with an unknown flag: EINVAL");

	ibv_destroy_qp(qp[0]);
	ibv_destroy_qp(qp[1]);
	ibv_destroy_cq(cq[0]);
	ibv_destroy_cq(cq[1]);
	check(!ibv_dereg_mr(imp) && !ibv_dereg_mr(odp) && !ibv_dereg_mr(mr), "ibv_dereg_mr");
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("PASS\n");
	return 0;
}
