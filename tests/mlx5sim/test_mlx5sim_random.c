/*
 * A randomized sequence of posts, receives and polls on tiny queues (SQ of
 * 8 basic blocks, RQ of 4, CQs of 4), checked against a plain model of RC
 * semantics: WQEs execute in order, sends take receives in order, writes,
 * reads and atomics act on memory as if one at a time; unsignaled WQEs are
 * retired by the next signaled one's wqe_counter.  A second driver sends
 * from two QPs into one SRQ reposted out of order.
 */
#include "mlx5sim_test.h"

#define MEM 4096
#define SRC_END 2048          /* la: constant source data */
#define RD_DST 2048           /* la: read destinations */
#define AT_RES 3072           /* la: atomic results */
#define RCV 2048              /* lb: receive buffers, 16 x 64 */
#define AT_TGT 3072           /* lb: 8 atomic words */

struct pend {
	uint16_t idx;
	uint32_t nbb;
	bool sig;
};

struct exp_recv {
	uint8_t op;
	uint32_t len, imm;
};

static uint64_t rng = 88172645463325252ull;

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

/* A send CQE retires its WQE and every unsignaled one before it. */
static void retire(const struct mlx5_cqe64 *c, struct t_qp *qa, struct pend *pend,
		   uint32_t *npend, uint32_t *retired, uint32_t *sig_out)
{
	uint16_t idx = be16toh(c->wqe_counter);
	uint32_t k = 0;

	cr_assert_eq(t_op(c), MLX5_CQE_REQ, "syndrome %#x", t_syn(c));
	cr_assert_eq(be32toh(c->sop_drop_qpn) & 0xffffff, qa->qpn);
	while (k < *npend && pend[k].idx != idx)
		k++;
	cr_assert_lt(k, *npend, "wqe_counter %u unknown", idx);
	cr_assert(pend[k].sig, "CQE for an unsignaled WQE");
	*retired = qa->pi - ((qa->pi - (idx + pend[k].nbb)) & 0xffff);
	(*sig_out)--;
	memmove(pend, pend + k + 1, (*npend - k - 1) * sizeof(pend[0]));
	*npend -= k + 1;
}

static void check_recv(const struct mlx5_cqe64 *c, const struct exp_recv *exp,
		       uint32_t *recv_done)
{
	const struct exp_recv *e = &exp[*recv_done % 1024];

	cr_assert_eq(t_op(c), e->op, "recv %u: opcode %u syndrome %#x", *recv_done, t_op(c),
		     t_syn(c));
	cr_assert_eq(be32toh(c->byte_cnt), e->len);
	if (e->op == MLX5_CQE_RESP_SEND_IMM)
		cr_assert_eq(be32toh(c->imm_inval_pkey), e->imm);
	cr_assert_eq(be16toh(c->wqe_counter), (uint16_t)*recv_done);
	(*recv_done)++;
}

static void run(uint64_t seed, int steps)
{
	struct zd_mlx5sim_nic *na, *nb;
	struct t_cq sca, rca, scb, rcb;
	struct t_qp qa, qb;
	uint8_t *la = aligned_alloc(64, MEM), *lb = aligned_alloc(64, MEM);
	uint8_t *ma = malloc(MEM), *mb = malloc(MEM);
	uint32_t pda, pdb, ka, kb, r;
	struct pend pend[64];
	struct exp_recv exp[1024];
	uint32_t npend = 0, retired = 0, sig_out = 0, posted = 0;
	uint32_t sends = 0, recvs = 0, recv_done = 0;
	struct mlx5_cqe64 c;
	uint64_t end = t_now_ms() + 60000;

	rng = seed;
	t_end_open(&na, &pda, &sca, &rca);
	t_end_open(&nb, &pdb, &scb, &rcb);
	t_qp_make(na, pda, &sca, &rca, 0, 8, 4, &qa);
	t_qp_make(nb, pdb, &scb, &rcb, 0, 8, 4, &qb);
	t_connect(na, &qa, nb, &qb);
	for (int i = 0; i < MEM; i++) {
		la[i] = (uint8_t)rnd(256);
		lb[i] = (uint8_t)rnd(256);
	}
	memcpy(ma, la, MEM);
	memcpy(mb, lb, MEM);
	cr_assert_eq(zd_mlx5sim_mr_add(na, pda, la, MEM, T_ACC_ALL, &ka, &r), 0);
	cr_assert_eq(zd_mlx5sim_mr_add(nb, pdb, lb, MEM, T_ACC_ALL, &kb, &r), 0);

	while (posted < (uint32_t)steps || npend || recv_done < sends) {
		uint32_t what = rnd(10);

		cr_assert_lt(t_now_ms(), end, "stuck: posted %u pend %u recv %u/%u", posted, npend,
			     recv_done, sends);
		if (what < 5 && posted < (uint32_t)steps) {
			struct t_wqe w;
			uint32_t op = rnd(6), len = 1 + rnd(300), src = rnd(SRC_END - len);
			uint32_t nbb, out = qa.pi - retired;
			bool sig;

			switch (op) {
			case 0: /* RDMA write, data segment or inline */
			case 1: {
				uint32_t dst = rnd(RCV - len);

				t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_WRITE, 0, 0);
				t_wqe_raddr(&w, (uintptr_t)lb + dst, kb);
				if (op == 1 && len <= 180)
					t_wqe_inline(&w, la + src, len);
				else
					t_wqe_data(&w, la + src, len, ka);
				memcpy(mb + dst, ma + src, len);
				break;
			}
			case 2: { /* RDMA read into two segments */
				uint32_t from = rnd(RCV - len), l1 = len / 2;

				t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_READ, 0, 0);
				t_wqe_raddr(&w, (uintptr_t)lb + from, kb);
				t_wqe_data(&w, la + RD_DST, l1, ka);
				t_wqe_data(&w, la + RD_DST + 512, len - l1, ka);
				memcpy(ma + RD_DST, mb + from, l1);
				memcpy(ma + RD_DST + 512, mb + from + l1, len - l1);
				break;
			}
			case 3: { /* send or send with immediate, at most 64 bytes */
				bool imm = rnd(2);

				len = 1 + rnd(64);
				t_wqe_ctrl(&w, &qa, imm ? MLX5_OPCODE_SEND_IMM : MLX5_OPCODE_SEND, 0,
					   htobe32(sends));
				t_wqe_data(&w, la + src, len, ka);
				exp[sends % 1024] = (struct exp_recv){
					imm ? MLX5_CQE_RESP_SEND_IMM : MLX5_CQE_RESP_SEND, len, sends
				};
				/* lands in receive number `sends` */
				memcpy(mb + RCV + (sends % 16) * 64, ma + src, len);
				sends++;
				break;
			}
			case 4: /* fetch and add */
			case 5: { /* compare and swap, hitting half the time */
				uint32_t slot = rnd(8), res = rnd(128);
				uint64_t cur, arg = rnd(1000), cmp;

				uint64_t old_be;

				/* the target word in host order, the old value
				 * back big-endian */
				memcpy(&cur, mb + AT_TGT + slot * 8, 8);
				cmp = rnd(2) ? cur : rnd(1000);
				t_wqe_ctrl(&w, &qa, op == 4 ? MLX5_OPCODE_ATOMIC_FA : MLX5_OPCODE_ATOMIC_CS,
					   0, 0);
				t_wqe_raddr(&w, (uintptr_t)lb + AT_TGT + slot * 8, kb);
				t_wqe_atomic(&w, arg, cmp);
				t_wqe_data(&w, la + AT_RES + res * 8, 8, ka);
				old_be = htobe64(cur);
				memcpy(ma + AT_RES + res * 8, &old_be, 8);
				if (op == 4)
					cur += arg;
				else if (cur == cmp)
					cur = arg;
				memcpy(mb + AT_TGT + slot * 8, &cur, 8);
				break;
			}
			}
			nbb = (w.size + 63) / 64;
			/* Room: 8 BBs in the SQ, 4 CQEs; signal so that the
			 * unsignaled never hold more than 4 BBs. */
			sig = out + nbb > 4 || rnd(4) == 0;
			while (qa.pi + nbb - retired > 8 || (sig && sig_out == 4)) {
				cr_assert_lt(t_now_ms(), end, "no room");
				if (t_poll(&sca, &c))
					retire(&c, &qa, pend, &npend, &retired, &sig_out);
				if (recvs - recv_done < 4 && recvs < sends) {
					t_recv(&qb, lb + RCV + (recvs % 16) * 64, 64, kb);
					recvs++;
				}
				if (t_poll(&rcb, &c))
					check_recv(&c, exp, &recv_done);
			}
			if (sig)
				w.b[11] |= MLX5_WQE_CTRL_CQ_UPDATE;
			pend[npend].idx = t_post(&qa, &w, rnd(2) ? T_BF : T_DB8);
			pend[npend].nbb = nbb;
			pend[npend].sig = sig;
			npend++;
			sig_out += sig;
			posted++;
		} else if (what < 7) {
			if (t_poll(&sca, &c)) {
				retire(&c, &qa, pend, &npend, &retired, &sig_out);
			} else if (npend && !pend[npend - 1].sig && qa.pi - retired < 8 && sig_out < 4) {
				/* tail unsignaled: a signaled NOP retires it */
				struct t_wqe w;

				t_wqe_ctrl(&w, &qa, MLX5_OPCODE_NOP, MLX5_WQE_CTRL_CQ_UPDATE, 0);
				pend[npend].idx = t_post(&qa, &w, T_BF);
				pend[npend].nbb = 1;
				pend[npend].sig = true;
				npend++;
				sig_out++;
			}
		} else if (what < 9) {
			if (recvs - recv_done < 4 && recvs < sends + 2) {
				t_recv(&qb, lb + RCV + (recvs % 16) * 64, 64, kb);
				recvs++;
			}
		} else if (t_poll(&rcb, &c)) {
			check_recv(&c, exp, &recv_done);
		}
	}
	/* receives posted beyond the sends stay posted: the model agrees */
	cr_assert_eq(memcmp(lb, mb, MEM), 0, "target memory differs from the model");
	cr_assert_eq(memcmp(la, ma, MEM), 0, "initiator memory differs from the model");
	struct zd_mlx5sim_stats st;

	zd_mlx5sim_nic_stats(na, &st);
	cr_assert_geq(st.wqes, (uint64_t)steps);
	/* How many BlueFlame copies the NIC could check depends on timing (a
	 * copy is checked only if the engine sees it before the next one
	 * overwrites it; under ASan on a loaded host a short run may check
	 * none): test_mlx5sim_ops asserts the checker works; here any copy
	 * checked must match. */
	cr_log_info("seed %#llx: %llu WQEs, %llu BlueFlame copies checked, %u sends, %llu RNR\n",
		    (unsigned long long)seed, (unsigned long long)st.wqes,
		    (unsigned long long)st.bf_checked, sends, (unsigned long long)st.rnr_retries);
	cr_assert_eq(st.wqe_errors, 0);
	cr_assert_eq(st.bf_mismatch, 0);
	cr_assert_eq(st.db_order, 0);
	cr_assert_eq(st.cq_overrun, 0);
	zd_mlx5sim_nic_close(na);
	zd_mlx5sim_nic_close(nb);
	free(la);
	free(lb);
	free(ma);
	free(mb);
}

Test(random, seed1, .timeout = 120)
{
	run(1, 5000);
}

Test(random, seed2, .timeout = 120)
{
	run(0x9e3779b97f4a7c15ull, 5000);
}

/*
 * Two initiator QPs send into one SRQ of 4 WQEs (3 usable) behind two
 * responder QPs; the consumer polls, checks and reposts the buffers in a
 * random order.  Each receive CQE names its WQE (wqe_counter), the sender
 * (flags_rqpn) and the length: per sender, messages arrive in order and
 * intact.
 */
struct srq_exp {
	uint32_t len;
	uint8_t fill;
};

static void run_srq(uint64_t seed, int sends_total)
{
	struct zd_mlx5sim_nic *na, *nb;
	struct t_cq sca, rca, scb, rcb;
	struct t_qp p[2], q[2];
	struct t_srq s = { 0 };
	uint8_t *la = aligned_alloc(64, MEM), *lb = aligned_alloc(64, MEM);
	uint32_t pda, pdb, ka, kb, r;
	struct srq_exp exp[2][64];
	uint32_t head[2] = { 0 }, rcv[2] = { 0 }, out[2] = { 0 };
	uint16_t buf_of[4];                   /* WQE index -> buffer number */
	uint16_t done[4];
	int ndone = 0, sent = 0, got = 0;
	uint64_t end = t_now_ms() + 60000;
	struct mlx5_cqe64 c;

	rng = seed;
	t_end_open(&na, &pda, &sca, &rca);
	t_end_open(&nb, &pdb, &scb, &rcb);
	cr_assert_eq(zd_mlx5sim_srq_create(nb, pdb, 4, 1, &s.d), 0);
	for (int i = 0; i < 2; i++) {
		t_qp_make(na, pda, &sca, &rca, 0, 4, 4, &p[i]);
		t_qp_make(nb, pdb, &scb, &rcb, s.d.srqn, 4, 0, &q[i]);
		t_connect(na, &p[i], nb, &q[i]);
	}
	cr_assert_eq(zd_mlx5sim_mr_add(na, pda, la, MEM, T_ACC_ALL, &ka, &r), 0);
	cr_assert_eq(zd_mlx5sim_mr_add(nb, pdb, lb, MEM, T_ACC_ALL, &kb, &r), 0);
	for (uint16_t b = 0; b < 3; b++) {
		uint16_t ind = t_srq_post(&s, lb + b * 256, 256, kb);

		buf_of[ind] = b;
	}
	while (got < sends_total) {
		uint32_t what = rnd(8);

		cr_assert_lt(t_now_ms(), end, "stuck: sent %d got %d", sent, got);
		if (what < 3 && sent < sends_total) {
			int i = (int)rnd(2);
			uint32_t len = 1 + rnd(256);
			uint8_t fill = (uint8_t)rnd(256);
			struct t_wqe w;

			/* one send in flight per QP: its source buffer is free again
			 * once its CQE is polled */
			if (out[i])
				continue;
			memset(la + i * 1024, fill, len);
			t_wqe_ctrl(&w, &p[i], MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
			t_wqe_data(&w, la + i * 1024, len, ka);
			t_post(&p[i], &w, rnd(2) ? T_BF : T_DB8);
			exp[i][head[i]++ % 64] = (struct srq_exp){ len, fill };
			out[i]++;
			sent++;
		} else if (what < 5) {
			if (t_poll(&sca, &c)) {
				uint32_t qpn = be32toh(c.sop_drop_qpn) & 0xffffff;
				int i = qpn == p[1].qpn;

				cr_assert_eq(t_op(&c), MLX5_CQE_REQ, "syndrome %#x", t_syn(&c));
				cr_assert(qpn == p[0].qpn || qpn == p[1].qpn);
				cr_assert_eq(out[i], 1);
				out[i]--;
			}
		} else if (what < 7) {
			if (ndone < 4 && t_poll(&rcb, &c)) {
				uint32_t from = be32toh(c.flags_rqpn) & 0xffffff;
				int i = from == p[1].qpn;
				uint16_t ind = be16toh(c.wqe_counter);
				struct srq_exp *e = &exp[i][rcv[i] % 64];

				cr_assert(from == p[0].qpn || from == p[1].qpn);
				cr_assert_eq(t_op(&c), MLX5_CQE_RESP_SEND, "syndrome %#x", t_syn(&c));
				cr_assert_lt(ind, 4);
				cr_assert_eq(be32toh(c.byte_cnt), e->len);
				for (uint32_t k = 0; k < e->len; k++)
					cr_assert_eq(lb[buf_of[ind] * 256 + k], e->fill);
				rcv[i]++;
				done[ndone++] = ind;
				got++;
			}
		} else if (ndone) {
			/* repost a random completed one: out of order */
			int k = (int)rnd((uint32_t)ndone);
			uint16_t ind = done[k], b = buf_of[ind], nind;

			done[k] = done[--ndone];
			t_srq_free(&s, ind);
			nind = t_srq_post(&s, lb + b * 256, 256, kb);
			buf_of[nind] = b;
		}
	}
	cr_assert_eq(rcv[0] + rcv[1], (uint32_t)sends_total);
	t_none(&rcb, 10);
	zd_mlx5sim_nic_close(na);
	zd_mlx5sim_nic_close(nb);
	free(la);
	free(lb);
}

Test(random, srq_seed3, .timeout = 120)
{
	run_srq(3, 3000);
}
