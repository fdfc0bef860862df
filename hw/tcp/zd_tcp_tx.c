/*
 * The send side of a tcp QP (holder only): the next frame is built (HELLO,
 * a CM frame whose turn came, ACK, read or atomic response, or the next
 * request of the send queue) and
 * written with one send (a small frame, copied whole into one buffer) or
 * one sendmsg (header and segments in one iovec), the rest on the next
 * progress; a refused request is NAKed; requests complete in post
 * order once done (a send when the kernel has it, an RDMA write, with
 * immediate data or not, when ACKed, an RDMA read or an atomic when its
 * response landed).
 */
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "core/zd_ep.h"
#include "hw/tcp/zd_tcp.h"

static void hdr_init(struct zd_tcp_hdr *h, unsigned op, uint32_t seq)
{
	memset(h, 0, sizeof(*h));
	h->magic = htole32(ZD_TCP_WIRE_MAGIC);
	h->version = ZD_TCP_WIRE_VERSION;
	h->op = (uint8_t)op;
	h->seq = htole32(seq);
}

static void tx_bytes(struct zd_tcp_qp *qp, const void *p, uint64_t len)
{
	qp->tx_iov[qp->tx_niov].iov_base = (void *)(uintptr_t)p;
	qp->tx_iov[qp->tx_niov].iov_len = len;
	qp->tx_niov++;
	qp->tx_left += len;
}

static void tx_segs(struct zd_tcp_qp *qp, const struct zd_tcp_seg *seg, uint32_t nseg)
{
	for (uint32_t i = 0; i < nseg; i++)
		if (seg[i].len) {
			qp->tx_iov[qp->tx_niov].iov_base = (void *)(uintptr_t)seg[i].addr;
			qp->tx_iov[qp->tx_niov].iov_len = seg[i].len;
			qp->tx_niov++;
			qp->tx_left += seg[i].len;
		}
}

/* A CM frame is queued (qp_cm_send) and its turn came: the requests
 * posted before it went out. */
static inline bool ctl_ready(struct zd_tcp_qp *qp)
{
	uint32_t head = atomic_load_explicit(&qp->ctl_head, memory_order_relaxed);

	/* relaxed first: the usual case, nothing queued, costs no barrier;
	 * acquire: pairs with qp_cm_send's release store of ctl_tail. */
	if (ZD_LIKELY(head == atomic_load_explicit(&qp->ctl_tail, memory_order_relaxed)) ||
	    head == atomic_load_explicit(&qp->ctl_tail, memory_order_acquire))
		return false;
	return qp->sq_tx >= qp->ctl[head % ZD_TCP_CTL_DEPTH].after;
}

/* The next queued CM frame into @h, taken off the queue. */
static void ctl_build(struct zd_tcp_qp *qp, struct zd_tcp_hdr *h)
{
	uint32_t head = atomic_load_explicit(&qp->ctl_head, memory_order_relaxed);
	uint32_t i = head % ZD_TCP_CTL_DEPTH;

	hdr_init(h, ZD_TCP_OP_CM, 0);
	h->rlen = htole32(qp->ctl[i].type);
	h->value = htole64(qp->ctl[i].id);
	/* release: pairs with qp_cm_send's acquire load: the slot is read. */
	atomic_store_explicit(&qp->ctl_head, head + 1, memory_order_release);
}

void zd_tcp_tx_ctl_last(struct zd_tcp_qp *qp)
{
	struct zd_tcp_hdr h[ZD_TCP_CTL_DEPTH];
	int n = 0;

	if (qp->tx_busy || qp->fd < 0)
		return;  /* in the middle of a frame: the peer sees the end only */
	while (n < ZD_TCP_CTL_DEPTH &&
	       atomic_load_explicit(&qp->ctl_head, memory_order_relaxed) !=
		       atomic_load_explicit(&qp->ctl_tail, memory_order_acquire))
		ctl_build(qp, &h[n++]);
	if (n && send(qp->fd, h, (size_t)n * sizeof(h[0]), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		/* lost: the peer sees the end instead */
	}
}

/* Builds the next frame to send; false if there is none. */
static bool tx_build(struct zd_tcp_qp *qp)
{
	struct zd_tcp_hdr *h = &qp->tx_frame.hdr;

	qp->tx_niov = 1;
	qp->tx_iov[0].iov_base = h;
	qp->tx_iov[0].iov_len = sizeof(*h);
	qp->tx_left = sizeof(*h);
	qp->tx_is_req = false;
	if (!qp->hello_sent) {
		/* The acceptor speaks only once the connector proved itself. */
		if (!qp->connector && !qp->hello_rcvd)
			return false;
		hdr_init(h, ZD_TCP_OP_HELLO, 0);
		h->value = htole64(qp->peer_token);
		qp->hello_sent = true;
		return true;
	}
	if (!qp->hello_rcvd)
		return false;
	if (ctl_ready(qp)) {
		ctl_build(qp, h);
		return true;
	}
	if (qp->ack_pending) {
		hdr_init(h, ZD_TCP_OP_ACK, qp->ack_seq);
		qp->ack_pending = false;
		return true;
	}
	if (qp->resp_head != qp->resp_tail) {
		uint32_t i = qp->resp_head % ZD_TCP_RESP_DEPTH;

		hdr_init(h, qp->resp[i].op, qp->resp[i].seq);
		if (qp->resp[i].op == ZD_TCP_OP_ATOMIC_RESP) {
			h->value = htole64(qp->resp[i].value);
		} else {
			struct zd_tcp_seg s = { .addr = qp->resp[i].addr, .len = qp->resp[i].len };

			h->len = htole32(qp->resp[i].len);
			tx_segs(qp, &s, 1);
		}
		qp->resp_head++;
		return true;
	}
	/* acquire: pairs with the poster's release store of sq_tail. */
	if (qp->sq_tx < atomic_load_explicit(&qp->sq_tail, memory_order_acquire)) {
		const struct zd_tcp_wr *wr = &qp->sq[qp->sq_tx & (qp->sq_depth - 1)];

		if (wr->status != DAT_DTO_SUCCESS)
			return false;  /* zd_tcp_sq_complete breaks the QP when its turn comes */
		switch ((int)wr->op) {
		case DAT_DTO_SEND:
			hdr_init(h, ZD_TCP_OP_SEND, (uint32_t)(qp->sq_tx - qp->sq_base));
			h->len = htole32((uint32_t)wr->total);
			if (wr->flags & DAT_COMPLETION_SOLICITED_WAIT_FLAG)
				h->flags = htole16(ZD_TCP_FLAG_SOLICITED);
			tx_segs(qp, wr->seg, wr->nseg);
			break;
		case DAT_DTO_RDMA_WRITE:
		case DAT_IB_DTO_RDMA_WRITE_IMMED:
			if (wr->op == DAT_DTO_RDMA_WRITE) {
				hdr_init(h, ZD_TCP_OP_RDMA_WRITE, (uint32_t)(qp->sq_tx - qp->sq_base));
			} else {
				hdr_init(h, ZD_TCP_OP_WRITE_IMM, (uint32_t)(qp->sq_tx - qp->sq_base));
				h->imm = htole32(wr->imm);
			}
			h->len = htole32((uint32_t)wr->total);
			h->rkey = htole32(wr->rkey);
			h->raddr = htole64(wr->raddr);
			tx_segs(qp, wr->seg, wr->nseg);
			break;
		case DAT_IB_DTO_FETCH_ADD:
		case DAT_IB_DTO_CMP_SWAP: {
			bool faa = wr->op == (DAT_DTOS)DAT_IB_DTO_FETCH_ADD;
			uint32_t len = faa ? ZD_TCP_FETCH_ADD_LEN : ZD_TCP_CMP_SWAP_LEN;

			hdr_init(h, faa ? ZD_TCP_OP_FETCH_ADD : ZD_TCP_OP_CMP_SWAP,
				 (uint32_t)(qp->sq_tx - qp->sq_base));
			h->len = htole32(len);
			h->rkey = htole32(wr->rkey);
			h->raddr = htole64(wr->raddr);
			tx_bytes(qp, wr->operands, len);
			break;
		}
		default:  /* DAT_DTO_RDMA_READ */
			hdr_init(h, ZD_TCP_OP_READ_REQ, (uint32_t)(qp->sq_tx - qp->sq_base));
			h->rkey = htole32(wr->rkey);
			h->raddr = htole64(wr->raddr);
			h->rlen = htole32((uint32_t)wr->total);
			break;
		}
		qp->tx_is_req = true;
		return true;
	}
	return false;
}

/* A small frame becomes one buffer, its payload copied behind the header:
 * the kernel then takes it with a plain send, without copying in a
 * msghdr and an iovec array (measured: an 8-byte send's frame, 48 bytes,
 * crosses loopback ~0.1 us sooner that way than as two iovecs). */
static void tx_flatten(struct zd_tcp_qp *qp)
{
	uint8_t *p = qp->tx_frame.payload;

	if (qp->tx_niov == 1 || qp->tx_left > sizeof(qp->tx_frame))
		return;
	for (uint32_t i = 1; i < qp->tx_niov; i++) {
		memcpy(p, qp->tx_iov[i].iov_base, qp->tx_iov[i].iov_len);
		p += qp->tx_iov[i].iov_len;
	}
	qp->tx_iov[0].iov_len = qp->tx_left;
	qp->tx_niov = 1;
}

/* Builds the next frame (flat when small); false if there is none. */
static bool tx_next(struct zd_tcp_qp *qp)
{
	if (!tx_build(qp))
		return false;
	tx_flatten(qp);
	return true;
}

void zd_tcp_tx_progress(struct zd_tcp_qp *qp)
{
	for (;;) {
		struct msghdr m;
		ssize_t n;

		if (!qp->tx_busy) {
			if (!tx_next(qp))
				break;
			qp->tx_busy = true;
		}
		if (qp->tx_niov == 1) {
			n = send(qp->fd, qp->tx_iov[0].iov_base, qp->tx_iov[0].iov_len,
				 MSG_DONTWAIT | MSG_NOSIGNAL);
		} else {
			memset(&m, 0, sizeof(m));
			m.msg_iov = qp->tx_iov;
			m.msg_iovlen = qp->tx_niov;
			n = sendmsg(qp->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				bool was = atomic_exchange_explicit(&qp->tx_pending, 1,
								    memory_order_relaxed);

				/* The thread and the CQs' pollers must see
				 * the socket drain. */
				if (!was) {
					zd_tcp_qp_auto_arm(qp);
					zd_tcp_qp_watch(qp);
				}
				return;
			}
			ZD_TCP_QP_WHY(qp, "send failed");
			zd_tcp_qp_break(qp);
			return;
		}
		qp->tx_left -= (uint64_t)n;
		if (qp->tx_left == 0) {
			if (qp->tx_is_req)
				qp->sq_tx++;
			qp->tx_busy = false;
			continue;
		}
		/* Partial: drop what went out from the front of the iovec. */
		while (n > 0) {
			struct iovec *v = &qp->tx_iov[0];

			if ((size_t)n >= v->iov_len) {
				n -= (ssize_t)v->iov_len;
				memmove(qp->tx_iov, qp->tx_iov + 1,
					--qp->tx_niov * sizeof(qp->tx_iov[0]));
			} else {
				v->iov_base = (char *)v->iov_base + n;
				v->iov_len -= (size_t)n;
				n = 0;
			}
		}
	}
	/* Drained: the pollers stop asking for room (a load first: the
	 * store and the epoll_ctl only after backpressure). */
	if (ZD_UNLIKELY(atomic_load_explicit(&qp->tx_pending, memory_order_relaxed))) {
		atomic_store_explicit(&qp->tx_pending, 0, memory_order_relaxed);
		zd_tcp_qp_watch(qp);
	}
}

/* A request failed its checks here: tell the initiator (best effort: only
 * between frames), then break.  The requests before it were executed, so
 * their ACK and the atomic answers queued ahead of any read response go
 * first, in the same send: an atomic that changed its word completes as
 * done, not flushed (a read response, with its payload, stops the list:
 * what follows it cannot overtake it). */
void zd_tcp_qp_nak(struct zd_tcp_qp *qp, uint32_t seq, uint32_t status)
{
	if (!qp->tx_busy && qp->hello_sent) {
		struct zd_tcp_hdr h[ZD_TCP_RESP_DEPTH + 2];
		int n = 0;

		if (qp->ack_pending) {
			hdr_init(&h[n], ZD_TCP_OP_ACK, qp->ack_seq);
			n++;
		}
		for (uint32_t r = qp->resp_head; r != qp->resp_tail; r++) {
			uint32_t i = r % ZD_TCP_RESP_DEPTH;

			if (qp->resp[i].op != ZD_TCP_OP_ATOMIC_RESP)
				break;
			hdr_init(&h[n], ZD_TCP_OP_ATOMIC_RESP, qp->resp[i].seq);
			h[n].value = htole64(qp->resp[i].value);
			n++;
		}
		hdr_init(&h[n], ZD_TCP_OP_NAK, seq);
		h[n].rlen = htole32(status);
		n++;
		if (send(qp->fd, h, (size_t)n * sizeof(h[0]), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
			/* lost: the peer flushes on EOF instead */
		}
	}
	ZD_TCP_QP_WHY(qp, "request refused (NAK sent)");
	zd_tcp_qp_break_violation(qp);
}

/* ---- completion, in post order ---- */

/* Completes request @pos (the next one, in order).  Its slot is released
 * to the poster (sq_head) before the completion is published: a consumer on
 * another thread that reaps it may post again at once and must find room. */
void zd_tcp_req_complete(struct zd_tcp_qp *qp, uint64_t pos, uint32_t st)
{
	const struct zd_tcp_wr *wr = &qp->sq[pos & (qp->sq_depth - 1)];
	DAT_COMPLETION_FLAGS flags = wr->flags;
	DAT_DTO_COOKIE cookie = wr->cookie;
	uint64_t total = wr->total;
	DAT_DTOS op = wr->op;

	/* release: pairs with the poster's acquire load of sq_head: the
	 * entry is no longer read. */
	atomic_store_explicit(&qp->sq_head, pos + 1, memory_order_release);
	if (ZD_UNLIKELY(!qp->req_cq))
		return;
	if (ZD_LIKELY(st == DAT_DTO_SUCCESS) &&
	    ((flags & DAT_COMPLETION_SUPPRESS_FLAG) ||
	     ((flags & DAT_COMPLETION_UNSIGNALLED_FLAG) &&
	      (qp->ep->attr.request_completion_flags & DAT_COMPLETION_UNSIGNALLED_FLAG))))
		return;
	zd_tcp_cq_complete(qp->req_cq, qp->ep, cookie, (DAT_DTO_COMPLETION_STATUS)st, total, op);
}

/* Completes, in post order, the requests that are done; a request that
 * failed its local checks breaks the QP once all before it completed. */
void zd_tcp_sq_complete(struct zd_tcp_qp *qp)
{
	uint64_t head = atomic_load_explicit(&qp->sq_head, memory_order_relaxed);

	while (head < qp->sq_tx) {
		const struct zd_tcp_wr *wr = &qp->sq[head & (qp->sq_depth - 1)];

		/* A send is complete once the kernel has it all, an RDMA
		 * write (with immediate data or not) once the target ACKed
		 * it, a read or an atomic once its response landed. */
		if (wr->op == DAT_DTO_RDMA_READ || zd_tcp_op_atomic(wr->op)
			    ? !wr->done
			    : ((wr->op == DAT_DTO_RDMA_WRITE ||
				wr->op == (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED) &&
			       head >= qp->sq_acked))
			break;
		zd_tcp_req_complete(qp, head, DAT_DTO_SUCCESS);
		head++;
	}
	if (head == qp->sq_tx &&
	    head < atomic_load_explicit(&qp->sq_tail, memory_order_acquire) &&
	    qp->sq[head & (qp->sq_depth - 1)].status != DAT_DTO_SUCCESS) {
		ZD_TCP_QP_WHY(qp, "local protection or length error");
		zd_tcp_qp_break(qp);
	}
}
