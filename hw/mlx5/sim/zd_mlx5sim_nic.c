/*
 * Control path of the software mlx5 device: the NIC region and its page
 * arena, PDs, CQs, SRQs and QPs (chunks, MRs and peers: zd_mlx5sim_mem.c;
 * events: zd_mlx5sim_event.c).
 * Everything here runs under nic->lock, which the engine also takes for
 * each pass over its QPs, so an object never changes under the engine.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

static uint32_t pow2_up(uint32_t v)
{
	uint32_t p = 1;

	while (p < v && p < (1u << 30))
		p <<= 1;
	return p;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static uint64_t new_uid(void)
{
	struct timespec ts;
	static _Atomic uint32_t ctr;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)getpid() << 40 ^ (uint64_t)ts.tv_nsec << 8 ^ (uint64_t)ts.tv_sec << 20 ^
	       atomic_fetch_add(&ctr, 1);
}

/* ---- page arena (queue memory) ---- */

static int64_t arena_alloc(struct zd_mlx5sim_nic *nic, uint64_t bytes)
{
	uint32_t n = (uint32_t)(align_up(bytes ? bytes : 1, ZD_MS_PAGE) / ZD_MS_PAGE);
	uint32_t run = 0;

	for (uint32_t i = 0; i < nic->sh->arena_pages; i++) {
		run = nic->pages[i] ? 0 : run + 1;
		if (run == n) {
			uint32_t first = i + 1 - n;
			uint64_t off = nic->sh->arena_off + (uint64_t)first * ZD_MS_PAGE;

			memset(nic->pages + first, 1, n);
			memset(zd_ms_at(nic->sh, off), 0, (size_t)n * ZD_MS_PAGE);
			return (int64_t)off;
		}
	}
	return -ENOMEM;
}

static void arena_free(struct zd_mlx5sim_nic *nic, uint64_t off, uint64_t bytes)
{
	uint32_t n = (uint32_t)(align_up(bytes ? bytes : 1, ZD_MS_PAGE) / ZD_MS_PAGE);

	memset(nic->pages + (off - nic->sh->arena_off) / ZD_MS_PAGE, 0, n);
}

/* ---- NIC ---- */

int zd_mlx5sim_nic_open(const struct zd_mlx5sim_nic_attr *attr, struct zd_mlx5sim_nic **out)
{
	struct zd_mlx5sim_nic_attr a = attr ? *attr : (struct zd_mlx5sim_nic_attr){ 0 };
	struct zd_mlx5sim_nic *nic;
	struct zd_ms_shared *sh;
	uint64_t off, size;
	int ret;

	a.queue_mem = a.queue_mem ? a.queue_mem : 4u << 20;
	a.max_qp = a.max_qp ? a.max_qp : 256;
	a.max_cq = a.max_cq ? a.max_cq : 256;
	a.max_srq = a.max_srq ? a.max_srq : 64;
	a.max_mr = pow2_up(a.max_mr ? a.max_mr : 4096);
	if (a.max_qp > (1u << 16) || a.max_cq > (1u << 16) || a.max_srq > (1u << 16) ||
	    a.max_mr > (1u << 23) || a.queue_mem > (1ull << 32))
		return -EINVAL;

	nic = calloc(1, sizeof(*nic));
	if (!nic)
		return -ENOMEM;
	off = align_up(sizeof(*sh), ZD_CACHE_LINE);
	uint64_t qp_off = off;
	off = align_up(off + a.max_qp * sizeof(struct zd_ms_qp), ZD_CACHE_LINE);
	uint64_t cq_off = off;
	off = align_up(off + a.max_cq * sizeof(struct zd_ms_cq), ZD_CACHE_LINE);
	uint64_t srq_off = off;
	off = align_up(off + a.max_srq * sizeof(struct zd_ms_srq), ZD_CACHE_LINE);
	uint64_t mr_off = off;
	off = align_up(off + a.max_mr * sizeof(struct zd_ms_mr), ZD_CACHE_LINE);
	uint64_t chunk_off = off;
	off = align_up(off + ZD_MS_CHUNKS * sizeof(struct zd_ms_chunk), ZD_CACHE_LINE);
	uint64_t fired_off = off;
	off = align_up(off + (a.max_cq + 63) / 64 * 8, ZD_MS_PAGE);
	uint64_t arena_off = off;
	size = align_up(off + a.queue_mem, ZD_MS_PAGE);

	nic->fd = memfd_create("zdapl-mlx5sim", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (nic->fd < 0) {
		ret = -errno;
		goto err_free;
	}
	if (ftruncate(nic->fd, (off_t)size) != 0 ||
	    fcntl(nic->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
		ret = -errno;
		goto err_close;
	}
	sh = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, nic->fd, 0);
	if (sh == MAP_FAILED) {
		ret = -errno;
		goto err_close;
	}
	/* Queue memory is never shared with a child (fork safety, as verbs). */
	madvise(sh, size, MADV_DONTFORK);
	nic->sh = sh;
	nic->size = size;
	sh->uid = new_uid();
	sh->size = size;
	sh->pid = getpid();
	sh->max_qp = a.max_qp;
	sh->max_cq = a.max_cq;
	sh->max_srq = a.max_srq;
	sh->max_mr = a.max_mr;
	sh->qp_off = qp_off;
	sh->cq_off = cq_off;
	sh->srq_off = srq_off;
	sh->mr_off = mr_off;
	sh->chunk_off = chunk_off;
	sh->fired_off = fired_off;
	sh->arena_off = arena_off;
	sh->arena_pages = (uint32_t)((size - arena_off) / ZD_MS_PAGE);
	for (uint32_t i = 0; i < a.max_qp; i++)
		atomic_store(&zd_ms_qp_ctx(sh, i)->state, ZD_MS_QP_FREE);
	nic->pages = calloc(sh->arena_pages, 1);
	nic->qpe = calloc(a.max_qp, sizeof(*nic->qpe));
	nic->cq_user = calloc(a.max_cq, sizeof(*nic->cq_user));
	if (!nic->pages || !nic->qpe || !nic->cq_user) {
		ret = -ENOMEM;
		goto err_unmap;
	}
	nic->next_tag = 1;
	nic->debug = getenv("ZDAPL_MLX5SIM_DEBUG") && getenv("ZDAPL_MLX5SIM_DEBUG")[0] == '1';
	pthread_mutex_init(&nic->lock, NULL);
	zd_ms_peers_init(nic);
	/* release: peers check magic last. */
	atomic_store_explicit(&sh->magic, ZD_MS_MAGIC, memory_order_release);
	ret = pthread_create(&nic->engine, NULL, zd_ms_engine_main, nic);
	if (ret) {
		ret = -ret;
		goto err_mutex;
	}
	*out = nic;
	return 0;
err_mutex:
	zd_ms_peers_fini(nic);
	pthread_mutex_destroy(&nic->lock);
err_unmap:
	free(nic->pages);
	free(nic->qpe);
	free(nic->cq_user);
	munmap(sh, size);
err_close:
	close(nic->fd);
err_free:
	free(nic);
	return ret;
}

void zd_mlx5sim_nic_close(struct zd_mlx5sim_nic *nic)
{
	if (!nic)
		return;
	atomic_store(&nic->stop, true);
	pthread_join(nic->engine, NULL);
	for (uint32_t i = 0; i < nic->sh->max_qp; i++) {
		if (atomic_load(&zd_ms_qp_ctx(nic->sh, i)->state) != ZD_MS_QP_FREE)
			zd_mlx5sim_qp_destroy(nic, ZD_MS_QPN_BASE + i);
	}
	zd_ms_peers_fini(nic);
	atomic_store(&nic->sh->magic, 0);
	munmap(nic->sh, nic->size);
	close(nic->fd);
	pthread_mutex_destroy(&nic->lock);
	free(nic->pages);
	free(nic->qpe);
	free(nic->cq_user);
	free(nic);
}

void zd_mlx5sim_nic_stats(struct zd_mlx5sim_nic *nic, struct zd_mlx5sim_stats *st)
{
	st->wqes = atomic_load(&nic->cnt_wqes);
	st->rnr_retries = atomic_load(&nic->cnt_rnr);
	st->wqe_errors = atomic_load(&nic->cnt_err);
	st->bf_checked = atomic_load(&nic->cnt_bf_checked);
	st->bf_mismatch = atomic_load(&nic->cnt_bf_mismatch);
	st->db_order = atomic_load(&nic->cnt_db_order);
	st->cqes = atomic_load(&nic->sh->cnt_cqes);
	st->cq_overrun = atomic_load(&nic->sh->cnt_overrun);
	st->events = atomic_load(&nic->sh->cnt_events);
}

/* ---- PD ---- */

int zd_mlx5sim_pd_alloc(struct zd_mlx5sim_nic *nic, uint32_t *pdn)
{
	int ret = -ENOMEM;

	pthread_mutex_lock(&nic->lock);
	for (uint32_t i = 0; i < ZD_ARRAY_SIZE(nic->pd_used); i++) {
		if (!nic->pd_used[i]) {
			nic->pd_used[i] = 1;
			*pdn = i + 1;
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

bool zd_ms_pd_ok(struct zd_mlx5sim_nic *nic, uint32_t pdn)
{
	return pdn >= 1 && pdn <= ZD_ARRAY_SIZE(nic->pd_used) && nic->pd_used[pdn - 1];
}

int zd_mlx5sim_pd_free(struct zd_mlx5sim_nic *nic, uint32_t pdn)
{
	int ret = 0;

	pthread_mutex_lock(&nic->lock);
	if (!zd_ms_pd_ok(nic, pdn))
		ret = -EINVAL;
	else if (nic->pd_used[pdn - 1] > 1)
		ret = -EBUSY;
	else
		nic->pd_used[pdn - 1] = 0;
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

/* ---- CQs ---- */

int zd_mlx5sim_cq_create(struct zd_mlx5sim_nic *nic, uint32_t cqe_cnt, void *user,
			 struct zd_mlx5_cq_desc *out)
{
	struct zd_ms_shared *sh = nic->sh;
	int64_t buf, aux;
	int ret = -ENOMEM;

	if (cqe_cnt == 0 || cqe_cnt > (1u << 22))
		return -EINVAL;
	cqe_cnt = pow2_up(cqe_cnt < 2 ? 2 : cqe_cnt);
	pthread_mutex_lock(&nic->lock);
	for (uint32_t i = 0; i < sh->max_cq; i++) {
		struct zd_ms_cq *cq = zd_ms_cq_ctx(sh, i);

		if (atomic_load(&cq->live))
			continue;
		buf = arena_alloc(nic, (uint64_t)cqe_cnt * 64);
		if (buf < 0)
			break;
		aux = arena_alloc(nic, ZD_MS_PAGE);
		if (aux < 0) {
			arena_free(nic, (uint64_t)buf, (uint64_t)cqe_cnt * 64);
			break;
		}
		memset(cq, 0, sizeof(*cq));
		cq->cqn = i + 1;
		cq->cqe_cnt = cqe_cnt;
		cq->buf_off = (uint64_t)buf;
		cq->uar_off = (uint64_t)aux;
		cq->db_off = (uint64_t)aux + 0x40;
		/* Every CQE invalid, owner 0: hardware's first pass writes owner 0. */
		for (uint32_t j = 0; j < cqe_cnt; j++) {
			struct mlx5_cqe64 *c = zd_ms_at(sh, (uint64_t)buf + j * 64ull);

			c->op_own = MLX5_CQE_INVALID << 4;
		}
		out->buf = zd_ms_at(sh, (uint64_t)buf);
		out->cqe_cnt = cqe_cnt;
		out->cqe_size = 64;
		out->dbrec = zd_ms_at(sh, cq->db_off);
		out->uar = zd_ms_at(sh, cq->uar_off);
		out->cqn = cq->cqn;
		nic->cq_user[i] = user;
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
		arena_free(nic, cq->buf_off, (uint64_t)cq->cqe_cnt * 64);
		arena_free(nic, cq->uar_off, ZD_MS_PAGE);
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
	uint32_t stride;
	int64_t buf, db;
	int ret = -ENOMEM;

	if (wqe_cnt < 2 || wqe_cnt > (1u << 15) || max_sge == 0 || max_sge > ZD_MS_MAX_SGE)
		return -EINVAL;
	wqe_cnt = pow2_up(wqe_cnt);
	stride = 16 * pow2_up(1 + max_sge);
	pthread_mutex_lock(&nic->lock);
	if (!zd_ms_pd_ok(nic, pdn)) {
		ret = -EINVAL;
		goto out;
	}
	for (uint32_t i = 0; i < sh->max_srq; i++) {
		struct zd_ms_srq *s = zd_ms_srq_ctx(sh, i);

		if (atomic_load(&s->live))
			continue;
		buf = arena_alloc(nic, (uint64_t)wqe_cnt * stride);
		if (buf < 0)
			break;
		db = arena_alloc(nic, ZD_MS_PAGE);
		if (db < 0) {
			arena_free(nic, (uint64_t)buf, (uint64_t)wqe_cnt * stride);
			break;
		}
		memset(s, 0, sizeof(*s));
		s->srqn = i + 1;
		s->pdn = pdn;
		s->wqe_cnt = wqe_cnt;
		s->stride = stride;
		s->buf_off = (uint64_t)buf;
		s->db_off = (uint64_t)db;
		/* The free list as mlx5 creates it: 0 -> 1 -> ... -> cnt-1. */
		for (uint32_t j = 0; j < wqe_cnt; j++) {
			struct mlx5_wqe_srq_next_seg *n = zd_ms_at(sh, (uint64_t)buf + j * stride);

			n->next_wqe_index = htobe16((uint16_t)((j + 1) & (wqe_cnt - 1)));
		}
		atomic_store(&s->hw, 0);
		nic->pd_used[pdn - 1]++;
		out->buf = zd_ms_at(sh, (uint64_t)buf);
		out->wqe_cnt = wqe_cnt;
		out->stride = stride;
		out->dbrec = zd_ms_at(sh, (uint64_t)db);
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
		arena_free(nic, s->buf_off, (uint64_t)s->wqe_cnt * s->stride);
		arena_free(nic, s->db_off, ZD_MS_PAGE);
		nic->pd_used[s->pdn - 1]--;
	}
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

/* ---- QPs ---- */

static struct zd_ms_qp *qp_get(struct zd_mlx5sim_nic *nic, uint32_t qpn)
{
	struct zd_ms_qp *qp;

	if (qpn < ZD_MS_QPN_BASE || qpn - ZD_MS_QPN_BASE >= nic->sh->max_qp)
		return NULL;
	qp = zd_ms_qp_ctx(nic->sh, qpn - ZD_MS_QPN_BASE);
	return atomic_load(&qp->state) != ZD_MS_QP_FREE ? qp : NULL;
}

int zd_mlx5sim_qp_create(struct zd_mlx5sim_nic *nic, const struct zd_mlx5sim_qp_attr *attr,
			 struct zd_mlx5_sq_desc *sq, struct zd_mlx5_rq_desc *rq, uint32_t *qpn)
{
	struct zd_ms_shared *sh = nic->sh;
	struct zd_ms_cq *scq, *rcq;
	struct zd_ms_srq *srq = NULL;
	uint32_t sq_cnt, rq_cnt = 0, rq_stride = 0;
	int64_t sqb = -1, rqb = -1, pg = -1;
	int ret = -ENOMEM;

	if (!attr->sq_wqe_cnt || attr->sq_wqe_cnt > (1u << 15) || attr->rq_wqe_cnt > (1u << 15) ||
	    attr->rq_max_sge > ZD_MS_MAX_SGE)
		return -EINVAL;
	sq_cnt = pow2_up(attr->sq_wqe_cnt);
	if (!attr->srqn) {
		if (!attr->rq_wqe_cnt || !attr->rq_max_sge)
			return -EINVAL;
		rq_cnt = pow2_up(attr->rq_wqe_cnt);
		rq_stride = 16 * pow2_up(attr->rq_max_sge);
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

		if (atomic_load(&qp->state) != ZD_MS_QP_FREE)
			continue;
		sqb = arena_alloc(nic, (uint64_t)sq_cnt * MLX5_SEND_WQE_BB);
		if (rq_cnt)
			rqb = arena_alloc(nic, (uint64_t)rq_cnt * rq_stride);
		pg = arena_alloc(nic, ZD_MS_PAGE);
		if (sqb < 0 || (rq_cnt && rqb < 0) || pg < 0) {
			if (sqb >= 0)
				arena_free(nic, (uint64_t)sqb, (uint64_t)sq_cnt * MLX5_SEND_WQE_BB);
			if (rqb >= 0)
				arena_free(nic, (uint64_t)rqb, (uint64_t)rq_cnt * rq_stride);
			if (pg >= 0)
				arena_free(nic, (uint64_t)pg, ZD_MS_PAGE);
			break;
		}
		memset((char *)qp + sizeof(qp->state), 0, sizeof(*qp) - sizeof(qp->state));
		memset(e, 0, sizeof(*e));
		qp->qpn = ZD_MS_QPN_BASE + i;
		qp->pdn = attr->pdn;
		qp->scqn = attr->send_cqn;
		qp->rcqn = attr->recv_cqn;
		qp->srqn = attr->srqn;
		qp->sq_wqe_cnt = sq_cnt;
		qp->rq_wqe_cnt = rq_cnt;
		qp->rq_stride = rq_stride;
		qp->sq_off = (uint64_t)sqb;
		qp->rq_off = rq_cnt ? (uint64_t)rqb : 0;
		qp->db_off = (uint64_t)pg;
		qp->uar_off = (uint64_t)pg;
		atomic_fetch_add(&scq->users, 1);
		atomic_fetch_add(&rcq->users, 1);
		if (srq)
			atomic_fetch_add(&srq->users, 1);
		nic->pd_used[attr->pdn - 1]++;
		db = zd_ms_at(sh, qp->db_off);
		sq->buf = zd_ms_at(sh, qp->sq_off);
		sq->wqe_cnt = sq_cnt;
		sq->stride = MLX5_SEND_WQE_BB;
		sq->dbrec = &db[MLX5_SND_DBR];
		sq->bf_reg = zd_ms_at(sh, qp->uar_off + ZD_MS_BF_OFFSET);
		sq->bf_size = ZD_MS_BF_SIZE;
		sq->qpn = qp->qpn;
		rq->buf = rq_cnt ? zd_ms_at(sh, qp->rq_off) : NULL;
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
	out->region_fd = nic->fd;
	out->qpn = qpn;
	out->region_size = nic->size;
	return 0;
}

int zd_mlx5sim_qp_connect(struct zd_mlx5sim_nic *nic, uint32_t qpn,
			  const struct zd_mlx5sim_qp_addr *peer)
{
	struct zd_ms_qp *qp;
	struct zd_ms_qpe *e;
	struct zd_ms_peer *p;
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
	e = &nic->qpe[qpn - ZD_MS_QPN_BASE];
	if ((st != ZD_MLX5SIM_QPS_RESET && st != ZD_MLX5SIM_QPS_INIT) || e->peer) {
		ret = -EINVAL;
		goto out;
	}
	pthread_mutex_unlock(&nic->lock);
	p = zd_ms_peer_get(nic, peer);   /* may map: not under the NIC lock */
	pthread_mutex_lock(&nic->lock);
	if (!p) {
		ret = -ENOENT;
		goto out;
	}
	if (peer->qpn < ZD_MS_QPN_BASE || peer->qpn - ZD_MS_QPN_BASE >= p->sh->max_qp ||
	    qp_get(nic, qpn) != qp || e->peer) {
		pthread_mutex_unlock(&nic->lock);
		zd_ms_peer_put(nic, p);
		return -EINVAL;
	}
	e->peer = p;
	e->peer_idx = peer->qpn - ZD_MS_QPN_BASE;
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
			    struct zd_ms_peer **put)
{
	struct zd_ms_qpe *e = &nic->qpe[qp->qpn - ZD_MS_QPN_BASE];
	__be32 *db = zd_ms_at(nic->sh, qp->db_off);
	const uint64_t *bf = zd_ms_at(nic->sh, qp->uar_off + ZD_MS_BF_OFFSET);

	zd_ms_qp_bf_final(nic, qp->qpn - ZD_MS_QPN_BASE);
	*put = e->peer;
	memset(e, 0, sizeof(*e));
	/* Whatever sits in the BlueFlame halves now is old news. */
	e->bf_last[0] = __atomic_load_n(&bf[0], __ATOMIC_RELAXED);
	e->bf_last[1] = __atomic_load_n(&bf[ZD_MS_BF_SIZE / 8], __ATOMIC_RELAXED);
	e->bf_prev_unknown[0] = e->bf_prev_unknown[1] = true;
	atomic_store(&qp->peer_uid, 0);
	atomic_store(&qp->peer_qpn, 0);
	atomic_store(&qp->rq_ci, 0);
	atomic_store(&qp->sq_ci, 0);
	db[MLX5_SND_DBR] = 0;
	db[MLX5_RCV_DBR] = 0;
}

int zd_mlx5sim_qp_modify(struct zd_mlx5sim_nic *nic, uint32_t qpn, enum zd_mlx5sim_qp_state st)
{
	struct zd_ms_peer *put = NULL;
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
	struct zd_ms_peer *put = NULL;
	struct zd_ms_qp *qp;
	struct zd_ms_srq *srq;

	pthread_mutex_lock(&nic->lock);
	qp = qp_get(nic, qpn);
	if (!qp) {
		pthread_mutex_unlock(&nic->lock);
		return -EINVAL;
	}
	/* Peers sending to us see a QP that is not RTR/RTS and fail. */
	atomic_store(&qp->state, ZD_MLX5SIM_QPS_RESET);
	qp_reset_locked(nic, qp, &put);
	atomic_fetch_sub(&cq_get(nic, qp->scqn)->users, 1);
	atomic_fetch_sub(&cq_get(nic, qp->rcqn)->users, 1);
	srq = qp->srqn ? srq_get(nic, qp->srqn) : NULL;
	if (srq)
		atomic_fetch_sub(&srq->users, 1);
	nic->pd_used[qp->pdn - 1]--;
	arena_free(nic, qp->sq_off, (uint64_t)qp->sq_wqe_cnt * MLX5_SEND_WQE_BB);
	if (qp->rq_wqe_cnt)
		arena_free(nic, qp->rq_off, (uint64_t)qp->rq_wqe_cnt * qp->rq_stride);
	arena_free(nic, qp->db_off, ZD_MS_PAGE);
	atomic_store(&qp->state, ZD_MS_QP_FREE);
	nic->qps_live--;
	pthread_mutex_unlock(&nic->lock);
	if (put)
		zd_ms_peer_put(nic, put);
	return 0;
}
