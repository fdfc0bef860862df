/*
 * The queue objects of the software mlx5 device, as the firmware's create,
 * modify and destroy commands: the CQ, SRQ and QP contexts in the region,
 * their queue memory (zd_mlx5sim_qmem.c), the descriptors handed to the
 * data path, and a QP's connection to its peer.  Everything here runs
 * under nic->lock, which the engine also takes for each pass over its QPs,
 * so an object never changes under the engine.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

/* ---- CQs ---- */

int zd_mlx5sim_cq_create(struct zd_mlx5sim_nic *nic, uint32_t cqe_cnt, void *user,
			 struct zd_mlx5_cq_desc *out)
{
	struct zd_ms_shared *sh = nic->sh;
	uint32_t bchunk, dchunk;
	uint64_t buf, db;
	int64_t aux;
	int ret = -ENOMEM;

	if (cqe_cnt == 0 || cqe_cnt > (1u << 22))
		return -EINVAL;
	cqe_cnt = zd_ms_pow2_up(cqe_cnt < 2 ? 2 : cqe_cnt);
	pthread_mutex_lock(&nic->lock);
	for (uint32_t i = 0; i < sh->max_cq; i++) {
		struct zd_ms_cq *cq = zd_ms_cq_ctx(sh, i);

		if (atomic_load(&cq->live))
			continue;
		if (zd_ms_qmem_alloc(nic, (uint64_t)cqe_cnt * 64, ZD_MS_PAGE, MLX5DV_RES_TYPE_CQ,
				     &bchunk, &buf) != 0)
			break;
		aux = zd_ms_arena_alloc(nic, ZD_MS_PAGE);
		if (aux < 0) {
			zd_ms_qmem_free(nic, bchunk, buf, (uint64_t)cqe_cnt * 64, MLX5DV_RES_TYPE_CQ);
			break;
		}
		/* The doorbell record in host memory, else in the UAR page. */
		if (!zd_ms_qmem_dbr(nic, &dchunk, &db)) {
			dchunk = ZD_SOFT_NO_CHUNK;
			db = (uint64_t)aux + 0x40;
		}
		memset(cq, 0, sizeof(*cq));
		cq->cqn = i + 1;
		cq->cqe_cnt = cqe_cnt;
		cq->buf_chunk = bchunk;
		cq->buf_off = buf;
		cq->uar_off = (uint64_t)aux;
		cq->db_chunk = dchunk;
		cq->db_off = db;
		out->buf = zd_ms_own_qbuf(nic, bchunk, buf);
		/* Every CQE invalid, owner 0: hardware's first pass writes owner 0. */
		for (uint32_t j = 0; j < cqe_cnt; j++) {
			struct mlx5_cqe64 *c = (struct mlx5_cqe64 *)out->buf + j;

			c->op_own = MLX5_CQE_INVALID << 4;
		}
		out->cqe_cnt = cqe_cnt;
		out->cqe_size = 64;
		out->dbrec = zd_ms_own_qbuf(nic, dchunk, db);
		out->uar = zd_ms_at(sh, cq->uar_off);
		out->cqn = cq->cqn;
		nic->cq_user[i] = user;
		nic->cq_watch[i].since_ns = 0;
		nic->cq_hwm = ZD_MAX(nic->cq_hwm, i + 1);
		atomic_store_explicit(&cq->live, 1, memory_order_release);
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

static struct zd_ms_cq *cq_get(struct zd_mlx5sim_nic *nic, uint32_t cqn)
{
	struct zd_ms_cq *cq;

	if (cqn < 1 || cqn > nic->sh->max_cq)
		return NULL;
	cq = zd_ms_cq_ctx(nic->sh, cqn - 1);
	return atomic_load(&cq->live) ? cq : NULL;
}

int zd_mlx5sim_cq_destroy(struct zd_mlx5sim_nic *nic, uint32_t cqn)
{
	struct zd_ms_cq *cq;
	int ret = 0;

	pthread_mutex_lock(&nic->lock);
	cq = cq_get(nic, cqn);
	if (!cq) {
		ret = -EINVAL;
	} else if (atomic_load(&cq->users)) {
		ret = -EBUSY;
	} else {
		atomic_store(&cq->live, 0);
		zd_ms_qmem_free(nic, cq->buf_chunk, cq->buf_off, (uint64_t)cq->cqe_cnt * 64,
				MLX5DV_RES_TYPE_CQ);
		if (cq->db_chunk != ZD_SOFT_NO_CHUNK)
			zd_ms_qmem_free(nic, cq->db_chunk, cq->db_off, 8, MLX5DV_RES_TYPE_DBR);
		zd_ms_arena_free(nic, cq->uar_off, ZD_MS_PAGE);
		atomic_fetch_and(&zd_ms_fired(nic->sh)[(cqn - 1) / 64],
				 ~(1ull << ((cqn - 1) % 64)));
	}
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

bool zd_mlx5sim_cq_in_error(struct zd_mlx5sim_nic *nic, uint32_t cqn)
{
	struct zd_ms_cq *cq = cq_get(nic, cqn);

	return cq && atomic_load(&cq->error);
}

/* ---- SRQs ---- */

int zd_mlx5sim_srq_create(struct zd_mlx5sim_nic *nic, uint32_t pdn, uint32_t wqe_cnt,
			  uint32_t max_sge, struct zd_mlx5_srq_desc *out)
{
	struct zd_ms_shared *sh = nic->sh;
	uint32_t stride, bchunk, dchunk;
	uint64_t buf, db;
	uint8_t *wqes;
	int ret = -ENOMEM;

	if (wqe_cnt < 2 || wqe_cnt > (1u << 15) || max_sge == 0 || max_sge > ZD_MS_MAX_SGE)
		return -EINVAL;
	wqe_cnt = zd_ms_pow2_up(wqe_cnt);
	stride = 16 * zd_ms_pow2_up(1 + max_sge);
	pthread_mutex_lock(&nic->lock);
	if (!zd_ms_pd_ok(nic, pdn)) {
		ret = -EINVAL;
		goto out;
	}
	for (uint32_t i = 0; i < sh->max_srq; i++) {
		struct zd_ms_srq *s = zd_ms_srq_ctx(sh, i);

		if (atomic_load(&s->live))
			continue;
		if (zd_ms_qmem_alloc(nic, (uint64_t)wqe_cnt * stride, ZD_MS_PAGE,
				     MLX5DV_RES_TYPE_SRQ, &bchunk, &buf) != 0)
			break;
		/* The doorbell record: host memory, else an arena page. */
		if (zd_ms_qmem_alloc(nic, 8, 8, MLX5DV_RES_TYPE_DBR, &dchunk, &db) != 0) {
			zd_ms_qmem_free(nic, bchunk, buf, (uint64_t)wqe_cnt * stride,
					MLX5DV_RES_TYPE_SRQ);
			break;
		}
		memset(s, 0, sizeof(*s));
		s->srqn = i + 1;
		s->pdn = pdn;
		s->wqe_cnt = wqe_cnt;
		s->stride = stride;
		s->buf_chunk = bchunk;
		s->buf_off = buf;
		s->db_chunk = dchunk;
		s->db_off = db;
		wqes = zd_ms_own_qbuf(nic, bchunk, buf);
		/* The free list as mlx5 creates it: 0 -> 1 -> ... -> cnt-1. */
		for (uint32_t j = 0; j < wqe_cnt; j++) {
			struct mlx5_wqe_srq_next_seg *n = (void *)(wqes + (uint64_t)j * stride);

			n->next_wqe_index = htobe16((uint16_t)((j + 1) & (wqe_cnt - 1)));
		}
		atomic_store(&s->hw, 0);
		nic->pd_used[pdn - 1]++;
		out->buf = wqes;
		out->wqe_cnt = wqe_cnt;
		out->stride = stride;
		out->dbrec = zd_ms_own_qbuf(nic, dchunk, db);
		out->head = 0;
		out->tail = wqe_cnt - 1;
		out->srqn = s->srqn;
		atomic_store_explicit(&s->live, 1, memory_order_release);
		ret = 0;
		break;
	}
out:
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

static struct zd_ms_srq *srq_get(struct zd_mlx5sim_nic *nic, uint32_t srqn)
{
	struct zd_ms_srq *s;

	if (srqn < 1 || srqn > nic->sh->max_srq)
		return NULL;
	s = zd_ms_srq_ctx(nic->sh, srqn - 1);
	return atomic_load(&s->live) ? s : NULL;
}

int zd_mlx5sim_srq_destroy(struct zd_mlx5sim_nic *nic, uint32_t srqn)
{
	struct zd_ms_srq *s;
	int ret = 0;

	pthread_mutex_lock(&nic->lock);
	s = srq_get(nic, srqn);
	if (!s) {
		ret = -EINVAL;
	} else if (atomic_load(&s->users)) {
		ret = -EBUSY;
	} else {
		atomic_store(&s->live, 0);
		zd_ms_qmem_free(nic, s->buf_chunk, s->buf_off, (uint64_t)s->wqe_cnt * s->stride,
				MLX5DV_RES_TYPE_SRQ);
		zd_ms_qmem_free(nic, s->db_chunk, s->db_off, 8, MLX5DV_RES_TYPE_DBR);
		nic->pd_used[s->pdn - 1]--;
	}
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

/* ---- QPs ---- */

static struct zd_ms_qp *qp_get(struct zd_mlx5sim_nic *nic, uint32_t qpn)
{
	struct zd_ms_qp *qp;

	if (!zd_ms_qpn_valid(qpn, nic->sh->max_qp))
		return NULL;
	qp = zd_ms_qp_ctx(nic->sh, zd_ms_qpn_index(qpn));
	return atomic_load(&qp->state) != ZD_MS_QP_FREE && qp->qpn == qpn ? qp : NULL;
}

int zd_mlx5sim_qp_create(struct zd_mlx5sim_nic *nic, const struct zd_mlx5sim_qp_attr *attr,
			 struct zd_mlx5_sq_desc *sq, struct zd_mlx5_rq_desc *rq, uint32_t *qpn)
{
	struct zd_ms_shared *sh = nic->sh;
	struct zd_ms_cq *scq, *rcq;
	struct zd_ms_srq *srq = NULL;
	uint32_t sq_cnt, rq_cnt = 0, rq_stride = 0, bchunk, dchunk, prev_qpn;
	uint64_t buf, db_at, rq_bytes, bytes;
	int64_t pg;
	int ret = -ENOMEM;

	if (!attr->sq_wqe_cnt || attr->sq_wqe_cnt > (1u << 15) || attr->rq_wqe_cnt > (1u << 15) ||
	    attr->rq_max_sge > ZD_MS_MAX_SGE || attr->type > ZD_MLX5SIM_QPT_UD)
		return -EINVAL;
	sq_cnt = zd_ms_pow2_up(attr->sq_wqe_cnt);
	if (!attr->srqn) {
		if (!attr->rq_wqe_cnt || !attr->rq_max_sge)
			return -EINVAL;
		rq_cnt = zd_ms_pow2_up(attr->rq_wqe_cnt);
		rq_stride = 16 * zd_ms_pow2_up(attr->rq_max_sge);
	}
	pthread_mutex_lock(&nic->lock);
	scq = cq_get(nic, attr->send_cqn);
	rcq = cq_get(nic, attr->recv_cqn);
	if (attr->srqn)
		srq = srq_get(nic, attr->srqn);
	if (!zd_ms_pd_ok(nic, attr->pdn) || !scq || !rcq || (attr->srqn && !srq)) {
		ret = -EINVAL;
		goto out;
	}
	for (uint32_t i = 0; i < sh->max_qp; i++) {
		struct zd_ms_qp *qp = zd_ms_qp_ctx(sh, i);
		struct zd_ms_qpe *e = &nic->qpe[i];
		__be32 *db;

		if (zd_ms_qp_slot_used(qp))
			continue;
		/* One buffer, the RQ then the SQ, as mlx5 lays a QP out. */
		rq_bytes = (uint64_t)rq_cnt * rq_stride;
		bytes = rq_bytes + (uint64_t)sq_cnt * MLX5_SEND_WQE_BB;
		if (zd_ms_qmem_alloc(nic, bytes, ZD_MS_PAGE, MLX5DV_RES_TYPE_QP, &bchunk, &buf) != 0)
			break;
		pg = zd_ms_arena_alloc(nic, ZD_MS_PAGE);
		if (pg < 0) {
			zd_ms_qmem_free(nic, bchunk, buf, bytes, MLX5DV_RES_TYPE_QP);
			break;
		}
		/* The doorbell records in host memory, else at the UAR page's
		 * start. */
		if (!zd_ms_qmem_dbr(nic, &dchunk, &db_at)) {
			dchunk = ZD_SOFT_NO_CHUNK;
			db_at = (uint64_t)pg;
		}
		prev_qpn = qp->qpn;
		memset((char *)qp + sizeof(qp->state), 0, sizeof(*qp) - sizeof(qp->state));
		memset(e, 0, sizeof(*e));
		qp->qpn = zd_ms_qpn_next(prev_qpn, i);
		atomic_store(&qp->rq_done, (uint64_t)qp->qpn << 32);
		qp->pdn = attr->pdn;
		qp->scqn = attr->send_cqn;
		qp->rcqn = attr->recv_cqn;
		qp->srqn = attr->srqn;
		qp->type = attr->type;
		qp->sq_wqe_cnt = sq_cnt;
		qp->rq_wqe_cnt = rq_cnt;
		qp->rq_stride = rq_stride;
		qp->buf_chunk = bchunk;
		qp->sq_off = buf + rq_bytes;
		qp->rq_off = rq_cnt ? buf : 0;
		qp->db_chunk = dchunk;
		qp->db_off = db_at;
		qp->uar_off = (uint64_t)pg;
		atomic_fetch_add(&scq->users, 1);
		atomic_fetch_add(&rcq->users, 1);
		if (srq)
			atomic_fetch_add(&srq->users, 1);
		nic->pd_used[attr->pdn - 1]++;
		db = zd_ms_own_qbuf(nic, dchunk, db_at);
		sq->buf = zd_ms_own_qbuf(nic, bchunk, qp->sq_off);
		sq->wqe_cnt = sq_cnt;
		sq->stride = MLX5_SEND_WQE_BB;
		sq->dbrec = &db[MLX5_SND_DBR];
		sq->bf_reg = zd_ms_at(sh, qp->uar_off + ZD_MS_BF_OFFSET);
		sq->bf_size = ZD_MS_BF_SIZE;
		sq->qpn = qp->qpn;
		rq->buf = rq_cnt ? zd_ms_own_qbuf(nic, bchunk, buf) : NULL;
		rq->wqe_cnt = rq_cnt;
		rq->stride = rq_stride;
		rq->dbrec = &db[MLX5_RCV_DBR];
		*qpn = qp->qpn;
		nic->qp_hwm = ZD_MAX(nic->qp_hwm, i + 1);
		nic->qps_live++;
		/* release: the engine reads the context after seeing the state. */
		atomic_store_explicit(&qp->state, ZD_MLX5SIM_QPS_RESET, memory_order_release);
		ret = 0;
		break;
	}
out:
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

int zd_mlx5sim_qp_addr(struct zd_mlx5sim_nic *nic, uint32_t qpn, struct zd_mlx5sim_qp_addr *out)
{
	if (!qp_get(nic, qpn))
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->magic = ZD_MS_ADDR_MAGIC;
	out->pid = getpid();
	out->nic_uid = nic->sh->uid;
	out->region_fd = nic->region.fd;
	out->qpn = qpn;
	out->region_size = nic->region.size;
	return 0;
}

int zd_mlx5sim_qp_connect(struct zd_mlx5sim_nic *nic, uint32_t qpn,
			  const struct zd_mlx5sim_qp_addr *peer)
{
	struct zd_ms_qp *qp;
	struct zd_ms_qpe *e;
	struct zd_soft_peer *p;
	uint32_t st;
	int ret = 0;

	if (peer->magic != ZD_MS_ADDR_MAGIC)
		return -EINVAL;
	pthread_mutex_lock(&nic->lock);
	qp = qp_get(nic, qpn);
	if (!qp) {
		ret = -EINVAL;
		goto out;
	}
	st = atomic_load(&qp->state);
	e = &nic->qpe[zd_ms_qpn_index(qpn)];
	if ((st != ZD_MLX5SIM_QPS_RESET && st != ZD_MLX5SIM_QPS_INIT) || e->peer ||
	    qp->type != ZD_MLX5SIM_QPT_RC) {
		ret = -EINVAL;
		goto out;
	}
	pthread_mutex_unlock(&nic->lock);
	errno = 0;
	p = zd_ms_peer_get(nic, peer);   /* may map: not under the NIC lock */
	pthread_mutex_lock(&nic->lock);
	if (!p) {
		ret = errno ? -errno : -ENOENT;     /* out of descriptors or memory */
		goto out;
	}
	if (!zd_ms_qpn_valid(peer->qpn, zd_ms_peer_sh(p)->max_qp) ||
	    qp_get(nic, qpn) != qp || e->peer) {
		pthread_mutex_unlock(&nic->lock);
		zd_ms_peer_put(nic, p);
		return -EINVAL;
	}
	e->peer = p;
	e->peer_idx = zd_ms_qpn_index(peer->qpn);
	atomic_store(&qp->peer_uid, peer->nic_uid);
	atomic_store(&qp->peer_qpn, peer->qpn);
	/* INIT -> RTR -> RTS: nothing to wait for in between in the model. */
	atomic_store_explicit(&qp->state, ZD_MLX5SIM_QPS_RTS, memory_order_release);
out:
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

int zd_mlx5sim_qp_state(struct zd_mlx5sim_nic *nic, uint32_t qpn)
{
	struct zd_ms_qp *qp = qp_get(nic, qpn);

	return qp ? (int)atomic_load(&qp->state) : -EINVAL;
}

/* Under nic->lock: drop the peer and clear the queues (RESET). */
static void qp_reset_locked(struct zd_mlx5sim_nic *nic, struct zd_ms_qp *qp,
			    struct zd_soft_peer **put)
{
	struct zd_ms_qpe *e = &nic->qpe[zd_ms_qpn_index(qp->qpn)];
	__be32 *db = zd_ms_own_qbuf(nic, qp->db_chunk, qp->db_off);
	const uint64_t *bf = zd_ms_at(nic->sh, qp->uar_off + ZD_MS_BF_OFFSET);

	zd_ms_qp_bf_final(nic, zd_ms_qpn_index(qp->qpn));
	*put = e->peer;
	memset(e, 0, sizeof(*e));
	/* Whatever sits in the BlueFlame halves now is old news. */
	e->bf_last[0] = __atomic_load_n(&bf[0], __ATOMIC_RELAXED);
	e->bf_last[1] = __atomic_load_n(&bf[ZD_MS_BF_SIZE / 8], __ATOMIC_RELAXED);
	e->bf_prev_unknown[0] = e->bf_prev_unknown[1] = true;
	atomic_store(&qp->peer_uid, 0);
	atomic_store(&qp->peer_qpn, 0);
	atomic_store(&qp->rq_ci, 0);
	atomic_store(&qp->rq_done, (uint64_t)qp->qpn << 32);
	atomic_store(&qp->sq_ci, 0);
	zd_dev_store(&db[MLX5_SND_DBR], 0);
	zd_dev_store(&db[MLX5_RCV_DBR], 0);
}

int zd_mlx5sim_qp_modify(struct zd_mlx5sim_nic *nic, uint32_t qpn, enum zd_mlx5sim_qp_state st)
{
	struct zd_soft_peer *put = NULL;
	struct zd_ms_qp *qp;
	int ret = 0;

	pthread_mutex_lock(&nic->lock);
	qp = qp_get(nic, qpn);
	if (!qp) {
		ret = -EINVAL;
	} else if (st == ZD_MLX5SIM_QPS_ERR) {
		atomic_store(&qp->state, ZD_MLX5SIM_QPS_ERR);
	} else if (st == ZD_MLX5SIM_QPS_RESET) {
		atomic_store(&qp->state, ZD_MLX5SIM_QPS_RESET);
		qp_reset_locked(nic, qp, &put);
	} else if (st == ZD_MLX5SIM_QPS_INIT &&
		   atomic_load(&qp->state) == ZD_MLX5SIM_QPS_RESET) {
		atomic_store(&qp->state, ZD_MLX5SIM_QPS_INIT);
	} else {
		ret = -EINVAL;   /* RTR/RTS: zd_mlx5sim_qp_connect */
	}
	pthread_mutex_unlock(&nic->lock);
	if (put)
		zd_ms_peer_put(nic, put);
	return ret;
}

int zd_mlx5sim_qp_destroy(struct zd_mlx5sim_nic *nic, uint32_t qpn)
{
	struct zd_soft_peer *put = NULL;
	struct zd_ms_qp *qp;
	struct zd_ms_srq *srq;
	uint64_t rq_bytes;

	pthread_mutex_lock(&nic->lock);
	qp = qp_get(nic, qpn);
	if (!qp) {
		pthread_mutex_unlock(&nic->lock);
		return -EINVAL;
	}
	/* Its posts before the destruction still go out. */
	zd_ms_engine_catch_up(nic);
	/* Peers sending to us see a QP that is not RTR/RTS and fail. */
	atomic_store(&qp->state, ZD_MLX5SIM_QPS_RESET);
	qp_reset_locked(nic, qp, &put);
	atomic_fetch_sub(&cq_get(nic, qp->scqn)->users, 1);
	atomic_fetch_sub(&cq_get(nic, qp->rcqn)->users, 1);
	srq = qp->srqn ? srq_get(nic, qp->srqn) : NULL;
	if (srq)
		atomic_fetch_sub(&srq->users, 1);
	nic->pd_used[qp->pdn - 1]--;
	rq_bytes = (uint64_t)qp->rq_wqe_cnt * qp->rq_stride;
	zd_ms_qmem_free(nic, qp->buf_chunk, qp->sq_off - rq_bytes,
			rq_bytes + (uint64_t)qp->sq_wqe_cnt * MLX5_SEND_WQE_BB, MLX5DV_RES_TYPE_QP);
	if (qp->db_chunk != ZD_SOFT_NO_CHUNK)
		zd_ms_qmem_free(nic, qp->db_chunk, qp->db_off, 8, MLX5DV_RES_TYPE_DBR);
	zd_ms_arena_free(nic, qp->uar_off, ZD_MS_PAGE);
	atomic_store(&qp->state, ZD_MS_QP_FREE);
	nic->qps_live--;
	pthread_mutex_unlock(&nic->lock);
	if (put)
		zd_ms_peer_put(nic, put);
	return 0;
}
