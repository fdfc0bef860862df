/*
 * Private header of the software mlx5 device.
 *
 * Model: "the initiator executes".  Each NIC owns one sealed memfd region
 * (hw/soft/zd_soft_region.h): a header (event word, fired-CQ bitmap,
 * statistics), the MR and chunk tables (hw/soft/zd_soft_table.h), the QP,
 * CQ and SRQ contexts and a page arena from which the UAR pages are carved.
 * A peer maps the whole region once (a hw/soft peer), so every offset
 * below is relative to the region base.
 *
 * Queue memory (QP, CQ and SRQ buffers, doorbell records) is host memory,
 * as on a ConnectX: the create commands take it from the allocator hook of
 * zd_mlx5sim_nic_attr (mlx5's parent-domain allocator, called with the same
 * resource types and alignments as rdma-core's mlx5 provider calls it),
 * which the DAT device points at the registered pool.  A buffer that lies
 * in one of the chunks the NIC publishes is named in its context by chunk
 * slot and our address (a peer reaches it through its mapping of that
 * chunk, hw/soft/zd_soft_peer.h); without a hook, when the hook declines
 * (IBV_ALLOCATOR_USE_DEFAULT) or gives memory outside the published chunks,
 * the buffer comes from the page arena, named by chunk ZD_SOFT_NO_CHUNK and
 * a region offset.  Queue memory of destroyed objects stays with the NIC
 * for its later queues until it closes (a peer's engine that completes
 * into a queue just destroyed writes queue memory, never the application's).
 *
 * The engine thread of a NIC executes the WQEs of its own QPs: it gathers
 * from its own process's memory and writes straight into the peer's
 * (mapping of the peer's chunk, memcpy in one process, else
 * process_vm_writev/readv), consumes the peer's RQ or SRQ WQEs and writes
 * the peer's receive CQEs itself.  The target never runs.  Indices other
 * engines may race on (CQ producer, RQ consumer, SRQ head) are claimed with
 * compare-and-swap.  Everything a peer wrote is untrusted: masked, bounds
 * checked.  Tearing down a QP while its peer still sends is a user error
 * the model survives (it never dereferences outside the mapped region) but
 * does not make meaningful, as on hardware.
 *
 * Pages: a QP's page holds its doorbell records (be32 [MLX5_RCV_DBR],
 * [MLX5_SND_DBR]) at 0 and its UAR BlueFlame halves at 0x800 and 0x900; a
 * CQ's page is its UAR (arm doorbell at MLX5_CQ_DOORBELL) with its doorbell
 * record at 0x40.  The engine consumes an arm doorbell by swapping it to 0.
 * Atomics on a peer's chunk memory are CPU atomics through the mapping;
 * on other memory they run under the target NIC's atomic_lock.
 *
 * Files, one concept each: _nic.c (the region, open/close, PDs, the page
 * arena), _qmem.c (queue memory: the allocator hook, the arena fallback,
 * kept buffers), _objs.c (CQ, SRQ and QP contexts: create, modify, connect,
 * destroy), _mem.c (the MR and chunk tables and the peer NICs; the
 * copies and atomics are hw/soft's), _event.c (CQ events),
 * _engine.c (the engine thread, its passes and SQ loop), _exec.c (one
 * WQE's execution, the receive side), _ud.c (UD QPs: datagrams, address
 * handles), _bf.c (BlueFlame checks), _cqe.c
 * (CQE writing, arming), _backend.c (the device for the hw/mlx5 glue).
 * The engine side never calls the control path (_nic.c, _objs.c); the
 * control path calls it only to start the thread, to catch up before a
 * deregistration or a QP's destruction, and, when a QP resets, for its
 * last BlueFlame checks.
 */
#ifndef ZD_MLX5SIM_PRIV_H
#define ZD_MLX5SIM_PRIV_H

#include <endian.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <sys/uio.h>

#include "core/zd_compiler.h"
#include "evd/zd_ring_arch.h"   /* zd_cpu_relax */
#include "hw/mlx5/sim/zd_mlx5sim.h"
#include "hw/mlx5/zd_mlx5_barrier.h"   /* zd_dev_load: the words the host marks */
#include "hw/soft/zd_soft_atomic.h"
#include "hw/soft/zd_soft_copy.h"
#include "hw/soft/zd_soft_peer.h"
#include "hw/soft/zd_soft_region.h"
#include "hw/soft/zd_soft_table.h"

#define ZD_MS_MAGIC        0x7a646d6c78356e31ull   /* "zdmlx5n1" */
#define ZD_MS_ADDR_MAGIC   0x6d6c7835u
#define ZD_MS_PAGE         4096u
#define ZD_MS_BF_OFFSET    0x800u                  /* BlueFlame in a UAR page */
#define ZD_MS_BF_SIZE      256u                    /* per half; two halves */
#define ZD_MS_MAX_WQE      (63 * 16)               /* ds is 6 bits */
#define ZD_MS_MAX_SGE      32
#define ZD_MS_CHUNKS       256

/*
 * QPN = generation << 16 | index of the QP's slot.  A slot's next QP gets
 * the next generation (1..128), so a QPN does not come back at once, as a
 * ConnectX's firmware does not hand a destroyed QP's number out again at
 * once: a CQE or datagram of a destroyed QP still in flight names no live
 * QP (its consumer drops it) instead of the slot's next QP.  Never below
 * 0x10000: QPNs 0 and 1 are IB's special QPs.
 */
#define ZD_MS_QPN_GENS     128u
static inline uint32_t zd_ms_qpn_index(uint32_t qpn)
{
	return qpn & 0xffff;
}
static inline uint32_t zd_ms_qpn_next(uint32_t prev, uint32_t index)
{
	return ((prev >> 16) % ZD_MS_QPN_GENS + 1) << 16 | index;
}
/* A QPN this NIC could have handed out (a region of max_qp slots). */
static inline bool zd_ms_qpn_valid(uint32_t qpn, uint32_t max_qp)
{
	return (qpn >> 16) != 0 && zd_ms_qpn_index(qpn) < max_qp;
}

/* ---- shared layouts ---- */

struct zd_ms_cq {
	_Atomic uint32_t live;
	uint32_t cqn;
	uint32_t cqe_cnt;
	uint32_t buf_chunk, db_chunk;    /* zd_ms_qbuf */
	uint32_t pad;
	uint64_t buf_off, db_off, uar_off;
	alignas(ZD_CACHE_LINE) _Atomic uint32_t prod;     /* CQEs claimed (CAS) */
	_Atomic uint32_t error;                          /* overrun */
	_Atomic uint32_t armed;                          /* 0, 1: any, 2: solicited */
	_Atomic uint32_t arm_ci;                         /* consumer index at arming */
	_Atomic uint32_t events;
	_Atomic uint32_t users;                          /* QPs attached */
} ZD_CACHE_ALIGNED;

struct zd_ms_srq {
	_Atomic uint32_t live;
	uint32_t srqn, pdn;
	uint32_t wqe_cnt, stride;
	uint32_t buf_chunk, db_chunk;    /* zd_ms_qbuf */
	uint64_t buf_off, db_off;
	/* head WQE index (low 16) | WQEs consumed (high 32), CAS by consumers */
	alignas(ZD_CACHE_LINE) _Atomic uint64_t hw;
	_Atomic uint32_t users;
} ZD_CACHE_ALIGNED;

struct zd_ms_qp {
	_Atomic uint32_t state;     /* enum zd_mlx5sim_qp_state; UINT32_MAX: free */
	uint32_t qpn, pdn;
	uint32_t scqn, rcqn, srqn;
	uint32_t sq_wqe_cnt, rq_wqe_cnt, rq_stride;
	uint32_t type;              /* enum zd_mlx5sim_qp_type */
	uint32_t qkey;              /* UD: what a datagram must carry to get in */
	uint32_t buf_chunk;         /* of sq_off and rq_off (one buffer): zd_ms_qbuf */
	uint32_t db_chunk;          /* of db_off */
	uint32_t pad;
	uint64_t sq_off, rq_off, db_off, uar_off;
	_Atomic uint64_t peer_uid;
	_Atomic uint32_t peer_qpn;
	alignas(ZD_CACHE_LINE) _Atomic uint32_t rq_ci;    /* receives claimed (CAS) */
	/* QPN << 32 | receives decided (zd_ms_recv_decide): an RC QP's
	 * receive is claimed, then decided by whoever writes its CQE */
	_Atomic uint64_t rq_done;
	_Atomic uint32_t sq_ci;                          /* BBs executed (engine) */
	_Atomic uint32_t out_of_buffer;  /* UD: datagrams that found no receive */
} ZD_CACHE_ALIGNED;

#define ZD_MS_QP_FREE UINT32_MAX   /* destroyed (never used: zd_ms_qp_slot_used) */

struct zd_ms_shared {
	_Atomic uint64_t magic;
	uint64_t uid;
	uint64_t size;
	int32_t pid;
	uint32_t max_qp, max_cq, max_srq, max_mr;
	uint32_t arena_pages;
	uint64_t qp_off, cq_off, srq_off, mr_off, mr_busy_off, chunk_off, fired_off, arena_off;
	alignas(ZD_CACHE_LINE) _Atomic uint32_t event;   /* futex word */
	_Atomic uint32_t atomic_lock;    /* serialises process_vm atomics on us */
	alignas(ZD_CACHE_LINE) _Atomic uint64_t cnt_cqes, cnt_overrun, cnt_events;
};

/*
 * ---- memory shared with peers (zd_mlx5sim_mem.c) ----
 *
 * Everything that reads or writes a peer's memory, or the MR and chunk
 * tables that guard ours, goes through this group; zd_mlx5sim.h's
 * chunk_add/chunk_remove and mr_add/mr_remove fill the tables.
 */

/* A peer NIC (hw/soft/zd_soft_peer.h) maps its whole region: its shared
 * header, contexts and tables. */
static inline struct zd_ms_shared *zd_ms_peer_sh(const struct zd_soft_peer *p)
{
	return p->region.base;
}

/*
 * The MRs one WQE's execution copies to or from.  As a device's
 * deregistration returns only once no DMA to the region is in flight,
 * zd_ms_mr_check counts the engine into the MR's busy word (in the owner's
 * region, so peers' engines count too) before it reads the entry, and
 * zd_ms_pins_release counts it out after the copy; the owner's
 * zd_mlx5sim_mr_remove clears the entry, then waits for the word to drop.
 * Either the engine sees the entry cleared or the owner sees it busy
 * (seq_cst on both sides).
 */
#define ZD_MS_PINS_MAX (4 * ZD_MS_MAX_SGE + 2)   /* local SGEs, a receive's, the remote MR */
struct zd_ms_pins {
	_Atomic uint32_t *busy[ZD_MS_PINS_MAX];
	unsigned n;
};

/* Checks [addr, addr + len) against MR key of table sh for pdn and access;
 * returns the MR's chunk slot through *chunk (may be NULL).  On success the
 * MR stays pinned in @pins until zd_ms_pins_release; false if @pins is
 * full. */
bool zd_ms_mr_check(struct zd_ms_shared *sh, uint32_t key, uint32_t pdn, uint32_t need,
		    uint64_t addr, uint64_t len, uint32_t *chunk, struct zd_ms_pins *pins);
void zd_ms_pins_release(struct zd_ms_pins *pins);

/* nic->self, our own region seen as a peer; fini also drops every peer
 * (the engine has stopped, the QPs are gone). */
void zd_ms_peers_init(struct zd_mlx5sim_nic *nic);
void zd_ms_peers_fini(struct zd_mlx5sim_nic *nic);
/* The peer NIC a QP address names, mapped on first use (not under
 * nic->lock); NULL if it cannot be reached or its region is malformed. */
struct zd_soft_peer *zd_ms_peer_get(struct zd_mlx5sim_nic *nic,
				    const struct zd_mlx5sim_qp_addr *a);
void zd_ms_peer_put(struct zd_mlx5sim_nic *nic, struct zd_soft_peer *p);

/* Copies and atomics on a peer's memory: zd_soft_peer_copy (tail last)
 * and zd_soft_peer_atomic (under the target's sh->atomic_lock where no
 * mapping reaches). */

/* ---- process-private state ---- */

/* A WQE as the engine executed it, for the BlueFlame copy check. */
struct zd_ms_shadow {
	bool valid;
	uint16_t idx;                /* its first basic block */
	uint16_t nbb;
	uint32_t len;                /* bytes a BlueFlame copy carries (<= BF_SIZE) */
	uint8_t b[ZD_MS_BF_SIZE];
};

#define ZD_MS_SHADOWS 8

/* Engine-side state of one of our QPs. */
struct zd_ms_qpe {
	struct zd_soft_peer *peer;
	uint32_t peer_idx;
	uint32_t rq_stuck;                 /* a claim undecided, seen by rq_flush */
	uint64_t rq_stuck_since;           /* since when (0: none) */
	bool rnr;                          /* head WQE waits for a receive */
	uint64_t bf_last[2];               /* first 8 bytes last seen in each half */
	bool bf_pending[2];
	uint16_t bf_idx[2];
	uint8_t bf_prev[2][ZD_MS_BF_SIZE]; /* each half after its last check */
	bool bf_prev_unknown[2];           /* a write to it went unchecked */
	uint16_t bf_prev_idx[2];           /* the write bf_prev shows */
	uint32_t bf_writes[2];             /* writes observed since reset */
	uint16_t bf_hist[2][4];            /* recent indices observed per half */
	struct zd_ms_shadow shadow[ZD_MS_SHADOWS];
	uint32_t shadow_next;             /* shadows written since reset */
};

/* A CQ's consumer seen stopped at a slot not handed over (zd_ms_cq_mend). */
struct zd_ms_cq_watch {
	uint32_t ci;
	uint64_t since_ns;           /* 0: not watching */
};

/* Hook memory of a destroyed object, kept for the NIC's later queues. */
struct zd_ms_kept {
	struct zd_ms_kept *next;
	void *p;
	size_t size;
	uint64_t type;              /* MLX5DV_RES_TYPE_* */
};

struct zd_mlx5sim_nic {
	struct zd_ms_shared *sh;    /* region.base */
	struct zd_soft_region region;
	/* queue memory hook (zd_mlx5sim_nic_attr) and what it gave back */
	void *(*qmem_alloc)(struct ibv_pd *, void *, size_t, size_t, uint64_t);
	void (*qmem_free)(struct ibv_pd *, void *, void *, uint64_t);
	void *qmem_ctx;
	struct zd_ms_kept *kept;
	pthread_mutex_t lock;       /* control path; the engine holds it per pass */
	/* The chunk table's writers.  Not nic->lock: a create command that
	 * holds it may make the pool grow, whose new chunk reaches us through
	 * a chunk listener (chunk_add) on that same thread. */
	pthread_mutex_t chunk_lock;
	uint8_t *pages;             /* arena page map: 0 free, 1 used */
	uint32_t next_tag;
	uint32_t pd_used[64];       /* PDs in use: refcounts + 1 (0: free) */
	struct zd_ms_qpe *qpe;      /* max_qp (qpe_n), mmap'd */
	uint32_t qpe_n;
	void **cq_user;             /* max_cq: cq_create's user pointers */
	_Atomic uint32_t kicked;
	struct zd_soft_peer *peers;
	struct zd_soft_peer self;
	/* Engine passes stop at these (1 + highest slot ever used), and an
	 * idle engine with no QPs sleeps longer: many idle IAs stay cheap. */
	uint32_t qp_hwm, cq_hwm, qps_live;
	pthread_t engine;
	_Atomic bool stop;
	bool debug;                 /* ZDAPL_MLX5SIM_DEBUG=1: errors on stderr */
	struct zd_ms_cq_watch *cq_watch;  /* max_cq: zd_ms_cq_mend's */
	_Atomic uint64_t cnt_wqes, cnt_rnr, cnt_err, cnt_bf_checked, cnt_bf_mismatch,
		cnt_db_order, cnt_ud_sent, cnt_ud_lost, cnt_cq_holes;
};

/* ---- layout accessors (work on any mapped region) and helpers ---- */

/* The engine's clock for its give-up bounds (zd_ms_cq_mend, rq_flush). */
static inline uint64_t zd_ms_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}


static inline void *zd_ms_at(struct zd_ms_shared *sh, uint64_t off)
{
	return (char *)sh + off;
}
static inline struct zd_ms_qp *zd_ms_qp_ctx(struct zd_ms_shared *sh, uint32_t i)
{
	return (struct zd_ms_qp *)zd_ms_at(sh, sh->qp_off) + i;
}
/* A slot never used is all zero (QPN 0, state RESET): no pass at NIC open
 * touches every context of a large table; a destroyed QP's is FREE. */
static inline bool zd_ms_qp_slot_used(struct zd_ms_qp *qp)
{
	return qp->qpn != 0 && atomic_load(&qp->state) != ZD_MS_QP_FREE;
}
static inline struct zd_ms_cq *zd_ms_cq_ctx(struct zd_ms_shared *sh, uint32_t i)
{
	return (struct zd_ms_cq *)zd_ms_at(sh, sh->cq_off) + i;
}
static inline struct zd_ms_srq *zd_ms_srq_ctx(struct zd_ms_shared *sh, uint32_t i)
{
	return (struct zd_ms_srq *)zd_ms_at(sh, sh->srq_off) + i;
}
static inline _Atomic uint32_t *zd_ms_mr_busy(struct zd_ms_shared *sh, uint32_t i)
{
	return (_Atomic uint32_t *)zd_ms_at(sh, sh->mr_busy_off) + i;
}

static inline struct zd_soft_mr_entry *zd_ms_mr_ctx(struct zd_ms_shared *sh, uint32_t i)
{
	return (struct zd_soft_mr_entry *)zd_ms_at(sh, sh->mr_off) + i;
}
static inline struct zd_soft_chunk_entry *zd_ms_chunk_ctx(struct zd_ms_shared *sh, uint32_t i)
{
	return (struct zd_soft_chunk_entry *)zd_ms_at(sh, sh->chunk_off) + i;
}
static inline _Atomic uint64_t *zd_ms_fired(struct zd_ms_shared *sh)
{
	return zd_ms_at(sh, sh->fired_off);
}

/* A valid [off, off + len) inside a region of size sz? */
static inline bool zd_ms_in(const struct zd_ms_shared *sh, size_t sz, uint64_t off, uint64_t len)
{
	return off >= sh->arena_off && off <= sz && len <= sz - off;
}

/*
 * [at, at + len) of a queue buffer of the NIC whose region p maps: a region
 * offset when chunk is ZD_SOFT_NO_CHUNK, else the owner's address in its
 * chunk slot chunk.  NULL when that lies outside (a peer's words are
 * untrusted); our own (p->self) are taken as they are.
 */
static inline void *zd_ms_qbuf(struct zd_soft_peer *p, uint32_t chunk, uint64_t at,
			       uint64_t len)
{
	struct zd_ms_shared *sh = p->region.base;

	if (chunk == ZD_SOFT_NO_CHUNK)
		return zd_ms_in(sh, p->region.size, at, len) ? zd_ms_at(sh, at) : NULL;
	return zd_soft_peer_ptr_fast(p, chunk, at, len);
}

/* The same for a queue of our own NIC (its contexts are ours: no check). */
static inline void *zd_ms_own_qbuf(struct zd_mlx5sim_nic *nic, uint32_t chunk, uint64_t at)
{
	return chunk == ZD_SOFT_NO_CHUNK ? zd_ms_at(nic->sh, at) : (void *)(uintptr_t)at;
}

static inline uint32_t zd_ms_rd_be32(const void *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return be32toh(v);
}

static inline uint32_t zd_ms_pow2_up(uint32_t v)
{
	uint32_t p = 1;

	while (p < v && p < (1u << 30))
		p <<= 1;
	return p;
}

/* ---- calls between the other files ---- */

/* NIC (zd_mlx5sim_nic.c), all under nic->lock.  PD pdn allocated?  Arena
 * memory: whole zeroed pages, as a region offset or -ENOMEM. */
bool zd_ms_pd_ok(struct zd_mlx5sim_nic *nic, uint32_t pdn);
int64_t zd_ms_arena_alloc(struct zd_mlx5sim_nic *nic, uint64_t bytes);
void zd_ms_arena_free(struct zd_mlx5sim_nic *nic, uint64_t off, uint64_t bytes);

/* Queue memory (zd_mlx5sim_qmem.c), under nic->lock: @bytes zeroed, aligned
 * to @align, of MLX5DV_RES_TYPE_* @type, from the hook when it gives memory
 * in a published chunk (*chunk its slot, *at its address), else from the
 * arena (*chunk ZD_SOFT_NO_CHUNK, *at a region offset); -ENOMEM when
 * neither can.  free gives it back: hook memory stays with the NIC for its
 * later queues; qmem_fini hands it all back to the hook (NIC closing). */
int zd_ms_qmem_alloc(struct zd_mlx5sim_nic *nic, uint64_t bytes, size_t align, uint64_t type,
		     uint32_t *chunk, uint64_t *at);
/* A doorbell record (8 bytes) from the hook only: false when it has none
 * (the caller puts the record in an arena page of the object's). */
bool zd_ms_qmem_dbr(struct zd_mlx5sim_nic *nic, uint32_t *chunk, uint64_t *at);
void zd_ms_qmem_free(struct zd_mlx5sim_nic *nic, uint32_t chunk, uint64_t at, uint64_t bytes,
		     uint64_t type);
void zd_ms_qmem_fini(struct zd_mlx5sim_nic *nic);

/* Engine (zd_mlx5sim_engine.c).  catch_up (control path, nic->lock
 * held) executes now what the doorbells rung so far announce, as a NIC
 * has long done when a command that follows them completes: memory
 * deregistered, or a QP destroyed, right after a post must not fail or
 * lose that post because the engine thread was asleep. */
void *zd_ms_engine_main(void *arg);
void zd_ms_engine_catch_up(struct zd_mlx5sim_nic *nic);

/* WQE execution (zd_mlx5sim_exec.c). */
enum zd_ms_status {
	ZD_MS_OK,
	ZD_MS_RNR,                   /* no receive posted: retry later */
	ZD_MS_ERR,
};

/* A receive WQE claimed for a message (zd_ms_recv_claim). */
struct zd_ms_recv {
	const uint8_t *wqe;          /* first data segment */
	uint32_t nseg;
	uint16_t counter;            /* wqe_counter of the responder CQE */
	uint32_t claim;              /* the QP's rq_ci it took (RQ, not SRQ) */
	uint32_t srqn;
};

struct zd_ms_result {
	int status;                  /* enum zd_ms_status */
	uint8_t syndrome;            /* requester's */
	bool peer_err;               /* the responder's QP goes to ERR too */
	uint32_t byte_cnt;
};

/* A WQE of one of our QPs being executed. */
struct zd_ms_wqe {
	struct zd_mlx5sim_nic *nic;
	struct zd_ms_qp *qp;
	struct zd_ms_qpe *e;
	const uint8_t *w;            /* linear copy of the WQE */
	uint32_t size;               /* ds * 16; 0: malformed (bad ds or past the record) */
	uint8_t opcode, fm_ce_se;
	uint16_t idx;
	__be32 imm;
	struct zd_ms_pins pins;      /* released when the execution ends */
};

/* Executes x (nic, qp, e, w and size set) at SQ index expect_idx, filling
 * in the rest of x from its control segment. */
struct zd_ms_result zd_ms_wqe_exec(struct zd_ms_wqe *x, uint16_t expect_idx);
/* INIT, RTR, RTS or SQE to ERR (by CAS: the engines of peers race on a QP). */
void zd_ms_qp_set_err(struct zd_ms_qp *qp);
/* The receive side, for the RC and UD executions.  recv_claim claims the
 * next receive WQE of the peer QP pq: ZD_MS_OK, ZD_MS_RNR (none posted),
 * or ZD_MS_ERR if its queue is malformed.  recv_scatter checks the claimed
 * WQE's scatter list for @need bytes against the peer's MR table: 0, or
 * the responder's syndrome.  local_sges parses the data and inline
 * segments of x from off to its end into local iovecs, checking each data
 * segment against our MR table (need: access bits). */
int zd_ms_recv_claim(struct zd_soft_peer *p, struct zd_ms_qp *pq, struct zd_ms_recv *rc);
/*
 * A receive of an RC QP's own queue is claimed (rq_ci) by the one engine
 * that executes its peer's sends, or by its own engine's flush; whoever
 * writes its CQE decides it first (rq_done moves from claim to claim + 1,
 * QPN in the high half so a writer of a QP since destroyed decides
 * nothing).  A claim nobody decides for ZD_MS_RECV_STUCK_NS while its QP is
 * in error (the peer process that claimed it was killed or stopped
 * mid-message) is decided by the flush, FLUSHED; a writer that comes back
 * after that finds its claim decided and writes no CQE.  So each receive
 * completes exactly once, and a dead peer cannot leave one that never
 * completes.  SRQ and UD receives (many writers) are not tracked: true.
 */
#define ZD_MS_RECV_STUCK_NS (2000ull * 1000 * 1000)
bool zd_ms_recv_decide(struct zd_ms_qp *pq, uint32_t qpn, const struct zd_ms_recv *rc);
uint8_t zd_ms_recv_scatter(struct zd_soft_peer *p, struct zd_ms_qp *pq, struct zd_ms_pins *pins,
			   const struct zd_ms_recv *rc, uint64_t need, struct zd_soft_seg *r,
			   int *nr);
bool zd_ms_local_sges(struct zd_ms_wqe *x, uint32_t off, bool allow_inline, uint32_t need,
		      struct iovec *iov, int *n, uint64_t *total);

/* Unreliable datagrams (zd_mlx5sim_ud.c): executes x, a WQE of a UD QP. */
struct zd_ms_result zd_ms_ud_exec(struct zd_ms_wqe *x);

/* BlueFlame checks (zd_mlx5sim_bf.c), under nic->lock.  Per pass: observe
 * the halves before the SQ runs, shadow each WQE executed, resolve the
 * copies after.  bf_final: the last checks of QP i (its writer is done). */
void zd_ms_bf_observe(struct zd_mlx5sim_nic *nic, struct zd_ms_qp *qp, struct zd_ms_qpe *e);
void zd_ms_bf_shadow(struct zd_ms_qpe *e, uint16_t idx, uint32_t nbb, const uint8_t *w);
void zd_ms_bf_resolve(struct zd_mlx5sim_nic *nic, struct zd_ms_qp *qp, struct zd_ms_qpe *e,
		      bool final);
void zd_ms_qp_bf_final(struct zd_mlx5sim_nic *nic, uint32_t i);

/* CQEs (zd_mlx5sim_cqe.c).  cq_write writes one CQE (owner bit filled in
 * there) to CQ cqn of the NIC region p maps (&nic->self: ours), claiming its slot by
 * CAS, and raises the event if the CQ is armed; false if the CQ is gone or
 * overran (then it is in error).  cq_arm consumes the CQ's arm doorbell:
 * true if there was one. */
bool zd_ms_cq_write(struct zd_soft_peer *p, uint32_t cqn, struct mlx5_cqe64 *cqe,
		    bool solicited);
void zd_ms_cqe_req(struct mlx5_cqe64 *c, uint32_t qpn, uint8_t opcode, uint16_t idx,
		   uint32_t byte_cnt);
void zd_ms_cqe_err(struct mlx5_cqe64 *c, bool resp, uint8_t syndrome, uint8_t opcode,
		   uint32_t qpn, uint16_t idx, uint32_t srqn);
bool zd_ms_cq_arm(struct zd_ms_shared *sh, struct zd_ms_cq *cq);
/* Our CQ i, from the engine's pass: a slot claimed but not written for
 * ZD_MS_CQE_HOLE_NS is given up; true if one was. */
#define ZD_MS_CQE_HOLE_NS (2000ull * 1000 * 1000)
bool zd_ms_cq_mend(struct zd_mlx5sim_nic *nic, uint32_t i);

/* Events (zd_mlx5sim_event.c): CQ cq of region sh fired; wakes the waiters. */
void zd_ms_raise_event(struct zd_ms_shared *sh, struct zd_ms_cq *cq);

#endif /* ZD_MLX5SIM_PRIV_H */
