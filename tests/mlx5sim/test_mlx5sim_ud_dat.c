/*
 * Unreliable datagrams on zdapl-mlx5sim end to end: the hw/mlx5 data path
 * (UD QPs, the datagram segment, the UD completions) driving the software
 * NIC, through libdat2 and this build's dat.conf (DAT_IB_SERVICE_TYPE_UD
 * EPs, the IB extension calls).
 *
 * Between two processes (the parent serves, the forked child is the
 * client): the address exchange of dat_ep_connect/dat_cr_accept and its
 * events, several EPs and several exchanges on one EP, datagrams both ways
 * with the payload at offset 40 of the receive and its length + 40,
 * cookies in posting order, a datagram with no receive posted (dropped,
 * counted by the sender's NIC: its ZDAPL_MLX5SIM_DEBUG line), freed
 * address handles, dat_ep_free with receives posted.  In one process, two
 * IAs (two NICs): the largest datagram and one past it, a receive too
 * small, an SRQ, gathers, suppressed completions, a bad local key, a
 * destination gone, and the handle errors.
 */
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>

#include "dat_peer.h"
#include "ud_peer.h"
#include "zdapl/zdapl.h"

#define MTU 4096                /* the device's max_ud_payload */

static void *sim_alloc(int kind)
{
	(void)kind;
	return zdapl_mem_alloc_aligned(BUF, 4096);
}

static void sim_free(void *buf, int kind)
{
	(void)kind;
	zdapl_mem_free(buf);
}

static const struct peer_dev sim = { .ia = "zdapl-mlx5sim", .alloc = sim_alloc, .free = sim_free };

TestSuite(mlx5sim_ud, .init = zd_test_use_conf, .timeout = 60);

/* A UD EP of @p (on @srq unless NULL) for datagrams up to @max bytes,
 * with request completion flags @req_flags. */
static DAT_EP_HANDLE ud_ep_with(struct peer *p, DAT_SRQ_HANDLE srq, DAT_VLEN max,
				DAT_COMPLETION_FLAGS req_flags)
{
	DAT_EP_ATTR a;
	DAT_EP_HANDLE ep;

	rc_ep_attr(&a, max, 16, 16, 4);
	a.service_type = (DAT_SERVICE_TYPE)DAT_IB_SERVICE_TYPE_UD;
	a.request_completion_flags = req_flags;
	if (srq)
		CHK_RET(dat_ep_create_with_srq(p->n.ia, p->n.pz, p->rcv, p->req, p->n.conn_evd, srq,
					       &a, &ep),
			DAT_SUCCESS);
	else
		CHK_RET(dat_ep_create(p->n.ia, p->n.pz, p->rcv, p->req, p->n.conn_evd, &a, &ep),
			DAT_SUCCESS);
	return ep;
}

static DAT_EP_HANDLE ud_ep(struct peer *p)
{
	return ud_ep_with(p, DAT_HANDLE_NULL, MTU, DAT_COMPLETION_DEFAULT_FLAG);
}

/* ---- datagrams ---- */

/* Nothing on @evd for a while. */
static void evd_quiet(DAT_EVD_HANDLE evd)
{
	CHK(wait_ev(evd, SEC / 10, NULL) == 0);
}

/* ---- two processes ---- */

/* The exchanges: client EP c0 with the server's e0 (tag 0) and e1 (tag 1),
 * client EP c1 with e1 (tag 1), one at a time; then datagrams. */
enum { C0_E0, C0_E1, C1_E1, NPAIRS };

static const uint32_t pair_tag[NPAIRS] = { 0, 1, 1 };

/* The client's stderr to a file for a while: its NIC's debug lines. */
struct err_log {
	char path[64];
	int saved;
};

static void log_start(struct err_log *l)
{
	int fd;

	snprintf(l->path, sizeof(l->path), "/tmp/zd-mlx5sim-ud-%d.log", (int)getpid());
	fd = open(l->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHK(fd >= 0);
	fflush(stderr);
	l->saved = dup(2);
	CHK(l->saved >= 0 && dup2(fd, 2) == 2);
	close(fd);
}

/* Stops logging; whether the log holds @line. */
static bool log_stop_has(struct err_log *l, const char *line)
{
	char buf[4096];
	ssize_t n;
	int fd;

	fflush(stderr);
	CHK(dup2(l->saved, 2) == 2);
	close(l->saved);
	fd = open(l->path, O_RDONLY);
	CHK(fd >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	unlink(l->path);
	buf[n > 0 ? n : 0] = 0;
	fputs(buf, stderr);
	return strstr(buf, line) != NULL;
}

static int c_exchange(int fd, void *arg)
{
	struct peer p;
	DAT_EP_HANDLE c[2];
	DAT_IB_ADDR_HANDLE ah[NPAIRS];
	DAT_CONN_QUAL port;
	DAT_LMR_TRIPLET iov;
	struct err_log log;

	(void)arg;
	/* Before the IA opens (the NIC reads it then): drops are logged. */
	setenv("ZDAPL_MLX5SIM_DEBUG", "1", 1);
	peer_open(&p, &sim, 0, DAT_MEM_PRIV_ALL_FLAG);
	p.fd = fd;
	c[0] = ud_ep(&p);
	c[1] = ud_ep(&p);
	/* c0: two answers, c1: one */
	post_recvs(&p, c[0], 2, 0, 512, 512, 10);
	post_recvs(&p, c[1], 1, 2048, 512, 512, 20);
	port = msg_recv(fd, 10000);
	for (int i = 0; i < NPAIRS; i++) {
		struct ud_est e;

		ud_connect(c[i == C1_E1], port, pair_tag[i]);
		e = ud_established(&p);
		CHK_RET(dat_ib_ud_cm_free(e.ep, (DAT_CONTEXT){ .as_64 = e.cm }), DAT_SUCCESS);
		CHK(e.active && e.ep == c[i == C1_E1] && e.tag == pair_tag[i]);
		ah[i] = e.ah;
	}
	/* e1's QP twice, e0's another */
	CHK(ah[C0_E1].qpn == ah[C1_E1].qpn && ah[C0_E0].qpn != ah[C0_E1].qpn);
	CHK(ah[C0_E1].ah != ah[C1_E1].ah);   /* one handle per event */
	msg_send(fd, 1);

	/* four to e0 in a row: they arrive in order, cookies 3..6 */
	for (int i = 0; i < 4; i++)
		fill(p.buf + 8192 + i * 100, 100, (uint8_t)(30 + i));
	for (int i = 0; i < 4; i++) {
		iov = seg(&p, 8192 + (size_t)i * 100, 100);
		CHK_RET(send_ud(c[0], 1, &iov, &ah[C0_E0], 3 + (uint64_t)i,
				DAT_COMPLETION_DEFAULT_FLAG),
			DAT_SUCCESS);
	}
	for (int i = 0; i < 4; i++) {
		DAT_COUNT len = 0;

		CHK(ud_wait(p.req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, c[0], 3 + (uint64_t)i, &len) ==
		    DAT_DTO_SUCCESS);
		CHK(len == 100);
	}
	fill(p.buf + 9000, 77, 41);
	send_ud_wait(&p, c[0], &ah[C0_E1], 9000, 77, 7);
	fill(p.buf + 9100, MTU, 42);
	send_ud_wait(&p, c[1], &ah[C1_E1], 9100, MTU, 8);
	msg_send(fd, 2);

	/* the answers: from e0 and e1 to c0, from e1 to c1 */
	msg_recv(fd, 10000);
	fill(p.buf + 20000, 50, 50);
	recv_check(&p, c[0], 10, 0, p.buf + 20000, 50);
	fill(p.buf + 20000, 60, 51);
	recv_check(&p, c[0], 11, 512, p.buf + 20000, 60);
	fill(p.buf + 20000, 70, 52);
	recv_check(&p, c[1], 20, 2048, p.buf + 20000, 70);

	/* e0 has no receive left: dropped, and counted; the send completes */
	log_start(&log);
	send_ud_wait(&p, c[0], &ah[C0_E0], 9000, 10, 9);
	CHK(log_stop_has(&log, "dropped: no receive posted (1 so far)"));
	msg_send(fd, 3);
	/* now it has one: this one gets in, not the dropped one */
	msg_recv(fd, 10000);
	fill(p.buf + 9200, 33, 43);
	send_ud_wait(&p, c[0], &ah[C0_E0], 9200, 33, 10);

	/* a freed address handle is refused; another event's copy for the
	 * same QP is not freed with it */
	CHK_RET(dat_ib_ud_ah_free(c[0], &ah[C0_E1]), DAT_SUCCESS);
	iov = seg(&p, 9000, 10);
	CHK_RET(send_ud(c[0], 1, &iov, &ah[C0_E1], 11, DAT_COMPLETION_DEFAULT_FLAG),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4));
	fill(p.buf + 9300, 12, 44);
	send_ud_wait(&p, c[1], &ah[C1_E1], 9300, 12, 12);
	msg_send(fd, 4);
	return client_done(&p);
}

Test(mlx5sim_ud, exchange_and_datagrams_between_processes)
{
	struct peer p;
	DAT_EP_HANDLE e[2];
	DAT_IB_ADDR_HANDLE ah[NPAIRS];
	DAT_EVENT ev;
	int fd;
	pid_t pid = spawn(c_exchange, NULL, &fd);

	peer_open(&p, &sim, 0, DAT_MEM_PRIV_ALL_FLAG);
	p.fd = fd;
	p.pid = pid;
	e[0] = ud_ep(&p);
	e[1] = ud_ep(&p);
	post_recvs(&p, e[0], 4, 0, 512, 512, 100);
	post_recvs(&p, e[1], 4, 4096, MTU + GRH, MTU + GRH, 200);
	server_listen(&p, fd);
	for (int i = 0; i < NPAIRS; i++) {
		struct ud_est est;

		CHK(ud_accept(&p, e, 2) == pair_tag[i]);
		est = ud_established(&p);
		CHK_RET(dat_ib_ud_cm_free(est.ep, (DAT_CONTEXT){ .as_64 = est.cm }), DAT_SUCCESS);
		CHK(!est.active && est.ep == e[pair_tag[i]]);
		ah[i] = est.ah;
	}
	/* c0's QP twice, c1's another */
	CHK(ah[C0_E0].qpn == ah[C0_E1].qpn && ah[C1_E1].qpn != ah[C0_E0].qpn);
	msg_recv(fd, 10000);

	/* the client's datagrams, in order */
	msg_recv(fd, 10000);
	for (int i = 0; i < 4; i++) {
		uint8_t want[100];

		fill(want, 100, (uint8_t)(30 + i));
		recv_check(&p, e[0], 100 + (uint64_t)i, (size_t)i * 512, want, 100);
	}
	{
		static uint8_t want[MTU];

		fill(want, 77, 41);
		recv_check(&p, e[1], 200, 4096, want, 77);
		fill(want, MTU, 42);
		recv_check(&p, e[1], 201, 4096 + MTU + GRH, want, MTU);
	}

	/* answers through the passive side's handles */
	fill(p.buf + 30000, 50, 50);
	send_ud_wait(&p, e[0], &ah[C0_E0], 30000, 50, 1);
	fill(p.buf + 30000, 60, 51);
	send_ud_wait(&p, e[1], &ah[C0_E1], 30000, 60, 2);
	fill(p.buf + 30000, 70, 52);
	send_ud_wait(&p, e[1], &ah[C1_E1], 30000, 70, 3);
	msg_send(fd, 1);

	/* the datagram that found no receive never shows up */
	msg_recv(fd, 10000);
	evd_quiet(p.rcv);
	post_recvs(&p, e[0], 1, 40000, 0, 512, 104);
	msg_send(fd, 2);
	{
		uint8_t want[33];

		fill(want, 33, 43);
		recv_check(&p, e[0], 104, 40000, want, 33);
	}
	msg_recv(fd, 10000);
	{
		uint8_t want[12];

		fill(want, 12, 44);
		recv_check(&p, e[1], 202, 4096 + 2 * (MTU + GRH), want, 12);
	}

	/* dat_ep_free with a receive still posted: it flushes */
	CHK_RET(dat_ep_free(e[1]), DAT_SUCCESS);
	CHK(ud_wait(p.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_UD, e[1], 203, NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(DAT_GET_TYPE(dat_evd_dequeue(p.rcv, &ev)) == DAT_QUEUE_EMPTY);
	server_done(&p);
}

/* ---- one process, two NICs ---- */

struct two {
	struct peer a, b;
	DAT_EP_HANDLE ea, eb;
	DAT_IB_ADDR_HANDLE ab, ba;      /* ea -> eb, eb -> ea */
};

static void two_open(struct two *t)
{
	peer_open(&t->a, &sim, 0, DAT_MEM_PRIV_ALL_FLAG);
	peer_open(&t->b, &sim, 0, DAT_MEM_PRIV_ALL_FLAG);
	t->ea = ud_ep(&t->a);
	t->eb = ud_ep(&t->b);
	ud_pair(&t->a, t->ea, &t->b, t->eb, &t->ab, &t->ba);
}

static void two_close(struct two *t)
{
	peer_close(&t->a);
	peer_close(&t->b);
}

Test(mlx5sim_ud, mtu_and_one_past)
{
	struct two t;
	DAT_LMR_TRIPLET iov[2];
	DAT_EP_ATTR a;
	DAT_EP_HANDLE ep;

	two_open(&t);
	/* an EP for datagrams above the MTU cannot be made */
	rc_ep_attr(&a, MTU + 1, 4, 4, 1);
	a.service_type = (DAT_SERVICE_TYPE)DAT_IB_SERVICE_TYPE_UD;
	CHK_RET(dat_ep_create(t.a.n.ia, t.a.n.pz, t.a.rcv, t.a.req, t.a.n.conn_evd, &a, &ep),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6));
	/* MTU exactly, over two segments */
	post_recvs(&t.b, t.eb, 1, 0, 0, MTU + GRH, 1);
	fill(t.a.buf, MTU, 9);
	iov[0] = seg(&t.a, 0, 1000);
	iov[1] = seg(&t.a, 1000, MTU - 1000);
	CHK_RET(send_ud(t.ea, 2, iov, &t.ab, 5, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ud_wait(t.a.req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, t.ea, 5, NULL) == DAT_DTO_SUCCESS);
	recv_check(&t.b, t.eb, 1, 0, t.a.buf, MTU);
	/* one byte more: refused at the post, nothing sent */
	iov[1].segment_length++;
	CHK_RET(send_ud(t.ea, 2, iov, &t.ab, 6, DAT_COMPLETION_DEFAULT_FLAG),
		ERR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE));
	evd_quiet(t.a.req);
	two_close(&t);
}

Test(mlx5sim_ud, receive_too_small_then_the_next)
{
	struct two t;

	two_open(&t);
	post_recvs(&t.b, t.eb, 1, 0, 0, GRH + 19, 1);
	post_recvs(&t.b, t.eb, 1, 1024, 0, GRH + 20, 2);
	fill(t.a.buf, 20, 1);
	send_ud_wait(&t.a, t.ea, &t.ab, 0, 20, 1);
	send_ud_wait(&t.a, t.ea, &t.ab, 0, 20, 2);
	CHK(ud_wait(t.b.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_UD, t.eb, 1, NULL) ==
	    DAT_DTO_ERR_LOCAL_LENGTH);
	recv_check(&t.b, t.eb, 2, 1024, t.a.buf, 20);
	/* and the EP goes on, both ways */
	post_recvs(&t.a, t.ea, 1, 5000, 0, 100, 3);
	fill(t.b.buf + 3000, 30, 2);
	send_ud_wait(&t.b, t.eb, &t.ba, 3000, 30, 3);
	recv_check(&t.a, t.ea, 3, 5000, t.b.buf + 3000, 30);
	two_close(&t);
}

Test(mlx5sim_ud, srq_receives)
{
	struct two t;
	DAT_SRQ_ATTR attr = { .max_recv_dtos = 8, .max_recv_iov = 2,
			      .low_watermark = DAT_SRQ_LW_DEFAULT };
	DAT_EP_HANDLE es;
	DAT_IB_ADDR_HANDLE to_s, from_s;
	DAT_LMR_TRIPLET iov;

	two_open(&t);
	CHK_RET(dat_srq_create(t.b.n.ia, t.b.n.pz, &attr, &t.b.srq), DAT_SUCCESS);
	es = ud_ep_with(&t.b, t.b.srq, MTU, DAT_COMPLETION_DEFAULT_FLAG);
	ud_pair(&t.a, t.ea, &t.b, es, &to_s, &from_s);
	for (int i = 0; i < 2; i++) {
		iov = seg(&t.b, (size_t)i * 256, 256);
		CHK_RET(dat_srq_post_recv(t.b.srq, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 50 + i }),
			DAT_SUCCESS);
	}
	fill(t.a.buf, 64, 3);
	send_ud_wait(&t.a, t.ea, &to_s, 0, 64, 1);
	send_ud_wait(&t.a, t.ea, &to_s, 0, 32, 2);
	recv_check(&t.b, es, 50, 0, t.a.buf, 64);
	recv_check(&t.b, es, 51, 256, t.a.buf, 32);
	CHK_RET(dat_ep_free(es), DAT_SUCCESS);
	two_close(&t);
}

/* Several segments (one of them empty) gathered into one datagram; a
 * zero-length datagram is the GRH alone. */
Test(mlx5sim_ud, gather_and_empty)
{
	struct two t;
	DAT_LMR_TRIPLET iov[3];
	uint8_t want[300];

	two_open(&t);
	post_recvs(&t.b, t.eb, 2, 0, 1024, 1024, 1);
	fill(t.a.buf, 4096, 4);
	iov[0] = seg(&t.a, 100, 100);
	iov[1] = seg(&t.a, 0, 0);
	iov[2] = seg(&t.a, 2000, 200);
	CHK_RET(send_ud(t.ea, 3, iov, &t.ab, 1, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ud_wait(t.a.req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, t.ea, 1, NULL) == DAT_DTO_SUCCESS);
	memcpy(want, t.a.buf + 100, 100);
	memcpy(want + 100, t.a.buf + 2000, 200);
	recv_check(&t.b, t.eb, 1, 0, want, 300);
	CHK_RET(send_ud(t.ea, 0, NULL, &t.ab, 2, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ud_wait(t.a.req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, t.ea, 2, NULL) == DAT_DTO_SUCCESS);
	recv_check(&t.b, t.eb, 2, 1024, want, 0);
	two_close(&t);
}

/* SUPPRESS hides a send's completion; UNSIGNALLED too, on an EP made for
 * it; either way the datagram goes. */
Test(mlx5sim_ud, suppressed_and_unsignalled)
{
	struct two t;
	DAT_LMR_TRIPLET iov;
	DAT_EP_HANDLE eu;
	DAT_IB_ADDR_HANDLE au, ua;

	two_open(&t);
	eu = ud_ep_with(&t.a, DAT_HANDLE_NULL, MTU, DAT_COMPLETION_UNSIGNALLED_FLAG);
	ud_pair(&t.a, eu, &t.b, t.eb, &au, &ua);
	post_recvs(&t.b, t.eb, 3, 0, 256, 256, 1);
	fill(t.a.buf, 64, 5);
	iov = seg(&t.a, 0, 64);
	CHK_RET(send_ud(t.ea, 1, &iov, &t.ab, 1, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	recv_check(&t.b, t.eb, 1, 0, t.a.buf, 64);
	CHK_RET(send_ud(eu, 1, &iov, &au, 2, DAT_COMPLETION_UNSIGNALLED_FLAG), DAT_SUCCESS);
	recv_check(&t.b, t.eb, 2, 256, t.a.buf, 64);
	/* the unsignalled flag on an ordinary EP still completes */
	CHK_RET(send_ud(t.ea, 1, &iov, &t.ab, 3, DAT_COMPLETION_UNSIGNALLED_FLAG), DAT_SUCCESS);
	CHK(ud_wait(t.a.req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, t.ea, 3, NULL) == DAT_DTO_SUCCESS);
	recv_check(&t.b, t.eb, 3, 512, t.a.buf, 64);
	evd_quiet(t.a.req);
	two_close(&t);
}

/* A bad local key completes the send in error and nothing is sent; the
 * EP's later sends flush (its QP is in the send queue error state), its
 * receives go on. */
Test(mlx5sim_ud, bad_local_key)
{
	struct two t;
	DAT_LMR_TRIPLET iov;

	two_open(&t);
	post_recvs(&t.b, t.eb, 1, 0, 0, 256, 1);
	post_recvs(&t.a, t.ea, 1, 0, 0, 256, 2);
	iov = seg(&t.a, 0, 64);
	iov.lmr_context ^= 0x5a5a00;
	CHK_RET(send_ud(t.ea, 1, &iov, &t.ab, 1, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ud_wait(t.a.req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, t.ea, 1, NULL) ==
	    DAT_DTO_ERR_LOCAL_PROTECTION);
	iov = seg(&t.a, 0, 64);
	CHK_RET(send_ud(t.ea, 1, &iov, &t.ab, 2, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ud_wait(t.a.req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, t.ea, 2, NULL) == DAT_DTO_ERR_FLUSHED);
	evd_quiet(t.b.rcv);
	fill(t.b.buf + 1000, 40, 6);
	send_ud_wait(&t.b, t.eb, &t.ba, 1000, 40, 3);
	recv_check(&t.a, t.ea, 2, 0, t.b.buf + 1000, 40);
	two_close(&t);
}

/* The destination EP freed: the datagram is lost, the send completes, and
 * a new EP there (its QP may take the old number) gets nothing of it. */
Test(mlx5sim_ud, destination_gone)
{
	struct two t;
	DAT_EP_HANDLE en;
	DAT_IB_ADDR_HANDLE an, na;

	two_open(&t);
	CHK_RET(dat_ep_free(t.eb), DAT_SUCCESS);
	fill(t.a.buf, 50, 7);
	send_ud_wait(&t.a, t.ea, &t.ab, 0, 50, 1);
	en = ud_ep(&t.b);
	post_recvs(&t.b, en, 1, 0, 0, 256, 1);
	send_ud_wait(&t.a, t.ea, &t.ab, 0, 50, 2);
	evd_quiet(t.b.rcv);
	/* its own handle works */
	ud_pair(&t.a, t.ea, &t.b, en, &an, &na);
	send_ud_wait(&t.a, t.ea, &an, 0, 50, 3);
	recv_check(&t.b, en, 1, 0, t.a.buf, 50);
	two_close(&t);
}

/* The handles' errors, and the DAT posts a UD EP does not take. */
Test(mlx5sim_ud, handle_errors)
{
	struct two t;
	DAT_EP_HANDLE rc;
	DAT_EP_ATTR a;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r = { 0 };
	DAT_IB_ADDR_HANDLE copy, other;
	DAT_CONN_QUAL port;
	DAT_PSP_HANDLE psp;
	DAT_EVENT ev;
	uint64_t cm;

	two_open(&t);
	rc_ep_attr(&a, 4096, 4, 4, 1);
	CHK_RET(dat_ep_create(t.a.n.ia, t.a.n.pz, t.a.rcv, t.a.req, t.a.n.conn_evd, &a, &rc),
		DAT_SUCCESS);
	/* a CM handle kept from an exchange */
	CHK_RET(dat_psp_create_any(t.b.n.ia, &port, t.b.n.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		DAT_SUCCESS);
	ud_connect(t.ea, port, 0);
	ud_accept(&t.b, &t.eb, 1);
	CHK(wait_ev(t.a.n.conn_evd, 10 * SEC, &ev) ==
	    (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED);
	cm = ext(&ev)->context.as_64;
	other = ext(&ev)->remote_ah;
	CHK(wait_ev(t.b.n.conn_evd, 10 * SEC, &ev) ==
	    (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED);
	CHK_RET(dat_ib_ud_cm_free(t.eb, ext(&ev)->context), DAT_SUCCESS);
	CHK_RET(dat_psp_free(psp), DAT_SUCCESS);
	/* cm_free: on another EP, on an RC EP, then twice */
	CHK_RET(dat_ib_ud_cm_free(t.eb, (DAT_CONTEXT){ .as_64 = cm }),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHK_RET(dat_ib_ud_cm_free(rc, (DAT_CONTEXT){ .as_64 = cm }),
		ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHK_RET(dat_ib_ud_cm_free(t.ea, (DAT_CONTEXT){ .as_64 = cm }), DAT_SUCCESS);
	CHK_RET(dat_ib_ud_cm_free(t.ea, (DAT_CONTEXT){ .as_64 = cm }),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	/* ah_free: an RC EP, twice, garbage */
	copy = other;
	CHK_RET(dat_ib_ud_ah_free(rc, &copy), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHK_RET(dat_ib_ud_ah_free(t.ea, &copy), DAT_SUCCESS);
	CHK_RET(dat_ib_ud_ah_free(t.ea, &copy), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	copy.ah = (struct ibv_ah *)(uintptr_t)0x123456789abcull;
	CHK_RET(dat_ib_ud_ah_free(t.ea, &copy), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	iov = seg(&t.a, 0, 8);
	CHK_RET(send_ud(t.ea, 1, &iov, &copy, 1, DAT_COMPLETION_DEFAULT_FLAG),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4));
	/* the first exchange's handle is still good */
	post_recvs(&t.b, t.eb, 1, 0, 0, 256, 1);
	fill(t.a.buf, 8, 8);
	send_ud_wait(&t.a, t.ea, &t.ab, 0, 8, 2);
	recv_check(&t.b, t.eb, 1, 0, t.a.buf, 8);
	/* UD sends on an RC EP; RC posts on a UD EP (never connected) */
	CHK_RET(send_ud(rc, 1, &iov, &t.ab, 3, DAT_COMPLETION_DEFAULT_FLAG),
		ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHK(DAT_GET_TYPE(dat_ep_post_send(t.ea, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 4 },
					  DAT_COMPLETION_DEFAULT_FLAG)) == DAT_INVALID_STATE);
	CHK(DAT_GET_TYPE(dat_ep_post_rdma_write(t.ea, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 5 }, &r,
						DAT_COMPLETION_DEFAULT_FLAG)) ==
	    DAT_INVALID_STATE);
	evd_quiet(t.a.req);
	CHK_RET(dat_ep_free(rc), DAT_SUCCESS);
	two_close(&t);
}
