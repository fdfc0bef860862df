/*
 * Descriptor exchange over an abstract UNIX socket with SCM_RIGHTS
 * (zd_soft_fdx.h): the offered fds, the server thread, and the asker.
 */
#include <errno.h>
#include <stddef.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/zd_log.h"
#include "hw/soft/zd_soft_fdx.h"

#define FDX_MAGIC 0x7a646631u  /* "zdf1" */

struct fdx_req {
	uint32_t magic;
	int32_t fd;
};

struct fdx_rep {
	uint32_t magic;
	int32_t err;                 /* 0: the fd rides along; else an errno */
};

struct fdx_offer {
	int fd;
	unsigned count;
};

static struct {
	pthread_mutex_t lock;        /* everything below */
	struct fdx_offer *offers;
	size_t noffers, cap;
	int listen_fd;               /* -1: no server yet */
	pid_t server_pid;            /* whose server it is (a fork child's is not) */
	/* ZDAPL_PEER_UIDS, read once */
	bool policy_read, any_uid;
	uid_t *uids;
	size_t nuids;
} fdx = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.listen_fd = -1,
};

/* A fork child has no server thread and none of the parent's offers (its
 * copies of the parent's objects offer nothing): it starts over. */
static void fdx_atfork_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	fdx.lock = fresh;
	if (fdx.listen_fd >= 0)
		close(fdx.listen_fd);
	fdx.listen_fd = -1;
	fdx.noffers = 0;
}

__attribute__((constructor)) static void fdx_register_atfork(void)
{
	pthread_atfork(NULL, NULL, fdx_atfork_child);
}

static socklen_t fdx_name(struct sockaddr_un *a, pid_t pid)
{
	int n;

	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	/* Abstract: sun_path[0] is NUL, the name is the bytes after it. */
	n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "zdapl-fdx.%d", (int)pid);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* ---- policy ---- */

static void policy_read(void)
{
	const char *e = getenv("ZDAPL_PEER_UIDS");
	char *copy, *tok, *save = NULL;

	fdx.policy_read = true;
	if (!e || !*e)
		return;
	if (strcmp(e, "any") == 0) {
		fdx.any_uid = true;
		return;
	}
	copy = strdup(e);
	if (!copy)
		return;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long v = strtoul(tok, &end, 10);
		uid_t *u;

		if (*end || end == tok || v > UINT32_MAX) {
			zd_log_error("ZDAPL_PEER_UIDS=%s: \"%s\" is not a uid; ignored", e, tok);
			continue;
		}
		u = realloc(fdx.uids, (fdx.nuids + 1) * sizeof(*u));
		if (!u)
			break;
		fdx.uids = u;
		fdx.uids[fdx.nuids++] = (uid_t)v;
	}
	free(copy);
}

bool zd_soft_fdx_uid_allowed(uid_t uid)
{
	bool ok;

	if (uid == geteuid())
		return true;
	pthread_mutex_lock(&fdx.lock);
	if (!fdx.policy_read)
		policy_read();
	ok = fdx.any_uid;
	for (size_t i = 0; !ok && i < fdx.nuids; i++)
		ok = fdx.uids[i] == uid;
	pthread_mutex_unlock(&fdx.lock);
	return ok;
}

/* A refusal's zdapl: line; the first 16 of the process only. */
static bool refusal_said(void)
{
	static _Atomic unsigned n;

	return atomic_fetch_add_explicit(&n, 1, memory_order_relaxed) >= 16;
}

/* ---- the offered fds ---- */

static struct fdx_offer *offer_find(int fd)
{
	for (size_t i = 0; i < fdx.noffers; i++)
		if (fdx.offers[i].fd == fd)
			return &fdx.offers[i];
	return NULL;
}

/* ---- the server ---- */

static void serve_one(int s)
{
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct timeval tv = { .tv_sec = ZD_SOFT_FDX_TIMEOUT_MS / 1000,
			      .tv_usec = ZD_SOFT_FDX_TIMEOUT_MS % 1000 * 1000 };
	struct fdx_req req;
	struct fdx_rep rep = { .magic = FDX_MAGIC, .err = 0 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { &rep, sizeof(rep) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	int fd = -1;

	/* A peer that connects and says nothing must not hold the server. */
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 ||
	    recv(s, &req, sizeof(req), 0) != (ssize_t)sizeof(req) || req.magic != FDX_MAGIC)
		return;
	if (!zd_soft_fdx_uid_allowed(cred.uid)) {
		rep.err = EACCES;
		if (!refusal_said())
			zd_log_error("soft: process %d of uid %u asked for our shared memory: refused "
				     "(not our uid %u; ZDAPL_PEER_UIDS names the users we let in)",
				     (int)cred.pid, (unsigned)cred.uid, (unsigned)geteuid());
	} else {
		const struct fdx_offer *o;

		pthread_mutex_lock(&fdx.lock);
		/* Duplicated under the lock: a withdrawal (then a close)
		 * cannot slip between the check and the copy. */
		o = offer_find(req.fd);
		fd = o ? fcntl(req.fd, F_DUPFD_CLOEXEC, 0) : -1;
		rep.err = !o ? EBADF : fd < 0 ? errno : 0;
		pthread_mutex_unlock(&fdx.lock);
	}
	if (fd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		m.msg_control = ctl.buf;
		m.msg_controllen = sizeof(ctl.buf);
		ctl.h.cmsg_level = SOL_SOCKET;
		ctl.h.cmsg_type = SCM_RIGHTS;
		ctl.h.cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(&ctl.h), &fd, sizeof(int));
	}
	(void)sendmsg(s, &m, MSG_NOSIGNAL);
	if (fd >= 0)
		close(fd);
}

static void *fdx_thread(void *arg)
{
	int lfd = (int)(intptr_t)arg;

	for (;;) {
		int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

		if (s < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE ||
			    errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/* Out of descriptors: an asker gets a timeout,
				 * we go on once some are free. */
				if (errno != EINTR && errno != ECONNABORTED)
					poll(NULL, 0, 10);
				continue;
			}
			return NULL;  /* the socket is gone (a fork child's copy) */
		}
		serve_one(s);
		close(s);
	}
}

/* Under fdx.lock. */
static int server_start(void)
{
	struct sockaddr_un a;
	socklen_t alen = fdx_name(&a, getpid());
	pthread_attr_t attr;
	pthread_t tid;
	sigset_t all, old;
	int fd, rc;

	if (fdx.listen_fd >= 0 && fdx.server_pid == getpid())
		return 0;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&a, alen) != 0 || listen(fd, 128) != 0) {
		rc = -errno;
		close(fd);
		zd_log_error("soft: cannot serve shared memory to peers on @zdapl-fdx.%d: %s",
			     (int)getpid(), strerror(-rc));
		return rc;
	}
	/* The thread takes no signal of the application's. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	rc = pthread_create(&tid, &attr, fdx_thread, (void *)(intptr_t)fd);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		close(fd);
		return -rc;
	}
	pthread_setname_np(tid, "zdapl-fdx");
	fdx.listen_fd = fd;
	fdx.server_pid = getpid();
	return 0;
}

int zd_soft_fdx_offer(int fd)
{
	struct fdx_offer *o;
	int rc = 0;

	if (fd < 0)
		return -EBADF;
	pthread_mutex_lock(&fdx.lock);
	o = offer_find(fd);
	if (o) {
		o->count++;
		goto out;
	}
	rc = server_start();
	if (rc)
		goto out;
	if (fdx.noffers == fdx.cap) {
		size_t cap = fdx.cap ? 2 * fdx.cap : 64;
		struct fdx_offer *n = realloc(fdx.offers, cap * sizeof(*n));

		if (!n) {
			rc = -ENOMEM;
			goto out;
		}
		fdx.offers = n;
		fdx.cap = cap;
	}
	fdx.offers[fdx.noffers++] = (struct fdx_offer){ fd, 1 };
out:
	pthread_mutex_unlock(&fdx.lock);
	return rc;
}

void zd_soft_fdx_withdraw(int fd)
{
	struct fdx_offer *o;

	pthread_mutex_lock(&fdx.lock);
	o = offer_find(fd);
	if (o && --o->count == 0)
		*o = fdx.offers[--fdx.noffers];
	pthread_mutex_unlock(&fdx.lock);
}

/* ---- the asker ---- */

int zd_soft_fdx_get(pid_t pid, int fd)
{
	struct sockaddr_un a;
	socklen_t alen = fdx_name(&a, pid);
	struct timeval tv = { .tv_sec = ZD_SOFT_FDX_TIMEOUT_MS / 1000,
			      .tv_usec = ZD_SOFT_FDX_TIMEOUT_MS % 1000 * 1000 };
	struct fdx_req req = { .magic = FDX_MAGIC, .fd = fd };
	struct fdx_rep rep;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { &rep, sizeof(rep) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1,
			    .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct cmsghdr *c;
	int s, got = -1, rc;
	ssize_t n;

	if (fd < 0)
		return -EBADF;
	if (pid == getpid()) {
		got = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		return got < 0 ? -errno : got;
	}
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(s, (struct sockaddr *)&a, alen) != 0)
		goto err;
	/* Somebody else may hold the name: it must be the process we mean. */
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0)
		goto err;
	if (cred.pid != pid) {
		errno = EPERM;
		goto err;
	}
	if (send(s, &req, sizeof(req), MSG_NOSIGNAL) != (ssize_t)sizeof(req))
		goto err;
	memset(&ctl, 0, sizeof(ctl));
	n = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
	if (n < 0)
		goto err;
	for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&got, CMSG_DATA(c), sizeof(int));
	close(s);
	if (n != (ssize_t)sizeof(rep) || rep.magic != FDX_MAGIC || rep.err != 0 || got < 0) {
		if (got >= 0)
			close(got);
		if (n == (ssize_t)sizeof(rep) && rep.err == EACCES && !refusal_said())
			zd_log_error("soft: process %d of uid %u refuses us (uid %u) its shared memory: "
				     "the connection fails; its ZDAPL_PEER_UIDS=%u would let us in",
				     (int)pid, (unsigned)cred.uid, (unsigned)geteuid(),
				     (unsigned)geteuid());
		return n != (ssize_t)sizeof(rep) || rep.magic != FDX_MAGIC ? -EPROTO :
		       rep.err ? -rep.err : -EPROTO;
	}
	return got;
err:
	rc = errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
	close(s);
	return rc;
}
