/*
 * The IB extensions on zdapl-mlx5sim end to end: the hw/mlx5 data path and
 * the software mlx5 NIC between two processes, reached through libdat2's
 * dat_extension_op (dat_ib_extensions.h's macros) and this build's
 * dat.conf, connected by the real connection manager over 127.0.0.1.
 *
 *  - RDMA write with immediate data: the data, then the target's receive
 *    (its EP's or its SRQ's) completing as a DAT_IB_DTO_EVENT with the
 *    immediate; no receive posted yet (RNR: delivered once one is); no
 *    REMOTE_WRITE (error, target untouched, no receive consumed); zero
 *    bytes with rkey 0 (no rkey checked, the immediate delivered).
 *  - Fetch-and-add and compare-and-swap: old values in host order, the
 *    target word the host's; no REMOTE_ATOMIC (error, untouched); the
 *    synchronous errors core gives; two processes racing 100,000
 *    increments each on one word, pipelined.
 *  - Suppressed and flushed completions.
 *  - The provider's entry read from a va_list in each state it can be
 *    handed, and its paths besides the latency case.
 *
 * The parent is the server (PSP, accept), the forked child the client; they
 * talk over a socketpair (msg_*).  Memory is heap (the peer reaches it by
 * cross-memory attach) or pool (the peer maps the chunk).
 */
#include <stdarg.h>
#include <stdlib.h>

#include "dat_peer.h"
#include "zdapl/zdapl.h"
#include <dat2/dat_ib_extensions.h>

#define IA "zdapl-mlx5sim"

enum { HEAP = 0, POOL = 1 };

/* Every right, remote atomics included (DAT_MEM_PRIV_ALL_FLAG has none). */
#define PRIV_ATOMIC (DAT_MEM_PRIV_ALL_FLAG | DAT_IB_MEM_PRIV_REMOTE_ATOMIC)

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

TestSuite(mlx5sim_ext, .init = zd_test_use_conf, .timeout = 90);

/* ---- helpers ---- */

static const DAT_IB_EXTENSION_EVENT_DATA *ext_of(const DAT_EVENT *ev)
{
	return (const DAT_IB_EXTENSION_EVENT_DATA *)ev->event_extension_data;
}

/* The next event of @evd: a DAT_IB_DTO_EVENT of @op, extension type
 * @type, cookie @cookie; returns its DTO status (the extension status
 * agrees) and, with @len, its length. */
static int ext_wait(DAT_EVD_HANDLE evd, DAT_DTOS op, DAT_IB_EXT_TYPE type, uint64_t cookie,
		    DAT_COUNT *len, DAT_EVENT *out)
{
	DAT_EVENT ev;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

	CHK(wait_ev(evd, 20 * SEC, &ev) == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	if (d->user_cookie.as_64 != cookie)
		fprintf(stderr, "cookie %llu, expected %llu\n",
			(unsigned long long)d->user_cookie.as_64, (unsigned long long)cookie);
	CHK(d->user_cookie.as_64 == cookie);
	CHK(d->operation == op);
	CHK(ext_of(&ev)->type == type);
	CHK(ext_of(&ev)->status == (d->status == DAT_DTO_SUCCESS ? DAT_OP_SUCCESS : DAT_IB_OP_ERR));
	if (len)
		*len = (DAT_COUNT)d->transfered_length;
	if (out)
		*out = ev;
	return d->status;
}

/* Nothing on @evd for @ms milliseconds. */
static void no_event(DAT_EVD_HANDLE evd, int ms)
{
	DAT_EVENT ev;

	CHK(wait_ev(evd, (DAT_TIMEOUT)ms * 1000, &ev) == 0);
}

static void write_imm(DAT_EP_HANDLE ep, DAT_LMR_TRIPLET *iov, uint64_t cookie,
		      const DAT_RMR_TRIPLET *r, uint32_t imm, DAT_COMPLETION_FLAGS flags)
{
	CHK_RET(dat_ib_post_rdma_write_immed(ep, 1, iov, (DAT_DTO_COOKIE){ .as_64 = cookie },
					     (DAT_RMR_TRIPLET *)r, imm, flags),
		DAT_SUCCESS);
}

static DAT_RETURN faa(DAT_EP_HANDLE ep, DAT_LMR_TRIPLET *l, uint64_t cookie,
		      const DAT_RMR_TRIPLET *r, uint64_t add, DAT_COMPLETION_FLAGS flags)
{
	return dat_ib_post_fetch_and_add(ep, add, l, (DAT_DTO_COOKIE){ .as_64 = cookie },
					 (DAT_RMR_TRIPLET *)r, flags);
}

static DAT_RETURN cas(DAT_EP_HANDLE ep, DAT_LMR_TRIPLET *l, uint64_t cookie,
		      const DAT_RMR_TRIPLET *r, uint64_t cmp, uint64_t swap)
{
	return dat_ib_post_cmp_and_swap(ep, cmp, swap, l, (DAT_DTO_COOKIE){ .as_64 = cookie },
					(DAT_RMR_TRIPLET *)r, DAT_COMPLETION_DEFAULT_FLAG);
}

/* The server's 8-byte word at @off of its buffer (recv_region's). */
static DAT_RMR_TRIPLET word_at(DAT_RMR_TRIPLET r, size_t off)
{
	r.virtual_address += off;
	r.segment_length = 8;
	return r;
}

static uint64_t load64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static void store64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

/* ---- RDMA write with immediate data ---- */

/*
 * The client writes 16 bytes (inline) with immediate 0x7777, then 20000
 * bytes with 0x1111, then 100 bytes with 0x2222 and its completion
 * suppressed; each consumes the server's next receive in order.
 */
static int c_write_imm(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET r;
	DAT_LMR_TRIPLET iov;
	DAT_COUNT len;

	client_open(&p, &sim, !(int)(intptr_t)arg, fd, NULL);
	r = recv_region(fd);
	fill(p.buf, 16, 1);
	fill(p.buf + 1000, 20000, 2);
	fill(p.buf + 30000, 100, 3);
	iov = seg(&p, 0, 16);
	write_imm(p.ep, &iov, 41, &r, 0x7777, DAT_COMPLETION_DEFAULT_FLAG);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED, 41,
		     &len, NULL) == DAT_DTO_SUCCESS);
	CHK(len == 16);
	r.virtual_address += 4096;
	iov = seg(&p, 1000, 20000);
	write_imm(p.ep, &iov, 42, &r, 0x1111, DAT_COMPLETION_DEFAULT_FLAG);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED, 42,
		     &len, NULL) == DAT_DTO_SUCCESS);
	CHK(len == 20000);
	r.virtual_address += 30000;
	iov = seg(&p, 30000, 100);
	write_imm(p.ep, &iov, 43, &r, 0x2222, DAT_COMPLETION_SUPPRESS_FLAG);
	/* the server saw the last one arrive: still no event of ours */
	msg_recv(fd, 20000);
	no_event(p.req, 100);
	return client_done(&p);
}

static void write_imm_case(int kind)
{
	struct peer p;
	DAT_EVENT ev;
	DAT_COUNT len;
	uint8_t want[20000];

	server_start(&p, &sim, kind, c_write_imm, (void *)(intptr_t)kind);
	post_recvs(&p, p.ep, 4, 60000, 64, 64, 3);
	server_up(&p);
	send_region(&p, p.fd);
	/* each receive completes with the immediate, the write's length,
	 * after the written bytes are there */
	CHK(ext_wait(p.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_IMMED, DAT_IB_RDMA_WRITE_IMMED_DATA, 3, &len,
		     &ev) == DAT_DTO_SUCCESS);
	CHK(len == 16);
	CHK(ext_of(&ev)->val.immed.data == 0x7777);
	CHK(ev.event_data.dto_completion_event_data.ep_handle == p.ep);
	fill(want, 16, 1);
	CHK(memcmp(p.buf, want, 16) == 0);
	CHK(ext_wait(p.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_IMMED, DAT_IB_RDMA_WRITE_IMMED_DATA, 4, &len,
		     &ev) == DAT_DTO_SUCCESS);
	CHK(len == 20000);
	CHK(ext_of(&ev)->val.immed.data == 0x1111);
	fill(want, 20000, 2);
	CHK(memcmp(p.buf + 4096, want, 20000) == 0);
	CHK(ext_wait(p.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_IMMED, DAT_IB_RDMA_WRITE_IMMED_DATA, 5, &len,
		     &ev) == DAT_DTO_SUCCESS);
	CHK(len == 100);
	CHK(ext_of(&ev)->val.immed.data == 0x2222);
	fill(want, 100, 3);
	CHK(memcmp(p.buf + 4096 + 30000, want, 100) == 0);
	/* nothing lands in the receives' own buffers */
	for (int i = 60000; i < 60000 + 4 * 64; i++)
		CHK(p.buf[i] == 0);
	msg_send(p.fd, 1);
	no_event(p.rcv, 50);
	server_done(&p);
}

Test(mlx5sim_ext, write_imm_heap) { write_imm_case(HEAP); }
Test(mlx5sim_ext, write_imm_pool) { write_imm_case(POOL); }

/*
 * Zero bytes touch no remote memory, so no rkey is checked (as on
 * InfiniBand; MPI transports signal with a zero-byte write with immediate
 * data, rkey 0, address 0).  The client: write-imm with no segment, rkey
 * 0 (cookie 1, imm 0x51); with one empty segment and a key nobody has
 * (2, 0x52); plain zero-byte writes and reads, rkey 0 (3..6); a 16-byte
 * send (7).  All succeed; the connection stands.
 */
static int c_zero_bytes(int fd, void *arg)
{
	const DAT_RMR_TRIPLET none = { .rmr_context = 0, .virtual_address = 0,
				       .segment_length = 0 };
	DAT_RMR_TRIPLET r = none;
	struct peer p;
	DAT_LMR_TRIPLET l;
	DAT_COUNT len;

	(void)arg;
	client_open(&p, &sim, HEAP, fd, NULL);
	CHK_RET(dat_ib_post_rdma_write_immed(p.ep, 0, NULL, (DAT_DTO_COOKIE){ .as_64 = 1 }, &r,
					     0x51, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED, 1,
		     &len, NULL) == DAT_DTO_SUCCESS);
	CHK(len == 0);
	l = seg(&p, 0, 0);
	r.rmr_context = 0xdead00;
	write_imm(p.ep, &l, 2, &r, 0x52, DAT_COMPLETION_DEFAULT_FLAG);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED, 2,
		     &len, NULL) == DAT_DTO_SUCCESS);
	CHK(len == 0);
	r = none;
	post_write(p.ep, 0, NULL, 3, &r);
	CHK(dto_wait(p.req, 20 * SEC, 3, &len) == DAT_DTO_SUCCESS && len == 0);
	post_write(p.ep, 1, &l, 4, &r);
	CHK(dto_wait(p.req, 20 * SEC, 4, &len) == DAT_DTO_SUCCESS && len == 0);
	post_read(p.ep, 0, NULL, 5, &r);
	CHK(dto_wait(p.req, 20 * SEC, 5, &len) == DAT_DTO_SUCCESS && len == 0);
	post_read(p.ep, 1, &l, 6, &r);
	CHK(dto_wait(p.req, 20 * SEC, 6, &len) == DAT_DTO_SUCCESS && len == 0);
	fill(p.buf, 16, 9);
	send_wait(&p, p.ep, 0, 16, 7);
	return client_done(&p);
}

Test(mlx5sim_ext, zero_byte_rdma_checks_no_rkey)
{
	struct peer p;
	DAT_EVENT ev;
	DAT_COUNT len;
	uint8_t want[16];

	server_start(&p, &sim, HEAP, c_zero_bytes, NULL);
	post_recvs(&p, p.ep, 3, 60000, 64, 64, 10);
	server_up(&p);
	CHK(ext_wait(p.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_IMMED, DAT_IB_RDMA_WRITE_IMMED_DATA, 10, &len,
		     &ev) == DAT_DTO_SUCCESS);
	CHK(len == 0 && ext_of(&ev)->val.immed.data == 0x51);
	CHK(ext_wait(p.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_IMMED, DAT_IB_RDMA_WRITE_IMMED_DATA, 11, &len,
		     &ev) == DAT_DTO_SUCCESS);
	CHK(len == 0 && ext_of(&ev)->val.immed.data == 0x52);
	CHK(dto_wait(p.rcv, 20 * SEC, 12, &len) == DAT_DTO_SUCCESS && len == 16);
	fill(want, 16, 9);
	CHK(memcmp(p.buf + 60000 + 128, want, 16) == 0);
	for (int i = 60000; i < 60000 + 128; i++)
		CHK(p.buf[i] == 0);
	server_done(&p);
}

/* Into an EP on an SRQ: the SRQ's receive is consumed. */
static int c_write_imm_srq(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET r;
	DAT_LMR_TRIPLET iov;

	client_open(&p, &sim, HEAP, fd, NULL);
	r = recv_region(fd);
	fill(p.buf, 300, 9);
	iov = seg(&p, 0, 300);
	write_imm(p.ep, &iov, 51, &r, 0xabcdef01, DAT_COMPLETION_DEFAULT_FLAG);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED, 51,
		     NULL, NULL) == DAT_DTO_SUCCESS);
	return client_done(&p);
}

Test(mlx5sim_ext, write_imm_into_srq)
{
	struct peer p;
	DAT_EVENT ev;
	DAT_COUNT len;
	uint8_t want[300];

	server_start_with(&p, &sim, HEAP, DAT_MEM_PRIV_ALL_FLAG, 1, c_write_imm_srq, NULL);
	for (int i = 0; i < 2; i++) {
		DAT_LMR_TRIPLET iov = seg(&p, 50000 + (size_t)i * 64, 64);

		CHK_RET(dat_srq_post_recv(p.srq, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 70 + i }),
			DAT_SUCCESS);
	}
	server_up(&p);
	send_region(&p, p.fd);
	CHK(ext_wait(p.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_IMMED, DAT_IB_RDMA_WRITE_IMMED_DATA, 70, &len,
		     &ev) == DAT_DTO_SUCCESS);
	CHK(len == 300);
	CHK(ext_of(&ev)->val.immed.data == 0xabcdef01);
	CHK(ev.event_data.dto_completion_event_data.ep_handle == p.ep);
	fill(want, 300, 9);
	CHK(memcmp(p.buf, want, 300) == 0);
	server_done(&p);
}

/* No receive posted: the write waits (receiver not ready, retried as a
 * send is) -- nothing placed, no completion either side -- and lands,
 * data first, once the server posts one. */
static int c_write_imm_rnr(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET r;
	DAT_LMR_TRIPLET iov;
	uint64_t t0;

	client_open(&p, &sim, HEAP, fd, NULL);
	r = recv_region(fd);
	fill(p.buf, 64, 5);
	iov = seg(&p, 0, 64);
	t0 = now_ms();
	write_imm(p.ep, &iov, 61, &r, 0x600d, DAT_COMPLETION_DEFAULT_FLAG);
	msg_send(fd, 1);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED, 61,
		     NULL, NULL) == DAT_DTO_SUCCESS);
	/* not before the server posted its receive, 300 ms in */
	CHK(now_ms() - t0 >= 250);
	return client_done(&p);
}

Test(mlx5sim_ext, write_imm_waits_for_a_receive)
{
	struct peer p;
	DAT_EVENT ev;
	DAT_COUNT len;
	uint8_t want[64];

	server_start(&p, &sim, HEAP, c_write_imm_rnr, NULL);
	server_up(&p);
	send_region(&p, p.fd);
	msg_recv(p.fd, 10000);
	usleep(300 * 1000);
	no_event(p.rcv, 1);
	for (int i = 0; i < 64; i++)
		CHK(p.buf[i] == 0);
	post_recvs(&p, p.ep, 1, 60000, 0, 64, 9);
	CHK(ext_wait(p.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_IMMED, DAT_IB_RDMA_WRITE_IMMED_DATA, 9, &len,
		     &ev) == DAT_DTO_SUCCESS);
	CHK(len == 64);
	CHK(ext_of(&ev)->val.immed.data == 0x600d);
	fill(want, 64, 5);
	CHK(memcmp(p.buf, want, 64) == 0);
	server_done(&p);
}

/* No REMOTE_WRITE on the target: the initiator's remote access error, the
 * target untouched, its receive not consumed by the write -- it flushes
 * as the target's QP breaks. */
static int c_write_imm_denied(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET r;
	DAT_LMR_TRIPLET iov;

	client_open(&p, &sim, HEAP, fd, NULL);
	r = recv_region(fd);
	fill(p.buf, 128, 6);
	iov = seg(&p, 0, 128);
	write_imm(p.ep, &iov, 81, &r, 5, DAT_COMPLETION_DEFAULT_FLAG);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED, 81,
		     NULL, NULL) == DAT_DTO_ERR_REMOTE_ACCESS);
	msg_send(fd, 1);
	return client_done(&p);
}

Test(mlx5sim_ext, write_imm_without_remote_write)
{
	struct peer p;
	DAT_EVENT ev;

	server_start_with(&p, &sim, HEAP, DAT_MEM_PRIV_LOCAL_READ_FLAG |
		DAT_MEM_PRIV_LOCAL_WRITE_FLAG | DAT_MEM_PRIV_REMOTE_READ_FLAG, 0,
		c_write_imm_denied, NULL);
	post_recvs(&p, p.ep, 1, 60000, 0, 64, 1);
	server_up(&p);
	send_region(&p, p.fd);
	msg_recv(p.fd, 20000);
	CHK(wait_ev(p.rcv, 20 * SEC, &ev) == DAT_DTO_COMPLETION_EVENT);
	CHK(ev.event_data.dto_completion_event_data.user_cookie.as_64 == 1);
	CHK(ev.event_data.dto_completion_event_data.operation == DAT_DTO_RECEIVE);
	CHK(ev.event_data.dto_completion_event_data.status == DAT_DTO_ERR_FLUSHED);
	for (int i = 0; i < BUF; i++)
		CHK(p.buf[i] == 0);
	server_done(&p);
}

/* ---- atomics ---- */

/*
 * The server's word at offset 0 holds 0x12345 (written natively).  The
 * client: CAS that matches (-> 0x98765), one that does not, FAA 0x10, FAA
 * across a 32-bit carry; each old value in host order in its local word,
 * the 8 bytes after it untouched.
 */
static int c_atomics(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET r, w;
	DAT_LMR_TRIPLET l;
	DAT_COUNT len;

	client_open(&p, &sim, !(int)(intptr_t)arg, fd, NULL);
	r = recv_region(fd);
	w = word_at(r, 0);
	memset(p.buf + 100 * 8, 0xee, 64);
	/* a 16-byte local segment: the old value takes its first 8 */
	l = seg(&p, 100 * 8, 16);
	CHK_RET(cas(p.ep, &l, 1, &w, 0x12345, 0x98765), DAT_SUCCESS);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_CMP_SWAP, DAT_IB_CMP_AND_SWAP, 1, &len, NULL) ==
	    DAT_DTO_SUCCESS);
	CHK(len == 8);
	CHK(load64(p.buf + 800) == 0x12345);
	CHK(load64(p.buf + 808) == 0xeeeeeeeeeeeeeeeeull);
	l = seg(&p, 101 * 8, 8);
	CHK_RET(cas(p.ep, &l, 2, &w, 0x654321, 0x6789a), DAT_SUCCESS);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_CMP_SWAP, DAT_IB_CMP_AND_SWAP, 2, NULL, NULL) ==
	    DAT_DTO_SUCCESS);
	CHK(load64(p.buf + 808) == 0x98765);
	l = seg(&p, 102 * 8, 8);
	CHK_RET(faa(p.ep, &l, 3, &w, 0x10, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, DAT_IB_FETCH_AND_ADD, 3, &len, NULL) ==
	    DAT_DTO_SUCCESS);
	CHK(len == 8);
	CHK(load64(p.buf + 816) == 0x98765);
	l = seg(&p, 103 * 8, 8);
	CHK_RET(faa(p.ep, &l, 4, &w, 0xffffffffull, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, DAT_IB_FETCH_AND_ADD, 4, NULL, NULL) ==
	    DAT_DTO_SUCCESS);
	CHK(load64(p.buf + 824) == 0x98775);
	msg_send(fd, 1);
	return client_done(&p);
}

static void atomics_case(int kind)
{
	struct peer p;

	server_start_with(&p, &sim, kind, PRIV_ATOMIC, 0, c_atomics, (void *)(intptr_t)kind);
	store64(p.buf, 0x12345);
	server_up(&p);
	send_region(&p, p.fd);
	msg_recv(p.fd, 20000);
	CHK(load64(p.buf) == 0x98775ull + 0xffffffffull);
	CHK(load64(p.buf + 8) == 0);
	server_done(&p);
}

Test(mlx5sim_ext, atomics_heap) { atomics_case(HEAP); }
Test(mlx5sim_ext, atomics_pool) { atomics_case(POOL); }

/* No REMOTE_ATOMIC on the target region: DAT_DTO_ERR_REMOTE_ACCESS, the
 * word and the local buffer as they were.  Before it, core's synchronous
 * refusals (nothing posted): a misaligned remote word, a local segment
 * shorter than the word, fewer than 8 remote bytes. */
static int c_atomic_denied(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET r, w;
	DAT_LMR_TRIPLET l;

	client_open(&p, &sim, HEAP, fd, NULL);
	r = recv_region(fd);
	store64(p.buf, 0x5555);
	l = seg(&p, 0, 8);
	w = word_at(r, 4);
	CHK_RET(faa(p.ep, &l, 1, &w, 1, 0), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5));
	CHK_RET(cas(p.ep, &l, 2, &w, 1, 2), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6));
	w = word_at(r, 8);
	w.segment_length = 4;
	CHK_RET(faa(p.ep, &l, 3, &w, 1, 0), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5));
	w = word_at(r, 8);
	l = seg(&p, 0, 4);
	CHK_RET(faa(p.ep, &l, 4, &w, 1, 0), ERR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE));
	CHK_RET(cas(p.ep, &l, 5, &w, 1, 2), ERR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE));
	no_event(p.req, 50);
	l = seg(&p, 0, 8);
	CHK_RET(faa(p.ep, &l, 6, &w, 1, 0), DAT_SUCCESS);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, DAT_IB_FETCH_AND_ADD, 6, NULL, NULL) ==
	    DAT_DTO_ERR_REMOTE_ACCESS);
	CHK(load64(p.buf) == 0x5555);
	msg_send(fd, 1);
	return client_done(&p);
}

Test(mlx5sim_ext, atomic_without_remote_atomic)
{
	struct peer p;

	/* every DAT 2.0 right, none of the extension's */
	server_start_with(&p, &sim, HEAP, DAT_MEM_PRIV_ALL_FLAG, 0, c_atomic_denied, NULL);
	store64(p.buf + 8, 77);
	server_up(&p);
	send_region(&p, p.fd);
	msg_recv(p.fd, 20000);
	CHK(load64(p.buf + 8) == 77);
	server_done(&p);
}

/* ---- the va_list the provider is handed ---- */

/*
 * libdat2's dat_extension_op(handle, op, ...) hands the provider a va_list
 * whose next argument is in the third integer register; zdapl's entry
 * (core/zd_ext_entry.h, instantiated by the mlx5 device) then reads the
 * saved registers and stack slots straight.  A list in any other state
 * takes va_arg: one whose first argument is in the fourth register (an
 * argument consumed before), and one whose arguments are all on the
 * stack (six named ones before them).  Here the provider's
 * handle_extendedop_func is called directly with each kind.
 */
enum va_shape { VA_LIBDAT2, VA_ONE_TAKEN, VA_ALL_STACK, VA_SHAPES };

static DAT_RETURN provider_ext(DAT_HANDLE h, DAT_EXTENDED_OP op, va_list args)
{
	/* the handle's first word: its DAT_PROVIDER (libdat2 dispatches so) */
	const DAT_PROVIDER *prov = *(const DAT_PROVIDER *const *)h;

	return prov->handle_extendedop_func(h, op, args);
}

static DAT_RETURN ext_libdat2(DAT_HANDLE h, DAT_EXTENDED_OP op, ...)
{
	va_list args;
	DAT_RETURN ret;

	va_start(args, op);
	ret = provider_ext(h, op, args);
	va_end(args);
	return ret;
}

static DAT_RETURN ext_one_taken(DAT_HANDLE h, DAT_EXTENDED_OP op, long taken, ...)
{
	va_list args;
	DAT_RETURN ret;

	CHK(taken == 1);
	va_start(args, taken);
	ret = provider_ext(h, op, args);
	va_end(args);
	return ret;
}

static DAT_RETURN ext_all_stack(DAT_HANDLE h, DAT_EXTENDED_OP op, long a, long b, long c, long d,
				...)
{
	va_list args;
	DAT_RETURN ret;

	CHK(a == 1 && b == 2 && c == 3 && d == 4);
	va_start(args, d);
	ret = provider_ext(h, op, args);
	va_end(args);
	return ret;
}

/* dat_extension_op's arguments after the handle and the op, in a list of
 * @shape. */
#define EXT_AS(shape, h, op, ...)                                             \
	((shape) == VA_LIBDAT2     ? ext_libdat2((h), (op), __VA_ARGS__)      \
	 : (shape) == VA_ONE_TAKEN ? ext_one_taken((h), (op), 1L, __VA_ARGS__) \
				   : ext_all_stack((h), (op), 1L, 2L, 3L, 4L, __VA_ARGS__))

/*
 * For each shape the client writes 8 bytes with immediate data 0x100 +
 * shape (cookie 10 + shape) into its own 64 bytes of the server's buffer
 * from 4096, adds 1 << shape to the server's word at 0 and swaps the word
 * at 8 from shape to shape + 1; each old value lands in the client's own
 * word.  Then, through dat_extension_op, the device entry's other paths:
 * two segments (the checked path, then the device), non-default flags,
 * and core's refusals (nothing posted).
 */
static int c_va_shapes(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET r, w;
	DAT_LMR_TRIPLET l, two[2];
	DAT_COUNT len;

	(void)arg;
	client_open(&p, &sim, HEAP, fd, NULL);
	r = recv_region(fd);
	for (int shape = 0; shape < VA_SHAPES; shape++) {
		DAT_RMR_TRIPLET dst = word_at(r, 4096 + 64 * (size_t)shape);
		DAT_DTO_COOKIE c = { .as_64 = 10 + (uint64_t)shape };

		fill(p.buf + 64 * shape, 8, (uint8_t)(20 + shape));
		l = seg(&p, 64 * (size_t)shape, 8);
		CHK_RET(EXT_AS(shape, p.ep, DAT_IB_RDMA_WRITE_IMMED_OP, (DAT_COUNT)1, &l, c, &dst,
			       (DAT_UINT32)(0x100 + shape), DAT_COMPLETION_DEFAULT_FLAG),
			DAT_SUCCESS);
		CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED,
			     c.as_64, &len, NULL) == DAT_DTO_SUCCESS);
		CHK(len == 8);

		w = word_at(r, 0);
		c.as_64 = 20 + (uint64_t)shape;
		l = seg(&p, 1024 + 8 * (size_t)shape, 8);
		CHK_RET(EXT_AS(shape, p.ep, DAT_IB_FETCH_AND_ADD_OP, (DAT_UINT64)1 << shape, &l, c,
			       &w, DAT_COMPLETION_DEFAULT_FLAG),
			DAT_SUCCESS);
		CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, DAT_IB_FETCH_AND_ADD, c.as_64,
			     NULL, NULL) == DAT_DTO_SUCCESS);
		CHK(load64(p.buf + 1024 + 8 * shape) == 0x1000 + ((1u << shape) - 1));

		w = word_at(r, 8);
		c.as_64 = 30 + (uint64_t)shape;
		l = seg(&p, 2048 + 8 * (size_t)shape, 8);
		CHK_RET(EXT_AS(shape, p.ep, DAT_IB_CMP_AND_SWAP_OP, (DAT_UINT64)shape,
			       (DAT_UINT64)shape + 1, &l, c, &w, DAT_COMPLETION_DEFAULT_FLAG),
			DAT_SUCCESS);
		CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_CMP_SWAP, DAT_IB_CMP_AND_SWAP, c.as_64,
			     NULL, NULL) == DAT_DTO_SUCCESS);
		CHK(load64(p.buf + 2048 + 8 * shape) == (uint64_t)shape);
	}

	/* two segments, 5 + 7 bytes, immediate 0x200 */
	fill(p.buf + 3000, 12, 40);
	two[0] = seg(&p, 3000, 5);
	two[1] = seg(&p, 3005, 7);
	w = word_at(r, 4096 + 64 * VA_SHAPES);
	w.segment_length = 12;
	CHK_RET(dat_ib_post_rdma_write_immed(p.ep, 2, two, (DAT_DTO_COOKIE){ .as_64 = 40 }, &w,
					     0x200, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED, 40,
		     &len, NULL) == DAT_DTO_SUCCESS);
	CHK(len == 12);
	/* solicited, immediate 0x300 */
	fill(p.buf + 3100, 8, 41);
	l = seg(&p, 3100, 8);
	w = word_at(r, 4096 + 64 * (VA_SHAPES + 1));
	write_imm(p.ep, &l, 41, &w, 0x300, DAT_COMPLETION_SOLICITED_WAIT_FLAG);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED, 41,
		     NULL, NULL) == DAT_DTO_SUCCESS);
	/* refusals: no remote, a flag no post has, -1 segments, no local */
	CHK_RET(dat_ib_post_rdma_write_immed(p.ep, 1, &l, (DAT_DTO_COOKIE){ .as_64 = 50 }, NULL, 1,
					     DAT_COMPLETION_DEFAULT_FLAG),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5));
	CHK(DAT_GET_TYPE(dat_ib_post_rdma_write_immed(p.ep, 1, &l, (DAT_DTO_COOKIE){ .as_64 = 51 },
						      &w, 1, (DAT_COMPLETION_FLAGS)0x4000)) ==
	    DAT_INVALID_PARAMETER);
	CHK_RET(dat_ib_post_rdma_write_immed(p.ep, -1, &l, (DAT_DTO_COOKIE){ .as_64 = 52 }, &w, 1,
					     DAT_COMPLETION_DEFAULT_FLAG),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	w = word_at(r, 0);
	CHK_RET(faa(p.ep, NULL, 53, &w, 1, DAT_COMPLETION_DEFAULT_FLAG),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	CHK(DAT_GET_TYPE(faa(p.ep, &l, 54, &w, 1, (DAT_COMPLETION_FLAGS)0x4000)) ==
	    DAT_INVALID_PARAMETER);
	no_event(p.req, 50);
	msg_send(fd, 1);
	return client_done(&p);
}

Test(mlx5sim_ext, every_va_list_shape_and_the_device_entry)
{
	struct peer p;
	DAT_EVENT ev;
	DAT_COUNT len;
	uint8_t want[12];

	server_start_with(&p, &sim, HEAP, PRIV_ATOMIC, 0, c_va_shapes, NULL);
	store64(p.buf, 0x1000);
	store64(p.buf + 8, 0);
	post_recvs(&p, p.ep, VA_SHAPES + 2, 60000, 64, 64, 100);
	server_up(&p);
	send_region(&p, p.fd);
	for (int shape = 0; shape < VA_SHAPES; shape++) {
		CHK(ext_wait(p.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_IMMED, DAT_IB_RDMA_WRITE_IMMED_DATA,
			     100 + (uint64_t)shape, &len, &ev) == DAT_DTO_SUCCESS);
		CHK(len == 8);
		CHK(ext_of(&ev)->val.immed.data == 0x100u + (unsigned)shape);
		fill(want, 8, (uint8_t)(20 + shape));
		CHK(memcmp(p.buf + 4096 + 64 * shape, want, 8) == 0);
	}
	CHK(ext_wait(p.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_IMMED, DAT_IB_RDMA_WRITE_IMMED_DATA,
		     100 + VA_SHAPES, &len, &ev) == DAT_DTO_SUCCESS);
	CHK(len == 12);
	CHK(ext_of(&ev)->val.immed.data == 0x200);
	fill(want, 12, 40);
	CHK(memcmp(p.buf + 4096 + 64 * VA_SHAPES, want, 12) == 0);
	CHK(ext_wait(p.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_IMMED, DAT_IB_RDMA_WRITE_IMMED_DATA,
		     100 + VA_SHAPES + 1, &len, &ev) == DAT_DTO_SUCCESS);
	CHK(ext_of(&ev)->val.immed.data == 0x300);
	msg_recv(p.fd, 20000);
	CHK(load64(p.buf) == 0x1000 + (1u << VA_SHAPES) - 1);
	CHK(load64(p.buf + 8) == VA_SHAPES);
	/* the refused posts consumed no receive */
	no_event(p.rcv, 50);
	server_done(&p);
}

/* ---- two processes racing on one word ---- */

#define RACE_N      100000u
#define RACE_WINDOW 16u          /* FAAs in flight per process */

/* @n fetch-and-adds of 1 on @w through @ep, RACE_WINDOW in flight, their
 * old values into a ring of 32 words at @res (LMR @lkey); checks each old
 * value is above the one before (one QP runs its atomics in order), and
 * returns how often another initiator's increments came in between. */
static uint32_t faa_stream(DAT_EP_HANDLE ep, DAT_EVD_HANDLE req, uint8_t *res,
			   DAT_LMR_CONTEXT lkey, const DAT_RMR_TRIPLET *w, uint32_t n)
{
	uint32_t posted = 0, done = 0, between = 0;
	uint64_t last = 0;
	bool first = true;

	while (done < n) {
		DAT_EVENT ev;

		while (posted < n && posted - done < RACE_WINDOW) {
			DAT_LMR_TRIPLET l = { .lmr_context = lkey, .segment_length = 8,
					      .virtual_address = (uintptr_t)(res + (posted % 32) * 8) };

			CHK_RET(faa(ep, &l, posted, w, 1, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
			posted++;
		}
		CHK(wait_ev(req, 20 * SEC, &ev) == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
		CHK(ev.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS);
		CHK(ev.event_data.dto_completion_event_data.user_cookie.as_64 == done);
		uint64_t old = load64(res + (done % 32) * 8);

		CHK(first || old > last);
		between += !first && old != last + 1;
		first = false;
		last = old;
		done++;
	}
	return between;
}

static int c_race(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET w;

	client_open(&p, &sim, (int)(intptr_t)arg, fd, NULL);
	w = word_at(recv_region(fd), 0);
	msg_recv(fd, 10000);              /* go */
	faa_stream(p.ep, p.req, p.buf + 4096, p.lkey, &w, RACE_N);
	msg_send(fd, 1);
	return client_done(&p);
}

/* The server's own increments go over a loopback connection of its own
 * NIC (the target is then its own memory: the same lock or CPU atomic the
 * client's NIC takes from the other process). */
static void race_case(int kind)
{
	struct peer p;
	DAT_EP_HANDLE a, b;
	DAT_RMR_TRIPLET w = { .rmr_context = 0 };
	DAT_EVENT ev;

	server_start_with(&p, &sim, kind, PRIV_ATOMIC, 0, c_race, (void *)(intptr_t)kind);
	store64(p.buf, 1000);
	server_up(&p);
	peer_ep(&p, &a, 0);
	peer_ep(&p, &b, 0);
	CHK_RET(connect_loopback(a, p.port, 10 * SEC), DAT_SUCCESS);
	CHK(wait_ev(p.n.cr_evd, 10 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, b, 0, NULL),
		DAT_SUCCESS);
	for (int i = 0; i < 2; i++)
		CHK(wait_ev(p.n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	send_region(&p, p.fd);
	w.rmr_context = p.rkey;
	w.virtual_address = (uintptr_t)p.buf;
	w.segment_length = 8;
	uint32_t between;

	msg_send(p.fd, 1);
	between = faa_stream(a, p.req, p.buf + 4096, p.lkey, &w, RACE_N);
	msg_recv(p.fd, 60000);
	/* no increment lost, and the two streams did run into each other */
	CHK(load64(p.buf) == 1000 + 2ull * RACE_N, "%llu", (unsigned long long)load64(p.buf));
	CHK(between > 0);
	cr_log_info("%s: the client's increments came between ours %u times\n",
		    kind == POOL ? "pool" : "heap", between);
	server_done(&p);
}

Test(mlx5sim_ext, faa_race_two_processes_heap) { race_case(HEAP); }
Test(mlx5sim_ext, faa_race_two_processes_pool) { race_case(POOL); }

/* ---- suppressed and flushed completions ---- */

/*
 * A suppressed FAA reports nothing; its old value is in host order by the
 * time a later completion of the EP is seen.  Then a write with immediate
 * data the server has no receive for waits (RNR) with an FAA and a CAS
 * behind it; an abrupt disconnect flushes all three, each as its
 * extension operation, in order; the server's word never moves.
 */
static int c_suppress_flush(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET r, w;
	DAT_LMR_TRIPLET l;
	DAT_EVENT ev;

	client_open(&p, &sim, HEAP, fd, NULL);
	r = recv_region(fd);
	w = word_at(r, 0);
	l = seg(&p, 0, 8);
	CHK_RET(faa(p.ep, &l, 1, &w, 5, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	l = seg(&p, 8, 8);
	CHK_RET(faa(p.ep, &l, 2, &w, 5, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, DAT_IB_FETCH_AND_ADD, 2, NULL, NULL) ==
	    DAT_DTO_SUCCESS);
	CHK(load64(p.buf) == 40);
	CHK(load64(p.buf + 8) == 45);
	msg_send(fd, 1);

	/* the server posts no receive: the write waits, the rest behind it */
	l = seg(&p, 100, 32);
	write_imm(p.ep, &l, 3, &r, 9, DAT_COMPLETION_DEFAULT_FLAG);
	l = seg(&p, 16, 8);
	CHK_RET(faa(p.ep, &l, 4, &w, 1, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	l = seg(&p, 24, 8);
	CHK_RET(cas(p.ep, &l, 5, &w, 50, 0), DAT_SUCCESS);
	no_event(p.req, 200);
	CHK_RET(dat_ep_disconnect(p.ep, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED, 3, NULL,
		     NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, DAT_IB_FETCH_AND_ADD, 4, NULL, NULL) ==
	    DAT_DTO_ERR_FLUSHED);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_CMP_SWAP, DAT_IB_CMP_AND_SWAP, 5, NULL, NULL) ==
	    DAT_DTO_ERR_FLUSHED);
	CHK(wait_ev(p.n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
	msg_send(fd, 2);
	return client_done(&p);
}

Test(mlx5sim_ext, suppressed_and_flushed)
{
	struct peer p;

	server_start_with(&p, &sim, HEAP, PRIV_ATOMIC, 0, c_suppress_flush, NULL);
	store64(p.buf, 40);
	server_up(&p);
	send_region(&p, p.fd);
	CHK(msg_recv(p.fd, 20000) == 1);
	CHK(msg_recv(p.fd, 20000) == 2);
	CHK(load64(p.buf) == 50, "the flushed atomics did nothing");
	for (int i = 8; i < BUF; i++)
		CHK(p.buf[i] == 0);
	server_done(&p);
}

/* The same outstanding extension DTOs when their EP is freed: the QP is
 * gone before the NIC's flush CQEs are reaped, and the data path reports
 * them itself, each as its extension operation. */
static int c_free_flush(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET r, w;
	DAT_LMR_TRIPLET l;

	client_open(&p, &sim, HEAP, fd, NULL);
	r = recv_region(fd);
	w = word_at(r, 0);
	l = seg(&p, 100, 32);
	write_imm(p.ep, &l, 7, &r, 9, DAT_COMPLETION_DEFAULT_FLAG);
	l = seg(&p, 16, 8);
	CHK_RET(cas(p.ep, &l, 8, &w, 0, 1), DAT_SUCCESS);
	no_event(p.req, 100);
	CHK_RET(dat_ep_free(p.ep), DAT_SUCCESS);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED, 7, NULL,
		     NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(ext_wait(p.req, (DAT_DTOS)DAT_IB_DTO_CMP_SWAP, DAT_IB_CMP_AND_SWAP, 8, NULL, NULL) ==
	    DAT_DTO_ERR_FLUSHED);
	no_event(p.req, 50);
	msg_send(fd, 1);
	return client_done(&p);
}

Test(mlx5sim_ext, flushed_on_ep_free)
{
	struct peer p;

	server_start_with(&p, &sim, HEAP, PRIV_ATOMIC, 0, c_free_flush, NULL);
	server_up(&p);
	send_region(&p, p.fd);
	msg_recv(p.fd, 20000);
	for (int i = 0; i < BUF; i++)
		CHK(p.buf[i] == 0);
	server_done(&p);
}
