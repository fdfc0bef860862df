/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Latency loops, measured as perftest measures them:
 *  - write: ping-pong of RDMA writes; each side polls the last byte of its
 *    own recv area for the peer's write, then writes back. One-way = RTT/2.
 *  - send: ping-pong of send/recv, each side waiting for its receive
 *    completion. One-way = RTT/2.
 *  - read: the client times each RDMA read from post to completion; the
 *    server is passive.
 *  - write_imm: the write ping-pong, but each side waits for the receive
 *    completion its peer's write with immediate data consumed (perftest's
 *    ib_write_lat --write_with_imm), reposts it and writes back.
 *  - atomic: the client times each fetch-and-add or compare-and-swap from
 *    post to completion (ib_atomic_lat: an atomic is its own round trip);
 *    the server is passive, and checks its word at the end.
 * The message's last byte carries a 7-bit tag (so a stale byte never passes
 * for a new message) and a "last" bit the client sets on its final message,
 * which is how the server learns the end of a -D run; write_imm carries the
 * exchange number and the "last" bit in the immediate data instead, and
 * checks the tag byte arrived with it.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "zd_perf.h"

#define TAG_LAST 0x80u
#define TAG_MASK 0x7fu

static uint8_t next_tag(uint8_t *seq)
{
	*seq = (uint8_t)(*seq % TAG_MASK + 1);       /* 1..127, never 0 */
	return *seq;
}

/* Reaps our own completions while spinning; `reaped` is the newest cookie. */
static inline void reap_req(struct zd_perf_conn *c, uint64_t *reaped)
{
	uint64_t ck = zd_perf_poll_req(c);

	if (ck)
		*reaped = ck;
}

static void wait_reaped(struct zd_perf_conn *c, uint64_t *reaped, uint64_t upto)
{
	struct zd_perf_waiter w;

	zd_perf_waiter_init(&w, 0, "a request completion");
	while (*reaped < upto) {
		reap_req(c, reaped);
		zd_perf_waiter_tick(c, &w);
	}
}

/* While a write ping-pong spins on its recv area, it reads the byte in a
 * tight loop, as ib_write_lat does, and dequeues its request EVD only
 * once every SPIN_REAP spins: a device whose progress runs in the
 * consumer's calls (zdapl-tcp with progress=manual) still gets called
 * every few tens of nanoseconds, and the byte's arrival is seen within a
 * load or two instead of after a dequeue that was under way. */
#define SPIN_REAP 16u

/* Spins until the last byte of the recv area carries @tag; returns it. */
static inline uint8_t spin_tag(struct zd_perf_conn *c, volatile uint8_t *in, uint8_t tag,
			       uint64_t *reaped, struct zd_perf_waiter *w)
{
	uint8_t msg;

	/* Acquire pairs with the peer's write landing in order: the last
	 * byte is the last to arrive. */
	for (unsigned spins = 0;
	     ((msg = __atomic_load_n(in, __ATOMIC_ACQUIRE)) & TAG_MASK) != tag; spins++) {
		if (spins % SPIN_REAP == SPIN_REAP - 1) {
			reap_req(c, reaped);
			zd_perf_waiter_tick(c, w);
		}
	}
	return msg;
}

static bool client_last(const struct zd_perf_opts *o, uint64_t i, uint64_t end_tick)
{
	return o->duration_s ? zd_perf_ticks() >= end_tick : i + 1 == o->iters;
}

/* Returns the exchanges done; t[i] is when exchange i had been posted, and
 * for the client t[n] when the last answer arrived. */
static uint64_t write_pingpong(struct zd_perf_conn *c, uint32_t size, uint64_t *t,
			       uint64_t cap, uint8_t *seq, uint64_t end_tick)
{
	volatile uint8_t *in = c->buf + size - 1;
	uint8_t *out = c->buf + c->area_len + size - 1;
	bool client = !c->is_server;
	uint64_t i, reaped = 0;
	struct zd_perf_waiter w;
	struct zd_perf_write_wr wr;

	zd_perf_write_wr_init(c, size, &wr);
	for (i = 0;; i++) {
		uint8_t tag = next_tag(seq), msg;

		zd_perf_waiter_init(&w, 0, "the peer's RDMA write");
		if (client)
			msg = tag | (client_last(c->o, i, end_tick) ? TAG_LAST : 0);
		else
			msg = spin_tag(c, in, tag, &reaped, &w);
		if (i >= cap)
			zd_perf_die("the peer sent more messages than agreed (%" PRIu64 ")", cap);
		wait_reaped(c, &reaped, i);     /* one write in flight at a time */
		*out = msg;
		zd_perf_post_write_wr(c, &wr, i + 1, true);
		/* Its completion while the write travels (at once on shm), as
		 * ib_write_lat polls its CQ right after the post; the clock is
		 * read then too, off the path from the peer's byte to ours
		 * (consecutive stamps are still one round trip apart). */
		reap_req(c, &reaped);
		if (t)
			t[i] = zd_perf_ticks();
		if (client)
			spin_tag(c, in, tag, &reaped, &w);
		if (msg & TAG_LAST)
			break;
	}
	if (t && client)
		t[i + 1] = zd_perf_ticks();
	wait_reaped(c, &reaped, i + 1);
	return i + 1;
}

/* write_imm's immediate data: the exchange number, and the client's "last". */
#define IMM_LAST 0x80000000u
#define IMM_SEQ  0x7fffffffu

/* Waits for the receive exchange @i's write with immediate data consumed,
 * checks it (length, exchange number, and the written tag byte visible
 * once the completion is), reposts it; returns the immediate data. */
static uint32_t recv_imm(struct zd_perf_conn *c, uint32_t size, uint8_t tag, uint64_t i,
			 uint64_t *reaped)
{
	struct zd_perf_waiter w;
	uint32_t len, imm;
	uint64_t ck;

	zd_perf_waiter_init(&w, 0, "the peer's RDMA write with immediate data");
	while (!(ck = zd_perf_poll_recv_imm(c, &len, &imm))) {
		reap_req(c, reaped);
		zd_perf_waiter_tick(c, &w);
	}
	if (len != size)
		zd_perf_die("write with immediate data %" PRIu64 ": the receive says %" PRIu32
			    " bytes, %" PRIu32 " were written", i, len, size);
	if ((imm & IMM_SEQ) != (uint32_t)(i & IMM_SEQ))
		zd_perf_die("write with immediate data %" PRIu64 " carried immediate %#" PRIx32
			    " (exchange %" PRIu32 ")", i, imm, imm & IMM_SEQ);
	if (__atomic_load_n(c->buf + size - 1, __ATOMIC_ACQUIRE) != tag)
		zd_perf_die("write with immediate data %" PRIu64 ": its receive completed before "
			    "the written data was visible (tag %#x, found %#x)", i, tag,
			    c->buf[size - 1]);
	zd_perf_post_recv(c, ck);
	return imm;
}

static uint64_t write_imm_pingpong(struct zd_perf_conn *c, uint32_t size, uint64_t *t,
				   uint64_t cap, uint8_t *seq, uint64_t end_tick)
{
	uint8_t *out = c->buf + c->area_len + size - 1;
	bool client = !c->is_server;
	uint64_t i, reaped = 0;

	for (i = 0;; i++) {
		uint8_t tag = next_tag(seq);
		uint32_t imm;

		if (client)
			imm = (uint32_t)(i & IMM_SEQ) |
			      (client_last(c->o, i, end_tick) ? IMM_LAST : 0);
		else
			imm = recv_imm(c, size, tag, i, &reaped);       /* echoed back */
		if (i >= cap)
			zd_perf_die("the peer sent more messages than agreed (%" PRIu64 ")", cap);
		wait_reaped(c, &reaped, i);     /* one write in flight at a time */
		if (t)
			t[i] = zd_perf_ticks();
		*out = tag;
		zd_perf_post_write_imm(c, size, i + 1, imm);
		if (client)
			recv_imm(c, size, tag, i, &reaped);
		if (imm & IMM_LAST)
			break;
	}
	if (t && client)
		t[i + 1] = zd_perf_ticks();
	wait_reaped(c, &reaped, i + 1);
	return i + 1;
}

/* The client's atomics, each timed from post to completion; the word moves
 * up by one per operation (ZD_PERF_ATOMIC_SEED), and each earlier value
 * returned must be the one before: a chain of compare-and-swaps that all
 * succeed, or fetch-and-adds that none lost. *next: the word's value now. */
static uint64_t atomic_loop(struct zd_perf_conn *c, uint64_t *t, uint64_t end_tick,
			    uint64_t *next)
{
	const struct zd_perf_opts *o = c->o;
	volatile uint64_t *result = (volatile uint64_t *)(c->buf + c->area_len);
	bool cas = o->atomic == ZD_PERF_CMP_AND_SWAP;
	uint64_t i, reaped = 0, expect = *next;

	for (i = 0;; i++) {
		if (o->duration_s ? zd_perf_ticks() >= end_tick : i == o->iters)
			break;
		*result = ~expect;              /* a completion that wrote nothing fails */
		if (t)
			t[i] = zd_perf_ticks();
		if (cas)
			zd_perf_post_atomic(c, i + 1, expect, expect + 1);
		else
			zd_perf_post_atomic(c, i + 1, 1, 0);
		wait_reaped(c, &reaped, i + 1);
		if (*result != expect)
			zd_perf_die("%s %" PRIu64 " returned %#" PRIx64 " as the word's earlier "
				    "value; it was %#" PRIx64 "%s", zd_perf_atomic_name(o->atomic),
				    i, *result, expect, cas ? " (the swap failed)" : "");
		expect++;
	}
	if (t)
		t[i] = zd_perf_ticks();
	*next = expect;
	return i;
}

/* The server's word after the client's @count operations. */
static void atomic_check_target(struct zd_perf_conn *c, uint64_t count)
{
	uint64_t want = ZD_PERF_ATOMIC_SEED + count;
	uint64_t got = __atomic_load_n((uint64_t *)c->buf, __ATOMIC_ACQUIRE);

	if (got != want)
		zd_perf_die("after %" PRIu64 " %s operations the target word is %#" PRIx64
			    ", not %#" PRIx64, count, zd_perf_atomic_name(c->o->atomic), got, want);
}

/* Waits for one receive of `size` bytes, reposts it, returns its tag byte. */
static uint8_t recv_one(struct zd_perf_conn *c, uint32_t size, uint64_t *reaped)
{
	struct zd_perf_waiter w;
	uint32_t len;
	uint64_t ck;
	uint8_t msg;

	zd_perf_waiter_init(&w, 0, "the peer's send");
	while (!(ck = zd_perf_poll_recv(c, &len))) {
		reap_req(c, reaped);
		zd_perf_waiter_tick(c, &w);
	}
	if (len != size)
		zd_perf_die("received %" PRIu32 " bytes, expected %" PRIu32, len, size);
	msg = c->buf[size - 1];
	zd_perf_post_recv(c, ck);
	return msg;
}

static uint64_t send_pingpong(struct zd_perf_conn *c, uint32_t size, uint64_t *t,
			      uint64_t cap, uint8_t *seq, uint64_t end_tick)
{
	uint8_t *out = c->buf + c->area_len + size - 1;
	bool client = !c->is_server;
	uint64_t i, reaped = 0;

	for (i = 0;; i++) {
		uint8_t tag = next_tag(seq), msg;

		if (client) {
			msg = tag | (client_last(c->o, i, end_tick) ? TAG_LAST : 0);
		} else {
			msg = recv_one(c, size, &reaped);
			if ((msg & TAG_MASK) != tag)
				zd_perf_die("message %" PRIu64 " out of order", i);
		}
		if (i >= cap)
			zd_perf_die("the peer sent more messages than agreed (%" PRIu64 ")", cap);
		wait_reaped(c, &reaped, i);
		if (t)
			t[i] = zd_perf_ticks();
		*out = msg;
		zd_perf_post(c, ZD_PERF_SEND, size, i + 1, true);
		if (client && (recv_one(c, size, &reaped) & TAG_MASK) != tag)
			zd_perf_die("answer %" PRIu64 " out of order", i);
		if (msg & TAG_LAST)
			break;
	}
	if (t && client)
		t[i + 1] = zd_perf_ticks();
	wait_reaped(c, &reaped, i + 1);
	return i + 1;
}

static uint64_t read_loop(struct zd_perf_conn *c, uint32_t size, uint64_t *t,
			  uint64_t end_tick)
{
	const struct zd_perf_opts *o = c->o;
	uint64_t i, reaped = 0;

	for (i = 0;; i++) {
		if (o->duration_s ? zd_perf_ticks() >= end_tick : i == o->iters)
			break;
		if (t)
			t[i] = zd_perf_ticks();
		zd_perf_post(c, ZD_PERF_READ, size, i + 1, true);
		wait_reaped(c, &reaped, i + 1);
	}
	if (t)
		t[i] = zd_perf_ticks();
	return i;
}

void zd_perf_run_lat(struct zd_perf_conn *c, struct zd_perf_json *j)
{
	const struct zd_perf_opts *o = c->o;
	bool passive = c->is_server && (o->verb == ZD_PERF_READ || o->verb == ZD_PERF_ATOMIC);
	bool reports = !passive;
	uint32_t sizes[32];
	unsigned nsizes = zd_perf_sizes(o, sizes, 32);
	uint64_t cap = o->duration_s ? UINT64_MAX : o->iters + 1;
	uint64_t *t = NULL, *d = NULL, t0 = zd_perf_ticks();
	uint64_t atomic_next = ZD_PERF_ATOMIC_SEED, atomic_count = 0;
	uint8_t seq = 0;

	if (!o->duration_s) {
		t = calloc(cap, sizeof(*t));
		d = calloc(cap, sizeof(*d));
		if (!t || !d)
			zd_perf_die("out of memory for %" PRIu64 " timestamps", cap);
		zd_perf_prefault(t, cap * sizeof(*t));  /* no fault in the timed loop */
	}
	if (reports)
		zd_perf_print_columns(o);
	for (unsigned k = 0; k < nsizes; k++) {
		uint32_t size = sizes[k];
		uint64_t n = 0, end_tick, samples, run;

		zd_perf_sync(c, 0);
		run = zd_perf_ticks();
		end_tick = run + zd_perf_usec_to_ticks(o->duration_s * 1e6);
		switch (o->verb) {
		case ZD_PERF_WRITE:
			n = write_pingpong(c, size, t, cap, &seq, end_tick);
			break;
		case ZD_PERF_SEND:
			n = send_pingpong(c, size, t, cap, &seq, end_tick);
			break;
		case ZD_PERF_READ:
			if (!passive)
				n = read_loop(c, size, t, end_tick);
			break;
		case ZD_PERF_WRITE_IMM:
			n = write_imm_pingpong(c, size, t, cap, &seq, end_tick);
			break;
		case ZD_PERF_ATOMIC:
			if (!passive) {
				n = atomic_loop(c, t, end_tick, &atomic_next);
				atomic_count += n;
				zd_perf_post_count(c, atomic_count);   /* lands before the sync */
			}
			break;
		case ZD_PERF_EAGER:     /* zd_perf_run_eager */
			zd_perf_die("zd_eager_ring has loops of its own");
		}
		run = zd_perf_ticks() - run;
		zd_perf_sync(c, passive ? zd_perf_passive_limit(c) : 0);
		if (o->verb == ZD_PERF_ATOMIC && passive)
			atomic_check_target(c, __atomic_load_n(&c->ctrl->in_count, __ATOMIC_ACQUIRE));
		zd_perf_progress(o, size, k, nsizes, t0);
		if (!reports)
			continue;

		/* The client has n round trips ending at t[n]; the server's
		 * last one ends on the client, so it has n - 1. */
		samples = c->is_server ? n - 1 : n;
		struct zd_perf_lat_result r = { .size = size, .iters = n };
		/* perftest: a read or an atomic is one round trip, reported
		 * whole; the ping-pongs report half of theirs. */
		double rtt = o->verb == ZD_PERF_READ || o->verb == ZD_PERF_ATOMIC ? 1.0 : 2.0;

		if (o->duration_s) {
			/* No per-message stamps in -D mode: perftest reports
			 * the average and the transaction rate. */
			double us = (double)run / zd_perf_ticks_per_usec;

			r.duration = true;
			r.t_avg = n ? us / (double)n / rtt : 0;
			r.tps = (double)n / (us / 1e6);
		} else if (samples == 0) {
			zd_perf_die("no complete round trip to report");
		} else {
			for (uint64_t i = 0; i < samples; i++)
				d[i] = t[i + 1] - t[i];
			zd_perf_lat_stats(d, samples, rtt, &r);
		}
		zd_perf_print_lat(o, &r);
		zd_perf_json_lat(j, &r);
	}
	zd_perf_sync_last(c);                   /* both done before anyone hangs up */
	free(t);
	free(d);
}
