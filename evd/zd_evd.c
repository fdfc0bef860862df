/* The EVD's event machinery over zd_ring and zd_waiter, and its DAT calls
 * that need no IA (see zd_evd.h); create, free, query, modify_cno and
 * resize's IA and device steps are core/zd_evd_obj.c's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <urcu-bp.h>

#include "evd/zd_evd.h"
#include "evd/zd_evd_api.h"
#include "evd/zd_cno.h"
#include "evd/zd_evd_cq.h"
#include "evd/zd_ring_mem.h"
#include "evd/zd_evd_entry.h"
#include "evd/zd_rcu.h"

#ifdef ZD_TSAN
char zd_rcu_tsan_token;         /* zd_rcu.h */
#endif

struct zd_spill {
	struct zd_spill *next;
	DAT_EVENT ev;
};

static DAT_RETURN invalid_evd(void)
{
	return zd_obj_invalid_handle(ZD_OBJ_EVD);
}

#define EVD_GET_OR_RETURN(var, h)                          \
	do {                                               \
		(var) = zd_obj_get((h), ZD_OBJ_EVD);       \
		if (ZD_UNLIKELY(!(var)))                   \
			return invalid_evd();              \
	} while (0)

/* ---- producing ---- */

void zd_evd_wake_cno(struct zd_evd *evd, struct zd_cno *cno)
{
	/* A CNO is triggered only by an enabled EVD nobody waits on directly. */
	if (atomic_load_explicit(&evd->enabled, memory_order_relaxed) &&
	    !zd_evd_has_waiter(evd, memory_order_relaxed))
		zd_cno_trigger_from(cno, evd);
}

static int spill_push(struct zd_evd *evd, const DAT_EVENT *ev)
{
	struct zd_spill *s = malloc(sizeof(*s));

	if (!s)
		return -1;
	s->ev = *ev;
	s->next = NULL;
	if (evd->spill_tail)
		evd->spill_tail->next = s;
	else
		evd->spill_head = s;
	evd->spill_tail = s;
	return 0;
}

DAT_RETURN zd_evd_post(struct zd_evd *evd, const DAT_EVENT *ev, int spill_ok)
{
	struct zd_ring *ring;
	int first_overflow = 0;
	bool ok = false;

	rcu_read_lock();
	/* acquire (rcu_dereference without _LGPL_SOURCE is a plain load):
	 * pairs with the release store of a fresh ring in
	 * zd_evd_resize_ring; the read-side section keeps the old one
	 * alive until synchronize_rcu there. */
	ring = __atomic_load_n(&evd->ring, __ATOMIC_ACQUIRE);
	if (ZD_LIKELY(!zd_evd_spilling(evd, memory_order_acquire)))
		ok = zd_ring_enqueue(ring, ev);
	zd_rcu_read_unlock();

	if (ZD_UNLIKELY(!ok)) {
		if (!spill_ok)
			return DAT_ERROR(DAT_QUEUE_FULL, DAT_NO_SUBTYPE);
		pthread_mutex_lock(&evd->spill_lock);
		if (spill_push(evd, ev) != 0) {
			pthread_mutex_unlock(&evd->spill_lock);
			return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
		}
		zd_evd_state_set(evd, ZD_EVD_ST_SPILL, true, memory_order_release);
		first_overflow = !atomic_exchange(&evd->overflowed, 1);
		pthread_mutex_unlock(&evd->spill_lock);
		if (first_overflow && evd->on_overflow)
			evd->on_overflow(evd);
	}
	zd_evd_wake(evd);
	return DAT_SUCCESS;
}

void zd_evd_cq_post_local(struct zd_ring *local, struct zd_evd *evd, DAT_EP_HANDLE ep,
			  DAT_DTO_COOKIE cookie, DAT_DTO_COMPLETION_STATUS st,
			  DAT_SEG_LENGTH len, DAT_DTOS op)
{
	zd_evd_cq_post_ext(local, evd, ep, cookie, st, len, op, 0);
}

void zd_evd_cq_post_ext(struct zd_ring *local, struct zd_evd *evd, DAT_EP_HANDLE ep,
			DAT_DTO_COOKIE cookie, DAT_DTO_COMPLETION_STATUS st, DAT_SEG_LENGTH len,
			DAT_DTOS op, uint32_t imm)
{
	DAT_EVENT ev;

	zd_dto_event_fill(&ev, evd, ep, cookie, st, len, op, imm);
	if (ZD_UNLIKELY(!zd_ring_enqueue(local, &ev)))
		zd_evd_post(evd, &ev, 1);
	else
		zd_evd_wake(evd);
}

/* ---- consuming (one consumer thread at a time) ---- */

void zd_evd_progress(struct zd_evd *evd)
{
	int room;

	if (!evd->cq_poll)
		return;
	room = zd_evd_room(evd);
	if (room > 0)
		evd->cq_poll(evd, room);
}

/* Takes the next event in order: a drained-after-resize ring first, then the
 * ring, then the spill list (spilled events are younger than ring ones). */
static bool evd_take(struct zd_evd *evd, DAT_EVENT *out)
{
	struct zd_ring *ring;

	if (ZD_UNLIKELY(evd->draining != NULL)) {
		if (zd_ring_dequeue(evd->draining, out))
			return true;
		zd_ring_destroy(evd->draining);
		zd_evd_set_draining(evd, NULL);
	}
	ring = evd->ring;
	if (ZD_LIKELY(zd_ring_dequeue(ring, out)))
		return true;
	if (ZD_UNLIKELY(zd_evd_spilling(evd, memory_order_acquire))) {
		struct zd_spill *s;
		bool got = false;

		pthread_mutex_lock(&evd->spill_lock);
		/* A producer may have published into the ring before it saw
		 * the spill flag: it is older than the spill list. */
		if (zd_ring_dequeue(ring, out)) {
			got = true;
		} else if ((s = evd->spill_head) != NULL) {
			*out = s->ev;
			evd->spill_head = s->next;
			if (!evd->spill_head) {
				evd->spill_tail = NULL;
				zd_evd_state_set(evd, ZD_EVD_ST_SPILL, false,
						 memory_order_release);
			}
			free(s);
			got = true;
		}
		pthread_mutex_unlock(&evd->spill_lock);
		return got;
	}
	return false;
}

/* Events ready to dequeue: a claimed slot its producer has not published
 * yet does not count (zd_ring_count would), so the consumer never expects
 * an event it cannot take.  Consumer only; counts at most @limit per ring. */
static uint32_t evd_ready_upto(struct zd_evd *evd, unsigned limit)
{
	uint32_t n = zd_ring_ready(evd->ring, limit);

	if (evd->draining)
		n += zd_ring_ready(evd->draining, limit);
	if (zd_evd_spilling(evd, memory_order_acquire)) {
		pthread_mutex_lock(&evd->spill_lock);
		for (struct zd_spill *s = evd->spill_head; s; s = s->next)
			n++;
		pthread_mutex_unlock(&evd->spill_lock);
	}
	return n;
}

uint32_t zd_evd_ready(struct zd_evd *evd)
{
	return evd_ready_upto(evd, 1);
}

/* Solicited mode: whether a ready event notifies (zd_evd_ev_notifies).
 * Ring positions found quiet are not looked at again.  Consumer only. */
static bool evd_notify_ready(struct zd_evd *evd)
{
	bool marks = evd->marks_solicited;
	struct zd_ring *ring = evd->ring;
	DAT_EVENT ev;
	uint64_t pos;
	bool found = false;

	if (evd->draining)
		for (pos = zd_ring_head(evd->draining); zd_ring_peek_pos(evd->draining, pos, &ev);
		     pos++)
			if (zd_evd_ev_notifies(&ev, marks))
				return true;
	pos = ZD_MAX(zd_ring_head(ring), evd->quiet_upto);
	for (; zd_ring_peek_pos(ring, pos, &ev); pos++) {
		if (zd_evd_ev_notifies(&ev, marks))
			return true;
		evd->quiet_upto = pos + 1;
	}
	if (zd_evd_spilling(evd, memory_order_acquire)) {
		pthread_mutex_lock(&evd->spill_lock);
		for (struct zd_spill *s = evd->spill_head; s && !found; s = s->next)
			found = zd_evd_ev_notifies(&s->ev, marks);
		pthread_mutex_unlock(&evd->spill_lock);
	}
	return found;
}

/* What dat_evd_wait waits for: @threshold events, or in solicited mode
 * (threshold 1) a notification event. */
static bool evd_wait_ready(struct zd_evd *evd, DAT_COUNT threshold, bool sol)
{
	if (sol)
		return evd_notify_ready(evd);
	return evd_ready_upto(evd, (unsigned)threshold) >= (uint32_t)threshold;
}

/* Approximate count for DAT's nmore (claimed-but-unpublished included). */
static uint32_t evd_count(struct zd_evd *evd)
{
	uint32_t n = zd_ring_count(evd->ring);

	if (evd->draining)
		n += zd_ring_count(evd->draining);
	return n + (zd_evd_spilling(evd, memory_order_acquire) ? 1 : 0);
}

DAT_RETURN zd_evd_take(struct zd_evd *evd, DAT_EVENT *out)
{
	return evd_take(evd, out) ? DAT_SUCCESS : DAT_QUEUE_EMPTY;
}

/* Every check, then the ring (the one drained after a resize first),
 * the spill list, and one poll of the CQ. */
__attribute__((noinline)) DAT_RETURN zd_evd_dequeue_checked(DAT_EVD_HANDLE evd_handle,
							     DAT_EVENT *event)
{
	struct zd_evd *evd;
	DAT_RETURN ret;

	EVD_GET_OR_RETURN(evd, evd_handle);
	if (ZD_UNLIKELY(!event))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (ZD_UNLIKELY(zd_evd_has_waiter(evd, memory_order_relaxed))) {
		/* Not the consumer (that one waits): an atomic add. */
		__atomic_fetch_add(&evd->tally[ZD_EVD_DQ_REFUSED], 1, __ATOMIC_RELAXED);
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
	}
	if (evd_take(evd, event)) {
		zd_evd_tally(evd, ZD_EVD_DQ_FOUND);
		return DAT_SUCCESS;
	}
	if (!evd->cq_poll) {
		/* No CQ to poll here: what a producer posted meanwhile, or
		 * nothing.  A status, not a failure: plain DAT_QUEUE_EMPTY, as
		 * the spec names it (dtest -p polls with `== DAT_QUEUE_EMPTY`;
		 * DAT_GET_TYPE also works). */
		ret = zd_evd_take(evd, event);
		zd_evd_tally(evd, ret == DAT_SUCCESS ? ZD_EVD_DQ_FOUND : ZD_EVD_DQ_EMPTY);
		return ret;
	}
	zd_evd_tally(evd, ZD_EVD_DQ_POLL);
	zd_evd_progress(evd);
	return zd_evd_take(evd, event);
}

DAT_RETURN zd_evd_ring_take(struct zd_evd *evd, DAT_EVENT *event)
{
	return zd_ring_dequeue(evd->ring, event) ? DAT_SUCCESS : DAT_QUEUE_EMPTY;
}

DAT_RETURN zd_evd_dequeue(DAT_EVD_HANDLE evd_handle, DAT_EVENT *event)
{
	return zd_evd_dequeue_entry(evd_handle, event, NULL);
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

DAT_RETURN zd_evd_wait(DAT_EVD_HANDLE evd_handle, DAT_TIMEOUT timeout, DAT_COUNT threshold,
		       DAT_EVENT *event, DAT_COUNT *nmore)
{
	struct zd_evd *evd;
	uint64_t deadline = 0;
	DAT_RETURN ret;
	bool sol;

	EVD_GET_OR_RETURN(evd, evd_handle);
	if (threshold <= 0 || threshold > evd->qlen)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (!event)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (!nmore)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	if (!atomic_load(&evd->enabled))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_DISABLED);
	if (!atomic_load(&evd->waitable))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
	/* Consumer-controlled notification wants threshold 1 (dat_evd_wait(3DAT)). */
	sol = atomic_load_explicit(&evd->solicited_eps, memory_order_relaxed) > 0;
	if (sol && threshold != 1)
		return DAT_ERROR(DAT_INVALID_STATE, DAT_NO_SUBTYPE);
	if (atomic_fetch_or(&evd->state, ZD_EVD_ST_WAITER) & ZD_EVD_ST_WAITER)
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
	zd_evd_tally(evd, ZD_EVD_WAITS);  /* the consumer now: the waiter bit is ours */

	if (timeout != DAT_TIMEOUT_INFINITE)
		deadline = now_us() + timeout;
	for (;;) {
		uint64_t left = ZD_WAIT_INFINITE;
		uint32_t ticket;

		zd_evd_progress(evd);
		if (evd_wait_ready(evd, threshold, sol) && evd_take(evd, event)) {
			ret = DAT_SUCCESS;
			break;
		}
		/* Announce the sleep, then look again: an event published after
		 * the announcement wakes us (zd_waiter.h, Dekker pairing). */
		ticket = zd_waiter_prepare(&evd->waiter);
		if (evd->cq_poll && evd->cq_arm) {
			evd->cq_arm(evd);
			zd_evd_tally(evd, ZD_EVD_WAITS_ARMED);
		}
		zd_evd_progress(evd);
		if (evd_wait_ready(evd, threshold, sol)) {
			zd_waiter_cancel(&evd->waiter);
			continue;
		}
		if (!atomic_load(&evd->waitable) || !atomic_load(&evd->enabled)) {
			zd_waiter_cancel(&evd->waiter);
			ret = DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
			break;
		}
		if (deadline) {
			uint64_t now = now_us();
			if (now >= deadline) {
				zd_waiter_cancel(&evd->waiter);
				ret = DAT_ERROR(DAT_TIMEOUT_EXPIRED, DAT_NO_SUBTYPE);
				break;
			}
			left = deadline - now;
		} else if (timeout == 0) {
			zd_waiter_cancel(&evd->waiter);
			ret = DAT_ERROR(DAT_TIMEOUT_EXPIRED, DAT_NO_SUBTYPE);
			break;
		}
		zd_evd_tally(evd, ZD_EVD_WAITS_BLOCKED);
		zd_waiter_wait(&evd->waiter, ticket, left);
	}
	*nmore = (DAT_COUNT)(ret == DAT_SUCCESS ? evd_count(evd)
						 : evd_ready_upto(evd, (unsigned)evd->qlen));
	zd_evd_state_set(evd, ZD_EVD_ST_WAITER, false, memory_order_seq_cst);
	return ret;
}

/* ---- lifetime and state ---- */

DAT_RETURN zd_evd_init(struct zd_evd *evd, DAT_EVD_FLAGS flags, DAT_COUNT qlen)
{
	evd->flags = flags;
	evd->qlen = qlen;
	evd->ring = zd_ring_create_in((uint32_t)qlen, &zd_ring_mem_evd);
	if (!evd->ring)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	zd_waiter_init(&evd->waiter, 0);
	pthread_mutex_init(&evd->spill_lock, NULL);
	atomic_store(&evd->enabled, 1);
	atomic_store(&evd->waitable, 1);
	zd_evd_set_poll_one(evd, NULL);
	return DAT_SUCCESS;
}

void zd_evd_fini(struct zd_evd *evd)
{
	struct zd_spill *s;

	zd_ring_destroy(evd->ring);
	if (evd->draining)
		zd_ring_destroy(evd->draining);
	while ((s = evd->spill_head) != NULL) {
		evd->spill_head = s->next;
		free(s);
	}
	pthread_mutex_destroy(&evd->spill_lock);
	zd_waiter_fini(&evd->waiter);
}

void zd_evd_retire(struct zd_evd *evd)
{
	/* Foreign producers still inside zd_evd_post leave before the ring
	 * goes. */
	zd_synchronize_rcu();
	zd_evd_fini(evd);
}

DAT_RETURN zd_evd_enable(DAT_EVD_HANDLE evd_handle)
{
	struct zd_evd *evd;

	EVD_GET_OR_RETURN(evd, evd_handle);
	atomic_store(&evd->enabled, 1);
	return DAT_SUCCESS;
}

DAT_RETURN zd_evd_disable(DAT_EVD_HANDLE evd_handle)
{
	struct zd_evd *evd;

	EVD_GET_OR_RETURN(evd, evd_handle);
	atomic_store(&evd->enabled, 0);
	zd_waiter_notify_all(&evd->waiter);
	return DAT_SUCCESS;
}

DAT_RETURN zd_evd_set_unwaitable(DAT_EVD_HANDLE evd_handle)
{
	struct zd_evd *evd;

	EVD_GET_OR_RETURN(evd, evd_handle);
	atomic_store(&evd->waitable, 0);
	/* A thread blocked in dat_evd_wait returns DAT_INVALID_STATE. */
	zd_waiter_notify_all(&evd->waiter);
	return DAT_SUCCESS;
}

DAT_RETURN zd_evd_clear_unwaitable(DAT_EVD_HANDLE evd_handle)
{
	struct zd_evd *evd;

	EVD_GET_OR_RETURN(evd, evd_handle);
	atomic_store(&evd->waitable, 1);
	return DAT_SUCCESS;
}

DAT_RETURN zd_evd_post_se(DAT_EVD_HANDLE evd_handle, const DAT_EVENT *event)
{
	struct zd_evd *evd;
	DAT_EVENT ev;

	EVD_GET_OR_RETURN(evd, evd_handle);
	if (!(evd->flags & DAT_EVD_SOFTWARE_FLAG))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	if (!event || event->event_number != DAT_SOFTWARE_EVENT)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	ev = *event;
	ev.evd_handle = evd;
	return zd_evd_post(evd, &ev, 0);
}

DAT_RETURN zd_evd_resize_check(struct zd_evd *evd, DAT_COUNT qlen)
{
	if (zd_evd_has_waiter(evd, memory_order_seq_cst))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
	if (evd_count(evd) > (uint32_t)qlen)
		return DAT_ERROR(DAT_INVALID_STATE, DAT_NO_SUBTYPE);
	return DAT_SUCCESS;
}

DAT_RETURN zd_evd_resize_ring(struct zd_evd *evd, DAT_COUNT qlen)
{
	struct zd_ring *fresh, *old;

	/* Finish any earlier drain first so at most one old ring exists. */
	if (evd->draining) {
		fresh = zd_ring_create_in((uint32_t)qlen, &zd_ring_mem_evd);
		if (!fresh)
			return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
		if (zd_ring_move(fresh, evd->draining) < 0) {
			zd_ring_destroy(fresh);
			return DAT_ERROR(DAT_INVALID_STATE, DAT_NO_SUBTYPE);
		}
		/* fresh now holds the oldest events: it becomes the drain. */
		zd_ring_destroy(evd->draining);
		zd_evd_set_draining(evd, fresh);
	}
	fresh = zd_ring_create_in((uint32_t)qlen, &zd_ring_mem_evd);
	if (!fresh)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	/* Direct producers (zd_evd_cq.h) out of the old ring first: they
	 * fall back to their local rings until direct_off clears.  A pinned
	 * poller (zd_poller.c poll_evd) is one of them: it skips the EVD
	 * meanwhile and its completions wait in the CQ. */
	atomic_store_explicit(&evd->direct_off, 1, memory_order_seq_cst);
	/* seq_cst: the Dekker load of this side (zd_evd_cq.h); also acquire,
	 * pairing with the producers' release leaving: their slots in the old
	 * ring are published before we move it. */
	while (atomic_load_explicit(&evd->direct_users, memory_order_seq_cst))
		sched_yield();
	old = evd->ring;
	/* release: pairs with the acquire load in zd_evd_post, so a foreign
	 * producer sees the fresh ring initialised (rcu_assign_pointer is a
	 * call into uninstrumented liburcu: TSan would see no ordering). */
	__atomic_store_n(&evd->ring, fresh, __ATOMIC_RELEASE);
	evd->quiet_upto = 0;  /* positions of the fresh ring */
	/* After this no producer is inside the old ring; the consumer takes
	 * what it holds before anything in the new one. */
	zd_synchronize_rcu();
	/* release: pairs with the direct producers' acquire load of it. */
	atomic_store_explicit(&evd->direct_off, 0, memory_order_release);
	if (evd->draining) {
		if (zd_ring_move(evd->draining, old) < 0) {
			/* Events arrived since the check: keep them all. */
			uint32_t n = zd_ring_count(evd->draining) + zd_ring_count(old);
			struct zd_ring *both = zd_ring_create_in(n, &zd_ring_mem_evd);
			if (!both)
				return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
			zd_ring_move(both, evd->draining);
			zd_ring_move(both, old);
			zd_ring_destroy(evd->draining);
			zd_evd_set_draining(evd, both);
		}
		zd_ring_destroy(old);
	} else {
		zd_evd_set_draining(evd, old);
	}
	evd->qlen = qlen;
	return DAT_SUCCESS;
}
