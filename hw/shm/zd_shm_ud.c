/*
 * Unreliable datagrams on the shm device: UD QPs, address handles, the
 * datagram send and the receive side's reaping (design: zd_shm_ud.h).
 *
 * Region layout of a UD QP:
 *   struct zd_shm_ud_shared      the QP header, the claim index, the drop count
 *   rq[rq_depth]                 receives posted by the owner
 *   comp[rq_depth]               the completion of the datagram in rq[i]
 *
 * Cost of a datagram (no locks, no allocation, no syscall unless the
 * payload goes by cross-memory attach or the target's consumer sleeps):
 * one MR-table read per local segment, two loads and two CASes to take the
 * receive, the copy, a release CAS, the ring check, and the sender's
 * completion.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "evd/zd_evd.h"
#include "hw/shm/zd_shm_ud.h"

/* What an address handle holds: the target process (counted), our mapping
 * of the target QP's region, and its geometry as checked once. */
struct shm_ud_ah {
	struct zd_soft_peer *peer;
	struct zd_soft_region region;
	struct zd_shm_ud_shared *sh;
	struct zd_shm_rq_slot *rq;
	struct zd_shm_ud_comp *comp;
	uint32_t rq_depth;
};
_Static_assert(sizeof(struct shm_ud_ah) <= ZD_UD_AH_BYTES, "an AH fits core's space");

/* Generations of this process's UD QPs: never the same twice. */
static _Atomic uint64_t ud_next_gen;

struct ud_layout {
	uint64_t rq_off, comp_off, size;
};

static bool ud_layout(uint32_t rq_depth, struct ud_layout *l)
{
	if (!rq_depth || (rq_depth & (rq_depth - 1)) || rq_depth > (1u << 20))
		return false;
	l->rq_off = (sizeof(struct zd_shm_ud_shared) + ZD_CACHE_LINE - 1) &
		    ~(uint64_t)(ZD_CACHE_LINE - 1);
	l->comp_off = l->rq_off + (uint64_t)rq_depth * sizeof(struct zd_shm_rq_slot);
	l->size = l->comp_off + (uint64_t)rq_depth * sizeof(struct zd_shm_ud_comp);
	return true;
}

/* ---- the QP ---- */

DAT_RETURN zd_shm_ud_qp_create(struct zd_ep *ep)
{
	struct zd_shm_ia *sia = ep->obj.ia->dev_priv;
	struct zd_shm_ud_shared *sh;
	struct zd_shm_qp *qp;
	struct ud_layout l;
	uint32_t depth = 1;

	/* An SRQ's buffers serve other QPs too: completing them in this QP's
	 * order would need a completion ring that many senders append to in
	 * order; here the RQ itself is that ring. */
	if (ep->srq)
		return DAT_ERROR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE);
	while (depth < (uint32_t)ZD_MAX(ep->attr.max_recv_dtos, 1))
		depth <<= 1;
	if (!ud_layout(depth, &l) || !(qp = calloc(1, sizeof(*qp))))
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	qp->ep = ep;
	qp->sia = sia;
	qp->pz_id = zd_shm_pz_id(ep->pz);
	qp->region.fd = -1;
	qp->rregion.fd = -1;
	qp->rsrq_region.fd = -1;
	qp->rq_depth = depth;
	qp->rq_cookie = calloc(depth, sizeof(*qp->rq_cookie));
	qp->ud = calloc(1, sizeof(*qp->ud));
	if (!qp->rq_cookie || !qp->ud || zd_shm_region_alloc(sia, l.size, &qp->region) != 0)
		goto err;
	qp->ud->pid = getpid();
	/* A fresh region reads zero: every slot FREE at position 0. */
	sh = qp->region.base;
	sh->qp.magic = ZD_SHM_MAGIC_UDQP;
	sh->qp.rq_depth = depth;
	sh->qp.comp_depth = depth;
	sh->qp.rq_off = l.rq_off;
	sh->qp.comp_off = l.comp_off;
	sh->qp.eager_off = l.size;
	sh->qp.size = l.size;
	qp->ud->gen = atomic_fetch_add_explicit(&ud_next_gen, 1, memory_order_relaxed) + 1;
	sh->gen = qp->ud->gen;
	qp->own = &sh->qp;
	qp->rq = (void *)((char *)sh + l.rq_off);
	qp->ud->comp = (void *)((char *)sh + l.comp_off);

	qp->recv_cq = ep->recv_evd ? ep->recv_evd->cq_priv : NULL;
	qp->req_cq = ep->request_evd ? ep->request_evd->cq_priv : NULL;
	if (qp->recv_cq && zd_shm_cq_attach(qp->recv_cq, qp, true) != 0)
		goto err;
	/* Listed for symmetry with RC (qp_destroy detaches it); a UD QP
	 * never queues a request. */
	if (qp->req_cq && zd_shm_cq_attach(qp->req_cq, qp, false) != 0) {
		if (qp->recv_cq)
			zd_shm_cq_detach(qp->recv_cq, qp, true);
		goto err;
	}
	ep->dev_priv = qp;
	zd_ep_dto_refresh(ep);
	return DAT_SUCCESS;
err:
	zd_shm_region_free(sia, &qp->region);
	free(qp->rq_cookie);
	free(qp->ud);
	free(qp);
	return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
}

size_t zd_shm_ud_local_blob(struct zd_shm_qp *qp, void *blob, size_t max)
{
	struct zd_shm_ud_blob b;

	if (max < sizeof(b))
		return 0;
	memset(&b, 0, sizeof(b));
	b.version = ZD_SHM_UD_BLOB_VERSION;
	b.pid = getpid();
	b.ia_uid = qp->sia->sh->uid;
	b.ia_fd = qp->sia->arena.region.fd;
	b.ia_size = qp->sia->arena.region.size;
	b.qp_off = qp->region.off;
	b.qp_size = qp->region.size;
	b.gen = qp->ud->gen;
	memcpy(blob, &b, sizeof(b));
	return sizeof(b);
}

/* ---- address handles (control path) ---- */

DAT_RETURN zd_shm_ud_ah_create(struct zd_ia *ia, const void *blob, size_t len, void *ah,
			       uint32_t *qpn)
{
	struct zd_shm_ia *sia = ia->dev_priv;
	struct shm_ud_ah *a = ah;
	struct zd_shm_ud_blob b;
	struct zd_shm_blob pb;
	const struct zd_shm_ud_shared *hdr;
	struct ud_layout l;
	uint32_t depth;

	/* The blob came off the network: every field is checked, and the
	 * region it names must say the same generation. */
	if (!blob || len != sizeof(b))
		return DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_MALFORMED);
	memcpy(&b, blob, sizeof(b));
	if (b.version != ZD_SHM_UD_BLOB_VERSION || b.pid <= 0 || b.ia_fd < 0 ||
	    b.gen == 0 || b.qp_size < sizeof(*hdr) || b.qp_size > (1ull << 32))
		return DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_MALFORMED);
	memset(&pb, 0, sizeof(pb));
	pb.pid = b.pid;
	pb.ia_uid = b.ia_uid;
	pb.ia_fd = b.ia_fd;
	pb.ia_size = b.ia_size;
	memset(a, 0, sizeof(*a));
	a->region.fd = -1;
	/* NULL: the process is gone, or its IA region is not the one named. */
	a->peer = zd_shm_peer_get(sia, &pb);
	if (!a->peer)
		return DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNREACHABLE);
	if (zd_soft_peer_carve(a->peer, b.qp_off, b.qp_size, &a->region) != 0)
		goto err;
	/* Read the geometry once, check it, and never trust it again. */
	hdr = a->region.base;
	depth = hdr->qp.rq_depth;
	if (hdr->qp.magic != ZD_SHM_MAGIC_UDQP || hdr->gen != b.gen || !ud_layout(depth, &l) ||
	    hdr->qp.rq_off != l.rq_off || hdr->qp.comp_off != l.comp_off || l.size > b.qp_size)
		goto err;
	a->sh = a->region.base;
	a->rq = (void *)((char *)a->region.base + l.rq_off);
	a->comp = (void *)((char *)a->region.base + l.comp_off);
	a->rq_depth = depth;
	/* As an InfiniBand QPN: 24 bits, informational. */
	*qpn = (uint32_t)(b.gen & 0xffffff);
	return DAT_SUCCESS;
err:
	zd_soft_region_unmap(&a->region);
	zd_shm_peer_put(sia, a->peer);
	a->peer = NULL;
	return DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNREACHABLE);
}

void zd_shm_ud_ah_destroy(struct zd_ia *ia, void *ah)
{
	struct shm_ud_ah *a = ah;

	if (!a->peer)
		return;
	zd_soft_region_unmap(&a->region);
	zd_shm_peer_put(ia->dev_priv, a->peer);
	a->peer = NULL;
}

/* ---- sending a datagram (data path, any thread) ---- */

/* Takes the target's next posted receive: its position, or -1 if none is
 * posted (or the target lies about its indices). */
static int64_t ud_claim(const struct shm_ud_ah *a)
{
	struct zd_shm_ud_shared *sh = a->sh;
	const uint32_t mask = a->rq_depth - 1;
	uint64_t h = atomic_load_explicit(&sh->claim, memory_order_relaxed);

	/* Each round either takes slot h or sees another sender's progress;
	 * the bound only stops a target that rewinds its own index. */
	for (uint32_t round = 0; round <= 2 * a->rq_depth + 64; round++) {
		/* acquire: pairs with the release store of rq_posted in
		 * zd_shm_post_recv: slot h's descriptor and POSTED state (or
		 * a later state) are what we read below. */
		uint64_t posted = atomic_load_explicit(&sh->qp.rq_posted, memory_order_acquire);
		uint64_t w = zd_shm_slot_word(h, 0, ZD_SHM_SLOT_POSTED), seen = h;

		if (h >= posted || posted - h > a->rq_depth)
			return -1;
		if (atomic_compare_exchange_strong_explicit(&a->rq[h & mask].state, &w,
				zd_shm_slot_word(h, 0, ZD_SHM_SLOT_TAKEN),
				memory_order_acquire, memory_order_relaxed)) {
			/* Ours.  Move the index past it unless another sender
			 * did already (relaxed: the index is only a hint; the
			 * slot CAS decides). */
			atomic_compare_exchange_strong_explicit(&sh->claim, &seen, h + 1,
								memory_order_relaxed,
								memory_order_relaxed);
			return (int64_t)h;
		}
		/* Slot h was taken (or flushed): move the index on for its
		 * taker, or follow whoever moved it. */
		if (atomic_compare_exchange_strong_explicit(&sh->claim, &seen, h + 1,
							    memory_order_relaxed,
							    memory_order_relaxed))
			h++;
		else
			h = seen;
	}
	return -1;
}

/* The target's segments from @skip bytes into the receive, covering
 * exactly @len bytes: their count, or -1 if the receive is too small. */
static int ud_target_segs(const struct zd_soft_seg *in, uint32_t nseg, uint64_t skip,
			  uint64_t len, struct zd_soft_seg *out)
{
	int n = 0;

	for (uint32_t i = 0; i < nseg && (skip || len); i++) {
		uint64_t seg = in[i].len, take;

		if (skip >= seg) {
			skip -= seg;
			continue;
		}
		take = ZD_MIN(seg - skip, len);
		if (take) {
			out[n].addr = in[i].addr + skip;
			out[n].len = (uint32_t)take;
			out[n].chunk = in[i].chunk;
			n++;
		}
		skip = 0;
		len -= take;
	}
	return skip || len ? -1 : n;
}

/* Puts one datagram of @total bytes into the QP @a names, or drops it;
 * @pid: ours, to sign the receive we take. */
static void ud_deliver(const struct shm_ud_ah *a, pid_t pid, const struct iovec *liov,
		       DAT_COUNT n, uint64_t total, DAT_COMPLETION_FLAGS flags)
{
	struct zd_shm_ud_shared *sh = a->sh;
	struct zd_soft_seg segs[ZD_SHM_MAX_SEGS], dst[ZD_SHM_MAX_SEGS];
	struct zd_shm_rq_slot *slot;
	struct zd_shm_ud_comp *c;
	int64_t claimed;
	uint64_t pos, w;
	uint32_t nseg;
	int ndst, st = DAT_DTO_SUCCESS;
	bool sol = flags & DAT_COMPLETION_SOLICITED_WAIT_FLAG;

	/* The target QP was freed (or its process closed it): dropped. */
	if (ZD_UNLIKELY(atomic_load_explicit(&sh->qp.error, memory_order_relaxed)))
		return;
	claimed = ud_claim(a);
	if (ZD_UNLIKELY(claimed < 0)) {
		atomic_fetch_add_explicit(&sh->dropped, 1, memory_order_relaxed);
		return;
	}
	pos = (uint64_t)claimed;
	slot = &a->rq[pos & (a->rq_depth - 1)];
	c = &a->comp[pos & (a->rq_depth - 1)];
	atomic_store_explicit(&c->taker, pid, memory_order_relaxed);
	/* Copy the target's descriptor once, then check it. */
	nseg = slot->nseg;
	if (ZD_UNLIKELY(nseg > ZD_SHM_MAX_SEGS)) {
		st = DAT_DTO_ERR_LOCAL_PROTECTION;
	} else {
		memcpy(segs, slot->seg, nseg * sizeof(segs[0]));
		ndst = ud_target_segs(segs, nseg, ZD_UD_GRH_BYTES, total, dst);
		if (ndst < 0)
			st = DAT_DTO_ERR_LOCAL_LENGTH;  /* the QP goes on */
		else if (total && zd_soft_peer_copy(a->peer, true, liov, (int)n, dst, ndst) != 0)
			st = DAT_DTO_ERR_LOCAL_PROTECTION;  /* bad buffer, or the target died */
	}
	c->len = (uint32_t)(total + ZD_UD_GRH_BYTES);
	c->status = (uint32_t)st;
	c->flags = sol ? ZD_SHM_COMP_SOLICITED : 0;
	w = zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_TAKEN);
	/* release: pairs with the owner's acquire load in zd_shm_ud_reap: the
	 * payload and the entry are visible before the slot reads DONE.  It
	 * fails only if the owner flushed the slot meanwhile (QP freed). */
	atomic_compare_exchange_strong_explicit(&slot->state, &w,
						zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_DONE),
						memory_order_release, memory_order_relaxed);
	/* A consumer in solicited wait sleeps through plain receives. */
	zd_shm_peer_ring(zd_shm_peer_ia(a->peer), sol || st != DAT_DTO_SUCCESS ?
				     ZD_SHM_RING_ALWAYS : ZD_SHM_ARMED_ANY);
}

DAT_RETURN zd_shm_post_send_ud(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			       const void *ah, DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	struct zd_shm_qp *qp = ep->dev_priv;
	struct iovec liov[ZD_SHM_MAX_SEGS];
	uint64_t total = 0;
	int st = DAT_DTO_SUCCESS;

	if (ZD_UNLIKELY(!qp || !qp->ud || n > ZD_SHM_MAX_SEGS))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
	/* Local segments: key, bounds and PZ (reading needs no right, as
	 * with verbs); a bad one fails the send and sends nothing. */
	for (DAT_COUNT i = 0; i < n; i++) {
		struct zd_soft_mr_view v;
		uint64_t len = iov[i].segment_length;

		liov[i].iov_base = (void *)(uintptr_t)iov[i].virtual_address;
		liov[i].iov_len = len;
		if (len == 0)
			continue;
		if (ZD_UNLIKELY(!zd_shm_mr_read(qp->sia->sh->mr, iov[i].lmr_context, &v) ||
				!zd_soft_mr_allows(&v, iov[i].virtual_address, len, 0, qp->pz_id))) {
			st = DAT_DTO_ERR_LOCAL_PROTECTION;
			break;
		}
		total += len;
	}
	/* Core held the payload to max_ud_payload; a datagram that left
	 * completes successfully whatever became of it (UD is unreliable). */
	if (ZD_LIKELY(st == DAT_DTO_SUCCESS))
		ud_deliver(ah, qp->ud->pid, liov, n, total, flags);
	if (ZD_UNLIKELY(!qp->req_cq))
		return DAT_SUCCESS;
	/* Suppressed and unsignalled successes report nothing, as sends. */
	if (st == DAT_DTO_SUCCESS &&
	    ((flags & DAT_COMPLETION_SUPPRESS_FLAG) ||
	     ((flags & DAT_COMPLETION_UNSIGNALLED_FLAG) &&
	      (ep->attr.request_completion_flags & DAT_COMPLETION_UNSIGNALLED_FLAG))))
		return DAT_SUCCESS;
	zd_shm_cq_complete_req(qp->req_cq, ep, cookie, (DAT_DTO_COMPLETION_STATUS)st,
			       st == DAT_DTO_SUCCESS ? (DAT_SEG_LENGTH)total : 0,
			       (DAT_DTOS)DAT_IB_DTO_SEND_UD);
	return DAT_SUCCESS;
}

/* ---- receiving (the recv CQ's poller) ---- */

/* A receive's completion from its entry's @status, @len and @flags (as a
 * sender wrote them: only known statuses pass). */
static void ud_recv_event(struct zd_shm_qp *qp, DAT_DTO_COOKIE cookie, uint32_t status,
			  uint32_t len, uint32_t flags)
{
	struct zd_evd *evd = qp->recv_cq->soft.evd;
	DAT_DTO_COMPLETION_STATUS st = status <= DAT_DTO_ERR_PARTIAL_PACKET ?
				       (DAT_DTO_COMPLETION_STATUS)status : DAT_DTO_ERR_TRANSPORT;
	DAT_EVENT ev;

	zd_dto_event_fill(&ev, evd, qp->ep, cookie, st, st == DAT_DTO_SUCCESS ? len : 0,
			  (DAT_DTOS)DAT_IB_DTO_RECV_UD, 0);
	zd_evd_ev_set_solicited(&ev, flags & ZD_SHM_COMP_SOLICITED);
	/* As zd_shm_qp.c's receive events: spill, never drop, when request
	 * completions took the room cq_poll was given. */
	if (ZD_UNLIKELY(zd_evd_spilling(evd, memory_order_relaxed) ||
			!zd_ring_enqueue(evd->ring, &ev)))
		zd_evd_post(evd, &ev, 1);
}

/* Slot @pos stays TAKEN: true once its taker is known to be gone, asked
 * at most once a second after it has been TAKEN for ZD_SHM_UD_STALL_SECONDS
 * (a clock read per poll while it is, a kill(pid, 0) per second). */
static __attribute__((noinline)) bool ud_taker_gone(struct zd_shm_qp *qp, uint64_t pos)
{
	struct zd_shm_ud_qp *u = qp->ud;
	struct timespec now;
	int32_t pid;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
	if (u->stall_pos != pos + 1) {
		u->stall_pos = pos + 1;
		u->stall_since = now.tv_sec;
		return false;
	}
	if (now.tv_sec - u->stall_since < ZD_SHM_UD_STALL_SECONDS)
		return false;
	u->stall_since = now.tv_sec;
	pid = atomic_load_explicit(&u->comp[pos & (qp->rq_depth - 1)].taker, memory_order_relaxed);
	/* 0: the taker stopped before signing (or has yet to): keep waiting. */
	return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

int zd_shm_ud_reap(struct zd_shm_qp *qp, int budget)
{
	const uint32_t mask = qp->rq_depth - 1;
	struct zd_shm_ud_comp *comp = qp->ud->comp;
	uint64_t pos = qp->msg_seen;
	int n = 0;

	while (n < budget) {
		struct zd_shm_rq_slot *slot = &qp->rq[pos & mask];
		/* acquire: pairs with the sender's release CAS to DONE. */
		uint64_t w = atomic_load_explicit(&slot->state, memory_order_acquire);
		struct zd_shm_ud_comp *c = &comp[pos & mask];
		uint32_t status, len = 0, flags = 0;

		if (w == zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_DONE)) {
			status = c->status;
			len = c->len;
			flags = c->flags;
		} else if (w == zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_FLUSHED)) {
			/* The flush reported it.  release: post_recv's
			 * acquire sees the slot free. */
			atomic_store_explicit(&slot->state, zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_FREE),
					      memory_order_release);
			pos++;
			continue;
		} else if (ZD_UNLIKELY(w == zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_TAKEN)) &&
			   ud_taker_gone(qp, pos)) {
			status = DAT_DTO_ERR_TRANSPORT;
		} else {
			break;  /* not posted, not taken yet, or still being filled */
		}
		/* The next taker of this entry signs it afresh (its store
		 * follows ours: the slot's FREE, POSTED and rq_posted chain). */
		atomic_store_explicit(&c->taker, 0, memory_order_relaxed);
		/* The CAS loses only to a flush, which reports the receive. */
		if (!atomic_compare_exchange_strong(&slot->state, &w,
						    zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_FREE)))
			continue;
		ud_recv_event(qp, qp->rq_cookie[pos & mask], status, len, flags);
		n++;
		pos++;
	}
	qp->msg_seen = pos;
	return n;
}
