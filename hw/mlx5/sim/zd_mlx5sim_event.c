/*
 * Completion events of the software mlx5 device, as a ConnectX's event
 * queue: an armed CQ that gets a CQE sets its bit in the region's fired-CQ
 * bitmap and bumps the region's event word, a futex the IA's waiter sleeps
 * on.  Whoever raises an event may be an engine in another process, so
 * the bitmap lives in the region and the futex is not a private one; the
 * waiter takes the bits one CQ at a time.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

void zd_ms_raise_event(struct zd_ms_shared *sh, struct zd_ms_cq *cq)
{
	uint32_t i = cq->cqn - 1;

	if (i >= sh->max_cq)
		return;
	atomic_fetch_add_explicit(&cq->events, 1, memory_order_relaxed);
	atomic_fetch_or_explicit(&zd_ms_fired(sh)[i / 64], 1ull << (i % 64), memory_order_release);
	atomic_fetch_add_explicit(&sh->cnt_events, 1, memory_order_relaxed);
	/* release: the fired bit is visible to whoever sees the new word. */
	atomic_fetch_add_explicit(&sh->event, 1, memory_order_release);
	/* Not FUTEX_PRIVATE: the waiter may be in another process. */
	syscall(SYS_futex, &sh->event, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

_Atomic uint32_t *zd_mlx5sim_event_word(struct zd_mlx5sim_nic *nic)
{
	return &nic->sh->event;
}

static bool any_fired(struct zd_mlx5sim_nic *nic)
{
	_Atomic uint64_t *f = zd_ms_fired(nic->sh);

	for (uint32_t w = 0; w < (nic->sh->max_cq + 63) / 64; w++)
		if (atomic_load_explicit(&f[w], memory_order_acquire))
			return true;
	return false;
}

int zd_mlx5sim_event_wait(struct zd_mlx5sim_nic *nic, int timeout_ms)
{
	struct timespec ts, *tp = NULL;
	uint32_t seen;

	if (timeout_ms >= 0) {
		ts.tv_sec = timeout_ms / 1000;
		ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000;
		tp = &ts;
	}
	for (;;) {
		/* acquire: pairs with the release increment in zd_ms_raise_event;
		 * read before the bits, so a CQ firing after the check changes
		 * the word and the futex does not sleep. */
		seen = atomic_load_explicit(&nic->sh->event, memory_order_acquire);
		if (any_fired(nic) || atomic_exchange(&nic->kicked, 0))
			return 1;
		if (syscall(SYS_futex, &nic->sh->event, FUTEX_WAIT, seen, tp, NULL, 0) != 0 &&
		    errno == ETIMEDOUT)
			return 0;
		if (tp)    /* woken or interrupted: one more look, then report */
			return any_fired(nic) || atomic_exchange(&nic->kicked, 0);
	}
}

void zd_mlx5sim_event_kick(struct zd_mlx5sim_nic *nic)
{
	atomic_store(&nic->kicked, 1);
	atomic_fetch_add_explicit(&nic->sh->event, 1, memory_order_release);
	syscall(SYS_futex, &nic->sh->event, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

int zd_mlx5sim_event_get(struct zd_mlx5sim_nic *nic, void **user)
{
	_Atomic uint64_t *f = zd_ms_fired(nic->sh);

	for (uint32_t w = 0; w < (nic->sh->max_cq + 63) / 64; w++) {
		uint64_t bits = atomic_load_explicit(&f[w], memory_order_acquire);

		while (bits) {
			uint32_t b = (uint32_t)__builtin_ctzll(bits);
			uint64_t m = 1ull << b;

			/* Take the bit: only one caller reports each firing. */
			if (atomic_fetch_and_explicit(&f[w], ~m, memory_order_acq_rel) & m) {
				*user = nic->cq_user[w * 64 + b];
				return 1;
			}
			bits &= ~m;
		}
	}
	return 0;
}
