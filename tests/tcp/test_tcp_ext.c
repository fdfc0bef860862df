/*
 * The IB extensions on the tcp device (dat_ib_extensions.h): RDMA write
 * with immediate data, fetch-and-add and compare-and-swap, between two
 * processes (fork) connected by the real connection manager over
 * 127.0.0.1, through libdat2 and a "tcp lo" dat.conf line, as dtestx
 * reaches them.
 *
 * The parent is the server (the target of the extension operations, and
 * the one that posts receives), the forked child the client (the
 * initiator); they exchange the server's region and their verdicts over a
 * socketpair (msg_*).  Unless a test says otherwise the server makes no
 * DAT call while the client works on its memory: the IA's progress thread
 * serves the writes and atomics, as dtestx needs.
 */
#include <endian.h>

#include "dat_peer.h"
#include "tcp_sockets.h"
#include "hw/tcp/zd_tcp_wire.h"

#include <dat2/dat_ib_extensions.h>

static const struct peer_dev tcp = { .ia = "zdapl-tcp-lo", .rkey_spoil = 0x5a5a0 };
static const struct peer_dev tcp_manual = { .ia = "zdapl-tcp-lo-manual" };

/* A server region the client may do atomics on, and one it may not. */
#define PRIV_ATOMIC ((DAT_MEM_PRIV_FLAGS)(DAT_MEM_PRIV_ALL_FLAG | DAT_IB_MEM_PRIV_REMOTE_ATOMIC))
#define PRIV_NO_WRITE ((DAT_MEM_PRIV_FLAGS)(DAT_MEM_PRIV_LOCAL_READ_FLAG |            \
					   DAT_MEM_PRIV_LOCAL_WRITE_FLAG |           \
					   DAT_MEM_PRIV_REMOTE_READ_FLAG |           \
					   DAT_IB_MEM_PRIV_REMOTE_ATOMIC))

#define WORD_OFF 64           /* the server's word for the atomics */
#define RECV_OFF 60000        /* the server's receive buffers */

static const DAT_DTOS OP_WRITE_IMM = (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED;
static const DAT_DTOS OP_RECV_IMM = (DAT_DTOS)DAT_IB_DTO_RECV_IMMED;
static const DAT_DTOS OP_FAA = (DAT_DTOS)DAT_IB_DTO_FETCH_ADD;
static const DAT_DTOS OP_CAS = (DAT_DTOS)DAT_IB_DTO_CMP_SWAP;

/* ---- posting and waiting ---- */

static DAT_RETURN write_imm(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov, uint64_t cookie,
			    DAT_RMR_TRIPLET *r, uint32_t imm, DAT_COMPLETION_FLAGS flags)
{
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	return dat_ib_post_rdma_write_immed(ep, n, iov, c, r, imm, flags);
}

static DAT_RETURN faa(DAT_EP_HANDLE ep, uint64_t add, DAT_LMR_TRIPLET *local, uint64_t cookie,
		      DAT_RMR_TRIPLET *r, DAT_COMPLETION_FLAGS flags)
{
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	return dat_ib_post_fetch_and_add(ep, add, local, c, r, flags);
}

static DAT_RETURN cas(DAT_EP_HANDLE ep, uint64_t cmp, uint64_t swap, DAT_LMR_TRIPLET *local,
		      uint64_t cookie, DAT_RMR_TRIPLET *r, DAT_COMPLETION_FLAGS flags)
{
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	return dat_ib_post_cmp_and_swap(ep, cmp, swap, local, c, r, flags);
}

/* The extension type the completion of @op must report. */
static DAT_IB_EXT_TYPE ext_type_of(DAT_DTOS op)
{
	if (op == OP_WRITE_IMM)
		return DAT_IB_RDMA_WRITE_IMMED;
	if (op == OP_RECV_IMM)
		return DAT_IB_RDMA_WRITE_IMMED_DATA;
	return op == OP_FAA ? DAT_IB_FETCH_AND_ADD : DAT_IB_CMP_AND_SWAP;
}

/* The next event of @evd within @us must be the DAT_IB_DTO_EVENT of an
 * extension operation @op, with cookie @cookie (unless ~0) and the
 * extension type and status that go with it; returns its DTO status, its
 * length into @len and its immediate data into @imm (unless NULL). */
static int ext_wait(DAT_EVD_HANDLE evd, DAT_TIMEOUT us, DAT_DTOS op, uint64_t cookie,
		    DAT_COUNT *len, uint32_t *imm)
{
	DAT_EVENT ev;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	const DAT_IB_EXTENSION_EVENT_DATA *x = (const void *)ev.event_extension_data;
	DAT_EVENT_NUMBER num = wait_ev(evd, us, &ev);

	if (num != (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT || d->operation != op ||
	    (cookie != ~0ull && d->user_cookie.as_64 != cookie))
		fprintf(stderr, "event 0x%x op %d cookie %llu status %d; want op %d cookie %llu\n",
			num, d->operation, (unsigned long long)d->user_cookie.as_64, d->status, op,
			(unsigned long long)cookie);
	CHK(num == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	CHK(d->operation == op);
	CHK(cookie == ~0ull || d->user_cookie.as_64 == cookie);
	CHK(x->type == ext_type_of(op));
	CHK(x->status == (d->status == DAT_DTO_SUCCESS ? DAT_OP_SUCCESS : DAT_IB_OP_ERR));
	if (len)
		*len = (DAT_COUNT)d->transfered_length;
	if (imm)
		*imm = x->val.immed.data;
	return d->status;
}

/* The server's word at @off of its region @r, for an atomic. */
static DAT_RMR_TRIPLET word_at(const DAT_RMR_TRIPLET *r, size_t off)
{
	DAT_RMR_TRIPLET w = *r;

	w.virtual_address += off;
	w.segment_length = 8;
	return w;
}

static uint64_t load64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static void store64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, sizeof(v));
}

/* Nothing waits on @evd. */
static void evd_empty(DAT_EVD_HANDLE evd)
{
	DAT_EVENT ev;

	CHK(DAT_GET_TYPE(dat_evd_dequeue(evd, &ev)) == DAT_QUEUE_EMPTY);
}

/* ---- RDMA write with immediate data ---- */

/* Client: 2 segments (1000 + 3000 bytes of patterns 5 and 6) to the
 * server's buffer + 4096, immediate 0xdeadbeef (cookie 7); then 0 bytes
 * with immediate 0 (cookie 8).  Each completes at the client as the
 * write it is. */
static int c_write_imm(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov[2];
	DAT_RMR_TRIPLET r;
	DAT_COUNT len;

	(void)arg;
	client_open(&p, &tcp, 0, fd, NULL);
	r = recv_region(fd);
	r.virtual_address += 4096;
	r.segment_length = 4000;
	fill(p.buf, 1000, 5);
	fill(p.buf + 2000, 3000, 6);
	iov[0] = seg(&p, 0, 1000);
	iov[1] = seg(&p, 2000, 3000);
	CHK_RET(write_imm(p.ep, 2, iov, 7, &r, 0xdeadbeef, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_WRITE_IMM, 7, &len, NULL) == DAT_DTO_SUCCESS);
	CHK(len == 4000);
	iov[0] = seg(&p, 0, 0);
	CHK_RET(write_imm(p.ep, 1, iov, 8, &r, 0, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_WRITE_IMM, 8, &len, NULL) == DAT_DTO_SUCCESS);
	CHK(len == 0);
	return client_done(&p);
}

/* Server: the receives with cookies 5 and 6 (128 bytes each, filled with
 * 0xab) complete DAT_IB_DTO_RECV_IMMED with the write's length and its
 * immediate data, the written bytes already in place, the receives'
 * buffers untouched. */
static void write_imm_server_check(struct peer *p)
{
	uint8_t want[4000], untouched[256];
	DAT_COUNT len;
	uint32_t imm;

	CHK(ext_wait(p->rcv, 10 * SEC, OP_RECV_IMM, 5, &len, &imm) == DAT_DTO_SUCCESS);
	CHK(len == 4000 && imm == 0xdeadbeef);
	fill(want, 1000, 5);
	fill(want + 1000, 3000, 6);
	CHK(memcmp(p->buf + 4096, want, 4000) == 0);
	CHK(ext_wait(p->rcv, 10 * SEC, OP_RECV_IMM, 6, &len, &imm) == DAT_DTO_SUCCESS);
	CHK(len == 0 && imm == 0);
	memset(untouched, 0xab, sizeof(untouched));
	CHK(memcmp(p->buf + RECV_OFF, untouched, sizeof(untouched)) == 0);
	CHK(p->buf[4095] == 0 && p->buf[4096 + 4000] == 0);  /* nothing outside the write */
}

Test(tcp_ext, write_imm_completes_a_receive_with_the_immediate, .timeout = 60)
{
	struct peer p;

	server_start(&p, &tcp, 0, c_write_imm, NULL);
	memset(p.buf + RECV_OFF, 0xab, 256);
	post_recvs(&p, p.ep, 2, RECV_OFF, 128, 128, 5);
	server_up(&p);
	send_region(&p, p.fd);
	write_imm_server_check(&p);
	server_done(&p);
}

Test(tcp_ext, write_imm_consumes_an_srq_buffer, .timeout = 60)
{
	struct peer p;

	server_start_with(&p, &tcp, 0, DAT_MEM_PRIV_ALL_FLAG, 1, c_write_imm, NULL);
	memset(p.buf + RECV_OFF, 0xab, 256);
	for (int i = 0; i < 2; i++) {
		DAT_LMR_TRIPLET iov = seg(&p, RECV_OFF + (size_t)i * 128, 128);
		DAT_DTO_COOKIE c = { .as_64 = 5 + (uint64_t)i };

		CHK_RET(dat_srq_post_recv(p.srq, 1, &iov, c), DAT_SUCCESS);
	}
	server_up(&p);
	send_region(&p, p.fd);
	write_imm_server_check(&p);
	server_done(&p);
}

/* ---- zero bytes: no rkey (InfiniBand checks none; MPI transports signal
 * with a zero-byte write with immediate data, rkey 0, address 0) ----
 * Client: write-imm with no segment and rkey 0 (cookie 1, imm 0x51), with
 * one empty segment and a key nobody has (cookie 2, imm 0x52), plain
 * zero-byte writes and reads with rkey 0 (cookies 3..6), then a 16-byte
 * send (cookie 7): all succeed, the connection stands. */
static int c_zero_bytes(int fd, void *arg)
{
	const DAT_RMR_TRIPLET none = { .rmr_context = 0, .virtual_address = 0,
				       .segment_length = 0 };
	DAT_RMR_TRIPLET r = none;
	struct peer p;
	DAT_LMR_TRIPLET l;
	DAT_COUNT len;

	(void)arg;
	client_open(&p, &tcp, 0, fd, NULL);
	CHK_RET(write_imm(p.ep, 0, NULL, 1, &r, 0x51, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_WRITE_IMM, 1, &len, NULL) == DAT_DTO_SUCCESS);
	CHK(len == 0);
	l = seg(&p, 0, 0);
	r.rmr_context = 0xdead00;
	CHK_RET(write_imm(p.ep, 1, &l, 2, &r, 0x52, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_WRITE_IMM, 2, &len, NULL) == DAT_DTO_SUCCESS);
	CHK(len == 0);
	r = none;
	post_write(p.ep, 0, NULL, 3, &r);
	CHK(dto_wait(p.req, 10 * SEC, 3, &len) == DAT_DTO_SUCCESS && len == 0);
	post_write(p.ep, 1, &l, 4, &r);
	CHK(dto_wait(p.req, 10 * SEC, 4, &len) == DAT_DTO_SUCCESS && len == 0);
	post_read(p.ep, 0, NULL, 5, &r);
	CHK(dto_wait(p.req, 10 * SEC, 5, &len) == DAT_DTO_SUCCESS && len == 0);
	post_read(p.ep, 1, &l, 6, &r);
	CHK(dto_wait(p.req, 10 * SEC, 6, &len) == DAT_DTO_SUCCESS && len == 0);
	fill(p.buf, 16, 9);
	send_wait(&p, p.ep, 0, 16, 7);
	return client_done(&p);
}

Test(tcp_ext, zero_byte_rdma_checks_no_rkey, .timeout = 60)
{
	struct peer p;
	uint8_t want[16], untouched[256];
	DAT_COUNT len;
	uint32_t imm;

	server_start(&p, &tcp, 0, c_zero_bytes, NULL);
	memset(p.buf + RECV_OFF, 0xab, 384);
	post_recvs(&p, p.ep, 3, RECV_OFF, 128, 128, 10);
	server_up(&p);
	CHK(ext_wait(p.rcv, 10 * SEC, OP_RECV_IMM, 10, &len, &imm) == DAT_DTO_SUCCESS);
	CHK(len == 0 && imm == 0x51);
	CHK(ext_wait(p.rcv, 10 * SEC, OP_RECV_IMM, 11, &len, &imm) == DAT_DTO_SUCCESS);
	CHK(len == 0 && imm == 0x52);
	CHK(dto_wait(p.rcv, 10 * SEC, 12, &len) == DAT_DTO_SUCCESS && len == 16);
	fill(want, 16, 9);
	CHK(memcmp(p.buf + RECV_OFF + 256, want, 16) == 0);
	memset(untouched, 0xab, sizeof(untouched));
	CHK(memcmp(p.buf + RECV_OFF, untouched, sizeof(untouched)) == 0);
	server_done(&p);
}

/* ---- no receive posted: the immediate waits for one, nothing is lost ----
 * 100 writes with immediate data i (8 bytes of value i at the server's
 * word i), then a 16-byte send, before the server posts any receive.  The
 * first writes wait in the target's eager queue (placed, ACKed); once it
 * is full, the target stops reading (RNR backpressure) and the client's
 * later writes wait for their ACKs.  Then the server posts receives, 32 at
 * a time (its RQ's depth): each completes in order, cookie i with
 * immediate i, and the send lands in the 101st. */
#define NOREC_N 100
#define NOREC_SEND_COOKIE 1000

static int c_no_recv(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r, w;
	uint32_t posted = 0, done = 0, before_recvs = ~0u;

	(void)arg;
	client_open(&p, &tcp, 0, fd, NULL);
	r = recv_region(fd);
	while (done < NOREC_N) {
		int st;

		for (; posted < NOREC_N && posted - done < 32; posted++) {
			store64(p.buf + 8 * posted, posted);
			iov = seg(&p, 8 * posted, 8);
			w = word_at(&r, 8 * posted);
			CHK_RET(write_imm(p.ep, 1, &iov, posted, &w, posted,
					  DAT_COMPLETION_DEFAULT_FLAG),
				DAT_SUCCESS);
		}
		if (before_recvs == ~0u) {
			/* Until the writes stall: a second without a completion
			 * (after the first, which may take longer on a busy host). */
			DAT_EVENT ev;

			if (wait_ev(p.req, done ? 1 * SEC : 10 * SEC, &ev) == 0) {
				before_recvs = done;
				msg_send(fd, done);  /* the server posts receives now */
				continue;
			}
			CHK(ev.event_number == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
			CHK(ev.event_data.dto_completion_event_data.user_cookie.as_64 == done);
			st = ev.event_data.dto_completion_event_data.status;
		} else {
			st = ext_wait(p.req, 10 * SEC, OP_WRITE_IMM, done, NULL, NULL);
		}
		CHK(st == DAT_DTO_SUCCESS);
		done++;
	}
	CHK(before_recvs != ~0u);
	fill(p.buf + 4096, 16, 3);
	send_wait(&p, p.ep, 4096, 16, NOREC_SEND_COOKIE);
	return client_done(&p);
}

Test(tcp_ext, write_imm_before_any_receive_waits_for_one, .timeout = 60)
{
	struct peer p;
	uint32_t acked, next = 0;
	DAT_COUNT len;
	uint8_t want[16];

	server_start(&p, &tcp, 0, c_no_recv, NULL);
	server_up(&p);
	send_region(&p, p.fd);
	/* The client's writes stopped completing. */
	acked = msg_recv(p.fd, 20000);
	CHK(acked > 0 && acked < NOREC_N);
	/* Those placed, none consumed a receive (none posted), none lost. */
	for (uint32_t i = 0; i < acked; i++)
		CHK(load64(p.buf + 8 * i) == i);
	evd_empty(p.rcv);
	for (; next < 32; next++)
		post_recvs(&p, p.ep, 1, RECV_OFF, 0, 64, next);
	for (uint32_t i = 0; i < NOREC_N; i++) {
		uint32_t imm;

		CHK(ext_wait(p.rcv, 10 * SEC, OP_RECV_IMM, i, &len, &imm) == DAT_DTO_SUCCESS);
		CHK(len == 8 && imm == i);
		CHK(load64(p.buf + 8 * i) == i);
		if (next <= NOREC_N) {
			post_recvs(&p, p.ep, 1, RECV_OFF, 0, 64,
				   next == NOREC_N ? NOREC_SEND_COOKIE : next);
			next++;
		}
	}
	CHK(dto_wait(p.rcv, 10 * SEC, NOREC_SEND_COOKIE, &len) == DAT_DTO_SUCCESS);
	CHK(len == 16);
	fill(want, 16, 3);
	CHK(memcmp(p.buf + RECV_OFF, want, 16) == 0);
	server_done(&p);
}

/* ---- a write with immediate data the target refuses ----
 * The server's region lacks REMOTE_WRITE: the write completes
 * DAT_DTO_ERR_REMOTE_ACCESS, its receive is not consumed (it flushes
 * with the broken connection, as a plain receive), the memory stays
 * zero, and the client's next write with immediate data flushes. */
static int c_write_imm_refused(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r;

	(void)arg;
	client_open(&p, &tcp, 0, fd, NULL);
	r = recv_region(fd);
	fill(p.buf, 256, 4);
	iov = seg(&p, 0, 256);
	CHK_RET(write_imm(p.ep, 1, &iov, 31, &r, 0x5555, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(ext_wait(p.req, 20 * SEC, OP_WRITE_IMM, 31, NULL, NULL) == DAT_DTO_ERR_REMOTE_ACCESS);
	if (write_imm(p.ep, 1, &iov, 32, &r, 0x6666, DAT_COMPLETION_DEFAULT_FLAG) == DAT_SUCCESS)
		CHK(ext_wait(p.req, 20 * SEC, OP_WRITE_IMM, 32, NULL, NULL) ==
		    DAT_DTO_ERR_FLUSHED);
	msg_send(fd, 1);
	return client_done(&p);
}

Test(tcp_ext, write_imm_without_remote_write_is_refused, .timeout = 60)
{
	struct peer p;
	DAT_EVENT ev;

	server_start_with(&p, &tcp, 0, PRIV_NO_WRITE, 0, c_write_imm_refused, NULL);
	post_recvs(&p, p.ep, 1, RECV_OFF, 0, 64, 1);
	server_up(&p);
	send_region(&p, p.fd);
	CHK(wait_ev(p.rcv, 20 * SEC, &ev) == DAT_DTO_COMPLETION_EVENT);
	CHK(ev.event_data.dto_completion_event_data.user_cookie.as_64 == 1);
	CHK(ev.event_data.dto_completion_event_data.operation == DAT_DTO_RECEIVE);
	CHK(ev.event_data.dto_completion_event_data.status == DAT_DTO_ERR_FLUSHED);
	CHK(msg_recv(p.fd, 20000) == 1);
	for (int i = 0; i < BUF; i++)
		CHK(p.buf[i] == 0);
	server_done(&p);
}

/* ---- fetch-and-add and compare-and-swap ---- */

/* Client: on the server's word (0x100): FAA +0x10 (old 0x100); CAS
 * 0x110 -> 0xabc (matches: old 0x110); CAS 1 -> 2 (does not: old 0xabc);
 * FAA -0xabc, wrapping to 0 (old 0xabc).  The old values land host order
 * in the local segment: 8 bytes at an odd address, then a 16-byte segment
 * of which only the first 8 are written. */
static int c_atomics(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET l8, l16;
	DAT_RMR_TRIPLET r, w;
	DAT_COUNT len;

	(void)arg;
	client_open(&p, &tcp, 0, fd, NULL);
	r = recv_region(fd);
	w = word_at(&r, WORD_OFF);
	memset(p.buf, 0xee, 64);
	l8 = seg(&p, 3, 8);
	l16 = seg(&p, 32, 16);

	CHK_RET(faa(p.ep, 0x10, &l8, 1, &w, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_FAA, 1, &len, NULL) == DAT_DTO_SUCCESS);
	CHK(len == 8 && load64(p.buf + 3) == 0x100);
	CHK(p.buf[2] == 0xee && p.buf[11] == 0xee);

	CHK_RET(cas(p.ep, 0x110, 0xabc, &l16, 2, &w, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_CAS, 2, &len, NULL) == DAT_DTO_SUCCESS);
	CHK(len == 8 && load64(p.buf + 32) == 0x110);
	for (int i = 40; i < 48; i++)
		CHK(p.buf[i] == 0xee);

	CHK_RET(cas(p.ep, 1, 2, &l8, 3, &w, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_CAS, 3, &len, NULL) == DAT_DTO_SUCCESS);
	CHK(len == 8 && load64(p.buf + 3) == 0xabc);

	CHK_RET(faa(p.ep, (uint64_t)0 - 0xabc, &l8, 4, &w, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_FAA, 4, &len, NULL) == DAT_DTO_SUCCESS);
	CHK(len == 8 && load64(p.buf + 3) == 0xabc);
	msg_send(fd, 1);
	return client_done(&p);
}

Test(tcp_ext, fetch_add_and_cmp_swap_return_the_old_value, .timeout = 60)
{
	struct peer p;

	server_start_with(&p, &tcp, 0, PRIV_ATOMIC, 0, c_atomics, NULL);
	store64(p.buf + WORD_OFF, 0x100);
	server_up(&p);
	send_region(&p, p.fd);
	CHK(msg_recv(p.fd, 20000) == 1);
	/* the CAS that matched swapped, the one that did not left the word,
	 * the last add wrapped it to 0; nothing else changed */
	CHK(load64(p.buf + WORD_OFF) == 0);
	for (int i = 0; i < BUF; i++)
		CHK(p.buf[i] == 0);
	server_done(&p);
}

/* ---- an atomic the target refuses ----
 * The server's region has every DAT right but not
 * DAT_IB_MEM_PRIV_REMOTE_ATOMIC: the FAA completes
 * DAT_DTO_ERR_REMOTE_ACCESS, the server's word and the client's local
 * buffer stay as they were, and the CAS behind it flushes. */
static int c_atomic_refused(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r, w;

	(void)arg;
	client_open(&p, &tcp, 0, fd, NULL);
	r = recv_region(fd);
	w = word_at(&r, WORD_OFF);
	store64(p.buf, 0x77);
	l = seg(&p, 0, 8);
	CHK_RET(faa(p.ep, 1, &l, 41, &w, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK_RET(cas(p.ep, 0x55, 0x66, &l, 42, &w, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, 20 * SEC, OP_FAA, 41, NULL, NULL) == DAT_DTO_ERR_REMOTE_ACCESS);
	CHK(ext_wait(p.req, 20 * SEC, OP_CAS, 42, NULL, NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(load64(p.buf) == 0x77);
	msg_send(fd, 1);
	return client_done(&p);
}

Test(tcp_ext, atomic_without_remote_atomic_is_refused, .timeout = 60)
{
	struct peer p;

	server_start_with(&p, &tcp, 0, DAT_MEM_PRIV_ALL_FLAG, 0, c_atomic_refused, NULL);
	store64(p.buf + WORD_OFF, 0x55);
	server_up(&p);
	send_region(&p, p.fd);
	CHK(msg_recv(p.fd, 20000) == 1);
	CHK(load64(p.buf + WORD_OFF) == 0x55);
	server_done(&p);
}

/* ---- atomics ahead of a refused request still complete ----
 * 8 FAAs, then one with an rkey nobody has, then a CAS, posted back to
 * back: the target executes the 8 (their answers go out ahead of its
 * NAK), refuses the 9th, and breaks; the client sees 8 successes with old
 * values 0x55.. 0x5c, REMOTE_ACCESS, and the CAS flushed. */
static int c_atomics_then_refused(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r, w, bad;

	(void)arg;
	client_open(&p, &tcp, 0, fd, NULL);
	r = recv_region(fd);
	w = word_at(&r, WORD_OFF);
	bad = w;
	bad.rmr_context ^= tcp.rkey_spoil;
	for (int i = 0; i < 8; i++) {
		l = seg(&p, 8 * (size_t)i, 8);
		CHK_RET(faa(p.ep, 1, &l, (uint64_t)i, &w, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	}
	l = seg(&p, 64, 8);
	CHK_RET(faa(p.ep, 1, &l, 8, &bad, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK_RET(cas(p.ep, 0, 1, &l, 9, &w, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	for (int i = 0; i < 8; i++) {
		CHK(ext_wait(p.req, 20 * SEC, OP_FAA, (uint64_t)i, NULL, NULL) == DAT_DTO_SUCCESS);
		CHK(load64(p.buf + 8 * i) == 0x55 + (uint64_t)i);
	}
	CHK(ext_wait(p.req, 20 * SEC, OP_FAA, 8, NULL, NULL) == DAT_DTO_ERR_REMOTE_ACCESS);
	CHK(ext_wait(p.req, 20 * SEC, OP_CAS, 9, NULL, NULL) == DAT_DTO_ERR_FLUSHED);
	msg_send(fd, 1);
	return client_done(&p);
}

Test(tcp_ext, atomics_ahead_of_a_refused_request_complete, .timeout = 60)
{
	struct peer p;

	server_start_with(&p, &tcp, 0, PRIV_ATOMIC, 0, c_atomics_then_refused, NULL);
	store64(p.buf + WORD_OFF, 0x55);
	server_up(&p);
	send_region(&p, p.fd);
	CHK(msg_recv(p.fd, 20000) == 1);
	CHK(load64(p.buf + WORD_OFF) == 0x55 + 8);
	server_done(&p);
}

/* ---- what core refuses before the device sees it ----
 * A misaligned remote word, a local segment shorter than 8 bytes, fewer
 * than 8 remote bytes, no local or remote triplet, and an EP that is not
 * connected: each call fails at once with the DAT error, and nothing was
 * queued (the good atomic after them is the first completion). */
static int c_atomic_args(int fd, void *arg)
{
	struct peer p;
	DAT_EP_HANDLE idle;
	DAT_LMR_TRIPLET l, l4;
	DAT_RMR_TRIPLET r, w, odd, short_w;
	DAT_COMPLETION_FLAGS f = DAT_COMPLETION_DEFAULT_FLAG;

	(void)arg;
	client_open(&p, &tcp, 0, fd, NULL);
	peer_ep(&p, &idle, 0);
	r = recv_region(fd);
	w = word_at(&r, WORD_OFF);
	odd = word_at(&r, WORD_OFF + 4);
	short_w = w;
	short_w.segment_length = 4;
	l = seg(&p, 0, 8);
	l4 = seg(&p, 0, 4);

	CHK(DAT_GET_TYPE(faa(p.ep, 1, &l, 1, &odd, f)) == DAT_INVALID_PARAMETER);
	CHK(DAT_GET_TYPE(cas(p.ep, 0, 1, &l, 1, &odd, f)) == DAT_INVALID_PARAMETER);
	CHK(DAT_GET_TYPE(faa(p.ep, 1, &l4, 1, &w, f)) == DAT_LENGTH_ERROR);
	CHK(DAT_GET_TYPE(cas(p.ep, 0, 1, &l4, 1, &w, f)) == DAT_LENGTH_ERROR);
	CHK(DAT_GET_TYPE(faa(p.ep, 1, &l, 1, &short_w, f)) == DAT_INVALID_PARAMETER);
	CHK(DAT_GET_TYPE(faa(p.ep, 1, NULL, 1, &w, f)) == DAT_INVALID_PARAMETER);
	CHK(DAT_GET_TYPE(cas(p.ep, 0, 1, &l, 1, NULL, f)) == DAT_INVALID_PARAMETER);
	CHK(DAT_GET_TYPE(write_imm(p.ep, 1, &l, 1, NULL, 7, f)) == DAT_INVALID_PARAMETER);
	CHK(DAT_GET_TYPE(faa(idle, 1, &l, 1, &w, f)) == DAT_INVALID_STATE);
	CHK(DAT_GET_TYPE(write_imm(idle, 1, &l, 1, &w, 7, f)) == DAT_INVALID_STATE);
	CHK(DAT_GET_TYPE(faa(DAT_HANDLE_NULL, 1, &l, 1, &w, f)) == DAT_INVALID_HANDLE);
	evd_empty(p.req);

	CHK_RET(faa(p.ep, 5, &l, 2, &w, f), DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_FAA, 2, NULL, NULL) == DAT_DTO_SUCCESS);
	CHK(load64(p.buf) == 0x40);
	msg_send(fd, 1);
	CHK_RET(dat_ep_free(idle), DAT_SUCCESS);
	return client_done(&p);
}

Test(tcp_ext, bad_atomic_arguments_fail_at_once, .timeout = 60)
{
	struct peer p;

	server_start_with(&p, &tcp, 0, PRIV_ATOMIC, 0, c_atomic_args, NULL);
	store64(p.buf + WORD_OFF, 0x40);
	server_up(&p);
	send_region(&p, p.fd);
	CHK(msg_recv(p.fd, 20000) == 1);
	CHK(load64(p.buf + WORD_OFF) == 0x45);
	server_done(&p);
}

/* ---- two initiator processes racing on one word ----
 * Each does RACE_N fetch-and-adds of 1 on the server's word, RACE_WINDOW
 * in flight; the server makes no DAT call meanwhile (its IA's thread
 * serves both connections).  No update is lost: the word ends at exactly
 * 2 * RACE_N, and each client's old values rise strictly (its connection
 * executes in order). */
#define RACE_N 100000u
#define RACE_WINDOW 32u

static int c_race(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET r, w;
	uint64_t posted = 0, done = 0, last = 0;

	(void)arg;
	alarm(110);  /* spawn's 30 s: this one runs longer under load */
	client_open(&p, &tcp, 0, fd, NULL);
	r = recv_region(fd);
	w = word_at(&r, WORD_OFF);
	while (done < RACE_N) {
		DAT_EVENT ev;
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
		uint64_t old;

		for (; posted < RACE_N && posted - done < RACE_WINDOW; posted++) {
			DAT_LMR_TRIPLET l = seg(&p, 8 * (posted % RACE_WINDOW), 8);

			CHK_RET(faa(p.ep, 1, &l, posted, &w, DAT_COMPLETION_DEFAULT_FLAG),
				DAT_SUCCESS);
		}
		/* dat_evd_dequeue first: a wait per atomic would double the
		 * run time */
		if (dat_evd_dequeue(p.req, &ev) != DAT_SUCCESS)
			CHK(wait_ev(p.req, 10 * SEC, &ev) == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
		CHK(ev.event_number == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
		CHK(d->status == DAT_DTO_SUCCESS && d->operation == OP_FAA);
		CHK(d->user_cookie.as_64 == done && d->transfered_length == 8);
		old = load64(p.buf + 8 * (done % RACE_WINDOW));
		CHK(done == 0 || old > last);
		CHK(old < 2 * RACE_N);
		last = old;
		done++;
	}
	msg_send(fd, 1);
	/* the other client may take longer: the server's word comes after both */
	msg_recv(fd, 100000);
	peer_close(&p);
	return 0;
}

Test(tcp_ext, fetch_add_from_two_processes_loses_no_update, .timeout = 120)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	int fd2;
	pid_t pid2;

	/* Both clients forked before this process opens an IA. */
	pid2 = spawn(c_race, NULL, &fd2);
	server_start_with(&p, &tcp, 0, PRIV_ATOMIC, 0, c_race, NULL);
	peer_ep(&p, &ep2, 0);
	server_listen(&p, p.fd);
	msg_send(fd2, p.port);
	server_accept(&p, p.ep);
	server_accept(&p, ep2);
	send_region(&p, p.fd);
	send_region(&p, fd2);
	CHK(msg_recv(p.fd, 100000) == 1);
	CHK(msg_recv(fd2, 100000) == 1);
	CHK(load64(p.buf + WORD_OFF) == 2 * (uint64_t)RACE_N);
	msg_send(fd2, 1);
	CHK(reap(pid2, 20000) == 0);
	server_done(&p);
}

/* ---- suppressed completions ----
 * A write with immediate data and an FAA posted with
 * DAT_COMPLETION_SUPPRESS_FLAG produce no event at the client, but do
 * their work (the receive completes at the server with the immediate, the
 * old value lands); the signalled CAS behind them completes alone. */
static int c_suppressed(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov, l1, l2;
	DAT_RMR_TRIPLET r, w, dst;

	(void)arg;
	client_open(&p, &tcp, 0, fd, NULL);
	r = recv_region(fd);
	w = word_at(&r, WORD_OFF);
	dst = r;
	dst.virtual_address += 4096;
	dst.segment_length = 64;
	fill(p.buf + 1000, 64, 8);
	iov = seg(&p, 1000, 64);
	l1 = seg(&p, 0, 8);
	l2 = seg(&p, 8, 8);
	CHK_RET(write_imm(p.ep, 1, &iov, 1, &dst, 0xabcd, DAT_COMPLETION_SUPPRESS_FLAG),
		DAT_SUCCESS);
	CHK_RET(faa(p.ep, 3, &l1, 2, &w, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	CHK_RET(cas(p.ep, 0x13, 0x14, &l2, 3, &w, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_CAS, 3, NULL, NULL) == DAT_DTO_SUCCESS);
	/* in post order: the suppressed FAA was done before the CAS */
	CHK(load64(p.buf) == 0x10 && load64(p.buf + 8) == 0x13);
	usleep(100000);
	evd_empty(p.req);
	msg_send(fd, 1);
	return client_done(&p);
}

Test(tcp_ext, suppressed_completions_do_their_work_silently, .timeout = 60)
{
	struct peer p;
	uint8_t want[64];
	DAT_COUNT len;
	uint32_t imm;

	server_start_with(&p, &tcp, 0, PRIV_ATOMIC, 0, c_suppressed, NULL);
	store64(p.buf + WORD_OFF, 0x10);
	post_recvs(&p, p.ep, 1, RECV_OFF, 0, 64, 9);
	server_up(&p);
	send_region(&p, p.fd);
	/* suppression is the initiator's: the receive still completes */
	CHK(ext_wait(p.rcv, 10 * SEC, OP_RECV_IMM, 9, &len, &imm) == DAT_DTO_SUCCESS);
	CHK(len == 64 && imm == 0xabcd);
	fill(want, 64, 8);
	CHK(memcmp(p.buf + 4096, want, 64) == 0);
	CHK(msg_recv(p.fd, 20000) == 1);
	CHK(load64(p.buf + WORD_OFF) == 0x14);
	server_done(&p);
}

/* ---- flushed completions ----
 * The server runs progress=manual and never polls: the client's write
 * with immediate data, FAA and CAS stay outstanding until the client
 * disconnects; each then completes DAT_DTO_ERR_FLUSHED as the extension
 * operation it is (DAT_IB_DTO_EVENT, extension status DAT_IB_OP_ERR), and
 * one posted after the disconnect flushes too. */
static int c_flushed(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov, l;
	DAT_RMR_TRIPLET r, w;
	DAT_EVENT ev;

	client_open(&p, arg, 0, fd, NULL);
	r = recv_region(fd);
	w = word_at(&r, WORD_OFF);
	iov = seg(&p, 0, 64);
	l = seg(&p, 64, 8);
	CHK_RET(write_imm(p.ep, 1, &iov, 1, &r, 1, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK_RET(faa(p.ep, 1, &l, 2, &w, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK_RET(cas(p.ep, 0, 1, &l, 3, &w, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	usleep(200000);
	evd_empty(p.req);  /* the target does not answer */
	CHK_RET(dat_ep_disconnect(p.ep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_WRITE_IMM, 1, NULL, NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(ext_wait(p.req, 10 * SEC, OP_FAA, 2, NULL, NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(ext_wait(p.req, 10 * SEC, OP_CAS, 3, NULL, NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(wait_ev(p.n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
	if (faa(p.ep, 1, &l, 4, &w, DAT_COMPLETION_DEFAULT_FLAG) == DAT_SUCCESS)
		CHK(ext_wait(p.req, 10 * SEC, OP_FAA, 4, NULL, NULL) == DAT_DTO_ERR_FLUSHED);
	msg_send(fd, 1);
	return client_done(&p);
}

Test(tcp_ext, outstanding_extension_requests_flush, .timeout = 60)
{
	struct peer p;

	server_start_with(&p, &tcp_manual, 0, PRIV_ATOMIC, 0, c_flushed, (void *)&tcp);
	server_up(&p);
	send_region(&p, p.fd);
	CHK(wait_ev(p.n.conn_evd, 20 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	CHK(msg_recv(p.fd, 20000) == 1);
	server_done(&p);
}

/* ---- a connection lost mid-atomics costs no other connection anything ----
 * The client keeps FAAs in flight on two EPs, each on its own word of the
 * server; after LOSS_AT completions on the first its data socket is shut
 * down.  The first EP's outstanding FAAs flush (those that completed
 * returned 0, 1, 2... in order); the second EP's LOSS_N all succeed with
 * old values 0, 1, 2... and its word ends at exactly LOSS_N. */
#define LOSS_AT 2000u
#define LOSS_N 20000u

struct loss_ep {
	DAT_EP_HANDLE ep;
	DAT_RMR_TRIPLET w;
	size_t local;             /* its RACE_WINDOW local slots */
	uint64_t posted, done, ok;
	bool broken;
};

static void loss_post(struct peer *p, struct loss_ep *e, uint64_t n)
{
	for (; e->posted < n && e->posted - e->done < RACE_WINDOW; e->posted++) {
		DAT_LMR_TRIPLET l = seg(p, e->local + 8 * (e->posted % RACE_WINDOW), 8);
		DAT_RETURN ret = faa(e->ep, 1, &l, e->posted, &e->w, DAT_COMPLETION_DEFAULT_FLAG);

		if (e->broken && ret != DAT_SUCCESS)
			break;  /* the EP left the connected state */
		CHK_RET(ret, DAT_SUCCESS);
	}
}

static int c_loss(int fd, void *arg)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	DAT_RMR_TRIPLET r;
	struct loss_ep e[2];
	int socks[16], victim;

	(void)arg;
	client_init(&p, &tcp, 0, fd);
	peer_ep(&p, &ep2, 0);
	client_up(&p, NULL);
	r = recv_region(fd);
	memset(e, 0, sizeof(e));
	e[0] = (struct loss_ep){ .ep = p.ep, .w = word_at(&r, WORD_OFF), .local = 0 };
	e[1] = (struct loss_ep){ .ep = ep2, .w = word_at(&r, WORD_OFF + 8), .local = 1024 };
	/* the first EP's data socket is up once an atomic went through */
	loss_post(&p, &e[0], 1);
	CHK(ext_wait(p.req, 10 * SEC, OP_FAA, 0, NULL, NULL) == DAT_DTO_SUCCESS);
	e[0].done = e[0].ok = 1;
	CHK(data_sockets((uint16_t)p.port, socks, 16) == 1);
	victim = socks[0];
	client_connect(&p, ep2, p.port);
	while (e[1].done < LOSS_N || e[0].done < e[0].posted) {
		DAT_EVENT ev;
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
		struct loss_ep *x;

		loss_post(&p, &e[0], e[0].broken ? 0 : UINT64_MAX);
		loss_post(&p, &e[1], LOSS_N);
		if (dat_evd_dequeue(p.req, &ev) != DAT_SUCCESS)
			CHK(wait_ev(p.req, 10 * SEC, &ev) == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
		CHK(ev.event_number == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
		CHK(d->operation == OP_FAA);
		x = d->ep_handle == ep2 ? &e[1] : &e[0];
		CHK(d->user_cookie.as_64 == x->done);
		if (d->status == DAT_DTO_SUCCESS) {
			/* each EP alone on its word: the i-th FAA finds i */
			CHK(x->ok == x->done);
			CHK(load64(p.buf + x->local + 8 * (x->done % RACE_WINDOW)) == x->done);
			x->ok++;
		} else {
			CHK(x == &e[0] && d->status == DAT_DTO_ERR_FLUSHED);
		}
		x->done++;
		if (x == &e[0] && !e[0].broken && e[0].done == LOSS_AT) {
			CHK(shutdown(victim, SHUT_RDWR) == 0);
			e[0].broken = true;
		}
	}
	CHK(e[0].broken && e[0].ok >= LOSS_AT && e[1].ok == LOSS_N);
	msg_send(fd, (uint32_t)e[0].ok);
	msg_send(fd, (uint32_t)e[0].posted);
	return client_done(&p);
}

Test(tcp_ext, connection_lost_mid_atomics_spares_the_others, .timeout = 60)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	uint64_t ok, posted, a;

	server_start_with(&p, &tcp, 0, PRIV_ATOMIC, 0, c_loss, NULL);
	peer_ep(&p, &ep2, 0);
	server_listen(&p, p.fd);
	server_accept(&p, p.ep);
	send_region(&p, p.fd);  /* the client's first atomic comes before its second EP */
	server_accept(&p, ep2);
	ok = msg_recv(p.fd, 50000);
	posted = msg_recv(p.fd, 1000);
	/* the lost connection's word: every completed FAA, and perhaps some
	 * whose answers the loss swallowed */
	a = load64(p.buf + WORD_OFF);
	CHK(a >= ok && a <= posted);
	CHK(load64(p.buf + WORD_OFF + 8) == LOSS_N);
	server_done(&p);
}

/* ---- a malformed atomic frame breaks its connection only ----
 * Written straight into the second EP's data socket: a FETCH_ADD on a
 * misaligned word (in sequence, so the alignment check refuses it).  The
 * server's word stays untouched, that EP breaks (DAT_ASYNC_ERROR_EP_BROKEN),
 * the first EP's atomics go on. */
static int c_bad_atomic_frame(int fd, void *arg)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	DAT_LMR_TRIPLET l = { 0 };
	DAT_RMR_TRIPLET r, w;
	int before[16], nb, victim;
	struct {
		struct zd_tcp_hdr h;
		uint64_t add;
	} __attribute__((packed)) f;

	(void)arg;
	client_init(&p, &tcp, 0, fd);
	peer_ep(&p, &ep2, 0);
	client_up(&p, NULL);
	r = recv_region(fd);
	w = word_at(&r, WORD_OFF);
	l = seg(&p, 0, 8);
	CHK_RET(faa(p.ep, 1, &l, 1, &w, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_FAA, 1, NULL, NULL) == DAT_DTO_SUCCESS);
	nb = data_sockets((uint16_t)p.port, before, 16);
	client_connect(&p, ep2, p.port);
	/* ep2's first request (seq 0) is up: the forged frame is seq 1 */
	CHK_RET(faa(ep2, 1, &l, 2, &w, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_FAA, 2, NULL, NULL) == DAT_DTO_SUCCESS);
	victim = data_socket_added((uint16_t)p.port, before, nb);
	CHK(victim >= 0);
	memset(&f, 0, sizeof(f));
	f.h.magic = htole32(ZD_TCP_WIRE_MAGIC);
	f.h.version = ZD_TCP_WIRE_VERSION;
	f.h.op = ZD_TCP_OP_FETCH_ADD;
	f.h.seq = htole32(1);
	f.h.len = htole32(ZD_TCP_FETCH_ADD_LEN);
	f.h.rkey = htole32(w.rmr_context);
	f.h.raddr = htole64(w.virtual_address + 4);
	f.add = htole64(0x1000);
	CHK(send(victim, &f, sizeof(f), MSG_NOSIGNAL) == (ssize_t)sizeof(f));
	msg_send(fd, 1);
	CHK(msg_recv(fd, 10000) == 2);
	/* the first connection still works */
	CHK_RET(faa(p.ep, 1, &l, 3, &w, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, 10 * SEC, OP_FAA, 3, NULL, NULL) == DAT_DTO_SUCCESS);
	CHK(load64(p.buf) == 2);
	msg_send(fd, 3);
	return client_done(&p);
}

Test(tcp_ext, malformed_atomic_frame_breaks_its_connection_only, .timeout = 60)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	DAT_EVENT ev;

	server_start_with(&p, &tcp, 0, PRIV_ATOMIC, 0, c_bad_atomic_frame, NULL);
	peer_ep(&p, &ep2, 0);
	server_listen(&p, p.fd);
	server_accept(&p, p.ep);
	send_region(&p, p.fd);  /* the client's first atomic comes before its second EP */
	server_accept(&p, ep2);
	CHK(msg_recv(p.fd, 20000) == 1);
	CHK(wait_ev(p.n.async, 10 * SEC, &ev) == DAT_ASYNC_ERROR_EP_BROKEN);
	CHK(ev.event_data.asynch_error_event_data.dat_handle == ep2);
	CHK(load64(p.buf + WORD_OFF) == 2);
	for (int i = 0; i < BUF; i++)
		CHK(i / 8 == WORD_OFF / 8 || p.buf[i] == 0);
	msg_send(p.fd, 2);
	CHK(msg_recv(p.fd, 20000) == 3);
	CHK(load64(p.buf + WORD_OFF) == 3);
	server_done(&p);
}
