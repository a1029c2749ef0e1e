/*
 * pma_query: reads a remote softrdma device's port counters with
 * Performance Management MADs through libibumad (issue 21), written from
 * libibumad's man pages and IBTA 16.1.3 (not from rdma-core's code).
 *
 *   pma_query peer
 *       Opens softrdma0 with libibverbs, makes a UD QP (Q_Key 0x11111111)
 *       with 64 receives posted, prints "qpn <n>", and waits for SIGUSR1;
 *       then prints "received <k>" (completions polled).
 *   pma_query query <peer address> <peer qpn> <count>
 *       1. libibumad describes softrdma0 (umad_get_ca: 1 port, Active,
 *          link layer Ethernet, LID 0; port GUID = umad_get_ca_portguids').
 *       2. Opens a MAD port, registers a PMA client (class 0x04 v1; the
 *          other registration calls are checked too: subnet management
 *          and RMPP refused, vendor OUI classes taken and released), reads
 *          ClassPortInfo (PortCountersExtended announced), PortCounters and
 *          PortCountersExtended of the peer (GRH to ::ffff:<peer>, QP1).
 *       3. Sends <count> UD datagrams of 1000 bytes to the peer's QP.
 *       4. Reads both attributes again: the peer's PortRcvPkts must have
 *          grown by >= count and PortRcvData by >= count * 250 words.
 *       5. PortSelect 2 is answered with status "invalid attribute value";
 *          a Get to an address nobody serves comes back from umad_recv with
 *          umad_status() == ETIMEDOUT after its retries.
 *   pma_query serve
 *       Registers as the server of Get requests of vendor class 0x09
 *       (umad_register with a method mask), prints "serving", answers one
 *       Get with 0xC0FFEE at data offset 32, prints "served 1" and exits.
 *       (Not the PMA's class: a process serving a class serves it for the
 *       whole host device, and other tests read the device's PMA.)
 *   pma_query ask <peer address>
 *       One Get of class 0x09 to the peer; prints "answer <word>" (the
 *       word at data offset 32).
 *   Exit 0 if every check holds; else a message on stderr and exit 1.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/umad.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define QKEY 0x11111111u
#define MSG 1000
#define MAD_SIZE 256
#define PMA_DATA 64
#define ATTR_CPI 0x0001
#define ATTR_PC 0x0012
#define ATTR_PCE 0x001D

#define CHECK(c, ...)                                                      \
	do {                                                                   \
		if (!(c)) {                                                        \
			fprintf(stderr, "pma_query: line %d: ", __LINE__);             \
			fprintf(stderr, __VA_ARGS__);                                  \
			fprintf(stderr, "\n");                                         \
			exit(1);                                                       \
		}                                                                  \
	} while (0)

struct verbs {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char *buf;
};

static void open_ud(struct verbs *v, int depth)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "no verbs device");
	v->ctx = ibv_open_device(list[0]);
	CHECK(v->ctx, "ibv_open_device");
	ibv_free_device_list(list);
	v->pd = ibv_alloc_pd(v->ctx);
	v->cq = ibv_create_cq(v->ctx, 2 * depth, NULL, NULL, 0);
	CHECK(v->pd && v->cq, "pd/cq");
	struct ibv_qp_init_attr ia = {
		.send_cq = v->cq,
		.recv_cq = v->cq,
		.cap = { .max_send_wr = depth, .max_recv_wr = depth,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
	};
	v->qp = ibv_create_qp(v->pd, &ia);
	CHECK(v->qp, "ibv_create_qp: %s", strerror(errno));
	size_t len = (size_t)depth * (MSG + 40);
	v->buf = calloc(1, len);
	v->mr = ibv_reg_mr(v->pd, v->buf, len, IBV_ACCESS_LOCAL_WRITE);
	CHECK(v->buf && v->mr, "buffer");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };
	CHECK(!ibv_modify_qp(v->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
	      "INIT");
	a.qp_state = IBV_QPS_RTR;
	CHECK(!ibv_modify_qp(v->qp, &a, IBV_QP_STATE), "RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	CHECK(!ibv_modify_qp(v->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "RTS");
}

static int peer(void)
{
	/* Blocked before the device starts its threads, which inherit the mask. */
	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	CHECK(!pthread_sigmask(SIG_BLOCK, &usr1, NULL), "sigmask");
	struct verbs v;
	const int depth = 64;
	open_ud(&v, depth);
	for (int i = 0; i < depth; i++) {
		struct ibv_sge sge = { (uintptr_t)v.buf + (size_t)i * (MSG + 40), MSG + 40, v.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(!ibv_post_recv(v.qp, &wr, &bad), "post_recv");
	}
	printf("qpn %u\n", v.qp->qp_num);
	fflush(stdout);
	int sig;
	CHECK(!sigwait(&usr1, &sig), "sigwait");
	struct ibv_wc wc[16];
	int got = 0, n;
	while ((n = ibv_poll_cq(v.cq, 16, wc)) > 0)
		for (int i = 0; i < n; i++)
			got += wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len == MSG + 40;
	printf("received %d\n", got);
	return 0;
}

static void gid_of(const char *addr, uint8_t gid[16])
{
	struct in_addr a;
	CHECK(inet_pton(AF_INET, addr, &a) == 1, "bad address %s", addr);
	memset(gid, 0, 16);
	gid[10] = gid[11] = 0xff;
	memcpy(gid + 12, &a, 4);
}

struct pma {
	int port, agent;
	void *req, *resp;
	uint32_t tid;
};

/* Sends Get(attr) of `class` with PortSelect `select` to `addr`; returns
 * the MAD status (or umad_status() negated: -ETIMEDOUT) and leaves the
 * answer in p->resp. */
static int mad_get(struct pma *p, const char *addr, uint8_t class, uint16_t attr,
		   uint8_t select, int timeout_ms, int retries)
{
	uint8_t *mad = umad_get_mad(p->req);
	memset(mad, 0, MAD_SIZE);
	mad[0] = 1;     /* base version */
	mad[1] = class; /* 0x04: Performance Management */
	mad[2] = 1;    /* class version */
	mad[3] = 0x01; /* Get */
	uint32_t tid = htobe32(++p->tid);
	memcpy(mad + 12, &tid, 4); /* the low half; the agent owns the high one */
	uint16_t a = htobe16(attr);
	memcpy(mad + 16, &a, 2);
	mad[PMA_DATA + 1] = select;
	CHECK(!umad_set_addr(p->req, 0, 1, 0, 0x80010000), "umad_set_addr");
	ib_mad_addr_t grh = { .hop_limit = 64 };
	gid_of(addr, grh.gid);
	CHECK(!umad_set_grh(p->req, &grh), "umad_set_grh");
	int r = umad_send(p->port, p->agent, p->req, MAD_SIZE, timeout_ms, retries);
	CHECK(r == 0, "umad_send: %d", r);
	for (;;) {
		int len = MAD_SIZE;
		r = umad_recv(p->port, p->resp, &len, 10000);
		CHECK(r == p->agent, "umad_recv: %d", r);
		uint8_t *got = umad_get_mad(p->resp);
		uint32_t low;
		memcpy(&low, got + 12, 4);
		if (low != tid)
			continue; /* an older answer */
		if (umad_status(p->resp))
			return -umad_status(p->resp);
		CHECK(len == MAD_SIZE && got[1] == class && got[3] == 0x81,
		      "not a GetResp of class %#x (len %d class %#x method %#x)", class, len,
		      got[1], got[3]);
		uint16_t st;
		memcpy(&st, got + 4, 2);
		return be16toh(st);
	}
}

static int pma_get(struct pma *p, const char *addr, uint16_t attr, uint8_t select,
		   int timeout_ms, int retries)
{
	return mad_get(p, addr, 0x04, attr, select, timeout_ms, retries);
}

static uint32_t be32at(const uint8_t *b) { uint32_t v; memcpy(&v, b, 4); return be32toh(v); }
static uint64_t be64at(const uint8_t *b) { uint64_t v; memcpy(&v, b, 8); return be64toh(v); }

struct counters { uint64_t xmit_data, rcv_data, xmit_pkts, rcv_pkts; };

static struct counters read_counters(struct pma *p, const char *addr, int extended)
{
	int st = pma_get(p, addr, extended ? ATTR_PCE : ATTR_PC, 1, 1000, 3);
	CHECK(st == 0, "Get(%s) status %d", extended ? "PortCountersExtended" : "PortCounters", st);
	const uint8_t *d = (const uint8_t *)umad_get_mad(p->resp) + PMA_DATA;
	CHECK(d[1] == 1, "PortSelect %u", d[1]);
	struct counters c;
	if (extended) {
		c = (struct counters){ be64at(d + 8), be64at(d + 16), be64at(d + 24), be64at(d + 32) };
	} else {
		c = (struct counters){ be32at(d + 24), be32at(d + 28), be32at(d + 32), be32at(d + 36) };
	}
	printf("%s: xmit_data %llu rcv_data %llu xmit_pkts %llu rcv_pkts %llu\n",
	       extended ? "PortCountersExtended" : "PortCounters",
	       (unsigned long long)c.xmit_data, (unsigned long long)c.rcv_data,
	       (unsigned long long)c.xmit_pkts, (unsigned long long)c.rcv_pkts);
	return c;
}

static void describe_ca(void)
{
	char names[4][UMAD_CA_NAME_LEN];
	CHECK(umad_init() == 0, "umad_init");
	CHECK(umad_get_cas_names(names, 4) == 1 && !strcmp(names[0], "softrdma0"), "CA names");
	umad_ca_t ca;
	CHECK(umad_get_ca("softrdma0", &ca) == 0, "umad_get_ca");
	CHECK(ca.numports == 1 && ca.ports[1], "ports");
	umad_port_t *port = ca.ports[1];
	CHECK(port->state == 4 && port->phys_state == 5, "state %u/%u", port->state, port->phys_state);
	CHECK(!strcmp(port->link_layer, "Ethernet") && port->base_lid == 0, "link layer/LID");
	__be64 guids[4];
	CHECK(umad_get_ca_portguids("softrdma0", guids, 4) == 2, "portguids");
	CHECK(guids[0] == 0 && guids[1] == port->port_guid, "port GUID");
	umad_release_ca(&ca);
	CHECK(umad_get_ca("mlx5_0", &ca) < 0, "a CA that is not there");
}

static int query(const char *addr, uint32_t qpn, int count)
{
	describe_ca();
	struct pma p = { .tid = 0x100 };
	p.port = umad_open_port(NULL, 0);
	CHECK(p.port >= 0, "umad_open_port: %d", p.port);
	p.agent = umad_register(p.port, 0x04, 1, 0, NULL);
	CHECK(p.agent >= 0, "umad_register: %d", p.agent);
	CHECK(umad_register(p.port, 0x01, 1, 0, NULL) == -EPROTONOSUPPORT,
	      "RoCE has no subnet management class");
	CHECK(umad_register(p.port, 0x03, 2, 1, NULL) == -EINVAL, "RMPP is refused");
	uint8_t oui[3] = { 0x00, 0x14, 0x05 };
	int vendor = umad_register_oui(p.port, 0x30, 0, oui, NULL);
	CHECK(vendor >= 0 && vendor != p.agent, "umad_register_oui: %d", vendor);
	CHECK(umad_unregister(p.port, vendor) == 0, "unregister the vendor agent");
	struct umad_reg_attr ra = { .mgmt_class = 0x30, .mgmt_class_version = 1, .oui = 0x001405 };
	uint32_t id2;
	CHECK(umad_register2(p.port, &ra, &id2) == 0, "umad_register2");
	CHECK(umad_unregister(p.port, (int)id2) == 0, "unregister the umad_register2 agent");
	ra.flags = UMAD_USER_RMPP;
	CHECK(umad_register2(p.port, &ra, &id2) == EINVAL, "umad_register2 answers +EINVAL");
	p.req = umad_alloc(1, umad_size() + MAD_SIZE);
	p.resp = umad_alloc(1, umad_size() + MAD_SIZE);
	CHECK(umad_size() == 64, "umad_size %zu", umad_size());

	CHECK(pma_get(&p, addr, ATTR_CPI, 0, 1000, 3) == 0, "ClassPortInfo");
	const uint8_t *cpi = (const uint8_t *)umad_get_mad(p.resp) + PMA_DATA;
	CHECK(cpi[2] & 0x02, "PortCountersExtended not announced (CapabilityMask %02x%02x)",
	      cpi[2], cpi[3]);

	struct counters c0 = read_counters(&p, addr, 0), e0 = read_counters(&p, addr, 1);

	struct verbs v;
	open_ud(&v, count);
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh = { .hop_limit = 64, .sgid_index = 0 } };
	gid_of(addr, aa.grh.dgid.raw);
	struct ibv_ah *ah = ibv_create_ah(v.pd, &aa);
	CHECK(ah, "ibv_create_ah");
	for (int i = 0; i < count; i++) {
		struct ibv_sge sge = { (uintptr_t)v.buf + (size_t)i * MSG, MSG, v.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
					  .wr.ud = { .ah = ah, .remote_qpn = qpn, .remote_qkey = QKEY } },
				   *bad;
		CHECK(!ibv_post_send(v.qp, &wr, &bad), "post_send");
	}
	for (int done = 0; done < count;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(v.cq, 1, &wc);
		CHECK(n >= 0 && (n == 0 || wc.status == IBV_WC_SUCCESS), "send completion");
		done += n;
	}

	/* The datagrams may still be on their way: ask until they are counted. */
	struct counters c1, e1;
	for (int tries = 0;; tries++) {
		c1 = read_counters(&p, addr, 0);
		e1 = read_counters(&p, addr, 1);
		if (e1.rcv_pkts - e0.rcv_pkts >= (uint64_t)count || tries == 50)
			break;
		usleep(100000);
	}
	CHECK(c1.rcv_pkts - c0.rcv_pkts >= (uint64_t)count, "PortRcvPkts grew by %llu",
	      (unsigned long long)(c1.rcv_pkts - c0.rcv_pkts));
	CHECK(c1.rcv_data - c0.rcv_data >= (uint64_t)count * MSG / 4, "PortRcvData grew by %llu",
	      (unsigned long long)(c1.rcv_data - c0.rcv_data));
	CHECK(e1.rcv_pkts - e0.rcv_pkts >= (uint64_t)count, "extended PortRcvPkts");
	CHECK(e1.rcv_data - e0.rcv_data >= (uint64_t)count * MSG / 4, "extended PortRcvData");

	int st = pma_get(&p, addr, ATTR_PC, 2, 1000, 3);
	CHECK(st == 0x1C, "PortSelect 2: status %#x, want 0x1c", st);

	st = pma_get(&p, "127.53.255.254", ATTR_PC, 1, 100, 1);
	CHECK(st == -ETIMEDOUT, "nobody there: %d, want -ETIMEDOUT", st);

	CHECK(umad_unregister(p.port, p.agent) == 0, "umad_unregister");
	CHECK(umad_unregister(p.port, p.agent) < 0, "unregistered twice");
	CHECK(umad_close_port(p.port) == 0, "umad_close_port");
	umad_free(p.req);
	umad_free(p.resp);
	printf("ok\n");
	return 0;
}

#define VENDOR_CLASS 0x09
#define VENDOR_ATTR 0x0010

static int serve(void)
{
	long methods[16 / sizeof(long)] = { 0 };
	methods[0] = 1L << 0x01; /* Get */
	int port = umad_open_port("softrdma0", 1);
	CHECK(port >= 0, "umad_open_port: %d", port);
	int agent = umad_register(port, VENDOR_CLASS, 1, 0, methods);
	CHECK(agent >= 0, "umad_register: %d", agent);
	CHECK(umad_get_fd(port) == port, "umad_get_fd");
	void *buf = umad_alloc(1, umad_size() + MAD_SIZE);
	printf("serving\n");
	CHECK(umad_poll(port, 30000) == 0, "no request came");
	int len = MAD_SIZE;
	int r = umad_recv(port, buf, &len, 0);
	CHECK(r == agent && len == MAD_SIZE, "umad_recv: %d (len %d)", r, len);
	uint8_t *mad = umad_get_mad(buf);
	CHECK(mad[1] == VENDOR_CLASS && mad[3] == 0x01 && mad[17] == VENDOR_ATTR,
	      "not a Get of class %#x", VENDOR_CLASS);
	ib_mad_addr_t *from = umad_get_mad_addr(buf);
	CHECK(from->grh_present && be32toh(from->qpn) == 1, "the request's address");
	/* The answer goes back where the request came from: same address. */
	mad[3] = 0x81;
	memset(mad + PMA_DATA, 0, MAD_SIZE - PMA_DATA);
	uint32_t marker = htobe32(0xC0FFEE);
	memcpy(mad + PMA_DATA + 32, &marker, 4);
	r = umad_send(port, agent, buf, MAD_SIZE, 0, 0);
	CHECK(r == 0, "umad_send: %d", r);
	printf("served 1\n");
	umad_free(buf);
	return umad_close_port(port);
}

static int ask(const char *addr)
{
	struct pma p = { .tid = 0x200 };
	p.port = umad_open_port(NULL, 0);
	CHECK(p.port >= 0, "umad_open_port: %d", p.port);
	p.agent = umad_register(p.port, VENDOR_CLASS, 1, 0, NULL);
	CHECK(p.agent >= 0, "umad_register: %d", p.agent);
	p.req = umad_alloc(1, umad_size() + MAD_SIZE);
	p.resp = umad_alloc(1, umad_size() + MAD_SIZE);
	int st = mad_get(&p, addr, VENDOR_CLASS, VENDOR_ATTR, 0, 1000, 3);
	CHECK(st == 0, "Get of class %#x: status %d", VENDOR_CLASS, st);
	printf("answer %#x\n", be32at((const uint8_t *)umad_get_mad(p.resp) + PMA_DATA + 32));
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 2 && !strcmp(argv[1], "peer"))
		return peer();
	if (argc == 2 && !strcmp(argv[1], "serve"))
		return serve();
	if (argc == 3 && !strcmp(argv[1], "ask"))
		return ask(argv[2]);
	if (argc == 5 && !strcmp(argv[1], "query"))
		return query(argv[2], (uint32_t)strtoul(argv[3], NULL, 0), atoi(argv[4]));
	fprintf(stderr, "usage: pma_query peer | serve | ask ADDR | query ADDR QPN COUNT\n");
	return 2;
}
