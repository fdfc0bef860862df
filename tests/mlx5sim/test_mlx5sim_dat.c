/*
 * zdapl-mlx5sim end to end: the hw/mlx5 data path driving the software
 * mlx5 device, reached through libdat2 and this build's dat.conf, between
 * two processes (fork) connected by the real connection manager over
 * 127.0.0.1.  Send/recv, RDMA write and read with data checks into both
 * pool memory (the peer maps the chunk) and heap memory (cross-memory
 * attach), protection errors, SRQ, dat_evd_wait woken by the completion
 * event, a killed peer, flush on disconnect and on dat_ep_free.
 *
 * The parent is the server (PSP, accept), the forked child the client;
 * they exchange keys and addresses over a socketpair (msg_*).
 */
#include <stdlib.h>

#include "dat_peer.h"
#include "zdapl/zdapl.h"

#define IA "zdapl-mlx5sim"

enum { HEAP = 0, POOL = 1 };

/* A peer's buffer: heap memory (the peer reaches it by cross-memory
 * attach) or pool memory (the peer maps the chunk). */
static void *sim_alloc(int kind)
{
	return kind == POOL ? zdapl_mem_alloc_aligned(BUF, 4096) : aligned_alloc(4096, BUF);
}

static void sim_free(void *buf, int kind)
{
	if (kind == POOL)
		zdapl_mem_free(buf);
	else
		free(buf);
}

static const struct peer_dev sim = {
	.ia = IA, .alloc = sim_alloc, .free = sim_free, .rkey_spoil = 0x5a5a00,
};

TestSuite(mlx5sim_dat, .init = zd_test_use_conf, .timeout = 60);

/* ---- send/recv, several segments each way, inline and not ---- */

static int c_sendrecv(int fd, void *arg)
{
	struct peer p;
	DAT_COUNT len;

	client_init(&p, &sim, (int)(intptr_t)arg, fd);
	multiseg_client_post(&p);
	post_recvs(&p, p.ep, 1, 40000, 0, 64, 8);
	client_up(&p, NULL);
	/* 3 segments out: 10 + 0 + 30000 bytes */
	multiseg_client_send(&p);
	/* a small (inline) one */
	send_wait(&p, p.ep, 20000, 8, 12);
	/* the server's answers: 5000 bytes over our 3 segments, then 24 */
	multiseg_client_check(&p);
	CHK(dto_wait(p.rcv, 10 * SEC, 8, &len) == DAT_DTO_SUCCESS);
	CHK(len == 24);
	for (int i = 0; i < 24; i++)
		CHK(p.buf[40000 + i] == (uint8_t)(4 + i * 7));
	msg_send(fd, 1);
	return client_done(&p);
}

/* dat_ep_recv_query's two counts, which must agree (buffers are taken in
 * order); DAT_VALUE_UNKNOWN when the device cannot count. */
static DAT_COUNT recv_held(DAT_EP_HANDLE ep)
{
	DAT_COUNT n = -2, span = -2;

	CHK_RET(dat_ep_recv_query(ep, &n, &span), DAT_SUCCESS);
	CHK(n == span);
	return n;
}

static void sendrecv(int kind)
{
	struct peer p;
	DAT_COUNT len;

	server_start(&p, &sim, kind, c_sendrecv, (void *)(intptr_t)kind);
	multiseg_server_post(&p);
	post_recvs(&p, p.ep, 1, 45000, 0, 64, 6);
	/* dat_ep_recv_query: the receives posted and not yet completed */
	CHK(recv_held(p.ep) == 2);
	server_up(&p);
	CHK(dto_wait(p.rcv, 10 * SEC, 5, &len) == DAT_DTO_SUCCESS);
	/* 1, or 0 if the second message's CQE was polled with the first */
	CHK(recv_held(p.ep) <= 1 && recv_held(p.ep) >= 0);
	CHK(len == 30010);
	multiseg_server_check(&p);
	CHK(dto_wait(p.rcv, 10 * SEC, 6, &len) == DAT_DTO_SUCCESS);
	CHK(recv_held(p.ep) == 0);
	/* counted: a soft watermark can be set, and fires once the EP holds
	 * more receives than it (flushed at the end, never used) */
	{
		DAT_EVENT ev;

		CHK_RET(dat_ep_set_watermark(p.ep, 1, DAT_WATERMARK_INFINITE), DAT_SUCCESS);
		CHK(DAT_GET_TYPE(dat_evd_dequeue(p.n.async, &ev)) == DAT_QUEUE_EMPTY);
		post_recvs(&p, p.ep, 1, 60000, 0, 64, 20);
		CHK(DAT_GET_TYPE(dat_evd_dequeue(p.n.async, &ev)) == DAT_QUEUE_EMPTY);
		post_recvs(&p, p.ep, 1, 60100, 0, 64, 21);
		CHK_RET(dat_evd_dequeue(p.n.async, &ev), DAT_SUCCESS);
		CHK(ev.event_number == DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR);
		CHK(ev.event_data.asynch_error_event_data.dat_handle == p.ep);
		CHK(ev.event_data.asynch_error_event_data.reason ==
		    DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT);
		CHK(recv_held(p.ep) == 2);
	}
	CHK(len == 8);
	CHK(memcmp(p.buf + 45000, p.buf, 8) == 0);
	multiseg_server_answer(&p);
	fill(p.buf + 56000, 24, 4);
	send_wait(&p, p.ep, 56000, 24, 10);
	msg_recv(p.fd, 10000);
	server_done(&p);
}

Test(mlx5sim_dat, sendrecv_heap) { sendrecv(HEAP); }
Test(mlx5sim_dat, sendrecv_pool) { sendrecv(POOL); }

/* ---- RDMA write and read, into the server's heap or pool memory ---- */

static int c_rdma(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov[2];
	DAT_RMR_TRIPLET r;

	/* The client's memory is the other kind than the server's. */
	client_open(&p, &sim, !(int)(intptr_t)arg, fd, NULL);
	r = recv_region(fd);
	/* write 2 segments to server buf + 4096 */
	rdma_client_write(&p, &r);
	/* an 8-byte (inline) write just after it */
	fill(p.buf + 25000, 8, 8);
	iov[0] = seg(&p, 25000, 8);
	r.virtual_address += 21000;
	r.segment_length = 8;
	post_write(p.ep, 1, iov, 22, &r);
	CHK(dto_wait(p.req, 10 * SEC, 22, NULL) == DAT_DTO_SUCCESS);
	/* read it all back, with the server's own pattern in front */
	r.virtual_address -= 4096 + 21000;
	r.segment_length = 4096 + 21008;
	iov[0] = seg(&p, 30000, 4096);
	iov[1] = seg(&p, 36000, 21008);
	post_read(p.ep, 2, iov, 23, &r);
	CHK(dto_wait(p.req, 10 * SEC, 23, NULL) == DAT_DTO_SUCCESS);
	for (int i = 0; i < 4096; i++)
		CHK(p.buf[30000 + i] == (uint8_t)(9 + i * 7));
	CHK(memcmp(p.buf + 36000, p.buf, 1000) == 0);
	CHK(memcmp(p.buf + 36000 + 1000, p.buf + 2000, 20000) == 0);
	CHK(memcmp(p.buf + 36000 + 21000, p.buf + 25000, 8) == 0);
	/* tell the server (through the data path) we are done */
	send_wait(&p, p.ep, 0, 4, 24);
	return client_done(&p);
}

static void rdma_write_read(int kind)
{
	struct peer p;
	uint8_t want[21008];

	server_start(&p, &sim, kind, c_rdma, (void *)(intptr_t)kind);
	rdma_server_up(&p);
	/* The writes and the read need nothing from us: we only wait for
	 * the client's final send. */
	CHK(dto_wait(p.rcv, 20 * SEC, 1, NULL) == DAT_DTO_SUCCESS);
	rdma_written(want);
	fill(want + 21000, 8, 8);
	CHK(memcmp(p.buf + 4096, want, sizeof(want)) == 0);
	CHK(p.buf[4096 + sizeof(want)] == 0);
	server_done(&p);
}

Test(mlx5sim_dat, rdma_write_read_heap) { rdma_write_read(HEAP); }
Test(mlx5sim_dat, rdma_write_read_pool) { rdma_write_read(POOL); }

/* ---- protection: bad rkey, no REMOTE_WRITE, out of bounds ---- */

Test(mlx5sim_dat, bad_rkey) { prot_case(&sim, HEAP, 0); }
Test(mlx5sim_dat, no_remote_write) { prot_case(&sim, HEAP, 1); }
Test(mlx5sim_dat, out_of_bounds) { prot_case(&sim, HEAP, 2); }

/* ---- SRQ: two EPs' sends land in one shared receive queue ---- */

static int c_srq(int fd, void *arg)
{
	struct peer p;
	DAT_EP_HANDLE ep2;

	client_open(&p, &sim, HEAP, fd, &ep2);
	for (int i = 0; i < 20; i++) {
		size_t len = 100 + (size_t)i * 50;

		fill(p.buf + (size_t)i * 2048, len, (uint8_t)i);
		send_wait(&p, i & 1 ? ep2 : p.ep, (size_t)i * 2048, len, (uint64_t)(100 + i));
	}
	return client_done(&p);
}

Test(mlx5sim_dat, srq)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	DAT_LMR_TRIPLET iov;
	DAT_EVENT ev;
	int seen[20] = { 0 };

	server_start_with(&p, &sim, HEAP, DAT_MEM_PRIV_ALL_FLAG, 1, c_srq, NULL);
	peer_ep(&p, &ep2, 1);
	for (int i = 0; i < 24; i++) {
		iov = seg(&p, (size_t)i * 2048, 2048);
		CHK_RET(dat_srq_post_recv(p.srq, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = (uint64_t)i }),
			DAT_SUCCESS);
	}
	/* dat_srq_query: 24 entries occupied; how many the NIC has already
	 * taken for an EP it does not say, nor which EP took them. */
	{
		DAT_SRQ_PARAM sp;

		CHK_RET(dat_srq_query(p.srq, DAT_SRQ_FIELD_ALL, &sp), DAT_SUCCESS);
		CHK(sp.outstanding_dto_count == 24);
		CHK(sp.available_dto_count == DAT_VALUE_UNKNOWN);
		CHK(recv_held(p.ep) == DAT_VALUE_UNKNOWN);
		CHK(DAT_GET_TYPE(dat_ep_set_watermark(p.ep, 4, DAT_WATERMARK_INFINITE)) ==
		    DAT_MODEL_NOT_SUPPORTED);
	}
	/* 24 posted, 20 arrive: fewer than 6 left after the 19th. */
	CHK_RET(dat_srq_set_lw(p.srq, 6), DAT_SUCCESS);
	server_up(&p);
	server_accept(&p, ep2);
	for (int n = 0; n < 20; n++) {
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
		uint8_t *b;
		int i;

		CHK(wait_ev(p.rcv, 10 * SEC, &ev) == DAT_DTO_COMPLETION_EVENT);
		CHK(d->status == DAT_DTO_SUCCESS);
		CHK(d->operation == DAT_DTO_RECEIVE);
		CHK(d->user_cookie.as_64 < 24);
		b = p.buf + d->user_cookie.as_64 * 2048;
		/* which message: by its length */
		i = (int)(d->transfered_length - 100) / 50;
		CHK(i >= 0 && i < 20 && d->transfered_length == 100 + (unsigned)i * 50 && !seen[i]);
		seen[i] = 1;
		CHK(d->ep_handle == (i & 1 ? ep2 : p.ep));
		for (size_t k = 0; k < d->transfered_length; k++)
			CHK(b[k] == (uint8_t)(i + k * 7));
	}
	/* The low watermark fired once, naming the SRQ, and disarmed. */
	{
		DAT_SRQ_PARAM sp;

		CHK_RET(dat_evd_dequeue(p.n.async, &ev), DAT_SUCCESS);
		CHK(ev.event_number == DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR);
		CHK(ev.event_data.asynch_error_event_data.dat_handle == p.srq);
		CHK(ev.event_data.asynch_error_event_data.reason == DAT_SRQ_LOW_WATERMARK_EVENT);
		CHK(DAT_GET_TYPE(dat_evd_dequeue(p.n.async, &ev)) == DAT_QUEUE_EMPTY);
		CHK_RET(dat_srq_query(p.srq, DAT_SRQ_FIELD_ALL, &sp), DAT_SUCCESS);
		CHK(sp.low_watermark == DAT_SRQ_LW_DEFAULT);
		CHK(sp.outstanding_dto_count == 4);
	}
	server_done(&p);
}

/* ---- a thread asleep in dat_evd_wait is woken by the completion ---- */

static int c_wake(int fd, void *arg)
{
	struct peer p;

	client_open(&p, &sim, HEAP, fd, NULL);
	for (uint32_t i = 0; i < 3; i++) {
		msg_recv(fd, 10000);
		usleep(300 * 1000);   /* the server is asleep by now */
		fill(p.buf, 32, (uint8_t)i);
		send_wait(&p, p.ep, 0, 32, i);
	}
	return client_done(&p);
}

Test(mlx5sim_dat, evd_wait_woken)
{
	struct peer p;

	server_start(&p, &sim, HEAP, c_wake, NULL);
	post_recvs(&p, p.ep, 3, 0, 64, 64, 0);
	server_up(&p);
	for (uint32_t i = 0; i < 3; i++) {
		DAT_COUNT len;
		uint64_t t0 = now_ms(), dt;

		msg_send(p.fd, i);
		/* A 30 s timeout: only the completion event ends it early. */
		CHK(dto_wait(p.rcv, 30 * SEC, i, &len) == DAT_DTO_SUCCESS);
		dt = now_ms() - t0;
		CHK(dt >= 250 && dt < 2000, "woken after %llu ms", (unsigned long long)dt);
		CHK(len == 32);
		for (int k = 0; k < 32; k++)
			CHK(p.buf[i * 64 + (unsigned)k] == (uint8_t)(i + (unsigned)k * 7));
	}
	server_done(&p);
}

/* ---- the peer is killed: the connection ends within a second ---- */

Test(mlx5sim_dat, peer_killed)
{
	struct peer_job j = { .dev = &sim, .kind = HEAP };
	struct peer p;
	DAT_EVENT_NUMBER e;
	uint64_t t0;

	server_start(&p, &sim, HEAP, killed_client, &j);
	post_recvs(&p, p.ep, 2, 0, 100, 64, 1);
	server_up(&p);
	msg_recv(p.fd, 10000);
	t0 = now_ms();
	kill(p.pid, SIGKILL);
	e = wait_ev(p.n.conn_evd, 5 * SEC, NULL);
	CHK(e == DAT_CONNECTION_EVENT_DISCONNECTED || e == DAT_CONNECTION_EVENT_BROKEN);
	CHK(now_ms() - t0 < 1000, "%llu ms", (unsigned long long)(now_ms() - t0));
	reap(p.pid, 5000);
	CHK(dto_wait(p.rcv, 5 * SEC, 1, NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(dto_wait(p.rcv, 5 * SEC, 2, NULL) == DAT_DTO_ERR_FLUSHED);
	peer_close(&p);
}

/* ---- flush on disconnect, and on dat_ep_free ---- */

Test(mlx5sim_dat, flush_on_disconnect) { flush_on_disconnect(&sim, HEAP); }

Test(mlx5sim_dat, flush_on_ep_free)
{
	struct peer p;

	/* No peer needed: receives outstanding when their EP is freed
	 * complete flushed. */
	peer_open(&p, &sim, HEAP, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	post_recvs(&p, p.ep, 3, 0, 100, 64, 40);
	CHK_RET(dat_ep_free(p.ep), DAT_SUCCESS);
	for (int i = 0; i < 3; i++)
		CHK(dto_wait(p.rcv, 5 * SEC, (uint64_t)(40 + i), NULL) == DAT_DTO_ERR_FLUSHED);
	peer_close(&p);
}

/* ---- the registration cache, through libdat2 ---- */

Test(mlx5sim_dat, registration_cache)
{
	static uint8_t buf[8192] __attribute__((aligned(4096)));
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE a, b, c;
	DAT_LMR_CONTEXT la, lb, lc;
	DAT_RMR_CONTEXT ra, rb, rc;
	DAT_VLEN rlen;
	DAT_VADDR raddr;
	DAT_REGION_DESCRIPTION r = { .for_va = buf };
	DAT_LMR_TRIPLET seg = { .virtual_address = (uintptr_t)buf + 100, .segment_length = 64 };

	CHK_RET(dat_ia_open(IA, 8, &async, &ia), DAT_SUCCESS);
	CHK_RET(dat_pz_create(ia, &pz), DAT_SUCCESS);
	CHK_RET(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, sizeof(buf), pz, DAT_MEM_PRIV_ALL_FLAG,
			       DAT_VA_TYPE_VA, &a, &la, &ra, &rlen, &raddr), DAT_SUCCESS);
	CHK_RET(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, sizeof(buf), pz, DAT_MEM_PRIV_ALL_FLAG,
			       DAT_VA_TYPE_VA, &b, &lb, &rb, &rlen, &raddr), DAT_SUCCESS);
	/* the same range, PZ and rights: one registration, one pair of keys */
	CHK(la == lb && ra == rb);
	/* other rights: a registration of its own */
	CHK_RET(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, r, sizeof(buf), pz,
			       DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG,
			       DAT_VA_TYPE_VA, &c, &lc, &rc, &rlen, &raddr), DAT_SUCCESS);
	CHK(lc != la);
	/* the keys outlive the first LMR: the second still names its range */
	CHK_RET(dat_lmr_free(a), DAT_SUCCESS);
	seg.lmr_context = lb;
	CHK_RET(dat_lmr_sync_rdma_write(ia, &seg, 1), DAT_SUCCESS);
	CHK_RET(dat_lmr_free(b), DAT_SUCCESS);
	CHK(DAT_GET_TYPE(dat_lmr_sync_rdma_write(ia, &seg, 1)) != DAT_SUCCESS);
	CHK_RET(dat_lmr_free(c), DAT_SUCCESS);
	CHK_RET(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}
