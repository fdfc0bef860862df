/*
 * SRQ WQEs: next-segment links, the invalid-lkey terminator, the doorbell
 * counter, and relinking of WQEs that complete out of order -- checked on
 * the links themselves, as the device follows them.
 */
#include "mlx5_test.h"

#include "core/zd_ep.h"
#include "core/zd_srq.h"
#include "evd/zd_evd.h"
#include "hw/mlx5/zd_mlx5.h"

struct srqenv {
	uint8_t *buf;
	__be32 db;
	struct zd_mlx5_srq q;
};

/* As mlx5dv creates it: WQE i links to i + 1, head 0, tail cnt - 1. */
static void srqenv_init(struct srqenv *e, uint32_t cnt, uint32_t stride)
{
	struct zd_mlx5_srq_desc d;

	memset(e, 0, sizeof(*e));
	e->buf = alloc64((size_t)cnt * stride);
	cr_assert_not_null(e->buf);
	memset(e->buf, FILL, (size_t)cnt * stride);
	for (uint32_t i = 0; i < cnt; i++)
		((struct mlx5_wqe_srq_next_seg *)(e->buf + (size_t)i * stride))->next_wqe_index =
			htobe16((uint16_t)((i + 1) & (cnt - 1)));
	d = (struct zd_mlx5_srq_desc){ .buf = e->buf, .wqe_cnt = cnt, .stride = stride,
		.dbrec = &e->db, .head = 0, .tail = cnt - 1, .srqn = 3 };
	cr_assert_eq(zd_mlx5_srq_init(&e->q, &d), 0);
}

static void srqenv_fini(struct srqenv *e)
{
	zd_mlx5_srq_fini(&e->q);
	free(e->buf);
}

static uint16_t link_of(struct srqenv *e, uint32_t idx)
{
	return be16toh(zd_mlx5_srq_wqe(&e->q, idx)->next_wqe_index);
}

static DAT_LMR_TRIPLET segs[3] = {
	{ .virtual_address = 0x1000, .segment_length = 10, .lmr_context = 1 },
	{ .virtual_address = 0x2000, .segment_length = 0, .lmr_context = 2 },
	{ .virtual_address = 0x3000, .segment_length = 30, .lmr_context = 3 },
};

Test(mlx5, srq_wqe_layout_and_doorbell)
{
	struct srqenv e;
	struct mlx5_wqe_data_seg *ds;

	srqenv_init(&e, 4, 64);   /* next seg + 3 data segments */
	cr_assert_eq(e.q.max_sge, 3);
	cr_assert(zd_mlx5_srq_post(&e.q, segs, 3, (DAT_DTO_COOKIE){ .as_64 = 1 }));
	ds = (void *)(e.buf + 16);
	/* the zero-length segment is skipped; the terminator follows */
	cr_assert_eq(ds[0].byte_count, htobe32(10));
	cr_assert_eq(ds[0].lkey, htobe32(1));
	cr_assert_eq(ds[0].addr, htobe64(0x1000));
	cr_assert_eq(ds[1].byte_count, htobe32(30));
	cr_assert_eq(ds[1].lkey, htobe32(3));
	cr_assert_eq(ds[2].lkey, htobe32(MLX5_INVALID_LKEY));
	cr_assert_eq(ds[2].byte_count, 0);
	cr_assert_eq(e.db, htobe32(1));
	cr_assert_eq(e.q.head, 1);
	/* three of four WQEs can be posted: the tail one ends the list */
	cr_assert(zd_mlx5_srq_post(&e.q, segs, 1, (DAT_DTO_COOKIE){ .as_64 = 2 }));
	cr_assert(zd_mlx5_srq_post(&e.q, segs, 1, (DAT_DTO_COOKIE){ .as_64 = 3 }));
	cr_assert(!zd_mlx5_srq_post(&e.q, segs, 1, (DAT_DTO_COOKIE){ .as_64 = 4 }), "full");
	cr_assert(!zd_mlx5_srq_post(&e.q, segs, 4, (DAT_DTO_COOKIE){ .as_64 = 4 }), "too many segs");
	cr_assert_eq(e.db, htobe32(3));
	srqenv_fini(&e);
}

Test(mlx5, srq_out_of_order_completions_relink_at_tail)
{
	struct srqenv e;
	uint32_t order[] = { 2, 0, 5, 1 };

	srqenv_init(&e, 8, 32);   /* next seg + 1 data segment */
	for (uint64_t i = 0; i < 7; i++)
		cr_assert(zd_mlx5_srq_post(&e.q, segs, 1, (DAT_DTO_COOKIE){ .as_64 = 100 + i }));
	cr_assert_eq(e.q.head, 7);
	cr_assert_eq(e.q.tail, 7);
	/* completions in the device's order: cookies by WQE index */
	for (int i = 0; i < 4; i++)
		cr_assert_eq(zd_mlx5_srq_complete(&e.q, (uint16_t)order[i]).as_64, 100 + order[i]);
	/* the next post links them after the old tail, in completion order,
	 * then takes the head (the old tail) */
	cr_assert(zd_mlx5_srq_post(&e.q, segs, 1, (DAT_DTO_COOKIE){ .as_64 = 200 }));
	cr_assert_eq(link_of(&e, 7), 2);
	cr_assert_eq(link_of(&e, 2), 0);
	cr_assert_eq(link_of(&e, 0), 5);
	cr_assert_eq(link_of(&e, 5), 1);
	cr_assert_eq(e.q.tail, 1);
	cr_assert_eq(e.q.head, 2, "WQE 7 posted, head follows its link to 2");
	cr_assert_eq(e.q.cookie[7].as_64, 200);
	/* 2, 0, 5 can be posted; 1 ends the list */
	for (int i = 0; i < 3; i++)
		cr_assert(zd_mlx5_srq_post(&e.q, segs, 1, (DAT_DTO_COOKIE){ .as_64 = 300 + i }));
	cr_assert_eq(e.q.cookie[2].as_64, 300);
	cr_assert_eq(e.q.cookie[0].as_64, 301);
	cr_assert_eq(e.q.cookie[5].as_64, 302);
	cr_assert(!zd_mlx5_srq_post(&e.q, segs, 1, (DAT_DTO_COOKIE){ .as_64 = 9 }));
	cr_assert_eq(e.db, htobe32(11));
	srqenv_fini(&e);
}

Test(mlx5, srq_random_completion_order_never_loses_a_wqe)
{
	struct srqenv e;
	uint32_t posted[8], nposted = 0;
	unsigned seed = 7;
	uint64_t next = 0, done = 0;

	srqenv_init(&e, 8, 32);
	for (int it = 0; it < 20000; it++) {
		if (rand_r(&seed) % 2) {
			uint32_t idx = e.q.head;

			if (zd_mlx5_srq_post(&e.q, segs, 1, (DAT_DTO_COOKIE){ .as_64 = next })) {
				cr_assert_lt(nposted, 7u, "more than wqe_cnt - 1 posted");
				posted[nposted++] = idx;
				next++;
			} else {
				cr_assert_eq(nposted, 7u, "refused with room left");
			}
		} else if (nposted) {
			uint32_t k = (uint32_t)rand_r(&seed) % nposted;
			uint32_t idx = posted[k];

			zd_mlx5_srq_complete(&e.q, (uint16_t)idx);
			posted[k] = posted[--nposted];
			done++;
		}
		/* the free list from head reaches tail over distinct WQEs */
		{
			uint32_t seen = 0, i = e.q.head, steps = 0;

			zd_mlx5_srq_relink(&e.q);
			for (; i != e.q.tail && steps < 8; steps++) {
				cr_assert(!(seen & (1u << i)), "free list loops");
				seen |= 1u << i;
				i = link_of(&e, i);
			}
			cr_assert_eq(i, e.q.tail, "free list broken");
			cr_assert_eq(steps + nposted + 1, 8u, "a WQE went missing");
		}
	}
	cr_assert_gt(done, 1000);
	srqenv_fini(&e);
}

/* The device's cq_poll finds SRQ receives by WQE index and frees them. */
Test(mlx5, poll_srq_receives_by_wqe_index)
{
	struct srqenv se;
	struct cqenv ce;
	struct zd_mlx5_dev *dev = calloc(1, sizeof(*dev));
	struct zd_mlx5_cq_obj *cq = alloc64(sizeof(*cq));
	struct zd_mlx5_qp *qp = alloc64(sizeof(*qp));
	struct zd_mlx5_srq_obj *so = alloc64(sizeof(*so));
	struct zd_evd *evd = calloc(1, sizeof(*evd));
	struct zd_ep *ep = test_ep_new();
	struct zd_srq *srq = calloc(1, sizeof(*srq));
	struct zd_mlx5_qp **l2 = calloc(ZD_MLX5_QPT_ENTRIES, sizeof(*l2));
	uint32_t order[] = { 3, 1, 0, 2 };
	DAT_EVENT ev;

	cr_assert(dev && cq && qp && so && evd && ep && srq && l2);
	memset(cq, 0, sizeof(*cq));
	memset(qp, 0, sizeof(*qp));
	memset(so, 0, sizeof(*so));
	srqenv_init(&se, 8, 32);
	memcpy(&so->q, &se.q, sizeof(so->q));
	srq->dev_priv = so;
	cqenv_init(&ce, 4, 64);
	memcpy(&cq->q, &ce.cq, sizeof(cq->q));
	cq->dev = dev;
	cq->evd = evd;
	evd->ring = zd_ring_create(16);
	evd->cq_priv = cq;
	qp->ep = ep;
	qp->srq = so;
	qp->qpn = QPN;
	l2[QPN & (ZD_MLX5_QPT_ENTRIES - 1)] = qp;
	dev->qpt[QPN >> ZD_MLX5_QPT_SHIFT] = l2;

	for (uint64_t i = 0; i < 4; i++)
		cr_assert_eq(zd_mlx5_srq_post_recv(srq, 1, segs, (DAT_DTO_COOKIE){ .as_64 = 50 + i }),
			     DAT_SUCCESS);
	for (int i = 0; i < 4; i++) {
		struct mlx5_cqe64 *c = hw_cqe(&ce, MLX5_CQE_RESP_SEND, QPN, (uint16_t)order[i],
					      5 + (uint32_t)i, 0, i == 1);

		c->srqn_uidx = htobe32(3);
	}
	cr_assert_eq(zd_mlx5_cq_poll(evd, 16), 4);
	for (int i = 0; i < 4; i++) {
		cr_assert(zd_ring_dequeue(evd->ring, &ev));
		cr_assert_eq(ev.event_data.dto_completion_event_data.user_cookie.as_64, 50 + order[i]);
		cr_assert_eq(ev.event_data.dto_completion_event_data.transfered_length, 5 + (uint32_t)i);
		cr_assert_eq(ev.event_data.dto_completion_event_data.ep_handle, ep);
		cr_assert_eq(zd_evd_ev_notifies(&ev, true), i == 1, "solicited mark of CQE %d", i);
	}
	/* the next post relinks 3, 1, 0, 2 after the old tail 7 */
	cr_assert_eq(zd_mlx5_srq_post_recv(srq, 1, segs, (DAT_DTO_COOKIE){ .as_64 = 60 }),
		     DAT_SUCCESS);
	cr_assert_eq(be16toh(zd_mlx5_srq_wqe(&so->q, 7)->next_wqe_index), 3);
	cr_assert_eq(be16toh(zd_mlx5_srq_wqe(&so->q, 3)->next_wqe_index), 1);
	cr_assert_eq(be16toh(zd_mlx5_srq_wqe(&so->q, 1)->next_wqe_index), 0);
	cr_assert_eq(be16toh(zd_mlx5_srq_wqe(&so->q, 0)->next_wqe_index), 2);

	zd_ring_destroy(evd->ring);
	zd_mlx5_srq_fini(&so->q);
	free(se.buf);
	cqenv_fini(&ce);
	free(l2);
	free(srq);
	free(ep);
	free(evd);
	free(so);
	free(qp);
	free(cq);
	free(dev);
}
