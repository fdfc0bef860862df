/*
 * Completions of the software mlx5 device: CQEs written into a CQ of any
 * NIC region (ours, or the peer's for a responder CQE), the slot claimed
 * by CAS because engines of several NICs may complete into one CQ, the
 * owner bit stored last; and the CQ arm doorbell, which the engine
 * consumes.  An armed CQ that gets its CQE raises the event
 * (zd_mlx5sim_event.c), whichever engine wrote it.
 */
#include <endian.h>
#include <string.h>
#include <time.h>

#include "core/zd_log.h"
#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

/* ---- CQEs ---- */

/* The consumer index moved past slot @p: the claim was given up. */
static bool claim_passed(volatile __be32 *db, uint32_t p)
{
	uint32_t d = (be32toh(zd_dev_load(&db[ZD_MLX5_CQ_SET_CI])) - p) & 0xffffff;

	return d != 0 && d < (1u << 23);
}

bool zd_ms_cq_write(struct zd_soft_peer *peer, uint32_t cqn, struct mlx5_cqe64 *cqe,
		    bool solicited)
{
	struct zd_ms_shared *sh = zd_ms_peer_sh(peer);
	struct zd_ms_cq *cq;
	struct mlx5_cqe64 *slot, *buf;
	volatile __be32 *db;
	uint32_t p, ci, cnt, armed;
	bool err = (cqe->op_own >> 4) == MLX5_CQE_REQ_ERR || (cqe->op_own >> 4) == MLX5_CQE_RESP_ERR;

	if (cqn < 1 || cqn > sh->max_cq)
		return false;
	cq = zd_ms_cq_ctx(sh, cqn - 1);
	cnt = cq->cqe_cnt;
	if (!atomic_load_explicit(&cq->live, memory_order_acquire) ||
	    atomic_load_explicit(&cq->error, memory_order_relaxed) || !cnt || (cnt & (cnt - 1)))
		return false;
	buf = zd_ms_qbuf(peer, cq->buf_chunk, cq->buf_off, (uint64_t)cnt * 64);
	db = zd_ms_qbuf(peer, cq->db_chunk, cq->db_off, 8);
	if (!buf || !db)
		return false;
	p = atomic_load_explicit(&cq->prod, memory_order_relaxed);
	do {
		ci = be32toh(zd_dev_load(&db[ZD_MLX5_CQ_SET_CI])) & 0xffffff;
		if (((p - ci) & 0xffffff) >= cnt) {
			/* Overrun: the CQ error async event of the PRM. */
			atomic_store(&cq->error, 1);
			atomic_fetch_add(&sh->cnt_overrun, 1);
			return false;
		}
	} while (!atomic_compare_exchange_weak_explicit(&cq->prod, &p, p + 1, memory_order_seq_cst,
							memory_order_relaxed));
	slot = buf + (p & (cnt - 1));
	/* A writer stopped for long after its claim finds its slot given up
	 * (zd_ms_cq_mend) and consumed: its CQE is lost (its peer is being
	 * broken), it must not land over a later pass's. */
	if (ZD_UNLIKELY(claim_passed(db, p)))
		return false;
	memcpy(slot, cqe, offsetof(struct mlx5_cqe64, op_own));
	/* release: the consumer's read barrier after the owner check pairs
	 * with this; the body is visible before the owner bit flips. */
	__atomic_store_n(&slot->op_own, (uint8_t)(cqe->op_own | !!(p & cnt)), __ATOMIC_RELEASE);
	atomic_fetch_add_explicit(&sh->cnt_cqes, 1, memory_order_relaxed);

	/* seq_cst fence: pairs with the one in zd_ms_cq_arm (Dekker): either the
	 * arming engine sees this CQE or we see the armed state. */
	atomic_thread_fence(memory_order_seq_cst);
	armed = atomic_load_explicit(&cq->armed, memory_order_relaxed);
	if ((armed == 1 || (armed == 2 && (solicited || err))) &&
	    atomic_compare_exchange_strong(&cq->armed, &armed, 0))
		zd_ms_raise_event(sh, cq);
	return true;
}

void zd_ms_cqe_req(struct mlx5_cqe64 *c, uint32_t qpn, uint8_t opcode, uint16_t idx,
		   uint32_t byte_cnt)
{
	memset(c, 0, sizeof(*c));
	c->byte_cnt = htobe32(byte_cnt);
	c->sop_drop_qpn = htobe32((uint32_t)opcode << 24 | (qpn & 0xffffff));
	c->wqe_counter = htobe16(idx);
	c->op_own = MLX5_CQE_REQ << 4;
}

void zd_ms_cqe_err(struct mlx5_cqe64 *c, bool resp, uint8_t syndrome, uint8_t opcode,
		   uint32_t qpn, uint16_t idx, uint32_t srqn)
{
	struct mlx5_err_cqe *e = (struct mlx5_err_cqe *)c;

	memset(c, 0, sizeof(*c));
	e->srqn = htobe32(srqn & 0xffffff);
	e->syndrome = syndrome;
	e->s_wqe_opcode_qpn = htobe32((uint32_t)opcode << 24 | (qpn & 0xffffff));
	e->wqe_counter = htobe16(idx);
	e->op_own = (resp ? MLX5_CQE_RESP_ERR : MLX5_CQE_REQ_ERR) << 4;
}

/*
 * A claimed slot nobody writes: the engine of the peer NIC that claimed it
 * (it writes responder CQEs into our CQs) was killed or stopped between
 * its claim and its owner byte.  The consumer stops there, and every CQE
 * behind it, of any connection, stays hidden.  The CQ's own engine gives
 * such a slot up after ZD_MS_CQE_HOLE_NS: it turns the slot's opcode into
 * MLX5_CQE_NO_PACKET (a CQE that completes nothing) with the pass's owner
 * bit, by CAS on the owner byte, so a writer that stores its own owner
 * byte first, or last, wins.  The CQE lost belongs to the connection of
 * that peer, which the CM breaks (liveness).
 */
bool zd_ms_cq_mend(struct zd_mlx5sim_nic *nic, uint32_t i)
{
	struct zd_ms_cq *cq = zd_ms_cq_ctx(nic->sh, i);
	struct zd_ms_cq_watch *w = &nic->cq_watch[i];
	uint32_t cnt = cq->cqe_cnt, ci, p;
	struct mlx5_cqe64 *buf, *slot;
	volatile __be32 *db;
	uint64_t now_ns;
	uint8_t v, owner;

	if (!cnt || (cnt & (cnt - 1)) || atomic_load_explicit(&cq->error, memory_order_relaxed))
		return false;
	buf = zd_ms_own_qbuf(nic, cq->buf_chunk, cq->buf_off);
	db = zd_ms_own_qbuf(nic, cq->db_chunk, cq->db_off);
	ci = be32toh(zd_dev_load(&db[ZD_MLX5_CQ_SET_CI])) & 0xffffff;
	p = atomic_load_explicit(&cq->prod, memory_order_relaxed);
	slot = buf + (ci & (cnt - 1));
	owner = !!(ci & cnt);
	v = __atomic_load_n(&slot->op_own, __ATOMIC_ACQUIRE);
	/* Nothing claimed past the consumer, or the slot handed over. */
	if (((p - ci) & 0xffffff) == 0 ||
	    (v < (MLX5_CQE_INVALID << 4) && (v & MLX5_CQE_OWNER_MASK) == owner)) {
		w->since_ns = 0;
		return false;
	}
	/* A writer between its claim and its owner byte: (rarely) a
	 * clock read. */
	now_ns = zd_ms_now_ns();
	if (!w->since_ns || w->ci != ci) {
		w->ci = ci;
		w->since_ns = now_ns;
		return false;
	}
	if (now_ns - w->since_ns < ZD_MS_CQE_HOLE_NS)
		return false;
	w->since_ns = 0;
	if (!__atomic_compare_exchange_n(&slot->op_own, &v,
					 (uint8_t)(MLX5_CQE_NO_PACKET << 4 | owner), false,
					 __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		return false;  /* written meanwhile */
	atomic_fetch_add_explicit(&nic->cnt_cq_holes, 1, memory_order_relaxed);
	if (nic->debug)
		zd_log_error("mlx5sim: CQ %u: slot %u claimed and never written for %llu ms: "
			     "given up (its writer died)",
			     cq->cqn, ci, (unsigned long long)(ZD_MS_CQE_HOLE_NS / 1000000));
	return true;
}

/* ---- arming ---- */

bool zd_ms_cq_arm(struct zd_ms_shared *sh, struct zd_ms_cq *cq)
{
	_Atomic uint64_t *w = zd_ms_at(sh, cq->uar_off + ZD_MLX5_CQ_UAR_DB);
	uint64_t v = atomic_load_explicit(w, memory_order_acquire);
	uint32_t word[2], sn_cmd_ci, prod, mode;

	if (!v || !atomic_compare_exchange_strong(w, &v, 0))
		return false;
	memcpy(word, &v, 8);
	sn_cmd_ci = be32toh(word[0]);
	if (be32toh(word[1]) != cq->cqn)
		return true;       /* a doorbell for another CQ: ignored */
	mode = (sn_cmd_ci & MLX5_CQ_DB_REQ_NOT_SOL) ? 2 : 1;
	atomic_store_explicit(&cq->arm_ci, sn_cmd_ci & 0xffffff, memory_order_relaxed);
	atomic_store_explicit(&cq->armed, mode, memory_order_relaxed);
	/* seq_cst fence: pairs with the one in zd_ms_cq_write. */
	atomic_thread_fence(memory_order_seq_cst);
	prod = atomic_load_explicit(&cq->prod, memory_order_relaxed);
	/* CQEs past the consumer's index already: the event fires at once. */
	if (mode == 1 && ((prod - sn_cmd_ci) & 0xffffff) != 0 &&
	    atomic_compare_exchange_strong(&cq->armed, &mode, 0))
		zd_ms_raise_event(sh, cq);
	return true;
}
