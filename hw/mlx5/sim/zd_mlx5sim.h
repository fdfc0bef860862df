/*
 * The software mlx5 device ("zdapl-mlx5sim"): a ConnectX in software.
 *
 * The model reads and writes only the formats of <infiniband/mlx5dv.h>:
 * it watches the doorbell records and the BlueFlame register of its QPs,
 * parses their WQEs in 64-byte basic blocks, checks keys, bounds, access
 * and PD against its MR table and the peer's, executes RC semantics and
 * writes CQEs by owner bit.  The hw/mlx5 data path drives it through the
 * queue descriptors of hw/mlx5/zd_mlx5_queue.h, exactly as it drives a NIC.
 *
 * The control path below mirrors verbs (PD, MR, CQ, QP, SRQ, modify QP,
 * CQ events) so a backend maps it 1:1.  Every call returns 0 or a negative
 * errno; none may be called on the data path.  One NIC per IA; its state
 * that peers touch lives in one sealed memfd region that a peer process
 * maps (its fd handed over a UNIX socket: hw/soft/zd_soft_fdx.h), and
 * one engine thread per NIC plays the hardware (see zd_mlx5sim_priv.h for
 * the model).
 *
 * For a backend: dat_ia_open -> nic_open (and a zd_chunk listener calling
 * chunk_add/chunk_remove), dat_pz_create -> pd_alloc, dat_lmr_create ->
 * mr_add (DAT privileges to the access bits below), EVD -> cq_create,
 * dat_srq_create -> srq_create, dat_ep_create -> qp_create; the CM sends
 * qp_addr to the peer and calls qp_connect with the peer's; disconnect ->
 * qp_modify(ERR).  The data path then drives the descriptors exactly as on
 * a ConnectX: WQEs (64-byte basic blocks, index wrapping at 0xffff),
 * doorbell record, then BlueFlame copy (bf_size bytes per half, halves
 * toggled) or an 8-byte doorbell; CQEs by owner bit, consumer index in
 * dbrec[0]; arming by dbrec[1] plus the 64-bit UAR doorbell at
 * uar + MLX5_CQ_DOORBELL (sn << 28 | cmd | ci, cqn), sn bumped per event.
 * Atomics as a ConnectX in its default requester mode: operands big-endian
 * in the WQE, the target word in host order, the old value written back
 * big-endian.
 * ZDAPL_MLX5SIM_DEBUG=1 logs WQE errors and doorbell violations on stderr.
 */
#ifndef ZD_MLX5SIM_H
#define ZD_MLX5SIM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hw/mlx5/zd_mlx5_queue.h"

struct zd_mlx5sim_nic;

struct zd_mlx5sim_nic_attr {
	size_t queue_mem;     /* bytes of the NIC's page arena (UAR pages, and the
			       * queues the hook below does not give); 0: 4 MiB */
	uint32_t max_qp;      /* 0: 256 */
	uint32_t max_cq;      /* 0: 256 */
	uint32_t max_srq;     /* 0: 64 */
	uint32_t max_mr;      /* 0: 4096 (power of two) */
	/*
	 * Queue memory hook, as struct ibv_parent_domain_init_attr's alloc and
	 * free (pd NULL, pd_context qmem_ctx): the create calls take their
	 * buffers (MLX5DV_RES_TYPE_QP: one buffer, RQ then SQ; _CQ; _SRQ) and
	 * doorbell records (_DBR, 8 bytes) from it, zeroed by the model.  Only
	 * memory inside a chunk the NIC publishes (zd_mlx5sim_chunk_add) is
	 * used; NULL, IBV_ALLOCATOR_USE_DEFAULT or other memory: the arena.
	 */
	void *(*qmem_alloc)(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
			    uint64_t resource_type);
	void (*qmem_free)(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type);
	void *qmem_ctx;
};

/* QP states (as enum ibv_qp_state orders them). */
enum zd_mlx5sim_qp_state {
	ZD_MLX5SIM_QPS_RESET = 0,
	ZD_MLX5SIM_QPS_INIT = 1,
	ZD_MLX5SIM_QPS_RTR = 2,
	ZD_MLX5SIM_QPS_RTS = 3,
	ZD_MLX5SIM_QPS_SQE = 5,   /* UD: a send failed; the SQ flushes, receives go on */
	ZD_MLX5SIM_QPS_ERR = 6,
};

/* QP transport services (the two zdapl uses). */
enum zd_mlx5sim_qp_type {
	ZD_MLX5SIM_QPT_RC = 0,
	ZD_MLX5SIM_QPT_UD = 1,    /* zd_mlx5sim_ud.c */
};

/* MR access: the values of enum ibv_access_flags.  Local read is implied. */
#define ZD_MLX5SIM_ACCESS_LOCAL_WRITE   (1u << 0)
#define ZD_MLX5SIM_ACCESS_REMOTE_WRITE  (1u << 1)
#define ZD_MLX5SIM_ACCESS_REMOTE_READ   (1u << 2)
#define ZD_MLX5SIM_ACCESS_REMOTE_ATOMIC (1u << 3)

struct zd_mlx5sim_qp_attr {
	uint32_t pdn;
	uint32_t send_cqn, recv_cqn;
	uint32_t srqn;          /* 0: own receive queue */
	uint32_t sq_wqe_cnt;    /* basic blocks, rounded up to a power of two */
	uint32_t rq_wqe_cnt;    /* rounded up to a power of two; ignored with an SRQ */
	uint32_t rq_max_sge;    /* data segments per receive WQE (stride = 16 * pow2) */
	uint32_t type;          /* enum zd_mlx5sim_qp_type (0: RC) */
};

/*
 * What a peer needs to connect to a QP (sent over the CM): plain data,
 * no pointers.  The fd is the NIC region's number in the owner process,
 * which hands it to the peer (zd_soft_fdx_get).
 */
struct zd_mlx5sim_qp_addr {
	uint32_t magic;
	int32_t pid;
	uint64_t nic_uid;
	int32_t region_fd;
	uint32_t qpn;
	uint64_t region_size;
};

struct zd_mlx5sim_stats {
	uint64_t wqes;              /* WQEs executed (incl. errors and flushes) */
	uint64_t cqes;              /* CQEs written to this NIC's CQs by anyone */
	uint64_t rnr_retries;       /* sends retried for lack of a receive */
	uint64_t wqe_errors;        /* WQEs that completed in error (not flushes) */
	uint64_t bf_checked;        /* BlueFlame copies compared with the SQ */
	uint64_t bf_mismatch;       /* BlueFlame copy differs from the WQE in the SQ */
	uint64_t db_order;          /* BlueFlame/doorbell write before its doorbell record */
	uint64_t cq_overrun;        /* CQEs that found their CQ full */
	uint64_t cq_holes;          /* CQ slots claimed by a writer that died, given up */
	uint64_t events;            /* completion events raised */
	uint64_t ud_sent;           /* datagrams sent by this NIC's UD QPs */
	uint64_t ud_lost;           /* ... that reached no QP: no route to the GID, no
				     * such UD QP, or a Q_Key it does not hold */
};

int zd_mlx5sim_nic_open(const struct zd_mlx5sim_nic_attr *attr, struct zd_mlx5sim_nic **out);
/* Stops the engine, tears down every object and peer mapping. */
void zd_mlx5sim_nic_close(struct zd_mlx5sim_nic *nic);
void zd_mlx5sim_nic_stats(struct zd_mlx5sim_nic *nic, struct zd_mlx5sim_stats *st);

int zd_mlx5sim_pd_alloc(struct zd_mlx5sim_nic *nic, uint32_t *pdn);
int zd_mlx5sim_pd_free(struct zd_mlx5sim_nic *nic, uint32_t pdn);   /* -EBUSY while used */

/*
 * Memfd chunks of this process (zd_chunk.h): memory in one is reached by a
 * peer through a mapping of the chunk rather than process_vm_writev/readv.
 * Register before the MRs that lie in it; fd stays owned by the caller and
 * must stay open while the chunk is registered.
 */
int zd_mlx5sim_chunk_add(struct zd_mlx5sim_nic *nic, void *base, size_t len, int fd);
int zd_mlx5sim_chunk_remove(struct zd_mlx5sim_nic *nic, void *base);
/* The process's adoption file (mem/zd_adopt.h): the application's own
 * registered memory, which peer NICs then reach through windows of it.
 * 0, or -ENOENT when adoption is off. */
int zd_mlx5sim_chunk_add_adopted(struct zd_mlx5sim_nic *nic);

/* ibv_reg_mr: lkey == rkey, never MLX5_INVALID_LKEY. */
int zd_mlx5sim_mr_add(struct zd_mlx5sim_nic *nic, uint32_t pdn, void *addr, uint64_t len,
		      uint32_t access, uint32_t *lkey, uint32_t *rkey);
int zd_mlx5sim_mr_remove(struct zd_mlx5sim_nic *nic, uint32_t lkey);

/* ibv_create_cq + mlx5dv_init_obj: cqe_cnt rounded up to a power of two;
 * @user is what zd_mlx5sim_event_get returns when the CQ fires. */
int zd_mlx5sim_cq_create(struct zd_mlx5sim_nic *nic, uint32_t cqe_cnt, void *user,
			 struct zd_mlx5_cq_desc *out);
int zd_mlx5sim_cq_destroy(struct zd_mlx5sim_nic *nic, uint32_t cqn);  /* -EBUSY while used */
/* true once the CQ overran (the CQ error async event). */
bool zd_mlx5sim_cq_in_error(struct zd_mlx5sim_nic *nic, uint32_t cqn);

/* ibv_create_srq + mlx5dv_init_obj: wqe_cnt rounded up to a power of two,
 * one WQE is kept as the free-list tail (max_wr = wqe_cnt - 1). */
int zd_mlx5sim_srq_create(struct zd_mlx5sim_nic *nic, uint32_t pdn, uint32_t wqe_cnt,
			  uint32_t max_sge, struct zd_mlx5_srq_desc *out);
int zd_mlx5sim_srq_destroy(struct zd_mlx5sim_nic *nic, uint32_t srqn);

/* ibv_create_qp (RC) + mlx5dv_init_obj; the QP starts in RESET. */
int zd_mlx5sim_qp_create(struct zd_mlx5sim_nic *nic, const struct zd_mlx5sim_qp_attr *attr,
			 struct zd_mlx5_sq_desc *sq, struct zd_mlx5_rq_desc *rq, uint32_t *qpn);
int zd_mlx5sim_qp_addr(struct zd_mlx5sim_nic *nic, uint32_t qpn, struct zd_mlx5sim_qp_addr *out);
/* RESET/INIT -> INIT -> RTR -> RTS towards the peer QP. */
int zd_mlx5sim_qp_connect(struct zd_mlx5sim_nic *nic, uint32_t qpn,
			  const struct zd_mlx5sim_qp_addr *peer);
/* ibv_modify_qp to ERR (queues flush) or RESET (queues emptied: the data
 * path restarts its indices at 0). */
int zd_mlx5sim_qp_modify(struct zd_mlx5sim_nic *nic, uint32_t qpn, enum zd_mlx5sim_qp_state st);
int zd_mlx5sim_qp_state(struct zd_mlx5sim_nic *nic, uint32_t qpn);  /* state or -errno */
int zd_mlx5sim_qp_destroy(struct zd_mlx5sim_nic *nic, uint32_t qpn);

/*
 * Unreliable datagrams (zd_mlx5sim_ud.c).  A QP created with type UD is
 * made ready by qp_ud_ready (INIT -> RTR -> RTS with its Q_Key: it has no
 * peer) and sends SEND or SEND_IMM WQEs whose datagram segment (struct
 * mlx5_wqe_datagram_seg after the control segment: the address vector with
 * dqp_dct = destination QPN | MLX5_EXTENDED_UD_AV and the Q_Key) names the
 * destination, as rdma-core's mlx5 provider builds them.
 *
 * Addressing: the model's port has no subnet manager, hence no LID; it
 * routes by GID, as RoCE does.  A NIC's port GID is fe80::/64 with its
 * unique id as the interface id, and only an AV that carries the GRH
 * (grh_gid_fl bit 30: the 48-byte AV) reaches anyone.  A NIC reaches the
 * ports whose regions it has mapped: ah_create maps the destination's
 * (path resolution) and keeps it mapped until ah_destroy.
 *
 * A datagram above the path MTU completes with a local length error.  One
 * that reaches no QP (no route to the GID, no UD QP of that number, a
 * Q_Key it does not hold) is lost on the wire: the send still completes,
 * and the sender's stats count it (ud_lost).  One that finds no receive
 * WQE is dropped, counted in the receiving QP's out_of_buffer (as mlx5's
 * q counter of that name).  A receive gets the GRH in its first 40 bytes,
 * then the payload; its CQE reports byte_cnt = 40 + payload and the source
 * QPN in flags_rqpn, with the GRH flag.  A receive too small for that, or
 * whose buffers fail their key check, completes in error and the QP goes
 * on.  A send that fails moves the QP to SQE: later sends flush, receives
 * go on.
 */
#define ZD_MLX5SIM_UD_MTU 4096u   /* path MTU: a ConnectX port with a 4096-byte MTU */

/* INIT -> RTR -> RTS of UD QP @qpn, with Q_Key @qkey. */
int zd_mlx5sim_qp_ud_ready(struct zd_mlx5sim_nic *nic, uint32_t qpn, uint32_t qkey);
/* The Q_Key of UD QP @qpn (ibv_query_qp); -EINVAL if it is not one. */
int zd_mlx5sim_qp_ud_qkey(struct zd_mlx5sim_nic *nic, uint32_t qpn, uint32_t *qkey);
/* Datagrams UD QP @qpn dropped for lack of a receive WQE. */
int zd_mlx5sim_qp_out_of_buffer(struct zd_mlx5sim_nic *nic, uint32_t qpn, uint64_t *count);
/* This NIC's port GID (ibv_query_gid). */
void zd_mlx5sim_port_gid(struct zd_mlx5sim_nic *nic, uint8_t gid[16]);
/* ibv_create_ah + mlx5dv_init_obj(MLX5DV_OBJ_AH): the address vector of
 * the NIC of @dest (an address of any QP of it, from its qp_addr; dqp_dct
 * and the key stay 0: they are the WQE's).  -EINVAL: @dest is malformed;
 * -ENOENT: no NIC can be reached there.  *ah: for ah_destroy. */
int zd_mlx5sim_ah_create(struct zd_mlx5sim_nic *nic, const struct zd_mlx5sim_qp_addr *dest,
			 struct mlx5_wqe_av *av, void **ah);
void zd_mlx5sim_ah_destroy(struct zd_mlx5sim_nic *nic, void *ah);

/*
 * Completion events: arming is the data path's business (CQ doorbell record
 * and the UAR arm doorbell, as on hardware).  When an armed CQ gets a CQE
 * (any, or for a solicited arm a solicited or error one) the NIC marks the
 * CQ fired and bumps the event word, a shared futex a poller may wait on
 * itself (FUTEX_WAIT, not FUTEX_PRIVATE: the engine that fires may run in
 * the peer process).
 *  - event_wait: 1 when a CQ has fired (or after event_kick), 0 when
 *    timeout_ms (-1: forever) passed first.
 *  - event_get: takes one fired CQ: 1 and its @user, or 0 when none (never
 *    blocks); ibv_get_cq_event + ibv_ack_cq_events.
 */
_Atomic uint32_t *zd_mlx5sim_event_word(struct zd_mlx5sim_nic *nic);
int zd_mlx5sim_event_wait(struct zd_mlx5sim_nic *nic, int timeout_ms);
void zd_mlx5sim_event_kick(struct zd_mlx5sim_nic *nic);
int zd_mlx5sim_event_get(struct zd_mlx5sim_nic *nic, void **user);

#endif /* ZD_MLX5SIM_H */
