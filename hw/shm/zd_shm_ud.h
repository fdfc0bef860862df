/*
 * Unreliable datagrams on the shm device (zd_shm_ud.c).
 *
 * A UD QP owns one shared region: the header every shm QP has (so posting
 * receives, flushing and destroying are the RC QP's code), its receive
 * queue, and one completion entry per receive slot.  Any number of senders,
 * in any process, deliver into it at once:
 *  - a sender takes the next posted receive with a CAS on that slot's state
 *    (POSTED -> TAKEN), then moves the shared claim index past it; a sender
 *    that finds the slot taken moves the index on for whoever took it, so
 *    a sender stopped between the two steps holds nobody up;
 *  - it copies the payload at offset ZD_UD_GRH_BYTES of the receive
 *    (zd_soft_peer_copy, tail last), writes the slot's completion entry and
 *    marks the slot DONE (release), then rings the target IA if a consumer
 *    there sleeps;
 *  - no receive posted: the datagram is dropped and counted in the
 *    target's @dropped; the sender never waits.
 * The owner's poller completes the slots in receive order (one acquire load
 * per poll while nothing arrived), so datagrams from one sender arrive in
 * the order sent.  A sender killed while it filled a slot would hold that
 * order up for good: a slot TAKEN for a second or more whose taker (its
 * pid, in the slot's entry) no longer exists completes with
 * DAT_DTO_ERR_TRANSPORT.
 *
 * A QP's address (its blob) names the process, the IA (its random uid) and
 * the QP region with a generation no other UD QP of the process ever had:
 * an address kept after its QP was freed never reaches another QP that
 * reused the fd, and a sender holding the old region sees it flushed
 * (header error) and drops.
 */
#ifndef ZD_SHM_UD_H
#define ZD_SHM_UD_H

#include "hw/shm/zd_shm.h"

#define ZD_SHM_MAGIC_UDQP       0x7a64736875643031ull  /* "zdshud01" */
#define ZD_SHM_UD_BLOB_VERSION  0x55440002u  /* 2: the QP region by offset in the arena */

/* Largest datagram payload: the device's message limit, less the GRH
 * space, so that a whole received datagram is one message (there is no
 * wire MTU: a datagram is one copy). */
#define ZD_SHM_UD_MAX_PAYLOAD   (ZD_SHM_MAX_MESSAGE - ZD_UD_GRH_BYTES)

/* A datagram's completion, written by its sender before the slot is DONE. */
struct zd_shm_ud_comp {
	uint32_t len;             /* payload + ZD_UD_GRH_BYTES */
	uint32_t status;          /* DAT_DTO_COMPLETION_STATUS */
	uint32_t flags;           /* ZD_SHM_COMP_SOLICITED */
	/* The taker's pid, stored right after it took the slot (0: not yet;
	 * the owner clears it when the slot completes): a slot stuck TAKEN
	 * whose taker is gone completes in error instead of holding up the
	 * receives behind it. */
	_Atomic int32_t taker;
};

/* Process-private state of a UD QP (struct zd_shm_qp.ud). */
struct zd_shm_ud_qp {
	struct zd_shm_ud_comp *comp;  /* in the region, one per RQ slot */
	uint64_t gen;                 /* the region's (which peers could overwrite) */
	pid_t pid;                    /* this process, as it signs the slots it takes */
	/* The poller's watch on a slot found TAKEN: 1 + its position (0:
	 * none), and since when (CLOCK_MONOTONIC_COARSE seconds). */
	uint64_t stall_pos;
	int64_t stall_since;
};

struct zd_shm_ud_shared {
	struct zd_shm_qp_shared qp;   /* magic ZD_SHM_MAGIC_UDQP; no eager ring */
	uint64_t gen;                 /* read-only: the blob's generation */
	alignas(ZD_CACHE_LINE) _Atomic uint64_t claim;    /* senders: next receive to take */
	alignas(ZD_CACHE_LINE) _Atomic uint64_t dropped;  /* senders: found no receive */
};

/* What qp_local_blob of a UD QP gives its peers. */
struct zd_shm_ud_blob {
	uint32_t version;
	int32_t pid;
	uint64_t ia_uid;
	uint64_t ia_size;
	int32_t ia_fd;            /* the IA's arena (zd_shm.h) */
	int32_t pad;
	uint64_t qp_off, qp_size; /* the QP's region in it */
	uint64_t gen;
};

zd_device_ud_ah_create_fn zd_shm_ud_ah_create;
zd_device_ud_ah_destroy_fn zd_shm_ud_ah_destroy;
zd_device_post_send_ud_fn zd_shm_post_send_ud;
/* qp_create, qp_local_blob and the receive reaping of a UD EP's QP
 * (zd_shm_qp.c dispatches here; the rest of the QP code serves both). */
DAT_RETURN zd_shm_ud_qp_create(struct zd_ep *ep);
size_t zd_shm_ud_local_blob(struct zd_shm_qp *qp, void *blob, size_t max);
int zd_shm_ud_reap(struct zd_shm_qp *qp, int budget);

/* How long a receive may stay TAKEN before the poller asks whether its
 * taker still lives. */
#define ZD_SHM_UD_STALL_SECONDS 1

/* Datagrams dropped at @qp (a UD QP) for want of a posted receive. */
static inline uint64_t zd_shm_ud_dropped(const struct zd_shm_qp *qp)
{
	const struct zd_shm_ud_shared *sh = (const void *)qp->own;

	return atomic_load_explicit(&sh->dropped, memory_order_relaxed);
}

#endif /* ZD_SHM_UD_H */
