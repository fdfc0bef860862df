/*
 * A CQ slot claimed by a writer that died before writing it: the engine of
 * a peer NIC writes responder CQEs into our CQ, and a peer process killed
 * between its claim and its owner byte left a hole where the consumer
 * stopped, hiding every later CQE of every connection.  The CQ's own
 * engine gives the slot up after ZD_MS_CQE_HOLE_NS as a NO_PACKET CQE.
 * The dead writer's state is made by hand (the claim, through the model's
 * internals): nothing else here knows more than the PRM formats.
 */
#include "mlx5sim_test.h"
#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

static struct zd_mlx5sim_nic *na, *nb;
static uint32_t pda, pdb;
static struct t_cq sca, rca, scb, rcb;
static struct t_qp qa, qb;
static uint8_t la[64], lb[64];

TestSuite(hole, .timeout = 60);

Test(hole, a_slot_claimed_and_never_written_is_given_up)
{
	struct zd_mlx5sim_stats st;
	struct mlx5_cqe64 c;
	struct t_wqe w;
	uint32_t ka, kb, r;
	uint64_t t0;

	t_end_open(&na, &pda, &sca, &rca);
	t_end_open(&nb, &pdb, &scb, &rcb);
	t_qp_make(na, pda, &sca, &rca, 0, 8, 4, &qa);
	t_qp_make(nb, pdb, &scb, &rcb, 0, 8, 4, &qb);
	t_connect(na, &qa, nb, &qb);
	cr_assert_eq(zd_mlx5sim_mr_add(na, pda, la, sizeof(la), T_ACC_ALL, &ka, &r), 0);
	cr_assert_eq(zd_mlx5sim_mr_add(nb, pdb, lb, sizeof(lb), T_ACC_ALL, &kb, &r), 0);

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
	zd_mlx5sim_nic_close(na);
	zd_mlx5sim_nic_close(nb);
}
