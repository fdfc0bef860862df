/*
 * Shared receive queues of the shm device.  An SRQ is one shared region:
 * posted receives (owner writes), a head every consumer claims with a CAS
 * (the senders of every EP on the SRQ, and the owner itself when it matches
 * an eager message).  A claimed slot carries the tag of the QP it was taken
 * for, so its completion is accepted only from that QP's completion ring.
 *
 * The region is sized for the device maximum once (memfd pages are only
 * allocated when touched), so dat_srq_resize changes a limit, never the
 * mapping peers hold.
 */
#include <stdlib.h>
#include <string.h>
#include <urcu-bp.h>

#include "core/zd_ia.h"
#include "core/zd_srq.h"
#include "evd/zd_evd.h"
#include "evd/zd_rcu.h"
#include "hw/shm/zd_shm.h"

static uint32_t srq_capacity(struct zd_srq *srq)
{
	uint32_t max = (uint32_t)ZD_MAX(srq->obj.ia->limits.max_recv_per_srq, 1), p = 16;

	while (p < max)
		p <<= 1;
	return p;
}

DAT_RETURN zd_shm_srq_create(struct zd_srq *srq)
{
	struct zd_shm_srq *s = calloc(1, sizeof(*s));
	uint64_t slots_off = (sizeof(struct zd_shm_srq_shared) + ZD_CACHE_LINE - 1) &
			     ~(uint64_t)(ZD_CACHE_LINE - 1);

	if (!s)
		goto err;
	s->srq = srq;
	s->sia = srq->obj.ia->dev_priv;
	s->depth = srq_capacity(srq);
	s->pz_id = zd_shm_pz_id(srq->pz);
	s->cookie = calloc(s->depth, sizeof(*s->cookie));
	if (!s->cookie ||
	    zd_shm_region_alloc(s->sia, slots_off + (uint64_t)s->depth *
				sizeof(struct zd_shm_rq_slot), &s->region) != 0)
		goto err;
	s->sh = s->region.base;
	s->sh->magic = ZD_SHM_MAGIC_SRQ;
	s->sh->depth = s->depth;
	s->sh->slots_off = slots_off;
	s->sh->size = s->region.size;
	s->slots = (void *)((char *)s->sh + slots_off);
	srq->dev_priv = s;
	return DAT_SUCCESS;
err:
	if (s)
		free(s->cookie);
	free(s);
	return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
}

DAT_RETURN zd_shm_srq_resize(struct zd_srq *srq, uint32_t depth)
{
	struct zd_shm_srq *s = srq->dev_priv;

	return depth <= s->depth ? DAT_SUCCESS
				 : DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
}

void zd_shm_srq_destroy(struct zd_srq *srq)
{
	struct zd_shm_srq *s = srq->dev_priv;

	if (!s)
		return;
	zd_shm_region_free(s->sia, &s->region);
	free(atomic_load(&s->qps));
	free(s->cookie);
	free(s);
	srq->dev_priv = NULL;
}

int64_t zd_shm_srq_take(struct zd_shm_srq_shared *sh, struct zd_shm_rq_slot *slots,
			uint32_t depth, uint32_t tag)
{
	/* acquire (both): pairs with the release stores of head (CAS) and of
	 * posted in post_recv: slot h is published. */
	uint64_t h = atomic_load_explicit(&sh->head, memory_order_acquire);

	for (;;) {
		uint64_t p = atomic_load_explicit(&sh->posted, memory_order_acquire);

		if (h >= p || p - h > depth)
			return -1;
		if (atomic_compare_exchange_weak_explicit(&sh->head, &h, h + 1,
				memory_order_acq_rel, memory_order_acquire))
			break;
	}
	uint64_t w = zd_shm_slot_word(h, 0, ZD_SHM_SLOT_POSTED);

	if (!atomic_compare_exchange_strong_explicit(&slots[h & (depth - 1)].state, &w,
			zd_shm_slot_word(h, tag, ZD_SHM_SLOT_TAKEN),
			memory_order_acquire, memory_order_relaxed))
		return -1;
	return (int64_t)h;
}

DAT_RETURN zd_shm_srq_post_recv(struct zd_srq *srq, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				DAT_DTO_COOKIE cookie)
{
	struct zd_shm_srq *s = srq->dev_priv;
	struct zd_shm_ia *sia = srq->obj.ia->dev_priv;
	/* relaxed: the SRQ's poster is posted's only writer. */
	uint64_t pos = atomic_load_explicit(&s->sh->posted, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&s->sh->head, memory_order_relaxed);
	struct zd_shm_rq_slot *slot = &s->slots[pos & (s->depth - 1)];

	if (ZD_UNLIKELY(pos - head >= (uint64_t)srq->max_recv_dtos ||
			(atomic_load_explicit(&slot->state, memory_order_acquire) & 0xf) !=
			ZD_SHM_SLOT_FREE))
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
	/* No EP owns the buffer yet, so a bad segment is refused here. */
	if (ZD_UNLIKELY(!zd_shm_resolve_recv(sia, s->pz_id, n, iov, slot)))
		return DAT_ERROR(DAT_PROTECTION_VIOLATION, DAT_NO_SUBTYPE);
	s->cookie[pos & (s->depth - 1)] = cookie;
	atomic_store_explicit(&slot->state, zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_POSTED),
			      memory_order_relaxed);
	/* release: pairs with the acquire load of posted in zd_shm_srq_take. */
	atomic_store_explicit(&s->sh->posted, pos + 1, memory_order_release);
	/* seq_cst fence: pairs with the one in rnr_announce (zd_shm_post.c):
	 * a sender that found no buffer sees this one, or we see its flag. */
	atomic_thread_fence(memory_order_seq_cst);
	if (ZD_UNLIKELY(atomic_load_explicit(&s->sh->rnr_wait, memory_order_relaxed)))
		zd_shm_srq_rnr_ring(s);
	return DAT_SUCCESS;
}

void zd_shm_srq_rnr_ring(struct zd_shm_srq *s)
{
	struct zd_soft_qplist *l;

	atomic_store_explicit(&s->sh->rnr_wait, 0, memory_order_relaxed);
	rcu_read_lock();
	l = rcu_dereference(s->qps);
	for (uint32_t i = 0; l && i < l->n; i++)
		zd_shm_qp_rnr_ring(l->qp[i]);
	zd_rcu_read_unlock();
}

int zd_shm_srq_attach(struct zd_shm_srq *s, struct zd_shm_qp *qp, bool add)
{
	struct zd_shm_ia *sia = qp->sia;
	int rc;

	pthread_mutex_lock(&sia->lock);
	rc = zd_soft_qplist_change(&s->qps, qp, add, NULL, NULL);
	pthread_mutex_unlock(&sia->lock);
	return rc;
}

void zd_shm_srq_check_lw(struct zd_shm_srq *s)
{
	zd_srq_check_lw(s->srq, atomic_load_explicit(&s->sh->posted, memory_order_relaxed) -
				atomic_load_explicit(&s->sh->head, memory_order_relaxed));
}
