/*
 * Unreliable datagrams on the tcp device: the UD QP's UDP socket and blob,
 * address handles, post_send_ud, and the receive side (zd_tcp_ud.h has
 * the model, zd_tcp_ud_wire.h the format).
 *
 * Sending: post_send_ud checks the local segments as a send does (a bad
 * one completes the send DAT_DTO_ERR_LOCAL_PROTECTION; the QP goes on:
 * datagrams are independent) and hands the kernel one datagram (sendmsg:
 * header + segments) for the address handle's socket address.  It
 * completes once the kernel took it or refused it: a datagram refused
 * (socket buffer full, no route, a firewall) is dropped and counted,
 * and the send still completes successfully, as a datagram lost on the
 * wire would.  No queue, no lock: the poster's own thread does it all.
 *
 * Receiving (the progress holder: the IA's thread under progress=thread,
 * the consumer's polls and sleeps otherwise, as for RC): each datagram is
 * read straight into the next posted receive, its header into our own
 * buffer and its payload at offset ZD_UD_GRH_BYTES of the receive (the
 * 40 bytes of an InfiniBand GRH are left untouched), with MSG_TRUNC
 * telling the datagram's real length.  Only then is the header checked:
 * a datagram not for this QP leaves the receive posted (its buffer held
 * nothing the consumer may read yet) and is counted as bad; one too long
 * for the receive completes it DAT_DTO_ERR_LOCAL_LENGTH; no receive
 * posted: the datagram is read (header only) and dropped, counted.
 * Receives from an SRQ are shared with other QPs and taken for good, so
 * there the header is checked first (MSG_PEEK), and a buffer is taken only
 * for a datagram that will fill it: two system calls instead of one.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "core/zd_keys.h"
#include "evd/zd_evd_cq.h"
#include "hw/tcp/zd_tcp.h"
#include "hw/tcp/zd_tcp_ud.h"

#define ZD_TCP_UD_RX_BATCH 64            /* datagrams read per progress */
#define ZD_TCP_UD_SOCKBUF  (2u << 20)    /* asked of the kernel (it caps it) */

_Static_assert(sizeof(struct zd_tcp_ud_ah) <= ZD_UD_AH_BYTES, "an AH fits core's room");
_Static_assert(ZD_TCP_UD_MAX_PAYLOAD >= 4096 - ZD_UD_GRH_BYTES, "at least an IB MTU");

static _Atomic uint32_t next_qpn = 1;

/* ZDAPL_TCP_DEBUG=1: one line on stderr for every datagram dropped. */
__attribute__((cold)) static void ud_log_drop(const struct zd_tcp_qp *qp, const char *why,
					      uint64_t count)
{
	if (zd_tcp_debug_on())
		zd_log_error("tcp: UD QP %u drops a datagram: %s (%llu so far)", qp->ud->qpn, why,
			     (unsigned long long)count);
}

/* A UD completion (DAT_IB_DTO_SEND_UD or _RECV_UD) on @cq, if any. */
static void ud_complete(struct zd_tcp_cq *cq, struct zd_ep *ep, DAT_DTO_COOKIE cookie,
			DAT_DTO_COMPLETION_STATUS st, uint64_t len, int op)
{
	if (cq)
		zd_evd_cq_post_ext(cq->soft.local, cq->soft.evd, ep, cookie, st,
				   st == DAT_DTO_SUCCESS ? (DAT_SEG_LENGTH)len : 0, (DAT_DTOS)op, 0);
}

/* ---- the QP ---- */

int zd_tcp_ud_open(struct zd_tcp_qp *qp)
{
	struct sockaddr_in sa = qp->ep->obj.ia->addr;
	socklen_t len = sizeof(sa);
	struct epoll_event e = { .events = EPOLLONESHOT, .data.ptr = qp };
	int one = 1, size = ZD_TCP_UD_SOCKBUF;
	struct zd_tcp_ud *ud = calloc(1, sizeof(*ud));
	int fd;

	if (!ud)
		return -1;
	qp->ud = ud;
	sa.sin_family = AF_INET;
	sa.sin_port = 0;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
		zd_log_rate_limited("tcp: no datagram socket for a new UD EP on %s: %s",
				    inet_ntoa(qp->ep->obj.ia->addr.sin_addr), strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	/* Datagrams wait in the socket between progress rounds: room for a
	 * burst (best effort: the kernel caps it at net.core.rmem_max), and
	 * the kernel's count of those it dropped for want of it. */
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
	setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
	ud->addr = sa.sin_addr.s_addr;
	ud->port = sa.sin_port;
	ud->qpn = atomic_fetch_add_explicit(&next_qpn, 1, memory_order_relaxed);
	if (getrandom(&ud->key, sizeof(ud->key), 0) != sizeof(ud->key))
		ud->key = (uint64_t)(uintptr_t)qp ^ ((uint64_t)getpid() << 32) ^ ud->qpn;
	pthread_mutex_lock(&qp->fd_lock);
	qp->fd = fd;
	epoll_ctl(qp->tia->epfd, EPOLL_CTL_ADD, fd, &e);
	pthread_mutex_unlock(&qp->fd_lock);
	/* "Up" from the start: cq_arm and the IA's thread arm its socket for
	 * reading (zd_tcp_qp_arm), as for a connected RC QP. */
	zd_tcp_qp_set_cstate(qp, ZD_TCP_UP);
	return 0;
}

size_t zd_tcp_ud_blob(struct zd_tcp_qp *qp, void *blob, size_t max)
{
	struct zd_tcp_ud_blob b;

	if (max < sizeof(b))
		return 0;
	memset(&b, 0, sizeof(b));
	b.magic = htole32(ZD_TCP_UD_BLOB_MAGIC);
	b.version = htole16(ZD_TCP_UD_VERSION);
	b.addr = qp->ud->addr;
	b.port = qp->ud->port;
	b.qpn = htole32(qp->ud->qpn);
	b.key = htole64(qp->ud->key);
	memcpy(blob, &b, sizeof(b));
	return sizeof(b);
}

/* ---- address handles ---- */

DAT_RETURN zd_tcp_ud_ah_create(struct zd_ia *ia, const void *blob, size_t len, void *ah,
			       uint32_t *qpn)
{
	struct zd_tcp_ud_ah a;

	(void)ia;
	if (!zd_tcp_ud_blob_parse(blob, len, &a))
		return DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNREACHABLE);
	memcpy(ah, &a, sizeof(a));
	*qpn = a.qpn;
	return DAT_SUCCESS;
}

void zd_tcp_ud_ah_destroy(struct zd_ia *ia, void *ah)
{
	/* A socket address: nothing held. */
	(void)ia;
	(void)ah;
}

/* ---- sending ---- */

DAT_RETURN zd_tcp_post_send_ud(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			       const void *ah, DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	struct zd_tcp_qp *qp = ep->dev_priv;
	const struct zd_tcp_ud_ah *a = ah;
	struct zd_tcp_ud_hdr h;
	struct iovec v[ZD_TCP_MAX_SEGS + 1];
	struct msghdr m;
	DAT_DTO_COMPLETION_STATUS st = DAT_DTO_SUCCESS;
	uint64_t total = 0;
	uint32_t nv = 1;
	ssize_t sent;

	if (ZD_UNLIKELY(!qp || !qp->ud))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
	if (ZD_UNLIKELY(n > ZD_TCP_MAX_SEGS))
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	if (ZD_UNLIKELY(atomic_load_explicit(&qp->error, memory_order_relaxed))) {
		st = DAT_DTO_ERR_FLUSHED;
		goto complete;
	}
	for (DAT_COUNT i = 0; i < n; i++) {
		uint64_t len = iov[i].segment_length;

		if (len == 0)
			continue;
		/* Reading local memory needs no right (as with verbs). */
		if (ZD_UNLIKELY(!zd_keys_lmr_covers(ep->obj.ia, iov[i].lmr_context, ZD_KEY_REMOTE,
						    ep->pz, 0, iov[i].virtual_address, len,
						    NULL))) {
			st = DAT_DTO_ERR_LOCAL_PROTECTION;
			goto complete;
		}
		v[nv].iov_base = (void *)(uintptr_t)iov[i].virtual_address;
		v[nv].iov_len = len;
		nv++;
		total += len;
	}
	/* core checked total <= max_ud_payload */
	h.magic = htole32(ZD_TCP_UD_MAGIC);
	h.version = ZD_TCP_UD_VERSION;
	h.op = ZD_TCP_UD_OP_DATAGRAM;
	h.reserved = 0;
	h.dst_qpn = htole32(a->qpn);
	h.len = htole32((uint32_t)total);
	h.dst_key = htole64(a->key);
	v[0].iov_base = &h;
	v[0].iov_len = sizeof(h);
	memset(&m, 0, sizeof(m));
	m.msg_name = (void *)&a->sa;
	m.msg_namelen = sizeof(a->sa);
	m.msg_iov = v;
	m.msg_iovlen = nv;
	do
		sent = sendmsg(qp->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (sent < 0 && errno == EINTR);
	if (ZD_UNLIKELY(sent < 0)) {
		if (errno == EMSGSIZE) {
			st = DAT_DTO_ERR_LOCAL_LENGTH;
		} else if (errno == EFAULT) {
			st = DAT_DTO_ERR_LOCAL_PROTECTION;
		} else {
			/* Full socket buffer, no route, filtered: lost on
			 * the way, as UD may lose any datagram. */
			uint64_t c = atomic_fetch_add_explicit(&qp->ud->tx_dropped, 1,
							       memory_order_relaxed) + 1;

			ud_log_drop(qp, "the kernel refused to send it", c);
		}
	}
complete:
	if (ZD_LIKELY(st == DAT_DTO_SUCCESS) &&
	    ((flags & DAT_COMPLETION_SUPPRESS_FLAG) ||
	     ((flags & DAT_COMPLETION_UNSIGNALLED_FLAG) &&
	      (ep->attr.request_completion_flags & DAT_COMPLETION_UNSIGNALLED_FLAG))))
		return DAT_SUCCESS;
	ud_complete(qp->req_cq, ep, cookie, st, total, DAT_IB_DTO_SEND_UD);
	return DAT_SUCCESS;
}

/* ---- receiving (progress holder) ---- */

/* The iovecs of @r past the GRH space, into @v; how many. */
static uint32_t recv_iov(const struct zd_tcp_recv *r, struct iovec *v)
{
	uint64_t skip = ZD_UD_GRH_BYTES;
	uint32_t nv = 0;

	for (uint32_t i = 0; i < r->nseg; i++) {
		uint64_t len = r->seg[i].len;

		if (len <= skip) {
			skip -= len;
			continue;
		}
		v[nv].iov_base = (void *)(uintptr_t)(r->seg[i].addr + skip);
		v[nv].iov_len = len - skip;
		skip = 0;
		nv++;
	}
	return nv;
}

/* The kernel's count of datagrams it dropped on this socket (a full
 * receive buffer), when a control message carries it: the kernel stamps
 * its running count on each datagram it queues, so drops are learnt with
 * the next datagram that got in. */
static void rx_overflow(struct zd_tcp_qp *qp, struct msghdr *m)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
			uint32_t drops;

			memcpy(&drops, CMSG_DATA(c), sizeof(drops));
			if (drops != (uint32_t)qp->ud->rx_overflow) {
				/* 32-bit in the kernel: count how far it moved. */
				qp->ud->rx_overflow += (uint32_t)(drops - (uint32_t)qp->ud->rx_overflow);
				ud_log_drop(qp, "no room in the socket's receive buffer",
					    qp->ud->rx_overflow);
			}
		}
}

static void drop_bad(struct zd_tcp_qp *qp, enum zd_tcp_ud_verdict v)
{
	ud_log_drop(qp, zd_tcp_ud_verdict_str(v), ++qp->ud->rx_bad);
}

static void drop_no_recv(struct zd_tcp_qp *qp)
{
	ud_log_drop(qp, "no receive posted", ++qp->ud->rx_no_recv);
}

/* recvmsg, retried on EINTR; -1 with errno otherwise. */
static ssize_t ud_recvmsg(int fd, struct msghdr *m, int flags)
{
	ssize_t n;

	do
		n = recvmsg(fd, m, flags | MSG_TRUNC | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	return n;
}

/* Takes one datagram off the socket; false once none is left. */
static bool ud_rx_one(struct zd_tcp_qp *qp)
{
	const uint32_t qpn = qp->ud->qpn;
	const uint64_t key = qp->ud->key;
	struct zd_tcp_ud_hdr h;
	struct iovec v[ZD_TCP_MAX_SEGS + 1];
	union {
		struct cmsghdr c;
		char b[CMSG_SPACE(sizeof(uint32_t))];
	} ctl;
	struct msghdr m;
	struct zd_tcp_recv taken;
	const struct zd_tcp_recv *r = NULL;
	enum zd_tcp_ud_verdict verdict;
	uint64_t head = 0, payload;
	DAT_DTO_COOKIE cookie;
	bool fits;
	ssize_t n;

	memset(&m, 0, sizeof(m));
	m.msg_iov = v;
	m.msg_iovlen = 1;
	v[0].iov_base = &h;
	v[0].iov_len = sizeof(h);
	if (qp->srq) {
		/* Check before taking a buffer others share (the datagram
		 * stays first in the socket: only the holder reads it). */
		n = ud_recvmsg(qp->fd, &m, MSG_PEEK);
		if (n < 0)
			return false;
		verdict = zd_tcp_ud_check(&h, (uint64_t)n, qpn, key);
		if (verdict == ZD_TCP_UD_OK && zd_tcp_srq_take(qp->srq, &taken))
			r = &taken;
		/* otherwise read below into the header alone: dropped */
	} else {
		head = atomic_load_explicit(&qp->rq_head, memory_order_relaxed);
		/* acquire: pairs with the (seq_cst) store of rq_tail in post_recv. */
		if (head < atomic_load_explicit(&qp->rq_tail, memory_order_acquire))
			r = &qp->rq[head & (qp->rq_depth - 1)];
	}
	if (r)
		m.msg_iovlen = 1 + recv_iov(r, v + 1);
	m.msg_control = ctl.b;
	m.msg_controllen = sizeof(ctl.b);
	n = ud_recvmsg(qp->fd, &m, 0);
	if (n < 0) {
		/* Nothing more (EAGAIN); or a socket error, for which UD has
		 * no connection to break: stop this round.  An SRQ buffer
		 * taken for the peeked datagram cannot be lost this way (it
		 * is still first in the socket), but is returned flushed if
		 * the kernel says otherwise. */
		if (r == &taken)
			zd_tcp_recv_fail(qp, taken.cookie, DAT_DTO_ERR_FLUSHED);
		return false;
	}
	if (ZD_UNLIKELY(m.msg_controllen))
		rx_overflow(qp, &m);
	verdict = zd_tcp_ud_check(&h, (uint64_t)n, qpn, key);
	if (ZD_UNLIKELY(verdict != ZD_TCP_UD_OK)) {
		/* Not ours: the receive (if any) stays posted. */
		if (r == &taken)
			zd_tcp_recv_fail(qp, taken.cookie, DAT_DTO_ERR_FLUSHED);
		drop_bad(qp, verdict);
		return true;
	}
	if (!r) {
		drop_no_recv(qp);
		return true;
	}
	cookie = r->cookie;
	payload = (uint64_t)n - sizeof(h);
	fits = r->total >= ZD_UD_GRH_BYTES && payload <= r->total - ZD_UD_GRH_BYTES;
	if (!qp->srq)
		/* release: pairs with the poster's acquire load of rq_head
		 * (the slot is the poster's again: read it before). */
		atomic_store_explicit(&qp->rq_head, head + 1, memory_order_release);
	if (ZD_LIKELY(fits))
		ud_complete(qp->recv_cq, qp->ep, cookie, DAT_DTO_SUCCESS,
			    payload + ZD_UD_GRH_BYTES, DAT_IB_DTO_RECV_UD);
	else
		ud_complete(qp->recv_cq, qp->ep, cookie, DAT_DTO_ERR_LOCAL_LENGTH, 0,
			    DAT_IB_DTO_RECV_UD);
	if (qp->srq)
		zd_tcp_srq_check_lw(qp->srq);
	return true;
}

void zd_tcp_ud_work(struct zd_tcp_qp *qp, uint32_t want)
{
	if (want & ZD_TCP_W_FLUSH)
		atomic_store(&qp->error, 1);
	if (atomic_load_explicit(&qp->error, memory_order_relaxed)) {
		/* A receive failed its checks (post_recv) or the QP is being
		 * destroyed: every receive completes flushed, now and later. */
		zd_tcp_qp_flush_locked(qp);
		return;
	}
	if (want & ZD_TCP_W_RX)
		for (int i = 0; i < ZD_TCP_UD_RX_BATCH && ud_rx_one(qp); i++)
			;
}
