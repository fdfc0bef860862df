/*
 * dat_evd_dequeue as an inline template: core instantiates it for every
 * device (evd/zd_evd.c), a device may instantiate it again with its own
 * completion poll inlined (see core/zd_dto_entry.h for why and how such
 * entries reach libdat2).
 *
 * The fast test covers a live EVD, an event pointer, and one load of its
 * state word (nobody in dat_evd_wait, no ring drained after a resize, and
 * for the direct poll: a CQ the consumer polls, nothing spilled);
 * everything else -- errors included -- goes to the checked path.  Then:
 *  - core's instance: an event already in the ring, else (the ring empty,
 *    nothing spilled) the device's cq_poll_one takes the next completion
 *    straight into @event;
 *  - a device's instance (@poll_first): the whole dequeue is the
 *    device's poll, its CQ first -- a completion there goes straight into
 *    @event only if nothing older waits in the EVD (zd_evd_direct_ok,
 *    checked after the completion was read: the check that keeps EVD
 *    order, so none is needed before it) -- and, only when the CQ is
 *    empty, the ring (zd_evd_ring_take).  A latency loop finds its
 *    completion in the CQ, not in the ring: one check instead of two.
 * Each dequeue past the checks adds one to the consumer's tally of the
 * way it went (zd_evd.h: one add, to the EVD's consumer line, before the
 * poll so that the poll stays a tail call).
 */
#ifndef ZD_EVD_ENTRY_H
#define ZD_EVD_ENTRY_H

#include <dat2/udat.h>

#include "core/zd_compiler.h"
#include "core/zd_obj.h"
#include "evd/zd_evd.h"

typedef DAT_RETURN zd_cq_poll_one_fn(struct zd_evd *evd, DAT_EVENT *out);

/* evd/zd_evd.c: dat_evd_dequeue with every check, and the ring drained
 * after a resize, the spill list and a full poll of the CQ. */
DAT_RETURN zd_evd_dequeue_checked(DAT_EVD_HANDLE h, DAT_EVENT *event);

/* evd/zd_evd.c: the next event of the ring, or DAT_QUEUE_EMPTY. */
DAT_RETURN zd_evd_ring_take(struct zd_evd *evd, DAT_EVENT *event);

static ZD_ALWAYS_INLINE DAT_RETURN zd_evd_dequeue_entry(DAT_EVD_HANDLE h, DAT_EVENT *event,
							zd_cq_poll_one_fn *poll_first)
{
	struct zd_evd *evd = zd_obj_get(h, ZD_OBJ_EVD);

	if (ZD_LIKELY(evd != NULL) && ZD_LIKELY(event != NULL)) {
		/* relaxed: the spill bit is a hint here; the direct path
		 * checks it again, with acquire, after its completion. */
		uint32_t st = atomic_load_explicit(&evd->state, memory_order_relaxed);

		/* The device's poll first: nothing in the state word (one test). */
		if (poll_first && ZD_LIKELY(st == 0)) {
			zd_evd_tally(evd, ZD_EVD_DQ_POLL);
			return poll_first(evd, event);
		}
		if (ZD_LIKELY(!(st & (ZD_EVD_ST_WAITER | ZD_EVD_ST_DRAIN)))) {
			if (poll_first) {
				/* No CQ of its own to poll (a connection EVD,
				 * a pinned poller's), or a spill: the ring,
				 * as core's does. */
				if (zd_ring_dequeue(evd->ring, event)) {
					zd_evd_tally(evd, ZD_EVD_DQ_FOUND);
					return DAT_SUCCESS;
				}
			} else {
				if (ZD_LIKELY(zd_ring_dequeue(evd->ring, event))) {
					zd_evd_tally(evd, ZD_EVD_DQ_FOUND);
					return DAT_SUCCESS;
				}
				if (ZD_LIKELY(st == 0)) {
					zd_evd_tally(evd, ZD_EVD_DQ_POLL);
					return evd->cq_poll_one(evd, event);
				}
			}
		}
	}
	return zd_evd_dequeue_checked(h, event);
}

#endif /* ZD_EVD_ENTRY_H */
