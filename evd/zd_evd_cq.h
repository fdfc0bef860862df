/*
 * A device's software completion ring feeding an EVD: DTO completions a
 * device produces outside cq_poll (at post time, from a peer's frame) wait
 * in a local MPSC ring until cq_poll (the EVD consumer's, or its pinned
 * poller's: zd_poller.h) moves them into the EVD ring, never more than it
 * has room for.
 */
#ifndef ZD_EVD_CQ_H
#define ZD_EVD_CQ_H

#include "evd/zd_evd.h"
#include "evd/zd_dto_event.h"

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

/* zd_evd_cq_post out of line, from the completion's fields (zd_evd.c);
 * an IB extension operation (zd_dto_is_ext) becomes its DAT_IB_DTO_EVENT,
 * with @imm for those that carry immediate data (zd_dto_event.h). */
void zd_evd_cq_post_ext(struct zd_ring *local, struct zd_evd *evd, DAT_EP_HANDLE ep,
			DAT_DTO_COOKIE cookie, DAT_DTO_COMPLETION_STATUS st, DAT_SEG_LENGTH len,
			DAT_DTOS op, uint32_t imm);
void zd_evd_cq_post_local(struct zd_ring *local, struct zd_evd *evd, DAT_EP_HANDLE ep,
			  DAT_DTO_COOKIE cookie, DAT_DTO_COMPLETION_STATUS st,
			  DAT_SEG_LENGTH len, DAT_DTOS op);

/*
 * Same, but straight into the EVD ring (no cq_poll step for the consumer)
 * when @local is drained, the EVD is not spilling and its ring has room;
 * otherwise through @local as above.
 *
 * Order: a completion A that happens before completion B (same EP; one
 * poster, or posters that synchronise) reaches the consumer first:
 *  - A went direct: its claim on the EVD ring's tail precedes B's claim
 *    there, or the claim by which cq_poll later forwards B from @local
 *    (that drain runs after B's enqueue into @local, which is after A);
 *    a cq_poll_one takes B from @local straight to the consumer only if
 *    the EVD ring is drained after it saw B (zd_evd_direct_ok), i.e. A
 *    was taken already.
 *  - A went into @local: B goes direct only if zd_ring_drained(@local)
 *    holds, i.e. its acquire load of @local's head read the consumer's
 *    release store made after zd_evd_cq_drain had enqueued A into the EVD
 *    ring, so A's claim there precedes B's (or after cq_poll_one had
 *    copied A out to the consumer).  Otherwise B follows A in @local.
 *    A concurrent cq_poll draining @local only ever moves events
 *    already in it (claimed before B's check), so it cannot put anything
 *    of A's producer behind B.
 * Completions with no happens-before between them have no order to keep.
 * No drop: a full EVD ring sends B to @local (the fallback), whose own
 * overflow spills (zd_evd_cq_post).  Ring room: cq_poll's budget is only
 * an estimate now that producers may take room under it: zd_evd_cq_drain
 * stops at a full ring and device reapers must not assume the enqueue
 * succeeds.
 * Resize: dat_evd_resize swaps evd->ring.  Foreign producers hold urcu-bp
 * read locks for that; here (a hot path: urcu-bp's lock and unlock are two
 * library calls and two __tls_get_addr, ~80 instructions) a Dekker pair
 * instead: we count ourselves in direct_users (seq_cst RMW), then read
 * direct_off; the resizer sets direct_off (seq_cst), then waits for
 * direct_users to drain.  One side sees the other: either the resizer
 * waits for our enqueue into the old ring (which it then moves whole), or
 * we see direct_off and take @local; after the swap its release store
 * clearing direct_off hands us the new ring.
 */
static ZD_ALWAYS_INLINE void zd_evd_cq_post_direct(struct zd_ring *local, struct zd_evd *evd,
						    DAT_EP_HANDLE ep, DAT_DTO_COOKIE cookie,
						    DAT_DTO_COMPLETION_STATUS st,
						    DAT_SEG_LENGTH len, DAT_DTOS op)
{
	/* Extension events (a constant @op folds this away) take the
	 * local ring: their extension line is written by zd_ring_enqueue. */
	if (ZD_LIKELY(!zd_dto_is_ext(op)) && ZD_LIKELY(zd_ring_drained(local))) {
		struct zd_ring_slot *s = NULL;
		uint64_t pos;

		/* seq_cst: the Dekker store of this side (see above). */
		atomic_fetch_add_explicit(&evd->direct_users, 1, memory_order_seq_cst);
		/* seq_cst: the Dekker load of this side; also acquire,
		 * pairing with the release clearing direct_off in
		 * zd_evd_resize_ring: we then read its new ring.  spilling's
		 * acquire pairs with its release in zd_evd_post: a spilling
		 * EVD takes every event after the spilled ones. */
		if (ZD_LIKELY(!atomic_load_explicit(&evd->direct_off, memory_order_seq_cst) &&
			      !zd_evd_spilling(evd, memory_order_acquire)))
			s = zd_ring_claim(evd->ring, &pos);
		if (ZD_LIKELY(s != NULL)) {
			/* In place, field by field: no DAT_EVENT to copy. */
			DAT_DTO_COMPLETION_EVENT_DATA *d = &s->event_data.dto_completion_event_data;

			s->event_number = DAT_DTO_COMPLETION_EVENT;
			zd_evd_ev_set_solicited((DAT_EVENT *)(void *)s, false);
			s->evd_handle = evd;
			d->ep_handle = ep;
			d->user_cookie = cookie;
			d->status = st;
			d->transfered_length = len;
			d->operation = op;
			d->rmr_context = 0;
			zd_ring_publish(s, pos);
		}
		/* release: the resizer's acquire load sees our slot published. */
		atomic_fetch_sub_explicit(&evd->direct_users, 1, memory_order_release);
		if (ZD_LIKELY(s != NULL)) {
			zd_evd_wake(evd);
			return;
		}
	}
	zd_evd_cq_post_local(local, evd, ep, cookie, st, len, op);
}

/* Consumer side (cq_poll): moves up to @budget completions from @local into
 * the EVD ring; @budget is the room cq_poll was given, but producers that
 * post directly (zd_evd_cq_post_direct) may take some of it meanwhile, so
 * this stops at a full ring and the rest wait in @local.  While events wait
 * in the spill list they are older: these go behind them (zd_evd_post
 * spills), not into the ring ahead of them. */
static inline int zd_evd_cq_drain(struct zd_ring *local, struct zd_evd *evd, int budget)
{
	const DAT_EVENT *ev;
	int n = 0;

	while (n < budget && (ev = zd_ring_peek(local)) != NULL) {
		/* acquire: pairs with zd_evd_post's release store of spilling. */
		if (ZD_UNLIKELY(zd_evd_spilling(evd, memory_order_acquire))) {
			if (zd_evd_post(evd, ev, 1) != DAT_SUCCESS)
				break;  /* no memory: it stays in @local */
		} else if (ZD_UNLIKELY(!zd_ring_enqueue(evd->ring, ev))) {
			break;
		}
		zd_ring_drop(local);
		n++;
	}
	return n;
}

#endif
