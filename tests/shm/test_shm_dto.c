/* shm device: send/recv, eager and RNR, ordering, RDMA, flags, protection,
 * flush, and the DTO calls' handle and parameter checks (one process, two
 * IAs). */
#include "zd_shm_test.h"
#include "evd/zd_evd.h"
#include "hw/shm/zd_shm.h"
#include <dat2/dat_registry.h>

TestSuite(shm_dto, .init = t_need_conf, .timeout = 60);

static struct side A, B;
static DAT_EP_HANDLE ea, eb;

static void pair(const DAT_EP_ATTR *attr)
{
	t_open(&A);
	t_open(&B);
	ea = t_ep(&A, attr);
	eb = t_ep(&B, attr);
	t_connect(ea, eb);
}

static void unpair(void)
{
	t_close(&A);
	t_close(&B);
}

Test(shm_dto, send_recv_basic)
{
	static char src[256], dst[256];
	DAT_LMR_CONTEXT ka, kb;
	DAT_LMR_TRIPLET s, r;

	pair(NULL);
	t_reg(&A, NULL, src, sizeof(src), DAT_MEM_PRIV_ALL_FLAG, &ka);
	t_reg(&B, NULL, dst, sizeof(dst), DAT_MEM_PRIV_ALL_FLAG, &kb);
	memset(src, 'a', sizeof(src));
	r = t_seg(kb, dst, sizeof(dst));
	s = t_seg(ka, src, 100);
	cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie(7), DAT_COMPLETION_DEFAULT_FLAG),
		     DAT_SUCCESS);
	cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie(8), DAT_COMPLETION_DEFAULT_FLAG),
		     DAT_SUCCESS);
	t_expect(A.req, ea, 8, DAT_DTO_SUCCESS, DAT_DTO_SEND, 100);
	t_expect(B.rcv, eb, 7, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE, 100);
	cr_assert_eq(memcmp(dst, src, 100), 0);
	cr_assert_eq(dst[100], 0);
	/* zero-length send, no segments */
	cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie(9), DAT_COMPLETION_DEFAULT_FLAG),
		     DAT_SUCCESS);
	cr_assert_eq(dat_ep_post_send(ea, 0, NULL, t_cookie(10), DAT_COMPLETION_DEFAULT_FLAG),
		     DAT_SUCCESS);
	t_expect(A.req, ea, 10, DAT_DTO_SUCCESS, DAT_DTO_SEND, 0);
	t_expect(B.rcv, eb, 9, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE, 0);
	unpair();
}

Test(shm_dto, send_recv_max_iov)
{
	enum { N = 16 };
	char *src = zdapl_mem_alloc(N * 64), *dst = malloc(N * 64 + 100);
	DAT_LMR_CONTEXT ka, kb;
	DAT_LMR_TRIPLET s[N], r[N];
	DAT_EP_ATTR attr;
	size_t off = 0;

	pair(NULL);
	t_reg(&A, NULL, src, N * 64, DAT_MEM_PRIV_ALL_FLAG, &ka);
	t_reg(&B, NULL, dst, N * 64 + 100, DAT_MEM_PRIV_ALL_FLAG, &kb);
	for (int i = 0; i < N * 64; i++)
		src[i] = (char)(i * 7 + 1);
	memset(dst, 0, N * 64 + 100);
	/* Sender: 16 segments of 64; receiver: 16 uneven segments. */
	for (int i = 0; i < N; i++)
		s[i] = t_seg(ka, src + i * 64, 64);
	for (int i = 0; i < N; i++) {
		size_t len = i == N - 1 ? N * 64 + 100 - off : (size_t)(i % 3) * 40 + 10;
		r[i] = t_seg(kb, dst + off, len);
		off += len;
	}
	cr_assert_eq(dat_ep_query(ea, DAT_EP_FIELD_ALL, &(DAT_EP_PARAM){0}), DAT_SUCCESS);
	{
		DAT_EP_PARAM p;
		dat_ep_query(ea, DAT_EP_FIELD_ALL, &p);
		attr = p.ep_attr;
		cr_assert_eq(attr.max_request_iov, N);
	}
	cr_assert_eq(dat_ep_post_recv(eb, N, r, t_cookie(1), 0), DAT_SUCCESS);
	cr_assert_eq(dat_ep_post_send(ea, N, s, t_cookie(2), 0), DAT_SUCCESS);
	t_expect(A.req, ea, 2, DAT_DTO_SUCCESS, DAT_DTO_SEND, N * 64);
	t_expect(B.rcv, eb, 1, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE, N * 64);
	cr_assert_eq(memcmp(dst, src, N * 64), 0);
	/* One more segment than the EP takes. */
	cr_assert_eq(T_TYPE(dat_ep_post_send(ea, N + 1, s, t_cookie(3), 0)), DAT_LENGTH_ERROR);
	cr_assert_eq(T_TYPE(dat_ep_post_recv(eb, N + 1, r, t_cookie(3), 0)), DAT_LENGTH_ERROR);
	unpair();
	free(dst);
	zdapl_mem_free(src);
}

Test(shm_dto, eager_before_recv_and_rnr)
{
	enum { BIG = 64 * 1024 };
	char *src = malloc(BIG), *dst = malloc(BIG);
	DAT_LMR_CONTEXT ka, kb;
	DAT_LMR_TRIPLET s, r;

	pair(NULL);
	t_reg(&A, NULL, src, BIG, DAT_MEM_PRIV_ALL_FLAG, &ka);
	t_reg(&B, NULL, dst, BIG, DAT_MEM_PRIV_ALL_FLAG, &kb);
	memset(src, 'x', BIG);
	memset(dst, 0, BIG);
	/* Small send, no receive yet: buffered in the eager ring and done. */
	s = t_seg(ka, src, 50);
	cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie(1), 0), DAT_SUCCESS);
	t_expect(A.req, ea, 1, DAT_DTO_SUCCESS, DAT_DTO_SEND, 50);
	t_none(B.rcv);
	/* Large send, no receive: queued (RNR), not completed. */
	src[0] = 'y';
	s = t_seg(ka, src, BIG);
	cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie(2), 0), DAT_SUCCESS);
	t_none(A.req);
	/* First receive takes the eager message. */
	r = t_seg(kb, dst, BIG);
	cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie(11), 0), DAT_SUCCESS);
	t_expect(B.rcv, eb, 11, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE, 50);
	cr_assert_eq(dst[0], 'x');
	t_none(A.req);
	/* Second receive: the queued send goes on the sender's progress. */
	cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie(12), 0), DAT_SUCCESS);
	t_expect(A.req, ea, 2, DAT_DTO_SUCCESS, DAT_DTO_SEND, BIG);
	t_expect(B.rcv, eb, 12, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE, BIG);
	cr_assert_eq(dst[0], 'y');
	unpair();
	free(src);
	free(dst);
}

Test(shm_dto, ordering_mixed_paths)
{
	enum { M = 200 };
	static uint32_t src[M], dst[M];
	DAT_LMR_CONTEXT ka, kb;
	int posted = 0;

	pair(NULL);
	t_reg(&A, NULL, src, sizeof(src), DAT_MEM_PRIV_ALL_FLAG, &ka);
	t_reg(&B, NULL, dst, sizeof(dst), DAT_MEM_PRIV_ALL_FLAG, &kb);
	/* Messages alternate between finding a receive, the eager ring, and
	 * waiting (RNR): they must arrive in order. */
	for (int i = 0; i < M; i++) {
		DAT_LMR_TRIPLET s;

		src[i] = (uint32_t)i + 1000;
		s = t_seg(ka, &src[i], 4);
		if (i % 3 == 0 && posted < M) {
			DAT_LMR_TRIPLET r = t_seg(kb, &dst[posted], 4);
			cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie((uint64_t)posted), 0),
				     DAT_SUCCESS);
			posted++;
		}
		cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie((uint64_t)i), 0), DAT_SUCCESS);
		if (i % 7 == 0) {
			DAT_EVENT ev;
			while (dat_evd_dequeue(A.req, &ev) == DAT_SUCCESS)
				;
		}
	}
	for (; posted < M; posted++) {
		DAT_LMR_TRIPLET r = t_seg(kb, &dst[posted], 4);
		cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie((uint64_t)posted), 0), DAT_SUCCESS);
		{
			DAT_EVENT ev;
			while (dat_evd_dequeue(A.req, &ev) == DAT_SUCCESS)
				;
		}
	}
	for (int i = 0; i < M; i++) {
		DAT_DTO_COMPLETION_EVENT_DATA d;
		DAT_EVENT ev;
		int spins = 0;

		/* Queued sends move on the sender's progress only. */
		while (dat_evd_dequeue(B.rcv, &ev) != DAT_SUCCESS) {
			while (dat_evd_dequeue(A.req, &ev) == DAT_SUCCESS)
				;
			cr_assert(++spins < 1000000, "message %d never arrived", i);
		}
		d = ev.event_data.dto_completion_event_data;
		cr_assert_eq(d.status, DAT_DTO_SUCCESS);
		cr_assert_eq(d.user_cookie.as_64, (uint64_t)i);
		cr_assert_eq(dst[i], (uint32_t)i + 1000, "message %d holds %u", i, dst[i]);
	}
	unpair();
}

static void rdma_roundtrip(bool pool)
{
	enum { L = 8192 };
	char *local = pool ? zdapl_mem_alloc(L) : malloc(L);
	char *target = pool ? zdapl_mem_alloc(L) : malloc(L);
	DAT_LMR_CONTEXT kl, kt;
	DAT_LMR_TRIPLET l[2];
	DAT_RMR_TRIPLET r;

	pair(NULL);
	t_reg(&A, NULL, local, L, DAT_MEM_PRIV_ALL_FLAG, &kl);
	t_reg(&B, NULL, target, L, DAT_MEM_PRIV_ALL_FLAG, &kt);
	for (int i = 0; i < L; i++)
		local[i] = (char)i;
	memset(target, 0, L);
	/* 8-byte write */
	l[0] = t_seg(kl, local, 8);
	r = t_rseg(kt, target + 16, 8);
	cr_assert_eq(dat_ep_post_rdma_write(ea, 1, l, t_cookie(1), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, 1, DAT_DTO_SUCCESS, DAT_DTO_RDMA_WRITE, 8);
	cr_assert_eq(memcmp(target + 16, local, 8), 0);
	cr_assert_eq(target[15], 0);
	cr_assert_eq(target[24], 0);
	t_none(B.rcv);
	/* two-segment write of the rest */
	l[0] = t_seg(kl, local, 1000);
	l[1] = t_seg(kl, local + 1000, L - 1000);
	r = t_rseg(kt, target, L);
	cr_assert_eq(dat_ep_post_rdma_write(ea, 2, l, t_cookie(2), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, 2, DAT_DTO_SUCCESS, DAT_DTO_RDMA_WRITE, L);
	cr_assert_eq(memcmp(target, local, L), 0);
	/* read it back into a zeroed local buffer */
	memset(local, 0, L);
	l[0] = t_seg(kl, local, 4096);
	l[1] = t_seg(kl, local + 4096, L - 4096);
	cr_assert_eq(dat_ep_post_rdma_read(ea, 2, l, t_cookie(3), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, 3, DAT_DTO_SUCCESS, DAT_DTO_RDMA_READ, L);
	cr_assert_eq(memcmp(target, local, L), 0);
	unpair();
	if (pool) {
		zdapl_mem_free(local);
		zdapl_mem_free(target);
	} else {
		free(local);
		free(target);
	}
}

Test(shm_dto, rdma_malloc)
{
	rdma_roundtrip(false);
}

Test(shm_dto, rdma_pool)
{
	rdma_roundtrip(true);
}

Test(shm_dto, completion_flags)
{
	static char buf[64], tgt[64];
	DAT_LMR_CONTEXT k, kt;
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r;
	DAT_EP_HANDLE ua, ub;

	pair(NULL);
	t_reg(&A, NULL, buf, sizeof(buf), DAT_MEM_PRIV_ALL_FLAG, &k);
	t_reg(&B, NULL, tgt, sizeof(tgt), DAT_MEM_PRIV_ALL_FLAG, &kt);
	l = t_seg(k, buf, 8);
	r = t_rseg(kt, tgt, 8);
	/* Suppressed success: no event; the next one shows it happened. */
	cr_assert_eq(dat_ep_post_rdma_write(ea, 1, &l, t_cookie(1), &r,
					    DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	cr_assert_eq(dat_ep_post_rdma_write(ea, 1, &l, t_cookie(2), &r,
					    DAT_COMPLETION_BARRIER_FENCE_FLAG), DAT_SUCCESS);
	t_expect(A.req, ea, 2, DAT_DTO_SUCCESS, DAT_DTO_RDMA_WRITE, 8);
	t_none(A.req);
	/* Unsignalled without the EP attribute: signalled anyway. */
	cr_assert_eq(dat_ep_post_rdma_write(ea, 1, &l, t_cookie(3), &r,
					    DAT_COMPLETION_UNSIGNALLED_FLAG), DAT_SUCCESS);
	t_expect(A.req, ea, 3, DAT_DTO_SUCCESS, DAT_DTO_RDMA_WRITE, 8);
	/* With it: no event on success. */
	ua = t_ep_unsignalled(&A, ea);
	ub = t_ep(&B, NULL);
	t_connect(ua, ub);
	cr_assert_eq(dat_ep_post_rdma_write(ua, 1, &l, t_cookie(4), &r,
					    DAT_COMPLETION_UNSIGNALLED_FLAG), DAT_SUCCESS);
	t_none(A.req);
	/* A suppressed DTO that fails still reports. */
	r.rmr_context ^= 0x5;
	cr_assert_eq(dat_ep_post_rdma_write(ea, 1, &l, t_cookie(5), &r,
					    DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	t_expect(A.req, ea, 5, DAT_DTO_ERR_REMOTE_ACCESS, DAT_DTO_RDMA_WRITE, 0);
	/* Unknown flag bits */
	cr_assert_eq(T_TYPE(dat_ep_post_rdma_write(ub, 1, &l, t_cookie(6), &r, 0x1000)),
		     DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_ep_post_send(ub, 1, &l, t_cookie(6), 0x1000)),
		     DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_ep_post_recv(ub, 1, &l, t_cookie(6),
					     DAT_COMPLETION_SUPPRESS_FLAG)),
		     DAT_INVALID_PARAMETER);
	unpair();
}

/* One protection case: a fresh pair, one bad RDMA write, the target
 * buffer untouched, the QP in error afterwards (next DTO flushed). */
static void bad_write(DAT_LMR_TRIPLET l, DAT_RMR_TRIPLET r, char *tgt, size_t tlen,
		      DAT_DTO_COMPLETION_STATUS want)
{
	cr_assert_eq(dat_ep_post_rdma_write(ea, 1, &l, t_cookie(1), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, 1, want, DAT_DTO_RDMA_WRITE, 0);
	for (size_t i = 0; i < tlen; i++)
		cr_assert_eq(tgt[i], 0, "target byte %zu written", i);
	cr_assert_eq(dat_ep_post_rdma_write(ea, 1, &l, t_cookie(2), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, 2, DAT_DTO_ERR_FLUSHED, DAT_DTO_RDMA_WRITE, 0);
}

Test(shm_dto, protection)
{
	static char src[128], tgt[128], ro[128];
	DAT_LMR_CONTEXT ks, kt, kro, kother, kr;
	DAT_PZ_HANDLE pz2;

	memset(src, 'q', sizeof(src));
	struct {
		const char *what;
		int local_bad, remote_bad;
	} cases[] = {
		{ "bad lkey", 1, 0 },  { "lkey out of bounds", 2, 0 },
		{ "lkey wrong pz", 3, 0 },
		{ "bad rkey", 0, 1 },  { "rkey out of bounds", 0, 2 },
		{ "rkey wrong pz", 0, 3 }, { "rkey no remote write", 0, 4 },
	};
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		DAT_LMR_TRIPLET l;
		DAT_RMR_TRIPLET r;

		memset(tgt, 0, sizeof(tgt));
		memset(ro, 0, sizeof(ro));
		pair(NULL);
		cr_assert_eq(dat_pz_create(A.ia, &pz2), DAT_SUCCESS);
		t_reg(&A, NULL, src, 64, DAT_MEM_PRIV_ALL_FLAG, &ks);
		t_reg(&A, pz2, src + 64, 64, DAT_MEM_PRIV_ALL_FLAG, &kother);
		t_reg(&A, NULL, src + 64, 64, DAT_MEM_PRIV_LOCAL_WRITE_FLAG, &kr);
		t_reg(&B, NULL, tgt, 64, DAT_MEM_PRIV_ALL_FLAG, &kt);
		t_reg(&B, NULL, ro, sizeof(ro), DAT_MEM_PRIV_REMOTE_READ_FLAG |
		      DAT_MEM_PRIV_LOCAL_WRITE_FLAG, &kro);
		l = t_seg(ks, src, 32);
		r = t_rseg(kt, tgt, 32);
		switch (cases[c].local_bad) {
		case 1: l.lmr_context ^= 0x40000; break;
		case 2: l.segment_length = 65; break;
		case 3: l = t_seg(kother, src + 64, 32); break;
		case 4: l = t_seg(kr, src + 64, 32); break;
		}
		switch (cases[c].remote_bad) {
		case 1: r.rmr_context += 1; break;
		case 2: r.virtual_address += 40; break;
		case 3: {
			DAT_PZ_HANDLE bpz2;
			DAT_LMR_CONTEXT kb2;
			cr_assert_eq(dat_pz_create(B.ia, &bpz2), DAT_SUCCESS);
			t_reg(&B, bpz2, tgt + 64, 64, DAT_MEM_PRIV_ALL_FLAG, &kb2);
			r = t_rseg(kb2, tgt + 64, 32);
			break;
		}
		case 4: r = t_rseg(kro, ro, 32); break;
		}
		cr_log_info("case: %s", cases[c].what);
		bad_write(l, r, cases[c].remote_bad == 4 ? ro : tgt, 128,
			  cases[c].local_bad ? DAT_DTO_ERR_LOCAL_PROTECTION
					     : DAT_DTO_ERR_REMOTE_ACCESS);
		unpair();
	}
}

/* A source past the end of the LMR whose key it names, right after a good
 * post from that LMR (a device that remembers the last range it checked
 * must still refuse it), fails as local protection; the target stays
 * untouched. */
Test(shm_dto, source_past_lmr_end)
{
	static char src[256], tgt[64];
	DAT_LMR_CONTEXT ks, kt;
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r;

	memset(src, 's', sizeof(src));
	pair(NULL);
	t_reg(&A, NULL, src, 64, DAT_MEM_PRIV_ALL_FLAG, &ks);
	t_reg(&B, NULL, tgt, sizeof(tgt), DAT_MEM_PRIV_ALL_FLAG, &kt);
	l = t_seg(ks, src, 8);
	r = t_rseg(kt, tgt, 8);
	cr_assert_eq(dat_ep_post_rdma_write(ea, 1, &l, t_cookie(1), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, 1, DAT_DTO_SUCCESS, DAT_DTO_RDMA_WRITE, 8);
	memset(tgt, 0, sizeof(tgt));
	l = t_seg(ks, src + 200, 8);
	r = t_rseg(kt, tgt + 16, 8);
	bad_write(l, r, tgt, sizeof(tgt), DAT_DTO_ERR_LOCAL_PROTECTION);
	unpair();
}

Test(shm_dto, protection_recv_and_send)
{
	static char src[64], dst[64];
	DAT_LMR_CONTEXT ks, kd, kro;
	DAT_LMR_TRIPLET s, r;

	pair(NULL);
	t_reg(&A, NULL, src, 64, DAT_MEM_PRIV_ALL_FLAG, &ks);
	t_reg(&B, NULL, dst, 32, DAT_MEM_PRIV_ALL_FLAG, &kd);
	t_reg(&B, NULL, dst + 32, 32, DAT_MEM_PRIV_LOCAL_READ_FLAG, &kro);
	/* A receive into memory without LOCAL_WRITE fails at once. */
	r = t_seg(kro, dst + 32, 32);
	cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie(1), 0), DAT_SUCCESS);
	t_expect(B.rcv, eb, 1, DAT_DTO_ERR_LOCAL_PROTECTION, DAT_DTO_RECEIVE, 0);
	r = t_seg(kd, dst, 32);
	cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie(2), 0), DAT_SUCCESS);
	t_expect(B.rcv, eb, 2, DAT_DTO_ERR_FLUSHED, DAT_DTO_RECEIVE, 0);
	/* An RDMA read into memory without LOCAL_WRITE (a fresh pair). */
	{
		DAT_EP_HANDLE a2 = t_ep(&A, NULL), b2 = t_ep(&B, NULL);
		DAT_LMR_CONTEXT kar;
		DAT_LMR_TRIPLET l;
		DAT_RMR_TRIPLET rr = t_rseg(kd, dst, 8);

		t_connect(a2, b2);
		t_reg(&A, NULL, src + 48, 16, DAT_MEM_PRIV_LOCAL_READ_FLAG, &kar);
		l = t_seg(kar, src + 48, 8);
		cr_assert_eq(dat_ep_post_rdma_read(a2, 1, &l, t_cookie(4), &rr, 0), DAT_SUCCESS);
		t_expect(A.req, a2, 4, DAT_DTO_ERR_LOCAL_PROTECTION, DAT_DTO_RDMA_READ, 0);
	}
	/* A send from an unregistered range. */
	s = t_seg(ks, src + 32, 64);
	cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie(3), 0), DAT_SUCCESS);
	t_expect(A.req, ea, 3, DAT_DTO_ERR_LOCAL_PROTECTION, DAT_DTO_SEND, 0);
	unpair();
}

Test(shm_dto, receive_too_small)
{
	static char src[64], dst[64];
	DAT_LMR_CONTEXT ks, kd;
	DAT_LMR_TRIPLET s, r;

	pair(NULL);
	t_reg(&A, NULL, src, 64, DAT_MEM_PRIV_ALL_FLAG, &ks);
	t_reg(&B, NULL, dst, 64, DAT_MEM_PRIV_ALL_FLAG, &kd);
	r = t_seg(kd, dst, 16);
	s = t_seg(ks, src, 64);
	memset(src, 1, sizeof(src));
	cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie(1), 0), DAT_SUCCESS);
	cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie(2), 0), DAT_SUCCESS);
	t_expect(A.req, ea, 2, DAT_DTO_ERR_REMOTE_RESPONDER, DAT_DTO_SEND, 0);
	t_expect(B.rcv, eb, 1, DAT_DTO_ERR_LOCAL_LENGTH, DAT_DTO_RECEIVE, 0);
	cr_assert_eq(dst[0], 0);
	unpair();
}

Test(shm_dto, flush)
{
	static char buf[64];
	DAT_LMR_CONTEXT ka, kb;
	DAT_LMR_TRIPLET s, rv;
	DAT_RMR_TRIPLET r;

	pair(NULL);
	t_reg(&A, NULL, buf, 64, DAT_MEM_PRIV_ALL_FLAG, &ka);
	t_reg(&B, NULL, buf, 64, DAT_MEM_PRIV_ALL_FLAG, &kb);
	s = t_seg(ka, buf, 8);
	rv = t_seg(kb, buf, 8);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(dat_ep_post_recv(eb, 1, &rv, t_cookie((uint64_t)i), 0), DAT_SUCCESS);
	t_flush(eb);
	for (int i = 0; i < 5; i++)
		t_expect(B.rcv, eb, (uint64_t)i, DAT_DTO_ERR_FLUSHED, DAT_DTO_RECEIVE, 0);
	t_none(B.rcv);
	/* Receives posted after the flush complete flushed too. */
	cr_assert_eq(dat_ep_post_recv(eb, 1, &rv, t_cookie(9), 0), DAT_SUCCESS);
	t_expect(B.rcv, eb, 9, DAT_DTO_ERR_FLUSHED, DAT_DTO_RECEIVE, 0);
	/* The peer's sends see the flushed target. */
	cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie(10), 0), DAT_SUCCESS);
	t_expect(A.req, ea, 10, DAT_DTO_ERR_FLUSHED, DAT_DTO_SEND, 0);
	/* Later DTOs of a flushed EP complete flushed. */
	t_flush(ea);
	r = t_rseg(kb, buf, 8);
	atomic_store(&t_zep(ea)->state, DAT_EP_STATE_CONNECTED);
	cr_assert_eq(dat_ep_post_rdma_write(ea, 1, &s, t_cookie(11), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, 11, DAT_DTO_ERR_FLUSHED, DAT_DTO_RDMA_WRITE, 0);
	unpair();
}

/* Sends that completed into the eager ring (no receive posted) before the
 * target's QP went to error (its peer disconnected: the CM flushes it)
 * fill the target's receives, those posted before the flush (not yet
 * matched: nothing polled) and those posted after it, in order; then the
 * receives no message waits for flush, and later ones flush at once. */
Test(shm_dto, eager_messages_outlive_the_flush)
{
	enum { N = 12, SZ = 512, EARLY = 5, EXTRA = 2 };
	static char src[N][SZ], dst[N + EXTRA + 1][SZ];
	DAT_LMR_CONTEXT ka, kb;
	DAT_LMR_TRIPLET r;

	pair(NULL);
	t_reg(&A, NULL, src, sizeof(src), DAT_MEM_PRIV_ALL_FLAG, &ka);
	t_reg(&B, NULL, dst, sizeof(dst), DAT_MEM_PRIV_ALL_FLAG, &kb);
	for (int i = 0; i < N; i++) {
		DAT_LMR_TRIPLET s = t_seg(ka, src[i], (size_t)(i * 40 + 1));

		memset(src[i], 'a' + i, SZ);
		cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie((uint64_t)i), 0), DAT_SUCCESS);
	}
	for (int i = 0; i < N; i++)
		t_expect(A.req, ea, (uint64_t)i, DAT_DTO_SUCCESS, DAT_DTO_SEND,
			 (DAT_SEG_LENGTH)(i * 40 + 1));
	for (int i = 0; i < EARLY; i++) {
		r = t_seg(kb, dst[i], SZ);
		cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie(100 + (uint64_t)i), 0),
			     DAT_SUCCESS);
	}
	t_flush(eb);
	for (int i = EARLY; i < N + EXTRA; i++) {
		r = t_seg(kb, dst[i], SZ);
		cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie(100 + (uint64_t)i), 0),
			     DAT_SUCCESS);
	}
	for (int i = 0; i < N; i++) {
		t_expect(B.rcv, eb, 100 + (uint64_t)i, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE,
			 (DAT_SEG_LENGTH)(i * 40 + 1));
		cr_assert_eq(memcmp(dst[i], src[i], (size_t)(i * 40 + 1)), 0, "message %d", i);
		cr_assert_eq(dst[i][i * 40 + 1], 0);
	}
	for (int i = N; i < N + EXTRA; i++)
		t_expect(B.rcv, eb, 100 + (uint64_t)i, DAT_DTO_ERR_FLUSHED, DAT_DTO_RECEIVE, 0);
	t_none(B.rcv);
	r = t_seg(kb, dst[N + EXTRA], SZ);
	cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie(999), 0), DAT_SUCCESS);
	t_expect(B.rcv, eb, 999, DAT_DTO_ERR_FLUSHED, DAT_DTO_RECEIVE, 0);
	t_none(B.rcv);
	/* The sender's later sends see the flushed target. */
	{
		DAT_LMR_TRIPLET s = t_seg(ka, src[0], 8);

		cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie(50), 0), DAT_SUCCESS);
		t_expect(A.req, ea, 50, DAT_DTO_ERR_FLUSHED, DAT_DTO_SEND, 0);
	}
	unpair();
}

/* Receives posted after the flush while messages still wait for them, and
 * then the EP freed: the unmatched messages go with it, every posted
 * receive completes (flushed), nothing hangs. */
Test(shm_dto, eager_messages_waiting_at_ep_free)
{
	static char buf[64];
	DAT_LMR_CONTEXT ka, kb;
	DAT_LMR_TRIPLET s, r;

	pair(NULL);
	t_reg(&A, NULL, buf, sizeof(buf), DAT_MEM_PRIV_ALL_FLAG, &ka);
	t_reg(&B, NULL, buf, sizeof(buf), DAT_MEM_PRIV_ALL_FLAG, &kb);
	s = t_seg(ka, buf, 8);
	r = t_seg(kb, buf + 32, 8);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie((uint64_t)i), 0), DAT_SUCCESS);
	for (int i = 0; i < 3; i++)
		t_expect(A.req, ea, (uint64_t)i, DAT_DTO_SUCCESS, DAT_DTO_SEND, 8);
	t_flush(eb);
	/* Posted, not yet matched (nothing polled). */
	cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie(7), 0), DAT_SUCCESS);
	cr_assert_eq(dat_ep_free(eb), DAT_SUCCESS);
	t_expect(B.rcv, eb, 7, DAT_DTO_ERR_FLUSHED, DAT_DTO_RECEIVE, 0);
	t_none(B.rcv);
	unpair();
}

/* A receive its peer filled, whose EP is freed before the consumer polls:
 * the completion entry names a QP that left, and goes quietly (no zdapl:
 * line, which is kept for forged entries). */
Test(shm_dto, entry_of_a_freed_ep_goes_quietly)
{
	static char buf[64];
	DAT_LMR_CONTEXT ka, kb;
	DAT_LMR_TRIPLET s, r;
	struct zd_shm_cq *cq;

	pair(NULL);
	cq = ((struct zd_evd *)B.rcv)->cq_priv;
	t_reg(&A, NULL, buf, sizeof(buf), DAT_MEM_PRIV_ALL_FLAG, &ka);
	t_reg(&B, NULL, buf, sizeof(buf), DAT_MEM_PRIV_ALL_FLAG, &kb);
	s = t_seg(ka, buf, 8);
	r = t_seg(kb, buf + 32, 8);
	cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie(7), 0), DAT_SUCCESS);
	cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie(1), 0), DAT_SUCCESS);
	t_expect(A.req, ea, 1, DAT_DTO_SUCCESS, DAT_DTO_SEND, 8);
	cr_assert_eq(dat_ep_free(eb), DAT_SUCCESS);
	/* Its receive ends with the EP (the free flushes it). */
	t_expect(B.rcv, eb, 7, DAT_DTO_ERR_FLUSHED, DAT_DTO_RECEIVE, 0);
	t_none(B.rcv);
	cr_assert_eq(cq->dropped, 0, "the entry of a freed EP was refused as a forgery");
	unpair();
}

Test(shm_dto, flush_queued_sends_and_ep_free)
{
	enum { BIG = 32 * 1024 };
	char *buf = malloc(BIG);
	DAT_LMR_CONTEXT k, kb;
	DAT_LMR_TRIPLET s;

	pair(NULL);
	t_reg(&A, NULL, buf, BIG, DAT_MEM_PRIV_ALL_FLAG, &k);
	t_reg(&B, NULL, buf, BIG, DAT_MEM_PRIV_ALL_FLAG, &kb);
	s = t_seg(k, buf, BIG);
	/* Too big for the eager ring, no receive: both wait (RNR). */
	cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie(1), 0), DAT_SUCCESS);
	cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie(2), 0), DAT_SUCCESS);
	t_none(A.req);
	t_flush(ea);
	t_expect(A.req, ea, 1, DAT_DTO_ERR_FLUSHED, DAT_DTO_SEND, 0);
	t_expect(A.req, ea, 2, DAT_DTO_ERR_FLUSHED, DAT_DTO_SEND, 0);
	/* Receives outstanding when their EP is freed complete flushed. */
	s = t_seg(kb, buf, 16);
	cr_assert_eq(dat_ep_post_recv(eb, 1, &s, t_cookie(3), 0), DAT_SUCCESS);
	cr_assert_eq(dat_ep_post_recv(eb, 1, &s, t_cookie(4), 0), DAT_SUCCESS);
	cr_assert_eq(dat_ep_free(eb), DAT_SUCCESS);
	t_expect(B.rcv, eb, 3, DAT_DTO_ERR_FLUSHED, DAT_DTO_RECEIVE, 0);
	t_expect(B.rcv, eb, 4, DAT_DTO_ERR_FLUSHED, DAT_DTO_RECEIVE, 0);
	unpair();
	free(buf);
}

Test(shm_dto, bad_handles_and_parameters)
{
	static char buf[64];
	DAT_LMR_CONTEXT k;
	DAT_LMR_TRIPLET s;
	DAT_RMR_TRIPLET r;
	DAT_EP_HANDLE un;
	DAT_COUNT a, b;
	void *bogus[2];

	t_open(&A);
	t_open(&B);
	/* libdat2 reads a handle's first word: live handles of other types. */
	bogus[0] = A.pz;
	bogus[1] = A.req;
	t_reg(&A, NULL, buf, 64, DAT_MEM_PRIV_ALL_FLAG, &k);
	s = t_seg(k, buf, 8);
	r = t_rseg(k, buf, 8);
	for (int i = 0; i < 2; i++) {
		DAT_EP_HANDLE h = bogus[i];

		cr_assert_eq(dat_ep_post_send(h, 1, &s, t_cookie(0), 0),
			     DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
		cr_assert_eq(T_TYPE(dat_ep_post_recv(h, 1, &s, t_cookie(0), 0)), DAT_INVALID_HANDLE);
		cr_assert_eq(T_TYPE(dat_ep_post_rdma_write(h, 1, &s, t_cookie(0), &r, 0)),
			     DAT_INVALID_HANDLE);
		cr_assert_eq(T_TYPE(dat_ep_post_rdma_read(h, 1, &s, t_cookie(0), &r, 0)),
			     DAT_INVALID_HANDLE);
		cr_assert_eq(T_TYPE(dat_ep_recv_query(h, &a, &b)), DAT_INVALID_HANDLE);
		cr_assert_eq(T_TYPE(dat_ep_set_watermark(h, 1, 1)), DAT_INVALID_HANDLE);
		/* libdat2 has no wrappers for these two: the provider's. */
		{
			const DAT_PROVIDER *prov = *(DAT_PROVIDER **)A.pz;

			cr_assert_eq(T_TYPE(prov->ep_post_send_with_invalidate_func(
					     h, 1, &s, t_cookie(0), 0, DAT_FALSE, 0)),
				     DAT_INVALID_HANDLE);
			cr_assert_eq(T_TYPE(prov->ep_post_rdma_read_to_rmr_func(
					     h, &r, t_cookie(0), &r, 0)),
				     DAT_INVALID_HANDLE);
		}
	}
	/* A freed EP is a bad handle too. */
	un = t_ep(&A, NULL);
	cr_assert_eq(dat_ep_free(un), DAT_SUCCESS);
	cr_assert_eq(T_TYPE(dat_ep_post_send(un, 1, &s, t_cookie(0), 0)), DAT_INVALID_HANDLE);

	/* Unconnected EP: no requests, receives fine. */
	un = t_ep(&A, NULL);
	cr_assert_eq(dat_ep_post_send(un, 1, &s, t_cookie(0), 0),
		     DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED));
	cr_assert_eq(dat_ep_post_rdma_write(un, 1, &s, t_cookie(0), &r, 0),
		     DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED));
	cr_assert_eq(dat_ep_post_rdma_read(un, 1, &s, t_cookie(0), &r, 0),
		     DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED));
	cr_assert_eq(dat_ep_post_recv(un, 1, &s, t_cookie(5), 0), DAT_SUCCESS);
	cr_assert_eq(T_TYPE(dat_ep_post_recv(un, -1, &s, t_cookie(0), 0)), DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_ep_post_recv(un, 1, NULL, t_cookie(0), 0)), DAT_INVALID_PARAMETER);
	/* An EP without a PZ has no QP. */
	{
		DAT_EP_HANDLE nopz;
		cr_assert_eq(dat_ep_create(A.ia, DAT_HANDLE_NULL, A.rcv, A.req, DAT_HANDLE_NULL,
					   NULL, &nopz), DAT_SUCCESS);
		cr_assert_eq(T_TYPE(dat_ep_post_recv(nopz, 1, &s, t_cookie(0), 0)),
			     DAT_INVALID_STATE);
	}
	/* Connected: parameter checks. */
	ea = t_ep(&A, NULL);
	eb = t_ep(&B, NULL);
	t_connect(ea, eb);
	cr_assert_eq(T_TYPE(dat_ep_post_send(ea, -1, &s, t_cookie(0), 0)), DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_ep_post_send(ea, 1, NULL, t_cookie(0), 0)), DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_ep_post_rdma_write(ea, 1, &s, t_cookie(0), NULL, 0)),
		     DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_ep_post_rdma_read(ea, 1, &s, t_cookie(0), NULL, 0)),
		     DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_ep_post_rdma_read(ea, 17, &s, t_cookie(0), &r, 0)),
		     DAT_LENGTH_ERROR);
	cr_assert_eq(T_TYPE((*(DAT_PROVIDER **)ea)->ep_post_send_with_invalidate_func(
			     ea, 1, &s, t_cookie(0), 0, DAT_FALSE, 0)),
		     DAT_NOT_IMPLEMENTED);
	t_none(A.req);
	t_close(&A);
	t_close(&B);
}
