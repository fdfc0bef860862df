/*
 * An initiator's translation cache: the last (lkey, rkey) pair an RDMA
 * post checked, with what the checks found -- the rights the pair grants,
 * the local region's range, the span of target addresses reachable through
 * one mapping and the displacement from a target address to our pointer --
 * so that back-to-back RDMA on the same keys skips both seqlocked table
 * reads, the chunk-table read and the mapping lookup (zd_soft_table.h,
 * zd_soft_peer.h).  One per QP (zd_shm_qp), filled by its posts' misses.
 *
 * VALIDITY.  The cache keeps a pointer to each key's table entry and the
 * entry's seq at the time it was read (even).  A hit loads both entries'
 * seqs again (acquire) and requires them unchanged: as long as an entry's
 * seq reads the same, its fields are the ones cached (every rewrite moves
 * the seq by two; a 32-bit seq comes back to the same value only after
 * 2^31 rewrites of one entry between two posts of this QP, and the key,
 * compared too, would also have to come back).  So a hit is exactly as
 * current as a full read at the moment of the seq load:
 *  - dat_lmr_free, dat_rmr_bind (the old key cleared) or dat_rmr_free
 *    rewrite the entry before they return; a post that follows them in
 *    any happens-before order (the target told us over any channel, or it
 *    is our own process) loads the new seq, misses, and the full check
 *    fails with DAT_DTO_ERR_REMOTE_ACCESS (DAT_DTO_ERR_LOCAL_PROTECTION for
 *    the local key) before a byte is stored;
 *  - a key invalidated while a write is under way (after its check, before
 *    its last store): the stores land, as a NIC's DMA already issued when
 *    the key goes lands, and the deregistration waits for them before it
 *    returns (the initiator marks the copy in the target's QP region:
 *    hw/shm/zd_shm_copy.h); the memory is the target's (pool chunks and
 *    adoption windows stay mapped until the peer goes), never another
 *    process's.
 * The displacement stays right while the entry does: an entry names one
 * chunk slot for its life, and our mapping of that chunk (or of the
 * adoption window) stays until the peer goes.  Memory freed under a live
 * registration (undefined for verbs) keeps receiving writes in the pages
 * the registration was made on, as a NIC's pinned pages would.
 *
 * CONCURRENCY.  Posts of one EP may run on several threads.  The cache is
 * a seqlock of its own: a miss that wants to refill takes it with a CAS
 * (odd) and gives up if another thread holds it; a hit copies the fields
 * and re-reads the cache seq.  A torn read misses.  Every field is an
 * atomic written whole, so even a torn read only ever loads the seq of
 * some valid entry.
 */
#ifndef ZD_SOFT_XLAT_H
#define ZD_SOFT_XLAT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/zd_compiler.h"
#include "core/zd_range.h"
#include "hw/soft/zd_soft_table.h"

/* What the cached pair allows (both keys' rights, both PZs checked). */
#define ZD_SOFT_XLAT_WRITE 1u  /* an RDMA write from the local region into the remote */
#define ZD_SOFT_XLAT_READ  2u  /* an RDMA read from the remote region into the local */

struct zd_soft_xlat {
	_Atomic uint32_t seq;        /* odd while a refill runs */
	_Atomic uint32_t ok;         /* ZD_SOFT_XLAT_*; 0: empty */
	_Atomic uint32_t lkey, rkey;
	_Atomic uint32_t lseq, rseq; /* the entries' seqs when read */
	const struct zd_soft_mr_entry *_Atomic le, *_Atomic re;
	_Atomic uint64_t lbase, lsize; /* local: the region */
	_Atomic uint64_t rbase, rsize; /* remote: what one mapping reaches */
	_Atomic uint64_t delta;        /* pointer = target address + delta */
};

/* Empties @x (no post may run: QP creation or connect). */
void zd_soft_xlat_reset(struct zd_soft_xlat *x);

/* What a miss found, to cache: both keys' entries and their views at
 * their seqs, the rights the device granted the pair (ZD_SOFT_XLAT_*: its
 * access flags and both PZs checked), the span [rlo, rhi) one mapping
 * reaches, and our pointer @ptr for target address @raddr. */
struct zd_soft_xlat_fill {
	uint32_t lkey, rkey, lseq, rseq;
	const struct zd_soft_mr_entry *le, *re;
	const struct zd_soft_mr_view *lv, *rv;
	uint32_t ok;
	uint64_t rlo, rhi;
	uint64_t raddr;
	void *ptr;
};

/* Caches what a full check found (out of line: misses only); nothing if
 * another thread is refilling or the pair grants nothing. */
void zd_soft_xlat_put(struct zd_soft_xlat *x, const struct zd_soft_xlat_fill *f);

/* Our pointer to target [@raddr, +@len) if the cached pair is (@lkey,
 * @rkey), allows @need (ZD_SOFT_XLAT_*), holds local [@laddr, +@len) and
 * target [@raddr, +@len), and neither entry has changed; NULL otherwise
 * (then check in full). */
static ZD_ALWAYS_INLINE void *zd_soft_xlat_get(const struct zd_soft_xlat *x, uint32_t lkey,
					       uint64_t laddr, uint32_t rkey, uint64_t raddr,
					       uint64_t len, uint32_t need)
{
	/* acquire: pairs with the release store ending a refill. */
	uint32_t s = atomic_load_explicit(&x->seq, memory_order_acquire);
	bool hit = lkey == atomic_load_explicit(&x->lkey, memory_order_relaxed) &&
		   rkey == atomic_load_explicit(&x->rkey, memory_order_relaxed) &&
		   (atomic_load_explicit(&x->ok, memory_order_relaxed) & need) &&
		   zd_range_in(atomic_load_explicit(&x->lbase, memory_order_relaxed),
			       atomic_load_explicit(&x->lsize, memory_order_relaxed), laddr, len) &&
		   zd_range_in(atomic_load_explicit(&x->rbase, memory_order_relaxed),
			       atomic_load_explicit(&x->rsize, memory_order_relaxed), raddr, len);
	uint64_t delta = atomic_load_explicit(&x->delta, memory_order_relaxed);

	if (ZD_UNLIKELY(!hit))
		return NULL;
	/* acquire (both): pairs with zd_soft_seq_end of the tables' owners:
	 * an entry rewritten since it was cached shows a new seq here.  They
	 * also order the copy's stores after these loads. */
	hit = atomic_load_explicit(&atomic_load_explicit(&x->le, memory_order_relaxed)->seq,
				   memory_order_acquire) ==
		      atomic_load_explicit(&x->lseq, memory_order_relaxed) &&
	      atomic_load_explicit(&atomic_load_explicit(&x->re, memory_order_relaxed)->seq,
				   memory_order_acquire) ==
		      atomic_load_explicit(&x->rseq, memory_order_relaxed);
	/* acquire fence: pairs with the release fence opening a refill: if
	 * any field above came from a refill, the seq below has moved. */
	atomic_thread_fence(memory_order_acquire);
	if (ZD_UNLIKELY(!hit || (s & 1) ||
			atomic_load_explicit(&x->seq, memory_order_relaxed) != s))
		return NULL;
	return (void *)(uintptr_t)(raddr + delta);
}

#endif /* ZD_SOFT_XLAT_H */
