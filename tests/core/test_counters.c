/*
 * The IB extension counters through libdat2 (dat_ib_query_counters,
 * dat_ib_print_counters, start/stop): two zdapl-shm IAs in one process,
 * connected by the connection manager; what is counted, exactly, on the
 * IA, the EPs and the EVDs; reset; one counter or all; print's lines; bad
 * handles, indices and pointers.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "zd_test_dat.h"
#include <dat2/dat_ib_extensions.h>

TestSuite(counters, .init = zd_test_use_conf);

#define SEC 1000000u  /* DAT timeouts are in microseconds */
#define DAT_ERROR(type, sub) ((DAT_RETURN)(DAT_CLASS_ERROR | (type) | (sub)))
#define BUF 4096

struct side {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, cr_evd, conn_evd, req_evd, rcv_evd;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;
	uint8_t *buf;
};

static uint8_t bufs[2][BUF] __attribute__((aligned(64)));

static void side_open(struct side *s, int which, DAT_COUNT conn_qlen)
{
	DAT_REGION_DESCRIPTION region;
	DAT_VLEN rlen;
	DAT_VADDR raddr;

	memset(s, 0, sizeof(*s));
	s->buf = bufs[which];
	region.for_va = s->buf;
	cr_assert_eq(zd_test_open("zdapl-shm", &s->ia, &s->async), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(s->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &s->cr_evd),
		     DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(s->ia, conn_qlen, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG,
				    &s->conn_evd),
		     DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(s->ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->req_evd),
		     DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(s->ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->rcv_evd),
		     DAT_SUCCESS);
	cr_assert_eq(dat_pz_create(s->ia, &s->pz), DAT_SUCCESS);
	cr_assert_eq(dat_ep_create(s->ia, s->pz, s->rcv_evd, s->req_evd, s->conn_evd, NULL, &s->ep),
		     DAT_SUCCESS);
	cr_assert_eq(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, BUF, s->pz,
				    DAT_MEM_PRIV_ALL_FLAG | DAT_IB_MEM_PRIV_REMOTE_ATOMIC,
				    DAT_VA_TYPE_VA, &s->lmr, &s->lctx,
				    &s->rctx, &rlen, &raddr),
		     DAT_SUCCESS);
}

/* The next event of @evd within @us: its number, or 0. */
static DAT_EVENT_NUMBER wait_ev(DAT_EVD_HANDLE evd, DAT_TIMEOUT us, DAT_EVENT *ev)
{
	DAT_COUNT nmore;
	DAT_EVENT tmp;

	if (!ev)
		ev = &tmp;
	memset(ev, 0, sizeof(*ev));
	if (dat_evd_wait(evd, us, 1, ev, &nmore) != DAT_SUCCESS)
		return 0;
	return ev->event_number;
}

static DAT_EP_STATE ep_state(DAT_EP_HANDLE ep)
{
	DAT_EP_STATE st = (DAT_EP_STATE)-1;
	DAT_BOOLEAN in, out;

	dat_ep_get_status(ep, &st, &in, &out);
	return st;
}

/* The server listens (dat_psp_create_any), the client connects to it on
 * 127.0.0.1 and the server accepts; both see ESTABLISHED on their
 * connection EVD unless @keep_conn_events (then they are left queued and
 * the EP states say when the connection is up). */
static void pair_connect(struct side *srv, struct side *cli, DAT_PSP_HANDLE *psp,
			 bool keep_conn_events)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	DAT_CONN_QUAL port;
	DAT_EVENT ev;

	cr_assert_eq(dat_psp_create_any(srv->ia, &port, srv->cr_evd, DAT_PSP_CONSUMER_FLAG, psp),
		     DAT_SUCCESS);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(dat_ep_connect(cli->ep, (DAT_IA_ADDRESS_PTR)&sa, port, 5 * SEC, 0, NULL,
				    DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		     DAT_SUCCESS);
	cr_assert_eq(wait_ev(srv->cr_evd, 5 * SEC, &ev), DAT_CONNECTION_REQUEST_EVENT);
	cr_assert_eq(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, srv->ep, 0, NULL),
		     DAT_SUCCESS);
	if (keep_conn_events) {
		for (int i = 0; i < 5000 && (ep_state(cli->ep) != DAT_EP_STATE_CONNECTED ||
					     ep_state(srv->ep) != DAT_EP_STATE_CONNECTED); i++)
			usleep(1000);
	} else {
		cr_assert_eq(wait_ev(cli->conn_evd, 5 * SEC, NULL), DAT_CONNECTION_EVENT_ESTABLISHED);
		cr_assert_eq(wait_ev(srv->conn_evd, 5 * SEC, NULL), DAT_CONNECTION_EVENT_ESTABLISHED);
	}
	cr_assert_eq(ep_state(cli->ep), DAT_EP_STATE_CONNECTED);
	cr_assert_eq(ep_state(srv->ep), DAT_EP_STATE_CONNECTED);
}

/* A TCP port nobody listens on (right now). */
static DAT_CONN_QUAL free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

/* Counter @idx of @h.  A query of one counter writes out[idx] (as OFED
 * dapl's), so the array has room for every index. */
static uint64_t cnt(DAT_HANDLE h, int idx)
{
	DAT_UINT64 v[DCNT_IA_ALL_COUNTERS];

	v[idx] = 0xdeadbeef;
	cr_assert_eq(dat_ib_query_counters(h, idx, v, 0), DAT_SUCCESS, "counter %d", idx);
	return v[idx];
}

/* Counter @idx of @h is @want (a message may follow). */
#define expect_cnt(h, idx, want, ...)                                               \
	do {                                                                        \
		uint64_t v_ = cnt((h), (idx)), w_ = (uint64_t)(want);               \
		cr_assert_eq(v_, w_, #h " " #idx " = %llu, want %llu " __VA_ARGS__, \
			     (unsigned long long)v_, (unsigned long long)w_);       \
	} while (0)

/* Polls @evd until @n events came; returns the dequeue calls it made. */
static unsigned drain(DAT_EVD_HANDLE evd, unsigned n, DAT_EVENT *last)
{
	unsigned calls = 0, got = 0;
	DAT_EVENT ev;

	while (got < n) {
		DAT_RETURN r = dat_evd_dequeue(evd, &ev);

		calls++;
		cr_assert_lt(calls, 10000000u, "no completion");
		if (r == DAT_SUCCESS) {
			cr_assert_eq(ev.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
			got++;
			if (last)
				*last = ev;
		} else {
			cr_assert_eq(r, DAT_QUEUE_EMPTY);
		}
	}
	return calls;
}

static DAT_LMR_TRIPLET seg(const struct side *s, size_t off, DAT_VLEN len)
{
	return (DAT_LMR_TRIPLET){ .lmr_context = s->lctx, .virtual_address = (DAT_VADDR)(uintptr_t)(s->buf + off),
				  .segment_length = len };
}

static DAT_RMR_TRIPLET remote(const struct side *s, size_t off, DAT_VLEN len)
{
	return (DAT_RMR_TRIPLET){ .rmr_context = s->rctx,
				  .virtual_address = (DAT_VADDR)(uintptr_t)(s->buf + off),
				  .segment_length = len };
}

static DAT_DTO_COOKIE cookie(uint64_t v)
{
	return (DAT_DTO_COOKIE){ .as_64 = v };
}

/* ---- the objects an IA counts ---- */

Test(counters, ia_counts_object_lifetimes_requests_and_the_cm)
{
	struct side srv, cli;
	DAT_PSP_HANDLE psp, psp2;
	DAT_RSP_HANDLE rsp;
	DAT_RMR_HANDLE rmr;
	DAT_SRQ_HANDLE srq;
	DAT_EP_HANDLE rsp_ep;
	DAT_SRQ_ATTR sattr = { .max_recv_dtos = 4, .max_recv_iov = 1 };
	DAT_CONN_QUAL port;
	DAT_UINT64 all[DCNT_IA_ALL_COUNTERS + 1];

	side_open(&srv, 0, 8);
	side_open(&cli, 1, 8);
	/* dat_ia_open's async EVD and the four EVDs side_open makes. */
	expect_cnt(srv.ia, DCNT_IA_EVD_CREATE, 5);
	expect_cnt(srv.ia, DCNT_IA_PZ_CREATE, 1);
	expect_cnt(srv.ia, DCNT_IA_EP_CREATE, 1);
	expect_cnt(srv.ia, DCNT_IA_LMR_CREATE, 1);

	pair_connect(&srv, &cli, &psp, false);
	expect_cnt(srv.ia, DCNT_IA_PSP_CREATE_ANY, 1);
	expect_cnt(srv.ia, DCNT_IA_PSP_CREATE, 0);
	expect_cnt(srv.ia, DCNT_IA_SP_CR, 1);
	expect_cnt(srv.ia, DCNT_IA_SP_CR_ACCEPTED, 1);
	expect_cnt(srv.ia, DCNT_IA_SP_CR_REJECTED, 0);
	/* The connection manager's messages, each side's. */
	expect_cnt(srv.ia, DCNT_IA_CM_LISTEN, 1);
	expect_cnt(srv.ia, DCNT_IA_CM_REQ_RX, 1);
	expect_cnt(srv.ia, DCNT_IA_CM_REP_TX, 1);
	expect_cnt(srv.ia, DCNT_IA_CM_RTU_RX, 1);
	expect_cnt(srv.ia, DCNT_IA_CM_PASSIVE_EST, 1);
	expect_cnt(srv.ia, DCNT_IA_CM_ACTIVE_EST, 0);
	expect_cnt(cli.ia, DCNT_IA_CM_REQ_TX, 1);
	expect_cnt(cli.ia, DCNT_IA_CM_REP_RX, 1);
	expect_cnt(cli.ia, DCNT_IA_CM_RTU_TX, 1);
	expect_cnt(cli.ia, DCNT_IA_CM_ACTIVE_EST, 1);
	expect_cnt(cli.ia, DCNT_IA_CM_LISTEN, 0);
	expect_cnt(cli.ep, DCNT_EP_CONNECT, 1);
	expect_cnt(srv.ep, DCNT_EP_CONNECT, 0, "the passive side accepted");
	expect_cnt(cli.conn_evd, DCNT_EVD_CONN_CALLBACK, 1);
	expect_cnt(srv.conn_evd, DCNT_EVD_CONN_CALLBACK, 1);

	/* A second listener on a port of our choosing, an RSP, an RMR, an
	 * SRQ, and a request the consumer rejects. */
	cr_assert_eq(dat_psp_create_any(srv.ia, &port, srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp2),
		     DAT_SUCCESS);
	cr_assert_eq(dat_psp_free(psp2), DAT_SUCCESS);
	cr_assert_eq(dat_psp_create(srv.ia, port, srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp2),
		     DAT_SUCCESS);
	cr_assert_eq(dat_ep_create(srv.ia, srv.pz, srv.rcv_evd, srv.req_evd, srv.conn_evd, NULL,
				   &rsp_ep),
		     DAT_SUCCESS);
	cr_assert_eq(dat_rsp_create(srv.ia, free_port(), rsp_ep, srv.cr_evd, &rsp), DAT_SUCCESS);
	cr_assert_eq(dat_rmr_create(srv.pz, &rmr), DAT_SUCCESS);
	cr_assert_eq(dat_srq_create(srv.ia, srv.pz, &sattr, &srq), DAT_SUCCESS);
	{
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		DAT_EP_HANDLE cep;
		DAT_EVENT ev;

		cr_assert_eq(dat_ep_create(cli.ia, cli.pz, cli.rcv_evd, cli.req_evd, cli.conn_evd,
					   NULL, &cep),
			     DAT_SUCCESS);
		cr_assert_eq(dat_ep_connect(cep, (DAT_IA_ADDRESS_PTR)&sa, port, 5 * SEC, 0, NULL,
					    DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
			     DAT_SUCCESS);
		cr_assert_eq(wait_ev(srv.cr_evd, 5 * SEC, &ev), DAT_CONNECTION_REQUEST_EVENT);
		cr_assert_eq(dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle, 0, NULL),
			     DAT_SUCCESS);
		cr_assert_eq(wait_ev(cli.conn_evd, 5 * SEC, NULL), DAT_CONNECTION_EVENT_PEER_REJECTED);
		cr_assert_eq(dat_ep_free(cep), DAT_SUCCESS);
	}
	expect_cnt(srv.ia, DCNT_IA_PSP_CREATE_ANY, 2);
	expect_cnt(srv.ia, DCNT_IA_PSP_CREATE, 1);
	expect_cnt(srv.ia, DCNT_IA_PSP_FREE, 1);
	expect_cnt(srv.ia, DCNT_IA_RSP_CREATE, 1);
	expect_cnt(srv.ia, DCNT_IA_RMR_CREATE, 1);
	expect_cnt(srv.ia, DCNT_IA_SRQ_CREATE, 1);
	expect_cnt(srv.ia, DCNT_IA_EP_CREATE, 2);
	expect_cnt(srv.ia, DCNT_IA_SP_CR, 2);
	expect_cnt(srv.ia, DCNT_IA_SP_CR_ACCEPTED, 1);
	expect_cnt(srv.ia, DCNT_IA_SP_CR_REJECTED, 1);
	expect_cnt(srv.ia, DCNT_IA_CM_USER_REJ_TX, 1);
	expect_cnt(cli.ia, DCNT_IA_CM_USER_REJ_RX, 1);
	expect_cnt(cli.ia, DCNT_IA_EP_CREATE, 2);
	expect_cnt(cli.ia, DCNT_IA_EP_FREE, 1);
	expect_cnt(cli.ep, DCNT_EP_CONNECT, 1, "the other EP connected");

	/* The frees. */
	cr_assert_eq(dat_srq_free(srq), DAT_SUCCESS);
	cr_assert_eq(dat_rmr_free(rmr), DAT_SUCCESS);
	cr_assert_eq(dat_rsp_free(rsp), DAT_SUCCESS);
	cr_assert_eq(dat_ep_free(rsp_ep), DAT_SUCCESS);
	cr_assert_eq(dat_psp_free(psp2), DAT_SUCCESS);
	cr_assert_eq(dat_psp_free(psp), DAT_SUCCESS);
	cr_assert_eq(dat_ep_disconnect(srv.ep, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	cr_assert_eq(dat_ep_free(srv.ep), DAT_SUCCESS);
	cr_assert_eq(dat_lmr_free(srv.lmr), DAT_SUCCESS);
	cr_assert_eq(dat_evd_free(srv.rcv_evd), DAT_SUCCESS);
	cr_assert_eq(dat_pz_free(srv.pz), DAT_SUCCESS);

	/* All at once: exactly DCNT_IA_ALL_COUNTERS words written. */
	memset(all, 0xa5, sizeof(all));
	cr_assert_eq(dat_ib_query_counters(srv.ia, DCNT_IA_ALL_COUNTERS, all, 0), DAT_SUCCESS);
	cr_assert_eq(all[DCNT_IA_ALL_COUNTERS], 0xa5a5a5a5a5a5a5a5ull);
	cr_assert_eq(all[DCNT_IA_PZ_CREATE], 1);
	cr_assert_eq(all[DCNT_IA_PZ_FREE], 1);
	cr_assert_eq(all[DCNT_IA_LMR_CREATE], 1);
	cr_assert_eq(all[DCNT_IA_LMR_FREE], 1);
	cr_assert_eq(all[DCNT_IA_RMR_CREATE], 1);
	cr_assert_eq(all[DCNT_IA_RMR_FREE], 1);
	cr_assert_eq(all[DCNT_IA_PSP_CREATE], 1);
	cr_assert_eq(all[DCNT_IA_PSP_CREATE_ANY], 2);
	cr_assert_eq(all[DCNT_IA_PSP_FREE], 3);
	cr_assert_eq(all[DCNT_IA_RSP_CREATE], 1);
	cr_assert_eq(all[DCNT_IA_RSP_FREE], 1);
	cr_assert_eq(all[DCNT_IA_EVD_CREATE], 5);
	cr_assert_eq(all[DCNT_IA_EVD_FREE], 1);
	cr_assert_eq(all[DCNT_IA_EP_CREATE], 2);
	cr_assert_eq(all[DCNT_IA_EP_FREE], 2);
	cr_assert_eq(all[DCNT_IA_SRQ_CREATE], 1);
	cr_assert_eq(all[DCNT_IA_SRQ_FREE], 1);
	cr_assert_eq(all[DCNT_IA_SP_CR], 2);
	cr_assert_eq(all[DCNT_IA_CM_LISTEN], 4, "three PSPs and an RSP");
	cr_assert_eq(all[DCNT_IA_ASYNC_ERROR], 0);
	/* No link or diagnostics counters exist here. */
	for (int i = DCNT_IA_LNK_ERR_RCV; i < DCNT_IA_ALL_COUNTERS; i++)
		cr_assert_eq(all[i], 0, "counter %d", i);
	cr_assert_eq(dat_ia_close(srv.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	cr_assert_eq(dat_ia_close(cli.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

/* ---- what an EP counts: its posts ---- */

Test(counters, ep_counts_posts_and_bytes_the_device_took)
{
	struct side srv, cli;
	DAT_PSP_HANDLE psp;
	DAT_LMR_TRIPLET iov[2];
	DAT_RMR_TRIPLET rmt;
	DAT_EVENT ev;
	DAT_UINT64 all[DCNT_EP_ALL_COUNTERS + 1];

	side_open(&srv, 0, 8);
	side_open(&cli, 1, 8);
	pair_connect(&srv, &cli, &psp, false);

	/* Three receives of 64 bytes; two sends, one of two segments. */
	for (int i = 0; i < 3; i++) {
		iov[0] = seg(&srv, 64 * (size_t)i, 64);
		cr_assert_eq(dat_ep_post_recv(srv.ep, 1, iov, cookie(10 + i),
					      DAT_COMPLETION_DEFAULT_FLAG),
			     DAT_SUCCESS);
	}
	iov[0] = seg(&cli, 0, 8);
	cr_assert_eq(dat_ep_post_send(cli.ep, 1, iov, cookie(1), DAT_COMPLETION_DEFAULT_FLAG),
		     DAT_SUCCESS);
	iov[0] = seg(&cli, 64, 10);
	iov[1] = seg(&cli, 128, 6);
	cr_assert_eq(dat_ep_post_send(cli.ep, 2, iov, cookie(2), DAT_COMPLETION_DEFAULT_FLAG),
		     DAT_SUCCESS);
	/* Three 8-byte writes and a 32-byte read. */
	for (int i = 0; i < 3; i++) {
		iov[0] = seg(&cli, 256, 8);
		rmt = remote(&srv, 1024, 8);
		cr_assert_eq(dat_ep_post_rdma_write(cli.ep, 1, iov, cookie(3), &rmt,
						    DAT_COMPLETION_DEFAULT_FLAG),
			     DAT_SUCCESS);
	}
	iov[0] = seg(&cli, 512, 32);
	rmt = remote(&srv, 2048, 32);
	cr_assert_eq(dat_ep_post_rdma_read(cli.ep, 1, iov, cookie(4), &rmt,
					   DAT_COMPLETION_DEFAULT_FLAG),
		     DAT_SUCCESS);
	/* Refused posts are not counted. */
	cr_assert_eq(DAT_GET_TYPE(dat_ep_post_rdma_write(cli.ep, 1, iov, cookie(5), &rmt, 0x4000)),
		     DAT_INVALID_PARAMETER);
	cr_assert_eq(DAT_GET_TYPE(dat_ep_post_send(cli.ep, 1, NULL, cookie(5),
						   DAT_COMPLETION_DEFAULT_FLAG)),
		     DAT_INVALID_PARAMETER);
	cr_assert_eq(DAT_GET_TYPE(dat_ep_post_recv(srv.ep, 1, iov, cookie(5), 0x4000)),
		     DAT_INVALID_PARAMETER);
	/* The extension posts: a write with immediate data (it takes the third
	 * receive), the two atomics; an atomic refused (misaligned) is not
	 * counted. */
	iov[0] = seg(&cli, 768, 8);
	rmt = remote(&srv, 2560, 8);
	cr_assert_eq(dat_ib_post_rdma_write_immed(cli.ep, 1, iov, cookie(6), &rmt, 0x1234,
						  DAT_COMPLETION_DEFAULT_FLAG),
		     DAT_SUCCESS);
	iov[0] = seg(&cli, 1024, 8);
	rmt = remote(&srv, 3072, 8);
	cr_assert_eq(dat_ib_post_fetch_and_add(cli.ep, 1, iov, cookie(7), &rmt,
					       DAT_COMPLETION_DEFAULT_FLAG),
		     DAT_SUCCESS);
	cr_assert_eq(dat_ib_post_cmp_and_swap(cli.ep, 1, 2, iov, cookie(8), &rmt,
					      DAT_COMPLETION_DEFAULT_FLAG),
		     DAT_SUCCESS);
	rmt = remote(&srv, 3076, 8);
	cr_assert_eq(DAT_GET_TYPE(dat_ib_post_fetch_and_add(cli.ep, 1, iov, cookie(9), &rmt,
							    DAT_COMPLETION_DEFAULT_FLAG)),
		     DAT_INVALID_PARAMETER);
	drain(cli.req_evd, 9, NULL);
	drain(srv.rcv_evd, 3, &ev);

	expect_cnt(cli.ep, DCNT_EP_POST_SEND, 2);
	expect_cnt(cli.ep, DCNT_EP_POST_SEND_DATA, 24);
	expect_cnt(cli.ep, DCNT_EP_POST_WRITE, 3);
	expect_cnt(cli.ep, DCNT_EP_POST_WRITE_DATA, 24);
	expect_cnt(cli.ep, DCNT_EP_POST_READ, 1);
	expect_cnt(cli.ep, DCNT_EP_POST_READ_DATA, 32);
	expect_cnt(cli.ep, DCNT_EP_POST_WRITE_IMM, 1);
	expect_cnt(cli.ep, DCNT_EP_POST_WRITE_IMM_DATA, 8);
	expect_cnt(cli.ep, DCNT_EP_POST_FETCH_ADD, 1);
	expect_cnt(cli.ep, DCNT_EP_POST_CMP_SWAP, 1);
	expect_cnt(cli.ep, DCNT_EP_POST_RECV, 0);
	expect_cnt(srv.ep, DCNT_EP_POST_RECV, 3);
	expect_cnt(srv.ep, DCNT_EP_POST_RECV_DATA, 192);
	expect_cnt(srv.ep, DCNT_EP_POST_SEND, 0);

	/* All at once: exactly DCNT_EP_ALL_COUNTERS words. */
	memset(all, 0xa5, sizeof(all));
	cr_assert_eq(dat_ib_query_counters(cli.ep, DCNT_EP_ALL_COUNTERS, all, 0), DAT_SUCCESS);
	cr_assert_eq(all[DCNT_EP_ALL_COUNTERS], 0xa5a5a5a5a5a5a5a5ull);
	cr_assert_eq(all[DCNT_EP_CONNECT], 1);
	cr_assert_eq(all[DCNT_EP_DISCONNECT], 0);
	cr_assert_eq(all[DCNT_EP_POST_SEND], 2);
	cr_assert_eq(all[DCNT_EP_POST_SEND_DATA], 24);
	cr_assert_eq(all[DCNT_EP_POST_SEND_UD], 0);
	cr_assert_eq(all[DCNT_EP_POST_WRITE], 3);
	cr_assert_eq(all[DCNT_EP_POST_WRITE_DATA], 24);
	cr_assert_eq(all[DCNT_EP_POST_WRITE_IMM], 1);
	cr_assert_eq(all[DCNT_EP_POST_WRITE_IMM_DATA], 8);
	cr_assert_eq(all[DCNT_EP_POST_READ], 1);
	cr_assert_eq(all[DCNT_EP_POST_READ_DATA], 32);
	cr_assert_eq(all[DCNT_EP_POST_CMP_SWAP], 1);
	cr_assert_eq(all[DCNT_EP_POST_FETCH_ADD], 1);
	for (int i = DCNT_EP_RECV; i < DCNT_EP_ALL_COUNTERS; i++)
		cr_assert_eq(all[i], 0, "counter %d: receives are not counted", i);

	cr_assert_eq(dat_ep_disconnect(cli.ep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	cr_assert_eq(wait_ev(cli.conn_evd, 5 * SEC, NULL), DAT_CONNECTION_EVENT_DISCONNECTED);
	cr_assert_eq(wait_ev(srv.conn_evd, 5 * SEC, NULL), DAT_CONNECTION_EVENT_DISCONNECTED);
	expect_cnt(cli.ep, DCNT_EP_DISCONNECT, 1);
	expect_cnt(srv.ep, DCNT_EP_DISCONNECT, 0);
	expect_cnt(cli.ia, DCNT_IA_CM_DREQ_TX, 1);
	expect_cnt(srv.ia, DCNT_IA_CM_DREQ_RX, 1);
	expect_cnt(srv.ia, DCNT_IA_CM_DREP_TX, 1);
	expect_cnt(cli.ia, DCNT_IA_CM_DREP_RX, 1);
	expect_cnt(cli.conn_evd, DCNT_EVD_CONN_CALLBACK, 2);
	expect_cnt(srv.conn_evd, DCNT_EVD_CONN_CALLBACK, 2);
	cr_assert_eq(dat_ia_close(srv.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	cr_assert_eq(dat_ia_close(cli.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

/* ---- what an EVD counts: its consumer's dequeues and waits ---- */

static DAT_EVENT se(uint64_t n)
{
	DAT_EVENT ev = { .event_number = DAT_SOFTWARE_EVENT };

	ev.event_data.software_event_data.pointer = (DAT_PVOID)(uintptr_t)n;
	return ev;
}

Test(counters, evd_counts_dequeues_without_a_cq)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, evd;
	DAT_EVENT ev = se(1);
	DAT_UINT64 all[DCNT_EVD_ALL_COUNTERS + 1];

	cr_assert_eq(zd_test_open("zdapl-shm", &ia, &async), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia, 4, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd),
		     DAT_SUCCESS);
	/* Empty, and no CQ to poll: NOT_FOUND. */
	for (int i = 0; i < 3; i++)
		cr_assert_eq(dat_evd_dequeue(evd, &ev), DAT_QUEUE_EMPTY);
	ev = se(1);
	cr_assert_eq(dat_evd_post_se(evd, &ev), DAT_SUCCESS);
	cr_assert_eq(dat_evd_post_se(evd, &ev), DAT_SUCCESS);
	cr_assert_eq(dat_evd_dequeue(evd, &ev), DAT_SUCCESS);
	cr_assert_eq(dat_evd_dequeue(evd, &ev), DAT_SUCCESS);
	/* Errors before the EVD is reached are not dequeues. */
	cr_assert_eq(DAT_GET_TYPE(dat_evd_dequeue(evd, NULL)), DAT_INVALID_PARAMETER);

	memset(all, 0xa5, sizeof(all));
	cr_assert_eq(dat_ib_query_counters(evd, DCNT_EVD_ALL_COUNTERS, all, 0), DAT_SUCCESS);
	cr_assert_eq(all[DCNT_EVD_ALL_COUNTERS], 0xa5a5a5a5a5a5a5a5ull);
	cr_assert_eq(all[DCNT_EVD_DEQUEUE], 5);
	cr_assert_eq(all[DCNT_EVD_DEQUEUE_FOUND], 2);
	cr_assert_eq(all[DCNT_EVD_DEQUEUE_NOT_FOUND], 3);
	cr_assert_eq(all[DCNT_EVD_DEQUEUE_POLL], 0);
	cr_assert_eq(all[DCNT_EVD_DEQUEUE_POLL_FOUND], 0);
	cr_assert_eq(all[DCNT_EVD_WAIT], 0);
	cr_assert_eq(all[DCNT_EVD_CONN_CALLBACK], 0);
	cr_assert_eq(all[DCNT_EVD_DTO_CALLBACK], 0);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

Test(counters, evd_counts_dequeues_and_polls_of_a_dto_evd)
{
	struct side srv, cli;
	DAT_PSP_HANDLE psp;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET rmt = { 0 };
	DAT_EVENT ev;
	uint64_t found, poll;
	unsigned calls;

	side_open(&srv, 0, 8);
	side_open(&cli, 1, 8);
	pair_connect(&srv, &cli, &psp, false);
	/* Nothing outstanding: a dequeue polls the CQ, in vain. */
	cr_assert_eq(dat_evd_dequeue(cli.req_evd, &ev), DAT_QUEUE_EMPTY);
	expect_cnt(cli.req_evd, DCNT_EVD_DEQUEUE, 1);
	expect_cnt(cli.req_evd, DCNT_EVD_DEQUEUE_POLL, 1);
	expect_cnt(cli.req_evd, DCNT_EVD_DEQUEUE_FOUND, 0);
	expect_cnt(cli.req_evd, DCNT_EVD_DEQUEUE_NOT_FOUND, 0, "it has a CQ");

	for (int i = 0; i < 5; i++) {
		iov = seg(&cli, 0, 8);
		rmt = remote(&srv, 64, 8);
		cr_assert_eq(dat_ep_post_rdma_write(cli.ep, 1, &iov, cookie(i), &rmt,
						    DAT_COMPLETION_DEFAULT_FLAG),
			     DAT_SUCCESS);
	}
	calls = drain(cli.req_evd, 5, NULL);
	found = cnt(cli.req_evd, DCNT_EVD_DEQUEUE_FOUND);
	poll = cnt(cli.req_evd, DCNT_EVD_DEQUEUE_POLL);
	/* Every dequeue either found an event queued or polled the CQ. */
	expect_cnt(cli.req_evd, DCNT_EVD_DEQUEUE, 1 + calls);
	cr_assert_eq(found + poll, 1 + calls);
	expect_cnt(cli.req_evd, DCNT_EVD_DEQUEUE_NOT_FOUND, 0);
	expect_cnt(cli.req_evd, DCNT_EVD_WAIT, 0);
	/* The receive side's EVD saw none of it. */
	expect_cnt(srv.rcv_evd, DCNT_EVD_DEQUEUE, 0);
	cr_assert_eq(dat_ia_close(srv.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	cr_assert_eq(dat_ia_close(cli.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

struct waiter_arg {
	DAT_EVD_HANDLE evd;
	DAT_RETURN ret;
};

static void *wait_thread(void *p)
{
	struct waiter_arg *a = p;
	DAT_EVENT ev;
	DAT_COUNT nmore;

	a->ret = dat_evd_wait(a->evd, 10 * SEC, 1, &ev, &nmore);
	return NULL;
}

Test(counters, evd_counts_waits_and_dequeues_refused_for_a_waiter)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, evd, dto;
	DAT_EVENT ev = se(7);
	DAT_COUNT nmore;
	struct waiter_arg a;
	pthread_t t;
	unsigned refused = 0;
	DAT_RETURN r;

	cr_assert_eq(zd_test_open("zdapl-shm", &ia, &async), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia, 4, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd),
		     DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia, 4, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &dto), DAT_SUCCESS);
	/* An event ready: a wait that does not block. */
	cr_assert_eq(dat_evd_post_se(evd, &ev), DAT_SUCCESS);
	cr_assert_eq(dat_evd_wait(evd, 0, 1, &ev, &nmore), DAT_SUCCESS);
	expect_cnt(evd, DCNT_EVD_WAIT, 1);
	expect_cnt(evd, DCNT_EVD_WAIT_BLOCKED, 0);
	/* Nothing, and a timeout of 0: it arms a DTO EVD's CQ but does not sleep. */
	cr_assert_eq(DAT_GET_TYPE(dat_evd_wait(dto, 0, 1, &ev, &nmore)), DAT_TIMEOUT_EXPIRED);
	expect_cnt(dto, DCNT_EVD_WAIT, 1);
	expect_cnt(dto, DCNT_EVD_WAIT_NOTIFY, 1);
	expect_cnt(dto, DCNT_EVD_WAIT_BLOCKED, 0);
	/* Bad arguments are no waits. */
	cr_assert_eq(DAT_GET_TYPE(dat_evd_wait(evd, 0, 0, &ev, &nmore)), DAT_INVALID_PARAMETER);
	expect_cnt(evd, DCNT_EVD_WAIT, 1);

	/* A waiter that sleeps, and dequeues refused while it does. */
	a.evd = evd;
	a.ret = -1;
	cr_assert_eq(pthread_create(&t, NULL, wait_thread, &a), 0);
	do {
		r = dat_evd_dequeue(evd, &ev);
		if (r == DAT_QUEUE_EMPTY) {
			usleep(100);
			continue;
		}
		cr_assert_eq(r, DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER));
		refused++;
	} while (refused == 0);
	/* Wait until it sleeps. */
	for (int i = 0; i < 5000 && cnt(evd, DCNT_EVD_WAIT_BLOCKED) == 0; i++)
		usleep(1000);
	expect_cnt(evd, DCNT_EVD_WAIT_BLOCKED, 1);
	ev = se(8);
	cr_assert_eq(dat_evd_post_se(evd, &ev), DAT_SUCCESS);
	pthread_join(t, NULL);
	cr_assert_eq(a.ret, DAT_SUCCESS);
	expect_cnt(evd, DCNT_EVD_WAIT, 2);
	expect_cnt(evd, DCNT_EVD_WAIT_NOTIFY, 0, "a software EVD has no CQ to arm");
	/* Every dequeue made counts, the refused ones too, as in OFED dapl. */
	cr_assert_geq(cnt(evd, DCNT_EVD_DEQUEUE), refused);
	expect_cnt(evd, DCNT_EVD_DEQUEUE, refused + cnt(evd, DCNT_EVD_DEQUEUE_NOT_FOUND) + cnt(evd, DCNT_EVD_DEQUEUE_FOUND));
	expect_cnt(evd, DCNT_EVD_DEQUEUE_FOUND, 0);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

/* ---- async errors, the pool ---- */

Test(counters, ia_counts_async_errors_by_kind)
{
	struct side srv, cli;
	DAT_PSP_HANDLE psp;
	DAT_LMR_TRIPLET iov;
	DAT_EVENT ev;

	side_open(&srv, 0, 8);
	side_open(&cli, 1, 1);  /* room for one connection event */
	pair_connect(&srv, &cli, &psp, true);
	/* A soft high watermark already exceeded: the provider's async event
	 * (reason DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT), neither EVD nor EP error. */
	for (int i = 0; i < 3; i++) {
		iov = seg(&srv, 64 * (size_t)i, 64);
		cr_assert_eq(dat_ep_post_recv(srv.ep, 1, &iov, cookie(i), DAT_COMPLETION_DEFAULT_FLAG),
			     DAT_SUCCESS);
	}
	cr_assert_eq(dat_ep_set_watermark(srv.ep, 1, DAT_WATERMARK_INFINITE), DAT_SUCCESS);
	cr_assert_eq(wait_ev(srv.async, 5 * SEC, &ev), DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR);
	expect_cnt(srv.ia, DCNT_IA_ASYNC_ERROR, 1);
	expect_cnt(srv.ia, DCNT_IA_ASYNC_CQ_ERROR, 0);
	expect_cnt(srv.ia, DCNT_IA_ASYNC_QP_ERROR, 0);
	/* ESTABLISHED fills the client's connection EVD; DISCONNECTED spills:
	 * an EVD overflow, an async error about an EVD (OFED: a CQ's). */
	cr_assert_eq(dat_ep_disconnect(cli.ep, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	cr_assert_eq(wait_ev(cli.async, 5 * SEC, &ev), DAT_ASYNC_ERROR_EVD_OVERFLOW);
	expect_cnt(cli.ia, DCNT_IA_ASYNC_CQ_ERROR, 1);
	expect_cnt(cli.ia, DCNT_IA_ASYNC_ERROR, 0);
	expect_cnt(cli.conn_evd, DCNT_EVD_CONN_CALLBACK, 2);
	cr_assert_eq(dat_ia_close(srv.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	cr_assert_eq(dat_ia_close(cli.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

Test(counters, ia_counts_the_pool_calls_since_it_opened)
{
	void *(*mem_alloc)(size_t);
	void (*mem_free)(void *);
	DAT_IA_HANDLE ia, ia2;
	DAT_EVD_HANDLE async, async2;
	void *a, *b, *c;

	cr_assert_eq(zd_test_open("zdapl-shm", &ia, &async), DAT_SUCCESS);
	/* libdat2 loaded libzdapl RTLD_GLOBAL (README "Registered memory"). */
	mem_alloc = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "zdapl_mem_alloc");
	mem_free = (void (*)(void *))dlsym(RTLD_DEFAULT, "zdapl_mem_free");
	cr_assert(mem_alloc && mem_free, "libzdapl exports the pool");
	a = mem_alloc(100);
	cr_assert_not_null(a);
	cr_assert_eq(zd_test_open("zdapl-shm", &ia2, &async2), DAT_SUCCESS);
	b = mem_alloc(4096);
	c = mem_alloc(1);
	cr_assert(b && c);
	mem_free(a);
	mem_free(NULL);  /* not a free of pool memory */
	expect_cnt(ia, DCNT_IA_MEM_ALLOC, 3);
	expect_cnt(ia, DCNT_IA_MEM_ALLOC_DATA, 4197);
	expect_cnt(ia, DCNT_IA_MEM_FREE, 1);
	/* The second IA counts from its own open on. */
	expect_cnt(ia2, DCNT_IA_MEM_ALLOC, 2);
	expect_cnt(ia2, DCNT_IA_MEM_ALLOC_DATA, 4097);
	expect_cnt(ia2, DCNT_IA_MEM_FREE, 1);
	mem_free(b);
	mem_free(c);
	cr_assert_eq(dat_ia_close(ia2, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

/* ---- print, reset, one counter or all ---- */

/* What dat_ib_print_counters(@h, @idx, @reset) writes on stdout. */
static char *print_output(DAT_HANDLE h, int idx, int reset, DAT_RETURN *ret)
{
	static char out[16384];
	int fds[2], saved;
	ssize_t n, len = 0;

	cr_assert_eq(pipe(fds), 0);
	fflush(stdout);
	saved = dup(STDOUT_FILENO);
	dup2(fds[1], STDOUT_FILENO);
	*ret = dat_ib_print_counters(h, idx, reset);
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	close(fds[1]);
	while ((n = read(fds[0], out + len, sizeof(out) - 1 - (size_t)len)) > 0)
		len += n;
	close(fds[0]);
	out[len] = '\0';
	return out;
}

static int lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}



Test(counters, reset_zeroes_what_was_read_and_only_that)
{
	struct side srv, cli;
	DAT_PSP_HANDLE psp;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET rmt;
	DAT_UINT64 all[DCNT_EP_ALL_COUNTERS], one[DCNT_EP_ALL_COUNTERS];
	DAT_RETURN r;

	side_open(&srv, 0, 8);
	side_open(&cli, 1, 8);
	pair_connect(&srv, &cli, &psp, false);
	iov = seg(&cli, 0, 8);
	rmt = remote(&srv, 64, 8);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(dat_ep_post_rdma_write(cli.ep, 1, &iov, cookie(i), &rmt,
						    DAT_COMPLETION_DEFAULT_FLAG),
			     DAT_SUCCESS);
	drain(cli.req_evd, 4, NULL);

	/* One counter: only out[that index] is written, only it is reset. */
	memset(one, 0xa5, sizeof(one));
	cr_assert_eq(dat_ib_query_counters(cli.ep, DCNT_EP_POST_WRITE, one, 1), DAT_SUCCESS);
	for (int i = 0; i < DCNT_EP_ALL_COUNTERS; i++)
		cr_assert_eq(one[i], i == DCNT_EP_POST_WRITE ? 4 : 0xa5a5a5a5a5a5a5a5ull,
			     "out[%d]", i);
	expect_cnt(cli.ep, DCNT_EP_POST_WRITE, 0);
	expect_cnt(cli.ep, DCNT_EP_POST_WRITE_DATA, 32);
	expect_cnt(cli.ep, DCNT_EP_CONNECT, 1);

	/* Counting goes on from the reset. */
	cr_assert_eq(dat_ep_post_rdma_write(cli.ep, 1, &iov, cookie(9), &rmt,
					    DAT_COMPLETION_DEFAULT_FLAG),
		     DAT_SUCCESS);
	drain(cli.req_evd, 1, NULL);
	expect_cnt(cli.ep, DCNT_EP_POST_WRITE, 1);
	expect_cnt(cli.ep, DCNT_EP_POST_WRITE_DATA, 40);

	/* All, with reset: what it returns is what was there; then zeros. */
	cr_assert_eq(dat_ib_query_counters(cli.ep, DCNT_EP_ALL_COUNTERS, all, 1), DAT_SUCCESS);
	cr_assert_eq(all[DCNT_EP_POST_WRITE], 1);
	cr_assert_eq(all[DCNT_EP_POST_WRITE_DATA], 40);
	cr_assert_eq(all[DCNT_EP_CONNECT], 1);
	cr_assert_eq(dat_ib_query_counters(cli.ep, DCNT_EP_ALL_COUNTERS, all, 0), DAT_SUCCESS);
	for (int i = 0; i < DCNT_EP_ALL_COUNTERS; i++)
		cr_assert_eq(all[i], 0, "out[%d]", i);

	/* The same on an IA (the pool's counters too) and an EVD. */
	expect_cnt(cli.ia, DCNT_IA_EVD_CREATE, 5);
	{
		DAT_UINT64 ia_all[DCNT_IA_ALL_COUNTERS], evd_all[DCNT_EVD_ALL_COUNTERS];

		cr_assert_eq(dat_ib_query_counters(cli.ia, DCNT_IA_ALL_COUNTERS, ia_all, 1),
			     DAT_SUCCESS);
		cr_assert_eq(ia_all[DCNT_IA_EVD_CREATE], 5);
		cr_assert_eq(dat_ib_query_counters(cli.ia, DCNT_IA_ALL_COUNTERS, ia_all, 0),
			     DAT_SUCCESS);
		for (int i = 0; i < DCNT_IA_ALL_COUNTERS; i++)
			cr_assert_eq(ia_all[i], 0, "IA out[%d]", i);
		cr_assert_eq(dat_ib_query_counters(cli.req_evd, DCNT_EVD_ALL_COUNTERS, evd_all, 1),
			     DAT_SUCCESS);
		cr_assert_gt(evd_all[DCNT_EVD_DEQUEUE], 0);
		cr_assert_eq(dat_ib_query_counters(cli.req_evd, DCNT_EVD_ALL_COUNTERS, evd_all, 0),
			     DAT_SUCCESS);
		for (int i = 0; i < DCNT_EVD_ALL_COUNTERS; i++)
			cr_assert_eq(evd_all[i], 0, "EVD out[%d]", i);
	}
	/* print resets as query does. */
	cr_assert_eq(dat_ep_post_rdma_write(cli.ep, 1, &iov, cookie(9), &rmt,
					    DAT_COMPLETION_DEFAULT_FLAG),
		     DAT_SUCCESS);
	drain(cli.req_evd, 1, NULL);
	cr_assert_str_eq(print_output(cli.ep, DCNT_EP_POST_WRITE, 1, &r), "DCNT_EP_POST_WRITE = 1\n");
	cr_assert_eq(r, DAT_SUCCESS);
	expect_cnt(cli.ep, DCNT_EP_POST_WRITE, 0);
	expect_cnt(cli.ep, DCNT_EP_POST_WRITE_DATA, 8);
	cr_assert_eq(dat_ia_close(srv.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	cr_assert_eq(dat_ia_close(cli.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

Test(counters, print_writes_a_line_per_counter)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, evd;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep;
	DAT_EVENT ev;
	DAT_RETURN r;
	char *out;

	cr_assert_eq(zd_test_open("zdapl-shm", &ia, &async), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia, 4, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd),
		     DAT_SUCCESS);
	cr_assert_eq(dat_pz_create(ia, &pz), DAT_SUCCESS);
	cr_assert_eq(dat_ep_create(ia, pz, DAT_HANDLE_NULL, DAT_HANDLE_NULL, DAT_HANDLE_NULL, NULL,
				   &ep),
		     DAT_SUCCESS);
	cr_assert_eq(dat_evd_dequeue(evd, &ev), DAT_QUEUE_EMPTY);

	out = print_output(evd, DCNT_EVD_ALL_COUNTERS, 0, &r);
	cr_assert_eq(r, DAT_SUCCESS);
	cr_assert_eq(lines(out), DCNT_EVD_ALL_COUNTERS, "%s", out);
	cr_assert(strncmp(out, "DCNT_EVD_WAIT = 0\nDCNT_EVD_WAIT_BLOCKED = 0\n", 44) == 0, "%s",
		  out);
	cr_assert_not_null(strstr(out, "\nDCNT_EVD_DEQUEUE = 1\n"), "%s", out);
	cr_assert_not_null(strstr(out, "\nDCNT_EVD_DEQUEUE_NOT_FOUND = 1\n"), "%s", out);
	cr_assert_not_null(strstr(out, "\nDCNT_EVD_DTO_CALLBACK = 0\n"), "%s", out);

	out = print_output(ia, DCNT_IA_ALL_COUNTERS, 0, &r);
	cr_assert_eq(r, DAT_SUCCESS);
	cr_assert_eq(lines(out), DCNT_IA_ALL_COUNTERS, "%s", out);
	cr_assert(strncmp(out, "DCNT_IA_PZ_CREATE = 1\n", 22) == 0, "%s", out);
	cr_assert_not_null(strstr(out, "\nDCNT_IA_EVD_CREATE = 2\n"), "%s", out);
	cr_assert_not_null(strstr(out, "\nDCNT_IA_DIAG_ERR_SQ_TREE = 0\n"), "%s", out);

	out = print_output(ep, DCNT_EP_ALL_COUNTERS, 0, &r);
	cr_assert_eq(r, DAT_SUCCESS);
	cr_assert_eq(lines(out), DCNT_EP_ALL_COUNTERS, "%s", out);
	cr_assert_not_null(strstr(out, "\nDCNT_EP_RECV_RDMA_IMM_DATA = 0\n"), "%s", out);

	out = print_output(ep, DCNT_EP_POST_READ_DATA, 0, &r);
	cr_assert_eq(r, DAT_SUCCESS);
	cr_assert_str_eq(out, "DCNT_EP_POST_READ_DATA = 0\n");

	/* Errors print nothing. */
	out = print_output(ep, DCNT_EP_ALL_COUNTERS + 1, 0, &r);
	cr_assert_eq(r, DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	cr_assert_str_eq(out, "");
	out = print_output(pz, 0, 0, &r);
	cr_assert_eq(DAT_GET_TYPE(r), DAT_INVALID_HANDLE);
	cr_assert_str_eq(out, "");
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

/* ---- bad input ---- */

Test(counters, bad_handles_indices_and_pointers)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, evd;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep;
	DAT_UINT64 v[DCNT_IA_ALL_COUNTERS + 1];

	cr_assert_eq(zd_test_open("zdapl-shm", &ia, &async), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia, 4, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd),
		     DAT_SUCCESS);
	cr_assert_eq(dat_pz_create(ia, &pz), DAT_SUCCESS);
	cr_assert_eq(dat_ep_create(ia, pz, DAT_HANDLE_NULL, DAT_HANDLE_NULL, DAT_HANDLE_NULL, NULL,
				   &ep),
		     DAT_SUCCESS);

	/* A handle with no counters, and one that is gone. */
	cr_assert_eq(DAT_GET_TYPE(dat_ib_query_counters(pz, 0, v, 0)), DAT_INVALID_HANDLE);
	cr_assert_eq(DAT_GET_TYPE(dat_ib_print_counters(pz, 0, 0)), DAT_INVALID_HANDLE);
	cr_assert_eq(DAT_GET_TYPE(dat_ib_query_counters(NULL, 0, v, 0)), DAT_INVALID_HANDLE);
	cr_assert_eq(dat_evd_free(evd), DAT_SUCCESS);
	cr_assert_eq(DAT_GET_TYPE(dat_ib_query_counters(evd, 0, v, 0)), DAT_INVALID_HANDLE);

	/* Indices: 0..ALL of the handle's type; the IA's ALL is out of an EP's range. */
	cr_assert_eq(dat_ib_query_counters(ep, -1, v, 0),
		     DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	cr_assert_eq(dat_ib_query_counters(ep, DCNT_EP_ALL_COUNTERS + 1, v, 0),
		     DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	cr_assert_eq(dat_ib_query_counters(ep, DCNT_IA_ALL_COUNTERS, v, 0),
		     DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	cr_assert_eq(dat_ib_query_counters(ia, DCNT_IA_ALL_COUNTERS + 1, v, 0),
		     DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	cr_assert_eq(dat_ib_query_counters(ia, DCNT_IA_ALL_COUNTERS, v, 0), DAT_SUCCESS);
	cr_assert_eq(dat_ib_query_counters(ia, DCNT_IA_ASYNC_CQ_ERROR, v, 0), DAT_SUCCESS);
	cr_assert_eq(dat_ib_print_counters(ia, -5, 0),
		     DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	/* No place for the values. */
	cr_assert_eq(dat_ib_query_counters(ep, DCNT_EP_ALL_COUNTERS, NULL, 0),
		     DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	cr_assert_eq(dat_ib_query_counters(ia, 0, NULL, 1),
		     DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));

	/* start/stop: on an IA; the CM group is always counted, no link or
	 * diagnostics counters exist (the header's macros cast to a type it
	 * does not define: dat_extension_op directly). */
	for (int op = DAT_IB_START_COUNTERS_OP; op <= DAT_IB_STOP_COUNTERS_OP; op++) {
		cr_assert_eq(dat_extension_op(ia, op, (int)DCNT_IA_CM), DAT_SUCCESS);
		cr_assert_eq(dat_extension_op(ia, op, (int)DCNT_IA_LNK),
			     DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE));
		cr_assert_eq(dat_extension_op(ia, op, (int)DCNT_IA_DIAG),
			     DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE));
		cr_assert_eq(dat_extension_op(ia, op, 3),
			     DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
		cr_assert_eq(dat_extension_op(ia, op, -1),
			     DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
		cr_assert_eq(dat_extension_op(ep, op, (int)DCNT_IA_CM),
			     DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA));
		cr_assert_eq(DAT_GET_TYPE(dat_extension_op(pz, op, (int)DCNT_IA_CM)),
			     DAT_INVALID_HANDLE);
	}
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

/* dat_ia_query names the extension with the others. */
Test(counters, ia_query_lists_dat_counters)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;
	DAT_PROVIDER_ATTR pa;
	bool found = false;

	cr_assert_eq(zd_test_open("zdapl-shm", &ia, &async), DAT_SUCCESS);
	cr_assert_eq(dat_ia_query(ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa), DAT_SUCCESS);
	for (int i = 0; i < pa.num_provider_specific_attr; i++)
		if (!strcmp(pa.provider_specific_attr[i].name, DAT_IB_ATTR_COUNTERS)) {
			cr_assert_str_eq(pa.provider_specific_attr[i].value, "TRUE");
			found = true;
		}
	cr_assert(found);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

/* The counter calls of dtestx -p (test/dtest/dtestx.c), in its order, the
 * queries by the name it uses (the header's backward-compatible
 * dat_query_counters): the IA's before teardown, each EP's after its LMRs
 * are freed, each EVD's after the EPs are. */
Test(counters, the_calls_dtestx_p_makes)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, dto_evd, con_evd, cr_evd;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;
	DAT_VLEN rlen;
	DAT_VADDR raddr;
	DAT_REGION_DESCRIPTION region = { .for_va = bufs[0] };
	DAT_UINT64 ia_cntrs[DCNT_IA_ALL_COUNTERS], ep_cntrs[DCNT_EP_ALL_COUNTERS];
	DAT_UINT64 evd_cntrs[DCNT_EVD_ALL_COUNTERS];
	DAT_EVD_HANDLE evds[3];
	DAT_RETURN r;
	char *out;

	cr_assert_eq(zd_test_open("zdapl-shm", &ia, &async), DAT_SUCCESS);
	cr_assert_eq(dat_pz_create(ia, &pz), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia, 10, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &dto_evd),
		     DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia, 2, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &con_evd),
		     DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia, 1, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd), DAT_SUCCESS);
	cr_assert_eq(dat_ep_create(ia, pz, dto_evd, dto_evd, con_evd, NULL, &ep), DAT_SUCCESS);
	cr_assert_eq(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, BUF, pz,
				    DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lctx, &rctx, &rlen,
				    &raddr),
		     DAT_SUCCESS);

	cr_assert_eq(dat_query_counters(ia, DCNT_IA_ALL_COUNTERS, ia_cntrs, 0), DAT_SUCCESS);
	out = print_output(ia, DCNT_IA_ALL_COUNTERS, 0, &r);
	cr_assert_eq(r, DAT_SUCCESS);
	cr_assert_eq(lines(out), DCNT_IA_ALL_COUNTERS);
	cr_assert_eq(ia_cntrs[DCNT_IA_EP_CREATE], 1);
	cr_assert_eq(dat_lmr_free(lmr), DAT_SUCCESS);
	cr_assert_eq(dat_query_counters(ep, DCNT_EP_ALL_COUNTERS, ep_cntrs, 0), DAT_SUCCESS);
	out = print_output(ep, DCNT_EP_ALL_COUNTERS, 0, &r);
	cr_assert_eq(r, DAT_SUCCESS);
	cr_assert_eq(lines(out), DCNT_EP_ALL_COUNTERS);
	cr_assert_eq(dat_ep_free(ep), DAT_SUCCESS);
	evds[0] = dto_evd;
	evds[1] = con_evd;
	evds[2] = cr_evd;
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(dat_query_counters(evds[i], DCNT_EVD_ALL_COUNTERS, evd_cntrs, 0),
			     DAT_SUCCESS);
		out = print_output(evds[i], DCNT_EVD_ALL_COUNTERS, 0, &r);
		cr_assert_eq(r, DAT_SUCCESS);
		cr_assert_eq(lines(out), DCNT_EVD_ALL_COUNTERS);
		cr_assert_eq(dat_evd_free(evds[i]), DAT_SUCCESS);
	}
	cr_assert_eq(dat_pz_free(pz), DAT_SUCCESS);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
}
