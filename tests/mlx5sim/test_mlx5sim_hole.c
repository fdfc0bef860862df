/*
 * Work a peer's engine took and never finished: the engine of a peer NIC
 * executes its sends into our QPs (it claims our receive, copies, writes
 * our CQE), so a peer process killed in the middle left a CQ slot claimed
 * and never written (the consumer stopped there, hiding every later CQE of
 * every connection), or a receive claimed and never completed (its
 * consumer waited forever).  The CQ's own engine gives the slot up after
 * ZD_MS_CQE_HOLE_NS as a NO_PACKET CQE; the QP's flush, once it is in
 * error, completes the receive FLUSHED after ZD_MS_RECV_STUCK_NS.  The
 * dead writer's state is made by hand (its claim, through the model's
 * internals): nothing else here knows more than the PRM formats.
 */
#include "mlx5sim_test.h"
#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

static struct zd_mlx5sim_nic *na, *nb;
static uint32_t pda, pdb;
static struct t_cq sca, rca, scb, rcb;
static struct t_qp qa, qb;
static uint8_t la[64], lb[64];

static uint32_t ka, kb;

/* Two NICs, a connected QP pair, a registered buffer on each. */
static void setup(void)
{
	uint32_t r;

	t_end_open(&na, &pda, &sca, &rca);
	t_end_open(&nb, &pdb, &scb, &rcb);
	t_qp_make(na, pda, &sca, &rca, 0, 8, 4, &qa);
	t_qp_make(nb, pdb, &scb, &rcb, 0, 8, 4, &qb);
	t_connect(na, &qa, nb, &qb);
	cr_assert_eq(zd_mlx5sim_mr_add(na, pda, la, sizeof(la), T_ACC_ALL, &ka, &r), 0);
	cr_assert_eq(zd_mlx5sim_mr_add(nb, pdb, lb, sizeof(lb), T_ACC_ALL, &kb, &r), 0);
}

static void teardown(void)
{
	zd_mlx5sim_nic_close(na);
	zd_mlx5sim_nic_close(nb);
}

TestSuite(hole, .init = setup, .fini = teardown, .timeout = 60);

Test(hole, a_slot_claimed_and_never_written_is_given_up)
{
	struct zd_mlx5sim_stats st;
	struct mlx5_cqe64 c;
	struct t_wqe w;
	uint64_t t0;


	/* A writer claims slot 0 of B's receive CQ and dies. */
	atomic_fetch_add(&zd_ms_cq_ctx(nb->sh, rcb.d.cqn - 1)->prod, 1);
	/* A's send lands in B's receive: its CQE goes to slot 1. */
	t_recv(&qb, lb, sizeof(lb), kb);
	memcpy(la, "behind the hole", 16);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_data(&w, la, 16, ka);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ, "syndrome %#x", t_syn(&c));
	t0 = t_now_ms();
	t_none(&rcb, 500);

	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_NO_PACKET, "the hole comes first, as NO_PACKET");
	cr_assert_geq(t_now_ms() - t0, ZD_MS_CQE_HOLE_NS / 1000000 - 100,
		      "given up before its writer had its time");
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_SEND);
	cr_assert_eq(be32toh(c.byte_cnt), 16);
	cr_assert_eq(memcmp(lb, "behind the hole", 16), 0);
	zd_mlx5sim_nic_stats(nb, &st);
	cr_assert_eq(st.cq_holes, 1);
	zd_mlx5sim_nic_stats(na, &st);
	cr_assert_eq(st.cq_holes, 0);
}

/* A receive claimed by a writer that died before it wrote the CQE: the
 * peer's engine takes our receive (the QP's rq_ci), copies, then writes
 * the CQE; killed in between, that receive never completed, not even
 * flushed, and a consumer waiting for it (dapltest's server) waited
 * forever.  Once the QP is in error, its flush decides such a claim after
 * ZD_MS_RECV_STUCK_NS (FLUSHED, in order), and the writer, were it to
 * come back, finds it decided and writes nothing. */
Test(hole, a_receive_claimed_and_never_completed_is_flushed)
{
	struct mlx5_cqe64 c;
	struct zd_ms_recv late = { .claim = 0 };
	struct zd_ms_qp *pq;
	uint64_t t0;

	t_recv(&qb, lb, 32, kb);
	t_recv(&qb, lb + 32, 32, kb);

	/* A's engine claims B's receive 0 and dies. */
	pq = zd_ms_qp_ctx(nb->sh, zd_ms_qpn_index(qb.qpn));
	atomic_fetch_add(&pq->rq_ci, 1);
	cr_assert_eq(zd_mlx5sim_qp_modify(nb, qb.qpn, ZD_MLX5SIM_QPS_ERR), 0);
	t0 = t_now_ms();
	t_none(&rcb, 500);
	for (uint16_t i = 0; i < 2; i++) {
		c = t_wait(&rcb);
		cr_assert_eq(t_op(&c), MLX5_CQE_RESP_ERR, "receive %u: opcode %u", i, t_op(&c));
		cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
		cr_assert_eq(be16toh(c.wqe_counter), i, "receives flushed in order");
	}
	cr_assert_geq(t_now_ms() - t0, ZD_MS_RECV_STUCK_NS / 1000000 - 100,
		      "flushed before its writer had its time");
	/* The writer comes back: decided already, it writes nothing. */
	cr_assert_not(zd_ms_recv_decide(pq, qb.qpn, &late));
	t_none(&rcb, 100);
}
