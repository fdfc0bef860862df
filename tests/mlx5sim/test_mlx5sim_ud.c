/*
 * The software mlx5 device's UD QPs, two NICs in one process, driven as a
 * ConnectX is: SEND WQEs with a datagram segment built by mlx5dv.h's own
 * mlx5dv_set_dgram_seg from the AV of an address handle, receives and
 * CQEs in the PRM's formats.  The datagram lands after the 40-byte GRH,
 * with the CQE fields a UD receive has; what reaches no QP is lost and
 * counted, what finds no receive is dropped and counted, a receive too
 * small fails alone, a send above the MTU fails and takes the QP to SQE
 * (its receives go on).
 */
#include "mlx5sim_test.h"

#define BUF     8192
#define GRH     40
#define QKEY_A  0x11111111u
#define QKEY_B  0x22222222u

static struct zd_mlx5sim_nic *na, *nb;
static uint32_t pda, pdb;
static struct t_cq sca, rca, scb, rcb;
static struct t_qp ua, ub;               /* UD QPs on A and B */
static uint8_t *la, *lb;                 /* registered buffers */
static uint32_t ka, kb;
static struct mlx5_wqe_av av_b, av_a;    /* A -> B's NIC, B -> A's NIC */
static void *ah_b, *ah_a;

static void ud_make(struct zd_mlx5sim_nic *n, uint32_t pdn, struct t_cq *scq, struct t_cq *rcq,
		    uint32_t srqn, uint32_t qkey, struct t_qp *qp)
{
	struct zd_mlx5sim_qp_attr a = {
		.pdn = pdn, .send_cqn = scq->d.cqn, .recv_cqn = rcq->d.cqn, .srqn = srqn,
		.sq_wqe_cnt = 16, .rq_wqe_cnt = srqn ? 0 : 8, .rq_max_sge = srqn ? 0 : 2,
		.type = ZD_MLX5SIM_QPT_UD,
	};

	memset(qp, 0, sizeof(*qp));
	cr_assert_eq(zd_mlx5sim_qp_create(n, &a, &qp->sq, &qp->rq, &qp->qpn), 0);
	cr_assert_eq(zd_mlx5sim_qp_modify(n, qp->qpn, ZD_MLX5SIM_QPS_INIT), 0);
	cr_assert_eq(zd_mlx5sim_qp_ud_ready(n, qp->qpn, qkey), 0);
	cr_assert_eq(zd_mlx5sim_qp_state(n, qp->qpn), ZD_MLX5SIM_QPS_RTS);
}

/* The AV of an address handle on @from for the NIC of @to's QP @qpn. */
static void ah_make(struct zd_mlx5sim_nic *from, struct zd_mlx5sim_nic *to, uint32_t qpn,
		    struct mlx5_wqe_av *av, void **ah)
{
	struct zd_mlx5sim_qp_addr a;

	cr_assert_eq(zd_mlx5sim_qp_addr(to, qpn, &a), 0);
	cr_assert_eq(zd_mlx5sim_ah_create(from, &a, av, ah), 0);
}

/* A NIC with a PD and a send and a receive CQ, roomy enough for a burst
 * of datagrams. */
static void end_open(struct zd_mlx5sim_nic **n, uint32_t *pd, struct t_cq *scq, struct t_cq *rcq)
{
	cr_assert_eq(zd_mlx5sim_nic_open(NULL, n), 0);
	cr_assert_eq(zd_mlx5sim_pd_alloc(*n, pd), 0);
	t_cq_make(*n, 64, scq);
	t_cq_make(*n, 64, rcq);
}

static void setup(void)
{
	uint32_t r;

	end_open(&na, &pda, &sca, &rca);
	end_open(&nb, &pdb, &scb, &rcb);
	ud_make(na, pda, &sca, &rca, 0, QKEY_A, &ua);
	ud_make(nb, pdb, &scb, &rcb, 0, QKEY_B, &ub);
	la = aligned_alloc(64, BUF);
	lb = aligned_alloc(64, BUF);
	memset(la, 0xa5, BUF);
	memset(lb, 0, BUF);
	cr_assert_eq(zd_mlx5sim_mr_add(na, pda, la, BUF, T_ACC_ALL, &ka, &r), 0);
	cr_assert_eq(zd_mlx5sim_mr_add(nb, pdb, lb, BUF, T_ACC_ALL, &kb, &r), 0);
	ah_make(na, nb, ub.qpn, &av_b, &ah_b);
	ah_make(nb, na, ua.qpn, &av_a, &ah_a);
}

static void teardown(void)
{
	zd_mlx5sim_ah_destroy(na, ah_b);
	zd_mlx5sim_ah_destroy(nb, ah_a);
	zd_mlx5sim_nic_close(na);
	zd_mlx5sim_nic_close(nb);
	free(la);
	free(lb);
}

TestSuite(ud, .init = setup, .fini = teardown, .timeout = 60);

/* The datagram segment, as rdma-core's mlx5 provider writes it: the AH's
 * AV with the destination QPN (extended AV) and the Q_Key. */
static void wqe_dgram(struct t_wqe *w, const struct mlx5_wqe_av *av, uint32_t qpn, uint32_t qkey)
{
	mlx5dv_set_dgram_seg((struct mlx5_wqe_datagram_seg *)(w->b + w->size),
			     (uint64_t)qkey << 32, qpn, 1, av->stat_rate_sl, av->fl_mlid,
			     be16toh(av->rlid), (uint8_t *)av->rmac, av->tclass, av->hop_limit,
			     be32toh(av->grh_gid_fl), (uint8_t *)av->rgid);
	w->size += sizeof(struct mlx5_wqe_datagram_seg);
}

/* A's UD QP sends @len bytes of la + @off to QP @qpn (Q_Key @qkey) through
 * @av; returns the WQE index. */
static uint16_t send_to(const struct mlx5_wqe_av *av, uint32_t qpn, uint32_t qkey, uint32_t off,
			uint32_t len)
{
	struct t_wqe w;

	t_wqe_ctrl(&w, &ua, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	wqe_dgram(&w, av, qpn, qkey);
	t_wqe_data(&w, la + off, len, ka);
	return t_post(&ua, &w, T_BF);
}

static void fill(uint8_t *p, uint32_t len, uint8_t seed)
{
	for (uint32_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seed + i * 13);
}

static void check_req(const struct mlx5_cqe64 *c, struct t_qp *qp, uint16_t idx)
{
	cr_assert_eq(t_op(c), MLX5_CQE_REQ, "cqe opcode %u syndrome %#x", t_op(c), t_syn(c));
	cr_assert_eq(be32toh(c->sop_drop_qpn) & 0xffffff, qp->qpn);
	cr_assert_eq(be16toh(c->wqe_counter), idx);
}

/* A UD receive's CQE: @len payload bytes after the GRH, from @src. */
static void check_recv(const struct mlx5_cqe64 *c, struct t_qp *dst, struct t_qp *src,
		       uint16_t counter, uint32_t len)
{
	cr_assert_eq(t_op(c), MLX5_CQE_RESP_SEND, "cqe opcode %u syndrome %#x", t_op(c), t_syn(c));
	cr_assert_eq(be32toh(c->byte_cnt), GRH + len);
	cr_assert_eq(be32toh(c->sop_drop_qpn) & 0xffffff, dst->qpn);
	cr_assert_eq(be32toh(c->flags_rqpn) & 0xffffff, src->qpn);
	cr_assert_eq((be32toh(c->flags_rqpn) >> 28) & 3, 1, "GRH in the buffer");
	cr_assert_eq(be16toh(c->wqe_counter), counter);
}

static uint64_t lost(struct zd_mlx5sim_nic *n)
{
	struct zd_mlx5sim_stats st;

	zd_mlx5sim_nic_stats(n, &st);
	return st.ud_lost;
}

Test(ud, datagram_after_the_grh)
{
	uint8_t gid_a[16], gid_b[16];
	struct mlx5_cqe64 c;
	struct zd_mlx5sim_stats st;
	uint16_t idx;

	t_recv(&ub, lb, 200, kb);
	fill(la, 100, 3);
	idx = send_to(&av_b, ub.qpn, QKEY_B, 0, 100);
	c = t_wait(&sca);
	check_req(&c, &ua, idx);
	c = t_wait(&rcb);
	check_recv(&c, &ub, &ua, 0, 100);
	cr_assert_eq(memcmp(lb + GRH, la, 100), 0);
	cr_assert_eq(lb[GRH + 100], 0);
	/* the GRH: IPv6 shaped, BTH next, the two port GIDs */
	zd_mlx5sim_port_gid(na, gid_a);
	zd_mlx5sim_port_gid(nb, gid_b);
	cr_assert_eq(lb[0] >> 4, 6);
	cr_assert_eq(lb[6], 0x1b);
	cr_assert_eq(lb[7], av_b.hop_limit);
	cr_assert_eq(be16toh(*(uint16_t *)(lb + 4)), 12 + 8 + 100 + 4);
	cr_assert_eq(memcmp(lb + 8, gid_a, 16), 0);
	cr_assert_eq(memcmp(lb + 24, gid_b, 16), 0);
	cr_assert_eq(memcmp(av_b.rgid, gid_b, 16), 0);
	cr_assert_neq(memcmp(gid_a, gid_b, 16), 0);
	zd_mlx5sim_nic_stats(na, &st);
	cr_assert_eq(st.ud_sent, 1);
	cr_assert_eq(st.ud_lost, 0);
}

Test(ud, inline_imm_solicited_and_both_ways)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;

	t_recv(&ub, lb, 100, kb);
	t_wqe_ctrl(&w, &ua, MLX5_OPCODE_SEND_IMM, MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED,
		   htobe32(0xfeedf00d));
	wqe_dgram(&w, &av_b, ub.qpn, QKEY_B);
	t_wqe_inline(&w, "datagram", 8);
	t_post(&ua, &w, T_BF);
	check_req((c = t_wait(&sca), &c), &ua, 0);
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_SEND_IMM);
	cr_assert_eq(be32toh(c.imm_inval_pkey), 0xfeedf00d);
	cr_assert(mlx5dv_get_cqe_se(&c));
	cr_assert_eq(be32toh(c.byte_cnt), GRH + 8);
	cr_assert_eq(memcmp(lb + GRH, "datagram", 8), 0);

	/* B answers through its own address handle for A */
	t_recv(&ua, la + 4096, 64, ka);
	memcpy(lb + 1000, "answer", 6);
	t_wqe_ctrl(&w, &ub, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	wqe_dgram(&w, &av_a, ua.qpn, QKEY_A);
	t_wqe_data(&w, lb + 1000, 6, kb);
	t_post(&ub, &w, T_DB8);
	check_req((c = t_wait(&scb), &c), &ub, 0);
	c = t_wait(&rca);
	check_recv(&c, &ua, &ub, 0, 6);
	cr_assert_eq(memcmp(la + 4096 + GRH, "answer", 6), 0);
}

Test(ud, in_order_and_scattered)
{
	struct mlx5_cqe64 c;

	/* Each receive over two buffers: the GRH and 10 bytes in the first. */
	for (int i = 0; i < 6; i++) {
		struct mlx5_wqe_data_seg *d = (void *)((char *)ub.rq.buf +
						       (ub.rq_head & (ub.rq.wqe_cnt - 1)) *
						       ub.rq.stride);

		mlx5dv_set_data_seg(d, GRH + 10, kb, (uintptr_t)(lb + i * 512));
		mlx5dv_set_data_seg(d + 1, 200, kb, (uintptr_t)(lb + i * 512 + 256));
		ub.rq_head++;
		__atomic_thread_fence(__ATOMIC_RELEASE);
		*ub.rq.dbrec = htobe32(ub.rq_head & 0xffff);
	}
	fill(la, 6 * 64, 9);
	for (int i = 0; i < 6; i++)
		send_to(&av_b, ub.qpn, QKEY_B, (uint32_t)i * 64, 64);
	for (int i = 0; i < 6; i++) {
		check_req((c = t_wait(&sca), &c), &ua, (uint16_t)(i * 2));
		c = t_wait(&rcb);
		check_recv(&c, &ub, &ua, (uint16_t)i, 64);
		cr_assert_eq(memcmp(lb + i * 512 + GRH, la + i * 64, 10), 0);
		cr_assert_eq(memcmp(lb + i * 512 + 256, la + i * 64 + 10, 54), 0);
	}
}

Test(ud, same_nic_loopback)
{
	struct t_qp u2;
	struct mlx5_wqe_av av;
	struct mlx5_cqe64 c;
	void *ah;

	ud_make(na, pda, &sca, &rca, 0, 0x777, &u2);
	ah_make(na, na, u2.qpn, &av, &ah);
	t_recv(&u2, la + 4096, 100, ka);
	fill(la, 30, 1);
	send_to(&av, u2.qpn, 0x777, 0, 30);
	check_req((c = t_wait(&sca), &c), &ua, 0);
	c = t_wait(&rca);
	check_recv(&c, &u2, &ua, 0, 30);
	cr_assert_eq(memcmp(la + 4096 + GRH, la, 30), 0);
	zd_mlx5sim_ah_destroy(na, ah);
	cr_assert_eq(zd_mlx5sim_qp_destroy(na, u2.qpn), 0);
}

Test(ud, srq_receives)
{
	struct t_srq s = { 0 };
	struct t_qp u2;
	struct mlx5_wqe_av av;
	struct mlx5_cqe64 c;
	void *ah;
	uint16_t ind;

	cr_assert_eq(zd_mlx5sim_srq_create(nb, pdb, 4, 1, &s.d), 0);
	ud_make(nb, pdb, &scb, &rcb, s.d.srqn, 0x4242, &u2);
	ah_make(na, nb, u2.qpn, &av, &ah);
	ind = t_srq_post(&s, lb + 512, 128, kb);
	fill(la, 50, 7);
	send_to(&av, u2.qpn, 0x4242, 0, 50);
	check_req((c = t_wait(&sca), &c), &ua, 0);
	c = t_wait(&rcb);
	check_recv(&c, &u2, &ua, ind, 50);
	cr_assert_eq(be32toh(c.srqn_uidx) & 0xffffff, s.d.srqn);
	cr_assert_eq(memcmp(lb + 512 + GRH, la, 50), 0);
	zd_mlx5sim_ah_destroy(na, ah);
	cr_assert_eq(zd_mlx5sim_qp_destroy(nb, u2.qpn), 0);
	cr_assert_eq(zd_mlx5sim_srq_destroy(nb, s.d.srqn), 0);
}

/* Datagrams that reach no QP: the send completes, nothing arrives, the
 * sender counts them lost; the QP goes on. */
Test(ud, lost_on_the_wire)
{
	struct t_qp rc;
	struct mlx5_wqe_av bad = av_b;
	struct mlx5_cqe64 c;
	uint32_t gidw;
	uint16_t idx = 0;

	t_qp_make(nb, pdb, &scb, &rcb, 0, 8, 4, &rc);
	cr_assert_eq(zd_mlx5sim_qp_modify(nb, rc.qpn, ZD_MLX5SIM_QPS_INIT), 0);
	t_recv(&ub, lb, 200, kb);
	t_recv(&rc, lb + 1024, 200, kb);
	/* wrong Q_Key, a QPN nobody has, an RC QP, an unknown GID, no GRH */
	send_to(&av_b, ub.qpn, QKEY_B ^ 1, 0, 10);
	send_to(&av_b, 0xabcdef, QKEY_B, 0, 10);
	send_to(&av_b, rc.qpn, QKEY_B, 0, 10);
	bad.rgid[15] ^= 0x5a;
	send_to(&bad, ub.qpn, QKEY_B, 0, 10);
	bad = av_b;
	gidw = be32toh(bad.grh_gid_fl) & ~(1u << 30);
	bad.grh_gid_fl = htobe32(gidw);
	send_to(&bad, ub.qpn, QKEY_B, 0, 10);
	for (int i = 0; i < 5; i++, idx += 2)
		check_req((c = t_wait(&sca), &c), &ua, idx);
	cr_assert_eq(lost(na), 5);
	t_none(&rcb, 50);
	/* the right one still gets in */
	fill(la, 10, 5);
	send_to(&av_b, ub.qpn, QKEY_B, 0, 10);
	check_req((c = t_wait(&sca), &c), &ua, idx);
	c = t_wait(&rcb);
	check_recv(&c, &ub, &ua, 0, 10);
	cr_assert_eq(memcmp(lb + GRH, la, 10), 0);
	cr_assert_eq(lost(na), 5);
	cr_assert_eq(zd_mlx5sim_qp_destroy(nb, rc.qpn), 0);
}

/* The base AV (no MLX5_EXTENDED_UD_AV): 16 bytes, no GID to route by. */
Test(ud, base_av_has_no_route)
{
	struct t_wqe w;
	struct mlx5_wqe_av *av;
	struct mlx5_cqe64 c;

	t_recv(&ub, lb, 200, kb);
	t_wqe_ctrl(&w, &ua, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	av = (void *)(w.b + w.size);
	av->key.qkey.qkey = htobe32(QKEY_B);
	av->dqp_dct = htobe32(ub.qpn);
	w.size += 16;
	t_wqe_data(&w, la, 10, ka);
	t_post(&ua, &w, T_BF);
	check_req((c = t_wait(&sca), &c), &ua, 0);
	cr_assert_eq(lost(na), 1);
	t_none(&rcb, 30);
}

/* A Q_Key with the high bit set stands for the sending QP's own. */
Test(ud, controlled_qkey_is_the_qps)
{
	struct t_qp u2;
	struct mlx5_wqe_av av;
	struct mlx5_cqe64 c;
	void *ah;

	ud_make(nb, pdb, &scb, &rcb, 0, QKEY_A, &u2);
	ah_make(na, nb, u2.qpn, &av, &ah);
	t_recv(&u2, lb, 100, kb);
	send_to(&av_b, ub.qpn, 0x80000000u, 0, 10);      /* A's Q_Key: not B's */
	send_to(&av, u2.qpn, 0x80000000u, 0, 10);        /* A's Q_Key: u2's */
	check_req((c = t_wait(&sca), &c), &ua, 0);
	check_req((c = t_wait(&sca), &c), &ua, 2);
	c = t_wait(&rcb);
	check_recv(&c, &u2, &ua, 0, 10);
	cr_assert_eq(lost(na), 1);
	zd_mlx5sim_ah_destroy(na, ah);
	cr_assert_eq(zd_mlx5sim_qp_destroy(nb, u2.qpn), 0);
}

/* No receive posted: dropped at the destination and counted there; the
 * send completes; the next one, with a receive, arrives. */
Test(ud, no_receive_dropped_and_counted)
{
	struct mlx5_cqe64 c;
	uint64_t n = 9;

	cr_assert_eq(zd_mlx5sim_qp_out_of_buffer(nb, ub.qpn, &n), 0);
	cr_assert_eq(n, 0);
	fill(la, 64, 1);
	send_to(&av_b, ub.qpn, QKEY_B, 0, 20);
	send_to(&av_b, ub.qpn, QKEY_B, 0, 20);
	check_req((c = t_wait(&sca), &c), &ua, 0);
	check_req((c = t_wait(&sca), &c), &ua, 2);
	cr_assert_eq(zd_mlx5sim_qp_out_of_buffer(nb, ub.qpn, &n), 0);
	cr_assert_eq(n, 2);
	cr_assert_eq(lost(na), 0);
	t_none(&rcb, 30);
	t_recv(&ub, lb, 100, kb);
	send_to(&av_b, ub.qpn, QKEY_B, 20, 30);
	check_req((c = t_wait(&sca), &c), &ua, 4);
	c = t_wait(&rcb);
	check_recv(&c, &ub, &ua, 0, 30);
	cr_assert_eq(memcmp(lb + GRH, la + 20, 30), 0);
	/* not a UD QP: no such counter */
	cr_assert_eq(zd_mlx5sim_qp_out_of_buffer(nb, 0x1234, &n), -EINVAL);
}

/* A receive too small for GRH + payload, or with a bad key, completes in
 * error by itself; the QP takes the next datagram. */
Test(ud, receive_errors_leave_the_qp_up)
{
	struct mlx5_cqe64 c;

	t_recv(&ub, lb, GRH + 99, kb);
	t_recv(&ub, lb + 256, 200, kb ^ 0x100);
	t_recv(&ub, lb + 512, 200, kb);
	fill(la, 100, 4);
	send_to(&av_b, ub.qpn, QKEY_B, 0, 100);
	send_to(&av_b, ub.qpn, QKEY_B, 0, 100);
	send_to(&av_b, ub.qpn, QKEY_B, 0, 100);
	for (int i = 0; i < 3; i++)
		check_req((c = t_wait(&sca), &c), &ua, (uint16_t)(2 * i));
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_ERR);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
	cr_assert_eq(be16toh(c.wqe_counter), 0);
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_ERR);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	cr_assert_eq(be16toh(c.wqe_counter), 1);
	c = t_wait(&rcb);
	check_recv(&c, &ub, &ua, 2, 100);
	cr_assert_eq(memcmp(lb + 512 + GRH, la, 100), 0);
	cr_assert_eq(zd_mlx5sim_qp_state(nb, ub.qpn), ZD_MLX5SIM_QPS_RTS);
}

/* One packet: the path MTU exactly arrives; a byte more fails the send
 * with a local length error and the QP goes to SQE: its later sends
 * flush, its receives go on. */
Test(ud, mtu_and_send_queue_error)
{
	static uint8_t big[ZD_MLX5SIM_UD_MTU + GRH + 64];
	struct t_wqe w;
	struct mlx5_cqe64 c;
	uint32_t kbig, r;

	cr_assert_eq(zd_mlx5sim_mr_add(nb, pdb, big, sizeof(big), T_ACC_ALL, &kbig, &r), 0);
	t_recv(&ub, big, sizeof(big), kbig);
	fill(la, ZD_MLX5SIM_UD_MTU, 2);
	send_to(&av_b, ub.qpn, QKEY_B, 0, ZD_MLX5SIM_UD_MTU);
	check_req((c = t_wait(&sca), &c), &ua, 0);
	c = t_wait(&rcb);
	check_recv(&c, &ub, &ua, 0, ZD_MLX5SIM_UD_MTU);
	cr_assert_eq(memcmp(big + GRH, la, ZD_MLX5SIM_UD_MTU), 0);

	send_to(&av_b, ub.qpn, QKEY_B, 0, ZD_MLX5SIM_UD_MTU + 1);
	send_to(&av_b, ub.qpn, QKEY_B, 0, 10);
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ_ERR);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ_ERR);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	t_wait_state(na, ua.qpn, ZD_MLX5SIM_QPS_SQE);
	/* A still receives */
	t_recv(&ua, la + 6000, 100, ka);
	t_wqe_ctrl(&w, &ub, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	wqe_dgram(&w, &av_a, ua.qpn, QKEY_A);
	t_wqe_inline(&w, "still", 5);
	t_post(&ub, &w, T_BF);
	check_req((c = t_wait(&scb), &c), &ub, 0);
	c = t_wait(&rca);
	check_recv(&c, &ua, &ub, 0, 5);
	cr_assert_eq(memcmp(la + 6000 + GRH, "still", 5), 0);
	/* and ERR flushes its receives too */
	t_recv(&ua, la + 7000, 100, ka);
	cr_assert_eq(zd_mlx5sim_qp_modify(na, ua.qpn, ZD_MLX5SIM_QPS_ERR), 0);
	c = t_wait(&rca);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_ERR);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	cr_assert_eq(zd_mlx5sim_mr_remove(nb, kbig), 0);
}

/* UD carries sends only; a bad local key fails the send. */
Test(ud, only_sends_and_local_keys)
{
	struct t_wqe w;
	struct mlx5_cqe64 c;

	t_wqe_ctrl(&w, &ua, MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)lb, kb);
	t_wqe_data(&w, la, 8, ka);
	t_post(&ua, &w, T_BF);
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ_ERR);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
	t_wait_state(na, ua.qpn, ZD_MLX5SIM_QPS_SQE);

	/* on a fresh QP: a bad lkey */
	{
		struct t_qp u2;

		ud_make(na, pda, &sca, &rca, 0, 0x99, &u2);
		t_wqe_ctrl(&w, &u2, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
		wqe_dgram(&w, &av_b, ub.qpn, QKEY_B);
		t_wqe_data(&w, la, 8, ka ^ 0x100);
		t_post(&u2, &w, T_BF);
		c = t_wait(&sca);
		cr_assert_eq(t_op(&c), MLX5_CQE_REQ_ERR);
		cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
		cr_assert_eq(be32toh(((struct mlx5_err_cqe *)&c)->s_wqe_opcode_qpn) & 0xffffff,
			     u2.qpn);
		cr_assert_eq(zd_mlx5sim_qp_destroy(na, u2.qpn), 0);
	}
}

/* A destination QP destroyed: the address handle stays, datagrams are
 * lost; its slot's next QP has another number (a QPN does not come back
 * at once, as on a ConnectX), so datagrams to the old one stay lost, and
 * to the new one with the old Q_Key too. */
Test(ud, stale_destination)
{
	struct t_qp u2, u3;
	struct mlx5_wqe_av av;
	struct mlx5_cqe64 c;
	void *ah;

	ud_make(nb, pdb, &scb, &rcb, 0, 0x1001, &u2);
	ah_make(na, nb, u2.qpn, &av, &ah);
	cr_assert_eq(zd_mlx5sim_qp_destroy(nb, u2.qpn), 0);
	send_to(&av, u2.qpn, 0x1001, 0, 10);
	check_req((c = t_wait(&sca), &c), &ua, 0);
	cr_assert_eq(lost(na), 1);
	ud_make(nb, pdb, &scb, &rcb, 0, 0x1002, &u3);
	cr_assert_neq(u3.qpn, u2.qpn, "the QPN came back at once");
	cr_assert_eq(u3.qpn & 0xffff, u2.qpn & 0xffff, "not the same slot: the test means nothing");
	t_recv(&u3, lb, 100, kb);
	send_to(&av, u2.qpn, 0x1001, 0, 10);
	check_req((c = t_wait(&sca), &c), &ua, 2);
	cr_assert_eq(lost(na), 2);
	send_to(&av, u3.qpn, 0x1001, 0, 10);
	check_req((c = t_wait(&sca), &c), &ua, 4);
	cr_assert_eq(lost(na), 3);
	t_none(&rcb, 30);
	zd_mlx5sim_ah_destroy(na, ah);
	cr_assert_eq(zd_mlx5sim_qp_destroy(nb, u3.qpn), 0);
}

Test(ud, control_path)
{
	struct zd_mlx5sim_qp_addr a;
	struct t_qp rc;
	uint32_t qkey = 0;

	/* the Q_Key as set; an RC QP has none, cannot be made UD-ready, and a
	 * UD QP cannot connect */
	cr_assert_eq(zd_mlx5sim_qp_ud_qkey(nb, ub.qpn, &qkey), 0);
	cr_assert_eq(qkey, QKEY_B);
	t_qp_make(nb, pdb, &scb, &rcb, 0, 8, 4, &rc);
	cr_assert_eq(zd_mlx5sim_qp_ud_qkey(nb, rc.qpn, &qkey), -EINVAL);
	cr_assert_eq(zd_mlx5sim_qp_ud_ready(nb, rc.qpn, 1), -EINVAL);
	cr_assert_eq(zd_mlx5sim_qp_ud_ready(nb, ub.qpn, 1), -EINVAL, "RTS already");
	cr_assert_eq(zd_mlx5sim_qp_addr(na, ua.qpn, &a), 0);
	cr_assert_eq(zd_mlx5sim_qp_connect(nb, ub.qpn, &a), -EINVAL);
	cr_assert_eq(zd_mlx5sim_qp_destroy(nb, rc.qpn), 0);
	{
		struct t_qp u2;
		struct zd_mlx5sim_qp_attr at = {
			.pdn = pdb, .send_cqn = scb.d.cqn, .recv_cqn = rcb.d.cqn,
			.sq_wqe_cnt = 4, .rq_wqe_cnt = 4, .rq_max_sge = 1,
			.type = ZD_MLX5SIM_QPT_UD,
		};

		cr_assert_eq(zd_mlx5sim_qp_create(nb, &at, &u2.sq, &u2.rq, &u2.qpn), 0);
		/* a controlled Q_Key is not for us */
		cr_assert_eq(zd_mlx5sim_qp_ud_ready(nb, u2.qpn, 0x80000001u), -EINVAL);
		at.type = 7;
		cr_assert_eq(zd_mlx5sim_qp_create(nb, &at, &u2.sq, &u2.rq, &qkey), -EINVAL);
		cr_assert_eq(zd_mlx5sim_qp_destroy(nb, u2.qpn), 0);
	}
}

/* Address handles for addresses that came off the network: malformed,
 * naming nothing, or not quite what is there, fail and reach nothing. */
Test(ud, address_handle_checks)
{
	struct zd_mlx5sim_nic *nc;
	struct zd_mlx5sim_qp_addr a, good;
	struct t_cq scc, rcc;
	struct t_qp uc;
	struct mlx5_wqe_av av;
	uint32_t pdc;
	void *ah = NULL;

	end_open(&nc, &pdc, &scc, &rcc);
	ud_make(nc, pdc, &scc, &rcc, 0, 5, &uc);
	cr_assert_eq(zd_mlx5sim_qp_addr(nc, uc.qpn, &good), 0);
	a = good;
	a.magic ^= 1;
	cr_assert_eq(zd_mlx5sim_ah_create(na, &a, &av, &ah), -EINVAL);
	a = good;
	a.nic_uid ^= 0x1000;
	cr_assert_eq(zd_mlx5sim_ah_create(na, &a, &av, &ah), -ENOENT);
	a = good;
	a.region_size += 4096;
	cr_assert_eq(zd_mlx5sim_ah_create(na, &a, &av, &ah), -ENOENT);
	a = good;
	a.region_size = 1;
	cr_assert_eq(zd_mlx5sim_ah_create(na, &a, &av, &ah), -ENOENT);
	a = good;
	a.region_fd = 0;
	cr_assert_eq(zd_mlx5sim_ah_create(na, &a, &av, &ah), -ENOENT);
	a = good;
	a.region_fd = -1;
	cr_assert_eq(zd_mlx5sim_ah_create(na, &a, &av, &ah), -ENOENT);
	a = good;
	a.pid = 0x3ffffff0;
	cr_assert_eq(zd_mlx5sim_ah_create(na, &a, &av, &ah), -ENOENT);
	cr_assert_eq(ah, NULL);
	zd_mlx5sim_ah_destroy(na, NULL);
	/* the good one reaches nc, and keeps it mapped after nc is gone */
	cr_assert_eq(zd_mlx5sim_ah_create(na, &good, &av, &ah), 0);
	cr_assert_neq(ah, NULL);
	zd_mlx5sim_nic_close(nc);
	send_to(&av, uc.qpn, 5, 0, 10);
	{
		struct mlx5_cqe64 c = t_wait(&sca);

		check_req(&c, &ua, 0);
	}
	cr_assert_eq(lost(na), 1);
	zd_mlx5sim_ah_destroy(na, ah);
}

/* A deregistration, or the QP's destruction, right after a post: the NIC
 * has executed the post by then (as a ConnectX long has when the command
 * completes), even if its engine was asleep. */
Test(ud, commands_come_after_the_posts_before_them)
{
	struct t_qp u2;
	struct mlx5_cqe64 c;
	uint8_t *tmp = aligned_alloc(64, 256);
	uint32_t k, r;

	cr_assert_eq(zd_mlx5sim_mr_add(na, pda, tmp, 256, T_ACC_ALL, &k, &r), 0);
	fill(tmp, 64, 11);
	t_recv(&ub, lb, 200, kb);
	t_recv(&ub, lb + 256, 200, kb);
	usleep(20000);   /* the engines idle, and sleep */
	{
		struct t_wqe w;

		t_wqe_ctrl(&w, &ua, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
		wqe_dgram(&w, &av_b, ub.qpn, QKEY_B);
		t_wqe_data(&w, tmp, 64, k);
		t_post(&ua, &w, T_BF);
	}
	cr_assert_eq(zd_mlx5sim_mr_remove(na, k), 0);
	check_req((c = t_wait(&sca), &c), &ua, 0);
	c = t_wait(&rcb);
	check_recv(&c, &ub, &ua, 0, 64);
	cr_assert_eq(memcmp(lb + GRH, tmp, 64), 0);
	free(tmp);

	ud_make(na, pda, &sca, &rca, 0, 0x31, &u2);
	usleep(20000);
	{
		struct t_wqe w;

		t_wqe_ctrl(&w, &u2, MLX5_OPCODE_SEND, 0, 0);
		wqe_dgram(&w, &av_b, ub.qpn, QKEY_B);
		t_wqe_inline(&w, "last words", 10);
		t_post(&u2, &w, T_BF);
	}
	cr_assert_eq(zd_mlx5sim_qp_destroy(na, u2.qpn), 0);
	c = t_wait(&rcb);
	check_recv(&c, &ub, &u2, 1, 10);
	cr_assert_eq(memcmp(lb + 256 + GRH, "last words", 10), 0);
}
