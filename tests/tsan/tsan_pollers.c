/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Pinned pollers (ZDAPL_POLLERS, evd/zd_poller.h) against consumers that
 * only dequeue or sleep, and that free EPs and EVDs, and close IAs, while
 * completions are still arriving.  Each round: a connected pair of @ia
 * carries a stream of sends and RDMA writes (the consumers spinning on
 * dat_evd_dequeue or sleeping in dat_evd_wait, alternately), then both
 * sides post a burst and at once free their EPs and EVDs, or close their
 * IAs with everything in them.  Pollers start with the first IA of a
 * round and stop with its last.
 */
#include <sys/socket.h>
#include <sys/wait.h>

#include "tsan_util.h"

#define WIN 16
#define MSG 128

struct stream {
	pthread_t t;
	struct ts_side *s;
	struct ts_remote peer;
	uint32_t count;
	int spin;
};

/* Sends and RDMA writes alternately, at most WIN/2 unfinished. */
static void *stream_main(void *arg)
{
	struct stream *x = arg;
	struct ts_side *s = x->s;
	uint32_t out = 0;

	for (uint32_t i = 0; i < x->count; i++) {
		size_t off = (i % WIN) * MSG;

		while (out >= WIN / 2) {
			ts_dto(s->req, x->spin, NULL);
			out--;
		}
		s->buf[off] = (uint8_t)i;
		if (i % 2)
			CHK_RET(ts_post_rdma(s, &x->peer, 1, i, off, TS_BUF / 2 + off, MSG),
				DAT_SUCCESS);
		else
			CHK_RET(ts_post_send(s, i, off, MSG), DAT_SUCCESS);
		out++;
	}
	while (out--)
		ts_dto(s->req, x->spin, NULL);
	return NULL;
}

/* Receives the stream's sends (every other operation), reposting. */
static void receive_stream(struct ts_side *s, uint32_t count, int spin)
{
	for (uint32_t i = 0; i < count; i += 2) {
		DAT_EVENT ev;
		uint64_t slot;

		ts_dto(s->rcv, spin, &ev);
		slot = ev.event_data.dto_completion_event_data.user_cookie.as_64;
		CHK(slot == (i / 2) % WIN);
		CHK_RET(ts_post_recv(s, slot, slot * MSG, MSG), DAT_SUCCESS);
	}
}

/* Posts what it can without waiting for any of it: sends, and RDMA writes
 * to @peer if given.  Errors are fine: the other side may be freeing.  The
 * sources lie past the receive buffers, which messages of the peer's
 * burst may still fill (they outlive the disconnect). */
static void burst(struct ts_side *s, const struct ts_remote *peer)
{
	for (uint32_t i = 0; i < WIN / 2; i++) {
		uint32_t src = TS_BUF / 4 + i * MSG;

		(void)ts_post_send(s, i, src, MSG);
		if (peer)
			(void)ts_post_rdma(s, peer, 1, i, src, TS_BUF / 2 + i * MSG, MSG);
	}
}

/* The end of a round for one side: its EP, EVDs and LMR freed, then its
 * IA closed, or (every third round) the IA closed with all of it.  The
 * buffer stays: a peer's writes may still be on their way. */
static void side_end(struct ts_node *n, struct ts_side *s, unsigned round)
{
	if (round % 3 != 2) {
		CHK_RET(dat_ep_free(s->ep), DAT_SUCCESS);
		CHK_RET(dat_evd_free(s->req), DAT_SUCCESS);
		CHK_RET(dat_evd_free(s->rcv), DAT_SUCCESS);
		CHK_RET(dat_lmr_free(s->lmr), DAT_SUCCESS);
	}
	ts_node_close(n);
}

/* Server side of a round up to its connection's request: node, side with
 * receives posted, PSP. */
static DAT_CONN_QUAL server_open(struct ts_node *n, struct ts_side *s, DAT_PSP_HANDLE *psp,
				 const char *ia)
{
	ts_node_open(n, ia);
	ts_side_open(s, n, 64);
	for (uint32_t i = 0; i < WIN; i++)
		CHK_RET(ts_post_recv(s, i, i * MSG, MSG), DAT_SUCCESS);
	return ts_listen(n, psp, 4);
}

/* ---- both sides in this process ---------------------------------------------- */

static void round_here(const char *ia, unsigned round, uint32_t count)
{
	struct ts_node sn, cn;
	struct ts_side s, c;
	struct stream x;
	struct ts_remote rs, rc;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL q = server_open(&sn, &s, &psp, ia);

	ts_node_open(&cn, ia);
	ts_side_open(&c, &cn, 64);
	ts_pair_connect(&s, &c, q);
	rs = ts_side_remote(&s);
	rc = ts_side_remote(&c);

	x = (struct stream){ .s = &c, .peer = rs, .count = count, .spin = round % 2 == 0 };
	ts_thread(&x.t, stream_main, &x);
	receive_stream(&s, count, x.spin);
	pthread_join(x.t, NULL);

	/* Everything goes while completions are on their way. */
	burst(&s, &rc);
	burst(&c, &rs);
	CHK_RET(dat_psp_free(psp), DAT_SUCCESS);
	side_end(&sn, &s, round);
	side_end(&cn, &c, round);
	free(s.buf);
	free(c.buf);
}

/* ---- the client in a child process (zdapl-shm) ------------------------------- */

struct round_msg {
	DAT_CONN_QUAL qual;
	struct ts_remote buf;   /* the server's */
	uint32_t round, count;
	uint32_t stop;
};

static void io_full(int fd, void *p, size_t n, int out)
{
	for (size_t done = 0; done < n;) {
		ssize_t r = out ? write(fd, (char *)p + done, n - done)
				: read(fd, (char *)p + done, n - done);

		if (r < 0 && errno == EINTR)
			continue;
		CHK(r > 0);
		done += (size_t)r;
	}
}

static int client_proc(int fd, const char *ia)
{
	struct round_msg m;

	for (;;) {
		struct ts_node cn;
		struct ts_side c;
		struct stream x;
		uint8_t ack = 1;

		io_full(fd, &m, sizeof(m), 0);
		if (m.stop)
			return 0;
		ts_node_open(&cn, ia);
		ts_side_open(&c, &cn, 64);
		CHK_RET(connect_loopback(c.ep, m.qual, 10 * SEC), DAT_SUCCESS);
		CHK(wait_ev(cn.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
		x = (struct stream){ .s = &c, .peer = m.buf, .count = m.count,
				     .spin = m.round % 2 == 0 };
		stream_main(&x);
		burst(&c, &m.buf);
		side_end(&cn, &c, m.round);
		free(c.buf);
		io_full(fd, &ack, 1, 1);
	}
}

static void round_forked(int fd, const char *ia, unsigned round, uint32_t count)
{
	struct ts_node sn;
	struct ts_side s;
	DAT_PSP_HANDLE psp;
	struct round_msg m = { .round = round, .count = count };
	DAT_EVENT ev;
	uint8_t ack;

	m.qual = server_open(&sn, &s, &psp, ia);
	m.buf = ts_side_remote(&s);
	io_full(fd, &m, sizeof(m), 1);
	CHK(wait_ev(sn.cr_evd, 10 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, s.ep, 0, NULL),
		DAT_SUCCESS);
	CHK(wait_ev(sn.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	receive_stream(&s, count, m.round % 2 == 0);
	burst(&s, NULL);
	CHK_RET(dat_psp_free(psp), DAT_SUCCESS);
	side_end(&sn, &s, round);
	io_full(fd, &ack, 1, 0);
	free(s.buf);            /* the client's writes are over */
}

/* ---- the scenario --------------------------------------------------------------- */

int ts_pollers(int argc, char **argv)
{
	const char *ia = argc > 0 ? argv[0] : "zdapl-shm";
	int forked = strcmp(ia, "zdapl-shm") == 0;
	struct ts_budget b;
	cpu_set_t set;
	char cpus[32] = "";
	int n = 0, sv[2] = { -1, -1 }, st;
	pid_t pid = -1;

	/* A poller on each of the first two CPUs this process may use (read
	 * at the first dat_ia_open of each round). */
	CHK(sched_getaffinity(0, sizeof(set), &set) == 0);
	for (int cpu = 0; cpu < CPU_SETSIZE && n < 2; cpu++)
		if (CPU_ISSET(cpu, &set))
			snprintf(cpus + strlen(cpus), sizeof(cpus) - strlen(cpus), "%s%d",
				 n++ ? "," : "", cpu);
	setenv("ZDAPL_POLLERS", cpus, 1);

	if (forked) {
		/* Before any thread exists (TSan forbids threads in a child
		 * forked from a multi-threaded process). */
		CHK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
		pid = fork();
		CHK(pid >= 0);
		if (pid == 0) {
			close(sv[0]);
			_exit(client_proc(sv[1], ia));
		}
		close(sv[1]);
	}
	/* Forked: one longer round (more rounds between the same two
	 * processes stall now and then under TSan, one run in ten to thirty:
	 * README, ThreadSanitizer).  An odd count: the stream ends with a
	 * send, so the server, which frees its EP once it received the last
	 * one, never flushes an RDMA write the client has yet to post. */
	if (forked)
		ts_budget_start(&b, 0, 1);
	else
		ts_budget_start(&b, 3000, 3);
	while (ts_budget_more(&b)) {
		if (forked)
			round_forked(sv[0], ia, b.iter, 1601);
		else
			round_here(ia, b.iter, 400);
	}
	if (forked) {
		struct round_msg stop = { .stop = 1 };

		io_full(sv[0], &stop, sizeof(stop), 1);
		CHK(waitpid(pid, &st, 0) == pid);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "tsan_stress pollers: client process status 0x%x\n", st);
			return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
		}
	}
	return 0;
}
