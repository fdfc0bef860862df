/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * liburcu's grace periods as ThreadSanitizer sees them.
 *
 * Memory a reader used under rcu_read_lock is freed after synchronize_rcu()
 * or by a call_rcu() callback; liburcu orders the two with membarrier or
 * fences inside an uninstrumented library, so TSan reports the free as a
 * race with the reader.  Under ZD_TSAN these wrappers tell TSan what the
 * grace period guarantees: every read-side section's end releases one
 * token, and the code that reclaims after a grace period acquires it
 * (so the section's accesses happen before the free).  Elsewhere they are
 * liburcu's calls and nothing else.
 *
 * Use zd_rcu_read_unlock for every read-side section whose memory is
 * reclaimed this way, zd_synchronize_rcu before freeing, zd_call_rcu to
 * hand memory over, and zd_rcu_reclaim_begin first thing in its callback.
 */
#ifndef ZD_RCU_H
#define ZD_RCU_H

#include <urcu-bp.h>

#include "evd/zd_ring_arch.h"   /* ZD_TSAN */

/* The token (defined in zd_evd.c under ZD_TSAN): any one address all
 * parties agree on. */
extern char zd_rcu_tsan_token;
#define ZD_RCU_TSAN_RELEASE() zd_tsan_release(&zd_rcu_tsan_token)
#define ZD_RCU_TSAN_ACQUIRE() zd_tsan_acquire(&zd_rcu_tsan_token)

static inline void zd_rcu_read_unlock(void)
{
	/* Before leaving: a grace period that sees us gone acquires this. */
	ZD_RCU_TSAN_RELEASE();
	rcu_read_unlock();
}

static inline void zd_synchronize_rcu(void)
{
	synchronize_rcu();
	ZD_RCU_TSAN_ACQUIRE();
}

/* call_rcu, with what we wrote to @head's object before the hand-over
 * (its reclaim hook, say) happening before the callback. */
static inline void zd_call_rcu(struct rcu_head *head, void (*fn)(struct rcu_head *))
{
	ZD_RCU_TSAN_RELEASE();
	call_rcu(head, fn);
}

static inline void zd_rcu_reclaim_begin(void)
{
	ZD_RCU_TSAN_ACQUIRE();
}

#endif /* ZD_RCU_H */
