/*
 * Pinned pollers (ARCHITECTURE.md "Progress"): opt-in with
 * ZDAPL_POLLERS=<cpu list>.  One thread per listed CPU, pinned and named
 * zd-poll-<cpu>, started at the first dat_ia_open of the process and
 * stopped when its last IA closes.  Each EVD
 * with a device CQ is given to one poller (round robin) at dat_evd_create;
 * that poller is from then on the only caller of the device's cq_poll for
 * it, and the EVD's consumer (dat_evd_dequeue, dat_evd_wait, dat_cno_wait)
 * only takes from the ring: zd_poller_add leaves evd->cq_poll and
 * evd->cq_poll_one NULL, which every consumer path reads as "nothing to
 * poll, nothing to arm".  SRQs go with the CQs that serve them: the
 * device's cq_poll already reaps them.
 *
 * One sweep of a poller, for each of its EVDs:
 *   - enter the ring as a direct producer (evd->direct_users, the Dekker
 *     pair dat_evd_resize already uses for zd_evd_cq_post_direct): while a
 *     resize swaps the ring the poller skips the EVD and the completions
 *     wait in the CQ;
 *   - cq_poll with the room left in the ring (none: the CQ keeps them, as
 *     under manual progress; the device's own overflow spills);
 *   - leave, then zd_evd_wake when it published (waiter, CNO).
 * Idle: a poller that found nothing spins ZD_POLLER_SPIN sweeps, then
 * yields ZD_POLLER_YIELD times, then sleeps 1 us doubling to 50 us between
 * sweeps; a poller with no EVD at all blocks until one is added.
 */
#ifndef ZD_POLLER_H
#define ZD_POLLER_H

#include <dat2/udat.h>

struct zd_evd;

/* dat_ia_open: counts the IA and, when no poller runs, starts those
 * ZDAPL_POLLERS names.  An unparsable list, or a CPU that is invalid,
 * offline or outside the process's affinity: a one-line "zdapl:" message
 * and DAT_INVALID_PARAMETER, nothing counted (a later dat_ia_open tries
 * again).  Unset or empty: no pollers, DAT_SUCCESS. */
DAT_RETURN zd_pollers_get(void);
/* dat_ia_close (or a failed open after zd_pollers_get): the last IA of the
 * process stops the pollers, so a process with no IA runs no poller
 * thread; the next first dat_ia_open reads ZDAPL_POLLERS again. */
void zd_pollers_put(void);

/* True when pollers run: dat_evd_create (core/zd_evd_obj.c) hands CQ EVDs
 * to them. */
int zd_pollers_on(void);

/* Gives @evd (its device CQ made, evd->dev_poll set) to a poller. */
void zd_poller_add(struct zd_evd *evd);

/* Takes @evd from its poller: on return no poller touches it any more
 * (before its CQ is destroyed).  No-op for an EVD no poller holds. */
void zd_poller_del(struct zd_evd *evd);

#endif
