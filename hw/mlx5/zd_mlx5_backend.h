/*
 * The control path of the mlx5 device, behind one interface with two
 * implementations:
 *  - verbs (zd_mlx5_verbs.c, device names "mlx5_<n>"): libibverbs and
 *    mlx5dv_init_obj on a ConnectX;
 *  - the software mlx5 model (hw/mlx5/sim, device name "mlx5sim").
 *
 * A backend creates the objects and fills the plain queue descriptors of
 * zd_mlx5_queue.h; the data path (zd_mlx5_sq.h, zd_mlx5_rq.h,
 * zd_mlx5_cq.h and the post/poll ops built on them) drives the queues
 * through those descriptors only and never calls the backend.
 *
 * Queue memory: a backend takes its QP, CQ and SRQ buffers and doorbell
 * records from the glue's allocator hook (zd_mlx5_qmem.h, the registered
 * pool): verbs through parent domains, the software model at its create
 * commands; where the hook declines, as it would without one.
 *
 * Handles are opaque to the glue (void *).  Every call is control path: it
 * may block and allocate; the glue serialises nothing except what it says
 * below, so a backend that shares state between IAs locks it itself.
 *
 * Registration: a backend file includes "hw/mlx5/zd_mlx5.h" (the glue's
 * ops the macro names) and ends with
 *     ZD_MLX5_BACKEND_REGISTER(my_backend, "<device name>", "<adapter name>",
 *                              cm_bind_any, adopts_memory)
 * which registers a DAT device (zd_device.h) named "<device name>" whose
 * ops are the mlx5 glue's over this backend.  A name ending in '*' matches
 * every ia_params device word with that prefix ("mlx5_*": mlx5_0, ...).
 */
#ifndef ZD_MLX5_BACKEND_H
#define ZD_MLX5_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <dat2/udat.h>

#include "core/zd_device.h"
#include "hw/mlx5/zd_mlx5_queue.h"

/* What the device holds (ibv_query_device on hardware).  0 fields take
 * the glue's defaults. */
struct zd_mlx5_caps {
	uint32_t max_qp;
	uint32_t max_qp_wr;           /* SQ and RQ depth */
	uint32_t max_sge;             /* per send or receive WQE */
	uint32_t max_cq;
	uint32_t max_cqe;
	uint32_t max_mr;
	uint64_t max_mr_size;
	uint32_t max_pd;
	uint32_t max_srq;
	uint32_t max_srq_wr;
	uint32_t max_srq_sge;
	uint32_t max_rd_atomic;       /* RDMA reads in flight per QP */
	uint32_t max_inline;          /* inline bytes a send WQE may carry */
	uint32_t max_msg_size;
	/* The requester writes an 8-byte atomic's old value big-endian (the
	 * PRM's atomic_req_8B_endianness_mode 0) rather than in host order
	 * (mode 1): the data path then swaps it at the CQE. */
	bool atomic_reply_be;
	uint32_t max_ud_payload;      /* a datagram: the path MTU (0: no UD) */
};

/* What a QP is created with. */
struct zd_mlx5_qp_init {
	void *pd;                     /* from pd_alloc */
	void *send_cq, *recv_cq;      /* from cq_create (may be the same) */
	void *srq;                    /* from srq_create, or NULL: own RQ */
	uint32_t max_send_wr, max_recv_wr;   /* at least these many WQEs */
	uint32_t max_send_sge, max_recv_sge;
	uint32_t max_inline;          /* inline bytes wanted */
	uint32_t max_rd_atomic;
	bool ud;                      /* an unreliable-datagram QP (qp_create) */
};

struct zd_mlx5_backend {
	/*
	 * Opens the device of @p (p->device is the device word; p->args what
	 * follows, e.g. "1" for the port).  Validates the arguments strictly:
	 * on anything wrong, one line through zd_log_error and an error
	 * (DAT_INVALID_PARAMETER for bad arguments, DAT_PROVIDER_NOT_FOUND
	 * when the device does not exist).  Fills *ctx (passed to every other
	 * call), *caps and *addr (the IA address: an AF_INET address of this
	 * host that zdapl's TCP connection manager listens on).
	 */
	DAT_RETURN (*open)(const struct zd_ia_params *p, void **ctx, struct zd_mlx5_caps *caps,
			   struct sockaddr_in *addr);
	/* Every object was destroyed before. */
	void (*close)(void *ctx);

	/*
	 * Completion events (dat_evd_wait sleeps on them).  The glue's event
	 * thread loops on event_wait, then event_get until it returns 0.
	 *  - event_wait sleeps until an event may be pending (> 0), at most
	 *    @timeout_ms (0 on timeout), < 0 on error; event_kick (optional)
	 *    makes a sleeping event_wait return at once (without it the glue
	 *    waits out its timeout, 100 ms, when the IA closes).
	 *  - event_get takes one pending event, acks it, and returns 1 with
	 *    the cq_ctx given to cq_create of the CQ that fired, 0 when none
	 *    is pending (never blocks), < 0 on error.
	 * A CQ fires once per arm (the glue writes the arm doorbell itself,
	 * see zd_mlx5_cq_arm) when a CQE arrives after it.
	 */
	int (*event_wait)(void *ctx, int timeout_ms);
	void (*event_kick)(void *ctx);
	int (*event_get)(void *ctx, void **cq_ctx);

	/* One PD per DAT PZ. */
	DAT_RETURN (*pd_alloc)(void *ctx, void **pd);
	void (*pd_free)(void *ctx, void *pd);

	/* Registers [addr, addr+len) in @pd with the DAT rights @priv
	 * (DAT_MEM_PRIV_*); returns its handle and keys. */
	DAT_RETURN (*mr_reg)(void *ctx, void *pd, uint64_t addr, uint64_t len,
			     DAT_MEM_PRIV_FLAGS priv, void **mr, uint32_t *lkey, uint32_t *rkey);
	void (*mr_dereg)(void *ctx, void *mr);

	/* A CQ of at least @min_cqe entries, its buffer initialised for the
	 * owner-bit protocol (every CQE opcode MLX5_CQE_INVALID, owner 0 for
	 * the first pass: hardware and mlx5dv do this), consumer index 0.
	 * @cq_ctx is what event_get returns for it. */
	DAT_RETURN (*cq_create)(void *ctx, uint32_t min_cqe, void *cq_ctx, void **cq,
				struct zd_mlx5_cq_desc *d);
	void (*cq_destroy)(void *ctx, void *cq);

	/* An SRQ holding at least @max_wr posted receives at once (one WQE
	 * always ends the free list: wqe_cnt - 1 >= max_wr) of @max_sge data
	 * segments each (stride >= 16 * (max_sge + 1)); the desc's free list
	 * as created: WQE i links to i + 1, head 0, tail wqe_cnt - 1,
	 * doorbell record 0. */
	DAT_RETURN (*srq_create)(void *ctx, void *pd, uint32_t max_wr, uint32_t max_sge, void **srq,
				 struct zd_mlx5_srq_desc *d);
	void (*srq_destroy)(void *ctx, void *srq);

	/*
	 * An RC QP, not yet connected, that already keeps receives posted to
	 * it (DAT posts receives before connecting; verbs: moved to INIT at
	 * once).  Fills @sq (qpn included) and @rq (wqe_cnt 0 when
	 * init->srq), and *max_inline with the inline bytes its send WQEs
	 * really hold (<= init->max_inline, 0 allowed).  Every QP the glue
	 * creates is destroyed by it: dat_ep_reset makes a new QP (a new
	 * QPN) and keeps the old one, in error, until its CQEs are reaped.
	 * With init->ud, a UD QP instead, ready to send and receive at once
	 * (INIT -> RTR -> RTS with a Q_Key of the backend's choosing, which
	 * its qp_blob carries); it is never connected.
	 */
	DAT_RETURN (*qp_create)(void *ctx, const struct zd_mlx5_qp_init *init, void **qp,
				struct zd_mlx5_sq_desc *sq, struct zd_mlx5_rq_desc *rq,
				uint32_t *max_inline);
	/* The blob the peer needs to connect to @qp (hardware: LID, GID, QPN,
	 * PSN, MTU); at most @max (ZD_QP_BLOB_MAX) bytes; 0 on error. */
	size_t (*qp_blob)(void *ctx, void *qp, void *blob, size_t max);
	/* (INIT ->) RTR -> RTS towards the peer described by @peer (its qp_blob).
	 * Validates the blob (it came over the network). */
	DAT_RETURN (*qp_connect)(void *ctx, void *qp, const void *peer, size_t len);
	/* To the error state: every outstanding and later WQE completes with
	 * MLX5_CQE_SYNDROME_WR_FLUSH_ERR. */
	void (*qp_to_error)(void *ctx, void *qp);
	/* Destroys @qp; CQEs of it left in its CQs stay (the glue drops them:
	 * their QPN is no longer known). */
	void (*qp_destroy)(void *ctx, void *qp);

	/*
	 * Unreliable datagrams (optional; with caps.max_ud_payload): an
	 * address handle for the UD QP whose qp_blob is @peer (it came over
	 * the network: validated, DAT_INVALID_ADDRESS when it cannot be used).
	 * Fills the addressing of @av as mlx5dv_init_obj(MLX5DV_OBJ_AH) gives
	 * it (dqp_dct and the key are the WQE's, left to the glue), the
	 * remote QP's number and Q_Key; *ah is for ah_destroy.
	 */
	DAT_RETURN (*ah_create)(void *ctx, const void *peer, size_t len, struct mlx5_wqe_av *av,
				uint32_t *qpn, uint32_t *qkey, void **ah);
	void (*ah_destroy)(void *ctx, void *ah);
};

/* The glue's ia_open over @be (zd_mlx5_dev.c). */
DAT_RETURN zd_mlx5_ia_open(struct zd_ia *ia, const struct zd_ia_params *p,
			   const struct zd_mlx5_backend *be);

/* Ops of the glue, shared by every backend (zd_mlx5.h has the rest). */
#define ZD_MLX5_GLUE_OPS                                  \
	.ia_close = zd_mlx5_ia_close,                     \
	.pz_create = zd_mlx5_pz_create,                   \
	.pz_destroy = zd_mlx5_pz_destroy,                 \
	.mr_register = zd_mlx5_mr_register,               \
	.mr_deregister = zd_mlx5_mr_deregister,           \
	.cq_create = zd_mlx5_cq_create,                   \
	.cq_destroy = zd_mlx5_cq_destroy,                 \
	.cq_resize = zd_mlx5_cq_resize,                   \
	.cq_poll = zd_mlx5_cq_poll,                       \
	.cq_poll_one = zd_mlx5_cq_poll_one,               \
	.cq_arm = zd_mlx5_cq_arm_op,                      \
	.qp_create = zd_mlx5_qp_create,                   \
	.qp_local_blob = zd_mlx5_qp_local_blob,           \
	.qp_connect = zd_mlx5_qp_connect,                 \
	.qp_flush = zd_mlx5_qp_flush,                     \
	.qp_reset = zd_mlx5_qp_reset,                     \
	.qp_destroy = zd_mlx5_qp_destroy,                 \
	.srq_create = zd_mlx5_srq_create,                 \
	.srq_resize = zd_mlx5_srq_resize,                 \
	.srq_destroy = zd_mlx5_srq_destroy,               \
	.rq_counts = zd_mlx5_rq_counts,                   \
	.post_send = zd_mlx5_post_send,                   \
	.post_recv = zd_mlx5_post_recv,                   \
	.post_rdma_write = zd_mlx5_post_rdma_write,       \
	.post_rdma_read = zd_mlx5_post_rdma_read,         \
	.srq_post_recv = zd_mlx5_srq_post_recv,           \
	.post_rdma_write_imm = zd_mlx5_post_rdma_write_imm, \
	.post_atomic = zd_mlx5_post_atomic,               \
	.ud_ah_create = zd_mlx5_ud_ah_create,             \
	.ud_ah_destroy = zd_mlx5_ud_ah_destroy,           \
	.post_send_ud = zd_mlx5_post_send_ud,             \
	.dat_entries = {                                  \
		.ep_post_send = zd_mlx5_dat_post_send,     \
		.ep_post_rdma_write = zd_mlx5_dat_post_rdma_write, \
		.evd_dequeue = zd_mlx5_dat_evd_dequeue,    \
		.handle_extendedop = zd_mlx5_dat_handle_extendedop, \
	}

#define ZD_MLX5_BACKEND_REGISTER(be, devname, adapter, bind_any, adopts)        \
	static DAT_RETURN zd_mlx5_ia_open_##be(struct zd_ia *ia,                 \
					       const struct zd_ia_params *p)     \
	{                                                                        \
		return zd_mlx5_ia_open(ia, p, &(be));                            \
	}                                                                        \
	static const struct zd_device_ops zd_mlx5_ops_##be = {                   \
		.name = (devname),                                               \
		.adapter_name = (adapter),                                       \
		.cm_bind_any = (bind_any),                                       \
		.adopts_memory = (adopts),                                       \
		.ia_open = zd_mlx5_ia_open_##be,                                 \
		ZD_MLX5_GLUE_OPS,                                                \
	};                                                                       \
	ZD_DEVICE_REGISTER(zd_mlx5_ops_##be)

#endif /* ZD_MLX5_BACKEND_H */
