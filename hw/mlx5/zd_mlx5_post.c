/*
 * The DAT posts of the mlx5 device: one WQE straight into the SQ/RQ/SRQ
 * buffer and one doorbell per call (zd_mlx5_sq.h, zd_mlx5_rq.h).  Core
 * checked the handle, the EP state and the segment count; keys, bounds and
 * access are the device's to check (errors come back as error CQEs).
 *
 * Threads: one poster per EP (and per SRQ) at a time, as the DAT's
 * non-thread-safe registration promises.
 */
#include "core/zd_ep.h"
#include "core/zd_srq.h"
#include "hw/mlx5/zd_mlx5.h"

#define ZD_MLX5_SQ_FULL DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP)

/* Sum of the segment lengths; false above the device's message size. */
static ZD_ALWAYS_INLINE bool iov_total(const DAT_LMR_TRIPLET *iov, DAT_COUNT n, uint32_t max,
				       uint32_t *total)
{
	uint64_t t = 0;

	if (ZD_LIKELY(n == 1)) {
		*total = iov[0].segment_length;   /* DAT_SEG_LENGTH: 32 bits */
		return ZD_LIKELY(*total <= max);
	}
	for (DAT_COUNT i = 0; i < n; i++)
		t += iov[i].segment_length;
	*total = (uint32_t)t;
	return ZD_LIKELY(t <= max);
}

static ZD_ALWAYS_INLINE DAT_RETURN post_sq(struct zd_ep *ep, uint8_t opcode, DAT_DTOS op,
					   DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
					   DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
					   DAT_COMPLETION_FLAGS flags)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;
	struct zd_mlx5_wqe w;
	uint32_t total;

	if (ZD_UNLIKELY(!iov_total(iov, n, qp->max_msg, &total)))
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	w.opcode = opcode;
	w.fm_ce_se = zd_mlx5_fm_ce_se(flags, false, opcode == MLX5_OPCODE_SEND);
	w.imm = 0;
	w.remote = remote;
	w.swap_add = 0;
	w.compare = 0;
	/* Reads land in local memory: never inline. */
	w.inl = opcode != MLX5_OPCODE_RDMA_READ && total <= qp->sq.max_inline && n > 0;
	if (ZD_UNLIKELY(!zd_mlx5_sq_post(&qp->sq, &w, iov, (uint32_t)n, total, cookie, op,
					 zd_mlx5_wants_event(flags, qp->req_flags))))
		return ZD_MLX5_SQ_FULL;
	return DAT_SUCCESS;
}

DAT_RETURN zd_mlx5_post_send(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			     DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	return post_sq(ep, MLX5_OPCODE_SEND, DAT_DTO_SEND, n, iov, cookie, NULL, flags);
}

DAT_RETURN zd_mlx5_post_rdma_write(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				   DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				   DAT_COMPLETION_FLAGS flags)
{
	return post_sq(ep, MLX5_OPCODE_RDMA_WRITE, DAT_DTO_RDMA_WRITE, n, iov, cookie, remote,
		       flags);
}

DAT_RETURN zd_mlx5_post_rdma_read(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				  DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				  DAT_COMPLETION_FLAGS flags)
{
	return post_sq(ep, MLX5_OPCODE_RDMA_READ, DAT_DTO_RDMA_READ, n, iov, cookie, remote,
		       flags);
}

DAT_RETURN zd_mlx5_post_recv(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			     DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;

	if (ZD_UNLIKELY(!qp->rq.wqe_cnt))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE);
	if (ZD_UNLIKELY((uint32_t)n > qp->rq.max_sge))
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	if (ZD_UNLIKELY(!zd_mlx5_rq_post(&qp->rq, iov, (uint32_t)n, cookie)))
		return ZD_MLX5_SQ_FULL;
	return DAT_SUCCESS;
}

DAT_RETURN zd_mlx5_srq_post_recv(struct zd_srq *srq, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				 DAT_DTO_COOKIE cookie)
{
	struct zd_mlx5_srq_obj *s = srq->dev_priv;

	if (ZD_UNLIKELY((uint32_t)n > s->q.max_sge))
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	if (ZD_UNLIKELY(!zd_mlx5_srq_post(&s->q, iov, (uint32_t)n, cookie)))
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
	return DAT_SUCCESS;
}
