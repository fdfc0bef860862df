/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Bandwidth loops, measured as perftest measures them: the client keeps
 * tx-depth writes, reads or sends in flight, one in cq-mod signalled (the
 * rest DAT_COMPLETION_SUPPRESS_FLAG, where the provider supports it), and
 * stamps each post and each signalled completion. Average = all bytes over
 * first post to last completion; peak = best bytes/time over any window
 * from a post to a later signalled completion (perftest's definition).
 *
 * RDMA write and read servers are passive. A send server reposts each
 * receive as it completes and returns credits to the client (an 8-byte RDMA
 * write of its repost count every rx-depth/4 receives): DAT does not promise
 * receiver-not-ready retries, so the client never has more sends out than
 * the server has receives posted.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "zd_perf.h"

#define PEAK_BUDGET 50000000.0          /* inner-loop steps for the peak search */

struct bw_state {
	uint64_t *tp, *tc;                  /* per message: posted, completed (signalled) */
	uint64_t cap;                       /* 0: no per-message stamps */
	uint64_t sends_total;               /* send: over the whole run, for credits */
	uint64_t reposted_total;            /* send server */
};

static double bw_unit(const struct zd_perf_opts *o)
{
	return o->report_gbits ? 125000000.0 : 1048576.0;   /* Gb/s or MB (2^20)/s */
}

static double peak_bw(const struct zd_perf_conn *c, const struct bw_state *s, uint64_t n,
		      uint32_t size, unsigned cq)
{
	uint64_t best = s->tc[n - 1] - s->tp[0];
	double pairs = (double)n * ((double)n / cq + 1);
	uint64_t istep = pairs > PEAK_BUDGET ? (uint64_t)(pairs / PEAK_BUDGET) + 1 : 1;

	best = (best + n - 1) / n;
	for (uint64_t i = 0; i < n; i += istep) {
		for (uint64_t j = (i / cq + 1) * cq - 1;; j += cq) {
			if (j >= n)
				j = n - 1;      /* the last message is always signalled */
			uint64_t per = (s->tc[j] - s->tp[i]) / (j - i + 1);

			if (per && per < best)
				best = per;
			if (j == n - 1)
				break;
		}
	}
	return (double)size * zd_perf_ticks_per_usec * 1e6 / (double)best / bw_unit(c->o);
}

static void bw_client(struct zd_perf_conn *c, struct bw_state *s, uint32_t size,
		      struct zd_perf_bw_result *r)
{
	const struct zd_perf_opts *o = c->o;
	unsigned cq = c->suppress_ok ? o->cq_mod : 1;
	uint64_t n = o->duration_s ? UINT64_MAX : o->iters;
	bool stamps = s->cap && n <= s->cap;
	uint64_t posted = 0, done = 0, t_first = 0, t_last = 0;
	uint64_t end_tick = zd_perf_ticks() + zd_perf_usec_to_ticks(o->duration_s * 1e6);
	uint64_t credit_base = c->peer.rx_depth;
	bool stop = false;
	struct zd_perf_waiter w;
	struct zd_perf_write_wr wr;
	unsigned signal_in = cq;            /* posts until the next signalled one, it included */

	zd_perf_write_wr_init(c, size, &wr);
	zd_perf_waiter_init(&w, 0, "request completions");
	while (!stop || done < posted) {
		while (!stop && posted - done < o->tx_depth) {
			uint64_t now = zd_perf_ticks();

			if (o->verb == ZD_PERF_SEND &&
			    s->sends_total >= credit_base +
			    __atomic_load_n(&c->ctrl->in_credit, __ATOMIC_ACQUIRE))
				break;          /* the server has no receive for it yet */
			/* -D: stop on a signalled message, so the drain sees it. */
			if (o->duration_s && now >= end_tick && posted % cq == 0) {
				stop = true;
				break;
			}
			if (stamps)
				s->tp[posted] = now;
			if (posted == 0)
				t_first = now;
			/* One in cq signalled (a countdown: no division per post). */
			bool sig = --signal_in == 0 || posted + 1 == n;

			if (signal_in == 0)
				signal_in = cq;
			if (o->verb == ZD_PERF_WRITE)
				zd_perf_post_write_wr(c, &wr, posted + 1, sig);
			else
				zd_perf_post(c, o->verb, size, posted + 1, sig);
			posted++;
			s->sends_total++;
			if (posted == n)
				stop = true;
		}
		uint64_t ck = zd_perf_poll_req(c);

		if (ck) {
			done = ck;
			t_last = zd_perf_ticks();
			if (stamps)
				s->tc[ck - 1] = t_last;
			zd_perf_waiter_progress(&w);
		} else {
			zd_perf_waiter_tick(c, &w);
		}
	}
	double us = (double)(t_last - t_first) / zd_perf_ticks_per_usec;

	r->size = size;
	r->iters = done;
	r->bw_avg = us > 0 ? (double)done * size / (us / 1e6) / bw_unit(o) : 0;
	r->msg_rate = us > 0 ? (double)done / us : 0;
	/* perftest reports no peak in -D mode (0.00) and past its stamp limit. */
	r->bw_peak = stamps && done ? peak_bw(c, s, done, size, cq) : 0;
}

/* The send server: count receives, repost them, return credits. Ends after
 * the agreed count, or in -D mode when the client's end-of-size token lands. */
static void send_server(struct zd_perf_conn *c, struct bw_state *s)
{
	const struct zd_perf_opts *o = c->o;
	uint64_t expected = o->duration_s ? UINT64_MAX : o->iters, got = 0;
	uint64_t credit_every = o->rx_depth / 4 ? o->rx_depth / 4 : 1;
	struct zd_perf_waiter w;
	bool ending = false;

	zd_perf_waiter_init(&w, zd_perf_passive_limit(c), "the client's sends");
	while (got < expected) {
		uint32_t len;
		uint64_t ck = zd_perf_poll_recv(c, &len);

		if (ck) {
			got++;
			zd_perf_post_recv(c, ck);
			if (++s->reposted_total % credit_every == 0)
				zd_perf_post_credit(c, s->reposted_total);
			zd_perf_waiter_progress(&w);
			continue;
		}
		if (ending)
			break;          /* drained after the client's token */
		zd_perf_poll_req(c);    /* credit writes */
		if (o->duration_s &&
		    __atomic_load_n(&c->ctrl->in_sync, __ATOMIC_ACQUIRE) > c->sync_token)
			ending = true;  /* the client finished: drain once more */
		zd_perf_waiter_tick(c, &w);
	}
}

void zd_perf_run_bw(struct zd_perf_conn *c, struct zd_perf_json *j)
{
	const struct zd_perf_opts *o = c->o;
	uint32_t sizes[32];
	unsigned nsizes = zd_perf_sizes(o, sizes, 32);
	struct bw_state s = { 0 };
	uint64_t t0 = zd_perf_ticks();

	if (!c->is_server && !o->duration_s && o->iters <= ZD_PERF_MAX_SAMPLES) {
		s.cap = o->iters;
		s.tp = calloc(s.cap, sizeof(*s.tp));
		s.tc = calloc(s.cap, sizeof(*s.tc));
		if (!s.tp || !s.tc)
			zd_perf_die("out of memory for %" PRIu64 " timestamps", s.cap);
		/* Their pages faulted in now, not one every 512 posts of the
		 * timed loop (measured here: 9 us a fault in a VM, 3/4 of an
		 * 8 B run's time).  Volatile stores: a memset of zeroes after
		 * calloc is one the compiler may drop. */
		zd_perf_prefault(s.tp, s.cap * sizeof(*s.tp));
		zd_perf_prefault(s.tc, s.cap * sizeof(*s.tc));
	}
	if (!c->is_server)
		zd_perf_print_columns(o);
	for (unsigned k = 0; k < nsizes; k++) {
		struct zd_perf_bw_result r = { 0 };

		zd_perf_sync(c, 0);
		if (!c->is_server)
			bw_client(c, &s, sizes[k], &r);
		else if (o->verb == ZD_PERF_SEND)
			send_server(c, &s);
		zd_perf_sync(c, c->is_server ? zd_perf_passive_limit(c) : 0);
		zd_perf_progress(o, sizes[k], k, nsizes, t0);
		if (!c->is_server) {
			zd_perf_print_bw(o, &r);
			zd_perf_json_bw(j, &r);
		}
	}
	zd_perf_sync_last(c);
	free(s.tp);
	free(s.tc);
}
