/*
 * A device's software completion ring feeding an EVD: DTO completions a
 * device produces outside cq_poll (at post time, from a peer's frame) wait
 * in a local MPSC ring until the EVD's consumer polls, when cq_poll moves
 * them into the EVD ring, never more than it has room for.
 */
#ifndef ZD_EVD_CQ_H
#define ZD_EVD_CQ_H

#include "evd/zd_evd.h"

/* Queues one DTO completion for @evd in @local and wakes its waiters; a
 * full ring (the consumer let the EVD overflow) spills, never drops. */
static inline void zd_evd_cq_post(struct zd_ring *local, struct zd_evd *evd,
				  const DAT_DTO_COMPLETION_EVENT_DATA *dto)
{
	DAT_EVENT ev;

	ev.event_number = DAT_DTO_COMPLETION_EVENT;
	ev.evd_handle = evd;
	ev.event_data.dto_completion_event_data = *dto;
	if (ZD_UNLIKELY(!zd_ring_enqueue(local, &ev)))
		zd_evd_post(evd, &ev, 1);
	else
		zd_evd_wake(evd);
}

/* Consumer side (cq_poll): moves up to @budget completions from @local into
 * the EVD ring; @budget is the room left there, so the enqueue cannot fail. */
static inline int zd_evd_cq_drain(struct zd_ring *local, struct zd_evd *evd, int budget)
{
	const DAT_EVENT *ev;
	int n = 0;

	while (n < budget && (ev = zd_ring_peek(local)) != NULL) {
		zd_ring_enqueue(evd->ring, ev);
		zd_ring_drop(local);
		n++;
	}
	return n;
}

#endif
