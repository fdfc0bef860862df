/*
 * Helpers of the connection manager suites: a "node" (IA, CR and
 * connection EVDs, PZ) opened through libdat2, waiting for events with a
 * timeout, forked peers that report through exit codes (Criterion asserts
 * belong to the test process only), and raw TCP sockets that speak (or
 * break) the CM wire protocol.
 */
#ifndef CM_TEST_H
#define CM_TEST_H

#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "zd_test_dat.h"
#include "dat_wait.h"
#include "core/zd_cm_wire.h"


/* In a forked peer a failed check exits with the line number. */
static int cm_in_child;

#define CHK(cond, ...)                                                        \
	do {                                                                  \
		if (!(cond)) {                                                \
			if (cm_in_child) {                                    \
				fprintf(stderr, "child: %s:%d: %s\n", __FILE__, \
					__LINE__, #cond);                     \
				_exit(__LINE__ % 200 + 2);                    \
			}                                                     \
			cr_assert_fail("%s:%d: %s", __FILE__, __LINE__, #cond); \
		}                                                             \
	} while (0)

#define CHK_RET(call, want)                                                   \
	do {                                                                  \
		DAT_RETURN r_ = (call);                                       \
		if (r_ != (DAT_RETURN)(want)) {                               \
			fprintf(stderr, "%s: got 0x%x want 0x%x\n", #call,    \
				(unsigned)r_, (unsigned)(want));              \
			CHK(r_ == (DAT_RETURN)(want));                        \
		}                                                             \
	} while (0)

#define ERR(type, sub) ((DAT_RETURN)(DAT_CLASS_ERROR | (type) | (sub)))

struct node {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, cr_evd, conn_evd;
	DAT_PZ_HANDLE pz;
	DAT_COUNT max_pdata;
};

/* A raw socket peer has no QP blob to give: for it, the tcp device on lo
 * (no QP ops yet) instead of shm, whose qp_connect needs a real peer. */
#define RAW_PEER_IA "zdapl-tcp-lo"

static inline void node_open_on(struct node *n, const char *ia_name)
{
	DAT_PROVIDER_ATTR pa;

	memset(n, 0, sizeof(*n));
	CHK_RET(dat_ia_open((DAT_NAME_PTR)ia_name, 8, &n->async, &n->ia), DAT_SUCCESS);
	CHK_RET(dat_evd_create(n->ia, 256, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &n->cr_evd),
		DAT_SUCCESS);
	CHK_RET(dat_evd_create(n->ia, 256, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG,
			       &n->conn_evd),
		DAT_SUCCESS);
	CHK_RET(dat_pz_create(n->ia, &n->pz), DAT_SUCCESS);
	CHK_RET(dat_ia_query(n->ia, NULL, 0, NULL, DAT_PROVIDER_FIELD_ALL, &pa), DAT_SUCCESS);
	n->max_pdata = pa.max_private_data_size;
	CHK(n->max_pdata > 0 && n->max_pdata <= ZD_CM_PDATA_MAX);
}

static inline void node_open(struct node *n)
{
	node_open_on(n, "zdapl-shm");
}

static inline DAT_EP_HANDLE node_ep(struct node *n)
{
	DAT_EP_HANDLE ep;

	CHK_RET(dat_ep_create(n->ia, n->pz, DAT_HANDLE_NULL, DAT_HANDLE_NULL, n->conn_evd, NULL,
			      &ep),
		DAT_SUCCESS);
	return ep;
}

/* A server and a client node (shm), one EP each. */
static inline void node_pair_open(struct node *srv, DAT_EP_HANDLE *sep, struct node *cli,
				  DAT_EP_HANDLE *cep)
{
	node_open(srv);
	node_open(cli);
	*sep = node_ep(srv);
	*cep = node_ep(cli);
}

static inline void node_close(struct node *n)
{
	CHK_RET(dat_ia_close(n->ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

static inline DAT_EP_STATE ep_state(DAT_EP_HANDLE ep)
{
	DAT_EP_STATE s = (DAT_EP_STATE)-1;

	dat_ep_get_status(ep, &s, NULL, NULL);
	return s;
}

/* A port nobody listens on (right now). */
static inline uint16_t free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	CHK(fd >= 0);
	CHK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	CHK(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
	close(fd);
	return ntohs(sa.sin_port);
}

static inline void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

/* ---- forked peers ---- */

/* Runs @fn in a child with one end of a socketpair; returns its pid. */
static inline pid_t spawn(int (*fn)(int fd, void *arg), void *arg, int *fd_out)
{
	int sv[2];
	pid_t pid;

	CHK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	pid = fork();
	CHK(pid >= 0);
	if (pid == 0) {
		cm_in_child = 1;
		close(sv[0]);
		alarm(30);  /* a stuck peer never outlives the test */
		_exit(fn(sv[1], arg));
	}
	close(sv[1]);
	*fd_out = sv[0];
	return pid;
}

/* Exit status of @pid, killing it after @ms; -1 if it had to be killed. */
static inline int reap(pid_t pid, int ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);

		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (now_ms() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		usleep(2000);
	}
}

static inline void msg_send(int fd, uint32_t v)
{
	CHK(write(fd, &v, sizeof(v)) == sizeof(v));
}

static inline uint32_t msg_recv(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint32_t v = 0;

	CHK(poll(&p, 1, ms) == 1);
	CHK(read(fd, &v, sizeof(v)) == sizeof(v));
	return v;
}

/* Server: listens on a fresh port of @n (consumer PSP @psp) and tells the
 * client on @fd which. */
static inline DAT_CONN_QUAL node_listen(struct node *n, int fd, DAT_PSP_HANDLE *psp)
{
	DAT_CONN_QUAL port;

	CHK_RET(dat_psp_create_any(n->ia, &port, n->cr_evd, DAT_PSP_CONSUMER_FLAG, psp),
		DAT_SUCCESS);
	msg_send(fd, (uint32_t)port);
	return port;
}

/* ---- raw sockets ---- */

static inline int raw_connect(uint16_t port)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct timeval tv = { .tv_sec = 3 };

	CHK(fd >= 0);
	loopback(&sa);
	sa.sin_port = htons(port);
	CHK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static inline void raw_send(int fd, enum zd_cm_msg_type type, uint16_t reason, uint32_t qual,
			    const void *pdata, size_t len)
{
	uint8_t buf[ZD_CM_FRAME_MAX];
	size_t n = zd_cm_frame_encode(buf, type, reason, qual, pdata, len, NULL, 0);

	CHK(send(fd, buf, n, MSG_NOSIGNAL) == (ssize_t)n);
}

/* Reads one frame header (and skips its body); the type, or 0 on EOF/error. */
static inline int raw_recv(int fd, struct zd_cm_hdr *h)
{
	uint8_t body[ZD_CM_FRAME_MAX];
	int blen;

	if (recv(fd, h, sizeof(*h), MSG_WAITALL) != (ssize_t)sizeof(*h))
		return 0;
	blen = zd_cm_hdr_decode(h);
	if (blen < 0)
		return 0;
	if (blen && recv(fd, body, (size_t)blen, MSG_WAITALL) != blen)
		return 0;
	return h->type;
}

/* 1 if the peer closed @fd within @ms. */
static inline int raw_sees_eof(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint8_t b[64];

	while (poll(&p, 1, ms) == 1) {
		ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);

		if (n == 0 || (n < 0 && errno != EAGAIN))
			return 1;
	}
	return 0;
}

#endif
