/*
 * The device ops table: what core/ asks of a device (hw/shm, hw/tcp,
 * hw/mlx5 and the software mlx5 model), shaped after the hardware.
 *
 *  - Control path (IA, memory registration, CQ/QP/SRQ lifetime, connecting a
 *    QP to a peer) may block and allocate.
 *  - Data path (post_*, cq_poll) is reached with exactly one indirect call
 *    from the DAT entry point: a post builds a descriptor in a ring the device
 *    owns (a WQE on mlx5) and rings one doorbell; cq_poll reads the device's
 *    completion queue and turns entries straight into DAT events in the EVD
 *    ring, never more than the ring has room for, so a full EVD leaves
 *    completions in the CQ instead of dropping them.
 *
 * Core never includes a device's private header; a device registers its ops
 * with ZD_DEVICE_REGISTER and keeps its state behind the *_priv pointers.
 */
#ifndef ZD_DEVICE_H
#define ZD_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <dat2/udat.h>
#include <dat2/dat_registry.h>   /* the DAT_*_FUNC entry types */

struct zd_ia;
struct zd_lmr;
struct zd_rmr;
struct zd_evd;
struct zd_ep;
struct zd_srq;
struct zd_pz;

/* Parsed ia_params: "<device> [device args...] [key=value ...]". */
#define ZD_PARAMS_MAX_ARGS 4
#define ZD_PARAMS_ARG_LEN  64
struct zd_ia_params {
	char device[ZD_PARAMS_ARG_LEN];
	int nargs;
	char args[ZD_PARAMS_MAX_ARGS][ZD_PARAMS_ARG_LEN];
};

/* Limits a device really holds; reported by dat_ia_query. */
struct zd_device_limits {
	DAT_COUNT max_eps;
	DAT_COUNT max_dto_per_ep;
	DAT_COUNT max_rdma_read_per_ep;
	DAT_COUNT max_evds;
	DAT_COUNT max_evd_qlen;
	DAT_COUNT max_iov_segments;
	DAT_COUNT max_lmrs;
	DAT_SEG_LENGTH max_lmr_block_size;
	DAT_COUNT max_pzs;
	DAT_SEG_LENGTH max_message_size;
	DAT_SEG_LENGTH max_rdma_size;
	DAT_COUNT max_rmrs;
	DAT_COUNT max_srqs;
	DAT_COUNT max_recv_per_srq;
	DAT_COUNT max_private_data;
	DAT_COUNT max_inline;
	/* Largest datagram payload of a UD EP (its "MTU"); 0: no UD. */
	DAT_SEG_LENGTH max_ud_payload;
	/* Descriptors a connected EP holds besides the CM's socket (0 on
	 * tcp, whose data path rides the CM socket: qp_carry); max_eps as
	 * reported is also bounded by what RLIMIT_NOFILE leaves for them
	 * (zd_ia_fill_attr). */
	DAT_COUNT fds_per_ep;
};

/* Bytes a device may keep per UD address handle (zd_ud.c stores them). */
#define ZD_UD_AH_BYTES 128
/* The global-route header space in front of every received datagram's
 * payload, as an InfiniBand UD receive reports it (consumers skip it). */
#define ZD_UD_GRH_BYTES 40

/* Largest device blob the connection manager carries for a QP. */
#define ZD_QP_BLOB_MAX 512

/* The signature of each device op (zd_device_ops below says what each
 * does); a device declares its implementations with these, e.g.
 * "zd_device_qp_create_fn zd_shm_qp_create;", so they cannot drift. */
typedef DAT_RETURN zd_device_ia_open_fn(struct zd_ia *ia, const struct zd_ia_params *params);
typedef void zd_device_ia_close_fn(struct zd_ia *ia);
typedef DAT_RETURN zd_device_mr_register_fn(struct zd_ia *ia, struct zd_lmr *lmr);
typedef void zd_device_mr_deregister_fn(struct zd_ia *ia, struct zd_lmr *lmr);
typedef DAT_RETURN zd_device_rmr_bind_fn(struct zd_ep *ep, struct zd_rmr *rmr, uint32_t old_rkey,
					 const DAT_EVENT *ev);
typedef void zd_device_rmr_unbind_fn(struct zd_ia *ia, struct zd_rmr *rmr);
typedef DAT_RETURN zd_device_cq_create_fn(struct zd_evd *evd, uint32_t depth);
typedef void zd_device_cq_destroy_fn(struct zd_evd *evd);
typedef DAT_RETURN zd_device_cq_resize_fn(struct zd_evd *evd, uint32_t depth);
typedef int zd_device_cq_poll_fn(struct zd_evd *evd, int budget);
typedef DAT_RETURN zd_device_cq_poll_one_fn(struct zd_evd *evd, DAT_EVENT *out);
typedef void zd_device_cq_arm_fn(struct zd_evd *evd);
typedef DAT_RETURN zd_device_qp_create_fn(struct zd_ep *ep);
typedef size_t zd_device_qp_local_blob_fn(struct zd_ep *ep, void *blob, size_t max);
typedef DAT_RETURN zd_device_qp_connect_fn(struct zd_ep *ep, const void *peer_blob, size_t len);
typedef void zd_device_qp_flush_fn(struct zd_ep *ep);
typedef DAT_RETURN zd_device_qp_reset_fn(struct zd_ep *ep);
typedef void zd_device_qp_destroy_fn(struct zd_ep *ep);
typedef int zd_device_qp_carry_fn(struct zd_ep *ep, int fd);
typedef int zd_device_qp_cm_send_fn(struct zd_ep *ep, unsigned type, uint64_t id);
typedef DAT_RETURN zd_device_pz_create_fn(struct zd_pz *pz);
typedef void zd_device_pz_destroy_fn(struct zd_pz *pz);
typedef DAT_RETURN zd_device_srq_create_fn(struct zd_srq *srq);
typedef DAT_RETURN zd_device_srq_resize_fn(struct zd_srq *srq, uint32_t depth);
typedef void zd_device_srq_destroy_fn(struct zd_srq *srq);
typedef void zd_device_rq_counts_fn(struct zd_ep *ep, struct zd_srq *srq, DAT_COUNT *avail,
				    DAT_COUNT *held);
typedef DAT_RETURN zd_device_post_send_fn(struct zd_ep *ep, DAT_COUNT n,
					  const DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
					  DAT_COMPLETION_FLAGS flags);
typedef DAT_RETURN zd_device_post_recv_fn(struct zd_ep *ep, DAT_COUNT n,
					  const DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
					  DAT_COMPLETION_FLAGS flags);
typedef DAT_RETURN zd_device_post_rdma_write_fn(struct zd_ep *ep, DAT_COUNT n,
						const DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
						const DAT_RMR_TRIPLET *remote,
						DAT_COMPLETION_FLAGS flags);
typedef DAT_RETURN zd_device_post_rdma_read_fn(struct zd_ep *ep, DAT_COUNT n,
					       const DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
					       const DAT_RMR_TRIPLET *remote,
					       DAT_COMPLETION_FLAGS flags);
typedef DAT_RETURN zd_device_srq_post_recv_fn(struct zd_srq *srq, DAT_COUNT n,
					      const DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie);
/* The IB extensions (dat_ib_extensions.h). */
typedef DAT_RETURN zd_device_post_rdma_write_imm_fn(struct zd_ep *ep, DAT_COUNT n,
						    const DAT_LMR_TRIPLET *iov,
						    DAT_DTO_COOKIE cookie,
						    const DAT_RMR_TRIPLET *remote, uint32_t imm,
						    DAT_COMPLETION_FLAGS flags);
/* Unreliable datagrams: an address handle is what a device needs to
 * reach the UD QP whose qp_local_blob is @blob (resolved on the control
 * path into @ah, ZD_UD_AH_BYTES the device owns; *qpn: the remote QP's
 * number for DAT_IB_ADDR_HANDLE.qpn); ud_ah_destroy releases it. */
typedef DAT_RETURN zd_device_ud_ah_create_fn(struct zd_ia *ia, const void *blob, size_t len,
					     void *ah, uint32_t *qpn);
typedef void zd_device_ud_ah_destroy_fn(struct zd_ia *ia, void *ah);
typedef DAT_RETURN zd_device_post_send_ud_fn(struct zd_ep *ep, DAT_COUNT n,
					     const DAT_LMR_TRIPLET *iov, const void *ah,
					     DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags);
/* One 64-bit atomic: @op is DAT_IB_DTO_FETCH_ADD (add @operand) or
 * DAT_IB_DTO_CMP_SWAP (swap in @swap if the word equals @operand). */
typedef DAT_RETURN zd_device_post_atomic_fn(struct zd_ep *ep, DAT_DTOS op,
					    const DAT_LMR_TRIPLET *local, DAT_DTO_COOKIE cookie,
					    const DAT_RMR_TRIPLET *remote, uint64_t operand,
					    uint64_t swap, DAT_COMPLETION_FLAGS flags);

struct zd_device_ops {
	const char *name;              /* first word of ia_params; a trailing
					* '*' matches every word with that
					* prefix ("mlx5_*": mlx5_0, mlx5_1) */
	const char *adapter_name;      /* for dat_ia_query */
	/* The connection manager listens on every local address (a device
	 * that reaches only this host) instead of the IA address alone. */
	int cm_bind_any;
	/* Peers reach registered memory through shared mappings: registering
	 * the application's own memory adopts it (mem/zd_adopt.h) first. */
	int adopts_memory;

	/* ---- control path ---- */
	/* Validates the device arguments of @params (strictly: a clear one-line
	 * message on stderr and DAT_INVALID_PARAMETER otherwise), opens the
	 * device, sets ia->addr and ia->limits. */
	zd_device_ia_open_fn *ia_open;
	zd_device_ia_close_fn *ia_close;

	/* Makes [lmr->addr, +lmr->length) reachable by the device.  Core has
	 * already given the LMR its key (lmr->lkey == lmr->rkey) and published
	 * it in ia->keys; hardware devices may replace both keys with their
	 * own (mlx5: the ibv_mr's lkey/rkey). */
	zd_device_mr_register_fn *mr_register;
	zd_device_mr_deregister_fn *mr_deregister;

	/* Memory windows (optional: without rmr_bind, dat_rmr_bind checks its
	 * arguments and returns DAT_NOT_IMPLEMENTED).  Core has checked the
	 * bind and set rmr->lmr, window, priv and rkey (a fresh key of
	 * ia->keys, or 0 for an unbind).  rmr_bind makes rmr->rkey reach only
	 * rmr->window with only the remote rights of rmr->priv, stops @old_rkey
	 * (0: none) reaching anything, and queues @ev (NULL: none) on the
	 * request EVD of @ep behind the EP's earlier completions.  On failure
	 * nothing changed.  rmr_unbind stops rmr->rkey reaching anything
	 * (dat_rmr_free, abrupt close). */
	zd_device_rmr_bind_fn *rmr_bind;
	zd_device_rmr_unbind_fn *rmr_unbind;

	/* A completion queue feeding a DTO or RMR_BIND EVD (NULL: none). */
	zd_device_cq_create_fn *cq_create;
	zd_device_cq_destroy_fn *cq_destroy;
	/* dat_evd_resize to @depth events, before the EVD changes (optional:
	 * NULL when the CQ holds any number): make the CQ hold what an EVD
	 * of that size may owe it, or refuse (the EVD then stays as it was). */
	zd_device_cq_resize_fn *cq_resize;
	/* Data path: moves up to @budget completions into the EVD ring
	 * (evd->ring, consumer side) and returns how many.
	 * Callers: one thread at a time per EVD, and never both kinds for one
	 * EVD -- the EVD's consumer (manual progress, from dat_evd_dequeue,
	 * dat_evd_wait, dat_cno_wait), or, with ZDAPL_POLLERS, the pinned
	 * poller the EVD was given at creation (evd/zd_poller.h), from its
	 * own thread while the consumer dequeues concurrently.  So cq_poll
	 * only produces into the ring (claim/publish, zd_ring_enqueue,
	 * zd_evd_post to spill), never takes from it; it treats @budget as an
	 * estimate (a claim may fail: spill, never drop); and it needs no
	 * zd_evd_wake (the poller wakes after it).  The poller calls it
	 * inside the evd->direct_users handshake, so evd->ring is stable
	 * across one call (dat_evd_resize waits it out). */
	zd_device_cq_poll_fn *cq_poll;
	/* Data path, optional (NULL: dat_evd_dequeue polls with cq_poll, then
	 * takes from the ring).  dat_evd_dequeue's tail call when the EVD's
	 * consumer found the ring empty, with no resize drain and no spill
	 * pending (a device's own dequeue entry may call its inlined twin
	 * first, before the ring: evd/zd_evd_entry.h).  Takes the next
	 * completion straight into @out (no ring slot) and returns
	 * DAT_SUCCESS, but only if, after reading it, zd_evd_direct_ok(evd)
	 * holds (nothing older waits in the ring or its spill list) and
	 * nothing older waits in the device's own queues;
	 * @out is then what the ring would have handed back (solicited mark,
	 * zeroed extension words).  An empty CQ: DAT_QUEUE_EMPTY.  Anything
	 * else: cq_poll (budget zd_evd_room) and return zd_evd_take. */
	zd_device_cq_poll_one_fn *cq_poll_one;
	/* Requests a zd_waiter_notify on evd->waiter for the next completion.
	 * Manual progress only: neither cq_poll_one nor cq_arm is called for
	 * an EVD a pinned poller polls (its consumer polls nothing, sleeps
	 * on evd->waiter, and the poller wakes it). */
	zd_device_cq_arm_fn *cq_arm;

	/* Transport endpoint (QP) of an EP, created when the EP is (its PZ,
	 * EVDs, SRQ and attributes are set).  The connection manager moves the
	 * blob of qp_local_blob to the peer and hands the peer's blob to
	 * qp_connect, after which posts flow.  qp_flush moves the QP to error:
	 * every outstanding and later DTO completes DAT_DTO_ERR_FLUSHED.
	 * qp_reset returns a flushed QP to its freshly created state. */
	zd_device_qp_create_fn *qp_create;
	zd_device_qp_local_blob_fn *qp_local_blob;
	zd_device_qp_connect_fn *qp_connect;
	zd_device_qp_flush_fn *qp_flush;
	zd_device_qp_reset_fn *qp_reset;
	zd_device_qp_destroy_fn *qp_destroy;

	/* The CM's connection socket as the data path (optional: NULL keeps
	 * it the CM's, as shm and mlx5 do).  qp_carry: the connection of @ep
	 * is ESTABLISHED and its CM socket @fd (connected, non-blocking, with
	 * every byte past the last CM frame unread) is offered; 1: the device
	 * took it (it reads, writes and closes it from now on; the peer's
	 * device took its end too, as both sides' blobs agreed), 0: not
	 * carried (a peer without a data path: the CM keeps it), -1: failed
	 * (the connection is lost).  From then on the CM's frames of that
	 * connection (DISC, DISC_ACK, PING, PONG) travel on the data stream:
	 * qp_cm_send queues one behind every DTO posted before it (PING and
	 * PONG go first) and returns 0, or -1 if the QP can send no more; the
	 * device hands the peer's to zd_cm_dev_frame, in stream order, and
	 * reports the stream's end with zd_cm_dev_broken. */
	zd_device_qp_carry_fn *qp_carry;
	zd_device_qp_cm_send_fn *qp_cm_send;

	/* Protection zones (optional: NULL when a device needs no state per
	 * PZ; mlx5 keeps one PD per PZ).  pz_create runs before the PZ handle
	 * is returned, pz_destroy when it is freed (no object uses it). */
	zd_device_pz_create_fn *pz_create;
	zd_device_pz_destroy_fn *pz_destroy;

	zd_device_srq_create_fn *srq_create;
	zd_device_srq_resize_fn *srq_resize;
	zd_device_srq_destroy_fn *srq_destroy;
	/* Receive buffer counts, a snapshot (optional: NULL reports
	 * DAT_VALUE_UNKNOWN; dat_ep_set_watermark then answers
	 * DAT_MODEL_NOT_SUPPORTED).  For an EP (@srq NULL): *held = receive
	 * buffers allocated to it (posted on its RQ, or taken from its SRQ)
	 * and not yet completed.  For an SRQ (@ep NULL): *avail = buffers
	 * posted and not yet taken for an EP, *held = entries occupied
	 * (posted and not yet completed).  A count it cannot give stays as
	 * the caller set it. */
	zd_device_rq_counts_fn *rq_counts;

	/* ---- data path: core checked the handle, the EP state and the
	 * segment count; the device checks keys, bounds, PZ and access (as
	 * hardware does) and reports violations as completions in error. ---- */
	zd_device_post_send_fn *post_send;
	zd_device_post_recv_fn *post_recv;
	zd_device_post_rdma_write_fn *post_rdma_write;
	zd_device_post_rdma_read_fn *post_rdma_read;
	zd_device_srq_post_recv_fn *srq_post_recv;

	/* ---- data path, IB extensions (optional: NULL answers
	 * DAT_NOT_IMPLEMENTED and dat_ia_query does not advertise the
	 * operation).  Core checked what it checks for the DAT posts, and for
	 * an atomic: one 8-byte local segment, an 8-byte aligned remote
	 * address and 8 remote bytes.  Completions (zd_dto_event.h) carry
	 * operation DAT_IB_DTO_RDMA_WRITE_IMMED, FETCH_ADD or CMP_SWAP at the
	 * initiator; a write with immediate data consumes the target's next
	 * receive (its RQ or SRQ; none posted: RNR, as a send) and completes
	 * it with DAT_IB_DTO_RECV_IMMED, the write's length and the immediate
	 * data, only after the written bytes are visible.  An atomic needs
	 * DAT_IB_MEM_PRIV_REMOTE_ATOMIC on the target region
	 * (DAT_DTO_ERR_REMOTE_ACCESS otherwise, target untouched), is atomic
	 * with every other atomic on that word from any initiator, and
	 * stores the word's earlier value, host order, in the local segment. */
	zd_device_post_rdma_write_imm_fn *post_rdma_write_imm;
	zd_device_post_atomic_fn *post_atomic;

	/* ---- unreliable datagrams (optional, all four or none; limits
	 * .max_ud_payload > 0).  qp_create makes a UD QP when
	 * ep->attr.service_type is DAT_IB_SERVICE_TYPE_UD; qp_local_blob
	 * gives its address, which the CM hands to the peer's ud_ah_create;
	 * qp_connect and qp_flush are never called for it.  post_recv and
	 * srq_post_recv as for RC.  post_send_ud (core checked the EP, the
	 * segment count, the handle @ah came from and that the payload is at
	 * most max_ud_payload) sends one datagram to the QP @ah names and
	 * completes DAT_IB_DTO_SEND_UD with the payload length once it left
	 * (the sender never waits for the receiver).  The receiving QP takes
	 * its next posted receive, writes the payload at offset
	 * ZD_UD_GRH_BYTES of it and completes DAT_IB_DTO_RECV_UD with the
	 * payload length + ZD_UD_GRH_BYTES; a receive too small for that
	 * completes DAT_DTO_ERR_LOCAL_LENGTH and the QP goes on; no receive
	 * posted: the datagram is dropped (and counted), as on InfiniBand. */
	zd_device_ud_ah_create_fn *ud_ah_create;
	zd_device_ud_ah_destroy_fn *ud_ah_destroy;
	zd_device_post_send_ud_fn *post_send_ud;

	/* ---- optional: DAT entry points with this device's data path
	 * inlined (core/zd_dto_entry.h, evd/zd_evd_entry.h,
	 * core/zd_ext_entry.h).  They go into the DAT_PROVIDER of every
	 * dat.conf line this device serves; one left NULL keeps core's. ---- */
	struct {
		DAT_EP_POST_SEND_FUNC ep_post_send;
		DAT_EP_POST_RDMA_WRITE_FUNC ep_post_rdma_write;
		DAT_EVD_DEQUEUE_FUNC evd_dequeue;
		DAT_HANDLE_EXTENDEDOP_FUNC handle_extendedop;
	} dat_entries;
};

/* Registration: each device file ends with ZD_DEVICE_REGISTER(ops). */
void zd_device_register(const struct zd_device_ops *ops);
const struct zd_device_ops *zd_device_find(const char *name);

#define ZD_DEVICE_REGISTER(ops)                                          \
	__attribute__((constructor)) static void zd_device_register_##ops(void) \
	{                                                                \
		zd_device_register(&(ops));                              \
	}

#endif /* ZD_DEVICE_H */
