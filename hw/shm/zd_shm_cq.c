/*
 * Completion queues of the shm device, one per DTO EVD.
 *
 * Two sources feed an EVD, both drained by cq_poll on the EVD consumer's
 * thread (manual progress), straight into evd->ring and never more than
 * @budget:
 *  - receive completions the peers produced in the completion rings of the
 *    QPs whose recv EVD this is (zd_shm_qp_reap), scanned in turn;
 *  - completions of this process's own DTOs (sends, RDMA, flushes), which
 *    any thread pushes into the local ring, an MPSC ring of DAT events.
 * Request completions skip the first step while the local ring is drained: the
 * poster writes them straight into evd->ring (zd_shm_cq_complete_req; the
 * order argument is at zd_evd_cq_post_direct), so a dequeue finds them
 * without polling.  Receive flushes keep to the local ring: they must stay
 * behind the receives still waiting in the completion rings.
 *
 * Waking a sleeping consumer: local completions notify evd->waiter
 * directly.  A peer in another process cannot wake a private futex, so
 * cq_arm raises the IA region's "armed" flag; a peer that publishes a
 * completion and sees it bumps the shared doorbell futex and FUTEX_WAKEs
 * it (zd_shm_peer_ring), and the IA's waker thread, asleep on that futex
 * only while some consumer armed, wakes every CQ waiter of the IA.  No
 * syscall on either side while nobody sleeps.  A consumer in solicited
 * wait (its EVD has solicited_eps) arms ZD_SHM_ARMED_SOLICITED only: a
 * peer rings for it only for a solicited receive or an error, and the
 * consumer, woken, sees the receives before it in order (zd_evd.c).
 *
 * Pinned pollers (ZDAPL_POLLERS, evd/zd_poller.h): the EVD's poller is then
 * the only caller of zd_shm_cq_poll, and nothing here assumes that caller
 * is the EVD's consumer:
 *  - the local ring stays single-consumer: its consumer is whoever calls
 *    cq_poll, now the poller alone (zd_shm_cq_poll_one, the consumer's
 *    shortcut, is not called for a polled EVD);
 *  - posters that write request completions straight into evd->ring
 *    (zd_evd_cq_post_direct) keep EVD order: its argument needs only that
 *    local's consumer enqueues into the EVD ring before it frees the slot
 *    in local (zd_evd_cq_drain does), not which thread that is;
 *  - the recv_qps walk is flagged in @polling by one thread at a time,
 *    the poller; poller_wait's heavy fence (membarrier) reaches it as any
 *    thread of the process;
 *  - reaping only produces into evd->ring (recv_event spills when a
 *    claim fails), so it runs while the consumer dequeues; the poller
 *    holds evd->direct_users around the call, so dat_evd_resize cannot
 *    swap the ring under it;
 *  - nobody arms (cq_arm is manual progress only): peers never ring the
 *    doorbell futex, and the poller wakes the consumer after each poll
 *    that published.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <urcu-bp.h>

#include "core/zd_ia.h"
#include "core/zd_ep.h"
#include "evd/zd_evd.h"
#include "evd/zd_evd_cq.h"
#include "hw/shm/zd_shm.h"

DAT_RETURN zd_shm_cq_create(struct zd_evd *evd, uint32_t depth)
{
	struct zd_shm_ia *sia = evd->obj.ia->dev_priv;
	struct zd_shm_cq *cq = calloc(1, sizeof(*cq));
	DAT_RETURN ret;

	if (!cq)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	cq->sia = sia;
	evd->marks_solicited = 1;  /* zd_shm_qp_reap marks solicited receives */
	ret = zd_soft_cq_init(&cq->soft, evd, depth, &sia->cqs, &sia->lock);
	if (ret != DAT_SUCCESS) {
		free(cq);
		return ret;
	}
	evd->cq_priv = cq;
	return DAT_SUCCESS;
}

void zd_shm_cq_destroy(struct zd_evd *evd)
{
	struct zd_shm_cq *cq = evd->cq_priv;

	if (!cq)
		return;
	evd->cq_priv = NULL;
	zd_soft_cq_fini(&cq->soft, &cq->sia->cqs, &cq->sia->lock);
	/* EPs hold their EVDs: no QP is attached any more. */
	free(atomic_load(&cq->recv_qps));
	free(atomic_load(&cq->send_qps));
	free(cq);
}

/* Waits until @cq's poller is not inside its walk of recv_qps, after the
 * list was swapped.  Dekker with zd_shm_cq_poll: we stored the new list,
 * then the heavy fence, then load polling; the poller stores polling,
 * then the light fence, then loads the list.  Either it loads the new
 * list, or we see it inside and wait for its release store leaving. */
static void poller_wait(void *arg)
{
	struct zd_shm_cq *cq = arg;

#ifdef ZD_TSAN
	/* seq_cst store (caller) and loads: the Dekker pair without fences. */
	while (atomic_load_explicit(&cq->polling, memory_order_seq_cst))
		sched_yield();
#else
	zd_waiter_fence_heavy(&cq->soft.evd->waiter);
	/* acquire: pairs with the poller's release store leaving the walk:
	 * its reads of the old list and its QPs happen before our free. */
	while (atomic_load_explicit(&cq->polling, memory_order_acquire))
		sched_yield();
#endif
}

int zd_shm_cq_attach(struct zd_shm_cq *cq, struct zd_shm_qp *qp, bool recv)
{
	int rc;

	pthread_mutex_lock(&cq->sia->lock);
	rc = recv ? zd_soft_qplist_change(&cq->recv_qps, qp, true, poller_wait, cq)
		  : zd_soft_qplist_change(&cq->send_qps, qp, true, NULL, NULL);
	pthread_mutex_unlock(&cq->sia->lock);
	return rc;
}

void zd_shm_cq_detach(struct zd_shm_cq *cq, struct zd_shm_qp *qp, bool recv)
{
	pthread_mutex_lock(&cq->sia->lock);
	/* On ENOMEM keep the QP listed; it is then a flushed, empty QP. */
	if (recv)
		zd_soft_qplist_change(&cq->recv_qps, qp, false, poller_wait, cq);
	else
		zd_soft_qplist_change(&cq->send_qps, qp, false, NULL, NULL);
	pthread_mutex_unlock(&cq->sia->lock);
}

int zd_shm_cq_poll(struct zd_evd *evd, int budget)
{
	struct zd_shm_cq *cq = evd->cq_priv;
	struct zd_soft_qplist *l;
	int n = 0;

	if (ZD_UNLIKELY(!cq))
		return DAT_QUEUE_EMPTY;
	if (atomic_load_explicit(&cq->recv_qps, memory_order_relaxed)) {
		/* Inside the walk: a writer swapping recv_qps waits until we
		 * leave before it frees the old list (poller_wait). */
#ifdef ZD_TSAN
		atomic_exchange_explicit(&cq->polling, 1, memory_order_seq_cst);
		l = atomic_load_explicit(&cq->recv_qps, memory_order_seq_cst);
#else
		atomic_store_explicit(&cq->polling, 1, memory_order_relaxed);
		/* The light half of the Dekker pair (poller_wait). */
		zd_waiter_fence_light(&evd->waiter);
		/* acquire: pairs with the writer's store of the list. */
		l = atomic_load_explicit(&cq->recv_qps, memory_order_acquire);
#endif
		for (uint32_t i = 0; l && i < l->n && n < budget; i++)
			n += zd_shm_qp_reap(l->qp[i], budget - n);
		/* release: our reads of the list and its QPs are done. */
		atomic_store_explicit(&cq->polling, 0, memory_order_release);
	}
	if (ZD_UNLIKELY(atomic_load_explicit(&cq->backlog, memory_order_relaxed))) {
		rcu_read_lock();
		l = rcu_dereference(cq->send_qps);
		for (uint32_t i = 0; l && i < l->n; i++)
			zd_shm_qp_progress_sq(l->qp[i]);
		rcu_read_unlock();
	}
	return n + zd_soft_cq_drain(&cq->soft, budget - n);
}

/*
 * cq_poll_one (core/zd_device.h): with no receive QP and no queued send
 * (nothing to reap first), the next completion of the local ring straight into
 * the consumer's DAT_EVENT.  It is checked against the EVD after its slot
 * reads as published (zd_evd_direct_ok), and freed only once copied out:
 * a poster that then finds the local ring drained and goes direct
 * (zd_evd_cq_post_direct) is behind it, as after a cq_poll drain.
 */
DAT_RETURN zd_shm_cq_poll_one(struct zd_evd *evd, DAT_EVENT *out)
{
	struct zd_shm_cq *cq = evd->cq_priv;
	const struct zd_ring_slot *s;

	if (ZD_UNLIKELY(!cq))
		return 0;
	if (atomic_load_explicit(&cq->recv_qps, memory_order_relaxed) ||
	    atomic_load_explicit(&cq->backlog, memory_order_relaxed))
		goto slow;
	s = zd_ring_front(cq->soft.local);
	if (!s)
		return DAT_QUEUE_EMPTY;
	if (ZD_UNLIKELY(!zd_evd_direct_ok(evd)))
		goto slow;
	zd_ring_take_front(cq->soft.local, s, out);
	return DAT_SUCCESS;
slow:
	zd_shm_cq_poll(evd, zd_evd_room(evd));
	return zd_evd_take(evd, out);
}

void zd_shm_cq_arm(struct zd_evd *evd)
{
	struct zd_shm_cq *cq = evd->cq_priv;
	struct zd_shm_ia *sia;

	if (!cq)
		return;
	sia = cq->sia;
	if (ZD_UNLIKELY(!__atomic_load_n(&sia->waker_running, __ATOMIC_ACQUIRE)))
		zd_shm_waker_start(sia);
	/* Solicited wait: peers ring only for solicited receives and errors
	 * (zd_shm_post.c comp_publish); the rest waits in the rings. */
	atomic_fetch_or_explicit(&sia->sh->armed,
				 atomic_load_explicit(&evd->solicited_eps, memory_order_relaxed) > 0 ?
				 ZD_SHM_ARMED_SOLICITED : ZD_SHM_ARMED_ANY, memory_order_relaxed);
	/* seq_cst fence: pairs with the one in zd_shm_peer_ring (Dekker): the
	 * re-poll after this arm sees a peer's completion, or the peer sees
	 * armed and rings the doorbell. */
	atomic_thread_fence(memory_order_seq_cst);
	/* Queued (RNR) sends: the target rings our doorbell when it posts a
	 * receive or frees ring space (zd_shm_qp_rnr_ring). */
}

static void *waker_main(void *arg)
{
	struct zd_shm_ia *sia = arg;
	struct zd_shm_ia_shared *sh = sia->sh;
	/* Read before any consumer armed (zd_shm_waker_start): a ring after
	 * an arm always moves the doorbell past it. */
	uint32_t seen = sia->waker_seen;

	for (;;) {
		uint32_t now;

		if (atomic_load_explicit(&sh->closing, memory_order_acquire))
			break;
		/* acquire: pairs with the ringer's release increment. */
		now = atomic_load_explicit(&sh->doorbell, memory_order_acquire);
		if (now == seen) {
			syscall(SYS_futex, &sh->doorbell, FUTEX_WAIT, seen, NULL, NULL, 0);
			continue;
		}
		seen = now;
		/* Clear before waking: a consumer arming after this is woken
		 * by the next ring; one that armed before is woken now. */
		atomic_store_explicit(&sh->armed, 0, memory_order_seq_cst);
		pthread_mutex_lock(&sia->lock);
		zd_soft_cq_wake_all(sia->cqs);
		pthread_mutex_unlock(&sia->lock);
	}
	return NULL;
}

int zd_shm_waker_start(struct zd_shm_ia *sia)
{
	int rc = 0;

	pthread_mutex_lock(&sia->lock);
	if (!sia->waker_running) {
		sia->waker_seen = atomic_load(&sia->sh->doorbell);
		rc = pthread_create(&sia->waker, NULL, waker_main, sia);
		if (rc == 0)
			__atomic_store_n(&sia->waker_running, true, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&sia->lock);
	return rc;
}

void zd_shm_waker_stop(struct zd_shm_ia *sia)
{
	if (!sia->waker_running)
		return;
	atomic_store(&sia->sh->closing, 1);
	atomic_fetch_add(&sia->sh->doorbell, 1);
	syscall(SYS_futex, &sia->sh->doorbell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	pthread_join(sia->waker, NULL);
	sia->waker_running = false;
}
