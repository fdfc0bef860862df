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
	/* qpn -> QP; second-level tables allocated on first use, freed
	 * when their last QP goes (QPNs wander over 24 bits: a long-lived
	 * IA that cycles QPs must not keep a table for every range it met) */
	struct zd_mlx5_qp **_Atomic qpt[ZD_MLX5_QPT_ENTRIES];
	uint16_t qpt_used[ZD_MLX5_QPT_ENTRIES];   /* QPs in each, under lock */
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
	bool ud;                       /* unreliable datagrams (zd_mlx5_ud.c) */
	/* The NIC writes an atomic's old value big-endian (caps.atomic_reply_be). */
	bool atomic_be;
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
extern ZD_HIDDEN _Atomic uint32_t zd_mlx5_reg_gen;

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
zd_device_ia_close_fn zd_mlx5_ia_close;
zd_device_pz_create_fn zd_mlx5_pz_create;
zd_device_pz_destroy_fn zd_mlx5_pz_destroy;
void *zd_mlx5_pd_of(struct zd_mlx5_dev *dev, const struct zd_pz *pz);
zd_device_mr_register_fn zd_mlx5_mr_register;
zd_device_mr_deregister_fn zd_mlx5_mr_deregister;
int zd_mlx5_waker_start(struct zd_mlx5_dev *dev);
/* Returns once no poller can still hold a QP unlisted before the call. */
void zd_mlx5_sync_pollers(struct zd_mlx5_dev *dev);

/* ---- zd_mlx5_cq.c: CQs, polling into DAT events, arming ---- */
zd_device_cq_create_fn zd_mlx5_cq_create;
zd_device_cq_destroy_fn zd_mlx5_cq_destroy;
zd_device_cq_resize_fn zd_mlx5_cq_resize;
zd_device_cq_poll_fn zd_mlx5_cq_poll;
zd_device_cq_arm_fn zd_mlx5_cq_arm_op;

/* ---- zd_mlx5_qp.c: QPs and SRQs ---- */
zd_device_qp_create_fn zd_mlx5_qp_create;
zd_device_qp_local_blob_fn zd_mlx5_qp_local_blob;
zd_device_qp_connect_fn zd_mlx5_qp_connect;
zd_device_qp_flush_fn zd_mlx5_qp_flush;
zd_device_qp_reset_fn zd_mlx5_qp_reset;
zd_device_qp_destroy_fn zd_mlx5_qp_destroy;
zd_device_srq_create_fn zd_mlx5_srq_create;
zd_device_srq_resize_fn zd_mlx5_srq_resize;
zd_device_srq_destroy_fn zd_mlx5_srq_destroy;
zd_device_rq_counts_fn zd_mlx5_rq_counts;

/* ---- zd_mlx5_post.c: the DAT posts ---- */
zd_device_post_send_fn zd_mlx5_post_send;
zd_device_post_recv_fn zd_mlx5_post_recv;
zd_device_post_rdma_write_fn zd_mlx5_post_rdma_write;
zd_device_post_rdma_read_fn zd_mlx5_post_rdma_read;
zd_device_srq_post_recv_fn zd_mlx5_srq_post_recv;
zd_device_post_rdma_write_imm_fn zd_mlx5_post_rdma_write_imm;
zd_device_post_atomic_fn zd_mlx5_post_atomic;

/* ---- zd_mlx5_ud.c: unreliable datagrams ---- */
zd_device_ud_ah_create_fn zd_mlx5_ud_ah_create;
zd_device_ud_ah_destroy_fn zd_mlx5_ud_ah_destroy;
zd_device_post_send_ud_fn zd_mlx5_post_send_ud;

/* The DAT entries with the mlx5 data path inlined (zd_device_ops
 * .dat_entries): zd_mlx5_post.c, and zd_mlx5_cq.c for the dequeue. */
DAT_RETURN zd_mlx5_dat_post_send(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				 DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags);
DAT_RETURN zd_mlx5_dat_post_rdma_write(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				       DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				       DAT_COMPLETION_FLAGS flags);
DAT_RETURN zd_mlx5_dat_evd_dequeue(DAT_EVD_HANDLE h, DAT_EVENT *event);
DAT_RETURN zd_mlx5_dat_handle_extendedop(DAT_HANDLE h, DAT_EXTENDED_OP op, va_list args);

#endif /* ZD_MLX5_H */
