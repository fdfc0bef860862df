/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * evd_stress: the concurrent ring and waiter scenarios without Criterion.
 *
 * Criterion cannot run under ThreadSanitizer (its boxfort arena collides with
 * TSan's address space: Snaipe/Criterion#274), so this plain program carries
 * the multi-threaded scenarios for -Db_sanitize=thread builds; it runs in the
 * normal suite too. Any failure prints a line and exits non-zero; a lost
 * wake-up trips the alarm.
 *
 *   evd_stress [scale]    scale divides the iteration counts (default 1)
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "evd/zd_ring.h"
#include "evd/zd_waiter.h"
#include "zd_evd_test_util.h"

static unsigned scale = 1;
static const char *current = "?";

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		fprintf(stderr, "evd_stress: %s: %s:%d: %s: ", current, \
			__FILE__, __LINE__, #cond); \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr); \
		exit(1); \
	} \
} while (0)

/* ---- MPSC: producer threads + the consumer producing too ---------------- */

struct mp {
	struct zd_ring *ring;
	struct zd_waiter w;
	uint64_t per;
	unsigned bulk;          /* 0: single enqueues */
	bool notify;
};

struct mp_arg {
	struct mp *m;
	uint32_t id;
};

static void *mp_producer(void *arg)
{
	struct mp_arg *a = arg;
	struct mp *m = a->m;
	DAT_EVENT evs[8];

	for (uint64_t i = 0; i < m->per;) {
		unsigned n = m->bulk ? 1 + (unsigned)((i + a->id) % m->bulk) : 1;
		unsigned spins = 0;

		if (n > m->per - i)
			n = (unsigned)(m->per - i);
		for (unsigned k = 0; k < n; k++)
			tu_make_ev(&evs[k], a->id, i + k);
		while (!(m->bulk ? zd_ring_enqueue_bulk(m->ring, evs, n)
				 : zd_ring_enqueue(m->ring, evs)))
			tu_backoff(&spins);
		if (m->notify)
			zd_waiter_notify(&m->w);
		i += n;
	}
	return NULL;
}

static bool mp_ready(void *arg)
{
	return zd_ring_ready(((struct mp *)arg)->ring, 1) != 0;
}

static void mp_run(const char *name, uint32_t cap, uint32_t nthreads,
		   uint64_t per, bool self, unsigned bulk, bool sleep)
{
	struct mp m = { .ring = zd_ring_create(cap), .per = per, .bulk = bulk,
			.notify = sleep };
	struct mp_arg args[8];
	pthread_t tid[8];
	uint64_t next[9] = { 0 }, got = 0, own = 0, expect;
	unsigned run_left = 0, spins = 0;
	uint32_t run_prod = 0;
	DAT_EVENT ev, out[16];

	current = name;
	expect = per * (nthreads + (self ? 1 : 0));
	zd_waiter_init(&m.w, 0);
	for (uint32_t i = 0; i < nthreads; i++) {
		args[i] = (struct mp_arg){ &m, i };
		pthread_create(&tid[i], NULL, mp_producer, &args[i]);
	}
	while (got < expect) {
		if (self && own < per) {
			tu_make_ev(&ev, nthreads, own);
			if (zd_ring_enqueue(m.ring, &ev))
				own++;
		}
		unsigned n = zd_ring_dequeue_burst(m.ring, out, 1 + (unsigned)(got % 16));
		if (n == 0) {
			if (sleep && !(self && own < per))
				CHECK(zd_waiter_wait_cond(&m.w, mp_ready, &m,
						ZD_WAIT_INFINITE, 20) == ZD_WAIT_READY,
				      "wait");
			else
				tu_backoff(&spins);
		}
		for (unsigned k = 0; k < n; k++) {
			uint32_t p;
			uint64_t s;

			CHECK(tu_check_ev(&out[k], &p, &s) && p <= nthreads,
			      "torn event");
			CHECK(s == next[p], "producer %u: got %lu want %lu", p,
			      (unsigned long)s, (unsigned long)next[p]);
			next[p] = s + 1;
			if (bulk && p < nthreads) {
				if (run_left) {
					CHECK(p == run_prod, "bulk run interleaved");
					run_left--;
				} else {
					unsigned len = 1 + (unsigned)((s + p) % bulk);
					if (len > per - s)
						len = (unsigned)(per - s);
					run_prod = p;
					run_left = len - 1;
				}
			}
		}
		got += n;
	}
	for (uint32_t i = 0; i < nthreads; i++)
		pthread_join(tid[i], NULL);
	CHECK(!zd_ring_dequeue(m.ring, &ev), "extra event");
	CHECK(zd_ring_count(m.ring) == 0, "count %u", zd_ring_count(m.ring));
	zd_waiter_fini(&m.w);
	zd_ring_destroy(m.ring);
}

/* ---- ping-pong hand-off, both sides sleeping ------------------------------ */

struct side {
	struct zd_ring *ring;
	struct zd_waiter w;
};

struct pp {
	struct side s[2];
	uint64_t rounds;
};

static void take(struct side *s, DAT_EVENT *ev)
{
	for (;;) {
		if (zd_ring_dequeue(s->ring, ev))
			return;
		uint32_t t = zd_waiter_prepare(&s->w);
		if (zd_ring_dequeue(s->ring, ev)) {
			zd_waiter_cancel(&s->w);
			return;
		}
		(void)zd_waiter_wait(&s->w, t, ZD_WAIT_INFINITE);
	}
}

static void give(struct side *s, uint32_t from, uint64_t i)
{
	DAT_EVENT ev;

	tu_make_ev(&ev, from, i);
	CHECK(zd_ring_enqueue(s->ring, &ev), "inbox full");
	zd_waiter_notify(&s->w);
}

static void *pp_peer(void *arg)
{
	struct pp *c = arg;
	DAT_EVENT ev;
	uint32_t p;
	uint64_t s;

	for (uint64_t i = 0; i < c->rounds; i++) {
		take(&c->s[1], &ev);
		CHECK(tu_check_ev(&ev, &p, &s) && p == 0 && s == i, "peer got %lu",
		      (unsigned long)s);
		give(&c->s[0], 1, i);
	}
	return NULL;
}

static void pp_run(const char *name, unsigned flags, uint64_t rounds)
{
	struct pp c = { .rounds = rounds };
	pthread_t t;
	DAT_EVENT ev;
	uint32_t p;
	uint64_t s;

	current = name;
	for (int i = 0; i < 2; i++) {
		c.s[i].ring = zd_ring_create(2);
		zd_waiter_init(&c.s[i].w, flags);
	}
	pthread_create(&t, NULL, pp_peer, &c);
	for (uint64_t i = 0; i < rounds; i++) {
		give(&c.s[1], 0, i);
		take(&c.s[0], &ev);
		CHECK(tu_check_ev(&ev, &p, &s) && p == 1 && s == i, "got %lu",
		      (unsigned long)s);
	}
	pthread_join(t, NULL);
	for (int i = 0; i < 2; i++) {
		CHECK((atomic_load(&c.s[i].w.state) & ZD_WAITER_SLEEPERS) == 0,
		      "sleeper count leaked");
		zd_waiter_fini(&c.s[i].w);
		zd_ring_destroy(c.s[i].ring);
	}
}

/* ---- eventfd consumer --------------------------------------------------- */

static void *fd_producer(void *arg)
{
	struct mp *m = arg;
	DAT_EVENT ev;

	for (uint64_t i = 0; i < m->per; i++) {
		unsigned spins = 0;

		tu_make_ev(&ev, 0, i);
		while (!zd_ring_enqueue(m->ring, &ev))
			tu_backoff(&spins);
		zd_waiter_notify(&m->w);
		if ((i & 63) == 0)
			usleep(20);
	}
	return NULL;
}

static void fd_run(uint64_t per)
{
	struct mp m = { .ring = zd_ring_create(32), .per = per };
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_t t;
	uint64_t got = 0, v;
	DAT_EVENT ev;

	current = "eventfd";
	CHECK(efd >= 0, "eventfd: %d", errno);
	zd_waiter_init(&m.w, 0);
	CHECK(zd_waiter_fd_attach(&m.w, efd) == 0, "attach");
	pthread_create(&t, NULL, fd_producer, &m);
	for (;;) {
		uint32_t p;
		uint64_t s;

		while (zd_ring_dequeue(m.ring, &ev)) {
			CHECK(tu_check_ev(&ev, &p, &s) && s == got, "order");
			got++;
		}
		if (got == per)
			break;
		struct pollfd pfd = { .fd = efd, .events = POLLIN };
		CHECK(poll(&pfd, 1, 10000) == 1, "lost eventfd wake-up");
		(void)!read(efd, &v, sizeof(v));
		zd_waiter_fd_ack(&m.w);
	}
	pthread_join(t, NULL);
	zd_waiter_fd_detach(&m.w);
	zd_waiter_fini(&m.w);
	close(efd);
	zd_ring_destroy(m.ring);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		scale = (unsigned)strtoul(argv[1], NULL, 0);
	if (scale == 0)
		scale = 1;
	alarm(110);     /* a hang (lost wake-up) fails instead of stalling */

	uint64_t t0 = tu_now_us();
	mp_run("mpsc 3 threads + consumer", 256, 3, 200000 / scale, true, 0, false);
	mp_run("mpsc full, tiny ring", 4, 4, 50000 / scale, true, 0, false);
	mp_run("mpsc bulk runs", 16, 3, 100000 / scale, false, 7, false);
	mp_run("mpsc sleeping consumer", 64, 2, 100000 / scale, false, 0, true);
	pp_run("hand-off asymmetric", 0, 100000 / scale);
	pp_run("hand-off fence", ZD_WAITER_FENCE, 100000 / scale);
	fd_run(20000 / scale);
	printf("evd_stress: all scenarios passed in %lu ms (scale 1/%u)\n",
	       (unsigned long)((tu_now_us() - t0) / 1000), scale);
	return 0;
}
