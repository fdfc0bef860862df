/*
 * Helpers of the mlx5 data-path tests: queues over ordinary memory (the
 * BlueFlame register and UAR included), reference WQEs built with
 * mlx5dv.h's own helpers, and hand-built CQEs as a device writes them.
 */
#ifndef MLX5_TEST_H
#define MLX5_TEST_H

#include <criterion/criterion.h>
#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "core/zd_ep.h"
#include "hw/mlx5/zd_mlx5.h"
#include "hw/mlx5/zd_mlx5_cq.h"
#include "hw/mlx5/zd_mlx5_rq.h"
#include "hw/mlx5/zd_mlx5_sq.h"

#define FILL 0xa5

/* Zeroed, 64-byte aligned (aligned_alloc wants a multiple of 64). */
static inline void *alloc64(size_t n)
{
	void *p = NULL;

	cr_assert_eq(posix_memalign(&p, 64, n), 0);
	memset(p, 0, n);
	return p;
}
#define QPN  0x00abcdu

/* An SQ over plain memory, and a second ring the reference writes into. */
struct sqenv {
	uint8_t *buf, *ref;
	uint32_t wqe_cnt;
	__be32 dbrec;
	uint8_t *bf;                  /* 2 x bf_size (or 64 when 0) */
	uint32_t bf_size;
	uint32_t ref_pi;
	struct zd_mlx5_sq sq;
	struct zd_mlx5_sq *sqp;       /* &sq, or a QP's copy of it */
};

static inline void sqenv_init(struct sqenv *e, uint32_t wqe_cnt, uint32_t bf_size,
			      uint32_t max_inline)
{
	size_t sz = (size_t)wqe_cnt * 64, bfsz = bf_size ? 2 * bf_size : 64;
	struct zd_mlx5_sq_desc d;

	memset(e, 0, sizeof(*e));
	e->buf = alloc64(sz);
	e->ref = alloc64(sz);
	e->bf = alloc64(bfsz);
	cr_assert(e->buf && e->ref && e->bf);
	memset(e->buf, FILL, sz);
	memset(e->ref, FILL, sz);
	memset(e->bf, 0, bfsz);
	e->wqe_cnt = wqe_cnt;
	e->bf_size = bf_size;
	d = (struct zd_mlx5_sq_desc){
		.buf = e->buf, .wqe_cnt = wqe_cnt, .stride = 64, .dbrec = &e->dbrec,
		.bf_reg = e->bf, .bf_size = bf_size, .qpn = QPN,
	};
	cr_assert_eq(zd_mlx5_sq_init(&e->sq, &d, max_inline), 0);
	e->sqp = &e->sq;
}

/* Makes zeroed @qp @ep's device QP, posting through a copy of @e's SQ
 * (which @e then checks), with no message size limit in the way. */
static inline void sqenv_attach_qp(struct sqenv *e, struct zd_mlx5_qp *qp, struct zd_ep *ep)
{
	memset(qp, 0, sizeof(*qp));
	memcpy(&qp->sq, &e->sq, sizeof(qp->sq));
	e->sqp = &qp->sq;
	qp->ep = ep;
	qp->max_msg = 1u << 30;
	ep->dev_priv = qp;
	zd_ep_dto_refresh(ep);
}

static inline void sqenv_fini(struct sqenv *e)
{
	zd_mlx5_sq_fini(&e->sq);
	free(e->buf);
	free(e->ref);
	free(e->bf);
}

/* A WQE as a test describes it. */
struct spec {
	uint8_t opcode;
	uint8_t fm_ce_se;             /* expected, computed by the test's own rules */
	uint32_t imm;
	int remote;
	uint64_t raddr;
	uint32_t rkey;
	uint64_t swap, cmp;
	uint32_t n;
	DAT_LMR_TRIPLET iov[8];
	int inl;
};

static inline uint32_t spec_total(const struct spec *s)
{
	uint32_t t = 0;

	for (uint32_t i = 0; i < s->n; i++)
		t += (uint32_t)s->iov[i].segment_length;
	return t;
}

/*
 * Reference: the WQE built linearly with mlx5dv.h's helpers (segments
 * mlx5dv.h has no helper for -- remote address, atomic, inline -- from
 * its struct layouts), then laid into the reference ring at ref_pi,
 * continuing at the ring's start.  Only the bytes a WQE defines are laid:
 * the rest of its last block keeps what was there.  Returns the WQEBBs.
 */
static inline uint32_t ref_post(struct sqenv *e, const struct spec *s)
{
	uint8_t lin[1024];
	uint8_t *p = lin + 16;
	uint32_t ds = 1, bytes, nbb;

	memset(lin, FILL, sizeof(lin));
	if (s->remote) {
		struct mlx5_wqe_raddr_seg *r = (void *)p;

		r->raddr = htobe64(s->raddr);
		r->rkey = htobe32(s->rkey);
		r->reserved = 0;
		p += 16;
		ds++;
	}
	if (s->opcode == MLX5_OPCODE_ATOMIC_CS || s->opcode == MLX5_OPCODE_ATOMIC_FA) {
		struct mlx5_wqe_atomic_seg *a = (void *)p;

		a->swap_add = htobe64(s->swap);
		a->compare = htobe64(s->cmp);
		p += 16;
		ds++;
	}
	if (s->inl) {
		struct mlx5_wqe_inl_data_seg *inl = (void *)p;
		uint32_t total = spec_total(s);
		uint8_t *d = p + 4;

		inl->byte_count = htobe32(total | MLX5_INLINE_SEG);
		for (uint32_t i = 0; i < s->n; i++) {
			memcpy(d, (void *)(uintptr_t)s->iov[i].virtual_address,
			       s->iov[i].segment_length);
			d += s->iov[i].segment_length;
		}
		ds += (4 + total + 15) / 16;
		bytes = (uint32_t)(d - lin);
	} else {
		for (uint32_t i = 0; i < s->n; i++) {
			if (!s->iov[i].segment_length)
				continue;
			mlx5dv_set_data_seg((void *)p, s->iov[i].segment_length,
					    s->iov[i].lmr_context, s->iov[i].virtual_address);
			p += 16;
			ds++;
		}
		bytes = ds * 16;
	}
	mlx5dv_set_ctrl_seg((void *)lin, (uint16_t)e->ref_pi, s->opcode, 0, QPN, s->fm_ce_se,
			    (uint8_t)ds, 0, s->imm);
	/* rdma-core zeroes the reserved stream id of RC WQEs as well. */
	((struct mlx5_wqe_ctrl_seg *)lin)->dci_stream_channel_id = 0;

	size_t ring = (size_t)e->wqe_cnt * 64, off = (size_t)(e->ref_pi & (e->wqe_cnt - 1)) * 64;

	for (uint32_t i = 0; i < bytes; i++)
		e->ref[(off + i) % ring] = lin[i];
	nbb = (ds * 16 + 63) / 64;
	e->ref_pi += nbb;
	return nbb;
}

static inline bool solicited_op(uint8_t opcode)
{
	return opcode == MLX5_OPCODE_SEND || opcode == MLX5_OPCODE_SEND_IMM ||
	       opcode == MLX5_OPCODE_RDMA_WRITE_IMM;
}

/* The test's own reading of the DAT completion flags (dat_ep_post_send(3)):
 * SUPPRESS, or UNSIGNALLED on an EP created UNSIGNALLED, asks for no
 * completion; SOLICITED_WAIT sets the solicited bit of a send; BARRIER_FENCE
 * fences the WQE behind earlier RDMA reads. */
static inline uint8_t expect_fm(uint8_t opcode, DAT_COMPLETION_FLAGS f, DAT_COMPLETION_FLAGS ep)
{
	bool quiet = (f & DAT_COMPLETION_SUPPRESS_FLAG) ||
		     ((f & DAT_COMPLETION_UNSIGNALLED_FLAG) && (ep & DAT_COMPLETION_UNSIGNALLED_FLAG));
	uint8_t fm = quiet ? 0 : MLX5_WQE_CTRL_CQ_UPDATE;

	if ((f & DAT_COMPLETION_SOLICITED_WAIT_FLAG) && solicited_op(opcode))
		fm |= MLX5_WQE_CTRL_SOLICITED;
	if (f & DAT_COMPLETION_BARRIER_FENCE_FLAG)
		fm |= MLX5_WQE_CTRL_FENCE;
	return fm;
}

/* The WQE of @s through zdapl's builders and flag mapping (zd_mlx5_sq_post). */
static inline bool zd_post(struct sqenv *e, const struct spec *s, DAT_COMPLETION_FLAGS f,
			   DAT_COMPLETION_FLAGS ep, uint64_t cookie)
{
	struct zd_mlx5_wqe w = {
		.opcode = s->opcode, .fm_ce_se = zd_mlx5_fm_ce_se(f, false, solicited_op(s->opcode)),
		.imm = s->imm, .swap_add = s->swap, .compare = s->cmp, .inl = s->inl,
	};
	DAT_RMR_TRIPLET r = { .virtual_address = s->raddr, .rmr_context = s->rkey };
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	if (s->remote)
		w.remote = &r;
	return zd_mlx5_sq_post(e->sqp, &w, s->iov, s->n, spec_total(s), c, DAT_DTO_SEND,
			       zd_mlx5_wants_event(f, ep));
}

/* ---- CQ over plain memory ---- */

struct cqenv {
	uint8_t *buf;
	uint32_t cqe_cnt, cqe_size;
	__be32 dbrec[2];
	uint8_t uar[4096] __attribute__((aligned(64)));
	uint32_t hw_pi;               /* the "device's" next CQE */
	struct zd_mlx5_cq cq;
};

static inline void cqenv_init(struct cqenv *e, uint32_t cqe_cnt, uint32_t cqe_size)
{
	struct zd_mlx5_cq_desc d;

	memset(e, 0, sizeof(*e));
	e->buf = alloc64((size_t)cqe_cnt * cqe_size);
	cr_assert_not_null(e->buf);
	memset(e->buf, 0, (size_t)cqe_cnt * cqe_size);
	/* As created: every CQE invalid, owner 0. */
	for (uint32_t i = 0; i < cqe_cnt; i++)
		((struct mlx5_cqe64 *)(e->buf + (size_t)i * cqe_size + cqe_size - 64))->op_own =
			MLX5_CQE_INVALID << 4;
	e->cqe_cnt = cqe_cnt;
	e->cqe_size = cqe_size;
	d = (struct zd_mlx5_cq_desc){ .buf = e->buf, .cqe_cnt = cqe_cnt, .cqe_size = cqe_size,
		.dbrec = e->dbrec, .uar = e->uar, .cqn = 0x77 };
	cr_assert_eq(zd_mlx5_cq_init(&e->cq, &d), 0);
}

static inline void cqenv_fini(struct cqenv *e)
{
	free(e->buf);
}

/* Writes the device's next CQE: owner bit = pass parity, op_own last. */
static inline struct mlx5_cqe64 *hw_cqe(struct cqenv *e, uint8_t opcode, uint32_t qpn,
					uint16_t wqe_counter, uint32_t byte_cnt, uint8_t syndrome,
					int se)
{
	struct mlx5_cqe64 *c = (void *)(e->buf + (size_t)(e->hw_pi & (e->cqe_cnt - 1)) * e->cqe_size +
					e->cqe_size - 64);
	uint8_t owner = !!(e->hw_pi & e->cqe_cnt);

	memset(c, 0, 63);
	if (opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR) {
		struct mlx5_err_cqe *er = (void *)c;

		er->syndrome = syndrome;
		er->vendor_err_synd = 0x42;
		er->s_wqe_opcode_qpn = htobe32(qpn);
		er->wqe_counter = htobe16(wqe_counter);
	} else {
		c->sop_drop_qpn = htobe32(qpn);
		c->wqe_counter = htobe16(wqe_counter);
		c->byte_cnt = htobe32(byte_cnt);
	}
	__atomic_store_n(&c->op_own, (uint8_t)(opcode << 4 | (se ? 2 : 0) | owner),
			 __ATOMIC_RELEASE);
	e->hw_pi++;
	return c;
}

/* An EP as dat_ep_create leaves it for the device: zeroed, no watermark
 * armed (the glue's post_recv checks it). */
static inline struct zd_ep *test_ep_new(void)
{
	struct zd_ep *ep = calloc(1, sizeof(*ep));

	cr_assert(ep);
	atomic_store(&ep->soft_hwm, DAT_WATERMARK_INFINITE);
	return ep;
}

/* These tests post from plain memory under made-up lkeys: mark @lkey's
 * inline sources as checked, as zd_mlx5_post.c's memo does for a
 * registered LMR (it would look the key up in an IA these QPs lack). */
static inline void test_trust_lkey(struct zd_mlx5_qp *qp, uint32_t lkey)
{
	qp->inl_memo.lkey = lkey;
	qp->inl_memo.gen = atomic_load(&zd_mlx5_reg_gen);
	qp->inl_memo.base = 0;
	qp->inl_memo.size = UINT64_MAX;
}

#endif
