/*
 * The poll path under test without a device: a CQ of the glue
 * (zd_mlx5_cq_obj), the EVD it feeds and one QP listed in the device's QPN
 * table, all in plain memory; the test writes CQEs as the NIC would
 * (cqenv in mlx5_test.h).  Shared by test_mlx5_cq.c and test_mlx5_fast.c.
 */
#ifndef MLX5_POLLENV_H
#define MLX5_POLLENV_H

#include "core/zd_ep.h"
#include "evd/zd_evd.h"
#include "hw/mlx5/zd_mlx5.h"
#include "mlx5_test.h"

struct pollenv {
	struct cqenv ce;
	struct sqenv se;
	struct zd_mlx5_dev *dev;
	struct zd_mlx5_cq_obj *cq;
	struct zd_mlx5_qp *qp;
	struct zd_evd *evd;
	struct zd_ep *ep;
	uint8_t *rqbuf;
	__be32 rqdb;
};

/* A CQ of @cqes entries feeding an EVD ring of @ring_cap, and one QP (QPN)
 * listed in the device's QPN table, with an 8-block SQ (@max_inline bytes
 * inline) and an RQ of @rq_wqes receives. */
static inline void pollenv_init(struct pollenv *p, uint32_t cqes, uint32_t ring_cap,
				uint32_t max_inline, uint32_t rq_wqes)
{
	struct zd_mlx5_rq_desc rd;
	struct zd_mlx5_qp **l2;

	memset(p, 0, sizeof(*p));
	p->dev = calloc(1, sizeof(*p->dev));
	p->cq = alloc64(sizeof(*p->cq));
	p->qp = alloc64(sizeof(*p->qp));
	p->evd = calloc(1, sizeof(*p->evd));
	p->ep = test_ep_new();
	p->rqbuf = alloc64((size_t)rq_wqes * 64);
	cr_assert(p->dev && p->cq && p->qp && p->evd && p->ep && p->rqbuf);
	memset(p->cq, 0, sizeof(*p->cq));
	memset(p->qp, 0, sizeof(*p->qp));
	cqenv_init(&p->ce, cqes, 64);
	memcpy(&p->cq->q, &p->ce.cq, sizeof(p->cq->q));
	p->cq->dev = p->dev;
	p->cq->evd = p->evd;
	p->evd->ring = zd_ring_create(ring_cap);
	p->evd->cq_priv = p->cq;
	sqenv_init(&p->se, 8, 64, max_inline);
	memcpy(&p->qp->sq, &p->se.sq, sizeof(p->qp->sq));
	p->se.sqp = &p->qp->sq;
	rd = (struct zd_mlx5_rq_desc){ .buf = p->rqbuf, .wqe_cnt = rq_wqes, .stride = 64,
				       .dbrec = &p->rqdb };
	cr_assert_eq(zd_mlx5_rq_init(&p->qp->rq, &rd), 0);
	p->qp->ep = p->ep;
	p->qp->qpn = QPN;
	p->qp->dev = p->dev;
	p->qp->max_msg = 1u << 30;
	p->ep->dev_priv = p->qp;
	zd_ep_dto_refresh(p->ep);
	l2 = calloc(ZD_MLX5_QPT_ENTRIES, sizeof(*l2));
	l2[QPN & (ZD_MLX5_QPT_ENTRIES - 1)] = p->qp;
	p->dev->qpt[QPN >> ZD_MLX5_QPT_SHIFT] = l2;
}

/* The next event the poll queued on the EVD, whole: a completion of the
 * QP's EP numbered @number. */
static inline DAT_EVENT pollenv_next_any(struct pollenv *p, DAT_EVENT_NUMBER number)
{
	DAT_EVENT ev;

	cr_assert(zd_ring_dequeue(p->evd->ring, &ev), "an event expected");
	cr_assert_eq(ev.event_number, number);
	cr_assert_eq(ev.evd_handle, p->evd);
	cr_assert_eq(ev.event_data.dto_completion_event_data.ep_handle, p->ep);
	return ev;
}

/* The next event the poll queued on the EVD: a DTO completion of the QP's EP. */
static inline DAT_DTO_COMPLETION_EVENT_DATA pollenv_next_event(struct pollenv *p)
{
	return pollenv_next_any(p, DAT_DTO_COMPLETION_EVENT).event_data.dto_completion_event_data;
}

static inline void pollenv_fini(struct pollenv *p)
{
	for (uint32_t i = 0; i < ZD_MLX5_QPT_ENTRIES; i++)
		free(p->dev->qpt[i]);
	zd_ring_destroy(p->evd->ring);
	zd_mlx5_rq_fini(&p->qp->rq);
	p->se.sqp = &p->se.sq;
	sqenv_fini(&p->se);
	cqenv_fini(&p->ce);
	free(p->rqbuf);
	free(p->ep);
	free(p->evd);
	free(p->qp);
	free(p->cq);
	free(p->dev);
}

#endif
