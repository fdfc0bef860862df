/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * zd_eager_ring: the eager protocol MPI libraries run over DAT, measured.
 *
 * Each side's registered buffer (--mem: page-aligned malloc by default, as
 * a consumer's valloc'd ring) holds a ring of --slots slots (the recv area)
 * and as many staging slots (the send area). A message of @size bytes is
 * one RDMA write of its payload followed by an 8-byte header word, placed
 * so that the header closes the slot: the receiver knows where to poll
 * without knowing the size. The header is seq << 8 | HDR_LOW, seq counting
 * the messages of one direction from 1: its last byte never changes, so a
 * receiver that polled one byte would hang, and one that trusted the word
 * before the payload had landed fails the payload check below. The
 * receiver loads the whole word (acquire) until it equals the next
 * sequence number's, then checks the payload's first and last bytes.
 *
 * Credits: every slots/2 messages taken (and after a size's last one) the
 * receiver RDMA-writes its count of messages taken into the sender's
 * credit word (zd_perf_ctrl.in_credit); a sender never has more than
 * --slots messages untaken, and reuses a staging slot only once the write
 * that last read it has completed.
 *
 *  - pingpong (the LAT kind): the client writes into the server's ring, the
 *    server takes the message and echoes one of the same size into the
 *    client's ring. One-way latency = RTT / 2, perftest's statistics.
 *    Every write is signalled, as in write_lat.
 *  - stream (the BW kind): the client writes as fast as its credits let it
 *    (one write in zd_perf_eager_cq signalled), the server takes and
 *    checks. The time runs from the first post to the credit that says the
 *    server has taken the last message: message rate and payload bytes/s.
 *
 * Each size has its own slot size (payload + header, rounded to 64 bytes);
 * between sizes both rings are cleared, with no write in flight.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "zd_perf.h"

#define HDR_LOW 0xe5u           /* every header word's last byte */

struct eager {
	struct zd_perf_conn *c;
	uint32_t size;              /* payload bytes */
	uint64_t slot_bytes;
	unsigned slots;
	unsigned tx_window;         /* writes in flight, at most the staging slots */
	unsigned credit_every;
	uint64_t sent;              /* messages written into the peer's ring, all sizes */
	uint64_t taken;             /* messages taken from our ring, all sizes */
	uint64_t credited;          /* the taken count last written to the peer */
};

static inline uint64_t hdr_word(uint64_t seq)
{
	return seq << 8 | HDR_LOW;
}

/* Payload bytes that differ between neighbouring messages and are never
 * 0, the ring's cleared value. */
static inline uint8_t first_byte(uint64_t seq)
{
	return (uint8_t)(seq % 251 + 1);
}

static inline uint8_t last_byte(uint64_t seq)
{
	return (uint8_t)(seq * 7 % 241 + 9);
}

/* Where message @n (0-based, one direction) sits in a ring of this size:
 * the offset of its first payload byte; its header word follows it. */
static inline uint64_t msg_off(const struct eager *e, uint64_t n)
{
	return (n % e->slots + 1) * e->slot_bytes - ZD_PERF_EAGER_HDR_BYTES - e->size;
}

static void send_credit(struct eager *e)
{
	zd_perf_post_credit(e->c, e->taken);
	e->credited = e->taken;
}

/* The next message into the peer's ring, once its credits and our staging
 * slot allow. Cookie = seq, so data_done counts the writes completed. */
static void eager_send(struct eager *e, bool signalled)
{
	struct zd_perf_conn *c = e->c;
	uint64_t seq = e->sent + 1, off = msg_off(e, e->sent);
	uint8_t *src = c->buf + c->area_len + off;
	struct zd_perf_waiter w;

	zd_perf_waiter_init(&w, 0, "credits from the peer or our writes to complete");
	/* Acquire pairs with the landing of the peer's credit write: a slot
	 * it counts as taken is no longer read. */
	while (e->sent - __atomic_load_n(&c->ctrl->in_credit, __ATOMIC_ACQUIRE) >= e->slots ||
	       e->sent - c->data_done >= e->tx_window) {
		zd_perf_poll_req(c);
		zd_perf_waiter_tick(c, &w);
	}
	uint64_t hdr = hdr_word(seq);

	src[0] = first_byte(seq);
	src[e->size - 1] = last_byte(seq);
	memcpy(src + e->size, &hdr, sizeof(hdr));
	zd_perf_post_write_at(c, c->area_len + off, off, e->size + ZD_PERF_EAGER_HDR_BYTES,
			      seq, signalled);
	e->sent++;
}

/* Waits for the next message in our ring, checks it, takes it. */
static void eager_recv(struct eager *e)
{
	struct zd_perf_conn *c = e->c;
	uint64_t seq = e->taken + 1, off = msg_off(e, e->taken), want = hdr_word(seq);
	const uint8_t *msg = c->buf + off;
	const uint64_t *hdr = (const uint64_t *)(msg + e->size);
	unsigned every = c->o->evd_every, spins = 0;
	struct zd_perf_waiter w;

	zd_perf_waiter_init(&w, 0, "the peer's next message");
	/* Acquire pairs with the peer's write landing in order: the payload
	 * is visible once the header word after it is. */
	while (__atomic_load_n(hdr, __ATOMIC_ACQUIRE) != want) {
		if (every && ++spins >= every) {
			zd_perf_poll_req(c);
			spins = 0;
		}
		zd_perf_waiter_tick(c, &w);
	}
	if (msg[e->size - 1] != last_byte(seq) || (e->size > 1 && msg[0] != first_byte(seq)))
		zd_perf_die("message %" PRIu64 " (%" PRIu32 " bytes, slot %" PRIu64 "): payload "
			    "bytes %#x..%#x under its header word, expected %#x..%#x",
			    seq, e->size, (seq - 1) % e->slots, msg[0], msg[e->size - 1],
			    e->size > 1 ? first_byte(seq) : last_byte(seq), last_byte(seq));
	e->taken++;
	if (e->taken - e->credited >= e->credit_every)
		send_credit(e);
}

/* Our writes of this size completed (the last one is always signalled). */
static void wait_sent(struct eager *e)
{
	struct zd_perf_waiter w;

	zd_perf_waiter_init(&w, 0, "our writes to complete");
	while (e->c->data_done < e->sent) {
		zd_perf_poll_req(e->c);
		zd_perf_waiter_tick(e->c, &w);
	}
}

/* Returns the exchanges done; the client's t[i] is when exchange i began,
 * t[n] when the last echo arrived. */
static uint64_t pingpong(struct eager *e, uint64_t n, uint64_t *t)
{
	bool client = !e->c->is_server;

	for (uint64_t i = 0; i < n; i++) {
		if (client) {
			t[i] = zd_perf_ticks();
			eager_send(e, true);
			eager_recv(e);
		} else {
			eager_recv(e);
			t[i] = zd_perf_ticks();
			eager_send(e, true);
		}
	}
	if (client)
		t[n] = zd_perf_ticks();
	return n;
}

/* The client's stream: n messages, first post to the last one's credit. */
static void stream(struct eager *e, uint64_t n, unsigned cq, struct zd_perf_bw_result *r)
{
	struct zd_perf_conn *c = e->c;
	uint64_t t_first = zd_perf_ticks(), t_end;
	struct zd_perf_waiter w;

	for (uint64_t i = 0; i < n; i++)
		eager_send(e, (i + 1) % cq == 0 || i + 1 == n);
	zd_perf_waiter_init(&w, 0, "the server to take the last message");
	while (__atomic_load_n(&c->ctrl->in_credit, __ATOMIC_ACQUIRE) < e->sent) {
		zd_perf_poll_req(c);
		zd_perf_waiter_tick(c, &w);
	}
	t_end = zd_perf_ticks();

	double us = (double)(t_end - t_first) / zd_perf_ticks_per_usec;
	double unit = c->o->report_gbits ? 125000000.0 : 1048576.0;

	r->size = e->size;
	r->iters = n;
	r->msg_rate = us > 0 ? (double)n / us : 0;
	r->bw_avg = us > 0 ? (double)n * e->size / (us / 1e6) / unit : 0;
	r->bw_peak = 0;         /* no per-message stamps: perftest's 0.00 */
}

void zd_perf_run_eager(struct zd_perf_conn *c, struct zd_perf_json *j)
{
	const struct zd_perf_opts *o = c->o;
	bool lat = o->kind == ZD_PERF_LAT, reports = lat || !c->is_server;
	uint32_t sizes[32];
	unsigned nsizes = zd_perf_sizes(o, sizes, 32);
	unsigned cq = c->suppress_ok ? zd_perf_eager_cq(o) : 1;
	uint64_t *t = NULL, *d = NULL, t0 = zd_perf_ticks();
	struct eager e = {
		.c = c,
		.slots = o->slots,
		.tx_window = o->tx_depth < o->slots ? o->tx_depth : o->slots,
		.credit_every = o->slots / 2,
	};

	if (lat) {
		t = calloc(o->iters + 1, sizeof(*t));
		d = calloc(o->iters + 1, sizeof(*d));
		if (!t || !d)
			zd_perf_die("out of memory for %" PRIu64 " timestamps", o->iters + 1);
		zd_perf_prefault(t, (o->iters + 1) * sizeof(*t));  /* no fault in the timed loop */
	}
	if (reports)
		zd_perf_print_columns(o);
	for (unsigned k = 0; k < nsizes; k++) {
		struct zd_perf_bw_result br = { 0 };
		uint64_t n = 0;

		e.size = sizes[k];
		e.slot_bytes = zd_perf_eager_slot_bytes(e.size);
		/* No write of the peer's is in flight into our ring: it
		 * starts after the sync below, its last one of the previous
		 * size landed before that size's closing sync token. */
		memset(c->buf, 0, e.slots * e.slot_bytes);
		zd_perf_sync(c, 0);
		if (lat)
			n = pingpong(&e, o->iters, t);
		else if (c->is_server)
			for (uint64_t i = 0; i < o->iters; i++)
				eager_recv(&e);
		else
			stream(&e, o->iters, cq, &br);
		if (e.taken > e.credited)
			send_credit(&e);
		wait_sent(&e);
		zd_perf_sync(c, 0);
		zd_perf_progress(o, e.size, k, nsizes, t0);
		if (!reports)
			continue;
		if (!lat) {
			zd_perf_print_bw(o, &br);
			zd_perf_json_bw(j, &br);
			continue;
		}

		/* As write_lat: the server's last round trip ends on the
		 * client, so it has n - 1. */
		uint64_t samples = c->is_server ? n - 1 : n;
		struct zd_perf_lat_result r = { .size = e.size, .iters = n };

		if (samples == 0)
			zd_perf_die("no complete round trip to report");
		for (uint64_t i = 0; i < samples; i++)
			d[i] = t[i + 1] - t[i];
		zd_perf_lat_stats(d, samples, 2.0, &r);
		zd_perf_print_lat(o, &r);
		zd_perf_json_lat(j, &r);
	}
	zd_perf_sync_last(c);
	free(t);
	free(d);
}
