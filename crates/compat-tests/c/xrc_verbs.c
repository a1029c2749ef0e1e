/*
 * xrc_verbs: the XRC object verbs of rdma-core 44, written from verbs.h and
 * the man pages (ibv_open_xrcd(3), ibv_create_srq_ex(3), ibv_get_srq_num(3),
 * ibv_create_qp_ex(3), ibv_open_qp(3)), run by
 * crates/compat-tests/tests/c_extended.rs against target/compat (traffic is
 * ibv_xsrq_pingpong's and rdma_xserver's, in pingpong.rs and rdmacm.rs):
 *   1. a file's domain: O_CREAT makes it, opening the file again gives it
 *      again, O_EXCL then fails with EEXIST, another file without O_CREAT is
 *      ENOENT, fd -1 gives a domain of its own; IBV_DEVICE_XRC is set;
 *   2. XRC SRQs: ibv_get_srq_num gives distinct non-zero numbers; a basic
 *      SRQ has none (EINVAL);
 *   3. an XRC receive QP (no PD, no CQs) and ibv_open_qp on it: the right
 *      domain opens it, another domain is refused; destroying the QP while
 *      the opened handle lives is EBUSY; the handle closes, then the QP goes;
 *   4. an XRC send QP with a NULL receive CQ; posting a receive to it fails.
 * Prints one line per check and "PASS" at the end; exits 1 at the first
 * failed check.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs_util.h"

static struct ibv_xrcd *open_xrcd(struct ibv_context *ctx, int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = fd,
		.oflags = oflags,
	};
	return ibv_open_xrcd(ctx, &a);
}

static struct ibv_srq *xrc_srq(struct ibv_context *ctx, struct ibv_pd *pd,
			       struct ibv_xrcd *x, struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex a;

	memset(&a, 0, sizeof a);
	a.attr.max_wr = 4;
	a.attr.max_sge = 1;
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
		      IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD;
	a.srq_type = IBV_SRQT_XRC;
	a.xrcd = x;
	a.cq = cq;
	a.pd = pd;
	return ibv_create_srq_ex(ctx, &a);
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	check(list && list[0], "a device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	check(ctx != NULL, "ibv_open_device");
	struct ibv_device_attr da;
	check(ibv_query_device(ctx, &da) == 0 &&
		      (da.device_cap_flags & IBV_DEVICE_XRC),
	      "IBV_DEVICE_XRC");

	/* 1. domains */
	char p1[] = "/tmp/softrdma-xrc-XXXXXX", p2[] = "/tmp/softrdma-xrc-XXXXXX";
	int f1 = mkstemp(p1), f2 = mkstemp(p2);
	check(f1 >= 0 && f2 >= 0, "two files");
	struct ibv_xrcd *x = open_xrcd(ctx, f1, O_CREAT);
	check(x != NULL, "O_CREAT makes the file's domain");
	int f1b = open(p1, O_RDONLY);
	struct ibv_xrcd *x_again = open_xrcd(ctx, f1b, 0);
	check(x_again != NULL, "the file opened again gives its domain");
	errno = 0;
	check(open_xrcd(ctx, f1, O_CREAT | O_EXCL) == NULL && errno == EEXIST,
	      "O_EXCL on an existing domain: EEXIST");
	errno = 0;
	check(open_xrcd(ctx, f2, 0) == NULL && errno == ENOENT,
	      "another file without O_CREAT: ENOENT");
	struct ibv_xrcd *other = open_xrcd(ctx, -1, 0);
	check(other != NULL, "fd -1: a domain of its own");

	/* 2. SRQs */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	check(pd && cq, "PD and CQ");
	struct ibv_srq *s1 = xrc_srq(ctx, pd, x, cq), *s2 = xrc_srq(ctx, pd, x, cq);
	check(s1 && s2, "two XRC SRQs");
	uint32_t n1 = 0, n2 = 0;
	check(ibv_get_srq_num(s1, &n1) == 0 && ibv_get_srq_num(s2, &n2) == 0 &&
		      n1 && n2 && n1 != n2 && n1 <= 0xffffff && n2 <= 0xffffff,
	      "distinct non-zero 24-bit SRQ numbers");
	struct ibv_srq_init_attr ba = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *basic = ibv_create_srq(pd, &ba);
	uint32_t nb;
	check(basic && ibv_get_srq_num(basic, &nb) == EINVAL,
	      "a basic SRQ has no number: EINVAL");

	/* 3. XRC receive QP and ibv_open_qp */
	struct ibv_qp_init_attr_ex qa;
	memset(&qa, 0, sizeof qa);
	qa.qp_type = IBV_QPT_XRC_RECV;
	qa.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	qa.xrcd = x;
	struct ibv_qp *tgt = ibv_create_qp_ex(ctx, &qa);
	check(tgt && tgt->qp_type == IBV_QPT_XRC_RECV && tgt->qp_num,
	      "XRC receive QP");
	struct ibv_qp_attr ma = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				  .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	check(ibv_modify_qp(tgt, &ma, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				     IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "XRC receive QP to INIT");
	struct ibv_qp_open_attr oa = {
		.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
			     IBV_QP_OPEN_ATTR_TYPE,
		.qp_num = tgt->qp_num,
		.xrcd = other,
		.qp_type = IBV_QPT_XRC_RECV,
	};
	check(ibv_open_qp(ctx, &oa) == NULL, "ibv_open_qp in another domain fails");
	oa.xrcd = x;
	struct ibv_qp *opened = ibv_open_qp(ctx, &oa);
	check(opened && opened->qp_num == tgt->qp_num, "ibv_open_qp in its domain");
	check(ibv_destroy_qp(tgt) == EBUSY, "destroying it while opened: EBUSY");
	check(ibv_destroy_qp(opened) == 0 && ibv_destroy_qp(tgt) == 0,
	      "the handle closes, then the QP goes");

	/* 4. XRC send QP */
	memset(&qa, 0, sizeof qa);
	qa.qp_type = IBV_QPT_XRC_SEND;
	qa.send_cq = cq;
	qa.cap.max_send_wr = 4;
	qa.cap.max_send_sge = 1;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD;
	qa.pd = pd;
	struct ibv_qp *ini = ibv_create_qp_ex(ctx, &qa);
	check(ini && ini->qp_type == IBV_QPT_XRC_SEND, "XRC send QP, NULL receive CQ");
	struct ibv_recv_wr rw = { .wr_id = 1 }, *bad;
	check(ibv_post_recv(ini, &rw, &bad) != 0, "it takes no receives");

	check(ibv_destroy_qp(ini) == 0 && ibv_destroy_srq(s1) == 0 &&
		      ibv_destroy_srq(s2) == 0 && ibv_destroy_srq(basic) == 0,
	      "destroy QP and SRQs");
	check(ibv_close_xrcd(x_again) == 0 && ibv_close_xrcd(x) == 0 &&
		      ibv_close_xrcd(other) == 0,
	      "close the domains");
	errno = 0;
	check(open_xrcd(ctx, f1, 0) == NULL && errno == ENOENT,
	      "the last close forgets the file's domain");
	check(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, "destroy CQ and PD");
	close(f1);
	close(f1b);
	close(f2);
	unlink(p1);
	unlink(p2);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("PASS\n");
	return 0;
}
