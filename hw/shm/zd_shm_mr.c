/*
 * The IA's MR table and chunk table in shared memory: what a peer checks an
 * rkey against (key, bounds, access, PZ) and where it finds the memfd chunk
 * holding a target range, without asking the target.  Written by the owner
 * on the control path (under sia->lock) as seqlocks; read lock-free by the
 * owner's and the peers' data paths (zd_shm_mr_read).
 */
#include <string.h>

#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "core/zd_mem_objs.h"
#include "evd/zd_evd.h"
#include "hw/shm/zd_shm.h"
#include "hw/shm/zd_shm_copy.h"
#include "mem/zd_chunk.h"
#include "mem/zd_keygen.h"

uint32_t zd_shm_pz_id(const void *pz)
{
	/* Slot index of the PZ in its type-stable zone, plus one (0: none). */
	return pz ? (uint32_t)(((uintptr_t)pz - zd_obj_zones.base) >> ZD_OBJ_SLOT_SHIFT_PZ) + 1
		  : 0;
}

/* The owner's chunk slot holding [addr, addr + len), or NO_CHUNK. */
static uint32_t chunk_slot_of(struct zd_shm_ia *sia, uint64_t addr, uint64_t len)
{
	return zd_soft_chunk_find(sia->sh->chunks, ZD_SHM_CHUNK_SLOTS, addr, len);
}

static void mr_clear(struct zd_soft_mr_entry *e)
{
	zd_soft_mr_publish(e, 0, 0, 0, 0, 0, ZD_SOFT_NO_CHUNK);
}

DAT_RETURN zd_shm_mr_register(struct zd_ia *ia, struct zd_lmr *lmr)
{
	struct zd_shm_ia *sia = ia->dev_priv;
	uint32_t idx = zd_keygen_index(ia->keygen, lmr->lkey);

	/* The table is indexed by the low key bits (what a peer can compute). */
	if (idx >= ZD_SHM_MR_ENTRIES || (lmr->lkey & (ZD_SHM_MR_ENTRIES - 1)) != idx ||
	    lmr->rkey != lmr->lkey)
		return DAT_ERROR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
	pthread_mutex_lock(&sia->lock);
	zd_soft_mr_publish(&sia->sh->mr[idx], lmr->lkey, lmr->addr, lmr->length,
			   (uint32_t)lmr->priv, zd_shm_pz_id(lmr->pz),
			   chunk_slot_of(sia, lmr->addr, lmr->length));
	pthread_mutex_unlock(&sia->lock);
	return DAT_SUCCESS;
}

/* As a device's, returns once no peer copies to or from the region any
 * more (zd_shm_copy.h): then the memory is the application's again. */
void zd_shm_mr_deregister(struct zd_ia *ia, struct zd_lmr *lmr)
{
	struct zd_shm_ia *sia = ia->dev_priv;
	uint32_t idx = lmr->lkey & (ZD_SHM_MR_ENTRIES - 1);
	bool cleared = false;

	pthread_mutex_lock(&sia->lock);
	if (atomic_load_explicit(&sia->sh->mr[idx].key, memory_order_relaxed) == lmr->lkey) {
		mr_clear(&sia->sh->mr[idx]);
		cleared = true;
	}
	pthread_mutex_unlock(&sia->lock);
	if (cleared)
		zd_shm_copies_wait(sia, zd_shm_pz_id(lmr->pz), NULL);
}

/* Memory windows: the RMR's key gets an entry of its own covering only the
 * window, with only its remote rights and the RMR's PZ, so a peer checks
 * it exactly as an LMR's rkey.  The new entry appears before the old key's
 * goes (core keeps the old key allocated until then: the indices differ). */
DAT_RETURN zd_shm_rmr_bind(struct zd_ep *ep, struct zd_rmr *rmr, uint32_t old_rkey,
			   const DAT_EVENT *ev)
{
	struct zd_ia *ia = rmr->obj.ia;
	struct zd_shm_ia *sia = ia->dev_priv;
	struct zd_shm_qp *qp = ep->dev_priv;
	uint32_t idx = 0, old_idx = old_rkey & (ZD_SHM_MR_ENTRIES - 1);

	if (rmr->rkey) {
		idx = zd_keygen_index(ia->keygen, rmr->rkey);
		if (idx >= ZD_SHM_MR_ENTRIES || (rmr->rkey & (ZD_SHM_MR_ENTRIES - 1)) != idx ||
		    (old_rkey && idx == old_idx))
			return DAT_ERROR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
	}
	pthread_mutex_lock(&sia->lock);
	if (rmr->rkey) {
		uint64_t addr = rmr->window.virtual_address, len = rmr->window.segment_length;

		zd_soft_mr_publish(&sia->sh->mr[idx], rmr->rkey, addr, len,
				   (uint32_t)(rmr->priv & (DAT_MEM_PRIV_REMOTE_READ_FLAG |
							   DAT_MEM_PRIV_REMOTE_WRITE_FLAG |
							   DAT_IB_MEM_PRIV_REMOTE_ATOMIC)),
				   zd_shm_pz_id(rmr->pz), chunk_slot_of(sia, addr, len));
	}
	if (old_rkey && atomic_load_explicit(&sia->sh->mr[old_idx].key, memory_order_relaxed) ==
				old_rkey)
		mr_clear(&sia->sh->mr[old_idx]);
	pthread_mutex_unlock(&sia->lock);

	/* The bind executed at once, as the DTOs do: its completion follows
	 * theirs in the request CQ's local ring. */
	if (ev && qp && qp->req_cq) {
		struct zd_evd *evd = qp->req_cq->soft.evd;
		DAT_EVENT e = *ev;

		e.evd_handle = evd;
		if (!zd_ring_enqueue(qp->req_cq->soft.local, &e))
			zd_evd_post(evd, &e, 1);
		else
			zd_evd_wake(evd);
	} else if (ev) {
		zd_evd_post(ev->evd_handle, ev, 1);
	}
	return DAT_SUCCESS;
}

void zd_shm_rmr_unbind(struct zd_ia *ia, struct zd_rmr *rmr)
{
	struct zd_shm_ia *sia = ia->dev_priv;
	uint32_t idx = rmr->rkey & (ZD_SHM_MR_ENTRIES - 1);

	if (!sia || !rmr->rkey)
		return;
	pthread_mutex_lock(&sia->lock);
	if (atomic_load_explicit(&sia->sh->mr[idx].key, memory_order_relaxed) == rmr->rkey)
		mr_clear(&sia->sh->mr[idx]);
	pthread_mutex_unlock(&sia->lock);
}

static int chunk_listener(void *arg, enum zd_chunk_event ev, const struct zd_chunk_ref *c)
{
	struct zd_shm_ia *sia = arg;

	/* zdapl's own queues: no peer maps them. */
	if (c->flags & ZD_CHUNK_F_QUEUE)
		return 0;
	pthread_mutex_lock(&sia->lock);
	/* A full table leaves the chunk to cross-memory attach. */
	if (ev == ZD_CHUNK_ADD)
		zd_soft_chunk_publish(sia->sh->chunks, ZD_SHM_CHUNK_SLOTS, c->id, c->fd,
				      (uint64_t)(uintptr_t)c->base, c->len, 0);
	else
		zd_soft_chunk_retract(sia->sh->chunks, ZD_SHM_CHUNK_SLOTS, c->id);
	pthread_mutex_unlock(&sia->lock);
	return 0;
}

int zd_shm_chunks_start(struct zd_shm_ia *sia)
{
	int rc;

	/* The application's own memory, shared in place when registered. */
	zd_soft_chunk_publish_adopted(sia->sh->chunks, ZD_SHM_CHUNK_SLOTS);
	rc = zd_chunk_add_listener(chunk_listener, sia);

	sia->listening = rc == 0;
	return rc;
}

void zd_shm_chunks_stop(struct zd_shm_ia *sia)
{
	if (sia->listening)
		zd_chunk_remove_listener(chunk_listener, sia);
	sia->listening = false;
	zd_soft_chunk_retract(sia->sh->chunks, ZD_SHM_CHUNK_SLOTS, ZD_SOFT_ADOPT_ID);
}
