/*
 * QPs of the tcp device: lifetime and the socket.  Create, reset and
 * destroy; the connection blob and connect; the CM's socket taken over
 * (qp_carry) and the CM's frames queued for it (qp_cm_send); a data
 * connection of its own (progress=manual: the listener, accept and the
 * non-blocking connect, zd_tcp_conn_progress); arming the socket in the
 * IA's epoll set.  Data moves elsewhere: zd_tcp_tx.c, zd_tcp_rx.c, and
 * the end of a connection is zd_tcp_flush.c.  See zd_tcp.h for the model
 * and zd_tcp_wire.h for the protocol.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "core/zd_cm.h"
#include "core/zd_ia.h"
#include "core/zd_ep.h"
#include "core/zd_srq.h"
#include "evd/zd_evd.h"
#include "hw/tcp/zd_tcp.h"
#include "hw/tcp/zd_tcp_ud.h"

/* The CM frame types of the stream are the CM's own. */
_Static_assert(ZD_TCP_CM_DISC == ZD_CM_MSG_DISC && ZD_TCP_CM_DISC_ACK == ZD_CM_MSG_DISC_ACK &&
		       ZD_TCP_CM_PING == ZD_CM_MSG_PING && ZD_TCP_CM_PONG == ZD_CM_MSG_PONG,
	       "tcp's CM frame types follow core/zd_cm_wire.h");

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

/* The CQs whose epoll sets watch @qp's socket. */
static int watch_sets(const struct zd_tcp_qp *qp, int epfd[2])
{
	int n = 0;

	if (qp->recv_cq && qp->recv_cq->epfd >= 0)
		epfd[n++] = qp->recv_cq->epfd;
	if (qp->req_cq && qp->req_cq != qp->recv_cq && qp->req_cq->epfd >= 0)
		epfd[n++] = qp->req_cq->epfd;
	return n;
}

/* Under fd_lock. */
static void watch_drop(struct zd_tcp_qp *qp)
{
	int epfd[2], n = watch_sets(qp, epfd);

	if (qp->watch_fd >= 0)
		for (int i = 0; i < n; i++)
			epoll_ctl(epfd[i], EPOLL_CTL_DEL, qp->watch_fd, NULL);
	qp->watch_fd = -1;
	qp->watch_events = 0;
}

void zd_tcp_qp_watch(struct zd_tcp_qp *qp)
{
	int epfd[2], n, fd = -1;
	uint32_t ev = 0;

	pthread_mutex_lock(&qp->fd_lock);
	switch (__atomic_load_n(&qp->cstate, __ATOMIC_RELAXED)) {
	case ZD_TCP_LISTEN:
		fd = qp->lis_fd;
		ev = EPOLLIN;
		break;
	case ZD_TCP_CONNECTING:
		fd = qp->fd;
		ev = EPOLLOUT;
		break;
	case ZD_TCP_UP:
		fd = qp->fd;
		ev = EPOLLIN | (atomic_load_explicit(&qp->tx_pending, memory_order_relaxed) ?
				EPOLLOUT : 0);
		break;
	default:
		break;
	}
	if (fd < 0 || qp->unwatched)
		fd = -1, ev = 0;
	if (fd != qp->watch_fd || ev != qp->watch_events) {
		/* The same socket: one MOD (connected, backpressure). */
		int op = fd >= 0 && fd == qp->watch_fd ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;

		if (op == EPOLL_CTL_ADD)
			watch_drop(qp);
		n = watch_sets(qp, epfd);
		for (int i = 0; fd >= 0 && i < n; i++) {
			struct epoll_event e = { .events = ev, .data.ptr = qp };

			epoll_ctl(epfd[i], op, fd, &e);
		}
		qp->watch_fd = fd;
		qp->watch_events = ev;
	}
	pthread_mutex_unlock(&qp->fd_lock);
}

void zd_tcp_qp_unwatch(struct zd_tcp_qp *qp)
{
	pthread_mutex_lock(&qp->fd_lock);
	qp->unwatched = true;
	watch_drop(qp);
	pthread_mutex_unlock(&qp->fd_lock);
}

/* The carried sockets of this process: a forked child closes its copies,
 * as the CM closes its own sockets there (zd_cm.c), so a peer still sees
 * the connection end when this process does.  A leaf lock. */
static pthread_mutex_t carried_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *carried_fds;            /* [fd]: 1 while a QP carries it */
static size_t carried_cap;

static void carried_mark(int fd, bool on)
{
	pthread_mutex_lock(&carried_lock);
	if (on && (size_t)fd >= carried_cap) {
		size_t cap = ZD_MAX((size_t)fd + 1, 2 * carried_cap);
		uint8_t *m = realloc(carried_fds, cap);

		if (m) {
			memset(m + carried_cap, 0, cap - carried_cap);
			carried_fds = m;
			carried_cap = cap;
		}
	}
	if ((size_t)fd < carried_cap)
		carried_fds[fd] = on;  /* (out of memory: the child keeps that one) */
	pthread_mutex_unlock(&carried_lock);
}

static void carried_prepare(void)
{
	pthread_mutex_lock(&carried_lock);
}

static void carried_parent(void)
{
	pthread_mutex_unlock(&carried_lock);
}

static void carried_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	for (size_t fd = 0; fd < carried_cap; fd++)
		if (carried_fds[fd]) {
			close((int)fd);
			carried_fds[fd] = 0;
		}
	carried_lock = fresh;
}

__attribute__((constructor)) static void carried_register_atfork(void)
{
	pthread_atfork(carried_prepare, carried_parent, carried_child);
}

/* Closes @*fdp (under fd_lock: cq_arm never sees a stale number). */
void zd_tcp_fd_close(struct zd_tcp_qp *qp, int *fdp)
{
	pthread_mutex_lock(&qp->fd_lock);
	if (*fdp >= 0 && *fdp == qp->watch_fd)
		watch_drop(qp);
	if (*fdp >= 0) {
		epoll_ctl(qp->tia->epfd, EPOLL_CTL_DEL, *fdp, NULL);
		if (qp->carried && fdp == &qp->fd)
			carried_mark(*fdp, false);
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
	 * bounded time; zd_tcp_qp_break then tells the CM (zd_cm_dev_broken). */
	zd_cm_sock_keepalive(fd);
	pthread_mutex_lock(&qp->fd_lock);
	qp->fd = fd;
	fd_register(qp, fd);
	pthread_mutex_unlock(&qp->fd_lock);
}

/* The socket the active side's data connection comes to (a data
 * connection of its own, passive side): 0, or -1 after a line on stderr. */
static int qp_listen(struct zd_tcp_qp *qp)
{
	struct sockaddr_in sa = qp->ep->obj.ia->addr;
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	const char *step = "socket";

	if (fd < 0)
		goto err;
	sa.sin_family = AF_INET;
	sa.sin_port = 0;
	step = "bind";
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		goto err;
	step = "listen";
	if (listen(fd, 4) != 0 || getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
		goto err;
	qp->lis_addr = sa.sin_addr.s_addr;
	qp->lis_port = sa.sin_port;
	pthread_mutex_lock(&qp->fd_lock);
	qp->lis_fd = fd;
	fd_register(qp, fd);
	pthread_mutex_unlock(&qp->fd_lock);
	return 0;
err:
	zd_log_rate_limited("tcp: no listening socket for an EP's data connection on %s: %s: %s",
			    inet_ntoa(qp->ep->obj.ia->addr.sin_addr), step, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

/* A random token for our blob: the peer's HELLO must carry it. */
static void token_draw(struct zd_tcp_qp *qp)
{
	if (getrandom(&qp->token, sizeof(qp->token), 0) != sizeof(qp->token))
		qp->token = (uint64_t)(uintptr_t)qp ^ ((uint64_t)getpid() << 32) ^ zd_cm_now();
}

/* Protocol state back to "nothing happened" (holder or sole owner). */
static void qp_state_init(struct zd_tcp_qp *qp)
{
	zd_tcp_qp_set_cstate(qp, ZD_TCP_IDLE);
	qp->local_end = qp->reported = false;
	qp->blob_sent = qp->peer_ok = qp->carried = false;
	qp->hello_sent = qp->hello_rcvd = false;
	qp->connector = false;
	atomic_store(&qp->ctl_head, atomic_load(&qp->ctl_tail));
	qp->tx_busy = qp->tx_is_req = false;
	qp->tx_left = 0;
	qp->ack_pending = qp->nak_pending = false;
	qp->resp_head = qp->resp_tail = 0;
	qp->rx_hgot = 0;
	qp->rx_off = qp->rx_end = 0;
	qp->rx_in_payload = false;
	qp->rx_remote = qp->rx_discard = false;
	qp->rx_kind = ZD_TCP_RX_NONE;
	qp->rx_expect = 0;
	qp->eager_head = qp->eager_tail = 0;
	atomic_store(&qp->eager_n, 0);
	qp->sq_tx = atomic_load(&qp->sq_head);
	qp->sq_acked = qp->sq_base = qp->sq_tx;
	atomic_store(&qp->tx_pending, 0);
	atomic_store(&qp->rx_stalled, 0);
}

/* The descriptor the accept of our data socket takes: held from
 * qp_local_blob so that, out of descriptors, the connection is refused
 * there (the CM tells both sides) instead of breaking once established. */
static int accept_spare_take(struct zd_tcp_qp *qp)
{
	if (qp->accept_spare < 0)
		qp->accept_spare = fcntl(qp->lis_fd, F_DUPFD_CLOEXEC, 0);
	return qp->accept_spare;
}

static void accept_spare_drop(struct zd_tcp_qp *qp)
{
	if (qp->accept_spare >= 0)
		close(qp->accept_spare);
	qp->accept_spare = -1;
}

/* Sockets closed, memory freed: the end of create's error path and of
 * destroy. */
static void qp_free(struct zd_tcp_qp *qp)
{
	accept_spare_drop(qp);
	zd_tcp_fd_close(qp, &qp->fd);
	zd_tcp_fd_close(qp, &qp->lis_fd);
	pthread_mutex_destroy(&qp->fd_lock);
	free(qp->rq);
	free(qp->sq);
	free(qp->eager_buf);
	free(qp->rx_buf);
	free(qp->ud);
	free(qp);
}

DAT_RETURN zd_tcp_qp_create(struct zd_ep *ep)
{
	struct zd_tcp_ia *tia = ep->obj.ia->dev_priv;
	struct zd_tcp_qp *qp = calloc(1, sizeof(*qp));
	DAT_RETURN ret = DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);

	if (!qp)
		return ret;
	if (tia->auto_progress && !__atomic_load_n(&tia->waker_running, __ATOMIC_ACQUIRE) &&
	    zd_tcp_waker_start(tia) != 0) {
		free(qp);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
	}
	qp->ep = ep;
	qp->tia = tia;
	qp->fd = qp->lis_fd = qp->watch_fd = qp->accept_spare = -1;
	pthread_mutex_init(&qp->fd_lock, NULL);
	qp->srq = ep->srq ? ep->srq->dev_priv : NULL;
	qp->rq_depth = pow2_at_least((uint64_t)ZD_MAX(ep->attr.max_recv_dtos, 1), 1);
	qp->sq_depth = pow2_at_least((uint64_t)ZD_MAX(ep->attr.max_request_dtos, 1), 1);
	qp->rq = calloc(qp->rq_depth, sizeof(*qp->rq));
	if (!qp->rq)
		goto err;
	if (zd_ep_is_ud(ep)) {
		/* A receive queue and a datagram socket: no send queue, no
		 * connection (zd_tcp_ud.c). */
		qp_state_init(qp);
		if (zd_tcp_ud_open(qp) != 0) {
			ret = DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
			goto err;
		}
	} else {
		qp->sq = calloc(qp->sq_depth, sizeof(*qp->sq));
		/* calloc of this size maps fresh pages: they cost memory
		 * only once an early send lands there. */
		qp->eager_buf = calloc(ZD_TCP_EAGER_SLOTS, ZD_TCP_EAGER_SIZE);
		qp->rx_buf = malloc(ZD_TCP_RX_STAGE);
		if (!qp->sq || !qp->eager_buf || !qp->rx_buf)
			goto err;
		/* No socket until it connects (the CM's, handed over, or a
		 * data connection of its own). */
		qp_state_init(qp);
	}
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
	/* Its CQs known: their pollers see its socket from now on. */
	zd_tcp_qp_watch(qp);
	ep->dev_priv = qp;
	zd_ep_dto_refresh(ep);
	/* A UD QP reads from now on (listed first: the IA's thread serves
	 * only listed QPs). */
	if (qp->ud)
		zd_tcp_qp_auto_arm(qp);
	return DAT_SUCCESS;
err_unlock:
	pthread_mutex_unlock(&tia->lock);
err:
	qp_free(qp);
	return ret;
}

size_t zd_tcp_qp_local_blob(struct zd_ep *ep, void *blob, size_t max)
{
	struct zd_tcp_qp *qp = ep->dev_priv;
	struct zd_tcp_blob b;
	bool listens = false;

	if (!qp || max < sizeof(b))
		return 0;
	if (qp->ud)
		return zd_tcp_ud_blob(qp, blob, max);
	/* A QP used by an earlier connection and not reset: start over
	 * before its blob goes out. */
	if (__atomic_load_n(&qp->stale, __ATOMIC_ACQUIRE) && zd_tcp_qp_reset(ep) != DAT_SUCCESS)
		return 0;
	memset(&b, 0, sizeof(b));
	b.magic = htole32(ZD_TCP_BLOB_MAGIC);
	b.version = htole16(ZD_TCP_WIRE_VERSION);
	zd_tcp_qp_lock(qp);
	if (!qp->peer_ok) {
		/* Active (REQ): whether we can ride the CM's socket. */
		token_draw(qp);
		if (qp->tia->auto_progress)
			b.flags = htole32(ZD_TCP_BLOB_CARRY);
	} else if (qp->carried) {
		b.flags = htole32(ZD_TCP_BLOB_CARRY);  /* passive (REP): we will */
	} else if (qp_listen(qp) != 0 || accept_spare_take(qp) < 0) {
		/* Passive, a data connection of its own: out of descriptors. */
		zd_tcp_qp_unlock(qp);
		return 0;
	} else {
		token_draw(qp);
		b.addr = qp->lis_addr;
		b.port = qp->lis_port;
		zd_tcp_qp_set_cstate(qp, ZD_TCP_LISTEN);
		listens = true;
	}
	b.token = htole64(qp->token);
	qp->blob_sent = true;
	zd_tcp_qp_unlock(qp);
	if (listens)
		zd_tcp_qp_auto_arm(qp);
	memcpy(blob, &b, sizeof(b));
	return sizeof(b);
}

DAT_RETURN zd_tcp_qp_connect(struct zd_ep *ep, const void *peer_blob, size_t len)
{
	struct zd_tcp_qp *qp = ep->dev_priv;
	struct zd_tcp_blob b;
	struct sockaddr_in sa;
	int fd;

	if (!qp || qp->ud)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (len == 0) {
		/* A peer without a data path (a bare CM peer): connected,
		 * but every DTO completes flushed (and the CM keeps its
		 * socket: qp_carry answers 0). */
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
	    (qp->blob_sent && le64toh(b.token) == qp->token)) {
		zd_log_error("tcp: the peer's QP speaks another protocol version (%u, want %u)",
			     le16toh(b.version), ZD_TCP_WIRE_VERSION);
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	}
	zd_tcp_qp_lock(qp);
	if (qp->cstate != ZD_TCP_IDLE || atomic_load(&qp->error) || qp->peer_ok) {
		zd_tcp_qp_unlock(qp);
		return DAT_ERROR(DAT_INVALID_STATE, DAT_NO_SUBTYPE);
	}
	qp->peer_ok = true;
	qp->peer_token = le64toh(b.token);
	if (!qp->blob_sent) {
		/* Passive: our blob (REP) follows and says what we chose. */
		qp->carried = qp->tia->auto_progress && (le32toh(b.flags) & ZD_TCP_BLOB_CARRY);
		zd_tcp_qp_unlock(qp);
		return DAT_SUCCESS;
	}
	/* Active: the passive side chose. */
	qp->carried = qp->tia->auto_progress && (le32toh(b.flags) & ZD_TCP_BLOB_CARRY);
	if (qp->carried) {
		/* The CM's socket comes once the connection is established. */
		zd_tcp_qp_unlock(qp);
		return DAT_SUCCESS;
	}
	if (b.port == 0) {
		zd_tcp_qp_unlock(qp);
		zd_log_error("tcp: the peer's QP names no data connection to open");
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	}
	qp->connector = true;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		/* Out of descriptors: the CM refuses the connection (and says
		 * why, zd_cm_qp_connect). */
		zd_tcp_qp_set_cstate(qp, ZD_TCP_DOWN);
		atomic_store(&qp->error, 1);
		zd_tcp_qp_unlock(qp);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = b.addr;
	sa.sin_port = b.port;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS) {
		zd_log_rate_limited("tcp: cannot connect the data socket to %s:%u: %s (its DTOs "
				    "flush)", inet_ntoa(sa.sin_addr), ntohs(sa.sin_port),
				    strerror(errno));
		close(fd);
		zd_tcp_qp_set_cstate(qp, ZD_TCP_DOWN);
		atomic_store(&qp->error, 1);
		zd_tcp_qp_unlock(qp);
		zd_tcp_qp_progress(qp, ZD_TCP_W_FLUSH);
		return DAT_SUCCESS;  /* the CM's connection stands; DTOs flush */
	}
	fd_set_data(qp, fd);
	zd_tcp_qp_set_cstate(qp, ZD_TCP_CONNECTING);
	zd_tcp_qp_unlock(qp);
	zd_tcp_qp_auto_arm(qp);
	/* Start the handshake now if the connect is already through. */
	zd_tcp_qp_progress(qp, ZD_TCP_W_TX);
	return DAT_SUCCESS;
}

int zd_tcp_qp_carry(struct zd_ep *ep, int fd)
{
	struct zd_tcp_qp *qp = ep->dev_priv;
	int one = 1;

	if (!qp || qp->ud)
		return 0;
	zd_tcp_qp_lock(qp);
	if (!qp->peer_ok || !qp->carried) {
		/* A bare CM peer (its socket speaks only CM frames), or a
		 * data connection of our own. */
		zd_tcp_qp_unlock(qp);
		return 0;
	}
	if (qp->cstate != ZD_TCP_IDLE || atomic_load(&qp->error)) {
		zd_tcp_qp_unlock(qp);
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	carried_mark(fd, true);
	pthread_mutex_lock(&qp->fd_lock);
	qp->fd = fd;
	fd_register(qp, fd);
	pthread_mutex_unlock(&qp->fd_lock);
	qp->rx_hgot = 0;
	qp->rx_off = qp->rx_end = 0;
	qp->hello_sent = qp->hello_rcvd = true;  /* no HELLO: the CM's exchange was it */
	zd_tcp_qp_set_cstate(qp, ZD_TCP_UP);
	zd_tcp_qp_unlock(qp);
	/* Ours from here: the IA's thread reads it (the CM's frames among
	 * the data), requests posted before the hand-over go out, the peer's
	 * first frames are read. */
	zd_tcp_qp_auto_arm(qp);
	zd_tcp_qp_progress(qp, ZD_TCP_W_TX | ZD_TCP_W_RX);
	return 1;
}

int zd_tcp_qp_cm_send(struct zd_ep *ep, unsigned type, uint64_t id)
{
	struct zd_tcp_qp *qp = ep->dev_priv;
	uint32_t tail, i;

	/* Producers: callers hold zd_cm.lock, one at a time. */
	if (!qp || qp->ud)
		return -1;
	tail = atomic_load_explicit(&qp->ctl_tail, memory_order_relaxed);
	/* acquire: pairs with the holder's release of ctl_head: the slot
	 * is no longer read. */
	if (tail - atomic_load_explicit(&qp->ctl_head, memory_order_acquire) >= ZD_TCP_CTL_DEPTH)
		return -1;  /* the peer reads nothing: a lost PING is a silence */
	i = tail % ZD_TCP_CTL_DEPTH;
	qp->ctl[i].type = type;
	qp->ctl[i].id = id;
	/* A DISC or DISC_ACK follows every request posted before it. */
	qp->ctl[i].after = type == ZD_TCP_CM_PING || type == ZD_TCP_CM_PONG
				   ? 0 : atomic_load_explicit(&qp->sq_tail, memory_order_acquire);
	/* release: pairs with the holder's acquire load of ctl_tail. */
	atomic_store_explicit(&qp->ctl_tail, tail + 1, memory_order_release);
	zd_tcp_qp_progress(qp, ZD_TCP_W_TX);
	return 0;
}

DAT_RETURN zd_tcp_qp_reset(struct zd_ep *ep)
{
	struct zd_tcp_qp *qp = ep->dev_priv;

	/* (A UD EP is never DISCONNECTED: dat_ep_reset does not reach here.) */
	if (!qp || qp->ud)
		return DAT_SUCCESS;
	atomic_store(&qp->error, 1);
	zd_tcp_qp_lock(qp);
	qp->local_end = true;
	zd_tcp_qp_flush_locked(qp);
	accept_spare_drop(qp);
	zd_tcp_fd_close(qp, &qp->fd);
	zd_tcp_fd_close(qp, &qp->lis_fd);
	atomic_store(&qp->error, 0);
	qp->flushed = false;
	qp->stale = false;
	qp->lw_sent = false;
	qp_state_init(qp);
	/* Work asked of the old connection (a flush) must not hit the new. */
	atomic_store(&qp->want, 0);
	zd_tcp_qp_unlock(qp);
	return DAT_SUCCESS;
}

void zd_tcp_qp_destroy(struct zd_ep *ep)
{
	struct zd_tcp_qp *qp = ep->dev_priv, **pp;
	struct zd_tcp_ia *tia;

	if (!qp)
		return;
	tia = qp->tia;
	/* No poller finds it ready from here, and one that did is inside
	 * the grace period of the detach below. */
	zd_tcp_qp_unwatch(qp);
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
	zd_tcp_qp_lock(qp);
	qp->destroying = true;  /* no "last WQE" event naming a dead EP */
	zd_tcp_qp_flush_locked(qp);
	qp_free(qp);
	ep->dev_priv = NULL;
	zd_ep_dto_refresh(ep);
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

/* Accept or finish connecting. */
void zd_tcp_conn_progress(struct zd_tcp_qp *qp)
{
	if (qp->cstate == ZD_TCP_LISTEN) {
		int fd;

		accept_spare_drop(qp);
		fd = accept4(qp->lis_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
			       errno == ECONNABORTED))
			accept_spare_take(qp);  /* (nobody yet: keep the room) */
		if (fd < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
			    errno != ECONNABORTED) {
				/* (Out of descriptors: the connection breaks, as
				 * the kernel would keep waking us for it.) */
				zd_log_rate_limited("tcp: cannot accept the peer's data connection: "
						    "%s (the connection breaks)", strerror(errno));
				ZD_TCP_QP_WHY(qp, "accept failed");
				zd_tcp_qp_break(qp);
			}
			return;
		}
		fd_set_data(qp, fd);
		qp->rx_hgot = 0;
		qp->rx_off = qp->rx_end = 0;
		zd_tcp_qp_set_cstate(qp, ZD_TCP_UP);
		zd_tcp_qp_auto_arm(qp);
	} else if (qp->cstate == ZD_TCP_CONNECTING) {
		struct pollfd p = { .fd = qp->fd, .events = POLLOUT };
		int err = 0;
		socklen_t l = sizeof(err);

		if (poll(&p, 1, 0) <= 0)
			return;
		if (getsockopt(qp->fd, SOL_SOCKET, SO_ERROR, &err, &l) != 0 || err != 0) {
			errno = err;
			ZD_TCP_QP_WHY(qp, "connect failed");
			zd_tcp_qp_break(qp);
			return;
		}
		zd_tcp_qp_set_cstate(qp, ZD_TCP_UP);
		zd_tcp_qp_auto_arm(qp);
	}
}
