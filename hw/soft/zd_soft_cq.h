/*
 * The completion queue every software device puts behind a DTO EVD: a
 * local MPSC ring of DAT events into which any thread completes this
 * process's own DTOs, drained into the EVD ring by cq_poll (the EVD
 * consumer's, or its pinned poller's: evd/zd_evd_cq.h has the ordering
 * argument), and the lists of QPs the CQ's poller walks.
 *
 * Threads: zd_soft_cq_complete from any thread; zd_soft_cq_drain from the
 * one thread that polls the CQ; init/fini and list changes on the control
 * path, under the device IA's lock.
 */
#ifndef ZD_SOFT_CQ_H
#define ZD_SOFT_CQ_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "evd/zd_evd_cq.h"
#include "evd/zd_ring.h"

struct zd_soft_cq {
	struct zd_evd *evd;
	struct zd_ring *local;            /* MPSC: this process's completions */
	struct zd_soft_cq *next;          /* the device IA's list (its waker's) */
};

/* Sets @cq up for @evd of @depth entries and links it first in @list
 * under @lock (the device then makes its CQ the EVD's cq_priv);
 * DAT_SUCCESS or DAT_INSUFFICIENT_RESOURCES. */
DAT_RETURN zd_soft_cq_init(struct zd_soft_cq *cq, struct zd_evd *evd, uint32_t depth,
			   struct zd_soft_cq **list, pthread_mutex_t *lock);
/* Unlinks @cq (under @lock) and frees its ring. */
void zd_soft_cq_fini(struct zd_soft_cq *cq, struct zd_soft_cq **list, pthread_mutex_t *lock);

/* A DTO completion of this process into @cq (any thread). */
static inline void zd_soft_cq_complete(struct zd_soft_cq *cq, DAT_EP_HANDLE ep,
				       DAT_DTO_COOKIE cookie, DAT_DTO_COMPLETION_STATUS st,
				       DAT_SEG_LENGTH len, DAT_DTOS op)
{
	const DAT_DTO_COMPLETION_EVENT_DATA dto = {
		.ep_handle = ep, .user_cookie = cookie, .status = st,
		.transfered_length = len, .operation = op,
	};

	zd_evd_cq_post(cq->local, cq->evd, &dto);
}

/* Moves up to @budget local completions into the EVD (cq_poll). */
static inline int zd_soft_cq_drain(struct zd_soft_cq *cq, int budget)
{
	return zd_evd_cq_drain(cq->local, cq->evd, budget);
}

/* Wakes the consumers of every CQ of @list (a device's waker thread,
 * holding the lock that guards @list). */
void zd_soft_cq_wake_all(struct zd_soft_cq *list);

/*
 * A list of QPs a poller walks without locks: copy-on-write, changed on
 * the control path only (the caller serialises changes).
 */
struct zd_soft_qplist {
	uint32_t n;
	void *qp[];
};

/* Readers of the list are gone from the old copy when this returns. */
typedef void zd_soft_qplist_wait_fn(void *arg);

/* Adds (@add) or removes @qp; the old copy is freed after @wait(@arg), or
 * after synchronize_rcu() for readers under rcu_read_lock (@wait NULL).
 * 0, or -ENOMEM (the list is unchanged). */
int zd_soft_qplist_change(struct zd_soft_qplist *_Atomic *head, void *qp, bool add,
			  zd_soft_qplist_wait_fn *wait, void *arg);

#endif /* ZD_SOFT_CQ_H */
