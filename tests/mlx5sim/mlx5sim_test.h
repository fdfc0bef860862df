/*
 * A tiny test-side mlx5 driver for the software mlx5 device: WQEs built
 * with <infiniband/mlx5dv.h>'s own helpers into the SQ (64-byte basic
 * blocks, wraparound), doorbell record then BlueFlame copy or 8-byte
 * doorbell, receive and SRQ WQEs, CQEs read by owner bit.  It knows the
 * PRM formats only, never the model's internals.
 */
#ifndef MLX5SIM_TEST_H
#define MLX5SIM_TEST_H

#include <criterion/criterion.h>
#include <endian.h>
#include <errno.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hw/mlx5/sim/zd_mlx5sim.h"

#define T_ACC_ALL (ZD_MLX5SIM_ACCESS_LOCAL_WRITE | ZD_MLX5SIM_ACCESS_REMOTE_WRITE | \
		   ZD_MLX5SIM_ACCESS_REMOTE_READ | ZD_MLX5SIM_ACCESS_REMOTE_ATOMIC)

struct t_cq {
	struct zd_mlx5_cq_desc d;
	uint32_t ci;
	uint32_t arm_sn;
};

struct t_qp {
	struct zd_mlx5_sq_desc sq;
	struct zd_mlx5_rq_desc rq;
	uint32_t qpn;
	uint32_t pi;          /* SQ producer, basic blocks */
	uint32_t rq_head;
	uint32_t bf_off;
};

struct t_srq {
	struct zd_mlx5_srq_desc d;
	uint16_t counter;
};

/* A WQE under construction, linear; t_post copies it into the SQ. */
struct t_wqe {
	uint8_t b[1024];
	uint32_t size;        /* bytes, multiple of 16 */
};

/* How t_post rings. */
enum t_ring { T_BF, T_DB8, T_NONE };

static inline uint64_t t_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void t_cq_make(struct zd_mlx5sim_nic *n, uint32_t cnt, struct t_cq *cq)
{
	memset(cq, 0, sizeof(*cq));
	cr_assert_eq(zd_mlx5sim_cq_create(n, cnt, cq, &cq->d), 0);
	cr_assert_eq(cq->d.cqe_size, 64);
}

/* One end of a two-NIC test: a NIC with a PD and a send and a receive
 * CQ of 4 CQEs. */
static inline void t_end_open(struct zd_mlx5sim_nic **n, uint32_t *pd, struct t_cq *scq,
			      struct t_cq *rcq)
{
	cr_assert_eq(zd_mlx5sim_nic_open(NULL, n), 0);
	cr_assert_eq(zd_mlx5sim_pd_alloc(*n, pd), 0);
	t_cq_make(*n, 4, scq);
	t_cq_make(*n, 4, rcq);
}

static inline void t_qp_make(struct zd_mlx5sim_nic *n, uint32_t pdn, struct t_cq *scq,
			     struct t_cq *rcq, uint32_t srqn, uint32_t sq_cnt, uint32_t rq_cnt,
			     struct t_qp *qp)
{
	struct zd_mlx5sim_qp_attr a = {
		.pdn = pdn, .send_cqn = scq->d.cqn, .recv_cqn = rcq->d.cqn, .srqn = srqn,
		.sq_wqe_cnt = sq_cnt, .rq_wqe_cnt = rq_cnt, .rq_max_sge = 2,
	};

	memset(qp, 0, sizeof(*qp));
	cr_assert_eq(zd_mlx5sim_qp_create(n, &a, &qp->sq, &qp->rq, &qp->qpn), 0);
	cr_assert_eq(qp->sq.qpn, qp->qpn);
}

/* The device watches a peer through pidfd_open (Linux 5.3; its region
 * comes over a UNIX socket, hw/soft/zd_soft_fdx.h): skip where it is
 * missing. */
static inline void t_need_pidfd(void)
{
	int pfd = (int)syscall(SYS_pidfd_open, getpid(), 0);

	if (pfd < 0)
		cr_skip_test("pidfd_open unavailable here (%s)", strerror(errno));
	close(pfd);
}

static inline void t_connect(struct zd_mlx5sim_nic *na, struct t_qp *a,
			     struct zd_mlx5sim_nic *nb, struct t_qp *b)
{
	struct zd_mlx5sim_qp_addr aa, ba;

	t_need_pidfd();
	cr_assert_eq(zd_mlx5sim_qp_addr(na, a->qpn, &aa), 0);
	cr_assert_eq(zd_mlx5sim_qp_addr(nb, b->qpn, &ba), 0);
	cr_assert_eq(zd_mlx5sim_qp_connect(na, a->qpn, &ba), 0);
	cr_assert_eq(zd_mlx5sim_qp_connect(nb, b->qpn, &aa), 0);
}

/* ---- WQE building with mlx5dv.h helpers ---- */

static inline void t_wqe_ctrl(struct t_wqe *w, struct t_qp *qp, uint8_t opcode, uint8_t flags,
			      uint32_t imm)
{
	memset(w, 0, sizeof(*w));
	w->size = 16;
	/* ds and the index are filled by t_post */
	mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)w->b, 0, opcode, 0, qp->qpn, flags, 0, 0,
			    imm);
}

static inline void t_wqe_raddr(struct t_wqe *w, uint64_t raddr, uint32_t rkey)
{
	struct mlx5_wqe_raddr_seg *r = (void *)(w->b + w->size);

	r->raddr = htobe64(raddr);
	r->rkey = htobe32(rkey);
	r->reserved = 0;
	w->size += 16;
}

static inline void t_wqe_data(struct t_wqe *w, const void *addr, uint32_t len, uint32_t lkey)
{
	mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)(w->b + w->size), len, lkey,
			    (uintptr_t)addr);
	w->size += 16;
}

static inline void t_wqe_inline(struct t_wqe *w, const void *data, uint32_t len)
{
	struct mlx5_wqe_inl_data_seg *s = (void *)(w->b + w->size);

	s->byte_count = htobe32(len | MLX5_INLINE_SEG);
	memcpy(s + 1, data, len);
	w->size += (uint32_t)((sizeof(*s) + len + 15) & ~15u);
}

static inline void t_wqe_atomic(struct t_wqe *w, uint64_t swap_add, uint64_t compare)
{
	struct mlx5_wqe_atomic_seg *a = (void *)(w->b + w->size);

	a->swap_add = htobe64(swap_add);
	a->compare = htobe64(compare);
	w->size += 16;
}

/* Writes the WQE at the SQ's producer index (wrapping per basic block),
 * then rings: doorbell record, then BlueFlame copy or 8-byte doorbell. */
static inline uint16_t t_post(struct t_qp *qp, struct t_wqe *w, enum t_ring how)
{
	struct mlx5_wqe_ctrl_seg *c = (void *)w->b;
	uint32_t nbb = (w->size + 63) / 64, mask = qp->sq.wqe_cnt - 1;
	uint16_t idx = (uint16_t)qp->pi;
	uint8_t op = (uint8_t)be32toh(c->opmod_idx_opcode);

	c->opmod_idx_opcode = htobe32(((uint32_t)idx << 8) | op);
	c->qpn_ds = htobe32(qp->qpn << 8 | (w->size / 16));
	for (uint32_t i = 0; i < nbb; i++)
		memcpy((char *)qp->sq.buf + ((qp->pi + i) & mask) * 64, w->b + i * 64, 64);
	qp->pi += nbb;
	if (how == T_NONE)
		return idx;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	qp->sq.dbrec[0] = htobe32(qp->pi & 0xffff);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (how == T_BF && nbb * 64 <= qp->sq.bf_size)
		memcpy((char *)qp->sq.bf_reg + qp->bf_off, w->b, nbb * 64);
	else
		memcpy((char *)qp->sq.bf_reg + qp->bf_off, w->b, 8);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	qp->bf_off ^= qp->sq.bf_size;
	return idx;
}

/* ---- receives ---- */

static inline void t_recv(struct t_qp *qp, void *addr, uint32_t len, uint32_t lkey)
{
	struct mlx5_wqe_data_seg *d = (void *)((char *)qp->rq.buf +
					       (qp->rq_head & (qp->rq.wqe_cnt - 1)) * qp->rq.stride);

	mlx5dv_set_data_seg(d, len, lkey, (uintptr_t)addr);
	if (qp->rq.stride > 16)
		mlx5dv_set_data_seg(d + 1, 0, MLX5_INVALID_LKEY, 0);
	qp->rq_head++;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	*qp->rq.dbrec = htobe32(qp->rq_head & 0xffff);
}

static inline struct mlx5_wqe_srq_next_seg *t_srq_wqe(struct t_srq *s, uint32_t i)
{
	return (void *)((char *)s->d.buf + i * s->d.stride);
}

/* Returns the WQE index used. */
static inline uint16_t t_srq_post(struct t_srq *s, void *addr, uint32_t len, uint32_t lkey)
{
	uint16_t ind = (uint16_t)s->d.head;
	struct mlx5_wqe_srq_next_seg *n = t_srq_wqe(s, ind);
	struct mlx5_wqe_data_seg *d = (void *)(n + 1);

	cr_assert_neq(s->d.head, s->d.tail, "SRQ full");
	s->d.head = be16toh(n->next_wqe_index);
	mlx5dv_set_data_seg(d, len, lkey, (uintptr_t)addr);
	if (s->d.stride > 32)
		mlx5dv_set_data_seg(d + 1, 0, MLX5_INVALID_LKEY, 0);
	s->counter++;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	*s->d.dbrec = htobe32(s->counter);
	return ind;
}

/* A completed SRQ WQE goes back at the tail of the free list. */
static inline void t_srq_free(struct t_srq *s, uint16_t ind)
{
	t_srq_wqe(s, s->d.tail)->next_wqe_index = htobe16(ind);
	s->d.tail = ind;
}

/* ---- CQs ---- */

static inline bool t_poll(struct t_cq *cq, struct mlx5_cqe64 *out)
{
	struct mlx5_cqe64 *c = (void *)((char *)cq->d.buf + (cq->ci & (cq->d.cqe_cnt - 1)) * 64);
	uint8_t own = __atomic_load_n(&c->op_own, __ATOMIC_ACQUIRE);

	if ((own >> 4) == MLX5_CQE_INVALID || !(own & 1) != !(cq->ci & cq->d.cqe_cnt))
		return false;
	memcpy(out, c, sizeof(*out));
	cq->ci++;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	cq->d.dbrec[ZD_MLX5_CQ_SET_CI] = htobe32(cq->ci & 0xffffff);
	return true;
}

static inline struct mlx5_cqe64 t_wait(struct t_cq *cq)
{
	struct mlx5_cqe64 c;
	uint64_t end = t_now_ms() + 10000;

	while (!t_poll(cq, &c)) {
		cr_assert_lt(t_now_ms(), end, "no CQE on cq %u", cq->d.cqn);
		usleep(20);
	}
	return c;
}

/* No CQE for ms milliseconds. */
static inline void t_none(struct t_cq *cq, int ms)
{
	struct mlx5_cqe64 c;
	uint64_t end = t_now_ms() + (uint64_t)ms;

	while (t_now_ms() < end) {
		cr_assert_not(t_poll(cq, &c), "unexpected CQE opcode %u", c.op_own >> 4);
		usleep(100);
	}
}

static inline void t_arm(struct t_cq *cq, bool solicited)
{
	uint32_t db[2];
	uint64_t v;

	db[0] = htobe32((cq->arm_sn & 3) << 28 |
			(solicited ? MLX5_CQ_DB_REQ_NOT_SOL : MLX5_CQ_DB_REQ_NOT) |
			(cq->ci & 0xffffff));
	db[1] = htobe32(cq->d.cqn);
	cq->d.dbrec[ZD_MLX5_CQ_ARM_DB] = db[0];
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	memcpy(&v, db, 8);
	__atomic_store_n((uint64_t *)((char *)cq->d.uar + ZD_MLX5_CQ_UAR_DB), v, __ATOMIC_RELEASE);
	cq->arm_sn++;
}

static inline uint8_t t_op(const struct mlx5_cqe64 *c)
{
	return c->op_own >> 4;
}

static inline uint8_t t_syn(const struct mlx5_cqe64 *c)
{
	return ((const struct mlx5_err_cqe *)c)->syndrome;
}

/* Waits until the QP reaches state st. */
static inline void t_wait_state(struct zd_mlx5sim_nic *n, uint32_t qpn, int st)
{
	uint64_t end = t_now_ms() + 10000;

	while (zd_mlx5sim_qp_state(n, qpn) != st) {
		cr_assert_lt(t_now_ms(), end, "qp %u stays in state %d", qpn,
			     zd_mlx5sim_qp_state(n, qpn));
		usleep(50);
	}
}

#endif
