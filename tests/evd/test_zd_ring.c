/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the EVD event ring (evd/zd_ring.h). */

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "evd/zd_ring.h"
#include "zd_evd_test_util.h"

/* ---- single-threaded semantics ------------------------------------------- */

Test(zd_ring, layout)
{
	cr_assert_eq(sizeof(DAT_EVENT), 120);
	/* one line per slot: the DAT_EVENT head (56 bytes), seq last */
	cr_assert_eq(ZD_RING_EV_BYTES, 56);
	cr_assert_eq(sizeof(struct zd_ring_slot), ZD_CACHE_LINE);
	cr_assert_eq(sizeof(struct zd_ring_slot), 64);
	cr_assert_eq(_Alignof(struct zd_ring_slot), 64);
	cr_assert_eq(offsetof(struct zd_ring_slot, seq), 56);
	cr_assert_eq(offsetof(struct zd_ring_slot, evd_handle),
		     offsetof(DAT_EVENT, evd_handle));
	cr_assert_eq(offsetof(struct zd_ring_slot, event_data),
		     offsetof(DAT_EVENT, event_data));
	cr_assert_eq(offsetof(struct zd_ring, mask) % ZD_CACHE_GUARD, 0);
	cr_assert_eq(offsetof(struct zd_ring, tail) % ZD_CACHE_GUARD, 0);
	cr_assert_eq(offsetof(struct zd_ring, head) % ZD_CACHE_GUARD, 0);
	cr_assert_geq(offsetof(struct zd_ring, head) -
		      offsetof(struct zd_ring, tail), ZD_CACHE_GUARD);
	cr_assert_geq(offsetof(struct zd_ring, slots) -
		      offsetof(struct zd_ring, head), ZD_CACHE_GUARD);
	cr_assert_eq(offsetof(struct zd_ring, slots) % ZD_CACHE_GUARD, 0);

	struct zd_ring *r = zd_ring_create(4);

	cr_assert_not_null(r);
	for (int i = 0; i < 4; i++)
		cr_assert_eq((uintptr_t)&r->slots[i] % ZD_CACHE_LINE, 0);
	cr_assert_eq((char *)&r->slots[1] - (char *)&r->slots[0], 64);
	zd_ring_destroy(r);
}

Test(zd_ring, create_rounds_up)
{
	static const uint32_t req[] = { 1, 2, 3, 5, 64, 100, 1000, 1024, 1025 };
	static const uint32_t exp[] = { 1, 2, 4, 8, 64, 128, 1024, 1024, 2048 };

	for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++) {
		struct zd_ring *r = zd_ring_create(req[i]);

		cr_assert_not_null(r);
		cr_assert_eq(zd_ring_capacity(r), exp[i], "req %u", req[i]);
		cr_assert_eq((uintptr_t)r % ZD_CACHE_GUARD, 0);
		zd_ring_destroy(r);
	}
	errno = 0;
	cr_assert_null(zd_ring_create(0));
	cr_assert_eq(errno, EINVAL);
	cr_assert_null(zd_ring_create(ZD_RING_MAX_CAPACITY + 1));
	cr_assert_eq(errno, EINVAL);
	zd_ring_destroy(NULL);
}

/* zd_ring_create_in: the memory comes from the ops and goes back to them,
 * with the same size; an allocator that fails gives ENOMEM. */
static size_t ops_allocs, ops_frees, ops_live_size;
static bool ops_fail;

static void *ops_alloc(size_t size, size_t align)
{
	if (ops_fail)
		return NULL;
	ops_allocs++;
	ops_live_size = size;
	return aligned_alloc(align, size);
}

static void ops_free(void *p, size_t size)
{
	cr_assert_eq(size, ops_live_size);
	ops_frees++;
	free(p);
}

static const struct zd_ring_mem_ops counting_ops = { .alloc = ops_alloc, .free = ops_free };

Test(zd_ring, create_in_uses_the_ops)
{
	struct zd_ring *r = zd_ring_create_in(100, &counting_ops);

	cr_assert_not_null(r);
	cr_assert_eq(zd_ring_capacity(r), 128);
	cr_assert_eq(ops_allocs, 1);
	cr_assert_eq(ops_live_size, zd_ring_memsize(128));
	cr_assert_eq((uintptr_t)r % ZD_CACHE_GUARD, 0);
	zd_ring_destroy(r);
	cr_assert_eq(ops_frees, 1);
	ops_fail = true;
	errno = 0;
	cr_assert_null(zd_ring_create_in(8, &counting_ops));
	cr_assert_eq(errno, ENOMEM);
	cr_assert_null(zd_ring_create_in(0, &counting_ops));
	cr_assert_eq(errno, EINVAL);
	cr_assert_eq(ops_frees, 1);
}

Test(zd_ring, init_caller_memory)
{
	size_t sz = zd_ring_memsize(16);
	void *mem;

	cr_assert_eq(zd_ring_memsize(0), 0);
	/* a 64-byte slot and its 64-byte extension line per position, in
	 * whole line pairs */
	cr_assert_eq(zd_ring_memsize(1), sizeof(struct zd_ring) + 128);
	cr_assert_eq(zd_ring_memsize(2), sizeof(struct zd_ring) + 256);
	cr_assert_eq(zd_ring_memsize(12), 0);
	cr_assert_eq(sz, sizeof(struct zd_ring) + 16 * 128);
	for (uint32_t cap = 1; cap <= 1024; cap <<= 1)
		cr_assert_eq(zd_ring_memsize(cap) % ZD_CACHE_GUARD, 0, "cap %u", cap);
	mem = aligned_alloc(ZD_CACHE_GUARD, sz + ZD_CACHE_GUARD);
	cr_assert_not_null(mem);
	cr_assert_eq(zd_ring_init(mem, 12), -EINVAL);
	cr_assert_eq(zd_ring_init((void *)((char *)mem + 64), 16), -EINVAL);
	cr_assert_eq(zd_ring_init(mem, 16), 0);

	struct zd_ring *r = mem;
	DAT_EVENT ev, out;
	uint32_t p;
	uint64_t s;

	tu_make_ev(&ev, 7, 7);
	cr_assert(zd_ring_enqueue(r, &ev));
	cr_assert(zd_ring_dequeue(r, &out));
	cr_assert(tu_check_ev(&out, &p, &s));
	zd_ring_destroy(r);     /* not owned: must not free */
	free(mem);
}

Test(zd_ring, empty)
{
	struct zd_ring *r = zd_ring_create(8);
	DAT_EVENT out;

	cr_assert_not(zd_ring_dequeue(r, &out));
	cr_assert_null(zd_ring_peek(r));
	cr_assert_eq(zd_ring_dequeue_burst(r, &out, 1), 0);
	cr_assert_eq(zd_ring_count(r), 0);
	cr_assert_eq(zd_ring_ready(r, 8), 0);
	zd_ring_destroy(r);
}

Test(zd_ring, full_returns_false_and_fifo)
{
	struct zd_ring *r = zd_ring_create(8);
	DAT_EVENT ev, out;
	uint32_t p;
	uint64_t s;

	for (uint64_t i = 0; i < 8; i++) {
		tu_make_ev(&ev, 1, i);
		cr_assert(zd_ring_enqueue(r, &ev), "enqueue %lu", i);
		cr_assert_eq(zd_ring_count(r), i + 1);
	}
	tu_make_ev(&ev, 1, 99);
	cr_assert_not(zd_ring_enqueue(r, &ev), "full ring must refuse");
	cr_assert_not(zd_ring_enqueue(r, &ev));
	cr_assert_eq(zd_ring_count(r), 8);
	cr_assert_eq(zd_ring_ready(r, 100), 8);

	/* one out, one more in, and the refused event was not stored */
	cr_assert(zd_ring_dequeue(r, &out));
	cr_assert(tu_check_ev(&out, &p, &s));
	cr_assert_eq(s, 0);
	tu_make_ev(&ev, 1, 8);
	cr_assert(zd_ring_enqueue(r, &ev));
	cr_assert_not(zd_ring_enqueue(r, &ev));
	for (uint64_t i = 1; i <= 8; i++) {
		cr_assert(zd_ring_dequeue(r, &out));
		cr_assert(tu_check_ev(&out, &p, &s));
		cr_assert_eq(s, i);
	}
	cr_assert_not(zd_ring_dequeue(r, &out));
	cr_assert_eq(zd_ring_count(r), 0);
	zd_ring_destroy(r);
}

/* The smallest rings: one slot (every position reuses it) and two. */
Test(zd_ring, tiny_capacities)
{
	for (uint32_t cap = 1; cap <= 2; cap++) {
		struct zd_ring *r = zd_ring_create(cap);
		DAT_EVENT ev, out;
		uint32_t p;
		uint64_t s;

		cr_assert_eq(zd_ring_capacity(r), cap);
		for (uint64_t i = 0; i < 1000; i += cap) {
			for (uint64_t k = 0; k < cap; k++) {
				tu_make_ev(&ev, 0, i + k);
				cr_assert(zd_ring_enqueue(r, &ev));
			}
			cr_assert_not(zd_ring_enqueue(r, &ev));
			cr_assert_eq(zd_ring_count(r), cap);
			for (uint64_t k = 0; k < cap; k++) {
				cr_assert(zd_ring_dequeue(r, &out));
				cr_assert(tu_check_ev(&out, &p, &s));
				cr_assert_eq(s, i + k);
			}
			cr_assert_not(zd_ring_dequeue(r, &out));
		}
		zd_ring_destroy(r);
	}
}

/* Many laps with every fill level: FIFO, count and ready stay exact. */
Test(zd_ring, wraparound_many_times)
{
	struct zd_ring *r = zd_ring_create(16);
	uint64_t in = 0, out_seq = 0;
	DAT_EVENT ev, out;
	uint32_t p;
	uint64_t s;

	for (unsigned round = 0; round < 20000; round++) {
		unsigned put = (round * 7u) % 17u;      /* 0..16 */
		unsigned take = (round * 5u) % 17u;

		for (unsigned i = 0; i < put; i++) {
			tu_make_ev(&ev, 3, in);
			if (!zd_ring_enqueue(r, &ev)) {
				cr_assert_eq(in - out_seq, 16);
				break;
			}
			in++;
		}
		cr_assert_eq(zd_ring_count(r), in - out_seq);
		cr_assert_eq(zd_ring_ready(r, 16), in - out_seq);
		for (unsigned i = 0; i < take; i++) {
			if (!zd_ring_dequeue(r, &out)) {
				cr_assert_eq(in, out_seq);
				break;
			}
			cr_assert(tu_check_ev(&out, &p, &s));
			cr_assert_eq(s, out_seq, "got %lu want %lu", s, out_seq);
			out_seq++;
		}
	}
	cr_assert_gt(in, 16u * 1000u, "must lap many times");
	zd_ring_destroy(r);
}

Test(zd_ring, burst_bulk_peek)
{
	struct zd_ring *r = zd_ring_create(8);
	DAT_EVENT evs[9], outs[9];
	const DAT_EVENT *pk;
	uint32_t p;
	uint64_t s;

	for (int i = 0; i < 9; i++)
		tu_make_ev(&evs[i], 2, (uint64_t)i);
	cr_assert(zd_ring_enqueue_bulk(r, evs, 0));
	cr_assert_not(zd_ring_enqueue_bulk(r, evs, 9), "n > capacity");
	cr_assert(zd_ring_enqueue_bulk(r, evs, 5));
	cr_assert_not(zd_ring_enqueue_bulk(r, evs + 5, 4), "all or nothing");
	cr_assert_eq(zd_ring_count(r), 5);
	cr_assert(zd_ring_enqueue_bulk(r, evs + 5, 3));
	cr_assert_eq(zd_ring_count(r), 8);

	pk = zd_ring_peek(r);
	cr_assert_not_null(pk);
	cr_assert(tu_check_ev(pk, &p, &s));
	cr_assert_eq(s, 0);
	cr_assert_eq(zd_ring_peek(r), pk, "peek is idempotent");
	cr_assert(tu_check_ev(pk, &p, &s));
	cr_assert_eq(s, 0);
	zd_ring_drop(r);
	/* the next peek is the next event, through the same copy */
	cr_assert_eq(zd_ring_peek(r), pk);
	cr_assert(tu_check_ev(pk, &p, &s));
	cr_assert_eq(s, 1);
	cr_assert_eq(zd_ring_count(r), 7);

	/* a peek that is not dropped leaves the event for dequeue */
	cr_assert_eq(zd_ring_dequeue_burst(r, outs, 3), 3);
	for (int i = 0; i < 3; i++) {
		cr_assert(tu_check_ev(&outs[i], &p, &s));
		cr_assert_eq(s, (uint64_t)i + 1);
	}
	cr_assert_eq(zd_ring_dequeue_burst(r, outs, 9), 4);
	for (int i = 0; i < 4; i++) {
		cr_assert(tu_check_ev(&outs[i], &p, &s));
		cr_assert_eq(s, (uint64_t)i + 4);
	}
	cr_assert_eq(zd_ring_dequeue_burst(r, outs, 9), 0);
	/* bulk across the wrap point */
	cr_assert(zd_ring_enqueue_bulk(r, evs, 8));
	cr_assert_eq(zd_ring_dequeue_burst(r, outs, 8), 8);
	for (int i = 0; i < 8; i++) {
		cr_assert(tu_check_ev(&outs[i], &p, &s));
		cr_assert_eq(s, (uint64_t)i);
	}
	zd_ring_destroy(r);
}

/* zd_ring_front + zd_ring_take_front: a dequeue in two steps; the front
 * stays put until taken, and comes out as zd_ring_dequeue hands it. */
Test(zd_ring, front_then_take)
{
	struct zd_ring *r = zd_ring_create(2);
	DAT_EVENT in[3], out, want;
	const struct zd_ring_slot *s;

	cr_assert_null(zd_ring_front(r));
	for (int k = 0; k < 3; k++) {
		memset(&in[k], 0x3C + k, sizeof(in[k]));
		in[k].event_number = DAT_DTO_COMPLETION_EVENT;
		in[k].event_data.dto_completion_event_data.user_cookie.as_64 = 70u + (unsigned)k;
	}
	for (int lap = 0; lap < 3; lap++) {  /* wraps a 2-slot ring */
		cr_assert(zd_ring_enqueue(r, &in[lap]));
		s = zd_ring_front(r);
		cr_assert_not_null(s);
		cr_assert_eq(zd_ring_front(r), s, "front moved before the take");
		memset(&out, 0xEE, sizeof(out));
		zd_ring_take_front(r, s, &out);
		want = in[lap];
		memset(want.event_extension_data, 0, sizeof(want.event_extension_data));
		cr_assert_eq(memcmp(&out, &want, sizeof(want)), 0, "lap %d", lap);
		cr_assert_null(zd_ring_front(r));
		cr_assert(zd_ring_drained(r));
	}
	zd_ring_destroy(r);
}

/* The slot carries event_number, evd_handle and event_data byte for byte
 * (padding included) and not event_extension_data: every way out shows it
 * zero, whatever the producer had there or the caller's buffer held. */
Test(zd_ring, payload_round_trip_without_extension)
{
	struct zd_ring *r = zd_ring_create(4);
	DAT_EVENT in[3], out[3], want;
	const DAT_EVENT *pk;

	for (int k = 0; k < 3; k++) {
		memset(&in[k], 0x5A + k, sizeof(in[k]));   /* padding too */
		in[k].event_number = DAT_DTO_COMPLETION_EVENT;
		in[k].evd_handle = (DAT_EVD_HANDLE)(uintptr_t)(0x1000 + k);
		in[k].event_data.dto_completion_event_data.user_cookie.as_64 =
			UINT64_C(0xC00C1E0000000000) + (uint64_t)k;
		in[k].event_data.dto_completion_event_data.transfered_length =
			4096u + (unsigned)k;
		for (int i = 0; i < 8; i++)
			in[k].event_extension_data[i] = ~(uint64_t)i;
	}

	/* dequeue */
	cr_assert(zd_ring_enqueue(r, &in[0]));
	memset(&out[0], 0xEE, sizeof(out[0]));
	cr_assert(zd_ring_dequeue(r, &out[0]));
	want = in[0];
	memset(want.event_extension_data, 0, sizeof(want.event_extension_data));
	cr_assert_eq(memcmp(&out[0], &want, sizeof(want)), 0);

	/* burst, via bulk */
	cr_assert(zd_ring_enqueue_bulk(r, in, 3));
	memset(out, 0xEE, sizeof(out));
	pk = zd_ring_peek(r);
	cr_assert_not_null(pk);
	want = in[0];
	memset(want.event_extension_data, 0, sizeof(want.event_extension_data));
	cr_assert_eq(memcmp(pk, &want, sizeof(want)), 0, "peek");
	cr_assert_eq(zd_ring_dequeue_burst(r, out, 3), 3);
	for (int k = 0; k < 3; k++) {
		want = in[k];
		memset(want.event_extension_data, 0,
		       sizeof(want.event_extension_data));
		cr_assert_eq(memcmp(&out[k], &want, sizeof(want)), 0, "burst %d", k);
	}

	/* move carries the same fields */
	struct zd_ring *dst = zd_ring_create(4);

	cr_assert(zd_ring_enqueue(r, &in[2]));
	cr_assert_eq(zd_ring_move(dst, r), 1);
	memset(&out[0], 0xEE, sizeof(out[0]));
	cr_assert(zd_ring_dequeue(dst, &out[0]));
	cr_assert_eq(memcmp(&out[0], &want, sizeof(want)), 0, "move");
	zd_ring_destroy(dst);
	zd_ring_destroy(r);
}

/* A producer that has claimed a position but not published it (simulated
 * white-box: it is preempted between its CAS and its seq store) hides itself
 * and everything claimed after it; nothing half-written is ever returned. */
Test(zd_ring, stalled_producer_blocks_consumer)
{
	struct zd_ring *r = zd_ring_create(8);
	DAT_EVENT ev, out;
	uint32_t p;
	uint64_t s;

	/* producer A claims position 0 and stalls mid-copy */
	uint64_t pos = atomic_fetch_add(&r->tail, 1);
	cr_assert_eq(pos, 0);
	memset(&r->slots[0], 0xAB, 40);         /* half-written payload */

	tu_make_ev(&ev, 2, 0);                  /* producer B publishes pos 1 */
	cr_assert(zd_ring_enqueue(r, &ev));

	cr_assert_not(zd_ring_dequeue(r, &out), "must look empty");
	cr_assert_null(zd_ring_peek(r));
	cr_assert_eq(zd_ring_ready(r, 8), 0);
	cr_assert_eq(zd_ring_count(r), 2, "count includes the claimed slot");
	{
		struct zd_ring *dst = zd_ring_create(8);
		cr_assert_eq(zd_ring_move(dst, r), -EBUSY);
		zd_ring_destroy(dst);
	}

	/* A finishes: copy, then publish */
	tu_make_ev(&ev, 1, 0);
	memcpy(&r->slots[0], &ev, ZD_RING_EV_BYTES);
	atomic_store_explicit(&r->slots[0].seq, pos + 1, memory_order_release);

	cr_assert(zd_ring_dequeue(r, &out));
	cr_assert(tu_check_ev(&out, &p, &s));
	cr_assert_eq(p, 1, "claim order: A first");
	cr_assert(zd_ring_dequeue(r, &out));
	cr_assert(tu_check_ev(&out, &p, &s));
	cr_assert_eq(p, 2);
	cr_assert_not(zd_ring_dequeue(r, &out));
	zd_ring_destroy(r);
}

Test(zd_ring, move_preserves_order)
{
	struct zd_ring *src = zd_ring_create(8);
	struct zd_ring *dst = zd_ring_create(16);
	struct zd_ring *tiny = zd_ring_create(4);
	DAT_EVENT ev, out;
	uint32_t p;
	uint64_t s;

	/* make src wrap: 6 in, 6 out, then 7 in (positions 6..12) */
	for (uint64_t i = 0; i < 6; i++) {
		tu_make_ev(&ev, 1, 1000 + i);
		cr_assert(zd_ring_enqueue(src, &ev));
		cr_assert(zd_ring_dequeue(src, &out));
	}
	for (uint64_t i = 0; i < 7; i++) {
		tu_make_ev(&ev, 1, i + 2);
		cr_assert(zd_ring_enqueue(src, &ev));
	}
	/* dst already holds two events: they stay in front */
	for (uint64_t i = 0; i < 2; i++) {
		tu_make_ev(&ev, 1, i);
		cr_assert(zd_ring_enqueue(dst, &ev));
	}

	cr_assert_eq(zd_ring_move(tiny, src), -ENOSPC);
	cr_assert_eq(zd_ring_count(src), 7, "failed move moves nothing");
	cr_assert_eq(zd_ring_count(tiny), 0);

	cr_assert_eq(zd_ring_move(dst, src), 7);
	cr_assert_eq(zd_ring_count(src), 0);
	cr_assert_eq(zd_ring_count(dst), 9);
	for (uint64_t i = 0; i < 9; i++) {
		cr_assert(zd_ring_dequeue(dst, &out));
		cr_assert(tu_check_ev(&out, &p, &s));
		cr_assert_eq(s, i);
	}
	cr_assert_eq(zd_ring_move(dst, src), 0, "empty move");
	zd_ring_destroy(src);
	zd_ring_destroy(dst);
	zd_ring_destroy(tiny);
}

/* ---- concurrency -------------------------------------------------------- */

#define MP_MAX_PROD 8

struct mp_ctx {
	struct zd_ring *ring;
	pthread_barrier_t start;
	uint64_t per_producer;
	unsigned bulk_max;              /* 0: single enqueue */
	_Atomic uint64_t full_hits;
};

struct mp_prod {
	void *ctx;
	uint32_t id;
	pthread_t tid;
};

static void *mp_producer(void *arg)
{
	struct mp_prod *pr = arg;
	struct mp_ctx *c = pr->ctx;
	uint64_t full = 0;
	DAT_EVENT evs[16];

	pthread_barrier_wait(&c->start);
	for (uint64_t i = 0; i < c->per_producer;) {
		unsigned n = 1, spins = 0;

		if (c->bulk_max) {
			n = 1 + (unsigned)((i + pr->id) % c->bulk_max);
			if (n > c->per_producer - i)
				n = (unsigned)(c->per_producer - i);
		}
		for (unsigned k = 0; k < n; k++)
			tu_make_ev(&evs[k], pr->id, i + k);
		for (;;) {
			bool ok = c->bulk_max ? zd_ring_enqueue_bulk(c->ring, evs, n)
					      : zd_ring_enqueue(c->ring, &evs[0]);
			if (ok)
				break;
			full++;
			tu_backoff(&spins);
		}
		i += n;
	}
	atomic_fetch_add(&c->full_hits, full);
	return NULL;
}

struct mp_check {
	uint64_t next[MP_MAX_PROD + 1];
	uint64_t per, total, bad, order_err;
	/* bulk contiguity: events left in the current run, and its producer */
	unsigned run_left;
	uint32_t run_prod;
	uint64_t run_err;
};

static void mp_check_one(struct mp_check *ck, const DAT_EVENT *ev,
			 unsigned bulk_max, uint32_t nprod)
{
	uint32_t p;
	uint64_t s;

	if (!tu_check_ev(ev, &p, &s) || p > nprod) {
		ck->bad++;
		ck->total++;    /* counted, so a torn event fails instead of hanging */
		return;
	}
	if (s != ck->next[p])
		ck->order_err++;
	ck->next[p] = s + 1;
	ck->total++;
	if (bulk_max) {
		if (ck->run_left) {
			if (p != ck->run_prod)
				ck->run_err++;
			ck->run_left--;
		} else {
			/* first of a run: its length is known from (seq, id) */
			unsigned n = 1 + (unsigned)((s + p) % bulk_max);
			if (n > ck->per - s)
				n = (unsigned)(ck->per - s);
			ck->run_prod = p;
			ck->run_left = n - 1;
		}
	}
}

/*
 * nprod producer threads, plus (if self) the consumer enqueuing its own
 * events as producer id nprod between dequeues; the consumer checks payload
 * integrity, per-producer FIFO, and that the totals match exactly.
 */
static void mp_run(uint32_t cap, uint32_t nprod, uint64_t per, bool self,
		   unsigned bulk_max, unsigned consumer_stall_every)
{
	struct mp_ctx c = { .per_producer = per, .bulk_max = bulk_max };
	struct mp_prod pr[MP_MAX_PROD];
	struct mp_check ck = { .per = per };
	uint64_t expect = per * (nprod + (self ? 1 : 0));
	uint64_t self_next = 0, self_full = 0;
	DAT_EVENT out[32], ev;

	cr_assert_leq(nprod, MP_MAX_PROD);
	c.ring = zd_ring_create(cap);
	cr_assert_not_null(c.ring);
	pthread_barrier_init(&c.start, NULL, nprod + 1);
	for (uint32_t i = 0; i < nprod; i++) {
		pr[i] = (struct mp_prod){ .ctx = &c, .id = i };
		cr_assert_eq(pthread_create(&pr[i].tid, NULL, mp_producer, &pr[i]), 0);
	}
	pthread_barrier_wait(&c.start);

	unsigned spins = 0;
	while (ck.total < expect) {
		/* the consumer is also a producer (manual progress) */
		if (self && self_next < per) {
			for (int k = 0; k < 4 && self_next < per; k++) {
				tu_make_ev(&ev, nprod, self_next);
				if (!zd_ring_enqueue(c.ring, &ev)) {
					self_full++;
					break;
				}
				self_next++;
			}
		}
		unsigned n = (ck.total & 1) ? zd_ring_dequeue_burst(c.ring, out, 32)
					    : zd_ring_dequeue(c.ring, out);
		for (unsigned k = 0; k < n; k++)
			mp_check_one(&ck, &out[k], bulk_max, nprod);
		if (n == 0)
			tu_backoff(&spins);
		if (consumer_stall_every && n && ck.total % consumer_stall_every < n)
			usleep(200);    /* let the producers fill the ring */
	}
	for (uint32_t i = 0; i < nprod; i++)
		pthread_join(pr[i].tid, NULL);

	cr_assert_eq(ck.bad, 0, "%lu torn or foreign events", ck.bad);
	cr_assert_eq(ck.order_err, 0, "%lu per-producer FIFO violations",
		     ck.order_err);
	cr_assert_eq(ck.run_err, 0, "%lu bulk runs interleaved", ck.run_err);
	cr_assert_eq(ck.total, expect);
	for (uint32_t i = 0; i < nprod + (self ? 1 : 0); i++)
		cr_assert_eq(ck.next[i], per, "producer %u: got %lu of %lu", i,
			     ck.next[i], per);
	cr_assert_not(zd_ring_dequeue(c.ring, out), "nothing extra");
	cr_assert_eq(zd_ring_count(c.ring), 0);
	cr_log_info("cap %u prod %u%s x %lu: producer full-retries %lu, "
		    "consumer-as-producer full %lu", cap, nprod,
		    self ? "+self" : "", per, atomic_load(&c.full_hits), self_full);
	if (consumer_stall_every)
		cr_assert_gt(atomic_load(&c.full_hits) + self_full, 0,
			     "test meant to hit full");
	pthread_barrier_destroy(&c.start);
	zd_ring_destroy(c.ring);
}

/* 4 producers x 200000: three threads plus the consumer itself. */
Test(zd_ring_mt, four_producers_one_is_consumer, .timeout = 60)
{
	mp_run(1024, 3, 200000, true, 0, 0);
}

Test(zd_ring_mt, four_producer_threads, .timeout = 60)
{
	mp_run(256, 4, 200000, false, 0, 0);
}

/* Tiny ring, slow consumer: producers keep hitting full and retry. */
Test(zd_ring_mt, full_under_contention, .timeout = 60)
{
	mp_run(4, 4, 50000, true, 0, 5000);
}

/* Bulk enqueue: runs stay contiguous and FIFO under contention. */
Test(zd_ring_mt, bulk_runs_contiguous, .timeout = 60)
{
	mp_run(16, 3, 100000, false, 7, 0);
}

/* ---- count under races -------------------------------------------------- */

struct cnt_ctx {
	struct zd_ring *ring;
	_Atomic bool stop;
	_Atomic uint64_t bad;
};

static void *cnt_reader(void *arg)
{
	struct cnt_ctx *c = arg;

	while (!atomic_load(&c->stop)) {
		uint32_t n = zd_ring_count(c->ring);
		if (n > zd_ring_capacity(c->ring))
			atomic_fetch_add(&c->bad, 1);
	}
	return NULL;
}

/* count() from a third thread stays within [0, capacity] while the ring
 * laps (it is computed without any lock from two counters). */
Test(zd_ring_mt, count_bounded_under_races, .timeout = 60)
{
	struct cnt_ctx c = { .ring = zd_ring_create(8) };
	pthread_t t;
	DAT_EVENT ev, out;

	pthread_create(&t, NULL, cnt_reader, &c);
	for (uint64_t i = 0; i < 200000; i++) {
		tu_make_ev(&ev, 0, i);
		while (!zd_ring_enqueue(c.ring, &ev))
			cr_assert(zd_ring_dequeue(c.ring, &out));
		if (i % 3 == 0)
			(void)zd_ring_dequeue(c.ring, &out);
	}
	atomic_store(&c.stop, true);
	pthread_join(t, NULL);
	cr_assert_eq(atomic_load(&c.bad), 0);
	zd_ring_destroy(c.ring);
}

/* Extension events (event_number >= DAT_EXTENSION_EVENT) carry
 * event_extension_data through every way in and out, across laps of a small
 * ring; a plain event after one still comes out with it zero. */
static void ext_event(DAT_EVENT *ev, int k, bool ext)
{
	memset(ev, 0x40 + k, sizeof(*ev));
	ev->event_number = ext ? (DAT_EVENT_NUMBER)(DAT_IB_EXTENSION_RANGE_BASE + k % 3)
			       : DAT_DTO_COMPLETION_EVENT;
	ev->event_data.dto_completion_event_data.user_cookie.as_64 = 500u + (unsigned)k;
	for (int i = 0; i < 8; i++)
		ev->event_extension_data[i] = (uint64_t)k << 32 | (uint64_t)(i + 1);
}

static void want_of(DAT_EVENT *want, const DAT_EVENT *in)
{
	*want = *in;
	if (!zd_ring_is_ext(in->event_number))
		memset(want->event_extension_data, 0, sizeof(want->event_extension_data));
}

Test(zd_ring, extension_events_carry_their_data)
{
	struct zd_ring *r = zd_ring_create(2), *dst = zd_ring_create(4);
	DAT_EVENT in[4], out[4], want;
	const struct zd_ring_slot *fs;
	const DAT_EVENT *pk;

	for (int lap = 0; lap < 6; lap++) {
		ext_event(&in[0], lap, true);
		ext_event(&in[1], lap + 1, false);
		/* enqueue + dequeue */
		cr_assert(zd_ring_enqueue(r, &in[0]));
		memset(&out[0], 0xEE, sizeof(out[0]));
		cr_assert(zd_ring_dequeue(r, &out[0]));
		want_of(&want, &in[0]);
		cr_assert_eq(memcmp(&out[0], &want, sizeof(want)), 0, "dequeue, lap %d", lap);
		/* bulk + peek + burst: ext then plain */
		cr_assert(zd_ring_enqueue_bulk(r, in, 2));
		pk = zd_ring_peek(r);
		cr_assert_not_null(pk);
		cr_assert_eq(memcmp(pk, &want, sizeof(want)), 0, "peek ext, lap %d", lap);
		zd_ring_drop(r);
		pk = zd_ring_peek(r);
		want_of(&want, &in[1]);
		cr_assert_eq(memcmp(pk, &want, sizeof(want)), 0, "peek plain after ext, lap %d", lap);
		cr_assert(zd_ring_peek_pos(r, zd_ring_head(r), &out[1]));
		cr_assert_eq(memcmp(&out[1], &want, sizeof(want)), 0, "peek_pos, lap %d", lap);
		cr_assert_eq(zd_ring_dequeue_burst(r, out, 2), 1);
		cr_assert_eq(memcmp(&out[0], &want, sizeof(want)), 0, "burst, lap %d", lap);
		/* front + take_front */
		cr_assert(zd_ring_enqueue(r, &in[0]));
		fs = zd_ring_front(r);
		cr_assert_not_null(fs);
		zd_ring_take_front(r, fs, &out[2]);
		want_of(&want, &in[0]);
		cr_assert_eq(memcmp(&out[2], &want, sizeof(want)), 0, "take_front, lap %d", lap);
	}
	/* claim + extension line + publish, then a resize move */
	uint64_t pos;
	struct zd_ring_slot *cs = zd_ring_claim(r, &pos);

	cr_assert_not_null(cs);
	memcpy((void *)cs, &in[0], ZD_RING_EV_BYTES);
	memcpy(zd_ring_claim_ext(r, pos), in[0].event_extension_data, ZD_RING_EXT_BYTES);
	zd_ring_publish(cs, pos);
	cr_assert(zd_ring_enqueue(r, &in[1]));
	cr_assert_eq(zd_ring_move(dst, r), 2);
	cr_assert_eq(zd_ring_dequeue_burst(dst, out, 4), 2);
	for (int k = 0; k < 2; k++) {
		want_of(&want, &in[k]);
		cr_assert_eq(memcmp(&out[k], &want, sizeof(want)), 0, "moved %d", k);
	}
	zd_ring_destroy(r);
	zd_ring_destroy(dst);
}
