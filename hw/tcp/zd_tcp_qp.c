/*
 * QPs of the tcp device: lifetime, the data socket, and the progress
 * engine (transmit, receive, complete, flush).  See zd_tcp.h for the model
 * and zd_tcp_wire.h for the protocol.
 *
 * Everything below "progress engine" runs with the QP's progress flag
 * held (qp->busy), by whichever thread got it.
 */
#include <endian.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/sockios.h>

#include "core/zd_cm.h"
#include "core/zd_ia.h"
#include "core/zd_keys.h"
#include "core/zd_ep.h"
#include "core/zd_srq.h"
#include "evd/zd_evd.h"
#include "hw/tcp/zd_tcp.h"

static uint32_t pow2_at_least(uint64_t v, uint32_t min)
{
	uint32_t p = min;

	while (p < v && p < (1u << 30))
		p <<= 1;
	return p;
}

/* ---- sockets ---- */

static void fd_register(struct zd_tcp_qp *qp, int fd)
{
	struct epoll_event e = { .events = EPOLLONESHOT, .data.ptr = qp };

	epoll_ctl(qp->tia->epfd, EPOLL_CTL_ADD, fd, &e);
}

/* Closes @*fdp (under fd_lock: cq_arm never sees a stale number). */
static void fd_close(struct zd_tcp_qp *qp, int *fdp)
{
	pthread_mutex_lock(&qp->fd_lock);
	if (*fdp >= 0) {
		epoll_ctl(qp->tia->epfd, EPOLL_CTL_DEL, *fdp, NULL);
		close(*fdp);
		*fdp = -1;
	}
	pthread_mutex_unlock(&qp->fd_lock);
}

static void fd_set_data(struct zd_tcp_qp *qp, int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* A peer gone without FIN/RST (link down) errors the socket in
	 * bounded time; qp_break then tells the CM (zd_cm_dev_broken). */
	zd_cm_sock_keepalive(fd);
	pthread_mutex_lock(&qp->fd_lock);
	qp->fd = fd;
	fd_register(qp, fd);
	pthread_mutex_unlock(&qp->fd_lock);
}

static int qp_listen(struct zd_tcp_qp *qp)
{
	struct sockaddr_in sa = qp->ep->obj.ia->addr;
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	sa.sin_family = AF_INET;
	sa.sin_port = 0;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 4) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
		close(fd);
		return -1;
	}
	qp->lis_addr = sa.sin_addr.s_addr;
	qp->lis_port = sa.sin_port;
	if (getrandom(&qp->token, sizeof(qp->token), 0) != sizeof(qp->token))
		qp->token = (uint64_t)(uintptr_t)qp ^ ((uint64_t)getpid() << 32) ^ (uint64_t)fd;
	pthread_mutex_lock(&qp->fd_lock);
	qp->lis_fd = fd;
	fd_register(qp, fd);
	pthread_mutex_unlock(&qp->fd_lock);
	return 0;
}

/* Protocol state back to "nothing happened" (holder or sole owner). */
static void qp_state_init(struct zd_tcp_qp *qp)
{
	qp->cstate = ZD_TCP_IDLE;
	qp->local_end = qp->reported = false;
	qp->hello_sent = qp->hello_rcvd = false;
	qp->connector = false;
	qp->tx_busy = qp->tx_is_req = false;
	qp->tx_left = 0;
	qp->ack_pending = qp->nak_pending = false;
	qp->resp_head = qp->resp_tail = 0;
	qp->rx_hgot = 0;
	qp->rx_off = qp->rx_end = 0;
	qp->rx_in_payload = false;
	qp->rx_kind = 0;
	qp->rx_expect = 0;
	qp->eager_head = qp->eager_tail = 0;
	atomic_store(&qp->eager_n, 0);
	qp->sq_tx = atomic_load(&qp->sq_head);
	qp->sq_acked = qp->sq_base = qp->sq_tx;
	atomic_store(&qp->tx_pending, 0);
	atomic_store(&qp->rx_stalled, 0);
}

static void qp_lock(struct zd_tcp_qp *qp)
{
	while (atomic_exchange_explicit(&qp->busy, 1, memory_order_acquire))
		sched_yield();
}

static void qp_unlock(struct zd_tcp_qp *qp)
{
	atomic_store_explicit(&qp->busy, 0, memory_order_seq_cst);
	/* Work asked while we held it without a holder to see it. */
	if (atomic_load(&qp->want))
		zd_tcp_qp_progress(qp, 0);
}

DAT_RETURN zd_tcp_qp_create(struct zd_ep *ep)
{
	struct zd_tcp_ia *tia = ep->obj.ia->dev_priv;
	struct zd_tcp_qp *qp = calloc(1, sizeof(*qp));

	if (!qp)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	if (tia->auto_progress && !__atomic_load_n(&tia->waker_running, __ATOMIC_ACQUIRE) &&
	    zd_tcp_waker_start(tia) != 0) {
		free(qp);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
	}
	qp->ep = ep;
	qp->tia = tia;
	qp->fd = qp->lis_fd = -1;
	pthread_mutex_init(&qp->fd_lock, NULL);
	qp->srq = ep->srq ? ep->srq->dev_priv : NULL;
	qp->rq_depth = pow2_at_least((uint64_t)ZD_MAX(ep->attr.max_recv_dtos, 1), 1);
	qp->sq_depth = pow2_at_least((uint64_t)ZD_MAX(ep->attr.max_request_dtos, 1), 1);
	qp->rq = calloc(qp->rq_depth, sizeof(*qp->rq));
	qp->sq = calloc(qp->sq_depth, sizeof(*qp->sq));
	/* calloc of this size maps fresh pages: they cost memory only once
	 * an early send lands there. */
	qp->eager_buf = calloc(ZD_TCP_EAGER_SLOTS, ZD_TCP_EAGER_SIZE);
	qp->rx_buf = malloc(ZD_TCP_RX_STAGE);
	if (!qp->rq || !qp->sq || !qp->eager_buf || !qp->rx_buf || qp_listen(qp) != 0)
		goto err;
	qp_state_init(qp);
	qp->recv_cq = ep->recv_evd ? ep->recv_evd->cq_priv : NULL;
	qp->req_cq = ep->request_evd ? ep->request_evd->cq_priv : NULL;
	pthread_mutex_lock(&tia->lock);
	if (qp->recv_cq && zd_tcp_cq_attach(qp->recv_cq, qp, true) != 0)
		goto err_unlock;
	if (qp->req_cq && qp->req_cq != qp->recv_cq &&
	    zd_tcp_cq_attach(qp->req_cq, qp, true) != 0) {
		if (qp->recv_cq)
			zd_tcp_cq_attach(qp->recv_cq, qp, false);
		goto err_unlock;
	}
	qp->next = tia->qps;
	tia->qps = qp;
	pthread_mutex_unlock(&tia->lock);
	ep->dev_priv = qp;
	return DAT_SUCCESS;
err_unlock:
	pthread_mutex_unlock(&tia->lock);
err:
	fd_close(qp, &qp->lis_fd);
	pthread_mutex_destroy(&qp->fd_lock);
	free(qp->rq);
	free(qp->sq);
	free(qp->eager_buf);
	free(qp->rx_buf);
	free(qp);
	return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
}

size_t zd_tcp_qp_local_blob(struct zd_ep *ep, void *blob, size_t max)
{
	struct zd_tcp_qp *qp = ep->dev_priv;
	struct zd_tcp_blob b;

	if (!qp || max < sizeof(b))
		return 0;
	/* A QP used by an earlier connection and not reset: start over
	 * (new listener and token) before its blob goes out. */
	if (__atomic_load_n(&qp->stale, __ATOMIC_ACQUIRE) && zd_tcp_qp_reset(ep) != DAT_SUCCESS)
		return 0;
	memset(&b, 0, sizeof(b));
	b.magic = htole32(ZD_TCP_BLOB_MAGIC);
	b.version = htole16(ZD_TCP_WIRE_VERSION);
	b.addr = qp->lis_addr;
	b.port = qp->lis_port;
	b.token = htole64(qp->token);
	memcpy(blob, &b, sizeof(b));
	return sizeof(b);
}

DAT_RETURN zd_tcp_qp_connect(struct zd_ep *ep, const void *peer_blob, size_t len)
{
	struct zd_tcp_qp *qp = ep->dev_priv;
	struct zd_tcp_blob b;
	struct sockaddr_in sa;
	int fd;

	if (!qp)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (len == 0) {
		/* A peer without a data path (a bare CM peer): connected,
		 * but every DTO completes flushed. */
		atomic_store(&qp->error, 1);
		zd_tcp_qp_progress(qp, ZD_TCP_W_FLUSH);
		return DAT_SUCCESS;
	}
	if (!peer_blob || len != sizeof(b))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	memcpy(&b, peer_blob, sizeof(b));
	/* Passive side of a reused QP (its blob goes out after this). */
	if (__atomic_load_n(&qp->stale, __ATOMIC_ACQUIRE) && zd_tcp_qp_reset(ep) != DAT_SUCCESS)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	if (le32toh(b.magic) != ZD_TCP_BLOB_MAGIC || le16toh(b.version) != ZD_TCP_WIRE_VERSION ||
	    le64toh(b.token) == qp->token || b.port == 0) {
		zd_log_error("tcp: the peer's QP speaks another protocol version (%u, want %u)",
			     le16toh(b.version), ZD_TCP_WIRE_VERSION);
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	}
	qp_lock(qp);
	if (qp->cstate != ZD_TCP_IDLE || atomic_load(&qp->error)) {
		qp_unlock(qp);
		return DAT_ERROR(DAT_INVALID_STATE, DAT_NO_SUBTYPE);
	}
	qp->peer_token = le64toh(b.token);
	qp->peer_addr = b.addr;
	qp->peer_port = b.port;
	qp->connector = qp->token < qp->peer_token;
	if (!qp->connector) {
		/* The peer connects to our listener; accepted on progress. */
		qp->cstate = ZD_TCP_LISTEN;
		qp_unlock(qp);
		zd_tcp_qp_auto_arm(qp);
		return DAT_SUCCESS;
	}
	fd_close(qp, &qp->lis_fd);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto err;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = b.addr;
	sa.sin_port = b.port;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
		close(fd);
		goto err;
	}
	fd_set_data(qp, fd);
	qp->cstate = ZD_TCP_CONNECTING;
	qp_unlock(qp);
	zd_tcp_qp_auto_arm(qp);
	/* Start the handshake now if the connect is already through. */
	zd_tcp_qp_progress(qp, ZD_TCP_W_TX);
	return DAT_SUCCESS;
err:
	qp->cstate = ZD_TCP_DOWN;
	atomic_store(&qp->error, 1);
	qp_unlock(qp);
	zd_tcp_qp_progress(qp, ZD_TCP_W_FLUSH);
	return DAT_SUCCESS;  /* the CM's connection stands; DTOs flush */
}

static void qp_flush_locked(struct zd_tcp_qp *qp);
static void eager_match(struct zd_tcp_qp *qp);
static void qp_work(struct zd_tcp_qp *qp, uint32_t want);

static uint64_t mono_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
}

void zd_tcp_qp_flush(struct zd_ep *ep)
{
	struct zd_tcp_qp *qp = ep->dev_priv;

	if (!qp)
		return;
	/* The CM's DISC goes out on its own socket right after this and may
	 * overtake what we sent on the data socket (sends complete when the
	 * kernel has them): first let the peer's kernel acknowledge it all, so
	 * the peer's own flush still harvests it (bounded: a peer that stopped
	 * reading costs ZD_TCP_DRAIN_US at most). */
	zd_tcp_qp_progress(qp, ZD_TCP_W_TX);
	for (uint64_t t0 = mono_us(); mono_us() - t0 < ZD_TCP_DRAIN_US; usleep(200)) {
		struct tcp_info ti;
		socklen_t tl = sizeof(ti);
		int outq = 0;

		if (atomic_load(&qp->error) ||
		    __atomic_load_n(&qp->cstate, __ATOMIC_RELAXED) != ZD_TCP_UP)
			break;
		pthread_mutex_lock(&qp->fd_lock);
		/* Only while the connection stands (a reset empties nothing). */
		if (qp->fd < 0 || getsockopt(qp->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0 ||
		    ti.tcpi_state != TCP_ESTABLISHED || ioctl(qp->fd, SIOCOUTQ, &outq) != 0)
			outq = 0;
		pthread_mutex_unlock(&qp->fd_lock);
		if (outq == 0)
			break;
	}
	/* Harvest what already arrived (ACKs, responses, sends into posted
	 * receives), then flush (qp_work), before returning: the CM posts
	 * the connection event next, and the completions and the SRQ "last
	 * WQE" event belong before it (the IA's thread may hold the QP: wait
	 * for it, it never waits for the CM). */
	atomic_fetch_or(&qp->want, ZD_TCP_W_FLUSH);
	qp_lock(qp);
	for (uint32_t w; (w = atomic_exchange(&qp->want, 0)) != 0;)
		qp_work(qp, w);
	qp_unlock(qp);
}


DAT_RETURN zd_tcp_qp_reset(struct zd_ep *ep)
{
	struct zd_tcp_qp *qp = ep->dev_priv;
	int rc;

	if (!qp)
		return DAT_SUCCESS;
	atomic_store(&qp->error, 1);
	qp_lock(qp);
	qp->local_end = true;
	qp_flush_locked(qp);
	fd_close(qp, &qp->fd);
	fd_close(qp, &qp->lis_fd);
	atomic_store(&qp->error, 0);
	qp->flushed = false;
	qp->stale = false;
	qp->lw_sent = false;
	qp_state_init(qp);
	rc = qp_listen(qp);
	/* Work asked of the old connection (a flush) must not hit the new. */
	atomic_store(&qp->want, 0);
	qp_unlock(qp);
	return rc == 0 ? DAT_SUCCESS : DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
}

void zd_tcp_qp_destroy(struct zd_ep *ep)
{
	struct zd_tcp_qp *qp = ep->dev_priv, **pp;
	struct zd_tcp_ia *tia;

	if (!qp)
		return;
	tia = qp->tia;
	/* After detach (an RCU grace period) no poller reaches the QP. */
	pthread_mutex_lock(&tia->lock);
	if (qp->recv_cq)
		zd_tcp_cq_attach(qp->recv_cq, qp, false);
	if (qp->req_cq && qp->req_cq != qp->recv_cq)
		zd_tcp_cq_attach(qp->req_cq, qp, false);
	for (pp = &tia->qps; *pp; pp = &(*pp)->next)
		if (*pp == qp) {
			*pp = qp->next;
			break;
		}
	if (qp->parked)
		tia->nparked--;
	pthread_mutex_unlock(&tia->lock);
	atomic_store(&qp->error, 1);
	qp_lock(qp);
	qp->destroying = true;  /* no "last WQE" event naming a dead EP */
	qp_flush_locked(qp);
	fd_close(qp, &qp->fd);
	fd_close(qp, &qp->lis_fd);
	pthread_mutex_destroy(&qp->fd_lock);
	free(qp->rq);
	free(qp->sq);
	free(qp->eager_buf);
	free(qp->rx_buf);
	free(qp);
	ep->dev_priv = NULL;
}

void zd_tcp_qp_arm(struct zd_tcp_qp *qp)
{
	struct epoll_event e = { .events = EPOLLONESHOT, .data.ptr = qp };
	int fd;

	pthread_mutex_lock(&qp->fd_lock);
	/* relaxed reads of holder state: a stale view only costs a spurious
	 * or a later wake-up; the re-poll after arm covers the rest. */
	switch (__atomic_load_n(&qp->cstate, __ATOMIC_RELAXED)) {
	case ZD_TCP_LISTEN:
		fd = qp->lis_fd;
		e.events |= EPOLLIN;
		break;
	case ZD_TCP_CONNECTING:
		fd = qp->fd;
		e.events |= EPOLLOUT;
		break;
	case ZD_TCP_UP:
		fd = qp->fd;
		if (!atomic_load(&qp->rx_stalled))
			e.events |= EPOLLIN;
		if (atomic_load(&qp->tx_pending))
			e.events |= EPOLLOUT;
		break;
	default:
		fd = -1;
		break;
	}
	if (fd >= 0 && (e.events & (EPOLLIN | EPOLLOUT)))
		epoll_ctl(qp->tia->epfd, EPOLL_CTL_MOD, fd, &e);
	pthread_mutex_unlock(&qp->fd_lock);
}

void zd_tcp_qp_auto_arm(struct zd_tcp_qp *qp)
{
	if (qp->tia->auto_progress)
		zd_tcp_qp_arm(qp);
}

/* ==== progress engine (holder only) ==== */

/* Completes request @pos (the next one, in order).  Its slot is released
 * to the poster (sq_head) before the completion is published: a consumer on
 * another thread that reaps it may post again at once and must find room. */
static void req_complete(struct zd_tcp_qp *qp, uint64_t pos, uint32_t st)
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

static void recv_complete(struct zd_tcp_qp *qp, DAT_DTO_COOKIE cookie, uint32_t st, uint64_t len)
{
	if (qp->recv_cq)
		zd_tcp_cq_complete(qp->recv_cq, qp->ep, cookie, (DAT_DTO_COMPLETION_STATUS)st, len,
				   DAT_DTO_RECEIVE);
}

/* Every outstanding DTO completes (flushed, or the error it carries). */
static void qp_flush_locked(struct zd_tcp_qp *qp)
{
	uint64_t head, tail;

	if (!qp->flushed) {
		qp->flushed = true;
		if (qp->cstate != ZD_TCP_IDLE)
			__atomic_store_n(&qp->stale, true, __ATOMIC_RELEASE);
		qp->cstate = ZD_TCP_DOWN;
		if (qp->fd >= 0)
			shutdown(qp->fd, SHUT_RDWR);
	}
	/* IB's "last WQE reached": SRQ consumers wait for it, after the
	 * connection event and in the same order (dtestsrq pairs them), so
	 * only once the CM (or the consumer) ended the connection, not when
	 * the data path saw the end first. */
	if (qp->srq && qp->local_end && !qp->destroying && !qp->lw_sent) {
		qp->lw_sent = true;
		zd_ia_post_async(&qp->ep->obj, DAT_ASYNC_ERROR_EP_BROKEN);
	}
	atomic_store(&qp->tx_pending, 0);
	atomic_store(&qp->rx_stalled, 0);
	if (qp->rx_kind == 1) {
		recv_complete(qp, qp->rx_recv.cookie, DAT_DTO_ERR_FLUSHED, 0);
		qp->rx_kind = 0;
	}
	qp->rx_in_payload = false;
	/* Sends that arrived whole before the end fill the receives posted
	 * for them, now or later: their senders saw them complete (a sender
	 * may disconnect before we post the receive; RC would have held its
	 * send in RNR retries instead).  Not from inside eager_match. */
	if (qp->eager_head != qp->eager_tail && !qp->in_eager) {
		qp->in_eager = true;
		eager_match(qp);
		qp->in_eager = false;
	}
	/* seq_cst: pairs with the seq_cst store of rq_tail in post_recv. */
	tail = atomic_load_explicit(&qp->rq_tail, memory_order_seq_cst);
	head = atomic_load_explicit(&qp->rq_head, memory_order_relaxed);
	for (; head < tail; head++)
		recv_complete(qp, qp->rq[head & (qp->rq_depth - 1)].cookie, DAT_DTO_ERR_FLUSHED, 0);
	atomic_store_explicit(&qp->rq_head, head, memory_order_release);

	tail = atomic_load_explicit(&qp->sq_tail, memory_order_acquire);
	head = atomic_load_explicit(&qp->sq_head, memory_order_relaxed);
	for (; head < tail; head++) {
		uint32_t st = qp->sq[head & (qp->sq_depth - 1)].status;

		req_complete(qp, head, st != DAT_DTO_SUCCESS ? st : DAT_DTO_ERR_FLUSHED);
	}
	qp->sq_tx = qp->sq_acked = head;
}

/* ZDAPL_TCP_DEBUG=1: one line on stderr for every broken connection. */
static int tcp_debug = -1;

static __attribute__((cold)) void qp_why(struct zd_tcp_qp *qp, const char *why, int line)
{
	if (tcp_debug < 0) {
		const char *e = getenv("ZDAPL_TCP_DEBUG");

		tcp_debug = e && *e && *e != '0';
	}
	if (tcp_debug)
		zd_log_error("tcp: QP %p breaks: %s (line %d, op %u seq %u len %u, expect %u, errno %d)",
			     (void *)qp, why, line, qp->rx_hdr.op, le32toh(qp->rx_hdr.seq),
			     le32toh(qp->rx_hdr.len), qp->rx_expect, errno);
}
#define QP_WHY(qp, why) qp_why((qp), (why), __LINE__)

/* The connection is unusable: error, flush, socket shut down.  Unless the
 * consumer ended it, the CM hears of it too (zd_cm_dev_broken): the EP
 * goes BROKEN even if the CM's own socket still stands. */
static void qp_break(struct zd_tcp_qp *qp)
{
	bool live = !qp->flushed && !qp->local_end && !qp->destroying &&
		    (qp->cstate == ZD_TCP_UP || qp->cstate == ZD_TCP_CONNECTING);

	atomic_store(&qp->error, 1);
	qp_flush_locked(qp);
	if (live && !qp->reported) {
		qp->reported = true;
		zd_cm_dev_broken(qp->ep);
	}
}

/* The peer broke the protocol or our protection: as an HCA's QP access
 * error, the consumer also gets DAT_ASYNC_ERROR_EP_BROKEN (the CM still
 * owns the connection events). */
static __attribute__((cold)) void qp_break_violation(struct zd_tcp_qp *qp)
{
	bool first = !qp->flushed;

	qp_break(qp);
	if (first && !qp->srq && !qp->destroying)
		zd_ia_post_async(&qp->ep->obj, DAT_ASYNC_ERROR_EP_BROKEN);
}

/* A request failed its checks here: tell the initiator (best effort: only
 * between frames), then break. */
static void qp_nak(struct zd_tcp_qp *qp, uint32_t seq, uint32_t status)
{
	if (!qp->tx_busy && qp->hello_sent) {
		struct zd_tcp_hdr h[2];
		int n = 0;

		memset(h, 0, sizeof(h));
		if (qp->ack_pending) {
			h[n].magic = htole32(ZD_TCP_WIRE_MAGIC);
			h[n].version = ZD_TCP_WIRE_VERSION;
			h[n].op = ZD_TCP_OP_ACK;
			h[n].seq = htole32(qp->ack_seq);
			n++;
		}
		h[n].magic = htole32(ZD_TCP_WIRE_MAGIC);
		h[n].version = ZD_TCP_WIRE_VERSION;
		h[n].op = ZD_TCP_OP_NAK;
		h[n].seq = htole32(seq);
		h[n].rlen = htole32(status);
		n++;
		if (send(qp->fd, h, (size_t)n * sizeof(h[0]), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
			/* lost: the peer flushes on EOF instead */
		}
	}
	QP_WHY(qp, "request refused (NAK sent)");
	qp_break_violation(qp);
}

/* Completes, in post order, the requests that are done; a request that
 * failed its local checks breaks the QP once all before it completed. */
static void sq_complete(struct zd_tcp_qp *qp)
{
	uint64_t head = atomic_load_explicit(&qp->sq_head, memory_order_relaxed);

	while (head < qp->sq_tx) {
		const struct zd_tcp_wr *wr = &qp->sq[head & (qp->sq_depth - 1)];

		/* A send is complete once the kernel has it all, an RDMA
		 * write once the target ACKed it, a read once it landed. */
		if (wr->op == DAT_DTO_RDMA_READ ? !wr->done
		    : (wr->op == DAT_DTO_RDMA_WRITE && head >= qp->sq_acked))
			break;
		req_complete(qp, head, DAT_DTO_SUCCESS);
		head++;
	}
	if (head == qp->sq_tx &&
	    head < atomic_load_explicit(&qp->sq_tail, memory_order_acquire) &&
	    qp->sq[head & (qp->sq_depth - 1)].status != DAT_DTO_SUCCESS) {
		QP_WHY(qp, "local protection or length error");
		qp_break(qp);
	}
}

static void hdr_init(struct zd_tcp_hdr *h, unsigned op, uint32_t seq)
{
	memset(h, 0, sizeof(*h));
	h->magic = htole32(ZD_TCP_WIRE_MAGIC);
	h->version = ZD_TCP_WIRE_VERSION;
	h->op = (uint8_t)op;
	h->seq = htole32(seq);
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

/* Builds the next frame to send; false if there is none. */
static bool tx_next(struct zd_tcp_qp *qp)
{
	struct zd_tcp_hdr *h = &qp->tx_hdr;

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
		h->token = htole64(qp->peer_token);
		qp->hello_sent = true;
		return true;
	}
	if (!qp->hello_rcvd)
		return false;
	if (qp->ack_pending) {
		hdr_init(h, ZD_TCP_OP_ACK, qp->ack_seq);
		qp->ack_pending = false;
		return true;
	}
	if (qp->resp_head != qp->resp_tail) {
		uint32_t i = qp->resp_head % ZD_TCP_RESP_DEPTH;
		struct zd_tcp_seg s = { .addr = qp->resp[i].addr, .len = qp->resp[i].len };

		hdr_init(h, ZD_TCP_OP_READ_RESP, qp->resp[i].seq);
		h->len = htole32(qp->resp[i].len);
		tx_segs(qp, &s, 1);
		qp->resp_head++;
		return true;
	}
	/* acquire: pairs with the poster's release store of sq_tail. */
	if (qp->sq_tx < atomic_load_explicit(&qp->sq_tail, memory_order_acquire)) {
		const struct zd_tcp_wr *wr = &qp->sq[qp->sq_tx & (qp->sq_depth - 1)];

		if (wr->status != DAT_DTO_SUCCESS)
			return false;  /* sq_complete breaks the QP when its turn comes */
		switch (wr->op) {
		case DAT_DTO_SEND:
			hdr_init(h, ZD_TCP_OP_SEND, (uint32_t)(qp->sq_tx - qp->sq_base));
			h->len = htole32((uint32_t)wr->total);
			if (wr->flags & DAT_COMPLETION_SOLICITED_WAIT_FLAG)
				h->flags = htole16(ZD_TCP_FLAG_SOLICITED);
			tx_segs(qp, wr->seg, wr->nseg);
			break;
		case DAT_DTO_RDMA_WRITE:
			hdr_init(h, ZD_TCP_OP_RDMA_WRITE, (uint32_t)(qp->sq_tx - qp->sq_base));
			h->len = htole32((uint32_t)wr->total);
			h->rkey = htole32(wr->rkey);
			h->raddr = htole64(wr->raddr);
			tx_segs(qp, wr->seg, wr->nseg);
			break;
		default:
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

static void tx_progress(struct zd_tcp_qp *qp)
{
	for (;;) {
		struct msghdr m;
		ssize_t n;

		if (!qp->tx_busy) {
			if (!tx_next(qp))
				break;
			qp->tx_busy = true;
		}
		memset(&m, 0, sizeof(m));
		m.msg_iov = qp->tx_iov;
		m.msg_iovlen = qp->tx_niov;
		n = sendmsg(qp->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				bool was = atomic_exchange_explicit(&qp->tx_pending, 1,
								    memory_order_relaxed);

				/* The thread must see the socket drain. */
				if (!was)
					zd_tcp_qp_auto_arm(qp);
				return;
			}
			QP_WHY(qp, "send failed");
			qp_break(qp);
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
	atomic_store_explicit(&qp->tx_pending, 0, memory_order_relaxed);
}

/* ---- receive ---- */

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
	/* The last byte gets its own copy: the kernel's copy into one iovec
	 * entry is a string operation whose stores other CPUs may see out of
	 * order, and a target polling the last byte of an RDMA write (dtest
	 * -W) must find everything before it in place once it changes. */
	if (qp->rx_niov && qp->rx_iov[qp->rx_niov - 1].iov_len > 1) {
		struct iovec *v = &qp->rx_iov[qp->rx_niov - 1];

		v->iov_len--;
		qp->rx_iov[qp->rx_niov].iov_base = (char *)v->iov_base + v->iov_len;
		qp->rx_iov[qp->rx_niov].iov_len = 1;
		qp->rx_niov++;
	}
	qp->rx_in_payload = qp->rx_left != 0;
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

/* Early sends into the receives posted since, in order. */
static void eager_match(struct zd_tcp_qp *qp)
{
	while (qp->eager_head != qp->eager_tail) {
		uint32_t i = qp->eager_head % ZD_TCP_EAGER_SLOTS, len = qp->eager[i].len, off = 0;
		const uint8_t *src = qp->eager_buf + (size_t)i * ZD_TCP_EAGER_SIZE;
		struct zd_tcp_recv r;

		if (!take_recv(qp, &r))
			break;
		qp->eager_head++;
		if (len > r.total) {
			recv_complete(qp, r.cookie, DAT_DTO_ERR_LOCAL_LENGTH, 0);
			QP_WHY(qp, "early send longer than its receive");
			qp_break(qp);
			return;
		}
		for (uint32_t k = 0; k < r.nseg && off < len; k++) {
			uint32_t n = (uint32_t)ZD_MIN(r.seg[k].len, (uint64_t)(len - off));

			memcpy((void *)(uintptr_t)r.seg[k].addr, src + off, n);
			off += n;
		}
		recv_complete(qp, r.cookie, DAT_DTO_SUCCESS, len);
		if (qp->srq)
			zd_tcp_srq_check_lw(qp->srq);
	}
	atomic_store_explicit(&qp->eager_n, qp->eager_tail - qp->eager_head, memory_order_relaxed);
}

static void rx_finish(struct zd_tcp_qp *qp)
{
	switch (qp->rx_kind) {
	case 1:
		/* No ACK for a send (its sender completed it already): one
		 * frame and one system call less per message each way. */
		recv_complete(qp, qp->rx_recv.cookie, DAT_DTO_SUCCESS, le32toh(qp->rx_hdr.len));
		if (qp->srq)
			zd_tcp_srq_check_lw(qp->srq);
		break;
	case 2:
		qp->ack_pending = true;
		qp->ack_seq = le32toh(qp->rx_hdr.seq);
		break;
	case 3:
		qp->sq[qp->rx_wr & (qp->sq_depth - 1)].done = 1;
		break;
	case 4:
		qp->eager_tail++;
		atomic_store_explicit(&qp->eager_n, qp->eager_tail - qp->eager_head,
				      memory_order_relaxed);
		break;
	}
	qp->rx_kind = 0;
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
	};
	enum zd_tcp_frame_verdict v = zd_tcp_frame_check(h, &lim);
	uint32_t seq = le32toh(h->seq), len = le32toh(h->len);
	uint32_t rkey = le32toh(h->rkey), rlen = le32toh(h->rlen);
	uint64_t raddr = le64toh(h->raddr), pos;
	struct zd_ia *ia = qp->ep->obj.ia;
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
		fd_close(qp, &qp->lis_fd);
		qp->rx_hgot = 0;
		return RX_OK;
	}
	/* zd_tcp_frame_check did the seq, len and rlen rules per op. */
	switch (h->op) {
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
			es.addr = (uint64_t)(uintptr_t)(qp->eager_buf + (size_t)i * ZD_TCP_EAGER_SIZE);
			es.len = len;
			qp->rx_expect++;
			qp->rx_kind = 4;
			rx_segs(qp, &es, 1, len);
			return RX_OK;
		}
		qp->rx_expect++;
		qp->rx_kind = 1;
		if (len > qp->rx_recv.total) {
			recv_complete(qp, qp->rx_recv.cookie, DAT_DTO_ERR_LOCAL_LENGTH, 0);
			qp->rx_kind = 0;
			qp_nak(qp, seq, DAT_DTO_ERR_REMOTE_RESPONDER);
			return RX_BROKEN;
		}
		rx_segs(qp, qp->rx_recv.seg, qp->rx_recv.nseg, len);
		return RX_OK;
	case ZD_TCP_OP_RDMA_WRITE:
		qp->rx_expect++;
		if (!zd_keys_lmr_covers(ia, rkey, ZD_KEY_REMOTE, qp->ep->pz,
					DAT_MEM_PRIV_REMOTE_WRITE_FLAG, raddr, len ? len : 1, NULL)) {
			qp_nak(qp, seq, DAT_DTO_ERR_REMOTE_ACCESS);
			return RX_BROKEN;
		}
		qp->rx_kind = 2;
		{
			struct zd_tcp_seg s = { .addr = raddr, .len = len };

			rx_segs(qp, &s, 1, len);
		}
		return RX_OK;
	case ZD_TCP_OP_READ_REQ:
		if (qp->resp_tail - qp->resp_head >= ZD_TCP_RESP_DEPTH)
			return RX_STALL;  /* answers pile up: stop reading */
		qp->rx_expect++;
		if (!zd_keys_lmr_covers(ia, rkey, ZD_KEY_REMOTE, qp->ep->pz,
					DAT_MEM_PRIV_REMOTE_READ_FLAG, raddr, rlen ? rlen : 1, NULL)) {
			qp_nak(qp, seq, DAT_DTO_ERR_REMOTE_ACCESS);
			return RX_BROKEN;
		}
		{
			uint32_t i = qp->resp_tail++ % ZD_TCP_RESP_DEPTH;

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
		qp->rx_kind = 3;
		qp->rx_wr = pos;
		rx_segs(qp, wr->seg, wr->nseg, len);
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
		sq_complete(qp);
		wr = &qp->sq[pos & (qp->sq_depth - 1)];
		wr->status = rlen >= DAT_DTO_ERR_LOCAL_LENGTH && rlen <= DAT_DTO_ERR_PARTIAL_PACKET &&
			     rlen != DAT_DTO_ERR_FLUSHED ? rlen : DAT_DTO_ERR_REMOTE_RESPONDER;
		QP_WHY(qp, "NAK received");
		qp_break(qp);
		return RX_BROKEN;
	default:
		goto bad;  /* not reached: zd_tcp_frame_check refused the op */
	}
foreign:
	if (!qp->connector && qp->lis_fd >= 0) {
		/* Not our peer: drop that socket and keep listening. */
		fd_close(qp, &qp->fd);
		qp->cstate = ZD_TCP_LISTEN;
		qp->rx_hgot = 0;
		qp->rx_off = qp->rx_end = 0;
		return RX_BROKEN;
	}
bad:
	QP_WHY(qp, why);
	qp_break_violation(qp);
	return RX_BROKEN;
}

/* One recv into the empty staging buffer: a small frame's header and
 * payload, and the frames behind it, in one system call. */
static ssize_t rx_fill(struct zd_tcp_qp *qp)
{
	ssize_t n = recv(qp->fd, qp->rx_buf, ZD_TCP_RX_STAGE, MSG_DONTWAIT);

	qp->rx_off = 0;
	qp->rx_end = n > 0 ? (uint32_t)n : 0;
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

/* Places up to @n staged payload bytes.  The payload's last byte is its own
 * iovec (rx_segs) and is stored after a store fence, so a target polling
 * it finds the rest in place (glibc's memcpy may use string or
 * non-temporal stores, which other CPUs can see out of order). */
static void rx_copy(struct zd_tcp_qp *qp, uint32_t n)
{
	const uint8_t *src = qp->rx_buf + qp->rx_off;

	qp->rx_off += n;
	while (n > 0) {
		struct iovec *v = &qp->rx_iov[qp->rx_iov_i];
		uint32_t k = (uint32_t)ZD_MIN((size_t)n, v->iov_len);

		if (qp->rx_iov_i + 1 == qp->rx_niov && qp->rx_niov > 1) {
#if defined(__x86_64__) || defined(__i386__)
			__builtin_ia32_sfence();
#else
			atomic_thread_fence(memory_order_release);
#endif
		}
		memcpy(v->iov_base, src, k);
		src += k;
		n -= k;
		rx_advance(qp, k);
	}
}

static void rx_progress(struct zd_tcp_qp *qp)
{
	if (qp->eager_head != qp->eager_tail) {
		eager_match(qp);
		if (atomic_load_explicit(&qp->error, memory_order_relaxed))
			return;
	}
	/* Staged frames are all taken before returning (arm only watches the
	 * socket); the batch bounds the system calls. */
	for (int frames = 0;;) {
		uint32_t avail = qp->rx_end - qp->rx_off;
		ssize_t n;

		if (!qp->rx_in_payload) {
			int r;

			if (qp->rx_hgot < sizeof(qp->rx_hdr)) {
				uint32_t k = ZD_MIN(avail, (uint32_t)sizeof(qp->rx_hdr) - qp->rx_hgot);

				if (k == 0) {
					if (frames >= ZD_TCP_RX_BATCH)
						return;
					n = rx_fill(qp);
					if (n <= 0)
						goto io;
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
				if (qp->rx_kind)
					rx_finish(qp);
				qp->rx_hgot = 0;
				frames++;
			}
			continue;
		}
		if (avail) {
			rx_copy(qp, (uint32_t)ZD_MIN((uint64_t)avail, qp->rx_left));
		} else if (frames >= ZD_TCP_RX_BATCH) {
			return;
		} else if (qp->rx_left < ZD_TCP_RX_DIRECT) {
			n = rx_fill(qp);
			if (n <= 0)
				goto io;
			continue;
		} else {
			/* Large: straight into the destination, no copy. */
			n = readv(qp->fd, qp->rx_iov + qp->rx_iov_i,
				  (int)(qp->rx_niov - qp->rx_iov_i));
			if (n <= 0)
				goto io;
			rx_advance(qp, (size_t)n);
		}
		if (qp->rx_left == 0) {
			qp->rx_in_payload = false;
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
		QP_WHY(qp, n == 0 ? "EOF" : "receive failed");
		if (!qp->hello_rcvd && !qp->connector && qp->lis_fd >= 0) {
			fd_close(qp, &qp->fd);
			qp->cstate = ZD_TCP_LISTEN;
			qp->rx_hgot = 0;
			qp->rx_off = qp->rx_end = 0;
			return;
		}
		qp_break(qp);
		return;
	}
}

/* Accept or finish connecting. */
static void conn_progress(struct zd_tcp_qp *qp)
{
	if (qp->cstate == ZD_TCP_LISTEN) {
		int fd = accept4(qp->lis_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			    errno != ECONNABORTED) {
				QP_WHY(qp, "accept failed");
				qp_break(qp);
			}
			return;
		}
		fd_set_data(qp, fd);
		qp->rx_hgot = 0;
		qp->rx_off = qp->rx_end = 0;
		qp->cstate = ZD_TCP_UP;
		zd_tcp_qp_auto_arm(qp);
	} else if (qp->cstate == ZD_TCP_CONNECTING) {
		struct pollfd p = { .fd = qp->fd, .events = POLLOUT };
		int err = 0;
		socklen_t l = sizeof(err);

		if (poll(&p, 1, 0) <= 0)
			return;
		if (getsockopt(qp->fd, SOL_SOCKET, SO_ERROR, &err, &l) != 0 || err != 0) {
			errno = err;
			QP_WHY(qp, "connect failed");
			qp_break(qp);
			return;
		}
		qp->cstate = ZD_TCP_UP;
		zd_tcp_qp_auto_arm(qp);
	}
}

/* Graceful end (qp_flush): what the peer sent before it disconnected
 * still completes, as the HCA would have: everything the socket holds is
 * read, and a frame already begun is waited for (the rest of it is on its
 * way: the peer's kernel had it before the peer's DISC went out, see
 * zd_tcp_qp_flush), for ZD_TCP_HARVEST_MS at most. */
static void harvest(struct zd_tcp_qp *qp)
{
	for (int waited = 0; qp->cstate == ZD_TCP_UP &&
	     !atomic_load_explicit(&qp->error, memory_order_relaxed);) {
		struct pollfd p = { .fd = qp->fd, .events = POLLIN };
		int queued = 0;

		rx_progress(qp);
		if (qp->cstate != ZD_TCP_UP || atomic_load_explicit(&qp->error, memory_order_relaxed) ||
		    atomic_load_explicit(&qp->rx_stalled, memory_order_relaxed))
			break;  /* ended, or a send waits for a receive */
		if (qp->rx_off != qp->rx_end ||
		    (ioctl(qp->fd, SIOCINQ, &queued) == 0 && queued > 0))
			continue;  /* more than one batch */
		if (!qp->rx_in_payload && qp->rx_hgot == 0)
			break;  /* between frames, nothing more */
		if (waited >= ZD_TCP_HARVEST_MS || poll(&p, 1, 1) < 0)
			break;
		waited++;
	}
}

static void qp_work(struct zd_tcp_qp *qp, uint32_t want)
{
	if (want & ZD_TCP_W_FLUSH) {
		if (!qp->flushed)
			QP_WHY(qp, "flush asked (disconnect, reset, local check)");
		qp->local_end = true;
		if (!qp->flushed)
			harvest(qp);
		if (qp->cstate == ZD_TCP_UP)
			sq_complete(qp);
		atomic_store(&qp->error, 1);
	}
	if (atomic_load_explicit(&qp->error, memory_order_relaxed)) {
		qp_flush_locked(qp);
		return;
	}
	if (qp->cstate == ZD_TCP_LISTEN || qp->cstate == ZD_TCP_CONNECTING)
		conn_progress(qp);
	if (qp->cstate == ZD_TCP_UP) {
		/* Our HELLO first (the connector's unblocks the acceptor). */
		tx_progress(qp);
		if (qp->cstate == ZD_TCP_UP && (want & ZD_TCP_W_RX))
			rx_progress(qp);
		if (qp->cstate == ZD_TCP_UP)
			tx_progress(qp);
	}
	if (!atomic_load_explicit(&qp->error, memory_order_relaxed))
		sq_complete(qp);
	if (atomic_load_explicit(&qp->error, memory_order_relaxed))
		qp_flush_locked(qp);
}

void zd_tcp_qp_progress(struct zd_tcp_qp *qp, uint32_t bits)
{
	/* seq_cst RMWs and store/load (Dekker on want vs busy): either we get
	 * the flag, or its holder's final load of want sees our bits. */
	if (bits)
		atomic_fetch_or(&qp->want, bits);
	for (;;) {
		uint32_t w;

		if (atomic_exchange(&qp->busy, 1))
			return;
		while ((w = atomic_exchange(&qp->want, 0)) != 0)
			qp_work(qp, w);
		atomic_store(&qp->busy, 0);
		if (!atomic_load(&qp->want))
			return;
	}
}
