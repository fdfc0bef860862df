/*
 * The latency fast paths of the mlx5 data path against the general ones:
 *
 *  - a send or RDMA write of one small inline segment (zd_mlx5_sq_post_inl1,
 *    reached through the device ops) writes the same WQE bytes as mlx5dv.h's
 *    helpers (the golden reference of test_mlx5_wqe.c), the same bookkeeping,
 *    doorbell record and BlueFlame copy as the general builder, for every
 *    length around the inline limits, every completion flag set, and WQEs at
 *    every position of a 4-block ring;
 *  - the prebuilt control-segment heads (zd_mlx5_set_ctrl64_head) give
 *    zd_mlx5_set_ctrl's bytes for every opcode of the one-block paths, WQE
 *    index, ds, fm_ce_se and immediate;
 *  - an atomic's one-block builder (zd_mlx5_sq_put_atomic1) writes the
 *    general builder's WQE, bookkeeping, doorbell record and BlueFlame
 *    copy for fetch-and-add and compare-and-swap, signalled or not, with
 *    and without the big-endian old value's flag, at every ring position;
 *  - cq_poll's one-requester-CQE path and its general loop give the same
 *    events for mixed CQE sequences under every budget.
 */
#include "mlx5_pollenv.h"

#include "core/zd_ep.h"
#include "evd/zd_evd.h"
#include "hw/mlx5/zd_mlx5.h"

static uint8_t data[64];

static DAT_LMR_TRIPLET seg_at(const void *p, uint32_t len, uint32_t lkey)
{
	return (DAT_LMR_TRIPLET){ .virtual_address = (uintptr_t)p, .segment_length = len,
				  .lmr_context = lkey };
}

static const struct {
	DAT_COMPLETION_FLAGS f, ep;
} flagsets[] = {
	{ DAT_COMPLETION_DEFAULT_FLAG, 0 },
	{ DAT_COMPLETION_SUPPRESS_FLAG, 0 },
	{ DAT_COMPLETION_UNSIGNALLED_FLAG, 0 },
	{ DAT_COMPLETION_UNSIGNALLED_FLAG, DAT_COMPLETION_UNSIGNALLED_FLAG },
	{ DAT_COMPLETION_SOLICITED_WAIT_FLAG, 0 },
	{ DAT_COMPLETION_BARRIER_FENCE_FLAG, 0 },
	{ DAT_COMPLETION_BARRIER_FENCE_FLAG | DAT_COMPLETION_SOLICITED_WAIT_FLAG |
	  DAT_COMPLETION_SUPPRESS_FLAG, 0 },
};

/* The general path's WQE for the same DTO (post_sq of zd_mlx5_post.c). */
static bool general_post(struct zd_mlx5_sq *sq, uint8_t opcode, DAT_DTOS op,
			 const DAT_LMR_TRIPLET *iov, const DAT_RMR_TRIPLET *r,
			 DAT_COMPLETION_FLAGS f, DAT_COMPLETION_FLAGS ep, uint64_t cookie)
{
	uint32_t total = iov->segment_length;
	struct zd_mlx5_wqe w = {
		.opcode = opcode,
		.fm_ce_se = zd_mlx5_fm_ce_se(f, false, opcode == MLX5_OPCODE_SEND),
		.remote = r,
		.inl = total <= sq->max_inline,
	};

	return zd_mlx5_sq_post(sq, &w, iov, 1, total, (DAT_DTO_COOKIE){ .as_64 = cookie }, op,
			       zd_mlx5_wants_event(f, ep));
}

static void fast_vs_general(uint8_t opcode, uint32_t max_inline, uint32_t bf_size)
{
	struct sqenv a, b;
	struct zd_mlx5_qp *qp = alloc64(sizeof(*qp));
	struct zd_ep *ep = test_ep_new();
	DAT_RMR_TRIPLET r = { .virtual_address = 0x1122334455667788ull, .rmr_context = 0xa1b2c3 };
	bool rdma = opcode == MLX5_OPCODE_RDMA_WRITE;
	DAT_DTOS op = rdma ? DAT_DTO_RDMA_WRITE : DAT_DTO_SEND;
	uint64_t cookie = 1;

	cr_assert(qp && ep);
	for (uint32_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 13 + 5);
	sqenv_init(&a, 4, bf_size, max_inline);
	sqenv_init(&b, 4, bf_size, max_inline);
	sqenv_attach_qp(&a, qp, ep);
	test_trust_lkey(qp, 0x4242);

	for (size_t f = 0; f < ZD_ARRAY_SIZE(flagsets); f++) {
		qp->req_flags = flagsets[f].ep;
		for (uint32_t len = 1; len <= 40; len++) {
			/* the source at every alignment */
			DAT_LMR_TRIPLET iov = seg_at(data + (len % 8), len, 0x4242);
			struct spec s = { .opcode = opcode, .n = 1, .remote = rdma,
					  .raddr = r.virtual_address, .rkey = r.rmr_context };
			uint32_t pi = qp->sq.pi, blk = (pi & 3) * 64;
			DAT_RETURN ret;

			s.iov[0] = iov;
			s.inl = len <= max_inline;
			s.fm_ce_se = expect_fm(opcode, flagsets[f].f, flagsets[f].ep);
			/* zdapl never sets SE on an RDMA write (no immediate) */
			if (rdma)
				s.fm_ce_se &= (uint8_t)~MLX5_WQE_CTRL_SOLICITED;
			ret = rdma ? zd_mlx5_post_rdma_write(ep, 1, &iov,
							     (DAT_DTO_COOKIE){ .as_64 = cookie },
							     &r, flagsets[f].f) :
				     zd_mlx5_post_send(ep, 1, &iov,
						       (DAT_DTO_COOKIE){ .as_64 = cookie },
						       flagsets[f].f);
			cr_assert_eq(ret, DAT_SUCCESS);
			cr_assert(general_post(b.sqp, opcode, op, &iov, rdma ? &r : NULL,
					       flagsets[f].f, flagsets[f].ep, cookie));
			/* unsignalled moderation is the general path's; the
			 * golden bytes follow it */
			if (b.sqp->wr[pi & 3].flags & ZD_MLX5_WR_SIGNALED)
				s.fm_ce_se |= MLX5_WQE_CTRL_CQ_UPDATE;
			else
				s.fm_ce_se &= (uint8_t)~MLX5_WQE_CTRL_CQ_UPDATE;
			ref_post(&a, &s);
			cr_assert_eq(memcmp(a.buf, a.ref, 4 * 64), 0,
				     "op %u len %u flags 0x%x: WQE bytes", opcode, len,
				     flagsets[f].f);
			cr_assert_eq(memcmp(a.buf, b.buf, 4 * 64), 0,
				     "same as the general builder");
			cr_assert_eq(memcmp(&qp->sq.wr[pi & 3], &b.sqp->wr[pi & 3],
					    sizeof(struct zd_mlx5_sq_wr)), 0,
				     "len %u flags 0x%x: bookkeeping", len, flagsets[f].f);
			cr_assert_eq(qp->sq.pi, b.sqp->pi);
			cr_assert_eq(qp->sq.unsig, b.sqp->unsig);
			cr_assert_eq(a.dbrec, b.dbrec);
			cr_assert_eq(a.dbrec, htobe32(qp->sq.pi & 0xffff));
			cr_assert_eq(zd_mlx5_sq_bf_off(&qp->sq), zd_mlx5_sq_bf_off(b.sqp));
			cr_assert_eq(memcmp(a.bf, b.bf, bf_size ? 2 * bf_size : 64), 0,
				     "same BlueFlame (or 8-byte doorbell) write");
			if (bf_size && (qp->sq.pi - pi) == 1)
				cr_assert_eq(memcmp(a.bf + (zd_mlx5_sq_bf_off(&qp->sq) ^ bf_size),
						    a.buf + blk, 64), 0,
					     "the BlueFlame copy is the WQE");
			/* the device completes it: room again */
			zd_mlx5_sq_retire_to(&qp->sq, qp->sq.pi);
			zd_mlx5_sq_retire_to(b.sqp, b.sqp->pi);
			cookie++;
		}
	}
	a.sqp = &a.sq;
	sqenv_fini(&a);
	sqenv_fini(&b);
	free(qp);
	free(ep);
}

Test(mlx5, fast_rdma_write_matches_golden_and_general)
{
	fast_vs_general(MLX5_OPCODE_RDMA_WRITE, 64, 256);
	fast_vs_general(MLX5_OPCODE_RDMA_WRITE, 12, 64);   /* a QP with little inline room */
	fast_vs_general(MLX5_OPCODE_RDMA_WRITE, 64, 0);    /* no BlueFlame: 8-byte doorbell */
}

Test(mlx5, fast_send_matches_golden_and_general)
{
	fast_vs_general(MLX5_OPCODE_SEND, 64, 256);
	fast_vs_general(MLX5_OPCODE_SEND, 20, 64);
	fast_vs_general(MLX5_OPCODE_SEND, 64, 0);
}

Test(mlx5, prebuilt_ctrl_heads_match_set_ctrl)
{
	static const uint8_t ops[] = { MLX5_OPCODE_SEND, MLX5_OPCODE_RDMA_WRITE,
				       MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_ATOMIC_FA,
				       MLX5_OPCODE_ATOMIC_CS };
	static const uint32_t pis[] = { 0, 1, 0xff, 0x100, 0x1234, 0xfffe, 0xffff,
					0x10000, 0x12345, 0xfffffffe };
	static const uint8_t fms[] = { 0, MLX5_WQE_CTRL_CQ_UPDATE, MLX5_WQE_CTRL_SOLICITED,
				       MLX5_WQE_CTRL_FENCE,
				       MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED |
					       MLX5_WQE_CTRL_FENCE };
	static const uint32_t imms[] = { 0, 0x01020304, 0xfedcba98 };
	static const uint32_t qpns[] = { 0, 0xabcd, 0xffffff };
	struct zd_mlx5_sq sq;

	for (size_t q = 0; q < ZD_ARRAY_SIZE(qpns); q++) {
		memset(&sq, 0, sizeof(sq));
		sq.qpn8 = qpns[q] << 8;
		zd_mlx5_sq_set_heads(&sq);
		for (size_t o = 0; o < ZD_ARRAY_SIZE(ops); o++)
			for (size_t p = 0; p < ZD_ARRAY_SIZE(pis); p++)
				for (uint32_t ds = 1; ds <= ZD_MLX5_MAX_DS; ds++)
					for (size_t f = 0; f < ZD_ARRAY_SIZE(fms); f++)
						for (size_t i = 0; i < ZD_ARRAY_SIZE(imms); i++) {
							struct mlx5_wqe_ctrl_seg a, b;

							memset(&a, FILL, sizeof(a));
							memset(&b, ~FILL, sizeof(b));
							zd_mlx5_set_ctrl(&a, pis[p], ops[o], sq.qpn8, ds,
									 fms[f], htobe32(imms[i]));
							zd_mlx5_set_ctrl64_head(&sq, &b, pis[p], ops[o],
										ds, fms[f], imms[i]);
							cr_assert_eq(memcmp(&a, &b, sizeof(a)), 0,
								     "op %u pi %#x ds %u fm %#x imm %#x",
								     ops[o], pis[p], ds, fms[f], imms[i]);
						}
	}
}

/* The general path's WQE of an atomic (post_atomic_wqe of zd_mlx5_post.c). */
static bool general_atomic(struct zd_mlx5_sq *sq, bool cas, const DAT_RMR_TRIPLET *r,
			   const DAT_LMR_TRIPLET *old, uint64_t cookie, uint8_t flags, bool signal)
{
	struct zd_mlx5_wqe w = {
		.opcode = cas ? MLX5_OPCODE_ATOMIC_CS : MLX5_OPCODE_ATOMIC_FA,
		.remote = r,
		.swap_add = cas ? 0x1111222233334444ull : 0x5555666677778888ull,
		.compare = cas ? 0x99990000aaaa0000ull : 0,
	};

	return zd_mlx5_sq_post_wr(sq, &w, old, 1, 8, (DAT_DTO_COOKIE){ .as_64 = cookie },
				  cas ? (DAT_DTOS)DAT_IB_DTO_CMP_SWAP : (DAT_DTOS)DAT_IB_DTO_FETCH_ADD,
				  flags, signal);
}

static void atomic1_vs_general(uint32_t bf_size)
{
	struct sqenv a, b;
	DAT_RMR_TRIPLET r = { .virtual_address = 0x1122334455667780ull, .rmr_context = 0xa1b2c3 };
	DAT_LMR_TRIPLET old = { .virtual_address = 0x7766554433221100ull, .lmr_context = 0x4242,
				.segment_length = 8 };
	uint64_t cookie = 1;

	sqenv_init(&a, 4, bf_size, 0);
	sqenv_init(&b, 4, bf_size, 0);
	for (int round = 0; round < 9; round++)
		for (int cas = 0; cas < 2; cas++)
			for (int signal = 0; signal < 2; signal++)
				for (int swap64 = 0; swap64 < 2; swap64++) {
					const DAT_DTOS op = cas ? (DAT_DTOS)DAT_IB_DTO_CMP_SWAP
								: (DAT_DTOS)DAT_IB_DTO_FETCH_ADD;
					const uint8_t flags =
						(uint8_t)(zd_mlx5_wr_flags(op, signal) |
							  (swap64 ? ZD_MLX5_WR_SWAP64 : 0));
					const uint32_t pi = a.sqp->pi;

					cr_assert(zd_mlx5_sq_room1(a.sqp, pi));
					zd_mlx5_sq_put_atomic1(
						a.sqp, pi,
						cas ? MLX5_OPCODE_ATOMIC_CS : MLX5_OPCODE_ATOMIC_FA, &r,
						cas ? 0x1111222233334444ull : 0x5555666677778888ull,
						cas ? 0x99990000aaaa0000ull : 0, &old,
						(DAT_DTO_COOKIE){ .as_64 = cookie }, op, flags, signal);
					cr_assert(general_atomic(b.sqp, cas, &r, &old, cookie, flags,
								 signal));
					cr_assert_eq(memcmp(a.buf, b.buf, 4 * 64), 0,
						     "cas %d signal %d pi %u: WQE bytes", cas, signal, pi);
					cr_assert_eq(memcmp(&a.sqp->wr[pi & 3], &b.sqp->wr[pi & 3],
							    sizeof(struct zd_mlx5_sq_wr)), 0,
						     "bookkeeping");
					cr_assert_eq(a.sqp->pi, b.sqp->pi);
					cr_assert_eq(a.sqp->unsig, b.sqp->unsig);
					cr_assert_eq(a.dbrec, b.dbrec);
					cr_assert_eq(zd_mlx5_sq_bf_off(a.sqp), zd_mlx5_sq_bf_off(b.sqp));
					cr_assert_eq(memcmp(a.bf, b.bf, bf_size ? 2 * bf_size : 64), 0,
						     "same BlueFlame (or 8-byte doorbell) write");
					/* the device completes it: room again */
					zd_mlx5_sq_retire_to(a.sqp, a.sqp->pi);
					zd_mlx5_sq_retire_to(b.sqp, b.sqp->pi);
					cookie++;
				}
}

Test(mlx5, atomic1_matches_general)
{
	atomic1_vs_general(256);
	atomic1_vs_general(0);
}

Test(mlx5, fast_post_full_sq_refused)
{
	struct sqenv e;
	struct zd_mlx5_qp *qp = alloc64(sizeof(*qp));
	struct zd_ep *ep = test_ep_new();
	DAT_RMR_TRIPLET r = { .virtual_address = 0x9000, .rmr_context = 3 };
	DAT_LMR_TRIPLET iov = seg_at(data, 8, 1);
	uint8_t snap[4 * 64];

	cr_assert(qp && ep);
	sqenv_init(&e, 4, 64, 64);
	sqenv_attach_qp(&e, qp, ep);
	test_trust_lkey(qp, 1);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(zd_mlx5_post_rdma_write(ep, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 1 },
						     &r, 0), DAT_SUCCESS);
	memcpy(snap, e.buf, sizeof(snap));
	cr_assert_eq(zd_mlx5_post_rdma_write(ep, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 1 }, &r, 0),
		     DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP));
	cr_assert_eq(zd_mlx5_post_send(ep, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 1 },
				       DAT_COMPLETION_SUPPRESS_FLAG),
		     DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP));
	cr_assert_eq(memcmp(snap, e.buf, sizeof(snap)), 0, "nothing written");
	cr_assert_eq(qp->sq.pi, 4);
	cr_assert_eq(qp->sq.unsig, 0, "a refused post moves no moderation count");
	e.sqp = &e.sq;
	sqenv_fini(&e);
	free(qp);
	free(ep);
}

/* ---- cq_poll: the one-CQE path and the general loop ---- */

/*
 * One round: WQE 0 a signalled 8-byte write, 1 a suppressed send, 2 a
 * signalled write, one receive posted; the device reports (in the order
 * of @order) REQ for 0, a receive, a CQE of an unknown QP, REQ_ERR for 2
 * (which also retires 1), polled with @budget at a time.  Every order
 * and budget must give the same events, in CQE order.
 */
static void mixed_round(int budget, int slow_first)
{
	struct pollenv p;
	DAT_LMR_TRIPLET iov = seg_at(data, 8, 7);
	DAT_RMR_TRIPLET r = { .virtual_address = 0x7000, .rmr_context = 8 };
	DAT_DTO_COMPLETION_EVENT_DATA d;
	int got = 0;

	pollenv_init(&p, 8, 64, 64, 8);
	test_trust_lkey(p.qp, 7);
	for (int round = 0; round < 5; round++) {
		uint16_t base = (uint16_t)p.qp->sq.pi;

		cr_assert_eq(zd_mlx5_post_rdma_write(p.ep, 1, &iov,
						     (DAT_DTO_COOKIE){ .as_64 = 10 }, &r, 0),
			     DAT_SUCCESS);
		cr_assert_eq(zd_mlx5_post_send(p.ep, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 11 },
					       DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
		cr_assert_eq(zd_mlx5_post_rdma_write(p.ep, 1, &iov,
						     (DAT_DTO_COOKIE){ .as_64 = 12 }, &r, 0),
			     DAT_SUCCESS);
		cr_assert_eq(zd_mlx5_post_recv(p.ep, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 20 }, 0),
			     DAT_SUCCESS);
		if (slow_first)
			hw_cqe(&p.ce, MLX5_CQE_RESP_SEND, QPN, 0, 33, 0, 0);
		hw_cqe(&p.ce, MLX5_CQE_REQ, QPN, base, 0, 0, 0);
		if (!slow_first)
			hw_cqe(&p.ce, MLX5_CQE_RESP_SEND, QPN, 0, 33, 0, 0);
		hw_cqe(&p.ce, MLX5_CQE_REQ, QPN + 1, 0, 0, 0, 0);   /* unknown QP: dropped */
		hw_cqe(&p.ce, MLX5_CQE_REQ_ERR, QPN, (uint16_t)(base + 2), 0,
		       MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, 0);
		got = 0;
		for (int i = 0; i < 8 && got < 3; i++) {
			int n = zd_mlx5_cq_poll(p.evd, budget);

			cr_assert(n >= 0 && n <= budget, "budget %d, %d events", budget, n);
			got += n;
		}
		cr_assert_eq(got, 3, "three events (the suppressed send and the unknown QP none)");
		cr_assert_eq(zd_mlx5_cq_poll(p.evd, budget), 0, "CQ drained");
		for (int i = 0; i < 3; i++) {
			d = pollenv_next_event(&p);
			if (d.operation == DAT_DTO_RECEIVE) {
				cr_assert_eq(i, slow_first ? 0 : 1);
				cr_assert_eq(d.user_cookie.as_64, 20);
				cr_assert_eq(d.transfered_length, 33);
				cr_assert_eq(d.status, DAT_DTO_SUCCESS);
			} else if (d.status == DAT_DTO_SUCCESS) {
				cr_assert_eq(i, slow_first ? 1 : 0);
				cr_assert_eq(d.user_cookie.as_64, 10);
				cr_assert_eq(d.operation, DAT_DTO_RDMA_WRITE);
				cr_assert_eq(d.transfered_length, 8);
			} else {
				cr_assert_eq(i, 2);
				cr_assert_eq(d.user_cookie.as_64, 12);
				cr_assert_eq(d.status, DAT_DTO_ERR_REMOTE_ACCESS);
				cr_assert_eq(d.transfered_length, 0);
			}
		}
		cr_assert_eq(atomic_load(&p.qp->sq.ci), p.qp->sq.pi, "all three WQEs retired");
		cr_assert_eq(p.cq->pass % 2, 0, "every pass ended");
		cr_assert_eq(p.ce.dbrec[ZD_MLX5_CQ_SET_CI], htobe32(p.cq->q.ci & 0xffffff));
	}
	pollenv_fini(&p);
}

Test(mlx5, fast_poll_mixed_cqes_every_budget)
{
	for (int budget = 1; budget <= 5; budget++) {
		mixed_round(budget, 0);
		mixed_round(budget, 1);
	}
}
