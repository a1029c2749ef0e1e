/*
 * What the compat tests' C programs share (included by ext_verbs.c,
 * xrc_verbs.c, odp_verbs.c, tm_verbs.c): one printed line per check, the
 * first device opened with a PD, and an RC QP brought to RTS against a
 * peer reached through a GID.
 */
#ifndef SOFTRDMA_VERBS_UTIL_H
#define SOFTRDMA_VERBS_UTIL_H

#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints "ok: what" or "FAILED: what"; exits 1 on failure. */
static inline void check(int ok, const char *what)
{
	printf("%s: %s\n", ok ? "ok" : "FAILED", what);
	if (!ok) {
		fflush(stdout);
		exit(1);
	}
}

/* Opens the first device and allocates a PD on it (`*pd`); `*gid` is
 * port 1's GID 0. */
static inline struct ibv_context *open_first_device(struct ibv_pd **pd, union ibv_gid *gid)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	check(list && list[0], "a device");
	struct ibv_context *c = ibv_open_device(list[0]);
	check(c != NULL, "ibv_open_device");
	*pd = ibv_alloc_pd(c);
	check(*pd != NULL, "ibv_alloc_pd");
	check(!ibv_query_gid(c, 1, 0, gid), "ibv_query_gid");
	ibv_free_device_list(list);
	return c;
}

/* Moves RC QP `qp` (in RESET) through INIT and RTR to RTS, connected to
 * QP `dest_qpn` at `gid` on port 1: remote WRITE, READ and atomic rights,
 * 1024-byte MTU, both PSNs `psn`, four READs/atomics outstanding each way. */
static inline void rc_to_rts(struct ibv_qp *qp, uint32_t dest_qpn, union ibv_gid gid,
			     uint32_t psn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};
	check(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			     IBV_QP_ACCESS_FLAGS), "INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = psn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	check(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			     IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), "RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	check(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
	      "RTS");
}

#endif
