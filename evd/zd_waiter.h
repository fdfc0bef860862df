/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * zd_waiter: an eventcount on a Linux futex, for a consumer that blocks in
 * dat_evd_wait / dat_cno_wait while producers publish into lock-free rings.
 *
 * Producer, after publishing (e.g. zd_ring_enqueue):
 *     zd_waiter_notify(w);          one load of w's state while nobody sleeps
 *
 * Consumer:
 *     for (;;) {
 *         if (ready()) break;                     fast check, no announce
 *         uint32_t t = zd_waiter_prepare(w);      announce, take a ticket
 *         if (ready()) { zd_waiter_cancel(w); break; }   re-check
 *         zd_waiter_wait(w, t, timeout_us);       sleep unless notified since
 *     }
 * (zd_waiter_wait_cond() packages this loop with spinning and a deadline.)
 *
 * State: one 64-bit word, epoch in the high half (the futex word), sleeper
 * count in the low half. prepare() increments the sleeper count and returns
 * the epoch in the same RMW; a notifier that sees sleepers bumps the epoch and
 * FUTEX_WAKEs; wait() sleeps only while the epoch still equals the ticket, so
 * a notify between prepare and wait makes the wait return at once.
 *
 * The Dekker pair (why no wake-up is lost)
 *   producer:  store event (release) ; FENCE-P ; load state (sleepers?)
 *   consumer:  RMW state (sleepers+1) ; FENCE-C ; load event (re-check)
 *   With a full barrier at FENCE-P and FENCE-C at least one side sees the
 *   other's store: the producer sees the sleeper and wakes it, or the consumer's
 *   re-check sees the event and it cancels. Without FENCE-P the producer's
 *   store can sit in its store buffer while its load of state runs ahead (x86
 *   does exactly this store->load reordering), and both miss. The RMW in
 *   zd_ring_enqueue (the CAS on tail) does not serve as FENCE-P: it precedes
 *   the publishing store of the slot's seq word.
 *   Two ways to pay for the pair, fixed per waiter at init:
 *   - asymmetric (default when the kernel has membarrier): FENCE-P is a
 *     compiler barrier only; FENCE-C is membarrier(PRIVATE_EXPEDITED), which
 *     makes every running thread of the process execute a full barrier before
 *     it returns, upgrading every producer's compiler barrier. The producer's
 *     notify is one plain load; the consumer pays a syscall (plus IPIs) each
 *     time it is about to sleep, when it is about to pay for futex anyway.
 *   - symmetric (ZD_WAITER_FENCE, ZD_WAITER_SHARED, or no membarrier):
 *     FENCE-P and FENCE-C are atomic_thread_fence(seq_cst) (an mfence or
 *     locked op on x86, ~20-40 cycles per notify).
 *   A producer that publishes a batch calls notify once, after the batch. A
 *   consumer enqueueing into its own ring (manual progress) need not notify.
 *   Under ThreadSanitizer (ZD_TSAN; it has no atomic_thread_fence) notify
 *   uses an RMW on the state word instead, which is also a correct FENCE-P.
 *
 * Forced wake-ups: zd_waiter_notify_all() wakes every sleeper unconditionally;
 * zd_waiter_kick() also leaves sticky reason bits (EVD made unwaitable, EVD
 * being freed, CNO triggered...) that waiters read with zd_waiter_kicked() and
 * clear with zd_waiter_take_kick(). Kicks use RMWs on both sides and need no
 * fence.
 *
 * eventfd (dat_cno_fd_create): a waiter can carry an eventfd that becomes
 * readable on notify, for a consumer that sleeps in poll/epoll instead of
 * futex. zd_waiter_fd_attach() sets a permanent "armed" bit in the state word,
 * so every notify takes the slow path; the slow path writes the eventfd only
 * when its 'pending' flag goes 0 -> 1 (one write(2) per burst, not per
 * event). The fd's owner, once poll says readable: read(2) the eventfd to
 * drain it, zd_waiter_fd_ack(), then re-check the rings; the ack is an RMW on
 * 'pending', totally ordered with the producers' RMWs, so either a producer
 * writes the fd again or the re-check sees its event. While an fd is armed a
 * notify costs two RMWs (epoch, pending) and no syscall unless pending was 0.
 * After attach, re-check the rings once (as after an ack).
 *
 * Placement: the state word is read by every notify and written only when a
 * consumer prepares to sleep; keep the struct out of lines the consumer or the
 * producers write on their fast paths (e.g. next to the EVD's read-mostly
 * fields). It needs only natural (8-byte) alignment.
 */
#ifndef ZD_WAITER_H
#define ZD_WAITER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "zd_ring_arch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* timeout_us value meaning "forever" (DAT_TIMEOUT_INFINITE maps to this). */
#define ZD_WAIT_INFINITE UINT64_MAX

/* zd_waiter_init flags */
enum {
	/* The waiter lives in memory shared between processes (futex without
	 * FUTEX_PRIVATE_FLAG). Implies ZD_WAITER_FENCE: membarrier only
	 * reaches the caller's own process. */
	ZD_WAITER_SHARED = 0x1,
	/* Symmetric seq_cst fences even if membarrier is available. */
	ZD_WAITER_FENCE  = 0x2,
};

enum zd_wait_status {
	ZD_WAIT_READY = 0,  /* zd_waiter_wait_cond: the condition holds */
	ZD_WAIT_NOTIFIED,   /* zd_waiter_wait: the epoch moved past the ticket */
	ZD_WAIT_SPURIOUS,   /* zd_waiter_wait: signal (EINTR) or spurious return */
	ZD_WAIT_TIMEOUT,    /* the timeout elapsed */
	ZD_WAIT_KICKED,     /* zd_waiter_wait_cond: kick bits are set */
};

struct zd_waiter {
	/* [63:32] epoch (the futex word), [31] eventfd armed, [30:0] sleepers */
	_Atomic uint64_t state;
	uint32_t flags;                  /* ZD_WAITER_* after init; immutable */
	_Atomic uint32_t kick;           /* sticky zd_waiter_kick() reasons */
	_Atomic uint32_t fd_pending;     /* eventfd written, not yet acked */
	_Atomic int efd;                 /* eventfd, -1 if none */
};

#define ZD_WAITER_SLEEPERS  UINT64_C(0x7fffffff)
#define ZD_WAITER_FD_ARMED  UINT64_C(0x80000000)
#define ZD_WAITER_EPOCH_ONE (UINT64_C(1) << 32)

/* Init: 0. Registers for membarrier once per process (first call), which
 * decides the waiter's mode unless flags force the symmetric one. */
int zd_waiter_init(struct zd_waiter *w, unsigned flags);
/* No sleeper may remain; does not close an attached eventfd. */
void zd_waiter_fini(struct zd_waiter *w);

/* True if this waiter uses the asymmetric (membarrier) scheme. */
static inline bool zd_waiter_is_asymmetric(const struct zd_waiter *w)
{
	return !(w->flags & ZD_WAITER_FENCE);
}

/* Slow path of notify: bump the epoch, FUTEX_WAKE all sleepers, signal the
 * eventfd if armed. Also usable directly as an unconditional wake. */
void zd_waiter_wake(struct zd_waiter *w);

/*
 * Producer: call after publishing. While nobody sleeps (and no eventfd is
 * armed) this is one load of w->state and a branch: no RMW, no syscall.
 */
static inline void zd_waiter_notify(struct zd_waiter *w)
{
#ifdef ZD_TSAN
	/* No fences under TSan: an RMW on state itself is the Dekker store of
	 * this side (RMWs on one location are totally ordered: either it reads
	 * the sleeper's announce, or that announce reads from it and then sees
	 * our publish). A write per notify; sanitizer builds only. */
	if (atomic_fetch_add_explicit(&w->state, 0, memory_order_acq_rel) &
	    (ZD_WAITER_SLEEPERS | ZD_WAITER_FD_ARMED))
		zd_waiter_wake(w);
#else
	if (w->flags & ZD_WAITER_FENCE)
		/* FENCE-P: pairs with the fence after the sleeper announce in
		 * zd_waiter_prepare (Dekker, see top of file). */
		atomic_thread_fence(memory_order_seq_cst);
	else
		/* FENCE-P, compiler half: pairs with the membarrier() in
		 * zd_waiter_prepare, which supplies the CPU barrier. */
		atomic_signal_fence(memory_order_seq_cst);
	/* relaxed: ordered by FENCE-P; zd_waiter_wake's RMW re-reads it. */
	if (zd_unlikely(atomic_load_explicit(&w->state, memory_order_relaxed) &
			(ZD_WAITER_SLEEPERS | ZD_WAITER_FD_ARMED)))
		zd_waiter_wake(w);
#endif
}

/*
 * The two halves of @w's Dekker barrier, for other flags that pair a hot
 * side with a rare side the same way (a poller's "inside" flag against a
 * writer that must wait it out): zd_waiter_fence_light on the hot side
 * between its store and its load (a compiler barrier in asymmetric mode,
 * else a seq_cst fence), zd_waiter_fence_heavy on the rare side between
 * its store and its load (membarrier, else a seq_cst fence).  Not under
 * ZD_TSAN (no fences there): use seq_cst RMWs and loads instead.
 */
static inline void zd_waiter_fence_light(const struct zd_waiter *w)
{
	if (w->flags & ZD_WAITER_FENCE)
		atomic_thread_fence(memory_order_seq_cst);
	else
		atomic_signal_fence(memory_order_seq_cst);
}

void zd_waiter_fence_heavy(struct zd_waiter *w);

/* Unconditional wake of every sleeper (no reason recorded). */
static inline void zd_waiter_notify_all(struct zd_waiter *w)
{
	zd_waiter_wake(w);
}

/* Consumer: announce the intent to sleep; returns the ticket for
 * zd_waiter_wait. Must be followed by exactly one zd_waiter_wait or
 * zd_waiter_cancel. In asymmetric mode this is a membarrier() syscall. */
uint32_t zd_waiter_prepare(struct zd_waiter *w);

/* Consumer: withdraw a prepare() whose re-check found work. */
void zd_waiter_cancel(struct zd_waiter *w);

/*
 * Consumer: sleep until the epoch moves past 'ticket' (NOTIFIED), the timeout
 * in microseconds elapses (TIMEOUT; ZD_WAIT_INFINITE = never), or a signal or
 * spurious futex return (SPURIOUS). Returns at once with NOTIFIED if a notify
 * came after prepare(). timeout_us == 0 never sleeps. Ends the prepare():
 * the caller re-checks its condition and, to wait again, prepares again.
 * After NOTIFIED everything the notifier published before its notify is
 * visible.
 */
enum zd_wait_status zd_waiter_wait(struct zd_waiter *w, uint32_t ticket,
				   uint64_t timeout_us);

/* Wake everyone and set sticky reason bits (non-zero 'reason'). */
void zd_waiter_kick(struct zd_waiter *w, uint32_t reason);

/* Current kick bits (acquire: what the kicker did before is visible). */
static inline uint32_t zd_waiter_kicked(struct zd_waiter *w)
{
	/* acquire: pairs with the release RMW in zd_waiter_kick. */
	return atomic_load_explicit(&w->kick, memory_order_acquire);
}

/* Read and clear the kick bits. */
uint32_t zd_waiter_take_kick(struct zd_waiter *w);

typedef bool (*zd_waiter_cond_fn)(void *arg);

/*
 * Consumer convenience: wait until cond(arg) is true (READY), kick bits are
 * set (KICKED; bits left in place) or timeout_us elapses (TIMEOUT, returned
 * only once at least timeout_us has passed on CLOCK_MONOTONIC). cond is
 * evaluated first, then up to 'spin' more times with a pause in between
 * (skipped when timeout_us == 0), then around each sleep. cond may do work
 * (poll CQs, enqueue into the ring it checks); it must not sleep.
 */
enum zd_wait_status zd_waiter_wait_cond(struct zd_waiter *w,
					zd_waiter_cond_fn cond, void *arg,
					uint64_t timeout_us, unsigned spin);

/* eventfd variant (see top of file). attach: 0, -EINVAL (efd < 0) or -EBUSY
 * (one is attached);
 * the fd must stay open until zd_waiter_fd_detach() returns and producers
 * have left notify (simplest: until zd_waiter_fini). The caller creates it,
 * normally eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC). */
int zd_waiter_fd_attach(struct zd_waiter *w, int efd);
void zd_waiter_fd_detach(struct zd_waiter *w);
/* After draining the eventfd, before re-checking the rings. */
void zd_waiter_fd_ack(struct zd_waiter *w);

#ifdef __cplusplus
}
#endif

#endif /* ZD_WAITER_H */
