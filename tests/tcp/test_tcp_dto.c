/*
 * The tcp device's data path between two processes (fork) connected by
 * the real connection manager over 127.0.0.1, through libdat2 and a
 * dat.conf with a "tcp lo" line: send/recv with several segments, RDMA
 * write and read with data checks, SRQ, protection violations, a killed
 * peer, flush on disconnect, and a malformed frame injected on the data
 * socket (it breaks that connection only).
 *
 * The parent is the server (PSP, accept), the forked child the client; they
 * exchange addresses and keys over a socketpair (msg_*).
 */
#include "dat_peer.h"
#include "tcp_sockets.h"
#include "hw/tcp/zd_tcp_wire.h"

/* The tcp device on lo; the same with progress=thread and =manual. */
static const struct peer_dev tcp = { .ia = "zdapl-tcp-lo", .rkey_spoil = 0x5a5a0 };
static const struct peer_dev tcp_thread = { .ia = "zdapl-tcp-lo-thread" };
static const struct peer_dev tcp_manual = { .ia = "zdapl-tcp-lo-manual" };

/* ---- send/recv, several segments each way ---- */

static int c_sendrecv(int fd, void *arg)
{
	struct peer p;

	client_init(&p, &tcp, 0, fd);
	multiseg_client_post(&p);
	client_up(&p, NULL);
	/* 3 segments out: 10 + 0 + 30000 bytes */
	multiseg_client_send(&p);
	/* the server's answer: 5000 bytes over our 3 receive segments */
	multiseg_client_check(&p);
	msg_send(fd, 1);
	return client_done(&p);
}

Test(tcp, sendrecv_multiseg, .timeout = 60)
{
	struct peer p;
	DAT_COUNT len;

	server_start(&p, &tcp, 0, c_sendrecv, NULL);
	multiseg_server_post(&p);
	server_up(&p);
	CHK(dto_wait(p.rcv, 10 * SEC, 5, &len) == DAT_DTO_SUCCESS);
	CHK(len == 30010);
	multiseg_server_check(&p);
	multiseg_server_answer(&p);
	msg_recv(p.fd, 10000);
	server_done(&p);
}

/* ---- RDMA write and read ---- */

static int c_rdma(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r;

	client_open(&p, &tcp, 0, fd, NULL);
	r = recv_region(fd);
	/* write 2 segments to server buf + 4096 */
	rdma_client_write(&p, &r);
	/* read it back (the server wrote its own pattern in front) */
	r.virtual_address -= 4096;
	r.segment_length = 4096 + 21000;
	iov = seg(&p, 30000, 4096 + 21000);
	post_read(p.ep, 1, &iov, 22, &r);
	CHK(dto_wait(p.req, 10 * SEC, 22, NULL) == DAT_DTO_SUCCESS);
	for (int i = 0; i < 4096; i++)
		CHK(p.buf[30000 + i] == (uint8_t)(9 + i * 7));
	CHK(memcmp(p.buf + 30000 + 4096, p.buf, 1000) == 0);
	CHK(memcmp(p.buf + 30000 + 4096 + 1000, p.buf + 2000, 20000) == 0);
	/* tell the server (through the data path) we are done */
	send_wait(&p, p.ep, 0, 4, 23);
	return client_done(&p);
}

Test(tcp, rdma_write_read, .timeout = 60)
{
	struct peer p;
	uint8_t want[21000];

	server_start(&p, &tcp, 0, c_rdma, NULL);
	rdma_server_up(&p);
	/* Waiting (asleep) on the recv EVD is what progresses the write
	 * and the read here. */
	CHK(dto_wait(p.rcv, 20 * SEC, 1, NULL) == DAT_DTO_SUCCESS);
	rdma_written(want);
	CHK(memcmp(p.buf + 4096, want, 21000) == 0);
	server_done(&p);
}

/* ---- a burst of sends and RDMA writes of awkward sizes ----
 * Frames of 1 byte to past the receive staging buffer (16 KiB), back to
 * back in both kinds, so one recv holds several frames, headers straddle
 * recv boundaries and large payloads switch to in-place reads mid-frame. */

static const uint32_t mix_send[] = { 1, 39, 40, 41, 100, 4095, 4096, 8191, 8192, 8193, 16383 };
static const uint32_t mix_write[] = { 1, 2, 3000, 12000 };
#define MIX_NSEND (sizeof(mix_send) / sizeof(mix_send[0]))
#define MIX_NWRITE (sizeof(mix_write) / sizeof(mix_write[0]))
#define MIX_WBASE 49400u   /* writes land after the sends' receives */

static int c_mixed(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r;
	uint32_t off = 0, woff = MIX_WBASE;
	uint64_t raddr;
	size_t w = 0;

	(void)arg;
	client_open(&p, &tcp, 0, fd, NULL);
	r = recv_region(fd);
	raddr = r.virtual_address;
	for (size_t i = 0; i < MIX_NSEND; i++) {
		fill(p.buf + off, mix_send[i], (uint8_t)(30 + i));
		iov = seg(&p, off, mix_send[i]);
		post_send(p.ep, 1, &iov, 100 + i);
		off += mix_send[i];
		if (i % 3 == 1 && w < MIX_NWRITE) {
			fill(p.buf + woff, mix_write[w], (uint8_t)(60 + w));
			iov = seg(&p, woff, mix_write[w]);
			r.virtual_address = raddr + woff;
			r.segment_length = mix_write[w];
			post_write(p.ep, 1, &iov, 200 + w, &r);
			woff += mix_write[w++];
		}
	}
	CHK(w == MIX_NWRITE);
	/* in post order: every send, and every write once the server ACKed it */
	for (size_t i = 0, k = 0; i < MIX_NSEND; i++) {
		CHK(dto_wait(p.req, 10 * SEC, 100 + i, NULL) == DAT_DTO_SUCCESS);
		if (i % 3 == 1 && k < MIX_NWRITE)
			CHK(dto_wait(p.req, 10 * SEC, 200 + k++, NULL) == DAT_DTO_SUCCESS);
	}
	msg_send(fd, 1);
	return client_done(&p);
}

Test(tcp, mixed_sizes_burst, .timeout = 60)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_COUNT len;
	uint8_t want[16384];
	uint32_t off = 0, woff = MIX_WBASE;

	server_start(&p, &tcp, 0, c_mixed, NULL);
	for (size_t i = 0; i < MIX_NSEND; i++) {
		iov = seg(&p, off, mix_send[i]);
		post_recv(p.ep, 1, &iov, 100 + i);
		off += mix_send[i];
	}
	CHK(off <= MIX_WBASE);
	server_up(&p);
	send_region(&p, p.fd);
	off = 0;
	for (size_t i = 0; i < MIX_NSEND; i++) {
		CHK(dto_wait(p.rcv, 10 * SEC, 100 + i, &len) == DAT_DTO_SUCCESS);
		CHK(len == (DAT_COUNT)mix_send[i]);
		fill(want, mix_send[i], (uint8_t)(30 + i));
		CHK(memcmp(p.buf + off, want, mix_send[i]) == 0);
		off += mix_send[i];
	}
	/* the client saw its writes ACKed: they are in place */
	CHK(msg_recv(p.fd, 20000) == 1);
	for (size_t w = 0; w < MIX_NWRITE; w++) {
		fill(want, mix_write[w], (uint8_t)(60 + w));
		CHK(memcmp(p.buf + woff, want, mix_write[w]) == 0);
		woff += mix_write[w];
	}
	server_done(&p);
}

/* ---- protection: a bad rkey / no REMOTE_WRITE leave memory untouched ---- */

Test(tcp, bad_rkey, .timeout = 60) { prot_case(&tcp, 0, 0); }
Test(tcp, no_remote_write, .timeout = 60) { prot_case(&tcp, 0, 1); }
Test(tcp, out_of_bounds, .timeout = 60) { prot_case(&tcp, 0, 2); }

Test(tcp, local_protection, .timeout = 30)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;

	/* no peer needed: a receive with a bad lkey completes in error */
	peer_open(&p, &tcp, 0, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	iov = seg(&p, 0, 64);
	iov.lmr_context ^= 0x12340;
	post_recv(p.ep, 1, &iov, 3);
	CHK(dto_wait(p.rcv, 5 * SEC, 3, NULL) == DAT_DTO_ERR_LOCAL_PROTECTION);
	iov = seg(&p, BUF - 10, 64);  /* out of bounds */
	post_recv(p.ep, 1, &iov, 4);
	CHK(dto_wait(p.rcv, 5 * SEC, 4, NULL) == DAT_DTO_ERR_LOCAL_PROTECTION);
	peer_close(&p);
}

/* ---- a freed LMR's key is refused, however recently it was used ----
 * The device memoises the last key each queue's poster and each QP's
 * receiver checked (zd_tcp_keymemo.h); dat_lmr_free must end every memo:
 * after it, a send and a receive naming the key complete
 * LOCAL_PROTECTION and the peer's RDMA write into it REMOTE_ACCESS, with
 * the memory untouched.  The server's EP B posts, its EP A takes the
 * client's writes. */

#define FREED_OFF 8192    /* the second LMR: [FREED_OFF, +FREED_LEN) of buf */
#define FREED_LEN 4096

static int c_freed_lmr(int fd, void *arg)
{
	struct peer p;
	DAT_EP_HANDLE b;
	DAT_RMR_TRIPLET r;
	DAT_LMR_TRIPLET iov;

	/* p.ep is connected first: the server's A, then b its B */
	client_open(&p, &tcp, 0, fd, &b);
	r = recv_region(fd);
	r.segment_length = 64;
	r.virtual_address += 1024;
	iov = seg(&p, 4096, 64);
	post_recv(b, 1, &iov, 7);
	fill(p.buf, 64, 1);
	send_wait(&p, b, 0, 64, 11);
	CHK(dto_wait(p.rcv, 10 * SEC, 7, NULL) == DAT_DTO_SUCCESS);
	CHK(p.buf[4096] == 9);                   /* the server's send */
	fill(p.buf + 128, 64, 2);
	iov = seg(&p, 128, 64);
	post_write(p.ep, 1, &iov, 12, &r);
	CHK(dto_wait(p.req, 10 * SEC, 12, NULL) == DAT_DTO_SUCCESS);
	msg_send(fd, 1);
	CHK(msg_recv(fd, 10000) == 2);           /* freed */
	fill(p.buf + 256, 64, 3);
	iov = seg(&p, 256, 64);
	post_write(p.ep, 1, &iov, 13, &r);
	CHK(dto_wait(p.req, 20 * SEC, 13, NULL) == DAT_DTO_ERR_REMOTE_ACCESS);
	msg_send(fd, 3);
	return client_done(&p);
}

Test(tcp, freed_lmr_key_refused_after_use, .timeout = 60)
{
	struct peer p;
	DAT_EP_HANDLE b;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT k;
	DAT_RMR_CONTEXT rk;
	DAT_VLEN rlen;
	DAT_VADDR raddr;
	DAT_REGION_DESCRIPTION rd = { .for_va = NULL };
	DAT_LMR_TRIPLET iov = { 0 };
	uint8_t want[64];

	server_start(&p, &tcp, 0, c_freed_lmr, NULL);
	peer_ep(&p, &b, 0);
	rd.for_va = p.buf + FREED_OFF;
	CHK_RET(dat_lmr_create(p.n.ia, DAT_MEM_TYPE_VIRTUAL, rd, FREED_LEN, p.n.pz,
			       DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &k, &rk, &rlen, &raddr),
		DAT_SUCCESS);
	iov.lmr_context = k;
	iov.virtual_address = (DAT_VADDR)(uintptr_t)(p.buf + FREED_OFF);
	iov.segment_length = 64;
	post_recv(b, 1, &iov, 1);
	server_up(&p);
	server_accept(&p, b);
	msg_send(p.fd, rk);
	msg_send(p.fd, (uint32_t)(uintptr_t)(p.buf + FREED_OFF));
	msg_send(p.fd, (uint32_t)((uint64_t)(uintptr_t)(p.buf + FREED_OFF) >> 32));
	/* each memo learns the key: B's receive, B's send, A's write */
	CHK(dto_wait(p.rcv, 10 * SEC, 1, NULL) == DAT_DTO_SUCCESS);
	fill(want, 64, 1);
	CHK(memcmp(p.buf + FREED_OFF, want, 64) == 0);
	memset(p.buf + FREED_OFF, 9, 64);
	post_send(b, 1, &iov, 21);
	CHK(dto_wait(p.req, 10 * SEC, 21, NULL) == DAT_DTO_SUCCESS);
	CHK(msg_recv(p.fd, 10000) == 1);
	fill(want, 64, 2);
	CHK(memcmp(p.buf + FREED_OFF + 1024, want, 64) == 0);
	CHK_RET(dat_lmr_free(lmr), DAT_SUCCESS);
	msg_send(p.fd, 2);
	/* B: the send and the receive naming the freed key */
	post_send(b, 1, &iov, 22);
	CHK(dto_wait(p.req, 10 * SEC, 22, NULL) == DAT_DTO_ERR_LOCAL_PROTECTION);
	post_recv(b, 1, &iov, 3);
	CHK(dto_wait(p.rcv, 10 * SEC, 3, NULL) == DAT_DTO_ERR_LOCAL_PROTECTION);
	/* A: the client's second write was refused and left the first */
	CHK(msg_recv(p.fd, 20000) == 3);
	CHK(memcmp(p.buf + FREED_OFF + 1024, want, 64) == 0);
	server_done(&p);
}

/* ---- the peer is killed: no hang, receives flush ---- */

Test(tcp, peer_killed, .timeout = 60)
{
	struct peer_job j = { .dev = &tcp };
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r = { 0 };
	DAT_DTO_COOKIE c = { .as_64 = 2 };
	uint64_t t0;

	server_start(&p, &tcp, 0, killed_client, &j);
	post_recvs(&p, p.ep, 1, 0, 0, 64, 1);
	server_up(&p);
	msg_recv(p.fd, 10000);
	kill(p.pid, SIGKILL);
	reap(p.pid, 5000);
	/* an RDMA read to a dead peer must not hang either */
	r.rmr_context = 1;
	r.segment_length = 64;
	iov = seg(&p, 100, 64);
	dat_ep_post_rdma_read(p.ep, 1, &iov, c, &r, DAT_COMPLETION_DEFAULT_FLAG);
	t0 = now_ms();
	CHK(dto_wait(p.rcv, 20 * SEC, 1, NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(now_ms() - t0 < 15000);
	peer_close(&p);
}

/* ---- flush on disconnect ---- */

Test(tcp, flush_on_disconnect, .timeout = 60) { flush_on_disconnect(&tcp, 0); }

/* Sends completed before their sender left (dat_peer.h): delivered. */
Test(tcp, sends_before_disconnect_delivered, .timeout = 60)
{
	eager_outlives_disconnect(&tcp, 0, EAGER_DISCONNECT);
}
Test(tcp, sends_before_ep_free_delivered, .timeout = 60)
{
	eager_outlives_disconnect(&tcp, 0, EAGER_EP_FREE);
}
Test(tcp, sends_before_exit_delivered, .timeout = 60)
{
	eager_outlives_disconnect(&tcp, 0, EAGER_EXIT);
}
Test(tcp, srq_sends_before_disconnect_delivered, .timeout = 60)
{
	eager_outlives_disconnect(&tcp, 0, EAGER_SRQ | EAGER_DISCONNECT);
}

/* ---- a graceful disconnect follows the data posted before it ----
 * The client posts ORDER_N sends (distinct lengths, from ORDER_SLOTS
 * patterned slots) and disconnects at once, most of them still in its
 * send queue: the DISC travels behind them in the stream (as on
 * InfiniBand), so every send completes, and every receive of the server
 * completed, in order and whole, before its DISCONNECTED. */
#define ORDER_N     32
#define ORDER_SLOTS 4
#define ORDER_SLOT  (BUF / ORDER_SLOTS)

static size_t order_len(int i)
{
	return ORDER_SLOT - 8 * (size_t)i;
}

static int c_disc_order(int fd, void *arg)
{
	struct peer p;
	DAT_EVENT ev;

	(void)arg;
	client_open(&p, &tcp, 0, fd, NULL);
	for (int k = 0; k < ORDER_SLOTS; k++)
		fill(p.buf + (size_t)k * ORDER_SLOT, ORDER_SLOT, (uint8_t)(k + 1));
	for (int i = 0; i < ORDER_N; i++) {
		DAT_LMR_TRIPLET iov = seg(&p, (size_t)(i % ORDER_SLOTS) * ORDER_SLOT, order_len(i));

		post_send(p.ep, 1, &iov, (uint64_t)i);
	}
	CHK_RET(dat_ep_disconnect(p.ep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	CHK(wait_ev(p.n.conn_evd, 20 * SEC, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
	for (int i = 0; i < ORDER_N; i++)
		CHK(dto_wait(p.req, 10 * SEC, (uint64_t)i, NULL) == DAT_DTO_SUCCESS);
	msg_send(fd, 1);
	return client_done(&p);
}

Test(tcp, disconnect_follows_data_posted_before, .timeout = 60)
{
	struct peer p;

	server_start(&p, &tcp, 0, c_disc_order, NULL);
	for (int i = 0; i < ORDER_N; i++) {
		DAT_LMR_TRIPLET iov = seg(&p, (size_t)(i % ORDER_SLOTS) * ORDER_SLOT, ORDER_SLOT);

		post_recv(p.ep, 1, &iov, 100 + (uint64_t)i);
	}
	server_up(&p);
	CHK(wait_ev(p.n.conn_evd, 20 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	/* Completed already (a dequeue, no wait), none flushed. */
	for (int i = 0; i < ORDER_N; i++) {
		DAT_COUNT len;

		CHK(dto_wait(p.rcv, 0, 100 + (uint64_t)i, &len) == DAT_DTO_SUCCESS);
		CHK(len == (DAT_COUNT)order_len(i));
	}
	for (int k = 0; k < ORDER_SLOTS; k++) {
		uint8_t want[ORDER_SLOT];

		/* the slot's last message, ORDER_N - ORDER_SLOTS + k */
		fill(want, ORDER_SLOT, (uint8_t)(k + 1));
		CHK(memcmp(p.buf + (size_t)k * ORDER_SLOT, want,
			   order_len(ORDER_N - ORDER_SLOTS + k)) == 0);
	}
	msg_recv(p.fd, 10000);
	server_done(&p);
}

/* ---- a malformed frame on the data socket breaks that connection only ---- */

static int c_malformed(int fd, void *arg)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	int before[16], nb, victim;
	struct zd_tcp_hdr h;

	client_open(&p, &tcp, 0, fd, NULL);
	peer_ep(&p, &ep2, 0);
	/* the first EP's data socket is up once a send went through */
	send_wait(&p, p.ep, 0, 8, 1);
	nb = data_sockets((uint16_t)p.port, before, 16);
	client_connect(&p, ep2, p.port);
	send_wait(&p, ep2, 0, 8, 2);
	CHK(nb >= 1);
	/* the second EP's socket */
	victim = data_socket_added((uint16_t)p.port, before, nb);
	CHK(victim >= 0);
	/* a frame with a foreign version, then garbage */
	memset(&h, 0, sizeof(h));
	h.magic = ZD_TCP_WIRE_MAGIC;
	h.version = ZD_TCP_WIRE_VERSION + 1;
	h.op = ZD_TCP_OP_SEND;
	h.len = 8;
	CHK(send(victim, &h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h));
	msg_send(fd, 1);
	/* the first connection still works */
	msg_recv(fd, 10000);
	send_wait(&p, p.ep, 0, 8, 3);
	return client_done(&p);
}

Test(tcp, malformed_frame, .timeout = 60)
{
	struct peer p;
	DAT_EP_HANDLE ep2;

	server_start(&p, &tcp, 0, c_malformed, NULL);
	peer_ep(&p, &ep2, 0);
	post_recvs(&p, p.ep, 2, 0, 100, 64, 10);
	post_recvs(&p, ep2, 2, 1000, 100, 64, 20);
	server_up(&p);
	CHK(dto_wait(p.rcv, 10 * SEC, 10, NULL) == DAT_DTO_SUCCESS);
	server_accept(&p, ep2);
	CHK(dto_wait(p.rcv, 10 * SEC, 20, NULL) == DAT_DTO_SUCCESS);
	msg_recv(p.fd, 10000);
	/* ep2's other receive flushes: the bad frame broke that QP, and
	 * the consumer hears of it on the async EVD */
	CHK(dto_wait(p.rcv, 10 * SEC, 21, NULL) == DAT_DTO_ERR_FLUSHED);
	{
		DAT_EVENT ev;

		CHK(wait_ev(p.n.async, 5 * SEC, &ev) == DAT_ASYNC_ERROR_EP_BROKEN);
		CHK(ev.event_data.asynch_error_event_data.dat_handle == ep2);
	}
	msg_send(p.fd, 1);
	CHK(dto_wait(p.rcv, 10 * SEC, 11, NULL) == DAT_DTO_SUCCESS);
	server_done(&p);
}

/* ---- SRQ: two EPs' sends land in one shared receive queue ---- */

static int c_srq(int fd, void *arg)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	DAT_LMR_TRIPLET iov;

	client_open(&p, &tcp, 0, fd, &ep2);
	for (int i = 0; i < 8; i++) {
		fill(p.buf + i * 256, 256, (uint8_t)i);
		iov = seg(&p, (size_t)i * 256, 256);
		post_send(i & 1 ? ep2 : p.ep, 1, &iov, (uint64_t)i);
	}
	for (int i = 0; i < 8; i++)
		CHK(dto_wait(p.req, 10 * SEC, ~0ull, NULL) == DAT_DTO_SUCCESS);
	return client_done(&p);
}

Test(tcp, srq, .timeout = 60)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	DAT_LMR_TRIPLET iov;
	DAT_DTO_COOKIE c;
	int seen[8] = { 0 };

	server_start_with(&p, &tcp, 0, DAT_MEM_PRIV_ALL_FLAG, 1, c_srq, NULL);
	peer_ep(&p, &ep2, 1);
	for (int i = 0; i < 8; i++) {
		iov = seg(&p, 4096 + (size_t)i * 512, 512);
		c.as_64 = (uint64_t)i;
		CHK_RET(dat_srq_post_recv(p.srq, 1, &iov, c), DAT_SUCCESS);
	}
	server_up(&p);
	server_accept(&p, ep2);
	for (int i = 0; i < 8; i++) {
		DAT_EVENT ev;
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
		uint8_t *b;

		CHK(wait_ev(p.rcv, 10 * SEC, &ev) == DAT_DTO_COMPLETION_EVENT);
		CHK(d->status == DAT_DTO_SUCCESS && d->transfered_length == 256);
		CHK(d->user_cookie.as_64 < 8 && !seen[d->user_cookie.as_64]);
		seen[d->user_cookie.as_64] = 1;
		b = p.buf + 4096 + d->user_cookie.as_64 * 512;
		/* which message landed here: its first byte names it */
		CHK(b[0] < 8);
		for (int k = 0; k < 256; k++)
			CHK(b[k] == (uint8_t)(b[0] + k * 7));
	}
	server_done(&p);
}

/* ---- a thread asleep in dat_cno_wait is woken by arriving data ---- */

static int c_cno(int fd, void *arg)
{
	struct peer p;

	client_open(&p, &tcp, 0, fd, NULL);
	msg_recv(fd, 10000);  /* the server sleeps in dat_cno_wait by now */
	usleep(200000);
	fill(p.buf, 64, 4);
	send_wait(&p, p.ep, 0, 64, 21);
	return client_done(&p);
}

Test(tcp, cno_wait_woken_by_arriving_send, .timeout = 60)
{
	struct peer p;
	DAT_CNO_HANDLE cno;
	DAT_EVD_HANDLE got = DAT_HANDLE_NULL;

	server_start(&p, &tcp, 0, c_cno, NULL);
	CHK_RET(dat_cno_create(p.n.ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno), DAT_SUCCESS);
	CHK_RET(dat_evd_modify_cno(p.rcv, cno), DAT_SUCCESS);
	post_recvs(&p, p.ep, 1, 1000, 0, 64, 22);
	server_up(&p);
	msg_send(p.fd, 1);
	/* Nobody polls: only the device's wake-up can end this wait. */
	CHK_RET(dat_cno_wait(cno, 10 * SEC, &got), DAT_SUCCESS);
	CHK(got == p.rcv);
	CHK(dto_wait(p.rcv, 10 * SEC, 22, NULL) == DAT_DTO_SUCCESS);
	for (int i = 0; i < 64; i++)
		CHK(p.buf[1000 + i] == (uint8_t)(4 + i * 7));
	msg_send(p.fd, 1);
	CHK(reap(p.pid, 20000) == 0);
	CHK_RET(dat_evd_modify_cno(p.rcv, DAT_HANDLE_NULL), DAT_SUCCESS);
	CHK_RET(dat_cno_free(cno), DAT_SUCCESS);
	peer_close(&p);
}

/* ---- the connection's socket dies (the data and the CM ride it): BROKEN ---- */

static int c_datadeath(int fd, void *arg)
{
	struct peer p;
	DAT_EVENT ev;
	int socks[16], n;

	(void)arg;
	client_open(&p, &tcp, 0, fd, NULL);
	send_wait(&p, p.ep, 0, 8, 1);
	n = data_sockets((uint16_t)p.port, socks, 16);
	CHK(n == 1);
	/* The connection's socket ends (one: the CM's, carrying the data). */
	CHK(shutdown(socks[0], SHUT_RDWR) == 0);
	/* Nobody polls the DTO EVDs: the IA's thread notices, the CM ends
	 * the connection. */
	CHK(wait_ev(p.n.conn_evd, 5 * SEC, &ev) == DAT_CONNECTION_EVENT_BROKEN);
	msg_send(fd, 1);
	peer_close(&p);
	return 0;
}

Test(tcp, data_socket_death_breaks_ep, .timeout = 60)
{
	struct peer p;
	DAT_EVENT ev;

	server_start(&p, &tcp, 0, c_datadeath, NULL);
	post_recvs(&p, p.ep, 2, 0, 100, 64, 10);
	server_up(&p);
	CHK(dto_wait(p.rcv, 10 * SEC, 10, NULL) == DAT_DTO_SUCCESS);
	/* Both ends: the EP goes BROKEN, and what was outstanding flushes. */
	CHK(wait_ev(p.n.conn_evd, 5 * SEC, &ev) == DAT_CONNECTION_EVENT_BROKEN);
	CHK(dto_wait(p.rcv, 5 * SEC, 11, NULL) == DAT_DTO_ERR_FLUSHED);
	msg_recv(p.fd, 10000);
	CHK(reap(p.pid, 20000) == 0);
	peer_close(&p);
}

/* ---- who makes progress at an RDMA target (zd_tcp.h) ---- */

Test(tcp, unknown_option_refused, .timeout = 30)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;

	CHK(DAT_GET_TYPE(dat_ia_open((DAT_NAME_PTR) "zdapl-tcp-lo-badopt", 8, &async, &ia)) ==
	    DAT_INVALID_PARAMETER);
}

/* Initiator (on the device @arg names): one RDMA write of 4 KiB ending in
 * a marker byte into the target's buffer; its completion needs the
 * target's ACK. */
static int c_spin_write(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r;

	client_open(&p, arg, 0, fd, NULL);
	r = recv_region(fd);
	r.segment_length = 4096;
	fill(p.buf, 4096, 9);
	p.buf[4095] = 0xee;
	iov = seg(&p, 0, 4096);
	post_write(p.ep, 1, &iov, 41, &r);
	CHK(dto_wait(p.req, 20 * SEC, 41, NULL) == DAT_DTO_SUCCESS);
	msg_send(fd, 1);
	msg_recv(fd, 20000);
	peer_close(&p);
	return 0;
}

/* Target: after the connection, no DAT call at all, only memory reads,
 * for @spin_ms; whether the marker landed meanwhile. */
static bool spin_target(struct peer *p, uint64_t spin_ms)
{
	volatile uint8_t *last = p->buf + 4095;

	send_region(p, p->fd);
	for (uint64_t t0 = now_ms(); now_ms() - t0 < spin_ms; usleep(100))
		if (*last == 0xee)
			return true;
	return false;
}

Test(tcp, progress_thread_serves_spinning_target, .timeout = 60)
{
	struct peer p;
	uint8_t want[4096];

	server_start(&p, &tcp_thread, 0, c_spin_write, (void *)&tcp_thread);
	server_up(&p);
	/* The IA's thread lands the write and ACKs it: the initiator's
	 * write completes while we never call into DAT. */
	CHK(spin_target(&p, 10000));
	CHK(msg_recv(p.fd, 20000) == 1);
	fill(want, 4096, 9);
	want[4095] = 0xee;
	CHK(memcmp(p.buf, want, 4096) == 0);
	server_done(&p);
}

Test(tcp, progress_manual_needs_target_poll, .timeout = 60)
{
	struct peer p;
	DAT_EVENT ev;

	server_start(&p, &tcp_manual, 0, c_spin_write, (void *)&tcp_manual);
	server_up(&p);
	/* progress=manual: a target that only spins on memory stalls the
	 * initiator's write (README, "How it works")... */
	CHK(!spin_target(&p, 1000));
	/* ...until it polls a DTO EVD of the IA. */
	for (uint64_t t0 = now_ms(); p.buf[4095] != 0xee && now_ms() - t0 < 10000; usleep(100))
		CHK(dat_evd_dequeue(p.rcv, &ev) != DAT_SUCCESS);
	CHK(p.buf[4095] == 0xee);
	CHK(msg_recv(p.fd, 20000) == 1);
	server_done(&p);
}
