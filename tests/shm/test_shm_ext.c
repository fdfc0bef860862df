/* shm device, IB extensions: RDMA write with immediate data (into the next
 * receive, on an SRQ, before any receive is posted, RNR, without rights,
 * zero bytes with no rkey)
 * and fetch-and-add / compare-and-swap (results, rights, the errors core
 * returns at once, pool and malloc'd memory), suppressed and flushed
 * completions, the atomic lock of a dead holder; across processes:
 * write-immediate data visible before its receive completes, and two
 * processes racing fetch-and-adds on one word of a third. */
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "zd_shm_test.h"
#include <dat2/dat_ib_extensions.h>
#include "hw/shm/zd_shm.h"

TestSuite(shm_ext, .init = t_need_conf, .timeout = 60);

#define PRIV_ATOMIC \
	((DAT_MEM_PRIV_FLAGS)(DAT_MEM_PRIV_ALL_FLAG | DAT_IB_MEM_PRIV_REMOTE_ATOMIC))
#define PRIV_NO_REMOTE_WRITE                                                   \
	((DAT_MEM_PRIV_FLAGS)(DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG | \
			      DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_IB_MEM_PRIV_REMOTE_ATOMIC))

static struct side A, B;
static DAT_EP_HANDLE ea, eb;
static DAT_SRQ_HANDLE srq;

/* A's EP connected to B's; B's on a fresh SRQ when @with_srq. */
static void pair(bool with_srq)
{
	t_open(&A);
	t_open(&B);
	ea = t_ep(&A, NULL);
	if (with_srq) {
		DAT_SRQ_ATTR sa = { .max_recv_dtos = 64, .max_recv_iov = 4,
				    .low_watermark = DAT_SRQ_LW_DEFAULT };

		cr_assert_eq(dat_srq_create(B.ia, B.pz, &sa, &srq), DAT_SUCCESS);
		cr_assert_eq(dat_ep_create_with_srq(B.ia, B.pz, B.rcv, B.req, DAT_HANDLE_NULL, srq,
						    NULL, &eb), DAT_SUCCESS);
	} else {
		eb = t_ep(&B, NULL);
	}
	t_connect(ea, eb);
}

static void unpair(void)
{
	t_close(&A);
	t_close(&B);
}

/* Where a test's target word or buffer lives: the registered pool (a
 * memfd chunk: CPU atomics, memcpy) or the heap (no chunk: the lock word,
 * cross-memory attach across processes). */
enum kind { POOL, HEAP };

static void *kind_alloc(enum kind k, size_t n)
{
	void *p = k == POOL ? zdapl_mem_alloc(n) : malloc(n);

	cr_assert(p);
	return p;
}

static void kind_free(enum kind k, void *p)
{
	if (k == POOL)
		zdapl_mem_free(p);
	else
		free(p);
}

static DAT_RETURN write_imm(DAT_EP_HANDLE ep, DAT_LMR_TRIPLET *l, uint64_t cookie,
			    DAT_RMR_TRIPLET *r, uint32_t imm, DAT_COMPLETION_FLAGS f)
{
	return dat_ib_post_rdma_write_immed(ep, 1, l, t_cookie(cookie), r, imm, f);
}

static DAT_RETURN faa(DAT_EP_HANDLE ep, uint64_t add, DAT_LMR_TRIPLET *l, uint64_t cookie,
		      DAT_RMR_TRIPLET *r, DAT_COMPLETION_FLAGS f)
{
	return dat_ib_post_fetch_and_add(ep, add, l, t_cookie(cookie), r, f);
}

static DAT_RETURN cas(DAT_EP_HANDLE ep, uint64_t cmp, uint64_t swap, DAT_LMR_TRIPLET *l,
		      uint64_t cookie, DAT_RMR_TRIPLET *r, DAT_COMPLETION_FLAGS f)
{
	return dat_ib_post_cmp_and_swap(ep, cmp, swap, l, t_cookie(cookie), r, f);
}

/* The extension type dat_ib_extensions.h pairs with each operation. */
static DAT_IB_EXT_TYPE ext_type_of(int op)
{
	switch (op) {
	case DAT_IB_DTO_RDMA_WRITE_IMMED: return DAT_IB_RDMA_WRITE_IMMED;
	case DAT_IB_DTO_RECV_IMMED:       return DAT_IB_RDMA_WRITE_IMMED_DATA;
	case DAT_IB_DTO_FETCH_ADD:        return DAT_IB_FETCH_AND_ADD;
	default:                          return DAT_IB_CMP_AND_SWAP;
	}
}

/* The next event of @evd is a DAT_IB_DTO_EVENT with these fields (the
 * length only checked for a success); returns its extension data. */
static DAT_IB_EXTENSION_EVENT_DATA expect_ext(DAT_EVD_HANDLE evd, DAT_EP_HANDLE ep,
					      uint64_t cookie, DAT_DTO_COMPLETION_STATUS st,
					      int op, DAT_SEG_LENGTH len)
{
	DAT_EVENT ev = t_next_event(evd);
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
	DAT_IB_EXTENSION_EVENT_DATA x;

	cr_assert_eq((int)ev.event_number, DAT_IB_DTO_EVENT, "event 0x%x",
		     (unsigned)ev.event_number);
	cr_assert_eq(d->ep_handle, ep);
	cr_assert_eq(d->user_cookie.as_64, cookie, "cookie %llu, expected %llu",
		     (unsigned long long)d->user_cookie.as_64, (unsigned long long)cookie);
	cr_assert_eq(d->status, st, "status %d, expected %d", d->status, st);
	cr_assert_eq((int)d->operation, op, "operation %d, expected %d", d->operation, op);
	if (st == DAT_DTO_SUCCESS)
		cr_assert_eq(d->transfered_length, len, "length %u, expected %u",
			     d->transfered_length, len);
	memcpy(&x, ev.event_extension_data, sizeof(x));
	cr_assert_eq(x.type, ext_type_of(op), "extension type %d", x.type);
	cr_assert_eq(x.status, st == DAT_DTO_SUCCESS ? DAT_OP_SUCCESS : DAT_IB_OP_ERR);
	return x;
}

/* The receive completion of a write's immediate data. */
static void expect_imm(DAT_EVD_HANDLE evd, DAT_EP_HANDLE ep, uint64_t cookie, uint32_t imm,
		       DAT_SEG_LENGTH len)
{
	DAT_IB_EXTENSION_EVENT_DATA x = expect_ext(evd, ep, cookie, DAT_DTO_SUCCESS,
						   DAT_IB_DTO_RECV_IMMED, len);

	cr_assert_eq((uint32_t)x.val.immed.data, imm, "immediate 0x%x, expected 0x%x",
		     (uint32_t)x.val.immed.data, imm);
}

/* Nothing on @evd, after a few polls (nothing is left to arrive late). */
static void none_after_polls(DAT_EVD_HANDLE evd)
{
	for (int i = 0; i < 100; i++)
		t_none(evd);
}

static void fill(char *p, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(seed + i * 13);
}

static bool filled(const char *p, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (char)(seed + i * 13))
			return false;
	return true;
}

static bool all_bytes(const char *p, size_t n, char c)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != c)
			return false;
	return true;
}

/* ---- RDMA write with immediate data ---- */

Test(shm_ext, write_imm_data_then_receive)
{
	enum { LEN = 300, TGT = 4096, RB = 64 };
	char *src = malloc(TGT), *tgt = malloc(TGT), *rbuf = malloc(3 * RB);
	DAT_LMR_CONTEXT ks, kt, kr;
	DAT_LMR_TRIPLET l, rv;
	DAT_RMR_TRIPLET r;

	pair(false);
	t_reg(&A, NULL, src, TGT, DAT_MEM_PRIV_ALL_FLAG, &ks);
	t_reg(&B, NULL, tgt, TGT, DAT_MEM_PRIV_ALL_FLAG, &kt);
	t_reg(&B, NULL, rbuf, 3 * RB, DAT_MEM_PRIV_ALL_FLAG, &kr);
	fill(src, TGT, 1);
	memset(tgt, 0, TGT);
	memset(rbuf, 'r', 3 * RB);
	for (int i = 0; i < 3; i++) {
		rv = t_seg(kr, rbuf + i * RB, RB);
		cr_assert_eq(dat_ep_post_recv(eb, 1, &rv, t_cookie(5 + (uint64_t)i), 0),
			     DAT_SUCCESS);
	}
	l = t_seg(ks, src, LEN);
	r = t_rseg(kt, tgt + 100, LEN);
	cr_assert_eq(write_imm(ea, &l, 21, &r, 0xdeadbeef, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 21, DAT_DTO_SUCCESS, DAT_IB_DTO_RDMA_WRITE_IMMED, LEN);
	expect_imm(B.rcv, eb, 5, 0xdeadbeef, LEN);
	cr_assert(filled(tgt + 100, LEN, 1));
	cr_assert(all_bytes(tgt, 100, 0) && all_bytes(tgt + 100 + LEN, TGT - 100 - LEN, 0));
	/* The receive was consumed, not written. */
	cr_assert(all_bytes(rbuf, 3 * RB, 'r'));
	/* No segment at all: the immediate alone, length 0. */
	cr_assert_eq(dat_ib_post_rdma_write_immed(ea, 0, NULL, t_cookie(22), &r, 7, 0),
		     DAT_SUCCESS);
	expect_ext(A.req, ea, 22, DAT_DTO_SUCCESS, DAT_IB_DTO_RDMA_WRITE_IMMED, 0);
	expect_imm(B.rcv, eb, 6, 7, 0);
	/* Each immediate took exactly one receive: a send gets the third. */
	l = t_seg(ks, src, 10);
	cr_assert_eq(dat_ep_post_send(ea, 1, &l, t_cookie(23), 0), DAT_SUCCESS);
	t_expect(A.req, ea, 23, DAT_DTO_SUCCESS, DAT_DTO_SEND, 10);
	t_expect(B.rcv, eb, 7, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE, 10);
	cr_assert(filled(rbuf + 2 * RB, 10, 1));
	t_none(A.req);
	t_none(B.rcv);
	unpair();
	free(src);
	free(tgt);
	free(rbuf);
}

Test(shm_ext, write_imm_takes_srq_buffer)
{
	enum { LEN = 200 };
	char *src = zdapl_mem_alloc(LEN), *tgt = zdapl_mem_alloc(LEN), rbuf[2][32];
	DAT_LMR_CONTEXT ks, kt, kr;
	DAT_LMR_TRIPLET l, rv;
	DAT_RMR_TRIPLET r;

	pair(true);
	t_reg(&A, NULL, src, LEN, DAT_MEM_PRIV_ALL_FLAG, &ks);
	t_reg(&B, NULL, tgt, LEN, DAT_MEM_PRIV_ALL_FLAG, &kt);
	t_reg(&B, NULL, rbuf, sizeof(rbuf), DAT_MEM_PRIV_ALL_FLAG, &kr);
	fill(src, LEN, 2);
	memset(tgt, 0, LEN);
	memset(rbuf, 'r', sizeof(rbuf));
	for (int i = 0; i < 2; i++) {
		rv = t_seg(kr, rbuf[i], sizeof(rbuf[i]));
		cr_assert_eq(dat_srq_post_recv(srq, 1, &rv, t_cookie(40 + (uint64_t)i)), DAT_SUCCESS);
	}
	l = t_seg(ks, src, LEN);
	r = t_rseg(kt, tgt, LEN);
	cr_assert_eq(write_imm(ea, &l, 1, &r, 0x5151, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 1, DAT_DTO_SUCCESS, DAT_IB_DTO_RDMA_WRITE_IMMED, LEN);
	expect_imm(B.rcv, eb, 40, 0x5151, LEN);
	cr_assert(filled(tgt, LEN, 2));
	cr_assert(all_bytes((char *)rbuf, sizeof(rbuf), 'r'));
	/* The other buffer is still the SRQ's: the next send takes it. */
	l = t_seg(ks, src, 8);
	cr_assert_eq(dat_ep_post_send(ea, 1, &l, t_cookie(2), 0), DAT_SUCCESS);
	t_expect(B.rcv, eb, 41, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE, 8);
	unpair();
	zdapl_mem_free(src);
	zdapl_mem_free(tgt);
}

/* No receive posted: the write lands, the initiator completes, and the
 * immediate waits (not dropped) until a receive is posted, which it then
 * takes ahead of any later message. */
static void imm_before_receive(bool with_srq)
{
	enum { LEN = 64 };
	char *src = malloc(LEN), *tgt = malloc(LEN), rbuf[2][32];
	DAT_LMR_CONTEXT ks, kt, kr;
	DAT_LMR_TRIPLET l, rv;
	DAT_RMR_TRIPLET r;

	pair(with_srq);
	t_reg(&A, NULL, src, LEN, DAT_MEM_PRIV_ALL_FLAG, &ks);
	t_reg(&B, NULL, tgt, LEN, DAT_MEM_PRIV_ALL_FLAG, &kt);
	t_reg(&B, NULL, rbuf, sizeof(rbuf), DAT_MEM_PRIV_ALL_FLAG, &kr);
	fill(src, LEN, 3);
	memset(tgt, 0, LEN);
	memset(rbuf, 'r', sizeof(rbuf));
	l = t_seg(ks, src, LEN);
	r = t_rseg(kt, tgt, LEN);
	cr_assert_eq(write_imm(ea, &l, 1, &r, 0x77, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 1, DAT_DTO_SUCCESS, DAT_IB_DTO_RDMA_WRITE_IMMED, LEN);
	cr_assert(filled(tgt, LEN, 3));
	none_after_polls(B.rcv);
	/* A send behind it, still no receive. */
	l = t_seg(ks, src, 16);
	cr_assert_eq(dat_ep_post_send(ea, 1, &l, t_cookie(2), 0), DAT_SUCCESS);
	t_expect(A.req, ea, 2, DAT_DTO_SUCCESS, DAT_DTO_SEND, 16);
	none_after_polls(B.rcv);
	for (int i = 0; i < 2; i++) {
		rv = t_seg(kr, rbuf[i], sizeof(rbuf[i]));
		if (with_srq)
			cr_assert_eq(dat_srq_post_recv(srq, 1, &rv, t_cookie(9 + (uint64_t)i)),
				     DAT_SUCCESS);
		else
			cr_assert_eq(dat_ep_post_recv(eb, 1, &rv, t_cookie(9 + (uint64_t)i), 0),
				     DAT_SUCCESS);
	}
	expect_imm(B.rcv, eb, 9, 0x77, LEN);
	t_expect(B.rcv, eb, 10, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE, 16);
	cr_assert(all_bytes(rbuf[0], sizeof(rbuf[0]), 'r'));
	cr_assert(filled(rbuf[1], 16, 3));
	t_none(B.rcv);
	unpair();
	free(src);
	free(tgt);
}

Test(shm_ext, write_imm_before_receive_is_delivered_later)
{
	imm_before_receive(false);
}

Test(shm_ext, write_imm_before_srq_buffer_is_delivered_later)
{
	imm_before_receive(true);
}

/* More immediates than the target can hold without receives: the excess
 * waits at the initiator (RNR) instead of completing or being dropped;
 * as receives appear every one is delivered, in order. */
Test(shm_ext, write_imm_rnr_waits_for_receives)
{
	enum { N = 150, LEN = 16 };
	char *src = malloc(N * LEN), *tgt = malloc(N * LEN), *rbuf = malloc(N * 8);
	DAT_LMR_CONTEXT ks, kt, kr;
	int req_done = 0, rcv_done = 0;

	pair(false);
	t_reg(&A, NULL, src, N * LEN, DAT_MEM_PRIV_ALL_FLAG, &ks);
	t_reg(&B, NULL, tgt, N * LEN, DAT_MEM_PRIV_ALL_FLAG, &kt);
	t_reg(&B, NULL, rbuf, N * 8, DAT_MEM_PRIV_ALL_FLAG, &kr);
	fill(src, N * LEN, 4);
	memset(tgt, 0, N * LEN);
	for (int i = 0; i < N; i++) {
		DAT_LMR_TRIPLET l = t_seg(ks, src + i * LEN, LEN);
		DAT_RMR_TRIPLET r = t_rseg(kt, tgt + i * LEN, LEN);

		cr_assert_eq(write_imm(ea, &l, (uint64_t)i, &r, 1000u + (uint32_t)i, 0), DAT_SUCCESS);
	}
	for (DAT_EVENT ev; dat_evd_dequeue(A.req, &ev) == DAT_SUCCESS; req_done++)
		cr_assert_eq(ev.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
	cr_assert(req_done > 0 && req_done < N, "%d of %d completed with no receive posted",
		  req_done, N);
	/* The ones that waited have not written either. */
	cr_assert(all_bytes(tgt + (N - 1) * LEN, LEN, 0));
	none_after_polls(B.rcv);
	/* Receives a few at a time; the target's polls make room, the
	 * initiator's polls retry. */
	for (int posted = 0; rcv_done < N;) {
		if (posted < N && posted - rcv_done < 10) {
			DAT_LMR_TRIPLET rv = t_seg(kr, rbuf + posted * 8, 8);

			cr_assert_eq(dat_ep_post_recv(eb, 1, &rv, t_cookie((uint64_t)posted), 0),
				     DAT_SUCCESS);
			posted++;
			continue;
		}
		expect_imm(B.rcv, eb, (uint64_t)rcv_done, 1000u + (uint32_t)rcv_done, LEN);
		cr_assert(filled(tgt + rcv_done * LEN, LEN, 4 + rcv_done * LEN * 13));
		rcv_done++;
		for (DAT_EVENT ev; dat_evd_dequeue(A.req, &ev) == DAT_SUCCESS; req_done++)
			cr_assert_eq(ev.event_data.dto_completion_event_data.status,
				     DAT_DTO_SUCCESS);
	}
	for (int spins = 0; req_done < N && spins < 100000; spins++)
		for (DAT_EVENT ev; dat_evd_dequeue(A.req, &ev) == DAT_SUCCESS; req_done++)
			;
	cr_assert_eq(req_done, N);
	t_none(B.rcv);
	unpair();
	free(src);
	free(tgt);
	free(rbuf);
}

/* Zero-byte RDMA touches no remote memory, so, as on InfiniBand, no rkey
 * is checked: MPI transports signal with a zero-byte write with immediate
 * data, rkey 0 and address 0.  Its immediate lands in the next receive
 * (length 0); plain zero-byte writes and reads complete; the QP stays up. */
Test(shm_ext, zero_byte_rdma_checks_no_rkey)
{
	enum { RB = 32 };
	char *src = malloc(64), *rbuf = malloc(3 * RB);
	DAT_LMR_CONTEXT ks, kr;
	DAT_LMR_TRIPLET l, rv;
	const DAT_RMR_TRIPLET none = { .rmr_context = 0, .virtual_address = 0,
				       .segment_length = 0 };
	DAT_RMR_TRIPLET r = none;

	pair(false);
	t_reg(&A, NULL, src, 64, DAT_MEM_PRIV_ALL_FLAG, &ks);
	t_reg(&B, NULL, rbuf, 3 * RB, DAT_MEM_PRIV_ALL_FLAG, &kr);
	fill(src, 64, 3);
	memset(rbuf, 'r', 3 * RB);
	for (int i = 0; i < 3; i++) {
		rv = t_seg(kr, rbuf + i * RB, RB);
		cr_assert_eq(dat_ep_post_recv(eb, 1, &rv, t_cookie(10 + (uint64_t)i), 0),
			     DAT_SUCCESS);
	}
	/* No segment: the immediate alone. */
	cr_assert_eq(dat_ib_post_rdma_write_immed(ea, 0, NULL, t_cookie(1), &r, 0x51, 0),
		     DAT_SUCCESS);
	expect_ext(A.req, ea, 1, DAT_DTO_SUCCESS, DAT_IB_DTO_RDMA_WRITE_IMMED, 0);
	expect_imm(B.rcv, eb, 10, 0x51, 0);
	/* One empty segment, and a key nobody has. */
	l = t_seg(ks, src, 0);
	r.rmr_context = 0xdead00;
	cr_assert_eq(write_imm(ea, &l, 2, &r, 0x52, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 2, DAT_DTO_SUCCESS, DAT_IB_DTO_RDMA_WRITE_IMMED, 0);
	expect_imm(B.rcv, eb, 11, 0x52, 0);
	/* Plain zero-byte write and read, rkey 0. */
	r = none;
	cr_assert_eq(dat_ep_post_rdma_write(ea, 0, NULL, t_cookie(3), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, 3, DAT_DTO_SUCCESS, DAT_DTO_RDMA_WRITE, 0);
	cr_assert_eq(dat_ep_post_rdma_write(ea, 1, &l, t_cookie(4), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, 4, DAT_DTO_SUCCESS, DAT_DTO_RDMA_WRITE, 0);
	cr_assert_eq(dat_ep_post_rdma_read(ea, 0, NULL, t_cookie(5), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, 5, DAT_DTO_SUCCESS, DAT_DTO_RDMA_READ, 0);
	cr_assert_eq(dat_ep_post_rdma_read(ea, 1, &l, t_cookie(6), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, 6, DAT_DTO_SUCCESS, DAT_DTO_RDMA_READ, 0);
	/* Nothing was written into the receives, and the QP is up: a send
	 * takes the third. */
	cr_assert(all_bytes(rbuf, 2 * RB, 'r'));
	l = t_seg(ks, src, 10);
	cr_assert_eq(dat_ep_post_send(ea, 1, &l, t_cookie(7), 0), DAT_SUCCESS);
	t_expect(A.req, ea, 7, DAT_DTO_SUCCESS, DAT_DTO_SEND, 10);
	t_expect(B.rcv, eb, 12, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE, 10);
	cr_assert(filled(rbuf + 2 * RB, 10, 3));
	t_none(A.req);
	t_none(B.rcv);
	unpair();
	free(src);
	free(rbuf);
}

/* A write with immediate data into memory without REMOTE_WRITE (or with a
 * key nobody has, or past the region): DAT_DTO_ERR_REMOTE_ACCESS, the
 * target untouched, its receive not consumed; the QP is in error. */
static void imm_denied(DAT_MEM_PRIV_FLAGS priv, uint32_t spoil, size_t off)
{
	enum { LEN = 128 };
	char *src = malloc(LEN), *tgt = malloc(2 * LEN), rbuf[16];
	DAT_LMR_CONTEXT ks, kt, kr;
	DAT_LMR_TRIPLET l, rv;
	DAT_RMR_TRIPLET r;

	pair(false);
	t_reg(&A, NULL, src, LEN, DAT_MEM_PRIV_ALL_FLAG, &ks);
	t_reg(&B, NULL, tgt, LEN, priv, &kt);
	t_reg(&B, NULL, rbuf, sizeof(rbuf), DAT_MEM_PRIV_ALL_FLAG, &kr);
	fill(src, LEN, 5);
	memset(tgt, 't', 2 * LEN);
	rv = t_seg(kr, rbuf, sizeof(rbuf));
	cr_assert_eq(dat_ep_post_recv(eb, 1, &rv, t_cookie(3), 0), DAT_SUCCESS);
	l = t_seg(ks, src, LEN);
	r = t_rseg(kt ^ spoil, tgt + off, LEN);
	cr_assert_eq(write_imm(ea, &l, 1, &r, 0x99, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 1, DAT_DTO_ERR_REMOTE_ACCESS, DAT_IB_DTO_RDMA_WRITE_IMMED, 0);
	cr_assert(all_bytes(tgt, 2 * LEN, 't'));
	none_after_polls(B.rcv);
	/* The initiator's QP is in error: the next request flushes. */
	r = t_rseg(kt, tgt, LEN);
	cr_assert_eq(write_imm(ea, &l, 2, &r, 0x9a, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 2, DAT_DTO_ERR_FLUSHED, DAT_IB_DTO_RDMA_WRITE_IMMED, 0);
	cr_assert(all_bytes(tgt, 2 * LEN, 't'));
	none_after_polls(B.rcv);
	unpair();
	free(src);
	free(tgt);
}

Test(shm_ext, write_imm_without_remote_write)
{
	imm_denied(PRIV_NO_REMOTE_WRITE, 0, 0);
}

Test(shm_ext, write_imm_bad_key_or_bounds)
{
	imm_denied(DAT_MEM_PRIV_ALL_FLAG, 0x100, 0);
	imm_denied(DAT_MEM_PRIV_ALL_FLAG, 0, 64);
}

/* ---- atomics ---- */

/* Fetch-and-add and compare-and-swap on a word of @k memory at B: the old
 * values, the new word, its neighbours untouched; the target's own plain
 * stores are what the next atomic sees. */
static void atomics_on(enum kind k)
{
	uint64_t *word = kind_alloc(k, 64), *old = malloc(16);
	DAT_LMR_CONTEXT kw, ko;
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r;

	pair(false);
	t_reg(&B, NULL, word, 64, PRIV_ATOMIC, &kw);
	t_reg(&A, NULL, old, 16, DAT_MEM_PRIV_ALL_FLAG, &ko);
	memset(word, 0xee, 64);
	word[1] = 100;
	old[1] = 0x5e5e;
	/* A 16-byte local segment: the old value fills its first 8. */
	l = t_seg(ko, old, 16);
	r = t_rseg(kw, &word[1], 8);
	cr_assert_eq(faa(ea, 5, &l, 1, &r, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 1, DAT_DTO_SUCCESS, DAT_IB_DTO_FETCH_ADD, 8);
	cr_assert_eq(old[0], 100);
	cr_assert_eq(old[1], 0x5e5e);
	cr_assert_eq(word[1], 105);
	/* As dtestx does: the target stores, the next atomic sees it. */
	*(volatile uint64_t *)&word[1] = 0x100;
	l = t_seg(ko, old, 8);
	cr_assert_eq(faa(ea, 0x10, &l, 2, &r, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 2, DAT_DTO_SUCCESS, DAT_IB_DTO_FETCH_ADD, 8);
	cr_assert_eq(old[0], 0x100);
	cr_assert_eq(word[1], 0x110);
	/* Compare-and-swap, matching. */
	cr_assert_eq(cas(ea, 0x110, 7, &l, 3, &r, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 3, DAT_DTO_SUCCESS, DAT_IB_DTO_CMP_SWAP, 8);
	cr_assert_eq(old[0], 0x110);
	cr_assert_eq(word[1], 7);
	/* Not matching: the word stays, the old value still comes back. */
	cr_assert_eq(cas(ea, 1, 9, &l, 4, &r, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 4, DAT_DTO_SUCCESS, DAT_IB_DTO_CMP_SWAP, 8);
	cr_assert_eq(old[0], 7);
	cr_assert_eq(word[1], 7);
	/* 64-bit arithmetic, wrapping. */
	word[1] = UINT64_MAX;
	cr_assert_eq(faa(ea, 2, &l, 5, &r, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 5, DAT_DTO_SUCCESS, DAT_IB_DTO_FETCH_ADD, 8);
	cr_assert_eq(old[0], UINT64_MAX);
	cr_assert_eq(word[1], 1);
	/* The last word of the region. */
	word[7] = 40;
	r = t_rseg(kw, &word[7], 8);
	cr_assert_eq(faa(ea, 2, &l, 6, &r, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 6, DAT_DTO_SUCCESS, DAT_IB_DTO_FETCH_ADD, 8);
	cr_assert_eq(old[0], 40);
	cr_assert_eq(word[7], 42);
	cr_assert_eq(word[0], 0xeeeeeeeeeeeeeeeeull);
	cr_assert_eq(word[2], 0xeeeeeeeeeeeeeeeeull);
	cr_assert_eq(word[6], 0xeeeeeeeeeeeeeeeeull);
	t_none(A.req);
	t_none(B.rcv);
	unpair();
	kind_free(k, word);
	free(old);
}

Test(shm_ext, atomics_on_pool_memory)
{
	atomics_on(POOL);
}

Test(shm_ext, atomics_on_malloc_memory)
{
	atomics_on(HEAP);
}

/* One atomic that must complete with @want and change nothing: the
 * target word registered with @rpriv (in another PZ than B's EP when
 * @other_pz), the local one with @lpriv, the rkey xor @spoil, the word at
 * @off of a 64-byte region.  The QP is then in error. */
static void atomic_fails(bool is_cas, DAT_MEM_PRIV_FLAGS rpriv, bool other_pz,
			 DAT_MEM_PRIV_FLAGS lpriv, uint32_t spoil, size_t off,
			 DAT_DTO_COMPLETION_STATUS want)
{
	uint64_t *word = zdapl_mem_alloc(128), old = 0x01d;
	DAT_PZ_HANDLE pz = DAT_HANDLE_NULL;
	DAT_LMR_CONTEXT kw, ko;
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r;
	int op = is_cas ? DAT_IB_DTO_CMP_SWAP : DAT_IB_DTO_FETCH_ADD;

	pair(false);
	if (other_pz)
		cr_assert_eq(dat_pz_create(B.ia, &pz), DAT_SUCCESS);
	for (int i = 0; i < 16; i++)
		word[i] = 1000 + (uint64_t)i;
	t_reg(&B, pz, word, 64, rpriv, &kw);
	t_reg(&A, NULL, &old, 8, lpriv, &ko);
	l = t_seg(ko, &old, 8);
	r = t_rseg(kw ^ spoil, (char *)word + off, 8);
	cr_assert_eq(is_cas ? cas(ea, 1000 + off / 8, 5, &l, 1, &r, 0) : faa(ea, 1, &l, 1, &r, 0),
		     DAT_SUCCESS);
	expect_ext(A.req, ea, 1, want, op, 8);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(word[i], 1000 + (uint64_t)i, "word %d changed", i);
	cr_assert_eq(old, 0x01d);
	/* The QP is in error: the next one flushes. */
	r = t_rseg(kw, word, 8);
	cr_assert_eq(faa(ea, 1, &l, 2, &r, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 2, DAT_DTO_ERR_FLUSHED, DAT_IB_DTO_FETCH_ADD, 8);
	cr_assert_eq(word[0], 1000);
	t_none(A.req);
	unpair();
	zdapl_mem_free(word);
}

Test(shm_ext, atomic_without_remote_atomic)
{
	/* Every other right, but not DAT_IB_MEM_PRIV_REMOTE_ATOMIC. */
	atomic_fails(false, DAT_MEM_PRIV_ALL_FLAG, false, DAT_MEM_PRIV_ALL_FLAG, 0, 8,
		     DAT_DTO_ERR_REMOTE_ACCESS);
	atomic_fails(true, DAT_MEM_PRIV_ALL_FLAG, false, DAT_MEM_PRIV_ALL_FLAG, 0, 8,
		     DAT_DTO_ERR_REMOTE_ACCESS);
}

Test(shm_ext, atomic_bad_key_bounds_pz)
{
	atomic_fails(false, PRIV_ATOMIC, false, DAT_MEM_PRIV_ALL_FLAG, 0x100, 0,
		     DAT_DTO_ERR_REMOTE_ACCESS);
	/* The word just past the 64-byte region. */
	atomic_fails(true, PRIV_ATOMIC, false, DAT_MEM_PRIV_ALL_FLAG, 0, 64,
		     DAT_DTO_ERR_REMOTE_ACCESS);
	atomic_fails(false, PRIV_ATOMIC, true, DAT_MEM_PRIV_ALL_FLAG, 0, 0,
		     DAT_DTO_ERR_REMOTE_ACCESS);
}

/* A memory window grants the remote atomic right as an LMR does: an
 * atomic through a window bound with DAT_IB_MEM_PRIV_REMOTE_ATOMIC works,
 * through one bound without it is refused and changes nothing. */
Test(shm_ext, atomics_through_memory_windows)
{
	uint64_t *word = zdapl_mem_alloc(64), old = 0;
	DAT_RMR_CONTEXT ctx[2];
	DAT_RMR_HANDLE rmr[2];
	DAT_LMR_CONTEXT kw, ko;
	DAT_LMR_HANDLE lw;
	DAT_LMR_TRIPLET l, w;
	DAT_RMR_TRIPLET r;
	const DAT_MEM_PRIV_FLAGS wpriv[2] = {
		DAT_MEM_PRIV_REMOTE_WRITE_FLAG | DAT_IB_MEM_PRIV_REMOTE_ATOMIC,
		DAT_MEM_PRIV_REMOTE_WRITE_FLAG,
	};

	pair(false);
	word[0] = 10;
	lw = t_reg(&B, NULL, word, 64, PRIV_ATOMIC, &kw);
	t_reg(&A, NULL, &old, 8, DAT_MEM_PRIV_ALL_FLAG, &ko);
	w = t_seg(kw, word, 64);
	for (int i = 0; i < 2; i++) {
		DAT_EVENT ev;

		cr_assert_eq(dat_rmr_create(B.pz, &rmr[i]), DAT_SUCCESS);
		cr_assert_eq(dat_rmr_bind(rmr[i], lw, &w, wpriv[i], DAT_VA_TYPE_VA, eb,
					  (DAT_RMR_COOKIE){ .as_64 = 9 }, 0, &ctx[i]),
			     DAT_SUCCESS);
		ev = t_next_event(B.req);
		cr_assert_eq(ev.event_number, DAT_RMR_BIND_COMPLETION_EVENT);
		cr_assert_eq(ev.event_data.rmr_completion_event_data.status, DAT_RMR_BIND_SUCCESS);
	}
	l = t_seg(ko, &old, 8);
	r = t_rseg(ctx[0], word, 8);
	cr_assert_eq(faa(ea, 5, &l, 1, &r, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 1, DAT_DTO_SUCCESS, DAT_IB_DTO_FETCH_ADD, 8);
	cr_assert_eq(old, 10);
	cr_assert_eq(word[0], 15);
	r = t_rseg(ctx[1], word, 8);
	cr_assert_eq(faa(ea, 5, &l, 2, &r, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 2, DAT_DTO_ERR_REMOTE_ACCESS, DAT_IB_DTO_FETCH_ADD, 8);
	cr_assert_eq(word[0], 15);
	unpair();
	zdapl_mem_free(word);
}

Test(shm_ext, atomic_local_buffer_without_local_write)
{
	atomic_fails(false, PRIV_ATOMIC, false,
		     DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_REMOTE_READ_FLAG, 0, 0,
		     DAT_DTO_ERR_LOCAL_PROTECTION);
}

/* What core refuses before the device: misaligned or short words, missing
 * buffers, a handle that is no EP.  Nothing completes, nothing changes,
 * and the QP works on. */
Test(shm_ext, extension_posts_refused_at_once)
{
	uint64_t *word = zdapl_mem_alloc(64), old[2] = { 0 };
	DAT_LMR_CONTEXT kw, ko;
	DAT_LMR_TRIPLET l, l4;
	DAT_RMR_TRIPLET r, rmis, r4;
	DAT_RETURN ret;

	pair(false);
	memset(word, 0, 64);
	t_reg(&B, NULL, word, 64, PRIV_ATOMIC, &kw);
	t_reg(&A, NULL, old, sizeof(old), DAT_MEM_PRIV_ALL_FLAG, &ko);
	l = t_seg(ko, old, 8);
	l4 = t_seg(ko, old, 4);
	r = t_rseg(kw, word, 8);
	rmis = t_rseg(kw, (char *)word + 4, 8);
	r4 = t_rseg(kw, word, 4);
	ret = faa(ea, 1, &l, 1, &rmis, 0);
	cr_assert_eq(T_TYPE(ret), DAT_INVALID_PARAMETER, "misaligned faa: 0x%x", ret);
	ret = cas(ea, 0, 1, &l, 1, &rmis, 0);
	cr_assert_eq(T_TYPE(ret), DAT_INVALID_PARAMETER, "misaligned cas: 0x%x", ret);
	ret = faa(ea, 1, &l4, 1, &r, 0);
	cr_assert_eq(T_TYPE(ret), DAT_LENGTH_ERROR, "short local faa: 0x%x", ret);
	ret = cas(ea, 0, 1, &l4, 1, &r, 0);
	cr_assert_eq(T_TYPE(ret), DAT_LENGTH_ERROR, "short local cas: 0x%x", ret);
	ret = faa(ea, 1, &l, 1, &r4, 0);
	cr_assert_eq(T_TYPE(ret), DAT_INVALID_PARAMETER, "short remote: 0x%x", ret);
	ret = faa(ea, 1, NULL, 1, &r, 0);
	cr_assert_eq(T_TYPE(ret), DAT_INVALID_PARAMETER, "no local: 0x%x", ret);
	ret = cas(ea, 0, 1, &l, 1, NULL, 0);
	cr_assert_eq(T_TYPE(ret), DAT_INVALID_PARAMETER, "no remote: 0x%x", ret);
	ret = write_imm(ea, &l, 1, NULL, 1, 0);
	cr_assert_eq(T_TYPE(ret), DAT_INVALID_PARAMETER, "write_imm, no remote: 0x%x", ret);
	ret = dat_ib_post_rdma_write_immed(ea, -1, &l, t_cookie(1), &r, 1, 0);
	cr_assert_eq(T_TYPE(ret), DAT_INVALID_PARAMETER, "write_imm, -1 segments: 0x%x", ret);
	/* Unknown completion flags: the argument each macro passes them as. */
	ret = dat_ib_post_rdma_write_immed(ea, 1, &l, t_cookie(1), &r, 1, 0x4000);
	cr_assert_eq(ret, DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7), "imm flags: 0x%x", ret);
	ret = faa(ea, 1, &l, 1, &r, 0x4000);
	cr_assert_eq(ret, DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6), "faa flags: 0x%x", ret);
	ret = cas(ea, 0, 1, &l, 1, &r, 0x4000);
	cr_assert_eq(ret, DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7), "cas flags: 0x%x", ret);
	ret = faa(A.pz, 1, &l, 1, &r, 0);
	cr_assert_eq(T_TYPE(ret), DAT_INVALID_HANDLE, "faa on a PZ: 0x%x", ret);
	ret = write_imm(A.pz, &l, 1, &r, 1, 0);
	cr_assert_eq(T_TYPE(ret), DAT_INVALID_HANDLE, "write_imm on a PZ: 0x%x", ret);
	none_after_polls(A.req);
	none_after_polls(B.rcv);
	cr_assert(all_bytes((char *)word, 64, 0));
	cr_assert_eq(old[0], 0);
	/* The refusals left the QP as it was. */
	word[0] = 41;
	cr_assert_eq(faa(ea, 1, &l, 2, &r, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 2, DAT_DTO_SUCCESS, DAT_IB_DTO_FETCH_ADD, 8);
	cr_assert_eq(old[0], 41);
	cr_assert_eq(word[0], 42);
	unpair();
	zdapl_mem_free(word);
}

/* The target IA's lock for atomics on memory no chunk covers. */
static _Atomic uint32_t *atomic_lock_of(DAT_EP_HANDLE ep)
{
	return &((struct zd_shm_ia *)t_zep(ep)->obj.ia->dev_priv)->sh->atomic_lock;
}

struct faa_job {
	DAT_EP_HANDLE ep;
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r;
	_Atomic int done;
};

static void *faa_thread(void *arg)
{
	struct faa_job *j = arg;

	cr_assert_eq(faa(j->ep, 1, &j->l, 9, &j->r, 0), DAT_SUCCESS);
	atomic_store(&j->done, 1);
	return NULL;
}

/* An initiator killed while it held the lock (planted here: its pid in
 * the lock word) does not stop the others: a holder that is gone, or a
 * zombie, is taken over; a live one is waited for. */
Test(shm_ext, atomic_lock_of_dead_holder_taken_over)
{
	uint64_t *word = malloc(64), old = 0;
	DAT_LMR_CONTEXT kw, ko;
	struct faa_job j = { 0 };
	pthread_t th;
	pid_t gone, holder;
	int status;

	pair(false);
	t_reg(&B, NULL, word, 64, PRIV_ATOMIC, &kw);
	t_reg(&A, NULL, &old, 8, DAT_MEM_PRIV_ALL_FLAG, &ko);
	word[0] = 50;
	j.ep = ea;
	j.l = t_seg(ko, &old, 8);
	j.r = t_rseg(kw, word, 8);
	/* A holder that exited and was reaped. */
	gone = fork();
	cr_assert(gone >= 0);
	if (gone == 0)
		_exit(0);
	cr_assert_eq(waitpid(gone, &status, 0), gone);
	atomic_store(atomic_lock_of(eb), (uint32_t)gone);
	cr_assert_eq(faa(ea, 1, &j.l, 8, &j.r, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 8, DAT_DTO_SUCCESS, DAT_IB_DTO_FETCH_ADD, 8);
	cr_assert_eq(old, 50);
	cr_assert_eq(word[0], 51);
	cr_assert_eq(atomic_load(atomic_lock_of(eb)), 0);
	/* A live holder: the atomic waits; killed (a zombie, not reaped
	 * yet), it is taken over. */
	holder = fork();
	cr_assert(holder >= 0);
	if (holder == 0)
		for (;;)
			pause();
	atomic_store(atomic_lock_of(eb), (uint32_t)holder);
	cr_assert_eq(pthread_create(&th, NULL, faa_thread, &j), 0);
	usleep(200 * 1000);
	cr_assert_eq(atomic_load(&j.done), 0, "the atomic went past a live holder");
	cr_assert_eq(word[0], 51);
	cr_assert_eq(kill(holder, SIGKILL), 0);
	for (int i = 0; i < 5000 && !atomic_load(&j.done); i++)
		usleep(1000);
	cr_assert_eq(atomic_load(&j.done), 1, "the lock of a dead holder was never taken over");
	cr_assert_eq(pthread_join(th, NULL), 0);
	expect_ext(A.req, ea, 9, DAT_DTO_SUCCESS, DAT_IB_DTO_FETCH_ADD, 8);
	cr_assert_eq(old, 51);
	cr_assert_eq(word[0], 52);
	cr_assert_eq(atomic_load(atomic_lock_of(eb)), 0);
	cr_assert_eq(waitpid(holder, &status, 0), holder);
	unpair();
	free(word);
}

/* ---- completion flags, flush ---- */

Test(shm_ext, suppressed_and_unsignalled_completions)
{
	uint64_t *word = zdapl_mem_alloc(64), old = 0;
	char src[32], tgt[32], rbuf[2][8];
	DAT_LMR_CONTEXT kw, ko, ks, kt, kr;
	DAT_LMR_TRIPLET l, lo, rv;
	DAT_RMR_TRIPLET r, rw;
	DAT_EP_HANDLE ua, ub;

	pair(false);
	t_reg(&B, NULL, word, 64, PRIV_ATOMIC, &kw);
	t_reg(&B, NULL, tgt, sizeof(tgt), DAT_MEM_PRIV_ALL_FLAG, &kt);
	t_reg(&B, NULL, rbuf, sizeof(rbuf), DAT_MEM_PRIV_ALL_FLAG, &kr);
	t_reg(&A, NULL, &old, 8, DAT_MEM_PRIV_ALL_FLAG, &ko);
	t_reg(&A, NULL, src, sizeof(src), DAT_MEM_PRIV_ALL_FLAG, &ks);
	fill(src, sizeof(src), 6);
	memset(tgt, 0, sizeof(tgt));
	word[0] = 10;
	lo = t_seg(ko, &old, 8);
	rw = t_rseg(kw, word, 8);
	l = t_seg(ks, src, sizeof(src));
	r = t_rseg(kt, tgt, sizeof(tgt));
	/* Suppressed: the work is done, only the initiator's event is not. */
	rv = t_seg(kr, rbuf[0], 8);
	cr_assert_eq(dat_ep_post_recv(eb, 1, &rv, t_cookie(8), 0), DAT_SUCCESS);
	cr_assert_eq(write_imm(ea, &l, 1, &r, 0x33, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	expect_imm(B.rcv, eb, 8, 0x33, sizeof(src));
	cr_assert(filled(tgt, sizeof(tgt), 6));
	cr_assert_eq(faa(ea, 5, &lo, 2, &rw, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	cr_assert_eq(cas(ea, 15, 20, &lo, 3, &rw, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	none_after_polls(A.req);
	cr_assert_eq(old, 15);
	cr_assert_eq(word[0], 20);
	/* Unsignalled: no event with the flag on an EP whose requests are
	 * unsignalled, an event without it. */
	ua = t_ep_unsignalled(&A, ea);
	ub = t_ep(&B, NULL);
	t_connect(ua, ub);
	cr_assert_eq(faa(ua, 1, &lo, 4, &rw, DAT_COMPLETION_UNSIGNALLED_FLAG), DAT_SUCCESS);
	rv = t_seg(kr, rbuf[1], 8);
	cr_assert_eq(dat_ep_post_recv(ub, 1, &rv, t_cookie(9), 0), DAT_SUCCESS);
	cr_assert_eq(write_imm(ua, &l, 5, &r, 0x34, DAT_COMPLETION_UNSIGNALLED_FLAG), DAT_SUCCESS);
	expect_imm(B.rcv, ub, 9, 0x34, sizeof(src));
	none_after_polls(A.req);
	cr_assert_eq(old, 20);
	cr_assert_eq(faa(ua, 1, &lo, 6, &rw, 0), DAT_SUCCESS);
	expect_ext(A.req, ua, 6, DAT_DTO_SUCCESS, DAT_IB_DTO_FETCH_ADD, 8);
	cr_assert_eq(old, 21);
	cr_assert_eq(word[0], 22);
	/* An error is never suppressed. */
	rw.rmr_context ^= 0x100;
	cr_assert_eq(faa(ea, 1, &lo, 7, &rw, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	expect_ext(A.req, ea, 7, DAT_DTO_ERR_REMOTE_ACCESS, DAT_IB_DTO_FETCH_ADD, 8);
	cr_assert_eq(word[0], 22);
	t_none(A.req);
	unpair();
	zdapl_mem_free(word);
}

/* Extension requests waiting behind a send (RNR) when the QP breaks
 * complete DAT_DTO_ERR_FLUSHED with their own operations, in order, and
 * never reach the target. */
Test(shm_ext, queued_requests_flushed)
{
	enum { BIG = 8192 };
	char *src = malloc(BIG), *tgt = malloc(64);
	uint64_t *word = zdapl_mem_alloc(64), old = 0x0dd;
	DAT_LMR_CONTEXT ks, kt, kw, ko;
	DAT_LMR_TRIPLET l, lo;
	DAT_RMR_TRIPLET r, rw;

	pair(false);
	t_reg(&A, NULL, src, BIG, DAT_MEM_PRIV_ALL_FLAG, &ks);
	t_reg(&A, NULL, &old, 8, DAT_MEM_PRIV_ALL_FLAG, &ko);
	t_reg(&B, NULL, tgt, 64, DAT_MEM_PRIV_ALL_FLAG, &kt);
	t_reg(&B, NULL, word, 64, PRIV_ATOMIC, &kw);
	memset(tgt, 't', 64);
	word[0] = 3;
	/* Larger than an eager slot, no receive: it waits (RNR). */
	l = t_seg(ks, src, BIG);
	cr_assert_eq(dat_ep_post_send(ea, 1, &l, t_cookie(1), 0), DAT_SUCCESS);
	l = t_seg(ks, src, 64);
	r = t_rseg(kt, tgt, 64);
	lo = t_seg(ko, &old, 8);
	rw = t_rseg(kw, word, 8);
	cr_assert_eq(write_imm(ea, &l, 2, &r, 0x44, 0), DAT_SUCCESS);
	cr_assert_eq(faa(ea, 1, &lo, 3, &rw, 0), DAT_SUCCESS);
	cr_assert_eq(cas(ea, 3, 4, &lo, 4, &rw, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	none_after_polls(A.req);
	cr_assert_eq(word[0], 3);
	t_flush(ea);
	t_expect(A.req, ea, 1, DAT_DTO_ERR_FLUSHED, DAT_DTO_SEND, 0);
	expect_ext(A.req, ea, 2, DAT_DTO_ERR_FLUSHED, DAT_IB_DTO_RDMA_WRITE_IMMED, 0);
	expect_ext(A.req, ea, 3, DAT_DTO_ERR_FLUSHED, DAT_IB_DTO_FETCH_ADD, 0);
	expect_ext(A.req, ea, 4, DAT_DTO_ERR_FLUSHED, DAT_IB_DTO_CMP_SWAP, 0);
	t_none(A.req);
	cr_assert(all_bytes(tgt, 64, 't'));
	cr_assert_eq(word[0], 3);
	cr_assert_eq(old, 0x0dd);
	t_none(B.rcv);
	unpair();
	free(src);
	free(tgt);
	zdapl_mem_free(word);
}

/* A target whose QP broke: the immediate and the atomics complete flushed
 * at the initiator and change nothing there. */
Test(shm_ext, target_flushed)
{
	char src[64], *tgt = malloc(64);
	uint64_t *word = zdapl_mem_alloc(64), old = 0x0dd;
	DAT_LMR_CONTEXT ks, kt, kw, ko;
	DAT_LMR_TRIPLET l, lo;
	DAT_RMR_TRIPLET r, rw;

	pair(false);
	t_reg(&A, NULL, src, 64, DAT_MEM_PRIV_ALL_FLAG, &ks);
	t_reg(&A, NULL, &old, 8, DAT_MEM_PRIV_ALL_FLAG, &ko);
	t_reg(&B, NULL, tgt, 64, DAT_MEM_PRIV_ALL_FLAG, &kt);
	t_reg(&B, NULL, word, 64, PRIV_ATOMIC, &kw);
	memset(src, 's', 64);
	memset(tgt, 't', 64);
	word[0] = 3;
	t_flush(eb);
	l = t_seg(ks, src, 64);
	r = t_rseg(kt, tgt, 64);
	lo = t_seg(ko, &old, 8);
	rw = t_rseg(kw, word, 8);
	cr_assert_eq(write_imm(ea, &l, 1, &r, 0x55, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 1, DAT_DTO_ERR_FLUSHED, DAT_IB_DTO_RDMA_WRITE_IMMED, 0);
	cr_assert_eq(faa(ea, 1, &lo, 2, &rw, 0), DAT_SUCCESS);
	expect_ext(A.req, ea, 2, DAT_DTO_ERR_FLUSHED, DAT_IB_DTO_FETCH_ADD, 0);
	cr_assert(all_bytes(tgt, 64, 't'));
	cr_assert_eq(word[0], 3);
	cr_assert_eq(old, 0x0dd);
	unpair();
	free(tgt);
	zdapl_mem_free(word);
}

/* ---- across processes ---- */

struct xinfo {
	char blob[ZD_QP_BLOB_MAX];
	size_t blob_len;
	uint64_t addr;
	uint32_t key;
};

static void xwrite(int fd, const void *p, size_t n)
{
	if (t_pipe_write(fd, p, n))
		_exit(90);
}

/* Both ends of a blob exchange with a forked peer (the peer reads ours
 * first); *@peer gets its info. */
static void xconnect(DAT_EP_HANDLE ep, int rd, int wr, uint64_t addr, uint32_t key,
		     struct xinfo *peer)
{
	struct xinfo me = { .addr = addr, .key = key };

	me.blob_len = t_blob(ep, me.blob);
	xwrite(wr, &me, sizeof(me));
	cr_assert_eq(t_pipe_read(rd, peer, sizeof(*peer)), 0, "peer died during setup");
	t_accept_blob(ep, peer->blob, peer->blob_len);
}

/* The peer's side of xconnect: returns nonzero on a broken pipe. */
static int xconnect_peer(DAT_EP_HANDLE ep, int rd, int wr, uint64_t addr, uint32_t key,
			 struct xinfo *peer)
{
	struct xinfo me = { .addr = addr, .key = key };

	if (t_pipe_read(rd, peer, sizeof(*peer)))
		return -1;
	t_accept_blob(ep, peer->blob, peer->blob_len);
	me.blob_len = t_blob(ep, me.blob);
	xwrite(wr, &me, sizeof(me));
	return 0;
}

enum { XN = 2000, XLEN = 256, XRQ = 16 };

/* Target of the write-immediate stream, in memory of kind @k: asleep in
 * dat_evd_wait, it checks each immediate's data the moment its receive
 * completes, then posts another receive.  Receives stay few, so the
 * initiator also meets the eager ring and RNR. */
static int imm_target(int rd, int wr, int k)
{
	struct side T;
	struct xinfo peer;
	char *tgt = k == POOL ? zdapl_mem_alloc(XN * XLEN) : malloc(XN * XLEN);
	char rbuf[8], c;
	DAT_LMR_CONTEXT kt, kr;
	DAT_EP_HANDLE ep;
	int rc = 0;

	t_open(&T);
	ep = t_ep(&T, NULL);
	memset(tgt, 0, XN * XLEN);
	t_reg(&T, NULL, tgt, XN * XLEN, DAT_MEM_PRIV_ALL_FLAG, &kt);
	t_reg(&T, NULL, rbuf, sizeof(rbuf), DAT_MEM_PRIV_ALL_FLAG, &kr);
	for (int i = 0; i < XRQ; i++) {
		DAT_LMR_TRIPLET rv = t_seg(kr, rbuf, sizeof(rbuf));

		if (dat_ep_post_recv(ep, 1, &rv, t_cookie((uint64_t)i), 0) != DAT_SUCCESS)
			return 2;
	}
	if (xconnect_peer(ep, rd, wr, (uintptr_t)tgt, kt, &peer))
		return 3;
	for (uint32_t i = 0; i < XN && !rc; i++) {
		DAT_IB_EXTENSION_EVENT_DATA x;
		DAT_EVENT ev;
		DAT_COUNT more;
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
		DAT_LMR_TRIPLET rv = t_seg(kr, rbuf, sizeof(rbuf));

		if (dat_evd_wait(T.rcv, 10 * 1000 * 1000, 1, &ev, &more) != DAT_SUCCESS)
			return 10;
		memcpy(&x, ev.event_extension_data, sizeof(x));
		if ((int)ev.event_number != DAT_IB_DTO_EVENT || d->status != DAT_DTO_SUCCESS ||
		    (int)d->operation != DAT_IB_DTO_RECV_IMMED ||
		    x.type != DAT_IB_RDMA_WRITE_IMMED_DATA || d->transfered_length != XLEN ||
		    d->user_cookie.as_64 != i || (uint32_t)x.val.immed.data != i) {
			fprintf(stderr, "immediate %u: event 0x%x status %d op %d len %u cookie %llu "
				"imm %u\n", i, (unsigned)ev.event_number, d->status, d->operation,
				d->transfered_length, (unsigned long long)d->user_cookie.as_64,
				x.val.immed.data);
			rc = 11;
		}
		/* The data is there the moment its receive completes. */
		for (uint32_t b = 0; b < XLEN && !rc; b++)
			if (tgt[i * XLEN + b] != (char)(i + b * 13)) {
				fprintf(stderr, "immediate %u: byte %u not written yet\n", i, b);
				rc = 12;
			}
		if (!rc && dat_ep_post_recv(ep, 1, &rv, t_cookie(i + XRQ), 0) != DAT_SUCCESS)
			rc = 13;
	}
	xwrite(wr, rc ? "f" : "d", 1);
	if (t_pipe_read(rd, &c, 1))
		return 4;
	t_close(&T);
	return rc;
}

static void imm_stream(enum kind k)
{
	struct side I;
	struct xinfo peer;
	int rd, wr, status, done = 0;
	pid_t pid = t_fork_peer(imm_target, k, &rd, &wr);
	char *src = malloc(XN * XLEN), c;
	DAT_LMR_CONTEXT ks;
	DAT_EP_HANDLE ep;

	t_open(&I);
	ep = t_ep(&I, NULL);
	for (uint32_t i = 0; i < XN; i++)
		for (uint32_t b = 0; b < XLEN; b++)
			src[i * XLEN + b] = (char)(i + b * 13);
	t_reg(&I, NULL, src, XN * XLEN, DAT_MEM_PRIV_ALL_FLAG, &ks);
	xconnect(ep, rd, wr, 0, 0, &peer);
	for (uint32_t i = 0; i < XN;) {
		DAT_LMR_TRIPLET l = t_seg(ks, src + i * XLEN, XLEN);
		DAT_RMR_TRIPLET r = t_rseg(peer.key, (void *)(uintptr_t)(peer.addr + i * XLEN),
					   XLEN);
		DAT_RETURN ret = write_imm(ep, &l, i, &r, i, 0);
		DAT_EVENT ev;
		DAT_COUNT more;

		if (ret == DAT_SUCCESS)
			i++;
		else
			cr_assert_eq(T_TYPE(ret), DAT_INSUFFICIENT_RESOURCES);
		/* Full queue: sleep for a completion (the target's doorbell
		 * wakes a request waiting for room). */
		if (ret != DAT_SUCCESS) {
			cr_assert_eq(dat_evd_wait(I.req, 5 * 1000 * 1000, 1, &ev, &more),
				     DAT_SUCCESS);
			cr_assert_eq(ev.event_data.dto_completion_event_data.status,
				     DAT_DTO_SUCCESS);
			done++;
		}
		while (dat_evd_dequeue(I.req, &ev) == DAT_SUCCESS) {
			cr_assert_eq(ev.event_data.dto_completion_event_data.status,
				     DAT_DTO_SUCCESS);
			done++;
		}
	}
	while (done < XN) {
		DAT_EVENT ev;
		DAT_COUNT more;

		cr_assert_eq(dat_evd_wait(I.req, 5 * 1000 * 1000, 1, &ev, &more), DAT_SUCCESS,
			     "%d of %d completed", done, XN);
		cr_assert_eq(ev.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
		done++;
	}
	cr_assert_eq(t_pipe_read(rd, &c, 1), 0);
	xwrite(wr, "q", 1);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "target status 0x%x", status);
	cr_assert_eq(c, 'd');
	t_close(&I);
	free(src);
}

Test(shm_ext, write_imm_stream_across_processes_pool)
{
	imm_stream(POOL);
}

Test(shm_ext, write_imm_stream_across_processes_malloc)
{
	imm_stream(HEAP);
}

/* Each racer adds at least RACE_OPS times, and goes on (up to
 * RACE_EXTRA_NS) until it has seen the other's adds come between two of
 * its own RACE_MIN_GAPS times: on a loaded host the scheduler may
 * otherwise run the two one after the other, and a race that never
 * interleaved proves nothing. */
enum { RACE_OPS = 100000, RACERS = 2, RACE_MIN_GAPS = 500 };
#define RACE_EXTRA_NS (5ll * 1000 * 1000 * 1000)

struct race_result {
	uint64_t ops;         /* fetch-and-adds of 1 this racer made */
	uint64_t sum;         /* of the old values it saw */
	uint64_t gaps;        /* times the other's adds came between two of ours */
	int rc;
};

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* One fetch-and-add of @add at @r, waited for; its old value, or ~0 after
 * a failure (*@rc set). */
static uint64_t race_faa(struct side *R, DAT_EP_HANDLE ep, DAT_LMR_TRIPLET *l,
			 DAT_RMR_TRIPLET *r, uint64_t add, uint64_t cookie, int *rc)
{
	const DAT_DTO_COMPLETION_EVENT_DATA *d;
	DAT_EVENT ev;
	int spins = 0;

	if (faa(ep, add, l, cookie, r, 0) != DAT_SUCCESS) {
		*rc = 10;
		return ~0ull;
	}
	while (dat_evd_dequeue(R->req, &ev) != DAT_SUCCESS)
		if (++spins > 10000000) {
			*rc = 11;
			return ~0ull;
		}
	d = &ev.event_data.dto_completion_event_data;
	if ((int)ev.event_number != DAT_IB_DTO_EVENT || d->status != DAT_DTO_SUCCESS ||
	    d->user_cookie.as_64 != cookie) {
		*rc = 12;
		return ~0ull;
	}
	return *(volatile uint64_t *)(uintptr_t)l->virtual_address;
}

/* A racer: fetch-and-adds of 1 on the third party's word (RACE_OPS and
 * more, above); the old values it sees must rise, and their sum goes
 * back.  The racers meet at a second word first (each adds 1, then waits
 * for it to read RACERS), so that they start at the same time. */
static int racer(int rd, int wr, int id)
{
	struct side R;
	struct xinfo peer;
	struct race_result res = { 0 };
	uint64_t *old = malloc(8), last = 0, v;
	DAT_LMR_CONTEXT ko;
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r, meet;
	DAT_EP_HANDLE ep;
	char c;

	(void)id;
	t_open(&R);
	ep = t_ep(&R, NULL);
	t_reg(&R, NULL, old, 8, DAT_MEM_PRIV_ALL_FLAG, &ko);
	if (xconnect_peer(ep, rd, wr, 0, 0, &peer))
		return 2;
	l = t_seg(ko, old, 8);
	r = t_rseg(peer.key, (void *)(uintptr_t)peer.addr, 8);
	meet = t_rseg(peer.key, (void *)(uintptr_t)(peer.addr + 8), 8);
	if (t_pipe_read(rd, &c, 1))  /* go: both racers are connected */
		return 3;
	v = race_faa(&R, ep, &l, &meet, 1, 0, &res.rc);
	for (uint64_t spins = 0; !res.rc && v + 1 < RACERS; spins++) {
		v = race_faa(&R, ep, &l, &meet, 0, 0, &res.rc);
		if (spins > 100000000)
			res.rc = 14;
	}
	long long deadline = now_ns() + RACE_EXTRA_NS;

	for (uint32_t i = 0; !res.rc; i++) {
		if (i >= RACE_OPS && (res.gaps >= RACE_MIN_GAPS ||
				      (i % 1024 == 0 && now_ns() > deadline)))
			break;
		v = race_faa(&R, ep, &l, &r, 1, i, &res.rc);
		if (res.rc)
			break;
		if (i > 0 && v <= last)
			res.rc = 13;
		if (i > 0 && v != last + 1)
			res.gaps++;
		last = v;
		res.sum += v;
		res.ops++;
	}
	xwrite(wr, &res, sizeof(res));
	if (t_pipe_read(rd, &c, 1))
		return 4;
	t_close(&R);
	return res.rc;
}

/* Two racers against a word of this process in memory of kind @k (word[1];
 * word[2] is where they meet): no update lost (the word ends at the count),
 * none applied twice (the old values seen are exactly 0 .. count - 1:
 * their sum). */
static void faa_race(enum kind k)
{
	struct side T;
	int rd[RACERS], wr[RACERS], status;
	pid_t pid[RACERS];
	uint64_t *word, total = 0, sum = 0, gaps = 0;
	DAT_LMR_CONTEXT kw;

	for (int i = 0; i < RACERS; i++)
		pid[i] = t_fork_peer(racer, i, &rd[i], &wr[i]);
	t_open(&T);
	word = kind_alloc(k, 64);
	memset(word, 0, 64);
	t_reg(&T, NULL, word, 64, PRIV_ATOMIC, &kw);
	for (int i = 0; i < RACERS; i++) {
		struct xinfo peer;

		xconnect(t_ep(&T, NULL), rd[i], wr[i], (uintptr_t)&word[1], kw, &peer);
	}
	for (int i = 0; i < RACERS; i++)
		xwrite(wr[i], "g", 1);
	for (int i = 0; i < RACERS; i++) {
		struct race_result res;

		cr_assert_eq(t_pipe_read(rd[i], &res, sizeof(res)), 0, "racer %d died", i);
		cr_assert_eq(res.rc, 0, "racer %d failed check %d", i, res.rc);
		cr_assert_geq(res.ops, RACE_OPS);
		total += res.ops;
		sum += res.sum;
		gaps += res.gaps;
	}
	cr_assert_eq(word[1], total, "word %llu after %llu increments",
		     (unsigned long long)word[1], (unsigned long long)total);
	cr_assert_eq(sum, total * (total - 1) / 2, "old values overlap or skip");
	/* Without interleaving the race proved nothing. */
	cr_assert(gaps > 0, "the racers never interleaved");
	cr_log_info("%s: %llu interleavings in %llu adds", k == POOL ? "pool" : "malloc",
		    (unsigned long long)gaps, (unsigned long long)total);
	cr_assert_eq(word[0], 0);
	cr_assert_eq(word[2], RACERS);
	cr_assert_eq(word[3], 0);
	for (int i = 0; i < RACERS; i++) {
		xwrite(wr[i], "q", 1);
		cr_assert_eq(waitpid(pid[i], &status, 0), pid[i]);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "racer status 0x%x",
			  status);
	}
	t_close(&T);
	kind_free(k, word);
}

Test(shm_ext, fetch_add_race_two_processes_pool)
{
	faa_race(POOL);
}

Test(shm_ext, fetch_add_race_two_processes_malloc)
{
	faa_race(HEAP);
}
