/* SPDX-License-Identifier: BSD-3-Clause */
/* zd_waiter slow paths: futex sleep and wake, membarrier, eventfd. */

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "zd_waiter.h"

/* ---- membarrier (asymmetric mode) ---------------------------------------- */

static pthread_once_t zd_waiter_once = PTHREAD_ONCE_INIT;
static bool zd_waiter_have_membarrier;

static long zd_sys_membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

static void zd_waiter_global_init(void)
{
	long mask = zd_sys_membarrier(MEMBARRIER_CMD_QUERY);

	/* Expedited private barriers need a one-time registration per process;
	 * without it the command fails and we must fall back to fences. */
	if (mask > 0 && (mask & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
	    zd_sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0)
		zd_waiter_have_membarrier = true;
}

/* FENCE-C: after the sleeper announce (or eventfd arming), before the
 * caller's re-check. */
static void zd_waiter_dekker(struct zd_waiter *w)
{
	if (w->flags & ZD_WAITER_FENCE) {
#ifndef ZD_TSAN
		/* Pairs with the seq_cst fence in zd_waiter_notify. */
		atomic_thread_fence(memory_order_seq_cst);
#endif
		/* (TSan: notify's RMW on state pairs with the announce RMW.) */
		return;
	}
	/* Pairs with the compiler barrier in zd_waiter_notify: every running
	 * thread of this process executes a full barrier before this returns. */
	if (zd_sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0)
		return;
	/* Registered, so this cannot fail; if it ever does, the global command
	 * (an RCU grace period: slow, but a barrier on every CPU) is still
	 * correct. No correct fallback exists beyond it. */
	if (zd_sys_membarrier(MEMBARRIER_CMD_GLOBAL) != 0)
		abort();
}

void zd_waiter_fence_heavy(struct zd_waiter *w)
{
	zd_waiter_dekker(w);
}

/* ---- futex ----------------------------------------------------------------- */

/* The epoch half of the state word, as the futex's 32-bit address. */
static uint32_t *zd_waiter_futex_word(struct zd_waiter *w)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (uint32_t *)((char *)&w->state + 4);
#else
	return (uint32_t *)&w->state;
#endif
}

static int zd_waiter_futex_op(const struct zd_waiter *w, int op)
{
	return (w->flags & ZD_WAITER_SHARED) ? op : (op | FUTEX_PRIVATE_FLAG);
}

/* ---- lifecycle ------------------------------------------------------------- */

int zd_waiter_init(struct zd_waiter *w, unsigned flags)
{
	pthread_once(&zd_waiter_once, zd_waiter_global_init);

	flags &= ZD_WAITER_SHARED | ZD_WAITER_FENCE;
	if ((flags & ZD_WAITER_SHARED) || !zd_waiter_have_membarrier)
		flags |= ZD_WAITER_FENCE;
	w->flags = flags;
	atomic_init(&w->state, 0);
	atomic_init(&w->kick, 0);
	atomic_init(&w->fd_pending, 0);
	atomic_init(&w->efd, -1);
	return 0;
}

void zd_waiter_fini(struct zd_waiter *w)
{
	atomic_store_explicit(&w->efd, -1, memory_order_relaxed);
}

/* ---- producer slow path ---------------------------------------------------- */

static void zd_waiter_fd_signal(struct zd_waiter *w)
{
	/* acq_rel RMW: totally ordered with zd_waiter_fd_ack's exchange; if we
	 * read 1 the ack has not happened yet and its re-check will see what we
	 * published before this point. */
	if (atomic_exchange_explicit(&w->fd_pending, 1, memory_order_acq_rel))
		return;

	int efd = atomic_load_explicit(&w->efd, memory_order_relaxed);
	uint64_t one = 1;

	/* EAGAIN means the counter is saturated: it is readable anyway. */
	if (efd >= 0)
		(void)!write(efd, &one, sizeof(one));
}

void zd_waiter_wake(struct zd_waiter *w)
{
	/* release: pairs with the acquire load of state in zd_waiter_wait: a
	 * sleeper that sees the new epoch sees what we published before it.
	 * acquire: pairs with the RMW in zd_waiter_fd_attach (efd visible). */
	uint64_t s = atomic_fetch_add_explicit(&w->state, ZD_WAITER_EPOCH_ONE,
					       memory_order_acq_rel);

	if (s & ZD_WAITER_SLEEPERS)
		syscall(SYS_futex, zd_waiter_futex_word(w),
			zd_waiter_futex_op(w, FUTEX_WAKE), INT_MAX, NULL, NULL, 0);
	if (s & ZD_WAITER_FD_ARMED)
		zd_waiter_fd_signal(w);
}

void zd_waiter_kick(struct zd_waiter *w, uint32_t reason)
{
	/* release: pairs with the acquire in zd_waiter_kicked/take_kick. The
	 * epoch RMW in zd_waiter_wake then continues the release sequence to
	 * the sleeper's prepare RMW, so a waiter that announces after us
	 * sees the bits in its re-check; one that announced before has a stale
	 * ticket and is woken. */
	atomic_fetch_or_explicit(&w->kick, reason, memory_order_release);
	zd_waiter_wake(w);
}

uint32_t zd_waiter_take_kick(struct zd_waiter *w)
{
	/* acquire: pairs with the release RMW in zd_waiter_kick. */
	return atomic_exchange_explicit(&w->kick, 0, memory_order_acquire);
}

/* ---- consumer -------------------------------------------------------------- */

uint32_t zd_waiter_prepare(struct zd_waiter *w)
{
	/* seq_cst RMW: the sleeper announce, and the ticket is the epoch at that
	 * very instant. Also acquires any kick release sequence. */
	uint64_t s = atomic_fetch_add_explicit(&w->state, 1, memory_order_seq_cst);

	zd_waiter_dekker(w);    /* FENCE-C */
	return (uint32_t)(s >> 32);
}

void zd_waiter_cancel(struct zd_waiter *w)
{
	/* relaxed: only withdraws the announce; a notifier that still saw it
	 * merely pays a needless wake. */
	atomic_fetch_sub_explicit(&w->state, 1, memory_order_relaxed);
}

enum zd_wait_status zd_waiter_wait(struct zd_waiter *w, uint32_t ticket,
				   uint64_t timeout_us)
{
	enum zd_wait_status st = ZD_WAIT_TIMEOUT;
	int err = ETIMEDOUT;

	if (timeout_us != 0) {
		struct timespec ts, *tsp = NULL;

		if (timeout_us != ZD_WAIT_INFINITE) {
			ts.tv_sec = (time_t)(timeout_us / 1000000u);
			ts.tv_nsec = (long)(timeout_us % 1000000u) * 1000;
			tsp = &ts;
		}
		/* FUTEX_WAIT: relative timeout on CLOCK_MONOTONIC; returns
		 * EAGAIN at once if the epoch is no longer 'ticket'. */
		long rc = syscall(SYS_futex, zd_waiter_futex_word(w),
				  zd_waiter_futex_op(w, FUTEX_WAIT), ticket, tsp,
				  NULL, 0);
		err = rc == 0 ? 0 : errno;
	}

	/* acquire: pairs with the release RMW in zd_waiter_wake. */
	uint32_t epoch = (uint32_t)(atomic_load_explicit(&w->state,
					memory_order_acquire) >> 32);
	if (epoch != ticket)
		st = ZD_WAIT_NOTIFIED;
	else if (err == ETIMEDOUT)
		st = ZD_WAIT_TIMEOUT;
	else
		st = ZD_WAIT_SPURIOUS;

	atomic_fetch_sub_explicit(&w->state, 1, memory_order_relaxed);
	return st;
}

static uint64_t zd_waiter_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

enum zd_wait_status zd_waiter_wait_cond(struct zd_waiter *w,
					zd_waiter_cond_fn cond, void *arg,
					uint64_t timeout_us, unsigned spin)
{
	bool infinite = timeout_us == ZD_WAIT_INFINITE;
	uint64_t deadline = 0;

	if (cond(arg))
		return ZD_WAIT_READY;
	if (zd_waiter_kicked(w))
		return ZD_WAIT_KICKED;
	if (timeout_us == 0)
		return ZD_WAIT_TIMEOUT;

	if (!infinite) {
		/* Saturate: anything beyond ~584 years is forever anyway. */
		uint64_t ns = timeout_us > UINT64_MAX / 1000u ?
			      UINT64_MAX : timeout_us * 1000u;
		uint64_t now = zd_waiter_now_ns();

		deadline = ns > UINT64_MAX - now ? UINT64_MAX : now + ns;
	}

	for (unsigned i = 0; i < spin; i++) {
		zd_cpu_relax();
		if (cond(arg))
			return ZD_WAIT_READY;
	}

	for (;;) {
		uint64_t left_us = ZD_WAIT_INFINITE;

		if (zd_waiter_kicked(w))
			return ZD_WAIT_KICKED;
		if (!infinite) {
			uint64_t now = zd_waiter_now_ns();

			if (now >= deadline)
				return ZD_WAIT_TIMEOUT;
			/* Round up so the futex never returns early. */
			left_us = (deadline - now + 999u) / 1000u;
		}

		uint32_t ticket = zd_waiter_prepare(w);

		if (cond(arg)) {
			zd_waiter_cancel(w);
			return ZD_WAIT_READY;
		}
		if (zd_waiter_kicked(w)) {
			zd_waiter_cancel(w);
			return ZD_WAIT_KICKED;
		}
		(void)zd_waiter_wait(w, ticket, left_us);
		if (cond(arg))
			return ZD_WAIT_READY;
	}
}

/* ---- eventfd ----------------------------------------------------------------- */

int zd_waiter_fd_attach(struct zd_waiter *w, int efd)
{
	int none = -1;

	if (efd < 0)
		return -EINVAL;
	if (!atomic_compare_exchange_strong_explicit(&w->efd, &none, efd,
			memory_order_relaxed, memory_order_relaxed))
		return -EBUSY;
	atomic_store_explicit(&w->fd_pending, 0, memory_order_relaxed);
	/* seq_cst RMW: like a sleeper announce (the armed bit is a sleeper that
	 * never leaves). release: publishes efd to zd_waiter_wake's acquire. */
	atomic_fetch_or_explicit(&w->state, ZD_WAITER_FD_ARMED,
				 memory_order_seq_cst);
	/* FENCE-C: from here on every notify takes the slow path; the caller
	 * re-checks its rings once, as after zd_waiter_fd_ack. */
	zd_waiter_dekker(w);
	return 0;
}

void zd_waiter_fd_detach(struct zd_waiter *w)
{
	atomic_fetch_and_explicit(&w->state, ~ZD_WAITER_FD_ARMED,
				  memory_order_seq_cst);
	atomic_store_explicit(&w->efd, -1, memory_order_relaxed);
}

void zd_waiter_fd_ack(struct zd_waiter *w)
{
	/* acq_rel RMW: pairs with the exchange in zd_waiter_fd_signal. If a
	 * producer skipped its write because pending was still 1, we read its
	 * 1 here and see what it published; otherwise it writes the fd again. */
	atomic_exchange_explicit(&w->fd_pending, 0, memory_order_acq_rel);
}
