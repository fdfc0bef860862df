/*
 * The mlx5 device glue over a mock backend whose queues are plain memory:
 * IA open/close, PZ -> PD, memory keys swapped for the device's, CQ and QP
 * creation from descriptors, posts and polls end to end (the test plays
 * the device by writing CQEs), reset keeping the old QP's flush CQEs
 * reportable, destroy, arming and completion events.
 *
 * It also shows a backend author what each call must fill.
 */
#include "mlx5_test.h"

#include <stdatomic.h>
#include <unistd.h>

#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "core/zd_keys.h"
#include "core/zd_mem_objs.h"
#include "core/zd_srq.h"
#include "evd/zd_evd.h"
#include "hw/mlx5/zd_mlx5.h"
#include "mem/zd_keytab.h"

/* ---- the mock backend ---- */

struct mock_cq {
	struct cqenv env;
	void *ctx;
};

struct mock_qp {
	uint8_t *sq, *rq, *bf;
	__be32 dbrec[2];
	uint32_t qpn;
	int state;                    /* 0 created, 1 connected, 2 error */
};

static struct mock {
	int pds, mrs, cqs, qps, srqs;
	int qp_destroyed, to_error;
	uint32_t next_qpn, next_key;
	_Atomic int event_pending;
	void *event_cq;
	int opened, closed;
} m;

static DAT_RETURN mock_open(const struct zd_ia_params *p, void **ctx, struct zd_mlx5_caps *caps,
			    struct sockaddr_in *addr)
{
	if (p->nargs != 0)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	memset(caps, 0, sizeof(*caps));
	caps->max_qp_wr = 64;
	caps->max_sge = 4;
	caps->max_inline = 64;
	addr->sin_family = AF_INET;
	*ctx = &m;
	m.opened++;
	m.next_qpn = 0x100;
	m.next_key = 0x5000;
	return DAT_SUCCESS;
}

static void mock_close(void *ctx)
{
	m.closed++;
}

static int mock_event_wait(void *ctx, int ms)
{
	if (atomic_load(&m.event_pending))
		return 1;
	usleep(1000);
	return 0;
}

static int mock_event_get(void *ctx, void **cq_ctx)
{
	if (!atomic_exchange(&m.event_pending, 0))
		return 0;
	*cq_ctx = m.event_cq;
	return 1;
}

static DAT_RETURN mock_pd_alloc(void *ctx, void **pd)
{
	*pd = malloc(1);
	m.pds++;
	return DAT_SUCCESS;
}

static void mock_pd_free(void *ctx, void *pd)
{
	free(pd);
	m.pds--;
}

static DAT_RETURN mock_mr_reg(void *ctx, void *pd, uint64_t addr, uint64_t len,
			      DAT_MEM_PRIV_FLAGS priv, void **mr, uint32_t *lkey, uint32_t *rkey)
{
	*mr = malloc(1);
	*lkey = m.next_key++;
	*rkey = m.next_key++;
	m.mrs++;
	return DAT_SUCCESS;
}

static void mock_mr_dereg(void *ctx, void *mr)
{
	free(mr);
	m.mrs--;
}

static DAT_RETURN mock_cq_create(void *ctx, uint32_t min_cqe, void *cq_ctx, void **out,
				 struct zd_mlx5_cq_desc *d)
{
	struct mock_cq *c = calloc(1, sizeof(*c));
	uint32_t n = 4;

	while (n < min_cqe)
		n <<= 1;
	cqenv_init(&c->env, n, 64);
	c->ctx = cq_ctx;
	*d = (struct zd_mlx5_cq_desc){ .buf = c->env.buf, .cqe_cnt = n, .cqe_size = 64,
		.dbrec = c->env.dbrec, .uar = c->env.uar, .cqn = (uint32_t)++m.cqs };
	*out = c;
	return DAT_SUCCESS;
}

static void mock_cq_destroy(void *ctx, void *cq)
{
	struct mock_cq *c = cq;

	cqenv_fini(&c->env);
	free(c);
	m.cqs--;
}

static DAT_RETURN mock_qp_create(void *ctx, const struct zd_mlx5_qp_init *init, void **out,
				 struct zd_mlx5_sq_desc *sq, struct zd_mlx5_rq_desc *rq,
				 uint32_t *max_inline)
{
	struct mock_qp *q = calloc(1, sizeof(*q));

	cr_assert(init->pd && init->send_cq && init->recv_cq);
	q->sq = alloc64(16 * 64);
	q->rq = alloc64(16 * 64);
	q->bf = alloc64(512);
	q->qpn = m.next_qpn++;
	*sq = (struct zd_mlx5_sq_desc){ .buf = q->sq, .wqe_cnt = 16, .stride = 64,
		.dbrec = &q->dbrec[MLX5_SND_DBR], .bf_reg = q->bf, .bf_size = 256, .qpn = q->qpn };
	*rq = (struct zd_mlx5_rq_desc){ .buf = init->srq ? NULL : q->rq,
		.wqe_cnt = init->srq ? 0 : 16, .stride = 64, .dbrec = &q->dbrec[MLX5_RCV_DBR] };
	*max_inline = init->max_inline;
	*out = q;
	m.qps++;
	return DAT_SUCCESS;
}

static size_t mock_qp_blob(void *ctx, void *qp, void *blob, size_t max)
{
	memcpy(blob, &((struct mock_qp *)qp)->qpn, 4);
	return 4;
}

static DAT_RETURN mock_qp_connect(void *ctx, void *qp, const void *peer, size_t len)
{
	if (len != 4)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	((struct mock_qp *)qp)->state = 1;
	return DAT_SUCCESS;
}

static void mock_qp_to_error(void *ctx, void *qp)
{
	((struct mock_qp *)qp)->state = 2;
	m.to_error++;
}

static void mock_qp_destroy(void *ctx, void *qp)
{
	struct mock_qp *q = qp;

	free(q->sq);
	free(q->rq);
	free(q->bf);
	free(q);
	m.qps--;
	m.qp_destroyed++;
}

static const struct zd_mlx5_backend mock_be = {
	.open = mock_open, .close = mock_close,
	.event_wait = mock_event_wait, .event_get = mock_event_get,
	.pd_alloc = mock_pd_alloc, .pd_free = mock_pd_free,
	.mr_reg = mock_mr_reg, .mr_dereg = mock_mr_dereg,
	.cq_create = mock_cq_create, .cq_destroy = mock_cq_destroy,
	.qp_create = mock_qp_create, .qp_blob = mock_qp_blob, .qp_connect = mock_qp_connect,
	.qp_to_error = mock_qp_to_error, .qp_destroy = mock_qp_destroy,
};

/* ---- core objects, by hand (the glue only reads their fields) ---- */

struct world {
	struct zd_ia ia;
	struct zd_pz pz;
	struct zd_lmr lmr;
	struct zd_evd evd;
	struct zd_ep ep;
	uint8_t mem[4096];
};

static struct zd_mlx5_cq_obj *world_cq(struct world *w)
{
	return w->evd.cq_priv;
}

static struct mock_cq *mock_cq_of(struct world *w)
{
	return world_cq(w)->bcq;
}

static void world_open(struct world *w)
{
	struct zd_ia_params p = { .device = "mock", .nargs = 0 };

	memset(w, 0, sizeof(*w));
	memset(&m, 0, sizeof(m));
	w->ia.obj.ia = &w->ia;
	cr_assert_eq(zd_keys_init(&w->ia), 0);
	cr_assert_eq(zd_mlx5_ia_open(&w->ia, &p, &mock_be), DAT_SUCCESS);
	cr_assert_eq(w->ia.limits.max_iov_segments, 4);
	cr_assert_eq(w->ia.limits.max_dto_per_ep, 64);
	w->pz.obj.ia = &w->ia;
	cr_assert_eq(zd_mlx5_pz_create(&w->pz), DAT_SUCCESS);
	cr_assert_eq(m.pds, 1);
	w->evd.obj.ia = &w->ia;
	w->evd.ring = zd_ring_create(64);
	cr_assert_eq(zd_waiter_init(&w->evd.waiter, 0), 0);
	cr_assert_eq(zd_mlx5_cq_create(&w->evd, 8), DAT_SUCCESS);
	cr_assert(w->evd.marks_solicited);
	w->ep.obj.ia = &w->ia;
	w->ep.pz = &w->pz;
	w->ep.recv_evd = w->ep.request_evd = &w->evd;
	w->ep.attr.max_request_dtos = 8;
	w->ep.attr.max_recv_dtos = 8;
	w->ep.attr.max_request_iov = 2;
	w->ep.attr.max_recv_iov = 2;
	cr_assert_eq(zd_mlx5_qp_create(&w->ep), DAT_SUCCESS);
}

static void world_close(struct world *w)
{
	zd_mlx5_qp_destroy(&w->ep);
	cr_assert_eq(m.qps, 0, "every backend QP destroyed");
	zd_mlx5_cq_destroy(&w->evd);
	zd_ring_destroy(w->evd.ring);
	zd_mlx5_pz_destroy(&w->pz);
	cr_assert_eq(m.pds, 0);
	zd_mlx5_ia_close(&w->ia);
	cr_assert_eq(m.closed, 1);
	cr_assert_eq(m.cqs, 0);
	zd_keys_fini(&w->ia);
}

static uint32_t qpn_of(struct world *w)
{
	return ((struct zd_mlx5_qp *)w->ep.dev_priv)->qpn;
}

static DAT_DTO_COMPLETION_EVENT_DATA take(struct world *w)
{
	DAT_EVENT ev;

	cr_assert(zd_ring_dequeue(w->evd.ring, &ev), "an event expected");
	cr_assert_eq(ev.event_data.dto_completion_event_data.ep_handle, &w->ep);
	return ev.event_data.dto_completion_event_data;
}

static void *key_owner(struct world *w, uint32_t key)
{
	void *o;

	zd_keytab_read_lock();
	o = zd_keytab_lookup(w->ia.keys, key);
	zd_keytab_read_unlock();
	return o;
}

Test(mlx5, glue_mr_keys_are_the_devices)
{
	struct world w;
	uint32_t core_l, core_r;

	world_open(&w);
	w.lmr.obj.ia = &w.ia;
	w.lmr.pz = &w.pz;
	w.lmr.addr = (uintptr_t)w.mem;
	w.lmr.length = sizeof(w.mem);
	w.lmr.priv = DAT_MEM_PRIV_ALL_FLAG;
	cr_assert_eq(zd_keys_assign(&w.ia, &w.lmr.obj, &w.lmr.lkey, &w.lmr.rkey), DAT_SUCCESS);
	core_l = w.lmr.lkey;
	core_r = w.lmr.rkey;
	cr_assert_eq(zd_mlx5_mr_register(&w.ia, &w.lmr), DAT_SUCCESS);
	cr_assert_eq(w.lmr.lkey, 0x5000);
	cr_assert_eq(w.lmr.rkey, 0x5001);
	/* core finds the LMR by the context the consumer holds */
	cr_assert_eq(key_owner(&w, 0x5000), &w.lmr.obj);
	cr_assert_eq(key_owner(&w, 0x5001), &w.lmr.obj);
	cr_assert_null(key_owner(&w, core_l), "core's key no longer names it");
	zd_mlx5_mr_deregister(&w.ia, &w.lmr);
	cr_assert_eq(m.mrs, 0);
	cr_assert_eq(w.lmr.lkey, core_l, "core's keys back for zd_keys_remove");
	cr_assert_eq(w.lmr.rkey, core_r);
	cr_assert_null(key_owner(&w, 0x5000));
	cr_assert_eq(key_owner(&w, core_l), &w.lmr.obj);
	zd_keys_remove(&w.ia, w.lmr.lkey, w.lmr.rkey);
	world_close(&w);
}

/* An LMR of @w's PZ over [addr, addr + len) with @priv, registered. */
static void lmr_reg(struct world *w, struct zd_lmr *l, void *addr, size_t len,
		    DAT_MEM_PRIV_FLAGS priv)
{
	memset(l, 0, sizeof(*l));
	l->obj.ia = &w->ia;
	l->pz = &w->pz;
	l->addr = (uintptr_t)addr;
	l->length = len;
	l->priv = priv;
	cr_assert_eq(zd_keys_assign(&w->ia, &l->obj, &l->lkey, &l->rkey), DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_mr_register(&w->ia, l), DAT_SUCCESS);
}

static void lmr_dereg(struct world *w, struct zd_lmr *l)
{
	zd_mlx5_mr_deregister(&w->ia, l);
	zd_keys_remove(&w->ia, l->lkey, l->rkey);
}

/* The registration cache: the same range, PZ and privileges share one
 * backend MR and its keys until the last LMR goes; anything else differs. */
Test(mlx5, glue_registration_cache)
{
	struct world w;
	struct zd_lmr a, b, c, d;

	world_open(&w);
	lmr_reg(&w, &a, w.mem, 1024, DAT_MEM_PRIV_ALL_FLAG);
	lmr_reg(&w, &b, w.mem, 1024, DAT_MEM_PRIV_ALL_FLAG);
	cr_assert_eq(m.mrs, 1, "a second registration of the range is a cache hit");
	cr_assert_eq(b.lkey, a.lkey);
	cr_assert_eq(b.rkey, a.rkey);
	/* another length, other privileges: registrations of their own */
	lmr_reg(&w, &c, w.mem, 512, DAT_MEM_PRIV_ALL_FLAG);
	lmr_reg(&w, &d, w.mem, 1024, DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_REMOTE_READ_FLAG);
	cr_assert_eq(m.mrs, 3);
	cr_assert_neq(c.lkey, a.lkey);
	cr_assert_neq(d.rkey, a.rkey);
	/* the shared keys name a live LMR of the range through every free */
	cr_assert_eq(key_owner(&w, a.lkey), &a.obj);
	lmr_dereg(&w, &a);
	cr_assert_eq(m.mrs, 3, "b still uses the MR");
	cr_assert_eq(key_owner(&w, b.lkey), &b.obj);
	cr_assert_eq(key_owner(&w, b.rkey), &b.obj);
	lmr_dereg(&w, &b);
	cr_assert_eq(m.mrs, 2, "the last LMR of the range took its MR");
	cr_assert_null(key_owner(&w, b.lkey));
	lmr_dereg(&w, &c);
	lmr_dereg(&w, &d);
	cr_assert_eq(m.mrs, 0);
	world_close(&w);
}

Test(mlx5, glue_post_poll_end_to_end)
{
	struct world w;
	struct mock_cq *c;
	DAT_LMR_TRIPLET iov = { .virtual_address = 0x1000, .segment_length = 300, .lmr_context = 9 };
	DAT_RMR_TRIPLET r = { .virtual_address = 0x2000, .rmr_context = 10 };
	DAT_DTO_COMPLETION_EVENT_DATA d;
	uint8_t blob[ZD_QP_BLOB_MAX];

	world_open(&w);
	c = mock_cq_of(&w);
	cr_assert_eq(zd_mlx5_qp_local_blob(&w.ep, blob, sizeof(blob)), 4);
	cr_assert_eq(zd_mlx5_qp_connect(&w.ep, blob, 4), DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_post_recv(&w.ep, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 1 }, 0), DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_post_rdma_write(&w.ep, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 2 }, &r, 0),
		     DAT_SUCCESS);
	hw_cqe(&c->env, MLX5_CQE_RESP_SEND, qpn_of(&w), 0, 44, 0, 0);
	hw_cqe(&c->env, MLX5_CQE_REQ, qpn_of(&w), 0, 0, 0, 0);
	cr_assert_eq(zd_mlx5_cq_poll(&w.evd, 64), 2);
	d = take(&w);
	cr_assert_eq(d.user_cookie.as_64, 1);
	cr_assert_eq(d.transfered_length, 44);
	d = take(&w);
	cr_assert_eq(d.user_cookie.as_64, 2);
	cr_assert_eq(d.operation, DAT_DTO_RDMA_WRITE);
	cr_assert_eq(d.transfered_length, 300);
	world_close(&w);
}

Test(mlx5, glue_reset_keeps_old_flushes_reportable)
{
	struct world w;
	struct mock_cq *c;
	DAT_LMR_TRIPLET iov = { .virtual_address = 0x1000, .segment_length = 300, .lmr_context = 9 };
	uint32_t old_qpn;

	world_open(&w);
	c = mock_cq_of(&w);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(zd_mlx5_post_recv(&w.ep, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 10 + i }, 0),
			     DAT_SUCCESS);
	zd_mlx5_qp_flush(&w.ep);
	cr_assert_eq(m.to_error, 1);
	old_qpn = qpn_of(&w);
	/* reset before the flush CQEs were polled: a new QP, the old kept */
	cr_assert_eq(zd_mlx5_qp_reset(&w.ep), DAT_SUCCESS);
	cr_assert_neq(qpn_of(&w), old_qpn);
	cr_assert_eq(m.qps, 2);
	for (int i = 0; i < 3; i++)
		hw_cqe(&c->env, MLX5_CQE_RESP_ERR, old_qpn, 0, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR, 0);
	cr_assert_eq(zd_mlx5_cq_poll(&w.evd, 64), 3);
	for (int i = 0; i < 3; i++) {
		DAT_DTO_COMPLETION_EVENT_DATA d = take(&w);

		cr_assert_eq(d.user_cookie.as_64, 10 + (uint64_t)i);
		cr_assert_eq(d.status, DAT_DTO_ERR_FLUSHED);
	}
	/* the new QP starts from index 0 */
	cr_assert_eq(zd_mlx5_post_recv(&w.ep, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 20 }, 0), DAT_SUCCESS);
	hw_cqe(&c->env, MLX5_CQE_RESP_SEND, qpn_of(&w), 0, 5, 0, 0);
	cr_assert_eq(zd_mlx5_cq_poll(&w.evd, 64), 1);
	cr_assert_eq(take(&w).user_cookie.as_64, 20);
	/* the drained old QP goes at the next reset */
	cr_assert_eq(zd_mlx5_qp_reset(&w.ep), DAT_SUCCESS);
	cr_assert_eq(m.qps, 1, "drained incarnations freed, the newest kept");
	cr_assert_eq(m.qp_destroyed, 2);
	/* CQEs of a destroyed QP are dropped */
	hw_cqe(&c->env, MLX5_CQE_RESP_SEND, old_qpn, 0, 5, 0, 0);
	cr_assert_eq(zd_mlx5_cq_poll(&w.evd, 64), 0);
	cr_assert_eq(world_cq(&w)->q.ci, 5, "consumed nonetheless");
	world_close(&w);
}

Test(mlx5, glue_arm_and_completion_event)
{
	struct world w;
	struct zd_mlx5_cq_obj *cq;
	uint32_t word[2];

	world_open(&w);
	cq = world_cq(&w);
	zd_mlx5_cq_arm_op(&w.evd);
	cr_assert(atomic_load(&((struct zd_mlx5_dev *)w.ia.dev_priv)->waker_running));
	memcpy(word, (uint8_t *)cq->q.uar + MLX5_CQ_DOORBELL, 8);
	cr_assert_eq(be32toh(word[0]) >> 28, 0, "first arm: sequence 0");
	/* the device fires: the event thread takes it and moves arm_sn */
	m.event_cq = cq;
	atomic_store(&m.event_pending, 1);
	for (int i = 0; i < 2000 && atomic_load(&cq->q.arm_sn) == 0; i++)
		usleep(1000);
	cr_assert_eq(atomic_load(&cq->q.arm_sn), 1);
	zd_mlx5_cq_arm_op(&w.evd);
	memcpy(word, (uint8_t *)cq->q.uar + MLX5_CQ_DOORBELL, 8);
	cr_assert_eq(be32toh(word[0]) >> 28, 1, "second arm: sequence 1");
	world_close(&w);
}
