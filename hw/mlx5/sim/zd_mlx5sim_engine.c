/*
 * The engine of the software mlx5 device: the NIC hardware.
 *
 * One thread per NIC.  Each pass it takes the CQ arm doorbells, looks at
 * each QP's BlueFlame halves (doorbell order, copy check: zd_mlx5sim_bf.c),
 * executes the WQEs its SQ doorbell record announces, and flushes the
 * queues of QPs in error.  Idle, it spins a little, then sleeps, growing to
 * ~100 us, so an idle NIC costs little.
 *
 * The SQ: each WQE is copied out in 64-byte basic blocks (wrapping at the
 * end of the buffer) and executed (zd_mlx5sim_exec.c).  No receive posted
 * at the peer: the WQE stays at the head of its SQ and is retried on later
 * passes (RNR, infinite retries), other QPs go on.  Errors complete the WQE
 * with the syndrome the PRM names and move the QP (and, for errors the
 * responder detects, the peer QP) to ERR -- a UD QP to SQE, which keeps
 * receiving; from then on every WQE completes with WR_FLUSH_ERR.
 */
#include <endian.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

#define SPIN_PASSES   256
#define SLEEP_MAX_NS  100000
#define SLEEP_IDLE_NS 10000000     /* no QP at all */

/* ---- send queue ---- */

/* Copies the WQE at basic block ci into buf, wrapping; returns its BBs
 * (0: the ds field is invalid). */
static uint32_t wqe_fetch(struct zd_mlx5sim_nic *nic, struct zd_ms_qp *qp, uint32_t ci,
			  uint8_t *buf, uint32_t *size)
{
	const uint8_t *sq = zd_ms_own_qbuf(nic, qp->buf_chunk, qp->sq_off);
	uint32_t mask = qp->sq_wqe_cnt - 1, ds, nbb;

	memcpy(buf, sq + (uint64_t)(ci & mask) * MLX5_SEND_WQE_BB, MLX5_SEND_WQE_BB);
	ds = zd_ms_rd_be32(buf + 4) & 0x3f;
	if (!ds)
		return 0;
	nbb = (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
	for (uint32_t i = 1; i < nbb; i++)
		memcpy(buf + i * MLX5_SEND_WQE_BB,
		       sq + (uint64_t)((ci + i) & mask) * MLX5_SEND_WQE_BB, MLX5_SEND_WQE_BB);
	*size = ds * 16;
	return nbb;
}

static bool sq_flush(struct zd_mlx5sim_nic *nic, struct zd_ms_qp *qp, uint32_t pi)
{
	alignas(64) uint8_t buf[ZD_MS_MAX_WQE + MLX5_SEND_WQE_BB];
	uint32_t ci = atomic_load(&qp->sq_ci), size;
	bool work = false;

	while (((pi - ci) & 0xffff) != 0) {
		uint32_t nbb = wqe_fetch(nic, qp, ci, buf, &size);
		struct mlx5_cqe64 c;

		if (!nbb || nbb > ((pi - ci) & 0xffff))
			nbb = 1;
		zd_ms_cqe_err(&c, false, MLX5_CQE_SYNDROME_WR_FLUSH_ERR, buf[3], qp->qpn,
			      (uint16_t)ci, 0);
		zd_ms_cq_write(&nic->self, qp->scqn, &c, false);
		atomic_fetch_add(&nic->cnt_wqes, 1);
		ci += nbb;
		atomic_store(&qp->sq_ci, ci);
		work = true;
	}
	return work;
}

/* Flushes the receives of @qp (in ERR) in order: each claimed and decided
 * here (zd_ms_recv_decide), then its FLUSH CQE.  A claim of the peer's
 * engine still undecided waits for it, ZD_MS_RECV_STUCK_NS at most. */
static bool rq_flush(struct zd_mlx5sim_nic *nic, struct zd_ms_qp *qp, struct zd_ms_qpe *e)
{
	bool work = false;

	if (qp->srqn || !qp->rq_wqe_cnt)
		return false;
	for (;;) {
		volatile __be32 *db = zd_ms_own_qbuf(nic, qp->db_chunk, qp->db_off);
		uint32_t c = atomic_load(&qp->rq_ci), posted = be32toh(zd_dev_load(&db[MLX5_RCV_DBR])) & 0xffff;
		uint64_t done = atomic_load(&qp->rq_done);
		struct zd_ms_recv rc = { .claim = (uint32_t)done };
		struct mlx5_cqe64 cqe;

		if (rc.claim != c) {
			/* The peer's engine has the receive at rq_done. */
			uint64_t t = zd_ms_now_ns();

			if (!e->rq_stuck_since || e->rq_stuck != rc.claim) {
				e->rq_stuck = rc.claim;
				e->rq_stuck_since = t;
				return work;
			}
			if (t - e->rq_stuck_since < ZD_MS_RECV_STUCK_NS)
				return work;
		} else {
			if (((posted - c) & 0xffff) == 0 || ((posted - c) & 0xffff) > qp->rq_wqe_cnt)
				return work;
			if (!atomic_compare_exchange_strong(&qp->rq_ci, &c, c + 1))
				continue;
		}
		e->rq_stuck_since = 0;
		if (!zd_ms_recv_decide(qp, qp->qpn, &rc))
			continue;   /* its writer decided it meanwhile */
		zd_ms_cqe_err(&cqe, true, MLX5_CQE_SYNDROME_WR_FLUSH_ERR, 0, qp->qpn,
			      (uint16_t)rc.claim, 0);
		zd_ms_cq_write(&nic->self, qp->rcqn, &cqe, false);
		work = true;
	}
}

/* A send failed: an RC QP goes to ERR; a UD QP to SQE, where its sends
 * flush and its receives go on (IB's send queue error state). */
static void sq_error(struct zd_ms_qp *qp)
{
	uint32_t st = ZD_MLX5SIM_QPS_RTS;

	if (qp->type != ZD_MLX5SIM_QPT_UD ||
	    !atomic_compare_exchange_strong(&qp->state, &st, ZD_MLX5SIM_QPS_SQE))
		zd_ms_qp_set_err(qp);
}

static bool sq_run(struct zd_mlx5sim_nic *nic, struct zd_ms_qp *qp, struct zd_ms_qpe *e,
		   uint32_t pi)
{
	alignas(64) uint8_t buf[ZD_MS_MAX_WQE + MLX5_SEND_WQE_BB];
	uint32_t ci = atomic_load(&qp->sq_ci), size = 0;
	bool work = false;

	while (((pi - ci) & 0xffff) != 0 && atomic_load(&qp->state) == ZD_MLX5SIM_QPS_RTS) {
		uint32_t avail = (pi - ci) & 0xffff, nbb;
		struct zd_ms_wqe x = { .nic = nic, .qp = qp, .e = e, .w = buf };
		struct zd_ms_result r;
		struct mlx5_cqe64 c;

		if (avail > qp->sq_wqe_cnt) {
			/* A doorbell record beyond the queue: the QP errs. */
			zd_ms_qp_set_err(qp);
			break;
		}
		nbb = wqe_fetch(nic, qp, ci, buf, &size);
		if (!nbb || nbb > avail)
			nbb = 1;        /* x.size 0: malformed, exec fails it */
		else
			x.size = size;
		r = zd_ms_wqe_exec(&x, (uint16_t)ci);
		if (r.status == ZD_MS_RNR) {
			if (!e->rnr)
				atomic_fetch_add(&nic->cnt_rnr, 1);
			e->rnr = true;
			break;
		}
		e->rnr = false;
		zd_ms_bf_shadow(e, (uint16_t)ci, nbb, buf);
		atomic_fetch_add(&nic->cnt_wqes, 1);
		work = true;
		if (r.status == ZD_MS_OK) {
			if (x.fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) {
				zd_ms_cqe_req(&c, qp->qpn, x.opcode, (uint16_t)ci, r.byte_cnt);
				if (!zd_ms_cq_write(&nic->self, qp->scqn, &c, false))
					zd_ms_qp_set_err(qp);
			}
		} else {
			atomic_fetch_add(&nic->cnt_err, 1);
			if (nic->debug)
				fprintf(stderr, "zdapl: mlx5sim: qp %#x: WQE %u opcode %#x: syndrome "
					"%#x%s\n", qp->qpn, ci & 0xffff, x.opcode, r.syndrome,
					r.peer_err ? ", peer QP to error" : "");
			if (r.peer_err && e->peer)
				zd_ms_qp_set_err(zd_ms_qp_ctx(zd_ms_peer_sh(e->peer), e->peer_idx));
			sq_error(qp);
			zd_ms_cqe_err(&c, false, r.syndrome, x.opcode, qp->qpn, (uint16_t)ci, 0);
			zd_ms_cq_write(&nic->self, qp->scqn, &c, false);
		}
		ci += nbb;
		atomic_store(&qp->sq_ci, ci);
	}
	return work;
}

/* ---- the engine ---- */

static bool qp_pass(struct zd_mlx5sim_nic *nic, uint32_t i)
{
	struct zd_ms_qp *qp = zd_ms_qp_ctx(nic->sh, i);
	struct zd_ms_qpe *e = &nic->qpe[i];
	uint32_t st = atomic_load_explicit(&qp->state, memory_order_acquire), pi;
	volatile __be32 *db;
	bool work = false;

	if (st == ZD_MS_QP_FREE || st == ZD_MLX5SIM_QPS_RESET)
		return false;
	db = zd_ms_own_qbuf(nic, qp->db_chunk, qp->db_off);
	zd_ms_bf_observe(nic, qp, e);
	pi = be32toh(zd_dev_load(&db[MLX5_SND_DBR])) & 0xffff;
	/* acquire: the WQEs were written before the doorbell record. */
	atomic_thread_fence(memory_order_acquire);
	if (st == ZD_MLX5SIM_QPS_RTS)
		work = sq_run(nic, qp, e, pi);
	st = atomic_load(&qp->state);
	if (st == ZD_MLX5SIM_QPS_ERR || st == ZD_MLX5SIM_QPS_SQE)
		work |= sq_flush(nic, qp, pi);
	if (st == ZD_MLX5SIM_QPS_ERR)
		work |= rq_flush(nic, qp, e);
	zd_ms_bf_resolve(nic, qp, e, false);
	return work;
}

void zd_ms_engine_catch_up(struct zd_mlx5sim_nic *nic)
{
	if (atomic_load_explicit(&nic->stop, memory_order_relaxed))
		return;   /* the NIC is being closed: its hardware is off */
	for (uint32_t i = 0; i < nic->qp_hwm; i++)
		qp_pass(nic, i);
}

void *zd_ms_engine_main(void *arg)
{
	struct zd_mlx5sim_nic *nic = arg;
	struct zd_ms_shared *sh = nic->sh;
	uint32_t idle = 0;
	long sleep_ns = 1000, sleep_max = SLEEP_MAX_NS;

	while (!atomic_load_explicit(&nic->stop, memory_order_relaxed)) {
		bool work = false;

		pthread_mutex_lock(&nic->lock);
		for (uint32_t i = 0; i < nic->cq_hwm; i++) {
			struct zd_ms_cq *cq = zd_ms_cq_ctx(sh, i);

			if (atomic_load_explicit(&cq->live, memory_order_acquire))
				work |= zd_ms_cq_arm(sh, cq) | zd_ms_cq_mend(nic, i);
		}
		for (uint32_t i = 0; i < nic->qp_hwm; i++)
			work |= qp_pass(nic, i);
		/* No QP: no WQE can come, and no CQE for our CQs either. */
		sleep_max = nic->qps_live ? SLEEP_MAX_NS : SLEEP_IDLE_NS;
		pthread_mutex_unlock(&nic->lock);
		if (work) {
			idle = 0;
			sleep_ns = 1000;
			continue;
		}
		if (++idle < SPIN_PASSES) {
			zd_cpu_relax();
			continue;
		}
		nanosleep(&(struct timespec){ .tv_nsec = sleep_ns }, NULL);
		sleep_ns = ZD_MIN(sleep_ns * 2, sleep_max);
	}
	/* Last look at the BlueFlame copies: the writers are done. */
	pthread_mutex_lock(&nic->lock);
	for (uint32_t i = 0; i < sh->max_qp; i++) {
		struct zd_ms_qp *qp = zd_ms_qp_ctx(sh, i);

		if (zd_ms_qp_slot_used(qp))
			zd_ms_qp_bf_final(nic, i);
	}
	pthread_mutex_unlock(&nic->lock);
	return NULL;
}
