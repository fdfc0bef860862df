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
 * reclaimed this way, zd_synchronize_rcu before freeing, and
 * zd_rcu_reclaim_begin first thing in a call_rcu callback.
 */
#ifndef ZD_RCU_H
#define ZD_RCU_H

#include <urcu-bp.h>

#include "evd/zd_ring_arch.h"   /* ZD_TSAN */

#ifdef ZD_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
/* The token (defined in zd_evd.c): any one address all parties agree on. */
extern char zd_rcu_tsan_token;
#define ZD_RCU_TSAN_RELEASE() __tsan_release(&zd_rcu_tsan_token)
#define ZD_RCU_TSAN_ACQUIRE() __tsan_acquire(&zd_rcu_tsan_token)
#else
#define ZD_RCU_TSAN_RELEASE() do { } while (0)
#define ZD_RCU_TSAN_ACQUIRE() do { } while (0)
#endif

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

static inline void zd_rcu_reclaim_begin(void)
{
	ZD_RCU_TSAN_ACQUIRE();
}

#endif /* ZD_RCU_H */
