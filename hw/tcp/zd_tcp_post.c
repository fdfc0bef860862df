/*
 * Posting on the tcp device: requests go into the QP's send queue (checked
 * local segments, resolved to addresses) and are transmitted at once as far
 * as the socket takes them; receives go into the receive queue or the SRQ.
 * No locks, no allocation: the queues are preallocated at create time, and
 * the per-segment key check is a lock-free key table lookup, or the
 * poster's memo of the last key it checked (zd_tcp_keymemo.h).
 */
#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "core/zd_ia.h"
#include "core/zd_ep.h"
#include "core/zd_srq.h"
#include "core/zd_mem_objs.h"
#include "core/zd_keys.h"
#include "evd/zd_evd.h"
#include "mem/zd_keytab.h"
#include "hw/tcp/zd_tcp.h"

/* Reading local memory needs no right (as with verbs); written memory
 * needs LOCAL_WRITE. */
#define ZD_TCP_LOCAL_READ 0u

static inline bool local_segs(struct zd_ia *ia, struct zd_tcp_keymemo *memo,
			      const struct zd_pz *pz, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			      uint32_t need, struct zd_tcp_seg *out, uint64_t *total)
{
	const uint64_t gen = zd_tcp_keymemo_gen(&((struct zd_tcp_ia *)ia->dev_priv)->lmr_gen);
	uint64_t sum = 0;

	for (DAT_COUNT i = 0; i < n; i++) {
		uint64_t len = iov[i].segment_length;

		out[i].addr = iov[i].virtual_address;
		out[i].len = len;
		if (len == 0)
			continue;
		/* core keys: an LMR's lkey is its rkey */
		if (ZD_UNLIKELY(!zd_tcp_keymemo_covers(memo, gen, ia, iov[i].lmr_context, pz, need,
						       iov[i].virtual_address, len)))
			return false;
		sum += len;
	}
	*total = sum;
	return true;
}

/* Appends request @op to the send queue and transmits what the socket
 * takes.  @imm is the immediate data of an RDMA_WRITE_IMMED, @operand and
 * @swap the operands of an atomic (ignored by the other ops: each caller
 * passes a constant @op, so they fold away). */
static inline DAT_RETURN post_request(struct zd_ep *ep, DAT_DTOS op, DAT_COUNT n,
				      const DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
				      const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags,
				      uint32_t imm, uint64_t operand, uint64_t swap)
{
	struct zd_tcp_qp *qp = ep->dev_priv;
	struct zd_ia *ia = ep->obj.ia;
	const bool atomic = zd_tcp_op_atomic(op);
	uint64_t tail, total = 0;
	struct zd_tcp_wr *wr;

	if (ZD_UNLIKELY(!qp))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
	if (ZD_UNLIKELY(n > ZD_TCP_MAX_SEGS))
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	tail = atomic_load_explicit(&qp->sq_tail, memory_order_relaxed);
	/* acquire: pairs with the holder's release store of sq_head: the
	 * entry we reuse was completed and is no longer read. */
	if (ZD_UNLIKELY(tail - atomic_load_explicit(&qp->sq_head, memory_order_acquire) >=
			qp->sq_depth))
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	wr = &qp->sq[tail & (qp->sq_depth - 1)];
	wr->op = op;
	wr->flags = flags;
	wr->cookie = cookie;
	wr->nseg = (uint32_t)n;
	wr->status = DAT_DTO_SUCCESS;
	wr->done = 0;
	/* An atomic's old value is written into its local segment, as a
	 * read's data is. */
	if (!local_segs(ia, &qp->sq_memo, ep->pz, n, iov,
			op == DAT_DTO_RDMA_READ || atomic ? DAT_MEM_PRIV_LOCAL_WRITE_FLAG
							  : ZD_TCP_LOCAL_READ,
			wr->seg, &total)) {
		wr->status = DAT_DTO_ERR_LOCAL_PROTECTION;
		total = 0;
	} else if (atomic) {
		total = ZD_TCP_ATOMIC_WORD;  /* core checked both sides hold 8 bytes */
	} else if (op == DAT_DTO_SEND ? total > ia->limits.max_message_size
		   : (total > remote->segment_length || total > ia->limits.max_rdma_size)) {
		wr->status = DAT_DTO_ERR_LOCAL_LENGTH;
		total = 0;
	}
	wr->total = total;
	if (remote) {
		wr->rkey = remote->rmr_context;
		wr->raddr = remote->virtual_address;
	}
	if (op == (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED) {
		wr->imm = imm;
	} else if (atomic) {
		wr->operands[0] = htole64(operand);
		wr->operands[1] = htole64(swap);
	}
	/* release: pairs with the holder's acquire load of sq_tail. */
	atomic_store_explicit(&qp->sq_tail, tail + 1, memory_order_release);
	zd_tcp_qp_progress(qp, ZD_TCP_W_TX);
	return DAT_SUCCESS;
}

DAT_RETURN zd_tcp_post_send(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			    DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	return post_request(ep, DAT_DTO_SEND, n, iov, cookie, NULL, flags, 0, 0, 0);
}

DAT_RETURN zd_tcp_post_rdma_write(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				  DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				  DAT_COMPLETION_FLAGS flags)
{
	return post_request(ep, DAT_DTO_RDMA_WRITE, n, iov, cookie, remote, flags, 0, 0, 0);
}

DAT_RETURN zd_tcp_post_rdma_read(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				 DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				 DAT_COMPLETION_FLAGS flags)
{
	return post_request(ep, DAT_DTO_RDMA_READ, n, iov, cookie, remote, flags, 0, 0, 0);
}

DAT_RETURN zd_tcp_post_rdma_write_imm(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				      DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				      uint32_t imm, DAT_COMPLETION_FLAGS flags)
{
	return post_request(ep, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, n, iov, cookie, remote,
			    flags, imm, 0, 0);
}

/* Core checked one local segment of 8 bytes or more and 8 remote bytes
 * at an aligned address; @op is DAT_IB_DTO_FETCH_ADD or _CMP_SWAP. */
DAT_RETURN zd_tcp_post_atomic(struct zd_ep *ep, DAT_DTOS op, const DAT_LMR_TRIPLET *local,
			      DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
			      uint64_t operand, uint64_t swap, DAT_COMPLETION_FLAGS flags)
{
	return post_request(ep, op, 1, local, cookie, remote, flags, 0, operand, swap);
}

DAT_RETURN zd_tcp_post_recv(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			    DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	struct zd_tcp_qp *qp = ep->dev_priv;
	struct zd_tcp_recv *r;
	uint64_t tail, total = 0;

	if (ZD_UNLIKELY(!qp))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
	if (ZD_UNLIKELY(n > ZD_TCP_MAX_SEGS))
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	tail = atomic_load_explicit(&qp->rq_tail, memory_order_relaxed);
	/* acquire: pairs with the holder's release store of rq_head. */
	if (ZD_UNLIKELY(tail - atomic_load_explicit(&qp->rq_head, memory_order_acquire) >=
			qp->rq_depth))
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	if (ZD_UNLIKELY(!local_segs(ep->obj.ia, &qp->rq_memo, ep->pz, n, iov,
				    DAT_MEM_PRIV_LOCAL_WRITE_FLAG,
				    qp->rq[tail & (qp->rq_depth - 1)].seg, &total))) {
		/* As the shm device: the receive completes in error and the
		 * QP goes to error. */
		zd_tcp_recv_fail(qp, cookie, DAT_DTO_ERR_LOCAL_PROTECTION);
		atomic_store(&qp->error, 1);
		zd_tcp_qp_progress(qp, ZD_TCP_W_FLUSH);
		return DAT_SUCCESS;
	}
	r = &qp->rq[tail & (qp->rq_depth - 1)];
	r->cookie = cookie;
	r->nseg = (uint32_t)n;
	r->total = total;
	/* seq_cst: pairs with the holder's seq_cst load of rq_tail in the
	 * flush (Dekker on error): a concurrent flush sees this receive, or
	 * we see the error below and ask for a flush ourselves. */
	atomic_store_explicit(&qp->rq_tail, tail + 1, memory_order_seq_cst);
	if (ZD_UNLIKELY(atomic_load_explicit(&qp->error, memory_order_seq_cst)))
		zd_tcp_qp_progress(qp, ZD_TCP_W_FLUSH);
	else if (ZD_UNLIKELY(atomic_load_explicit(&qp->rx_stalled, memory_order_relaxed) ||
			     atomic_load_explicit(&qp->eager_n, memory_order_relaxed)))
		/* A send waits for this receive. */
		zd_tcp_qp_progress(qp, ZD_TCP_W_RX | ZD_TCP_W_TX);
	return DAT_SUCCESS;
}

/* ---- shared receive queues ---- */

DAT_RETURN zd_tcp_srq_create(struct zd_srq *srq)
{
	struct zd_tcp_srq *s = calloc(1, sizeof(*s));
	uint32_t max = (uint32_t)ZD_MAX(srq->obj.ia->limits.max_recv_per_srq, 1), p = 16;

	if (!s)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	while (p < max)
		p <<= 1;
	s->depth = p;
	s->srq = srq;
	s->slots = calloc(p, sizeof(*s->slots));
	if (!s->slots) {
		free(s);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	srq->dev_priv = s;
	return DAT_SUCCESS;
}

DAT_RETURN zd_tcp_srq_resize(struct zd_srq *srq, uint32_t depth)
{
	struct zd_tcp_srq *s = srq->dev_priv;

	return depth <= s->depth ? DAT_SUCCESS
				 : DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
}

void zd_tcp_srq_destroy(struct zd_srq *srq)
{
	struct zd_tcp_srq *s = srq->dev_priv;

	if (!s)
		return;
	free(s->slots);
	free(s);
	srq->dev_priv = NULL;
}

DAT_RETURN zd_tcp_srq_post_recv(struct zd_srq *srq, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				DAT_DTO_COOKIE cookie)
{
	struct zd_tcp_srq *s = srq->dev_priv;
	uint64_t pos = atomic_load_explicit(&s->posted, memory_order_relaxed);
	struct zd_tcp_recv *r = &s->slots[pos & (s->depth - 1)];
	uint64_t total = 0;

	if (ZD_UNLIKELY(n > ZD_TCP_MAX_SEGS))
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	/* acquire: pairs with the takers' CAS of head (acq_rel): they copied
	 * the slot out before moving head past it. */
	if (ZD_UNLIKELY(pos - atomic_load_explicit(&s->head, memory_order_acquire) >=
			ZD_MIN((uint64_t)srq->max_recv_dtos, s->depth)))
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
	/* No EP owns the buffer yet, so a bad segment is refused here. */
	if (ZD_UNLIKELY(!local_segs(srq->obj.ia, &s->memo, srq->pz, n, iov,
				    DAT_MEM_PRIV_LOCAL_WRITE_FLAG,
				    r->seg, &total)))
		return DAT_ERROR(DAT_PROTECTION_VIOLATION, DAT_NO_SUBTYPE);
	r->cookie = cookie;
	r->nseg = (uint32_t)n;
	r->total = total;
	/* release: pairs with the acquire load of posted in zd_tcp_srq_take. */
	atomic_store_explicit(&s->posted, pos + 1, memory_order_release);
	/* QPs stalled for a buffer retry on their next progress (cq_poll). */
	return DAT_SUCCESS;
}

bool zd_tcp_srq_take(struct zd_tcp_srq *s, struct zd_tcp_recv *out)
{
	uint64_t h = atomic_load_explicit(&s->head, memory_order_acquire);

	for (;;) {
		/* acquire: pairs with the release store of posted. */
		uint64_t p = atomic_load_explicit(&s->posted, memory_order_acquire);

		if (h >= p)
			return false;
		/* Copy first: the poster cannot reuse slot h while head <= h. */
		*out = s->slots[h & (s->depth - 1)];
		if (atomic_compare_exchange_weak_explicit(&s->head, &h, h + 1,
				memory_order_acq_rel, memory_order_acquire))
			return true;
	}
}

void zd_tcp_srq_check_lw(struct zd_tcp_srq *s)
{
	zd_srq_check_lw(s->srq, atomic_load_explicit(&s->posted, memory_order_relaxed) -
				atomic_load_explicit(&s->head, memory_order_relaxed));
}
