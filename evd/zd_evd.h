/*
 * Event dispatcher: a DAT EVD is one lock-free MPSC ring of DAT events plus
 * the waiter its consumer sleeps on.
 *
 * Producers:
 *  - the consumer itself: under manual progress dat_evd_dequeue/wait call
 *    the device's cq_poll, which writes completions straight into the ring
 *    (never more than it has room for: the rest stay in the CQ); on an
 *    empty ring dat_evd_dequeue calls the device's cq_poll_one instead,
 *    which hands the next completion straight to the caller when nothing
 *    older waits (zd_evd_direct_ok);
 *  - with pinned pollers (ZDAPL_POLLERS, zd_poller.h) the EVD's poller
 *    instead of the consumer: it alone calls cq_poll, inside the
 *    direct_users handshake below so that dat_evd_resize can swap rings,
 *    and wakes the waiters; the consumer then only takes from the ring;
 *  - foreign threads (CM thread, dat_evd_post_se callers) through
 *    zd_evd_post(), inside a urcu-bp read-side section so that
 *    dat_evd_resize can swap rings under them.
 * A foreign event that finds the ring full is not dropped: it goes to a spill
 * list (and every later event after it, foreign or polled, keeping order)
 * and the first spill is reported (evd->on_overflow: core posts
 * DAT_ASYNC_ERROR_EVD_OVERFLOW to the IA's async EVD).
 *
 * Layering: core/ (the DAT object layer: the IA and the objects it owns,
 * the device ops table) sits above evd/ (the event machinery: ring,
 * post/take/dequeue/wait, waiter, CNO wake-up, pinned pollers) and calls
 * down into it; evd/ includes of core/ only the base both sit on
 * (zd_obj.h, zd_compiler.h, zd_log.h), never zd_ia.h, zd_api.h or
 * zd_device.h.  So the EVD as an IA object -- handle and limit checks,
 * the IA's children, query, the device's CQ made, resized and destroyed
 * -- is core/zd_evd_obj.c's (the CNO's: core/zd_cno_obj.c), around
 * zd_evd_init/zd_evd_fini here; what evd/ calls of the layers above at
 * run time, core stores in the EVD when it creates it: the device's
 * cq_poll, cq_poll_one and cq_arm, and on_overflow.  Why: the machinery
 * is understood and tested without the objects that own it, an object
 * layer change cannot reach into it, and its hot paths load nothing of
 * the IA (one pointer in the EVD per device call).
 */
#ifndef ZD_EVD_H
#define ZD_EVD_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <netinet/in.h>   /* dat_ib_extensions.h uses struct sockaddr_in6 */
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>

#include "core/zd_obj.h"
#include "evd/zd_ring.h"
#include "evd/zd_waiter.h"

struct zd_cno;
struct zd_spill;

/* What an EVD's consumer counts for dat_ib_query_counters (core/zd_counters.c
 * turns them into the DCNT_EVD_* values): each dat_evd_dequeue by the way
 * it went, as OFED dapl counts them -- an event already queued, or a poll
 * of the device's CQ (whatever it found: telling would cost every such
 * dequeue its tail call), or nothing and no CQ to poll -- and dat_evd_wait. */
enum zd_evd_tally {
	ZD_EVD_DQ_FOUND,       /* an event already in the EVD, no poll */
	ZD_EVD_DQ_POLL,        /* polled the device's CQ */
	ZD_EVD_DQ_EMPTY,       /* none, and no CQ of its own to poll */
	ZD_EVD_DQ_REFUSED,     /* refused: a thread waits in dat_evd_wait (atomic:
				* the waiter is the consumer) */
	ZD_EVD_WAITS,          /* dat_evd_wait calls that got to wait */
	ZD_EVD_WAITS_BLOCKED,  /* times one slept */
	ZD_EVD_WAITS_ARMED,    /* times one armed the CQ to be woken */
	ZD_EVD_TALLIES
};

struct zd_evd {
	struct zd_obj obj;
	/* read-mostly, one line: what the hot path looks at */
	struct zd_ring *ring;             /* foreign producers: acquire load, in rcu_read_lock */
	/* manual progress: the device's cq_poll (NULL: no CQ, or a pinned
	 * poller polls it, zd_poller.h: the consumer only takes) */
	int (*cq_poll)(struct zd_evd *evd, int budget);
	DAT_RETURN (*cq_poll_one)(struct zd_evd *evd, DAT_EVENT *out);  /* optional */
	struct zd_cno *_Atomic cno;
	DAT_EVD_FLAGS flags;
	DAT_COUNT qlen;
	/* ZD_EVD_ST_*: what takes dat_evd_dequeue off its fast path, one
	 * word so that it costs one load there (evd/zd_evd_entry.h) */
	_Atomic uint32_t state;
	_Atomic int enabled;
	_Atomic int waitable;
	_Atomic int overflowed;           /* ever spilled: reported once */
	/* Solicited wait (dat_ep_create(3DAT), dat_evd_wait(3DAT)): EPs whose
	 * recv completion flags are DAT_COMPLETION_SOLICITED_WAIT_FLAG and
	 * whose recv EVD this is.  While nonzero, dat_evd_wait needs threshold
	 * 1 and returns only once the queue holds a notification event: a
	 * solicited receive, any error, any other event. */
	_Atomic int solicited_eps;
	/* Set by a device at cq_create when its cq_poll marks solicited
	 * receives (zd_evd_ev_set_solicited); without it every event notifies. */
	int marks_solicited;

	struct zd_waiter waiter;

	/* slow path state */
	struct zd_ring *draining;         /* old ring after a resize, consumer only */
	pthread_mutex_t spill_lock;
	struct zd_spill *spill_head, *spill_tail;
	void *cq_priv;                    /* the device's CQ */
	int (*dev_poll)(struct zd_evd *evd, int budget);  /* its cq_poll, always */
	struct zd_poller *poller;         /* the pinned poller polling it, or NULL */
	struct zd_evd *cno_next;          /* the CNO's list of EVDs */
	uint64_t quiet_upto;              /* consumer: ring positions known quiet */
	/* Set by core at creation, as cq_poll is: what evd/ calls of the
	 * layers above it (see file comment).  The device's cq_arm (NULL:
	 * none), for dat_evd_wait and dat_cno_wait; the report of the first
	 * spill (NULL: none), DAT_ASYNC_ERROR_EVD_OVERFLOW on the IA's async
	 * EVD.  Last: the fields above keep their cache lines. */
	void (*cq_arm)(struct zd_evd *evd);
	void (*on_overflow)(struct zd_evd *evd);

	/* Direct producers (zd_evd_cq_post_direct, and a pinned poller
	 * around its cq_poll): writers into the ring without urcu-bp.  Its own
	 * line: written by posters, read by dat_evd_resize only. */
	alignas(ZD_CACHE_LINE) _Atomic uint32_t direct_users;  /* inside the ring now */
	_Atomic uint32_t direct_off;      /* dat_evd_resize in progress */

	/* The consumer's tallies (enum zd_evd_tally): a line of their own,
	 * plain adds by the one consumer thread, so counting a dequeue writes
	 * no line a producer touches. */
	alignas(ZD_CACHE_LINE) uint64_t tally[ZD_EVD_TALLIES];
	/* Connection events posted here (DCNT_EVD_CONN_CALLBACK), atomic: the
	 * CM thread's or a dat_cr_accept caller's; and the counters' bases
	 * (core/zd_counters.h), written by resets only. */
	alignas(ZD_CACHE_LINE) _Atomic uint64_t conn_events;
	uint64_t cnt_base[DCNT_EVD_ALL_COUNTERS];
	/* A connection EVD: the EPs of other IAs it serves (core/zd_ep.c,
	 * under zd_cm.lock), detached when its own IA closes. */
	struct zd_ep *foreign_eps;
};
ZD_OBJ_FITS(EVD, struct zd_evd);

/* Posts an event from any thread (see file comment).  Returns DAT_SUCCESS,
 * or DAT_QUEUE_FULL when @spill_ok is 0 and the ring is full. */
DAT_RETURN zd_evd_post(struct zd_evd *evd, const DAT_EVENT *ev, int spill_ok);

void zd_evd_wake_cno(struct zd_evd *evd, struct zd_cno *cno);

/* Wakes whoever waits for @evd: its dat_evd_wait, and its CNO if the EVD
 * is enabled and nobody waits on it directly.  Every producer calls it
 * after publishing; while nobody sleeps and no CNO is attached it costs two
 * loads. */
static inline void zd_evd_wake(struct zd_evd *evd)
{
	struct zd_cno *cno;

	zd_waiter_notify(&evd->waiter);
	/* acquire: pairs with the release store in zd_cno_attach. */
	cno = atomic_load_explicit(&evd->cno, memory_order_acquire);
	if (ZD_UNLIKELY(cno != NULL))
		zd_evd_wake_cno(evd, cno);
}

/*
 * A receive completion's "solicited" mark lives in DAT_EVENT's padding after
 * event_number (the ring carries it byte for byte; consumers never look
 * there).  A device whose EVD has marks_solicited writes it, 0 or the
 * magic, on every receive completion it publishes.
 */
#define ZD_EVD_SOLICITED_MAGIC 0x534f4c31u  /* "SOL1" */
_Static_assert(offsetof(DAT_EVENT, evd_handle) >= sizeof(DAT_EVENT_NUMBER) + sizeof(uint32_t),
	       "DAT_EVENT has no padding after event_number");

static inline void zd_evd_ev_set_solicited(DAT_EVENT *ev, bool solicited)
{
	uint32_t v = solicited ? ZD_EVD_SOLICITED_MAGIC : 0;

	memcpy((char *)ev + sizeof(DAT_EVENT_NUMBER), &v, sizeof(v));
}

/* A successful receive completion: a plain DAT_DTO_RECEIVE, or a
 * DAT_IB_DTO_EVENT of an extension operation that consumed a receive (a
 * write's or a send's immediate data, a datagram). */
static inline bool zd_evd_ev_is_recv_ok(const DAT_EVENT *e)
{
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &e->event_data.dto_completion_event_data;

	if (d->status != DAT_DTO_SUCCESS)
		return false;
	if (e->event_number == DAT_DTO_COMPLETION_EVENT)
		return d->operation == DAT_DTO_RECEIVE;
	if (e->event_number != (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT)
		return false;
	switch ((int)d->operation) {
	case DAT_IB_DTO_RECV_IMMED:
	case DAT_IB_DTO_RECV_MSG_IMMED:
	case DAT_IB_DTO_RECV_UD:
	case DAT_IB_DTO_RECV_UD_IMMED:
		return true;
	default:
		return false;
	}
}

/* True when a consumer waiting in solicited mode is woken by @ev: all but
 * successful receive completions that are not marked solicited. */
static inline bool zd_evd_ev_notifies(const DAT_EVENT *e, bool marks)
{
	uint32_t v;

	if (!marks || !zd_evd_ev_is_recv_ok(e))
		return true;
	memcpy(&v, (const char *)e + sizeof(DAT_EVENT_NUMBER), sizeof(v));
	return v == ZD_EVD_SOLICITED_MAGIC;
}

/* Counts one of enum zd_evd_tally; the consumer only (one plain add). */
static ZD_ALWAYS_INLINE void zd_evd_tally(struct zd_evd *evd, enum zd_evd_tally t)
{
	evd->tally[t]++;
}

/* evd->state bits */
#define ZD_EVD_ST_WAITER 0x1u   /* a thread is inside dat_evd_wait */
#define ZD_EVD_ST_SPILL  0x2u   /* events wait in the spill list */
#define ZD_EVD_ST_DRAIN  0x4u   /* the ring of before a resize drains (evd->draining) */
#define ZD_EVD_ST_NOPOLL 0x8u   /* the consumer polls no CQ (cq_poll_one NULL) */

/* Events wait in the spill list (producers set it with release). */
static ZD_ALWAYS_INLINE bool zd_evd_spilling(const struct zd_evd *evd, memory_order mo)
{
	return atomic_load_explicit(&((struct zd_evd *)evd)->state, mo) & ZD_EVD_ST_SPILL;
}

/* A thread is inside dat_evd_wait on @evd. */
static inline bool zd_evd_has_waiter(const struct zd_evd *evd, memory_order mo)
{
	return atomic_load_explicit(&((struct zd_evd *)evd)->state, mo) & ZD_EVD_ST_WAITER;
}

/* Sets or clears state bit @bit (@mo: the order the old flag had). */
static inline void zd_evd_state_set(struct zd_evd *evd, uint32_t bit, bool on, memory_order mo)
{
	if (on)
		atomic_fetch_or_explicit(&evd->state, bit, mo);
	else
		atomic_fetch_and_explicit(&evd->state, ~bit, mo);
}

/* The consumer's direct poll (NULL: none), with its state bit; before the
 * EVD is handed out, or by its consumer. */
static inline void zd_evd_set_poll_one(struct zd_evd *evd,
				       DAT_RETURN (*fn)(struct zd_evd *, DAT_EVENT *))
{
	evd->cq_poll_one = fn;
	zd_evd_state_set(evd, ZD_EVD_ST_NOPOLL, fn == NULL, memory_order_relaxed);
}

/* The ring of before a resize, draining (NULL: none), with its state bit;
 * consumer (or the resizer, which excludes it). */
static inline void zd_evd_set_draining(struct zd_evd *evd, struct zd_ring *r)
{
	evd->draining = r;
	zd_evd_state_set(evd, ZD_EVD_ST_DRAIN, r != NULL, memory_order_relaxed);
}

/* For a device's cq_poll_one, after it read (with its acquire barrier) the
 * completion it means to hand straight to the consumer: true when nothing
 * older waits in the EVD, so skipping the ring keeps EVD order.  The ring
 * must be drained (every claimed position taken: a producer between claim
 * and publish holds an older event) and nothing spilled.  Read after the
 * completion: an event claimed before that completion was produced (happens
 * before it) is then seen here.  The caller checked evd->draining.
 * Consumer only. */
static ZD_ALWAYS_INLINE bool zd_evd_direct_ok(const struct zd_evd *evd)
{
	/* acquire: pairs with zd_evd_post's release setting the spill bit. */
	return zd_ring_drained(evd->ring) && !zd_evd_spilling(evd, memory_order_acquire);
}

/* Room for cq_poll: an estimate (producers may take some meanwhile; a
 * device that then fails a claim spills).  The consumer, or the EVD's
 * pinned poller inside the direct_users handshake (the consumer may take
 * meanwhile: room only grows). */
static inline int zd_evd_room(const struct zd_evd *evd)
{
	return (int)(zd_ring_capacity(evd->ring) - zd_ring_count(evd->ring));
}

/* ---- the EVD's life, for the DAT object around it (core/zd_evd_obj.c) ---- */

/* Sets up the event machinery of a zeroed @evd: a ring of @qlen events,
 * the waiter, the spill list; enabled, waitable, no CQ to poll. */
DAT_RETURN zd_evd_init(struct zd_evd *evd, DAT_EVD_FLAGS flags, DAT_COUNT qlen);
/* Frees what zd_evd_init, resizes and spills set up, for an EVD no
 * producer can reach: one never handed out (else zd_evd_retire). */
void zd_evd_fini(struct zd_evd *evd);
/* zd_evd_fini of an EVD whose handle is dead (zd_obj_kill), once the
 * foreign producers still inside zd_evd_post have left. */
void zd_evd_retire(struct zd_evd *evd);

/* dat_evd_resize in two steps around the device's CQ resize: the checks
 * of the EVD's own state (nobody waits in dat_evd_wait, the events it
 * holds fit in @qlen), then the swap to a ring of @qlen events (events
 * kept, in order). */
DAT_RETURN zd_evd_resize_check(struct zd_evd *evd, DAT_COUNT qlen);
DAT_RETURN zd_evd_resize_ring(struct zd_evd *evd, DAT_COUNT qlen);

/* Nonzero when the consumer can dequeue an event now (no progress made). */
uint32_t zd_evd_ready(struct zd_evd *evd);

/* The next event of the EVD's queues (resize drain, ring, spill list) into
 * @out: DAT_SUCCESS, or DAT_QUEUE_EMPTY.  No progress.  Consumer only. */
DAT_RETURN zd_evd_take(struct zd_evd *evd, DAT_EVENT *out);

/* Polls the EVD's CQ (manual progress); consumer thread only. */
void zd_evd_progress(struct zd_evd *evd);

#endif
