/*
 * Unreliable datagrams on the software mlx5 device (the contract is in
 * zd_mlx5sim.h): UD QPs made ready without a peer, address handles (the
 * address vector of a destination port, whose NIC region the handle keeps
 * mapped), and the execution of a UD QP's send WQE by the sender's engine,
 * as for RC: resolve the datagram segment's destination, claim its next
 * receive, place the GRH and the payload, write the receive's CQE.
 *
 * Nothing a datagram does at the destination can hurt the sender: a
 * datagram that reaches no QP, or no receive, is dropped and counted, and
 * the send completes all the same; a receive that cannot take it completes
 * in error and its QP goes on.
 */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

#define GRH_BYTES        40
#define AV_GRH           (1u << 30)     /* mlx5_wqe_av.grh_gid_fl: the GRH is sent */
#define AV_BASE_BYTES    16             /* the AV without MLX5_EXTENDED_UD_AV */
#define CQE_GRH_IN_DATA  (1u << 28)     /* mlx5_cqe64.flags_rqpn: GRH in the buffer */
#define QKEY_CONTROLLED  0x80000000u    /* a WQE Q_Key with it means the QP's own */
#define GID_PREFIX       0xfe80000000000000ull   /* link-local */
#define HOP_LIMIT        64
#define NEXT_HDR_BTH     0x1b           /* GRH next header: the IB transport */

/* A NIC's port GID: the link-local prefix, its unique id as interface id. */
static void gid_of(uint64_t uid, uint8_t gid[16])
{
	uint64_t hi = htobe64(GID_PREFIX), lo = htobe64(uid);

	memcpy(gid, &hi, 8);
	memcpy(gid + 8, &lo, 8);
}

/* ---- control path ---- */

/* UD QP @qpn of this NIC (nic->lock held), or NULL. */
static struct zd_ms_qp *ud_qp_get(struct zd_mlx5sim_nic *nic, uint32_t qpn)
{
	struct zd_ms_qp *qp;

	if (!zd_ms_qpn_valid(qpn, nic->sh->max_qp))
		return NULL;
	qp = zd_ms_qp_ctx(nic->sh, zd_ms_qpn_index(qpn));
	if (atomic_load(&qp->state) == ZD_MS_QP_FREE || qp->type != ZD_MLX5SIM_QPT_UD ||
	    qp->qpn != qpn)
		return NULL;
	return qp;
}

int zd_mlx5sim_qp_ud_ready(struct zd_mlx5sim_nic *nic, uint32_t qpn, uint32_t qkey)
{
	struct zd_ms_qp *qp;
	uint32_t st;
	int ret = -EINVAL;

	/* A controlled Q_Key (high bit) is for privileged QPs only. */
	if (qkey & QKEY_CONTROLLED)
		return -EINVAL;
	pthread_mutex_lock(&nic->lock);
	qp = ud_qp_get(nic, qpn);
	st = qp ? atomic_load(&qp->state) : ZD_MS_QP_FREE;
	if (st == ZD_MLX5SIM_QPS_RESET || st == ZD_MLX5SIM_QPS_INIT) {
		qp->qkey = qkey;
		/* release: a sender reads the Q_Key after seeing the state. */
		atomic_store_explicit(&qp->state, ZD_MLX5SIM_QPS_RTS, memory_order_release);
		ret = 0;
	}
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

int zd_mlx5sim_qp_ud_qkey(struct zd_mlx5sim_nic *nic, uint32_t qpn, uint32_t *qkey)
{
	struct zd_ms_qp *qp;

	pthread_mutex_lock(&nic->lock);
	qp = ud_qp_get(nic, qpn);
	if (qp)
		*qkey = qp->qkey;
	pthread_mutex_unlock(&nic->lock);
	return qp ? 0 : -EINVAL;
}

int zd_mlx5sim_qp_out_of_buffer(struct zd_mlx5sim_nic *nic, uint32_t qpn, uint64_t *count)
{
	struct zd_ms_qp *qp;

	pthread_mutex_lock(&nic->lock);
	qp = ud_qp_get(nic, qpn);
	if (qp)
		*count = atomic_load(&qp->out_of_buffer);
	pthread_mutex_unlock(&nic->lock);
	return qp ? 0 : -EINVAL;
}

void zd_mlx5sim_port_gid(struct zd_mlx5sim_nic *nic, uint8_t gid[16])
{
	gid_of(nic->sh->uid, gid);
}

int zd_mlx5sim_ah_create(struct zd_mlx5sim_nic *nic, const struct zd_mlx5sim_qp_addr *dest,
			 struct mlx5_wqe_av *av, void **ah)
{
	struct zd_soft_peer *p;

	if (dest->magic != ZD_MS_ADDR_MAGIC)
		return -EINVAL;
	/* Path resolution: the destination's region mapped and checked (its
	 * process, its uid), or nothing there. */
	p = zd_ms_peer_get(nic, dest);
	if (!p)
		return -ENOENT;
	memset(av, 0, sizeof(*av));
	av->hop_limit = HOP_LIMIT;
	av->grh_gid_fl = htobe32(AV_GRH);   /* SGID index 0, flow label 0 */
	gid_of(p->uid, av->rgid);
	*ah = p;
	return 0;
}

void zd_mlx5sim_ah_destroy(struct zd_mlx5sim_nic *nic, void *ah)
{
	if (ah)
		zd_ms_peer_put(nic, ah);
}

/* ---- the engine: one datagram ---- */

static struct zd_ms_result fail(uint8_t syndrome)
{
	return (struct zd_ms_result){ .status = ZD_MS_ERR, .syndrome = syndrome };
}

/* The port @gid names among those this NIC reaches (engine: nic->lock is
 * held, so the peer list holds still), or NULL. */
static struct zd_soft_peer *route(struct zd_mlx5sim_nic *nic, const uint8_t gid[16])
{
	uint64_t prefix, uid;

	memcpy(&prefix, gid, 8);
	memcpy(&uid, gid + 8, 8);
	if (be64toh(prefix) != GID_PREFIX)
		return NULL;
	uid = be64toh(uid);
	if (uid == nic->sh->uid)
		return &nic->self;
	for (struct zd_soft_peer *p = nic->peers; p; p = p->next)
		if (p->uid == uid)
			return p;
	return NULL;
}

/* UD QP @qpn of the peer's region, able to receive (RTR, RTS or SQE), or
 * NULL.  The region is the peer's to write: everything is checked. */
static struct zd_ms_qp *dest_qp(struct zd_soft_peer *p, uint32_t qpn)
{
	struct zd_ms_shared *sh = zd_ms_peer_sh(p);
	struct zd_ms_qp *qp;
	uint32_t st;

	if (!zd_ms_qpn_valid(qpn, sh->max_qp))
		return NULL;
	qp = zd_ms_qp_ctx(sh, zd_ms_qpn_index(qpn));
	/* acquire: pairs with the release of the state in qp_ud_ready. */
	st = atomic_load_explicit(&qp->state, memory_order_acquire);
	if ((st != ZD_MLX5SIM_QPS_RTR && st != ZD_MLX5SIM_QPS_RTS && st != ZD_MLX5SIM_QPS_SQE) ||
	    qp->type != ZD_MLX5SIM_QPT_UD || qp->qpn != qpn)
		return NULL;
	return qp;
}

/* The GRH an HCA writes before a UD receive's payload (IBA 8.3, IPv6
 * shaped): next header the BTH, PayLen what follows it on the wire (BTH,
 * DETH, [ImmDt], the payload padded to 4 bytes, ICRC), the sender's port
 * GID as SGID, the AV's as DGID. */
static void grh_fill(uint8_t g[GRH_BYTES], const struct zd_ms_wqe *x,
		     const struct mlx5_wqe_av *av, uint64_t total)
{
	uint32_t w0 = htobe32(6u << 28 | (uint32_t)av->tclass << 20 |
			      (be32toh(av->grh_gid_fl) & 0xfffff));
	uint16_t paylen = htobe16((uint16_t)(12 + 8 + (x->opcode == MLX5_OPCODE_SEND_IMM ? 4 : 0) +
					     ((total + 3) & ~3ull) + 4));

	memcpy(g, &w0, 4);
	memcpy(g + 4, &paylen, 2);
	g[6] = NEXT_HDR_BTH;
	g[7] = av->hop_limit;
	gid_of(x->nic->sh->uid, g + 8);
	memcpy(g + 24, av->rgid, 16);
}

/* The datagram reached no QP: lost on the wire, as on a fabric. */
static void lost(struct zd_ms_wqe *x, uint32_t dqpn, const char *why)
{
	atomic_fetch_add_explicit(&x->nic->cnt_ud_lost, 1, memory_order_relaxed);
	if (x->nic->debug)
		fprintf(stderr, "zdapl: mlx5sim: qp %#x: datagram to qp %#x lost: %s\n", x->qp->qpn,
			dqpn, why);
}

/* The receive's CQE: success with the GRH counted in byte_cnt and the
 * source QPN, or the error @syn (the QP goes on: UD's errors are the
 * datagram's). */
static void recv_cqe(struct zd_ms_wqe *x, struct zd_soft_peer *p, struct zd_ms_qp *pq,
		     const struct zd_ms_recv *rc, uint8_t syn, uint32_t len)
{
	bool se = !syn && (x->fm_ce_se & MLX5_WQE_CTRL_SOLICITED);
	uint8_t op = x->opcode == MLX5_OPCODE_SEND_IMM ? MLX5_CQE_RESP_SEND_IMM : MLX5_CQE_RESP_SEND;
	struct mlx5_cqe64 c;

	if (syn) {
		zd_ms_cqe_err(&c, true, syn, x->opcode, pq->qpn, rc->counter, rc->srqn);
	} else {
		memset(&c, 0, sizeof(c));
		c.srqn_uidx = htobe32(rc->srqn & 0xffffff);
		c.byte_cnt = htobe32(len);
		/* the immediate, or for a plain send the P_Key index (0) */
		c.imm_inval_pkey = op == MLX5_CQE_RESP_SEND_IMM ? x->imm : 0;
		c.flags_rqpn = htobe32(CQE_GRH_IN_DATA | (x->qp->qpn & 0xffffff));
		c.sop_drop_qpn = htobe32(pq->qpn & 0xffffff);
		c.wqe_counter = htobe16(rc->counter);
		c.op_own = (uint8_t)(op << 4 | (se ? 2 : 0));
	}
	/* A receive CQ that overran takes its QP down, as for RC. */
	if (!zd_ms_cq_write(p, pq->rcqn, &c, se))
		zd_ms_qp_set_err(pq);
}

/* Delivers the datagram (the payload in l[1..n], total bytes) that the
 * datagram segment @av (@avlen bytes, dqp_dct @dqp) names. */
static void deliver(struct zd_ms_wqe *x, const struct mlx5_wqe_av *av, uint32_t avlen,
		    uint32_t dqp, struct iovec *l, int n, uint64_t total)
{
	struct zd_soft_seg r[ZD_MS_MAX_SGE * 2];
	uint8_t grh[GRH_BYTES];
	uint32_t qkey = be32toh(av->key.qkey.qkey), dqpn = dqp & 0xffffff;
	struct zd_soft_peer *p = NULL;
	struct zd_ms_qp *pq;
	struct zd_ms_recv rc;
	uint8_t syn;
	int nr;

	if (qkey & QKEY_CONTROLLED)
		qkey = x->qp->qkey;
	/* The model routes by GID: only the extended AV carries one. */
	if (avlen == sizeof(*av) && (be32toh(av->grh_gid_fl) & AV_GRH))
		p = route(x->nic, av->rgid);
	if (!p) {
		lost(x, dqpn, "no route to its GID");
		return;
	}
	pq = dest_qp(p, dqpn);
	if (!pq) {
		lost(x, dqpn, "no such UD QP");
		return;
	}
	if (pq->qkey != qkey) {
		lost(x, dqpn, "wrong Q_Key");
		return;
	}
	switch (zd_ms_recv_claim(p, pq, &rc)) {
	case ZD_MS_OK:
		break;
	case ZD_MS_RNR: {
		uint32_t drops = atomic_fetch_add(&pq->out_of_buffer, 1) + 1;

		if (x->nic->debug)
			fprintf(stderr, "zdapl: mlx5sim: qp %#x: datagram to qp %#x dropped: no "
				"receive posted (%u so far)\n", x->qp->qpn, dqpn, drops);
		return;
	}
	default:
		lost(x, dqpn, "its receive queue is malformed");
		return;
	}
	grh_fill(grh, x, av, total);
	l[0] = (struct iovec){ .iov_base = grh, .iov_len = GRH_BYTES };
	syn = zd_ms_recv_scatter(p, pq, &x->pins, &rc, GRH_BYTES + total, r, &nr);
	if (!syn && zd_soft_peer_copy(p, true, l, n + 1, r, nr) != 0)
		syn = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
	recv_cqe(x, p, pq, &rc, syn, (uint32_t)(GRH_BYTES + total));
}

struct zd_ms_result zd_ms_ud_exec(struct zd_ms_wqe *x)
{
	const struct mlx5_wqe_av *av = (const void *)(x->w + sizeof(struct mlx5_wqe_ctrl_seg));
	/* l[0]: the GRH; then the payload */
	struct iovec l[1 + ZD_MS_MAX_SGE * 2];
	uint32_t dqp, avlen;
	uint64_t total;
	int n;

	switch (x->opcode) {
	case MLX5_OPCODE_NOP:
		return (struct zd_ms_result){ .status = ZD_MS_OK };
	case MLX5_OPCODE_SEND:
	case MLX5_OPCODE_SEND_IMM:
		break;
	default:
		return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);   /* UD only sends */
	}
	/* The datagram segment: the base AV, or with MLX5_EXTENDED_UD_AV the
	 * whole struct mlx5_wqe_av (it then ends the first basic block). */
	if (x->size < sizeof(struct mlx5_wqe_ctrl_seg) + AV_BASE_BYTES)
		return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
	dqp = be32toh(av->dqp_dct);
	avlen = (dqp & MLX5_EXTENDED_UD_AV) ? sizeof(*av) : AV_BASE_BYTES;
	if (x->size < sizeof(struct mlx5_wqe_ctrl_seg) + avlen)
		return fail(MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
	if (!zd_ms_local_sges(x, sizeof(struct mlx5_wqe_ctrl_seg) + avlen, true, 0, l + 1, &n,
			      &total))
		return fail(MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	/* One packet: at most the path MTU. */
	if (total > ZD_MLX5SIM_UD_MTU)
		return fail(MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
	atomic_fetch_add_explicit(&x->nic->cnt_ud_sent, 1, memory_order_relaxed);
	deliver(x, av, avlen, dqp, l, n, total);
	return (struct zd_ms_result){ .status = ZD_MS_OK, .byte_cnt = (uint32_t)total };
}
