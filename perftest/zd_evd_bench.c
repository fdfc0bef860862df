/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * zd_evd_bench: the EVD event ring and waiter against the hardware floor.
 *
 *   (a) cache-line ping-pong: two threads bounce a counter in one cache line;
 *       half the round trip is the cheapest possible one-way hand-off.
 *   (a') the same through a mailbox per direction (one line each way, as
 *       two rings have): the sequence word alone, a slot-sized payload (56
 *       event bytes + seq in one 64-byte line, what a zd_ring slot moves),
 *       and a whole 120-byte DAT_EVENT in a line pair.
 *   (b) ring hand-off: the same ping-pong through two zd_rings carrying
 *       DAT_EVENTs (enqueue on one side, spinning dequeue on the other; a
 *       slot is one line: event_extension_data is not carried),
 *       halved; with and without zd_waiter_notify (nobody sleeps: this is the
 *       producer's fast-path cost, asymmetric and fence modes), plus the futex
 *       path where the receiver sleeps every time.
 *   (c) throughput into one consumer: 1 producer, and 2 producers where the
 *       consumer thread is producer 1 (manual progress: it enqueues its own
 *       events between dequeues) so two threads fit two cores; --three adds
 *       the oversubscribed 2 producer threads + consumer case.
 *
 * Batches of the different measurements are interleaved (a, b, c, a, b, c,
 * ...) and every ratio is taken between batches run back to back, then the
 * median over batches is reported: on a shared or virtualised host the
 * cache-to-cache latency can change by 10x while the program runs, and only
 * neighbouring measurements are comparable. Not a test: numbers only.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <dat2/udat.h>

#include "evd/zd_ring.h"
#include "evd/zd_waiter.h"

#define MAX_BATCHES 63
#define WARMUP 2000             /* untimed round trips before each batch */

static uint64_t opt_n = 200000;
static unsigned opt_batches = 9;
static bool opt_json;
static bool opt_three;
static bool pin_ok = true;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pin_self(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0)
		pin_ok = false;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(const double *v, unsigned n)
{
	double tmp[MAX_BATCHES];

	memcpy(tmp, v, n * sizeof(*v));
	qsort(tmp, n, sizeof(*tmp), cmp_double);
	return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

static void *xaligned(size_t size)
{
	size = (size + ZD_CACHE_GUARD - 1) & ~(size_t)(ZD_CACHE_GUARD - 1);
	void *p = aligned_alloc(ZD_CACHE_GUARD, size);

	if (!p) {
		perror("aligned_alloc");
		exit(1);
	}
	memset(p, 0, size);
	return p;
}

/* ---- peer threads --------------------------------------------------------- */

struct peer {
	pthread_t tid;
	void (*fn)(void *);
	void *arg;
	int cpu;                /* -1: not pinned */
};

static void *peer_main(void *arg)
{
	struct peer *p = arg;

	if (p->cpu >= 0)
		pin_self(p->cpu);
	p->fn(p->arg);
	return NULL;
}

static void peer_start(struct peer *p, int cpu, void (*fn)(void *), void *arg)
{
	p->fn = fn;
	p->arg = arg;
	p->cpu = cpu;
	if (pthread_create(&p->tid, NULL, peer_main, p) != 0) {
		perror("pthread_create");
		exit(1);
	}
}

static void peer_join(struct peer *p)
{
	pthread_join(p->tid, NULL);
}

/* ---- (a) cache-line ping-pong ----------------------------------------------- */

struct pp {
	alignas(ZD_CACHE_GUARD) _Atomic uint64_t v;
	alignas(ZD_CACHE_GUARD) uint64_t total;    /* round trips, read-only */
};

static void pp_peer(void *arg)
{
	struct pp *s = arg;

	for (uint64_t i = 0; i < s->total; i++) {
		/* acquire: pairs with the main thread's release store. */
		while (atomic_load_explicit(&s->v, memory_order_acquire) != 2 * i + 1)
			zd_cpu_relax();
		/* release: pairs with the main thread's acquire load. */
		atomic_store_explicit(&s->v, 2 * i + 2, memory_order_release);
	}
}

/* One batch; returns the one-way latency in ns. */
static double run_pingpong(uint64_t n)
{
	struct pp *s = xaligned(sizeof(*s));
	struct peer p;
	uint64_t t0 = 0;

	s->total = WARMUP + n;
	peer_start(&p, 1, pp_peer, s);
	for (uint64_t i = 0; i < s->total; i++) {
		if (i == WARMUP)
			t0 = now_ns();
		atomic_store_explicit(&s->v, 2 * i + 1, memory_order_release);
		while (atomic_load_explicit(&s->v, memory_order_acquire) != 2 * i + 2)
			zd_cpu_relax();
	}
	double ns = (double)(now_ns() - t0) / (2.0 * (double)n);
	peer_join(&p);
	free(s);
	return ns;
}

/* (a') The same, but each hop goes through a fixed mailbox per direction
 * (payload, then a sequence word in the same line or line pair), with no
 * ring and no claim: the cost of moving the bytes alone. Unlike (a), each
 * direction has its own line (its own 128-byte block), as with two rings.
 * MSG_SEQ moves the sequence word only; MSG_LINE (mbox64) what a zd_ring
 * slot moves (the DAT_EVENT head, one line); MSG_PAIR (mbox) a whole
 * 120-byte DAT_EVENT (two lines). */
enum msg_mode { MSG_SEQ, MSG_LINE, MSG_PAIR };

struct mbox {
	DAT_EVENT ev;
	_Atomic uint64_t seq;
} __attribute__((aligned(ZD_CACHE_GUARD)));

struct mbox64 {
	alignas(ZD_CACHE_GUARD) unsigned char ev[ZD_RING_EV_BYTES];
	_Atomic uint64_t seq;
};

_Static_assert(offsetof(struct mbox64, seq) + 8 == ZD_CACHE_LINE,
	       "mbox64 is one line, seq last, like a ring slot");

struct msg {
	struct mbox to_peer, to_main;
	struct mbox64 to_peer64, to_main64;
	enum msg_mode mode;
	uint64_t total;
};

static inline void mbox_put(struct msg *s, bool to_peer, const DAT_EVENT *ev,
			    uint64_t seq)
{
	if (s->mode != MSG_PAIR) {
		struct mbox64 *m = to_peer ? &s->to_peer64 : &s->to_main64;

		if (s->mode == MSG_LINE)
			memcpy(m->ev, ev, sizeof(m->ev));
		/* release: pairs with the acquire in mbox_get. */
		atomic_store_explicit(&m->seq, seq, memory_order_release);
	} else {
		struct mbox *m = to_peer ? &s->to_peer : &s->to_main;

		memcpy(&m->ev, ev, sizeof(*ev));
		/* release: pairs with the acquire in mbox_get. */
		atomic_store_explicit(&m->seq, seq, memory_order_release);
	}
}

static inline void mbox_get(struct msg *s, bool to_peer, DAT_EVENT *ev,
			    uint64_t seq)
{
	if (s->mode != MSG_PAIR) {
		struct mbox64 *m = to_peer ? &s->to_peer64 : &s->to_main64;

		/* acquire: pairs with the release in mbox_put. */
		while (atomic_load_explicit(&m->seq, memory_order_acquire) != seq)
			zd_cpu_relax();
		if (s->mode == MSG_LINE)
			memcpy(ev, m->ev, sizeof(m->ev));
	} else {
		struct mbox *m = to_peer ? &s->to_peer : &s->to_main;

		/* acquire: pairs with the release in mbox_put. */
		while (atomic_load_explicit(&m->seq, memory_order_acquire) != seq)
			zd_cpu_relax();
		memcpy(ev, &m->ev, sizeof(*ev));
	}
}

static void msg_peer(void *arg)
{
	struct msg *s = arg;
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	for (uint64_t i = 1; i <= s->total; i++) {
		mbox_get(s, true, &ev, i);
		mbox_put(s, false, &ev, i);
	}
}

static double run_msg(uint64_t n, enum msg_mode mode)
{
	struct msg *s = xaligned(sizeof(*s));
	struct peer p;
	DAT_EVENT ev, back;
	uint64_t t0 = 0;

	memset(&ev, 0, sizeof(ev));
	memset(&back, 0, sizeof(back));
	s->mode = mode;
	s->total = WARMUP + n;
	peer_start(&p, 1, msg_peer, s);
	for (uint64_t i = 1; i <= s->total; i++) {
		if (i == WARMUP + 1)
			t0 = now_ns();
		ev.event_data.dto_completion_event_data.user_cookie.as_64 = i;
		mbox_put(s, true, &ev, i);
		mbox_get(s, false, &back, i);
	}
	double ns = (double)(now_ns() - t0) / (2.0 * (double)n);
	peer_join(&p);
	free(s);
	return ns;
}

/* ---- (b) ring hand-off -------------------------------------------------------- */

enum ho_mode { HO_PLAIN, HO_NOTIFY, HO_SLEEP };

struct ho {
	struct zd_ring *to_peer, *to_main;
	struct zd_waiter w_peer, w_main;  /* each receiver's waiter */
	enum ho_mode mode;
	uint64_t total;
	_Atomic uint64_t errors;
};

struct ho_cond {
	struct zd_ring *r;
};

static bool ho_ready(void *arg)
{
	return zd_ring_ready(((struct ho_cond *)arg)->r, 1) != 0;
}

static inline void ho_recv(struct ho *s, struct zd_ring *r, struct zd_waiter *w,
			   DAT_EVENT *ev)
{
	if (s->mode != HO_SLEEP) {
		while (!zd_ring_dequeue(r, ev))
			zd_cpu_relax();
		return;
	}
	struct ho_cond c = { r };
	while (!zd_ring_dequeue(r, ev))
		(void)zd_waiter_wait_cond(w, ho_ready, &c, ZD_WAIT_INFINITE, 0);
}

static inline void ho_send(struct ho *s, struct zd_ring *r, struct zd_waiter *w,
			   const DAT_EVENT *ev)
{
	while (!zd_ring_enqueue(r, ev))
		zd_cpu_relax();
	if (s->mode != HO_PLAIN)
		zd_waiter_notify(w);
}

static void ho_peer(void *arg)
{
	struct ho *s = arg;
	DAT_EVENT ev;

	for (uint64_t i = 0; i < s->total; i++) {
		ho_recv(s, s->to_peer, &s->w_peer, &ev);
		if (ev.event_data.dto_completion_event_data.user_cookie.as_64 != i)
			atomic_fetch_add(&s->errors, 1);
		ho_send(s, s->to_main, &s->w_main, &ev);
	}
}

/* One batch of n round trips; returns the one-way latency in ns. */
static double run_handoff(enum ho_mode mode, unsigned waiter_flags, uint64_t n,
			  bool *asym)
{
	struct ho *s = xaligned(sizeof(*s));
	struct peer p;
	DAT_EVENT ev, back;
	uint64_t warm = mode == HO_SLEEP ? WARMUP / 20 : WARMUP, t0 = 0;

	s->to_peer = zd_ring_create(256);
	s->to_main = zd_ring_create(256);
	zd_waiter_init(&s->w_peer, waiter_flags);
	zd_waiter_init(&s->w_main, waiter_flags);
	if (asym)
		*asym = zd_waiter_is_asymmetric(&s->w_main);
	s->mode = mode;
	s->total = warm + n;
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_DTO_COMPLETION_EVENT;

	peer_start(&p, 1, ho_peer, s);
	for (uint64_t i = 0; i < s->total; i++) {
		if (i == warm)
			t0 = now_ns();
		ev.event_data.dto_completion_event_data.user_cookie.as_64 = i;
		ho_send(s, s->to_peer, &s->w_peer, &ev);
		ho_recv(s, s->to_main, &s->w_main, &back);
		if (back.event_data.dto_completion_event_data.user_cookie.as_64 != i)
			atomic_fetch_add(&s->errors, 1);
	}
	double ns = (double)(now_ns() - t0) / (2.0 * (double)n);
	peer_join(&p);
	if (atomic_load(&s->errors)) {
		fprintf(stderr, "zd_evd_bench: hand-off corrupted %llu events\n",
			(unsigned long long)atomic_load(&s->errors));
		exit(1);
	}
	zd_waiter_fini(&s->w_peer);
	zd_waiter_fini(&s->w_main);
	zd_ring_destroy(s->to_peer);
	zd_ring_destroy(s->to_main);
	free(s);
	return ns;
}

/* ---- (c) throughput ----------------------------------------------------------- */

enum tp_mode {
	TP_1P,          /* producer thread on CPU 1 -> consumer on CPU 0 */
	TP_2P_SELF,     /* + the consumer enqueues its own events (2 threads) */
	TP_3T,          /* 2 producer threads + consumer (3 threads) */
};

struct tp {
	struct zd_ring *ring;
	uint64_t per_producer;
	_Atomic uint64_t full;  /* refused enqueues, retried */
	_Atomic int go;
};

static void tp_producer(void *arg)
{
	struct tp *s = arg;
	uint64_t full = 0;
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_DTO_COMPLETION_EVENT;
	while (!atomic_load_explicit(&s->go, memory_order_acquire))
		zd_cpu_relax();
	for (uint64_t i = 0; i < s->per_producer; i++) {
		unsigned spins = 0;

		ev.event_data.dto_completion_event_data.user_cookie.as_64 = i;
		while (!zd_ring_enqueue(s->ring, &ev)) {
			full++;
			/* Full: a real poller would go poll something else; here
			 * give the CPU away now and then, which matters when
			 * threads outnumber CPUs. */
			if (++spins % 64 == 0)
				sched_yield();
			else
				zd_cpu_relax();
		}
	}
	atomic_fetch_add(&s->full, full);
}

/* One batch of n events per producer; returns events/s consumed. */
static double run_tput(enum tp_mode mode, uint64_t n, uint64_t *full)
{
	struct tp *s = xaligned(sizeof(*s));
	unsigned threads = mode == TP_3T ? 2 : 1;
	bool self = mode == TP_2P_SELF;
	uint64_t expect = n * (threads + (self ? 1 : 0)), got = 0, own = 0;
	unsigned idle = 0;
	struct peer p[2];
	DAT_EVENT ev, out;

	s->ring = zd_ring_create(1024);
	s->per_producer = n;
	memset(&ev, 0, sizeof(ev));
	peer_start(&p[0], 1, tp_producer, s);
	if (threads > 1)
		peer_start(&p[1], -1, tp_producer, s);  /* oversubscribed */

	uint64_t t0 = now_ns();
	atomic_store_explicit(&s->go, 1, memory_order_release);
	while (got < expect) {
		if (self && own < n) {
			/* manual progress: "poll a CQ", enqueue its completion */
			ev.event_data.dto_completion_event_data.user_cookie.as_64 = own;
			if (zd_ring_enqueue(s->ring, &ev))
				own++;
		}
		if (zd_ring_dequeue(s->ring, &out)) {
			got++;
			idle = 0;
		} else if (++idle % 64 == 0 && mode == TP_3T) {
			sched_yield();  /* a producer may share our CPU */
		} else {
			zd_cpu_relax();
		}
	}
	double rate = (double)expect * 1e9 / (double)(now_ns() - t0);
	for (unsigned t = 0; t < threads; t++)
		peer_join(&p[t]);
	*full += atomic_load(&s->full);
	zd_ring_destroy(s->ring);
	free(s);
	return rate;
}

/* ---- main -------------------------------------------------------------------- */

enum {
	T_FLOOR, T_MSG0, T_MSG64, T_MSG, T_RING, T_NOTIFY, T_FENCE, T_SLEEP,
	T_TP1, T_TP2, T_TP3, T_COUNT
};

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s [-n iterations] [-b batches] [--three] [--json]\n"
		"  -n N      round trips per latency batch (default 200000); the\n"
		"            sleeping hand-off uses N/20, throughput 5*N events\n"
		"  -b B      batches, interleaved; medians reported (default 9,\n"
		"            max %d)\n"
		"  --three   also run 2 producer threads + 1 consumer (3 threads:\n"
		"            oversubscribes a 2-CPU host)\n"
		"  --json    one JSON object instead of the table\n",
		argv0, MAX_BATCHES);
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "three", no_argument, NULL, '3' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static double res[T_COUNT][MAX_BATCHES], ratio[T_COUNT][MAX_BATCHES];
	double med[T_COUNT], rmed[T_COUNT];
	double rmsg0[MAX_BATCHES], rmsg64[MAX_BATCHES], rmsg[MAX_BATCHES];
	uint64_t full[T_COUNT] = { 0 };
	bool asym = false;
	int c;

	while ((c = getopt_long(argc, argv, "n:b:h", lopts, NULL)) != -1) {
		switch (c) {
		case 'n':
			opt_n = strtoull(optarg, NULL, 0);
			break;
		case 'b':
			opt_batches = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'j':
			opt_json = true;
			break;
		case '3':
			opt_three = true;
			break;
		default:
			usage(argv[0]);
			return c == 'h' ? 0 : 2;
		}
	}
	if (opt_n == 0 || opt_batches == 0 || opt_batches > MAX_BATCHES) {
		usage(argv[0]);
		return 2;
	}

	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t sleep_n = opt_n / 20 ? opt_n / 20 : 1;
	unsigned nt = opt_three ? T_COUNT : T_TP3;

	pin_self(0);
	for (unsigned b = 0; b < opt_batches; b++) {
		res[T_FLOOR][b] = run_pingpong(opt_n);
		res[T_MSG0][b] = run_msg(opt_n, MSG_SEQ);
		res[T_MSG64][b] = run_msg(opt_n, MSG_LINE);
		res[T_MSG][b] = run_msg(opt_n, MSG_PAIR);
		res[T_RING][b] = run_handoff(HO_PLAIN, 0, opt_n, NULL);
		res[T_NOTIFY][b] = run_handoff(HO_NOTIFY, 0, opt_n, &asym);
		res[T_FENCE][b] = run_handoff(HO_NOTIFY, ZD_WAITER_FENCE, opt_n, NULL);
		res[T_SLEEP][b] = run_handoff(HO_SLEEP, 0, sleep_n, NULL);
		res[T_TP1][b] = run_tput(TP_1P, 5 * opt_n, &full[T_TP1]);
		res[T_TP2][b] = run_tput(TP_2P_SELF, 5 * opt_n, &full[T_TP2]);
		if (opt_three)
			res[T_TP3][b] = run_tput(TP_3T, 5 * opt_n, &full[T_TP3]);
		for (unsigned t = 0; t < nt; t++)
			ratio[t][b] = res[t][b] / res[T_FLOOR][b];
		rmsg0[b] = res[T_RING][b] / res[T_MSG0][b];
		rmsg64[b] = res[T_RING][b] / res[T_MSG64][b];
		rmsg[b] = res[T_RING][b] / res[T_MSG][b];
	}
	for (unsigned t = 0; t < nt; t++) {
		med[t] = median(res[t], opt_batches);
		rmed[t] = median(ratio[t], opt_batches);
	}
	double ring_vs_msg0 = median(rmsg0, opt_batches);
	double ring_vs_msg64 = median(rmsg64, opt_batches);
	double ring_vs_msg = median(rmsg, opt_batches);

	if (opt_json) {
		printf("{\"iterations\": %llu, \"batches\": %u, \"cpus\": %ld, "
		       "\"pinned\": %s, \"notify_mode\": \"%s\", "
		       "\"pingpong_oneway_ns\": %.1f, "
		       "\"msg0_oneway_ns\": %.1f, \"msg0_ratio\": %.3f, "
		       "\"msg64_oneway_ns\": %.1f, \"msg64_ratio\": %.3f, "
		       "\"msg128_oneway_ns\": %.1f, \"msg128_ratio\": %.3f, "
		       "\"ring_oneway_ns\": %.1f, \"ring_ratio\": %.3f, "
		       "\"ring_vs_msg0\": %.3f, "
		       "\"ring_vs_msg64\": %.3f, \"ring_vs_msg128\": %.3f, "
		       "\"ring_slot_bytes\": %zu, "
		       "\"ring_notify_oneway_ns\": %.1f, \"ring_notify_ratio\": %.3f, "
		       "\"ring_notify_fence_oneway_ns\": %.1f, "
		       "\"ring_notify_fence_ratio\": %.3f, "
		       "\"sleeping_oneway_ns\": %.1f, "
		       "\"tput_1p_events_per_s\": %.0f, "
		       "\"tput_2p_self_events_per_s\": %.0f",
		       (unsigned long long)opt_n, opt_batches, ncpu,
		       pin_ok ? "true" : "false", asym ? "asymmetric" : "fence",
		       med[T_FLOOR], med[T_MSG0], rmed[T_MSG0],
		       med[T_MSG64], rmed[T_MSG64],
		       med[T_MSG], rmed[T_MSG],
		       med[T_RING], rmed[T_RING], ring_vs_msg0, ring_vs_msg64,
		       ring_vs_msg,
		       sizeof(struct zd_ring_slot),
		       med[T_NOTIFY], rmed[T_NOTIFY], med[T_FENCE], rmed[T_FENCE],
		       med[T_SLEEP], med[T_TP1], med[T_TP2]);
		if (opt_three)
			printf(", \"tput_2p_3threads_events_per_s\": %.0f", med[T_TP3]);
		printf("}\n");
		return 0;
	}

	printf("zd_evd_bench: %ld CPUs, threads %s CPU 0 and 1; %u interleaved "
	       "batches x %llu round trips, medians\n", ncpu,
	       pin_ok ? "pinned to" : "NOT pinned (affinity failed) to",
	       opt_batches, (unsigned long long)opt_n);
	printf("DAT_EVENT %zu bytes; ring slot %zu bytes, one line: %zu event "
	       "bytes + seq (event_extension_data\nnot carried); ratio = median "
	       "over batches of (row / floor of the same batch)\n\n",
	       sizeof(DAT_EVENT), sizeof(struct zd_ring_slot),
	       (size_t)ZD_RING_EV_BYTES);
	printf("%-50s %9s %8s\n", "one-way hand-off latency", "ns", "ratio");
	static const char *const name[] = {
		[T_FLOOR] = "(a) cache-line ping-pong (floor)",
		[T_MSG0] = "(a') seq only, a line per direction",
		[T_MSG64] = "(a') 56-byte slot-sized mailbox, one line",
		[T_MSG] = "(a') 120-byte DAT_EVENT mailbox, line pair",
		[T_RING] = "(b) ring hand-off, 2 rings, halved",
		[T_NOTIFY] = "(b) + zd_waiter_notify, asymmetric, no sleeper",
		[T_FENCE] = "(b) + zd_waiter_notify, seq_cst fence, no sleeper",
		[T_SLEEP] = "(b) receiver sleeps every time (futex)",
	};
	for (unsigned t = T_FLOOR; t <= T_SLEEP; t++)
		printf("%-50s %9.1f %7.2fx\n",
		       t == T_NOTIFY && !asym
		       ? "(b) + zd_waiter_notify (no membarrier: fence)" : name[t],
		       med[t], rmed[t]);
	printf("%-50s %9s %7.2fx\n", "(b) ring hand-off vs (a') seq only", "",
	       ring_vs_msg0);
	printf("%-50s %9s %7.2fx\n", "(b) ring hand-off vs (a') one-line mailbox", "",
	       ring_vs_msg64);
	printf("%-50s %9s %7.2fx\n", "(b) ring hand-off vs (a') 120-byte mailbox", "",
	       ring_vs_msg);

	printf("\n%-50s %9s %17s\n", "throughput into one consumer (CPU 0)",
	       "Mevents/s", "full (retried)");
	printf("%-50s %9.2f %17llu\n", "(c) 1 producer thread (CPU 1)",
	       med[T_TP1] / 1e6, (unsigned long long)full[T_TP1]);
	printf("%-50s %9.2f %17llu\n",
	       "(c) 2 producers: consumer is producer 1, + CPU 1",
	       med[T_TP2] / 1e6, (unsigned long long)full[T_TP2]);
	if (opt_three)
		printf("%-50s %9.2f %17llu\n",
		       ncpu < 3 ? "(c) 2 producer threads + consumer, OVERSUBSCRIBED"
			        : "(c) 2 producer threads + consumer",
		       med[T_TP3] / 1e6, (unsigned long long)full[T_TP3]);
	printf("\n(c) 2 producers uses 2 threads on 2 CPUs: the consumer enqueues "
	       "one event of its own before\neach dequeue (manual progress) while "
	       "the other producer streams from CPU 1.\n");
	if (ncpu < 3 && !opt_three)
		printf("2 producer threads + a consumer would oversubscribe %ld "
		       "CPUs: --three runs it anyway.\n", ncpu);
	return 0;
}
