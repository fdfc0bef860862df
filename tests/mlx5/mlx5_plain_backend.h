/*
 * A mlx5 backend whose queues, doorbell records and BlueFlame register are
 * plain memory: the test (or benchmark) including it plays the NIC, reading
 * WQEs from the_qp's send queue and writing CQEs into the_scq's buffer.
 * Shared by bench_mlx5_instr.c and test_mlx5_direct.c; before including,
 * define SQ_WQES (send queue blocks) and BF_SIZE (BlueFlame half).
 */
#ifndef MLX5_PLAIN_BACKEND_H
#define MLX5_PLAIN_BACKEND_H

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>

#include "hw/mlx5/zd_mlx5.h"

static void *zalloc64(size_t n)
{
	void *p = NULL;

	if (posix_memalign(&p, 64, n) != 0) {
		perror("posix_memalign");
		exit(1);
	}
	memset(p, 0, n);
	return p;
}

/* ---- the backend: queues in plain memory, the test is the NIC ---- */

struct bcq {
	uint8_t *buf;
	uint32_t cqe_cnt;
	uint32_t hw_pi;               /* the device's next CQE */
	__be32 dbrec[2];
	uint8_t uar[4096] __attribute__((aligned(64)));
};

struct bqp {
	uint8_t *sq, *rq, *bf;
	__be32 dbrec[2];
	uint32_t qpn;
	uint16_t hw_ci;               /* next WQEBB the device reads */
};

static struct bqp *the_qp;
static struct bcq *the_scq;

static DAT_RETURN b_open(const struct zd_ia_params *p, void **ctx, struct zd_mlx5_caps *caps,
			 struct sockaddr_in *addr)
{
	memset(caps, 0, sizeof(*caps));
	caps->max_qp_wr = SQ_WQES;
	caps->max_sge = 4;
	caps->max_inline = 64;
	addr->sin_family = AF_INET;
	addr->sin_addr.s_addr = htonl(0x7f000001);
	*ctx = NULL;
	return DAT_SUCCESS;
}

static void b_close(void *ctx)
{
}

static int b_event_wait(void *ctx, int ms)
{
	struct timespec ts = { 0, 1000000 };

	nanosleep(&ts, NULL);
	return 0;
}

static int b_event_get(void *ctx, void **cq_ctx)
{
	return 0;
}

static DAT_RETURN b_pd_alloc(void *ctx, void **pd)
{
	*pd = zalloc64(64);
	return DAT_SUCCESS;
}

static void b_pd_free(void *ctx, void *pd)
{
	free(pd);
}

static DAT_RETURN b_mr_reg(void *ctx, void *pd, uint64_t addr, uint64_t len,
			   DAT_MEM_PRIV_FLAGS priv, void **mr, uint32_t *lkey, uint32_t *rkey)
{
	static uint32_t key = 0x7000;

	*mr = zalloc64(64);
	*lkey = key++;
	*rkey = key++;
	return DAT_SUCCESS;
}

static void b_mr_dereg(void *ctx, void *mr)
{
	free(mr);
}

static DAT_RETURN b_cq_create(void *ctx, uint32_t min_cqe, void *cq_ctx, void **out,
			      struct zd_mlx5_cq_desc *d)
{
	struct bcq *c = zalloc64(sizeof(*c));
	uint32_t n = 4;

	while (n < min_cqe)
		n <<= 1;
	c->buf = zalloc64((size_t)n * 64);
	c->cqe_cnt = n;
	/* As created: every CQE invalid, owner 0. */
	for (uint32_t i = 0; i < n; i++)
		((struct mlx5_cqe64 *)(c->buf + (size_t)i * 64))->op_own = MLX5_CQE_INVALID << 4;
	*d = (struct zd_mlx5_cq_desc){ .buf = c->buf, .cqe_cnt = n, .cqe_size = 64,
		.dbrec = c->dbrec, .uar = c->uar, .cqn = 0x21 };
	*out = c;
	return DAT_SUCCESS;
}

static void b_cq_destroy(void *ctx, void *cq)
{
	struct bcq *c = cq;

	free(c->buf);
	free(c);
}

static DAT_RETURN b_qp_create(void *ctx, const struct zd_mlx5_qp_init *init, void **out,
			      struct zd_mlx5_sq_desc *sq, struct zd_mlx5_rq_desc *rq,
			      uint32_t *max_inline)
{
	static uint32_t qpn = 0x1c4;
	struct bqp *q = zalloc64(sizeof(*q));

	q->sq = zalloc64(SQ_WQES * 64);
	q->rq = zalloc64(SQ_WQES * 64);
	q->bf = zalloc64(2 * BF_SIZE);
	q->qpn = qpn++;
	*sq = (struct zd_mlx5_sq_desc){ .buf = q->sq, .wqe_cnt = SQ_WQES, .stride = 64,
		.dbrec = &q->dbrec[MLX5_SND_DBR], .bf_reg = q->bf, .bf_size = BF_SIZE,
		.qpn = q->qpn };
	*rq = (struct zd_mlx5_rq_desc){ .buf = q->rq, .wqe_cnt = SQ_WQES, .stride = 64,
		.dbrec = &q->dbrec[MLX5_RCV_DBR] };
	*max_inline = init->max_inline;
	*out = q;
	if (!the_qp)
		the_qp = q;
	if (!the_scq)
		the_scq = init->send_cq;
	return DAT_SUCCESS;
}

static size_t b_qp_blob(void *ctx, void *qp, void *blob, size_t max)
{
	memcpy(blob, &((struct bqp *)qp)->qpn, 4);
	return 4;
}

static DAT_RETURN b_qp_connect(void *ctx, void *qp, const void *peer, size_t len)
{
	return len == 4 ? DAT_SUCCESS : DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
}

static void b_qp_to_error(void *ctx, void *qp)
{
}

static void b_qp_destroy(void *ctx, void *qp)
{
	struct bqp *q = qp;

	free(q->sq);
	free(q->rq);
	free(q->bf);
	free(q);
}

static const struct zd_mlx5_backend plain_be = {
	.open = b_open, .close = b_close,
	.event_wait = b_event_wait, .event_get = b_event_get,
	.pd_alloc = b_pd_alloc, .pd_free = b_pd_free,
	.mr_reg = b_mr_reg, .mr_dereg = b_mr_dereg,
	.cq_create = b_cq_create, .cq_destroy = b_cq_destroy,
	.qp_create = b_qp_create, .qp_blob = b_qp_blob, .qp_connect = b_qp_connect,
	.qp_to_error = b_qp_to_error, .qp_destroy = b_qp_destroy,
};

/* Registers the backend as the mlx5 device @devname. */
#define MLX5_PLAIN_BACKEND_REGISTER(devname, adapter) \
	ZD_MLX5_BACKEND_REGISTER(plain_be, devname, adapter, 0, 0)

#endif
