/*
 * Setting up the data path's queue state from the plain descriptors of
 * zd_mlx5_queue.h (filled by a backend from mlx5dv or the software model).
 * Control path: allocation, checks of the geometry.
 */
#include <errno.h>
#include <stdlib.h>

#include "hw/mlx5/zd_mlx5_cq.h"
#include "hw/mlx5/zd_mlx5_rq.h"
#include "hw/mlx5/zd_mlx5_sq.h"

static bool pow2(uint32_t v)
{
	return v && !(v & (v - 1));
}

int zd_mlx5_sq_init(struct zd_mlx5_sq *sq, const struct zd_mlx5_sq_desc *d, uint32_t max_inline)
{
	memset(sq, 0, sizeof(*sq));
	if (!d->buf || !pow2(d->wqe_cnt) || d->wqe_cnt > (1u << 15) ||
	    (d->stride && d->stride != MLX5_SEND_WQE_BB) || !d->dbrec || !d->bf_reg ||
	    (d->bf_size && (d->bf_size % MLX5_SEND_WQE_BB)))
		return -EINVAL;
	sq->wr = calloc(d->wqe_cnt, sizeof(*sq->wr));
	if (!sq->wr)
		return -ENOMEM;
	sq->buf = d->buf;
	sq->end = sq->buf + (size_t)d->wqe_cnt * MLX5_SEND_WQE_BB;
	sq->wqe_cnt = d->wqe_cnt;
	sq->mask = d->wqe_cnt - 1;
	sq->qpn8 = (d->qpn & 0xffffff) << 8;
	zd_mlx5_sq_set_heads(sq);
	sq->dbrec = d->dbrec;
	sq->bf_reg = d->bf_reg;
	sq->bf_size = d->bf_size;
	sq->bf_cur = d->bf_reg;
	sq->bf_flip = (uintptr_t)d->bf_reg ^ (uintptr_t)((uint8_t *)d->bf_reg + d->bf_size);
	sq->max_inline = max_inline;
	/* The one-block path rings with its BlueFlame copy (doorbell1). */
	sq->inl1_rdma = d->bf_size ? ZD_MIN(max_inline, ZD_MLX5_INL1_MAX_RDMA) : 0;
	sq->inl1_send = d->bf_size ? ZD_MIN(max_inline, ZD_MLX5_INL1_MAX_SEND) : 0;
	/* Half the ring unsignaled at most: a CQE then frees the rest. */
	sq->unsig_max = d->wqe_cnt / 2 ? d->wqe_cnt / 2 : 1;
	atomic_init(&sq->ci, 0);
	return 0;
}

void zd_mlx5_sq_fini(struct zd_mlx5_sq *sq)
{
	free(sq->wr);
	sq->wr = NULL;
}

int zd_mlx5_rq_init(struct zd_mlx5_rq *rq, const struct zd_mlx5_rq_desc *d)
{
	memset(rq, 0, sizeof(*rq));
	if (!d->wqe_cnt)
		return 0;  /* the QP receives through an SRQ */
	if (!d->buf || !pow2(d->wqe_cnt) || !pow2(d->stride) || d->stride < 16 || !d->dbrec)
		return -EINVAL;
	rq->cookie = calloc(d->wqe_cnt, sizeof(*rq->cookie));
	if (!rq->cookie)
		return -ENOMEM;
	rq->buf = d->buf;
	rq->wqe_cnt = d->wqe_cnt;
	rq->mask = d->wqe_cnt - 1;
	rq->stride = d->stride;
	rq->max_sge = d->stride / sizeof(struct mlx5_wqe_data_seg);
	rq->dbrec = d->dbrec;
	atomic_init(&rq->tail, 0);
	return 0;
}

void zd_mlx5_rq_fini(struct zd_mlx5_rq *rq)
{
	free(rq->cookie);
	rq->cookie = NULL;
}

int zd_mlx5_srq_init(struct zd_mlx5_srq *srq, const struct zd_mlx5_srq_desc *d)
{
	memset(srq, 0, sizeof(*srq));
	if (!d->buf || !pow2(d->wqe_cnt) || d->wqe_cnt < 2 || d->wqe_cnt > (1u << 16) ||
	    !pow2(d->stride) || d->stride < 32 || !d->dbrec ||
	    d->head >= d->wqe_cnt || d->tail >= d->wqe_cnt)
		return -EINVAL;
	srq->cookie = calloc(d->wqe_cnt, sizeof(*srq->cookie));
	srq->fring = calloc(d->wqe_cnt, sizeof(*srq->fring));
	if (!srq->cookie || !srq->fring) {
		zd_mlx5_srq_fini(srq);
		return -ENOMEM;
	}
	srq->buf = d->buf;
	srq->wqe_cnt = d->wqe_cnt;
	srq->mask = d->wqe_cnt - 1;
	srq->stride = d->stride;
	srq->max_sge = (d->stride - sizeof(struct mlx5_wqe_srq_next_seg)) /
		       sizeof(struct mlx5_wqe_data_seg);
	srq->head = d->head;
	srq->tail = d->tail;
	srq->dbrec = d->dbrec;
	atomic_init(&srq->free_tail, 0);
	return 0;
}

void zd_mlx5_srq_fini(struct zd_mlx5_srq *srq)
{
	free(srq->cookie);
	free(srq->fring);
	srq->cookie = NULL;
	srq->fring = NULL;
}

int zd_mlx5_cq_init(struct zd_mlx5_cq *cq, const struct zd_mlx5_cq_desc *d)
{
	memset(cq, 0, sizeof(*cq));
	if (!d->buf || !pow2(d->cqe_cnt) || !pow2(d->cqe_size) || d->cqe_size < 64 ||
	    !d->dbrec || !d->uar)
		return -EINVAL;
	cq->buf = d->buf;
	cq->cqe_cnt = d->cqe_cnt;
	cq->mask = d->cqe_cnt - 1;
	cq->cqe_shift = (uint32_t)__builtin_ctz(d->cqe_size);
	cq->cqe64_off = d->cqe_size - 64;
	cq->cqe64 = cq->buf + cq->cqe64_off;
	cq->cqn = d->cqn;
	cq->dbrec = d->dbrec;
	cq->uar = d->uar;
	atomic_init(&cq->arm_sn, 0);
	atomic_init(&cq->req_want, ZD_MLX5_CQE_REQ_NONE);
	return 0;
}
