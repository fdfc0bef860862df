/*
 * Private header of the mlx5 device: the per-IA state, the objects behind
 * an EVD's CQ, an EP's QP and an SRQ, and the glue's ops (zd_device.h).
 *
 * The control path goes through a backend (zd_mlx5_backend.h: verbs on a
 * ConnectX, or the software model); the data path drives the queues
 * directly (zd_mlx5_sq.h, zd_mlx5_rq.h, zd_mlx5_cq.h): one indirect call
 * per DAT call, no locks, no system calls, no allocation.
 *
 * A CQE names its QP by number: the IA keeps a two-level table qpn -> QP;
 * a CQE whose QP is unknown (destroyed, or reset to a new QP) is dropped.
 * QPs are freed only after every CQ's poller has left the pass that may
 * have looked them up: each CQ counts its passes (odd while polling), and
 * the destroyer, after unlisting the QP, waits for odd counters to move
 * (zd_mlx5_sync_pollers).  The store-then-load on both sides is ordered by
 * an asymmetric fence pair -- a compiler barrier in the poller, and
 * membarrier(PRIVATE_EXPEDITED) in the destroyer -- or, where membarrier
 * is missing, a full fence in the poller.  A poll costs two plain stores.
 */
#ifndef ZD_MLX5_H
#define ZD_MLX5_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/zd_device.h"
#include "hw/mlx5/zd_mlx5_backend.h"
#include "hw/mlx5/zd_mlx5_cq.h"
#include "hw/mlx5/zd_mlx5_rq.h"
#include "hw/mlx5/zd_mlx5_sq.h"

struct zd_evd;
struct zd_ep;
struct zd_srq;
struct zd_pz;
struct zd_lmr;

#define ZD_MLX5_QPT_SHIFT   12
#define ZD_MLX5_QPT_ENTRIES (1u << ZD_MLX5_QPT_SHIFT)   /* 24-bit QPNs: 2 x 12 bits */
#define ZD_MLX5_INLINE_DEF  64      /* inline bytes asked for per send WQE */

struct zd_mlx5_qp;

/* PZ -> PD (core's PZ has no device field). */
struct zd_mlx5_pd {
	struct zd_mlx5_pd *next;
	const struct zd_pz *pz;
	void *bpd;
};

struct zd_mlx5_reg;

struct zd_mlx5_dev {
	struct zd_ia *ia;
	const struct zd_mlx5_backend *be;
	void *bctx;
	struct zd_mlx5_caps caps;
	/* qpn -> QP; second-level tables allocated on first use */
	struct zd_mlx5_qp **_Atomic qpt[ZD_MLX5_QPT_ENTRIES];
	pthread_mutex_t lock;          /* control path: lists, table writes */
	struct zd_mlx5_pd *pds;
	struct zd_mlx5_cq_obj *cqs;
	pthread_mutex_t reg_lock;      /* the registration cache (zd_mlx5_mr.c) */
	struct zd_mlx5_reg *regs;
	bool membarrier;               /* asymmetric fences available */
	/* completion event thread (started by the first cq_arm) */
	pthread_t waker;
	_Atomic bool waker_stop;
	_Atomic bool waker_running;
};

/* The CQ behind a DTO EVD. */
struct zd_mlx5_cq_obj {
	struct zd_mlx5_cq q;           /* poller state: first */
	_Atomic uint32_t pass;         /* polls begun and ended: odd while polling */
	bool fence;                    /* no membarrier: full fence per poll */
	struct zd_mlx5_dev *dev;
	struct zd_evd *evd;
	void *bcq;
	struct zd_mlx5_cq_obj *next;   /* dev->cqs */
};

struct zd_mlx5_srq_obj {
	struct zd_mlx5_srq q;
	struct zd_mlx5_dev *dev;
	struct zd_srq *srq;
	void *bsrq;
};

struct zd_mlx5_qp {
	struct zd_mlx5_sq sq;          /* poster + poller state */
	struct zd_mlx5_rq rq;
	struct zd_ep *ep;
	struct zd_mlx5_srq_obj *srq;   /* receives come from it, or NULL */
	DAT_COMPLETION_FLAGS req_flags;  /* the EP's request_completion_flags */
	uint32_t max_msg;
	uint32_t qpn;
	struct zd_mlx5_dev *dev;
	void *bqp;
	_Atomic int flushed;           /* qp_flush ran since create/reset */
	/* The last local range an inline post was checked against (poster
	 * only; zd_mlx5_post.c): its lkey, [base, base + size) and
	 * zd_mlx5_reg_gen then. */
	struct {
		uint32_t lkey, gen;
		uint64_t base, size;
	} inl_memo;
	/* Earlier incarnations of this EP's QP (qp_reset), kept listed until
	 * their flush completions are reaped, so none is lost. */
	struct zd_mlx5_qp *older;
};

/* zd_mlx5_mr.c: bumped by every deregistration on any mlx5 device (they
 * are rare; one word is one load for the post): a QP's inline-source memo
 * of an older generation is stale (zd_mlx5_post.c).  Starts at 1: a
 * zeroed memo is never current. */
extern _Atomic uint32_t zd_mlx5_reg_gen;

/* QP of @qpn, or NULL (caller inside a counted pass of its CQ). */
static ZD_ALWAYS_INLINE struct zd_mlx5_qp *zd_mlx5_qp_lookup(struct zd_mlx5_dev *dev, uint32_t qpn)
{
	/* acquire: pairs with the release stores in zd_mlx5_qpt_set. */
	struct zd_mlx5_qp **l2 = atomic_load_explicit(&dev->qpt[(qpn >> ZD_MLX5_QPT_SHIFT) &
								 (ZD_MLX5_QPT_ENTRIES - 1)],
						      memory_order_acquire);

	if (ZD_UNLIKELY(!l2))
		return NULL;
	return __atomic_load_n(&l2[qpn & (ZD_MLX5_QPT_ENTRIES - 1)], __ATOMIC_ACQUIRE);
}

/* ---- zd_mlx5_dev.c: IA, PZ, MR, event thread ---- */
void zd_mlx5_ia_close(struct zd_ia *ia);
DAT_RETURN zd_mlx5_pz_create(struct zd_pz *pz);
void zd_mlx5_pz_destroy(struct zd_pz *pz);
void *zd_mlx5_pd_of(struct zd_mlx5_dev *dev, const struct zd_pz *pz);
DAT_RETURN zd_mlx5_mr_register(struct zd_ia *ia, struct zd_lmr *lmr);
void zd_mlx5_mr_deregister(struct zd_ia *ia, struct zd_lmr *lmr);
int zd_mlx5_waker_start(struct zd_mlx5_dev *dev);
/* Returns once no poller can still hold a QP unlisted before the call. */
void zd_mlx5_sync_pollers(struct zd_mlx5_dev *dev);

/* ---- zd_mlx5_cq.c: CQs, polling into DAT events, arming ---- */
DAT_RETURN zd_mlx5_cq_create(struct zd_evd *evd, uint32_t depth);
void zd_mlx5_cq_destroy(struct zd_evd *evd);
DAT_RETURN zd_mlx5_cq_resize(struct zd_evd *evd, uint32_t depth);
int zd_mlx5_cq_poll(struct zd_evd *evd, int budget);
void zd_mlx5_cq_arm_op(struct zd_evd *evd);

/* ---- zd_mlx5_qp.c: QPs and SRQs ---- */
DAT_RETURN zd_mlx5_qp_create(struct zd_ep *ep);
size_t zd_mlx5_qp_local_blob(struct zd_ep *ep, void *blob, size_t max);
DAT_RETURN zd_mlx5_qp_connect(struct zd_ep *ep, const void *peer_blob, size_t len);
void zd_mlx5_qp_flush(struct zd_ep *ep);
DAT_RETURN zd_mlx5_qp_reset(struct zd_ep *ep);
void zd_mlx5_qp_destroy(struct zd_ep *ep);
DAT_RETURN zd_mlx5_srq_create(struct zd_srq *srq);
DAT_RETURN zd_mlx5_srq_resize(struct zd_srq *srq, uint32_t depth);
void zd_mlx5_srq_destroy(struct zd_srq *srq);
void zd_mlx5_rq_counts(struct zd_ep *ep, struct zd_srq *srq, DAT_COUNT *avail, DAT_COUNT *held);

/* ---- zd_mlx5_post.c: the DAT posts ---- */
DAT_RETURN zd_mlx5_post_send(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			     DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags);
DAT_RETURN zd_mlx5_post_recv(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			     DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags);
DAT_RETURN zd_mlx5_post_rdma_write(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				   DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				   DAT_COMPLETION_FLAGS flags);
DAT_RETURN zd_mlx5_post_rdma_read(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				  DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				  DAT_COMPLETION_FLAGS flags);
DAT_RETURN zd_mlx5_srq_post_recv(struct zd_srq *srq, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				 DAT_DTO_COOKIE cookie);

/* The DAT entries with the mlx5 data path inlined (zd_device_ops
 * .dat_entries): zd_mlx5_post.c, and zd_mlx5_cq.c for the dequeue. */
DAT_RETURN zd_mlx5_dat_post_send(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				 DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags);
DAT_RETURN zd_mlx5_dat_post_rdma_write(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				       DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				       DAT_COMPLETION_FLAGS flags);
DAT_RETURN zd_mlx5_dat_evd_dequeue(DAT_EVD_HANDLE h, DAT_EVENT *event);

#endif /* ZD_MLX5_H */
