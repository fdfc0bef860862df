/*
 * CQs of the mlx5 device, one per DTO EVD: creation through the backend,
 * and the data path's poll (CQEs straight into DAT events, written in place
 * in the EVD ring's slots) and arm (zdapl writes the arm doorbell; never
 * ibv_req_notify_cq).  zd_mlx5_cq_poll takes one successful requester CQE
 * straight through; every other case goes to the general loop.
 * zd_mlx5_cq_poll_one (dat_evd_dequeue on an empty ring) takes the same
 * case straight into the caller's DAT_EVENT, with no ring slot at all.
 * The IB extensions' completions -- a write with immediate data or an
 * atomic at the initiator, a receive with immediate data at the target --
 * are DAT_IB_DTO_EVENTs with extension words (zd_dto_event.h): the general
 * loop's (their WQEs never carry ZD_MLX5_WR_EVENT, which is all
 * zd_mlx5_cq_poll's latency path takes), which also turns an atomic's
 * big-endian old value to host order (req_ext).  zd_mlx5_cq_poll_one
 * hands those of successful initiator CQEs straight to the caller as
 * well: a write with immediate data's inline beside the plain write's
 * (ZD_MLX5_WR_IMM_EVENT), the others out of line (cq_poll_one_req).
 *
 * Pinned pollers (evd/zd_poller.h): the EVD's poller thread is then the
 * only caller of zd_mlx5_cq_poll for it, and zd_mlx5_cq_poll_one and the
 * arm are never called, so what assumes one poller per CQ holds with the
 * poller as that one: the pass counter keeps a single writer (the
 * poller; zd_mlx5_sync_pollers' membarrier, or the fence when there is
 * none, reaches its thread as any other), q.ci and the last-QP cache are
 * the poller's alone, and SQ/RQ/SRQ retirement already pairs with posters
 * on other threads by release/acquire.  Events are only produced into the
 * EVD ring (claim/publish, or dto_event_spill when a claim fails: the
 * consumer may be dequeuing meanwhile), inside the poller's direct_users
 * handshake, so a dat_evd_resize never swaps the ring under a pass.
 */
#include <stddef.h>
#include <stdlib.h>

#include "core/zd_cm.h"
#include "core/zd_ia.h"
#include "core/zd_ep.h"
#include "core/zd_srq.h"
#include "evd/zd_dto_event.h"
#include "evd/zd_evd.h"
#include "evd/zd_evd_entry.h"
#include "hw/mlx5/zd_mlx5.h"

/* CQEs a CQ feeding an EVD of @depth events needs.  Room beyond the EVD's
 * events: CQEs that only free the SQ (moderation of suppressed DTOs) and
 * completions waiting for room in a full EVD must never overrun the CQ. */
static uint32_t cq_entries_for(uint32_t depth)
{
	return depth < (1u << 30) ? 2 * depth + 16 : depth;
}

DAT_RETURN zd_mlx5_cq_create(struct zd_evd *evd, uint32_t depth)
{
	struct zd_mlx5_dev *dev = evd->obj.ia->dev_priv;
	struct zd_mlx5_cq_obj *cq;
	struct zd_mlx5_cq_desc d = { 0 };
	DAT_RETURN ret;

	/* Aligned: the poller's state starts the object on its own line. */
	if (posix_memalign((void **)&cq, ZD_CACHE_LINE, sizeof(*cq)) != 0)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	memset(cq, 0, sizeof(*cq));
	cq->dev = dev;
	cq->evd = evd;
	cq->fence = !dev->membarrier;
	ret = dev->be->cq_create(dev->bctx, cq_entries_for(depth), cq, &cq->bcq, &d);
	if (ret != DAT_SUCCESS) {
		free(cq);
		return ret;
	}
	if (zd_mlx5_cq_init(&cq->q, &d) != 0) {
		dev->be->cq_destroy(dev->bctx, cq->bcq);
		free(cq);
		return DAT_ERROR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
	}
	pthread_mutex_lock(&dev->lock);
	cq->next = dev->cqs;
	dev->cqs = cq;
	pthread_mutex_unlock(&dev->lock);
	/* cq_poll marks solicited receives (the CQE's SE bit). */
	evd->marks_solicited = 1;
	evd->cq_priv = cq;
	return DAT_SUCCESS;
}

/*
 * dat_evd_resize: the CQ stays (a directly driven CQ cannot be resized
 * under its poller: libmlx5's resize copies the unpolled CQEs from the
 * consumer index it keeps, which ours bypasses); a depth its CQEs still
 * cover is fine -- the size rounds up to a power of two, so an EVD may
 * grow a little -- anything more is refused.
 */
DAT_RETURN zd_mlx5_cq_resize(struct zd_evd *evd, uint32_t depth)
{
	struct zd_mlx5_cq_obj *cq = evd->cq_priv;

	if (cq && cq_entries_for(depth) > cq->q.cqe_cnt)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	return DAT_SUCCESS;
}

void zd_mlx5_cq_destroy(struct zd_evd *evd)
{
	struct zd_mlx5_cq_obj *cq = evd->cq_priv, **pp;
	struct zd_mlx5_dev *dev;

	if (!cq)
		return;
	dev = cq->dev;
	pthread_mutex_lock(&dev->lock);
	for (pp = &dev->cqs; *pp; pp = &(*pp)->next)
		if (*pp == cq) {
			*pp = cq->next;
			break;
		}
	pthread_mutex_unlock(&dev->lock);
	evd->cq_priv = NULL;
	/* EPs hold their EVDs: no QP uses this CQ any more. */
	dev->be->cq_destroy(dev->bctx, cq->bcq);
	free(cq);
}

/* The ring had no room after all (an EVD shared with other producers,
 * e.g. DTO and connection events in one, may fill under cq_poll's
 * budget), or events wait in the spill list: zd_evd_post spills, never
 * drops, and keeps the order. */
static __attribute__((noinline)) void dto_event_spill(struct zd_evd *evd,
						      const DAT_DTO_COMPLETION_EVENT_DATA *d,
						      bool solicited)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_DTO_COMPLETION_EVENT;
	zd_evd_ev_set_solicited(&ev, solicited);
	ev.evd_handle = evd;
	ev.event_data.dto_completion_event_data = *d;
	zd_evd_post(evd, &ev, 1);
}

/* The pairs put2x32 writes (and the mark of zd_evd_ev_set_solicited: the
 * 32 bits after event_number). */
_Static_assert(sizeof(DAT_EVENT_NUMBER) == 4 &&
	       offsetof(DAT_EVENT, evd_handle) == 8 &&
	       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, transfered_length) ==
	       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, status) + 4 &&
	       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, rmr_context) ==
	       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, operation) + 4 &&
	       sizeof(DAT_DTO_COMPLETION_STATUS) == 4 && sizeof(DAT_DTOS) == 4 &&
	       sizeof(DAT_SEG_LENGTH) == 4 && sizeof(DAT_RMR_CONTEXT) == 4,
	       "DTO event fields paired by put2x32");

/* Two adjacent 32-bit fields (@lo first in memory) as one 64-bit store. */
static ZD_ALWAYS_INLINE void put2x32(void *p, uint32_t lo, uint32_t hi)
{
#if __BYTE_ORDER == __LITTLE_ENDIAN
	uint64_t v = (uint64_t)hi << 32 | lo;
#else
	uint64_t v = (uint64_t)lo << 32 | hi;
#endif

	memcpy(p, &v, sizeof(v));
}

/* The payload of a DTO completion event (the head of a DAT_EVENT, up to
 * its extension words), in place in a claimed ring slot (its mirror) or in
 * the consumer's DAT_EVENT. */
static ZD_ALWAYS_INLINE void dto_fill(DAT_EVENT *e, struct zd_evd *evd, struct zd_ep *ep,
				      DAT_DTO_COOKIE cookie, DAT_DTO_COMPLETION_STATUS st,
				      uint32_t len, DAT_DTOS op, bool solicited)
{
	DAT_DTO_COMPLETION_EVENT_DATA *d = &e->event_data.dto_completion_event_data;

	/* Three of the seven words as pairs of 32-bit fields: event number
	 * and the solicited mark, status and length, operation and
	 * rmr_context (0). */
	put2x32(e, DAT_DTO_COMPLETION_EVENT, solicited ? ZD_EVD_SOLICITED_MAGIC : 0);
	e->evd_handle = evd;
	d->ep_handle = ep;
	d->user_cookie = cookie;
	put2x32(&d->status, st, st == DAT_DTO_SUCCESS ? len : 0);
	put2x32(&d->operation, op, 0);
}

/* One DTO completion event, written in place into the EVD ring's slot
 * (zd_ring_claim/zd_ring_publish: no DAT_EVENT built and copied). */
static ZD_ALWAYS_INLINE void dto_event(struct zd_evd *evd, struct zd_ep *ep, DAT_DTO_COOKIE cookie,
				       DAT_DTO_COMPLETION_STATUS st, uint32_t len, DAT_DTOS op,
				       bool solicited)
{
	uint64_t pos;
	/* Spilled events are older: this one goes behind them, not into the
	 * ring ahead of them (acquire: pairs with zd_evd_post's release). */
	struct zd_ring_slot *s =
		ZD_UNLIKELY(zd_evd_spilling(evd, memory_order_acquire)) ?
			NULL : zd_ring_claim(evd->ring, &pos);

	if (ZD_UNLIKELY(!s)) {
		const DAT_DTO_COMPLETION_EVENT_DATA dd = {
			.ep_handle = ep, .user_cookie = cookie, .status = st,
			.transfered_length = st == DAT_DTO_SUCCESS ? len : 0, .operation = op,
		};

		dto_event_spill(evd, &dd, solicited);
		return;
	}
	dto_fill((DAT_EVENT *)(void *)s, evd, ep, cookie, st, len, op, solicited);
	zd_ring_publish(s, pos);
}

/* An IB extension completion (zd_dto_event.h builds the whole
 * DAT_IB_DTO_EVENT: its extension words do not fit a slot's head) into the
 * EVD ring with its extension line, or spilled as dto_event does. */
static __attribute__((noinline)) void ext_event(struct zd_evd *evd, struct zd_ep *ep,
						DAT_DTO_COOKIE cookie, DAT_DTO_COMPLETION_STATUS st,
						uint32_t len, DAT_DTOS op, uint32_t imm,
						bool solicited)
{
	DAT_EVENT ev;

	zd_dto_event_fill(&ev, evd, ep, cookie, st, st == DAT_DTO_SUCCESS ? len : 0, op, imm);
	zd_evd_ev_set_solicited(&ev, solicited);
	/* acquire: as in dto_event. */
	if (ZD_UNLIKELY(zd_evd_spilling(evd, memory_order_acquire)) ||
	    ZD_UNLIKELY(!zd_ring_enqueue(evd->ring, &ev)))
		zd_evd_post(evd, &ev, 1);
}

/*
 * An atomic's old value the NIC wrote big-endian (ZD_MLX5_WR_SWAP64) to
 * host order, when its CQE at @wc is taken and before its WQE is retired:
 * the WQE, still ours until then, names the 8 bytes in its data segment
 * (ctrl, raddr, atomic, data: zd_mlx5_post_atomic).  Successful CQEs
 * only.
 */
static ZD_ALWAYS_INLINE void req_ext_swap(struct zd_mlx5_qp *qp, const struct zd_mlx5_sq_wr *wr,
					  uint16_t wc)
{
	if (ZD_LIKELY(wr->flags & ZD_MLX5_WR_SWAP64)) {
		const struct mlx5_wqe_data_seg *d =
			(const void *)((const uint8_t *)zd_mlx5_sq_bb(&qp->sq, wc) +
				       sizeof(struct mlx5_wqe_ctrl_seg) +
				       sizeof(struct mlx5_wqe_raddr_seg) +
				       sizeof(struct mlx5_wqe_atomic_seg));
		uint8_t *old = (uint8_t *)(uintptr_t)be64toh(d->addr);
		uint64_t v;

		memcpy(&v, old, sizeof(v));
		v = be64toh(v);
		memcpy(old, &v, sizeof(v));
	}
}

/* The CQE of an IB extension WQE (ZD_MLX5_WR_EXT) at @wc is taken: its
 * bookkeeping comes back (read before the retire, after which a poster may
 * reuse it), an atomic's old value turned first. */
static ZD_ALWAYS_INLINE struct zd_mlx5_sq_wr req_ext_retire(struct zd_mlx5_qp *qp,
							    struct zd_mlx5_sq_wr *wr, uint16_t wc,
							    DAT_DTO_COMPLETION_STATUS st)
{
	struct zd_mlx5_sq_wr w;

	if (st == DAT_DTO_SUCCESS)
		req_ext_swap(qp, wr, wc);
	w = *wr;
	zd_mlx5_sq_retire_to(&qp->sq, w.next_ci);
	return w;
}

/* The CQE of an IB extension WQE at @wc -> 0 or 1 DAT events. */
static __attribute__((noinline)) int req_ext(struct zd_mlx5_cq_obj *cq, struct zd_mlx5_qp *qp,
					     struct zd_mlx5_sq_wr *wr, uint16_t wc,
					     DAT_DTO_COMPLETION_STATUS st)
{
	const struct zd_mlx5_sq_wr w = req_ext_retire(qp, wr, wc, st);

	if (st == DAT_DTO_SUCCESS && !(w.flags & ZD_MLX5_WR_EXT_EVENT))
		return 0;  /* suppressed */
	ext_event(cq->evd, qp->ep, w.cookie, st, w.len, (DAT_DTOS)w.op, 0, false);
	return 1;
}

/* The QP of a CQE, inside a counted pass: the last one looked up on this
 * CQ (one compare: a latency loop sees one QP), else the QPN table.  A CQ
 * whose passes take a full fence (no membarrier) caches none: its direct
 * poll's pass begins without that fence, so it must never find a match
 * (cq_poll_one_). */
static __attribute__((noinline)) struct zd_mlx5_qp *cq_qp_miss(struct zd_mlx5_cq_obj *cq,
								uint32_t qpn)
{
	struct zd_mlx5_qp *qp = zd_mlx5_qp_lookup(cq->dev, qpn);

	if (qp && !cq->fence) {
		cq->q.last_qp = qp;
		/* relaxed: read back by this thread, after last_qp in program
		 * order; qp_unbuild only turns it to NONE (CAS), ordered with
		 * our passes by its zd_mlx5_sync_pollers. */
		atomic_store_explicit(&cq->q.req_want, zd_mlx5_cqe_req_want(qpn),
				      memory_order_relaxed);
	}
	return qp;
}

static ZD_ALWAYS_INLINE struct zd_mlx5_qp *cq_qp(struct zd_mlx5_cq_obj *cq, uint32_t qpn)
{
	/* relaxed: as in cq_qp_miss. */
	if (ZD_LIKELY(atomic_load_explicit(&cq->q.req_want, memory_order_relaxed) ==
		      zd_mlx5_cqe_req_want(qpn)))
		return cq->q.last_qp;
	return cq_qp_miss(cq, qpn);
}

void zd_mlx5_cq_forget_qp(struct zd_mlx5_dev *dev, struct zd_mlx5_qp *qp)
{
	pthread_mutex_lock(&dev->lock);
	for (struct zd_mlx5_cq_obj *cq = dev->cqs; cq; cq = cq->next) {
		uint64_t want = zd_mlx5_cqe_req_want(qp->qpn);

		/* Only ours: the poller may be caching another QP meanwhile. */
		atomic_compare_exchange_strong(&cq->q.req_want, &want, ZD_MLX5_CQE_REQ_NONE);
	}
	pthread_mutex_unlock(&dev->lock);
}

/* The SRQ low watermark (dat_srq_set_lw), checked as receives complete:
 * the hardware does not say when it takes a WQE, so buffers in flight
 * still count as available.  The poster's counter is read racily (a hint
 * that only decides whether to post the event). */
static void srq_check_lw(struct zd_mlx5_srq_obj *s)
{
	uint32_t posted = __atomic_load_n(&s->q.counter, __ATOMIC_RELAXED);
	uint32_t done = atomic_load_explicit(&s->q.free_tail, memory_order_relaxed);

	if (ZD_UNLIKELY(s->srq && atomic_load_explicit(&s->srq->low_watermark,
						      memory_order_relaxed) != DAT_SRQ_LW_DEFAULT))
		zd_srq_check_lw(s->srq, (uint32_t)(posted - done));
}

/* Every CQE but a successful requester one: errors, receives, CQEs of
 * unknown QPs.  One CQE -> 0 or 1 DAT events. */
static __attribute__((noinline)) int cqe_handle_slow(struct zd_mlx5_cq_obj *cq,
						     struct mlx5_cqe64 *cqe)
{
	struct zd_mlx5_cqe_info ci;
	struct zd_mlx5_qp *qp;
	DAT_DTO_COMPLETION_STATUS st;
	DAT_DTO_COOKIE cookie;
	DAT_DTOS op;

	zd_mlx5_cqe_parse(cqe, &ci);
	/* A CQE that completes nothing, whatever else it holds (the software
	 * device's way of giving up a slot its writer never wrote). */
	if (ZD_UNLIKELY(ci.opcode == MLX5_CQE_NO_PACKET))
		return 0;
	qp = cq_qp(cq, ci.qpn);
	if (ZD_UNLIKELY(!qp))
		return 0;  /* a QP destroyed (or reset) since: drop */
	st = ZD_UNLIKELY(ci.error) ? zd_mlx5_syndrome_status(ci.syndrome) : DAT_DTO_SUCCESS;
	/* An error other than a flush put the QP in error: its connection
	 * ends too (BROKEN on both sides), as the shm and tcp devices do. */
	if (ZD_UNLIKELY(st != DAT_DTO_SUCCESS && st != DAT_DTO_ERR_FLUSHED) && qp->ep)
		zd_cm_dev_broken(qp->ep);
	if (ci.requester) {
		struct zd_mlx5_sq_wr *wr = &qp->sq.wr[ci.wqe_counter & qp->sq.mask];
		struct zd_mlx5_sq_wr w;

		if (ZD_UNLIKELY(wr->flags & ZD_MLX5_WR_EXT))
			return req_ext(cq, qp, wr, ci.wqe_counter, st);
		/* Read, then retire: a poster may reuse the entry after. */
		w = *wr;
		zd_mlx5_sq_retire_to(&qp->sq, w.next_ci);
		if (ZD_LIKELY(st == DAT_DTO_SUCCESS) && !(w.flags & ZD_MLX5_WR_EVENT))
			return 0;  /* suppressed, or signaled only to free the SQ */
		dto_event(cq->evd, qp->ep, w.cookie, st, w.len, (DAT_DTOS)w.op, false);
		return 1;
	}
	/* A receive consumed by a send or, with its immediate data, by a write
	 * with immediate data (which places nothing in the receive's buffers). */
	switch (ci.opcode) {
	case MLX5_CQE_RESP_SEND:
	case MLX5_CQE_RESP_SEND_INV:
	case MLX5_CQE_RESP_ERR:
		op = DAT_DTO_RECEIVE;
		break;
	case MLX5_CQE_RESP_SEND_IMM:
		op = (DAT_DTOS)DAT_IB_DTO_RECV_MSG_IMMED;
		break;
	case MLX5_CQE_RESP_WR_IMM:
		op = (DAT_DTOS)DAT_IB_DTO_RECV_IMMED;
		break;
	default:
		return 0;  /* nothing zdapl asked for */
	}
	if (qp->srq)
		cookie = zd_mlx5_srq_complete(&qp->srq->q, ci.wqe_counter);
	else if (ZD_LIKELY(qp->rq.wqe_cnt))
		cookie = zd_mlx5_rq_complete(&qp->rq);
	else
		return 0;
	if (ZD_UNLIKELY(qp->ud))
		/* a datagram: its length counts the GRH before the payload */
		op = ci.opcode == MLX5_CQE_RESP_SEND_IMM ? (DAT_DTOS)DAT_IB_DTO_RECV_UD_IMMED
							  : (DAT_DTOS)DAT_IB_DTO_RECV_UD;
	if (ZD_UNLIKELY(op != DAT_DTO_RECEIVE))
		/* the immediate: big-endian in the CQE as in the WQE */
		ext_event(cq->evd, qp->ep, cookie, st, ci.byte_cnt, op,
			  be32toh(cqe->imm_inval_pkey), mlx5dv_get_cqe_se(cqe));
	else
		dto_event(cq->evd, qp->ep, cookie, st, ci.byte_cnt, DAT_DTO_RECEIVE,
			  mlx5dv_get_cqe_se(cqe));
	if (qp->srq)
		srq_check_lw(qp->srq);
	return 1;
}

/* The head of a successful DTO completion event, from the bookkeeping of
 * its WQE: event number, EVD and EP, then the entry's first bytes as they
 * are (cookie, status, length, operation, rmr_context: zd_mlx5_sq_wr).
 * In place in a claimed ring slot or in the consumer's DAT_EVENT; read
 * before the WQE is retired. */
static ZD_ALWAYS_INLINE void dto_fill_wr(DAT_EVENT *e, struct zd_evd *evd, struct zd_ep *ep,
					 const struct zd_mlx5_sq_wr *wr)
{
	DAT_DTO_COMPLETION_EVENT_DATA *d = &e->event_data.dto_completion_event_data;

	put2x32(e, DAT_DTO_COMPLETION_EVENT, 0);
	e->evd_handle = evd;
	d->ep_handle = ep;
	memcpy(&d->user_cookie, wr, ZD_MLX5_WR_EVENT_BYTES);
}

/* dto_event of a successful completion, from its WQE's bookkeeping. */
static ZD_ALWAYS_INLINE void dto_event_wr(struct zd_evd *evd, struct zd_ep *ep,
					  const struct zd_mlx5_sq_wr *wr)
{
	uint64_t pos;
	/* acquire: as in dto_event. */
	struct zd_ring_slot *s =
		ZD_UNLIKELY(zd_evd_spilling(evd, memory_order_acquire)) ?
			NULL : zd_ring_claim(evd->ring, &pos);

	if (ZD_UNLIKELY(!s)) {
		dto_event(evd, ep, wr->cookie, DAT_DTO_SUCCESS, wr->len, (DAT_DTOS)wr->op, false);
		return;
	}
	dto_fill_wr((DAT_EVENT *)(void *)s, evd, ep, wr);
	zd_ring_publish(s, pos);
}

/*
 * A successful requester CQE -> 0 or 1 DAT events: only its QPN and
 * wqe_counter are read, the cookie is found by index, read, then the WQE
 * retired (zd_mlx5_sq_retire_to).
 */
static ZD_ALWAYS_INLINE int cqe_req_ok(struct zd_mlx5_cq_obj *cq, const struct mlx5_cqe64 *cqe)
{
	struct zd_mlx5_qp *qp = cq_qp(cq, be32toh(cqe->sop_drop_qpn) & 0xffffff);
	struct zd_mlx5_sq_wr *wr;
	uint32_t next_ci;
	uint16_t wc;

	if (ZD_UNLIKELY(!qp))
		return 0;  /* a QP destroyed (or reset) since: drop */
	wc = be16toh(cqe->wqe_counter);
	wr = &qp->sq.wr[wc & qp->sq.mask];
	if (!(wr->flags & ZD_MLX5_WR_EVENT)) {
		if (ZD_UNLIKELY(wr->flags & ZD_MLX5_WR_EXT))
			return req_ext(cq, qp, wr, wc, DAT_DTO_SUCCESS);
		zd_mlx5_sq_retire_to(&qp->sq, wr->next_ci);
		return 0;  /* suppressed, or signaled only to free the SQ */
	}
	next_ci = wr->next_ci;
	dto_event_wr(cq->evd, qp->ep, wr);
	zd_mlx5_sq_retire_to(&qp->sq, next_ci);
	return 1;
}

static ZD_ALWAYS_INLINE int cqe_handle(struct zd_mlx5_cq_obj *cq, struct mlx5_cqe64 *cqe,
				       uint8_t op_own)
{
	if (ZD_LIKELY((op_own >> 4) == MLX5_CQE_REQ))
		return cqe_req_ok(cq, cqe);
	return cqe_handle_slow(cq, cqe);
}

/* One more to the pass count, of which the poller is the only writer:
 * on x86-64 one add to memory (its store is one aligned 32-bit write,
 * which zd_mlx5_sync_pollers reads whole), elsewhere a relaxed load and
 * store.  A compiler barrier either way: the pass's reads stay inside. */
static ZD_ALWAYS_INLINE void pass_bump(struct zd_mlx5_cq_obj *cq)
{
#if defined(ZD_TSAN)
	/* ThreadSanitizer does not see the asm: an RMW it can pair with the
	 * destroyer's acquire load. */
	atomic_fetch_add(&cq->pass, 1);
#elif defined(__x86_64__)
	__asm__ volatile("addl $1, %0" : "+m"(*(uint32_t *)&cq->pass) : : "memory");
#else
	uint32_t pass = atomic_load_explicit(&cq->pass, memory_order_relaxed);

	atomic_signal_fence(memory_order_seq_cst);
	/* release: as in pass_end. */
	atomic_store_explicit(&cq->pass, pass + 1, memory_order_release);
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* Opens a counted pass: QPs looked up in it stay allocated until it ends
 * (zd_mlx5_sync_pollers).  The odd count is visible before the table (or
 * the last-QP cache) is read: pairs with the membarrier (or, with none,
 * the fence) in zd_mlx5_sync_pollers. */
static ZD_ALWAYS_INLINE void pass_begin(struct zd_mlx5_cq_obj *cq)
{
	pass_bump(cq);
	if (ZD_UNLIKELY(cq->fence))
		atomic_thread_fence(memory_order_seq_cst);
}

/* Ends it; release (x86-64: every store is): our reads of QPs are done
 * before the destroyer sees the pass end.  Then the CQEs go back. */
static ZD_ALWAYS_INLINE int pass_end(struct zd_mlx5_cq_obj *cq, int n)
{
	/* (the CQEs first: ci is still in a register then) */
	zd_mlx5_cq_update_ci(&cq->q);
	pass_bump(cq);
	return n;
}

/* The rest of a pass (@n events so far), its CQE at ci not taken yet: the
 * general loop, out of line so the one-CQE case stays a leaf. */
static __attribute__((noinline)) int cq_poll_more(struct zd_mlx5_cq_obj *cq, int budget, int n)
{
	struct mlx5_cqe64 *cqe;
	uint8_t op_own;

	while (n < budget && (cqe = zd_mlx5_cq_next_own(&cq->q, &op_own)) != NULL) {
		n += cqe_handle(cq, cqe, op_own);
		zd_mlx5_cq_consume(&cq->q, cqe);
	}
	return pass_end(cq, n);
}

/* A requester CQE whose tail (zd_mlx5_cqe_tail) @tail matches the CQ's
 * req_want: successful, of the cached QP.  Its WQE's bookkeeping. */
static ZD_ALWAYS_INLINE bool cqe_tail_req_ok(const struct zd_mlx5_cq_obj *cq, uint64_t tail)
{
	/* relaxed: as in cq_qp. */
	return !((tail ^ atomic_load_explicit(&cq->q.req_want, memory_order_relaxed)) &
		 ZD_MLX5_CQE_REQ_MASK);
}

/* The bookkeeping of the WQE of @cqe, whose tail matched: its
 * wqe_counter read again on its own (a 2-byte load and a swap rather than
 * taking it out of the tail: the CQE is ours until consumed). */
static ZD_ALWAYS_INLINE struct zd_mlx5_sq_wr *cqe_wr(const struct zd_mlx5_qp *qp,
						     const struct mlx5_cqe64 *cqe)
{
	return &qp->sq.wr[(uint32_t)be16toh(cqe->wqe_counter) & qp->sq.mask];
}

/*
 * The latency case -- the next CQE is a successful requester one of the
 * cached QP that wants an event and the ring has room -- straight
 * through, with only tail calls out: the CQE's tail is its only load, the
 * cookie is found by index, the event is written in place into the ring
 * slot.  Anything else (and whatever follows the first CQE) goes to the
 * general loop, which takes the CQE from the start: nothing of it was
 * consumed.
 */
int zd_mlx5_cq_poll(struct zd_evd *evd, int budget)
{
	struct zd_mlx5_cq_obj *cq = evd->cq_priv;
	struct mlx5_cqe64 *cqe;
	struct zd_mlx5_qp *qp;
	struct zd_mlx5_sq_wr *wr;
	struct zd_ring_slot *s;
	uint64_t pos, tail;
	uint32_t next_ci;
	uint8_t op_own;

	if (ZD_UNLIKELY(!cq || budget <= 0) || !(cqe = zd_mlx5_cq_next_own(&cq->q, &op_own)))
		return 0;
	pass_begin(cq);
	tail = zd_mlx5_cqe_tail(cqe);
	if (ZD_UNLIKELY(!cqe_tail_req_ok(cq, tail)))
		return cq_poll_more(cq, budget, 0);
	qp = cq->q.last_qp;
	wr = cqe_wr(qp, cqe);
	if (ZD_UNLIKELY(!(wr->flags & ZD_MLX5_WR_EVENT)))
		return cq_poll_more(cq, budget, 0);
	/* Behind spilled events, never ahead (dto_event). */
	if (ZD_UNLIKELY(zd_evd_spilling(evd, memory_order_acquire)))
		return cq_poll_more(cq, budget, 0);
	s = zd_ring_claim(evd->ring, &pos);
	if (ZD_UNLIKELY(!s))
		return cq_poll_more(cq, budget, 0);
	next_ci = wr->next_ci;
	dto_fill_wr((DAT_EVENT *)(void *)s, evd, qp->ep, wr);
	zd_ring_publish(s, pos);
	zd_mlx5_cq_consume(&cq->q, cqe);
	zd_mlx5_sq_retire_to(&qp->sq, next_ci);
	if (ZD_UNLIKELY(budget > 1 && zd_mlx5_cq_next_own(&cq->q, &op_own)))
		return cq_poll_more(cq, budget, 1);
	return pass_end(cq, 1);
}

/*
 * zd_mlx5_cq_poll's latency case, straight into the consumer's DAT_EVENT
 * (see cq_poll_one in core/zd_device.h): no ring slot claimed, published,
 * then dequeued.  The EVD check comes after the CQE was read
 * (zd_evd_direct_ok).  Anything else polls the ordinary way and leaves
 * the caller to the ring.  @ring_if_empty: an empty CQ hands over to the
 * ring (the dequeue entry's poll_first, evd/zd_evd_entry.h: called before
 * the ring was looked at); else the caller found the ring empty.
 */
static __attribute__((noinline)) DAT_RETURN cq_poll_one_slow(struct zd_mlx5_cq_obj *cq,
								struct zd_evd *evd, DAT_EVENT *out)
{
	cq_poll_more(cq, zd_evd_room(evd), 0);
	return zd_evd_take(evd, out);
}

/* cq_poll_one's case of a successful requester CQE @cqe whose WQE (@wr of
 * @qp) its inline paths do not take: an IB extension operation that wants
 * its event goes straight into @out as well (an atomic, a UD send: the
 * same latency loops); anything else, the ordinary way. */
static __attribute__((noinline)) DAT_RETURN cq_poll_one_req(struct zd_mlx5_cq_obj *cq,
							   struct zd_evd *evd, DAT_EVENT *out,
							   struct zd_mlx5_qp *qp,
							   struct zd_mlx5_sq_wr *wr,
							   struct mlx5_cqe64 *cqe)
{
	if (!(wr->flags & ZD_MLX5_WR_EXT_EVENT) || !zd_evd_direct_ok(evd))
		return cq_poll_one_slow(cq, evd, out);
	/* (six arguments, so that the callers' calls are jumps) */
	req_ext_swap(qp, wr, zd_mlx5_cqe_tail_wc(zd_mlx5_cqe_tail(cqe)));
	/* WR_EXT_EVENT: the WQE of an IB extension operation of zdapl's (the
	 * fill's tests of it fold away). */
	if (!zd_dto_ext_known((DAT_DTOS)wr->op))
		__builtin_unreachable();
	/* The event before the retire: a poster may reuse @wr after it. */
	zd_dto_event_fill(out, evd, qp->ep, wr->cookie, DAT_DTO_SUCCESS, wr->len, (DAT_DTOS)wr->op,
			  0);
	zd_mlx5_cq_consume(&cq->q, cqe);
	zd_mlx5_sq_retire_to(&qp->sq, wr->next_ci);
	pass_end(cq, 1);
	return DAT_SUCCESS;
}

/* @wr's flags read a second time, after the plain write's test of them: a
 * relaxed atomic load, which the compiler keeps apart, so that the plain
 * write's test stays one instruction on memory rather than a load it then
 * shares with this one. */
static ZD_ALWAYS_INLINE uint8_t wr_flags_again(const struct zd_mlx5_sq_wr *wr)
{
	return __atomic_load_n(&wr->flags, __ATOMIC_RELAXED);
}

/* cq_poll_one's latency case of a write with immediate data
 * (ZD_MLX5_WR_IMM_EVENT, the EVD checked): a DAT_IB_DTO_EVENT whose
 * operation, extension type and status are constants, straight into @out
 * as a plain write's event is.  @wr is read before the retire. */
static ZD_ALWAYS_INLINE DAT_RETURN cq_poll_one_imm(struct zd_mlx5_cq_obj *cq, struct zd_evd *evd,
						   DAT_EVENT *out, struct zd_mlx5_qp *qp,
						   const struct zd_mlx5_sq_wr *wr,
						   struct mlx5_cqe64 *cqe)
{
	zd_dto_event_fill(out, evd, qp->ep, wr->cookie, DAT_DTO_SUCCESS, wr->len,
			  (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, 0);
	zd_mlx5_cq_consume(&cq->q, cqe);
	zd_mlx5_sq_retire_to(&qp->sq, wr->next_ci);
	pass_end(cq, 1);
	return DAT_SUCCESS;
}

/*
 * Nothing new at ci: its opcode is MLX5_CQE_INVALID, as the CQ was created
 * and as every CQE is left when consumed (zd_mlx5_cq_consume), so one byte
 * compare says it.  Anything else is looked at in a pass: the tail (the
 * CQE's one load) against req_want, then the general loop, which checks
 * the owner bit as well.
 */
static ZD_ALWAYS_INLINE bool cqe_none(const struct mlx5_cqe64 *cqe)
{
	return zd_dev_load(&cqe->op_own) >= (MLX5_CQE_INVALID << 4);
}

/* cq_poll_one's latency case proper: the CQE @cqe at ci, in an open pass,
 * is a successful requester CQE (tail @tail) of @qp. */
static ZD_ALWAYS_INLINE DAT_RETURN cq_poll_one_hit(struct zd_mlx5_cq_obj *cq, struct zd_evd *evd,
						   DAT_EVENT *out, struct mlx5_cqe64 *cqe,
						   struct zd_mlx5_qp *qp, uint64_t tail)
{
	struct zd_mlx5_sq_wr *wr = cqe_wr(qp, cqe);
	uint32_t next_ci;

	if (ZD_UNLIKELY(!(wr->flags & ZD_MLX5_WR_EVENT))) {
		if ((wr_flags_again(wr) & ZD_MLX5_WR_IMM_EVENT) && zd_evd_direct_ok(evd))
			return cq_poll_one_imm(cq, evd, out, qp, wr, cqe);
		return cq_poll_one_req(cq, evd, out, qp, wr, cqe);
	}
	if (ZD_UNLIKELY(!zd_evd_direct_ok(evd)))
		return cq_poll_one_req(cq, evd, out, qp, wr, cqe);
	/* The event from @wr, then the retire: a poster may reuse @wr after. */
	next_ci = wr->next_ci;
	dto_fill_wr(out, evd, qp->ep, wr);
	/* As the ring hands events back (zd_ring.h: no extension events). */
	memset(out->event_extension_data, 0, sizeof(out->event_extension_data));
	zd_mlx5_cq_consume(&cq->q, cqe);
	zd_mlx5_sq_retire_to(&qp->sq, next_ci);
	pass_end(cq, 1);
	return DAT_SUCCESS;
}

/* A CQE at ci the tail compare did not take, in an open pass: a
 * successful requester CQE of a QP not cached (a QP's first, another QP's)
 * is looked up -- and cached -- then taken as a hit; anything else the
 * ordinary way.  The pass began without the fence a CQ without
 * membarrier needs (cq_qp_miss): here it is. */
static __attribute__((noinline)) DAT_RETURN cq_poll_one_miss(struct zd_mlx5_cq_obj *cq,
								struct zd_evd *evd, DAT_EVENT *out,
								struct mlx5_cqe64 *cqe)
{
	uint8_t op_own = MLX5_CQE_INVALID << 4;

	if (ZD_UNLIKELY(cq->fence))
		atomic_thread_fence(memory_order_seq_cst);
	/* Handed over (the owner bit), then read whole after the barrier. */
	if (zd_mlx5_cq_next_own(&cq->q, &op_own) == cqe && (op_own >> 4) == MLX5_CQE_REQ) {
		const uint64_t tail = zd_mlx5_cqe_tail(cqe);
		struct zd_mlx5_qp *qp = cq_qp(cq, zd_mlx5_cqe_tail_qpn(tail));

		if (qp && !((tail ^ zd_mlx5_cqe_req_want(qp->qpn)) & ZD_MLX5_CQE_REQ_MASK))
			return cq_poll_one_hit(cq, evd, out, cqe, qp, tail);
	}
	return cq_poll_one_slow(cq, evd, out);
}

static ZD_ALWAYS_INLINE DAT_RETURN cq_poll_one_(struct zd_evd *evd, DAT_EVENT *out,
					       bool ring_if_empty)
{
	struct zd_mlx5_cq_obj *cq = evd->cq_priv;
	struct mlx5_cqe64 *cqe;
	uint64_t tail;

	/* (An EVD has cq_poll_one only once its CQ exists: the dequeue
	 * entry's caller needs no test.) */
	if ((!ring_if_empty && ZD_UNLIKELY(!cq)) || cqe_none(cqe = zd_mlx5_cq_at(&cq->q, cq->q.ci)))
		return ring_if_empty ? zd_evd_ring_take(evd, out) : DAT_QUEUE_EMPTY;
	/* Without the fence a CQ without membarrier needs: such a CQ caches
	 * no QP, so its CQEs all go to cq_poll_one_miss, which fences. */
	pass_bump(cq);
	tail = zd_mlx5_cqe_tail(cqe);
	if (ZD_UNLIKELY(!cqe_tail_req_ok(cq, tail)))
		return cq_poll_one_miss(cq, evd, out, cqe);
	return cq_poll_one_hit(cq, evd, out, cqe, cq->q.last_qp, tail);
}

DAT_RETURN zd_mlx5_cq_poll_one(struct zd_evd *evd, DAT_EVENT *out)
{
	return cq_poll_one_(evd, out, false);
}

static ZD_ALWAYS_INLINE DAT_RETURN cq_poll_first(struct zd_evd *evd, DAT_EVENT *out)
{
	return cq_poll_one_(evd, out, true);
}

/* dat_evd_dequeue with the poll inlined (zd_device_ops.dat_entries):
 * every EVD of an IA of this device has zd_mlx5_cq_poll_one as its
 * cq_poll_one, or none. */
DAT_RETURN zd_mlx5_dat_evd_dequeue(DAT_EVD_HANDLE h, DAT_EVENT *event)
{
	return zd_evd_dequeue_entry(h, event, cq_poll_first);
}

void zd_mlx5_cq_arm_op(struct zd_evd *evd)
{
	struct zd_mlx5_cq_obj *cq = evd->cq_priv;

	if (!cq)
		return;
	if (ZD_UNLIKELY(!atomic_load_explicit(&cq->dev->waker_running, memory_order_acquire)))
		zd_mlx5_waker_start(cq->dev);
	zd_mlx5_cq_arm(&cq->q, false);
}
