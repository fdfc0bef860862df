/*
 * The translation cache's refill and reset (zd_soft_xlat.h): the miss
 * path, out of line.
 */
#include "hw/soft/zd_soft_xlat.h"

/* What an empty cache points at: a valid entry whose seq no cache holds
 * (cached seqs are even; this one's is 0 and the empty cache's 1). */
static const struct zd_soft_mr_entry xlat_no_entry;

void zd_soft_xlat_reset(struct zd_soft_xlat *x)
{
	atomic_store_explicit(&x->ok, 0, memory_order_relaxed);
	atomic_store_explicit(&x->lkey, 0, memory_order_relaxed);
	atomic_store_explicit(&x->rkey, 0, memory_order_relaxed);
	atomic_store_explicit(&x->lseq, 1, memory_order_relaxed);
	atomic_store_explicit(&x->rseq, 1, memory_order_relaxed);
	atomic_store_explicit(&x->le, &xlat_no_entry, memory_order_relaxed);
	atomic_store_explicit(&x->re, &xlat_no_entry, memory_order_relaxed);
	atomic_store_explicit(&x->lbase, 0, memory_order_relaxed);
	atomic_store_explicit(&x->lsize, 0, memory_order_relaxed);
	atomic_store_explicit(&x->rbase, 0, memory_order_relaxed);
	atomic_store_explicit(&x->rsize, 0, memory_order_relaxed);
	atomic_store_explicit(&x->delta, 0, memory_order_relaxed);
	/* release: pairs with the acquire load of seq in zd_soft_xlat_get
	 * (posts start after connect in any case). */
	atomic_store_explicit(&x->seq, 0, memory_order_release);
}

/* The part of the target region @v that [@lo, @hi) covers and, for a
 * region reached through the adoption file, only its whole pages
 * (zd_soft_mr_chunk: the edge pages stay private). */
static void remote_span(const struct zd_soft_mr_view *v, uint64_t lo, uint64_t hi,
			uint64_t *base, uint64_t *size)
{
	uint64_t rlo = v->addr, rhi = v->addr + v->len;

	if (v->chunk != ZD_SOFT_NO_CHUNK && (v->chunk & ZD_SOFT_CHUNK_INTERIOR)) {
		rlo = (v->addr + ZD_SOFT_PAGE - 1) & ~(uint64_t)(ZD_SOFT_PAGE - 1);
		rhi = (v->addr + v->len) & ~(uint64_t)(ZD_SOFT_PAGE - 1);
	}
	if (rlo < lo)
		rlo = lo;
	if (rhi > hi)
		rhi = hi;
	*base = rlo;
	*size = rhi > rlo ? rhi - rlo : 0;
}

void zd_soft_xlat_put(struct zd_soft_xlat *x, const struct zd_soft_xlat_fill *f)
{
	uint32_t s = atomic_load_explicit(&x->seq, memory_order_relaxed);
	uint64_t rbase, rsize;

	if (!f->ok)
		return;
	remote_span(f->rv, f->rlo, f->rhi, &rbase, &rsize);
	/* acquire: the refill's stores stay after the CAS that makes the seq
	 * odd; another thread's refill in progress (odd) or done under us
	 * (moved): leave it. */
	if ((s & 1) || !atomic_compare_exchange_strong_explicit(&x->seq, &s, s + 1,
								 memory_order_acquire,
								 memory_order_relaxed))
		return;
	/* release fence: pairs with the acquire fence in zd_soft_xlat_get: a
	 * post that reads any field below sees the seq odd or moved. */
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&x->ok, f->ok, memory_order_relaxed);
	atomic_store_explicit(&x->lkey, f->lkey, memory_order_relaxed);
	atomic_store_explicit(&x->rkey, f->rkey, memory_order_relaxed);
	atomic_store_explicit(&x->lseq, f->lseq, memory_order_relaxed);
	atomic_store_explicit(&x->rseq, f->rseq, memory_order_relaxed);
	atomic_store_explicit(&x->le, f->le, memory_order_relaxed);
	atomic_store_explicit(&x->re, f->re, memory_order_relaxed);
	atomic_store_explicit(&x->lbase, f->lv->addr, memory_order_relaxed);
	atomic_store_explicit(&x->lsize, f->lv->len, memory_order_relaxed);
	atomic_store_explicit(&x->rbase, rbase, memory_order_relaxed);
	atomic_store_explicit(&x->rsize, rsize, memory_order_relaxed);
	atomic_store_explicit(&x->delta, (uint64_t)(uintptr_t)f->ptr - f->raddr,
			      memory_order_relaxed);
	/* release: pairs with the acquire load of seq in zd_soft_xlat_get. */
	atomic_store_explicit(&x->seq, s + 2, memory_order_release);
}
