/*
 * Queue descriptors of the mlx5 data path: what hw/mlx5 needs to drive a
 * QP, CQ or SRQ directly, and nothing more.
 *
 * On a ConnectX they are filled from mlx5dv_init_obj (struct mlx5dv_qp,
 * mlx5dv_cq, mlx5dv_srq); under the software mlx5 device (hw/mlx5/sim) they
 * point into memory the model watches.  The data path never learns which:
 * it writes WQEs in the formats of <infiniband/mlx5dv.h> into the buffers
 * below, rings the doorbell record and the BlueFlame register, and reads
 * CQEs by owner bit -- exactly as it would on silicon.
 *
 * Every field is in the units mlx5dv uses; byte order of the shared words
 * (doorbell records, WQEs, CQEs) is big-endian as the PRM defines it.
 */
#ifndef ZD_MLX5_QUEUE_H
#define ZD_MLX5_QUEUE_H

#include <stdint.h>
#include <infiniband/mlx5dv.h>

/* Offsets inside a CQ's doorbell record and UAR page (PRM; rdma-core keeps
 * these in its private mlx5 headers). */
#define ZD_MLX5_CQ_SET_CI      0      /* dbrec[0]: consumer index */
#define ZD_MLX5_CQ_ARM_DB      1      /* dbrec[1]: arm sequence | cmd | index */
#define ZD_MLX5_CQ_UAR_DB      MLX5_CQ_DOORBELL  /* 64-bit arm doorbell in the UAR */

/* Send queue of an RC QP (mlx5dv_qp.sq, .dbrec, .bf). */
struct zd_mlx5_sq_desc {
	void *buf;                  /* wqe_cnt basic blocks of MLX5_SEND_WQE_BB */
	uint32_t wqe_cnt;           /* power of two */
	uint32_t stride;            /* MLX5_SEND_WQE_BB */
	volatile __be32 *dbrec;     /* &qp dbrec[MLX5_SND_DBR] */
	void *bf_reg;               /* BlueFlame register (UAR); toggles by bf_size */
	uint32_t bf_size;           /* 0: no BlueFlame, 8-byte doorbells only */
	uint32_t qpn;
};

/* Receive queue of an RC QP without SRQ (mlx5dv_qp.rq). */
struct zd_mlx5_rq_desc {
	void *buf;                  /* wqe_cnt WQEs of stride bytes */
	uint32_t wqe_cnt;           /* power of two; 0: the QP uses an SRQ */
	uint32_t stride;            /* power of two, >= 16 (one data segment) */
	volatile __be32 *dbrec;     /* &qp dbrec[MLX5_RCV_DBR] */
};

/* Completion queue (mlx5dv_cq). */
struct zd_mlx5_cq_desc {
	void *buf;                  /* cqe_cnt CQEs of cqe_size bytes */
	uint32_t cqe_cnt;           /* power of two */
	uint32_t cqe_size;          /* 64 (struct mlx5_cqe64 at its end) */
	volatile __be32 *dbrec;     /* [ZD_MLX5_CQ_SET_CI], [ZD_MLX5_CQ_ARM_DB] */
	void *uar;                  /* arm doorbell at uar + ZD_MLX5_CQ_UAR_DB */
	uint32_t cqn;
};

/* Shared receive queue (mlx5dv_srq): a linked list of WQEs, each starting
 * with struct mlx5_wqe_srq_next_seg. */
struct zd_mlx5_srq_desc {
	void *buf;
	uint32_t wqe_cnt;           /* power of two */
	uint32_t stride;            /* bytes per WQE, power of two */
	volatile __be32 *dbrec;     /* dbrec[0]: wqe counter */
	uint32_t head, tail;        /* free list ends as created (mlx5dv_srq) */
	uint32_t srqn;
};

#endif /* ZD_MLX5_QUEUE_H */
