/*
 * Receive queues of the mlx5 data path: the RQ of a QP and the SRQ.
 *
 * RQ: a ring of wqe_cnt WQEs of stride bytes, each a list of data
 * segments ended by one with lkey MLX5_INVALID_LKEY when it holds fewer
 * than stride/16.  The device consumes them in order, so a receive CQE
 * completes the WQE at tail; the doorbell record holds head (16 bits).
 *
 * SRQ: WQEs linked by struct mlx5_wqe_srq_next_seg.  Free WQEs run from
 * head to tail; the poster fills head and moves head to its link; the
 * device takes posted WQEs in order but they complete in any order (each
 * QP drains its own share), so a completed WQE (the CQE's wqe_counter is
 * its index) is linked back after tail.  The tail WQE itself is never
 * posted (head == tail: full), which keeps the link the device may be
 * reading valid.  The doorbell record holds the count of posted WQEs.
 *
 * Relinking is done by the poster: completions on any CQ (several CQs may
 * feed one SRQ) hand the freed index over through a small MPSC ring, and
 * the next srq post links them after tail in completion order.  So the
 * links are only ever written by one thread, without locks.
 */
#ifndef ZD_MLX5_RQ_H
#define ZD_MLX5_RQ_H

#include <endian.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <dat2/udat.h>

#include "core/zd_compiler.h"
#include "hw/mlx5/zd_mlx5_barrier.h"
#include "hw/mlx5/zd_mlx5_queue.h"

struct zd_mlx5_rq {
	/* poster */
	uint8_t *buf;
	uint32_t wqe_cnt;
	uint32_t mask;
	uint32_t stride;
	uint32_t max_sge;             /* stride / 16 */
	uint32_t head;                /* next WQE to post (free-running) */
	volatile __be32 *dbrec;
	DAT_DTO_COOKIE *cookie;
	/* poller */
	alignas(ZD_CACHE_LINE) _Atomic uint32_t tail;   /* next WQE to complete */
};

/* One freed SRQ WQE index on its way back to the poster. */
struct zd_mlx5_srq_free {
	_Atomic uint32_t seq;         /* position + 1 once published */
	uint32_t idx;
};

struct zd_mlx5_srq {
	/* poster */
	uint8_t *buf;
	uint32_t wqe_cnt;
	uint32_t mask;
	uint32_t stride;
	uint32_t max_sge;             /* (stride - 16) / 16 */
	uint32_t head, tail;          /* free list ends */
	uint32_t counter;             /* WQEs posted (doorbell record) */
	uint32_t free_head;           /* next position of fring to take */
	volatile __be32 *dbrec;
	DAT_DTO_COOKIE *cookie;       /* by WQE index */
	struct zd_mlx5_srq_free *fring;  /* wqe_cnt entries */
	/* pollers */
	alignas(ZD_CACHE_LINE) _Atomic uint32_t free_tail;
};

/* zd_mlx5_queue.c */
int zd_mlx5_rq_init(struct zd_mlx5_rq *rq, const struct zd_mlx5_rq_desc *d);
void zd_mlx5_rq_fini(struct zd_mlx5_rq *rq);
int zd_mlx5_srq_init(struct zd_mlx5_srq *srq, const struct zd_mlx5_srq_desc *d);
void zd_mlx5_srq_fini(struct zd_mlx5_srq *srq);

/* Writes the data segments of a receive at @dseg (room for @max), with
 * the invalid-lkey terminator when fewer; zero-length segments skipped. */
static ZD_ALWAYS_INLINE void zd_mlx5_recv_segs(struct mlx5_wqe_data_seg *dseg, uint32_t max,
					       const DAT_LMR_TRIPLET *iov, uint32_t n)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (ZD_UNLIKELY(!iov[i].segment_length))
			continue;
		dseg[k].byte_count = htobe32((uint32_t)iov[i].segment_length);
		dseg[k].lkey = htobe32(iov[i].lmr_context);
		dseg[k].addr = htobe64(iov[i].virtual_address);
		k++;
	}
	if (k < max) {
		dseg[k].byte_count = 0;
		dseg[k].lkey = htobe32(MLX5_INVALID_LKEY);
		dseg[k].addr = 0;
	}
}

/* Posts one receive; false when the RQ is full or @n exceeds its WQE. */
static ZD_ALWAYS_INLINE bool zd_mlx5_rq_post(struct zd_mlx5_rq *rq, const DAT_LMR_TRIPLET *iov,
					     uint32_t n, DAT_DTO_COOKIE cookie)
{
	uint32_t head = rq->head;

	/* acquire: pairs with the release of tail in zd_mlx5_rq_complete. */
	if (ZD_UNLIKELY(head - atomic_load_explicit(&rq->tail, memory_order_acquire) >= rq->wqe_cnt ||
			n > rq->max_sge))
		return false;
	zd_mlx5_recv_segs((void *)(rq->buf + (size_t)(head & rq->mask) * rq->stride),
			  rq->max_sge, iov, n);
	rq->cookie[head & rq->mask] = cookie;
	rq->head = ++head;
	/* WQE stores before the doorbell record. */
	zd_udma_to_device_barrier();
	zd_dev_store(rq->dbrec, htobe32(head & 0xffff));
	return true;
}

/* Poller: the receive at tail completed; its cookie. */
static ZD_ALWAYS_INLINE DAT_DTO_COOKIE zd_mlx5_rq_complete(struct zd_mlx5_rq *rq)
{
	uint32_t tail = atomic_load_explicit(&rq->tail, memory_order_relaxed);
	DAT_DTO_COOKIE c = rq->cookie[tail & rq->mask];

	/* release: the cookie is read before the slot can be reposted. */
	atomic_store_explicit(&rq->tail, tail + 1, memory_order_release);
	return c;
}

static ZD_ALWAYS_INLINE struct mlx5_wqe_srq_next_seg *zd_mlx5_srq_wqe(const struct zd_mlx5_srq *srq,
								       uint32_t idx)
{
	return (void *)(srq->buf + (size_t)(idx & srq->mask) * srq->stride);
}

/* Poller (any CQ): WQE @idx completed; hands it back to the poster. */
static ZD_ALWAYS_INLINE DAT_DTO_COOKIE zd_mlx5_srq_complete(struct zd_mlx5_srq *srq, uint16_t idx)
{
	DAT_DTO_COOKIE c = srq->cookie[idx & srq->mask];
	uint32_t pos = atomic_fetch_add_explicit(&srq->free_tail, 1, memory_order_relaxed);
	struct zd_mlx5_srq_free *f = &srq->fring[pos & srq->mask];

	f->idx = idx & srq->mask;
	/* release: pairs with the acquire in zd_mlx5_srq_relink: idx (and our
	 * read of the cookie) before the poster reuses the WQE. */
	atomic_store_explicit(&f->seq, pos + 1, memory_order_release);
	return c;
}

/* Poster: links the WQEs completed since the last post after tail, in
 * the order they completed. */
static ZD_ALWAYS_INLINE void zd_mlx5_srq_relink(struct zd_mlx5_srq *srq)
{
	for (;;) {
		struct zd_mlx5_srq_free *f = &srq->fring[srq->free_head & srq->mask];

		if (atomic_load_explicit(&f->seq, memory_order_acquire) != srq->free_head + 1)
			return;
		zd_mlx5_srq_wqe(srq, srq->tail)->next_wqe_index = htobe16((uint16_t)f->idx);
		srq->tail = f->idx;
		srq->free_head++;
	}
}

/* Posts one receive on the SRQ; false when no WQE is free or @n exceeds
 * one WQE. */
static ZD_ALWAYS_INLINE bool zd_mlx5_srq_post(struct zd_mlx5_srq *srq, const DAT_LMR_TRIPLET *iov,
					      uint32_t n, DAT_DTO_COOKIE cookie)
{
	struct mlx5_wqe_srq_next_seg *next;
	uint32_t idx;

	zd_mlx5_srq_relink(srq);
	if (ZD_UNLIKELY(srq->head == srq->tail || n > srq->max_sge))
		return false;
	idx = srq->head;
	next = zd_mlx5_srq_wqe(srq, idx);
	zd_mlx5_recv_segs((struct mlx5_wqe_data_seg *)(next + 1), srq->max_sge, iov, n);
	srq->cookie[idx] = cookie;
	srq->head = be16toh(next->next_wqe_index) & srq->mask;
	srq->counter++;
	/* WQE stores before the doorbell record. */
	zd_udma_to_device_barrier();
	zd_dev_store(srq->dbrec, htobe32(srq->counter & 0xffff));
	return true;
}

#endif /* ZD_MLX5_RQ_H */
