/*
 * The connection manager thread: epoll over non-blocking sockets, frame
 * reassembly, timers, and the socket-level half of the state machine (the
 * EP half is in zd_ep_cm.c, the passive half in zd_cr.c).  See zd_cm.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "core/zd_cm.h"
#include "core/zd_cm_liveness.h"
#include "core/zd_conn_qual.h"
#include "core/zd_ud.h"
#include "core/zd_ep.h"
#include "core/zd_ia.h"

struct zd_cm zd_cm = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.epfd = -1,
	.wake = { .kind = ZD_CM_SOCK_WAKE, .fd = -1 },
};

/* A descriptor kept in reserve: when the process has no other left, a
 * listener gives it up to accept and close what waits in its backlog,
 * which would otherwise wake epoll forever (the requesters see their
 * connection closed instead of hanging). */
static int spare_fd = -1;

/* Open listeners, so a forked child can close what it inherited. */
static struct zd_cm_listener *listeners[ZD_CM_MAX_LISTENERS];
static unsigned nlisteners;

/* Reports of dead data paths (zd_cm_dev_broken) and of carried
 * connections' frames (zd_cm_dev_frame), for the thread, in the order they
 * came.  A leaf lock: devices call in with their own locks held. */
static pthread_mutex_t broken_lock = PTHREAD_MUTEX_INITIALIZER;
static struct zd_cm_broken {
	struct zd_ep *ep;
	uint64_t serial;                 /* of the connection it had then */
	uint64_t due;
	bool frame;                      /* zd_cm_dev_frame's: type and id */
	unsigned type;
	uint64_t id;
} *broken;
static size_t nbroken, broken_cap;

/* Carried connections by serial (zd_cm_dev_frame names them so: its
 * report may outlive the conn's memory).  Under zd_cm.lock. */
#define CARRIED_BUCKETS 4096
static struct zd_cm_conn *carried_tab[CARRIED_BUCKETS];

static void carried_insert(struct zd_cm_conn *c)
{
	struct zd_cm_conn **b = &carried_tab[c->serial % CARRIED_BUCKETS];

	c->carried_next = *b;
	*b = c;
}

static void carried_remove(struct zd_cm_conn *c)
{
	struct zd_cm_conn **pp = &carried_tab[c->serial % CARRIED_BUCKETS];

	for (; *pp; pp = &(*pp)->carried_next)
		if (*pp == c) {
			*pp = c->carried_next;
			break;
		}
	c->carried_next = NULL;
}

static struct zd_cm_conn *carried_find(uint64_t serial)
{
	struct zd_cm_conn *c = carried_tab[serial % CARRIED_BUCKETS];

	while (c && c->serial != serial)
		c = c->carried_next;
	return c;
}

uint64_t zd_cm_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void conns_init(void)
{
	if (!zd_cm.conns.next)
		zd_cm.conns.next = zd_cm.conns.prev = &zd_cm.conns;
}

/* A forked child shares no thread with its parent, and must not keep the
 * parent's sockets open (the parent's peers would never see them close). */
static void cm_atfork_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	zd_cm.lock = fresh;
	broken_lock = fresh;
	nbroken = 0;  /* they name the parent's connections */
	memset(carried_tab, 0, sizeof(carried_tab));
	if (zd_cm.epfd >= 0)
		close(zd_cm.epfd);
	if (zd_cm.wake.fd >= 0)
		close(zd_cm.wake.fd);
	zd_cm.epfd = zd_cm.wake.fd = -1;
	/* Inherited sockets become zombies that are never freed: the child's
	 * copies of the parent's objects may still name them, harmlessly. */
	conns_init();
	for (struct zd_cm_conn *c = zd_cm.conns.next; c != &zd_cm.conns; c = c->next) {
		if (c->sock.fd >= 0)
			close(c->sock.fd);
		c->sock.fd = -1;
		c->sock.zombie = 1;
		c->peer_proc = NULL;
	}
	zd_cm_liveness_atfork_child();
	for (unsigned i = 0; i < nlisteners; i++) {
		close(listeners[i]->sock.fd);
		listeners[i]->sock.fd = -1;
		listeners[i]->sock.zombie = 1;
	}
	nlisteners = 0;
	if (spare_fd >= 0) {
		close(spare_fd);
		spare_fd = -1;
	}
	zd_cm.conns.next = zd_cm.conns.prev = &zd_cm.conns;
	zd_cm.zombies = NULL;
	zd_cm.running = 0;
	zd_cm.live = 0;
}

__attribute__((constructor)) static void cm_register_atfork(void)
{
	pthread_atfork(NULL, NULL, cm_atfork_child);
}

DAT_COUNT zd_cm_pdata_max(const struct zd_ia *ia)
{
	return ZD_MIN(ia->limits.max_private_data, ZD_CM_PDATA_MAX);
}

void zd_cm_kick(void)
{
	uint64_t one = 1;

	if (zd_cm.wake.fd >= 0 && write(zd_cm.wake.fd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is already non-zero, the thread wakes anyway. */
	}
}

static int cm_watch(struct zd_cm_sock *s, uint32_t events, int op)
{
	struct epoll_event ev = { .events = events, .data.ptr = s };

	return epoll_ctl(zd_cm.epfd, op, s->fd, &ev);
}

/* Closes the socket of @s and, unless @keep, queues @s to be freed by the
 * thread after its current batch. */
static void sock_close(struct zd_cm_sock *s, int keep)
{
	if (s->fd >= 0) {
		epoll_ctl(zd_cm.epfd, EPOLL_CTL_DEL, s->fd, NULL);
		close(s->fd);
		s->fd = -1;
	}
	if (!keep && !s->zombie) {
		s->zombie = 1;
		s->zombie_next = zd_cm.zombies;
		zd_cm.zombies = s;
		zd_cm.live--;
	}
}

static void cm_free_zombies(void)
{
	struct zd_cm_sock *s = zd_cm.zombies;

	zd_cm.zombies = NULL;
	while (s) {
		struct zd_cm_sock *next = s->zombie_next;

		free(s);
		s = next;
	}
}

static void *cm_thread(void *arg);

/* ---- the IA's CM counters (DCNT_IA_CM_*, zd_counters.h) ---- */

static void conn_count(const struct zd_cm_conn *c, DAT_IA_COUNTERS idx)
{
	if (c->ia)
		zd_count_ia(&c->ia->cnt, idx);
}

/* A frame of @type (@reason for a REJ) sent or received on @c: the
 * counter of the IB CM message it plays the part of. */
static void conn_count_frame(const struct zd_cm_conn *c, unsigned type, uint16_t reason, bool tx)
{
	static const DAT_IA_COUNTERS counter[ZD_CM_MSG_TYPE_END][2] = {
		[ZD_CM_MSG_REQ] = { DCNT_IA_CM_REQ_RX, DCNT_IA_CM_REQ_TX },
		[ZD_CM_MSG_REP] = { DCNT_IA_CM_REP_RX, DCNT_IA_CM_REP_TX },
		[ZD_CM_MSG_RTU] = { DCNT_IA_CM_RTU_RX, DCNT_IA_CM_RTU_TX },
		[ZD_CM_MSG_DISC] = { DCNT_IA_CM_DREQ_RX, DCNT_IA_CM_DREQ_TX },
		[ZD_CM_MSG_DISC_ACK] = { DCNT_IA_CM_DREP_RX, DCNT_IA_CM_DREP_TX },
		/* A UD address exchange: the address-handle request of IB's
		 * UD CM (SIDR). */
		[ZD_CM_MSG_UD_REQ] = { DCNT_IA_CM_AH_REQ_RX, DCNT_IA_CM_AH_REQ_TX },
		[ZD_CM_MSG_MRA] = { DCNT_IA_CM_MRA_RX, DCNT_IA_CM_MRA_TX },
	};

	if (type == ZD_CM_MSG_REJ)
		/* The consumer's reject, or the provider's (no service point,
		 * backlog full, a failed transport). */
		conn_count(c, reason == ZD_CM_REJ_PEER
				      ? (tx ? DCNT_IA_CM_USER_REJ_TX : DCNT_IA_CM_USER_REJ_RX)
				      : (tx ? DCNT_IA_CM_ERR_REJ_TX : DCNT_IA_CM_ERR_REJ_RX));
	else if (type >= ZD_CM_MSG_REQ && type < ZD_CM_MSG_PING && type != ZD_CM_MSG_QUERY)
		conn_count(c, counter[type][tx]);
}

int zd_cm_start(void)
{
	pthread_attr_t attr;
	pthread_t tid;
	sigset_t all, old;
	int rc;

	conns_init();
	if (zd_cm.epfd < 0) {
		zd_cm.epfd = epoll_create1(EPOLL_CLOEXEC);
		if (zd_cm.epfd < 0)
			return -1;
		zd_cm.wake.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (zd_cm.wake.fd < 0 || cm_watch(&zd_cm.wake, EPOLLIN, EPOLL_CTL_ADD) != 0) {
			zd_log_error("connection manager: cannot set up epoll: %s", strerror(errno));
			if (zd_cm.wake.fd >= 0)
				close(zd_cm.wake.fd);
			close(zd_cm.epfd);
			zd_cm.epfd = zd_cm.wake.fd = -1;
			return -1;
		}
	}
	if (zd_cm.running)
		return 0;
	/* The thread takes no signals: they belong to the application. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&tid, &attr, cm_thread, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		zd_log_error("connection manager: cannot start its thread: %s", strerror(rc));
		return -1;
	}
	zd_cm.running = 1;
	zd_cm.idle_since = 0;
	return 0;
}

/* ---- listeners ---- */

/* A listening socket on @addr:@port (0: the kernel picks); the fd, or
 * -errno. */
static int listen_socket(struct in_addr addr, uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = addr };
	int one = 1, fd, err;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* Rebinding a port whose old connections sit in TIME_WAIT is fine;
	 * two listeners on one port still fail with EADDRINUSE. */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, SOMAXCONN) != 0) {
		err = errno;
		close(fd);
		return -err;
	}
	return fd;
}

/* Addresses that cannot both listen on one port (INADDR_ANY meets all). */
static bool addr_overlap(struct in_addr a, struct in_addr b)
{
	return a.s_addr == b.s_addr || a.s_addr == htonl(INADDR_ANY) ||
	       b.s_addr == htonl(INADDR_ANY);
}

/* Our listener on @port overlapping @addr, or NULL. */
static struct zd_cm_listener *local_listener(struct in_addr addr, uint16_t port)
{
	for (unsigned i = 0; i < nlisteners; i++)
		if (listeners[i]->port == port && addr_overlap(listeners[i]->addr, addr))
			return listeners[i];
	return NULL;
}

static bool local_serves(struct in_addr addr, uint64_t qual)
{
	for (unsigned i = 0; i < nlisteners; i++)
		if (listeners[i]->qual == qual && addr_overlap(listeners[i]->addr, addr))
			return true;
	return false;
}

/* Waits up to ZD_CM_QUERY_MS for @events on @fd. */
static bool wait_fd(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };

	return poll(&p, 1, ZD_CM_QUERY_MS) == 1 && !(p.revents & POLLNVAL);
}

/* Does the holder of @addr:@port (a process other than this one) serve
 * @qual?  It answers a QUERY if it is a zdapl CM; nobody there, another
 * protocol or no answer in time count as no. */
static bool remote_serves(struct in_addr addr, uint16_t port, uint64_t qual)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = addr };
	uint8_t frame[sizeof(struct zd_cm_hdr)];
	struct zd_cm_msg m;
	size_t got = 0;
	bool here = false;
	int err = 0, fd;
	socklen_t len = sizeof(err);

	if (addr.s_addr == htonl(INADDR_ANY))
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		if (errno != EINPROGRESS || !wait_fd(fd, POLLOUT) ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err)
			goto out;
	}
	zd_cm_frame_encode(frame, ZD_CM_MSG_QUERY, 0, qual, NULL, 0, NULL, 0);
	if (send(fd, frame, sizeof(frame), MSG_NOSIGNAL) != (ssize_t)sizeof(frame))
		goto out;
	while (got < sizeof(frame) && wait_fd(fd, POLLIN)) {
		ssize_t n = recv(fd, frame + got, sizeof(frame) - got, 0);

		if (n <= 0)
			break;
		got += (size_t)n;
	}
	here = zd_cm_frame_decode(frame, got, &m) == ZD_CM_FRAME_OK &&
	       m.hdr.type == ZD_CM_MSG_REJ && m.hdr.reason == ZD_CM_REJ_QUAL_HERE;
out:
	close(fd);
	return here;
}

/* Does a service point of @qual listen on @addr:@port (ours, or another
 * process's)?  The remote question drops zd_cm.lock. */
static bool port_serves(struct in_addr addr, uint16_t port, uint64_t qual)
{
	struct zd_cm_listener *l = local_listener(addr, port);
	bool here;

	if (l)
		return l->qual == qual;
	zd_cm_unlock();
	here = remote_serves(addr, port, qual);
	zd_cm_lock();
	return here;
}

/* Serves @qual at any probe port of it other than @skip? */
/* Whether another process serves @qual on one of its probe ports from
 * @first on, @skip (ours, or 0) aside. */
static bool probes_serve(struct in_addr addr, uint64_t qual, unsigned first, uint16_t skip)
{
	for (unsigned probe = first; probe < ZD_QUAL_PROBES; probe++) {
		uint16_t port = zd_qual_port(qual, probe);

		if (port != skip && port_serves(addr, port, qual))
			return true;
	}
	return false;
}

static bool qual_served(struct in_addr addr, uint64_t qual, uint16_t skip)
{
	return local_serves(addr, qual) || probes_serve(addr, qual, 0, skip);
}

/* Binds the first usable probe port of @qual: -errno of a failure other
 * than "taken", -EADDRINUSE when @qual is served already or every port
 * is taken. */
static int listen_qual(struct in_addr addr, uint64_t qual, uint16_t *port)
{
	if (local_serves(addr, qual))
		return -EADDRINUSE;
	for (unsigned probe = 0; probe < ZD_QUAL_PROBES; probe++) {
		uint16_t p = zd_qual_port(qual, probe);
		int fd = listen_socket(addr, p);

		if (fd >= 0) {
			/* A process that found this port taken when it
			 * listened went on to a later one. */
			if (probes_serve(addr, qual, probe + 1, 0)) {
				close(fd);
				return -EADDRINUSE;
			}
			*port = p;
			return fd;
		}
		/* Privileged (a qualifier below 1024) or taken: taken by a
		 * service point of @qual means it is in use. */
		if (fd != -EADDRINUSE && fd != -EACCES)
			return fd;
		if (fd == -EADDRINUSE && port_serves(addr, p, qual))
			return -EADDRINUSE;
	}
	return -EADDRINUSE;
}

/* A kernel-chosen port whose number, as a qualifier, nobody serves. */
static int listen_any(struct in_addr addr, uint64_t *qual, uint16_t *port)
{
	for (int tries = 0; tries < ZD_QUAL_PROBES; tries++) {
		struct sockaddr_in sa;
		socklen_t salen = sizeof(sa);
		int fd = listen_socket(addr, 0);

		/* No port left to bind is want of a resource, not a
		 * qualifier in use. */
		if (fd < 0)
			return fd == -EADDRINUSE ? -EAGAIN : fd;
		getsockname(fd, (struct sockaddr *)&sa, &salen);
		*port = ntohs(sa.sin_port);
		*qual = *port;
		if (!qual_served(addr, *qual, *port))
			return fd;
		close(fd);
	}
	return -EADDRINUSE;
}

DAT_RETURN zd_cm_listen(struct zd_ia *ia, uint64_t qual, bool any, struct zd_cm_listener **out)
{
	struct zd_cm_listener *l;
	struct in_addr addr;
	uint16_t port = 0;
	int fd;

	if (nlisteners == ZD_ARRAY_SIZE(listeners)) {
		zd_log_rate_limited("connection manager: %zu service points are open in this "
				    "process, the most it keeps", ZD_ARRAY_SIZE(listeners));
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	if (zd_cm_start() != 0)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	/* shm reaches only this host: any local address will do.  Network
	 * devices listen on the IA address alone. */
	addr.s_addr = ia->dev->cm_bind_any ? htonl(INADDR_ANY) : ia->addr.sin_addr.s_addr;
	fd = any ? listen_any(addr, &qual, &port) : listen_qual(addr, qual, &port);
	if (fd == -EADDRINUSE)
		return DAT_CONN_QUAL_IN_USE;
	if (fd < 0) {
		if (any)
			zd_log_rate_limited("connection manager: cannot listen on a free conn_qual: %s",
					    strerror(-fd));
		else
			zd_log_rate_limited("connection manager: cannot listen for conn_qual 0x%" PRIx64
					    ": %s", qual, strerror(-fd));
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	/* The lock was dropped while asking other processes: look again. */
	if (local_serves(addr, qual)) {
		close(fd);
		return DAT_CONN_QUAL_IN_USE;
	}
	if (nlisteners == ZD_ARRAY_SIZE(listeners) || !(l = calloc(1, sizeof(*l)))) {
		close(fd);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	l->sock.kind = ZD_CM_SOCK_LISTENER;
	l->sock.fd = fd;
	l->ia = ia;
	l->qual = qual;
	l->addr = addr;
	l->port = port;
	if (cm_watch(&l->sock, EPOLLIN, EPOLL_CTL_ADD) != 0) {
		close(fd);
		free(l);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	listeners[nlisteners++] = l;
	/* Held while there is a listener to give it to. */
	if (spare_fd < 0)
		spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	zd_cm.live++;
	zd_count_ia(&ia->cnt, DCNT_IA_CM_LISTEN);
	*out = l;
	return DAT_SUCCESS;
}

/* @c no longer counts as waiting for its REQ on its listener. */
static void conn_unwait(struct zd_cm_conn *c)
{
	if (c->waits_on) {
		c->waits_on->waiting--;
		c->waits_on = NULL;
	}
}

void zd_cm_listener_close(struct zd_cm_listener *l)
{
	if (l->sock.zombie)
		return;  /* inherited across fork */
	for (unsigned i = 0; i < nlisteners; i++) {
		if (listeners[i] == l) {
			listeners[i] = listeners[--nlisteners];
			break;
		}
	}
	if (nlisteners == 0 && spare_fd >= 0) {
		close(spare_fd);
		spare_fd = -1;
	}
	/* Requests that arrived on it and wait for their REQ are refused when
	 * it comes; pending CRs live on without it. */
	for (struct zd_cm_conn *c = zd_cm.conns.next; c != &zd_cm.conns; c = c->next)
		if (c->listener == l) {
			if (c->waits_on == l)
				conn_unwait(c);
			c->listener = NULL;
			if (!c->cr && !c->ep)
				c->ia = NULL;  /* nothing of the IA holds it now */
		}
	l->psp = NULL;
	l->rsp = NULL;
	sock_close(&l->sock, 0);
}

/* ---- connections ---- */

uint64_t zd_cm_conn_serial(const struct zd_cm_conn *c)
{
	return c->serial;
}

static struct zd_cm_conn *conn_new(int fd, enum zd_cm_conn_state state)
{
	static uint64_t serials;  /* under zd_cm.lock */
	struct zd_cm_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->serial = ++serials;
	c->sock.kind = ZD_CM_SOCK_CONN;
	c->sock.fd = fd;
	c->state = state;
	conns_init();
	c->next = &zd_cm.conns;
	c->prev = zd_cm.conns.prev;
	zd_cm.conns.prev->next = c;
	zd_cm.conns.prev = c;
	zd_cm.live++;
	return c;
}

static void conn_update_events(struct zd_cm_conn *c)
{
	uint32_t ev = EPOLLIN | EPOLLRDHUP;

	if (c->sock.fd < 0)
		return;
	if (c->tx_len || c->state == ZD_CONN_CONNECTING)
		ev |= EPOLLOUT;
	if (c->state == ZD_CONN_CLOSING)
		ev = EPOLLOUT;  /* only the last frame matters now */
	cm_watch(&c->sock, ev, EPOLL_CTL_MOD);
}

/* Unties @c from its EP, CR and listener (under the lock). */
static void conn_detach(struct zd_cm_conn *c)
{
	conn_unwait(c);
	zd_cm_liveness_leave(c);
	if (c->ep && c->ep->cm_conn == c)
		zd_ep_set_cm_conn(c->ep, NULL);
	if (c->cr && c->cr->conn == c)
		c->cr->conn = NULL;
	if (c->listener && (c->state == ZD_CONN_CR_PENDING || c->state == ZD_CONN_PEER_GONE))
		c->listener->pending--;
	c->ep = NULL;
	c->cr = NULL;
	c->listener = NULL;
	c->ia = NULL;  /* what it sends from here on was counted when queued */
}

void zd_cm_conn_close(struct zd_cm_conn *c)
{
	if (c->sock.zombie)
		return;
	conn_detach(c);
	if (c->carried)
		carried_remove(c);  /* the device closes the socket (its QP ended) */
	c->prev->next = c->next;
	c->next->prev = c->prev;
	c->next = c->prev = c;
	sock_close(&c->sock, 0);
}

/* Sends what is queued; errors surface as EPOLLERR/EOF on the thread. */
static void conn_flush(struct zd_cm_conn *c)
{
	size_t off = 0;

	while (off < c->tx_len && c->sock.fd >= 0) {
		ssize_t n = send(c->sock.fd, c->tx + off, c->tx_len - off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			off += (size_t)n;
		} else if (n < 0 && errno == EINTR) {
			continue;
		} else {
			if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
				off = c->tx_len;  /* broken: drop it, the read side reports */
			break;
		}
	}
	memmove(c->tx, c->tx + off, c->tx_len - off);
	c->tx_len -= off;
	if (c->state == ZD_CONN_CLOSING && c->tx_len == 0) {
		zd_cm_conn_close(c);
		return;
	}
	conn_update_events(c);
}

void zd_cm_conn_send(struct zd_cm_conn *c, enum zd_cm_msg_type type, uint16_t reason,
		     const void *pdata, size_t pdata_len, const void *blob, size_t blob_len)
{
	if (c->carried) {
		/* On the data stream, behind the DTOs posted before it; an
		 * EP gone (or a QP that sends no more) loses it, as a closed
		 * socket would. */
		if (c->ep && !c->sock.zombie)
			c->ep->obj.ia->dev->qp_cm_send(c->ep, type,
						       type >= ZD_CM_MSG_PING ? zd_cm_liveness_self()
									      : c->conn_qual);
		conn_count_frame(c, type, reason, true);
		return;
	}
	if (c->sock.fd < 0)
		return;
	if (sizeof(c->tx) - c->tx_len < sizeof(struct zd_cm_hdr) + pdata_len + blob_len) {
		/* Two unsent frames already: the peer does not read.  Give up
		 * on the socket; the thread sees the shutdown as an error. */
		shutdown(c->sock.fd, SHUT_RDWR);
		return;
	}
	/* REP, RTU, PING and PONG name the sending process (liveness). */
	c->tx_len += zd_cm_frame_encode(c->tx + c->tx_len, type, reason,
					type == ZD_CM_MSG_REP || type == ZD_CM_MSG_RTU ||
					type >= ZD_CM_MSG_PING ? zd_cm_liveness_self() : c->conn_qual,
					pdata, pdata_len, blob, blob_len);
	conn_count_frame(c, type, reason, true);
	conn_flush(c);
}

void zd_cm_conn_close_after_flush(struct zd_cm_conn *c)
{
	if (c->sock.zombie)
		return;
	conn_detach(c);
	c->state = ZD_CONN_CLOSING;
	c->deadline = zd_cm_now() + ZD_CM_LINGER_NS;
	conn_flush(c);
	zd_cm_kick();
}

/* ---- failure detection ---- */

void zd_cm_sock_keepalive(int fd)
{
	int one = 1, idle = ZD_CM_KEEPIDLE_S, intvl = ZD_CM_KEEPINTVL_S, cnt = ZD_CM_KEEPCNT;
	unsigned int uto = ZD_CM_USER_TIMEOUT_MS;

	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto));
}


/* Queues a report for the thread; false if out of memory. */
static bool report_queue(const struct zd_cm_broken *r)
{
	pthread_mutex_lock(&broken_lock);
	if (nbroken == broken_cap) {
		size_t cap = broken_cap ? 2 * broken_cap : 16;
		struct zd_cm_broken *b = realloc(broken, cap * sizeof(*b));

		if (!b) {
			pthread_mutex_unlock(&broken_lock);
			return false;
		}
		broken = b;
		broken_cap = cap;
	}
	broken[nbroken++] = *r;
	pthread_mutex_unlock(&broken_lock);
	zd_cm_kick();
	return true;
}

void zd_cm_dev_broken(struct zd_ep *ep)
{
	/* A racy read is fine: the thread only acts if, under its lock, the
	 * conn of this serial is still live and still @ep's.  Not the conn's
	 * address: within the grace its memory and the EP may serve a new
	 * connection (dat_ep_reset and a new accept, as dapltest's server
	 * does for every client), which the report must not end. */
	struct zd_cm_broken r = {
		.ep = ep,
		.serial = __atomic_load_n(&ep->cm_serial, __ATOMIC_RELAXED),
		.due = zd_cm_now() + ZD_CM_DEV_BROKEN_GRACE_NS,
	};

	/* Out of memory: the CM socket's own timeouts still end it. */
	if (r.serial)
		report_queue(&r);
}

void zd_cm_dev_frame(struct zd_ep *ep, unsigned type, uint64_t id)
{
	/* As zd_cm_dev_broken: the serial names the connection. */
	struct zd_cm_broken r = {
		.ep = ep,
		.serial = __atomic_load_n(&ep->cm_serial, __ATOMIC_RELAXED),
		.due = 0,  /* at once, in order with the frames before it */
		.frame = true,
		.type = type,
		.id = id,
	};

	/* Out of memory: a lost PING or PONG is a silence liveness judges,
	 * a lost DISC ends as the peer's EOF or its timeout. */
	if (r.serial)
		report_queue(&r);
}

static void conn_lost(struct zd_cm_conn *c);
static void conn_dispatch(struct zd_cm_conn *c, const struct zd_cm_hdr *h, const uint8_t *body);

/* A carried connection's frame or end (zd_cm_dev_frame). */
static void carried_report(const struct zd_cm_broken *b)
{
	struct zd_cm_conn *c = carried_find(b->serial);
	struct zd_cm_hdr h = { .type = (uint8_t)b->type, .conn_qual = b->id };

	if (!c || c->ep != b->ep || c->sock.zombie)
		return;  /* over already */
	switch (b->type) {
	case ZD_CM_MSG_DISC:
	case ZD_CM_MSG_DISC_ACK:
	case ZD_CM_MSG_PING:
	case ZD_CM_MSG_PONG:
		conn_dispatch(c, &h, NULL);
		break;
	default:  /* ZD_CM_DEV_END, or a frame no carried connection takes */
		conn_lost(c);
		break;
	}
}

/* The thread acts on the reports that are due, in the order they came
 * (under zd_cm.lock); returns when the next one is due (UINT64_MAX:
 * none). */
static uint64_t cm_run_broken(uint64_t now)
{
	uint64_t next = UINT64_MAX;
	struct zd_cm_broken *due;
	size_t ndue = 0, keep = 0;

	pthread_mutex_lock(&broken_lock);
	if (!nbroken || !(due = malloc(nbroken * sizeof(*due)))) {
		/* (out of memory: the reports wait for the next round) */
		next = nbroken ? now + ZD_CM_DEV_BROKEN_GRACE_NS : UINT64_MAX;
		pthread_mutex_unlock(&broken_lock);
		return next;
	}
	for (size_t i = 0; i < nbroken; i++) {
		if (broken[i].due > now) {
			next = ZD_MIN(next, broken[i].due);
			broken[keep++] = broken[i];
		} else {
			due[ndue++] = broken[i];
		}
	}
	nbroken = keep;
	/* conn_lost calls into the device, which may report again. */
	pthread_mutex_unlock(&broken_lock);
	for (size_t i = 0; i < ndue; i++) {
		const struct zd_cm_broken *b = &due[i];

		if (b->frame) {
			carried_report(b);
			continue;
		}
		for (struct zd_cm_conn *c = zd_cm.conns.next; c && c != &zd_cm.conns; c = c->next)
			if (c->serial == b->serial && c->ep == b->ep && !c->sock.zombie &&
			    (c->state == ZD_CONN_ESTABLISHED || c->state == ZD_CONN_DISC_SENT)) {
				conn_lost(c);
				break;
			}
	}
	free(due);
	return next;
}

int zd_cm_conn_carry(struct zd_cm_conn *c)
{
	const struct zd_device_ops *dev = c->ep->obj.ia->dev;
	int fd = c->sock.fd, r;

	if (!dev->qp_carry || !c->ep->dev_priv || c->ud || fd < 0)
		return 0;
	/* A frame of ours still unsent would be cut (never: the socket is
	 * new, and the last frame the size of a header). */
	if (c->tx_len)
		return -1;
	epoll_ctl(zd_cm.epfd, EPOLL_CTL_DEL, fd, NULL);
	r = dev->qp_carry(c->ep, fd);
	if (r == 0 && cm_watch(&c->sock, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD) != 0)
		r = -1;
	if (r <= 0)
		return r;
	c->sock.fd = -1;
	c->carried = 1;
	carried_insert(c);
	return 1;
}

/* ---- active side: TCP connect and its retries ---- */

static void conn_connected(struct zd_cm_conn *c)
{
	struct sockaddr_in local;
	socklen_t len = sizeof(local);
	int one = 1;

	setsockopt(c->sock.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	zd_cm_sock_keepalive(c->sock.fd);
	if (c->ep && getsockname(c->sock.fd, (struct sockaddr *)&local, &len) == 0)
		c->ep->local_qual = ntohs(local.sin_port);
	c->state = ZD_CONN_REQ_SENT;
	c->deadline = c->connect_deadline;
	/* A listener that is not a zdapl CM may take the REQ and say
	 * nothing: with later probe ports left, MRA must come in time. */
	if (c->probe + 1 < ZD_QUAL_PROBES) {
		uint64_t mra_by = zd_cm_now() + ZD_CM_MRA_NS;

		if (!c->deadline || mra_by < c->deadline)
			c->deadline = mra_by;
	}
	memcpy(c->tx, c->req, c->req_len);
	c->tx_len = c->req_len;
	conn_count_frame(c, c->ud ? ZD_CM_MSG_UD_REQ : ZD_CM_MSG_REQ, 0, true);
	conn_flush(c);
}

static void conn_try_connect(struct zd_cm_conn *c, int fd);

/* Points @c at probe @probe of its qualifier (zd_conn_qual.h). */
static void conn_set_probe(struct zd_cm_conn *c, unsigned probe)
{
	c->probe = probe;
	c->peer.sin_port = htons(zd_qual_port(c->conn_qual, probe));
}

/* Nobody serves the qualifier at this probe port (refused, REJ(NO_QUAL),
 * or a listener that is not a zdapl CM): on to the next port; after the
 * last, start over later, as the service point may not be up yet. */
static void conn_refused(struct zd_cm_conn *c, uint64_t now)
{
	conn_count(c, DCNT_IA_CM_ERR_REFUSED);
	sock_close(&c->sock, 1);
	c->refused = 1;
	if (c->probe + 1 < ZD_QUAL_PROBES) {
		conn_set_probe(c, c->probe + 1);
		conn_try_connect(c, -1);
		return;
	}
	conn_set_probe(c, 0);
	c->state = ZD_CONN_RETRY_WAIT;
	c->retry_at = now + c->retry_delay;
	c->retry_delay = ZD_MIN(c->retry_delay * 2, ZD_CM_RETRY_MAX_NS);
	c->deadline = ZD_MIN(c->retry_at, c->give_up);
}

static DAT_EVENT_NUMBER connect_errno_event(int err)
{
	switch (err) {
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EHOSTDOWN:
	case ETIMEDOUT:
		return DAT_CONNECTION_EVENT_UNREACHABLE;
	default:
		return DAT_CONNECTION_EVENT_NON_PEER_REJECTED;
	}
}

static int connect_socket(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		zd_log_rate_limited("connection manager: no socket to connect with: %s",
				    strerror(errno));
	return fd;
}

/* One attempt (on @fd, or a new socket if -1); on a synchronous outcome
 * the conn moves on at once. */
static void conn_try_connect(struct zd_cm_conn *c, int fd)
{
	int one = 1;

	if (fd < 0)
		fd = connect_socket();
	if (fd < 0) {
		zd_cm_active_failed(c, DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
		return;
	}
	/* The kernel picks our local port from the range service points use
	 * too (dtest's fixed 45248 is in it).  When we close first, the port
	 * sits in TIME_WAIT for a minute, and a listener may rebind it only
	 * if this socket had SO_REUSEADDR as well (the TIME_WAIT entry keeps
	 * it): without it, dat_psp_create on that port failed with
	 * DAT_CONN_QUAL_IN_USE for a minute after one of our connections. */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	c->sock.fd = fd;
	c->rx_len = 0;
	c->tx_len = 0;
	c->reached = 0;
	c->state = ZD_CONN_CONNECTING;
	c->deadline = c->connect_deadline;
	if (cm_watch(&c->sock, EPOLLOUT | EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD) != 0) {
		zd_cm_active_failed(c, DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
		return;
	}
	if (connect(fd, (struct sockaddr *)&c->peer, sizeof(c->peer)) == 0)
		conn_connected(c);
	else if (errno == ECONNREFUSED)
		conn_refused(c, zd_cm_now());
	else if (errno != EINPROGRESS)
		zd_cm_active_failed(c, connect_errno_event(errno));
}

DAT_RETURN zd_cm_connect(struct zd_ep *ep, const struct sockaddr_in *dst, uint64_t conn_qual,
			 DAT_TIMEOUT timeout_us, const void *pdata, size_t pdata_len)
{
	uint8_t blob[ZD_QP_BLOB_MAX];
	size_t blob_len = 0;
	struct zd_cm_conn *c;
	uint64_t now = zd_cm_now();
	const struct zd_device_ops *dev = ep->obj.ia->dev;
	int fd;

	if (zd_cm_start() != 0)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	/* The first attempt's socket: with no descriptor left, the consumer
	 * hears it from this call rather than from an event. */
	fd = connect_socket();
	if (fd < 0)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	c = conn_new(-1, ZD_CONN_RETRY_WAIT);
	if (!c) {
		close(fd);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	if (dev->qp_local_blob && ep->dev_priv)
		blob_len = dev->qp_local_blob(ep, blob, sizeof(blob));
	c->ep = ep;
	c->ia = ep->obj.ia;
	c->ud = zd_ep_is_ud(ep);
	if (!c->ud)
		zd_ep_set_cm_conn(ep, c);     /* a UD EP may have many exchanges at once */
	c->peer = *dst;
	c->conn_qual = conn_qual;
	conn_set_probe(c, 0);
	c->req_len = zd_cm_frame_encode(c->req, c->ud ? ZD_CM_MSG_UD_REQ : ZD_CM_MSG_REQ, 0,
					conn_qual, pdata, pdata_len, blob, blob_len);
	c->retry_delay = ZD_CM_RETRY_MIN_NS;
	if (timeout_us != DAT_TIMEOUT_INFINITE)
		c->connect_deadline = now + (uint64_t)timeout_us * 1000ull;
	/* Nobody listening is retried (the listener may come late) until the
	 * consumer's timeout, or for a bounded while without one. */
	c->give_up = c->connect_deadline ? c->connect_deadline : now + ZD_CM_INFINITE_REFUSED_NS;
	conn_try_connect(c, fd);
	zd_cm_kick();
	return DAT_SUCCESS;
}

/* ---- the thread ---- */

/* The connection's socket ended (EOF, error) or broke the protocol. */
static void conn_lost(struct zd_cm_conn *c)
{
	switch (c->state) {
	case ZD_CONN_REQ_SENT:
	case ZD_CONN_CONNECTING:
		/* Whoever holds this probe port is not a zdapl CM (it
		 * closed on our REQ, or spoke another protocol): the service
		 * point may be at a later one. */
		if (!c->reached && c->probe + 1 < ZD_QUAL_PROBES) {
			conn_refused(c, zd_cm_now());
			return;
		}
		zd_cm_active_failed(c, DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
		return;
	case ZD_CONN_CR_PENDING:
		/* The CR stays for the consumer to answer; only the socket goes. */
		c->state = ZD_CONN_PEER_GONE;
		sock_close(&c->sock, 1);
		return;
	case ZD_CONN_REP_SENT:
		if (c->ud) {
			zd_cm_ud_failed(c);
			return;
		}
		if (c->ep)
			zd_cm_ep_conn_lost(c->ep, DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR);
		break;
	case ZD_CONN_ESTABLISHED:
		if (c->ep)
			zd_cm_ep_conn_lost(c->ep, DAT_CONNECTION_EVENT_BROKEN);
		break;
	case ZD_CONN_DISC_SENT:
		if (c->ep)
			zd_cm_ep_conn_lost(c->ep, DAT_CONNECTION_EVENT_DISCONNECTED);
		break;
	default:
		break;
	}
	zd_cm_conn_close(c);
}

/* An established connection is watched with its peer process's others. */
static void conn_watch(struct zd_cm_conn *c, uint64_t peer_id)
{
	if (c->state == ZD_CONN_ESTABLISHED && !c->sock.zombie && c->ep)
		zd_cm_liveness_join(c, peer_id, zd_cm_now());
}

static void conn_dispatch(struct zd_cm_conn *c, const struct zd_cm_hdr *h, const uint8_t *body)
{
	conn_count_frame(c, h->type, h->reason, false);
	zd_cm_liveness_heard(c, zd_cm_now());
	switch (h->type) {
	case ZD_CM_MSG_REQ:
	case ZD_CM_MSG_UD_REQ:
		if (c->state != ZD_CONN_WAIT_REQ)
			break;
		conn_unwait(c);
		zd_cm_passive_on_req(c, h, body);
		return;
	case ZD_CM_MSG_MRA:
		if (c->state != ZD_CONN_REQ_SENT || c->reached)
			break;
		c->reached = 1;
		c->deadline = c->connect_deadline;
		return;
	case ZD_CM_MSG_QUERY:
		if (c->state != ZD_CONN_WAIT_REQ)
			break;
		conn_unwait(c);
		zd_cm_passive_on_query(c, h);
		return;
	case ZD_CM_MSG_REP:
		if (c->state != ZD_CONN_REQ_SENT)
			break;
		if (c->ud) {
			zd_cm_ud_on_rep(c, h, body);
		} else {
			zd_cm_active_on_rep(c, h, body);
			conn_watch(c, h->conn_qual);
		}
		return;
	case ZD_CM_MSG_REJ:
		if (c->state != ZD_CONN_REQ_SENT)
			break;
		if (h->reason == ZD_CM_REJ_NO_QUAL) {
			conn_refused(c, zd_cm_now());
			return;
		}
		if (c->ud)
			zd_cm_ud_on_rej(c, h, body);
		else
			zd_cm_active_on_rej(c, h, body);
		return;
	case ZD_CM_MSG_RTU:
		if (c->state != ZD_CONN_REP_SENT)
			break;
		if (c->ud) {
			zd_cm_ud_on_rtu(c);
			return;
		}
		/* The data path takes the socket (tcp) before any DTO of
		 * this side can be posted: the peer's first bytes after the
		 * RTU are its data. */
		if (c->ep && zd_cm_conn_carry(c) < 0) {
			conn_lost(c);
			return;
		}
		c->state = ZD_CONN_ESTABLISHED;
		c->deadline = 0;
		if (c->ep) {
			conn_count(c, DCNT_IA_CM_PASSIVE_EST);
			zd_ep_set_state(c->ep, DAT_EP_STATE_CONNECTED);
			zd_cm_ep_event(c->ep, DAT_CONNECTION_EVENT_ESTABLISHED, NULL, 0);
		}
		conn_watch(c, h->conn_qual);
		return;
	case ZD_CM_MSG_PING:
		if (c->state != ZD_CONN_ESTABLISHED && c->state != ZD_CONN_DISC_SENT)
			break;
		zd_cm_conn_send(c, ZD_CM_MSG_PONG, 0, NULL, 0, NULL, 0);
		return;
	case ZD_CM_MSG_PONG:
		if (c->state != ZD_CONN_ESTABLISHED && c->state != ZD_CONN_DISC_SENT)
			break;
		return;  /* heard: that was the point */
	case ZD_CM_MSG_DISC:
		if (c->state != ZD_CONN_ESTABLISHED && c->state != ZD_CONN_DISC_SENT)
			break;
		/* Carried: the ACK goes on the data stream, queued before the
		 * flush below ends it (the flush sends what is queued). */
		if (c->carried)
			zd_cm_conn_send(c, ZD_CM_MSG_DISC_ACK, 0, NULL, 0, NULL, 0);
		if (c->ep)
			zd_cm_ep_conn_lost(c->ep, DAT_CONNECTION_EVENT_DISCONNECTED);
		if (!c->carried)
			zd_cm_conn_send(c, ZD_CM_MSG_DISC_ACK, 0, NULL, 0, NULL, 0);
		zd_cm_conn_close_after_flush(c);
		return;
	case ZD_CM_MSG_DISC_ACK:
		if (c->state != ZD_CONN_DISC_SENT)
			break;
		if (c->ep)
			zd_cm_ep_conn_lost(c->ep, DAT_CONNECTION_EVENT_DISCONNECTED);
		zd_cm_conn_close(c);
		return;
	default:
		break;
	}
	conn_count(c, DCNT_IA_CM_ERR_UNEXPECTED);
	conn_lost(c);  /* a frame this state does not expect */
}

/* Reads whole frames: the header first, then exactly the body it names
 * (zd_cm_frame_decode says how much; c->rx holds ZD_CM_FRAME_MAX). */
static void conn_readable(struct zd_cm_conn *c)
{
	struct zd_cm_msg m;

	while (c->sock.fd >= 0 && c->state != ZD_CONN_CLOSING) {
		enum zd_cm_frame_status st = zd_cm_frame_decode(c->rx, c->rx_len, &m);
		ssize_t n;

		if (st == ZD_CM_FRAME_OK) {
			/* One frame per readiness: epoll (level-triggered)
			 * reports a socket with more again, after the sockets
			 * ready before it.  A lagging thread so handles every
			 * connection's RTU before any one's DISC, in the order
			 * the peer sent them across connections, as IB's one CM
			 * channel would (dtestcm counts ESTABLISHED events
			 * without looking at their type). */
			c->rx_len = 0;
			conn_dispatch(c, &m.hdr, m.pdata);
			return;
		}
		if (st != ZD_CM_FRAME_SHORT) {
			conn_lost(c);  /* not our protocol: this connection only */
			return;
		}
		n = recv(c->sock.fd, c->rx + c->rx_len, m.len - c->rx_len, 0);
		if (n == 0) {
			conn_lost(c);
			return;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				conn_lost(c);
			return;
		}
		c->rx_len += (size_t)n;
	}
}

static void conn_event(struct zd_cm_conn *c, uint32_t events)
{
	if (c->state == ZD_CONN_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);

		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		getsockopt(c->sock.fd, SOL_SOCKET, SO_ERROR, &err, &len);
		if (err == 0)
			conn_connected(c);
		else if (err == ECONNREFUSED)
			conn_refused(c, zd_cm_now());
		else
			zd_cm_active_failed(c, connect_errno_event(err));
		return;
	}
	if ((events & EPOLLOUT) && c->tx_len)
		conn_flush(c);
	if (c->sock.zombie || c->sock.fd < 0)
		return;
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) {
		if (c->state == ZD_CONN_CLOSING) {
			if (events & (EPOLLERR | EPOLLHUP))
				zd_cm_conn_close(c);
			return;
		}
		conn_readable(c);
	}
}

/* A connection refused at accept (no descriptor, too many waiting). */
static void conn_count_listener(const struct zd_cm_listener *l)
{
	if (l->ia)
		zd_count_ia(&l->ia->cnt, DCNT_IA_CM_ERR_REJ_TX);
}

static void listener_event(struct zd_cm_listener *l)
{
	for (;;) {
		struct sockaddr_in peer;
		socklen_t len = sizeof(peer);
		int one = 1;
		int fd = accept4(l->sock.fd, (struct sockaddr *)&peer, &len,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct zd_cm_conn *c;

		if (fd < 0) {
			if ((errno == EMFILE || errno == ENFILE) && spare_fd >= 0) {
				/* No descriptor left: refuse the oldest waiting
				 * connection rather than be woken for it forever. */
				close(spare_fd);
				fd = accept4(l->sock.fd, NULL, NULL, SOCK_CLOEXEC);
				if (fd >= 0)
					close(fd);
				spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
				if (fd >= 0) {
					conn_count_listener(l);
					continue;
				}
			}
			return;  /* EAGAIN, or a transient error the next wakeup retries */
		}
		/* A flood of connections that never send a REQ (each would
		 * hold a descriptor for ZD_CM_WAIT_REQ_NS) is cut at a bound. */
		if (l->waiting >= ZD_CM_MAX_WAITING) {
			close(fd);
			conn_count_listener(l);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		zd_cm_sock_keepalive(fd);
		c = conn_new(fd, ZD_CONN_WAIT_REQ);
		if (!c) {
			close(fd);
			continue;
		}
		c->peer = peer;
		c->listener = l;
		c->waits_on = l;
		l->waiting++;
		c->ia = l->ia;
		c->conn_qual = l->qual;
		c->deadline = zd_cm_now() + ZD_CM_WAIT_REQ_NS;
		if (cm_watch(&c->sock, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD) != 0)
			zd_cm_conn_close(c);
	}
}

/* Runs due timers; returns the epoll timeout in ms (-1: none). */
static int cm_run_timers(uint64_t now)
{
	uint64_t next = UINT64_MAX;
	struct zd_cm_conn *c, *n;

	for (c = zd_cm.conns.next; c != &zd_cm.conns; c = n) {
		n = c->next;
		if (c->deadline && c->deadline <= now) {
			switch (c->state) {
			case ZD_CONN_RETRY_WAIT:
				if (now >= c->give_up)
					zd_cm_active_failed(c, DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
				else
					conn_try_connect(c, -1);
				break;
			case ZD_CONN_CONNECTING:
				conn_count(c, DCNT_IA_CM_ERR_TIMEOUT);
				zd_cm_active_failed(c, c->refused ? DAT_CONNECTION_EVENT_NON_PEER_REJECTED
								  : DAT_CONNECTION_EVENT_UNREACHABLE);
				break;
			case ZD_CONN_REQ_SENT:
				if (!c->reached && c->probe + 1 < ZD_QUAL_PROBES &&
				    (!c->connect_deadline || now < c->connect_deadline)) {
					conn_refused(c, now);  /* no MRA: not a zdapl CM */
					break;
				}
				conn_count(c, DCNT_IA_CM_ERR_TIMEOUT);
				zd_cm_active_failed(c, DAT_CONNECTION_EVENT_TIMED_OUT);
				break;
			case ZD_CONN_REP_SENT:
			case ZD_CONN_DISC_SENT:
				conn_lost(c);
				break;
			default:  /* WAIT_REQ, CLOSING */
				zd_cm_conn_close(c);
				break;
			}
		}
		if (!c->sock.zombie && c->deadline && c->deadline < next)
			next = c->deadline;
	}
	if (next == UINT64_MAX)
		return -1;
	return next <= now ? 0 : (int)ZD_MIN((next - now + 999999) / 1000000, 60000ull);
}

static void *cm_thread(void *arg)
{
	struct epoll_event evs[64];
	/* The last batch had frames or accepts of sockets, since when. */
	bool sockets_busy = false;
	uint64_t busy_since = 0;

	(void)arg;
	zd_cm_lock();
	for (;;) {
		uint64_t now = zd_cm_now(), next;
		int timeout, n;

		/* The devices' reports of carried connections' frames wait
		 * while sockets have frames (bounded: ZD_CM_REPORT_DEFER_NS):
		 * a peer's frames on its CM sockets and on its carried
		 * streams are then handled in about the order it sent them
		 * (dtestcm's server counts the ESTABLISHED events of every
		 * RTU sent before the DISCs as such), as one frame per
		 * readiness does for sockets alone (conn_readable). */
		if (!sockets_busy || now - busy_since >= ZD_CM_REPORT_DEFER_NS) {
			next = cm_run_broken(now);
			busy_since = 0;
		} else {
			next = now;  /* the sockets again at once, then the reports */
		}
		timeout = cm_run_timers(now);

		next = ZD_MIN(next, zd_cm_liveness_run(now, conn_lost));
		if (next != UINT64_MAX) {
			int t = next <= now ? 0 : (int)ZD_MIN((next - now + 999999) / 1000000, 60000ull);

			if (timeout < 0 || t < timeout)
				timeout = t;
		}

		cm_free_zombies();
		if (zd_cm.live == 0) {
			if (!zd_cm.idle_since)
				zd_cm.idle_since = now;
			if (now - zd_cm.idle_since >= ZD_CM_IDLE_EXIT_NS)
				break;
			timeout = (int)((ZD_CM_IDLE_EXIT_NS - (now - zd_cm.idle_since)) / 1000000) + 1;
		} else {
			zd_cm.idle_since = 0;
		}
		zd_cm_unlock();
		n = epoll_wait(zd_cm.epfd, evs, ZD_ARRAY_SIZE(evs), timeout);
		zd_cm_lock();
		sockets_busy = false;
		for (int i = 0; i < n; i++) {
			struct zd_cm_sock *s = evs[i].data.ptr;

			if (s->zombie)
				continue;
			if (s->kind != ZD_CM_SOCK_WAKE && !sockets_busy) {
				sockets_busy = true;
				if (!busy_since)
					busy_since = zd_cm_now();
			}
			switch (s->kind) {
			case ZD_CM_SOCK_WAKE: {
				uint64_t v;

				if (read(s->fd, &v, sizeof(v)) < 0) {
					/* EAGAIN: already drained */
				}
				break;
			}
			case ZD_CM_SOCK_LISTENER:
				listener_event((struct zd_cm_listener *)s);
				break;
			case ZD_CM_SOCK_CONN:
				conn_event((struct zd_cm_conn *)s, evs[i].events);
				break;
			}
		}
		cm_free_zombies();
	}
	zd_cm.running = 0;
	zd_cm_unlock();
	return NULL;
}
