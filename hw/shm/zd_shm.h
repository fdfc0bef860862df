/*
 * Private header of the shared-memory soft device (hw/shm).
 *
 * Model: "the initiator executes".  Every QP owns a shared region (an
 * unnamed, sealed memfd) holding its receive queue, an eager ring for sends
 * that find no receive posted, and a ring of receive completions its peer
 * produces (the fallback, below).  Every CQ (DTO EVD) owns a shared
 * completion ring into which the peers of all its QPs publish receive
 * completions (zd_shm_cqring.h).  Every IA owns one more region: its
 * memory-region table (MR table, indexed by key index), its chunk table
 * (where the pool's memfd chunks lie) and a doorbell futex.  All of these
 * are carved from one arena per IA (hw/soft/zd_soft_arena.h): its header
 * is the IA region, the others lie at offsets the connection blob names.
 * A peer obtains the arena's memfd once, at its first connection to the
 * IA, over a UNIX socket (hw/soft/zd_soft_fdx.h: no ptrace rights, our
 * uid policy), maps it and reaches every later region by offset: a
 * connection costs no descriptor and no mapping.  Nothing ever appears in
 * /dev/shm and nothing is left behind after SIGKILL.
 *
 *  - RDMA write/read: the initiator checks the rkey in the target's MR table
 *    (key, bounds, access, PZ) and copies itself: memcpy through its mapping
 *    of the target's pool chunk, memcpy when the peer is this very process,
 *    else one process_vm_writev/readv (hw/soft/zd_soft_copy.h).  The
 *    target never runs.  A write's last 8 bytes land after all the others,
 *    as on the wire (consumers poll them).
 *  - Send: the initiator takes the target's next posted receive (or an SRQ
 *    buffer), copies into it (or, up to ZD_SHM_CQE_INLINE bytes, into the
 *    completion entry itself), and publishes a completion entry (CQE) in
 *    the target's recv CQ ring, which the consumer's dequeue reads straight
 *    into its DAT event; while earlier entries of the QP wait in the QP's
 *    own completion ring, or the CQ ring has no slot at once, the entry
 *    goes there instead (the target's cq_poll walks those QPs when told);
 *    with no receive posted it copies into the eager ring and appends to
 *    the QP's ring (the target's cq_poll matches it to the receive later), and
 *    with neither room it keeps the send queued (RNR), flags rnr_wait in the
 *    target's region and retries on its own progress; the target rings the
 *    initiator's doorbell when it posts a receive or frees ring space.  A
 *    send completes when its data is in the target's memory (or eager ring).
 *  - RDMA write with immediate data (IB extension): the write as above, then
 *    the immediate travels as a send without payload: it consumes the next
 *    receive (or an eager slot until one is posted; RNR without room) and
 *    its completion entry carries the immediate and the write's length.
 *  - Atomics (IB extension): the initiator's CPU atomic on the target's
 *    word through its mapping of the target's pool chunk (or in this very
 *    process); memory no chunk covers (a consumer's malloc'd buffer) is
 *    read and written by cross-memory attach under the target IA's
 *    atomic_lock, which every initiator takes for such words.
 *  - Completions of the initiator's own DTOs go to a local MPSC ring of DAT
 *    events per CQ; cq_poll moves them, and the receive completions the peers
 *    produced, into the EVD ring; a dequeue on an empty EVD ring takes the
 *    next CQE (or local completion) straight into the caller's event.
 *    Request completions go straight into the EVD ring while the local ring
 *    is drained (zd_shm_cq.c).
 *
 * Everything a peer wrote is untrusted: indices are masked or bounds
 * checked, lengths checked, states compared with what this side expects.
 *
 * Unreliable datagrams (the QP of a UD EP, many senders): zd_shm_ud.h.
 */
#ifndef ZD_SHM_H
#define ZD_SHM_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "core/zd_compiler.h"
#include "core/zd_device.h"
#include "evd/zd_evd_cq.h"
#include "evd/zd_ring.h"
#include "hw/soft/zd_soft_copy.h"
#include "hw/soft/zd_soft_cq.h"
#include "hw/soft/zd_soft_peer.h"
#include "hw/soft/zd_soft_arena.h"
#include "hw/soft/zd_soft_region.h"
#include "hw/soft/zd_soft_table.h"
#include "hw/shm/zd_shm_cqring.h"
#include "hw/soft/zd_soft_xlat.h"

#define ZD_SHM_MAX_SEGS      16
#define ZD_SHM_MAGIC_IA      0x7a64736869613032ull  /* "zdshia02": with atomic_lock */
#define ZD_SHM_MAGIC_QP      0x7a64736871703032ull  /* "zdshqp02": with copying */
#define ZD_SHM_MAGIC_SRQ     0x7a64736873723031ull  /* "zdshsr01" */
#define ZD_SHM_BLOB_VERSION  3  /* 2: the recv CQ's shared ring; 3: offsets in the IA's arena */

/* MR table: one entry per key index (zd_keys.c gives 20 index bits). */
#define ZD_SHM_MR_INDEX_BITS 20
#define ZD_SHM_MR_ENTRIES    (1u << ZD_SHM_MR_INDEX_BITS)
#define ZD_SHM_CHUNK_SLOTS   512

/* Device limits (zd_shm_dev.c), also held by the data path. */
#define ZD_SHM_MAX_MESSAGE   (1u << 30)
#define ZD_SHM_MAX_RDMA      (1u << 30)

/* The span of an IA's arena (reserved address space and a sparse file,
 * not memory): the IA region and every QP, SRQ and CQ ring of the IA.
 * An RC QP of the default depths takes ~270 KiB of it (most of it the
 * eager ring, untouched until a message finds no receive posted).  Every
 * peer process maps it whole: 16 GiB keeps a process with hundreds of
 * peers (or under ThreadSanitizer, whose shadow leaves far less address
 * space) well inside its 128 TiB. */
#define ZD_SHM_ARENA_SPAN    (16ull << 30)

/* Eager ring of a QP: messages that found no receive posted. */
#define ZD_SHM_EAGER_SLOTS   64
#define ZD_SHM_EAGER_SIZE    4096

/* ---- shared layouts (position independent, fixed-size fields) ---- */

/* What a sleeping consumer of the IA waits for: any completion, or only a
 * notification (a solicited receive, an error: solicited wait). */
#define ZD_SHM_ARMED_ANY       1u
#define ZD_SHM_ARMED_SOLICITED 2u
#define ZD_SHM_RING_ALWAYS     (ZD_SHM_ARMED_ANY | ZD_SHM_ARMED_SOLICITED)
#define ZD_SHM_WAKER_TICK_NS   (10 * 1000 * 1000)

struct zd_shm_ia_shared {
	uint64_t magic;
	uint64_t uid;                                 /* names this IA among peers */
	alignas(ZD_CACHE_LINE) _Atomic uint32_t doorbell; /* shared futex word */
	_Atomic uint32_t armed;                       /* ZD_SHM_ARMED_*: a CQ consumer may sleep */
	_Atomic uint32_t closing;
	/* This IA's process takes part in the owners' membarrier
	 * (zd_shm_copy.h): its copies need no slower barrier. */
	_Atomic uint32_t copies_ordered;
	/* Taken by every initiator (any process) of an atomic on this IA's
	 * memory that no chunk covers (zd_soft_peer_atomic's lock word). */
	alignas(ZD_CACHE_LINE) _Atomic uint32_t atomic_lock;
	/* hw/soft/zd_soft_table.h: access is DAT_MEM_PRIV_FLAGS, pz zd_shm_pz_id */
	alignas(ZD_CACHE_LINE) struct zd_soft_chunk_entry chunks[ZD_SHM_CHUNK_SLOTS];
	alignas(4096) struct zd_soft_mr_entry mr[ZD_SHM_MR_ENTRIES];
};

/* Receive slot state word: state | owner tag << 4 | position << 24. */
enum zd_shm_slot_state {
	ZD_SHM_SLOT_FREE = 0,
	ZD_SHM_SLOT_POSTED = 1,
	ZD_SHM_SLOT_TAKEN = 2,   /* a sender is copying into it */
	ZD_SHM_SLOT_DONE = 3,    /* filled; its completion entry follows */
	ZD_SHM_SLOT_FLUSHED = 4,
};
#define ZD_SHM_TAG_BITS 20
#define ZD_SHM_TAG_MASK ((1u << ZD_SHM_TAG_BITS) - 1)
#define ZD_SHM_TAG_LEAF 1024u
#define ZD_SHM_GONE_TAGS 16  /* per CQ: recently detached receive QPs' tags */
#define ZD_SHM_TAG_LEAVES ((ZD_SHM_TAG_MASK + 1) / ZD_SHM_TAG_LEAF)

static inline uint64_t zd_shm_slot_word(uint64_t pos, uint32_t tag, unsigned st)
{
	return pos << 24 | (uint64_t)(tag & ZD_SHM_TAG_MASK) << 4 | st;
}

/* A posted receive: buffers already checked by their owner (lkey, bounds,
 * LOCAL_WRITE, PZ) and resolved to addresses.  The cookie stays private. */
struct zd_shm_rq_slot {
	_Atomic uint64_t state;
	uint32_t nseg;
	uint32_t pad;
	uint64_t total;
	struct zd_soft_seg seg[ZD_SHM_MAX_SEGS];
} __attribute__((aligned(ZD_CACHE_LINE)));

/* A receive completion the peer produced. */
enum zd_shm_comp_type {
	ZD_SHM_COMP_DIRECT = 1,   /* into RQ slot (seq) or SRQ slot (srq_pos) */
	ZD_SHM_COMP_EAGER = 2,    /* in the next eager slot */
};
#define ZD_SHM_COMP_SOLICITED 0x100
/* An RDMA write's immediate data: the receive completes with @imm and
 * @len (the write's), and no byte lands in its buffers (nor any was put in
 * the eager slot the entry may hold). */
#define ZD_SHM_COMP_IMMED     0x200

struct zd_shm_comp {
	uint32_t type_flags;
	uint32_t len;
	uint32_t status;          /* DAT_DTO_COMPLETION_STATUS */
	uint32_t imm;             /* with ZD_SHM_COMP_IMMED */
	uint64_t srq_pos;
	uint64_t seq;             /* the QP's completion sequence (zd_shm_cqring.h) */
};

struct zd_shm_qp_shared {
	/* read-only after creation */
	uint64_t magic;
	uint32_t rq_depth, comp_depth, eager_slots, eager_size;
	uint64_t rq_off, comp_off, eager_off, size;
	/* owner writes: rq_posted at every receive posted; the next line
	 * rarely (a flush, a reap of the QP's own rings), so that a sender
	 * finds it in its cache */
	alignas(ZD_CACHE_LINE) _Atomic uint64_t rq_posted;
	alignas(ZD_CACHE_LINE) _Atomic uint64_t comp_head;
	_Atomic uint64_t eager_head;
	_Atomic uint32_t error;
	/* peer writes */
	alignas(ZD_CACHE_LINE) _Atomic uint64_t comp_tail;
	_Atomic uint64_t eager_tail;
	_Atomic uint32_t rnr_wait;   /* peer has sends queued for room here */
	/* The one peer QP attached (zd_shm_qp_claim), 0 while none: a blob
	 * replayed from another connection names a QP already held. */
	_Atomic uint64_t holder;
	/* The peer writes, around each copy to or from our memory by key:
	 * odd while one runs (zd_shm_copy.h); read by our deregistrations. */
	alignas(ZD_CACHE_LINE) _Atomic uint64_t copying;
};

struct zd_shm_srq_shared {
	uint64_t magic;
	uint32_t depth;
	uint32_t pad;
	uint64_t slots_off, size;
	alignas(ZD_CACHE_LINE) _Atomic uint64_t posted;  /* owner */
	alignas(ZD_CACHE_LINE) _Atomic uint64_t head;    /* CAS by every consumer */
	alignas(ZD_CACHE_LINE) _Atomic uint32_t rnr_wait; /* a sender waits for buffers */
};

/* What qp_local_blob sends the peer: its IA's arena (the fd's number in
 * @pid, for zd_soft_fdx_get) and where its regions lie in it. */
struct zd_shm_blob {
	uint32_t version;
	int32_t pid;
	uint64_t ia_uid;
	int32_t ia_fd;            /* the arena's memfd */
	uint32_t qp_tag;
	uint32_t pz_id;
	uint32_t pad;
	uint64_t ia_size;         /* the arena's span */
	uint64_t qp_off, qp_size;
	uint64_t srq_off, srq_size;   /* size 0: no SRQ */
	uint64_t cq_off, cq_size;     /* the recv CQ's shared ring; size 0: none */
};

/* ---- process-private state ---- */

struct zd_shm_cq;
struct zd_shm_srq;
struct zd_shm_ud_qp;

struct zd_shm_ia {
	struct zd_ia *ia;
	struct zd_soft_arena arena;       /* header: sh; then QP, SRQ, CQ-ring regions */
	struct zd_shm_ia_shared *sh;
	pthread_mutex_t lock;             /* control path */
	struct zd_soft_peer *peers;       /* peer IAs (zd_soft_peer.h) */
	struct zd_soft_cq *cqs;           /* for the waker */
	struct zd_shm_qp *qps;            /* RC QPs, under @lock: whose peers copy (zd_shm_copy.h) */
	uint32_t next_tag;
	/* RC QPs by tag, for the CQ consumers' checks of a CQE's tag: leaves
	 * of ZD_SHM_TAG_LEAF entries made as tags get used (zd_shm_tag_qp).
	 * Set and cleared under @lock, read by a CQ's poller inside its
	 * @polling section (zd_shm_cq.c) or under @lock. */
	struct zd_shm_qp *_Atomic *_Atomic tag_leaf[ZD_SHM_TAG_LEAVES];
	pthread_t waker;
	uint32_t waker_seen;              /* doorbell value before the first arm */
	bool waker_running;
	bool listening;
	/* A CQ consumer armed behind a slot claimed and not published: the
	 * waker wakes the IA's consumers every ZD_SHM_WAKER_TICK_NS. */
	_Atomic uint32_t stuck;
	/* Test-only fault (ZDAPL_SHM_FAULT=claim_stop, read at IA open): a
	 * producer stops itself (SIGSTOP) between claiming a CQ ring slot and
	 * publishing it, for a test to kill it there. */
	bool fault_claim_stop;
	/* Test-only (ZDAPL_SHM_FAULT=unordered): the IA tells its peers its
	 * process did not register for their membarrier (zd_shm_copy.h). */
	bool fault_unordered;
	/* Entries of each CQ ring (ZDAPL_SHM_CQ_RING, read at IA open; 0:
	 * the EVD's length within [64, 4096]). */
	uint32_t cq_ring_entries;
	_Atomic bool arena_full_said;     /* zd_shm_region_alloc's line */
};

struct zd_shm_cq {
	struct zd_soft_cq soft;           /* evd, local ring, sia->cqs link */
	struct zd_shm_ia *sia;
	/* Receive QPs: copy-on-write, read by the poller only, which flags
	 * itself in @polling around the walk (zd_shm_cq_poll); a writer
	 * waits that out before freeing the old list (no urcu-bp read lock,
	 * two library calls and two __tls_get_addr, on every poll). */
	struct zd_soft_qplist *_Atomic recv_qps;
	_Atomic uint32_t polling;
	struct zd_soft_qplist *_Atomic send_qps;
	_Atomic uint32_t backlog;         /* QPs of send_qps with queued sends */
	_Atomic uint32_t ud_qps;          /* UD QPs in recv_qps: walked on every poll */

	/* The shared completion ring (zd_shm_cqring.h); its consumer state
	 * is private, the poller's alone. */
	struct zd_soft_region ring_region;
	struct zd_shm_cq_shared *ring_sh;
	struct zd_shm_cqe *ring;
	uint32_t ring_depth;
	uint64_t head;                    /* next position to take */
	bool walk_again;                  /* a QP ring kept entries: walk next poll */
	uint64_t stuck_word;              /* the word at head the consumer waits on */
	uint64_t stuck_since, stuck_checked;  /* ns, CLOCK_MONOTONIC */
	uint64_t dropped;                 /* CQEs refused (zdapl: warnings, rate limited) */
	uint64_t stale;                   /* CQEs of our QPs that left, dropped quietly */
	/* Tags of the QPs that left this CQ lately (written under the IA
	 * lock, read by the consumer: hints, relaxed). */
	_Atomic uint32_t gone_tag[ZD_SHM_GONE_TAGS];
	uint32_t gone_next;
	uint64_t warned_at;               /* ns of the last such warning */
};

struct zd_shm_srq {
	struct zd_srq *srq;
	struct zd_shm_ia *sia;            /* whose arena holds region */
	struct zd_soft_region region;
	struct zd_shm_srq_shared *sh;
	struct zd_shm_rq_slot *slots;
	DAT_DTO_COOKIE *cookie;
	uint32_t depth;
	uint32_t pz_id;
	_Atomic int lw_armed;
	struct zd_soft_qplist *_Atomic qps;  /* EPs on this SRQ (RCU), for RNR rings */
};

/* What the IB extension posts carry beyond a DAT post's arguments. */
struct zd_shm_ext_args {
	uint32_t imm;                     /* RDMA write with immediate data */
	uint64_t operand, swap;           /* atomics (zd_device_post_atomic_fn) */
};

/* A queued (RNR) or not yet executed request. */
struct zd_shm_wr {
	DAT_DTOS op;
	DAT_COUNT n;
	DAT_DTO_COOKIE cookie;
	DAT_COMPLETION_FLAGS flags;
	DAT_RMR_TRIPLET remote;
	struct zd_shm_ext_args ext;
	DAT_LMR_TRIPLET iov[ZD_SHM_MAX_SEGS];
};

struct zd_shm_qp {
	struct zd_ep *ep;
	struct zd_shm_ia *sia;
	struct zd_shm_qp *ia_next, **ia_prev;  /* sia->qps, under sia->lock */
	uint32_t tag;
	uint32_t pz_id;
	_Atomic uint32_t error;           /* flushed: every DTO completes flushed */
	_Atomic uint32_t flushed_rq;      /* the receive side was flushed once */
	_Atomic uint32_t flushed;         /* qp_flush ran since create/reset */
	/* An SRQ EP's "last WQE reached" event (DAT_ASYNC_ERROR_EP_BROKEN)
	 * is due once the messages waiting for buffers were taken
	 * (zd_shm_qp_recv_settle). */
	_Atomic uint32_t last_wqe_due;

	/* ---- as target: own region, consumed by the recv CQ's poller ---- */
	struct zd_soft_region region;
	struct zd_shm_qp_shared *own;
	struct zd_shm_rq_slot *rq;
	struct zd_shm_comp *comp;
	uint8_t *eager;
	DAT_DTO_COOKIE *rq_cookie;
	/* Each posted receive's first segment (private: where an inline
	 * message goes, zd_shm_cqring.h); RC QPs only. */
	struct zd_shm_rq_first {
		uint64_t addr;
		uint64_t len;
	} *rq_first;
	uint32_t rq_depth, comp_depth;
	uint64_t rq_reaped;               /* poller: receives completed so far */
	uint64_t msg_seen;                /* poller: messages received (non-SRQ: = slot) */
	uint64_t comp_seen;               /* poller: completions taken (their sequence) */
	struct zd_shm_cq *recv_cq, *req_cq;
	struct zd_shm_srq *srq;
	struct zd_shm_ud_qp *ud;          /* a UD QP's own state (zd_shm_ud.h); NULL: RC */

	/* ---- as initiator: the peer's regions ---- */
	struct zd_soft_peer *peer;        /* region: its IA's (zd_shm_peer_ia) */
	struct zd_soft_region rregion;
	struct zd_shm_qp_shared *remote;
	struct zd_shm_rq_slot *rrq;
	struct zd_shm_comp *rcomp;
	uint8_t *reager;
	uint32_t r_rq_depth, r_comp_depth, r_eager_slots, r_eager_size;
	uint32_t r_tag, r_pz_id;
	struct zd_soft_region rsrq_region;
	struct zd_shm_srq_shared *rsrq;
	struct zd_shm_rq_slot *rsrq_slots;
	uint32_t r_srq_depth;
	struct zd_soft_xlat xlat;         /* post_rdma's last key pair, checked */
	uint64_t msg_sent;                /* messages sent (non-SRQ: peer's RQ slot) */
	uint64_t comp_tail;               /* our copy of remote->comp_tail */
	uint64_t eager_tail;
	uint64_t comp_seq;                /* completions produced (CQ ring or QP ring) */
	/* the peer's recv CQ ring (zd_shm_cqring.h), NULL: none */
	struct zd_soft_region rcq_region;
	struct zd_shm_cq_shared *rcq;
	struct zd_shm_cqe *rcqe;
	uint32_t r_cq_depth;

	/* queued requests (RNR), poster thread and req CQ poller */
	struct zd_shm_wr *sq;
	uint32_t sq_depth;
	_Atomic uint64_t sq_head, sq_tail;
	_Atomic uint32_t sq_busy;         /* progress_sq try-lock */
	_Atomic uint32_t sq_listed;       /* counted in req_cq->backlog */
};

/* ---- zd_shm_qp.c: QPs by tag ---- */
/* The RC QP listed under @tag, or NULL (its recv CQ's poller inside its
 * @polling section, or under the IA lock). */
static ZD_ALWAYS_INLINE struct zd_shm_qp *zd_shm_tag_qp(struct zd_shm_ia *sia, uint32_t tag,
							memory_order mo)
{
	/* acquire: pairs with the release store of the leaf in
	 * zd_shm_tag_set: its entries read zero or what was set. */
	struct zd_shm_qp *_Atomic *leaf = atomic_load_explicit(
		&sia->tag_leaf[(tag & ZD_SHM_TAG_MASK) / ZD_SHM_TAG_LEAF], memory_order_acquire);

	return leaf ? atomic_load_explicit(&leaf[tag % ZD_SHM_TAG_LEAF], mo) : NULL;
}
/* Lists @qp (or NULL) under @tag, under the IA lock, with @mo; 0 or
 * -ENOMEM (no leaf for it). */
int zd_shm_tag_set(struct zd_shm_ia *sia, uint32_t tag, struct zd_shm_qp *qp, memory_order mo);


void zd_shm_tags_free(struct zd_shm_ia *sia);

/* ---- zd_shm_mr.c ---- */
uint32_t zd_shm_pz_id(const void *pz);
zd_device_mr_register_fn zd_shm_mr_register;
zd_device_mr_deregister_fn zd_shm_mr_deregister;
zd_device_rmr_bind_fn zd_shm_rmr_bind;
zd_device_rmr_unbind_fn zd_shm_rmr_unbind;
/* Publishes this process's memfd chunks in the IA's chunk table. */
int zd_shm_chunks_start(struct zd_shm_ia *sia);
void zd_shm_chunks_stop(struct zd_shm_ia *sia);

/* The entry of @key in @tab (any side's table; untrusted if remote): the
 * low key bits index it (zd_keys.c gives 20 index bits). */
static inline bool zd_shm_mr_read(const struct zd_soft_mr_entry *tab, uint32_t key,
				  struct zd_soft_mr_view *v)
{
	return zd_soft_mr_read(&tab[key & (ZD_SHM_MR_ENTRIES - 1)], key, v);
}

/* ---- regions of the IA's arena (zd_soft_arena.h) ---- */
/* A region of @size bytes for a QP, SRQ or CQ ring; 0 or -ENOMEM (the
 * arena is full: a zdapl: line, once per IA). */
int zd_shm_region_alloc(struct zd_shm_ia *sia, size_t size, struct zd_soft_region *r);

static inline void zd_shm_region_free(struct zd_shm_ia *sia, struct zd_soft_region *r)
{
	zd_soft_arena_free(&sia->arena, r);
}

/* ---- zd_shm_peer.c ---- */
struct zd_soft_peer *zd_shm_peer_get(struct zd_shm_ia *sia, const struct zd_shm_blob *b);
void zd_shm_peer_put(struct zd_shm_ia *sia, struct zd_soft_peer *p);
/* The peer process is gone (its pidfd reads ready); @p counted. */
bool zd_shm_peer_dead(const struct zd_soft_peer *p);
/* The peer's IA region (its MR table, chunk table, doorbell). */
static inline struct zd_shm_ia_shared *zd_shm_peer_ia(const struct zd_soft_peer *p)
{
	return p->region.base;
}
/* Wakes the peer IA's sleeping consumers if any armed for @need (a mask of
 * ZD_SHM_ARMED_*), after a release store of what they wait for. */
void zd_shm_peer_ring(struct zd_shm_ia_shared *ia, uint32_t need);

/* ---- zd_shm_cq.c ---- */
zd_device_cq_create_fn zd_shm_cq_create;
zd_device_cq_destroy_fn zd_shm_cq_destroy;
zd_device_cq_poll_fn zd_shm_cq_poll;
zd_device_cq_poll_one_fn zd_shm_cq_poll_one;
zd_device_cq_arm_fn zd_shm_cq_arm;
int zd_shm_cq_attach(struct zd_shm_cq *cq, struct zd_shm_qp *qp, bool recv);
void zd_shm_cq_detach(struct zd_shm_cq *cq, struct zd_shm_qp *qp, bool recv);
/* A DTO completion of this process into @cq (any thread), through the
 * local ring: receive flushes, which must stay behind the receives still
 * in the QPs' completion rings. */
static inline void zd_shm_cq_complete(struct zd_shm_cq *cq, struct zd_ep *ep,
				      DAT_DTO_COOKIE cookie, DAT_DTO_COMPLETION_STATUS st,
				      DAT_SEG_LENGTH len, DAT_DTOS op)
{
	zd_soft_cq_complete(&cq->soft, ep, cookie, st, len, op);
}

/* A receive of @qp completes in error or flushed (no bytes): a
 * DAT_IB_DTO_EVENT (DAT_IB_DTO_RECV_UD) for a UD QP, as every receive
 * completion of a UD EP is under OFED; a plain receive completion else. */
static inline void zd_shm_recv_fail(struct zd_shm_qp *qp, DAT_DTO_COOKIE cookie,
				    DAT_DTO_COMPLETION_STATUS st)
{
	if (!qp->recv_cq)
		return;
	if (qp->ud)
		zd_evd_cq_post_ext(qp->recv_cq->soft.local, qp->recv_cq->soft.evd, qp->ep, cookie,
				   st, 0, (DAT_DTOS)DAT_IB_DTO_RECV_UD, 0);
	else
		zd_shm_cq_complete(qp->recv_cq, qp->ep, cookie, st, 0, DAT_DTO_RECEIVE);
}

/* A request completion of this process into @cq (any thread): straight
 * into the EVD ring when the local ring is drained (zd_evd_cq_post_direct
 * has the ordering argument).  Request completions have no other source,
 * so nothing of the same EP can wait elsewhere. */
static ZD_ALWAYS_INLINE void zd_shm_cq_complete_req(struct zd_shm_cq *cq, struct zd_ep *ep,
						    DAT_DTO_COOKIE cookie,
						    DAT_DTO_COMPLETION_STATUS st,
						    DAT_SEG_LENGTH len, DAT_DTOS op)
{
	zd_evd_cq_post_direct(cq->soft.local, cq->soft.evd, ep, cookie, st, len, op);
}
/* The DAT event of a receive completion of @qp (its recv CQ's poller): a
 * plain receive, or an RDMA write's immediate data (DAT_IB_DTO_EVENT);
 * @flags: ZD_SHM_COMP_*, @st checked already.  Every byte written, as the
 * ring would hand it back. */
static ZD_ALWAYS_INLINE void zd_shm_recv_event(DAT_EVENT *ev, struct zd_shm_qp *qp,
					       DAT_DTO_COOKIE cookie,
					       DAT_DTO_COMPLETION_STATUS st, uint32_t flags,
					       uint32_t len, uint32_t imm)
{
	zd_dto_event_fill(ev, qp->recv_cq->soft.evd, qp->ep, cookie, st,
			  st == DAT_DTO_SUCCESS ? len : 0,
			  ZD_UNLIKELY(flags & ZD_SHM_COMP_IMMED) ? (DAT_DTOS)DAT_IB_DTO_RECV_IMMED
								  : DAT_DTO_RECEIVE, imm);
	/* The sender's DAT_COMPLETION_SOLICITED_WAIT_FLAG, for solicited wait. */
	zd_evd_ev_set_solicited(ev, flags & ZD_SHM_COMP_SOLICITED);
}

/* @ev into @evd's ring (cq_poll, the producer side of it).  cq_poll's
 * budget was the room in the ring, but request completions posted
 * directly (zd_shm_cq_complete_req) may have taken some since: then it
 * spills (overflow semantics), never drops, and later ones follow it into
 * the spill list. */
static inline void zd_shm_recv_enqueue(struct zd_evd *evd, const DAT_EVENT *ev)
{
	if (ZD_UNLIKELY(zd_evd_spilling(evd, memory_order_relaxed) ||
			!zd_ring_enqueue(evd->ring, ev)))
		zd_evd_post(evd, ev, 1);
}

/* ---- zd_shm_cqring.c: the shared CQ ring's control and cold paths ---- */
/* Creates @cq's ring region for an EVD of @qlen events; 0 or -errno. */
int zd_shm_cqring_create(struct zd_shm_cq *cq, uint32_t qlen);
void zd_shm_cqring_destroy(struct zd_shm_cq *cq);
/* Maps the peer's recv CQ ring of the blob into @qp (connect); 0 or -1. */
int zd_shm_cqring_map(struct zd_shm_qp *qp, const struct zd_shm_blob *b);
void zd_shm_cqring_unmap(struct zd_shm_qp *qp);
/* The consumer found word @w at its head that is neither free nor
 * published: waits, or skips the slot (a dead or hostile claimer, garbage)
 * and reports the claimer's EPs broken.  True when it skipped (look
 * again).  @now: look at the claimer now, not once a millisecond (a
 * consumer about to sleep).  Outside the @polling section: it takes the
 * IA's lock. */
bool zd_shm_cqring_unstick(struct zd_shm_cq *cq, uint64_t w, bool now);
/* The consumer refuses a CQE (@qp: the QP it named, if it is one of this
 * CQ's: its peer is corrupt, the connection breaks); a counted, rate
 * limited zdapl: warning.  Always false (no event). */
bool zd_shm_cq_refuse(struct zd_shm_cq *cq, struct zd_shm_qp *qp, const char *why);
/* Puts a wild tail hint back where the consumer's head is (slow path). */
void zd_shm_cqring_check_tail(struct zd_shm_cq *cq);
/* The QP's peer broke the protocol: stop listening to it, break it. */
void zd_shm_qp_peer_corrupt(struct zd_shm_qp *qp);

int zd_shm_waker_start(struct zd_shm_ia *sia);
void zd_shm_waker_stop(struct zd_shm_ia *sia);

/* ---- zd_shm_qp.c ---- */
zd_device_qp_create_fn zd_shm_qp_create;
zd_device_qp_local_blob_fn zd_shm_qp_local_blob;
zd_device_qp_connect_fn zd_shm_qp_connect;
zd_device_qp_flush_fn zd_shm_qp_flush;
zd_device_qp_reset_fn zd_shm_qp_reset;
zd_device_qp_destroy_fn zd_shm_qp_destroy;
/* Receive side of @qp: reap its completion ring into @out (poller thread). */
int zd_shm_qp_reap(struct zd_shm_qp *qp, int budget);
/* Receive buffers allocated to @qp's EP and not completed (scan). */
DAT_COUNT zd_shm_qp_recv_held(struct zd_shm_qp *qp);
/* The device's rq_counts op (zd_device.h). */
zd_device_rq_counts_fn zd_shm_rq_counts;
/* Flushes every outstanding receive of @qp into its recv CQ (any thread),
 * whether or not messages wait for them (QP reset, a corrupt peer, the
 * QP going away); a QP in error otherwise settles (below). */
void zd_shm_qp_flush_recvs(struct zd_shm_qp *qp, bool final);
/*
 * The receive side of @qp in error (any thread).  A message its peer
 * delivered before the error (into the eager ring: its send completed)
 * still fills a receive, posted before the error or after it, in order;
 * only once no message waits in the QP's completion ring do the posted
 * receives flush (and an SRQ EP's "last WQE reached" event go out).  So
 * whoever may find that ring drained calls this after the error is set:
 * qp_flush, post_recv (a receive posted in error), the reaper (it drained
 * the ring).  Each of them stores, then a seq_cst fence, then loads:
 *   flusher:  error            | fence | comp_head, comp_tail (here)
 *   reaper:   comp_head        | fence | error (zd_shm_qp_reap)
 *   poster:   rq_posted        | fence | error (zd_shm_post_recv)
 *   sender:   comp_tail        | fence | error (exec_send, eager)
 * so a drained ring seen here has no message behind it that the flusher
 * missed: the reaper comes back, the poster settles itself, and a
 * sender that sees the error completes flushed.
 */
void zd_shm_qp_recv_settle(struct zd_shm_qp *qp);
/* Whether messages of @qp's peer wait in its completion ring (after the
 * caller's seq_cst fence): never for a corrupt peer's, taken no more. */
static inline bool zd_shm_qp_msgs_waiting(struct zd_shm_qp *qp)
{
	if (qp->ud || atomic_load_explicit(&qp->flushed_rq, memory_order_relaxed))
		return false;
	/* acquire: pairs with the reaper's release store of comp_head: the
	 * entries before it were taken (their receives are DONE or FREE). */
	return atomic_load_explicit(&qp->own->comp_head, memory_order_acquire) !=
	       atomic_load_explicit(&qp->own->comp_tail, memory_order_relaxed);
}

/* ---- zd_shm_srq.c ---- */
zd_device_srq_create_fn zd_shm_srq_create;
zd_device_srq_resize_fn zd_shm_srq_resize;
zd_device_srq_destroy_fn zd_shm_srq_destroy;
zd_device_srq_post_recv_fn zd_shm_srq_post_recv;
/* Claims the next posted SRQ buffer for QP @tag; its position or -1. */
int64_t zd_shm_srq_take(struct zd_shm_srq_shared *sh, struct zd_shm_rq_slot *slots,
			uint32_t depth, uint32_t tag);
void zd_shm_srq_check_lw(struct zd_shm_srq *s);

/* ---- zd_shm_post.c ---- */
zd_device_post_send_fn zd_shm_post_send;
zd_device_post_recv_fn zd_shm_post_recv;
zd_device_post_rdma_write_fn zd_shm_post_rdma_write;
DAT_RETURN zd_shm_dat_post_send(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags);
DAT_RETURN zd_shm_dat_post_rdma_write(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				      DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				      DAT_COMPLETION_FLAGS flags);
zd_device_post_rdma_read_fn zd_shm_post_rdma_read;
zd_device_post_rdma_write_imm_fn zd_shm_post_rdma_write_imm;
zd_device_post_atomic_fn zd_shm_post_atomic;
/* Target side: rings the peer of @qp if it waits for room (after a
 * receive was posted or ring space freed). */
void zd_shm_qp_rnr_ring(struct zd_shm_qp *qp);
void zd_shm_srq_rnr_ring(struct zd_shm_srq *s);
int zd_shm_srq_attach(struct zd_shm_srq *s, struct zd_shm_qp *qp, bool add);
/* Retries queued sends of @qp (poster thread or its req CQ poller). */
void zd_shm_qp_progress_sq(struct zd_shm_qp *qp);
/* Resolves receive buffers against this IA's MR table; false on a
 * protection error. */
bool zd_shm_resolve_recv(struct zd_shm_ia *sia, uint32_t pz_id, DAT_COUNT n,
			 const DAT_LMR_TRIPLET *iov, struct zd_shm_rq_slot *slot);

#endif /* ZD_SHM_H */
