/*
 * Unreliable datagrams over zdapl-shm, through libdat2 as applications
 * reach them: the UD address exchange over the connection manager
 * (dat_ep_connect and dat_cr_accept on UD EPs, the extension's request and
 * established events with their address and CM handles), datagrams with
 * the 40-byte GRH space in front of the payload, and every way a datagram
 * is refused or lost.  Within one process (two IAs) and between processes
 * (forked peers: cm_test.h's spawn, which reports through the exit code).
 */
#include "cm_test.h"
#include "rc_ep_attr.h"
#include <dat2/dat_ib_extensions.h>
#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "hw/shm/zd_shm_ud.h"

#define UBUF  (1u << 21)      /* each node's registered buffer */
#define GRH   ZD_UD_GRH_BYTES
#define MSG   4096            /* the UD EPs' max_message_size */
#define GRH_FILL 0xee         /* receive bytes no datagram may touch */

/* A UD "node": IA, PZ, CR and connection EVDs (cm_test.h), DTO EVDs, one
 * registered buffer and a PSP. */
struct udn {
	struct node n;
	DAT_EVD_HANDLE req, rcv;
	uint8_t *buf;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lkey;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
};

/* What one UD connection event gave: the address handle (a copy, as
 * consumers keep it) and the CM handle. */
struct ud_addr {
	DAT_IB_ADDR_HANDLE ah;
	DAT_UINT64 cm;
};

static void udn_open(struct udn *u)
{
	DAT_REGION_DESCRIPTION r;
	DAT_RMR_CONTEXT rkey;
	DAT_VLEN rlen;
	DAT_VADDR raddr;

	memset(u, 0, sizeof(*u));
	node_open_on(&u->n, zd_test_ia("zdapl-shm"));
	CHK_RET(dat_evd_create(u->n.ia, 8192, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &u->req),
		DAT_SUCCESS);
	CHK_RET(dat_evd_create(u->n.ia, 8192, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &u->rcv),
		DAT_SUCCESS);
	u->buf = aligned_alloc(4096, UBUF);
	CHK(u->buf);
	memset(u->buf, GRH_FILL, UBUF);
	r.for_va = u->buf;
	CHK_RET(dat_lmr_create(u->n.ia, DAT_MEM_TYPE_VIRTUAL, r, UBUF, u->n.pz,
			       DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &u->lmr, &u->lkey, &rkey,
			       &rlen, &raddr),
		DAT_SUCCESS);
	CHK_RET(dat_psp_create_any(u->n.ia, &u->port, u->n.cr_evd, DAT_PSP_CONSUMER_FLAG,
				   &u->psp),
		DAT_SUCCESS);
}

static void udn_close(struct udn *u)
{
	node_close(&u->n);
	free(u->buf);
}

static void ud_attr(DAT_EP_ATTR *a, DAT_COUNT recvs)
{
	rc_ep_attr(a, MSG, recvs, 256, 4);
	a->service_type = (DAT_SERVICE_TYPE)DAT_IB_SERVICE_TYPE_UD;
	a->max_rdma_size = 0;
	a->max_rdma_read_in = 0;
	a->max_rdma_read_out = 0;
}

static DAT_EP_HANDLE ud_ep(struct udn *u, DAT_COUNT recvs)
{
	DAT_EP_ATTR a;
	DAT_EP_HANDLE ep;

	ud_attr(&a, recvs);
	CHK_RET(dat_ep_create(u->n.ia, u->n.pz, u->rcv, u->req, u->n.conn_evd, &a, &ep),
		DAT_SUCCESS);
	return ep;
}

static DAT_DTO_COOKIE cookie(uint64_t v)
{
	DAT_DTO_COOKIE c = { .as_64 = v };

	return c;
}

static DAT_LMR_TRIPLET seg(struct udn *u, size_t off, size_t len)
{
	DAT_LMR_TRIPLET t = { .lmr_context = u->lkey,
			      .virtual_address = (DAT_VADDR)(uintptr_t)(u->buf + off),
			      .segment_length = (DAT_SEG_LENGTH)len };
	return t;
}

/* ---- the address exchange ---- */

/* dat_ep_connect of UD EP @ep to @port on this host with 4 bytes of
 * private data. */
static void ud_connect(DAT_EP_HANDLE ep, DAT_CONN_QUAL port, uint32_t pdata)
{
	struct sockaddr_in sa;

	CHK_RET(dat_ep_connect(ep, loopback(&sa), port, 10 * SEC, sizeof(pdata), &pdata,
			       DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		DAT_SUCCESS);
}

/* The next UD connection request on @u's PSP, carrying @pdata. */
static DAT_CR_HANDLE ud_request(struct udn *u, uint32_t pdata)
{
	DAT_EVENT ev;
	DAT_IB_EXTENSION_EVENT_DATA *x = (DAT_IB_EXTENSION_EVENT_DATA *)ev.event_extension_data;
	DAT_CR_ARRIVAL_EVENT_DATA *cr = &ev.event_data.cr_arrival_event_data;
	DAT_CR_PARAM p;

	CHK(wait_ev(u->n.cr_evd, 10 * SEC, &ev) ==
	    (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_REQUEST_EVENT);
	CHK(x->type == DAT_IB_UD_CONNECT_REQUEST);
	CHK(cr->conn_qual == u->port);
	CHK(cr->sp_handle.psp_handle == u->psp);
	CHK_RET(dat_cr_query(cr->cr_handle, DAT_CR_FIELD_ALL, &p), DAT_SUCCESS);
	CHK(p.private_data_size == sizeof(pdata));
	CHK(memcmp(p.private_data, &pdata, sizeof(pdata)) == 0);
	return cr->cr_handle;
}

/* The next connection event on @u: ESTABLISHED for @ep, extension type
 * @type, with a usable address handle and CM handle (and, for the active
 * side, the acceptor's private data @pdata). */
static void ud_established(struct udn *u, DAT_EP_HANDLE ep, DAT_IB_EXT_TYPE type,
			   const uint32_t *pdata, struct ud_addr *out)
{
	DAT_EVENT ev;
	DAT_IB_EXTENSION_EVENT_DATA *x = (DAT_IB_EXTENSION_EVENT_DATA *)ev.event_extension_data;
	DAT_CONNECTION_EVENT_DATA *c = &ev.event_data.connect_event_data;

	CHK(wait_ev(u->n.conn_evd, 10 * SEC, &ev) ==
	    (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED);
	CHK(c->ep_handle == ep);
	CHK(x->type == type);
	CHK(x->status == DAT_OP_SUCCESS);
	CHK(x->remote_ah.ah != NULL);
	CHK(x->context.as_64 != 0);
	CHK(((struct sockaddr_in *)&x->remote_ah.ia_addr)->sin_family == AF_INET);
	if (pdata) {
		CHK(c->private_data_size == sizeof(*pdata));
		CHK(memcmp(c->private_data, pdata, sizeof(*pdata)) == 0);
	}
	out->ah = x->remote_ah;
	out->cm = x->context.as_64;
}

/* One exchange within this process: @aep of @a connects to @p's PSP, @p
 * accepts on @pep; the address handle each side got for the other. */
static void ud_pair(struct udn *a, DAT_EP_HANDLE aep, struct udn *p, DAT_EP_HANDLE pep,
		    uint32_t tag, struct ud_addr *a_to_p, struct ud_addr *p_to_a)
{
	uint32_t echo = tag ^ 0xa5a5a5a5u;
	DAT_CR_HANDLE cr;

	ud_connect(aep, p->port, tag);
	cr = ud_request(p, tag);
	CHK_RET(dat_cr_accept(cr, pep, sizeof(echo), &echo), DAT_SUCCESS);
	ud_established(a, aep, DAT_IB_UD_REMOTE_AH, &echo, a_to_p);
	ud_established(p, pep, DAT_IB_UD_PASSIVE_REMOTE_AH, NULL, p_to_a);
}

/* ---- datagrams ---- */

static void ud_recv(struct udn *u, DAT_EP_HANDLE ep, size_t off, size_t len, uint64_t ck)
{
	DAT_LMR_TRIPLET s = seg(u, off, len);

	CHK_RET(dat_ep_post_recv(ep, 1, &s, cookie(ck), DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
}

static DAT_RETURN ud_send(struct udn *u, DAT_EP_HANDLE ep, const struct ud_addr *to, size_t off,
			  size_t len, uint64_t ck, DAT_COMPLETION_FLAGS flags)
{
	DAT_LMR_TRIPLET s = seg(u, off, len);

	return dat_ib_post_send_ud(ep, 1, &s, (DAT_IB_ADDR_HANDLE *)&to->ah, cookie(ck), flags);
}

/* The next DTO event of @evd within 5 s: a DAT_IB_DTO_EVENT of extension
 * type @type (or, @type < 0, a plain DAT_DTO_COMPLETION_EVENT). */
static DAT_DTO_COMPLETION_EVENT_DATA ud_dto(DAT_EVD_HANDLE evd, int type)
{
	DAT_EVENT ev;
	DAT_IB_EXTENSION_EVENT_DATA *x = (DAT_IB_EXTENSION_EVENT_DATA *)ev.event_extension_data;
	DAT_EVENT_NUMBER num = wait_ev(evd, 5 * SEC, &ev);

	if (type < 0) {
		CHK(num == DAT_DTO_COMPLETION_EVENT);
	} else {
		CHK(num == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
		CHK(x->type == (DAT_IB_EXT_TYPE)type);
		CHK(x->status == (ev.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS ?
				  DAT_OP_SUCCESS : DAT_IB_OP_ERR));
	}
	return ev.event_data.dto_completion_event_data;
}

/* The sender's completion: DAT_IB_DTO_SEND_UD with the payload length. */
static void expect_sent(struct udn *u, DAT_EP_HANDLE ep, uint64_t ck, DAT_DTO_COMPLETION_STATUS st,
			size_t len)
{
	DAT_DTO_COMPLETION_EVENT_DATA d = ud_dto(u->req, DAT_IB_UD_SEND);

	CHK(d.ep_handle == ep);
	CHK(d.user_cookie.as_64 == ck);
	CHK(d.status == st);
	CHK(d.operation == (DAT_DTOS)DAT_IB_DTO_SEND_UD);
	if (st == DAT_DTO_SUCCESS)
		CHK(d.transfered_length == len);
}

static void fill_payload(struct udn *u, size_t off, size_t len, uint8_t seed)
{
	fill(u->buf + off, len, seed);
}

/* The receive @ck of @ep completed with a datagram of @len payload bytes
 * filled with @seed: payload + GRH reported, payload at offset GRH of the
 * buffer at @off, the GRH space untouched. */
static void expect_datagram(struct udn *u, DAT_EP_HANDLE ep, uint64_t ck, size_t off,
			    size_t len, uint8_t seed)
{
	DAT_DTO_COMPLETION_EVENT_DATA d = ud_dto(u->rcv, DAT_IB_UD_RECV);
	uint8_t want[MSG];

	CHK(d.ep_handle == ep);
	CHK(d.user_cookie.as_64 == ck);
	CHK(d.status == DAT_DTO_SUCCESS);
	CHK(d.operation == (DAT_DTOS)DAT_IB_DTO_RECV_UD);
	CHK(d.transfered_length == len + GRH);
	for (size_t i = 0; i < GRH; i++)
		CHK(u->buf[off + i] == GRH_FILL);
	CHK(len <= sizeof(want));
	fill(want, len, seed);
	CHK(memcmp(u->buf + off + GRH, want, len) == 0);
}

static void expect_none(DAT_EVD_HANDLE evd)
{
	DAT_EVENT ev;

	CHK(ZD_T_TYPE(dat_evd_dequeue(evd, &ev)) == DAT_QUEUE_EMPTY);
}

/* Datagrams dropped at UD EP @ep for want of a receive (shm's counter). */
static uint64_t dropped(DAT_EP_HANDLE ep)
{
	return zd_shm_ud_dropped(((struct zd_ep *)ep)->dev_priv);
}

/* ---- the exchange, and datagrams both ways ---- */

Test(ud, exchange_events_and_datagrams_both_ways)
{
	struct udn a, b;
	struct ud_addr a_to_b, b_to_a;
	DAT_EP_HANDLE ea, eb;
	static const size_t lens[] = { 1, 7, 8, 100, MSG };

	zd_test_use_conf();
	udn_open(&a);
	udn_open(&b);
	ea = ud_ep(&a, 16);
	eb = ud_ep(&b, 16);
	ud_pair(&a, ea, &b, eb, 7, &a_to_b, &b_to_a);
	/* A UD EP is never connected: its state does not move. */
	CHK(ep_state(ea) == DAT_EP_STATE_UNCONNECTED);
	CHK(ep_state(eb) == DAT_EP_STATE_UNCONNECTED);

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		ud_recv(&b, eb, 8192 * i, GRH + MSG, 100 + i);
		ud_recv(&a, ea, 8192 * i, GRH + MSG, 200 + i);
	}
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		fill_payload(&a, 65536 + 8192 * i, lens[i], (uint8_t)(i + 1));
		fill_payload(&b, 65536 + 8192 * i, lens[i], (uint8_t)(i + 50));
		CHK_RET(ud_send(&a, ea, &a_to_b, 65536 + 8192 * i, lens[i], 10 + i,
				DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
		CHK_RET(ud_send(&b, eb, &b_to_a, 65536 + 8192 * i, lens[i], 20 + i,
				DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
		expect_sent(&a, ea, 10 + i, DAT_DTO_SUCCESS, lens[i]);
		expect_sent(&b, eb, 20 + i, DAT_DTO_SUCCESS, lens[i]);
		expect_datagram(&b, eb, 100 + i, 8192 * i, lens[i], (uint8_t)(i + 1));
		expect_datagram(&a, ea, 200 + i, 8192 * i, lens[i], (uint8_t)(i + 50));
	}
	/* An empty datagram (no segment at all) is its GRH space alone. */
	ud_recv(&b, eb, 200000, GRH, 300);
	CHK_RET(dat_ib_post_send_ud(ea, 0, NULL, &a_to_b.ah, cookie(30),
				    DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	expect_sent(&a, ea, 30, DAT_DTO_SUCCESS, 0);
	expect_datagram(&b, eb, 300, 200000, 0, 0);
	expect_none(a.rcv);
	expect_none(b.rcv);
	CHK(dropped(ea) == 0 && dropped(eb) == 0);
	udn_close(&a);
	udn_close(&b);
}

/* Several EPs, several exchanges on one EP (a UD EP accepts any number of
 * requests and connects any number of times), each address handle naming
 * the right QP, and duplicates freed while the first copy stays usable. */
Test(ud, many_eps_and_many_exchanges_per_ep)
{
	enum { NA = 3, ROUNDS = 2 };
	struct udn a, b;
	struct ud_addr to_b[NA][ROUNDS], to_a[NA][ROUNDS];
	DAT_EP_HANDLE ea[NA], eb;

	zd_test_use_conf();
	udn_open(&a);
	udn_open(&b);
	eb = ud_ep(&b, 64);
	for (int i = 0; i < NA; i++)
		ea[i] = ud_ep(&a, 16);
	for (int r = 0; r < ROUNDS; r++)
		for (int i = 0; i < NA; i++)
			ud_pair(&a, ea[i], &b, eb, (uint32_t)(i * 10 + r), &to_b[i][r], &to_a[i][r]);
	/* Duplicates are freed (as dtestx does); the first copies stay. */
	for (int i = 0; i < NA; i++) {
		CHK_RET(dat_ib_ud_ah_free(ea[i], &to_b[i][1].ah), DAT_SUCCESS);
		CHK_RET(dat_ib_ud_cm_free(ea[i], to_b[i][1].cm), DAT_SUCCESS);
		CHK_RET(dat_ib_ud_ah_free(eb, &to_a[i][1].ah), DAT_SUCCESS);
		CHK_RET(dat_ib_ud_cm_free(eb, to_a[i][1].cm), DAT_SUCCESS);
	}
	/* Each A EP to B, and B to each A EP through its own handle. */
	for (int i = 0; i < NA; i++) {
		ud_recv(&b, eb, 8192 * i, GRH + 64, 100 + i);
		ud_recv(&a, ea[i], 8192 * i, GRH + 64, 200 + i);
	}
	for (int i = 0; i < NA; i++) {
		fill_payload(&a, 65536 + 8192 * i, 64, (uint8_t)(i + 1));
		CHK_RET(ud_send(&a, ea[i], &to_b[i][0], 65536 + 8192 * i, 64, i,
				DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
		expect_sent(&a, ea[i], i, DAT_DTO_SUCCESS, 64);
		expect_datagram(&b, eb, 100 + i, 8192 * i, 64, (uint8_t)(i + 1));
	}
	for (int i = NA - 1; i >= 0; i--) {
		fill_payload(&b, 65536 + 8192 * i, 64, (uint8_t)(i + 40));
		CHK_RET(ud_send(&b, eb, &to_a[i][0], 65536 + 8192 * i, 64, i,
				DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
		expect_sent(&b, eb, i, DAT_DTO_SUCCESS, 64);
		expect_datagram(&a, ea[i], 200 + i, 8192 * i, 64, (uint8_t)(i + 40));
	}
	/* Datagrams on one handle arrive in the order sent. */
	for (int k = 0; k < 8; k++)
		ud_recv(&b, eb, 32768 + 256 * k, GRH + 16, 3 + k);
	for (int k = 0; k < 8; k++) {
		fill_payload(&a, 98304 + 64 * k, 16, (uint8_t)(k * 3));
		CHK_RET(ud_send(&a, ea[0], &to_b[0][0], 98304 + 64 * k, 16, k,
				DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	}
	for (int k = 0; k < 8; k++)
		expect_datagram(&b, eb, 3 + k, 32768 + 256 * k, 16, (uint8_t)(k * 3));
	expect_none(a.req);
	udn_close(&a);
	udn_close(&b);
}

/* Several exchanges of one EP whose events wait unread in its connect EVD
 * (dtestx -m reads them only after all have come): each keeps its own
 * private data and handle. */
Test(ud, queued_events_keep_their_own_private_data)
{
	enum { N = 4 };
	struct udn a, b;
	struct ud_addr to_b[N], to_a;
	DAT_EP_HANDLE ea, eb[N];

	zd_test_use_conf();
	udn_open(&a);
	udn_open(&b);
	ea = ud_ep(&a, 16);
	for (int i = 0; i < N; i++) {
		uint32_t echo = 100u + (uint32_t)i;

		eb[i] = ud_ep(&b, 4);
		ud_connect(ea, b.port, (uint32_t)i);
		CHK_RET(dat_cr_accept(ud_request(&b, (uint32_t)i), eb[i], sizeof(echo), &echo),
			DAT_SUCCESS);
		/* The passive side hears of it after the active side's event. */
		ud_established(&b, eb[i], DAT_IB_UD_PASSIVE_REMOTE_AH, NULL, &to_a);
	}
	for (int i = 0; i < N; i++) {
		uint32_t echo = 100u + (uint32_t)i;

		ud_established(&a, ea, DAT_IB_UD_REMOTE_AH, &echo, &to_b[i]);
		ud_recv(&b, eb[i], 4096 * (size_t)i, GRH + 4, (uint64_t)i);
	}
	/* Each handle reaches the EP that accepted its exchange. */
	for (int i = 0; i < N; i++) {
		memcpy(a.buf + 65536 + 64 * i, &i, 4);
		CHK_RET(ud_send(&a, ea, &to_b[i], 65536 + 64 * i, 4, (uint64_t)i,
				DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	}
	for (int i = 0; i < N; i++) {
		DAT_DTO_COMPLETION_EVENT_DATA d = ud_dto(b.rcv, DAT_IB_UD_RECV);
		int got;

		CHK(d.status == DAT_DTO_SUCCESS && d.ep_handle == eb[i]);
		memcpy(&got, b.buf + 4096 * i + GRH, 4);
		CHK(got == i);
	}
	udn_close(&a);
	udn_close(&b);
}

/* ---- handles: freeing them, and what a freed one does ---- */

Test(ud, freed_handles_and_free_errors)
{
	struct udn a, b;
	struct ud_addr to_b, to_a, copy;
	DAT_EP_HANDLE ea, ea2, eb, rc;
	DAT_EP_ATTR attr;

	zd_test_use_conf();
	udn_open(&a);
	udn_open(&b);
	ea = ud_ep(&a, 4);
	ea2 = ud_ep(&a, 4);
	eb = ud_ep(&b, 4);
	rc_ep_attr(&attr, 4096, 4, 4, 1);
	CHK_RET(dat_ep_create(a.n.ia, a.n.pz, a.rcv, a.req, a.n.conn_evd, &attr, &rc),
		DAT_SUCCESS);
	ud_pair(&a, ea, &b, eb, 1, &to_b, &to_a);
	copy = to_b;

	/* The CM handle belongs to the EP whose event carried it. */
	CHK_RET(dat_ib_ud_cm_free(ea2, to_b.cm), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	/* Neither handle frees on an RC EP, a freed EP or no EP. */
	CHK(ZD_T_TYPE(dat_ib_ud_cm_free(rc, to_b.cm)) == DAT_INVALID_HANDLE);
	CHK(ZD_T_TYPE(dat_ib_ud_ah_free(rc, &to_b.ah)) == DAT_INVALID_HANDLE);
	CHK(ZD_T_TYPE(dat_ib_ud_ah_free(ea, NULL)) == DAT_INVALID_PARAMETER);
	/* A UD send on an RC EP, a plain send on a UD EP: refused. */
	CHK(ZD_T_TYPE(ud_send(&a, rc, &to_b, 0, 8, 1, DAT_COMPLETION_DEFAULT_FLAG)) ==
	    DAT_INVALID_HANDLE);

	CHK_RET(dat_ib_ud_ah_free(ea, &to_b.ah), DAT_SUCCESS);
	CHK_RET(dat_ib_ud_ah_free(ea, &to_b.ah), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	/* A freed handle, and every copy of it, is refused: nothing is sent. */
	ud_recv(&b, eb, 0, GRH + 8, 1);
	CHK_RET(ud_send(&a, ea, &copy, 4096, 8, 1, DAT_COMPLETION_DEFAULT_FLAG),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4));
	/* A handle that was never handed out. */
	copy.ah.ah = (struct ibv_ah *)(uintptr_t)0xdead00000001ull;
	CHK_RET(ud_send(&a, ea, &copy, 4096, 8, 1, DAT_COMPLETION_DEFAULT_FLAG),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4));
	CHK_RET(dat_ib_ud_cm_free(ea, to_b.cm), DAT_SUCCESS);
	CHK_RET(dat_ib_ud_cm_free(ea, to_b.cm), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	expect_none(a.req);
	expect_none(b.rcv);

	/* The passive side's handle still works. */
	fill_payload(&b, 4096, 8, 9);
	ud_recv(&a, ea, 0, GRH + 8, 2);
	CHK_RET(ud_send(&b, eb, &to_a, 4096, 8, 2, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	expect_sent(&b, eb, 2, DAT_DTO_SUCCESS, 8);
	expect_datagram(&a, ea, 2, 0, 8, 9);

	/* Plain DAT posts never reach a UD QP: it is never connected. */
	{
		DAT_LMR_TRIPLET s = seg(&a, 4096, 8);
		DAT_RMR_TRIPLET r = { .rmr_context = 1, .virtual_address = 0,
				      .segment_length = 8 };

		CHK(ZD_T_TYPE(dat_ep_post_send(ea, 1, &s, cookie(1), 0)) == DAT_INVALID_STATE);
		CHK(ZD_T_TYPE(dat_ep_post_rdma_write(ea, 1, &s, cookie(1), &r, 0)) ==
		    DAT_INVALID_STATE);
		CHK(ZD_T_TYPE(dat_ep_post_rdma_read(ea, 1, &s, cookie(1), &r, 0)) ==
		    DAT_INVALID_STATE);
	}
	expect_none(a.req);
	udn_close(&a);
	udn_close(&b);
}

/* ---- lengths ---- */

Test(ud, datagram_larger_than_the_mtu_refused)
{
	struct udn a, b;
	struct ud_addr to_b, to_a;
	DAT_EP_HANDLE ea, eb, ep;
	DAT_EP_ATTR attr;
	DAT_SEG_LENGTH max;
	DAT_LMR_TRIPLET s[2];

	zd_test_use_conf();
	udn_open(&a);
	udn_open(&b);
	ea = ud_ep(&a, 4);
	eb = ud_ep(&b, 4);
	ud_pair(&a, ea, &b, eb, 1, &to_b, &to_a);
	max = ((struct zd_ep *)ea)->obj.ia->limits.max_ud_payload;
	CHK(max == ZD_SHM_UD_MAX_PAYLOAD);

	/* An EP may not ask for more; a post may not carry more. */
	ud_attr(&attr, 4);
	attr.max_message_size = (DAT_VLEN)max + 1;
	CHK(ZD_T_TYPE(dat_ep_create(a.n.ia, a.n.pz, a.rcv, a.req, a.n.conn_evd, &attr, &ep)) ==
	    DAT_INVALID_PARAMETER);
	s[0] = seg(&a, 0, max);
	s[0].segment_length = max + 1;
	CHK_RET(dat_ib_post_send_ud(ea, 1, s, &to_b.ah, cookie(1), DAT_COMPLETION_DEFAULT_FLAG),
		ERR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE));
	s[0].segment_length = max;
	s[1] = seg(&a, 0, 1);
	CHK_RET(dat_ib_post_send_ud(ea, 2, s, &to_b.ah, cookie(1), DAT_COMPLETION_DEFAULT_FLAG),
		ERR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE));
	expect_none(a.req);

	/* Far beyond an IB MTU is one datagram here (a copy, no wire). */
	ud_recv(&b, eb, 0, GRH + UBUF / 2, 1);
	fill_payload(&a, UBUF / 2, UBUF / 2 - 64, 77);
	CHK_RET(ud_send(&a, ea, &to_b, UBUF / 2, UBUF / 2 - 64, 2, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	expect_sent(&a, ea, 2, DAT_DTO_SUCCESS, UBUF / 2 - 64);
	{
		DAT_DTO_COMPLETION_EVENT_DATA d = ud_dto(b.rcv, DAT_IB_UD_RECV);

		CHK(d.status == DAT_DTO_SUCCESS && d.user_cookie.as_64 == 1);
		CHK(d.transfered_length == UBUF / 2 - 64 + GRH);
		CHK(memcmp(b.buf + GRH, a.buf + UBUF / 2, UBUF / 2 - 64) == 0);
	}
	udn_close(&a);
	udn_close(&b);
}

Test(ud, receive_too_small_completes_in_error_and_the_qp_goes_on)
{
	struct udn a, b;
	struct ud_addr to_b, to_a;
	DAT_EP_HANDLE ea, eb;
	DAT_DTO_COMPLETION_EVENT_DATA d;

	zd_test_use_conf();
	udn_open(&a);
	udn_open(&b);
	ea = ud_ep(&a, 8);
	eb = ud_ep(&b, 8);
	ud_pair(&a, ea, &b, eb, 1, &to_b, &to_a);
	ud_recv(&b, eb, 0, GRH + 4, 1);        /* 4 payload bytes: short */
	ud_recv(&b, eb, 4096, 16, 2);          /* not even the GRH */
	ud_recv(&b, eb, 8192, GRH + 8, 3);     /* exactly enough */
	fill_payload(&a, 65536, 8, 5);
	for (int i = 1; i <= 2; i++) {
		CHK_RET(ud_send(&a, ea, &to_b, 65536, i == 1 ? 8 : 0, i,
				DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
		/* The sender cannot know: its datagram left. */
		expect_sent(&a, ea, i, DAT_DTO_SUCCESS, i == 1 ? 8 : 0);
		d = ud_dto(b.rcv, DAT_IB_UD_RECV);
		CHK(d.user_cookie.as_64 == (uint64_t)i);
		CHK(d.status == DAT_DTO_ERR_LOCAL_LENGTH);
		CHK(d.transfered_length == 0);
	}
	CHK_RET(ud_send(&a, ea, &to_b, 65536, 8, 3, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	expect_sent(&a, ea, 3, DAT_DTO_SUCCESS, 8);
	expect_datagram(&b, eb, 3, 8192, 8, 5);
	/* The short receives were not written past their ends. */
	CHK(b.buf[GRH + 4] == GRH_FILL && b.buf[4096 + 16] == GRH_FILL);
	udn_close(&a);
	udn_close(&b);
}

/* A receive of three segments: the GRH space ends inside the second. */
Test(ud, payload_after_a_grh_that_spans_segments)
{
	struct udn a, b;
	struct ud_addr to_b, to_a;
	DAT_EP_HANDLE ea, eb;
	DAT_LMR_TRIPLET r[3];
	DAT_DTO_COMPLETION_EVENT_DATA d;
	uint8_t want[100];

	zd_test_use_conf();
	udn_open(&a);
	udn_open(&b);
	ea = ud_ep(&a, 8);
	eb = ud_ep(&b, 8);
	ud_pair(&a, ea, &b, eb, 1, &to_b, &to_a);
	r[0] = seg(&b, 0, 16);
	r[1] = seg(&b, 4096, 30);     /* GRH ends 24 bytes in */
	r[2] = seg(&b, 8192, 100);
	CHK_RET(dat_ep_post_recv(eb, 3, r, cookie(1), DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	fill_payload(&a, 65536, 100, 3);
	CHK_RET(ud_send(&a, ea, &to_b, 65536, 100, 1, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	d = ud_dto(b.rcv, DAT_IB_UD_RECV);
	CHK(d.status == DAT_DTO_SUCCESS && d.transfered_length == 100 + GRH);
	fill(want, 100, 3);
	CHK(memcmp(b.buf + 4096 + 24, want, 6) == 0);
	CHK(memcmp(b.buf + 8192, want + 6, 94) == 0);
	CHK(b.buf[8192 + 94] == GRH_FILL);
	for (int i = 0; i < 16; i++)
		CHK(b.buf[i] == GRH_FILL);
	for (int i = 0; i < 24; i++)
		CHK(b.buf[4096 + i] == GRH_FILL);
	expect_none(a.req);
	udn_close(&a);
	udn_close(&b);
}

/* ---- lost datagrams ---- */

Test(ud, no_receive_posted_drops_and_counts)
{
	struct udn a, b;
	struct ud_addr to_b, to_a;
	DAT_EP_HANDLE ea, eb;

	zd_test_use_conf();
	udn_open(&a);
	udn_open(&b);
	ea = ud_ep(&a, 4);
	eb = ud_ep(&b, 4);
	ud_pair(&a, ea, &b, eb, 1, &to_b, &to_a);
	fill_payload(&a, 65536, 32, 1);
	for (int i = 0; i < 3; i++) {
		CHK_RET(ud_send(&a, ea, &to_b, 65536, 32, i, DAT_COMPLETION_DEFAULT_FLAG),
			DAT_SUCCESS);
		expect_sent(&a, ea, i, DAT_DTO_SUCCESS, 32);
	}
	expect_none(b.rcv);
	CHK(dropped(eb) == 3);
	CHK(dropped(ea) == 0);
	/* More than the RQ holds, with receives posted: the rest is dropped. */
	for (int i = 0; i < 4; i++)
		ud_recv(&b, eb, 4096 * i, GRH + 32, 10 + i);
	for (int i = 0; i < 6; i++)
		CHK_RET(ud_send(&a, ea, &to_b, 65536, 32, i, DAT_COMPLETION_SUPPRESS_FLAG),
			DAT_SUCCESS);
	for (int i = 0; i < 4; i++)
		expect_datagram(&b, eb, 10 + i, 4096 * i, 32, 1);
	CHK(dropped(eb) == 5);
	/* The completed slots are posted again and filled again. */
	ud_recv(&b, eb, 0, GRH + 32, 20);
	CHK_RET(ud_send(&a, ea, &to_b, 65536, 32, 9, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	expect_datagram(&b, eb, 20, 0, 32, 1);
	expect_none(b.rcv);
	expect_none(a.req);
	udn_close(&a);
	udn_close(&b);
}

Test(ud, completion_flags_and_local_protection)
{
	struct udn a, b;
	struct ud_addr to_b, to_a;
	DAT_EP_HANDLE ea, eu, eb;
	DAT_EP_ATTR attr;
	DAT_LMR_TRIPLET s;

	zd_test_use_conf();
	udn_open(&a);
	udn_open(&b);
	ea = ud_ep(&a, 4);
	ud_attr(&attr, 4);
	attr.request_completion_flags = DAT_COMPLETION_UNSIGNALLED_FLAG;
	CHK_RET(dat_ep_create(a.n.ia, a.n.pz, a.rcv, a.req, a.n.conn_evd, &attr, &eu),
		DAT_SUCCESS);
	eb = ud_ep(&b, 8);
	ud_pair(&a, ea, &b, eb, 1, &to_b, &to_a);
	for (int i = 0; i < 4; i++)
		ud_recv(&b, eb, 4096 * i, GRH + 16, i);
	fill_payload(&a, 65536, 16, 4);
	/* A bad key: the send fails, nothing arrives, the QP goes on. */
	s = seg(&a, 65536, 16);
	s.lmr_context ^= 0x5a5a00;
	CHK_RET(dat_ib_post_send_ud(ea, 1, &s, &to_b.ah, cookie(1), DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	expect_sent(&a, ea, 1, DAT_DTO_ERR_LOCAL_PROTECTION, 0);
	/* Outside the region. */
	s = seg(&a, UBUF - 8, 16);
	CHK_RET(dat_ib_post_send_ud(ea, 1, &s, &to_b.ah, cookie(2), DAT_COMPLETION_SUPPRESS_FLAG),
		DAT_SUCCESS);
	expect_sent(&a, ea, 2, DAT_DTO_ERR_LOCAL_PROTECTION, 0);
	expect_none(b.rcv);
	/* Suppressed: nothing at the sender, the datagram arrives. */
	CHK_RET(ud_send(&a, ea, &to_b, 65536, 16, 3, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	expect_datagram(&b, eb, 0, 0, 16, 4);
	/* Unsignalled on an EP whose requests are unsignalled: nothing; on
	 * the same EP without the flag: a completion. */
	CHK_RET(ud_send(&a, eu, &to_b, 65536, 16, 4, DAT_COMPLETION_UNSIGNALLED_FLAG),
		DAT_SUCCESS);
	expect_datagram(&b, eb, 1, 4096, 16, 4);
	CHK_RET(ud_send(&a, eu, &to_b, 65536, 16, 5, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	expect_sent(&a, eu, 5, DAT_DTO_SUCCESS, 16);
	expect_datagram(&b, eb, 2, 8192, 16, 4);
	/* Unsignalled on an ordinary EP is signalled. */
	CHK_RET(ud_send(&a, ea, &to_b, 65536, 16, 6, DAT_COMPLETION_UNSIGNALLED_FLAG),
		DAT_SUCCESS);
	expect_sent(&a, ea, 6, DAT_DTO_SUCCESS, 16);
	expect_datagram(&b, eb, 3, 12288, 16, 4);
	expect_none(a.req);
	/* A receive with a bad key fails, and the QP with it (as an HCA's):
	 * the next receive is flushed; both DAT_IB_DTO_RECV_UD events. */
	s = seg(&b, 0, GRH + 16);
	s.lmr_context ^= 0x5a5a00;
	CHK_RET(dat_ep_post_recv(eb, 1, &s, cookie(7), DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	ud_recv(&b, eb, 4096, GRH + 16, 8);
	for (uint64_t ck = 7; ck <= 8; ck++) {
		DAT_DTO_COMPLETION_EVENT_DATA d = ud_dto(b.rcv, DAT_IB_UD_RECV);

		CHK(d.ep_handle == eb && d.user_cookie.as_64 == ck);
		CHK(d.operation == (DAT_DTOS)DAT_IB_DTO_RECV_UD && d.transfered_length == 0);
		CHK(d.status == (ck == 7 ? DAT_DTO_ERR_LOCAL_PROTECTION : DAT_DTO_ERR_FLUSHED));
	}
	expect_none(b.rcv);
	udn_close(&a);
	udn_close(&b);
}

/* ---- EPs going away ---- */

Test(ud, ep_free_with_receives_posted_and_stale_handles)
{
	struct udn a, b;
	struct ud_addr to_b, to_a, to_b2, to_a2;
	DAT_EP_HANDLE ea, eb, eb2;
	DAT_DTO_COMPLETION_EVENT_DATA d;
	const struct zd_device_ops *dev;
	uint8_t blob[ZD_QP_BLOB_MAX];
	uint8_t ah[ZD_UD_AH_BYTES] __attribute__((aligned(8)));
	size_t blob_len;
	uint32_t qpn;

	zd_test_use_conf();
	udn_open(&a);
	udn_open(&b);
	ea = ud_ep(&a, 8);
	eb = ud_ep(&b, 8);
	ud_pair(&a, ea, &b, eb, 1, &to_b, &to_a);
	dev = ((struct zd_ep *)eb)->obj.ia->dev;
	blob_len = dev->qp_local_blob((struct zd_ep *)eb, blob, sizeof(blob));
	CHK(blob_len > 0);
	for (int i = 0; i < 8; i++)
		ud_recv(&b, eb, 4096 * i, GRH + 16, i);
	fill_payload(&a, 65536, 16, 8);
	for (int i = 0; i < 2; i++)
		CHK_RET(ud_send(&a, ea, &to_b, 65536, 16, i, DAT_COMPLETION_SUPPRESS_FLAG),
			DAT_SUCCESS);
	for (int i = 0; i < 2; i++)
		expect_datagram(&b, eb, i, 4096 * i, 16, 8);

	/* Six receives still posted: the free succeeds and flushes them. */
	CHK_RET(dat_ep_free(eb), DAT_SUCCESS);
	for (int i = 2; i < 8; i++) {
		/* As every receive completion of a UD EP: DAT_IB_DTO_RECV_UD. */
		d = ud_dto(b.rcv, DAT_IB_UD_RECV);
		CHK(d.status == DAT_DTO_ERR_FLUSHED && d.user_cookie.as_64 == (uint64_t)i);
		CHK(d.operation == (DAT_DTOS)DAT_IB_DTO_RECV_UD && d.transfered_length == 0);
	}
	expect_none(b.rcv);

	/* A new UD EP there (it may well reuse the old one's region fd):
	 * the old address names the old QP only. */
	eb2 = ud_ep(&b, 8);
	ud_recv(&b, eb2, 0, GRH + 16, 100);
	CHK_RET(dev->ud_ah_create(((struct zd_ep *)ea)->obj.ia, blob, blob_len, ah, &qpn),
		ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNREACHABLE));
	CHK_RET(ud_send(&a, ea, &to_b, 65536, 16, 7, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	expect_sent(&a, ea, 7, DAT_DTO_SUCCESS, 16);   /* dropped, as on a wire */
	usleep(20000);
	expect_none(b.rcv);
	CHK(dropped(eb2) == 0);
	/* A fresh exchange reaches it. */
	ud_pair(&a, ea, &b, eb2, 2, &to_b2, &to_a2);
	CHK(to_b2.ah.ah != to_b.ah.ah);
	CHK_RET(ud_send(&a, ea, &to_b2, 65536, 16, 8, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	expect_datagram(&b, eb2, 100, 0, 16, 8);
	udn_close(&a);
	udn_close(&b);
}

/* Dequeues from @evd for up to @ms, polling: the next event's number,
 * or 0.  (dat_evd_wait would sleep until a peer rings; a stalled slot is
 * looked at again only when the consumer polls.) */
static DAT_EVENT_NUMBER poll_ev(DAT_EVD_HANDLE evd, int ms, DAT_EVENT *ev)
{
	uint64_t end = now_ms() + (uint64_t)ms;

	do {
		if (dat_evd_dequeue(evd, ev) == DAT_SUCCESS)
			return ev->event_number;
		usleep(1000);
	} while (now_ms() < end);
	return (DAT_EVENT_NUMBER)0;
}

/* Plays a sender that took receive @pos of UD EP @ep (this process's) and
 * stopped before filling it: the slot TAKEN, signed by @pid. */
static void take_slot(DAT_EP_HANDLE ep, uint64_t pos, pid_t pid)
{
	struct zd_shm_qp *qp = ((struct zd_ep *)ep)->dev_priv;
	struct zd_shm_ud_shared *sh = (struct zd_shm_ud_shared *)qp->own;
	uint64_t w = zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_POSTED);

	CHK(atomic_load(&sh->claim) == pos);
	CHK(atomic_compare_exchange_strong(&qp->rq[pos & (qp->rq_depth - 1)].state, &w,
					   zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_TAKEN)));
	atomic_store(&qp->ud->comp[pos & (qp->rq_depth - 1)].taker, pid);
	atomic_store(&sh->claim, pos + 1);
}

/* A sender killed between taking a receive and filling it: the receives
 * behind it wait until its taker is known gone, then it completes in
 * error and they follow.  A live taker is waited for. */
Test(ud, receive_taken_by_a_dead_sender)
{
	struct udn a, b;
	struct ud_addr to_b, to_a;
	DAT_EP_HANDLE ea, eb;
	DAT_EVENT ev;
	DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	struct zd_shm_qp *qp;
	pid_t gone;
	uint64_t w;

	zd_test_use_conf();
	gone = fork();
	CHK(gone >= 0);
	if (gone == 0)
		_exit(0);
	CHK(waitpid(gone, NULL, 0) == gone);
	udn_open(&a);
	udn_open(&b);
	ea = ud_ep(&a, 8);
	eb = ud_ep(&b, 8);
	qp = ((struct zd_ep *)eb)->dev_priv;
	ud_pair(&a, ea, &b, eb, 1, &to_b, &to_a);
	for (int i = 0; i < 4; i++)
		ud_recv(&b, eb, 4096 * i, GRH + 16, i);
	fill_payload(&a, 65536, 16, 6);

	/* A live taker (this process) holds receive 0: nothing completes. */
	take_slot(eb, 0, getpid());
	CHK_RET(ud_send(&a, ea, &to_b, 65536, 16, 1, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	CHK(poll_ev(b.rcv, 2500, &ev) == 0);
	/* It finishes: both complete, in order. */
	qp->ud->comp[0].len = GRH + 16;
	qp->ud->comp[0].status = DAT_DTO_SUCCESS;
	qp->ud->comp[0].flags = 0;
	w = zd_shm_slot_word(0, 0, ZD_SHM_SLOT_TAKEN);
	CHK(atomic_compare_exchange_strong(&qp->rq[0].state, &w,
					   zd_shm_slot_word(0, 0, ZD_SHM_SLOT_DONE)));
	CHK(poll_ev(b.rcv, 1000, &ev) == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	CHK(d->user_cookie.as_64 == 0 && d->status == DAT_DTO_SUCCESS);
	CHK(poll_ev(b.rcv, 1000, &ev) == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	CHK(d->user_cookie.as_64 == 1 && d->status == DAT_DTO_SUCCESS);
	CHK(memcmp(b.buf + 4096 + GRH, a.buf + 65536, 16) == 0);

	/* A dead taker holds receive 2: after the stall, it completes in
	 * error and the datagram behind it arrives. */
	take_slot(eb, 2, gone);
	CHK_RET(ud_send(&a, ea, &to_b, 65536, 16, 2, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	CHK(poll_ev(b.rcv, 5000, &ev) == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	CHK(d->user_cookie.as_64 == 2 && d->status == DAT_DTO_ERR_TRANSPORT);
	CHK(poll_ev(b.rcv, 1000, &ev) == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	CHK(d->user_cookie.as_64 == 3 && d->status == DAT_DTO_SUCCESS);
	CHK(d->transfered_length == GRH + 16);
	expect_none(b.rcv);
	udn_close(&a);
	udn_close(&b);
}

/* Addresses that name nothing usable: refused, never followed. */
Test(ud, garbage_addresses_refused)
{
	struct udn a;
	DAT_EP_HANDLE ea;
	struct zd_ia *ia;
	const struct zd_device_ops *dev;
	struct zd_shm_ud_blob good, b;
	uint8_t ah[ZD_UD_AH_BYTES] __attribute__((aligned(8)));
	uint8_t junk[ZD_QP_BLOB_MAX];
	uint32_t qpn;
	pid_t gone;
	DAT_RETURN bad = ERR(DAT_INVALID_ADDRESS, 0);

	zd_test_use_conf();
	udn_open(&a);
	ea = ud_ep(&a, 4);
	ia = ((struct zd_ep *)ea)->obj.ia;
	dev = ia->dev;
	CHK(dev->qp_local_blob((struct zd_ep *)ea, &good, sizeof(good)) == sizeof(good));
	/* Its own address resolves (this process: no pidfd needed). */
	CHK_RET(dev->ud_ah_create(ia, &good, sizeof(good), ah, &qpn), DAT_SUCCESS);
	dev->ud_ah_destroy(ia, ah);

	srand(12345);
	for (int i = 0; i < 2000; i++) {
		size_t len = (size_t)(rand() % 3 == 0 ? sizeof(good) : rand() % sizeof(junk));

		for (size_t k = 0; k < len; k++)
			junk[k] = (uint8_t)rand();
		if (i % 2 && len == sizeof(good))
			memcpy(junk, &good, 4);  /* the right version, garbage after */
		CHK(ZD_T_TYPE(dev->ud_ah_create(ia, junk, len, ah, &qpn)) == DAT_INVALID_ADDRESS);
	}
	CHK(ZD_T_TYPE(dev->ud_ah_create(ia, NULL, sizeof(good), ah, &qpn)) == DAT_INVALID_ADDRESS);
#define REFUSED(field, value)                                                      \
	do {                                                                       \
		b = good;                                                          \
		b.field = value;                                                   \
		CHK(ZD_T_TYPE(dev->ud_ah_create(ia, &b, sizeof(b), ah, &qpn)) ==   \
		    ZD_T_TYPE(bad));                                               \
	} while (0)
	REFUSED(gen, good.gen + 1);              /* an older or newer QP there */
	REFUSED(gen, 0);
	REFUSED(ia_uid, good.ia_uid ^ 1);        /* another IA */
	REFUSED(ia_fd, 0);                       /* not a memfd */
	REFUSED(ia_fd, 100000);                  /* no such fd */
	REFUSED(qp_off, 0);                      /* the IA region, not a UD QP region */
	REFUSED(qp_off, good.qp_off + 4096);     /* inside it, not its start */
	REFUSED(qp_off, good.ia_size);           /* beyond the arena */
	REFUSED(qp_off, UINT64_MAX - 4095);      /* wrapping */
	REFUSED(qp_size, good.ia_size);          /* larger than the arena */
	REFUSED(qp_size, 8);
	REFUSED(ia_size, 8);
	REFUSED(version, good.version + 1);
	REFUSED(pid, 0);
	REFUSED(pid, -1);
	gone = fork();
	CHK(gone >= 0);
	if (gone == 0)
		_exit(0);
	CHK(waitpid(gone, NULL, 0) == gone);
	REFUSED(pid, gone);                      /* a process that is gone */
#undef REFUSED
	udn_close(&a);
}

Test(ud, srq_refused)
{
	struct udn a;
	DAT_EP_ATTR attr;
	DAT_SRQ_HANDLE srq;
	DAT_SRQ_ATTR sa = { .max_recv_dtos = 16, .max_recv_iov = 1 };
	DAT_EP_HANDLE ep;

	zd_test_use_conf();
	udn_open(&a);
	CHK_RET(dat_srq_create(a.n.ia, a.n.pz, &sa, &srq), DAT_SUCCESS);
	ud_attr(&attr, 16);
	CHK(ZD_T_TYPE(dat_ep_create_with_srq(a.n.ia, a.n.pz, a.rcv, a.req, a.n.conn_evd, srq,
					     &attr, &ep)) == DAT_MODEL_NOT_SUPPORTED);
	udn_close(&a);
}

/* ---- two processes ---- */

#define TWO_ROUNDS 4   /* as dtestx -u: four exchanges each way on one EP */

/* Both sides of the two-process test: listen, connect TWO_ROUNDS times
 * to the other and accept its TWO_ROUNDS requests (the server accepts
 * first, as dtestx), then send four datagrams on the first handle and
 * receive four in order (cookies 3..6, as dtestx checks). */
static void two_side(int fd, bool server)
{
	struct udn u;
	struct ud_addr first = { 0 }, other;
	DAT_EP_HANDLE ep;
	DAT_CONN_QUAL peer_port;
	DAT_EVENT ev;
	int established = 0, passive = 0;

	udn_open(&u);
	ep = ud_ep(&u, 32);
	for (int i = 0; i < 4; i++)
		ud_recv(&u, ep, 4096 * i, GRH + 64, 3 + i);
	msg_send(fd, (uint32_t)u.port);
	peer_port = msg_recv(fd, 10000);
	if (!server)
		for (int i = 0; i < TWO_ROUNDS; i++)
			ud_connect(ep, peer_port, (uint32_t)i);
	for (int i = 0; i < TWO_ROUNDS; i++) {
		DAT_CR_HANDLE cr = ud_request(&u, (uint32_t)i);
		uint32_t echo = (uint32_t)i;

		CHK_RET(dat_cr_accept(cr, ep, sizeof(echo), &echo), DAT_SUCCESS);
	}
	if (server)
		for (int i = 0; i < TWO_ROUNDS; i++)
			ud_connect(ep, peer_port, (uint32_t)i);
	/* 2 x TWO_ROUNDS established events, active and passive mixed. */
	while (established < 2 * TWO_ROUNDS) {
		DAT_IB_EXTENSION_EVENT_DATA *x =
			(DAT_IB_EXTENSION_EVENT_DATA *)ev.event_extension_data;

		CHK(wait_ev(u.n.conn_evd, 10 * SEC, &ev) ==
		    (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED);
		CHK(ev.event_data.connect_event_data.ep_handle == ep);
		CHK(x->remote_ah.ah != NULL && x->context.as_64 != 0);
		other.ah = x->remote_ah;
		other.cm = x->context.as_64;
		if (x->type == DAT_IB_UD_PASSIVE_REMOTE_AH) {
			passive++;
			CHK_RET(dat_ib_ud_ah_free(ep, &other.ah), DAT_SUCCESS);
		} else {
			CHK(x->type == DAT_IB_UD_REMOTE_AH);
			CHK(ev.event_data.connect_event_data.private_data_size == 4);
			if (first.ah.ah)
				CHK_RET(dat_ib_ud_ah_free(ep, &other.ah), DAT_SUCCESS);
			else
				first = other;
		}
		CHK_RET(dat_ib_ud_cm_free(ep, other.cm), DAT_SUCCESS);
		established++;
	}
	CHK(passive == TWO_ROUNDS);
	msg_send(fd, 1);          /* both have a handle: datagrams may flow */
	CHK(msg_recv(fd, 10000) == 1);
	for (int i = 0; i < 4; i++) {
		fill_payload(&u, 65536 + 256 * i, 64, (uint8_t)(i + (server ? 100 : 0)));
		CHK_RET(ud_send(&u, ep, &first, 65536 + 256 * i, 64, i,
				DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	}
	for (int i = 0; i < 4; i++)
		expect_datagram(&u, ep, 3 + i, 4096 * i, 64, (uint8_t)(i + (server ? 0 : 100)));
	expect_none(u.req);
	msg_send(fd, 2);          /* done with the other's memory */
	CHK(msg_recv(fd, 10000) == 2);
	/* The stored handle is freed, then the EP with receives still posted. */
	for (int i = 0; i < 4; i++)
		ud_recv(&u, ep, 4096 * i, GRH + 64, 10 + i);
	CHK_RET(dat_ib_ud_ah_free(ep, &first.ah), DAT_SUCCESS);
	CHK_RET(dat_ep_free(ep), DAT_SUCCESS);
	udn_close(&u);
}

static int two_client(int fd, void *arg)
{
	(void)arg;
	two_side(fd, false);
	return 0;
}

Test(ud, two_processes_both_passive_and_active)
{
	int fd;
	pid_t pid;

	zd_test_use_conf();
	pid = spawn(two_client, NULL, &fd);
	two_side(fd, true);
	CHK(reap(pid, 20000) == 0);
	close(fd);
}

/* Senders in two processes race for one QP's receives: every datagram
 * lands in its own receive, each sender's in the order sent. */
#define RACE_N 3000

static int race_sender(int fd, void *arg)
{
	uint32_t id = (uint32_t)(uintptr_t)arg;
	struct udn u;
	struct ud_addr to;
	DAT_EP_HANDLE ep;
	DAT_CONN_QUAL port;

	udn_open(&u);
	ep = ud_ep(&u, 1);
	port = msg_recv(fd, 10000);
	ud_connect(ep, port, id);
	ud_established(&u, ep, DAT_IB_UD_REMOTE_AH, &id, &to);
	msg_send(fd, 1);
	CHK(msg_recv(fd, 10000) == 1);  /* go */
	for (uint32_t i = 0; i < RACE_N; i++) {
		uint32_t *p = (uint32_t *)(u.buf + 16 * (i % 1024));

		p[0] = id;
		p[1] = i;
		CHK_RET(ud_send(&u, ep, &to, 16 * (i % 1024), 8, i, DAT_COMPLETION_SUPPRESS_FLAG),
			DAT_SUCCESS);
	}
	msg_send(fd, 2);
	CHK(msg_recv(fd, 10000) == 2);
	udn_close(&u);
	return 0;
}

Test(ud, senders_in_two_processes_race_for_receives)
{
	struct udn r;
	DAT_EP_HANDLE ep;
	int fd[2];
	pid_t pid[2];
	uint32_t next[2] = { 0, 0 };
	const size_t slot = 64;

	zd_test_use_conf();
	/* Forked before this process opens anything (children of an open IA
	 * work too since the fork hooks, test_hostile_fork). */
	for (int s = 0; s < 2; s++)
		pid[s] = spawn(race_sender, (void *)(uintptr_t)s, &fd[s]);
	udn_open(&r);
	ep = ud_ep(&r, 2 * RACE_N);
	CHK((size_t)2 * RACE_N * slot <= UBUF);
	for (uint32_t i = 0; i < 2 * RACE_N; i++)
		ud_recv(&r, ep, slot * i, GRH + 8, i);
	for (int s = 0; s < 2; s++) {
		msg_send(fd[s], (uint32_t)r.port);
		uint32_t echo = (uint32_t)s;

		CHK_RET(dat_cr_accept(ud_request(&r, echo), ep, sizeof(echo), &echo), DAT_SUCCESS);
		{
			struct ud_addr back;

			ud_established(&r, ep, DAT_IB_UD_PASSIVE_REMOTE_AH, NULL, &back);
		}
		CHK(msg_recv(fd[s], 10000) == 1);
	}
	msg_send(fd[0], 1);
	msg_send(fd[1], 1);
	for (uint32_t i = 0; i < 2 * RACE_N; i++) {
		DAT_DTO_COMPLETION_EVENT_DATA d = ud_dto(r.rcv, DAT_IB_UD_RECV);
		uint32_t *p;

		CHK(d.status == DAT_DTO_SUCCESS && d.transfered_length == 8 + GRH);
		/* Receives complete in the order posted. */
		CHK(d.user_cookie.as_64 == i);
		p = (uint32_t *)(r.buf + slot * i + GRH);
		CHK(p[0] < 2);
		CHK(p[1] == next[p[0]]);
		next[p[0]]++;
	}
	CHK(next[0] == RACE_N && next[1] == RACE_N);
	CHK(dropped(ep) == 0);
	for (int s = 0; s < 2; s++) {
		msg_send(fd[s], 2);
		CHK(msg_recv(fd[s], 10000) == 2);
		CHK(reap(pid[s], 20000) == 0);
		close(fd[s]);
	}
	udn_close(&r);
}

/* The receiving process dies: datagrams to it are lost, the sender goes on. */
static int doomed_receiver(int fd, void *arg)
{
	struct udn u;
	DAT_EP_HANDLE ep;

	(void)arg;
	udn_open(&u);
	ep = ud_ep(&u, 8);
	for (int i = 0; i < 8; i++)
		ud_recv(&u, ep, 4096 * i, GRH + 64, i);
	msg_send(fd, (uint32_t)u.port);
	CHK_RET(dat_cr_accept(ud_request(&u, 5), ep, 0, NULL), DAT_SUCCESS);
	msg_recv(fd, 20000);   /* killed while waiting here */
	return 0;
}

Test(ud, receiver_process_killed)
{
	struct udn a;
	struct ud_addr to;
	DAT_EP_HANDLE ea;
	uint32_t tag = 5;
	int fd;
	pid_t pid;

	zd_test_use_conf();
	pid = spawn(doomed_receiver, NULL, &fd);  /* first: see the race test */
	udn_open(&a);
	ea = ud_ep(&a, 4);
	ud_connect(ea, msg_recv(fd, 10000), tag);
	ud_established(&a, ea, DAT_IB_UD_REMOTE_AH, NULL, &to);
	fill_payload(&a, 65536, 64, 1);
	CHK_RET(ud_send(&a, ea, &to, 65536, 64, 1, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	expect_sent(&a, ea, 1, DAT_DTO_SUCCESS, 64);
	kill(pid, SIGKILL);
	CHK(reap(pid, 5000) == 128 + SIGKILL);
	for (int i = 2; i < 12; i++) {
		CHK_RET(ud_send(&a, ea, &to, 65536, 64, i, DAT_COMPLETION_DEFAULT_FLAG),
			DAT_SUCCESS);
		expect_sent(&a, ea, i, DAT_DTO_SUCCESS, 64);
	}
	close(fd);
	udn_close(&a);
}
