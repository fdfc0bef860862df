/*
 * CQs of the mlx5 device, one per DTO EVD: creation through the backend,
 * and the data path's poll (CQEs straight into DAT events in the EVD
 * ring) and arm (zdapl writes the arm doorbell; never ibv_req_notify_cq).
 */
#include <stdlib.h>

#include "core/zd_ia.h"
#include "core/zd_ep.h"
#include "evd/zd_evd.h"
#include "hw/mlx5/zd_mlx5.h"

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
	/* Room beyond the EVD's events: CQEs that only free the SQ
	 * (moderation of suppressed DTOs) and completions waiting for room in
	 * a full EVD must never overrun the CQ. */
	ret = dev->be->cq_create(dev->bctx, depth < (1u << 30) ? 2 * depth + 16 : depth, cq,
				 &cq->bcq, &d);
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

static ZD_ALWAYS_INLINE void dto_event(struct zd_evd *evd, struct zd_ep *ep, DAT_DTO_COOKIE cookie,
				       DAT_DTO_COMPLETION_STATUS st, uint32_t len, DAT_DTOS op,
				       bool solicited)
{
	DAT_EVENT ev;

	ev.event_number = DAT_DTO_COMPLETION_EVENT;
	zd_evd_ev_set_solicited(&ev, solicited);
	ev.evd_handle = evd;
	ev.event_data.dto_completion_event_data.ep_handle = ep;
	ev.event_data.dto_completion_event_data.user_cookie = cookie;
	ev.event_data.dto_completion_event_data.status = st;
	ev.event_data.dto_completion_event_data.transfered_length = st == DAT_DTO_SUCCESS ? len : 0;
	ev.event_data.dto_completion_event_data.operation = op;
	ev.event_data.dto_completion_event_data.rmr_context = 0;
	/* cq_poll's budget is the room in the ring: this cannot fail. */
	zd_ring_enqueue(evd->ring, &ev);
}

/* One CQE -> 0 or 1 DAT events. */
static ZD_ALWAYS_INLINE int cqe_handle(struct zd_mlx5_cq_obj *cq, struct mlx5_cqe64 *cqe)
{
	struct zd_mlx5_cqe_info ci;
	struct zd_mlx5_qp *qp;
	DAT_DTO_COMPLETION_STATUS st;
	DAT_DTO_COOKIE cookie;

	zd_mlx5_cqe_parse(cqe, &ci);
	qp = zd_mlx5_qp_lookup(cq->dev, ci.qpn);
	if (ZD_UNLIKELY(!qp))
		return 0;  /* a QP destroyed (or reset) since: drop */
	st = ZD_UNLIKELY(ci.error) ? zd_mlx5_syndrome_status(ci.syndrome) : DAT_DTO_SUCCESS;
	if (ci.requester) {
		struct zd_mlx5_sq_wr *wr = zd_mlx5_sq_retire(&qp->sq, ci.wqe_counter);

		if (ZD_LIKELY(st == DAT_DTO_SUCCESS) && !(wr->flags & ZD_MLX5_WR_EVENT))
			return 0;  /* suppressed, or signaled only to free the SQ */
		dto_event(cq->evd, qp->ep, wr->cookie, st, wr->len, (DAT_DTOS)wr->op, false);
		return 1;
	}
	switch (ci.opcode) {
	case MLX5_CQE_RESP_SEND:
	case MLX5_CQE_RESP_SEND_IMM:
	case MLX5_CQE_RESP_SEND_INV:
	case MLX5_CQE_RESP_WR_IMM:
	case MLX5_CQE_RESP_ERR:
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
	dto_event(cq->evd, qp->ep, cookie, st, ci.byte_cnt, DAT_DTO_RECEIVE,
		  mlx5dv_get_cqe_se(cqe));
	return 1;
}

int zd_mlx5_cq_poll(struct zd_evd *evd, int budget)
{
	struct zd_mlx5_cq_obj *cq = evd->cq_priv;
	struct mlx5_cqe64 *cqe;
	uint32_t pass;
	int n = 0;

	if (ZD_UNLIKELY(!cq || budget <= 0) || !(cqe = zd_mlx5_cq_next(&cq->q)))
		return 0;
	/* A counted pass: QPs looked up in it stay allocated until it ends
	 * (zd_mlx5_sync_pollers). */
	pass = atomic_load_explicit(&cq->pass, memory_order_relaxed);
	atomic_store_explicit(&cq->pass, pass + 1, memory_order_relaxed);
	/* The odd count is visible before the table is read: pairs with the
	 * membarrier (or fence) in zd_mlx5_sync_pollers. */
	if (ZD_UNLIKELY(cq->fence))
		atomic_thread_fence(memory_order_seq_cst);
	else
		atomic_signal_fence(memory_order_seq_cst);
	do {
		cq->q.ci++;
		n += cqe_handle(cq, cqe);
	} while (n < budget && (cqe = zd_mlx5_cq_next(&cq->q)) != NULL);
	/* release: our reads of QPs are done before the destroyer sees the
	 * pass end. */
	atomic_store_explicit(&cq->pass, pass + 2, memory_order_release);
	zd_mlx5_cq_update_ci(&cq->q);
	return n;
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
