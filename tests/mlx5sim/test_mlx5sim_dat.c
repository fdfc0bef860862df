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

static void peer_open(struct peer *p, int kind, DAT_MEM_PRIV_FLAGS priv)
{
	DAT_REGION_DESCRIPTION r;
	DAT_VLEN rlen;
	DAT_VADDR raddr;

	memset(p, 0, sizeof(*p));
	node_open_on(&p->n, IA);
	CHK_RET(dat_evd_create(p->n.ia, 256, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &p->req),
		DAT_SUCCESS);
	CHK_RET(dat_evd_create(p->n.ia, 256, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &p->rcv),
		DAT_SUCCESS);
	p->kind = kind;
	p->buf = kind == POOL ? zdapl_mem_alloc_aligned(BUF, 4096) : aligned_alloc(4096, BUF);
	CHK(p->buf);
	memset(p->buf, 0, BUF);
	r.for_va = p->buf;
	CHK_RET(dat_lmr_create(p->n.ia, DAT_MEM_TYPE_VIRTUAL, r, BUF, p->n.pz, priv,
			       DAT_VA_TYPE_VA, &p->lmr, &p->lkey, &p->rkey, &rlen, &raddr),
		DAT_SUCCESS);
}

static void post_recv(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov, uint64_t cookie)
{
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	CHK_RET(dat_ep_post_recv(ep, n, iov, c, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
}

/* Our buffer's rkey and address to the peer. */
static void send_region(struct peer *p, int fd)
{
	msg_send(fd, p->rkey);
	msg_send(fd, (uint32_t)(uintptr_t)p->buf);
	msg_send(fd, (uint32_t)((uint64_t)(uintptr_t)p->buf >> 32));
}

static DAT_RMR_TRIPLET recv_region(int fd)
{
	DAT_RMR_TRIPLET r = { 0 };
	uint32_t lo, hi;

	r.rmr_context = msg_recv(fd, 10000);
	lo = msg_recv(fd, 10000);
	hi = msg_recv(fd, 10000);
	r.virtual_address = (DAT_VADDR)lo | (DAT_VADDR)hi << 32;
	r.segment_length = BUF;
	return r;
}

static void peer_close(struct peer *p)
{
	CHK_RET(dat_ia_close(p->n.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	if (p->kind == POOL)
		zdapl_mem_free(p->buf);
	else
		free(p->buf);
}

TestSuite(mlx5sim_dat, .init = zd_test_use_conf, .timeout = 60);

/* ---- send/recv, several segments each way, inline and not ---- */

static int c_sendrecv(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov[3];
	DAT_COUNT len;

	peer_open(&p, (int)(intptr_t)arg, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	iov[0] = seg(&p, 1000, 100);
	iov[1] = seg(&p, 5000, 2000);
	iov[2] = seg(&p, 9000, 3000);
	post_recv(p.ep, 3, iov, 7);
	iov[0] = seg(&p, 40000, 64);
	post_recv(p.ep, 1, iov, 8);
	client_connect(&p, p.ep, msg_recv(fd, 10000));
	/* 3 segments out: 10 + 0 + 30000 bytes */
	fill(p.buf + 20000, 10, 1);
	fill(p.buf + 30000, 30000, 2);
	iov[0] = seg(&p, 20000, 10);
	iov[1] = seg(&p, 25000, 0);
	iov[2] = seg(&p, 30000, 30000);
	post_send(p.ep, 3, iov, 11);
	CHK(dto_wait(p.req, 10 * SEC, 11, NULL) == DAT_DTO_SUCCESS);
	/* a small (inline) one */
	iov[0] = seg(&p, 20000, 8);
	post_send(p.ep, 1, iov, 12);
	CHK(dto_wait(p.req, 10 * SEC, 12, NULL) == DAT_DTO_SUCCESS);
	/* the server's answers: 5000 bytes over our 3 segments, then 24 */
	CHK(dto_wait(p.rcv, 10 * SEC, 7, &len) == DAT_DTO_SUCCESS);
	CHK(len == 5000);
	for (int i = 0; i < 5000; i++) {
		uint8_t want = (uint8_t)(3 + i * 7);
		uint8_t got = i < 100 ? p.buf[1000 + i] : i < 2100 ? p.buf[5000 + i - 100]
							    : p.buf[9000 + i - 2100];
		CHK(got == want);
	}
	CHK(p.buf[9000 + 2900] == 0);  /* nothing past the message */
	CHK(dto_wait(p.rcv, 10 * SEC, 8, &len) == DAT_DTO_SUCCESS);
	CHK(len == 24);
	for (int i = 0; i < 24; i++)
		CHK(p.buf[40000 + i] == (uint8_t)(4 + i * 7));
	msg_send(fd, 1);
	msg_recv(fd, 10000);
	peer_close(&p);
	return 0;
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
	DAT_LMR_TRIPLET iov[2];
	DAT_COUNT len;
	int fd;
	pid_t pid = spawn(c_sendrecv, (void *)(intptr_t)kind, &fd);

	peer_open(&p, kind, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	iov[0] = seg(&p, 0, 16);
	iov[1] = seg(&p, 100, 40000);
	post_recv(p.ep, 2, iov, 5);
	iov[0] = seg(&p, 45000, 64);
	post_recv(p.ep, 1, iov, 6);
	/* dat_ep_recv_query: the receives posted and not yet completed */
	CHK(recv_held(p.ep) == 2);
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	CHK(dto_wait(p.rcv, 10 * SEC, 5, &len) == DAT_DTO_SUCCESS);
	/* 1, or 0 if the second message's CQE was polled with the first */
	CHK(recv_held(p.ep) <= 1 && recv_held(p.ep) >= 0);
	CHK(len == 30010);
	for (int i = 0; i < 10; i++)
		CHK(p.buf[i] == (uint8_t)(1 + i * 7));
	for (int i = 0; i < 6; i++)
		CHK(p.buf[10 + i] == (uint8_t)(2 + i * 7));
	for (int i = 6; i < 30000; i++)
		CHK(p.buf[100 + i - 6] == (uint8_t)(2 + i * 7));
	CHK(dto_wait(p.rcv, 10 * SEC, 6, &len) == DAT_DTO_SUCCESS);
	CHK(recv_held(p.ep) == 0);
	/* counted: a soft watermark can be set, and fires once the EP holds
	 * more receives than it (flushed at the end, never used) */
	{
		DAT_EVENT ev;

		CHK_RET(dat_ep_set_watermark(p.ep, 1, DAT_WATERMARK_INFINITE), DAT_SUCCESS);
		CHK(DAT_GET_TYPE(dat_evd_dequeue(p.n.async, &ev)) == DAT_QUEUE_EMPTY);
		iov[0] = seg(&p, 60000, 64);
		post_recv(p.ep, 1, iov, 20);
		CHK(DAT_GET_TYPE(dat_evd_dequeue(p.n.async, &ev)) == DAT_QUEUE_EMPTY);
		iov[0] = seg(&p, 60100, 64);
		post_recv(p.ep, 1, iov, 21);
		CHK_RET(dat_evd_dequeue(p.n.async, &ev), DAT_SUCCESS);
		CHK(ev.event_number == DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR);
		CHK(ev.event_data.asynch_error_event_data.dat_handle == p.ep);
		CHK(ev.event_data.asynch_error_event_data.reason ==
		    DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT);
		CHK(recv_held(p.ep) == 2);
	}
	CHK(len == 8);
	CHK(memcmp(p.buf + 45000, p.buf, 8) == 0);
	fill(p.buf + 50000, 5000, 3);
	iov[0] = seg(&p, 50000, 5000);
	post_send(p.ep, 1, iov, 9);
	CHK(dto_wait(p.req, 10 * SEC, 9, NULL) == DAT_DTO_SUCCESS);
	fill(p.buf + 56000, 24, 4);
	iov[0] = seg(&p, 56000, 24);
	post_send(p.ep, 1, iov, 10);
	CHK(dto_wait(p.req, 10 * SEC, 10, NULL) == DAT_DTO_SUCCESS);
	msg_recv(fd, 10000);
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

Test(mlx5sim_dat, sendrecv_heap) { sendrecv(HEAP); }
Test(mlx5sim_dat, sendrecv_pool) { sendrecv(POOL); }

/* ---- RDMA write and read, into the server's heap or pool memory ---- */

static int c_rdma(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov[2];
	DAT_RMR_TRIPLET r;
	DAT_DTO_COOKIE c = { .as_64 = 21 };

	/* The client's memory is the other kind than the server's. */
	peer_open(&p, !(int)(intptr_t)arg, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	client_connect(&p, p.ep, msg_recv(fd, 10000));
	r = recv_region(fd);
	/* write 2 segments to server buf + 4096 */
	fill(p.buf, 1000, 5);
	fill(p.buf + 2000, 20000, 6);
	iov[0] = seg(&p, 0, 1000);
	iov[1] = seg(&p, 2000, 20000);
	r.virtual_address += 4096;
	r.segment_length = 21000;
	CHK_RET(dat_ep_post_rdma_write(p.ep, 2, iov, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(dto_wait(p.req, 10 * SEC, 21, NULL) == DAT_DTO_SUCCESS);
	/* an 8-byte (inline) write just after it */
	fill(p.buf + 25000, 8, 8);
	iov[0] = seg(&p, 25000, 8);
	r.virtual_address += 21000;
	r.segment_length = 8;
	c.as_64 = 22;
	CHK_RET(dat_ep_post_rdma_write(p.ep, 1, iov, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(dto_wait(p.req, 10 * SEC, 22, NULL) == DAT_DTO_SUCCESS);
	/* read it all back, with the server's own pattern in front */
	r.virtual_address -= 4096 + 21000;
	r.segment_length = 4096 + 21008;
	iov[0] = seg(&p, 30000, 4096);
	iov[1] = seg(&p, 36000, 21008);
	c.as_64 = 23;
	CHK_RET(dat_ep_post_rdma_read(p.ep, 2, iov, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(dto_wait(p.req, 10 * SEC, 23, NULL) == DAT_DTO_SUCCESS);
	for (int i = 0; i < 4096; i++)
		CHK(p.buf[30000 + i] == (uint8_t)(9 + i * 7));
	CHK(memcmp(p.buf + 36000, p.buf, 1000) == 0);
	CHK(memcmp(p.buf + 36000 + 1000, p.buf + 2000, 20000) == 0);
	CHK(memcmp(p.buf + 36000 + 21000, p.buf + 25000, 8) == 0);
	/* tell the server (through the data path) we are done */
	iov[0] = seg(&p, 0, 4);
	post_send(p.ep, 1, iov, 24);
	CHK(dto_wait(p.req, 10 * SEC, 24, NULL) == DAT_DTO_SUCCESS);
	msg_recv(fd, 10000);
	peer_close(&p);
	return 0;
}

static void rdma_write_read(int kind)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	uint8_t want[21008];
	int fd;
	pid_t pid = spawn(c_rdma, (void *)(intptr_t)kind, &fd);

	peer_open(&p, kind, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	fill(p.buf, 4096, 9);
	iov = seg(&p, 60000, 64);
	post_recv(p.ep, 1, &iov, 1);
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	send_region(&p, fd);
	/* The writes and the read need nothing from us: we only wait for
	 * the client's final send. */
	CHK(dto_wait(p.rcv, 20 * SEC, 1, NULL) == DAT_DTO_SUCCESS);
	fill(want, 1000, 5);
	fill(want + 1000, 20000, 6);
	fill(want + 21000, 8, 8);
	CHK(memcmp(p.buf + 4096, want, sizeof(want)) == 0);
	CHK(p.buf[4096 + sizeof(want)] == 0);
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

Test(mlx5sim_dat, rdma_write_read_heap) { rdma_write_read(HEAP); }
Test(mlx5sim_dat, rdma_write_read_pool) { rdma_write_read(POOL); }

/* ---- protection: bad rkey, no REMOTE_WRITE, out of bounds ---- */

static int c_prot(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r;
	DAT_DTO_COOKIE c = { .as_64 = 31 };
	int mode = (int)(intptr_t)arg;

	peer_open(&p, HEAP, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	client_connect(&p, p.ep, msg_recv(fd, 10000));
	r = recv_region(fd);
	if (mode == 0)
		r.rmr_context ^= 0x5a5a00;
	r.segment_length = 4096;
	if (mode == 2)
		r.virtual_address += BUF - 100;  /* past the end */
	fill(p.buf, 4096, 4);
	iov = seg(&p, 0, 4096);
	CHK_RET(dat_ep_post_rdma_write(p.ep, 1, &iov, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(dto_wait(p.req, 20 * SEC, 31, NULL) == DAT_DTO_ERR_REMOTE_ACCESS);
	/* the QP is in error: a later DTO completes flushed */
	c.as_64 = 32;
	if (dat_ep_post_rdma_write(p.ep, 1, &iov, c, &r, DAT_COMPLETION_DEFAULT_FLAG) ==
	    DAT_SUCCESS)
		CHK(dto_wait(p.req, 20 * SEC, 32, NULL) == DAT_DTO_ERR_FLUSHED);
	msg_send(fd, 1);
	msg_recv(fd, 10000);
	peer_close(&p);
	return 0;
}

static void prot_case(int mode, DAT_MEM_PRIV_FLAGS priv)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	int fd;
	pid_t pid = spawn(c_prot, (void *)(intptr_t)mode, &fd);

	peer_open(&p, HEAP, priv);
	peer_ep(&p, &p.ep, 0);
	iov = seg(&p, 60000, 64);
	post_recv(p.ep, 1, &iov, 1);
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	send_region(&p, fd);
	/* The responder detected the violation: its QP went to error too,
	 * so its posted receive flushes. */
	CHK(dto_wait(p.rcv, 20 * SEC, 1, NULL) == DAT_DTO_ERR_FLUSHED);
	msg_recv(fd, 20000);
	for (int i = 0; i < BUF; i++)
		CHK(p.buf[i] == 0);
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

Test(mlx5sim_dat, bad_rkey) { prot_case(0, DAT_MEM_PRIV_ALL_FLAG); }
Test(mlx5sim_dat, no_remote_write)
{
	prot_case(1, DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG |
			     DAT_MEM_PRIV_REMOTE_READ_FLAG);
}
Test(mlx5sim_dat, out_of_bounds) { prot_case(2, DAT_MEM_PRIV_ALL_FLAG); }

/* ---- SRQ: two EPs' sends land in one shared receive queue ---- */

static int c_srq(int fd, void *arg)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	DAT_LMR_TRIPLET iov;
	uint32_t port = msg_recv(fd, 10000);

	peer_open(&p, HEAP, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	peer_ep(&p, &ep2, 0);
	client_connect(&p, p.ep, port);
	client_connect(&p, ep2, port);
	for (int i = 0; i < 20; i++) {
		size_t len = 100 + (size_t)i * 50;

		fill(p.buf + (size_t)i * 2048, len, (uint8_t)i);
		iov = seg(&p, (size_t)i * 2048, len);
		post_send(i & 1 ? ep2 : p.ep, 1, &iov, (uint64_t)(100 + i));
		CHK(dto_wait(p.req, 10 * SEC, (uint64_t)(100 + i), NULL) == DAT_DTO_SUCCESS);
	}
	msg_recv(fd, 10000);
	peer_close(&p);
	return 0;
}

Test(mlx5sim_dat, srq)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	DAT_LMR_TRIPLET iov;
	DAT_EVENT ev;
	int seen[20] = { 0 };
	int fd;
	pid_t pid = spawn(c_srq, NULL, &fd);

	peer_open(&p, HEAP, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 1);
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
	server_listen(&p, fd);
	server_accept(&p, p.ep);
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
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

/* ---- a thread asleep in dat_evd_wait is woken by the completion ---- */

static int c_wake(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;

	peer_open(&p, HEAP, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	client_connect(&p, p.ep, msg_recv(fd, 10000));
	for (uint32_t i = 0; i < 3; i++) {
		msg_recv(fd, 10000);
		usleep(300 * 1000);   /* the server is asleep by now */
		fill(p.buf, 32, (uint8_t)i);
		iov = seg(&p, 0, 32);
		post_send(p.ep, 1, &iov, i);
		CHK(dto_wait(p.req, 10 * SEC, i, NULL) == DAT_DTO_SUCCESS);
	}
	msg_recv(fd, 10000);
	peer_close(&p);
	return 0;
}

Test(mlx5sim_dat, evd_wait_woken)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	int fd;
	pid_t pid = spawn(c_wake, NULL, &fd);

	peer_open(&p, HEAP, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	for (int i = 0; i < 3; i++) {
		iov = seg(&p, (size_t)i * 64, 64);
		post_recv(p.ep, 1, &iov, (uint64_t)i);
	}
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	for (uint32_t i = 0; i < 3; i++) {
		DAT_COUNT len;
		uint64_t t0 = now_ms(), dt;

		msg_send(fd, i);
		/* A 30 s timeout: only the completion event ends it early. */
		CHK(dto_wait(p.rcv, 30 * SEC, i, &len) == DAT_DTO_SUCCESS);
		dt = now_ms() - t0;
		CHK(dt >= 250 && dt < 2000, "woken after %llu ms", (unsigned long long)dt);
		CHK(len == 32);
		for (int k = 0; k < 32; k++)
			CHK(p.buf[i * 64 + (unsigned)k] == (uint8_t)(i + (unsigned)k * 7));
	}
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

/* ---- the peer is killed: the connection ends within a second ---- */

static int c_killed(int fd, void *arg)
{
	struct peer p;

	peer_open(&p, HEAP, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	client_connect(&p, p.ep, msg_recv(fd, 10000));
	msg_send(fd, 1);
	pause();  /* SIGKILLed here */
	return 0;
}

Test(mlx5sim_dat, peer_killed)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_EVENT_NUMBER e;
	int fd;
	pid_t pid = spawn(c_killed, NULL, &fd);
	uint64_t t0;

	peer_open(&p, HEAP, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	for (int i = 0; i < 2; i++) {
		iov = seg(&p, (size_t)i * 100, 64);
		post_recv(p.ep, 1, &iov, (uint64_t)(1 + i));
	}
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	msg_recv(fd, 10000);
	t0 = now_ms();
	kill(pid, SIGKILL);
	e = wait_ev(p.n.conn_evd, 5 * SEC, NULL);
	CHK(e == DAT_CONNECTION_EVENT_DISCONNECTED || e == DAT_CONNECTION_EVENT_BROKEN);
	CHK(now_ms() - t0 < 1000, "%llu ms", (unsigned long long)(now_ms() - t0));
	reap(pid, 5000);
	CHK(dto_wait(p.rcv, 5 * SEC, 1, NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(dto_wait(p.rcv, 5 * SEC, 2, NULL) == DAT_DTO_ERR_FLUSHED);
	peer_close(&p);
}

/* ---- flush on disconnect, and on dat_ep_free ---- */

static int c_disc(int fd, void *arg)
{
	struct peer p;
	DAT_EVENT ev;

	peer_open(&p, HEAP, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	client_connect(&p, p.ep, msg_recv(fd, 10000));
	msg_recv(fd, 10000);
	CHK_RET(dat_ep_disconnect(p.ep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	CHK(wait_ev(p.n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
	msg_send(fd, 1);
	peer_close(&p);
	return 0;
}

Test(mlx5sim_dat, flush_on_disconnect)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	int fd;
	pid_t pid = spawn(c_disc, NULL, &fd);

	peer_open(&p, HEAP, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	for (int i = 0; i < 4; i++) {
		iov = seg(&p, (size_t)i * 100, 64);
		post_recv(p.ep, 1, &iov, (uint64_t)(10 + i));
	}
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	msg_send(fd, 1);
	for (int i = 0; i < 4; i++)
		CHK(dto_wait(p.rcv, 10 * SEC, (uint64_t)(10 + i), NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(wait_ev(p.n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	msg_recv(fd, 10000);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

Test(mlx5sim_dat, flush_on_ep_free)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;

	/* No peer needed: receives outstanding when their EP is freed
	 * complete flushed. */
	peer_open(&p, HEAP, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	for (int i = 0; i < 3; i++) {
		iov = seg(&p, (size_t)i * 100, 64);
		post_recv(p.ep, 1, &iov, (uint64_t)(40 + i));
	}
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
