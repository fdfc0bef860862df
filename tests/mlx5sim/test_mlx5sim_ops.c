/*
 * The software mlx5 device, two NICs in one process: every opcode lands
 * its data and writes the CQE fields the PRM defines; protection errors
 * give their syndromes, leave the target untouched and flush what follows;
 * RNR, SRQ, unsignaled WQEs, tiny queues wrapping, events, CQ overrun and
 * the BlueFlame checks; writes with immediate data (RNR, SRQ, no right)
 * and atomics on host-order words with big-endian results.
 */
#include "mlx5sim_test.h"

#define BUF 4096

static struct zd_mlx5sim_nic *na, *nb;
static uint32_t pda, pdb, pdb2;
static struct t_cq sca, rca, scb, rcb;
static struct t_qp qa, qb;
static uint8_t *la, *lb;                 /* registered buffers */
static uint32_t ka, kb;                  /* their keys (lkey == rkey) */

static void setup(void)
{
	uint32_t r;

	t_end_open(&na, &pda, &sca, &rca);
	t_end_open(&nb, &pdb, &scb, &rcb);
	cr_assert_eq(zd_mlx5sim_pd_alloc(nb, &pdb2), 0);
	t_qp_make(na, pda, &sca, &rca, 0, 8, 4, &qa);
	t_qp_make(nb, pdb, &scb, &rcb, 0, 8, 4, &qb);
	t_connect(na, &qa, nb, &qb);
	la = aligned_alloc(64, BUF);
	lb = aligned_alloc(64, BUF);
	memset(la, 0xa5, BUF);
	memset(lb, 0, BUF);
	cr_assert_eq(zd_mlx5sim_mr_add(na, pda, la, BUF, T_ACC_ALL, &ka, &r), 0);
	cr_assert_eq(r, ka);
	cr_assert_neq(ka, MLX5_INVALID_LKEY);
	cr_assert_eq(zd_mlx5sim_mr_add(nb, pdb, lb, BUF, T_ACC_ALL, &kb, &r), 0);
}

static void teardown(void)
{
	zd_mlx5sim_nic_close(na);
	zd_mlx5sim_nic_close(nb);
	free(la);
	free(lb);
}

TestSuite(ops, .init = setup, .fini = teardown, .timeout = 60);

static void check_req(const struct mlx5_cqe64 *c, struct t_qp *qp, uint8_t opcode, uint16_t idx)
{
	cr_assert_eq(t_op(c), MLX5_CQE_REQ, "cqe opcode %u syndrome %#x", t_op(c), t_syn(c));
	cr_assert_eq(be32toh(c->sop_drop_qpn) >> 24, opcode);
	cr_assert_eq(be32toh(c->sop_drop_qpn) & 0xffffff, qp->qpn);
	cr_assert_eq(be16toh(c->wqe_counter), idx);
}

Test(ops, rdma_write_data_and_inline)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;
	uint16_t idx;

	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)lb + 100, kb);
	t_wqe_data(&w, la, 1000, ka);
	idx = t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	check_req(&c, &qa, MLX5_OPCODE_RDMA_WRITE, idx);
	cr_assert_eq(memcmp(lb + 100, la, 1000), 0);
	cr_assert_eq(lb[99], 0);
	cr_assert_eq(lb[1100], 0);

	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)lb, kb);
	t_wqe_inline(&w, "inline8!", 8);
	idx = t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	check_req(&c, &qa, MLX5_OPCODE_RDMA_WRITE, idx);
	cr_assert_eq(memcmp(lb, "inline8!", 8), 0);
	t_none(&rcb, 20);
}

/* As a device's: once the target's deregistration returns, no write of a
 * copy that was in flight lands any more (it waits for the copy). */
Test(ops, deregistration_waits_for_the_copy_in_flight)
{
	const size_t big = 32u << 20;
	uint8_t *src = aligned_alloc(4096, big), *dst = aligned_alloc(4096, big);
	uint32_t ks, kd, r;
	struct t_wqe w;
	struct mlx5_cqe64 c;
	uint64_t end;

	cr_assert(src && dst);
	memset(src, 0x5a, big);
	memset(dst, 0, big);
	cr_assert_eq(zd_mlx5sim_mr_add(na, pda, src, big, T_ACC_ALL, &ks, &r), 0);
	cr_assert_eq(zd_mlx5sim_mr_add(nb, pdb, dst, big, T_ACC_ALL, &kd, &r), 0);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)dst, kd);
	t_wqe_data(&w, src, (uint32_t)big, ks);
	t_post(&qa, &w, T_BF);
	/* The engine is halfway (whichever way its copy runs). */
	end = t_now_ms() + 10000;
	while (!__atomic_load_n(&dst[big / 2], __ATOMIC_RELAXED))
		cr_assert(t_now_ms() < end, "the write never started");
	cr_assert_eq(zd_mlx5sim_mr_remove(nb, kd), 0);
	for (size_t i = 0; i < big; i += 4096)
		cr_assert_eq(dst[i], 0x5a, "byte %zu not written when the deregistration returned", i);
	cr_assert_eq(dst[big - 1], 0x5a);
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ, "syndrome %#x", t_syn(&c));
	cr_assert_eq(zd_mlx5sim_mr_remove(na, ks), 0);
	free(src);
	free(dst);
}

Test(ops, rdma_read)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;

	for (int i = 0; i < 300; i++)
		lb[i] = (uint8_t)i;
	memset(la, 0, BUF);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_READ, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)lb, kb);
	t_wqe_data(&w, la, 100, ka);
	t_wqe_data(&w, la + 1000, 200, ka);
	t_post(&qa, &w, T_DB8);
	c = t_wait(&sca);
	check_req(&c, &qa, MLX5_OPCODE_RDMA_READ, 0);
	cr_assert_eq(be32toh(c.byte_cnt), 300);
	cr_assert_eq(memcmp(la, lb, 100), 0);
	cr_assert_eq(memcmp(la + 1000, lb + 100, 200), 0);
}

Test(ops, send_and_send_imm)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;

	t_recv(&qb, lb, 64, kb);
	t_recv(&qb, lb + 64, 64, kb);
	memcpy(la, "hello mlx5", 10);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED, 0);
	t_wqe_data(&w, la, 10, ka);
	t_post(&qa, &w, T_BF);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_SEND_IMM, MLX5_WQE_CTRL_CQ_UPDATE, htobe32(0xdeadbeef));
	t_wqe_inline(&w, "imm!", 4);
	t_post(&qa, &w, T_BF);

	c = t_wait(&sca);
	check_req(&c, &qa, MLX5_OPCODE_SEND, 0);
	c = t_wait(&sca);
	check_req(&c, &qa, MLX5_OPCODE_SEND_IMM, 1);

	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_SEND);
	cr_assert(c.op_own & 2, "solicited bit");
	cr_assert_eq(be32toh(c.byte_cnt), 10);
	cr_assert_eq(be32toh(c.sop_drop_qpn) & 0xffffff, qb.qpn);
	cr_assert_eq(be32toh(c.flags_rqpn) & 0xffffff, qa.qpn);
	cr_assert_eq(be16toh(c.wqe_counter), 0);
	cr_assert_eq(memcmp(lb, "hello mlx5", 10), 0);
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_SEND_IMM);
	cr_assert_not(c.op_own & 2);
	cr_assert_eq(be32toh(c.imm_inval_pkey), 0xdeadbeef);
	cr_assert_eq(be32toh(c.byte_cnt), 4);
	cr_assert_eq(be16toh(c.wqe_counter), 1);
	cr_assert_eq(memcmp(lb + 64, "imm!", 4), 0);
}

Test(ops, rdma_write_imm_consumes_a_receive)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;

	t_recv(&qb, lb + 2048, 16, kb);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_WQE_CTRL_CQ_UPDATE, htobe32(77));
	t_wqe_raddr(&w, (uintptr_t)lb + 8, kb);
	t_wqe_data(&w, la, 32, ka);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	check_req(&c, &qa, MLX5_OPCODE_RDMA_WRITE_IMM, 0);
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_WR_IMM);
	cr_assert_eq(be32toh(c.imm_inval_pkey), 77);
	cr_assert_eq(be32toh(c.byte_cnt), 32);
	cr_assert_eq(memcmp(lb + 8, la, 32), 0);
	cr_assert_eq(lb[2048], 0, "a write with immediate scatters nothing into the receive");
}

/* As a ConnectX in its default requester mode: operands big-endian in the
 * WQE, the target word the host's, the old value back big-endian. */
Test(ops, atomics_host_target_big_endian_result)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;
	uint64_t *target = (uint64_t *)(lb + 512), *res = (uint64_t *)(la + 512);

	*target = 40;
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_ATOMIC_FA, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)target, kb);
	t_wqe_atomic(&w, 2, 0);
	t_wqe_data(&w, res, 8, ka);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	check_req(&c, &qa, MLX5_OPCODE_ATOMIC_FA, 0);
	cr_assert_eq(be32toh(c.byte_cnt), 8);
	cr_assert_eq(be64toh(*res), 40);
	cr_assert_eq(*target, 42);

	/* compare fails: nothing swapped, old value returned */
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_ATOMIC_CS, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)target, kb);
	t_wqe_atomic(&w, 7, 41);
	t_wqe_data(&w, res, 8, ka);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	check_req(&c, &qa, MLX5_OPCODE_ATOMIC_CS, 1);
	cr_assert_eq(be64toh(*res), 42);
	cr_assert_eq(*target, 42);
	/* compare matches */
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_ATOMIC_CS, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)target, kb);
	t_wqe_atomic(&w, 7, 42);
	t_wqe_data(&w, res, 8, ka);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	check_req(&c, &qa, MLX5_OPCODE_ATOMIC_CS, 2);
	cr_assert_eq(be64toh(*res), 42);
	cr_assert_eq(*target, 7);
	/* a carry across bytes, as only host order gets right */
	*target = 0x00000000ffffffffull;
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_ATOMIC_FA, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)target, kb);
	t_wqe_atomic(&w, 1, 0);
	t_wqe_data(&w, res, 8, ka);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	check_req(&c, &qa, MLX5_OPCODE_ATOMIC_FA, 3);
	cr_assert_eq(be64toh(*res), 0x00000000ffffffffull);
	cr_assert_eq(*target, 0x0000000100000000ull);
}

/* Unsignaled WQEs complete silently; a tiny SQ (8 BBs) and CQ (4 CQEs)
 * wrap many times; multi-block WQEs straddle the end of the SQ. */
Test(ops, unsignaled_and_wraparound)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;
	uint8_t big[200];

	for (int i = 0; i < 100; i++) {
		bool sig = i % 2 == 1;  /* at most 2 x 4 BBs outstanding */
		uint16_t idx;

		memset(big, i, sizeof(big));
		t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_WRITE, sig ? MLX5_WQE_CTRL_CQ_UPDATE : 0, 0);
		t_wqe_raddr(&w, (uintptr_t)lb + (i % 8) * 256, kb);
		t_wqe_inline(&w, big, (uint32_t)(i % 4 == 0 ? 200 : 8 + i)); /* up to 4 BBs */
		/* Room: at most 8 BBs outstanding, retired by signaled CQEs. */
		idx = t_post(&qa, &w, (i / 2) % 2 ? T_BF : T_DB8);
		if (sig || i == 99) {
			if (!sig) {
				t_wqe_ctrl(&w, &qa, MLX5_OPCODE_NOP, MLX5_WQE_CTRL_CQ_UPDATE, 0);
				idx = t_post(&qa, &w, T_BF);
			}
			c = t_wait(&sca);
			cr_assert_eq(t_op(&c), MLX5_CQE_REQ, "i=%d syndrome %#x", i, t_syn(&c));
			cr_assert_eq(be16toh(c.wqe_counter), idx);
			cr_assert_eq(lb[(i % 8) * 256], (uint8_t)i);
			cr_assert_eq(lb[((i + 7) % 8) * 256], (uint8_t)(i - 1));
		}
	}
	t_none(&sca, 20);
	struct zd_mlx5sim_stats st;

	zd_mlx5sim_nic_stats(na, &st);
	cr_assert_eq(st.bf_mismatch, 0);
	cr_assert_eq(st.db_order, 0);
	cr_assert_gt(st.bf_checked, 10);
}

static void expect_error_then_flush(uint8_t syndrome, const uint8_t *snap, bool peer_err)
{
	struct mlx5_cqe64 c;
	struct t_wqe w;

	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ_ERR, "opcode %u", t_op(&c));
	cr_assert_eq(t_syn(&c), syndrome, "syndrome %#x, want %#x", t_syn(&c), syndrome);
	cr_assert_eq(be16toh(((struct mlx5_err_cqe *)&c)->wqe_counter), 0);
	cr_assert_eq(be32toh(((struct mlx5_err_cqe *)&c)->s_wqe_opcode_qpn) & 0xffffff, qa.qpn);
	cr_assert_eq(memcmp(lb, snap, BUF), 0, "target untouched");
	t_wait_state(na, qa.qpn, ZD_MLX5SIM_QPS_ERR);
	/* An unsignaled WQE after the error still completes: flushed. */
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_WRITE, 0, 0);
	t_wqe_raddr(&w, (uintptr_t)lb, kb);
	t_wqe_inline(&w, "x", 1);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ_ERR);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	cr_assert_eq(be16toh(((struct mlx5_err_cqe *)&c)->wqe_counter), 1);
	cr_assert_eq(memcmp(lb, snap, BUF), 0, "flushed WQE did nothing");
	if (peer_err)
		t_wait_state(nb, qb.qpn, ZD_MLX5SIM_QPS_ERR);
	else
		cr_assert_eq(zd_mlx5sim_qp_state(nb, qb.qpn), ZD_MLX5SIM_QPS_RTS);
}

static uint8_t snap[BUF];

static void post_write(uint64_t raddr, uint32_t rkey, void *laddr, uint32_t len, uint32_t lkey)
{
	struct t_wqe w;

	memcpy(snap, lb, BUF);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_WRITE, 0, 0);  /* errors complete anyway */
	t_wqe_raddr(&w, raddr, rkey);
	t_wqe_data(&w, laddr, len, lkey);
	t_post(&qa, &w, T_BF);
}

Test(ops, bad_lkey)
{
	post_write((uintptr_t)lb, kb, la, 8, ka + 1);
	expect_error_then_flush(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, snap, false);
}

Test(ops, local_out_of_bounds)
{
	post_write((uintptr_t)lb, kb, la + BUF - 4, 8, ka);
	expect_error_then_flush(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, snap, false);
}

Test(ops, bad_rkey)
{
	post_write((uintptr_t)lb, kb ^ 0x1000, la, 8, ka);
	expect_error_then_flush(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, snap, true);
}

Test(ops, remote_out_of_bounds)
{
	post_write((uintptr_t)lb + BUF - 7, kb, la, 8, ka);
	expect_error_then_flush(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, snap, true);
}

Test(ops, missing_remote_write)
{
	uint32_t k, r;

	cr_assert_eq(zd_mlx5sim_mr_add(nb, pdb, lb, BUF, ZD_MLX5SIM_ACCESS_LOCAL_WRITE |
						    ZD_MLX5SIM_ACCESS_REMOTE_READ, &k, &r), 0);
	post_write((uintptr_t)lb, r, la, 8, ka);
	expect_error_then_flush(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, snap, true);
}

Test(ops, wrong_pd)
{
	uint32_t k, r;

	cr_assert_eq(zd_mlx5sim_mr_add(nb, pdb2, lb, BUF, T_ACC_ALL, &k, &r), 0);
	post_write((uintptr_t)lb, r, la, 8, ka);
	expect_error_then_flush(MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, snap, true);
}

Test(ops, missing_local_write_on_read)
{
	uint32_t k, r;
	struct t_wqe w;

	/* remote write needs local write, as verbs insists */
	cr_assert_eq(zd_mlx5sim_mr_add(na, pda, la, BUF, ZD_MLX5SIM_ACCESS_REMOTE_WRITE, &k, &r),
		     -EINVAL);
	cr_assert_eq(zd_mlx5sim_mr_add(na, pda, la, BUF, 0, &k, &r), 0);
	memcpy(snap, lb, BUF);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_READ, 0, 0);
	t_wqe_raddr(&w, (uintptr_t)lb, kb);
	t_wqe_data(&w, la, 8, k);
	t_post(&qa, &w, T_BF);
	expect_error_then_flush(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, snap, false);
}

Test(ops, receive_too_short_and_bad_receive_lkey)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;

	t_recv(&qb, lb, 4, kb);
	t_recv(&qb, lb + 64, 64, kb);
	memcpy(snap, lb, BUF);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_data(&w, la, 8, ka);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ_ERR);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_ERR);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
	cr_assert_eq(be16toh(((struct mlx5_err_cqe *)&c)->wqe_counter), 0);
	/* the responder QP errs: its other receive flushes */
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_ERR);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	cr_assert_eq(be16toh(((struct mlx5_err_cqe *)&c)->wqe_counter), 1);
	cr_assert_eq(memcmp(lb, snap, BUF), 0);
	cr_assert_eq(zd_mlx5sim_qp_state(nb, qb.qpn), ZD_MLX5SIM_QPS_ERR);
}

Test(ops, receive_bad_lkey)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;

	t_recv(&qb, lb, 64, kb + 0x100);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_inline(&w, "abc", 3);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
	c = t_wait(&rcb);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	cr_assert_eq(lb[0], 0);
}

Test(ops, bad_control_segment)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;

	t_wqe_ctrl(&w, &qa, 0x3e, MLX5_WQE_CTRL_CQ_UPDATE, 0);   /* no such opcode */
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
}

Test(ops, rnr_then_receive)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;
	struct zd_mlx5sim_stats st;
	struct t_qp qa2, qb2;

	/* a second pair keeps going while the first waits */
	t_qp_make(na, pda, &sca, &rca, 0, 8, 4, &qa2);
	t_qp_make(nb, pdb, &scb, &rcb, 0, 8, 4, &qb2);
	t_connect(na, &qa2, nb, &qb2);

	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_inline(&w, "late", 4);
	t_post(&qa, &w, T_BF);
	t_none(&sca, 50);
	t_none(&rcb, 1);

	t_wqe_ctrl(&w, &qa2, MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)lb + 100, kb);
	t_wqe_inline(&w, "other", 5);
	t_post(&qa2, &w, T_BF);
	c = t_wait(&sca);
	check_req(&c, &qa2, MLX5_OPCODE_RDMA_WRITE, 0);
	cr_assert_eq(memcmp(lb + 100, "other", 5), 0);

	zd_mlx5sim_nic_stats(na, &st);
	cr_assert_geq(st.rnr_retries, 1);
	t_recv(&qb, lb, 16, kb);
	c = t_wait(&sca);
	check_req(&c, &qa, MLX5_OPCODE_SEND, 0);
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_SEND);
	cr_assert_eq(memcmp(lb, "late", 4), 0);
	cr_assert_eq(zd_mlx5sim_qp_state(na, qa.qpn), ZD_MLX5SIM_QPS_RTS);
}

/* Receives into an SRQ complete in arrival order, from two QPs; the
 * consumer frees and reposts them in reverse order: the hardware follows
 * the next-WQE links and every buffer stays in use. */
Test(ops, srq_out_of_order_repost)
{
	struct t_srq s = { 0 };
	struct t_qp q1, q2, p1, p2;
	struct mlx5_cqe64 c;
	struct t_wqe w;
	uint16_t ind[3], got[3];
	int n = 0;

	cr_assert_eq(zd_mlx5sim_srq_create(nb, pdb, 4, 1, &s.d), 0);
	cr_assert_eq(s.d.wqe_cnt, 4);
	t_qp_make(nb, pdb, &scb, &rcb, s.d.srqn, 8, 0, &q1);
	t_qp_make(nb, pdb, &scb, &rcb, s.d.srqn, 8, 0, &q2);
	cr_assert_eq(q1.rq.wqe_cnt, 0);
	t_qp_make(na, pda, &sca, &rca, 0, 8, 4, &p1);
	t_qp_make(na, pda, &sca, &rca, 0, 8, 4, &p2);
	t_connect(na, &p1, nb, &q1);
	t_connect(na, &p2, nb, &q2);

	for (int i = 0; i < 3; i++)
		ind[i] = t_srq_post(&s, lb + 64 * i, 64, kb);
	for (int round = 0; round < 5; round++) {
		for (int k = 0; k < 3; k++, n++) {
			struct t_qp *p = n % 2 ? &p2 : &p1;
			uint8_t msg[8];
			int slot = -1;

			memset(msg, 'a' + n % 26, sizeof(msg));
			t_wqe_ctrl(&w, p, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
			t_wqe_inline(&w, msg, sizeof(msg));
			t_post(p, &w, T_BF);
			c = t_wait(&sca);
			cr_assert_eq(t_op(&c), MLX5_CQE_REQ, "n %d syndrome %#x", n, t_syn(&c));
			c = t_wait(&rcb);
			cr_assert_eq(t_op(&c), MLX5_CQE_RESP_SEND);
			cr_assert_eq(be32toh(c.srqn_uidx) & 0xffffff, s.d.srqn);
			cr_assert_eq(be32toh(c.sop_drop_qpn) & 0xffffff, (n % 2 ? q2 : q1).qpn);
			got[k] = be16toh(c.wqe_counter);
			for (int i = 0; i < 3; i++)
				if (ind[i] == got[k])
					slot = i;
			cr_assert_geq(slot, 0, "n %d: wqe_counter %u is not a posted WQE", n, got[k]);
			cr_assert_eq(memcmp(lb + 64 * slot, msg, sizeof(msg)), 0);
		}
		/* all three consumed: nothing left, the next send waits (RNR) */
		for (int k = 2; k >= 0; k--) {
			int slot = 0;

			for (int i = 0; i < 3; i++)
				if (ind[i] == got[k])
					slot = i;
			t_srq_free(&s, got[k]);
			ind[slot] = t_srq_post(&s, lb + 64 * slot, 64, kb);
		}
	}
}

Test(ops, cq_overrun)
{
	struct t_wqe w;
	struct zd_mlx5sim_stats st;

	for (int i = 0; i < 5; i++) {
		t_wqe_ctrl(&w, &qa, MLX5_OPCODE_NOP, MLX5_WQE_CTRL_CQ_UPDATE, 0);
		t_post(&qa, &w, T_BF);
	}
	/* nobody polls: the fifth CQE finds the 4-entry CQ full */
	t_wait_state(na, qa.qpn, ZD_MLX5SIM_QPS_ERR);
	cr_assert(zd_mlx5sim_cq_in_error(na, sca.d.cqn));
	zd_mlx5sim_nic_stats(na, &st);
	cr_assert_eq(st.cq_overrun, 1);
	struct mlx5_cqe64 c;

	for (int i = 0; i < 4; i++) {
		c = t_wait(&sca);
		cr_assert_eq(t_op(&c), MLX5_CQE_REQ);
		cr_assert_eq(be16toh(c.wqe_counter), i);
	}
	t_none(&sca, 20);
}

Test(ops, events_when_armed)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;
	void *fired = NULL;

	t_arm(&rcb, false);
	cr_assert_eq(zd_mlx5sim_event_wait(nb, 5), 0, "armed CQ without a CQE fired");
	cr_assert_eq(zd_mlx5sim_event_get(nb, &fired), 0);
	t_recv(&qb, lb, 16, kb);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_SEND, 0, 0);
	t_wqe_inline(&w, "ev", 2);
	t_post(&qa, &w, T_BF);
	cr_assert_eq(zd_mlx5sim_event_wait(nb, 10000), 1);
	cr_assert_eq(zd_mlx5sim_event_get(nb, &fired), 1);
	cr_assert_eq(fired, &rcb);
	cr_assert_eq(zd_mlx5sim_event_get(nb, &fired), 0, "one event per arm");
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_SEND);

	/* not armed (the event consumed the arm): no event */
	t_recv(&qb, lb, 16, kb);
	t_post(&qa, &w, T_BF);
	c = t_wait(&rcb);
	cr_assert_eq(zd_mlx5sim_event_wait(nb, 20), 0);

	/* armed after a CQE arrived but before it was polled: fires at once */
	t_recv(&qb, lb, 16, kb);
	t_post(&qa, &w, T_BF);
	while ((__atomic_load_n(&((struct mlx5_cqe64 *)rcb.d.buf)[rcb.ci & 3].op_own,
				__ATOMIC_ACQUIRE) >> 4) == MLX5_CQE_INVALID)
		usleep(50);
	t_arm(&rcb, false);
	cr_assert_eq(zd_mlx5sim_event_wait(nb, 10000), 1);
	cr_assert_eq(zd_mlx5sim_event_get(nb, &fired), 1);
	cr_assert_eq(fired, &rcb);

	/* a kick wakes a waiter with nothing to report */
	zd_mlx5sim_event_kick(nb);
	cr_assert_eq(zd_mlx5sim_event_wait(nb, 10000), 1);
	cr_assert_eq(zd_mlx5sim_event_get(nb, &fired), 0);
}

/* The BlueFlame copy must equal the WQE in the SQ, and the doorbell
 * record must be written first: both violations are counted. */
Test(ops, blueflame_checks)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;
	struct zd_mlx5sim_stats st;
	uint8_t copy[64];

	/* 1: BlueFlame copy differs from the SQ */
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)lb, kb);
	t_wqe_inline(&w, "good", 4);
	t_post(&qa, &w, T_NONE);
	memcpy(copy, w.b, 64);
	copy[36] ^= 0xff;                     /* inline data in the copy only */
	qa.sq.dbrec[0] = htobe32(qa.pi & 0xffff);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	memcpy((char *)qa.sq.bf_reg + qa.bf_off, copy, 64);
	qa.bf_off ^= qa.sq.bf_size;
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ);
	cr_assert_eq(memcmp(lb, "good", 4), 0, "the SQ's WQE is what executes");
	/* the next post proves the writer finished the copy */
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_NOP, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	usleep(5000);
	zd_mlx5sim_nic_stats(na, &st);
	cr_assert_eq(st.bf_mismatch, 1);
	cr_assert_eq(st.db_order, 0);

	/* 2: BlueFlame copy before the doorbell record */
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_NOP, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_post(&qa, &w, T_NONE);
	memcpy((char *)qa.sq.bf_reg + qa.bf_off, w.b, 64);
	qa.bf_off ^= qa.sq.bf_size;
	usleep(20000);                        /* the NIC sees the copy first */
	qa.sq.dbrec[0] = htobe32(qa.pi & 0xffff);
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ);
	zd_mlx5sim_nic_stats(na, &st);
	cr_assert_eq(st.db_order, 1);
	cr_assert_eq(st.bf_mismatch, 1);
}

/* QPs of one NIC connected to each other (loopback). */
Test(ops, loopback_in_one_nic)
{
	struct t_qp x, y;
	struct t_wqe w;
	struct mlx5_cqe64 c;
	uint32_t k2, r2;
	uint8_t *m = aligned_alloc(64, 256);

	cr_assert_eq(zd_mlx5sim_mr_add(na, pda, m, 256, T_ACC_ALL, &k2, &r2), 0);
	memset(m, 0, 256);
	t_qp_make(na, pda, &sca, &rca, 0, 4, 4, &x);
	t_qp_make(na, pda, &sca, &rca, 0, 4, 4, &y);
	t_connect(na, &x, na, &y);
	t_wqe_ctrl(&w, &x, MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)m + 3, r2);
	t_wqe_inline(&w, "loop", 4);
	t_post(&x, &w, T_BF);
	c = t_wait(&sca);
	check_req(&c, &x, MLX5_OPCODE_RDMA_WRITE, 0);
	cr_assert_eq(memcmp(m + 3, "loop", 4), 0);
	cr_assert_eq(zd_mlx5sim_qp_destroy(na, x.qpn), 0);
	cr_assert_eq(zd_mlx5sim_qp_destroy(na, y.qpn), 0);
	free(m);
}

Test(ops, control_path_refusals)
{
	uint32_t k, r, pd;
	struct zd_mlx5_cq_desc d;

	cr_assert_eq(zd_mlx5sim_pd_free(na, pda), -EBUSY);
	cr_assert_eq(zd_mlx5sim_cq_destroy(na, sca.d.cqn), -EBUSY);
	cr_assert_eq(zd_mlx5sim_mr_add(na, 63, la, 8, 0, &k, &r), -EINVAL);
	cr_assert_eq(zd_mlx5sim_mr_remove(na, ka ^ 0x100), -EINVAL);
	cr_assert_eq(zd_mlx5sim_cq_create(na, 0, NULL, &d), -EINVAL);
	cr_assert_eq(zd_mlx5sim_pd_alloc(na, &pd), 0);
	cr_assert_eq(zd_mlx5sim_pd_free(na, pd), 0);
	cr_assert_eq(zd_mlx5sim_qp_destroy(na, qa.qpn), 0);
	cr_assert_eq(zd_mlx5sim_qp_state(na, qa.qpn), -EINVAL);
}

/* The NIC checks the control segment: the QPN, the WQE index, ds. */
Test(ops, control_segment_checks)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;
	struct mlx5_wqe_ctrl_seg *ctrl = (void *)w.b;
	uint32_t mask = qa.sq.wqe_cnt - 1;

	/* wrong QPN: written by hand after t_post's own fill */
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_NOP, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_post(&qa, &w, T_NONE);
	ctrl = (void *)((char *)qa.sq.buf + ((qa.pi - 1) & mask) * 64);
	ctrl->qpn_ds = htobe32((qa.qpn + 1) << 8 | 1);
	qa.sq.dbrec[0] = htobe32(qa.pi & 0xffff);
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ_ERR);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
	cr_assert_eq(be16toh(((struct mlx5_err_cqe *)&c)->wqe_counter), 0);
	t_wait_state(na, qa.qpn, ZD_MLX5SIM_QPS_ERR);
	/* the peer is not taken down by a local error */
	cr_assert_eq(zd_mlx5sim_qp_state(nb, qb.qpn), ZD_MLX5SIM_QPS_RTS);
}

Test(ops, wqe_index_and_ds_checks)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;
	struct mlx5_wqe_ctrl_seg *ctrl;

	/* a WQE claiming 3 blocks when the doorbell record announces 1 */
	t_wqe_ctrl(&w, &qb, MLX5_OPCODE_NOP, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_post(&qb, &w, T_NONE);
	ctrl = qb.sq.buf;
	ctrl->qpn_ds = htobe32(qb.qpn << 8 | 12);
	qb.sq.dbrec[0] = htobe32(qb.pi & 0xffff);
	c = t_wait(&scb);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);

	/* a stale WQE index */
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_NOP, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_post(&qa, &w, T_NONE);
	ctrl = qa.sq.buf;
	ctrl->opmod_idx_opcode = htobe32(5 << 8 | MLX5_OPCODE_NOP);
	qa.sq.dbrec[0] = htobe32(qa.pi & 0xffff);
	c = t_wait(&sca);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
}

/* ibv_modify_qp(ERR): posted receives and sends flush; RESET empties the
 * queues and the data path starts again at index 0. */
Test(ops, modify_to_error_then_reset)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;

	t_recv(&qb, lb, 64, kb);
	t_recv(&qb, lb + 64, 64, kb);
	cr_assert_eq(zd_mlx5sim_qp_modify(nb, qb.qpn, ZD_MLX5SIM_QPS_ERR), 0);
	for (int i = 0; i < 2; i++) {
		c = t_wait(&rcb);
		cr_assert_eq(t_op(&c), MLX5_CQE_RESP_ERR);
		cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
		cr_assert_eq(be16toh(((struct mlx5_err_cqe *)&c)->wqe_counter), i);
	}
	/* the initiator finds its peer gone: retries exhausted */
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)lb, kb);
	t_wqe_inline(&w, "gone", 4);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
	cr_assert_eq(lb[0], 0);

	/* both back to RESET, reconnected: indices restart at 0 */
	cr_assert_eq(zd_mlx5sim_qp_modify(na, qa.qpn, ZD_MLX5SIM_QPS_RESET), 0);
	cr_assert_eq(zd_mlx5sim_qp_modify(nb, qb.qpn, ZD_MLX5SIM_QPS_RESET), 0);
	qa.pi = qb.pi = qa.rq_head = qb.rq_head = 0;
	t_connect(na, &qa, nb, &qb);
	t_recv(&qb, lb + 128, 64, kb);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_inline(&w, "again", 5);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ);
	cr_assert_eq(be16toh(c.wqe_counter), 0);
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_SEND);
	cr_assert_eq(be16toh(c.wqe_counter), 0);
	cr_assert_eq(memcmp(lb + 128, "again", 5), 0);
}

/* Solicited-only arming: an unsolicited CQE does not fire, a solicited one does. */
Test(ops, solicited_events)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;
	void *fired = NULL;

	t_arm(&rcb, true);
	t_recv(&qb, lb, 16, kb);
	t_recv(&qb, lb + 16, 16, kb);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_SEND, 0, 0);
	t_wqe_inline(&w, "a", 1);
	t_post(&qa, &w, T_BF);
	c = t_wait(&rcb);
	cr_assert_eq(zd_mlx5sim_event_wait(nb, 20), 0, "an unsolicited CQE fired");
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_SOLICITED, 0);
	t_wqe_inline(&w, "b", 1);
	t_post(&qa, &w, T_BF);
	cr_assert_eq(zd_mlx5sim_event_wait(nb, 10000), 1);
	cr_assert_eq(zd_mlx5sim_event_get(nb, &fired), 1);
	cr_assert_eq(fired, &rcb);
	c = t_wait(&rcb);
	cr_assert(c.op_own & 2);
}

Test(ops, wrong_local_pd)
{
	uint32_t pd2, k, r;

	cr_assert_eq(zd_mlx5sim_pd_alloc(na, &pd2), 0);
	cr_assert_eq(zd_mlx5sim_mr_add(na, pd2, la, BUF, T_ACC_ALL, &k, &r), 0);
	post_write((uintptr_t)lb, kb, la, 8, k);
	expect_error_then_flush(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, snap, false);
}

Test(ops, atomic_misaligned_and_without_right)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;
	uint32_t k, r;

	memcpy(snap, lb, BUF);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_ATOMIC_FA, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)lb + 4, kb);
	t_wqe_atomic(&w, 1, 0);
	t_wqe_data(&w, la, 8, ka);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
	cr_assert_eq(memcmp(lb, snap, BUF), 0);

	/* a fresh pair: an MR with remote write but no remote atomic */
	struct t_qp x, y;

	t_qp_make(na, pda, &sca, &rca, 0, 8, 4, &x);
	t_qp_make(nb, pdb, &scb, &rcb, 0, 8, 4, &y);
	t_connect(na, &x, nb, &y);
	cr_assert_eq(zd_mlx5sim_mr_add(nb, pdb, lb, BUF, ZD_MLX5SIM_ACCESS_LOCAL_WRITE |
						    ZD_MLX5SIM_ACCESS_REMOTE_WRITE, &k, &r), 0);
	t_wqe_ctrl(&w, &x, MLX5_OPCODE_ATOMIC_CS, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)lb + 8, r);
	t_wqe_atomic(&w, 1, 0);
	t_wqe_data(&w, la, 8, ka);
	t_post(&x, &w, T_BF);
	c = t_wait(&sca);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	cr_assert_eq(memcmp(lb, snap, BUF), 0);
	t_wait_state(nb, y.qpn, ZD_MLX5SIM_QPS_ERR);
}

/* ---- writes with immediate data ---- */

/* No receive posted: the write waits at the head of the SQ (RNR, retried
 * as a send is), nothing placed; once a receive comes it lands, data
 * first, and consumes that receive. */
Test(ops, rdma_write_imm_rnr_then_receive)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;
	struct zd_mlx5sim_stats st;

	memcpy(la, "written late", 12);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_WQE_CTRL_CQ_UPDATE, htobe32(0x5150));
	t_wqe_raddr(&w, (uintptr_t)lb + 300, kb);
	t_wqe_inline(&w, la, 12);
	t_post(&qa, &w, T_BF);
	t_none(&sca, 50);
	t_none(&rcb, 1);
	cr_assert_eq(lb[300], 0, "nothing placed before a receive is there");
	zd_mlx5sim_nic_stats(na, &st);
	cr_assert_geq(st.rnr_retries, 1);
	cr_assert_eq(zd_mlx5sim_qp_state(na, qa.qpn), ZD_MLX5SIM_QPS_RTS);
	t_recv(&qb, lb + 2048, 16, kb);
	c = t_wait(&sca);
	check_req(&c, &qa, MLX5_OPCODE_RDMA_WRITE_IMM, 0);
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_WR_IMM);
	cr_assert_eq(be32toh(c.imm_inval_pkey), 0x5150);
	cr_assert_eq(be32toh(c.byte_cnt), 12);
	cr_assert_eq(be16toh(c.wqe_counter), 0);
	cr_assert_eq(memcmp(lb + 300, "written late", 12), 0);
}

/* Without remote write the responder refuses before it takes a receive:
 * the requester's remote access error, the target untouched, and the
 * receive flushed (not consumed) as the responder's QP goes to error. */
Test(ops, rdma_write_imm_without_remote_write)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;
	uint32_t k, r;

	cr_assert_eq(zd_mlx5sim_mr_add(nb, pdb, lb, BUF, ZD_MLX5SIM_ACCESS_LOCAL_WRITE |
						    ZD_MLX5SIM_ACCESS_REMOTE_READ, &k, &r), 0);
	t_recv(&qb, lb + 2048, 16, kb);
	memcpy(snap, lb, BUF);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_WQE_CTRL_CQ_UPDATE, htobe32(1));
	t_wqe_raddr(&w, (uintptr_t)lb, r);
	t_wqe_data(&w, la, 64, ka);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ_ERR);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	cr_assert_eq(memcmp(lb, snap, BUF), 0, "target untouched");
	t_wait_state(nb, qb.qpn, ZD_MLX5SIM_QPS_ERR);
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_ERR);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	t_none(&rcb, 20);
}

/* Into an SRQ: the SRQ's next WQE is consumed, named by its index. */
Test(ops, rdma_write_imm_into_srq)
{
	struct zd_mlx5sim_nic *n3;
	struct t_cq s3, r3;
	struct t_qp x, y;
	struct t_srq srq = { 0 };
	struct t_wqe w;
	struct mlx5_cqe64 c;
	uint32_t pd3, k3, rk3;
	uint16_t ind;
	uint8_t *tb = aligned_alloc(64, BUF);

	memset(tb, 0, BUF);
	t_end_open(&n3, &pd3, &s3, &r3);
	cr_assert_eq(zd_mlx5sim_srq_create(n3, pd3, 4, 1, &srq.d), 0);
	cr_assert_eq(zd_mlx5sim_mr_add(n3, pd3, tb, BUF, T_ACC_ALL, &k3, &rk3), 0);
	t_qp_make(na, pda, &sca, &rca, 0, 8, 4, &x);
	t_qp_make(n3, pd3, &s3, &r3, srq.d.srqn, 8, 0, &y);
	t_connect(na, &x, n3, &y);
	t_srq_post(&srq, tb + 1024, 16, k3);
	ind = t_srq_post(&srq, tb + 2048, 16, k3);
	memcpy(la, "to the srq", 10);
	for (int i = 0; i < 2; i++) {
		t_wqe_ctrl(&w, &x, MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_WQE_CTRL_CQ_UPDATE,
			   htobe32(0xa0 + (uint32_t)i));
		t_wqe_raddr(&w, (uintptr_t)tb + 16 * (uint32_t)i, rk3);
		t_wqe_data(&w, la, 10, ka);
		t_post(&x, &w, T_BF);
		c = t_wait(&sca);
		check_req(&c, &x, MLX5_OPCODE_RDMA_WRITE_IMM, (uint16_t)i);
		c = t_wait(&r3);
		cr_assert_eq(t_op(&c), MLX5_CQE_RESP_WR_IMM);
		cr_assert_eq(be32toh(c.imm_inval_pkey), 0xa0 + (uint32_t)i);
		cr_assert_eq(be32toh(c.srqn_uidx) & 0xffffff, srq.d.srqn);
		cr_assert_eq(be16toh(c.wqe_counter), i ? ind : (uint16_t)(ind - 1));
		cr_assert_eq(memcmp(tb + 16 * i, "to the srq", 10), 0);
	}
	cr_assert_eq(tb[1024], 0, "nothing scattered into the receive buffers");
	cr_assert_eq(tb[2048], 0);
	zd_mlx5sim_nic_close(n3);
	free(tb);
}
