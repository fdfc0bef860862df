/*
 * Golden bytes of the mlx5 send path: every WQE zdapl writes equals the
 * one built with mlx5dv.h's own helpers, for every opcode and DAT flag
 * combination, across the end of tiny rings; the IB extension posts'
 * WRITE_IMM and atomic WQEs field by field in mlx5dv.h's structs; and the
 * doorbell record and BlueFlame register hold what the PRM says after a
 * post.
 */
#include "mlx5_test.h"

#include "core/zd_ep.h"
#include "evd/zd_dto_event.h"
#include "hw/mlx5/zd_mlx5.h"

static uint8_t data_a[256], data_b[256], data_c[256];

static void fill_data(void)
{
	for (int i = 0; i < 256; i++) {
		data_a[i] = (uint8_t)(i * 7 + 1);
		data_b[i] = (uint8_t)(i * 13 + 5);
		data_c[i] = (uint8_t)(255 - i);
	}
}

static DAT_LMR_TRIPLET seg(const void *p, uint32_t len, uint32_t lkey)
{
	return (DAT_LMR_TRIPLET){ .virtual_address = (uintptr_t)p, .segment_length = len,
				  .lmr_context = lkey };
}

static const uint8_t ops[] = {
	MLX5_OPCODE_SEND, MLX5_OPCODE_SEND_IMM, MLX5_OPCODE_RDMA_WRITE,
	MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_RDMA_READ, MLX5_OPCODE_ATOMIC_CS,
	MLX5_OPCODE_ATOMIC_FA,
};

static const struct {
	DAT_COMPLETION_FLAGS f, ep;
} flagsets[] = {
	{ DAT_COMPLETION_DEFAULT_FLAG, 0 },
	{ DAT_COMPLETION_SUPPRESS_FLAG, 0 },
	{ DAT_COMPLETION_SOLICITED_WAIT_FLAG, 0 },
	{ DAT_COMPLETION_BARRIER_FENCE_FLAG, 0 },
	{ DAT_COMPLETION_SOLICITED_WAIT_FLAG | DAT_COMPLETION_BARRIER_FENCE_FLAG, 0 },
	{ DAT_COMPLETION_UNSIGNALLED_FLAG, DAT_COMPLETION_UNSIGNALLED_FLAG },
	{ DAT_COMPLETION_UNSIGNALLED_FLAG, 0 },   /* EP not unsignalled: still signalled */
	{ DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_BARRIER_FENCE_FLAG, 0 },
	{ DAT_COMPLETION_EVD_THRESHOLD_FLAG, 0 },
};

static bool is_atomic(uint8_t op)
{
	return op == MLX5_OPCODE_ATOMIC_CS || op == MLX5_OPCODE_ATOMIC_FA;
}

static bool has_remote(uint8_t op)
{
	return op != MLX5_OPCODE_SEND && op != MLX5_OPCODE_SEND_IMM;
}

/* Local segment layouts: 0 none, 1 one, 2 three with a zero-length one,
 * 3 one inline, 4 two inline, 5 seven segments (3 WQEBBs). */
static void layout(struct spec *s, int which)
{
	uint32_t lk = 0x1100 + (uint32_t)which;

	s->n = 0;
	s->inl = 0;
	switch (which) {
	case 1:
		s->iov[s->n++] = seg(data_a, 200, lk);
		break;
	case 2:
		s->iov[s->n++] = seg(data_a, 100, lk);
		s->iov[s->n++] = seg(data_b, 0, lk + 1);
		s->iov[s->n++] = seg(data_c, 33, lk + 2);
		break;
	case 3:
		s->iov[s->n++] = seg(data_a, 8, lk);
		s->inl = 1;
		break;
	case 4:
		s->iov[s->n++] = seg(data_b, 21, lk);
		s->iov[s->n++] = seg(data_c, 30, lk);
		s->inl = 1;
		break;
	case 5:
		for (int i = 0; i < 7; i++)
			s->iov[s->n++] = seg(data_a + i * 16, 16, lk + (uint32_t)i);
		break;
	}
}

static void check_post(struct sqenv *e, struct spec *s, DAT_COMPLETION_FLAGS f,
		       DAT_COMPLETION_FLAGS ep, const char *what)
{
	uint32_t pi0 = e->sqp->pi, off0 = zd_mlx5_sq_bf_off(e->sqp), nbb;

	s->fm_ce_se = expect_fm(s->opcode, f, ep);
	cr_assert(zd_post(e, s, f, ep, 0x1234), "%s: post refused", what);
	nbb = ref_post(e, s);
	cr_assert_eq(e->sqp->pi, pi0 + nbb, "%s: pi", what);
	cr_assert_eq(memcmp(e->buf, e->ref, (size_t)e->wqe_cnt * 64), 0,
		     "%s: WQE bytes differ from mlx5dv's", what);
	cr_assert_eq(e->dbrec, htobe32((pi0 + nbb) & 0xffff), "%s: doorbell record", what);
	/* BlueFlame: the whole WQE when it fits, else the ctrl's first 8 bytes. */
	if (nbb * 64 <= e->bf_size) {
		for (uint32_t b = 0; b < nbb * 64; b++)
			cr_assert_eq(e->bf[off0 + b], e->buf[((pi0 & (e->wqe_cnt - 1)) * 64 + b) %
							     (e->wqe_cnt * 64)],
				     "%s: BlueFlame byte %u", what, b);
	} else {
		cr_assert_eq(memcmp(e->bf + off0, e->buf + (pi0 & (e->wqe_cnt - 1)) * 64, 8), 0,
			     "%s: 8-byte doorbell", what);
	}
	cr_assert_eq(zd_mlx5_sq_bf_off(e->sqp), off0 ^ e->bf_size, "%s: BlueFlame offset toggles", what);
}

Test(mlx5, golden_every_opcode_and_flag)
{
	fill_data();
	for (size_t o = 0; o < sizeof(ops); o++) {
		for (size_t f = 0; f < sizeof(flagsets) / sizeof(flagsets[0]); f++) {
			for (int l = 0; l <= 5; l++) {
				struct sqenv e;
				struct spec s = { .opcode = ops[o] };
				char what[96];

				if (is_atomic(ops[o]) && l != 1)
					continue;
				if (ops[o] == MLX5_OPCODE_RDMA_READ && (l == 3 || l == 4))
					continue;  /* reads are never inline */
				layout(&s, l);
				if (is_atomic(ops[o])) {
					s.iov[0].segment_length = 8;
					s.swap = 0x0102030405060708ull;
					s.cmp = ops[o] == MLX5_OPCODE_ATOMIC_CS ? 0x1122334455667788ull : 0;
				}
				if (has_remote(ops[o])) {
					s.remote = 1;
					s.raddr = 0x00007f0011223340ull + o;
					s.rkey = 0xc0de00 + (uint32_t)f;
				}
				if (ops[o] == MLX5_OPCODE_SEND_IMM || ops[o] == MLX5_OPCODE_RDMA_WRITE_IMM)
					s.imm = htobe32(0xfeed0000u + (uint32_t)l);
				snprintf(what, sizeof(what), "op 0x%x flags 0x%x ep 0x%x layout %d",
					 ops[o], flagsets[f].f, flagsets[f].ep, l);
				sqenv_init(&e, 8, 256, 64);
				check_post(&e, &s, flagsets[f].f, flagsets[f].ep, what);
				sqenv_fini(&e);
			}
		}
	}
}

Test(mlx5, flag_mapping_spelled_out)
{
	/* The bits themselves, not only agreement with the test's rules. */
	cr_assert_eq(zd_mlx5_fm_ce_se(0, true, true), MLX5_WQE_CTRL_CQ_UPDATE);
	cr_assert_eq(zd_mlx5_fm_ce_se(DAT_COMPLETION_SOLICITED_WAIT_FLAG, true, true),
		     MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED);
	cr_assert_eq(zd_mlx5_fm_ce_se(DAT_COMPLETION_SOLICITED_WAIT_FLAG, false, false), 0);
	cr_assert_eq(zd_mlx5_fm_ce_se(DAT_COMPLETION_BARRIER_FENCE_FLAG, false, true),
		     MLX5_WQE_CTRL_FENCE);
	cr_assert(zd_mlx5_wants_event(0, 0));
	cr_assert(!zd_mlx5_wants_event(DAT_COMPLETION_SUPPRESS_FLAG, 0));
	cr_assert(zd_mlx5_wants_event(DAT_COMPLETION_UNSIGNALLED_FLAG, 0));
	cr_assert(!zd_mlx5_wants_event(DAT_COMPLETION_UNSIGNALLED_FLAG,
				       DAT_COMPLETION_UNSIGNALLED_FLAG));
}

/* Retires everything posted (as one CQE of the last WQE would). */
static void retire_all(struct sqenv *e, uint32_t last_pi)
{
	zd_mlx5_sq_retire(e->sqp, (uint16_t)last_pi);
	cr_assert_eq(atomic_load(&e->sqp->ci), e->sqp->pi);
}

Test(mlx5, wraparound_tiny_rings)
{
	unsigned seed = 12345;

	fill_data();
	for (uint32_t cnt = 4; cnt <= 8; cnt *= 2) {
		for (uint32_t bf = 0; bf <= 256; bf += 128) {
			struct sqenv e;
			uint32_t last = 0;
			int crossed = 0;

			sqenv_init(&e, cnt, bf, 128);
			for (int it = 0; it < 400; it++) {
				struct spec s = { 0 };
				uint32_t pi = e.sqp->pi;
				char what[96];
				int kind = (int)(rand_r(&seed) % 4);

				if (kind == 0) {         /* send, 1..3 segments */
					s.opcode = MLX5_OPCODE_SEND;
					s.n = 1 + rand_r(&seed) % 3;
					for (uint32_t i = 0; i < s.n; i++)
						s.iov[i] = seg(data_a + i, 10 + i, 7 + i);
				} else if (kind == 1) {  /* write, 1..7 segments */
					s.opcode = MLX5_OPCODE_RDMA_WRITE;
					s.remote = 1;
					s.raddr = 0x1000u * (uint64_t)it;
					s.rkey = (uint32_t)it;
					s.n = 1 + rand_r(&seed) % 7;
					for (uint32_t i = 0; i < s.n; i++)
						s.iov[i] = seg(data_b + i, 64, 9 + i);
				} else if (kind == 2) {  /* inline write: data crosses the end */
					s.opcode = MLX5_OPCODE_RDMA_WRITE_IMM;
					s.remote = 1;
					s.raddr = 42;
					s.rkey = 43;
					s.imm = htobe32((uint32_t)it);
					s.n = 1;
					s.iov[0] = seg(data_c, 1 + rand_r(&seed) % 120, 5);
					s.inl = 1;
				} else {                 /* compare and swap */
					s.opcode = MLX5_OPCODE_ATOMIC_CS;
					s.remote = 1;
					s.raddr = 64;
					s.rkey = 65;
					s.swap = (uint64_t)it;
					s.cmp = ~(uint64_t)it;
					s.n = 1;
					s.iov[0] = seg(data_a, 8, 3);
				}
				/* Free the ring when this WQE might not fit. */
				if (zd_mlx5_sq_room(e.sqp) < 3 && e.sqp->pi != atomic_load(&e.sqp->ci))
					retire_all(&e, last);
				last = pi;
				snprintf(what, sizeof(what), "ring %u bf %u iteration %d", cnt, bf, it);
				check_post(&e, &s, 0, 0, what);
				if (((pi & (cnt - 1)) + (e.sqp->pi - pi)) > cnt)
					crossed++;
			}
			cr_assert_gt(crossed, 10, "only %d WQEs crossed the end", crossed);
			sqenv_fini(&e);
		}
	}
}

Test(mlx5, doorbell_record_and_bf_halves)
{
	struct sqenv e;
	struct spec s = { .opcode = MLX5_OPCODE_SEND, .n = 1 };

	fill_data();
	s.iov[0] = seg(data_a, 4, 1);
	sqenv_init(&e, 8, 64, 0);
	/* one-block WQEs alternate between the two BlueFlame halves */
	check_post(&e, &s, 0, 0, "first");
	cr_assert_eq(zd_mlx5_sq_bf_off(e.sqp), 64);
	check_post(&e, &s, 0, 0, "second");
	cr_assert_eq(zd_mlx5_sq_bf_off(e.sqp), 0);
	cr_assert_eq(memcmp(e.bf + 64, e.buf + 64, 64), 0);
	/* a two-block WQE does not fit 64 bytes: 8-byte doorbell only */
	memset(e.bf, 0, 128);
	s.n = 7;
	for (int i = 0; i < 7; i++)
		s.iov[i] = seg(data_b, 8, 2);
	check_post(&e, &s, 0, 0, "two blocks");
	for (int b = 8; b < 128; b++)
		cr_assert_eq(e.bf[b], 0, "BlueFlame byte %d written", b);
	sqenv_fini(&e);

	/* bf_size 0: no BlueFlame, the doorbell always at offset 0 */
	sqenv_init(&e, 4, 0, 0);
	s.n = 1;
	check_post(&e, &s, 0, 0, "no bf 1");
	check_post(&e, &s, 0, 0, "no bf 2");
	cr_assert_eq(zd_mlx5_sq_bf_off(e.sqp), 0);
	cr_assert_eq(memcmp(e.bf, e.buf + 64, 8), 0);
	sqenv_fini(&e);
}

Test(mlx5, wqe_index_wraps_16_bits)
{
	struct sqenv e;
	struct spec s = { .opcode = MLX5_OPCODE_SEND, .n = 1 };

	fill_data();
	s.iov[0] = seg(data_a, 16, 1);
	sqenv_init(&e, 4, 64, 0);
	for (uint32_t i = 0; i < 70000; i++) {
		uint32_t pi = e.sqp->pi;

		cr_assert(zd_post(&e, &s, 0, 0, i));
		cr_assert_eq(e.dbrec, htobe32((pi + 1) & 0xffff));
		cr_assert_eq(be32toh(((struct mlx5_wqe_ctrl_seg *)zd_mlx5_sq_bb(e.sqp, pi))
				     ->opmod_idx_opcode), (pi & 0xffff) << 8 | MLX5_OPCODE_SEND);
		cr_assert_eq(zd_mlx5_sq_retire(e.sqp, (uint16_t)pi).cookie.as_64, i);
	}
	cr_assert_eq(atomic_load(&e.sqp->ci), 70000u);
	sqenv_fini(&e);
}

Test(mlx5, full_ring_and_unsignaled_moderation)
{
	struct sqenv e;
	struct spec s = { .opcode = MLX5_OPCODE_SEND, .n = 1 };
	uint8_t snap[256];

	fill_data();
	s.iov[0] = seg(data_a, 16, 1);
	sqenv_init(&e, 4, 64, 0);
	/* 4 blocks, unsig_max 2: every second suppressed WQE is signalled */
	for (uint32_t i = 0; i < 4; i++) {
		struct mlx5_wqe_ctrl_seg *c = zd_mlx5_sq_bb(e.sqp, i);

		cr_assert(zd_post(&e, &s, DAT_COMPLETION_SUPPRESS_FLAG, 0, i));
		cr_assert_eq(c->fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE,
			     i % 2 ? MLX5_WQE_CTRL_CQ_UPDATE : 0, "WQE %u", i);
		cr_assert_eq(e.sqp->wr[i].flags, i % 2 ? ZD_MLX5_WR_SIGNALED : 0);
	}
	/* full: refused, nothing written */
	memcpy(snap, e.buf, 256);
	cr_assert(!zd_post(&e, &s, 0, 0, 9));
	cr_assert_eq(memcmp(snap, e.buf, 256), 0);
	cr_assert_eq(e.sqp->pi, 4);
	/* the CQE of WQE 1 retires 0 and 1 */
	zd_mlx5_sq_retire(e.sqp, 1);
	cr_assert_eq(zd_mlx5_sq_room(e.sqp), 2);
	cr_assert(zd_post(&e, &s, 0, 0, 10));
	sqenv_fini(&e);
}

/* ---- the DAT entry points over a QP whose SQ is plain memory ---- */

Test(mlx5, dat_posts_build_the_same_wqes)
{
	struct sqenv e;
	struct zd_mlx5_qp *qp = alloc64(sizeof(*qp));
	struct zd_ep *ep = test_ep_new();
	DAT_LMR_TRIPLET big[2];
	DAT_RMR_TRIPLET r = { .virtual_address = 0x5000, .segment_length = 64, .rmr_context = 0x77 };
	DAT_DTO_COOKIE c = { .as_64 = 5 };

	fill_data();
	cr_assert(qp && ep);
	sqenv_init(&e, 8, 256, 64);
	sqenv_attach_qp(&e, qp, ep);

	for (size_t f = 0; f < sizeof(flagsets) / sizeof(flagsets[0]); f++) {
		struct spec s = { .n = 1 };
		uint32_t pi = qp->sq.pi;

		qp->req_flags = flagsets[f].ep;
		/* expect_fm has no moderation: start each set with no
		 * unsignaled WQE counted (tests/mlx5/test_mlx5_cq.c and
		 * test_mlx5_fast.c cover the forced CQ_UPDATE) */
		qp->sq.unsig = 0;
		/* small send: inline */
		s.opcode = MLX5_OPCODE_SEND;
		s.iov[0] = seg(data_a, 24, 0x31);
		s.inl = 1;
		s.fm_ce_se = expect_fm(s.opcode, flagsets[f].f, flagsets[f].ep);
		test_trust_lkey(qp, 0x31);
		cr_assert_eq(zd_mlx5_post_send(ep, 1, s.iov, c, flagsets[f].f), DAT_SUCCESS);
		ref_post(&e, &s);
		/* write of 200 bytes: data segment */
		s.opcode = MLX5_OPCODE_RDMA_WRITE;
		s.iov[0] = seg(data_b, 200, 0x32);
		s.inl = 0;
		s.remote = 1;
		s.raddr = r.virtual_address;
		s.rkey = r.rmr_context;
		s.fm_ce_se = expect_fm(s.opcode, flagsets[f].f, flagsets[f].ep) &
			     ~MLX5_WQE_CTRL_SOLICITED;
		cr_assert_eq(zd_mlx5_post_rdma_write(ep, 1, s.iov, c, &r, flagsets[f].f), DAT_SUCCESS);
		ref_post(&e, &s);
		/* read of 8 bytes: never inline */
		s.opcode = MLX5_OPCODE_RDMA_READ;
		s.iov[0] = seg(data_c, 8, 0x33);
		s.fm_ce_se = expect_fm(s.opcode, flagsets[f].f, flagsets[f].ep) &
			     ~MLX5_WQE_CTRL_SOLICITED;
		cr_assert_eq(zd_mlx5_post_rdma_read(ep, 1, s.iov, c, &r, flagsets[f].f), DAT_SUCCESS);
		ref_post(&e, &s);
		cr_assert_eq(memcmp(e.buf, e.ref, 8 * 64), 0, "flags 0x%x", flagsets[f].f);
		cr_assert_eq(e.dbrec, htobe32(qp->sq.pi & 0xffff));
		zd_mlx5_sq_retire_to(&qp->sq, qp->sq.pi);
		(void)pi;
	}
	/* over the device's message size: refused at once */
	qp->max_msg = 100;
	big[0] = seg(data_a, 60, 1);
	big[1] = seg(data_b, 60, 1);
	cr_assert_eq(zd_mlx5_post_send(ep, 2, big, c, 0), DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE));
	/* full SQ: DAT_INSUFFICIENT_RESOURCES (120 bytes: two data segments,
	 * one block each) */
	qp->max_msg = 1u << 30;
	for (int i = 0; i < 8; i++)
		cr_assert_eq(zd_mlx5_post_send(ep, 2, big, c, 0), DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_post_send(ep, 2, big, c, 0),
		     DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP));
	e.sqp = &e.sq;
	sqenv_fini(&e);
	free(qp);
	free(ep);
}

/* ---- the IB extension posts (zd_mlx5_post_rdma_write_imm, zd_mlx5_post_atomic) ---- */

/* The fields of an atomic WQE at @bb, read through mlx5dv.h's structs at
 * the PRM's offsets: ctrl, raddr, atomic, one data segment. */
static void check_atomic_wqe(const uint8_t *bb, uint16_t idx, uint8_t opcode, uint64_t raddr,
			     uint32_t rkey, uint64_t swap_add, uint64_t compare, uint64_t laddr,
			     uint32_t lkey)
{
	const struct mlx5_wqe_ctrl_seg *c = (const void *)bb;
	const struct mlx5_wqe_raddr_seg *r = (const void *)(bb + sizeof(*c));
	const struct mlx5_wqe_atomic_seg *a = (const void *)(bb + sizeof(*c) + sizeof(*r));
	const struct mlx5_wqe_data_seg *d = (const void *)(bb + sizeof(*c) + sizeof(*r) +
							   sizeof(*a));

	cr_assert_eq(sizeof(*c) + sizeof(*r) + sizeof(*a) + sizeof(*d), MLX5_SEND_WQE_BB);
	cr_assert_eq(be32toh(c->opmod_idx_opcode), (uint32_t)idx << 8 | opcode);
	cr_assert_eq(be32toh(c->qpn_ds), QPN << 8 | 4, "ds: four 16-byte segments");
	cr_assert_eq(c->imm, 0);
	cr_assert_eq(be64toh(r->raddr), raddr);
	cr_assert_eq(be32toh(r->rkey), rkey);
	cr_assert_eq(r->reserved, 0);
	cr_assert_eq(be64toh(a->swap_add), swap_add);
	cr_assert_eq(be64toh(a->compare), compare);
	cr_assert_eq(be32toh(d->byte_count), 8, "the old value: 8 bytes, never inline");
	cr_assert_eq(be32toh(d->lkey), lkey);
	cr_assert_eq(be64toh(d->addr), laddr);
}

/* A write with immediate data's bookkeeping: an extension op's, never the
 * plain latency path's WR_EVENT; WR_IMM_EVENT (cq_poll_one's own path for
 * it) exactly when it reports success. */
static void check_write_imm_wr(const struct zd_mlx5_sq_wr *w, bool event)
{
	cr_assert_eq(w->flags & (ZD_MLX5_WR_EVENT | ZD_MLX5_WR_EXT | ZD_MLX5_WR_SWAP64),
		     ZD_MLX5_WR_EXT);
	cr_assert_eq(!!(w->flags & ZD_MLX5_WR_EXT_EVENT), event);
	cr_assert_eq(!!(w->flags & ZD_MLX5_WR_IMM_EVENT), event);
}

Test(mlx5, extension_posts_build_prm_wqes)
{
	struct sqenv e;
	struct zd_mlx5_qp *qp = alloc64(sizeof(*qp));
	struct zd_ep *ep = test_ep_new();
	DAT_RMR_TRIPLET r = { .virtual_address = 0x7008, .segment_length = 8, .rmr_context = 0x99 };
	DAT_DTO_COOKIE c = { .as_64 = 6 };
	/* a local segment longer than the word: the WQE takes its first 8 */
	DAT_LMR_TRIPLET word = seg(data_c, 16, 0x44);

	fill_data();
	cr_assert(qp && ep);
	sqenv_init(&e, 8, 256, 64);
	sqenv_attach_qp(&e, qp, ep);
	test_trust_lkey(qp, 0x41);

	for (size_t f = 0; f < sizeof(flagsets) / sizeof(flagsets[0]); f++) {
		DAT_COMPLETION_FLAGS fl = flagsets[f].f;
		struct spec s = { .n = 1, .remote = 1, .raddr = r.virtual_address,
				  .rkey = r.rmr_context };
		uint16_t at;

		qp->req_flags = flagsets[f].ep;
		qp->sq.unsig = 0;
		/* write with immediate, 20 bytes inline: the immediate big-endian
		 * in the ctrl segment, the solicited bit as a send's */
		s.opcode = MLX5_OPCODE_RDMA_WRITE_IMM;
		s.imm = htobe32(0x12345678);
		s.iov[0] = seg(data_a, 20, 0x41);
		s.inl = 1;
		s.fm_ce_se = expect_fm(s.opcode, fl, flagsets[f].ep);
		cr_assert_eq(zd_mlx5_post_rdma_write_imm(ep, 1, s.iov, c, &r, 0x12345678, fl),
			     DAT_SUCCESS);
		ref_post(&e, &s);
		cr_assert_eq(qp->sq.wr[(qp->sq.pi - 1) & qp->sq.mask].op,
			     (uint8_t)DAT_IB_DTO_RDMA_WRITE_IMMED);
		check_write_imm_wr(&qp->sq.wr[(qp->sq.pi - 1) & qp->sq.mask],
				   zd_mlx5_wants_event(fl, flagsets[f].ep));
		/* ... 200 bytes: a data segment */
		s.iov[0] = seg(data_b, 200, 0x42);
		s.inl = 0;
		cr_assert_eq(zd_mlx5_post_rdma_write_imm(ep, 1, s.iov, c, &r, 0x12345678, fl),
			     DAT_SUCCESS);
		check_write_imm_wr(&qp->sq.wr[(qp->sq.pi - 1) & qp->sq.mask],
				   zd_mlx5_wants_event(fl, flagsets[f].ep));
		ref_post(&e, &s);
		/* fetch and add; the atomic_be QP signals it whatever the flags */
		qp->atomic_be = f & 1;
		s.opcode = MLX5_OPCODE_ATOMIC_FA;
		s.imm = 0;
		s.swap = 0x0102030405060708ull;
		s.cmp = 0;
		s.iov[0] = seg(data_c, 8, 0x44);
		s.fm_ce_se = expect_fm(s.opcode, fl, flagsets[f].ep) |
			     (qp->atomic_be ? MLX5_WQE_CTRL_CQ_UPDATE : 0);
		at = (uint16_t)qp->sq.pi;
		cr_assert_eq(zd_mlx5_post_atomic(ep, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, &word, c, &r,
						 s.swap, 0xdead, fl), DAT_SUCCESS);
		ref_post(&e, &s);
		check_atomic_wqe(zd_mlx5_sq_bb(&qp->sq, at), at, MLX5_OPCODE_ATOMIC_FA,
				 r.virtual_address, r.rmr_context, s.swap, 0,
				 (uintptr_t)data_c, 0x44);
		/* compare and swap: compare = the DAT operand, swap_add = swap */
		s.opcode = MLX5_OPCODE_ATOMIC_CS;
		s.swap = 0xaaaa;
		s.cmp = 0xbbbb;
		at = (uint16_t)qp->sq.pi;
		cr_assert_eq(zd_mlx5_post_atomic(ep, (DAT_DTOS)DAT_IB_DTO_CMP_SWAP, &word, c, &r,
						 0xbbbb, 0xaaaa, fl), DAT_SUCCESS);
		ref_post(&e, &s);
		check_atomic_wqe(zd_mlx5_sq_bb(&qp->sq, at), at, MLX5_OPCODE_ATOMIC_CS,
				 r.virtual_address, r.rmr_context, 0xaaaa, 0xbbbb,
				 (uintptr_t)data_c, 0x44);
		{
			const struct zd_mlx5_sq_wr *w = &qp->sq.wr[at & qp->sq.mask];

			cr_assert_eq(w->op, (uint8_t)DAT_IB_DTO_CMP_SWAP);
			cr_assert_eq(w->len, 8);
			cr_assert_eq(w->nbb, 1);
			/* never the latency paths' WR_EVENT */
			cr_assert_eq(w->flags & (ZD_MLX5_WR_EVENT | ZD_MLX5_WR_EXT |
						 ZD_MLX5_WR_IMM_EVENT), ZD_MLX5_WR_EXT);
			cr_assert_eq(!!(w->flags & ZD_MLX5_WR_EXT_EVENT),
				     zd_mlx5_wants_event(fl, flagsets[f].ep));
			cr_assert_eq(!!(w->flags & ZD_MLX5_WR_SWAP64), qp->atomic_be);
		}
		cr_assert_eq(memcmp(e.buf, e.ref, 8 * 64), 0, "flags 0x%x", fl);
		cr_assert_eq(e.dbrec, htobe32(qp->sq.pi & 0xffff));
		zd_mlx5_sq_retire_to(&qp->sq, qp->sq.pi);
	}
	/* a full SQ refuses an atomic as any post */
	for (int i = 0; i < 8; i++)
		cr_assert_eq(zd_mlx5_post_atomic(ep, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, &word, c, &r, 1,
						 0, 0), DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_post_atomic(ep, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, &word, c, &r, 1, 0, 0),
		     DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP));
	word = seg(data_b, 200, 0x42);
	cr_assert_eq(zd_mlx5_post_rdma_write_imm(ep, 1, &word, c, &r, 1, 0),
		     DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP));
	e.sqp = &e.sq;
	sqenv_fini(&e);
	free(qp);
	free(ep);
}
