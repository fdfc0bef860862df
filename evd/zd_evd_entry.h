/*
 * dat_evd_dequeue as an inline template: core instantiates it for every
 * device (evd/zd_evd.c), a device may instantiate it again with its own
 * completion poll inlined (see core/zd_dto_entry.h for why and how such
 * entries reach libdat2).
 *
 * The fast test covers a live EVD, an event pointer, nobody in
 * dat_evd_wait and no ring drained after a resize; everything else --
 * errors included -- goes to the checked path.  Then:
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

/* Whether the consumer may poll the CQ itself: a CQ it polls (not a pinned
 * poller), nothing spilled (relaxed: a hint; the direct path checks again,
 * with acquire, after its completion). */
static ZD_ALWAYS_INLINE bool zd_evd_poll_ok(const struct zd_evd *evd)
{
	return evd->cq_poll_one != NULL &&
	       !atomic_load_explicit(&evd->spilling, memory_order_relaxed);
}

static ZD_ALWAYS_INLINE DAT_RETURN zd_evd_dequeue_entry(DAT_EVD_HANDLE h, DAT_EVENT *event,
							zd_cq_poll_one_fn *poll_first)
{
	struct zd_evd *evd = zd_obj_get(h, ZD_OBJ_EVD);

	if (ZD_LIKELY(evd != NULL) && ZD_LIKELY(event != NULL) &&
	    ZD_LIKELY(!atomic_load_explicit(&evd->waiting, memory_order_relaxed)) &&
	    ZD_LIKELY(evd->draining == NULL)) {
		if (poll_first) {
			if (ZD_LIKELY(zd_evd_poll_ok(evd)))
				return poll_first(evd, event);
			/* No CQ of its own to poll (a connection EVD, or a
			 * pinned poller's): the ring, as core's does. */
			if (zd_ring_dequeue(evd->ring, event))
				return DAT_SUCCESS;
		} else {
			if (ZD_LIKELY(zd_ring_dequeue(evd->ring, event)))
				return DAT_SUCCESS;
			if (ZD_LIKELY(zd_evd_poll_ok(evd)))
				return evd->cq_poll_one(evd, event);
		}
	}
	return zd_evd_dequeue_checked(h, event);
}

#endif /* ZD_EVD_ENTRY_H */
