/*
 * QPs and SRQs of the mlx5 device: created through the backend, driven by
 * the data path through their descriptors, listed in the IA's qpn table so
 * CQEs find them.
 *
 * Reset: an EP gets a new QP (a new QPN) instead of RESET on the same one:
 * rdma-core does not clean CQs taken over with mlx5dv_init_obj, and the
 * device may still be writing flush CQEs of the old incarnation.  The old
 * QP stays listed under its QPN, so those CQEs still complete the DTOs
 * they name (DAT wants every outstanding DTO reported flushed), and is
 * destroyed once its queues are drained (at the next reset) or with the EP.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/zd_ia.h"
#include "core/zd_ep.h"
#include "core/zd_srq.h"
#include "evd/zd_dto_event.h"
#include "evd/zd_evd.h"
#include "hw/mlx5/zd_mlx5.h"

/* ---- qpn table ---- */

static inline uint32_t qpt_hi(uint32_t qpn)
{
	return (qpn >> ZD_MLX5_QPT_SHIFT) & (ZD_MLX5_QPT_ENTRIES - 1);
}

/* Lists @qp under its QPN: -EEXIST if one is listed there already. */
static int qpt_add(struct zd_mlx5_dev *dev, struct zd_mlx5_qp *qp)
{
	const uint32_t hi = qpt_hi(qp->qpn), lo = qp->qpn & (ZD_MLX5_QPT_ENTRIES - 1);
	struct zd_mlx5_qp **l2;
	int rc = 0;

	pthread_mutex_lock(&dev->lock);
	l2 = atomic_load(&dev->qpt[hi]);
	if (!l2) {
		l2 = calloc(ZD_MLX5_QPT_ENTRIES, sizeof(*l2));
		if (!l2) {
			rc = -ENOMEM;
			goto out;
		}
		/* release: pairs with the acquire in zd_mlx5_qp_lookup. */
		atomic_store_explicit(&dev->qpt[hi], l2, memory_order_release);
	}
	if (l2[lo]) {
		rc = -EEXIST;
		goto out;
	}
	__atomic_store_n(&l2[lo], qp, __ATOMIC_RELEASE);
	dev->qpt_used[hi]++;
out:
	pthread_mutex_unlock(&dev->lock);
	return rc;
}

/* Unlists @qp; returns its second-level table if that is empty now (and
 * unlinked): the caller frees it once no poller can be inside it. */
static struct zd_mlx5_qp **qpt_remove(struct zd_mlx5_dev *dev, struct zd_mlx5_qp *qp)
{
	const uint32_t hi = qpt_hi(qp->qpn);
	struct zd_mlx5_qp **l2, **empty = NULL;

	pthread_mutex_lock(&dev->lock);
	l2 = atomic_load(&dev->qpt[hi]);
	if (l2 && l2[qp->qpn & (ZD_MLX5_QPT_ENTRIES - 1)] == qp) {
		__atomic_store_n(&l2[qp->qpn & (ZD_MLX5_QPT_ENTRIES - 1)], NULL, __ATOMIC_RELEASE);
		if (--dev->qpt_used[hi] == 0) {
			atomic_store_explicit(&dev->qpt[hi], NULL, memory_order_release);
			empty = l2;
		}
	}
	pthread_mutex_unlock(&dev->lock);
	return empty;
}

/* ---- QP ---- */

static uint32_t clamp_u32(DAT_COUNT v, uint32_t min, uint32_t max)
{
	uint32_t u = v > 0 ? (uint32_t)v : 0;

	return u < min ? min : (u > max ? max : u);
}

/* Creates the backend QP and the data path state over it. */
static DAT_RETURN qp_build(struct zd_mlx5_qp *qp)
{
	struct zd_ep *ep = qp->ep;
	struct zd_mlx5_dev *dev = qp->dev;
	const struct zd_device_limits *l = &ep->obj.ia->limits;
	struct zd_mlx5_cq_obj *scq = ep->request_evd->cq_priv, *rcq = ep->recv_evd->cq_priv;
	struct zd_mlx5_qp_init init = { 0 };
	struct zd_mlx5_sq_desc sqd = { 0 };
	struct zd_mlx5_rq_desc rqd = { 0 };
	uint32_t max_inline = 0;
	DAT_COUNT send_sge = ZD_MAX(ep->attr.max_request_iov,
				    ZD_MAX(ep->attr.max_rdma_read_iov, ep->attr.max_rdma_write_iov));
	DAT_RETURN ret;

	init.pd = zd_mlx5_pd_of(dev, ep->pz);
	if (!init.pd)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	init.send_cq = scq->bcq;
	init.recv_cq = rcq->bcq;
	init.srq = qp->srq ? qp->srq->bsrq : NULL;
	init.max_send_wr = clamp_u32(ep->attr.max_request_dtos, 1, (uint32_t)l->max_dto_per_ep);
	init.max_recv_wr = qp->srq ? 0 : clamp_u32(ep->attr.max_recv_dtos, 1,
						   (uint32_t)l->max_dto_per_ep);
	init.max_send_sge = clamp_u32(send_sge, 1, (uint32_t)l->max_iov_segments);
	init.max_recv_sge = qp->srq ? 0 : clamp_u32(ep->attr.max_recv_iov, 1,
						    (uint32_t)l->max_iov_segments);
	init.max_inline = (uint32_t)l->max_inline;
	init.max_rd_atomic = clamp_u32(ZD_MAX(ep->attr.max_rdma_read_out, ep->attr.max_rdma_read_in),
				       1, (uint32_t)l->max_rdma_read_per_ep);
	init.ud = qp->ud;
	ret = dev->be->qp_create(dev->bctx, &init, &qp->bqp, &sqd, &rqd, &max_inline);
	if (ret != DAT_SUCCESS)
		return ret;
	if (zd_mlx5_sq_init(&qp->sq, &sqd, ZD_MIN(max_inline, init.max_inline)) != 0 ||
	    zd_mlx5_rq_init(&qp->rq, qp->srq ? &(struct zd_mlx5_rq_desc){ 0 } : &rqd) != 0) {
		ret = DAT_ERROR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
		goto err;
	}
	qp->qpn = sqd.qpn & 0xffffff;
	if (qpt_add(dev, qp) != 0) {
		ret = DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
		goto err;
	}
	atomic_store(&qp->flushed, 0);
	qp->atomic_be = dev->caps.atomic_reply_be;
	return DAT_SUCCESS;
err:
	zd_mlx5_sq_fini(&qp->sq);
	zd_mlx5_rq_fini(&qp->rq);
	dev->be->qp_destroy(dev->bctx, qp->bqp);
	qp->bqp = NULL;
	return ret;
}

/* An IB extension operation flushes as its DAT_IB_DTO_EVENT. */
static void flush_event(struct zd_evd *evd, struct zd_ep *ep, DAT_DTO_COOKIE cookie, DAT_DTOS op)
{
	DAT_EVENT ev;

	zd_dto_event_fill(&ev, evd, ep, cookie, DAT_DTO_ERR_FLUSHED, 0, op, 0);
	zd_evd_post(evd, &ev, 1);
}

/* The QP is gone (no CQE of it will be reaped): every DTO still
 * outstanding on its own queues is reported flushed, as DAT wants for an
 * EP freed with DTOs pending.  SRQ receives stay with the SRQ. */
static void qp_flush_outstanding(struct zd_mlx5_qp *qp)
{
	struct zd_ep *ep = qp->ep;
	DAT_DTOS recv_op = qp->ud ? (DAT_DTOS)DAT_IB_DTO_RECV_UD : DAT_DTO_RECEIVE;
	uint32_t pos;

	if (!ep)
		return;
	for (pos = atomic_load(&qp->sq.ci); qp->sq.wr && pos != qp->sq.pi;) {
		const struct zd_mlx5_sq_wr *wr = &qp->sq.wr[pos & qp->sq.mask];

		flush_event(ep->request_evd, ep, wr->cookie, (DAT_DTOS)wr->op);
		pos += wr->nbb ? wr->nbb : 1;
	}
	for (pos = atomic_load(&qp->rq.tail); qp->rq.cookie && pos != qp->rq.head; pos++)
		flush_event(ep->recv_evd, ep, qp->rq.cookie[pos & qp->rq.mask], recv_op);
}

/* Unlists the QP, waits out pollers, destroys the backend QP. */
static void qp_unbuild(struct zd_mlx5_qp *qp)
{
	struct zd_mlx5_dev *dev = qp->dev;
	struct zd_mlx5_qp **l2_empty;

	if (!qp->bqp)
		return;
	l2_empty = qpt_remove(dev, qp);
	/* No poller still inside a pass that found it (zd_mlx5.h), or its
	 * table. */
	zd_mlx5_sync_pollers(dev);
	free(l2_empty);
	/* A pass that found it listed may have cached it (zd_mlx5_cq.c);
	 * none can now: drop it, then wait out passes that used the cache. */
	zd_mlx5_cq_forget_qp(dev, qp);
	zd_mlx5_sync_pollers(dev);
	dev->be->qp_destroy(dev->bctx, qp->bqp);
	qp->bqp = NULL;
	qp_flush_outstanding(qp);
	zd_mlx5_sq_fini(&qp->sq);
	zd_mlx5_rq_fini(&qp->rq);
}

DAT_RETURN zd_mlx5_qp_create(struct zd_ep *ep)
{
	struct zd_mlx5_dev *dev = ep->obj.ia->dev_priv;
	struct zd_mlx5_qp *qp;
	DAT_RETURN ret;

	/* The backend QP needs both CQs (and a UD QP, a backend that does UD). */
	if (!ep->request_evd || !ep->recv_evd || !ep->request_evd->cq_priv ||
	    !ep->recv_evd->cq_priv || (zd_ep_is_ud(ep) && !ep->obj.ia->limits.max_ud_payload))
		return DAT_ERROR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE);
	if (posix_memalign((void **)&qp, ZD_CACHE_LINE, sizeof(*qp)) != 0)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	memset(qp, 0, sizeof(*qp));
	qp->ep = ep;
	qp->dev = dev;
	qp->ud = zd_ep_is_ud(ep);
	qp->srq = ep->srq ? ep->srq->dev_priv : NULL;
	qp->req_flags = ep->attr.request_completion_flags;
	qp->max_msg = (uint32_t)ep->obj.ia->limits.max_message_size;
	ret = qp_build(qp);
	if (ret != DAT_SUCCESS) {
		free(qp);
		return ret;
	}
	ep->dev_priv = qp;
	zd_ep_dto_refresh(ep);
	return DAT_SUCCESS;
}

size_t zd_mlx5_qp_local_blob(struct zd_ep *ep, void *blob, size_t max)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;

	if (!qp || !qp->bqp)
		return 0;
	return qp->dev->be->qp_blob(qp->dev->bctx, qp->bqp, blob, max);
}

DAT_RETURN zd_mlx5_qp_connect(struct zd_ep *ep, const void *peer_blob, size_t len)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;

	if (!qp || !qp->bqp || !peer_blob)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	/* The EP's attributes may have changed since create (dat_ep_modify). */
	qp->req_flags = ep->attr.request_completion_flags;
	return qp->dev->be->qp_connect(qp->dev->bctx, qp->bqp, peer_blob, len);
}

void zd_mlx5_qp_flush(struct zd_ep *ep)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;

	if (!qp || !qp->bqp)
		return;
	qp->dev->be->qp_to_error(qp->dev->bctx, qp->bqp);
	/* As the other devices: an SRQ consumer learns that no more receives
	 * will be taken for this EP (IB's "last WQE reached"). */
	if (!atomic_exchange(&qp->flushed, 1) && qp->srq)
		zd_ia_post_async(&ep->obj, DAT_ASYNC_ERROR_EP_BROKEN);
	/* Flush CQEs are the device's; wake a sleeping consumer to poll. */
	zd_evd_wake(ep->request_evd);
	if (ep->recv_evd != ep->request_evd)
		zd_evd_wake(ep->recv_evd);
}

/* Every completion of @qp's queues was reaped (SRQ receives aside: the
 * SRQ's WQEs are shared and freed through it). */
static bool qp_drained(struct zd_mlx5_qp *qp)
{
	return atomic_load(&qp->sq.ci) == qp->sq.pi &&
	       atomic_load(&qp->rq.tail) == qp->rq.head;
}

static void qp_free(struct zd_mlx5_qp *qp)
{
	qp_unbuild(qp);
	free(qp);
}

DAT_RETURN zd_mlx5_qp_reset(struct zd_ep *ep)
{
	struct zd_mlx5_qp *old = ep->dev_priv, *qp, **pp;
	DAT_RETURN ret;

	if (!old)
		return DAT_SUCCESS;
	if (posix_memalign((void **)&qp, ZD_CACHE_LINE, sizeof(*qp)) != 0)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	memset(qp, 0, sizeof(*qp));
	qp->ep = ep;
	qp->dev = old->dev;
	qp->ud = old->ud;
	qp->srq = old->srq;
	qp->req_flags = ep->attr.request_completion_flags;
	qp->max_msg = old->max_msg;
	ret = qp_build(qp);
	if (ret != DAT_SUCCESS) {
		free(qp);
		return ret;
	}
	/* The old QP to error (no-op if flushed): its WQEs all complete. */
	old->dev->be->qp_to_error(old->dev->bctx, old->bqp);
	qp->older = old;
	/* Incarnations whose completions were all reaped go now. */
	for (pp = &qp->older; *pp;) {
		struct zd_mlx5_qp *z = *pp;

		if (qp_drained(z)) {
			*pp = z->older;
			qp_free(z);
		} else {
			pp = &z->older;
		}
	}
	ep->dev_priv = qp;
	zd_ep_dto_refresh(ep);
	return DAT_SUCCESS;
}

void zd_mlx5_qp_destroy(struct zd_ep *ep)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;

	while (qp) {
		struct zd_mlx5_qp *older = qp->older;

		qp_free(qp);
		qp = older;
	}
	ep->dev_priv = NULL;
	zd_ep_dto_refresh(ep);
}

/* ---- SRQ ---- */

DAT_RETURN zd_mlx5_srq_create(struct zd_srq *srq)
{
	struct zd_mlx5_dev *dev = srq->obj.ia->dev_priv;
	struct zd_mlx5_srq_desc d = { 0 };
	struct zd_mlx5_srq_obj *s;
	void *bpd = zd_mlx5_pd_of(dev, srq->pz);
	DAT_RETURN ret;

	if (!bpd)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	if (posix_memalign((void **)&s, ZD_CACHE_LINE, sizeof(*s)) != 0)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	memset(s, 0, sizeof(*s));
	s->dev = dev;
	s->srq = srq;
	ret = dev->be->srq_create(dev->bctx, bpd, (uint32_t)srq->max_recv_dtos,
				  (uint32_t)srq->max_recv_iov, &s->bsrq, &d);
	if (ret != DAT_SUCCESS) {
		free(s);
		return ret;
	}
	if (zd_mlx5_srq_init(&s->q, &d) != 0) {
		dev->be->srq_destroy(dev->bctx, s->bsrq);
		free(s);
		return DAT_ERROR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
	}
	srq->dev_priv = s;
	return DAT_SUCCESS;
}

DAT_RETURN zd_mlx5_srq_resize(struct zd_srq *srq, uint32_t depth)
{
	struct zd_mlx5_srq_obj *s = srq->dev_priv;

	/* The SRQ holds wqe_cnt - 1 receives (one WQE ends the free list). */
	if (s && depth > s->q.wqe_cnt - 1)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
	return DAT_SUCCESS;
}

void zd_mlx5_srq_destroy(struct zd_srq *srq)
{
	struct zd_mlx5_srq_obj *s = srq->dev_priv;

	if (!s)
		return;
	s->dev->be->srq_destroy(s->dev->bctx, s->bsrq);
	zd_mlx5_srq_fini(&s->q);
	free(s);
	srq->dev_priv = NULL;
}

/*
 * Receive buffer counts (core/zd_device.h rq_counts).  An EP's own RQ:
 * posted and not yet completed.  From an SRQ the NIC does not say which
 * EP took a buffer, or when, until it completes: the EP's count, and the
 * SRQ's buffers not yet taken, stay unknown; the SRQ's entries occupied
 * (posted and not completed) are known.  Snapshots: the poster's counters
 * are read racily.
 */
void zd_mlx5_rq_counts(struct zd_ep *ep, struct zd_srq *srq, DAT_COUNT *avail, DAT_COUNT *held)
{
	(void)avail;
	if (ep) {
		struct zd_mlx5_qp *qp = ep->dev_priv;

		if (qp && !qp->srq) {
			/* completions first: they never pass the posts */
			uint32_t done = atomic_load_explicit(&qp->rq.tail, memory_order_acquire);

			*held = (DAT_COUNT)(__atomic_load_n(&qp->rq.head, __ATOMIC_RELAXED) - done);
		}
		return;
	}
	struct zd_mlx5_srq_obj *s = srq->dev_priv;

	if (s) {
		/* completions first: they never pass the posts */
		uint32_t done = atomic_load_explicit(&s->q.free_tail, memory_order_acquire);

		*held = (DAT_COUNT)(__atomic_load_n(&s->q.counter, __ATOMIC_RELAXED) - done);
	}
}
