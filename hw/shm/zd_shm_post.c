/*
 * The shm data path: posts execute at once on the poster's thread (the
 * initiator executes), and complete into the request EVD's CQ.
 *
 * Cost of a post (no locks, no allocation):
 *  - local segments: one seqlocked MR-table entry read per segment;
 *  - RDMA write/read: one remote MR-table entry read, then memcpy (same
 *    process, or target in a pool chunk or adoption window we mapped) or
 *    one process_vm_writev/readv syscall (any other memory); on the key
 *    pair of the QP's last RDMA, two seq loads instead of both table reads
 *    and the mapping lookup (the translation cache, zd_soft_xlat.h);
 *  - send: a few loads of the target QP's indices, one CAS on the receive
 *    slot, the copy as above (or a memcpy into the eager ring), a release
 *    store of the completion ring tail, and a fence plus one load of the
 *    target's "armed" flag (a futex wake only when its consumer sleeps);
 *  - completion: written in place into the request EVD's ring when the
 *    CQ's local ring is drained (zd_evd_cq_post_direct), else one local
 *    MPSC ring enqueue; then one waiter load.  Nothing at all for a
 *    suppressed or unsignalled success.
 * The common RDMA (one segment, a target memcpy reaches) has its own path,
 * post_rdma, with no iovec and a fixed-size copy for small messages
 * (zd_soft_copy_to_peer, tail last); instructions per 8-byte RDMA
 * write post plus dequeue of its completion: tools/instr_count.sh.
 * A send that finds neither a receive nor eager room is queued (RNR) and
 * retried by the next post or progress of the request EVD; later DTOs of
 * the EP queue behind it, so every DTO of an EP executes in post order.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "core/zd_cm.h"
#include "core/zd_ia.h"
#include "core/zd_dto_entry.h"
#include "core/zd_ep.h"
#include "evd/zd_evd.h"
#include "hw/shm/zd_shm.h"
#include "hw/shm/zd_shm_copy.h"
#include "hw/soft/zd_soft_atomic.h"

#define ZD_SHM_RNR (-1)

/* Reading local memory needs no right, as with verbs (stock clients send
 * from regions registered LOCAL_WRITE only); the key, bounds and PZ are
 * still checked. */
#define ZD_SHM_LOCAL_READ 0u

/* Message and RDMA sizes are held to the device limits, not the EP
 * attributes: stock clients leave those 0 or small and still expect
 * larger transfers to work, as they do on verbs. */

/* A QP in error never carries traffic again: its connection ends too
 * (BROKEN on both sides, through the CM: zd_cm_dev_broken), so a peer
 * that tries wrong keys pays a connection for each try. */
static inline void qp_set_error(struct zd_shm_qp *qp)
{
	/* relaxed: the flag alone; the CM acts later, under its own lock. */
	if (!atomic_exchange_explicit(&qp->error, 1, memory_order_relaxed))
		zd_cm_dev_broken(qp->ep);
}

static ZD_ALWAYS_INLINE void req_complete(struct zd_shm_qp *qp, DAT_DTO_COOKIE cookie, int st,
					  uint64_t len, DAT_DTOS op, DAT_COMPLETION_FLAGS flags)
{
	if (ZD_UNLIKELY(!qp->req_cq))
		return;
	/* Suppressed and unsignalled successes cost nothing more. */
	if (ZD_LIKELY(st == DAT_DTO_SUCCESS) &&
	    ZD_UNLIKELY(flags & (DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_UNSIGNALLED_FLAG)) &&
	    ((flags & DAT_COMPLETION_SUPPRESS_FLAG) ||
	     (qp->ep->attr.request_completion_flags & DAT_COMPLETION_UNSIGNALLED_FLAG)))
		return;
	zd_shm_cq_complete_req(qp->req_cq, qp->ep, cookie, (DAT_DTO_COMPLETION_STATUS)st,
			       (DAT_SEG_LENGTH)len, op);
}

/* One local segment (length > 0): key, bounds, access and PZ. */
static ZD_ALWAYS_INLINE bool local_seg_ok(const struct zd_shm_qp *qp,
					  const DAT_LMR_TRIPLET *iov, uint32_t need)
{
	struct zd_soft_mr_view v;

	return zd_shm_mr_read(qp->sia->sh->mr, iov->lmr_context, &v) &&
	       zd_soft_mr_allows(&v, iov->virtual_address, iov->segment_length, need, qp->pz_id);
}

/* Local segments -> iovecs, checking key, bounds, access and PZ. */
static inline bool local_segs(struct zd_shm_qp *qp, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			      uint32_t need, struct iovec *out, uint64_t *total)
{
	uint64_t sum = 0;

	for (DAT_COUNT i = 0; i < n; i++) {
		uint64_t len = iov[i].segment_length;

		out[i].iov_base = (void *)(uintptr_t)iov[i].virtual_address;
		out[i].iov_len = len;
		if (len == 0)
			continue;
		if (ZD_UNLIKELY(!local_seg_ok(qp, &iov[i], need)))
			return false;
		sum += len;
	}
	*total = sum;
	return true;
}

bool zd_shm_resolve_recv(struct zd_shm_ia *sia, uint32_t pz_id, DAT_COUNT n,
			 const DAT_LMR_TRIPLET *iov, struct zd_shm_rq_slot *slot)
{
	uint64_t total = 0;

	for (DAT_COUNT i = 0; i < n; i++) {
		struct zd_soft_mr_view v;
		uint64_t len = iov[i].segment_length;

		slot->seg[i].addr = iov[i].virtual_address;
		slot->seg[i].len = (uint32_t)len;
		slot->seg[i].chunk = ZD_SOFT_NO_CHUNK;
		if (len == 0)
			continue;
		if (!zd_shm_mr_read(sia->sh->mr, iov[i].lmr_context, &v) ||
		    !zd_soft_mr_allows(&v, iov[i].virtual_address, len,
				       DAT_MEM_PRIV_LOCAL_WRITE_FLAG, pz_id))
			return false;
		slot->seg[i].chunk = zd_soft_mr_chunk(&v, iov[i].virtual_address, len);
		total += len;
	}
	slot->nseg = (uint32_t)n;
	slot->total = total;
	return true;
}

/* ---- RDMA ---- */

/* The general copy: several local segments, or a target only
 * process_vm_writev/readv reaches.  Out of line: the common case is one
 * segment through memcpy (exec_rdma). */
static __attribute__((noinline)) int rdma_copy_sg(struct zd_shm_qp *qp, bool write, DAT_COUNT n,
						  const DAT_LMR_TRIPLET *iov,
						  const struct zd_soft_seg *rseg)
{
	struct iovec liov[ZD_SHM_MAX_SEGS];

	for (DAT_COUNT i = 0; i < n; i++) {
		liov[i].iov_base = (void *)(uintptr_t)iov[i].virtual_address;
		liov[i].iov_len = iov[i].segment_length;
	}
	switch (zd_soft_peer_copy(qp->peer, write, liov, (int)n, rseg, 1)) {
	case 0:
		return DAT_DTO_SUCCESS;
	case -EACCES:
		return DAT_DTO_ERR_REMOTE_ACCESS;  /* no ptrace rights over it */
	default:
		return DAT_DTO_ERR_REMOTE_RESPONDER;  /* the peer is gone */
	}
}

/* exec_rdma's remote half, inside its copy marks: the target's state,
 * its key, the copy of @total bytes. */
static ZD_ALWAYS_INLINE int rdma_remote(struct zd_shm_qp *qp, bool write, DAT_COUNT n,
					const DAT_LMR_TRIPLET *iov,
					const DAT_RMR_TRIPLET *remote, uint64_t total,
					uint64_t *done)
{
	struct zd_soft_mr_view v;
	struct zd_soft_seg rseg;

	if (ZD_UNLIKELY(atomic_load_explicit(&qp->remote->error, memory_order_relaxed)))
		return DAT_DTO_ERR_FLUSHED;
	/* Zero bytes touch no remote memory: as on InfiniBand, no rkey check
	 * (MPI signals with zero-byte writes with immediate data, rkey 0). */
	if (ZD_UNLIKELY(total == 0))
		return DAT_DTO_SUCCESS;
	/* The target's own table, the target QP's PZ: both as the target
	 * published them; a lying target only hurts itself. */
	if (ZD_UNLIKELY(!zd_shm_mr_read(zd_shm_peer_ia(qp->peer)->mr, remote->rmr_context, &v) ||
			!zd_soft_mr_allows(&v, remote->virtual_address, total,
					   write ? DAT_MEM_PRIV_REMOTE_WRITE_FLAG
						 : DAT_MEM_PRIV_REMOTE_READ_FLAG, qp->r_pz_id)))
		return DAT_DTO_ERR_REMOTE_ACCESS;
	*done = total;
	if (ZD_LIKELY(n == 1)) {
		/* Same process, or the target lies in a pool chunk we mapped. */
		void *p = zd_soft_peer_ptr_fast(qp->peer,
						zd_soft_mr_chunk(&v, remote->virtual_address, total),
						remote->virtual_address, total);
		void *l = (void *)(uintptr_t)iov->virtual_address;

		if (ZD_LIKELY(p != NULL)) {
			if (write)
				zd_soft_copy_to_peer(p, l, total);
			else
				memcpy(l, p, total);
			return DAT_DTO_SUCCESS;
		}
	}
	rseg.addr = remote->virtual_address;
	rseg.len = (uint32_t)total;
	rseg.chunk = zd_soft_mr_chunk(&v, remote->virtual_address, total);
	return rdma_copy_sg(qp, write, n, iov, &rseg);
}

static ZD_ALWAYS_INLINE int exec_rdma(struct zd_shm_qp *qp, bool write, DAT_COUNT n,
				      const DAT_LMR_TRIPLET *iov,
				      const DAT_RMR_TRIPLET *remote, uint64_t *done)
{
	const uint32_t lneed = write ? ZD_SHM_LOCAL_READ : DAT_MEM_PRIV_LOCAL_WRITE_FLAG;
	uint64_t total = 0;
	int st;

	if (ZD_LIKELY(n == 1)) {
		total = iov->segment_length;
		if (ZD_UNLIKELY(total != 0 && !local_seg_ok(qp, iov, lneed)))
			return DAT_DTO_ERR_LOCAL_PROTECTION;
	} else {
		for (DAT_COUNT i = 0; i < n; i++) {
			if (iov[i].segment_length == 0)
				continue;
			if (ZD_UNLIKELY(!local_seg_ok(qp, &iov[i], lneed)))
				return DAT_DTO_ERR_LOCAL_PROTECTION;
			total += iov[i].segment_length;
		}
	}
	if (ZD_UNLIKELY(total > remote->segment_length || total > ZD_SHM_MAX_RDMA))
		return DAT_DTO_ERR_LOCAL_LENGTH;
	zd_shm_copy_begin(qp->remote);
	st = rdma_remote(qp, write, n, iov, remote, total, done);
	zd_shm_copy_end(qp->remote);
	return st;
}

/* ---- send ---- */

/* Position bits a slot state word keeps (zd_shm_slot_word). */
#define ZD_SHM_WORD_POS(w) ((w) >> 24)
#define ZD_SHM_POS_BITS(p) ((p) << 24 >> 24)

/*
 * Claims the next slot of the peer's CQ ring (zd_shm_cqring.h): its entry
 * and position, or NULL after a bounded try (full, contended, a slot or a
 * tail hint out of protocol): the caller takes the QP's own ring.
 */
static ZD_ALWAYS_INLINE struct zd_shm_cqe *cqe_claim(struct zd_shm_qp *qp, uint64_t *pos)
{
	struct zd_shm_cq_shared *sh = qp->rcq;
	const uint64_t depth = qp->r_cq_depth;
	/* relaxed: a hint; the slot's state word decides. */
	uint64_t t = atomic_load_explicit(&sh->tail, memory_order_relaxed);

	for (int i = 0; i < ZD_SHM_CQE_TRIES; i++) {
		struct zd_shm_cqe *s = &qp->rcqe[t & (depth - 1)];
		/* acquire: pairs with the consumer's release store of FREE(t):
		 * its reads of the slot's previous tenant are done. */
		uint64_t w = atomic_load_explicit(&s->state, memory_order_acquire);

		if (ZD_LIKELY(w == zd_shm_slot_word(t, 0, ZD_SHM_CQE_FREE))) {
			/* relaxed: the acquire load ordered us after the
			 * consumer; the CAS only arbitrates among producers. */
			if (ZD_LIKELY(atomic_compare_exchange_strong_explicit(&s->state, &w,
					zd_shm_slot_word(t, qp->r_tag, ZD_SHM_CQE_CLAIMED),
					memory_order_relaxed, memory_order_relaxed))) {
				uint64_t seen = t;

				/* relaxed: a hint; a CAS so that it never moves
				 * back (a helper may have moved it on already). */
				atomic_compare_exchange_strong_explicit(&sh->tail, &seen, t + 1,
						memory_order_relaxed, memory_order_relaxed);
				*pos = t;
				return s;
			}
			continue;  /* another producer won t: look again */
		}
		/* t taken (claimed or published), or consumed already (free
		 * for t + depth): the hint lags; help it on. */
		if (ZD_SHM_WORD_POS(w) == ZD_SHM_POS_BITS(t) ?
		    (w & 0xf) == ZD_SHM_CQE_CLAIMED || (w & 0xf) == ZD_SHM_CQE_PUBLISHED :
		    w == zd_shm_slot_word(t + depth, 0, ZD_SHM_CQE_FREE)) {
			uint64_t seen = t;

			/* relaxed: a hint, as above. */
			if (atomic_compare_exchange_strong_explicit(&sh->tail, &seen, t + 1,
					memory_order_relaxed, memory_order_relaxed))
				seen = t + 1;
			t = seen;
			continue;
		}
		return NULL;  /* the previous lap not consumed (full), or garbage */
	}
	return NULL;
}

/* Whether a completion of @qp of @type may take the peer's CQ ring: a
 * receive this message consumed (not an eager one), and the QP's own
 * ring drained (@comp_head, read by msg_room, is its consumer's position:
 * every entry before ours there was reaped into the EVD, so ours cannot
 * pass it). */
static ZD_ALWAYS_INLINE bool cq_ring_usable(const struct zd_shm_qp *qp, unsigned type,
					    uint64_t comp_head)
{
	return (type & 0xff) == ZD_SHM_COMP_DIRECT && qp->rcqe != NULL &&
	       qp->comp_tail == comp_head;
}

/* A receive completion of @qp for its peer's recv CQ: into CQE @e (claimed
 * already, with the message inline when @inl), or a CQE claimed now if
 * cq_ring_usable, else, or when the CQ ring has no slot at once, into the
 * QP's own ring, raising the CQ ring's fallback flag.  Ends with a seq_cst
 * fence (zd_shm_peer_ring), which eager_sent_status relies on. */
static void comp_publish(struct zd_shm_qp *qp, struct zd_shm_cqe *e, uint64_t pos, uint8_t inl,
			 unsigned type, uint32_t len, int status, uint64_t rpos, uint32_t imm,
			 DAT_COMPLETION_FLAGS flags, uint64_t comp_head)
{
	uint32_t type_flags = type | ((flags & DAT_COMPLETION_SOLICITED_WAIT_FLAG) ?
				      ZD_SHM_COMP_SOLICITED : 0);
	uint64_t seq = qp->comp_seq++;

	if (!e && ZD_LIKELY(cq_ring_usable(qp, type, comp_head)))
		e = cqe_claim(qp, &pos);
	if (ZD_LIKELY(e != NULL)) {
		if (ZD_UNLIKELY(qp->sia->fault_claim_stop))
			raise(SIGSTOP);  /* a test kills us here */
		e->tag = qp->r_tag;
		e->type_flags = (uint16_t)type_flags;
		e->status = (uint8_t)status;
		e->inline_len = inl;
		e->seq = (uint32_t)seq;
		e->len = len;
		e->rpos = rpos;
		if (ZD_UNLIKELY(type_flags & ZD_SHM_COMP_IMMED))
			e->imm = imm;
		/* release: pairs with the consumer's acquire load of the state
		 * in cqring_ready: the entry and the data it announces are
		 * visible first.  A plain store: had the consumer skipped our
		 * claim (dead or hostile, zd_shm_cqring_unstick), this reads
		 * as garbage there and is skipped again. */
		atomic_store_explicit(&e->state, zd_shm_slot_word(pos, qp->r_tag,
								   ZD_SHM_CQE_PUBLISHED),
				      memory_order_release);
	} else {
		struct zd_shm_comp *c = &qp->rcomp[qp->comp_tail & (qp->r_comp_depth - 1)];

		c->type_flags = type_flags;
		c->len = len;
		c->status = (uint32_t)status;
		c->imm = imm;
		c->srq_pos = rpos;
		c->seq = seq;
		qp->comp_tail++;
		/* release: pairs with the target's acquire load of comp_tail in
		 * zd_shm_qp_reap: the entry and the data it announces are visible. */
		atomic_store_explicit(&qp->remote->comp_tail, qp->comp_tail, memory_order_release);
		/* release: pairs with the consumer's acquire exchange clearing it
		 * (zd_shm_cq_poll): it then walks and sees our comp_tail. */
		if (qp->rcq)
			atomic_store_explicit(&qp->rcq->fallback, 1, memory_order_release);
	}
	/* A consumer in solicited wait sleeps through plain receives. */
	zd_shm_peer_ring(zd_shm_peer_ia(qp->peer), (flags & DAT_COMPLETION_SOLICITED_WAIT_FLAG) ||
				       status != DAT_DTO_SUCCESS ? ZD_SHM_RING_ALWAYS
								 : ZD_SHM_ARMED_ANY);
}

/* Claims the receive the connection's next message consumes: the target's
 * RQ slot msg_sent, or its SRQ's next buffer (owner tag *@tag), at *@pos.
 * NULL when none is posted (the message goes to the eager ring), or when
 * the RQ slot was flushed under us (*@flushed).  The caller has checked
 * that no earlier message waits in the eager ring. */
static ZD_ALWAYS_INLINE struct zd_shm_rq_slot *recv_claim(struct zd_shm_qp *qp, uint64_t *pos,
							  uint32_t *tag, bool *flushed)
{
	if (qp->rsrq) {
		int64_t p = zd_shm_srq_take(qp->rsrq, qp->rsrq_slots, qp->r_srq_depth, qp->r_tag);

		if (p < 0)
			return NULL;
		*pos = (uint64_t)p;
		*tag = qp->r_tag;
		return &qp->rsrq_slots[*pos & (qp->r_srq_depth - 1)];
	}
	*pos = qp->msg_sent;
	*tag = 0;

	/* The slot's state says whether receive pos is posted (no load of
	 * rq_posted: one line less to fetch from the target). */
	struct zd_shm_rq_slot *slot = &qp->rrq[*pos & (qp->r_rq_depth - 1)];
	uint64_t w = zd_shm_slot_word(*pos, 0, ZD_SHM_SLOT_POSTED);

	/* acquire: pairs with the release store of POSTED in
	 * zd_shm_post_recv: the descriptor is written. */
	if (!atomic_compare_exchange_strong_explicit(&slot->state, &w,
			zd_shm_slot_word(*pos, 0, ZD_SHM_SLOT_TAKEN),
			memory_order_acquire, memory_order_relaxed)) {
		/* Flushed under us; anything else (free, an earlier lap's
		 * state, garbage from a corrupt target): not posted yet. */
		*flushed = w == zd_shm_slot_word(*pos, 0, ZD_SHM_SLOT_FLUSHED);
		return NULL;
	}
	return slot;
}

/* A claimed receive is filled: DONE (its completion entry follows);
 * false when the target flushed it meanwhile (its QP went to error: the
 * receive completed flushed there, so the send must not succeed). */
static ZD_ALWAYS_INLINE bool recv_filled(struct zd_shm_rq_slot *slot, uint64_t pos, uint32_t tag)
{
	uint64_t w = zd_shm_slot_word(pos, tag, ZD_SHM_SLOT_TAKEN);

	/* release: the data is in place before the slot reads DONE. */
	return atomic_compare_exchange_strong_explicit(&slot->state, &w,
			zd_shm_slot_word(pos, tag, ZD_SHM_SLOT_DONE),
			memory_order_release, memory_order_relaxed);
}

/* After an eager message's comp_publish, whose last step is a seq_cst
 * fence (zd_shm_peer_ring): the sender's side of the settle pairs
 * (zd_shm_qp_recv_settle).  The target's flush either saw this message
 * waiting (it keeps a receive for it), or we see its error here: the
 * message may then meet no receive, and its send completes flushed. */
static ZD_ALWAYS_INLINE int eager_sent_status(const struct zd_shm_qp *qp, int st)
{
	return ZD_UNLIKELY(atomic_load_explicit(&qp->remote->error, memory_order_relaxed))
	       ? DAT_DTO_ERR_FLUSHED : st;
}

/* The target's room for one more message: a completion entry, RNR if
 * none.  Its eager_head (acquire: pairs with the release store in reap:
 * the slots we are about to reuse were read) goes to *@eager_head, its
 * completion ring's head to *@comp_head (comp_publish). */
static ZD_ALWAYS_INLINE int msg_room(struct zd_shm_qp *qp, uint64_t *eager_head,
				     uint64_t *comp_head)
{
	struct zd_shm_qp_shared *r = qp->remote;

	if (ZD_UNLIKELY(atomic_load_explicit(&r->error, memory_order_relaxed)))
		return DAT_DTO_ERR_FLUSHED;
	/* acquire: pairs with the target's release store of comp_head in
	 * zd_shm_qp_reap: the entry we are about to overwrite was read. */
	*comp_head = atomic_load_explicit(&r->comp_head, memory_order_acquire);
	if (ZD_UNLIKELY(qp->comp_tail - *comp_head >= qp->r_comp_depth))
		return ZD_SHM_RNR;
	*eager_head = atomic_load_explicit(&r->eager_head, memory_order_acquire);
	return DAT_DTO_SUCCESS;
}

static int exec_send(struct zd_shm_qp *qp, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
		     DAT_COMPLETION_FLAGS flags, uint64_t *done)
{
	struct iovec liov[ZD_SHM_MAX_SEGS];
	struct zd_shm_rq_slot *slot = NULL;
	struct zd_soft_seg segs[ZD_SHM_MAX_SEGS];
	uint64_t total, pos = 0, eager_head, comp_head;
	uint32_t nseg, tag = 0;
	bool flushed = false;
	int st = DAT_DTO_SUCCESS, rst = DAT_DTO_SUCCESS;

	if (ZD_UNLIKELY(!local_segs(qp, n, iov, ZD_SHM_LOCAL_READ, liov, &total)))
		return DAT_DTO_ERR_LOCAL_PROTECTION;
	if (ZD_UNLIKELY(total > ZD_SHM_MAX_MESSAGE))
		return DAT_DTO_ERR_LOCAL_LENGTH;
	if (ZD_UNLIKELY((st = msg_room(qp, &eager_head, &comp_head)) != DAT_DTO_SUCCESS))
		return st;
	*done = total;

	/* Earlier messages still wait in the eager ring: this one follows. */
	if (ZD_LIKELY(qp->eager_tail == eager_head)) {
		slot = recv_claim(qp, &pos, &tag, &flushed);
		if (ZD_UNLIKELY(flushed))
			return DAT_DTO_ERR_FLUSHED;
	}
	if (slot) {
		struct zd_shm_cqe *e = NULL;
		uint64_t cpos = 0;
		uint8_t inl = 0;

		/* Copy the untrusted descriptor once, then check it. */
		nseg = slot->nseg;
		if (nseg > ZD_SHM_MAX_SEGS || slot->total < total) {
			st = DAT_DTO_ERR_REMOTE_RESPONDER;
			rst = DAT_DTO_ERR_LOCAL_LENGTH;
		} else if (total - 1 < ZD_SHM_CQE_INLINE && !qp->rsrq && nseg > 0 &&
			   slot->seg[0].len >= total &&
			   cq_ring_usable(qp, ZD_SHM_COMP_DIRECT, comp_head) &&
			   (e = cqe_claim(qp, &cpos)) != NULL) {
			/* Small: the message rides in its CQE, which the
			 * consumer copies into the buffer (zd_shm_cqring.h). */
			uint32_t off = 0;

			for (DAT_COUNT i = 0; i < n; i++) {
				memcpy(e->data + off, liov[i].iov_base, liov[i].iov_len);
				off += (uint32_t)liov[i].iov_len;
			}
			inl = (uint8_t)total;
		} else {
			memcpy(segs, slot->seg, nseg * sizeof(segs[0]));
			int rc = zd_soft_peer_copy(qp->peer, true, liov, (int)n, segs, (int)nseg);

			if (rc != 0) {
				st = rc == -EACCES ? DAT_DTO_ERR_REMOTE_ACCESS
						   : DAT_DTO_ERR_REMOTE_RESPONDER;
				rst = DAT_DTO_ERR_LOCAL_PROTECTION;
			}
		}
		if (ZD_UNLIKELY(!recv_filled(slot, pos, tag)))
			st = DAT_DTO_ERR_FLUSHED;
		comp_publish(qp, e, cpos, inl, ZD_SHM_COMP_DIRECT, (uint32_t)total, rst, pos, 0,
			     flags, comp_head);
	} else {
		uint8_t *dst;
		uint64_t off = 0;

		if (total > qp->r_eager_size || qp->eager_tail - eager_head >= qp->r_eager_slots)
			return ZD_SHM_RNR;
		dst = qp->reager + (qp->eager_tail & (qp->r_eager_slots - 1)) * qp->r_eager_size;
		for (DAT_COUNT i = 0; i < n; i++) {
			memcpy(dst + off, liov[i].iov_base, liov[i].iov_len);
			off += liov[i].iov_len;
		}
		qp->eager_tail++;
		atomic_store_explicit(&qp->remote->eager_tail, qp->eager_tail, memory_order_relaxed);
		comp_publish(qp, NULL, 0, 0, ZD_SHM_COMP_EAGER, (uint32_t)total, DAT_DTO_SUCCESS, 0,
			     0, flags, comp_head);
		st = eager_sent_status(qp, st);
	}
	if (!qp->rsrq)
		qp->msg_sent++;
	return st;
}

/* ---- IB extensions ---- */

/*
 * RDMA write with immediate data: the write exactly as exec_rdma does it,
 * then the immediate as a message without payload: it consumes the next
 * receive as a send would (RQ slot or SRQ buffer, or, none posted, an
 * eager slot the target matches with its next receive; no room at all:
 * RNR) and its entry announces DAT_IB_DTO_RECV_IMMED with the write's
 * length.  The entry's release store comes after the write's last store
 * (or process_vm_writev's return), so the target sees the data first.
 */
static __attribute__((noinline)) int exec_write_imm(struct zd_shm_qp *qp, DAT_COUNT n,
						    const DAT_LMR_TRIPLET *iov,
						    const DAT_RMR_TRIPLET *remote, uint32_t imm,
						    DAT_COMPLETION_FLAGS flags, uint64_t *done)
{
	struct zd_shm_rq_slot *slot = NULL;
	uint64_t eager_head, comp_head, pos = 0;
	uint32_t tag = 0;
	bool flushed = false;
	int st;

	/* Room for the immediate before the write: a request that meets RNR
	 * runs again whole when the target makes room, so it must not have
	 * written yet.  An eager slot is room enough whether or not a receive
	 * is posted; the target only ever adds room meanwhile. */
	if ((st = msg_room(qp, &eager_head, &comp_head)) != DAT_DTO_SUCCESS)
		return st;
	if (qp->eager_tail - eager_head >= qp->r_eager_slots)
		return ZD_SHM_RNR;
	if ((st = exec_rdma(qp, true, n, iov, remote, done)) != DAT_DTO_SUCCESS)
		return st;
	if (qp->eager_tail == eager_head) {
		slot = recv_claim(qp, &pos, &tag, &flushed);
		if (flushed)
			return DAT_DTO_ERR_FLUSHED;
	}
	if (slot) {
		/* Consumed, not written: the immediate lands in the entry. */
		if (ZD_UNLIKELY(!recv_filled(slot, pos, tag)))
			st = DAT_DTO_ERR_FLUSHED;
		comp_publish(qp, NULL, 0, 0, ZD_SHM_COMP_DIRECT | ZD_SHM_COMP_IMMED, (uint32_t)*done,
			     DAT_DTO_SUCCESS, pos, imm, flags, comp_head);
	} else {
		qp->eager_tail++;
		atomic_store_explicit(&qp->remote->eager_tail, qp->eager_tail, memory_order_relaxed);
		comp_publish(qp, NULL, 0, 0, ZD_SHM_COMP_EAGER | ZD_SHM_COMP_IMMED, (uint32_t)*done,
			     DAT_DTO_SUCCESS, 0, imm, flags, comp_head);
		st = eager_sent_status(qp, st);
	}
	if (!qp->rsrq)
		qp->msg_sent++;
	return st;
}

static uint64_t apply_fetch_add(uint64_t old, const void *arg, bool *store)
{
	*store = true;
	return old + ((const struct zd_shm_ext_args *)arg)->operand;
}

static uint64_t apply_cmp_swap(uint64_t old, const void *arg, bool *store)
{
	const struct zd_shm_ext_args *x = arg;

	*store = old == x->operand;
	return x->swap;
}

/* exec_atomic's remote half, inside its copy marks: the target's state,
 * its key, the atomic itself; the old value in *@old. */
static int atomic_remote(struct zd_shm_qp *qp, DAT_DTOS op, const DAT_RMR_TRIPLET *remote,
			 const struct zd_shm_ext_args *x, uint64_t *old)
{
	struct zd_soft_peer *p = qp->peer;
	struct zd_soft_mr_view v;
	int rc;

	if (atomic_load_explicit(&qp->remote->error, memory_order_relaxed))
		return DAT_DTO_ERR_FLUSHED;
	if (!zd_shm_mr_read(zd_shm_peer_ia(p)->mr, remote->rmr_context, &v) ||
	    !zd_soft_mr_allows(&v, remote->virtual_address, sizeof(*old),
			       DAT_IB_MEM_PRIV_REMOTE_ATOMIC, qp->r_pz_id))
		return DAT_DTO_ERR_REMOTE_ACCESS;
	rc = zd_soft_peer_atomic(p, &zd_shm_peer_ia(p)->atomic_lock,
				zd_soft_mr_chunk(&v, remote->virtual_address, sizeof(*old)),
				remote->virtual_address,
				op == (DAT_DTOS)DAT_IB_DTO_CMP_SWAP ? apply_cmp_swap : apply_fetch_add,
				x, old);
	if (rc != 0)
		return rc == -EACCES ? DAT_DTO_ERR_REMOTE_ACCESS  /* no ptrace rights */
				     : DAT_DTO_ERR_REMOTE_RESPONDER;  /* the peer is gone */
	return DAT_DTO_SUCCESS;
}

/*
 * Fetch-and-add, compare-and-swap on the target's 8-byte aligned word
 * (core checked the alignment and the segment sizes).  Checks as for RDMA,
 * but the target region needs DAT_IB_MEM_PRIV_REMOTE_ATOMIC.  The word is
 * read where it lies every time (no copy of it is kept anywhere): a CPU
 * atomic through the mapping when a chunk of the target's pool holds it,
 * else a read-modify-write under the target IA's atomic_lock
 * (zd_soft_peer_atomic), which every initiator of an atomic on such
 * memory takes.  The old value goes to the local segment, host order.
 */
static __attribute__((noinline)) int exec_atomic(struct zd_shm_qp *qp, DAT_DTOS op,
						 const DAT_LMR_TRIPLET *local,
						 const DAT_RMR_TRIPLET *remote,
						 const struct zd_shm_ext_args *x, uint64_t *done)
{
	uint64_t old;
	int st;

	if (!local_seg_ok(qp, local, DAT_MEM_PRIV_LOCAL_WRITE_FLAG))
		return DAT_DTO_ERR_LOCAL_PROTECTION;
	zd_shm_copy_begin(qp->remote);
	st = atomic_remote(qp, op, remote, x, &old);
	zd_shm_copy_end(qp->remote);
	if (st != DAT_DTO_SUCCESS)
		return st;
	memcpy((void *)(uintptr_t)local->virtual_address, &old, sizeof(old));
	*done = sizeof(old);
	return DAT_DTO_SUCCESS;
}

/* Executes one request from the caller's arrays (a post) or a queued copy;
 * @x: the extension posts' arguments (NULL for the DAT posts). */
static ZD_ALWAYS_INLINE int exec_op(struct zd_shm_qp *qp, DAT_DTOS op, DAT_COUNT n,
				    const DAT_LMR_TRIPLET *iov, const DAT_RMR_TRIPLET *remote,
				    const struct zd_shm_ext_args *x, DAT_COMPLETION_FLAGS flags,
				    uint64_t *done)
{
	*done = 0;
	if (ZD_UNLIKELY(atomic_load_explicit(&qp->error, memory_order_relaxed) || !qp->remote))
		return DAT_DTO_ERR_FLUSHED;
	if (op == DAT_DTO_SEND)
		return exec_send(qp, n, iov, flags, done);
	if (op == DAT_DTO_RDMA_WRITE)
		return exec_rdma(qp, true, n, iov, remote, done);
	if (op == DAT_DTO_RDMA_READ)
		return exec_rdma(qp, false, n, iov, remote, done);
	if (op == (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED)
		return exec_write_imm(qp, n, iov, remote, x->imm, flags, done);
	return exec_atomic(qp, op, iov, remote, x, done);
}

static __attribute__((noinline)) int exec_wr(struct zd_shm_qp *qp, const struct zd_shm_wr *wr,
					     uint64_t *done)
{
	return exec_op(qp, wr->op, wr->n, wr->iov, &wr->remote, &wr->ext, wr->flags, done);
}

/* ---- queued requests (RNR) ---- */

/* Asks the target to ring our doorbell when it makes room; true when it
 * may have made room already (then retry instead of waiting). */
static bool rnr_announce(struct zd_shm_qp *qp)
{
	struct zd_shm_qp_shared *r = qp->remote;

	if (!r || atomic_load_explicit(&r->rnr_wait, memory_order_relaxed))
		return false;
	atomic_store_explicit(&r->rnr_wait, 1, memory_order_relaxed);
	if (qp->rsrq)
		atomic_store_explicit(&qp->rsrq->rnr_wait, 1, memory_order_relaxed);
	/* seq_cst fence: pairs with the fence in zd_shm_qp_rnr_ring (Dekker
	 * on rnr_wait vs the room the target makes): the target sees our
	 * flag, or our retry sees its room. */
	atomic_thread_fence(memory_order_seq_cst);
	return true;
}

static void sq_list(struct zd_shm_qp *qp)
{
	if (qp->req_cq && !atomic_exchange(&qp->sq_listed, 1))
		atomic_fetch_add(&qp->req_cq->backlog, 1);
}

void zd_shm_qp_progress_sq(struct zd_shm_qp *qp)
{
	uint64_t head, tail;

	if (atomic_exchange_explicit(&qp->sq_busy, 1, memory_order_acquire))
		return;  /* another thread is at it */
	head = atomic_load_explicit(&qp->sq_head, memory_order_relaxed);
	/* acquire: pairs with the release store of sq_tail in sq_push. */
	tail = atomic_load_explicit(&qp->sq_tail, memory_order_acquire);
	while (head != tail) {
		const struct zd_shm_wr *wr = &qp->sq[head & (qp->sq_depth - 1)];
		uint64_t done = 0;
		int st = exec_wr(qp, wr, &done);

		if (st == ZD_SHM_RNR) {
			if (rnr_announce(qp))
				continue;  /* room appeared meanwhile: retry */
			break;
		}
		if (st != DAT_DTO_SUCCESS)
			qp_set_error(qp);
		req_complete(qp, wr->cookie, st, done, wr->op, wr->flags);
		head++;
		/* release: pairs with the acquire load of sq_head in sq_push:
		 * the slot was read before it is reused. */
		atomic_store_explicit(&qp->sq_head, head, memory_order_release);
	}
	if (head == tail && atomic_load(&qp->sq_listed)) {
		atomic_store(&qp->sq_listed, 0);
		atomic_fetch_sub(&qp->req_cq->backlog, 1);
		/* A push that raced the store above is listed again here or by
		 * its poster (the exchange in sq_list decides). */
		if (atomic_load(&qp->sq_tail) != head)
			sq_list(qp);
	}
	atomic_store_explicit(&qp->sq_busy, 0, memory_order_release);
}

static __attribute__((noinline)) DAT_RETURN
sq_push(struct zd_shm_qp *qp, DAT_DTOS op, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
	DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote, const struct zd_shm_ext_args *x,
	DAT_COMPLETION_FLAGS flags)
{
	uint64_t tail = atomic_load_explicit(&qp->sq_tail, memory_order_relaxed);
	struct zd_shm_wr *wr;

	if (tail - atomic_load_explicit(&qp->sq_head, memory_order_acquire) >= qp->sq_depth)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	wr = &qp->sq[tail & (qp->sq_depth - 1)];
	wr->op = op;
	wr->n = n;
	wr->cookie = cookie;
	wr->flags = flags;
	if (remote)
		wr->remote = *remote;
	if (x)
		wr->ext = *x;
	if (n > 0)
		memcpy(wr->iov, iov, (size_t)n * sizeof(*iov));
	/* release: pairs with the acquire load of sq_tail in progress_sq. */
	atomic_store_explicit(&qp->sq_tail, tail + 1, memory_order_release);
	sq_list(qp);
	zd_shm_qp_progress_sq(qp);
	return DAT_SUCCESS;
}

static ZD_ALWAYS_INLINE DAT_RETURN post_request(struct zd_ep *ep, DAT_DTOS op, DAT_COUNT n,
						 const DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
						 const DAT_RMR_TRIPLET *remote,
						 const struct zd_shm_ext_args *x,
						 DAT_COMPLETION_FLAGS flags)
{
	struct zd_shm_qp *qp = ep->dev_priv;
	uint64_t done;
	int st;

	if (ZD_UNLIKELY(!qp))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
	/* Requests queued (RNR) before this one: it waits behind them. */
	if (ZD_UNLIKELY(atomic_load_explicit(&qp->sq_tail, memory_order_relaxed) !=
			atomic_load_explicit(&qp->sq_head, memory_order_acquire)))
		return sq_push(qp, op, n, iov, cookie, remote, x, flags);
	/* Executes from the caller's arrays; copied only if it must wait. */
	st = exec_op(qp, op, n, iov, remote, x, flags, &done);
	if (ZD_UNLIKELY(st == ZD_SHM_RNR))
		return sq_push(qp, op, n, iov, cookie, remote, x, flags);
	if (ZD_UNLIKELY(st != DAT_DTO_SUCCESS))
		qp_set_error(qp);
	req_complete(qp, cookie, st, done, op, flags);
	return DAT_SUCCESS;
}

static ZD_ALWAYS_INLINE DAT_RETURN post_send(struct zd_ep *ep, DAT_COUNT n,
					      const DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
					      DAT_COMPLETION_FLAGS flags)
{
	return post_request(ep, DAT_DTO_SEND, n, iov, cookie, NULL, NULL, flags);
}

DAT_RETURN zd_shm_post_send(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			    DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	return post_send(ep, n, iov, cookie, flags);
}

/* dat_ep_post_send with the send inlined (zd_device_ops.dat_entries,
 * core/zd_dto_entry.h): no indirect call, and the EP's post counters
 * counted in the same function. */
DAT_RETURN zd_shm_dat_post_send(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	return zd_ep_post_send_entry(h, n, iov, cookie, flags, post_send);
}

static __attribute__((noinline)) DAT_RETURN
post_rdma_any(struct zd_ep *ep, bool write, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
	      DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags)
{
	if (write)
		return post_request(ep, DAT_DTO_RDMA_WRITE, n, iov, cookie, remote, NULL, flags);
	return post_request(ep, DAT_DTO_RDMA_READ, n, iov, cookie, remote, NULL, flags);
}

/* The rights a checked (local, remote) key pair grants this QP, for its
 * translation cache: both PZs the QP's, then what each key allows. */
static uint32_t xlat_rights(const struct zd_shm_qp *qp, const struct zd_soft_mr_view *lv,
			    const struct zd_soft_mr_view *rv)
{
	uint32_t ok = 0;

	if (lv->pz != qp->pz_id || rv->pz != qp->r_pz_id)
		return 0;
	if (rv->access & DAT_MEM_PRIV_REMOTE_WRITE_FLAG)
		ok |= ZD_SOFT_XLAT_WRITE;  /* the local side needs no right (ZD_SHM_LOCAL_READ) */
	if ((rv->access & DAT_MEM_PRIV_REMOTE_READ_FLAG) &&
	    (lv->access & DAT_MEM_PRIV_LOCAL_WRITE_FLAG))
		ok |= ZD_SOFT_XLAT_READ;
	return ok;
}

/* post_rdma's miss: both keys checked in full in their tables, the target
 * translated, the result cached for the next post (zd_soft_xlat.h).  Our
 * pointer to the target range, or NULL for whatever post_request must
 * handle (an error to report, a target only cross-memory attach reaches). */
static __attribute__((noinline)) void *rdma_translate(struct zd_shm_qp *qp, bool write,
						      const DAT_LMR_TRIPLET *iov,
						      const DAT_RMR_TRIPLET *remote, uint64_t len)
{
	const struct zd_soft_mr_entry *lt = qp->sia->sh->mr, *rt = zd_shm_peer_ia(qp->peer)->mr;
	struct zd_soft_mr_view lv, rv;
	struct zd_soft_xlat_fill f = {
		.lkey = iov->lmr_context, .rkey = remote->rmr_context,
		.le = &lt[iov->lmr_context & (ZD_SHM_MR_ENTRIES - 1)],
		.re = &rt[remote->rmr_context & (ZD_SHM_MR_ENTRIES - 1)],
		.lv = &lv, .rv = &rv, .raddr = remote->virtual_address,
	};

	if (!zd_soft_mr_read_seq(f.le, f.lkey, &lv, &f.lseq) ||
	    !zd_soft_mr_allows(&lv, iov->virtual_address, len,
			       write ? ZD_SHM_LOCAL_READ : DAT_MEM_PRIV_LOCAL_WRITE_FLAG, qp->pz_id) ||
	    !zd_soft_mr_read_seq(f.re, f.rkey, &rv, &f.rseq) ||
	    !zd_soft_mr_allows(&rv, f.raddr, len,
			       write ? DAT_MEM_PRIV_REMOTE_WRITE_FLAG : DAT_MEM_PRIV_REMOTE_READ_FLAG,
			       qp->r_pz_id))
		return NULL;
	f.ptr = zd_soft_peer_ptr_span(qp->peer, zd_soft_mr_chunk(&rv, f.raddr, len), f.raddr, len,
				      &f.rlo, &f.rhi);
	if (!f.ptr)
		return NULL;
	f.ok = xlat_rights(qp, &lv, &rv);
	zd_soft_xlat_put(&qp->xlat, &f);
	return f.ptr;
}

/*
 * The common RDMA: one segment of 1..max bytes, nothing queued, no error,
 * every check passing and a target memcpy reaches (same process, or a pool
 * chunk or adoption window we mapped).  Only reads until the copy:
 * whatever else (an error to report, no segment, several, a target only
 * process_vm_writev reaches) starts over in post_request, which makes the
 * same checks and reports.  Keeping this path free of the general one
 * keeps it short (few registers to save, no iovecs).  Back-to-back posts
 * on the same key pair take the translation cache: two seq loads instead
 * of two table reads and a mapping lookup (zd_soft_xlat.h has why that is
 * as current as the full check).
 */
static ZD_ALWAYS_INLINE DAT_RETURN post_rdma(struct zd_ep *ep, bool write, DAT_COUNT n,
					     const DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
					     const DAT_RMR_TRIPLET *remote,
					     DAT_COMPLETION_FLAGS flags)
{
	struct zd_shm_qp *qp = ep->dev_priv;
	struct zd_shm_qp_shared *r;
	uint64_t len;
	void *p;

	if (ZD_UNLIKELY(!qp || n != 1))
		goto any;
	len = iov->segment_length;
	r = qp->remote;
	/* acquire (sq_head): as in post_request. */
	if (ZD_UNLIKELY(atomic_load_explicit(&qp->sq_tail, memory_order_relaxed) !=
			atomic_load_explicit(&qp->sq_head, memory_order_acquire) ||
			atomic_load_explicit(&qp->error, memory_order_relaxed) || !r ||
			len - 1 >= ZD_SHM_MAX_RDMA || len > remote->segment_length))
		goto any;
	zd_shm_copy_begin(r);
	if (ZD_UNLIKELY(atomic_load_explicit(&r->error, memory_order_relaxed)))
		goto unmark;
	p = zd_soft_xlat_get(&qp->xlat, iov->lmr_context, iov->virtual_address,
			     remote->rmr_context, remote->virtual_address, len,
			     write ? ZD_SOFT_XLAT_WRITE : ZD_SOFT_XLAT_READ);
	if (ZD_UNLIKELY(!p)) {
		p = rdma_translate(qp, write, iov, remote, len);
		if (ZD_UNLIKELY(!p))
			goto unmark;
	}
	if (write)
		zd_soft_copy_to_peer(p, (const void *)(uintptr_t)iov->virtual_address, len);
	else
		memcpy((void *)(uintptr_t)iov->virtual_address, p, len);
	zd_shm_copy_end(r);
	req_complete(qp, cookie, DAT_DTO_SUCCESS, len,
		     write ? DAT_DTO_RDMA_WRITE : DAT_DTO_RDMA_READ, flags);
	return DAT_SUCCESS;
unmark:
	zd_shm_copy_end(r);
any:
	return post_rdma_any(ep, write, n, iov, cookie, remote, flags);
}

static ZD_ALWAYS_INLINE DAT_RETURN post_rdma_write(struct zd_ep *ep, DAT_COUNT n,
						   const DAT_LMR_TRIPLET *iov,
						   DAT_DTO_COOKIE cookie,
						   const DAT_RMR_TRIPLET *remote,
						   DAT_COMPLETION_FLAGS flags)
{
	return post_rdma(ep, true, n, iov, cookie, remote, flags);
}

DAT_RETURN zd_shm_post_rdma_write(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				  DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				  DAT_COMPLETION_FLAGS flags)
{
	return post_rdma_write(ep, n, iov, cookie, remote, flags);
}

/* dat_ep_post_rdma_write with the one-segment path above inlined
 * (zd_device_ops.dat_entries, core/zd_dto_entry.h): what a miss of the
 * translation cache, and anything else the hit path below leaves,
 * takes. */
static __attribute__((noinline)) DAT_RETURN
dat_post_rdma_write_full(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
			 const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags)
{
	return zd_ep_post_rdma_entry(h, n, iov, cookie, remote, flags, true, post_rdma_write);
}

/* A hit's signalled completion (or unsignalled: req_complete decides). */
static __attribute__((noinline)) DAT_RETURN rdma_write_done(const struct zd_ep *ep,
							     DAT_DTO_COOKIE cookie, uint64_t len,
							     DAT_COMPLETION_FLAGS flags)
{
	req_complete(ep->dev_priv, cookie, DAT_DTO_SUCCESS, len, DAT_DTO_RDMA_WRITE, flags);
	return DAT_SUCCESS;
}

/*
 * dat_ep_post_rdma_write, the message-rate path: the entry's checks, the
 * QP's, a translation cache hit, a copy of at most 16 bytes, the EP's
 * counters; then a suppressed post returns, a signalled one completes out
 * of line.  Every other way out is a tail call, so this calls nothing
 * (GCC 12 still saves six registers here: the hit path holds more values
 * than the scratch ones): what it does not do here (a miss, an error, a
 * queued request, a longer copy) the full path does from the start, with
 * the same checks (it finds the cache filled the second time).
 */
DAT_RETURN zd_shm_dat_post_rdma_write(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				      DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				      DAT_COMPLETION_FLAGS flags)
{
	struct zd_ep *ep = zd_obj_get(h, ZD_OBJ_EP);
	struct zd_shm_qp_shared *r;
	struct zd_shm_qp *qp;
	uint64_t len;
	void *p;

	if (ZD_UNLIKELY(!zd_rdma_fast_ok(ep, true, n, iov, remote, flags, true)))
		goto full;
	qp = ep->dev_priv;
	len = iov->segment_length;
	r = qp->remote;
	/* acquire (sq_head): as in post_request. */
	if (ZD_UNLIKELY(atomic_load_explicit(&qp->sq_tail, memory_order_relaxed) !=
			atomic_load_explicit(&qp->sq_head, memory_order_acquire) ||
			atomic_load_explicit(&qp->error, memory_order_relaxed) || !r ||
			len - 1 >= 16 || len > remote->segment_length))
		goto full;
	/* The copy inside its marks (zd_shm_copy.h); r found again through
	 * ep at the end (the fences between make those loads): fewer
	 * registers held across the hit. */
	zd_shm_copy_begin(r);
	p = atomic_load_explicit(&r->error, memory_order_relaxed)
		    ? NULL
		    : zd_soft_xlat_get(&qp->xlat, iov->lmr_context, iov->virtual_address,
				       remote->rmr_context, remote->virtual_address, len,
				       ZD_SOFT_XLAT_WRITE);
	if (ZD_UNLIKELY(!p)) {
		zd_shm_copy_end(((struct zd_shm_qp *)ep->dev_priv)->remote);
		goto full;
	}
	zd_soft_copy_to_peer(p, (const void *)(uintptr_t)iov->virtual_address, len);
	zd_shm_copy_end(((struct zd_shm_qp *)ep->dev_priv)->remote);
	zd_count_ep_post_bytes(&ep->cnt, ZD_POST_WRITE, len);
	if (flags & DAT_COMPLETION_SUPPRESS_FLAG)
		return DAT_SUCCESS;
	return rdma_write_done(ep, cookie, len, flags);
full:
	return dat_post_rdma_write_full(h, n, iov, cookie, remote, flags);
}

DAT_RETURN zd_shm_post_rdma_read(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				 DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				 DAT_COMPLETION_FLAGS flags)
{
	return post_rdma(ep, false, n, iov, cookie, remote, flags);
}

/* The IB extension posts (zd_device.h); the work is exec_write_imm's and
 * exec_atomic's, queued behind earlier requests like any DTO. */
DAT_RETURN zd_shm_post_rdma_write_imm(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				      DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				      uint32_t imm, DAT_COMPLETION_FLAGS flags)
{
	const struct zd_shm_ext_args x = { .imm = imm };

	return post_request(ep, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, n, iov, cookie, remote, &x,
			    flags);
}

DAT_RETURN zd_shm_post_atomic(struct zd_ep *ep, DAT_DTOS op, const DAT_LMR_TRIPLET *local,
			      DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
			      uint64_t operand, uint64_t swap, DAT_COMPLETION_FLAGS flags)
{
	const struct zd_shm_ext_args x = { .operand = operand, .swap = swap };

	return post_request(ep, op, 1, local, cookie, remote, &x, flags);
}

/* ---- receive ---- */

static void recv_flushed(struct zd_shm_qp *qp, DAT_DTO_COOKIE cookie, int st)
{
	zd_shm_recv_fail(qp, cookie, (DAT_DTO_COMPLETION_STATUS)st);
}

DAT_RETURN zd_shm_post_recv(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			    DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	struct zd_shm_qp *qp = ep->dev_priv;
	struct zd_shm_rq_slot *slot;
	uint64_t pos;

	if (ZD_UNLIKELY(!qp))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
	/* In error, a receive is still posted while messages the peer
	 * delivered before the error wait for one (zd_shm_qp_recv_settle);
	 * else it flushes at once, taking no position.  seq_cst fence:
	 * ordered after our load of error as the settle pairs want (a
	 * sender that missed the error published its entry before it). */
	if (ZD_UNLIKELY(atomic_load_explicit(&qp->error, memory_order_seq_cst))) {
		atomic_thread_fence(memory_order_seq_cst);
		if (!zd_shm_qp_msgs_waiting(qp)) {
			/* Receives posted before ours flush first (the
			 * reaper may not have settled them yet). */
			zd_shm_qp_flush_recvs(qp, false);
			recv_flushed(qp, cookie, DAT_DTO_ERR_FLUSHED);
			return DAT_SUCCESS;
		}
	}
	/* relaxed: this EP's poster is rq_posted's only writer. */
	pos = atomic_load_explicit(&qp->own->rq_posted, memory_order_relaxed);
	slot = &qp->rq[pos & (qp->rq_depth - 1)];
	/* acquire: pairs with the release that freed the slot in reap. */
	if (ZD_UNLIKELY((atomic_load_explicit(&slot->state, memory_order_acquire) & 0xf) !=
			ZD_SHM_SLOT_FREE))
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	if (ZD_UNLIKELY(!zd_shm_resolve_recv(qp->sia, qp->pz_id, n, iov, slot))) {
		qp_set_error(qp);
		recv_flushed(qp, cookie, DAT_DTO_ERR_LOCAL_PROTECTION);
		return DAT_SUCCESS;
	}
	qp->rq_cookie[pos & (qp->rq_depth - 1)] = cookie;
	if (ZD_LIKELY(qp->rq_first != NULL))
		qp->rq_first[pos & (qp->rq_depth - 1)] = (struct zd_shm_rq_first){
			n > 0 ? iov[0].virtual_address : 0, n > 0 ? iov[0].segment_length : 0 };
	/* release: pairs with the sender's acquire CAS of the state in
	 * recv_claim: the descriptor is visible first. */
	atomic_store_explicit(&slot->state, zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_POSTED),
			      memory_order_release);
	/* release: pairs with the acquire loads of rq_posted (UD senders,
	 * zd_shm_ud.c): the descriptor and its state are visible first. */
	atomic_store_explicit(&qp->own->rq_posted, pos + 1, memory_order_release);
	/* seq_cst fence: pairs with the seq_cst load of rq_posted in
	 * zd_shm_qp_flush_recvs (Dekker on error, zd_shm_qp_recv_settle): a
	 * concurrent flush either sees this receive or we see its error and
	 * settle ourselves.  It also orders rq_posted before the rnr_wait
	 * load below. */
	atomic_thread_fence(memory_order_seq_cst);
	if (ZD_UNLIKELY(atomic_load_explicit(&qp->own->rnr_wait, memory_order_relaxed)))
		zd_shm_qp_rnr_ring(qp);
	/* A flush came meanwhile (or was there, with messages waiting): our
	 * receive flushes once nothing waits for it. */
	if (ZD_UNLIKELY(atomic_load_explicit(&qp->error, memory_order_relaxed)))
		zd_shm_qp_recv_settle(qp);
	/* dat_ep_set_watermark armed: a slot scan, until it fires. */
	if (ZD_UNLIKELY(zd_ep_hwm_armed(ep)))
		zd_ep_soft_hwm_check(ep, zd_shm_qp_recv_held(qp));
	return DAT_SUCCESS;
}

void zd_shm_qp_rnr_ring(struct zd_shm_qp *qp)
{
	/* seq_cst fence: pairs with the one in rnr_announce; our room was
	 * published (release) before it. */
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&qp->own->rnr_wait, memory_order_relaxed))
		return;
	atomic_store_explicit(&qp->own->rnr_wait, 0, memory_order_relaxed);
	/* acquire: pairs with the release store of qp->remote in connect. */
	if (__atomic_load_n(&qp->remote, __ATOMIC_ACQUIRE) && qp->peer)
		zd_shm_peer_ring(zd_shm_peer_ia(qp->peer), ZD_SHM_RING_ALWAYS);
}
