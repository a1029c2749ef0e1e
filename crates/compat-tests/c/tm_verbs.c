/*
 * tm_verbs: tag matching through rdma-core 44's API, written from verbs.h
 * and the man pages (ibv_query_device_ex(3), ibv_create_srq_ex(3),
 * ibv_post_srq_ops(3), ibv_create_cq_ex(3)), run by
 * crates/compat-tests/tests/c_extended.rs against target/compat:
 *   1. tm_caps: IBV_TM_CAP_RC, tags, operations, a rendezvous header of at
 *      least TMH + RVH (32 bytes);
 *   2. ibv_create_srq_ex(IBV_SRQT_TM) without IBV_SRQ_INIT_ATTR_TM or with
 *      more tags than max_num_tags is EINVAL; ibv_post_srq_ops on a basic
 *      SRQ is EINVAL;
 *   3. ADD (signaled: IBV_WC_TM_ADD with the op's wr_id; unsignaled: no
 *      completion), handles written back; a full list is ENOMEM at that op;
 *   4. an eager message matches the oldest tag under its mask: its data
 *      after the 16-byte TMH lands in the tag's buffer, IBV_WC_TM_RECV with
 *      IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID, the tag's recv_wr_id, the
 *      tag and application context from ibv_wc_read_tm_info, byte_len
 *      without the TMH; also a 20 KiB one (the same-host path's peer copy
 *      size when the lanes are on);
 *   5. DEL: IBV_WC_TM_DEL; DEL of a removed tag: IBV_WC_TM_ERR;
 *   6. an unexpected eager message goes whole (TMH included) to an
 *      ordinary SRQ receive: IBV_WC_TM_RECV without flags, tm_info zeros;
 *      until an IBV_OPS_TM_SYNC op reports it handled, matching is off
 *      (an ADD then completes with IBV_WC_TM_SYNC_REQ and a matching
 *      message is unexpected too); after IBV_WR_TAG_SYNC it matches;
 *   7. NO_TAG: whole, to an ordinary receive, IBV_WC_TM_NO_TAG, not
 *      counted as unexpected;
 *   8. rendezvous: the receiver READs the sender's buffer named by the RVH
 *      into the tag's buffer: IBV_WC_TM_RECV + TM_MATCH (the tag), then
 *      IBV_WC_TM_RECV + TM_DATA_VALID (the length READ), the bytes there,
 *      and the sender receives a FIN (a 16-byte TMH, opcode FIN, the tag);
 *      the receiver's send queue (of 0 WRs) completes nothing.
 * One process, a client RC QP with its own receive queue and a server RC
 * QP on the TM SRQ, connected through GID 0. Prints one line per check and
 * "PASS" at the end; exits 1 at the first failed check.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <infiniband/tm_types.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs_util.h"

#define BUF 32768
#define TMH 16

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq_ex *scq; /* server: the TM SRQ's, an extended CQ */
static struct ibv_cq *ccq;
static struct ibv_srq *srq;
static struct ibv_qp *cqp, *sqp;
static char *cbuf, *plain, *tagbuf, *fin;
static struct ibv_mr *cmr, *plain_mr, *tag_mr, *fin_mr;
static uint32_t unexp; /* unexpected messages handled */

struct tm_wc {
	uint64_t wr_id;
	int status, opcode;
	unsigned flags;
	uint32_t byte_len;
	struct ibv_wc_tm_info tm;
};

/* The server CQ's next completion; 0, or -1 after a while without one. */
static int server_wc(struct tm_wc *w)
{
	struct ibv_poll_cq_attr pa = { 0 };
	int r = ENOENT;
	for (int i = 0; i < 200000 && r == ENOENT; i++) {
		r = ibv_start_poll(scq, &pa);
		if (r == ENOENT)
			usleep(10);
	}
	if (r)
		return -1;
	w->wr_id = scq->wr_id;
	w->status = scq->status;
	w->opcode = ibv_wc_read_opcode(scq);
	w->flags = ibv_wc_read_wc_flags(scq);
	w->byte_len = ibv_wc_read_byte_len(scq);
	ibv_wc_read_tm_info(scq, &w->tm);
	ibv_end_poll(scq);
	return 0;
}

/* Whether the server CQ stays empty for a while. */
static int server_cq_empty(void)
{
	struct ibv_poll_cq_attr pa = { 0 };
	usleep(20000);
	if (ibv_start_poll(scq, &pa) == ENOENT)
		return 1;
	ibv_end_poll(scq);
	return 0;
}

/* The client CQ's next completion. */
static struct ibv_wc client_wc(void)
{
	struct ibv_wc wc = { .status = -1 };
	for (int i = 0; i < 200000; i++) {
		if (ibv_poll_cq(ccq, 1, &wc) == 1)
			return wc;
		usleep(10);
	}
	wc.status = -1;
	return wc;
}

static void write_tmh(char *p, uint8_t op, uint32_t app_ctx, uint64_t tag)
{
	struct ibv_tmh h = { .opcode = op, .app_ctx = htobe32(app_ctx), .tag = htobe64(tag) };
	memcpy(p, &h, sizeof(h));
}

/* Client SEND of `len` bytes of cbuf. */
static void client_post_send(uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)cbuf, len, cmr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	check(!ibv_post_send(cqp, &wr, &bad), "ibv_post_send");
}

/* Client SEND of `len` bytes of cbuf; checks its completion. */
static void client_send(uint32_t len)
{
	client_post_send(len);
	struct ibv_wc wc = client_wc();
	check(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND, "the client's SEND completes");
}

/* An eager message of `len` bytes: TMH (tag, app_ctx) then 'a' + i % 26. */
static void send_eager(uint8_t op, uint64_t tag, uint32_t app_ctx, uint32_t len)
{
	for (uint32_t i = TMH; i < len; i++)
		cbuf[i] = (char)('a' + i % 26);
	write_tmh(cbuf, op, app_ctx, tag);
	client_send(len);
}

static int eager_data_at(const char *p, uint32_t len)
{
	for (uint32_t i = TMH; i < len; i++)
		if (p[i - TMH] != (char)('a' + i % 26))
			return 0;
	return 1;
}

static uint32_t add_tag(uint64_t wr_id, uint64_t tag, uint64_t mask, int flags)
{
	struct ibv_sge sge = { (uintptr_t)tagbuf, BUF, tag_mr->lkey };
	struct ibv_ops_wr op = { .wr_id = wr_id, .opcode = IBV_WR_TAG_ADD, .flags = flags };
	op.tm.unexpected_cnt = unexp;
	op.tm.add.recv_wr_id = tag;
	op.tm.add.sg_list = &sge;
	op.tm.add.num_sge = 1;
	op.tm.add.tag = tag;
	op.tm.add.mask = mask;
	struct ibv_ops_wr *bad;
	check(!ibv_post_srq_ops(srq, &op, &bad), "IBV_WR_TAG_ADD");
	return op.tm.handle;
}

static void post_plain(int n)
{
	struct ibv_sge sge = { (uintptr_t)plain, BUF, plain_mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 555, .sg_list = &sge, .num_sge = 1 }, *bad;
	for (int i = 0; i < n; i++)
		check(!ibv_post_srq_recv(srq, &wr, &bad), "ibv_post_srq_recv");
}

static void simple_op(enum ibv_ops_wr_opcode code, uint64_t wr_id, uint32_t handle, int flags)
{
	struct ibv_ops_wr op = { .wr_id = wr_id, .opcode = code, .flags = flags }, *bad;
	op.tm.unexpected_cnt = unexp;
	op.tm.handle = handle;
	check(!ibv_post_srq_ops(srq, &op, &bad), "ibv_post_srq_ops");
}

int main(void)
{
	union ibv_gid gid;
	ctx = open_first_device(&pd, &gid);

	/* 1. capabilities */
	struct ibv_device_attr_ex dx;
	check(!ibv_query_device_ex(ctx, NULL, &dx), "ibv_query_device_ex");
	struct ibv_tm_caps *tc = &dx.tm_caps;
	check(tc->flags & IBV_TM_CAP_RC, "tm_caps.flags: IBV_TM_CAP_RC");
	check(tc->max_num_tags >= 2 && tc->max_ops >= 1 && tc->max_sge >= 1 &&
		      tc->max_rndv_hdr_size >= 32,
	      "tm_caps: tags, ops, SGEs, a rendezvous header of TMH + RVH");

	/* 2. creation */
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 64,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_TM_INFO,
	};
	scq = ibv_create_cq_ex(ctx, &ca);
	ccq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	check(scq && ccq, "an extended CQ with IBV_WC_EX_WITH_TM_INFO, and a CQ");
	struct ibv_srq_init_attr_ex sa = {
		.attr = { .max_wr = 16, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_TM,
		.pd = pd,
		.cq = ibv_cq_ex_to_cq(scq),
		.tm_cap = { .max_num_tags = 3, .max_ops = 8 },
	};
	errno = 0;
	check(!ibv_create_srq_ex(ctx, &sa) && errno == EINVAL,
	      "a TM SRQ without IBV_SRQ_INIT_ATTR_TM: EINVAL");
	sa.comp_mask |= IBV_SRQ_INIT_ATTR_TM;
	sa.tm_cap.max_num_tags = tc->max_num_tags + 1;
	errno = 0;
	check(!ibv_create_srq_ex(ctx, &sa) && errno == EINVAL, "more tags than max_num_tags: EINVAL");
	sa.tm_cap.max_num_tags = 3;
	srq = ibv_create_srq_ex(ctx, &sa);
	check(srq != NULL, "ibv_create_srq_ex(IBV_SRQT_TM)");
	struct ibv_srq_init_attr ba = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *basic = ibv_create_srq(pd, &ba);
	struct ibv_ops_wr bop = { .opcode = IBV_WR_TAG_SYNC }, *bad;
	check(basic && ibv_post_srq_ops(basic, &bop, &bad) == EINVAL && bad == &bop,
	      "ibv_post_srq_ops on a basic SRQ: EINVAL");
	ibv_destroy_srq(basic);

	cbuf = calloc(1, BUF);
	plain = calloc(1, BUF);
	tagbuf = calloc(1, BUF);
	fin = calloc(1, BUF);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
	cmr = ibv_reg_mr(pd, cbuf, BUF, acc);
	plain_mr = ibv_reg_mr(pd, plain, BUF, acc);
	tag_mr = ibv_reg_mr(pd, tagbuf, BUF, acc);
	fin_mr = ibv_reg_mr(pd, fin, BUF, acc);
	check(cmr && plain_mr && tag_mr && fin_mr, "four regions");
	struct ibv_qp_init_attr ca_qp = {
		.send_cq = ccq, .recv_cq = ccq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	cqp = ibv_create_qp(pd, &ca_qp);
	struct ibv_qp_init_attr sa_qp = {
		.send_cq = ibv_cq_ex_to_cq(scq), .recv_cq = ibv_cq_ex_to_cq(scq), .srq = srq,
		.cap = { .max_send_wr = 0, .max_send_sge = 0 },
		.qp_type = IBV_QPT_RC,
	};
	sqp = ibv_create_qp(pd, &sa_qp);
	check(cqp && sqp, "a client QP and a server QP on the TM SRQ (no send queue)");
	rc_to_rts(cqp, sqp->qp_num, gid, 0);
	rc_to_rts(sqp, cqp->qp_num, gid, 0);
	post_plain(8);

	/* 3. ADD */
	struct tm_wc w;
	uint32_t h7 = add_tag(100, 7, ~0ull, IBV_OPS_SIGNALED);
	check(!server_wc(&w) && w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_ADD &&
		      w.wr_id == 100 && !(w.flags & IBV_WC_TM_SYNC_REQ),
	      "a signaled ADD: IBV_WC_TM_ADD with its wr_id");
	uint32_t h8 = add_tag(101, 8, 0xff, 0);
	uint32_t h8b = add_tag(102, 0x108, 0xff, 0);
	check(h7 != h8 && h8 != h8b && h7 != h8b, "distinct handles");
	check(server_cq_empty(), "unsignaled ADDs: no completion");
	struct ibv_sge sge = { (uintptr_t)tagbuf, 64, tag_mr->lkey };
	struct ibv_ops_wr full = { .wr_id = 9, .opcode = IBV_WR_TAG_ADD, .flags = IBV_OPS_SIGNALED };
	full.tm.add.sg_list = &sge;
	full.tm.add.num_sge = 1;
	check(ibv_post_srq_ops(srq, &full, &bad) == ENOMEM && bad == &full,
	      "an ADD to a full list (3 tags): ENOMEM");

	/* 4. eager, matched: tag 8 and 0x108 are equal under mask 0xff; the older first */
	send_eager(IBV_TMH_EAGER, 0x208, 0xabc, 1000);
	check(!server_wc(&w) && w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_RECV &&
		      w.flags == (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID) && w.wr_id == 8 &&
		      w.tm.tag == 0x208 && w.tm.priv == 0xabc && w.byte_len == 1000 - TMH,
	      "eager, matched: IBV_WC_TM_RECV, MATCH | DATA_VALID, the older tag's recv_wr_id, "
	      "the tag and app_ctx, byte_len without the TMH");
	check(eager_data_at(tagbuf, 1000), "the data after the TMH in the tag's buffer");
	send_eager(IBV_TMH_EAGER, 0x8, 1, 20480);
	check(!server_wc(&w) && w.status == IBV_WC_SUCCESS && w.wr_id == 0x108 &&
		      w.byte_len == 20480 - TMH && eager_data_at(tagbuf, 20480),
	      "a 20 KiB eager message matches the next tag, its data in the tag's buffer");

	/* 5. DEL */
	simple_op(IBV_WR_TAG_DEL, 200, h7, IBV_OPS_SIGNALED);
	check(!server_wc(&w) && w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_DEL &&
		      w.wr_id == 200,
	      "DEL: IBV_WC_TM_DEL");
	simple_op(IBV_WR_TAG_DEL, 201, h7, IBV_OPS_SIGNALED);
	check(!server_wc(&w) && w.status == IBV_WC_TM_ERR && w.opcode == IBV_WC_TM_DEL,
	      "DEL of a removed tag: IBV_WC_TM_ERR");

	/* 6. unexpected, then out of sync until SYNC */
	memset(plain, 0, BUF);
	send_eager(IBV_TMH_EAGER, 9, 5, 300);
	check(!server_wc(&w) && w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_RECV &&
		      w.flags == 0 && w.wr_id == 555 && w.byte_len == 300 && w.tm.tag == 0 &&
		      w.tm.priv == 0,
	      "unexpected: IBV_WC_TM_RECV without flags, an ordinary receive, tm_info zeros");
	check(!memcmp(plain, cbuf, 300), "the whole message, TMH included, in its buffer");
	add_tag(103, 9, ~0ull, IBV_OPS_SIGNALED);
	check(!server_wc(&w) && w.opcode == IBV_WC_TM_ADD && (w.flags & IBV_WC_TM_SYNC_REQ),
	      "an ADD before the count is synced: IBV_WC_TM_SYNC_REQ");
	send_eager(IBV_TMH_EAGER, 9, 5, 300);
	check(!server_wc(&w) && w.opcode == IBV_WC_TM_RECV && w.flags == 0 && w.wr_id == 555,
	      "out of sync: a matching message is unexpected too");
	unexp = 2;
	simple_op(IBV_WR_TAG_SYNC, 300, 0, IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC);
	check(!server_wc(&w) && w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_SYNC &&
		      w.wr_id == 300 && !(w.flags & IBV_WC_TM_SYNC_REQ),
	      "SYNC with the count: IBV_WC_TM_SYNC");
	send_eager(IBV_TMH_EAGER, 9, 6, 300);
	check(!server_wc(&w) && w.wr_id == 9 &&
		      w.flags == (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID) && w.tm.tag == 9,
	      "in sync again: the tag matches");

	/* 7. NO_TAG */
	send_eager(IBV_TMH_NO_TAG, 0x1234, 0, 200);
	check(!server_wc(&w) && w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_NO_TAG &&
		      w.flags == 0 && w.wr_id == 555 && w.byte_len == 200 && !memcmp(plain, cbuf, 200),
	      "NO_TAG: IBV_WC_TM_NO_TAG, whole, to an ordinary receive");
	add_tag(104, 11, ~0ull, 0);
	send_eager(IBV_TMH_EAGER, 11, 0, 100);
	check(!server_wc(&w) && w.wr_id == 11 && (w.flags & IBV_WC_TM_MATCH),
	      "NO_TAG counted nothing: still in sync");

	/* 8. rendezvous */
	struct ibv_sge fs = { (uintptr_t)fin, BUF, fin_mr->lkey };
	struct ibv_recv_wr fr = { .wr_id = 77, .sg_list = &fs, .num_sge = 1 }, *rbad;
	check(!ibv_post_recv(cqp, &fr, &rbad), "the client posts a receive for the FIN");
	add_tag(105, 10, ~0ull, 0);
	memset(tagbuf, 0, BUF);
	const uint32_t rlen = 3000;
	for (uint32_t i = 0; i < rlen; i++)
		cbuf[1024 + i] = (char)(i * 7);
	write_tmh(cbuf, IBV_TMH_RNDV, 0x55, 10);
	struct ibv_rvh rvh = { .va = htobe64((uintptr_t)cbuf + 1024),
			       .rkey = htobe32(cmr->rkey),
			       .len = htobe32(rlen) };
	memcpy(cbuf + TMH, &rvh, sizeof(rvh));
	client_post_send(tc->max_rndv_hdr_size < 64 ? tc->max_rndv_hdr_size : 64);
	check(!server_wc(&w) && w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_RECV &&
		      w.flags == IBV_WC_TM_MATCH && w.wr_id == 10 && w.tm.tag == 10 &&
		      w.tm.priv == 0x55,
	      "rendezvous header: IBV_WC_TM_RECV, TM_MATCH, the tag");
	check(!server_wc(&w) && w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_TM_RECV &&
		      w.flags == IBV_WC_TM_DATA_VALID && w.wr_id == 10 && w.byte_len == rlen,
	      "rendezvous data: IBV_WC_TM_RECV, TM_DATA_VALID, the length READ");
	check(!memcmp(tagbuf, cbuf + 1024, rlen), "the sender's bytes in the tag's buffer");
	/* The header SEND's completion and the FIN, in either order. */
	struct ibv_wc cw[2] = { client_wc(), client_wc() };
	int r = cw[0].opcode == IBV_WC_RECV ? 0 : 1;
	struct ibv_tmh fh;
	memcpy(&fh, fin, sizeof(fh));
	check(cw[1 - r].status == IBV_WC_SUCCESS && cw[1 - r].opcode == IBV_WC_SEND,
	      "the client's header SEND completes");
	check(cw[r].status == IBV_WC_SUCCESS && cw[r].opcode == IBV_WC_RECV && cw[r].wr_id == 77 &&
		      cw[r].byte_len == TMH && fh.opcode == IBV_TMH_FIN && be64toh(fh.tag) == 10,
	      "the sender receives the FIN: a TMH with opcode FIN and the tag");
	check(server_cq_empty(), "the receiver's READ and FIN complete nothing on its CQ");

	check(!ibv_destroy_qp(sqp) && !ibv_destroy_qp(cqp) && !ibv_destroy_srq(srq),
	      "teardown with tags still posted");
	printf("PASS\n");
	return 0;
}
