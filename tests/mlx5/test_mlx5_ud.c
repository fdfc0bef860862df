/*
 * The mlx5 data path's unreliable datagrams without a device: address
 * handles over a made-up backend, the UD SEND WQE byte for byte against
 * the one mlx5dv.h's own helpers build (ctrl, mlx5dv_set_dgram_seg, data
 * segments) under every completion flag and across the end of tiny rings,
 * and the UD completions the poll makes of hand-written CQEs.
 */
#include "core/zd_ia.h"
#include "evd/zd_dto_event.h"
#include "mlx5_pollenv.h"

#define RQPN 0x0c0ffeu
#define QKEY 0x6543210fu

static uint8_t data[4096];

static DAT_LMR_TRIPLET seg(uint32_t off, uint32_t len, uint32_t lkey)
{
	return (DAT_LMR_TRIPLET){ .virtual_address = (uintptr_t)(data + off),
				  .segment_length = len, .lmr_context = lkey };
}

/* ---- a backend whose address handles are made up ---- */

static struct mlx5_wqe_av made_av;
static int destroyed;

/* @peer: the remote QPN and Q_Key, 4 bytes each. */
static DAT_RETURN fake_ah_create(void *ctx, const void *peer, size_t len, struct mlx5_wqe_av *av,
				 uint32_t *qpn, uint32_t *qkey, void **ah)
{
	(void)ctx;
	if (len != 8)
		return DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_MALFORMED);
	memcpy(qpn, peer, 4);
	memcpy(qkey, (const uint8_t *)peer + 4, 4);
	*av = made_av;
	*ah = &made_av;
	return DAT_SUCCESS;
}

static void fake_ah_destroy(void *ctx, void *ah)
{
	(void)ctx;
	cr_assert_eq(ah, &made_av);
	destroyed++;
}

static const struct zd_mlx5_backend fake_be = {
	.ah_create = fake_ah_create,
	.ah_destroy = fake_ah_destroy,
};

static struct zd_ia *ia_over(struct zd_mlx5_dev *dev, const struct zd_mlx5_backend *be)
{
	struct zd_ia *ia = calloc(1, sizeof(*ia));

	cr_assert(ia);
	dev->be = be;
	ia->dev_priv = dev;
	return ia;
}

/* An AV as an ibv_ah's: GRH, a GID, a LID, SL and rate. */
static void make_av(void)
{
	memset(&made_av, 0, sizeof(made_av));
	made_av.stat_rate_sl = 0x23;
	made_av.fl_mlid = 0x05;
	made_av.rlid = htobe16(0x1234);
	made_av.tclass = 0x40;
	made_av.hop_limit = 64;
	made_av.grh_gid_fl = htobe32(1u << 30 | 3u << 20 | 0x12345);
	for (int i = 0; i < 16; i++)
		made_av.rgid[i] = (uint8_t)(0xf0 + i);
}

/* core's ZD_UD_AH_BYTES for one remote QP */
static void ah_make(struct zd_ia *ia, uint8_t ah[ZD_UD_AH_BYTES])
{
	uint8_t blob[8];
	uint32_t q = RQPN, k = QKEY, qpn = 0;

	memcpy(blob, &q, 4);
	memcpy(blob + 4, &k, 4);
	cr_assert_eq(zd_mlx5_ud_ah_create(ia, blob, sizeof(blob), ah, &qpn), DAT_SUCCESS);
	cr_assert_eq(qpn, RQPN);
}

Test(mlx5_ud, address_handles)
{
	struct zd_mlx5_dev dev = { 0 };
	struct zd_ia *ia = ia_over(&dev, &fake_be);
	alignas(8) uint8_t ah[ZD_UD_AH_BYTES];
	const struct mlx5_wqe_av *av = (const void *)ah;
	struct zd_mlx5_backend none = { 0 };
	uint32_t qpn = 0;

	make_av();
	ah_make(ia, ah);
	/* the backend's AV, completed as rdma-core completes it per WQE */
	cr_assert_eq(be32toh(av->dqp_dct), RQPN | MLX5_EXTENDED_UD_AV);
	cr_assert_eq(be32toh(av->key.qkey.qkey), QKEY);
	cr_assert_eq(av->key.qkey.reserved, 0);
	cr_assert_eq(memcmp(&av->stat_rate_sl, &made_av.stat_rate_sl,
			    sizeof(made_av) - offsetof(struct mlx5_wqe_av, stat_rate_sl)), 0);
	zd_mlx5_ud_ah_destroy(ia, ah);
	cr_assert_eq(destroyed, 1);
	/* a blob the backend cannot use: its error */
	cr_assert_eq(zd_mlx5_ud_ah_create(ia, "abc", 3, ah, &qpn),
		     DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_MALFORMED));
	/* a backend without UD */
	dev.be = &none;
	cr_assert_eq(zd_mlx5_ud_ah_create(ia, "abcdefgh", 8, ah, &qpn),
		     DAT_ERROR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE));
	free(ia);
}

/* ---- the WQE ---- */

/* The reference UD SEND WQE with mlx5dv.h's helpers, laid into @e's
 * reference ring at ref_pi; returns its WQEBBs. */
static uint32_t ref_ud(struct sqenv *e, const DAT_LMR_TRIPLET *iov, uint32_t n, uint8_t fm)
{
	uint8_t lin[1024];
	uint8_t *p = lin + sizeof(struct mlx5_wqe_ctrl_seg) + sizeof(struct mlx5_wqe_datagram_seg);
	uint32_t ds = 4, nbb;
	size_t ring = (size_t)e->wqe_cnt * 64, off = (size_t)(e->ref_pi & (e->wqe_cnt - 1)) * 64;

	mlx5dv_set_dgram_seg((void *)(lin + 16), (uint64_t)QKEY << 32, RQPN, 1,
			     made_av.stat_rate_sl, made_av.fl_mlid, be16toh(made_av.rlid),
			     made_av.rmac, made_av.tclass, made_av.hop_limit,
			     be32toh(made_av.grh_gid_fl), made_av.rgid);
	for (uint32_t i = 0; i < n; i++) {
		if (!iov[i].segment_length)
			continue;
		mlx5dv_set_data_seg((void *)p, iov[i].segment_length, iov[i].lmr_context,
				    iov[i].virtual_address);
		p += 16;
		ds++;
	}
	mlx5dv_set_ctrl_seg((void *)lin, (uint16_t)e->ref_pi, MLX5_OPCODE_SEND, 0, QPN, fm,
			    (uint8_t)ds, 0, 0);
	((struct mlx5_wqe_ctrl_seg *)lin)->dci_stream_channel_id = 0;
	for (uint32_t i = 0; i < ds * 16; i++)
		e->ref[(off + i) % ring] = lin[i];
	nbb = (ds * 16 + 63) / 64;
	e->ref_pi += nbb;
	return nbb;
}

static const struct {
	DAT_COMPLETION_FLAGS f, ep;
} flagsets[] = {
	{ DAT_COMPLETION_DEFAULT_FLAG, 0 },
	{ DAT_COMPLETION_SUPPRESS_FLAG, 0 },
	{ DAT_COMPLETION_SOLICITED_WAIT_FLAG, 0 },
	{ DAT_COMPLETION_BARRIER_FENCE_FLAG, 0 },
	{ DAT_COMPLETION_UNSIGNALLED_FLAG, DAT_COMPLETION_UNSIGNALLED_FLAG },
	{ DAT_COMPLETION_UNSIGNALLED_FLAG, 0 },
};

Test(mlx5_ud, wqe_bytes_flags_and_wraparound)
{
	struct zd_mlx5_dev dev = { 0 };
	struct zd_ia *ia = ia_over(&dev, &fake_be);
	alignas(8) uint8_t ah[ZD_UD_AH_BYTES];
	unsigned seed = 7;
	int crossed = 0;

	for (uint32_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 31 + 7);
	make_av();
	ah_make(ia, ah);
	for (uint32_t cnt = 4; cnt <= 8; cnt *= 2) {
		for (uint32_t bf = 0; bf <= 256; bf += 128) {
			struct sqenv e;
			struct zd_mlx5_qp *qp = alloc64(sizeof(*qp));
			struct zd_ep *ep = test_ep_new();

			sqenv_init(&e, cnt, bf, 0);
			sqenv_attach_qp(&e, qp, ep);
			qp->ud = true;
			/* no moderation in the way: its forced CQEs are the RC tests' */
			qp->sq.unsig_max = UINT32_MAX;
			for (int it = 0; it < 300; it++) {
				size_t fs = (size_t)it % (sizeof(flagsets) / sizeof(flagsets[0]));
				DAT_LMR_TRIPLET iov[5];
				uint32_t n = rand_r(&seed) % 6, pi = qp->sq.pi, off0 = zd_mlx5_sq_bf_off(&qp->sq);
				uint32_t total = 0, nbb;
				const struct zd_mlx5_sq_wr *wr;
				bool event;
				uint8_t fm;

				for (uint32_t i = 0; i < n; i++) {
					/* one in four empty: skipped, as a NIC reads 0 as 2 GiB */
					uint32_t len = rand_r(&seed) % 4 ? 1 + rand_r(&seed) % 300 : 0;

					iov[i] = seg(rand_r(&seed) % 3000, len, 0x100 + i);
					total += len;
				}
				if (zd_mlx5_sq_room(&qp->sq) < 3)
					zd_mlx5_sq_retire_to(&qp->sq, qp->sq.pi);
				qp->req_flags = flagsets[fs].ep;
				cr_assert_eq(zd_mlx5_post_send_ud(ep, (DAT_COUNT)n, iov, ah,
								  (DAT_DTO_COOKIE){ .as_64 = (uint64_t)it },
								  flagsets[fs].f),
					     DAT_SUCCESS);
				fm = expect_fm(MLX5_OPCODE_SEND, flagsets[fs].f, flagsets[fs].ep);
				nbb = ref_ud(&e, iov, n, fm);
				cr_assert_eq(qp->sq.pi, pi + nbb);
				cr_assert_eq(memcmp(e.buf, e.ref, (size_t)cnt * 64), 0,
					     "ring %u bf %u iteration %d: WQE bytes differ", cnt, bf, it);
				cr_assert_eq(e.dbrec, htobe32(qp->sq.pi & 0xffff));
				if (nbb * 64 <= bf)
					for (uint32_t b = 0; b < nbb * 64; b++)
						cr_assert_eq(e.bf[off0 + b],
							     e.buf[((pi & (cnt - 1)) * 64 + b) % (cnt * 64)]);
				else
					cr_assert_eq(memcmp(e.bf + off0, e.buf + (pi & (cnt - 1)) * 64,
							    8), 0);
				/* its bookkeeping: an extension op's, never WR_EVENT */
				event = fm & MLX5_WQE_CTRL_CQ_UPDATE;
				wr = &qp->sq.wr[pi & qp->sq.mask];
				cr_assert_eq(wr->cookie.as_64, (uint64_t)it);
				cr_assert_eq(wr->len, total);
				cr_assert_eq(wr->op, DAT_IB_DTO_SEND_UD);
				cr_assert_eq(wr->nbb, nbb);
				cr_assert_eq(wr->flags, ZD_MLX5_WR_EXT |
						       (event ? ZD_MLX5_WR_EXT_EVENT |
								ZD_MLX5_WR_SIGNALED : 0));
				if ((pi & (cnt - 1)) + nbb > cnt)
					crossed++;
			}
			e.sqp = &e.sq;
			sqenv_fini(&e);
			free(qp);
			free(ep);
		}
	}
	cr_assert_gt(crossed, 20, "only %d WQEs crossed the end", crossed);
	free(ia);
}

Test(mlx5_ud, too_many_segments_and_full_ring)
{
	struct zd_mlx5_dev dev = { 0 };
	struct zd_ia *ia = ia_over(&dev, &fake_be);
	alignas(8) uint8_t ah[ZD_UD_AH_BYTES];
	struct sqenv e;
	struct zd_mlx5_qp *qp = alloc64(sizeof(*qp));
	struct zd_ep *ep = test_ep_new();
	DAT_LMR_TRIPLET iov[60];
	DAT_DTO_COOKIE c = { .as_64 = 1 };

	make_av();
	ah_make(ia, ah);
	sqenv_init(&e, 8, 256, 0);
	sqenv_attach_qp(&e, qp, ep);
	qp->ud = true;
	for (int i = 0; i < 60; i++)
		iov[i] = seg((uint32_t)i, 1, 1);
	/* ctrl and the datagram take 4 of the 63 units: 60 segments do not fit */
	cr_assert_eq(zd_mlx5_post_send_ud(ep, 60, iov, ah, c, 0),
		     DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE));
	cr_assert_eq(qp->sq.pi, 0);
	/* 4 two-block WQEs fill 8 blocks; the fifth finds no room */
	for (int i = 0; i < 4; i++)
		cr_assert_eq(zd_mlx5_post_send_ud(ep, 1, iov, ah, c, 0), DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_post_send_ud(ep, 1, iov, ah, c, 0),
		     DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP));
	/* one block left is not enough either */
	zd_mlx5_sq_retire(&qp->sq, 0);
	cr_assert_eq(zd_mlx5_post_send_ud(ep, 1, iov, ah, c, 0), DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_post_send_ud(ep, 0, NULL, ah, c, 0),
		     DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP));
	e.sqp = &e.sq;
	sqenv_fini(&e);
	free(qp);
	free(ep);
	free(ia);
}

/* ---- completions ---- */

static DAT_EVENT next_event(struct pollenv *p)
{
	DAT_EVENT ev;

	cr_assert(zd_ring_dequeue(p->evd->ring, &ev), "an event expected");
	cr_assert_eq(ev.event_number, (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	cr_assert_eq(ev.evd_handle, p->evd);
	cr_assert_eq(ev.event_data.dto_completion_event_data.ep_handle, p->ep);
	return ev;
}

static const DAT_IB_EXTENSION_EVENT_DATA *ext(const DAT_EVENT *ev)
{
	return (const DAT_IB_EXTENSION_EVENT_DATA *)ev->event_extension_data;
}

Test(mlx5_ud, completions)
{
	struct zd_mlx5_dev dev = { 0 };
	struct zd_ia *ia = ia_over(&dev, &fake_be);
	alignas(8) uint8_t ah[ZD_UD_AH_BYTES];
	struct pollenv p;
	DAT_LMR_TRIPLET iov = seg(0, 100, 1);
	const DAT_DTO_COMPLETION_EVENT_DATA *d;
	DAT_EVENT ev;
	struct mlx5_cqe64 *c;

	make_av();
	ah_make(ia, ah);
	pollenv_init(&p, 16, 16, 0, 4);
	p.qp->ud = true;
	/* a send: DAT_IB_DTO_SEND_UD with the payload length */
	cr_assert_eq(zd_mlx5_post_send_ud(p.ep, 1, &iov, ah, (DAT_DTO_COOKIE){ .as_64 = 7 }, 0),
		     DAT_SUCCESS);
	hw_cqe(&p.ce, MLX5_CQE_REQ, QPN, 0, 0, 0, 0);
	cr_assert_eq(zd_mlx5_cq_poll(p.evd, 8), 1);
	ev = next_event(&p);
	d = &ev.event_data.dto_completion_event_data;
	cr_assert_eq(d->operation, (DAT_DTOS)DAT_IB_DTO_SEND_UD);
	cr_assert_eq(d->user_cookie.as_64, 7);
	cr_assert_eq(d->status, DAT_DTO_SUCCESS);
	cr_assert_eq(d->transfered_length, 100);
	cr_assert_eq(ext(&ev)->type, DAT_IB_UD_SEND);
	cr_assert_eq(ext(&ev)->status, DAT_OP_SUCCESS);
	/* suppressed: no event; a CQE for one (moderation signals some)
	 * frees its blocks and those before it */
	cr_assert_eq(zd_mlx5_post_send_ud(p.ep, 1, &iov, ah, (DAT_DTO_COOKIE){ .as_64 = 8 },
					  DAT_COMPLETION_SUPPRESS_FLAG),
		     DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_post_send_ud(p.ep, 1, &iov, ah, (DAT_DTO_COOKIE){ .as_64 = 9 },
					  DAT_COMPLETION_SUPPRESS_FLAG),
		     DAT_SUCCESS);
	hw_cqe(&p.ce, MLX5_CQE_REQ, QPN, 4, 0, 0, 0);
	cr_assert_eq(zd_mlx5_cq_poll(p.evd, 8), 0);
	cr_assert_eq(atomic_load(&p.qp->sq.ci), p.qp->sq.pi);
	/* a send in error reports its status */
	cr_assert_eq(zd_mlx5_post_send_ud(p.ep, 1, &iov, ah, (DAT_DTO_COOKIE){ .as_64 = 10 },
					  DAT_COMPLETION_SUPPRESS_FLAG),
		     DAT_SUCCESS);
	hw_cqe(&p.ce, MLX5_CQE_REQ_ERR, QPN, 6, 0, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, 0);
	cr_assert_eq(zd_mlx5_cq_poll(p.evd, 8), 1);
	ev = next_event(&p);
	d = &ev.event_data.dto_completion_event_data;
	cr_assert_eq(d->operation, (DAT_DTOS)DAT_IB_DTO_SEND_UD);
	cr_assert_eq(d->status, DAT_DTO_ERR_LOCAL_PROTECTION);
	cr_assert_eq(d->transfered_length, 0);
	cr_assert_eq(ext(&ev)->status, DAT_IB_OP_ERR);

	/* receives: RECV_UD with the GRH counted; with immediate data
	 * RECV_UD_IMMED; a receive too small DAT_DTO_ERR_LOCAL_LENGTH */
	for (int i = 0; i < 3; i++)
		cr_assert(zd_mlx5_rq_post(&p.qp->rq, &iov, 1, (DAT_DTO_COOKIE){ .as_64 = 20 + i }));
	hw_cqe(&p.ce, MLX5_CQE_RESP_SEND, QPN, 0, 140, 0, 1);
	c = hw_cqe(&p.ce, MLX5_CQE_RESP_SEND_IMM, QPN, 1, 48, 0, 0);
	c->imm_inval_pkey = htobe32(0xabcd0123);
	hw_cqe(&p.ce, MLX5_CQE_RESP_ERR, QPN, 2, 0, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, 0);
	cr_assert_eq(zd_mlx5_cq_poll(p.evd, 8), 3);
	ev = next_event(&p);
	d = &ev.event_data.dto_completion_event_data;
	cr_assert_eq(d->operation, (DAT_DTOS)DAT_IB_DTO_RECV_UD);
	cr_assert_eq(d->user_cookie.as_64, 20);
	cr_assert_eq(d->transfered_length, 140);
	cr_assert_eq(ext(&ev)->type, DAT_IB_UD_RECV);
	{
		uint32_t mark;

		memcpy(&mark, (const char *)&ev + sizeof(DAT_EVENT_NUMBER), sizeof(mark));
		cr_assert_eq(mark, ZD_EVD_SOLICITED_MAGIC, "the SE bit carried");
	}
	ev = next_event(&p);
	d = &ev.event_data.dto_completion_event_data;
	cr_assert_eq(d->operation, (DAT_DTOS)DAT_IB_DTO_RECV_UD_IMMED);
	cr_assert_eq(d->user_cookie.as_64, 21);
	cr_assert_eq(d->transfered_length, 48);
	cr_assert_eq(ext(&ev)->val.immed.data, 0xabcd0123);
	ev = next_event(&p);
	d = &ev.event_data.dto_completion_event_data;
	cr_assert_eq(d->operation, (DAT_DTOS)DAT_IB_DTO_RECV_UD);
	cr_assert_eq(d->user_cookie.as_64, 22);
	cr_assert_eq(d->status, DAT_DTO_ERR_LOCAL_LENGTH);
	cr_assert_eq(ext(&ev)->status, DAT_IB_OP_ERR);
	cr_assert_not(zd_ring_dequeue(p.evd->ring, &ev));
	pollenv_fini(&p);
	free(ia);
}
