/*
 * A deregistration against a peer's copy in flight (issue 15): a peer
 * process RDMA-writes 32 MiB into our region, we free the LMR once the
 * middle byte has landed, and from the moment dat_lmr_free returns the
 * memory is the application's again: nothing of the write may land any
 * more.  The write itself completes in success or in error (both legal).
 * Into pool memory (the peer's memcpy through its mapping of our chunk),
 * by one segment (the post's own path) and by two (the general path), and
 * into malloc'd memory (through our adoption window; its release copies
 * the pages back and takes as long as the copy: that case held before).
 */
#include <sys/wait.h>
#include <time.h>

#include "zd_shm_test.h"

TestSuite(shm_dereg, .init = t_need_conf, .timeout = 60);

enum { BIG = 32 << 20, PAGE = 4096 };
#define WRITTEN 0x5a  /* what the peer writes */
#define OURS    0xc3  /* what we write once the region is ours again */

enum where { IN_POOL, IN_HEAP, TWO_SEGMENTS };

struct info {
	char blob[ZD_QP_BLOB_MAX];
	size_t blob_len;
	uint64_t addr;
	uint32_t key;
};

static uint64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* The peer: connects, writes BIG bytes of WRITTEN into our region at the
 * parent's word, reports the write's status byte ('s' success, 'e'
 * error), waits to be told to quit. */
static int writer(int rd, int wr, int where)
{
	struct side B;
	struct info me = { 0 }, peer;
	uint8_t *src = zdapl_mem_alloc(BIG);
	DAT_LMR_CONTEXT k;
	DAT_LMR_TRIPLET l[2];
	DAT_RMR_TRIPLET r;
	DAT_DTO_COMPLETION_EVENT_DATA d;
	DAT_EVENT ev;
	DAT_COUNT more;
	DAT_EP_HANDLE ep;
	char c;

	if (!src)
		return 2;
	memset(src, WRITTEN, BIG);
	t_open(&B);
	ep = t_ep(&B, NULL);
	t_reg(&B, NULL, src, BIG, DAT_MEM_PRIV_ALL_FLAG, &k);
	me.blob_len = t_blob(ep, me.blob);
	if (t_pipe_read(rd, &peer, sizeof(peer)) || t_pipe_write(wr, &me, sizeof(me)))
		return 3;
	t_accept_blob(ep, peer.blob, peer.blob_len);
	if (t_pipe_read(rd, &c, 1))  /* go */
		return 4;
	/* Two segments: the middle byte lies inside the second one's copy. */
	l[0] = t_seg(k, src, where == TWO_SEGMENTS ? BIG / 4 : BIG);
	l[1] = t_seg(k, src + BIG / 4, BIG - BIG / 4);
	r = t_rseg(peer.key, (void *)(uintptr_t)peer.addr, BIG);
	if (dat_ep_post_rdma_write(ep, where == TWO_SEGMENTS ? 2 : 1, l, t_cookie(1), &r, 0) !=
	    DAT_SUCCESS)
		return 5;
	if (dat_evd_wait(B.req, 10 * 1000 * 1000, 1, &ev, &more) != DAT_SUCCESS)
		return 6;
	d = ev.event_data.dto_completion_event_data;
	c = d.status == DAT_DTO_SUCCESS ? 's' : 'e';
	if (t_pipe_write(wr, &c, 1) || t_pipe_read(rd, &c, 1))
		return 7;
	t_close(&B);
	return 0;
}

static void dereg_in_flight(enum where where)
{
	struct side A;
	struct info me = { 0 }, peer;
	int rd, wr, status;
	pid_t pid = t_fork_peer(writer, where, &rd, &wr);
	uint8_t *dst = where == IN_HEAP ? aligned_alloc(PAGE, BIG) : zdapl_mem_alloc(BIG);
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT k;
	DAT_EP_HANDLE ep;
	uint64_t end;
	size_t late = 0, first_late = 0;
	char c;

	cr_assert(dst);
	memset(dst, 0, BIG);
	t_open(&A);
	ep = t_ep(&A, NULL);
	lmr = t_reg(&A, NULL, dst, BIG, DAT_MEM_PRIV_ALL_FLAG, &k);
	me.blob_len = t_blob(ep, me.blob);
	me.addr = (uintptr_t)dst;
	me.key = k;
	cr_assert_eq(t_pipe_write(wr, &me, sizeof(me)), 0);
	cr_assert_eq(t_pipe_read(rd, &peer, sizeof(peer)), 0, "peer died during setup");
	t_accept_blob(ep, peer.blob, peer.blob_len);
	cr_assert_eq(t_pipe_write(wr, "g", 1), 0);

	/* The write is halfway (whichever way its copy runs). */
	end = now_ms() + 10000;
	while (!__atomic_load_n(&dst[BIG / 2], __ATOMIC_RELAXED))
		cr_assert(now_ms() < end, "the write never started");
	cr_assert_eq(dat_lmr_free(lmr), DAT_SUCCESS);

	/* Ours again: a mark in every page at once (long before a copy of
	 * the other half could end), then every byte. */
	for (size_t i = PAGE - 1; i < BIG; i += PAGE)
		__atomic_store_n(&dst[i], OURS, __ATOMIC_RELAXED);
	memset(dst, OURS, BIG);
	/* Nothing lands over the next 100 ms. */
	end = now_ms() + 100;
	do {
		for (size_t i = 0; i < BIG; i += 64)
			if (__atomic_load_n(&dst[i], __ATOMIC_RELAXED) != OURS ||
			    __atomic_load_n(&dst[i + 63], __ATOMIC_RELAXED) != OURS) {
				if (!late++)
					first_late = i;
				dst[i] = dst[i + 63] = OURS;
			}
	} while (now_ms() < end);
	cr_assert_eq(late, 0, "%zu lines written after dat_lmr_free returned (first at %zu)", late,
		     first_late);

	cr_assert_eq(t_pipe_read(rd, &c, 1), 0, "the writer died");
	cr_assert(c == 's' || c == 'e');
	cr_assert_eq(t_pipe_write(wr, "q", 1), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer status 0x%x", status);
	t_close(&A);
	if (where == IN_HEAP)
		free(dst);
	else
		zdapl_mem_free(dst);
}

Test(shm_dereg, no_byte_lands_after_free_pool)
{
	dereg_in_flight(IN_POOL);
}

Test(shm_dereg, no_byte_lands_after_free_heap)
{
	dereg_in_flight(IN_HEAP);
}

Test(shm_dereg, no_byte_lands_after_free_two_segments)
{
	dereg_in_flight(TWO_SEGMENTS);
}
