/*
 * Completion queue of the mlx5 data path: CQEs read by owner bit, parsed,
 * error syndromes mapped to DAT statuses, consumer index and arming.
 *
 * Ownership: the CQ is a ring of cqe_cnt (a power of two) CQEs; on pass p
 * over the ring (p = ci / cqe_cnt) the device writes owner bit p & 1, so a
 * CQE is ours when its owner bit equals that parity and its opcode is not
 * MLX5_CQE_INVALID (the value every CQE is created with).  Only after that
 * load may the rest of the CQE be read (zd_udma_from_device_barrier).
 *
 * Threads: one poller at a time per CQ: the EVD's consumer under manual
 * progress, or the pinned poller the EVD was given (ZDAPL_POLLERS,
 * evd/zd_poller.h), which is then the only caller of cq_poll (never
 * cq_poll_one or cq_arm) while the consumer dequeues from the EVD ring
 * concurrently.  The arm sequence number is also moved by the thread that
 * takes completion events.
 */
#ifndef ZD_MLX5_CQ_H
#define ZD_MLX5_CQ_H

#include <endian.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <dat2/udat.h>

#include "core/zd_compiler.h"
#include "hw/mlx5/zd_mlx5_barrier.h"
#include "hw/mlx5/zd_mlx5_queue.h"

struct zd_mlx5_cq {
	uint8_t *buf;
	uint8_t *cqe64;               /* buf + cqe64_off: struct mlx5_cqe64 of CQE 0 */
	uint32_t cqe_cnt;
	uint32_t mask;
	uint32_t cqe_shift;           /* log2(cqe_size) */
	uint32_t cqe64_off;           /* cqe_size - 64: struct mlx5_cqe64 ends the CQE */
	uint32_t ci;                  /* consumer index (free-running) */
	uint32_t cqn;
	volatile __be32 *dbrec;
	uint8_t *uar;
	_Atomic uint32_t arm_sn;      /* completion events taken so far */
	/* The QP of the last CQE looked up (zd_mlx5_cq.c cq_qp), and what a
	 * successful requester CQE of it reads as in one load
	 * (zd_mlx5_cqe_req_want; ZD_MLX5_CQE_REQ_NONE: no QP cached).  The
	 * poller sets both inside a pass; qp_unbuild only turns req_want to
	 * NONE (zd_mlx5_cq_forget_qp), so a poller that found req_want
	 * matching uses last_qp as it set it, alive until its pass ends. */
	struct zd_mlx5_qp *last_qp;
	_Atomic uint64_t req_want;
};

struct zd_evd;
struct zd_mlx5_dev;
struct zd_mlx5_qp;

/* zd_mlx5_cq.c: the device's cq_poll_one (core/zd_device.h). */
DAT_RETURN zd_mlx5_cq_poll_one(struct zd_evd *evd, DAT_EVENT *out);

/* zd_mlx5_cq.c: drops @qp from every CQ's last-QP cache.  For qp_unbuild,
 * between two zd_mlx5_sync_pollers: after the first (the QP unlisted) no
 * pass can cache it again; after the second none still uses the cache. */
void zd_mlx5_cq_forget_qp(struct zd_mlx5_dev *dev, struct zd_mlx5_qp *qp);

/* zd_mlx5_queue.c: 0 or -EINVAL (sizes not powers of two, cqe_size < 64). */
int zd_mlx5_cq_init(struct zd_mlx5_cq *cq, const struct zd_mlx5_cq_desc *d);

/* The CQE at consumer index @ci. */
static ZD_ALWAYS_INLINE struct mlx5_cqe64 *zd_mlx5_cq_at(const struct zd_mlx5_cq *cq, uint32_t ci)
{
	return (void *)(cq->cqe64 + ((size_t)(ci & cq->mask) << cq->cqe_shift));
}

/*
 * The last 8 bytes of a CQE -- sop_drop_qpn, wqe_counter, signature and
 * op_own -- as one load: one aligned word, which the device writes whole
 * with its owner byte (the software NIC: one release store after the
 * rest, which an x86 load of the word sees whole or not at all).  A
 * successful requester CQE needs nothing else (its WQE's bookkeeping has
 * the rest), so the latency case reads its CQE with this one load and no
 * barrier after it.
 */
#define ZD_MLX5_CQE_TAIL offsetof(struct mlx5_cqe64, sop_drop_qpn)
_Static_assert(ZD_MLX5_CQE_TAIL % 8 == 0 &&
	       offsetof(struct mlx5_cqe64, wqe_counter) == ZD_MLX5_CQE_TAIL + 4 &&
	       offsetof(struct mlx5_cqe64, op_own) == ZD_MLX5_CQE_TAIL + 7 &&
	       sizeof(struct mlx5_cqe64) == 64, "mlx5_cqe64 ends with qpn, counter, owner");

static ZD_ALWAYS_INLINE uint64_t zd_mlx5_cqe_tail(const struct mlx5_cqe64 *cqe)
{
	return *(const volatile uint64_t *)((const uint8_t *)cqe + ZD_MLX5_CQE_TAIL);
}

/* The tail's bytes as one word, in memory order. */
static inline uint64_t zd_mlx5_cqe_tail_of(const uint8_t b[8])
{
	uint64_t v;

	memcpy(&v, b, sizeof(v));
	return v;
}

/* What the tail of a successful requester CQE of QP @qpn reads as, under
 * ZD_MLX5_CQE_REQ_MASK: the QPN (big-endian, after the sop byte) and
 * opcode MLX5_CQE_REQ with no SE or compression bits; the owner bit is
 * left out (zd_mlx5_cq_consume). */
static inline uint64_t zd_mlx5_cqe_req_want(uint32_t qpn)
{
	const uint8_t b[8] = { 0, (uint8_t)(qpn >> 16), (uint8_t)(qpn >> 8), (uint8_t)qpn,
			       0, 0, 0, MLX5_CQE_REQ << 4 };

	return zd_mlx5_cqe_tail_of(b);
}

/* Matches no CQE: the opcode every CQE is created (and consumed) with. */
#define ZD_MLX5_CQE_REQ_NONE  ((uint64_t)MLX5_CQE_INVALID << 4 << ZD_MLX5_CQE_OWN_SHIFT)
#if __BYTE_ORDER == __LITTLE_ENDIAN
#define ZD_MLX5_CQE_OWN_SHIFT 56
#define ZD_MLX5_CQE_REQ_MASK  0xfe000000ffffff00ull  /* op_own but owner, QPN */
#else
#define ZD_MLX5_CQE_OWN_SHIFT 0
#define ZD_MLX5_CQE_REQ_MASK  0x00ffffff000000feull
#endif

/* The CQE's wqe_counter, from its tail. */
static ZD_ALWAYS_INLINE uint16_t zd_mlx5_cqe_tail_wc(uint64_t tail)
{
#if __BYTE_ORDER == __LITTLE_ENDIAN
	return be16toh((uint16_t)(tail >> 32));
#else
	return (uint16_t)(tail >> 16);
#endif
}

/* The QPN a req_want names. */
static inline uint32_t zd_mlx5_cqe_tail_qpn(uint64_t tail)
{
	uint8_t b[8];

	memcpy(b, &tail, sizeof(b));
	return (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/*
 * The CQE at ci is consumed: its opcode back to MLX5_CQE_INVALID, as the
 * CQ was created, and ci moves on.  Every CQE the device has not written
 * in this pass then reads as invalid whatever its owner bit, so the
 * latency case's one compare (ZD_MLX5_CQE_REQ_MASK) needs no owner
 * parity; the general loop still checks the owner bit (zd_mlx5_cq_next_own).
 * The slot is still ours: the device reuses it only after the consumer
 * index it gets from zd_mlx5_cq_update_ci, whose barrier orders this
 * store before it.
 */
static ZD_ALWAYS_INLINE void zd_mlx5_cq_consume(struct zd_mlx5_cq *cq, struct mlx5_cqe64 *cqe)
{
	/* relaxed: the device reads nothing here before the CI doorbell. */
	__atomic_store_n(&cqe->op_own, (uint8_t)(MLX5_CQE_INVALID << 4), __ATOMIC_RELAXED);
	cq->ci++;
}

/* The next CQE if the device handed it over, else NULL; @op_own: its
 * opcode and owner byte (read once, before the barrier). */
static ZD_ALWAYS_INLINE struct mlx5_cqe64 *zd_mlx5_cq_next_own(const struct zd_mlx5_cq *cq,
							       uint8_t *op_own)
{
	const uint32_t ci = cq->ci;
	struct mlx5_cqe64 *cqe = zd_mlx5_cq_at(cq, ci);
	uint8_t v = zd_dev_load(&cqe->op_own);

	/* Opcode MLX5_CQE_INVALID (as created: v >= 0xf0), or the owner bit
	 * of another pass. */
	if (v >= (MLX5_CQE_INVALID << 4) || (v & MLX5_CQE_OWNER_MASK) != !!(ci & cq->cqe_cnt))
		return NULL;
	/* The owner bit is read before the rest of the CQE. */
	zd_udma_from_device_barrier();
	*op_own = v;
	return cqe;
}

/* The next CQE if the device handed it over, else NULL. */
static ZD_ALWAYS_INLINE struct mlx5_cqe64 *zd_mlx5_cq_next(const struct zd_mlx5_cq *cq)
{
	uint8_t op_own;

	return zd_mlx5_cq_next_own(cq, &op_own);
}

/* Hands every CQE before ci back to the device. */
static ZD_ALWAYS_INLINE void zd_mlx5_cq_update_ci(struct zd_mlx5_cq *cq)
{
	const uint32_t ci = cq->ci;   /* ours: read before the barrier, kept in a register */

	/* Our reads of the CQEs are done before the device may reuse them. */
	zd_udma_ci_barrier();
	zd_dev_store(&cq->dbrec[ZD_MLX5_CQ_SET_CI], htobe32(ci & 0xffffff));
}

/* What a DAT completion needs from one CQE. */
struct zd_mlx5_cqe_info {
	uint32_t qpn;
	uint32_t byte_cnt;
	uint32_t srqn;
	uint16_t wqe_counter;
	uint8_t opcode;               /* MLX5_CQE_* */
	uint8_t syndrome;             /* error CQEs */
	uint8_t vendor_syndrome;
	bool requester;               /* the send queue's WQE (REQ, REQ_ERR) */
	bool error;
};

static ZD_ALWAYS_INLINE void zd_mlx5_cqe_parse(const struct mlx5_cqe64 *cqe,
					       struct zd_mlx5_cqe_info *ci)
{
	uint8_t op = cqe->op_own >> 4;

	ci->opcode = op;
	ci->qpn = be32toh(cqe->sop_drop_qpn) & 0xffffff;
	ci->wqe_counter = be16toh(cqe->wqe_counter);
	ci->byte_cnt = be32toh(cqe->byte_cnt);
	ci->srqn = be32toh(cqe->srqn_uidx) & 0xffffff;
	ci->requester = op == MLX5_CQE_REQ || op == MLX5_CQE_REQ_ERR;
	ci->error = op == MLX5_CQE_REQ_ERR || op == MLX5_CQE_RESP_ERR;
	ci->syndrome = 0;
	ci->vendor_syndrome = 0;
	if (ZD_UNLIKELY(ci->error)) {
		const struct mlx5_err_cqe *e = (const void *)cqe;

		ci->syndrome = e->syndrome;
		ci->vendor_syndrome = e->vendor_err_synd;
		ci->qpn = be32toh(e->s_wqe_opcode_qpn) & 0xffffff;
		ci->srqn = be32toh(e->srqn) & 0xffffff;
	}
}

/* Error syndrome -> DAT DTO status (as verbs maps them to ibv_wc_status
 * and dapl maps those). */
static inline DAT_DTO_COMPLETION_STATUS zd_mlx5_syndrome_status(uint8_t syndrome)
{
	switch (syndrome) {
	case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
		return DAT_DTO_ERR_FLUSHED;
	case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR:
		return DAT_DTO_ERR_LOCAL_LENGTH;
	case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR:
		return DAT_DTO_ERR_LOCAL_EP;
	case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
	case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR:
		return DAT_DTO_ERR_LOCAL_PROTECTION;
	case MLX5_CQE_SYNDROME_MW_BIND_ERR:
		return DAT_RMR_OPERATION_FAILED;
	case MLX5_CQE_SYNDROME_BAD_RESP_ERR:
		return DAT_DTO_ERR_BAD_RESPONSE;
	case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
		return DAT_DTO_ERR_REMOTE_ACCESS;
	case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
	case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
	case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR:
		return DAT_DTO_ERR_REMOTE_RESPONDER;
	case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
		return DAT_DTO_ERR_TRANSPORT;
	case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR:
		return DAT_DTO_ERR_RECEIVER_NOT_READY;
	default:
		return DAT_DTO_ERR_TRANSPORT;
	}
}

/* Requests a completion event for the next CQE (or the next solicited
 * one) at or after ci: the arm word goes to the doorbell record, then with
 * the CQN as one 64-bit store to the UAR.  Normally the consumer arms (ci
 * is its own); a CNO waiter may arm from another thread, and a stale ci
 * then only makes the event come early. */
static inline void zd_mlx5_cq_arm(struct zd_mlx5_cq *cq, bool solicited)
{
	uint32_t sn = atomic_load_explicit(&cq->arm_sn, memory_order_relaxed) & 3;
	uint32_t v = sn << 28 | (solicited ? MLX5_CQ_DB_REQ_NOT_SOL : MLX5_CQ_DB_REQ_NOT) |
		     (__atomic_load_n(&cq->ci, __ATOMIC_RELAXED) & 0xffffff);
	__be32 w[2] = { htobe32(v), htobe32(cq->cqn) };
	uint64_t db;

	zd_dev_store(&cq->dbrec[ZD_MLX5_CQ_ARM_DB], w[0]);
	/* Doorbell record before the UAR write. */
	zd_mmio_wc_start();
	memcpy(&db, w, sizeof(db));
	zd_dev_store((uint64_t *)(cq->uar + ZD_MLX5_CQ_UAR_DB), db);
	zd_mmio_flush_writes();
}

/* The event thread took a completion event of this CQ: the next arm
 * carries the next sequence number. */
static inline void zd_mlx5_cq_event(struct zd_mlx5_cq *cq)
{
	atomic_fetch_add_explicit(&cq->arm_sn, 1, memory_order_relaxed);
}

#endif /* ZD_MLX5_CQ_H */
