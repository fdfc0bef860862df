/*
 * The receive side of a tcp QP (holder only): one recv fills the staging
 * buffer, each frame's header is checked and dispatched (rx_dispatch), and
 * its payload is placed where it belongs: a send into the next posted
 * receive (or SRQ buffer, or the eager buffer until one is posted), an
 * RDMA write into registered memory after the key check (with immediate
 * data: then the next receive completes with it), a read response into
 * the reader's segments; an RDMA read request is queued for zd_tcp_tx.c
 * to answer, an atomic executed and its answer queued likewise.  A large
 * payload is read straight into place.
 */
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "core/zd_cm.h"
#include "core/zd_ep.h"
#include "core/zd_keys.h"
#include "hw/soft/zd_soft_copy.h"
#include "hw/tcp/zd_tcp.h"

enum { RX_OK, RX_STALL, RX_BROKEN };

static void rx_segs(struct zd_tcp_qp *qp, const struct zd_tcp_seg *seg, uint32_t nseg,
		    uint64_t len)
{
	qp->rx_niov = 0;
	qp->rx_iov_i = 0;
	qp->rx_left = len;
	for (uint32_t i = 0; i < nseg && len; i++) {
		uint64_t n = ZD_MIN(seg[i].len, len);

		if (!n)
			continue;
		qp->rx_iov[qp->rx_niov].iov_base = (void *)(uintptr_t)seg[i].addr;
		qp->rx_iov[qp->rx_niov].iov_len = n;
		qp->rx_niov++;
		len -= n;
	}
	/* The tail (the last 8 bytes, hw/soft/zd_soft_copy.h) is an iovec of
	 * its own, placed after the rest: by the kernel after the iovecs
	 * before it (readv), or by zd_soft_store_tail (rx_copy). */
	if (qp->rx_niov && qp->rx_iov[qp->rx_niov - 1].iov_len > ZD_SOFT_TAIL) {
		struct iovec *v = &qp->rx_iov[qp->rx_niov - 1];

		v->iov_len -= ZD_SOFT_TAIL;
		qp->rx_iov[qp->rx_niov].iov_base = (char *)v->iov_base + v->iov_len;
		qp->rx_iov[qp->rx_niov].iov_len = ZD_SOFT_TAIL;
		qp->rx_niov++;
	}
	qp->rx_in_payload = qp->rx_left != 0;
}

/* The peer's key names a live LMR of ours in the QP's PZ granting @need
 * over [addr, addr+len) (the holder's memo answers a repeated key). */
static bool rx_key_covers(struct zd_tcp_qp *qp, uint32_t rkey, uint32_t need, uint64_t raddr,
			  uint64_t len)
{
	return zd_tcp_keymemo_covers(&qp->rx_memo, zd_tcp_keymemo_gen(&qp->tia->lmr_gen),
				     qp->ep->obj.ia, rkey, qp->ep->pz, need, raddr, len);
}

/*
 * A remote write's bytes are placed (a memcpy from staging, or a readv
 * straight into the region) between rx_place_begin and rx_place_end.  The
 * mark goes odd, then a full fence, then the IA's LMR generation is read:
 * either the deregistration that moved the generation sees the mark and
 * waits for it to move (zd_tcp_mr_deregister), or we see the new
 * generation and check the rest of the range again; gone, the rest of
 * the payload is read and dropped and the write NAKed (rx_dropped).  So
 * once dat_lmr_free returns, nothing of a write lands in that memory.
 */
static void rx_place_begin(struct zd_tcp_qp *qp)
{
	uint64_t g;

	/* relaxed: we are its only writer (the holder) */
	atomic_store_explicit(&qp->rx_placing,
			      atomic_load_explicit(&qp->rx_placing, memory_order_relaxed) | 1,
			      memory_order_relaxed);
	/* seq_cst fence: pairs with zd_tcp_mr_deregister's (Dekker). */
	atomic_thread_fence(memory_order_seq_cst);
	g = zd_tcp_keymemo_gen(&qp->tia->lmr_gen);
	if (ZD_LIKELY(g == qp->rx_gen) || qp->rx_discard)
		return;
	if (rx_key_covers(qp, le32toh(qp->rx_hdr.rkey), DAT_MEM_PRIV_REMOTE_WRITE_FLAG,
			  (uint64_t)(uintptr_t)qp->rx_iov[qp->rx_iov_i].iov_base, qp->rx_left))
		qp->rx_gen = g;
	else
		qp->rx_discard = true;
}

static void rx_place_end(struct zd_tcp_qp *qp)
{
	/* release: pairs with the deregistration's acquire load: the bytes
	 * placed are in memory before it sees the mark move. */
	atomic_store_explicit(&qp->rx_placing,
			      atomic_load_explicit(&qp->rx_placing, memory_order_relaxed) + 1,
			      memory_order_release);
}

/* A remote write whose range a deregistration took away while its bytes
 * came: the rest was dropped.  NAKed as a key that failed its check is
 * (the connection breaks); the receive a write with immediate data took
 * completes flushed. */
static void rx_dropped(struct zd_tcp_qp *qp)
{
	qp->rx_discard = false;
	qp->rx_remote = false;
	if (qp->rx_kind == ZD_TCP_RX_WRITE_IMM)
		zd_tcp_recv_complete(qp, qp->rx_recv.cookie, DAT_DTO_ERR_FLUSHED, 0);
	qp->rx_kind = ZD_TCP_RX_NONE;
	qp->rx_hgot = 0;
	zd_log_rate_limited("tcp: an RDMA write's target memory was deregistered while its bytes "
			    "came: the rest dropped, the write failed (remote access)");
	zd_tcp_qp_nak(qp, le32toh(qp->rx_hdr.seq), DAT_DTO_ERR_REMOTE_ACCESS);
}

/* Position in the send queue of request @seq if sent and not completed. */
static bool sq_pos(struct zd_tcp_qp *qp, uint32_t seq, uint64_t *pos)
{
	return zd_tcp_seq_find(seq, qp->sq_base,
			       atomic_load_explicit(&qp->sq_head, memory_order_relaxed), qp->sq_tx,
			       pos);
}

/* The next posted receive (RQ or SRQ) into @out; false if none. */
static bool take_recv(struct zd_tcp_qp *qp, struct zd_tcp_recv *out)
{
	uint64_t head;

	if (qp->srq)
		return zd_tcp_srq_take(qp->srq, out);
	head = atomic_load_explicit(&qp->rq_head, memory_order_relaxed);
	/* acquire: pairs with the (seq_cst) store of rq_tail in post_recv. */
	if (head >= atomic_load_explicit(&qp->rq_tail, memory_order_acquire))
		return false;
	*out = qp->rq[head & (qp->rq_depth - 1)];
	/* release: pairs with the poster's acquire load of rq_head. */
	atomic_store_explicit(&qp->rq_head, head + 1, memory_order_release);
	return true;
}

/* Early sends (and writes with immediate data) into the receives posted
 * since, in order. */
void zd_tcp_eager_match(struct zd_tcp_qp *qp)
{
	while (qp->eager_head != qp->eager_tail) {
		uint32_t i = qp->eager_head % ZD_TCP_EAGER_SLOTS, len = qp->eager[i].len, off = 0;
		const uint8_t *src = qp->eager_buf + (size_t)i * ZD_TCP_EAGER_SIZE;
		struct zd_tcp_recv r;

		if (!take_recv(qp, &r))
			break;
		qp->eager_head++;
		if (qp->eager[i].write_imm) {
			/* Its data is in place already; the receive's buffer
			 * is not written, whatever its size. */
			zd_tcp_recv_complete_imm(qp, r.cookie, len, qp->eager[i].imm);
		} else if (len > r.total) {
			zd_tcp_recv_complete(qp, r.cookie, DAT_DTO_ERR_LOCAL_LENGTH, 0);
			ZD_TCP_QP_WHY(qp, "early send longer than its receive");
			zd_tcp_qp_break(qp);
			return;
		} else {
			for (uint32_t k = 0; k < r.nseg && off < len; k++) {
				uint32_t n = (uint32_t)ZD_MIN(r.seg[k].len, (uint64_t)(len - off));

				memcpy((void *)(uintptr_t)r.seg[k].addr, src + off, n);
				off += n;
			}
			zd_tcp_recv_complete(qp, r.cookie, DAT_DTO_SUCCESS, len);
		}
		if (qp->srq)
			zd_tcp_srq_check_lw(qp->srq);
	}
	atomic_store_explicit(&qp->eager_n, qp->eager_tail - qp->eager_head, memory_order_relaxed);
}

/* The atomic of the frame in rx_hdr on @word (8-byte aligned, checked),
 * with the operands in rx_operands; returns the word's earlier value.
 * A CPU atomic is all the atomicity a tcp target needs: no other process
 * maps its memory, so every atomic aimed at this word, from any connection
 * or host, is executed right here by this process's CPU -- by whichever
 * thread holds that QP (the IA's thread, or a consumer polling another
 * EVD), several QPs at once -- and one locked read-modify-write makes any
 * two of them, and the consumer's own atomics on the word, atomic with
 * each other.  Per connection they run in arrival order (frames are
 * handled in order). */
static uint64_t atomic_execute(struct zd_tcp_qp *qp, uint64_t *word)
{
	uint64_t operand = le64toh(qp->rx_operands[0]);

	if (qp->rx_hdr.op == ZD_TCP_OP_FETCH_ADD)
		return __atomic_fetch_add(word, operand, __ATOMIC_SEQ_CST);
	/* CMP_SWAP: on a mismatch `operand` becomes the word's value; on a
	 * match it was the word's value. */
	__atomic_compare_exchange_n(word, &operand, le64toh(qp->rx_operands[1]), false,
				    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	return operand;
}

static void rx_finish(struct zd_tcp_qp *qp)
{
	switch (qp->rx_kind) {
	case ZD_TCP_RX_NONE:
		break;
	case ZD_TCP_RX_RECV:
		/* No ACK for a send (its sender completed it already): one
		 * frame and one system call less per message each way. */
		zd_tcp_recv_complete(qp, qp->rx_recv.cookie, DAT_DTO_SUCCESS,
				     le32toh(qp->rx_hdr.len));
		if (qp->srq)
			zd_tcp_srq_check_lw(qp->srq);
		break;
	case ZD_TCP_RX_WRITE:
		qp->ack_pending = true;
		qp->ack_seq = le32toh(qp->rx_hdr.seq);
		break;
	case ZD_TCP_RX_READ_RESP:
		qp->sq[qp->rx_wr & (qp->sq_depth - 1)].done = 1;
		break;
	case ZD_TCP_RX_EAGER:
		qp->eager_tail++;
		atomic_store_explicit(&qp->eager_n, qp->eager_tail - qp->eager_head,
				      memory_order_relaxed);
		break;
	case ZD_TCP_RX_WRITE_IMM:
		/* The data is placed (its tail last): now its receive. */
		qp->ack_pending = true;
		qp->ack_seq = le32toh(qp->rx_hdr.seq);
		zd_tcp_recv_complete_imm(qp, qp->rx_recv.cookie, le32toh(qp->rx_hdr.len),
					 le32toh(qp->rx_hdr.imm));
		if (qp->srq)
			zd_tcp_srq_check_lw(qp->srq);
		break;
	case ZD_TCP_RX_WRITE_IMM_EARLY:
		/* Placed; its receive completes when one is posted (the
		 * initiator's write completes now, as an early send's did). */
		qp->ack_pending = true;
		qp->ack_seq = le32toh(qp->rx_hdr.seq);
		qp->eager_tail++;
		atomic_store_explicit(&qp->eager_n, qp->eager_tail - qp->eager_head,
				      memory_order_relaxed);
		break;
	case ZD_TCP_RX_ATOMIC: {
		/* rx_dispatch made room for the answer and checked the word. */
		uint32_t i = qp->resp_tail++ % ZD_TCP_RESP_DEPTH;

		qp->resp[i].op = ZD_TCP_OP_ATOMIC_RESP;
		qp->resp[i].seq = le32toh(qp->rx_hdr.seq);
		qp->resp[i].value =
			atomic_execute(qp, (uint64_t *)(uintptr_t)le64toh(qp->rx_hdr.raddr));
		break;
	}
	}
	qp->rx_kind = ZD_TCP_RX_NONE;
	qp->rx_hgot = 0;
}

/* A full header is in rx_hdr: check it and set up what follows. */
static int rx_dispatch(struct zd_tcp_qp *qp)
{
	const struct zd_tcp_hdr *h = &qp->rx_hdr;
	const struct zd_tcp_wire_limits lim = {
		.token = qp->token,
		.expect_seq = qp->rx_expect,
		.max_payload = ZD_TCP_MAX_PAYLOAD,
		.hello_rcvd = qp->hello_rcvd,
		.carried = qp->carried,
	};
	enum zd_tcp_frame_verdict v = zd_tcp_frame_check(h, &lim);
	uint32_t seq = le32toh(h->seq), len = le32toh(h->len);
	uint32_t rkey = le32toh(h->rkey), rlen = le32toh(h->rlen);
	uint64_t raddr = le64toh(h->raddr), pos, gen;
	struct zd_tcp_wr *wr;
	const char *why = "bad frame";

	if (ZD_UNLIKELY(v != ZD_TCP_FRAME_OK)) {
		why = zd_tcp_frame_verdict_str(v);
		/* Before its HELLO the peer is not proven ours (wire.h). */
		if (!qp->hello_rcvd)
			goto foreign;
		goto bad;
	}
	if (!qp->hello_rcvd) {
		qp->hello_rcvd = true;
		/* Proven: the listener is no longer needed. */
		zd_tcp_fd_close(qp, &qp->lis_fd);
		qp->rx_hgot = 0;
		return RX_OK;
	}
	/* zd_tcp_frame_check did the seq, len and rlen rules per op. */
	switch (h->op) {
	case ZD_TCP_OP_CM:
		/* The peer's CM, in stream order (after the data before it). */
		zd_cm_dev_frame(qp->ep, rlen, le64toh(h->value));
		qp->rx_hgot = 0;
		return RX_OK;
	case ZD_TCP_OP_SEND:
		if (qp->eager_head != qp->eager_tail || !take_recv(qp, &qp->rx_recv)) {
			/* No receive for it (yet): early sends wait in order. */
			uint32_t i = qp->eager_tail % ZD_TCP_EAGER_SLOTS;
			struct zd_tcp_seg es;

			if (len > ZD_TCP_EAGER_SIZE ||
			    qp->eager_tail - qp->eager_head >= ZD_TCP_EAGER_SLOTS)
				return RX_STALL;
			qp->eager[i].len = len;
			qp->eager[i].seq = seq;
			qp->eager[i].write_imm = false;
			es.addr = (uint64_t)(uintptr_t)(qp->eager_buf + (size_t)i * ZD_TCP_EAGER_SIZE);
			es.len = len;
			qp->rx_expect++;
			qp->rx_kind = ZD_TCP_RX_EAGER;
			rx_segs(qp, &es, 1, len);
			return RX_OK;
		}
		qp->rx_expect++;
		qp->rx_kind = ZD_TCP_RX_RECV;
		if (len > qp->rx_recv.total) {
			zd_tcp_recv_complete(qp, qp->rx_recv.cookie, DAT_DTO_ERR_LOCAL_LENGTH, 0);
			qp->rx_kind = ZD_TCP_RX_NONE;
			zd_tcp_qp_nak(qp, seq, DAT_DTO_ERR_REMOTE_RESPONDER);
			return RX_BROKEN;
		}
		rx_segs(qp, qp->rx_recv.seg, qp->rx_recv.nseg, len);
		return RX_OK;
	case ZD_TCP_OP_RDMA_WRITE:
		qp->rx_expect++;
		/* The generation before the check (rx_place_begin). */
		gen = zd_tcp_keymemo_gen(&qp->tia->lmr_gen);
		/* Zero bytes touch no memory: no rkey check, as on InfiniBand
		 * (MPI signals with zero-byte writes with immediate, rkey 0). */
		if (len && !rx_key_covers(qp, rkey, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, raddr, len)) {
			zd_tcp_qp_nak(qp, seq, DAT_DTO_ERR_REMOTE_ACCESS);
			return RX_BROKEN;
		}
		qp->rx_kind = ZD_TCP_RX_WRITE;
		{
			struct zd_tcp_seg s = { .addr = raddr, .len = len };

			rx_segs(qp, &s, 1, len);
		}
		qp->rx_remote = len != 0;
		qp->rx_gen = gen;
		return RX_OK;
	case ZD_TCP_OP_WRITE_IMM:
		/* An RDMA_WRITE's checks; then, before any byte is placed, the
		 * receive it consumes: the next posted one, or an eager slot
		 * behind the early sends (none free: stall, as a send). */
		gen = zd_tcp_keymemo_gen(&qp->tia->lmr_gen);
		if (len && !rx_key_covers(qp, rkey, DAT_MEM_PRIV_REMOTE_WRITE_FLAG, raddr, len)) {
			qp->rx_expect++;
			zd_tcp_qp_nak(qp, seq, DAT_DTO_ERR_REMOTE_ACCESS);
			return RX_BROKEN;
		}
		if (qp->eager_head != qp->eager_tail || !take_recv(qp, &qp->rx_recv)) {
			uint32_t i = qp->eager_tail % ZD_TCP_EAGER_SLOTS;

			if (qp->eager_tail - qp->eager_head >= ZD_TCP_EAGER_SLOTS)
				return RX_STALL;
			qp->eager[i].len = len;
			qp->eager[i].seq = seq;
			qp->eager[i].imm = le32toh(h->imm);
			qp->eager[i].write_imm = true;
			qp->rx_kind = ZD_TCP_RX_WRITE_IMM_EARLY;
		} else {
			qp->rx_kind = ZD_TCP_RX_WRITE_IMM;
		}
		qp->rx_expect++;
		{
			struct zd_tcp_seg s = { .addr = raddr, .len = len };

			rx_segs(qp, &s, 1, len);
		}
		qp->rx_remote = len != 0;
		qp->rx_gen = gen;
		return RX_OK;
	case ZD_TCP_OP_FETCH_ADD:
	case ZD_TCP_OP_CMP_SWAP:
		if (qp->resp_tail - qp->resp_head >= ZD_TCP_RESP_DEPTH)
			return RX_STALL;  /* answers pile up: stop reading */
		qp->rx_expect++;
		/* zd_tcp_frame_check: aligned, and the operands' length */
		if (!rx_key_covers(qp, rkey, DAT_IB_MEM_PRIV_REMOTE_ATOMIC, raddr,
				   ZD_TCP_ATOMIC_WORD)) {
			zd_tcp_qp_nak(qp, seq, DAT_DTO_ERR_REMOTE_ACCESS);
			return RX_BROKEN;
		}
		qp->rx_kind = ZD_TCP_RX_ATOMIC;
		{
			struct zd_tcp_seg s = { .addr = (uint64_t)(uintptr_t)qp->rx_operands,
						.len = len };

			rx_segs(qp, &s, 1, len);
		}
		return RX_OK;
	case ZD_TCP_OP_READ_REQ:
		if (qp->resp_tail - qp->resp_head >= ZD_TCP_RESP_DEPTH)
			return RX_STALL;  /* answers pile up: stop reading */
		qp->rx_expect++;
		if (rlen && !rx_key_covers(qp, rkey, DAT_MEM_PRIV_REMOTE_READ_FLAG, raddr, rlen)) {
			zd_tcp_qp_nak(qp, seq, DAT_DTO_ERR_REMOTE_ACCESS);
			return RX_BROKEN;
		}
		{
			uint32_t i = qp->resp_tail++ % ZD_TCP_RESP_DEPTH;

			qp->resp[i].op = ZD_TCP_OP_READ_RESP;
			qp->resp[i].seq = seq;
			qp->resp[i].len = rlen;
			qp->resp[i].addr = raddr;
		}
		qp->rx_hgot = 0;
		return RX_OK;
	case ZD_TCP_OP_READ_RESP:
		if (!sq_pos(qp, seq, &pos))
			goto bad;
		wr = &qp->sq[pos & (qp->sq_depth - 1)];
		if (wr->op != DAT_DTO_RDMA_READ || wr->done || len != wr->total)
			goto bad;
		qp->rx_kind = ZD_TCP_RX_READ_RESP;
		qp->rx_wr = pos;
		rx_segs(qp, wr->seg, wr->nseg, len);
		return RX_OK;
	case ZD_TCP_OP_ATOMIC_RESP:
		if (!sq_pos(qp, seq, &pos))
			goto bad;
		wr = &qp->sq[pos & (qp->sq_depth - 1)];
		if (!zd_tcp_op_atomic(wr->op) || wr->done)
			goto bad;
		{
			/* The old value, host order, into the local segment
			 * (checked with LOCAL_WRITE at post time; no alignment
			 * asked of it). */
			uint64_t old = le64toh(h->value);

			memcpy((void *)(uintptr_t)wr->seg[0].addr, &old, sizeof(old));
		}
		wr->done = 1;
		qp->rx_hgot = 0;
		return RX_OK;
	case ZD_TCP_OP_ACK:
		/* Any request sent on this connection (sends may have
		 * completed already), within half the seq space. */
		if (!zd_tcp_seq_find(seq, qp->sq_base,
				     qp->sq_tx - ZD_MIN(qp->sq_tx - qp->sq_base, (uint64_t)1 << 31),
				     qp->sq_tx, &pos))
			goto bad;
		if (pos + 1 > qp->sq_acked)
			qp->sq_acked = pos + 1;
		qp->rx_hgot = 0;
		return RX_OK;
	case ZD_TCP_OP_NAK:
		if (!sq_pos(qp, seq, &pos))
			goto bad;
		/* The target executes in order: everything before succeeded. */
		if (pos > qp->sq_acked)
			qp->sq_acked = pos;
		zd_tcp_sq_complete(qp);
		wr = &qp->sq[pos & (qp->sq_depth - 1)];
		wr->status = rlen >= DAT_DTO_ERR_LOCAL_LENGTH && rlen <= DAT_DTO_ERR_PARTIAL_PACKET &&
			     rlen != DAT_DTO_ERR_FLUSHED ? rlen : DAT_DTO_ERR_REMOTE_RESPONDER;
		ZD_TCP_QP_WHY(qp, "NAK received");
		zd_tcp_qp_break(qp);
		return RX_BROKEN;
	default:
		goto bad;  /* not reached: zd_tcp_frame_check refused the op */
	}
foreign:
	if (!qp->connector && qp->lis_fd >= 0) {
		/* Not our peer: drop that socket and keep listening. */
		zd_tcp_fd_close(qp, &qp->fd);
		zd_tcp_qp_set_cstate(qp, ZD_TCP_LISTEN);
		qp->rx_hgot = 0;
		qp->rx_off = qp->rx_end = 0;
		return RX_BROKEN;
	}
bad:
	ZD_TCP_QP_WHY(qp, why);
	zd_tcp_qp_break_violation(qp);
	return RX_BROKEN;
}

/* Bytes came in: a poll that saw them was not idle (cq_poll). */
static inline void rx_moved(struct zd_tcp_qp *qp)
{
	atomic_store_explicit(&qp->rx_moves,
			      atomic_load_explicit(&qp->rx_moves, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

/* One recv into the empty staging buffer: a small frame's header and
 * payload, and the frames behind it, in one system call. */
static ssize_t rx_fill(struct zd_tcp_qp *qp)
{
	ssize_t n = recv(qp->fd, qp->rx_buf, ZD_TCP_RX_STAGE, MSG_DONTWAIT);

	qp->rx_off = 0;
	qp->rx_end = n > 0 ? (uint32_t)n : 0;
	if (n > 0)
		rx_moved(qp);
	return n;
}

/* The payload iovecs advance by @n bytes just placed. */
static void rx_advance(struct zd_tcp_qp *qp, size_t n)
{
	qp->rx_left -= n;
	while (n > 0) {
		struct iovec *v = &qp->rx_iov[qp->rx_iov_i];

		if (n >= v->iov_len) {
			n -= v->iov_len;
			qp->rx_iov_i++;
		} else {
			v->iov_base = (char *)v->iov_base + n;
			v->iov_len -= n;
			n = 0;
		}
	}
}

/* Places up to @n staged payload bytes.  The payload's tail is its own
 * iovec (rx_segs), stored after the rest (zd_soft_store_tail), so a target
 * polling it finds the rest in place. */
static void rx_copy(struct zd_tcp_qp *qp, uint32_t n)
{
	const uint8_t *src = qp->rx_buf + qp->rx_off;

	qp->rx_off += n;
	while (n > 0) {
		struct iovec *v = &qp->rx_iov[qp->rx_iov_i];
		uint32_t k = (uint32_t)ZD_MIN((size_t)n, v->iov_len);

		if (ZD_UNLIKELY(qp->rx_discard))
			;  /* dropped (rx_place_begin) */
		else if (qp->rx_iov_i + 1 == qp->rx_niov)
			zd_soft_store_tail(v->iov_base, src, k);  /* k <= ZD_SOFT_TAIL */
		else
			memcpy(v->iov_base, src, k);
		src += k;
		n -= k;
		rx_advance(qp, k);
	}
}

void zd_tcp_rx_progress(struct zd_tcp_qp *qp)
{
	if (qp->eager_head != qp->eager_tail) {
		zd_tcp_eager_match(qp);
		if (atomic_load_explicit(&qp->error, memory_order_relaxed))
			return;
	}
	/* Staged frames are all taken before returning (arm only watches the
	 * socket); the batch bounds the system calls.  A read that brought
	 * less than it asked for emptied the socket: reading again would cost
	 * a system call (EAGAIN, at the end of every message's critical path)
	 * for bytes that arrive later, and a later poll or the armed socket
	 * finds those. */
	bool drained = false;

	for (int frames = 0;;) {
		uint32_t avail = qp->rx_end - qp->rx_off;
		ssize_t n;

		if (!qp->rx_in_payload) {
			int r;

			if (qp->rx_hgot < sizeof(qp->rx_hdr)) {
				uint32_t k = ZD_MIN(avail, (uint32_t)sizeof(qp->rx_hdr) - qp->rx_hgot);

				if (k == 0) {
					if (frames >= ZD_TCP_RX_BATCH || drained)
						return;
					n = rx_fill(qp);
					if (n <= 0)
						goto io;
					drained = n < ZD_TCP_RX_STAGE;
					continue;
				}
				memcpy((char *)&qp->rx_hdr + qp->rx_hgot, qp->rx_buf + qp->rx_off, k);
				qp->rx_off += k;
				qp->rx_hgot += k;
				if (qp->rx_hgot < sizeof(qp->rx_hdr))
					continue;
			}
			r = rx_dispatch(qp);
			atomic_store_explicit(&qp->rx_stalled, r == RX_STALL, memory_order_relaxed);
			if (r != RX_OK)
				return;
			if (!qp->rx_in_payload) {
				if (qp->rx_kind != ZD_TCP_RX_NONE)
					rx_finish(qp);
				qp->rx_hgot = 0;
				frames++;
			}
			continue;
		}
		if (avail) {
			if (qp->rx_remote)
				rx_place_begin(qp);
			rx_copy(qp, (uint32_t)ZD_MIN((uint64_t)avail, qp->rx_left));
			if (qp->rx_remote)
				rx_place_end(qp);
		} else if (frames >= ZD_TCP_RX_BATCH || drained) {
			return;
		} else if (qp->rx_left < ZD_TCP_RX_DIRECT || qp->rx_discard) {
			n = rx_fill(qp);
			if (n <= 0)
				goto io;
			drained = n < ZD_TCP_RX_STAGE;
			continue;
		} else {
			/* Large: straight into the destination, no copy. */
			if (qp->rx_remote) {
				rx_place_begin(qp);
				if (ZD_UNLIKELY(qp->rx_discard)) {
					rx_place_end(qp);
					continue;  /* the rest through staging, dropped */
				}
			}
			n = readv(qp->fd, qp->rx_iov + qp->rx_iov_i,
				  (int)(qp->rx_niov - qp->rx_iov_i));
			if (qp->rx_remote)
				rx_place_end(qp);
			if (n <= 0)
				goto io;
			rx_moved(qp);
			drained = (uint64_t)n < qp->rx_left;
			rx_advance(qp, (size_t)n);
		}
		if (qp->rx_left == 0) {
			qp->rx_in_payload = false;
			if (ZD_UNLIKELY(qp->rx_discard)) {
				rx_dropped(qp);
				return;
			}
			qp->rx_remote = false;
			rx_finish(qp);
			frames++;
		}
		continue;
io:
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		/* EOF or a socket error */
		ZD_TCP_QP_WHY(qp, n == 0 ? "EOF" : "receive failed");
		if (!qp->hello_rcvd && !qp->connector && qp->lis_fd >= 0) {
			zd_tcp_fd_close(qp, &qp->fd);
			zd_tcp_qp_set_cstate(qp, ZD_TCP_LISTEN);
			qp->rx_hgot = 0;
			qp->rx_off = qp->rx_end = 0;
			return;
		}
		if (n == 0)
			zd_tcp_qp_break_eof(qp);
		else
			zd_tcp_qp_break(qp);
		return;
	}
}
