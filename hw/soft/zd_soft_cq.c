/* The software devices' completion queue shell and QP lists (zd_soft_cq.h). */
#include <errno.h>
#include <stdlib.h>
#include <urcu-bp.h>

#include "evd/zd_evd.h"
#include "evd/zd_rcu.h"
#include "evd/zd_ring_mem.h"
#include "hw/soft/zd_soft_cq.h"

DAT_RETURN zd_soft_cq_init(struct zd_soft_cq *cq, struct zd_evd *evd, uint32_t depth,
			   struct zd_soft_cq **list, pthread_mutex_t *lock)
{
	/* Room for every DTO of the EVD twice over (requests and receive
	 * flushes of one EP can both be outstanding), at least 256. */
	uint32_t cap = depth < 128 ? 256 : (depth > (1u << 24) ? (1u << 25) : depth * 2);

	cq->local = zd_ring_create_in(cap, &zd_ring_mem_cq);
	if (!cq->local)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	cq->evd = evd;
	pthread_mutex_lock(lock);
	cq->next = *list;
	*list = cq;
	pthread_mutex_unlock(lock);
	return DAT_SUCCESS;
}

void zd_soft_cq_fini(struct zd_soft_cq *cq, struct zd_soft_cq **list, pthread_mutex_t *lock)
{
	pthread_mutex_lock(lock);
	for (struct zd_soft_cq **pp = list; *pp; pp = &(*pp)->next)
		if (*pp == cq) {
			*pp = cq->next;
			break;
		}
	pthread_mutex_unlock(lock);
	zd_ring_destroy(cq->local);
	cq->local = NULL;
}

void zd_soft_cq_wake_all(struct zd_soft_cq *list)
{
	for (struct zd_soft_cq *cq = list; cq; cq = cq->next)
		zd_evd_wake(cq->evd);
}

int zd_soft_qplist_change(struct zd_soft_qplist *_Atomic *head, void *qp, bool add,
			  zd_soft_qplist_wait_fn *wait, void *arg)
{
	struct zd_soft_qplist *old = atomic_load(head), *fresh;
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
	/* seq_cst: release for the list's contents, and the store half of
	 * a Dekker pair where @wait needs one (zd_shm_cq.c poller_wait). */
	atomic_store_explicit(head, fresh, memory_order_seq_cst);
	if (wait)
		wait(arg);
	else
		zd_synchronize_rcu();  /* readers iterate under rcu_read_lock */
	free(old);
	return 0;
}
