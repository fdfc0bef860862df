/*
 * QPs of the shm device: the shared region a QP owns (receive queue,
 * completion ring its peer fills, eager ring), the mapping of its peer's,
 * and the receive side's reaping into the recv EVD.
 *
 * Region layout (owner = target of the peer's sends):
 *   struct zd_shm_qp_shared           header + owner/peer index lines
 *   rq[rq_depth]                      receives posted by the owner
 *   comp[comp_depth]                  receive completions, peer -> owner (SPSC):
 *                                     the fallback of the recv CQ's ring
 *   eager[eager_slots][eager_size]    early messages, peer -> owner (SPSC)
 *
 * Message n of a connection lands either in receive slot n (the peer saw it
 * posted) or in the eager ring (it did not, or earlier messages still wait
 * there); either way its completion is the QP's n-th (its sequence number,
 * in the CQ ring's entry or this ring's: zd_shm_cqring.h), so completions
 * come in send order and an eager message is matched by the owner with
 * exactly the receive slot it would have taken.  With an SRQ the
 * buffer is whichever SRQ slot the sender (or, for eager, the owner) claims.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <urcu-bp.h>

#include "core/zd_ia.h"
#include "core/zd_log.h"
#include "core/zd_ep.h"
#include "core/zd_srq.h"
#include "evd/zd_evd.h"
#include "hw/shm/zd_shm.h"
#include "hw/shm/zd_shm_copy.h"
#include "hw/shm/zd_shm_ud.h"

static uint32_t pow2_at_least(uint64_t v, uint32_t min)
{
	uint32_t p = min;

	while (p < v && p < (1u << 30))
		p <<= 1;
	return p;
}

struct qp_layout {
	uint64_t rq_off, comp_off, eager_off, size;
};

static bool qp_layout(uint32_t rq_depth, uint32_t comp_depth, uint32_t eager_slots,
		      uint32_t eager_size, struct qp_layout *l)
{
	if (!rq_depth || (rq_depth & (rq_depth - 1)) || rq_depth > (1u << 20) ||
	    !comp_depth || (comp_depth & (comp_depth - 1)) || comp_depth > (1u << 22) ||
	    eager_slots == 0 || (eager_slots & (eager_slots - 1)) || eager_slots > 4096 ||
	    eager_size == 0 || eager_size > (1u << 20) || (eager_size % ZD_CACHE_LINE))
		return false;
	l->rq_off = (sizeof(struct zd_shm_qp_shared) + ZD_CACHE_LINE - 1) & ~(uint64_t)(ZD_CACHE_LINE - 1);
	l->comp_off = l->rq_off + (uint64_t)rq_depth * sizeof(struct zd_shm_rq_slot);
	l->eager_off = (l->comp_off + (uint64_t)comp_depth * sizeof(struct zd_shm_comp) +
			ZD_CACHE_LINE - 1) & ~(uint64_t)(ZD_CACHE_LINE - 1);
	l->size = l->eager_off + (uint64_t)eager_slots * eager_size;
	return true;
}

static void qp_region_init(struct zd_shm_qp *qp)
{
	struct zd_shm_qp_shared *own = qp->own;

	atomic_store(&own->rq_posted, 0);
	atomic_store(&own->error, 0);
	atomic_store(&own->comp_head, 0);
	atomic_store(&own->eager_head, 0);
	atomic_store(&own->comp_tail, 0);
	atomic_store(&own->eager_tail, 0);
	atomic_store(&own->holder, 0);
	atomic_store(&own->copying, 0);
	for (uint32_t i = 0; i < qp->rq_depth; i++)
		atomic_store(&qp->rq[i].state, zd_shm_slot_word(0, 0, ZD_SHM_SLOT_FREE));
	qp->msg_seen = 0;
	qp->comp_seen = 0;
}

/* The IA whose tags name @qp: its recv CQ's, whose consumer looks them up
 * (an EP may take its EVDs from another IA). */
static struct zd_shm_ia *qp_tag_ia(const struct zd_shm_qp *qp)
{
	return qp->recv_cq ? qp->recv_cq->sia : qp->sia;
}

/* Gives @qp a tag no live QP holds, and lists it under it for its recv
 * CQ's consumer (CQEs name their QP by tag: zd_shm_cqring.h); a tag it
 * had is dropped, so entries of an earlier connection name nobody. */
static int qp_tag(struct zd_shm_qp *qp)
{
	struct zd_shm_ia *sia = qp_tag_ia(qp);
	int rc = 0;

	pthread_mutex_lock(&sia->lock);
	if (qp->tag && zd_shm_tag_qp(sia, qp->tag, memory_order_relaxed) == qp)
		zd_shm_tag_set(sia, qp->tag, NULL, memory_order_relaxed);
	do {
		sia->next_tag = (sia->next_tag + 1) & ZD_SHM_TAG_MASK;
	} while (!sia->next_tag || zd_shm_tag_qp(sia, sia->next_tag, memory_order_relaxed));
	qp->tag = sia->next_tag;
	/* release: pairs with the CQ poller's acquire load in cqe_event: the
	 * QP is set up before a CQE can find it.  Only a QP with a recv CQ
	 * is found (its detach clears the entry). */
	if (qp->recv_cq)
		rc = zd_shm_tag_set(sia, qp->tag, qp, memory_order_release);
	pthread_mutex_unlock(&sia->lock);
	return rc;
}

int zd_shm_tag_set(struct zd_shm_ia *sia, uint32_t tag, struct zd_shm_qp *qp, memory_order mo)
{
	struct zd_shm_qp *_Atomic *_Atomic *top = &sia->tag_leaf[(tag & ZD_SHM_TAG_MASK) /
								  ZD_SHM_TAG_LEAF];
	struct zd_shm_qp *_Atomic *leaf = atomic_load_explicit(top, memory_order_relaxed);

	if (!leaf) {
		if (!qp)
			return 0;
		leaf = calloc(ZD_SHM_TAG_LEAF, sizeof(*leaf));
		if (!leaf)
			return -ENOMEM;
		/* release: pairs with the acquire load in zd_shm_tag_qp. */
		atomic_store_explicit(top, leaf, memory_order_release);
	}
	atomic_store_explicit(&leaf[tag % ZD_SHM_TAG_LEAF], qp, mo);
	return 0;
}

void zd_shm_tags_free(struct zd_shm_ia *sia)
{
	for (uint32_t i = 0; i < ZD_SHM_TAG_LEAVES; i++)
		free(atomic_load(&sia->tag_leaf[i]));
}

/* Lists @qp in (or takes it out of) its IA's QPs, whose words its
 * deregistrations look at (zd_shm_copy.h). */
static void qp_list(struct zd_shm_qp *qp, bool add)
{
	struct zd_shm_ia *sia = qp->sia;

	pthread_mutex_lock(&sia->lock);
	if (add) {
		qp->ia_next = sia->qps;
		if (qp->ia_next)
			qp->ia_next->ia_prev = &qp->ia_next;
		qp->ia_prev = &sia->qps;
		sia->qps = qp;
	} else if (qp->ia_prev) {
		*qp->ia_prev = qp->ia_next;
		if (qp->ia_next)
			qp->ia_next->ia_prev = qp->ia_prev;
		qp->ia_prev = NULL;
	}
	pthread_mutex_unlock(&sia->lock);
}

/* After @qp's error was set (zd_shm_qp_flush): returns once no copy of
 * its peer's that passed its checks before is under way, so that its
 * region may be reset or freed and a later deregistration need not look
 * at it; its peer's later posts see the error (zd_shm_copy.h). */
static void qp_copies_wait(struct zd_shm_qp *qp)
{
	if (!qp->ud)
		zd_shm_copies_wait(qp->sia, 0, qp);
}

DAT_RETURN zd_shm_qp_create(struct zd_ep *ep)
{
	struct zd_shm_ia *sia = ep->obj.ia->dev_priv;
	struct zd_shm_qp *qp;
	struct qp_layout l;
	uint32_t srq_depth = 0;
	DAT_RETURN ret = DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);

	if (zd_ep_is_ud(ep))
		return zd_shm_ud_qp_create(ep);
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return ret;
	qp->ep = ep;
	qp->sia = sia;
	qp->pz_id = zd_shm_pz_id(ep->pz);
	zd_soft_xlat_reset(&qp->xlat);
	qp->region.fd = -1;
	qp->rregion.fd = -1;
	qp->rsrq_region.fd = -1;
	if (ep->srq) {
		qp->srq = ep->srq->dev_priv;
		srq_depth = qp->srq->depth;
	}
	qp->rq_depth = pow2_at_least((uint64_t)ZD_MAX(ep->attr.max_recv_dtos, 1), 1);
	qp->comp_depth = pow2_at_least((uint64_t)qp->rq_depth + ZD_SHM_EAGER_SLOTS + srq_depth, 64);
	if (!qp_layout(qp->rq_depth, qp->comp_depth, ZD_SHM_EAGER_SLOTS, ZD_SHM_EAGER_SIZE, &l))
		goto err;
	if (zd_shm_region_alloc(sia, l.size, &qp->region) != 0)
		goto err;
	qp->own = qp->region.base;
	qp->own->magic = ZD_SHM_MAGIC_QP;
	qp->own->rq_depth = qp->rq_depth;
	qp->own->comp_depth = qp->comp_depth;
	qp->own->eager_slots = ZD_SHM_EAGER_SLOTS;
	qp->own->eager_size = ZD_SHM_EAGER_SIZE;
	qp->own->rq_off = l.rq_off;
	qp->own->comp_off = l.comp_off;
	qp->own->eager_off = l.eager_off;
	qp->own->size = l.size;
	qp->rq = (void *)((char *)qp->own + l.rq_off);
	qp->comp = (void *)((char *)qp->own + l.comp_off);
	qp->eager = (uint8_t *)qp->own + l.eager_off;
	qp->rq_cookie = calloc(qp->rq_depth, sizeof(*qp->rq_cookie));
	qp->rq_first = calloc(qp->rq_depth, sizeof(*qp->rq_first));
	qp->sq_depth = pow2_at_least((uint64_t)ZD_MAX(ep->attr.max_request_dtos, 1), 1);
	qp->sq = calloc(qp->sq_depth, sizeof(*qp->sq));
	if (!qp->rq_cookie || !qp->rq_first || !qp->sq)
		goto err;
	qp_region_init(qp);

	qp->recv_cq = ep->recv_evd ? ep->recv_evd->cq_priv : NULL;
	if (qp_tag(qp) != 0)
		goto err;
	qp_list(qp, true);

	qp->req_cq = ep->request_evd ? ep->request_evd->cq_priv : NULL;
	if (qp->recv_cq && zd_shm_cq_attach(qp->recv_cq, qp, true) != 0)
		goto err;
	if (qp->req_cq && zd_shm_cq_attach(qp->req_cq, qp, false) != 0)
		goto err_recv;
	if (qp->srq && zd_shm_srq_attach(qp->srq, qp, true) != 0)
		goto err_req;
	ep->dev_priv = qp;
	zd_ep_dto_refresh(ep);
	return DAT_SUCCESS;
err_req:
	if (qp->req_cq)
		zd_shm_cq_detach(qp->req_cq, qp, false);
err_recv:
	if (qp->recv_cq)
		zd_shm_cq_detach(qp->recv_cq, qp, true);
err:
	qp_list(qp, false);
	pthread_mutex_lock(&qp_tag_ia(qp)->lock);
	if (qp->tag && zd_shm_tag_qp(qp_tag_ia(qp), qp->tag, memory_order_relaxed) == qp)
		zd_shm_tag_set(qp_tag_ia(qp), qp->tag, NULL, memory_order_relaxed);
	pthread_mutex_unlock(&qp_tag_ia(qp)->lock);
	free(qp->sq);
	free(qp->rq_cookie);
	free(qp->rq_first);
	zd_shm_region_free(sia, &qp->region);
	free(qp);
	return ret;
}

size_t zd_shm_qp_local_blob(struct zd_ep *ep, void *blob, size_t max)
{
	struct zd_shm_qp *qp = ep->dev_priv;
	struct zd_shm_blob b;

	if (qp && qp->ud)
		return zd_shm_ud_local_blob(qp, blob, max);
	if (!qp || max < sizeof(b))
		return 0;
	/* Offered to a new peer: one that took it for an attempt that failed
	 * after its accept (our connect timed out) holds it no more.
	 * relaxed: as in qp_claim. */
	atomic_store_explicit(&qp->own->holder, 0, memory_order_relaxed);
	memset(&b, 0, sizeof(b));
	b.version = ZD_SHM_BLOB_VERSION;
	b.pid = getpid();
	b.ia_uid = qp->sia->sh->uid;
	b.ia_fd = qp->sia->arena.region.fd;
	b.ia_size = qp->sia->arena.region.size;
	b.qp_off = qp->region.off;
	b.qp_size = qp->region.size;
	b.srq_off = qp->srq ? qp->srq->region.off : 0;
	b.srq_size = qp->srq ? qp->srq->region.size : 0;
	b.qp_tag = qp->tag;
	b.pz_id = qp->pz_id;
	/* Offsets name regions of one arena: the QP's IA's (an EP's DTO
	 * EVDs and SRQ are of its own IA, zd_ep.c). */
	if (qp->recv_cq && qp->recv_cq->sia == qp->sia) {
		b.cq_off = qp->recv_cq->ring_region.off;
		b.cq_size = qp->recv_cq->ring_region.size;
	}
	memcpy(blob, &b, sizeof(b));
	return sizeof(b);
}

static void qp_unmap_peer(struct zd_shm_qp *qp)
{
	struct zd_soft_peer *p = qp->peer;

	zd_soft_region_unmap(&qp->rregion);
	zd_soft_region_unmap(&qp->rsrq_region);
	zd_shm_cqring_unmap(qp);
	qp->remote = NULL;
	qp->rsrq = NULL;
	/* Cleared before the put: the CQ consumer reads it under the lock
	 * (zd_shm_cqring_unstick). */
	__atomic_store_n(&qp->peer, NULL, __ATOMIC_RELAXED);
	if (p)
		zd_shm_peer_put(qp->sia, p);
}

/* Who @qp is to its peer's region: its IA's uid and its tag, never 0. */
static uint64_t qp_holder_id(const struct zd_shm_qp *qp)
{
	uint64_t id = qp->sia->sh->uid * 0x9e3779b97f4a7c15ull ^ qp->tag;

	return id ? id : 1;
}

/* Takes the peer QP @r for @qp: a QP serves one connection, and a blob
 * that names a QP another peer already holds (one seen on the path of
 * another connection, in its REQ or REP, and replayed) is refused, so
 * this process never writes into someone else's connection.  Only an
 * honest peer asks, which is the point: a confused deputy, not the
 * replayer, would do the writing. */
static bool qp_claim(struct zd_shm_qp *qp, struct zd_shm_qp_shared *r)
{
	uint64_t was = 0, me = qp_holder_id(qp);

	/* relaxed: the word itself is all that is decided; the region was
	 * validated before and its contents are read under its own orders. */
	return atomic_compare_exchange_strong_explicit(&r->holder, &was, me, memory_order_relaxed,
						       memory_order_relaxed) ||
	       was == me;
}

DAT_RETURN zd_shm_qp_connect(struct zd_ep *ep, const void *peer_blob, size_t len)
{
	struct zd_shm_qp *qp = ep->dev_priv;
	struct zd_shm_blob b;
	struct zd_shm_qp_shared *r, *claimed = NULL;
	struct qp_layout l;

	if (!qp || !peer_blob || len != sizeof(b))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	memcpy(&b, peer_blob, sizeof(b));
	if (b.version != ZD_SHM_BLOB_VERSION || b.qp_size == 0 || b.qp_size > (1ull << 32))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (qp->remote)
		qp_unmap_peer(qp);
	/* An atomic store: a CQ consumer reads it under the IA lock
	 * (zd_shm_cqring_unstick), which we do not take; the peer itself was
	 * set up under that lock. */
	__atomic_store_n(&qp->peer, zd_shm_peer_get(qp->sia, &b), __ATOMIC_RELAXED);
	if (!qp->peer)
		return DAT_ERROR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
	if (zd_soft_peer_carve(qp->peer, b.qp_off, b.qp_size, &qp->rregion) != 0)
		goto err;
	r = qp->rregion.base;
	/* Read the geometry once, validate it, and never trust it again. */
	if (r->magic != ZD_SHM_MAGIC_QP ||
	    !qp_layout(r->rq_depth, r->comp_depth, r->eager_slots, r->eager_size, &l) ||
	    l.rq_off != r->rq_off || l.comp_off != r->comp_off || l.eager_off != r->eager_off ||
	    l.size > b.qp_size)
		goto err;
	if (!qp_claim(qp, r)) {
		zd_log_error("shm: a peer named a QP that serves another connection "
			     "(a replayed blob): refused");
		goto err;
	}
	claimed = r;
	qp->r_rq_depth = r->rq_depth;
	qp->r_comp_depth = r->comp_depth;
	qp->r_eager_slots = r->eager_slots;
	qp->r_eager_size = r->eager_size;
	qp->rrq = (void *)((char *)r + l.rq_off);
	qp->rcomp = (void *)((char *)r + l.comp_off);
	qp->reager = (uint8_t *)r + l.eager_off;
	qp->r_tag = b.qp_tag & ZD_SHM_TAG_MASK;
	qp->r_pz_id = b.pz_id;
	if (b.srq_size) {
		struct zd_shm_srq_shared *s;

		if (b.srq_size < sizeof(*s) || b.srq_size > (1ull << 32) ||
		    zd_soft_peer_carve(qp->peer, b.srq_off, b.srq_size, &qp->rsrq_region) != 0)
			goto err;
		s = qp->rsrq_region.base;
		if (s->magic != ZD_SHM_MAGIC_SRQ || !s->depth || (s->depth & (s->depth - 1)) ||
		    s->slots_off < sizeof(*s) ||
		    s->slots_off + (uint64_t)s->depth * sizeof(struct zd_shm_rq_slot) > b.srq_size)
			goto err;
		qp->r_srq_depth = s->depth;
		qp->rsrq_slots = (void *)((char *)s + s->slots_off);
		qp->rsrq = s;
	}
	if (zd_shm_cqring_map(qp, &b) != 0)
		goto err;
	qp->msg_sent = 0;
	qp->comp_seq = 0;
	qp->comp_tail = 0;
	qp->eager_tail = 0;
	zd_soft_xlat_reset(&qp->xlat);  /* it pointed into the old peer's table */
	/* release: the mapping above is complete before posts see remote. */
	__atomic_store_n(&qp->remote, r, __ATOMIC_RELEASE);
	return DAT_SUCCESS;
err:
	if (claimed) {
		uint64_t me = qp_holder_id(qp);

		/* relaxed: as in qp_claim */
		atomic_compare_exchange_strong_explicit(&claimed->holder, &me, 0,
							memory_order_relaxed, memory_order_relaxed);
	}
	qp_unmap_peer(qp);
	return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
}

/* Reports every receive of @qp not yet filled as flushed (any thread; the
 * slot state CAS decides who reports each receive exactly once). */
void zd_shm_qp_flush_recvs(struct zd_shm_qp *qp, bool final)
{
	/* @final (QP going away): filled but unreaped receives too. */
	unsigned last = final ? ZD_SHM_SLOT_DONE : ZD_SHM_SLOT_TAKEN;

	uint64_t posted, pos;

	if (qp->srq) {
		struct zd_shm_srq *s = qp->srq;

		for (uint32_t i = 0; i < s->depth; i++) {
			uint64_t w = atomic_load_explicit(&s->slots[i].state, memory_order_acquire);

			if ((w & 0xf) < ZD_SHM_SLOT_TAKEN || (w & 0xf) > last ||
			    ((w >> 4) & ZD_SHM_TAG_MASK) != qp->tag)
				continue;
			if (atomic_compare_exchange_strong(&s->slots[i].state, &w,
							   zd_shm_slot_word(w >> 24, 0, ZD_SHM_SLOT_FREE)))
				zd_shm_recv_fail(qp, s->cookie[i], DAT_DTO_ERR_FLUSHED);
		}
		return;
	}
	/* seq_cst: pairs with the fence in zd_shm_post_recv (Dekker on error
	 * vs rq_posted): a receive posted concurrently is flushed here or by
	 * its poster.  Also acquires the slots below rq_posted. */
	posted = atomic_load_explicit(&qp->own->rq_posted, memory_order_seq_cst);
	pos = posted > qp->rq_depth ? posted - qp->rq_depth : 0;
	for (; pos < posted; pos++) {
		struct zd_shm_rq_slot *s = &qp->rq[pos & (qp->rq_depth - 1)];

		/* relaxed: a look only (no locked instruction per slot); the
		 * CAS decides, and on a change looks again. */
		uint64_t w = atomic_load_explicit(&s->state, memory_order_relaxed);

		while ((w & 0xf) >= ZD_SHM_SLOT_POSTED && (w & 0xf) <= last &&
		       w == zd_shm_slot_word(pos, 0, (unsigned)(w & 0xf))) {
			if (atomic_compare_exchange_strong(&s->state, &w,
					zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_FLUSHED))) {
				zd_shm_recv_fail(qp, qp->rq_cookie[pos & (qp->rq_depth - 1)],
						 DAT_DTO_ERR_FLUSHED);
				break;
			}
		}
	}
}

void zd_shm_qp_recv_settle(struct zd_shm_qp *qp)
{
	/* seq_cst fence: the middle of each Dekker pair in zd_shm.h (the
	 * caller stored or saw the error before it). */
	atomic_thread_fence(memory_order_seq_cst);
	if (zd_shm_qp_msgs_waiting(qp))
		return;  /* the reaper settles once it took them */
	/* An SRQ consumer learns that no more receives will be taken for
	 * this EP (IB's "last WQE reached"): stock SRQ clients wait for it
	 * before freeing the EP, so not while messages still wait for
	 * buffers. */
	if (atomic_exchange_explicit(&qp->last_wqe_due, 0, memory_order_relaxed))
		zd_ia_post_async(&qp->ep->obj, DAT_ASYNC_ERROR_EP_BROKEN);
	zd_shm_qp_flush_recvs(qp, false);
}

void zd_shm_qp_flush(struct zd_ep *ep)
{
	struct zd_shm_qp *qp = ep->dev_priv;
	bool first;

	if (!qp)
		return;
	first = !atomic_exchange(&qp->flushed, 1);
	if (first && qp->srq)
		atomic_store_explicit(&qp->last_wqe_due, 1, memory_order_relaxed);
	/* The peer's later sends see it and complete in error.  Stored
	 * before our own flag (seq_cst, both): whoever sees error sees
	 * own->error too, the flag senders pair with (zd_shm_qp_recv_settle). */
	atomic_store(&qp->own->error, 1);
	atomic_store(&qp->error, 1);
	zd_shm_qp_recv_settle(qp);
	/* A peer waiting for room learns of the error instead. */
	zd_shm_qp_rnr_ring(qp);
	/* Queued sends are flushed by the next progress of the request EVD
	 * (they keep it counted in req_cq->backlog). */
	if (qp->req_cq)
		zd_evd_wake(qp->req_cq->soft.evd);
}

DAT_RETURN zd_shm_qp_reset(struct zd_ep *ep)
{
	struct zd_shm_qp *qp = ep->dev_priv;

	if (!qp)
		return DAT_SUCCESS;
	zd_shm_qp_flush(ep);
	/* Messages of the old connection still waiting for receives die
	 * with it: every receive completes now. */
	atomic_store_explicit(&qp->last_wqe_due, 0, memory_order_relaxed);
	zd_shm_qp_flush_recvs(qp, false);
	zd_shm_qp_progress_sq(qp);
	qp_copies_wait(qp);
	qp_unmap_peer(qp);
	qp_region_init(qp);
	/* CQEs of the old connection may still come: they name the old tag
	 * (on ENOMEM for a fresh leaf the QP is unlisted: its CQEs refused). */
	if (!qp->ud)
		qp_tag(qp);
	atomic_store(&qp->sq_head, 0);
	atomic_store(&qp->sq_tail, 0);
	atomic_store(&qp->error, 0);
	atomic_store(&qp->flushed, 0);
	atomic_store(&qp->flushed_rq, 0);
	return DAT_SUCCESS;
}

void zd_shm_qp_destroy(struct zd_ep *ep)
{
	struct zd_shm_qp *qp = ep->dev_priv;

	if (!qp)
		return;
	/* The EP is going away: no "last WQE" event naming it. */
	atomic_store(&qp->flushed, 1);
	atomic_store_explicit(&qp->last_wqe_due, 0, memory_order_relaxed);
	zd_shm_qp_flush(ep);
	zd_shm_qp_progress_sq(qp);
	qp_copies_wait(qp);
	qp_list(qp, false);
	/* After detach (an RCU grace period) no poller is inside this QP. */
	if (qp->recv_cq)
		zd_shm_cq_detach(qp->recv_cq, qp, true);
	if (qp->req_cq)
		zd_shm_cq_detach(qp->req_cq, qp, false);
	if (qp->srq)
		zd_shm_srq_attach(qp->srq, qp, false);
	/* Receives the peer filled but nobody reaped: report them flushed. */
	zd_shm_qp_flush_recvs(qp, true);
	qp_unmap_peer(qp);
	zd_shm_region_free(qp->sia, &qp->region);
	free(qp->rq_cookie);
	free(qp->rq_first);
	free(qp->sq);
	free(qp->ud);
	free(qp);
	ep->dev_priv = NULL;
	zd_ep_dto_refresh(ep);
}

/* ---- receive side: reaping the completion ring (recv CQ poller) ---- */

/* The receive completion of entry @c (@st its checked status) into the EVD. */
static void recv_event(struct zd_shm_qp *qp, DAT_DTO_COOKIE cookie,
		       DAT_DTO_COMPLETION_STATUS st, const struct zd_shm_comp *c)
{
	DAT_EVENT ev;

	zd_shm_recv_event(&ev, qp, cookie, st, c->type_flags, c->len, c->imm);
	zd_shm_recv_enqueue(qp->recv_cq->soft.evd, &ev);
}

/* Copies an eager message into a receive slot this process posted (its
 * segments were checked at post time). */
static DAT_DTO_COMPLETION_STATUS eager_copy(const struct zd_shm_rq_slot *s, const uint8_t *src,
					    uint32_t len)
{
	uint32_t nseg = s->nseg, off = 0;

	if (len > s->total || nseg > ZD_SHM_MAX_SEGS)
		return DAT_DTO_ERR_LOCAL_LENGTH;
	for (uint32_t i = 0; i < nseg && off < len; i++) {
		uint32_t n = ZD_MIN(s->seg[i].len, len - off);

		memcpy((void *)(uintptr_t)s->seg[i].addr, src + off, n);
		off += n;
	}
	return DAT_DTO_SUCCESS;
}

/* SRQ buffers taken for @qp whose completions wait in [head, tail). */
static DAT_COUNT srq_taken_pending(const struct zd_shm_qp *qp, uint64_t head, uint64_t tail)
{
	DAT_COUNT n = 0;

	for (; head != tail; head++)
		if ((qp->comp[head & (qp->comp_depth - 1)].type_flags & 0xff) == ZD_SHM_COMP_DIRECT)
			n++;
	return n;
}

int zd_shm_qp_reap(struct zd_shm_qp *qp, int budget)
{
	struct zd_shm_qp_shared *own = qp->own;
	uint64_t head = atomic_load_explicit(&own->comp_head, memory_order_relaxed);
	uint64_t eager_head = atomic_load_explicit(&own->eager_head, memory_order_relaxed);
	/* acquire: pairs with the peer's release store of comp_tail after it
	 * wrote the entry (and the data it announces). */
	uint64_t tail = atomic_load_explicit(&own->comp_tail, memory_order_acquire);
	const uint32_t rq_mask = qp->rq_depth - 1;
	int n = 0;

	if (ZD_UNLIKELY(qp->ud))
		return zd_shm_ud_reap(qp, budget);
	if (head == tail)
		return 0;
	if (ZD_UNLIKELY(tail - head > qp->comp_depth)) {
		zd_shm_qp_peer_corrupt(qp);
		return 0;
	}
	/* dat_ep_set_watermark armed on an SRQ EP: buffers its peer took
	 * show up here first, one direct completion entry each. */
	if (ZD_UNLIKELY(qp->srq && zd_ep_hwm_armed(qp->ep)))
		zd_ep_soft_hwm_check(qp->ep, srq_taken_pending(qp, head, tail));
	while (head != tail && n < budget) {
		struct zd_shm_comp c = qp->comp[head & (qp->comp_depth - 1)];
		unsigned type = c.type_flags & 0xff;
		/* An immediate's eager slot holds nothing to copy. */
		bool copy = !(c.type_flags & ZD_SHM_COMP_IMMED);
		DAT_DTO_COMPLETION_STATUS st = c.status <= DAT_DTO_ERR_PARTIAL_PACKET ?
					       (DAT_DTO_COMPLETION_STATUS)c.status :
					       DAT_DTO_ERR_TRANSPORT;

		/* Its predecessor is still in the CQ ring: after it. */
		if (c.seq != qp->comp_seen) {
			if (c.seq < qp->comp_seen) {
				zd_shm_qp_peer_corrupt(qp);
				return n;
			}
			break;
		}

		if (qp->srq) {
			struct zd_shm_srq *s = qp->srq;
			uint64_t pos;
			struct zd_shm_rq_slot *slot;
			uint64_t w;

			if (type == ZD_SHM_COMP_EAGER) {
				int64_t p = zd_shm_srq_take(s->sh, s->slots, s->depth, qp->tag);

				if (p < 0)
					break;  /* no buffer yet: later messages wait too */
				pos = (uint64_t)p;
				slot = &s->slots[pos & (s->depth - 1)];
				if (copy)
					st = c.len > qp->own->eager_size ? DAT_DTO_ERR_LOCAL_LENGTH :
					     eager_copy(slot, qp->eager + (eager_head &
							(ZD_SHM_EAGER_SLOTS - 1)) * ZD_SHM_EAGER_SIZE,
							c.len);
				eager_head++;
				w = zd_shm_slot_word(pos, qp->tag, ZD_SHM_SLOT_TAKEN);
			} else {
				pos = c.srq_pos;
				slot = &s->slots[pos & (s->depth - 1)];
				w = zd_shm_slot_word(pos, qp->tag, ZD_SHM_SLOT_DONE);
			}
			/* Only a slot this QP's peer (or we) filled completes
			 * here; the CAS also loses to a flush. */
			if (atomic_compare_exchange_strong(&slot->state, &w,
					zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_FREE))) {
				recv_event(qp, s->cookie[pos & (s->depth - 1)], st, &c);
				n++;
			}
			zd_shm_srq_check_lw(s);
		} else {
			uint64_t pos = qp->msg_seen;
			struct zd_shm_rq_slot *slot = &qp->rq[pos & rq_mask];
			uint64_t w;

			if (type == ZD_SHM_COMP_EAGER) {
				/* acquire: pairs with the release store of
				 * rq_posted in zd_shm_post_recv: the slot's
				 * segments are visible (the poster is another
				 * thread when a pinned poller or another
				 * consumer thread reaps). */
				if (atomic_load_explicit(&own->rq_posted, memory_order_acquire) <= pos)
					break;  /* receive n not posted yet */
				w = zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_POSTED);
				if (atomic_compare_exchange_strong(&slot->state, &w,
						zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_TAKEN))) {
					if (copy)
						st = c.len > qp->own->eager_size ?
						     DAT_DTO_ERR_LOCAL_LENGTH :
						     eager_copy(slot, qp->eager + (eager_head &
								(ZD_SHM_EAGER_SLOTS - 1)) *
								ZD_SHM_EAGER_SIZE, c.len);
					w = zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_DONE);
					atomic_store(&slot->state, w);
				}
				eager_head++;
			}
			w = zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_DONE);
			if (atomic_compare_exchange_strong(&slot->state, &w,
					zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_FREE))) {
				recv_event(qp, qp->rq_cookie[pos & rq_mask], st, &c);
				n++;
			} else if ((w & 0xf) == ZD_SHM_SLOT_FLUSHED && w >> 24 == pos) {
				/* The flush reported it: free the slot. */
				atomic_store_explicit(&slot->state,
						      zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_FREE),
						      memory_order_release);
			}
			qp->msg_seen = pos + 1;
		}
		qp->comp_seen++;
		head++;
	}
	/* Entries left (no receive for them yet, budget, an earlier CQE):
	 * the CQ's poller walks again. */
	if (head != tail)
		qp->recv_cq->walk_again = true;
	/* release: pairs with the peer's acquire loads of eager_head and
	 * comp_head: our reads of those entries and slots are done. */
	atomic_store_explicit(&own->eager_head, eager_head, memory_order_release);
	atomic_store_explicit(&own->comp_head, head, memory_order_release);
	/* Room made: a peer waiting for it (RNR) is rung.  Its seq_cst fence
	 * is also the reaper's of the settle pairs (zd_shm_qp_recv_settle):
	 * comp_head stored, then error loaded. */
	zd_shm_qp_rnr_ring(qp);
	/* In error, the messages that waited are taken: the rest settles. */
	if (ZD_UNLIKELY(head == tail && atomic_load_explicit(&qp->error, memory_order_relaxed)))
		zd_shm_qp_recv_settle(qp);
	return n;
}

/* ---- receive buffer counts (control path: a scan of the slots) ---- */

DAT_COUNT zd_shm_qp_recv_held(struct zd_shm_qp *qp)
{
	DAT_COUNT n = 0;

	if (qp->srq) {
		/* Taken for this QP (a sender is copying or has filled it) and
		 * not yet completed.  Only slots ever posted are read: the
		 * region's untouched pages stay unallocated. */
		uint64_t used = atomic_load_explicit(&qp->srq->sh->posted, memory_order_relaxed);

		for (uint32_t i = 0; i < ZD_MIN(used, (uint64_t)qp->srq->depth); i++) {
			uint64_t w = atomic_load_explicit(&qp->srq->slots[i].state,
							  memory_order_relaxed);
			unsigned st = w & 0xf;

			if ((st == ZD_SHM_SLOT_TAKEN || st == ZD_SHM_SLOT_DONE) &&
			    ((w >> 4) & ZD_SHM_TAG_MASK) == qp->tag)
				n++;
		}
		return n;
	}
	/* Posted and not yet completed (a flushed slot was reported). */
	for (uint32_t i = 0; i < qp->rq_depth; i++) {
		unsigned st = atomic_load_explicit(&qp->rq[i].state, memory_order_relaxed) & 0xf;

		if (st == ZD_SHM_SLOT_POSTED || st == ZD_SHM_SLOT_TAKEN || st == ZD_SHM_SLOT_DONE)
			n++;
	}
	return n;
}

void zd_shm_rq_counts(struct zd_ep *ep, struct zd_srq *srq, DAT_COUNT *avail, DAT_COUNT *held)
{
	if (ep) {
		if (ep->dev_priv)
			*held = zd_shm_qp_recv_held(ep->dev_priv);
		return;
	}
	struct zd_shm_srq *s = srq->dev_priv;
	uint64_t head, posted;
	DAT_COUNT n = 0;

	if (!s)
		return;
	/* head first: it never passes posted, so the difference is >= 0. */
	head = atomic_load_explicit(&s->sh->head, memory_order_acquire);
	posted = atomic_load_explicit(&s->sh->posted, memory_order_acquire);
	*avail = posted > head ? (DAT_COUNT)(posted - head) : 0;
	/* Occupied: posted, taken or filled, until its completion is reaped
	 * (the slot is then free for a new post).  Only slots ever posted
	 * are read, as above. */
	for (uint32_t i = 0; i < ZD_MIN(posted, (uint64_t)s->depth); i++)
		if ((atomic_load_explicit(&s->slots[i].state, memory_order_relaxed) & 0xf) !=
		    ZD_SHM_SLOT_FREE)
			n++;
	*held = n;
}
