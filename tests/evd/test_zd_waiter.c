/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the EVD waiter (evd/zd_waiter.h), alone and with the ring. */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "evd/zd_ring.h"
#include "evd/zd_waiter.h"
#include "zd_evd_test_util.h"

/* Every behavioural test runs in both modes: asymmetric (membarrier, when the
 * kernel has it) and symmetric fences. */
static const unsigned modes[] = { 0, ZD_WAITER_FENCE };

static void init_mode(struct zd_waiter *w, unsigned mode)
{
	cr_assert_eq(zd_waiter_init(w, mode), 0);
	if (mode & ZD_WAITER_FENCE)
		cr_assert_not(zd_waiter_is_asymmetric(w));
	cr_log_info("waiter mode: %s", zd_waiter_is_asymmetric(w) ?
		    "asymmetric (membarrier)" : "symmetric fences");
}

/* ---- basics ------------------------------------------------------------- */

Test(zd_waiter, init_flags)
{
	struct zd_waiter w;

	zd_waiter_init(&w, ZD_WAITER_SHARED);
	cr_assert_not(zd_waiter_is_asymmetric(&w), "shared implies fences");
	cr_assert(w.flags & ZD_WAITER_SHARED);
	zd_waiter_fini(&w);
	zd_waiter_init(&w, ZD_WAITER_FENCE);
	cr_assert_not(zd_waiter_is_asymmetric(&w));
	zd_waiter_fini(&w);
	zd_waiter_init(&w, 0);
	cr_log_info("membarrier available: %d", zd_waiter_is_asymmetric(&w));
	zd_waiter_fini(&w);
}

/* With nobody asleep, notify must not write the state (no RMW, no wake). */
Test(zd_waiter, notify_without_sleeper_is_read_only)
{
	struct zd_waiter w;

	zd_waiter_init(&w, 0);
	for (int i = 0; i < 1000; i++)
		zd_waiter_notify(&w);
	cr_assert_eq(atomic_load(&w.state), 0);
	zd_waiter_fini(&w);
}

Test(zd_waiter, prepare_cancel_balance)
{
	struct zd_waiter w;

	zd_waiter_init(&w, 0);
	uint32_t t = zd_waiter_prepare(&w);
	cr_assert_eq(atomic_load(&w.state) & ZD_WAITER_SLEEPERS, 1);
	zd_waiter_cancel(&w);
	cr_assert_eq(atomic_load(&w.state), (uint64_t)t << 32);
	zd_waiter_fini(&w);
}

Test(zd_waiter, timeout_zero_never_sleeps)
{
	struct zd_waiter w;

	zd_waiter_init(&w, 0);
	uint64_t t0 = tu_now_us();
	uint32_t t = zd_waiter_prepare(&w);
	cr_assert_eq(zd_waiter_wait(&w, t, 0), ZD_WAIT_TIMEOUT);
	cr_assert_lt(tu_now_us() - t0, 1000000);
	cr_assert_eq(atomic_load(&w.state) & ZD_WAITER_SLEEPERS, 0);
	zd_waiter_fini(&w);
}

/* A notify between prepare and wait makes wait return at once. */
Test(zd_waiter, notify_before_wait_not_lost)
{
	struct zd_waiter w;

	zd_waiter_init(&w, 0);
	uint32_t t = zd_waiter_prepare(&w);
	zd_waiter_notify(&w);
	uint64_t t0 = tu_now_us();
	cr_assert_eq(zd_waiter_wait(&w, t, ZD_WAIT_INFINITE), ZD_WAIT_NOTIFIED);
	cr_assert_lt(tu_now_us() - t0, 1000000);
	cr_assert_eq(atomic_load(&w.state) & ZD_WAITER_SLEEPERS, 0);
	zd_waiter_fini(&w);
}

static bool cond_false(void *arg)
{
	(void)arg;
	return false;
}

Test(zd_waiter, wait_timeout_lower_bound, .timeout = 30)
{
	for (size_t m = 0; m < 2; m++) {
		struct zd_waiter w;

		init_mode(&w, modes[m]);
		/* raw wait: one futex sleep */
		uint64_t t0 = tu_now_us();
		uint32_t t = zd_waiter_prepare(&w);
		enum zd_wait_status st = zd_waiter_wait(&w, t, 50000);
		uint64_t dt = tu_now_us() - t0;
		cr_assert(st == ZD_WAIT_TIMEOUT || st == ZD_WAIT_SPURIOUS);
		if (st == ZD_WAIT_TIMEOUT)
			cr_assert_geq(dt, 50000, "woke after %lu us", dt);
		cr_assert_lt(dt, 5000000);

		/* wait_cond: only ever TIMEOUT, only after the full timeout */
		for (uint64_t to = 1; to <= 100000; to *= 10) {
			t0 = tu_now_us();
			st = zd_waiter_wait_cond(&w, cond_false, NULL, to, 100);
			dt = tu_now_us() - t0;
			cr_assert_eq(st, ZD_WAIT_TIMEOUT);
			cr_assert_geq(dt, to, "timeout %lu us returned after %lu",
				      to, dt);
			cr_assert_lt(dt, to + 5000000);
		}
		cr_assert_eq(zd_waiter_wait_cond(&w, cond_false, NULL, 0, 1000),
			     ZD_WAIT_TIMEOUT);
		cr_assert_eq(atomic_load(&w.state) & ZD_WAITER_SLEEPERS, 0);
		zd_waiter_fini(&w);
	}
}

/* ---- wake-ups across threads -------------------------------------------- */

struct one_ctx {
	struct zd_ring *ring;
	struct zd_waiter w;
	_Atomic int phase;              /* 1: sleeper about to wait */
	enum zd_wait_status st;
	uint64_t woke_us;
	DAT_EVENT got;
	unsigned spin;
};

static bool ring_has_event(void *arg)
{
	struct one_ctx *c = arg;

	return zd_ring_ready(c->ring, 1) == 1;
}

static void *sleeper(void *arg)
{
	struct one_ctx *c = arg;

	atomic_store(&c->phase, 1);
	c->st = zd_waiter_wait_cond(&c->w, ring_has_event, c, ZD_WAIT_INFINITE,
				    c->spin);
	c->woke_us = tu_now_us();
	if (c->st == ZD_WAIT_READY)
		zd_ring_dequeue(c->ring, &c->got);
	return NULL;
}

Test(zd_waiter, notify_wakes_sleeper, .timeout = 30)
{
	for (size_t m = 0; m < 2; m++) {
		struct one_ctx c = { .ring = zd_ring_create(4) };
		pthread_t t;
		DAT_EVENT ev;
		uint32_t p;
		uint64_t s;

		init_mode(&c.w, modes[m]);
		pthread_create(&t, NULL, sleeper, &c);
		while (atomic_load(&c.phase) == 0)
			sched_yield();
		/* give it time to really block in futex */
		for (int i = 0; i < 1000 &&
		     !(atomic_load(&c.w.state) & ZD_WAITER_SLEEPERS); i++)
			usleep(1000);
		usleep(20000);
		cr_assert_eq(atomic_load(&c.w.state) & ZD_WAITER_SLEEPERS, 1,
			     "sleeper should be announced");

		tu_make_ev(&ev, 5, 42);
		uint64_t t0 = tu_now_us();
		cr_assert(zd_ring_enqueue(c.ring, &ev));
		zd_waiter_notify(&c.w);
		pthread_join(t, NULL);

		cr_assert_eq(c.st, ZD_WAIT_READY);
		cr_assert(tu_check_ev(&c.got, &p, &s));
		cr_assert_eq(s, 42);
		cr_log_info("wake-up latency %lu us", c.woke_us - t0);
		cr_assert_eq(atomic_load(&c.w.state) & ZD_WAITER_SLEEPERS, 0);
		zd_waiter_fini(&c.w);
		zd_ring_destroy(c.ring);
	}
}

/* Kick: forced wake with a sticky reason (e.g. EVD made unwaitable). */
struct kick_ctx {
	struct zd_waiter *w;
	_Atomic int started;
	enum zd_wait_status st;
};

static void *kick_sleeper(void *arg)
{
	struct kick_ctx *k = arg;

	atomic_fetch_add(&k->started, 1);
	k->st = zd_waiter_wait_cond(k->w, cond_false, NULL,
				    ZD_WAIT_INFINITE, 0);
	return NULL;
}

Test(zd_waiter, kick_wakes_all_with_reason, .timeout = 30)
{
	struct zd_waiter w;
	struct kick_ctx k[2] = { { .w = &w }, { .w = &w } };
	pthread_t t[2];

	zd_waiter_init(&w, 0);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, kick_sleeper, &k[i]);
	for (int i = 0; i < 2000 &&
	     (atomic_load(&w.state) & ZD_WAITER_SLEEPERS) < 2; i++)
		usleep(1000);
	usleep(20000);
	zd_waiter_kick(&w, 0x4);
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(k[i].st, ZD_WAIT_KICKED);
	}
	cr_assert_eq(zd_waiter_kicked(&w), 0x4);
	cr_assert_eq(zd_waiter_take_kick(&w), 0x4);
	cr_assert_eq(zd_waiter_take_kick(&w), 0);
	/* a kick with no sleeper is still seen by the next waiter */
	zd_waiter_kick(&w, 0x1);
	cr_assert_eq(zd_waiter_wait_cond(&w, cond_false, NULL,
					 ZD_WAIT_INFINITE, 0), ZD_WAIT_KICKED);
	cr_assert_eq(atomic_load(&w.state) & ZD_WAITER_SLEEPERS, 0);
	zd_waiter_fini(&w);
}

Test(zd_waiter, notify_all_wakes_raw_waiters, .timeout = 30)
{
	struct zd_waiter w;

	zd_waiter_init(&w, 0);
	uint32_t t1 = zd_waiter_prepare(&w);
	uint32_t t2 = zd_waiter_prepare(&w);
	cr_assert_eq(t1, t2);
	zd_waiter_notify_all(&w);
	cr_assert_eq(zd_waiter_wait(&w, t1, ZD_WAIT_INFINITE), ZD_WAIT_NOTIFIED);
	cr_assert_eq(zd_waiter_wait(&w, t2, ZD_WAIT_INFINITE), ZD_WAIT_NOTIFIED);
	zd_waiter_fini(&w);
}

/* ---- lost wake-up stress: 100000 hand-offs, both sides sleeping ----------- */

#define HANDOFF_ROUNDS 100000

struct ho_side {
	struct zd_ring *ring;           /* this side's inbox */
	struct zd_waiter w;
	uint64_t sleeps, cancels;
};

struct ho_ctx {
	struct ho_side side[2];
	uint64_t errors;
	bool raw;                       /* raw prepare/recheck/wait loop */
};

/* Take one event from s's inbox, sleeping as long as it is empty. */
static void ho_take(struct ho_side *s, DAT_EVENT *ev, bool raw)
{
	if (!raw) {
		while (!zd_ring_dequeue(s->ring, ev)) {
			enum zd_wait_status st;
			struct one_ctx c = { .ring = s->ring };

			st = zd_waiter_wait_cond(&s->w, ring_has_event, &c,
						 ZD_WAIT_INFINITE, 0);
			(void)st;
			s->sleeps++;
		}
		return;
	}
	for (;;) {
		if (zd_ring_dequeue(s->ring, ev))
			return;
		uint32_t t = zd_waiter_prepare(&s->w);
		if (zd_ring_dequeue(s->ring, ev)) {   /* re-check */
			zd_waiter_cancel(&s->w);
			s->cancels++;
			return;
		}
		(void)zd_waiter_wait(&s->w, t, ZD_WAIT_INFINITE);
		s->sleeps++;
	}
}

static void ho_give(struct ho_side *s, uint32_t from, uint64_t i)
{
	DAT_EVENT ev;

	tu_make_ev(&ev, from, i);
	/* inbox holds at most one event in a strict ping-pong */
	if (!zd_ring_enqueue(s->ring, &ev))
		abort();
	zd_waiter_notify(&s->w);
}

static void *ho_peer(void *arg)
{
	struct ho_ctx *c = arg;
	DAT_EVENT ev;
	uint32_t p;
	uint64_t s;

	for (uint64_t i = 0; i < HANDOFF_ROUNDS; i++) {
		ho_take(&c->side[1], &ev, c->raw);
		if (!tu_check_ev(&ev, &p, &s) || p != 0 || s != i)
			c->errors++;
		ho_give(&c->side[0], 1, i);
	}
	return NULL;
}

static void handoff(unsigned mode, bool raw)
{
	struct ho_ctx *c = calloc(1, sizeof(*c));
	pthread_t t;
	DAT_EVENT ev;
	uint64_t errors = 0, t0 = tu_now_us();
	uint32_t p;
	uint64_t s;

	c->raw = raw;
	for (int i = 0; i < 2; i++) {
		c->side[i].ring = zd_ring_create(2);
		init_mode(&c->side[i].w, mode);
	}
	pthread_create(&t, NULL, ho_peer, c);
	for (uint64_t i = 0; i < HANDOFF_ROUNDS; i++) {
		ho_give(&c->side[1], 0, i);
		ho_take(&c->side[0], &ev, raw);
		if (!tu_check_ev(&ev, &p, &s) || p != 1 || s != i)
			errors++;
	}
	pthread_join(t, NULL);
	cr_assert_eq(errors + c->errors, 0);
	cr_log_info("%u rounds in %lu ms, sleeps %lu/%lu, cancels %lu/%lu",
		    HANDOFF_ROUNDS, (tu_now_us() - t0) / 1000,
		    c->side[0].sleeps, c->side[1].sleeps,
		    c->side[0].cancels, c->side[1].cancels);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(atomic_load(&c->side[i].w.state) & ZD_WAITER_SLEEPERS, 0);
		zd_waiter_fini(&c->side[i].w);
		zd_ring_destroy(c->side[i].ring);
	}
	free(c);
}

Test(zd_waiter_stress, handoff_raw_asymmetric, .timeout = 60)
{
	handoff(0, true);
}

Test(zd_waiter_stress, handoff_raw_fence, .timeout = 60)
{
	handoff(ZD_WAITER_FENCE, true);
}

Test(zd_waiter_stress, handoff_wait_cond_asymmetric, .timeout = 60)
{
	handoff(0, false);
}

/* ---- streaming producers, sleeping consumer ---------------------------------- */

#define ST_PROD 2
#define ST_PER 100000

struct st_ctx {
	struct zd_ring *ring;
	struct zd_waiter w;
};

struct st_prod {
	struct st_ctx *c;
	uint32_t id;
};

static void *st_producer(void *arg)
{
	struct st_prod *sp = arg;
	DAT_EVENT ev;

	for (uint64_t i = 0; i < ST_PER; i++) {
		unsigned spins = 0;

		tu_make_ev(&ev, sp->id, i);
		while (!zd_ring_enqueue(sp->c->ring, &ev))
			tu_backoff(&spins);
		zd_waiter_notify(&sp->c->w);
		if ((i & 255) == 0)
			usleep(50);     /* let the consumer fall asleep often */
	}
	return NULL;
}

static bool st_ready(void *arg)
{
	struct st_ctx *c = arg;

	return zd_ring_ready(c->ring, 1) != 0;
}

Test(zd_waiter_stress, producers_stream_consumer_sleeps, .timeout = 60)
{
	struct st_ctx c = { .ring = zd_ring_create(64) };
	struct st_prod sp[ST_PROD];
	pthread_t t[ST_PROD];
	uint64_t next[ST_PROD] = { 0 }, got = 0, errors = 0, sleeps = 0;
	DAT_EVENT ev;

	zd_waiter_init(&c.w, 0);
	for (uint32_t i = 0; i < ST_PROD; i++) {
		sp[i] = (struct st_prod){ .c = &c, .id = i };
		pthread_create(&t[i], NULL, st_producer, &sp[i]);
	}
	while (got < (uint64_t)ST_PROD * ST_PER) {
		uint32_t p;
		uint64_t s;

		if (!zd_ring_dequeue(c.ring, &ev)) {
			cr_assert_eq(zd_waiter_wait_cond(&c.w, st_ready, &c,
							 ZD_WAIT_INFINITE, 50),
				     ZD_WAIT_READY);
			sleeps++;
			continue;
		}
		if (!tu_check_ev(&ev, &p, &s) || p >= ST_PROD || s != next[p])
			errors++;
		else
			next[p]++;
		got++;
	}
	for (int i = 0; i < ST_PROD; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(errors, 0);
	cr_log_info("consumer waited %lu times", sleeps);
	zd_waiter_fini(&c.w);
	zd_ring_destroy(c.ring);
}

/* ---- eventfd ------------------------------------------------------------ */

static bool fd_readable(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN);
}

Test(zd_waiter, eventfd_variant)
{
	struct zd_waiter w;
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	uint64_t v;

	cr_assert_geq(efd, 0);
	zd_waiter_init(&w, 0);
	cr_assert_eq(zd_waiter_fd_attach(&w, -1), -EINVAL);
	cr_assert_eq(zd_waiter_fd_attach(&w, efd), 0);
	cr_assert_eq(zd_waiter_fd_attach(&w, efd), -EBUSY);
	cr_assert_not(fd_readable(efd));

	/* a burst of notifies: one write */
	for (int i = 0; i < 10; i++)
		zd_waiter_notify(&w);
	cr_assert(fd_readable(efd));
	cr_assert_eq(read(efd, &v, sizeof(v)), (ssize_t)sizeof(v));
	cr_assert_eq(v, 1, "one write per burst, got %lu", v);
	cr_assert_not(fd_readable(efd));

	/* not acked yet: notifies stay silent */
	zd_waiter_notify(&w);
	cr_assert_not(fd_readable(efd));
	zd_waiter_fd_ack(&w);
	zd_waiter_notify(&w);
	cr_assert(fd_readable(efd));
	cr_assert_eq(read(efd, &v, sizeof(v)), (ssize_t)sizeof(v));
	zd_waiter_fd_ack(&w);

	/* kicks reach the fd too */
	zd_waiter_kick(&w, 0x2);
	cr_assert(fd_readable(efd));
	cr_assert_eq(read(efd, &v, sizeof(v)), (ssize_t)sizeof(v));
	zd_waiter_fd_ack(&w);
	cr_assert_eq(zd_waiter_take_kick(&w), 0x2);

	zd_waiter_fd_detach(&w);
	zd_waiter_notify(&w);
	cr_assert_not(fd_readable(efd));
	cr_assert_eq(atomic_load(&w.state) & (ZD_WAITER_SLEEPERS |
					      ZD_WAITER_FD_ARMED), 0);
	zd_waiter_fini(&w);
	close(efd);
}

/* Cross-thread: a consumer sleeping in poll() is woken by ring producers. */
struct fdp_ctx {
	struct zd_ring *ring;
	struct zd_waiter w;
};

static void *fd_producer(void *arg)
{
	struct fdp_ctx *c = arg;
	DAT_EVENT ev;

	for (uint64_t i = 0; i < 20000; i++) {
		unsigned spins = 0;

		tu_make_ev(&ev, 0, i);
		while (!zd_ring_enqueue(c->ring, &ev))
			tu_backoff(&spins);
		zd_waiter_notify(&c->w);
		if ((i & 63) == 0)
			usleep(20);
	}
	return NULL;
}

Test(zd_waiter_stress, eventfd_poll_consumer, .timeout = 60)
{
	struct fdp_ctx c = { .ring = zd_ring_create(32) };
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	uint64_t got = 0, polls = 0, v;
	pthread_t t;
	DAT_EVENT ev;

	zd_waiter_init(&c.w, 0);
	cr_assert_eq(zd_waiter_fd_attach(&c.w, efd), 0);
	pthread_create(&t, NULL, fd_producer, &c);
	while (got < 20000) {
		uint32_t p;
		uint64_t s;

		/* re-check after attach/ack, then sleep in poll */
		while (zd_ring_dequeue(c.ring, &ev)) {
			cr_assert(tu_check_ev(&ev, &p, &s));
			cr_assert_eq(s, got);
			got++;
		}
		if (got == 20000)
			break;
		struct pollfd pfd = { .fd = efd, .events = POLLIN };
		cr_assert_eq(poll(&pfd, 1, 10000), 1, "lost eventfd wake-up");
		polls++;
		(void)!read(efd, &v, sizeof(v));
		zd_waiter_fd_ack(&c.w);
	}
	pthread_join(t, NULL);
	cr_log_info("eventfd consumer slept in poll %lu times", polls);
	zd_waiter_fd_detach(&c.w);
	zd_waiter_fini(&c.w);
	close(efd);
	zd_ring_destroy(c.ring);
}

/* ---- process-shared: producer in a child process ------------------------ */

Test(zd_waiter, process_shared_ring_and_waiter, .timeout = 30)
{
	size_t rsz = zd_ring_memsize(8);
	size_t sz = rsz + ZD_CACHE_GUARD;
	char *mem = mmap(NULL, sz, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct zd_ring *r = (struct zd_ring *)mem;
	struct zd_waiter *w = (struct zd_waiter *)(mem + rsz);
	struct one_ctx c;
	DAT_EVENT ev;
	uint32_t p;
	uint64_t s;

	cr_assert_neq(mem, MAP_FAILED);
	cr_assert_eq(zd_ring_init(r, 8), 0);
	zd_waiter_init(w, ZD_WAITER_SHARED);

	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		for (uint64_t i = 0; i < 100; i++) {
			tu_make_ev(&ev, 9, i);
			while (!zd_ring_enqueue(r, &ev))
				usleep(100);
			zd_waiter_notify(w);
			usleep(500);
		}
		_exit(0);
	}
	c.ring = r;
	for (uint64_t i = 0; i < 100; i++) {
		cr_assert_eq(zd_waiter_wait_cond(w, ring_has_event, &c,
						 ZD_WAIT_INFINITE, 0),
			     ZD_WAIT_READY);
		cr_assert(zd_ring_dequeue(r, &ev));
		cr_assert(tu_check_ev(&ev, &p, &s));
		cr_assert_eq(s, i);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	zd_waiter_fini(w);
	munmap(mem, sz);
}
