/*
 * Completion queues of the tcp device, and the IA's waker thread.
 *
 * cq_poll progresses every QP feeding the CQ (zd_tcp_qp_progress: transmit,
 * receive, complete), then moves completions from the CQ's MPSC ring into
 * the EVD ring, never more than @budget.  cq_arm registers the QPs'
 * sockets one-shot in the IA's epoll set; the waker thread wakes the EVDs
 * of a QP whose socket became ready.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <urcu-bp.h>

#include "core/zd_ia.h"
#include "core/zd_ep.h"
#include "evd/zd_evd.h"
#include "evd/zd_evd_cq.h"
#include "hw/tcp/zd_tcp.h"

DAT_RETURN zd_tcp_cq_create(struct zd_evd *evd, uint32_t depth)
{
	struct zd_tcp_cq *cq = calloc(1, sizeof(*cq));
	uint32_t cap = depth < 128 ? 256 : (depth > (1u << 24) ? (1u << 25) : depth * 2);

	if (!cq)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	cq->local = zd_ring_create(cap);
	if (!cq->local) {
		free(cq);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	cq->evd = evd;
	cq->tia = evd->obj.ia->dev_priv;
	pthread_mutex_lock(&cq->tia->lock);
	cq->next = cq->tia->cqs;
	cq->tia->cqs = cq;
	pthread_mutex_unlock(&cq->tia->lock);
	evd->cq_priv = cq;
	return DAT_SUCCESS;
}

void zd_tcp_cq_destroy(struct zd_evd *evd)
{
	struct zd_tcp_cq *cq = evd->cq_priv;

	if (!cq)
		return;
	pthread_mutex_lock(&cq->tia->lock);
	for (struct zd_tcp_cq **pp = &cq->tia->cqs; *pp; pp = &(*pp)->next)
		if (*pp == cq) {
			*pp = cq->next;
			break;
		}
	pthread_mutex_unlock(&cq->tia->lock);
	evd->cq_priv = NULL;
	/* EPs hold their EVDs: no QP is attached any more. */
	free(atomic_load(&cq->qps));
	zd_ring_destroy(cq->local);
	free(cq);
}

/* Copy-on-write change of the CQ's QP list (caller holds tia->lock). */
int zd_tcp_cq_attach(struct zd_tcp_cq *cq, struct zd_tcp_qp *qp, bool add)
{
	struct zd_tcp_qplist *old = atomic_load(&cq->qps), *fresh;
	uint32_t n = old ? old->n : 0, k = 0;

	fresh = malloc(sizeof(*fresh) + (n + 1) * sizeof(fresh->qp[0]));
	if (!fresh)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		if (old->qp[i] != qp)
			fresh->qp[k++] = old->qp[i];
	if (add)
		fresh->qp[k++] = qp;
	fresh->n = k;
	rcu_assign_pointer(cq->qps, fresh);
	/* Pollers iterate under rcu_read_lock: wait them out before free. */
	synchronize_rcu();
	free(old);
	return 0;
}

void zd_tcp_cq_complete(struct zd_tcp_cq *cq, struct zd_ep *ep, DAT_DTO_COOKIE cookie,
			DAT_DTO_COMPLETION_STATUS st, uint64_t len, DAT_DTOS op)
{
	const DAT_DTO_COMPLETION_EVENT_DATA dto = {
		.ep_handle = ep, .user_cookie = cookie, .status = st,
		.transfered_length = st == DAT_DTO_SUCCESS ? (DAT_SEG_LENGTH)len : 0, .operation = op,
	};

	zd_evd_cq_post(cq->local, cq->evd, &dto);
}

int zd_tcp_cq_poll(struct zd_evd *evd, int budget)
{
	struct zd_tcp_cq *cq = evd->cq_priv;
	struct zd_tcp_qplist *l;
	int n = 0;

	if (ZD_UNLIKELY(!cq))
		return 0;
	if (atomic_load_explicit(&cq->qps, memory_order_relaxed)) {
		rcu_read_lock();
		l = rcu_dereference(cq->qps);
		for (uint32_t i = 0; l && i < l->n; i++)
			zd_tcp_qp_progress(l->qp[i], ZD_TCP_W_TX | ZD_TCP_W_RX);
		rcu_read_unlock();
	}
	if (ZD_UNLIKELY(zd_ring_peek(cq->local) == NULL)) {
		/* Idle: drive the other EPs of the IA too (a peer may wait
		 * for one this thread does not poll, as with dapltest's
		 * per-EP EVDs).  A try-lock: never waits on the control path. */
		struct zd_tcp_ia *tia = cq->tia;

		if (pthread_mutex_trylock(&tia->lock) == 0) {
			for (struct zd_tcp_qp *qp = tia->qps; qp; qp = qp->next)
				zd_tcp_qp_progress(qp, ZD_TCP_W_TX | ZD_TCP_W_RX);
			pthread_mutex_unlock(&tia->lock);
		}
	}
	return n + zd_evd_cq_drain(cq->local, evd, budget - n);
}

void zd_tcp_cq_arm(struct zd_evd *evd)
{
	struct zd_tcp_cq *cq = evd->cq_priv;
	struct zd_tcp_ia *tia;

	if (!cq)
		return;
	tia = cq->tia;
	if (ZD_UNLIKELY(!__atomic_load_n(&tia->waker_running, __ATOMIC_ACQUIRE)))
		zd_tcp_waker_start(tia);
	/* About to sleep: drive every EP of the IA once (the peer may wait
	 * for one this thread does not poll), then ask for a wake-up on any
	 * of their sockets. */
	pthread_mutex_lock(&tia->lock);
	for (struct zd_tcp_qp *qp = tia->qps; qp; qp = qp->next) {
		zd_tcp_qp_progress(qp, ZD_TCP_W_TX | ZD_TCP_W_RX);
		zd_tcp_qp_arm(qp);
	}
	pthread_mutex_unlock(&tia->lock);
}

static void *waker_main(void *arg)
{
	struct zd_tcp_ia *tia = arg;
	struct epoll_event ev[32];

	for (;;) {
		int n = epoll_wait(tia->epfd, ev, 32, -1);
		bool stop = false;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		pthread_mutex_lock(&tia->lock);
		for (int i = 0; i < n; i++)
			if (ev[i].data.ptr == NULL)
				stop = true;
		/* A socket of some QP is ready: whoever sleeps on any DTO EVD
		 * of the IA progresses them all (cq_arm).  The event's QP is
		 * not touched (it may be gone). */
		if (!stop)
			for (struct zd_tcp_cq *cq = tia->cqs; cq; cq = cq->next)
				zd_evd_wake(cq->evd);
		pthread_mutex_unlock(&tia->lock);
		if (stop)
			break;
	}
	return NULL;
}

int zd_tcp_waker_start(struct zd_tcp_ia *tia)
{
	int rc = 0;

	pthread_mutex_lock(&tia->lock);
	if (!tia->waker_running) {
		rc = pthread_create(&tia->waker, NULL, waker_main, tia);
		if (rc == 0)
			__atomic_store_n(&tia->waker_running, true, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&tia->lock);
	return rc;
}

void zd_tcp_waker_stop(struct zd_tcp_ia *tia)
{
	uint64_t one = 1;

	if (!tia->waker_running)
		return;
	if (write(tia->stopfd, &one, sizeof(one)) != sizeof(one))
		return;
	pthread_join(tia->waker, NULL);
	tia->waker_running = false;
}
