/*
 * Unreliable datagrams on the tcp device, through libdat2 and a dat.conf
 * with "tcp lo" lines (DAT_IB_SERVICE_TYPE_UD EPs, the IB extension
 * calls): the address exchange of dat_ep_connect/dat_cr_accept and its
 * events, datagrams both ways between two processes with the payload at
 * offset 40 of the receive and its length + 40, several EPs and several
 * exchanges on one EP, order, the largest datagram and one past it, a
 * receive too small, datagrams with no receive posted (dropped and
 * counted), more than the socket holds (the kernel's drops counted too),
 * forged and stale ones, an SRQ, bad local keys, freeing address and CM
 * handles, and freeing an EP with receives posted.
 *
 * The drop counts are read from the device's ZDAPL_TCP_DEBUG=1 lines,
 * which these tests send to a file (log_start).
 */
#include <dirent.h>
#include <endian.h>
#include <stdlib.h>

#include "dat_peer.h"
#include "ud_peer.h"
#include "hw/tcp/zd_tcp_ud_wire.h"

static const struct peer_dev tcp_thread = { .ia = "zdapl-tcp-lo-thread" };
static const struct peer_dev tcp_manual = { .ia = "zdapl-tcp-lo-manual" };

#define UD_MAX ZD_TCP_UD_MAX_PAYLOAD     /* the device's max_ud_payload */

/* A UD EP of @p (on @srq unless NULL) for datagrams up to @max bytes. */
static DAT_EP_HANDLE ud_ep_max(struct peer *p, DAT_SRQ_HANDLE srq, DAT_VLEN max)
{
	DAT_EP_ATTR a;
	DAT_EP_HANDLE ep;

	rc_ep_attr(&a, max, 32, 32, 4);
	a.service_type = (DAT_SERVICE_TYPE)DAT_IB_SERVICE_TYPE_UD;
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
	return ud_ep_max(p, DAT_HANDLE_NULL, 4096);
}

/* Two peers of one process on @dev (two IAs). */
static void pair_open(struct peer *a, struct peer *b, const struct peer_dev *dev)
{
	peer_open(a, dev, 0, DAT_MEM_PRIV_ALL_FLAG);
	peer_open(b, dev, 0, DAT_MEM_PRIV_ALL_FLAG);
}

static void pair_close(struct peer *a, struct peer *b)
{
	peer_close(a);
	peer_close(b);
}

/* ---- datagrams ---- */

/* The next completion of @evd, a receive failing its local checks or
 * flushed, with @cookie: its status.  As every receive completion of a
 * UD EP under OFED, a DAT_IB_DTO_EVENT (DAT_IB_DTO_RECV_UD) in error. */
static int recv_fail_status(DAT_EVD_HANDLE evd, uint64_t cookie)
{
	DAT_EVENT ev;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

	CHK(wait_ev(evd, 10 * SEC, &ev) == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	CHK(d->operation == (DAT_DTOS)DAT_IB_DTO_RECV_UD);
	CHK(ext(&ev)->type == DAT_IB_UD_RECV && ext(&ev)->status == DAT_IB_OP_ERR);
	CHK(d->user_cookie.as_64 == cookie);
	CHK(d->status != DAT_DTO_SUCCESS && d->transfered_length == 0);
	return d->status;
}

/* A receive flushed when its EP went away (or broke). */
static void flushed(DAT_EVD_HANDLE evd, uint64_t cookie)
{
	CHK(recv_fail_status(evd, cookie) == DAT_DTO_ERR_FLUSHED);
}

/* Nothing on @evd right now (and a poll that drives manual progress). */
static void evd_empty(DAT_EVD_HANDLE evd)
{
	DAT_EVENT ev;

	CHK(DAT_GET_TYPE(dat_evd_dequeue(evd, &ev)) == DAT_QUEUE_EMPTY);
}

/* ---- the device's debug lines ---- */

static int log_fd = -1, saved_stderr = -1;

/* From here on the device logs each dropped datagram into a file. */
static void log_start(void)
{
	char name[] = "/tmp/zd_ud_logXXXXXX";

	setenv("ZDAPL_TCP_DEBUG", "1", 1);
	log_fd = mkstemp(name);
	CHK(log_fd >= 0);
	unlink(name);
	fflush(stderr);
	saved_stderr = dup(2);
	CHK(saved_stderr >= 0 && dup2(log_fd, 2) == 2);
}

static void log_stop(void)
{
	fflush(stderr);
	dup2(saved_stderr, 2);
	close(saved_stderr);
	close(log_fd);
}

/* Lines of the log so far that contain @what. */
static int log_count(const char *what)
{
	static char text[1 << 16];
	ssize_t n = pread(log_fd, text, sizeof(text) - 1, 0);
	int count = 0;

	CHK(n >= 0);
	text[n] = 0;
	for (char *s = text; (s = strstr(s, what)) != NULL; s += strlen(what))
		count++;
	return count;
}

/* Polls @evd, which must stay empty (that also drives progress=manual),
 * until the log has @n lines with @what; 5 s at most. */
static void log_wait(DAT_EVD_HANDLE evd, const char *what, int n)
{
	uint64_t end = now_ms() + 5000;

	while (log_count(what) < n) {
		CHK(now_ms() < end);
		evd_empty(evd);
		usleep(1000);
	}
	CHK(log_count(what) == n);
}

/* ---- this process's UDP sockets, to reach a QP's without its blob ---- */

#define MAX_PORTS 16

static int udp_ports(uint16_t *ports)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	CHK(d);
	while ((e = readdir(d)) != NULL && n < MAX_PORTS) {
		int fd = atoi(e->d_name), type = 0;
		socklen_t tl = sizeof(type);
		struct sockaddr_in sa;
		socklen_t sl = sizeof(sa);

		if (e->d_name[0] == '.' ||
		    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_DGRAM ||
		    getsockname(fd, (struct sockaddr *)&sa, &sl) != 0 || sa.sin_family != AF_INET)
			continue;
		ports[n++] = ntohs(sa.sin_port);
	}
	closedir(d);
	return n;
}

/* The UD EP made by @make: its socket's port is the one that appeared. */
static DAT_EP_HANDLE ud_ep_port(struct peer *p, DAT_SRQ_HANDLE srq, uint16_t *port)
{
	uint16_t before[MAX_PORTS], after[MAX_PORTS];
	int nb = udp_ports(before), na;
	DAT_EP_HANDLE ep = ud_ep_max(p, srq, 4096);

	na = udp_ports(after);
	*port = 0;
	for (int i = 0; i < na; i++) {
		int seen = 0;

		for (int j = 0; j < nb; j++)
			seen |= after[i] == before[j];
		if (!seen) {
			CHK(*port == 0);
			*port = after[i];
		}
	}
	CHK(*port != 0);
	return ep;
}

/* One datagram of @len bytes from a socket of our own to 127.0.0.1:@port. */
static void raw_datagram(uint16_t port, const void *buf, size_t len)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	CHK(fd >= 0);
	loopback(&sa);
	sa.sin_port = htons(port);
	CHK(sendto(fd, buf, len, 0, (struct sockaddr *)&sa, sizeof(sa)) == (ssize_t)len);
	close(fd);
}

/* ---- two processes: the exchange, several EPs, data both ways ----
 * The server has UD EPs s0 and s1 behind one PSP; the client's one EP
 * exchanges addresses with it three times (tags 0, 1, 0: the acceptor
 * picks s[tag]), keeps one address handle per server EP and frees the
 * duplicate, then sends s0 four datagrams (two suppressed) and s1 one of
 * two segments; the server checks them in order and answers through the
 * address handle of its passive event. */

#define S0_RECVS 4
static const uint32_t s0_len[S0_RECVS] = { 100, 1, 0, 960 };

/* Server receives: s0's are 2 segments, the first inside the GRH space
 * (24 bytes at i * 2048, then 1000 at i * 2048 + 1024), s1's one. */
static void server_recvs(struct peer *p, DAT_EP_HANDLE s0, DAT_EP_HANDLE s1)
{
	for (int i = 0; i < S0_RECVS + 1; i++) {
		DAT_LMR_TRIPLET iov[2] = { seg(p, (size_t)i * 2048, 24),
					   seg(p, (size_t)i * 2048 + 1024, 1000) };

		post_recv(s0, 2, iov, 100 + (uint64_t)i);
	}
	post_recvs(p, s1, 2, 20000, 2048, GRH + 1000, 200);
}

static int c_exchange(int fd, void *arg)
{
	const struct peer_dev *dev = arg;
	DAT_IB_ADDR_HANDLE ah[2];
	int have[2] = { 0, 0 };
	DAT_LMR_TRIPLET iov[2];
	DAT_CONN_QUAL port;
	struct peer p;
	DAT_EP_HANDLE c0;
	DAT_COUNT got;

	peer_open(&p, dev, 0, DAT_MEM_PRIV_ALL_FLAG);
	p.fd = fd;
	c0 = ud_ep(&p);
	post_recvs(&p, c0, 2, 40000, 2048, 600, 7);
	port = msg_recv(fd, 10000);
	ud_connect(c0, port, 0);
	ud_connect(c0, port, 1);
	ud_connect(c0, port, 0);
	for (int i = 0; i < 3; i++) {
		struct ud_est e = ud_established(&p);

		CHK(e.active && e.ep == c0 && e.tag < 2);
		if (have[e.tag]) {
			/* the same remote QP again: a handle of its own */
			CHK(e.ah.qpn == ah[e.tag].qpn && e.ah.ah != ah[e.tag].ah);
			CHK_RET(dat_ib_ud_ah_free(c0, &e.ah), DAT_SUCCESS);
		} else {
			ah[e.tag] = e.ah;
			have[e.tag] = 1;
		}
		CHK_RET(dat_ib_ud_cm_free(c0, (DAT_CONTEXT){ .as_64 = e.cm }), DAT_SUCCESS);
	}
	CHK(have[0] && have[1] && ah[0].qpn != ah[1].qpn);
	/* A UD EP is never connected: the RC posts stop in core. */
	iov[0] = seg(&p, 0, 8);
	CHK(DAT_GET_TYPE(dat_ep_post_send(c0, 1, iov, (DAT_DTO_COOKIE){ .as_64 = 1 },
					  DAT_COMPLETION_DEFAULT_FLAG)) == DAT_INVALID_STATE);

	CHK(msg_recv(fd, 10000) == 1);   /* the server's receives are posted */
	for (int i = 0; i < S0_RECVS; i++) {
		fill(p.buf + (size_t)i * 1024, s0_len[i], (uint8_t)(i + 1));
		iov[0] = seg(&p, (size_t)i * 1024, s0_len[i]);
		CHK_RET(send_ud(c0, 1, iov, &ah[0], 3 + (uint64_t)i,
				i < 2 ? DAT_COMPLETION_SUPPRESS_FLAG : DAT_COMPLETION_DEFAULT_FLAG),
			DAT_SUCCESS);
	}
	fill(p.buf + 8000, 1000, 77);
	iov[0] = seg(&p, 8000, 300);
	iov[1] = seg(&p, 8300, 700);
	CHK_RET(send_ud(c0, 2, iov, &ah[1], 9, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	/* the suppressed ones complete nothing; the rest in posting order */
	CHK(ud_wait(p.req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, c0, 5, &got) == DAT_DTO_SUCCESS);
	CHK(got == 0);
	CHK(ud_wait(p.req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, c0, 6, &got) == DAT_DTO_SUCCESS);
	CHK(got == 960);
	CHK(ud_wait(p.req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, c0, 9, &got) == DAT_DTO_SUCCESS);
	CHK(got == 1000);
	msg_send(fd, 2);

	/* the server's answer: 500 bytes */
	{
		uint8_t want[500];

		fill(want, sizeof(want), 33);
		recv_check(&p, c0, 7, 40000, want, sizeof(want));
	}
	CHK_RET(dat_ib_ud_ah_free(c0, &ah[0]), DAT_SUCCESS);
	CHK_RET(dat_ib_ud_ah_free(c0, &ah[1]), DAT_SUCCESS);
	/* freed with a receive still posted (cookie 8) */
	CHK_RET(dat_ep_free(c0), DAT_SUCCESS);
	flushed(p.rcv, 8);
	return client_done(&p);
}

static void exchange(const struct peer_dev *dev)
{
	DAT_EP_HANDLE s[2];
	DAT_IB_ADDR_HANDLE back;
	int per_ep[2] = { 0, 0 }, have_back = 0;
	uint32_t tags = 0;
	uint8_t want[1000];
	struct peer p;
	int fd;
	pid_t pid = spawn(c_exchange, (void *)dev, &fd);

	peer_open(&p, dev, 0, DAT_MEM_PRIV_ALL_FLAG);
	p.fd = fd;
	p.pid = pid;
	s[0] = ud_ep(&p);
	s[1] = ud_ep(&p);
	server_recvs(&p, s[0], s[1]);
	server_listen(&p, fd);
	for (int i = 0; i < 3; i++)
		tags += ud_accept(&p, s, 2);
	CHK(tags == 1);
	for (int i = 0; i < 3; i++) {
		struct ud_est e = ud_established(&p);

		CHK(!e.active && (e.ep == s[0] || e.ep == s[1]));
		per_ep[e.ep == s[1]]++;
		if (e.ep == s[0] && !have_back) {
			back = e.ah;
			have_back = 1;
		} else {
			CHK_RET(dat_ib_ud_ah_free(e.ep, &e.ah), DAT_SUCCESS);
		}
		CHK_RET(dat_ib_ud_cm_free(e.ep, (DAT_CONTEXT){ .as_64 = e.cm }), DAT_SUCCESS);
	}
	CHK(per_ep[0] == 2 && per_ep[1] == 1);
	msg_send(fd, 1);

	/* s0: cookies in posting order, each payload at offset 40 (inside
	 * the second segment, 16 bytes in); s1's whenever its QP got to it */
	for (int i = 0, n0 = 0, n1 = 0; i < S0_RECVS + 1; i++) {
		DAT_EVENT ev;
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

		CHK(wait_ev(p.rcv, 10 * SEC, &ev) == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
		CHK(d->operation == (DAT_DTOS)DAT_IB_DTO_RECV_UD && d->status == DAT_DTO_SUCCESS);
		if (d->ep_handle == s[1]) {
			CHK(n1++ == 0 && d->user_cookie.as_64 == 200);
			CHK(d->transfered_length == 1000 + GRH);
			fill(want, 1000, 77);
			CHK(memcmp(p.buf + 20000 + GRH, want, 1000) == 0);
			continue;
		}
		CHK(d->ep_handle == s[0] && d->user_cookie.as_64 == 100 + (uint64_t)n0);
		CHK(d->transfered_length == s0_len[n0] + GRH);
		fill(want, s0_len[n0], (uint8_t)(n0 + 1));
		CHK(memcmp(p.buf + (size_t)n0 * 2048 + 1024 + (GRH - 24), want, s0_len[n0]) == 0);
		n0++;
	}
	CHK(msg_recv(fd, 10000) == 2);

	/* the answer, through the passive side's handle */
	fill(p.buf + 30000, 500, 33);
	send_ud_wait(&p, s[0], &back, 30000, 500, 11);
	CHK_RET(dat_ib_ud_ah_free(s[0], &back), DAT_SUCCESS);
	/* freed with receives posted: s0's cookie 104, s1's 201 */
	CHK_RET(dat_ep_free(s[0]), DAT_SUCCESS);
	flushed(p.rcv, 104);
	CHK_RET(dat_ep_free(s[1]), DAT_SUCCESS);
	flushed(p.rcv, 201);
	server_done(&p);
}

Test(tcp_ud, exchange_thread, .timeout = 60)
{
	exchange(&tcp_thread);
}

Test(tcp_ud, exchange_manual, .timeout = 60)
{
	exchange(&tcp_manual);
}

/* ---- handle errors (core's checks, on this device's handles) ---- */

Test(tcp_ud, handle_errors, .timeout = 60)
{
	struct peer a, b;
	DAT_EP_HANDLE ea, eb, eb2, rc;
	DAT_IB_ADDR_HANDLE ab, ba, copy;
	DAT_LMR_TRIPLET iov;
	DAT_CONN_QUAL port;
	DAT_PSP_HANDLE psp;
	struct ud_est e;

	pair_open(&a, &b, &tcp_thread);
	ea = ud_ep(&a);
	eb = ud_ep(&b);
	eb2 = ud_ep(&b);
	peer_ep(&b, &rc, 0);
	CHK_RET(dat_psp_create_any(b.n.ia, &port, b.n.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		DAT_SUCCESS);
	ud_connect(ea, port, 0);
	ud_accept(&b, &eb, 1);
	e = ud_established(&a);
	ab = e.ah;
	/* the CM handle: only its own EP frees it, once */
	CHK(DAT_GET_TYPE(dat_ib_ud_cm_free(rc, (DAT_CONTEXT){ .as_64 = e.cm })) ==
	    DAT_INVALID_HANDLE);
	CHK_RET(dat_ib_ud_cm_free(ea, (DAT_CONTEXT){ .as_64 = e.cm }), DAT_SUCCESS);
	CHK(DAT_GET_TYPE(dat_ib_ud_cm_free(ea, (DAT_CONTEXT){ .as_64 = e.cm })) ==
	    DAT_INVALID_PARAMETER);
	e = ud_established(&b);
	ba = e.ah;
	CHK(DAT_GET_TYPE(dat_ib_ud_cm_free(eb2, (DAT_CONTEXT){ .as_64 = e.cm })) ==
	    DAT_INVALID_PARAMETER);
	CHK(DAT_GET_TYPE(dat_ib_ud_cm_free(eb, (DAT_CONTEXT){ .as_64 = 0 })) ==
	    DAT_INVALID_PARAMETER);
	CHK_RET(dat_ib_ud_cm_free(eb, (DAT_CONTEXT){ .as_64 = e.cm }), DAT_SUCCESS);

	/* the address handle works, then is freed: sends through it (or any
	 * copy of it) are refused, a second free too */
	post_recvs(&b, eb, 1, 0, 0, 200, 1);
	fill(a.buf, 100, 5);
	send_ud_wait(&a, ea, &ab, 0, 100, 2);
	recv_check(&b, eb, 1, 0, a.buf, 100);
	copy = ab;
	iov = seg(&a, 0, 10);
	CHK(DAT_GET_TYPE(dat_ib_ud_ah_free(rc, &ab)) == DAT_INVALID_HANDLE);
	CHK(DAT_GET_TYPE(dat_ib_ud_ah_free(ea, NULL)) == DAT_INVALID_PARAMETER);
	CHK_RET(dat_ib_ud_ah_free(ea, &ab), DAT_SUCCESS);
	CHK(DAT_GET_TYPE(send_ud(ea, 1, &iov, &copy, 3, DAT_COMPLETION_DEFAULT_FLAG)) ==
	    DAT_INVALID_PARAMETER);
	CHK(DAT_GET_TYPE(dat_ib_ud_ah_free(ea, &copy)) == DAT_INVALID_PARAMETER);
	/* a UD send needs a UD EP, a UD EP no RC DTOs */
	CHK(DAT_GET_TYPE(send_ud(rc, 1, &iov, &ba, 4, DAT_COMPLETION_DEFAULT_FLAG)) ==
	    DAT_INVALID_HANDLE);
	CHK(DAT_GET_TYPE(dat_ep_post_send(ea, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 5 },
					  DAT_COMPLETION_DEFAULT_FLAG)) == DAT_INVALID_STATE);
	{
		DAT_RMR_TRIPLET r = { .rmr_context = a.rkey,
				      .virtual_address = (DAT_VADDR)(uintptr_t)a.buf,
				      .segment_length = 10 };

		CHK(DAT_GET_TYPE(dat_ep_post_rdma_write(ea, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 6 },
							&r, DAT_COMPLETION_DEFAULT_FLAG)) ==
		    DAT_INVALID_STATE);
	}
	evd_empty(a.req);
	evd_empty(b.rcv);
	/* the other direction still works */
	post_recvs(&a, ea, 1, 1000, 0, 200, 7);
	fill(b.buf + 5000, 50, 9);
	send_ud_wait(&b, eb, &ba, 5000, 50, 8);
	recv_check(&a, ea, 7, 1000, b.buf + 5000, 50);
	CHK_RET(dat_ib_ud_ah_free(eb, &ba), DAT_SUCCESS);
	CHK_RET(dat_psp_free(psp), DAT_SUCCESS);
	pair_close(&a, &b);
}

/* ---- exchanges that fail: reject, the wrong kind of EP, nobody there ---- */

/* The next event on @p's connect EVD: a failed UD exchange of @ep, @type
 * (REJECT or ERROR) with extension type @xtype. */
static const DAT_CONNECTION_EVENT_DATA *ud_failed(struct peer *p, DAT_EP_HANDLE ep,
						   DAT_IB_EVENT_NUMBER type,
						   DAT_IB_EXT_TYPE xtype, DAT_EVENT *ev)
{
	CHK(wait_ev(p->n.conn_evd, 10 * SEC, ev) == (DAT_EVENT_NUMBER)type);
	CHK(ext(ev)->type == xtype && ext(ev)->status == DAT_IB_OP_ERR);
	CHK(ev->event_data.connect_event_data.ep_handle == ep);
	return &ev->event_data.connect_event_data;
}

Test(tcp_ud, exchange_failures, .timeout = 60)
{
	struct peer a, b;
	DAT_EP_HANDLE ea, eb, rc_a, rc_b;
	DAT_CONN_QUAL port, gone;
	DAT_PSP_HANDLE psp, psp2;
	const DAT_CONNECTION_EVENT_DATA *c;
	DAT_CR_HANDLE cr;
	DAT_EVENT ev;
	struct sockaddr_in sa;
	uint32_t tag = htonl(7), why = htonl(0xbad);

	pair_open(&a, &b, &tcp_thread);
	ea = ud_ep(&a);
	eb = ud_ep(&b);
	peer_ep(&a, &rc_a, 0);
	peer_ep(&b, &rc_b, 0);
	CHK_RET(dat_psp_create_any(b.n.ia, &port, b.n.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		DAT_SUCCESS);

	/* A UD request is answered by a UD EP only; rejected, the requester
	 * hears DAT_IB_UD_CONNECTION_REJECT_EVENT with the reject's data. */
	CHK_RET(dat_ep_connect(ea, loopback(&sa), port, 10 * SEC, 4, &tag, DAT_QOS_BEST_EFFORT,
			       DAT_CONNECT_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(wait_ev(b.n.cr_evd, 10 * SEC, &ev) ==
	    (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_REQUEST_EVENT);
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	CHK_RET(dat_cr_accept(cr, rc_b, 0, NULL), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHK_RET(dat_cr_reject(cr, 4, &why), DAT_SUCCESS);
	c = ud_failed(&a, ea, DAT_IB_UD_CONNECTION_REJECT_EVENT, DAT_IB_UD_CONNECT_REJECT, &ev);
	CHK(c->private_data_size == 4 && memcmp(c->private_data, &why, 4) == 0);

	/* An RC request is not answered by a UD EP. */
	CHK_RET(connect_loopback(rc_a, port, 10 * SEC), DAT_SUCCESS);
	CHK(wait_ev(b.n.cr_evd, 10 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	CHK_RET(dat_cr_accept(cr, eb, 0, NULL), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHK_RET(dat_cr_reject(cr, 0, NULL), DAT_SUCCESS);
	CHK(wait_ev(a.n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_PEER_REJECTED);

	/* Nobody listens: DAT_IB_UD_CONNECTION_ERROR_EVENT once the
	 * consumer's timeout ends the retries; the EP's state never moved. */
	CHK_RET(dat_psp_create_any(b.n.ia, &gone, b.n.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp2),
		DAT_SUCCESS);
	CHK_RET(dat_psp_free(psp2), DAT_SUCCESS);
	CHK_RET(dat_ep_connect(ea, loopback(&sa), gone, SEC / 5, 4, &tag, DAT_QOS_BEST_EFFORT,
			       DAT_CONNECT_DEFAULT_FLAG),
		DAT_SUCCESS);
	ud_failed(&a, ea, DAT_IB_UD_CONNECTION_ERROR_EVENT, DAT_IB_UD_CONNECT_ERROR, &ev);
	{
		DAT_EP_STATE st;

		CHK_RET(dat_ep_get_status(ea, &st, NULL, NULL), DAT_SUCCESS);
		CHK(st == DAT_EP_STATE_UNCONNECTED);
	}

	/* The EP still exchanges and carries datagrams afterwards. */
	{
		DAT_IB_ADDR_HANDLE ab, ba;

		ud_pair(&a, ea, &b, eb, &ab, &ba);
		post_recvs(&b, eb, 1, 0, 0, 200, 1);
		fill(a.buf, 64, 3);
		send_ud_wait(&a, ea, &ab, 0, 64, 2);
		recv_check(&b, eb, 1, 0, a.buf, 64);
	}
	CHK_RET(dat_psp_free(psp), DAT_SUCCESS);
	pair_close(&a, &b);
}

/* ---- the largest datagram, and one byte more ---- */

Test(tcp_ud, max_payload, .timeout = 60)
{
	struct peer a, b;
	DAT_EP_HANDLE ea, eb, too_big;
	DAT_IB_ADDR_HANDLE ab, ba;
	DAT_LMR_TRIPLET iov;
	DAT_EP_ATTR attr;

	CHK(BUF >= UD_MAX + 1 && BUF >= GRH + UD_MAX);
	pair_open(&a, &b, &tcp_thread);
	/* an EP for datagrams past the limit is refused */
	rc_ep_attr(&attr, (DAT_VLEN)UD_MAX + 1, 4, 4, 1);
	attr.service_type = (DAT_SERVICE_TYPE)DAT_IB_SERVICE_TYPE_UD;
	CHK(DAT_GET_TYPE(dat_ep_create(a.n.ia, a.n.pz, a.rcv, a.req, a.n.conn_evd, &attr,
				       &too_big)) == DAT_INVALID_PARAMETER);
	ea = ud_ep_max(&a, DAT_HANDLE_NULL, UD_MAX);
	eb = ud_ep_max(&b, DAT_HANDLE_NULL, UD_MAX);
	ud_pair(&a, ea, &b, eb, &ab, &ba);
	post_recvs(&b, eb, 1, 0, 0, GRH + UD_MAX, 1);
	fill(a.buf, UD_MAX + 1, 3);
	send_ud_wait(&a, ea, &ab, 0, UD_MAX, 2);
	recv_check(&b, eb, 1, 0, a.buf, UD_MAX);
	iov = seg(&a, 0, UD_MAX + 1);
	CHK(DAT_GET_TYPE(send_ud(ea, 1, &iov, &ab, 3, DAT_COMPLETION_DEFAULT_FLAG)) ==
	    DAT_LENGTH_ERROR);
	evd_empty(a.req);
	pair_close(&a, &b);
}

/* ---- a receive too small: that receive fails, the next one works ---- */

Test(tcp_ud, recv_too_small, .timeout = 60)
{
	struct peer a, b;
	DAT_EP_HANDLE ea, eb;
	DAT_IB_ADDR_HANDLE ab, ba;
	DAT_COUNT got;

	pair_open(&a, &b, &tcp_manual);
	ea = ud_ep(&a);
	eb = ud_ep(&b);
	ud_pair(&a, ea, &b, eb, &ab, &ba);
	post_recvs(&b, eb, 1, 0, 0, GRH + 10, 1);     /* 20 bytes will not fit */
	post_recvs(&b, eb, 1, 1000, 0, GRH - 10, 2);  /* not even the GRH space */
	post_recvs(&b, eb, 1, 2000, 0, GRH + 100, 3);
	fill(a.buf, 100, 8);
	send_ud_wait(&a, ea, &ab, 0, 20, 4);
	send_ud_wait(&a, ea, &ab, 0, 0, 5);
	send_ud_wait(&a, ea, &ab, 0, 100, 6);
	CHK(ud_wait(b.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_UD, eb, 1, &got) ==
	    DAT_DTO_ERR_LOCAL_LENGTH);
	CHK(got == 0);
	CHK(ud_wait(b.rcv, (DAT_DTOS)DAT_IB_DTO_RECV_UD, eb, 2, NULL) == DAT_DTO_ERR_LOCAL_LENGTH);
	recv_check(&b, eb, 3, 2000, a.buf, 100);
	pair_close(&a, &b);
}

/* ---- no receive posted: dropped and counted, the sender completes ---- */

static void no_recv(const struct peer_dev *dev)
{
	struct peer a, b;
	DAT_EP_HANDLE ea, eb;
	DAT_IB_ADDR_HANDLE ab, ba;

	log_start();
	pair_open(&a, &b, dev);
	ea = ud_ep(&a);
	eb = ud_ep(&b);
	ud_pair(&a, ea, &b, eb, &ab, &ba);
	for (int i = 0; i < 3; i++)
		send_ud_wait(&a, ea, &ab, 0, 64, 1 + (uint64_t)i);
	log_wait(b.rcv, "drops a datagram: no receive posted", 3);
	/* the QP goes on */
	post_recvs(&b, eb, 1, 0, 0, 200, 9);
	fill(a.buf + 100, 64, 4);
	send_ud_wait(&a, ea, &ab, 100, 64, 4);
	recv_check(&b, eb, 9, 0, a.buf + 100, 64);
	CHK(log_count("drops a datagram") == 3);
	log_stop();
	pair_close(&a, &b);
}

Test(tcp_ud, no_recv_thread, .timeout = 60)
{
	no_recv(&tcp_thread);
}

Test(tcp_ud, no_recv_manual, .timeout = 60)
{
	no_recv(&tcp_manual);
}

/* ---- more than the socket holds while nobody reads (progress=manual,
 * the receiver not polling): the kernel drops the rest, and its count
 * reaches ours when the receiver polls again ---- */

Test(tcp_ud, socket_overflow_counted, .timeout = 60)
{
	const char *room = "no room in the socket's receive buffer (";
	static char text[1 << 16];
	struct peer a, b;
	DAT_EP_HANDLE ea, eb;
	DAT_IB_ADDR_HANDLE ab, ba;
	DAT_LMR_TRIPLET iov;
	int sent, no_recv = -1, overflow = 0, refused;
	uint64_t end;

	log_start();
	pair_open(&a, &b, &tcp_manual);
	ea = ud_ep_max(&a, DAT_HANDLE_NULL, UD_MAX);
	eb = ud_ep(&b);
	ud_pair(&a, ea, &b, eb, &ab, &ba);
	/* 400 datagrams of 64 KiB: 26 MB, several times what net.core.rmem_max
	 * lets a socket hold */
	iov = seg(&a, 0, UD_MAX);
	for (sent = 0; sent < 400; sent++)
		CHK_RET(send_ud(ea, 1, &iov, &ab, (uint64_t)sent, DAT_COMPLETION_SUPPRESS_FLAG),
			DAT_SUCCESS);
	evd_empty(a.req);
	/* The receiver reads what the socket held (no receive posted) ... */
	while (log_count("no receive posted") != no_recv) {
		no_recv = log_count("no receive posted");
		usleep(20000);
		evd_empty(b.rcv);
	}
	CHK(no_recv > 0 && no_recv < sent);
	/* ... and the kernel's count of the rest comes with the next datagram
	 * it queues */
	send_ud_wait(&a, ea, &ab, 0, 8, 1000);
	sent++;
	log_wait(b.rcv, "no room in the socket's receive buffer", 1);
	for (end = now_ms() + 5000; log_count("no receive posted") < no_recv + 1; usleep(1000)) {
		CHK(now_ms() < end);
		evd_empty(b.rcv);
	}
	no_recv = log_count("no receive posted");
	{
		ssize_t n = pread(log_fd, text, sizeof(text) - 1, 0);
		const char *p = text;

		text[n > 0 ? n : 0] = 0;
		while ((p = strstr(p, room)) != NULL) {
			overflow = atoi(p + strlen(room));
			p++;
		}
	}
	/* (the sending socket's own buffer, should it ever fill, drops too) */
	refused = log_count("the kernel refused to send it");
	cr_log_info("%d datagrams sent, %d read, %d dropped by the receiving kernel, %d refused"
		    " by the sending one", sent, no_recv, overflow, refused);
	CHK(overflow > 0 && no_recv + overflow + refused == sent);
	log_stop();
	pair_close(&a, &b);
}

/* ---- datagrams not for the QP: dropped, the receive stays posted ---- */

/* A datagram header for QP @qpn with @key and @len payload bytes. */
static struct zd_tcp_ud_hdr forged(uint32_t qpn, uint64_t key, uint32_t len)
{
	struct zd_tcp_ud_hdr h = {
		.magic = htole32(ZD_TCP_UD_MAGIC), .version = ZD_TCP_UD_VERSION,
		.op = ZD_TCP_UD_OP_DATAGRAM, .dst_qpn = htole32(qpn), .len = htole32(len),
		.dst_key = htole64(key),
	};

	return h;
}

/* Forges three datagrams to @port of the QP numbered @qpn: too short,
 * the right number with a wrong key, and a length field that lies. */
static void forge_three(uint16_t port, uint32_t qpn)
{
	uint8_t d[sizeof(struct zd_tcp_ud_hdr) + 16];
	struct zd_tcp_ud_hdr h;

	memset(d, 0x5a, sizeof(d));
	raw_datagram(port, d, 5);
	h = forged(qpn, 0x1234, 16);
	memcpy(d, &h, sizeof(h));
	raw_datagram(port, d, sizeof(d));
	h = forged(qpn, 0x1234, 15);
	memcpy(d, &h, sizeof(h));
	raw_datagram(port, d, sizeof(d));
}

Test(tcp_ud, foreign_datagrams, .timeout = 60)
{
	struct peer a, b;
	DAT_EP_HANDLE ea, eb;
	DAT_IB_ADDR_HANDLE ab, ba;
	uint16_t port;

	log_start();
	pair_open(&a, &b, &tcp_manual);
	ea = ud_ep(&a);
	eb = ud_ep_port(&b, DAT_HANDLE_NULL, &port);
	ud_pair(&a, ea, &b, eb, &ab, &ba);
	post_recvs(&b, eb, 2, 0, 1000, 200, 1);
	forge_three(port, ab.qpn);
	log_wait(b.rcv, "drops a datagram", 3);
	CHK(log_count("shorter than a header") == 1);
	CHK(log_count("for another QP") == 1);
	CHK(log_count("length field") == 1);
	/* the first real datagram takes the first receive */
	fill(a.buf, 64, 6);
	send_ud_wait(&a, ea, &ab, 0, 64, 2);
	recv_check(&b, eb, 1, 0, a.buf, 64);
	log_stop();
	pair_close(&a, &b);
}

/* ---- a freed target: the datagram is lost, the sender completes ---- */

Test(tcp_ud, target_freed, .timeout = 60)
{
	struct peer a, b;
	DAT_EP_HANDLE ea, eb, eb2;
	DAT_IB_ADDR_HANDLE ab, ba, ab2, ba2;

	pair_open(&a, &b, &tcp_thread);
	ea = ud_ep(&a);
	eb = ud_ep(&b);
	ud_pair(&a, ea, &b, eb, &ab, &ba);
	post_recvs(&b, eb, 1, 0, 0, 200, 1);
	CHK_RET(dat_ep_free(eb), DAT_SUCCESS);
	flushed(b.rcv, 1);
	fill(a.buf, 200, 1);
	send_ud_wait(&a, ea, &ab, 0, 64, 2);
	/* a new QP of that IA, maybe on the freed one's port: the old
	 * address reaches nothing, the new one works */
	eb2 = ud_ep(&b);
	ud_pair(&a, ea, &b, eb2, &ab2, &ba2);
	CHK(ab2.qpn != ab.qpn);
	post_recvs(&b, eb2, 1, 0, 0, 200, 3);
	send_ud_wait(&a, ea, &ab, 0, 64, 4);
	send_ud_wait(&a, ea, &ab2, 100, 64, 5);
	recv_check(&b, eb2, 3, 0, a.buf + 100, 64);
	evd_empty(b.rcv);
	pair_close(&a, &b);
}

/* ---- an SRQ: datagrams take its buffers in order, foreign ones none;
 * with none posted they are dropped ---- */

Test(tcp_ud, srq, .timeout = 60)
{
	DAT_SRQ_ATTR sa = { .max_recv_dtos = 16, .max_recv_iov = 4,
			    .low_watermark = DAT_SRQ_LW_DEFAULT };
	struct peer a, b;
	DAT_EP_HANDLE ea, eb;
	DAT_IB_ADDR_HANDLE ab, ba;
	DAT_SRQ_HANDLE srq;
	uint16_t port;

	log_start();
	pair_open(&a, &b, &tcp_thread);
	CHK_RET(dat_srq_create(b.n.ia, b.n.pz, &sa, &srq), DAT_SUCCESS);
	ea = ud_ep(&a);
	eb = ud_ep_port(&b, srq, &port);
	ud_pair(&a, ea, &b, eb, &ab, &ba);
	/* none posted yet */
	send_ud_wait(&a, ea, &ab, 0, 64, 1);
	log_wait(b.rcv, "no receive posted", 1);
	for (int i = 0; i < 2; i++) {
		DAT_LMR_TRIPLET iov = seg(&b, (size_t)i * 1000, GRH + 64);

		CHK_RET(dat_srq_post_recv(srq, 1, &iov, (DAT_DTO_COOKIE){ .as_64 = 10 + (uint64_t)i }),
			DAT_SUCCESS);
	}
	forge_three(port, ab.qpn);
	log_wait(b.rcv, "drops a datagram", 4);
	fill(a.buf, 128, 2);
	send_ud_wait(&a, ea, &ab, 0, 64, 2);
	send_ud_wait(&a, ea, &ab, 64, 64, 3);
	recv_check(&b, eb, 10, 0, a.buf, 64);
	recv_check(&b, eb, 11, 1000, a.buf + 64, 64);
	log_stop();
	CHK_RET(dat_ep_free(eb), DAT_SUCCESS);
	CHK_RET(dat_srq_free(srq), DAT_SUCCESS);
	pair_close(&a, &b);
}

/* ---- bad local keys: a send fails alone, a receive breaks the QP ---- */

Test(tcp_ud, bad_lkeys, .timeout = 60)
{
	struct peer a, b;
	DAT_EP_HANDLE ea, eb;
	DAT_IB_ADDR_HANDLE ab, ba;
	DAT_LMR_TRIPLET iov;

	pair_open(&a, &b, &tcp_manual);
	ea = ud_ep(&a);
	eb = ud_ep(&b);
	ud_pair(&a, ea, &b, eb, &ab, &ba);
	post_recvs(&b, eb, 1, 0, 0, 200, 1);
	/* a send with a key that is nobody's: that send fails, alone */
	iov = seg(&a, 0, 64);
	iov.lmr_context ^= 0x5a5a0;
	CHK_RET(send_ud(ea, 1, &iov, &ab, 2, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ud_wait(a.req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, ea, 2, NULL) ==
	    DAT_DTO_ERR_LOCAL_PROTECTION);
	/* ... and one past its region */
	iov = seg(&a, BUF - 10, 64);
	CHK_RET(send_ud(ea, 1, &iov, &ab, 3, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ud_wait(a.req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, ea, 3, NULL) ==
	    DAT_DTO_ERR_LOCAL_PROTECTION);
	fill(a.buf, 64, 7);
	send_ud_wait(&a, ea, &ab, 0, 64, 4);
	recv_check(&b, eb, 1, 0, a.buf, 64);
	/* a receive with a bad key: it fails, and the QP with it (as an HCA
	 * moves a QP to error): later receives and sends complete flushed */
	iov = seg(&b, 0, 200);
	iov.lmr_context ^= 0x5a5a0;
	post_recv(eb, 1, &iov, 5);
	CHK(recv_fail_status(b.rcv, 5) == DAT_DTO_ERR_LOCAL_PROTECTION);
	post_recvs(&b, eb, 1, 0, 0, 200, 6);
	flushed(b.rcv, 6);
	iov = seg(&b, 0, 10);
	CHK_RET(send_ud(eb, 1, &iov, &ba, 7, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ud_wait(b.req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, eb, 7, NULL) == DAT_DTO_ERR_FLUSHED);
	pair_close(&a, &b);
}
