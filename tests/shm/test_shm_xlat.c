/* shm device: the initiator's translation cache (hw/soft/zd_soft_xlat.h).
 * Each test warms the cache with RDMA on one key pair, then changes what
 * the cache holds -- the target LMR freed, the local LMR freed, an RMR
 * unbound or bound elsewhere, a range or a right the cached pair does not
 * give -- and checks that the next RDMA on the same keys completes in
 * error (DAT_DTO_ERR_REMOTE_ACCESS, or DAT_DTO_ERR_LOCAL_PROTECTION for
 * the local key) and leaves the target untouched; across two processes
 * too, where the cache holds our mapping of the peer's pool chunk. */
#include <sys/wait.h>

#include "zd_shm_test.h"

TestSuite(shm_xlat, .init = t_need_conf, .timeout = 60);

enum { TLEN = 256, WARM = 3 };

static struct side A, B;
static DAT_EP_HANDLE ea, eb;
static char *src, *tgt;
static DAT_LMR_HANDLE lsrc, ltgt;
static DAT_LMR_CONTEXT ksrc, ktgt;

static void pair(DAT_MEM_PRIV_FLAGS tgt_priv)
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
	ltgt = t_reg(&B, NULL, tgt, TLEN, tgt_priv, &ktgt);
}

static void unpair(void)
{
	t_close(&A);
	t_close(&B);
	free(src);
	free(tgt);
}

static void write_at(uint64_t cookie, DAT_RMR_CONTEXT rkey, size_t off, size_t len,
		     DAT_DTO_COMPLETION_STATUS want)
{
	DAT_LMR_TRIPLET l = t_seg(ksrc, src, len);
	DAT_RMR_TRIPLET r = t_rseg(rkey, tgt + off, len);

	cr_assert_eq(dat_ep_post_rdma_write(ea, 1, &l, t_cookie(cookie), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, cookie, want, DAT_DTO_RDMA_WRITE,
		 want == DAT_DTO_SUCCESS ? (DAT_SEG_LENGTH)len : 0);
}

/* WARM writes of 8 bytes at @off through @rkey (all land), then the
 * target cleared. */
static void warm(DAT_RMR_CONTEXT rkey, size_t off)
{
	for (int i = 0; i < WARM; i++)
		write_at(100 + i, rkey, off, 8, DAT_DTO_SUCCESS);
	cr_assert_eq(memcmp(tgt + off, src, 8), 0);
	memset(tgt, 0, TLEN);
}

static void assert_untouched(void)
{
	for (size_t i = 0; i < TLEN; i++)
		cr_assert_eq(tgt[i], 0, "target byte %zu written", i);
}

Test(shm_xlat, target_lmr_freed)
{
	pair(DAT_MEM_PRIV_ALL_FLAG);
	warm(ktgt, 16);
	cr_assert_eq(dat_lmr_free(ltgt), DAT_SUCCESS);
	write_at(1, ktgt, 16, 8, DAT_DTO_ERR_REMOTE_ACCESS);
	assert_untouched();
	unpair();
}

Test(shm_xlat, target_lmr_freed_and_registered_again)
{
	DAT_LMR_CONTEXT k2;

	pair(DAT_MEM_PRIV_ALL_FLAG);
	warm(ktgt, 0);
	cr_assert_eq(dat_lmr_free(ltgt), DAT_SUCCESS);
	/* The same range again: a new key; the cached one stays dead. */
	t_reg(&B, NULL, tgt, TLEN, DAT_MEM_PRIV_ALL_FLAG, &k2);
	cr_assert_neq(k2, ktgt);
	write_at(1, ktgt, 0, 8, DAT_DTO_ERR_REMOTE_ACCESS);
	assert_untouched();
	unpair();
}

Test(shm_xlat, local_lmr_freed)
{
	pair(DAT_MEM_PRIV_ALL_FLAG);
	warm(ktgt, 0);
	cr_assert_eq(dat_lmr_free(lsrc), DAT_SUCCESS);
	write_at(1, ktgt, 0, 8, DAT_DTO_ERR_LOCAL_PROTECTION);
	assert_untouched();
	unpair();
}

/* A hit still checks the range: the cached key past its region's end. */
Test(shm_xlat, range_checked_on_hit)
{
	pair(DAT_MEM_PRIV_ALL_FLAG);
	warm(ktgt, 0);
	write_at(1, ktgt, TLEN - 4, 8, DAT_DTO_ERR_REMOTE_ACCESS);
	assert_untouched();
	unpair();
	/* The local side too. */
	pair(DAT_MEM_PRIV_ALL_FLAG);
	warm(ktgt, 0);
	{
		DAT_LMR_TRIPLET l = t_seg(ksrc, src + TLEN - 4, 8);
		DAT_RMR_TRIPLET r = t_rseg(ktgt, tgt, 8);

		cr_assert_eq(dat_ep_post_rdma_write(ea, 1, &l, t_cookie(2), &r, 0), DAT_SUCCESS);
		t_expect(A.req, ea, 2, DAT_DTO_ERR_LOCAL_PROTECTION, DAT_DTO_RDMA_WRITE, 0);
	}
	assert_untouched();
	unpair();
}

/* Rights are per operation: writes cached on a write-only key do not let
 * a read through it. */
Test(shm_xlat, rights_per_operation)
{
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r;

	pair(DAT_MEM_PRIV_LOCAL_WRITE_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG);
	warm(ktgt, 0);
	memset(tgt, 'T', TLEN);
	memset(src, 0, TLEN);
	l = t_seg(ksrc, src, 8);
	r = t_rseg(ktgt, tgt, 8);
	cr_assert_eq(dat_ep_post_rdma_read(ea, 1, &l, t_cookie(1), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ea, 1, DAT_DTO_ERR_REMOTE_ACCESS, DAT_DTO_RDMA_READ, 0);
	for (int i = 0; i < TLEN; i++)
		cr_assert_eq(src[i], 0, "read brought byte %d", i);
	unpair();
}

/* Binds @rmr (a new one if NULL) over tgt [@off, +@len) for remote writes, or
 * unbinds it (@len 0), and waits for the completion. */
static DAT_RMR_HANDLE rmr_window(DAT_RMR_HANDLE rmr, size_t off, size_t len,
				 DAT_RMR_CONTEXT *ctx)
{
	DAT_LMR_TRIPLET w = t_seg(ktgt, tgt + off, len);
	DAT_RMR_COOKIE c = { .as_64 = 7 };
	DAT_EVENT ev;
	DAT_COUNT more;

	if (!rmr)
		cr_assert_eq(dat_rmr_create(B.pz, &rmr), DAT_SUCCESS);
	cr_assert_eq(dat_rmr_bind(rmr, len ? ltgt : DAT_HANDLE_NULL, len ? &w : NULL,
				  len ? DAT_MEM_PRIV_REMOTE_WRITE_FLAG : 0, DAT_VA_TYPE_VA, eb, c,
				  0, ctx), DAT_SUCCESS);
	cr_assert_eq(dat_evd_wait(B.req, 5 * 1000 * 1000, 1, &ev, &more), DAT_SUCCESS);
	cr_assert_eq(ev.event_number, DAT_RMR_BIND_COMPLETION_EVENT);
	cr_assert_eq(ev.event_data.rmr_completion_event_data.status, DAT_RMR_BIND_SUCCESS);
	return rmr;
}

Test(shm_xlat, rmr_unbound)
{
	DAT_RMR_CONTEXT ctx, none = 0;
	DAT_RMR_HANDLE rmr;

	pair(DAT_MEM_PRIV_ALL_FLAG);
	rmr = rmr_window(NULL, 64, 64, &ctx);
	warm(ctx, 64);
	rmr_window(rmr, 0, 0, &none);
	write_at(1, ctx, 64, 8, DAT_DTO_ERR_REMOTE_ACCESS);
	assert_untouched();
	cr_assert_eq(dat_rmr_free(rmr), DAT_SUCCESS);
	unpair();
}

/* Bound elsewhere: the old context is dead, the new one reaches only its
 * own window (its first write fills the cache; past the window misses). */
Test(shm_xlat, rmr_bound_elsewhere)
{
	DAT_RMR_CONTEXT ctx, ctx2;
	DAT_RMR_HANDLE rmr;

	pair(DAT_MEM_PRIV_ALL_FLAG);
	rmr = rmr_window(NULL, 64, 64, &ctx);
	warm(ctx, 64);
	rmr_window(rmr, 160, 32, &ctx2);
	cr_assert_neq(ctx2, ctx);
	write_at(1, ctx2, 160, 8, DAT_DTO_SUCCESS);
	cr_assert_eq(memcmp(tgt + 160, src, 8), 0);
	memset(tgt, 0, TLEN);
	write_at(2, ctx2, 188, 8, DAT_DTO_ERR_REMOTE_ACCESS);
	assert_untouched();
	unpair();
	pair(DAT_MEM_PRIV_ALL_FLAG);
	rmr = rmr_window(NULL, 64, 64, &ctx);
	warm(ctx, 64);
	rmr_window(rmr, 160, 32, &ctx2);
	write_at(1, ctx, 64, 8, DAT_DTO_ERR_REMOTE_ACCESS);
	assert_untouched();
	unpair();
}

/* ---- across processes: the cache holds our mapping of the peer's pool ---- */

struct info {
	char blob[ZD_QP_BLOB_MAX];
	size_t blob_len;
	uint64_t addr;
	uint32_t key;
};

static int target_main(int rd, int wr, int arg)
{
	struct side T;
	struct info me = { 0 }, peer;
	char *pool = zdapl_mem_alloc(TLEN);
	DAT_LMR_HANDLE lmr;
	DAT_EP_HANDLE ep;
	char go;

	(void)arg;
	t_open(&T);
	ep = t_ep(&T, NULL);
	memset(pool, 0, TLEN);
	lmr = t_reg(&T, NULL, pool, TLEN, DAT_MEM_PRIV_ALL_FLAG, &me.key);
	me.addr = (uintptr_t)pool;
	me.blob_len = t_blob(ep, me.blob);
	if (t_pipe_write(wr, &me, sizeof(me)) || t_pipe_read(rd, &peer, sizeof(peer)))
		return 2;
	t_accept_blob(ep, peer.blob, peer.blob_len);
	if (t_pipe_write(wr, "r", 1) || t_pipe_read(rd, &go, 1))  /* warmed */
		return 3;
	for (int i = 0; i < 8; i++)
		if (pool[16 + i] != (char)(i + 1))
			return 4;
	memset(pool, 0, TLEN);
	if (dat_lmr_free(lmr) != DAT_SUCCESS)
		return 5;
	if (t_pipe_write(wr, "f", 1) || t_pipe_read(rd, &go, 1))  /* its write failed */
		return 6;
	for (int i = 0; i < TLEN; i++)
		if (pool[i])
			return 7;
	if (t_pipe_write(wr, "d", 1) || t_pipe_read(rd, &go, 1))
		return 8;
	t_close(&T);
	return 0;
}

Test(shm_xlat, target_lmr_freed_in_another_process)
{
	struct side I;
	struct info me = { 0 }, peer;
	int rd, wr, status;
	pid_t pid = t_fork_peer(target_main, 0, &rd, &wr);
	char *pool = zdapl_mem_alloc(TLEN), c;
	DAT_LMR_CONTEXT k;
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r;
	DAT_EP_HANDLE ep;

	t_open(&I);
	ep = t_ep(&I, NULL);
	for (int i = 0; i < TLEN; i++)
		pool[i] = (char)(i + 1);
	t_reg(&I, NULL, pool, TLEN, DAT_MEM_PRIV_ALL_FLAG, &k);
	cr_assert_eq(t_pipe_read(rd, &peer, sizeof(peer)), 0, "target died during setup");
	me.blob_len = t_blob(ep, me.blob);
	t_accept_blob(ep, peer.blob, peer.blob_len);
	cr_assert_eq(t_pipe_write(wr, &me, sizeof(me)), 0);
	cr_assert_eq(t_pipe_read(rd, &c, 1), 0);
	l = t_seg(k, pool, 8);
	r = t_rseg(peer.key, (void *)(uintptr_t)(peer.addr + 16), 8);
	for (int i = 0; i < WARM; i++) {
		cr_assert_eq(dat_ep_post_rdma_write(ep, 1, &l, t_cookie(i), &r, 0), DAT_SUCCESS);
		t_expect(I.req, ep, i, DAT_DTO_SUCCESS, DAT_DTO_RDMA_WRITE, 8);
	}
	cr_assert_eq(t_pipe_write(wr, "w", 1), 0);
	cr_assert_eq(t_pipe_read(rd, &c, 1), 0, "the target's check of the writes failed");
	/* The target freed its LMR, then told us: the next write fails. */
	cr_assert_eq(dat_ep_post_rdma_write(ep, 1, &l, t_cookie(9), &r, 0), DAT_SUCCESS);
	t_expect(I.req, ep, 9, DAT_DTO_ERR_REMOTE_ACCESS, DAT_DTO_RDMA_WRITE, 0);
	cr_assert_eq(t_pipe_write(wr, "e", 1), 0);
	cr_assert_eq(t_pipe_read(rd, &c, 1), 0, "the target's memory was written");
	cr_assert_eq(t_pipe_write(wr, "q", 1), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "target status 0x%x", status);
	t_close(&I);
	zdapl_mem_free(pool);
}
