/*
 * A peer that replays what another connection carried (issue 15).  A raw
 * CM peer in this process relays a real client's connection to the server
 * (so it sees both QP blobs, as anything on the path would), then:
 *  - sends a REQ of its own carrying the client's blob, the QP of that
 *    live connection: the server's new EP must not reach the client's QP
 *    (nothing it sends arrives there);
 *  - (tcp) opens data connections to a listening QP (a connection that
 *    does not ride the CM's socket) presenting a token of the live
 *    connection: refused, and the QP still takes its own peer (the right
 *    token) afterwards.
 * Each time the live connection then carries a send each way, in order,
 * as if nothing happened.  On zdapl-shm, zdapl-tcp (lo), zdapl-mlx5sim.
 * (zdapl-tcp's live connection rides the CM's socket: the relay passes
 * the stream on after the RTU.)
 */
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>

#include "hostile.h"
#include "hw/tcp/zd_tcp_wire.h"

TestSuite(hostile_replay, .timeout = 60);

#define MSG 128

/* A frame with its body kept: its type, 0 on EOF, error or timeout. */
static int frame_recv(int fd, uint8_t *buf, size_t *len)
{
	struct zd_cm_hdr h;
	int blen;

	if (recv(fd, buf, sizeof(h), MSG_WAITALL) != (ssize_t)sizeof(h))
		return 0;
	memcpy(&h, buf, sizeof(h));
	blen = zd_cm_hdr_decode(&h);
	if (blen < 0 || (blen && recv(fd, buf + sizeof(h), (size_t)blen, MSG_WAITALL) != blen))
		return 0;
	*len = sizeof(h) + (size_t)blen;
	return h.type;
}

/* The next frame of a type other than MRA. */
static int frame_recv_skip_mra(int fd, uint8_t *buf, size_t *len)
{
	int t;

	while ((t = frame_recv(fd, buf, len)) == ZD_CM_MSG_MRA)
		;
	return t;
}

static void frame_send(int fd, const uint8_t *buf, size_t len)
{
	CHK(send(fd, buf, len, MSG_NOSIGNAL) == (ssize_t)len);
}

/* A REQ for @qual with @req's private data and blob. */
static size_t req_retarget(uint8_t *out, const uint8_t *req, uint64_t qual, const void *blob,
			   size_t blob_len)
{
	struct zd_cm_hdr h;
	const uint8_t *body = req + sizeof(h);

	memcpy(&h, req, sizeof(h));
	CHK(zd_cm_hdr_decode(&h) >= 0);
	if (!blob) {
		blob = body + h.pdata_len;
		blob_len = h.blob_len;
	}
	return zd_cm_frame_encode(out, ZD_CM_MSG_REQ, 0, qual, body, h.pdata_len, blob, blob_len);
}

static const uint8_t *frame_blob(const uint8_t *f, size_t *blob_len)
{
	struct zd_cm_hdr h;

	memcpy(&h, f, sizeof(h));
	CHK(zd_cm_hdr_decode(&h) >= 0);
	*blob_len = h.blob_len;
	return f + sizeof(h) + h.pdata_len;
}

static int listen_on(uint16_t *port)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	CHK(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	loopback(&sa);
	sa.sin_port = 0;
	CHK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 4) == 0);
	CHK(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
	*port = ntohs(sa.sin_port);
	return fd;
}

/* The real client: connects to the port it is told (the relay), then
 * per word: 1 send MSG bytes, 2 receive MSG bytes and check them, 0 end.
 * A receive is always posted beyond the ones asked for: whatever lands
 * there unasked is reported (word 3 answers how many arrived). */
static int c_client(int fd, void *arg)
{
	const struct peer_job *j = arg;
	struct peer p;
	uint32_t w, sent = 0, got = 0;
	DAT_EVENT ev;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	client_init(&p, j->dev, 0, fd);
	for (int i = 0; i < 8; i++) {
		DAT_LMR_TRIPLET iov = seg(&p, 4096 + (size_t)i * MSG, MSG);

		post_recv(p.ep, 1, &iov, 100 + (uint64_t)i);
	}
	p.port = msg_recv(fd, 10000);
	client_connect(&p, p.ep, p.port);
	msg_send(fd, 1);
	while ((w = msg_recv(fd, 30000))) {
		if (w == 1) {
			fill(p.buf, MSG, (uint8_t)(0x10 + sent));
			send_wait(&p, p.ep, 0, MSG, 1000 + sent);
			sent++;
		} else if (w == 2) {
			uint8_t want[MSG];
			DAT_COUNT len;

			CHK(dto_wait(p.rcv, 10 * SEC, 100 + got, &len) == DAT_DTO_SUCCESS && len == MSG);
			fill(want, MSG, (uint8_t)(0x80 + got));
			CHK(memcmp(p.buf + 4096 + (size_t)got * MSG, want, MSG) == 0);
			got++;
		} else if (w == 3) {
			/* Nothing but what the server sent on the live connection. */
			msg_send(fd, wait_ev(p.rcv, 300000, &ev) == 0 ? 0 : 1);
			continue;
		}
		msg_send(fd, 1);
	}
	peer_close(&p);
	return 0;
}

struct relay {
	struct peer s;                  /* the server: its live EP is s.ep */
	DAT_CONN_QUAL qual;             /* the server's PSP */
	int lis;                        /* the relay's listener, the client's target */
	int fd_c, fd_s;                 /* the relayed CM connection's two legs */
	uint8_t req[ZD_CM_FRAME_MAX], rep[ZD_CM_FRAME_MAX];
	size_t req_len, rep_len;
	uint32_t s_sent, c_sent;
	pthread_t pump;                 /* after the RTU: the two legs joined */
};

/* Passes on what either leg brings after the RTU (tcp's data and the CM
 * frames of the stream; the CM's PINGs elsewhere) until one ends. */
static void *relay_pump(void *arg)
{
	struct relay *r = arg;
	struct pollfd p[2] = { { .fd = r->fd_c, .events = POLLIN }, { .fd = r->fd_s, .events = POLLIN } };
	uint8_t buf[65536];

	while (poll(p, 2, -1) > 0) {
		for (int i = 0; i < 2; i++) {
			ssize_t n;

			if (!p[i].revents)
				continue;
			n = recv(p[i].fd, buf, sizeof(buf), 0);
			if (n <= 0 || send(p[1 - i].fd, buf, (size_t)n, MSG_NOSIGNAL) != n) {
				shutdown(r->fd_c, SHUT_RDWR);
				shutdown(r->fd_s, SHUT_RDWR);
				return NULL;
			}
		}
	}
	return NULL;
}

static void accept_cr(struct peer *s, DAT_EP_HANDLE ep)
{
	DAT_EVENT ev;

	CHK(wait_ev(s->n.cr_evd, 10 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, ep, 0, NULL),
		DAT_SUCCESS);
}

/* The client connects through the relay; the server accepts on s.ep. */
static void relay_up(struct relay *r, const struct peer_dev *dev, struct peer_job *j)
{
	uint8_t f[ZD_CM_FRAME_MAX];
	uint16_t port;
	size_t n;

	r->s_sent = r->c_sent = 0;
	server_start(&r->s, dev, 0, c_client, j);
	CHK_RET(dat_psp_create_any(r->s.n.ia, &r->qual, r->s.n.cr_evd, DAT_PSP_CONSUMER_FLAG,
				   &r->s.psp),
		DAT_SUCCESS);
	r->lis = listen_on(&port);
	msg_send(r->s.fd, port);
	r->fd_c = accept(r->lis, NULL, NULL);
	CHK(r->fd_c >= 0);
	CHK(frame_recv(r->fd_c, r->req, &r->req_len) == ZD_CM_MSG_REQ);
	frame_send(r->fd_c, f, zd_cm_frame_encode(f, ZD_CM_MSG_MRA, 0, 0, NULL, 0, NULL, 0));
	r->fd_s = raw_connect((uint16_t)r->qual);
	n = req_retarget(f, r->req, r->qual, NULL, 0);
	frame_send(r->fd_s, f, n);
	accept_cr(&r->s, r->s.ep);
	CHK(frame_recv_skip_mra(r->fd_s, r->rep, &r->rep_len) == ZD_CM_MSG_REP);
	frame_send(r->fd_c, r->rep, r->rep_len);
	CHK(frame_recv(r->fd_c, f, &n) == ZD_CM_MSG_RTU);
	frame_send(r->fd_s, f, n);
	CHK(pthread_create(&r->pump, NULL, relay_pump, r) == 0);
	CHK(wait_ev(r->s.n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(msg_recv(r->s.fd, 10000) == 1);
	for (int i = 0; i < 8; i++) {
		DAT_LMR_TRIPLET iov = seg(&r->s, 4096 + (size_t)i * MSG, MSG);

		post_recv(r->s.ep, 1, &iov, 200 + (uint64_t)i);
	}
}

/* The live connection carries a send each way, in order. */
static void live_round(struct relay *r)
{
	uint8_t want[MSG];
	DAT_COUNT len;

	msg_send(r->s.fd, 1);
	CHK(msg_recv(r->s.fd, 10000) == 1);
	CHK(dto_wait(r->s.rcv, 10 * SEC, 200 + r->c_sent, &len) == DAT_DTO_SUCCESS && len == MSG);
	fill(want, MSG, (uint8_t)(0x10 + r->c_sent));
	CHK(memcmp(r->s.buf + 4096 + (size_t)r->c_sent * MSG, want, MSG) == 0);
	r->c_sent++;
	fill(r->s.buf, MSG, (uint8_t)(0x80 + r->s_sent));
	send_wait(&r->s, r->s.ep, 0, MSG, 300 + r->s_sent);
	msg_send(r->s.fd, 2);
	CHK(msg_recv(r->s.fd, 10000) == 1);
	r->s_sent++;
}

static void relay_down(struct relay *r)
{
	msg_send(r->s.fd, 0);
	CHK(reap(r->s.pid, 20000) == 0);
	shutdown(r->fd_c, SHUT_RDWR);
	shutdown(r->fd_s, SHUT_RDWR);
	pthread_join(r->pump, NULL);
	close(r->fd_c);
	close(r->fd_s);
	close(r->lis);
	peer_close(&r->s);
}

/* A REQ carrying the client's blob: the server's EP for it must not
 * reach the client's QP. */
static void replay_blob_case(const struct peer_dev *dev)
{
	struct peer_job j = { .dev = dev };
	struct relay r;
	uint8_t f[ZD_CM_FRAME_MAX];
	DAT_EP_HANDLE ep2;
	DAT_EVENT ev;
	size_t n, blen;
	const uint8_t *blob;
	int fd, t;

	relay_up(&r, dev, &j);
	live_round(&r);
	peer_ep(&r.s, &ep2, 0);
	fd = raw_connect((uint16_t)r.qual);
	blob = frame_blob(r.req, &blen);
	frame_send(fd, f, req_retarget(f, r.req, r.qual, blob, blen));
	accept_cr(&r.s, ep2);
	t = frame_recv_skip_mra(fd, f, &n);
	if (t == ZD_CM_MSG_REP) {
		/* Given a REP: complete the handshake, as the client would. */
		frame_send(fd, f, zd_cm_frame_encode(f, ZD_CM_MSG_RTU, 0, 0x7e57, NULL, 0, NULL, 0));
	}
	if (wait_ev(r.s.n.conn_evd, 2 * SEC, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED) {
		/* What the server sends there must not reach the client. */
		DAT_LMR_TRIPLET iov = seg(&r.s, 2048, MSG);

		fill(r.s.buf + 2048, MSG, 0xee);
		post_send(ep2, 1, &iov, 77);
		/* It completes (in error) or waits for a peer that never comes. */
		(void)wait_ev(r.s.req, 2 * SEC, &ev);
	}
	msg_send(r.s.fd, 3);
	CHK(msg_recv(r.s.fd, 10000) == 0);  /* nothing unasked at the client */
	CHK(ep_state(r.s.ep) == DAT_EP_STATE_CONNECTED);
	live_round(&r);
	live_round(&r);
	close(fd);
	relay_down(&r);
}

Test(hostile_replay, shm_blob) { replay_blob_case(&shm); }
Test(hostile_replay, tcp_blob) { replay_blob_case(&tcp); }
Test(hostile_replay, mlx5sim_blob) { replay_blob_case(&mlx5sim); }

/* tcp: a QP that listens for its peer's data connection (the server's,
 * given a blob that does not offer to ride the CM's socket, as a
 * progress=manual peer's: the passive side listens) is offered HELLOs
 * carrying the live connection's tokens: each such connection is closed,
 * and the right token is still taken after them. */
static int hello_answer(uint16_t port, uint64_t token)
{
	struct zd_tcp_hdr h;
	int fd = raw_connect(port);

	memset(&h, 0, sizeof(h));
	h.magic = htole32(ZD_TCP_WIRE_MAGIC);
	h.version = ZD_TCP_WIRE_VERSION;
	h.op = ZD_TCP_OP_HELLO;
	h.value = htole64(token);
	CHK(send(fd, &h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h));
	return fd;
}

Test(hostile_replay, tcp_token)
{
	struct peer_job j = { .dev = &tcp };
	struct relay r;
	struct zd_tcp_blob mine = { .magic = htole32(ZD_TCP_BLOB_MAGIC),
				    .version = htole16(ZD_TCP_WIRE_VERSION), .token = 0 };
	struct zd_tcp_blob c_blob, s_blob, e3;
	uint8_t f[ZD_CM_FRAME_MAX];
	struct zd_tcp_hdr h;
	DAT_EP_HANDLE ep3;
	size_t n, blen;
	uint16_t port;
	int fd, lis, bad;

	relay_up(&r, &tcp, &j);
	live_round(&r);
	memcpy(&c_blob, frame_blob(r.req, &blen), sizeof(c_blob));
	CHK(blen == sizeof(c_blob));
	memcpy(&s_blob, frame_blob(r.rep, &blen), sizeof(s_blob));
	CHK(blen == sizeof(s_blob));
	/* A QP of the server that listens: our blob names a listener of ours
	 * (never connected to) and token 0. */
	lis = listen_on(&port);
	mine.addr = htonl(INADDR_LOOPBACK);
	mine.port = htons(port);
	peer_ep(&r.s, &ep3, 0);
	fd = raw_connect((uint16_t)r.qual);
	frame_send(fd, f, req_retarget(f, r.req, r.qual, &mine, sizeof(mine)));
	accept_cr(&r.s, ep3);
	CHK(frame_recv_skip_mra(fd, f, &n) == ZD_CM_MSG_REP);
	memcpy(&e3, frame_blob(f, &blen), sizeof(e3));
	CHK(blen == sizeof(e3) && e3.port != 0);
	frame_send(fd, f, zd_cm_frame_encode(f, ZD_CM_MSG_RTU, 0, 0x7e57, NULL, 0, NULL, 0));
	CHK(wait_ev(r.s.n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	/* The live connection's tokens, then ours (not the listener's). */
	{
		uint64_t replayed[] = { le64toh(c_blob.token), le64toh(s_blob.token), 0 };

		for (size_t i = 0; i < sizeof(replayed) / sizeof(replayed[0]); i++) {
			bad = hello_answer(ntohs(e3.port), replayed[i]);
			CHK(raw_sees_eof(bad, 5000));
			close(bad);
		}
	}
	/* The right token: taken, and answered with the server's HELLO. */
	bad = hello_answer(ntohs(e3.port), le64toh(e3.token));
	CHK(recv(bad, &h, sizeof(h), MSG_WAITALL) == (ssize_t)sizeof(h));
	CHK(h.op == ZD_TCP_OP_HELLO && le64toh(h.value) == 0);
	live_round(&r);
	close(bad);
	close(fd);
	close(lis);
	relay_down(&r);
}

/* tcp: a REQ whose blob is of the wire version before this one (2: a
 * data connection of its own, its address and token where version 3 has
 * its flags) is refused: the server's accept ends in
 * ACCEPT_COMPLETION_ERROR (with a zdapl: line), the requester gets REJ,
 * and the live connection carries on. */
Test(hostile_replay, tcp_old_version_refused)
{
	struct peer_job j = { .dev = &tcp };
	struct relay r;
	struct zd_tcp_blob old = { .magic = htole32(ZD_TCP_BLOB_MAGIC), .version = htole16(2),
				   .port = htons(4791), .addr = htonl(INADDR_LOOPBACK),
				   .token = htole64(0x1234) };
	uint8_t f[ZD_CM_FRAME_MAX];
	DAT_EP_HANDLE ep3;
	size_t n;
	int fd;

	relay_up(&r, &tcp, &j);
	live_round(&r);
	peer_ep(&r.s, &ep3, 0);
	fd = raw_connect((uint16_t)r.qual);
	frame_send(fd, f, req_retarget(f, r.req, r.qual, &old, sizeof(old)));
	accept_cr(&r.s, ep3);
	CHK(wait_ev(r.s.n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR);
	CHK(frame_recv_skip_mra(fd, f, &n) == ZD_CM_MSG_REJ);
	live_round(&r);
	close(fd);
	relay_down(&r);
}
