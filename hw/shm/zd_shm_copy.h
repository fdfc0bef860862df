/*
 * A peer's copy against our deregistration.
 *
 * The initiator copies to or from the target's memory itself, after it
 * checked the rkey in the target's MR table (or its translation cache,
 * whose hit compares the entry's seq: zd_soft_xlat.h).  dat_lmr_free
 * clears the entry, but a copy whose check passed just before still runs;
 * had the free returned then, the copy would land in memory the
 * application owns again (free()d, or a pool buffer handed to another
 * registration).  A device's deregistration returns only once no DMA to
 * the region is in flight; so does ours:
 *
 *   initiator:  copying = odd | compiler barrier | check the key | copy |
 *               copying = even (release)
 *   owner:      clear the entry | membarrier | each QP's copying: odd?
 *               wait until it changes (acquire)
 *
 * The word lies in the target QP's region (the peer writes it; its owner
 * only reads it), so the owner looks at its own QPs.  membarrier
 * (MEMBARRIER_CMD_GLOBAL_EXPEDITED; every process registers at IA open)
 * makes every running thread of every registered process execute a full
 * barrier before it returns, which upgrades the initiator's compiler
 * barrier: either the initiator's check saw the entry cleared, or the
 * owner sees its mark.  An odd value changes only when that copy ends
 * (one thread posts to an EP at a time, as for the EP's other words);
 * the next copy began after the barrier and finds the entry cleared, so
 * the owner stops at the first change, never waits for a stream of new
 * copies.  The data path pays two loads, an or, an add and two plain
 * stores.
 *
 * Without the expedited command (kernel before 4.16, or a peer that could
 * not register) the owner asks for MEMBARRIER_CMD_GLOBAL instead (every
 * CPU through a grace period: milliseconds, no registration needed);
 * without membarrier at all (seccomp) it falls back on time, and says so
 * once: a seq_cst fence, a pause of ZD_SHM_COPY_SETTLE_NS for the marks
 * still in the peers' store buffers to show, and the scan.
 */
#ifndef ZD_SHM_COPY_H
#define ZD_SHM_COPY_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/zd_compiler.h"
#include "hw/shm/zd_shm.h"

/* Opens a copy to or from the memory of the target whose QP region is
 * @r, before the copy's key check (and before the check of r->error, which
 * zd_shm_qp_destroy's wait relies on). */
static ZD_ALWAYS_INLINE void zd_shm_copy_begin(struct zd_shm_qp_shared *r)
{
	/* relaxed (both): the poster of this EP is the word's only writer.
	 * Odd whatever it held (a peer gone mid-copy left it odd: an owner
	 * waiting on that value then waits for this copy to end). */
	atomic_store_explicit(&r->copying,
			      atomic_load_explicit(&r->copying, memory_order_relaxed) | 1,
			      memory_order_relaxed);
	/* Compiler barrier: pairs with the membarrier in zd_shm_copies_wait,
	 * which makes it a full barrier: the owner sees our mark, or our key
	 * check (the loads after this) sees its entry cleared. */
	atomic_signal_fence(memory_order_seq_cst);
}

/* Closes the copy zd_shm_copy_begin opened.  The mark is loaded again
 * rather than held in a register across the copy: the posts' fast paths
 * have none to spare (they find @r again through their EP, too). */
static ZD_ALWAYS_INLINE void zd_shm_copy_end(struct zd_shm_qp_shared *r)
{
	/* relaxed: our own store (begin's).  release: pairs with the acquire
	 * loads in zd_shm_copies_wait: the copy's loads and stores are done
	 * before the owner sees the word move (a plain store on x86;
	 * memcpy's non-temporal stores end with an sfence). */
	atomic_store_explicit(&r->copying,
			      atomic_load_explicit(&r->copying, memory_order_relaxed) + 1,
			      memory_order_release);
}

/* How long an owner waits for a peer's copy (a peer stopped mid-copy,
 * say); then it goes on, with a zdapl: line. */
#define ZD_SHM_COPY_WAIT_NS (2ull * 1000 * 1000 * 1000)
/* Without membarrier: how long a mark may take to show (see above). */
#define ZD_SHM_COPY_SETTLE_NS (1000 * 1000)

/* Registers this process for the owners' membarrier (at every IA open)
 * and tells the IA's peers whether it did (copies_ordered). */
void zd_shm_copy_register(struct zd_shm_ia *sia);

/*
 * Returns once no copy of a peer through @only (or, NULL, through any RC
 * QP of @sia in PZ @pz_id) that may have passed its key check before this
 * call is in flight: after an MR entry of @sia was cleared (@pz_id its
 * PZ), or after @only's error was set (its region is about to be reset or
 * freed).  Control path: a syscall, a scan of the IA's QPs, and a wait
 * only where a copy is under way (at most ZD_SHM_COPY_WAIT_NS, skipping
 * peers that died).  Not under sia->lock.
 */
void zd_shm_copies_wait(struct zd_shm_ia *sia, uint32_t pz_id, struct zd_shm_qp *only);

#endif /* ZD_SHM_COPY_H */
