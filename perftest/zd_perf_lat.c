/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Latency loops, measured as perftest measures them:
 *  - write: ping-pong of RDMA writes; each side polls the last byte of its
 *    own recv area for the peer's write, then writes back. One-way = RTT/2.
 *  - send: ping-pong of send/recv, each side waiting for its receive
 *    completion. One-way = RTT/2.
 *  - read: the client times each RDMA read from post to completion; the
 *    server is passive.
 * The message's last byte carries a 7-bit tag (so a stale byte never passes
 * for a new message) and a "last" bit the client sets on its final message,
 * which is how the server learns the end of a -D run.
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

static bool client_last(const struct zd_perf_opts *o, uint64_t i, uint64_t end_tick)
{
	return o->duration_s ? zd_perf_ticks() >= end_tick : i + 1 == o->iters;
}

/* Returns the exchanges done; t[i] is when exchange i was posted, and for
 * the client t[n] when the last answer arrived. */
static uint64_t write_pingpong(struct zd_perf_conn *c, uint32_t size, uint64_t *t,
			       uint64_t cap, uint8_t *seq, uint64_t end_tick)
{
	volatile uint8_t *in = c->buf + size - 1;
	uint8_t *out = c->buf + c->area_len + size - 1;
	bool client = !c->is_server;
	uint64_t i, reaped = 0;
	struct zd_perf_waiter w;

	for (i = 0;; i++) {
		uint8_t tag = next_tag(seq), msg;

		zd_perf_waiter_init(&w, 0, "the peer's RDMA write");
		if (client) {
			msg = tag | (client_last(c->o, i, end_tick) ? TAG_LAST : 0);
		} else {
			/* Acquire pairs with the peer's write landing in order:
			 * the last byte is the last to arrive. */
			while (((msg = __atomic_load_n(in, __ATOMIC_ACQUIRE)) & TAG_MASK) != tag) {
				reap_req(c, &reaped);
				zd_perf_waiter_tick(c, &w);
			}
		}
		if (i >= cap)
			zd_perf_die("the peer sent more messages than agreed (%" PRIu64 ")", cap);
		wait_reaped(c, &reaped, i);     /* one write in flight at a time */
		if (t)
			t[i] = zd_perf_ticks();
		*out = msg;
		zd_perf_post(c, ZD_PERF_WRITE, size, i + 1, true);
		if (client) {
			while ((__atomic_load_n(in, __ATOMIC_ACQUIRE) & TAG_MASK) != tag) {
				reap_req(c, &reaped);
				zd_perf_waiter_tick(c, &w);
			}
		}
		if (msg & TAG_LAST)
			break;
	}
	if (t && client)
		t[i + 1] = zd_perf_ticks();
	wait_reaped(c, &reaped, i + 1);
	return i + 1;
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
	bool passive = c->is_server && o->verb == ZD_PERF_READ;
	bool reports = !passive;
	uint32_t sizes[32];
	unsigned nsizes = zd_perf_sizes(o, sizes, 32);
	uint64_t cap = o->duration_s ? UINT64_MAX : o->iters + 1;
	uint64_t *t = NULL, *d = NULL, t0 = zd_perf_ticks();
	uint8_t seq = 0;

	if (!o->duration_s) {
		t = calloc(cap, sizeof(*t));
		d = calloc(cap, sizeof(*d));
		if (!t || !d)
			zd_perf_die("out of memory for %" PRIu64 " timestamps", cap);
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
		}
		run = zd_perf_ticks() - run;
		zd_perf_sync(c, passive ? zd_perf_passive_limit(c) : 0);
		zd_perf_progress(o, size, k, nsizes, t0);
		if (!reports)
			continue;

		/* The client has n round trips ending at t[n]; the server's
		 * last one ends on the client, so it has n - 1. */
		samples = c->is_server ? n - 1 : n;
		struct zd_perf_lat_result r = { .size = size, .iters = n };
		double rtt = o->verb == ZD_PERF_READ ? 1.0 : 2.0;

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
