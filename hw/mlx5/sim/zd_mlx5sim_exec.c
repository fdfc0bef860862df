/*
 * WQE execution of the software mlx5 device ("the initiator executes"):
 * a WQE the engine copied out of an SQ has its control segment checked
 * (index, QPN, ds, flags, opcode), its local segments checked against this
 * NIC's MR table and its remote ones against the peer's, and its data
 * moved (zd_mlx5sim_mem.c); sends and writes with immediate consume a
 * receive WQE of the peer (RQ or SRQ, claimed by CAS) and write the peer's
 * receive CQE.  Errors the responder detects complete its receive WQE with
 * an error CQE and take its QP to ERR too.
 */
#include <endian.h>
#include <string.h>
#include <sys/uio.h>

#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

/* ---- receive side ---- */

int zd_ms_recv_claim(struct zd_soft_peer *p, struct zd_ms_qp *pq, struct zd_ms_recv *rc)
{
	struct zd_ms_shared *sh = zd_ms_peer_sh(p);

	if (pq->srqn) {
		struct zd_ms_srq *s;
		uint64_t hw, nhw;
		const uint8_t *w, *buf;
		volatile __be32 *db;
		uint32_t posted, cons, head;

		if (pq->srqn > sh->max_srq)
			return ZD_MS_ERR;
		s = zd_ms_srq_ctx(sh, pq->srqn - 1);
		if (!atomic_load_explicit(&s->live, memory_order_acquire) || s->wqe_cnt < 2 ||
		    (s->wqe_cnt & (s->wqe_cnt - 1)) || s->stride < 32 ||
		    s->stride > 16 * (ZD_MS_MAX_SGE * 2 + 1))
			return ZD_MS_ERR;
		buf = zd_ms_qbuf(p, s->buf_chunk, s->buf_off, (uint64_t)s->wqe_cnt * s->stride);
		db = zd_ms_qbuf(p, s->db_chunk, s->db_off, 4);
		if (!buf || !db)
			return ZD_MS_ERR;
		hw = atomic_load_explicit(&s->hw, memory_order_acquire);
		do {
			posted = be32toh(zd_dev_load(db)) & 0xffff;
			cons = (uint32_t)(hw >> 32);
			if (((posted - cons) & 0xffff) == 0)
				return ZD_MS_RNR;
			/* acquire: the WQE was written before the counter. */
			atomic_thread_fence(memory_order_acquire);
			head = (uint32_t)hw & 0xffff;
			w = buf + (uint64_t)(head & (s->wqe_cnt - 1)) * s->stride;
			nhw = (uint64_t)(cons + 1) << 32 |
			      be16toh(((const struct mlx5_wqe_srq_next_seg *)w)->next_wqe_index);
		} while (!atomic_compare_exchange_weak(&s->hw, &hw, nhw));
		rc->wqe = w + sizeof(struct mlx5_wqe_srq_next_seg);
		rc->nseg = s->stride / 16 - 1;
		rc->counter = (uint16_t)head;
		rc->srqn = s->srqn;
		return ZD_MS_OK;
	}
	if (!pq->rq_wqe_cnt || (pq->rq_wqe_cnt & (pq->rq_wqe_cnt - 1)) || pq->rq_stride < 16 ||
	    pq->rq_stride > 16 * ZD_MS_MAX_SGE * 2)
		return ZD_MS_ERR;
	const uint8_t *rq = zd_ms_qbuf(p, pq->buf_chunk, pq->rq_off,
				       (uint64_t)pq->rq_wqe_cnt * pq->rq_stride);
	volatile __be32 *rdb = zd_ms_qbuf(p, pq->db_chunk, pq->db_off, 8);
	uint32_t c = atomic_load_explicit(&pq->rq_ci, memory_order_relaxed), posted;

	if (!rq || !rdb)
		return ZD_MS_ERR;
	do {
		posted = be32toh(zd_dev_load(&rdb[MLX5_RCV_DBR])) & 0xffff;
		if (((posted - c) & 0xffff) == 0)
			return ZD_MS_RNR;
		if (((posted - c) & 0xffff) > pq->rq_wqe_cnt)
			return ZD_MS_ERR;
	} while (!atomic_compare_exchange_weak(&pq->rq_ci, &c, c + 1));
	/* acquire: the WQE was written before the doorbell record. */
	atomic_thread_fence(memory_order_acquire);
	rc->wqe = rq + (uint64_t)(c & (pq->rq_wqe_cnt - 1)) * pq->rq_stride;
	rc->nseg = pq->rq_stride / 16;
	rc->counter = (uint16_t)c;
	rc->claim = c;
	rc->srqn = 0;
	return ZD_MS_OK;
}

bool zd_ms_recv_decide(struct zd_ms_qp *pq, uint32_t qpn, const struct zd_ms_recv *rc)
{
	uint64_t want = (uint64_t)qpn << 32 | rc->claim;

	if (rc->srqn || pq->type != ZD_MLX5SIM_QPT_RC)
		return true;
	/* relaxed: the CQE written after carries its own release. */
	return atomic_compare_exchange_strong_explicit(&pq->rq_done, &want,
						       (uint64_t)qpn << 32 | (uint32_t)(rc->claim + 1),
						       memory_order_relaxed, memory_order_relaxed);
}

uint8_t zd_ms_recv_scatter(struct zd_soft_peer *p, struct zd_ms_qp *pq, struct zd_ms_pins *pins,
			   const struct zd_ms_recv *rc, uint64_t need, struct zd_soft_seg *r,
			   int *nr)
{
	uint64_t have = 0;

	*nr = 0;
	for (uint32_t i = 0; i < rc->nseg && have < need; i++) {
		const struct mlx5_wqe_data_seg *d = (const void *)(rc->wqe + 16 * i);
		uint32_t len = be32toh(d->byte_count), key = be32toh(d->lkey);
		uint64_t addr = be64toh(d->addr), use;

		if (key == MLX5_INVALID_LKEY)
			break;
		use = ZD_MIN((uint64_t)len, need - have);
		if (!use)
			continue;
		if (!zd_ms_mr_check(zd_ms_peer_sh(p), key, pq->pdn, ZD_MLX5SIM_ACCESS_LOCAL_WRITE,
				    addr, use, &r[*nr].chunk, pins))
			return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
		r[*nr].addr = addr;
		r[*nr].len = (uint32_t)use;
		(*nr)++;
		have += use;
	}
	return have < need ? MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR : 0;
}

/* ---- WQE execution ---- */

bool zd_ms_local_sges(struct zd_ms_wqe *x, uint32_t off, bool allow_inline, uint32_t need,
		      struct iovec *iov, int *n, uint64_t *total)
{
	*n = 0;
	*total = 0;
	while (off < x->size) {
		uint32_t bc = zd_ms_rd_be32(x->w + off);

		if (*n >= ZD_MS_MAX_SGE * 2)
			return false;
		if (bc & MLX5_INLINE_SEG) {
			uint32_t len = bc & ~MLX5_INLINE_SEG;

			if (!allow_inline || len > x->size - off - 4)
				return false;
			iov[*n].iov_base = (void *)(x->w + off + 4);
			iov[*n].iov_len = len;
			off += (4 + len + 15) & ~15u;
		} else {
			const struct mlx5_wqe_data_seg *d = (const void *)(x->w + off);
			uint64_t addr = be64toh(d->addr);

			if (x->size - off < 16 || !zd_ms_mr_check(x->nic->sh, be32toh(d->lkey),
								  x->qp->pdn, need, addr, bc, NULL,
								  &x->pins))
				return false;
			iov[*n].iov_base = (void *)(uintptr_t)addr;
			iov[*n].iov_len = bc;
			off += 16;
		}
		*total += iov[*n].iov_len;
		(*n)++;
	}
	return *total <= (1ull << 31);
}

static struct zd_ms_qp *peer_qp(struct zd_ms_wqe *x)
{
	struct zd_soft_peer *p = x->e->peer;
	struct zd_ms_qp *pq;
	uint32_t st;

	if (!p || x->e->peer_idx >= zd_ms_peer_sh(p)->max_qp)
		return NULL;
	pq = zd_ms_qp_ctx(zd_ms_peer_sh(p), x->e->peer_idx);
	st = atomic_load_explicit(&pq->state, memory_order_acquire);
	if ((st != ZD_MLX5SIM_QPS_RTR && st != ZD_MLX5SIM_QPS_RTS) ||
	    atomic_load(&pq->peer_uid) != x->nic->sh->uid ||
	    atomic_load(&pq->peer_qpn) != x->qp->qpn)
		return NULL;
	return pq;
}

void zd_ms_qp_set_err(struct zd_ms_qp *qp)
{
	uint32_t st = atomic_load(&qp->state);

	if (st == ZD_MLX5SIM_QPS_RTR || st == ZD_MLX5SIM_QPS_RTS || st == ZD_MLX5SIM_QPS_INIT ||
	    st == ZD_MLX5SIM_QPS_SQE)
		atomic_compare_exchange_strong(&qp->state, &st, ZD_MLX5SIM_QPS_ERR);
}

static struct zd_ms_result fail(uint8_t syndrome, bool peer_err)
{
	return (struct zd_ms_result){ .status = ZD_MS_ERR, .syndrome = syndrome,
				      .peer_err = peer_err };
}

/* Responder error on a claimed receive of QP @qpn: its error CQE, then
 * the QP errs. */
static void resp_error(struct zd_soft_peer *p, struct zd_ms_qp *pq, uint32_t qpn,
		       const struct zd_ms_recv *rc, uint8_t syndrome, uint8_t opcode)
{
	struct mlx5_cqe64 c;

	zd_ms_cqe_err(&c, true, syndrome, opcode, pq->qpn, rc->counter, rc->srqn);
	/* The error CQE before the state: once the responder's own engine
	 * sees ERR it flushes the later receives, and their CQEs must not
	 * overtake this one. */
	if (zd_ms_recv_decide(pq, qpn, rc))
		zd_ms_cq_write(p, pq->rcqn, &c, false);
	zd_ms_qp_set_err(pq);
}

static void resp_cqe(struct zd_ms_wqe *x, struct zd_ms_qp *pq, const struct zd_ms_recv *rc,
		     uint8_t op, uint32_t len)
{
	struct zd_soft_peer *p = x->e->peer;
	bool se = x->fm_ce_se & MLX5_WQE_CTRL_SOLICITED;
	struct mlx5_cqe64 c;

	memset(&c, 0, sizeof(c));
	c.srqn_uidx = htobe32(rc->srqn & 0xffffff);
	c.byte_cnt = htobe32(len);
	c.imm_inval_pkey = op == MLX5_CQE_RESP_SEND ? 0 : x->imm;
	c.flags_rqpn = htobe32(x->qp->qpn & 0xffffff);
	c.sop_drop_qpn = htobe32(pq->qpn & 0xffffff);
	c.wqe_counter = htobe16(rc->counter);
	c.op_own = (uint8_t)(op << 4 | (se ? 2 : 0));
	/* Decided by its QP's flush meanwhile (we were stopped): no CQE. */
	if (!zd_ms_recv_decide(pq, atomic_load(&x->qp->peer_qpn), rc))
		return;
	/* A responder CQ that overran takes the responder QP down with it. */
	if (!zd_ms_cq_write(p, pq->rcqn, &c, se))
		zd_ms_qp_set_err(pq);
}

static struct zd_ms_result do_send(struct zd_ms_wqe *x)
{
	struct iovec l[ZD_MS_MAX_SGE * 2];
	struct zd_soft_seg r[ZD_MS_MAX_SGE * 2];
	struct zd_ms_recv rc;
	struct zd_ms_qp *pq;
	uint64_t total;
	int n, nr, st;
	uint8_t syn;

	if (!zd_ms_local_sges(x, 16, true, 0, l, &n, &total))
		return fail(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, false);
	pq = peer_qp(x);
	if (!pq)
		return fail(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, false);
	st = zd_ms_recv_claim(x->e->peer, pq, &rc);
	if (st == ZD_MS_RNR)
		return (struct zd_ms_result){ .status = ZD_MS_RNR };
	if (st == ZD_MS_ERR)
		return fail(MLX5_CQE_SYNDROME_REMOTE_OP_ERR, true);
	syn = zd_ms_recv_scatter(x->e->peer, pq, &x->pins, &rc, total, r, &nr);
	if (syn) {
		resp_error(x->e->peer, pq, atomic_load(&x->qp->peer_qpn), &rc, syn, x->opcode);
		return fail(syn == MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR ?
				    MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR :
				    MLX5_CQE_SYNDROME_REMOTE_OP_ERR,
			    false);
	}
	if (zd_soft_peer_copy(x->e->peer, true, l, n, r, nr) != 0) {
		resp_error(x->e->peer, pq, atomic_load(&x->qp->peer_qpn), &rc, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, x->opcode);
		return fail(MLX5_CQE_SYNDROME_REMOTE_OP_ERR, false);
	}
	resp_cqe(x, pq, &rc, x->opcode == MLX5_OPCODE_SEND_IMM ? MLX5_CQE_RESP_SEND_IMM :
								  MLX5_CQE_RESP_SEND,
		 (uint32_t)total);
	return (struct zd_ms_result){ .status = ZD_MS_OK, .byte_cnt = (uint32_t)total };
}

static struct zd_ms_result do_rdma(struct zd_ms_wqe *x)
{
	const struct mlx5_wqe_raddr_seg *ra = (const void *)(x->w + 16);
	bool write = x->opcode != MLX5_OPCODE_RDMA_READ;
	struct iovec l[ZD_MS_MAX_SGE * 2];
	struct zd_ms_recv rc;
	struct zd_ms_qp *pq;
	struct zd_soft_seg r;
	uint64_t total;
	int n;

	if (x->size < 32)
		return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, false);
	if (!zd_ms_local_sges(x, 32, write, write ? 0 : ZD_MLX5SIM_ACCESS_LOCAL_WRITE, l, &n,
			      &total))
		return fail(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, false);
	pq = peer_qp(x);
	if (!pq)
		return fail(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, false);
	r.addr = be64toh(ra->raddr);
	r.len = (uint32_t)total;
	/* A zero-length RDMA carries no rkey check, as on the wire. */
	if (total &&
	    !zd_ms_mr_check(zd_ms_peer_sh(x->e->peer), be32toh(ra->rkey), pq->pdn,
			    write ? ZD_MLX5SIM_ACCESS_REMOTE_WRITE : ZD_MLX5SIM_ACCESS_REMOTE_READ,
			    r.addr, total, &r.chunk, &x->pins))
		return fail(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, true);
	if (x->opcode == MLX5_OPCODE_RDMA_WRITE_IMM) {
		int st = zd_ms_recv_claim(x->e->peer, pq, &rc);

		if (st == ZD_MS_RNR)
			return (struct zd_ms_result){ .status = ZD_MS_RNR };
		if (st == ZD_MS_ERR)
			return fail(MLX5_CQE_SYNDROME_REMOTE_OP_ERR, true);
	}
	if (zd_soft_peer_copy(x->e->peer, write, l, n, &r, 1) != 0) {
		/* The receive was taken: it completes in error, as the QP. */
		if (x->opcode == MLX5_OPCODE_RDMA_WRITE_IMM)
			resp_error(x->e->peer, pq, atomic_load(&x->qp->peer_qpn), &rc, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR,
				   x->opcode);
		return fail(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, true);
	}
	/* The receive's CQE after the data (zd_soft_peer_copy has placed
	 * every byte, and zd_ms_cq_write publishes with a release). */
	if (x->opcode == MLX5_OPCODE_RDMA_WRITE_IMM)
		resp_cqe(x, pq, &rc, MLX5_CQE_RESP_WR_IMM, (uint32_t)total);
	return (struct zd_ms_result){ .status = ZD_MS_OK, .byte_cnt = (uint32_t)total };
}

/* 64-bit atomics as a ConnectX runs them: the operands come big-endian in
 * the WQE's atomic segment, the target word is the host's (its CPU reads
 * and writes it natively), and the old value goes back big-endian -- the
 * PRM's default requester mode (atomic_req_8B_endianness_mode 0), which a
 * kernel switches to host order where the HCA allows (zd_mlx5_verbs.c). */
static uint64_t atomic_apply(uint64_t old, const void *arg, bool *store)
{
	const struct zd_ms_wqe *x = arg;
	const struct mlx5_wqe_atomic_seg *a = (const void *)(x->w + 32);

	if (x->opcode == MLX5_OPCODE_ATOMIC_CS) {
		*store = old == be64toh(a->compare);
		return be64toh(a->swap_add);
	}
	*store = true;
	return old + be64toh(a->swap_add);
}

static struct zd_ms_result do_atomic(struct zd_ms_wqe *x)
{
	const struct mlx5_wqe_raddr_seg *ra = (const void *)(x->w + 16);
	const struct mlx5_wqe_data_seg *d = (const void *)(x->w + 48);
	struct zd_soft_peer *p = x->e->peer;
	uint64_t raddr = be64toh(ra->raddr), laddr = be64toh(d->addr), old;
	struct zd_ms_qp *pq;
	uint32_t chunk;

	if (x->size != 64 || be32toh(d->byte_count) != 8)
		return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, false);
	if (!zd_ms_mr_check(x->nic->sh, be32toh(d->lkey), x->qp->pdn, ZD_MLX5SIM_ACCESS_LOCAL_WRITE,
			    laddr, 8, NULL, &x->pins))
		return fail(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, false);
	pq = peer_qp(x);
	if (!pq)
		return fail(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, false);
	if (raddr & 7)
		return fail(MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, true);
	if (!zd_ms_mr_check(zd_ms_peer_sh(p), be32toh(ra->rkey), pq->pdn,
			    ZD_MLX5SIM_ACCESS_REMOTE_ATOMIC, raddr, 8, &chunk, &x->pins))
		return fail(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, true);
	if (zd_soft_peer_atomic(p, &zd_ms_peer_sh(p)->atomic_lock, chunk, raddr, atomic_apply, x,
				&old) != 0)
		return fail(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, true);
	/* The old value, big-endian, before the requester's CQE. */
	old = htobe64(old);
	memcpy((void *)(uintptr_t)laddr, &old, 8);
	return (struct zd_ms_result){ .status = ZD_MS_OK, .byte_cnt = 8 };
}

static struct zd_ms_result wqe_exec(struct zd_ms_wqe *x, uint16_t expect_idx)
{
	uint32_t w0 = zd_ms_rd_be32(x->w), qpn_ds = zd_ms_rd_be32(x->w + 4);

	x->opcode = (uint8_t)w0;
	if (!x->size)
		return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, false);
	x->idx = (uint16_t)(w0 >> 8);
	x->fm_ce_se = x->w[11];
	memcpy(&x->imm, x->w + 12, 4);
	/* Control segment: index, QPN, opcode modifier, reserved flag bits. */
	if (x->idx != expect_idx || (qpn_ds >> 8) != x->qp->qpn || (w0 >> 24) != 0 ||
	    (x->fm_ce_se & 0x11))
		return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, false);
	if (x->qp->type == ZD_MLX5SIM_QPT_UD)
		return zd_ms_ud_exec(x);
	switch (x->opcode) {
	case MLX5_OPCODE_NOP:
		return (struct zd_ms_result){ .status = ZD_MS_OK };
	case MLX5_OPCODE_SEND:
	case MLX5_OPCODE_SEND_IMM:
		return do_send(x);
	case MLX5_OPCODE_RDMA_WRITE:
	case MLX5_OPCODE_RDMA_WRITE_IMM:
	case MLX5_OPCODE_RDMA_READ:
		return do_rdma(x);
	case MLX5_OPCODE_ATOMIC_CS:
	case MLX5_OPCODE_ATOMIC_FA:
		return do_atomic(x);
	default:
		return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, false);
	}
}

struct zd_ms_result zd_ms_wqe_exec(struct zd_ms_wqe *x, uint16_t expect_idx)
{
	struct zd_ms_result r = wqe_exec(x, expect_idx);

	zd_ms_pins_release(&x->pins);
	return r;
}
