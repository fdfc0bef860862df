/*
 * Two processes connected over the real connection manager, each a
 * "peer": its node (cm_test.h), DTO EVDs, one registered buffer, EPs.
 * Shared by the device suites that run a parent server against a forked
 * client (tests/tcp, tests/mlx5sim).  A suite names its device once (a
 * struct peer_dev: which IA, which memory); the rest is here:
 *  - opening and closing a peer, its EPs (with or without an SRQ);
 *  - the two sides: server_start/server_up/server_done in the test
 *    process, which forks the client (spawn, cm_test.h), and
 *    client_open/client_done in the client, the two talking over a
 *    socketpair (msg_* on peer.fd);
 *  - posting and waiting (post_*, send_wait, dto_wait), and passing a
 *    region's rkey and address to the other side;
 *  - the scenarios every device runs alike (last section), so that a new
 *    device's suite is a list of one-line tests.
 */
#ifndef DAT_PEER_H
#define DAT_PEER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cm_test.h"
#include "rc_ep_attr.h"

#define BUF 65536                       /* each peer's registered buffer */

/* The device a suite's peers run on. */
struct peer_dev {
	const char *ia;                 /* the IA they open */
	void *(*alloc)(int kind);       /* a buffer of BUF bytes (NULL: the heap) */
	void (*free)(void *buf, int kind);
	uint32_t rkey_spoil;            /* xor that turns an rkey into nobody's */
};

struct peer {
	struct node n;
	const struct peer_dev *dev;
	DAT_EVD_HANDLE req, rcv;
	DAT_EP_HANDLE ep;
	DAT_PSP_HANDLE psp;
	DAT_SRQ_HANDLE srq;
	uint32_t port;                  /* the server's PSP */
	int fd;                         /* socketpair to the other side (msg_*) */
	pid_t pid;                      /* server: the client's process */
	int kind;                       /* the suite's memory kind, if it has several */
	uint8_t *buf;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lkey;
	DAT_RMR_CONTEXT rkey;
};

/* What a forked client of a shared scenario needs (spawn's arg). */
struct peer_job {
	const struct peer_dev *dev;
	int kind;
	int mode;                       /* the scenario's variant */
};

/* Opens @p on @dev: node, request and receive EVDs, and a zeroed buffer
 * of memory @kind registered with @priv. */
static inline void peer_open(struct peer *p, const struct peer_dev *dev, int kind,
			     DAT_MEM_PRIV_FLAGS priv)
{
	DAT_REGION_DESCRIPTION r;
	DAT_VLEN rlen;
	DAT_VADDR raddr;

	memset(p, 0, sizeof(*p));
	node_open_on(&p->n, dev->ia);
	CHK_RET(dat_evd_create(p->n.ia, 256, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &p->req),
		DAT_SUCCESS);
	CHK_RET(dat_evd_create(p->n.ia, 256, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &p->rcv),
		DAT_SUCCESS);
	p->dev = dev;
	p->kind = kind;
	p->buf = dev->alloc ? dev->alloc(kind) : aligned_alloc(4096, BUF);
	CHK(p->buf);
	memset(p->buf, 0, BUF);
	r.for_va = p->buf;
	CHK_RET(dat_lmr_create(p->n.ia, DAT_MEM_TYPE_VIRTUAL, r, BUF, p->n.pz, priv,
			       DAT_VA_TYPE_VA, &p->lmr, &p->lkey, &p->rkey, &rlen, &raddr),
		DAT_SUCCESS);
}

static inline void peer_close(struct peer *p)
{
	CHK_RET(dat_ia_close(p->n.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	if (p->dev->free)
		p->dev->free(p->buf, p->kind);
	else
		free(p->buf);
}

static inline void peer_ep(struct peer *p, DAT_EP_HANDLE *ep, int with_srq)
{
	DAT_EP_ATTR a;

	rc_ep_attr(&a, BUF, 32, 32, 4);
	if (with_srq) {
		DAT_SRQ_ATTR sa = { .max_recv_dtos = 64, .max_recv_iov = 4, .low_watermark = DAT_SRQ_LW_DEFAULT };

		if (!p->srq)
			CHK_RET(dat_srq_create(p->n.ia, p->n.pz, &sa, &p->srq), DAT_SUCCESS);
		CHK_RET(dat_ep_create_with_srq(p->n.ia, p->n.pz, p->rcv, p->req, p->n.conn_evd,
					       p->srq, &a, ep),
			DAT_SUCCESS);
	} else {
		CHK_RET(dat_ep_create(p->n.ia, p->n.pz, p->rcv, p->req, p->n.conn_evd, &a, ep),
			DAT_SUCCESS);
	}
}

/* Server: listen on a fresh port and tell the client which. */
static inline DAT_CONN_QUAL server_listen(struct peer *p, int fd)
{
	DAT_CONN_QUAL port = node_listen(&p->n, fd, &p->psp);

	p->port = (uint32_t)port;
	return port;
}

static inline void server_accept(struct peer *p, DAT_EP_HANDLE ep)
{
	DAT_EVENT ev;

	CHK(wait_ev(p->n.cr_evd, 10 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, ep, 0, NULL),
		DAT_SUCCESS);
	CHK(wait_ev(p->n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED);
}

static inline void client_connect(struct peer *p, DAT_EP_HANDLE ep, uint32_t port)
{
	CHK_RET(connect_loopback(ep, port, 10 * SEC), DAT_SUCCESS);
	CHK(wait_ev(p->n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
}

/* ---- the two sides ---- */

/* Server: forks the client @fn(@arg) (spawn), then opens @p on @dev with
 * one EP (on the peer's SRQ if @with_srq); post its receives, then
 * server_up. */
static inline void server_start_with(struct peer *p, const struct peer_dev *dev, int kind,
				     DAT_MEM_PRIV_FLAGS priv, int with_srq,
				     int (*fn)(int fd, void *arg), void *arg)
{
	int fd;
	pid_t pid = spawn(fn, arg, &fd);

	peer_open(p, dev, kind, priv);
	p->fd = fd;
	p->pid = pid;
	peer_ep(p, &p->ep, with_srq);
}

/* server_start_with for the usual: all rights, no SRQ. */
static inline void server_start(struct peer *p, const struct peer_dev *dev, int kind,
				int (*fn)(int fd, void *arg), void *arg)
{
	server_start_with(p, dev, kind, DAT_MEM_PRIV_ALL_FLAG, 0, fn, arg);
}

/* Server: the client connects @p's EP (server_listen, server_accept). */
static inline void server_up(struct peer *p)
{
	server_listen(p, p->fd);
	server_accept(p, p->ep);
}

/* Server: the last word to the client, which must exit 0; then close. */
static inline void server_done(struct peer *p)
{
	msg_send(p->fd, 1);
	CHK(reap(p->pid, 20000) == 0);
	peer_close(p);
}

/* Client: @p open on @dev (all rights) with its EP; post its receives,
 * then client_up. */
static inline void client_init(struct peer *p, const struct peer_dev *dev, int kind, int fd)
{
	peer_open(p, dev, kind, DAT_MEM_PRIV_ALL_FLAG);
	p->fd = fd;
	peer_ep(p, &p->ep, 0);
}

/* Client: connects @p's EP, and @ep2 too unless NULL, to the server's
 * PSP, whose port comes over the socketpair. */
static inline void client_up(struct peer *p, DAT_EP_HANDLE *ep2)
{
	p->port = msg_recv(p->fd, 10000);
	client_connect(p, p->ep, p->port);
	if (ep2)
		client_connect(p, *ep2, p->port);
}

/* Client: client_init and client_up, with a second EP into @ep2 unless
 * NULL. */
static inline void client_open(struct peer *p, const struct peer_dev *dev, int kind, int fd,
			       DAT_EP_HANDLE *ep2)
{
	client_init(p, dev, kind, fd);
	if (ep2)
		peer_ep(p, ep2, 0);
	client_up(p, ep2);
}

/* Client: waits for the server's last word, closes; the exit status. */
static inline int client_done(struct peer *p)
{
	msg_recv(p->fd, 10000);
	peer_close(p);
	return 0;
}

/* ---- posting and waiting ---- */

/* Next DTO completion of @evd within @us: its status (checks the cookie
 * unless ~0, and the length when @len). */
static inline int dto_wait(DAT_EVD_HANDLE evd, DAT_TIMEOUT us, uint64_t cookie, DAT_COUNT *len)
{
	DAT_EVENT ev;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

	CHK(wait_ev(evd, us, &ev) == DAT_DTO_COMPLETION_EVENT);
	if (cookie != ~0ull && d->user_cookie.as_64 != cookie) {
		fprintf(stderr, "cookie %llu, expected %llu (status %d)\n",
			(unsigned long long)d->user_cookie.as_64, (unsigned long long)cookie,
			d->status);
		CHK(d->user_cookie.as_64 == cookie);
	}
	if (len)
		*len = (DAT_COUNT)d->transfered_length;
	return d->status;
}

static inline DAT_LMR_TRIPLET seg(struct peer *p, size_t off, size_t len)
{
	DAT_LMR_TRIPLET t = { .lmr_context = p->lkey, .virtual_address = (DAT_VADDR)(uintptr_t)(p->buf + off),
			      .segment_length = (DAT_VLEN)len };
	return t;
}

static inline void post_send(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov, uint64_t cookie)
{
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	CHK_RET(dat_ep_post_send(ep, n, iov, c, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
}

static inline void post_recv(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov, uint64_t cookie)
{
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	CHK_RET(dat_ep_post_recv(ep, n, iov, c, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
}

/* @n receives of @len bytes on @ep, the i-th at @off + i * @stride with
 * cookie @cookie + i. */
static inline void post_recvs(struct peer *p, DAT_EP_HANDLE ep, int n, size_t off, size_t stride,
			      size_t len, uint64_t cookie)
{
	for (int i = 0; i < n; i++) {
		DAT_LMR_TRIPLET iov = seg(p, off + (size_t)i * stride, len);

		post_recv(ep, 1, &iov, cookie + (uint64_t)i);
	}
}

static inline void post_write(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov, uint64_t cookie,
			      const DAT_RMR_TRIPLET *r)
{
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	CHK_RET(dat_ep_post_rdma_write(ep, n, iov, c, r, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
}

static inline void post_read(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov, uint64_t cookie,
			     const DAT_RMR_TRIPLET *r)
{
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	CHK_RET(dat_ep_post_rdma_read(ep, n, iov, c, r, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
}

/* Sends @len bytes at @off of @p's buffer on @ep and waits for its
 * successful completion. */
static inline void send_wait(struct peer *p, DAT_EP_HANDLE ep, size_t off, size_t len,
			     uint64_t cookie)
{
	DAT_LMR_TRIPLET iov = seg(p, off, len);

	post_send(ep, 1, &iov, cookie);
	CHK(dto_wait(p->req, 10 * SEC, cookie, NULL) == DAT_DTO_SUCCESS);
}

/* Our buffer's rkey and address to the peer. */
static inline void send_region(struct peer *p, int fd)
{
	msg_send(fd, p->rkey);
	msg_send(fd, (uint32_t)(uintptr_t)p->buf);
	msg_send(fd, (uint32_t)((uint64_t)(uintptr_t)p->buf >> 32));
}

/* The peer's buffer (send_region), all BUF bytes of it. */
static inline DAT_RMR_TRIPLET recv_region(int fd)
{
	DAT_RMR_TRIPLET r = { 0 };
	uint32_t lo, hi;

	r.rmr_context = msg_recv(fd, 10000);
	lo = msg_recv(fd, 10000);
	hi = msg_recv(fd, 10000);
	r.virtual_address = (DAT_VADDR)lo | (DAT_VADDR)hi << 32;
	r.segment_length = BUF;
	return r;
}

/* ---- scenarios every device runs alike ---- */

/* send/recv with several segments each way: the client receives into 3
 * segments (cookie 7) and sends 10 + 0 + 30000 bytes in 3 (cookie 11);
 * the server receives those into 2 (cookie 5) and answers 5000 bytes
 * (cookie 9). */
static inline void multiseg_client_post(struct peer *p)
{
	DAT_LMR_TRIPLET iov[3] = { seg(p, 1000, 100), seg(p, 5000, 2000), seg(p, 9000, 3000) };

	post_recv(p->ep, 3, iov, 7);
}

static inline void multiseg_client_send(struct peer *p)
{
	DAT_LMR_TRIPLET iov[3] = { seg(p, 20000, 10), seg(p, 25000, 0), seg(p, 30000, 30000) };

	fill(p->buf + 20000, 10, 1);
	fill(p->buf + 30000, 30000, 2);
	post_send(p->ep, 3, iov, 11);
	CHK(dto_wait(p->req, 10 * SEC, 11, NULL) == DAT_DTO_SUCCESS);
}

/* The server's 5000 bytes over the client's 3 receive segments. */
static inline void multiseg_client_check(struct peer *p)
{
	DAT_COUNT len;

	CHK(dto_wait(p->rcv, 10 * SEC, 7, &len) == DAT_DTO_SUCCESS);
	CHK(len == 5000);
	for (int i = 0; i < 5000; i++) {
		uint8_t want = (uint8_t)(3 + i * 7);
		uint8_t got = i < 100 ? p->buf[1000 + i] : i < 2100 ? p->buf[5000 + i - 100]
							     : p->buf[9000 + i - 2100];
		CHK(got == want);
	}
	CHK(p->buf[9000 + 2900] == 0);  /* nothing past the message */
}

static inline void multiseg_server_post(struct peer *p)
{
	DAT_LMR_TRIPLET iov[2] = { seg(p, 0, 16), seg(p, 100, 40000) };

	post_recv(p->ep, 2, iov, 5);
}

/* The client's 30010 bytes (its length checked by the caller). */
static inline void multiseg_server_check(struct peer *p)
{
	for (int i = 0; i < 10; i++)
		CHK(p->buf[i] == (uint8_t)(1 + i * 7));
	for (int i = 0; i < 6; i++)
		CHK(p->buf[10 + i] == (uint8_t)(2 + i * 7));
	for (int i = 6; i < 30000; i++)
		CHK(p->buf[100 + i - 6] == (uint8_t)(2 + i * 7));
}

static inline void multiseg_server_answer(struct peer *p)
{
	fill(p->buf + 50000, 5000, 3);
	send_wait(p, p->ep, 50000, 5000, 9);
}

/* RDMA write of 2 segments (1000 and 20000 bytes of patterns 5 and 6)
 * to the server's buffer + 4096 (@r: all of it; left pointing at the
 * write), cookie 21; the server waits for the client's final send
 * (cookie 1, after the reads) and finds them in place. */
static inline void rdma_client_write(struct peer *p, DAT_RMR_TRIPLET *r)
{
	DAT_LMR_TRIPLET iov[2] = { seg(p, 0, 1000), seg(p, 2000, 20000) };

	fill(p->buf, 1000, 5);
	fill(p->buf + 2000, 20000, 6);
	r->virtual_address += 4096;
	r->segment_length = 21000;
	post_write(p->ep, 2, iov, 21, r);
	CHK(dto_wait(p->req, 10 * SEC, 21, NULL) == DAT_DTO_SUCCESS);
}

/* Server: @p's buffer with pattern 9 in front, a receive for the client's
 * "done" (cookie 1), connected, the region sent. */
static inline void rdma_server_up(struct peer *p)
{
	fill(p->buf, 4096, 9);
	post_recvs(p, p->ep, 1, 60000, 0, 64, 1);
	server_up(p);
	send_region(p, p->fd);
}

/* @want: what the client's 2-segment write put at the server's + 4096. */
static inline void rdma_written(uint8_t *want)
{
	fill(want, 1000, 5);
	fill(want + 1000, 20000, 6);
}

/* Protection: an RDMA write with a bad rkey (mode 0), into memory without
 * REMOTE_WRITE (1) or past the region's end (2) completes
 * DAT_DTO_ERR_REMOTE_ACCESS, breaks the connection (later DTOs flush) and
 * leaves the target's memory untouched. */
static inline int prot_client(int fd, void *arg)
{
	const struct peer_job *j = arg;
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r;
	DAT_DTO_COOKIE c = { .as_64 = 31 };

	client_open(&p, j->dev, j->kind, fd, NULL);
	r = recv_region(fd);
	if (j->mode == 0)
		r.rmr_context ^= j->dev->rkey_spoil;
	r.segment_length = 4096;
	if (j->mode == 2)
		r.virtual_address += BUF - 100;  /* past the end */
	fill(p.buf, 4096, 4);
	iov = seg(&p, 0, 4096);
	post_write(p.ep, 1, &iov, 31, &r);
	CHK(dto_wait(p.req, 20 * SEC, 31, NULL) == DAT_DTO_ERR_REMOTE_ACCESS);
	/* the connection is broken, the QP in error: a later DTO flushes */
	c.as_64 = 32;
	if (dat_ep_post_rdma_write(p.ep, 1, &iov, c, &r, DAT_COMPLETION_DEFAULT_FLAG) ==
	    DAT_SUCCESS)
		CHK(dto_wait(p.req, 20 * SEC, 32, NULL) == DAT_DTO_ERR_FLUSHED);
	msg_send(fd, 1);
	return client_done(&p);
}

static inline void prot_case(const struct peer_dev *dev, int kind, int mode)
{
	struct peer_job j = { .dev = dev, .kind = kind, .mode = mode };
	DAT_MEM_PRIV_FLAGS priv = mode == 1 ? DAT_MEM_PRIV_LOCAL_READ_FLAG |
					      DAT_MEM_PRIV_LOCAL_WRITE_FLAG |
					      DAT_MEM_PRIV_REMOTE_READ_FLAG
					    : DAT_MEM_PRIV_ALL_FLAG;
	struct peer p;

	server_start_with(&p, dev, kind, priv, 0, prot_client, &j);
	post_recvs(&p, p.ep, 1, 60000, 0, 64, 1);
	server_up(&p);
	send_region(&p, p.fd);
	/* The target detected the violation: its QP broke too, so its
	 * posted receive flushes. */
	CHK(dto_wait(p.rcv, 20 * SEC, 1, NULL) == DAT_DTO_ERR_FLUSHED);
	msg_recv(p.fd, 20000);
	for (int i = 0; i < BUF; i++)
		CHK(p.buf[i] == 0);
	server_done(&p);
}

/* A client that connects, says so, and waits to be SIGKILLed. */
static inline int killed_client(int fd, void *arg)
{
	const struct peer_job *j = arg;
	struct peer p;

	client_open(&p, j->dev, j->kind, fd, NULL);
	msg_send(fd, 1);
	pause();  /* SIGKILLed here */
	return 0;
}

/* Flush on disconnect: the client disconnects gracefully; the server's
 * 4 outstanding receives flush, then it sees the disconnect. */
static inline int disc_client(int fd, void *arg)
{
	const struct peer_job *j = arg;
	struct peer p;
	DAT_EVENT ev;

	client_open(&p, j->dev, j->kind, fd, NULL);
	msg_recv(fd, 10000);
	CHK_RET(dat_ep_disconnect(p.ep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	CHK(wait_ev(p.n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
	msg_send(fd, 1);
	peer_close(&p);
	return 0;
}

static inline void flush_on_disconnect(const struct peer_dev *dev, int kind)
{
	struct peer_job j = { .dev = dev, .kind = kind };
	struct peer p;

	server_start(&p, dev, kind, disc_client, &j);
	post_recvs(&p, p.ep, 4, 0, 100, 64, 10);
	server_up(&p);
	msg_send(p.fd, 1);
	for (int i = 0; i < 4; i++)
		CHK(dto_wait(p.rcv, 10 * SEC, (uint64_t)(10 + i), NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(wait_ev(p.n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	msg_recv(p.fd, 10000);
	CHK(reap(p.pid, 20000) == 0);
	peer_close(&p);
}

/*
 * Sends that completed before their sender left: the server posts no
 * receive until the client's EAGER_N sends have all completed
 * successfully; it then posts EAGER_N / 2, the client leaves (@mode:
 * EAGER_DISCONNECT, EAGER_EP_FREE or EAGER_EXIT, plus EAGER_SRQ for a
 * server EP on an SRQ), and only after the server's DISCONNECTED (or
 * BROKEN, for an exit) does it post the rest and two more.  Every message
 * must arrive, in order, with its bytes and length, before any receive
 * flushes; then the two extra receives flush (an SRQ's stay posted).  On
 * a device whose sends complete once the data is in the target's memory
 * (zdapl-shm's eager ring, zdapl-tcp's socket) a completed send is
 * delivered, as on IB, where it completes only once acknowledged.
 */
#define EAGER_N      24
#define EAGER_STRIDE 2048
enum { EAGER_DISCONNECT = 0, EAGER_EP_FREE = 1, EAGER_EXIT = 2, EAGER_SRQ = 4 };

/* Message @i: this many bytes of pattern @i + 1 at @i * EAGER_STRIDE. */
static inline size_t eager_len(int i)
{
	return 1 + (size_t)(i * 613) % 2000;
}

static inline int eager_client(int fd, void *arg)
{
	const struct peer_job *j = arg;
	struct peer p;
	DAT_EVENT ev;

	client_open(&p, j->dev, j->kind, fd, NULL);
	for (int i = 0; i < EAGER_N; i++) {
		DAT_LMR_TRIPLET iov = seg(&p, (size_t)i * EAGER_STRIDE, eager_len(i));

		fill(p.buf + (size_t)i * EAGER_STRIDE, eager_len(i), (uint8_t)(i + 1));
		post_send(p.ep, 1, &iov, (uint64_t)i);
	}
	for (int i = 0; i < EAGER_N; i++)
		CHK(dto_wait(p.req, 10 * SEC, (uint64_t)i, NULL) == DAT_DTO_SUCCESS);
	msg_send(fd, 1);          /* all sent: the server posts half */
	msg_recv(fd, 10000);      /* posted: leave */
	switch (j->mode & 3) {
	case EAGER_DISCONNECT:
		CHK_RET(dat_ep_disconnect(p.ep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
		CHK(wait_ev(p.n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
		break;
	case EAGER_EP_FREE:
		CHK_RET(dat_ep_free(p.ep), DAT_SUCCESS);
		break;
	default:
		_exit(0);         /* nothing freed, nothing said */
	}
	return client_done(&p);
}

/* Receive @i of the scenario (cookie 100 + @i) on the EP or its SRQ. */
static inline void eager_post(struct peer *p, int i)
{
	DAT_LMR_TRIPLET iov = seg(p, (size_t)i * EAGER_STRIDE, EAGER_STRIDE);
	DAT_DTO_COOKIE c = { .as_64 = 100 + (uint64_t)i };

	if (p->srq)
		CHK_RET(dat_srq_post_recv(p->srq, 1, &iov, c), DAT_SUCCESS);
	else
		post_recv(p->ep, 1, &iov, c.as_64);
}

static inline void eager_outlives_disconnect(const struct peer_dev *dev, int kind, int mode)
{
	struct peer_job j = { .dev = dev, .kind = kind, .mode = mode };
	struct peer p;
	DAT_EVENT ev;
	DAT_EVENT_NUMBER end;
	int i;

	server_start_with(&p, dev, kind, DAT_MEM_PRIV_ALL_FLAG, mode & EAGER_SRQ, eager_client,
			  &j);
	server_up(&p);
	msg_recv(p.fd, 20000);
	/* Posted but not matched (nothing polls the receive EVD) when the
	 * client leaves. */
	for (i = 0; i < EAGER_N / 2; i++)
		eager_post(&p, i);
	msg_send(p.fd, 1);
	end = wait_ev(p.n.conn_evd, 20 * SEC, NULL);
	CHK(end == DAT_CONNECTION_EVENT_DISCONNECTED ||
	    ((mode & 3) == EAGER_EXIT && end == DAT_CONNECTION_EVENT_BROKEN));
	for (; i < EAGER_N + 2; i++)
		eager_post(&p, i);
	for (i = 0; i < EAGER_N; i++) {
		uint8_t *got = p.buf + (size_t)i * EAGER_STRIDE;
		uint8_t want[EAGER_STRIDE];
		DAT_COUNT len;

		CHK(dto_wait(p.rcv, 10 * SEC, 100 + (uint64_t)i, &len) == DAT_DTO_SUCCESS);
		CHK(len == (DAT_COUNT)eager_len(i));
		fill(want, eager_len(i), (uint8_t)(i + 1));
		CHK(memcmp(got, want, eager_len(i)) == 0);
		CHK(got[eager_len(i)] == 0);
	}
	if (!p.srq) {
		CHK(dto_wait(p.rcv, 10 * SEC, 100 + EAGER_N, NULL) == DAT_DTO_ERR_FLUSHED);
		CHK(dto_wait(p.rcv, 10 * SEC, 101 + EAGER_N, NULL) == DAT_DTO_ERR_FLUSHED);
	}
	CHK(DAT_GET_TYPE(dat_evd_dequeue(p.rcv, &ev)) == DAT_QUEUE_EMPTY);
	if ((mode & 3) == EAGER_EXIT) {
		CHK(reap(p.pid, 20000) == 0);
		peer_close(&p);
	} else {
		server_done(&p);
	}
}

#endif
