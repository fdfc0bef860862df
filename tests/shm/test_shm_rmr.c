/* shm device: memory windows (dat_rmr_bind).  B binds an RMR over part of
 * a registered buffer on its EP; A reaches the window through the RMR's
 * rmr_context with RDMA write/read.  Access outside the window, without
 * the right, or after unbind fails DAT_DTO_ERR_REMOTE_ACCESS and leaves the
 * target untouched; the bind completes on the EP's request EVD; and every
 * argument check of dat_rmr_bind (one process, two IAs). */
#include "zd_shm_test.h"

TestSuite(shm_rmr, .init = t_need_conf, .timeout = 60);

enum { TLEN = 256, WOFF = 64, WLEN = 64 };

static struct side A, B;
static DAT_EP_HANDLE ea, eb;
static char *src, *tgt;
static DAT_LMR_HANDLE lsrc, ltgt;
static DAT_LMR_CONTEXT ksrc, ktgt;

static void pair(void)
{
	t_open(&A);
	t_open(&B);
	ea = t_ep(&A, NULL);
	eb = t_ep(&B, NULL);
	t_connect(ea, eb);
	src = calloc(1, TLEN);
	tgt = calloc(1, TLEN);
	for (int i = 0; i < TLEN; i++)
		src[i] = (char)(i + 1);
	lsrc = t_reg(&A, NULL, src, TLEN, DAT_MEM_PRIV_ALL_FLAG, &ksrc);
	ltgt = t_reg(&B, NULL, tgt, TLEN, DAT_MEM_PRIV_ALL_FLAG, &ktgt);
}

static void unpair(void)
{
	t_close(&A);
	t_close(&B);
	free(src);
	free(tgt);
}

static DAT_LMR_TRIPLET window(void)
{
	return t_seg(ktgt, tgt + WOFF, WLEN);
}

static DAT_RMR_COOKIE rcookie(uint64_t v)
{
	DAT_RMR_COOKIE c = { .as_64 = v };
	return c;
}

/* Next event of @evd must be the bind completion of @rmr with @cookie. */
static void expect_bind(DAT_EVD_HANDLE evd, DAT_RMR_HANDLE rmr, uint64_t cookie)
{
	DAT_EVENT ev;

	for (int i = 0; i < 2000000; i++) {
		DAT_RETURN r = dat_evd_dequeue(evd, &ev);

		if (r == DAT_SUCCESS) {
			cr_assert_eq(ev.event_number, DAT_RMR_BIND_COMPLETION_EVENT, "event 0x%x",
				     ev.event_number);
			cr_assert_eq(ev.evd_handle, evd);
			cr_assert_eq(ev.event_data.rmr_completion_event_data.rmr_handle, rmr);
			cr_assert_eq(ev.event_data.rmr_completion_event_data.user_cookie.as_64,
				     cookie);
			cr_assert_eq(ev.event_data.rmr_completion_event_data.status,
				     DAT_RMR_BIND_SUCCESS);
			return;
		}
		cr_assert_eq(T_TYPE(r), DAT_QUEUE_EMPTY);
		if (i > 1000)
			usleep(1);
	}
	cr_assert_fail("no bind completion");
}

/* Binds a fresh RMR of B over the window with @priv; returns its context. */
static DAT_RMR_HANDLE bind_window(DAT_MEM_PRIV_FLAGS priv, DAT_RMR_CONTEXT *ctx)
{
	DAT_LMR_TRIPLET w = window();
	DAT_RMR_HANDLE rmr;

	cr_assert_eq(dat_rmr_create(B.pz, &rmr), DAT_SUCCESS);
	*ctx = 0;
	cr_assert_eq(dat_rmr_bind(rmr, ltgt, &w, priv, DAT_VA_TYPE_VA, eb, rcookie(42), 0, ctx),
		     DAT_SUCCESS);
	cr_assert_neq(*ctx, 0);
	cr_assert_neq(*ctx, ktgt);
	expect_bind(B.req, rmr, 42);
	return rmr;
}

static void write_at(uint64_t cookie, DAT_RMR_CONTEXT ctx, size_t off, size_t len,
		     DAT_DTO_COMPLETION_STATUS want)
{
	DAT_LMR_TRIPLET l = t_seg(ksrc, src, len);
	DAT_RMR_TRIPLET r = t_rseg(ctx, tgt + off, len);

	cr_assert_eq(dat_ep_post_rdma_write(ea, 1, &l, t_cookie(cookie), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, cookie, want, DAT_DTO_RDMA_WRITE, (DAT_SEG_LENGTH)len);
}

static void read_at(uint64_t cookie, char *dst, DAT_RMR_CONTEXT ctx, size_t off, size_t len,
		    DAT_DTO_COMPLETION_STATUS want)
{
	DAT_LMR_TRIPLET l = t_seg(ksrc, dst, len);
	DAT_RMR_TRIPLET r = t_rseg(ctx, tgt + off, len);

	cr_assert_eq(dat_ep_post_rdma_read(ea, 1, &l, t_cookie(cookie), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, cookie, want, DAT_DTO_RDMA_READ, (DAT_SEG_LENGTH)len);
}

static void assert_zero(size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		cr_assert_eq(tgt[i], 0, "target byte %zu written", i);
}

Test(shm_rmr, bind_write_read_in_window)
{
	DAT_RMR_CONTEXT ctx;
	DAT_RMR_HANDLE rmr;
	DAT_RMR_PARAM p;

	pair();
	rmr = bind_window(DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG, &ctx);
	cr_assert_eq(dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, &p), DAT_SUCCESS);
	cr_assert_eq(p.rmr_context, ctx);
	cr_assert_eq(p.pz_handle, B.pz);
	cr_assert_eq(p.lmr_triplet.virtual_address, (DAT_VADDR)(uintptr_t)(tgt + WOFF));
	cr_assert_eq(p.lmr_triplet.segment_length, WLEN);
	cr_assert_eq(p.mem_priv, DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG);
	/* The whole window, then a piece inside it. */
	write_at(1, ctx, WOFF, WLEN, DAT_DTO_SUCCESS);
	cr_assert_eq(memcmp(tgt + WOFF, src, WLEN), 0);
	assert_zero(0, WOFF);
	assert_zero(WOFF + WLEN, TLEN);
	src[0] = 'Z';
	write_at(2, ctx, WOFF + 10, 5, DAT_DTO_SUCCESS);
	cr_assert_eq(tgt[WOFF + 10], 'Z');
	/* Read the window back through the RMR. */
	read_at(3, src + 128, ctx, WOFF, WLEN, DAT_DTO_SUCCESS);
	cr_assert_eq(memcmp(src + 128, tgt + WOFF, WLEN), 0);
	/* The LMR's own rkey still reaches the whole region. */
	write_at(4, ktgt, 0, 8, DAT_DTO_SUCCESS);
	cr_assert_eq(memcmp(tgt, src, 8), 0);
	t_none(A.req);
	t_none(B.req);
	cr_assert_eq(dat_rmr_free(rmr), DAT_SUCCESS);
	unpair();
}

/* Each bad access on a fresh pair (a failed DTO puts the QP in error). */
Test(shm_rmr, outside_window_or_right_fails)
{
	static const struct {
		const char *what;
		DAT_MEM_PRIV_FLAGS priv;
		bool write;
		size_t off, len;
	} cases[] = {
		{ "write before the window", DAT_MEM_PRIV_REMOTE_WRITE_FLAG, true, WOFF - 1, 8 },
		{ "write past the window", DAT_MEM_PRIV_REMOTE_WRITE_FLAG, true, WOFF + WLEN - 4, 8 },
		{ "write wholly outside", DAT_MEM_PRIV_ALL_FLAG & ~DAT_MEM_PRIV_LOCAL_READ_FLAG,
		  true, 0, 16 },
		{ "write larger than the window", DAT_MEM_PRIV_REMOTE_WRITE_FLAG, true, WOFF,
		  WLEN + 1 },
		{ "write without REMOTE_WRITE", DAT_MEM_PRIV_REMOTE_READ_FLAG, true, WOFF, 8 },
		{ "read without REMOTE_READ", DAT_MEM_PRIV_REMOTE_WRITE_FLAG, false, WOFF, 8 },
		{ "read past the window", DAT_MEM_PRIV_REMOTE_READ_FLAG, false, WOFF + WLEN, 1 },
		{ "local-only window", DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG,
		  true, WOFF, 8 },
	};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		DAT_RMR_CONTEXT ctx;
		DAT_RMR_HANDLE rmr;

		pair();
		rmr = bind_window(cases[c].priv, &ctx);
		if (cases[c].write) {
			write_at(1, ctx, cases[c].off, cases[c].len, DAT_DTO_ERR_REMOTE_ACCESS);
			assert_zero(0, TLEN);
		} else {
			memset(tgt, 'T', TLEN);
			memset(src + 128, 0, 64);
			read_at(1, src + 128, ctx, cases[c].off, cases[c].len,
				DAT_DTO_ERR_REMOTE_ACCESS);
			for (int i = 0; i < 64; i++)
				cr_assert_eq(src[128 + i], 0, "%s: local byte %d read",
					     cases[c].what, i);
		}
		/* The QP is in error now: the next DTO is flushed. */
		write_at(2, ctx, WOFF, 1, DAT_DTO_ERR_FLUSHED);
		(void)rmr;
		unpair();
	}
}

Test(shm_rmr, unbind_rebind_and_free)
{
	DAT_RMR_CONTEXT ctx, ctx2, ctx3 = 0;
	DAT_LMR_TRIPLET w;
	DAT_RMR_HANDLE rmr;

	pair();
	w = window();
	rmr = bind_window(DAT_MEM_PRIV_REMOTE_WRITE_FLAG, &ctx);
	write_at(1, ctx, WOFF, 4, DAT_DTO_SUCCESS);
	/* The LMR is held while bound. */
	cr_assert_eq(T_TYPE(dat_lmr_free(ltgt)), DAT_INVALID_STATE);
	/* Rebind over the same window: a fresh context, the old one dies. */
	cr_assert_eq(dat_rmr_bind(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA,
				  eb, rcookie(5), 0, &ctx2), DAT_SUCCESS);
	expect_bind(B.req, rmr, 5);
	cr_assert_neq(ctx2, ctx);
	write_at(2, ctx2, WOFF + 4, 4, DAT_DTO_SUCCESS);
	cr_assert_eq(T_TYPE(dat_lmr_free(ltgt)), DAT_INVALID_STATE);
	/* Unbind with lmr_handle NULL: completion, context 0, LMR free again. */
	cr_assert_eq(dat_rmr_bind(rmr, DAT_HANDLE_NULL, NULL, 0, DAT_VA_TYPE_VA, eb, rcookie(6),
				  0, &ctx3), DAT_SUCCESS);
	expect_bind(B.req, rmr, 6);
	{
		DAT_RMR_PARAM p;

		cr_assert_eq(dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, &p), DAT_SUCCESS);
		cr_assert_eq(p.rmr_context, 0);
		cr_assert_eq(p.lmr_triplet.segment_length, 0);
	}
	/* Unbinding an unbound RMR is fine; suppressed: no event. */
	cr_assert_eq(dat_rmr_bind(rmr, DAT_HANDLE_NULL, NULL, 0, DAT_VA_TYPE_VA, eb, rcookie(7),
				  DAT_COMPLETION_SUPPRESS_FLAG, NULL), DAT_SUCCESS);
	t_none(B.req);
	memset(tgt, 0, TLEN);
	write_at(3, ctx2, WOFF, 4, DAT_DTO_ERR_REMOTE_ACCESS);
	assert_zero(0, TLEN);
	unpair();

	/* Old context after a rebind; unbind by a zero-length triplet. */
	pair();
	rmr = bind_window(DAT_MEM_PRIV_REMOTE_WRITE_FLAG, &ctx);
	w = window();
	cr_assert_eq(dat_rmr_bind(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA,
				  eb, rcookie(8), DAT_COMPLETION_SUPPRESS_FLAG, &ctx2), DAT_SUCCESS);
	t_none(B.req);
	write_at(1, ctx, WOFF, 4, DAT_DTO_ERR_REMOTE_ACCESS);
	assert_zero(0, TLEN);
	unpair();

	pair();
	rmr = bind_window(DAT_MEM_PRIV_REMOTE_WRITE_FLAG, &ctx);
	w = window();
	w.segment_length = 0;
	cr_assert_eq(dat_rmr_bind(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA,
				  eb, rcookie(9), 0, &ctx2), DAT_SUCCESS);
	expect_bind(B.req, rmr, 9);
	cr_assert_eq(ctx2, 0);
	write_at(1, ctx, WOFF, 4, DAT_DTO_ERR_REMOTE_ACCESS);
	assert_zero(0, TLEN);
	unpair();

	/* dat_rmr_free of a bound RMR: its context dies, the LMR is free. */
	pair();
	rmr = bind_window(DAT_MEM_PRIV_REMOTE_WRITE_FLAG, &ctx);
	cr_assert_eq(dat_rmr_free(rmr), DAT_SUCCESS);
	cr_assert_eq(dat_lmr_free(ltgt), DAT_SUCCESS);
	ltgt = t_reg(&B, NULL, tgt, TLEN, DAT_MEM_PRIV_ALL_FLAG, &ktgt);
	write_at(1, ctx, WOFF, 4, DAT_DTO_ERR_REMOTE_ACCESS);
	assert_zero(0, TLEN);
	unpair();
}

/* The bind completes behind the EP's earlier DTOs. */
Test(shm_rmr, bind_completion_order_and_flags)
{
	DAT_LMR_TRIPLET w, l;
	DAT_RMR_TRIPLET r;
	DAT_RMR_CONTEXT ctx;
	DAT_RMR_HANDLE rmr;
	DAT_EP_HANDLE ub, ua;

	pair();
	w = window();
	cr_assert_eq(dat_rmr_create(B.pz, &rmr), DAT_SUCCESS);
	/* B writes into A first, then binds: A's completion comes first. */
	l = t_seg(ktgt, tgt, 8);
	r = t_rseg(ksrc, src + 200, 8);
	cr_assert_eq(dat_ep_post_rdma_write(eb, 1, &l, t_cookie(77), &r, 0), DAT_SUCCESS);
	cr_assert_eq(dat_rmr_bind(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA,
				  eb, rcookie(78), DAT_COMPLETION_BARRIER_FENCE_FLAG, &ctx),
		     DAT_SUCCESS);
	t_expect(B.req, eb, 77, DAT_DTO_SUCCESS, DAT_DTO_RDMA_WRITE, 8);
	expect_bind(B.req, rmr, 78);
	t_none(B.req);
	/* Unsignalled without the EP attribute: signalled anyway. */
	cr_assert_eq(dat_rmr_bind(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA,
				  eb, rcookie(79), DAT_COMPLETION_UNSIGNALLED_FLAG, &ctx),
		     DAT_SUCCESS);
	expect_bind(B.req, rmr, 79);
	/* With it: none. */
	ub = t_ep_unsignalled(&B, eb);
	ua = t_ep(&A, NULL);
	t_connect(ua, ub);
	cr_assert_eq(dat_rmr_bind(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_VA,
				  ub, rcookie(80), DAT_COMPLETION_UNSIGNALLED_FLAG, &ctx),
		     DAT_SUCCESS);
	t_none(B.req);
	/* The window bound through ub is reached through any EP of the PZ. */
	write_at(1, ctx, WOFF, 8, DAT_DTO_SUCCESS);
	cr_assert_eq(memcmp(tgt + WOFF, src, 8), 0);
	unpair();
}

Test(shm_rmr, argument_checks)
{
	DAT_LMR_TRIPLET w, bad;
	DAT_RMR_CONTEXT ctx = 0xabc;
	DAT_RMR_HANDLE rmr, rmr_a, rmr_pz2;
	DAT_LMR_HANDLE lro, lpz2, la;
	DAT_LMR_CONTEXT kro, kpz2, ka;
	DAT_PZ_HANDLE pz2;
	DAT_EP_HANDLE unconn, ep_pz2;
	static char ro[64], other[64], abuf[64];
	DAT_RETURN ret;

#define BIND(rm, lm, tr, pv, ep, fl) \
	dat_rmr_bind((rm), (lm), (tr), (pv), DAT_VA_TYPE_VA, (ep), rcookie(1), (fl), &ctx)
#define CHK(call, type, sub)                                                              \
	do {                                                                              \
		ret = (call);                                                             \
		cr_assert_eq(T_TYPE(ret), (type), "%s: 0x%x", #call, ret);                \
		if ((sub) >= 0)                                                           \
			cr_assert_eq(T_SUB(ret), (DAT_RETURN_SUBTYPE)(sub), "%s: 0x%x",   \
				     #call, ret);                                         \
		cr_assert_eq(ctx, 0xabc);                                                 \
	} while (0)

	pair();
	w = window();
	cr_assert_eq(dat_rmr_create(B.pz, &rmr), DAT_SUCCESS);
	cr_assert_eq(dat_pz_create(B.ia, &pz2), DAT_SUCCESS);
	cr_assert_eq(dat_rmr_create(pz2, &rmr_pz2), DAT_SUCCESS);
	cr_assert_eq(dat_rmr_create(A.pz, &rmr_a), DAT_SUCCESS);
	lro = t_reg(&B, NULL, ro, sizeof(ro), DAT_MEM_PRIV_REMOTE_READ_FLAG, &kro);
	lpz2 = t_reg(&B, pz2, other, sizeof(other), DAT_MEM_PRIV_ALL_FLAG, &kpz2);
	la = t_reg(&A, NULL, abuf, sizeof(abuf), DAT_MEM_PRIV_ALL_FLAG, &ka);
	unconn = t_ep(&B, NULL);
	{
		DAT_EP_HANDLE peer;

		cr_assert_eq(dat_ep_create(B.ia, pz2, B.rcv, B.req, DAT_HANDLE_NULL, NULL,
					   &ep_pz2), DAT_SUCCESS);
		peer = t_ep(&A, NULL);
		t_connect(ep_pz2, peer);
	}

	/* Handles of the wrong type. */
	CHK(BIND(ltgt, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0), DAT_INVALID_HANDLE,
	    DAT_INVALID_HANDLE_RMR);
	CHK(BIND(rmr, eb, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0), DAT_INVALID_HANDLE,
	    DAT_INVALID_HANDLE_LMR);
	CHK(BIND(rmr, rmr, NULL, 0, eb, 0), DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
	CHK(BIND(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, B.pz, 0), DAT_INVALID_HANDLE,
	    DAT_INVALID_HANDLE_EP);
	/* Objects of another IA. */
	{
		DAT_LMR_TRIPLET wa = t_seg(ka, abuf, 16);

		CHK(BIND(rmr, la, &wa, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0),
		    DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
		CHK(BIND(rmr_a, la, &wa, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0),
		    DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	}
	CHK(BIND(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, ea, 0), DAT_INVALID_HANDLE,
	    DAT_INVALID_HANDLE_EP);
	/* PZ mismatch: LMR vs RMR, EP vs RMR (also on unbind). */
	{
		DAT_LMR_TRIPLET w2 = t_seg(kpz2, other, 16);

		CHK(BIND(rmr, lpz2, &w2, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0),
		    DAT_PROTECTION_VIOLATION, -1);
		CHK(BIND(rmr_pz2, lpz2, &w2, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0),
		    DAT_PROTECTION_VIOLATION, -1);
		CHK(BIND(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, ep_pz2, 0),
		    DAT_PROTECTION_VIOLATION, -1);
		CHK(BIND(rmr, DAT_HANDLE_NULL, NULL, 0, ep_pz2, 0), DAT_PROTECTION_VIOLATION, -1);
	}
	/* Window outside the LMR, or not naming it. */
	bad = w;
	bad.virtual_address = (DAT_VADDR)(uintptr_t)tgt - 1;
	CHK(BIND(rmr, ltgt, &bad, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0), DAT_INVALID_PARAMETER,
	    DAT_INVALID_ARG3);
	bad = t_seg(ktgt, tgt + TLEN - 8, 9);
	CHK(BIND(rmr, ltgt, &bad, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0), DAT_INVALID_PARAMETER,
	    DAT_INVALID_ARG3);
	bad = t_seg(ktgt, tgt, TLEN + 1);
	CHK(BIND(rmr, ltgt, &bad, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0), DAT_INVALID_PARAMETER,
	    DAT_INVALID_ARG3);
	bad = t_seg(ktgt, (void *)UINTPTR_MAX, 2);
	CHK(BIND(rmr, ltgt, &bad, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0), DAT_INVALID_PARAMETER,
	    DAT_INVALID_ARG3);
	bad = w;
	bad.lmr_context = kro;
	CHK(BIND(rmr, ltgt, &bad, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0), DAT_INVALID_PARAMETER,
	    DAT_INVALID_ARG3);
	CHK(BIND(rmr, ltgt, NULL, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0), DAT_INVALID_PARAMETER,
	    DAT_INVALID_ARG3);
	/* Privileges: unknown bits; rights the LMR lacks. */
	CHK(BIND(rmr, ltgt, &w, 0x100, eb, 0), DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	{
		DAT_LMR_TRIPLET wro = t_seg(kro, ro, 16);

		CHK(BIND(rmr, lro, &wro, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0),
		    DAT_PRIVILEGES_VIOLATION, -1);
		CHK(BIND(rmr, lro, &wro, DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG,
			 eb, 0), DAT_PRIVILEGES_VIOLATION, -1);
	}
	/* Zero-based windows over a VA LMR; unknown VA type. */
	CHK(dat_rmr_bind(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, DAT_VA_TYPE_ZB, eb,
			 rcookie(1), 0, &ctx), DAT_MODEL_NOT_SUPPORTED, -1);
	CHK(dat_rmr_bind(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, (DAT_VA_TYPE)7, eb,
			 rcookie(1), 0, &ctx), DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	/* Completion flags a bind does not take. */
	CHK(BIND(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb,
		 DAT_COMPLETION_SOLICITED_WAIT_FLAG), DAT_INVALID_PARAMETER, DAT_INVALID_ARG8);
	CHK(BIND(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0x1000),
	    DAT_INVALID_PARAMETER, DAT_INVALID_ARG8);
	/* EP not connected (bind and unbind), then disconnected. */
	CHK(BIND(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, unconn, 0), DAT_INVALID_STATE,
	    DAT_INVALID_STATE_EP_UNCONNECTED);
	CHK(BIND(rmr, DAT_HANDLE_NULL, NULL, 0, unconn, 0), DAT_INVALID_STATE, -1);
	/* Nothing was bound, nothing completed, the LMRs are free to go. */
	t_none(B.req);
	{
		DAT_RMR_PARAM p;

		cr_assert_eq(dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, &p), DAT_SUCCESS);
		cr_assert_eq(p.rmr_context, 0);
	}
	/* A valid bind still works after all that; then the EP goes down. */
	cr_assert_eq(BIND(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, eb, 0), DAT_SUCCESS);
	expect_bind(B.req, rmr, 1);
	t_flush(eb);
	ctx = 0xabc;
	CHK(BIND(rmr, DAT_HANDLE_NULL, NULL, 0, eb, 0), DAT_INVALID_STATE,
	    DAT_INVALID_STATE_EP_DISCONNECTED);
	cr_assert_eq(T_TYPE(dat_lmr_free(ltgt)), DAT_INVALID_STATE);
	cr_assert_eq(dat_rmr_free(rmr), DAT_SUCCESS);
	cr_assert_eq(dat_lmr_free(ltgt), DAT_SUCCESS);
	cr_assert_eq(dat_lmr_free(lro), DAT_SUCCESS);
	cr_assert_eq(dat_rmr_free(rmr_pz2), DAT_SUCCESS);
	cr_assert_eq(dat_rmr_free(rmr_a), DAT_SUCCESS);
	cr_assert_eq(T_TYPE(dat_rmr_free(rmr)), DAT_INVALID_HANDLE);
	(void)lpz2;
	t_none(B.req);
	t_close(&A);
	t_close(&B);
	free(src);
	free(tgt);
#undef BIND
#undef CHK
}

/* A device without memory windows (tcp today) checks, then says so: the
 * shm IA of B is given a copy of its ops without rmr_bind/rmr_unbind. */
Test(shm_rmr, device_without_windows)
{
	static struct zd_device_ops nowin;
	struct zd_ia *zb;
	const struct zd_device_ops *saved;
	DAT_RMR_CONTEXT ctx = 0;
	DAT_LMR_TRIPLET w, bad;
	DAT_RMR_HANDLE rmr;
	DAT_EP_HANDLE unconn;

	pair();
	w = window();
	zb = t_zep(eb)->obj.ia;
	saved = zb->dev;
	nowin = *saved;
	nowin.rmr_bind = NULL;
	nowin.rmr_unbind = NULL;
	zb->dev = &nowin;
	cr_assert_eq(dat_rmr_create(B.pz, &rmr), DAT_SUCCESS);
	unconn = t_ep(&B, NULL);
	/* The checks come first. */
	bad = w;
	bad.segment_length = TLEN + 1;
	cr_assert_eq(T_TYPE(dat_rmr_bind(rmr, ltgt, &bad, DAT_MEM_PRIV_REMOTE_READ_FLAG,
					 DAT_VA_TYPE_VA, eb, rcookie(1), 0, &ctx)),
		     DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_rmr_bind(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_READ_FLAG,
					 DAT_VA_TYPE_VA, unconn, rcookie(1), 0, &ctx)),
		     DAT_INVALID_STATE);
	cr_assert_eq(dat_rmr_bind(rmr, ltgt, &w, DAT_MEM_PRIV_REMOTE_READ_FLAG, DAT_VA_TYPE_VA,
				  eb, rcookie(1), 0, &ctx),
		     DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE));
	cr_assert_eq(dat_rmr_bind(rmr, DAT_HANDLE_NULL, NULL, 0, DAT_VA_TYPE_VA, eb, rcookie(1),
				  0, &ctx),
		     DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE));
	cr_assert_eq(ctx, 0);
	t_none(B.req);
	cr_assert_eq(dat_lmr_free(ltgt), DAT_SUCCESS);  /* never held */
	cr_assert_eq(dat_rmr_free(rmr), DAT_SUCCESS);
	zb->dev = saved;
	unpair();
}
