/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * zd_ring: bounded lock-free MPSC ring of DAT_EVENT, the queue behind an EVD.
 *
 * Many producers (CQ pollers, the CM thread, the consumer itself under manual
 * progress) enqueue; one consumer dequeues. Enqueue never blocks and never
 * drops: it returns false when the ring is full and the caller decides.
 *
 * Layout
 *   Every slot is one 64-byte, 64-aligned cache line: the first 56 bytes of
 *   the DAT_EVENT (event_number, evd_handle, event_data, at their DAT_EVENT
 *   offsets) and, in its last 8 bytes, the slot's sequence word. The
 *   producer's stores (payload, then seq) all hit that one line back to
 *   back, and it is the line the consumer polls: one line moves per event,
 *   as in a plain cache-line ping-pong. The producer block (tail and the
 *   producers' cached copy of head), the consumer block (head and the peek
 *   copy) and the read-only geometry each keep their own 128-byte block
 *   (adjacent-line prefetch pairs); the slot array starts on a 128-byte
 *   boundary and zd_ring_memsize() is a multiple of 128. Neighbouring slots
 *   do share a prefetch pair; that is harmless here: slot lines are only
 *   read by the consumer, in order, and a producer's write has to invalidate
 *   the consumer's copy from the previous lap anyway.
 *
 *   Extension events (event_number >= DAT_EXTENSION_EVENT: the IB
 *   extensions' immediate data, atomics, UD connections) also carry
 *   event_extension_data, 64 more bytes, in a side array of one 64-byte
 *   line per slot after the slot array (zd_ring__ext): the producer writes
 *   it before publishing the slot, the consumer copies it out after seeing
 *   the slot published, under the same seq pair. Other events never touch
 *   that array (its pages stay untouched, so unbacked, until an extension
 *   event uses them, when the memory is fresh: aligned_alloc's mmap, or
 *   pool pages no earlier queue touched, evd/zd_ring_mem.h), and come out
 *   with event_extension_data all zero.
 *   Everything round-trips byte for byte, padding included.
 *
 * Protocol
 *   Positions are free-running 64-bit counters (they never wrap); the slot of
 *   position pos is pos & mask.
 *   - Claim: a producer may take position pos only if pos - head < capacity
 *     (the consumer is done with pos - capacity, the slot's previous tenant).
 *     It checks against head_cache, a possibly stale copy of head kept on the
 *     producers' line (stale only means too small, i.e. conservative), reads
 *     the consumer's head only when that copy says full, then claims pos with
 *     a CAS on tail.
 *   - Publish: write the event, then store seq = pos + 1 (release).
 *   - Consume: the consumer takes position head only if its slot's seq equals
 *     head + 1 (acquire), copies the event out, then advances head (release),
 *     which is what frees the slot. The consumer never writes a slot, so slot
 *     lines only ever move from producers to the consumer.
 *   A producer that has claimed a position and is preempted before publishing
 *   leaves seq at an older lap's value, so the ring looks empty at that
 *   position: nothing half-written is ever read and the events claimed after
 *   it wait behind it. Events appear in claim order, hence each producer's in
 *   its own program order. Other producers are never held up by it (they
 *   only see the ring fill up).
 *
 * Threads
 *   zd_ring_enqueue, zd_ring_enqueue_bulk
 *                         any thread, concurrently, including the consumer
 *                         (manual progress enqueues into its own EVD; enqueue
 *                         never waits, so that cannot deadlock).
 *   zd_ring_dequeue, zd_ring_dequeue_burst, zd_ring_peek, zd_ring_drop,
 *   zd_ring_ready         the consumer only: one thread at a time; if the
 *                         consumer role moves between threads, the caller
 *                         orders the hand-over (lock, join, ...).
 *   zd_ring_count, zd_ring_capacity   any thread.
 *
 * Nothing here locks, sleeps, makes system calls or allocates; waking a
 * sleeping consumer is zd_waiter's job (see zd_waiter.h for the fence a
 * producer needs between zd_ring_enqueue and zd_waiter_notify).
 */
#ifndef ZD_RING_H
#define ZD_RING_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <dat2/udat.h>

#include "zd_ring_arch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Capacity bounds of zd_ring_create/zd_ring_init (the top is 8 GiB of
 * slots). */
#define ZD_RING_MIN_CAPACITY 1u
#define ZD_RING_MAX_CAPACITY (1u << 26)

/* Bytes of a DAT_EVENT a slot carries: everything before
 * event_extension_data (event_number, its padding, evd_handle, event_data). */
#define ZD_RING_EV_BYTES offsetof(DAT_EVENT, event_extension_data)
/* Bytes of an extension event's side line: event_extension_data. */
#define ZD_RING_EXT_BYTES sizeof(((DAT_EVENT *)0)->event_extension_data)

/* Does this event carry event_extension_data through the ring? */
static inline bool zd_ring_is_ext(DAT_EVENT_NUMBER n)
{
	return n >= DAT_EXTENSION_EVENT;
}

/*
 * One cache line. The payload fields mirror the head of DAT_EVENT at the same
 * offsets, so the ring copies ZD_RING_EV_BYTES bytes straight between a
 * DAT_EVENT and a slot.
 */
struct zd_ring_slot {
	DAT_EVENT_NUMBER event_number;
	DAT_EVD_HANDLE evd_handle;
	DAT_EVENT_DATA event_data;
	/* Position + 1 of the event last published here; 0 before the first.
	 * Last: the producer's final store and the consumer's poll, same line
	 * as the payload. */
	_Atomic uint64_t seq;
} __attribute__((aligned(ZD_CACHE_LINE)));

_Static_assert(offsetof(struct zd_ring_slot, event_number) ==
	       offsetof(DAT_EVENT, event_number) &&
	       offsetof(struct zd_ring_slot, evd_handle) ==
	       offsetof(DAT_EVENT, evd_handle) &&
	       offsetof(struct zd_ring_slot, event_data) ==
	       offsetof(DAT_EVENT, event_data),
	       "slot payload must mirror the head of DAT_EVENT");
_Static_assert(offsetof(struct zd_ring_slot, seq) == ZD_RING_EV_BYTES,
	       "the payload is exactly DAT_EVENT up to event_extension_data");
_Static_assert(ZD_RING_EV_BYTES + sizeof(uint64_t) <= ZD_CACHE_LINE,
	       "DAT_EVENT head grew: payload and seq no longer fit one line");
_Static_assert(sizeof(struct zd_ring_slot) == ZD_CACHE_LINE,
	       "a slot must be exactly one cache line");
_Static_assert(ZD_CACHE_GUARD % ZD_CACHE_LINE == 0,
	       "the slot array's 128-byte alignment must be a whole number of slots");
_Static_assert(ZD_RING_EXT_BYTES == ZD_CACHE_LINE,
	       "an extension event's side data is one line");

/* Where zd_ring_create_in takes a ring's memory and gives it back
 * (registered pool memory for the library's EVDs, mem/zd_qmem.h): alloc
 * returns size bytes aligned to align, or NULL; free gets the same size. */
struct zd_ring_mem_ops {
	void *(*alloc)(size_t size, size_t align);
	void (*free)(void *p, size_t size);
};

struct zd_ring {
	/* Read-only after init, shared clean by every thread. */
	alignas(ZD_CACHE_GUARD) uint64_t mask;   /* capacity - 1 */
	uint32_t capacity;
	uint32_t flags;                          /* ZD_RING_F_* (private) */
	const struct zd_ring_mem_ops *mem;       /* zd_ring_create_in's, or NULL */

	/* Producers only. */
	alignas(ZD_CACHE_GUARD) _Atomic uint64_t tail;  /* next position to claim */
	_Atomic uint64_t head_cache;             /* some past value of head */

	/* Consumer only (producers read head when head_cache says full). */
	alignas(ZD_CACHE_GUARD) _Atomic uint64_t head;  /* next position to take */
	/* zd_ring_peek's copy of the event at head (a slot holds no whole
	 * DAT_EVENT to point into); its event_extension_data is zero unless
	 * it holds an extension event. */
	DAT_EVENT peeked;

	alignas(ZD_CACHE_GUARD) struct zd_ring_slot slots[];
};

_Static_assert(offsetof(struct zd_ring, slots) -
	       offsetof(struct zd_ring, head) == ZD_CACHE_GUARD,
	       "the consumer block (head + peek copy) must fit one line pair");

/* ---- control path (zd_ring.c) ------------------------------------------ */

/* Bytes needed for a ring of exactly 'capacity' slots (a power of two,
 * ZD_RING_MIN_CAPACITY..ZD_RING_MAX_CAPACITY) and their extension lines,
 * rounded up to a multiple of ZD_CACHE_GUARD; 0 if capacity is invalid. */
size_t zd_ring_memsize(uint32_t capacity);

/* Initialise caller-provided memory: zd_ring_memsize(capacity) bytes aligned
 * to ZD_CACHE_GUARD. Returns 0 or -EINVAL (capacity not a power of two, out
 * of range, or memory misaligned). */
int zd_ring_init(struct zd_ring *r, uint32_t capacity);

/* Allocate a ring of at least min_capacity slots (rounded up to a power of
 * two, and to ZD_RING_MIN_CAPACITY) from aligned_alloc. NULL with errno
 * EINVAL (0 or above the maximum) or ENOMEM. Release with zd_ring_destroy(). */
struct zd_ring *zd_ring_create(uint32_t min_capacity);
/* zd_ring_create with the memory from mem (kept: it must outlive the ring);
 * NULL mem means aligned_alloc. */
struct zd_ring *zd_ring_create_in(uint32_t min_capacity, const struct zd_ring_mem_ops *mem);
/* Frees a ring from zd_ring_create(_in) through the ops it came from
 * (no-op for zd_ring_init memory, or NULL). */
void zd_ring_destroy(struct zd_ring *r);

/* Resize helper: drain every event of src into dst, in order. The caller
 * guarantees that no thread enqueues to or dequeues from either ring for the
 * duration (producers quiesced, consumer is the caller). Events already in dst
 * stay ahead of the moved ones. Returns the number of events moved, or
 *   -ENOSPC  dst cannot take them all (nothing moved),
 *   -EBUSY   src holds a claimed but unpublished slot, i.e. a producer is not
 *            quiesced (nothing moved). */
int zd_ring_move(struct zd_ring *dst, struct zd_ring *src);

/* ---- hot path ------------------------------------------------------------ */

static inline uint32_t zd_ring_capacity(const struct zd_ring *r)
{
	return r->capacity;
}

/*
 * Producer: claim n consecutive positions; returns the first. False if fewer
 * than n slots are free. Internal to the enqueue functions.
 */
static inline bool zd_ring__claim(struct zd_ring *r, unsigned n, uint64_t *first)
{
	/* head_cache before tail: head_cache <= head <= tail at every instant,
	 * so pos - head never underflows on the first round.
	 * acquire: pairs with the release store of head_cache below, which
	 * forwards the consumer's release of head (the slots below it are
	 * done with) to producers that did not read head themselves. */
	uint64_t head = atomic_load_explicit(&r->head_cache, memory_order_acquire);
	/* relaxed: a starting guess, validated by the CAS. */
	uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);

	for (;;) {
		/* Signed: a stale pos (another producer moved tail) can lag a
		 * freshly read head; then this is negative and the CAS fails. */
		if (zd_unlikely((int64_t)(pos + n - head) > (int64_t)r->capacity)) {
			/* acquire: pairs with the consumer's release store of
			 * head: its copy-out of every slot below head happens
			 * before our overwrite. */
			head = atomic_load_explicit(&r->head, memory_order_acquire);
			if ((int64_t)(pos + n - head) > (int64_t)r->capacity)
				return false;   /* full (for n) */
			/* release: pairs with the acquire load above. A racing
			 * producer may store an older head; that is only
			 * conservative. */
			atomic_store_explicit(&r->head_cache, head, memory_order_release);
		}
		/* relaxed: the CAS only arbitrates among producers; the payload
		 * is ordered by the head acquire above and the seq release in
		 * the caller. On failure pos is reloaded from tail. */
		if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + n,
				memory_order_relaxed, memory_order_relaxed)) {
			*first = pos;
			return true;
		}
	}
}

/* The extension line of position @pos (after the slot array). */
static inline DAT_UINT64 *zd_ring__ext(const struct zd_ring *r, uint64_t pos)
{
	return (DAT_UINT64 *)(void *)(r->slots + r->capacity) +
	       (pos & r->mask) * (ZD_RING_EXT_BYTES / sizeof(DAT_UINT64));
}

/* Payload copies between a DAT_EVENT and the slot (and extension line) of
 * position @pos (the mirrored head of the event; see ZD_RING_EV_BYTES).
 * Internal. */
static inline void zd_ring__put(struct zd_ring *r, uint64_t pos, struct zd_ring_slot *s,
				const DAT_EVENT *ev)
{
	memcpy((void *)s, ev, ZD_RING_EV_BYTES);
	if (zd_unlikely(zd_ring_is_ext(ev->event_number)))
		memcpy(zd_ring__ext(r, pos), ev->event_extension_data, ZD_RING_EXT_BYTES);
}

static inline void zd_ring__get(const struct zd_ring *r, uint64_t pos, DAT_EVENT *out,
				const struct zd_ring_slot *s)
{
	memcpy(out, (const void *)s, ZD_RING_EV_BYTES);
	if (zd_unlikely(zd_ring_is_ext(out->event_number)))
		memcpy(out->event_extension_data, zd_ring__ext(r, pos), ZD_RING_EXT_BYTES);
	else
		memset(out->event_extension_data, 0, ZD_RING_EXT_BYTES);
}

/*
 * Enqueue one event (multi-producer safe, including the consumer's thread).
 * Returns false, leaving the ring untouched, if it is full: capacity
 * positions are claimed and not yet consumed (published or not).
 * ev->event_extension_data is stored for extension events only (Layout).
 */
static inline bool zd_ring_enqueue(struct zd_ring *r, const DAT_EVENT *ev)
{
	uint64_t pos;

	if (zd_unlikely(!zd_ring__claim(r, 1, &pos)))
		return false;

	struct zd_ring_slot *s = &r->slots[pos & r->mask];
	zd_ring__put(r, pos, s, ev);
	/* release: pairs with the consumer's acquire load of seq in
	 * zd_ring_dequeue/_burst/zd_ring_peek: the payload is visible before the
	 * slot reads as published. */
	atomic_store_explicit(&s->seq, pos + 1, memory_order_release);
	return true;
}

/*
 * Zero-copy enqueue of one event (multi-producer safe): claim a slot, fill
 * its payload fields in place (event_number, evd_handle, event_data; the
 * same fields and offsets as DAT_EVENT's; for an extension event also its
 * zd_ring_claim_ext line), then zd_ring_publish.  NULL, leaving the ring
 * untouched, if it is full.  Every claimed slot must be published, soon:
 * the events claimed after it wait behind it.
 */
static inline struct zd_ring_slot *zd_ring_claim(struct zd_ring *r, uint64_t *pos)
{
	if (zd_unlikely(!zd_ring__claim(r, 1, pos)))
		return NULL;
	return &r->slots[*pos & r->mask];
}

/* The extension line of claimed position @pos (event_extension_data). */
static inline DAT_UINT64 *zd_ring_claim_ext(struct zd_ring *r, uint64_t pos)
{
	return zd_ring__ext(r, pos);
}

static inline void zd_ring_publish(struct zd_ring_slot *s, uint64_t pos)
{
	/* release: pairs with the consumer's acquire load of seq: the
	 * payload written in place is visible before the slot reads as
	 * published. */
	atomic_store_explicit(&s->seq, pos + 1, memory_order_release);
}

/*
 * Enqueue n events as one contiguous run, all or nothing (multi-producer
 * safe). One CAS for the whole run; the consumer sees them in order with no
 * other producer's event in between. False if fewer than n slots are free
 * (always for n > capacity); n == 0 succeeds.
 */
static inline bool zd_ring_enqueue_bulk(struct zd_ring *r, const DAT_EVENT *ev,
					unsigned n)
{
	uint64_t pos;

	if (n == 0)
		return true;
	if (zd_unlikely(n > r->capacity || !zd_ring__claim(r, n, &pos)))
		return false;

	for (unsigned i = 0; i < n; i++) {
		struct zd_ring_slot *s = &r->slots[(pos + i) & r->mask];

		zd_ring__put(r, pos + i, s, &ev[i]);
		/* release: pairs with the consumer's acquire of this seq. */
		atomic_store_explicit(&s->seq, pos + i + 1, memory_order_release);
	}
	return true;
}

/*
 * Dequeue one event (single consumer). Returns false if the next event is not
 * published yet (ring empty, or its producer is between claim and publish).
 * out->event_extension_data comes back all zero but for extension events.
 */
static inline bool zd_ring_dequeue(struct zd_ring *r, DAT_EVENT *out)
{
	/* relaxed: the consumer is head's only writer. */
	uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
	struct zd_ring_slot *s = &r->slots[pos & r->mask];

	/* acquire: pairs with the producer's release store of seq in
	 * zd_ring_enqueue/_bulk: the payload we copy is the published one. */
	if (atomic_load_explicit(&s->seq, memory_order_acquire) != pos + 1)
		return false;
	zd_ring__get(r, pos, out, s);
	/* release: pairs with the producers' acquire load of head in
	 * zd_ring__claim: our copy-out is done before the slot is reused. */
	atomic_store_explicit(&r->head, pos + 1, memory_order_release);
	return true;
}

/* Dequeue up to n events into out[] (single consumer); returns how many. */
static inline unsigned zd_ring_dequeue_burst(struct zd_ring *r, DAT_EVENT *out,
					     unsigned n)
{
	uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
	unsigned i;

	for (i = 0; i < n; i++) {
		struct zd_ring_slot *s = &r->slots[(pos + i) & r->mask];

		/* acquire: pairs with the producer's release of seq. */
		if (atomic_load_explicit(&s->seq, memory_order_acquire) != pos + i + 1)
			break;
		zd_ring__get(r, pos + i, &out[i], s);
	}
	if (i)  /* release: pairs with the acquire of head in zd_ring__claim. */
		atomic_store_explicit(&r->head, pos + i, memory_order_release);
	return i;
}

/*
 * Look at the next event without taking it (single consumer): a pointer to
 * the next published event, or NULL. The pointer is to the ring's own
 * consumer-side copy, r->peeked (a slot holds no whole DAT_EVENT to point
 * into), so every peek returns the same pointer. Only zd_ring_peek writes the
 * copy, and it copies the same event again until zd_ring_drop() (no producer
 * can reuse the slot before head moves): the event stays valid and unchanged
 * until zd_ring_drop(), and peek again returns the same event. Its
 * event_extension_data reads as zero but for extension events.
 */
static inline const DAT_EVENT *zd_ring_peek(struct zd_ring *r)
{
	uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
	struct zd_ring_slot *s = &r->slots[pos & r->mask];

	/* acquire: pairs with the producer's release store of seq. */
	if (atomic_load_explicit(&s->seq, memory_order_acquire) != pos + 1)
		return NULL;
	/* The copy's extension words are zero unless it held an extension
	 * event: the common case copies the head only. */
	bool had_ext = zd_ring_is_ext(r->peeked.event_number);

	memcpy(&r->peeked, (const void *)s, ZD_RING_EV_BYTES);
	if (zd_unlikely(had_ext || zd_ring_is_ext(r->peeked.event_number)))
		zd_ring__get(r, pos, &r->peeked, s);
	return &r->peeked;
}

/* Discard the event last returned by zd_ring_peek() (which must have
 * returned non-NULL since the last dequeue/drop). */
static inline void zd_ring_drop(struct zd_ring *r)
{
	uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);

	/* release: pairs with the acquire of head in zd_ring__claim:
	 * zd_ring_peek's copy-out of the slot is done before it is reused. */
	atomic_store_explicit(&r->head, pos + 1, memory_order_release);
}

/*
 * Consumer only: a dequeue in two steps, for a consumer that checks
 * something else between seeing the next event published and taking it
 * (zd_shm_cq_poll_one).  zd_ring_front: the published slot at head, or NULL
 * (acquire, as zd_ring_dequeue).  zd_ring_take_front: copies that slot's
 * event out (as zd_ring_dequeue) and frees it.
 */
static inline const struct zd_ring_slot *zd_ring_front(const struct zd_ring *r)
{
	uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
	const struct zd_ring_slot *s = &r->slots[pos & r->mask];

	/* acquire: pairs with the producer's release store of seq. */
	if (atomic_load_explicit(&s->seq, memory_order_acquire) != pos + 1)
		return NULL;
	return s;
}

static inline void zd_ring_take_front(struct zd_ring *r, const struct zd_ring_slot *s,
				      DAT_EVENT *out)
{
	zd_ring__get(r, atomic_load_explicit(&r->head, memory_order_relaxed), out, s);
	zd_ring_drop(r);
}

/*
 * Consumer only: how many events, up to 'limit', can be dequeued right now
 * without waiting (published, contiguous from head). Exact for the consumer
 * at the instant each slot is read, and a lower bound afterwards (producers
 * only add). Cost is one load per counted slot: use a small limit (the EVD
 * wait threshold), not as a general length.
 */
static inline unsigned zd_ring_ready(const struct zd_ring *r, unsigned limit)
{
	uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
	unsigned n = 0;

	if (limit > r->capacity)
		limit = r->capacity;
	/* relaxed: a count only; zd_ring_dequeue's acquire orders the payload. */
	while (n < limit &&
	       atomic_load_explicit(&r->slots[(pos + n) & r->mask].seq,
				    memory_order_relaxed) == pos + n + 1)
		n++;
	return n;
}

/*
 * Consumer only: copies the event at position @pos (head <= pos < head +
 * capacity) into @out if it is published, else returns false.  For looking
 * past head without taking (the EVD's solicited-wait scan); like
 * zd_ring_ready, a scan from head stops at the first unpublished slot.
 */
static inline bool zd_ring_peek_pos(const struct zd_ring *r, uint64_t pos, DAT_EVENT *out)
{
	const struct zd_ring_slot *s = &r->slots[pos & r->mask];

	/* acquire: pairs with the producer's release store of seq. */
	if (atomic_load_explicit(&s->seq, memory_order_acquire) != pos + 1)
		return false;
	zd_ring__get(r, pos, out, s);
	return true;
}

/*
 * Any thread: true when the consumer has taken every event claimed so far
 * (head == tail).  For a producer choosing between this ring and a later
 * stage (zd_evd_cq_post_direct): when it returns true, every event claimed
 * here before the call (happens-before) was dropped by the consumer, and
 * whatever the consumer did before that drop (e.g. forward the event to
 * another ring) happens before the caller's next step.
 */
static inline bool zd_ring_drained(const struct zd_ring *r)
{
	/* acquire: pairs with the consumer's release store of head in
	 * zd_ring_dequeue/_burst/zd_ring_drop. */
	uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);

	/* relaxed: tail only grows; an event claimed before the call is
	 * counted in it by coherence. */
	return atomic_load_explicit(&r->tail, memory_order_relaxed) == h;
}

/* Consumer only: the position of the next event to take. */
static inline uint64_t zd_ring_head(const struct zd_ring *r)
{
	return atomic_load_explicit(&r->head, memory_order_relaxed);
}

/*
 * Any thread: approximate number of events in the ring, for DAT's 'nmore'.
 * It is tail - head read at two slightly different instants, clamped to
 * [0, capacity]: it counts claimed positions, so it includes events whose
 * producer has claimed but not yet published them, and it may be stale by the
 * time it returns. Never negative, never above capacity. Called by the
 * consumer right after a dequeue it is "events still behind this one".
 * It reads the producers' line: a cache miss while producers are active, so
 * call it where DAT asks for a count, not on every dequeue.
 */
static inline uint32_t zd_ring_count(const struct zd_ring *r)
{
	/* head first: tail never decreases and head never overtakes tail, so a
	 * tail read after head is >= that head. relaxed: statistics only. */
	uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t n = t - h;

	return n > r->capacity ? r->capacity : (uint32_t)n;
}

#ifdef __cplusplus
}
#endif

#endif /* ZD_RING_H */
