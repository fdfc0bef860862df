/*
 * A peer stopped with SIGSTOP (issue 15): its kernel keeps its sockets up,
 * so only the CMs' liveness check (core/zd_cm_liveness.h) can end its
 * connections.  With ZDAPL_PEER_TIMEOUT_MS=600: every EP to the stopped
 * peer reports DAT_CONNECTION_EVENT_BROKEN within the bound (printed; the
 * check allows a loaded host 10 s), its posted receives flush, and nothing
 * of ours waits on the peer: dat_evd_wait with a timeout returns,
 * dat_ep_disconnect and dat_ia_close return at once.  A peer that is idle
 * but alive keeps its connections across many timeouts.  On zdapl-shm,
 * zdapl-tcp (lo) and zdapl-mlx5sim.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "hostile.h"

#define TIMEOUT_MS 600
#define NEPS 4  /* several connections to one peer process: one group */


/* Criterion runs each test in a process of its own: the variable is read
 * there, at the first connection. */
static void set_timeout(void)
{
	char v[16];

	snprintf(v, sizeof(v), "%d", TIMEOUT_MS);
	setenv("ZDAPL_PEER_TIMEOUT_MS", v, 1);
}

/* Longer than a graceful disconnect's wait for its DISC_ACK. */
static void set_long_timeout(void)
{
	setenv("ZDAPL_PEER_TIMEOUT_MS", "8000", 1);
}

TestSuite(hostile_stop, .init = set_timeout, .timeout = 60);

/* The client: NEPS connections, then stops itself (mode 1) or idles
 * (mode 0) until the server's word. */
static int c_peer(int fd, void *arg)
{
	const struct peer_job *j = arg;
	DAT_EP_HANDLE eps[NEPS];
	struct peer p;

	prctl(PR_SET_PDEATHSIG, SIGKILL);  /* stopped, it must not outlive a failed test */
	client_init(&p, j->dev, 0, fd);
	eps[0] = p.ep;
	for (int i = 1; i < NEPS; i++)
		peer_ep(&p, &eps[i], 0);
	p.port = msg_recv(fd, 10000);
	for (int i = 0; i < NEPS; i++)
		client_connect(&p, eps[i], p.port);
	msg_send(fd, 1);
	if (j->mode == 1)
		raise(SIGSTOP);  /* the server SIGKILLs us from here */
	return client_done(&p);
}

struct srv {
	struct peer p;
	DAT_EP_HANDLE eps[NEPS];
};

static void srv_up(struct srv *s, const struct peer_dev *dev, struct peer_job *j)
{
	s->eps[0] = NULL;
	server_start(&s->p, dev, 0, c_peer, j);
	s->eps[0] = s->p.ep;
	for (int i = 1; i < NEPS; i++)
		peer_ep(&s->p, &s->eps[i], 0);
	for (int i = 0; i < NEPS; i++)
		post_recvs(&s->p, s->eps[i], 2, (size_t)i * 256, 128, 64, 100 + 10 * (uint64_t)i);
	server_listen(&s->p, s->p.fd);
	for (int i = 0; i < NEPS; i++)
		server_accept(&s->p, s->eps[i]);
	CHK(msg_recv(s->p.fd, 10000) == 1);
}

static void wait_stopped(pid_t pid)
{
	int st;

	CHK(waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st));
}

static void stopped_case(const struct peer_dev *dev)
{
	struct peer_job j = { .dev = dev, .mode = 1 };
	struct srv s;
	DAT_EVENT ev;
	uint64_t t0, dt, worst = 0;
	int broken = 0;

	srv_up(&s, dev, &j);
	wait_stopped(s.p.pid);
	t0 = now_ms();
	/* A wait with a timeout returns while the peer is stopped. */
	CHK(wait_ev(s.p.rcv, 100000, &ev) == 0);
	/* Traffic to the stopped peer is accepted (one-sided on shm, queued
	 * in the socket on tcp); it ends with the connection. */
	{
		DAT_LMR_TRIPLET iov = seg(&s.p, 4096, 64);

		post_send(s.eps[0], 1, &iov, 7);
	}
	while (broken < NEPS) {
		DAT_EVENT_NUMBER e = wait_ev(s.p.n.conn_evd, 10 * SEC, &ev);

		CHK(e == DAT_CONNECTION_EVENT_BROKEN);
		dt = now_ms() - t0;
		worst = dt > worst ? dt : worst;
		broken++;
	}
	fprintf(stderr, "%s: %d connections to a stopped peer broken %llu ms after it stopped "
			"(ZDAPL_PEER_TIMEOUT_MS=%d)\n",
		dev->ia, NEPS, (unsigned long long)worst, TIMEOUT_MS);
	CHK(worst < 10000);
	/* Every receive posted towards it flushes. */
	for (int i = 0; i < 2 * NEPS; i++) {
		CHK(wait_ev(s.p.rcv, 5 * SEC, &ev) == DAT_DTO_COMPLETION_EVENT);
		CHK(ev.event_data.dto_completion_event_data.status == DAT_DTO_ERR_FLUSHED);
	}
	CHK(wait_ev(s.p.req, 5 * SEC, &ev) == DAT_DTO_COMPLETION_EVENT);
	CHK(ev.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS ||
	    ev.event_data.dto_completion_event_data.status == DAT_DTO_ERR_FLUSHED);
	for (int i = 0; i < NEPS; i++) {
		CHK(ep_state(s.eps[i]) == DAT_EP_STATE_DISCONNECTED);
		CHK_RET(dat_ep_disconnect(s.eps[i], DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	}
	t0 = now_ms();
	peer_close(&s.p);
	CHK(now_ms() - t0 < 5000);
	kill(s.p.pid, SIGKILL);
	reap(s.p.pid, 5000);
}

Test(hostile_stop, shm) { stopped_case(&shm); }
Test(hostile_stop, tcp) { stopped_case(&tcp); }
Test(hostile_stop, mlx5sim) { stopped_case(&mlx5sim); }

/* Nothing of ours hangs on a stopped peer before the timeout either: a
 * graceful disconnect ends DISCONNECTED (the DISC_ACK that never comes is
 * waited for ZD_CM_DISC_NS), and dat_ia_close with connections up
 * returns. */
static void stopped_disconnect_case(const struct peer_dev *dev)
{
	struct peer_job j = { .dev = dev, .mode = 1 };
	struct srv s;
	uint64_t t0;

	srv_up(&s, dev, &j);
	wait_stopped(s.p.pid);
	t0 = now_ms();
	CHK_RET(dat_ep_disconnect(s.eps[0], DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	CHK(wait_ev(s.p.n.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	CHK_RET(dat_ep_disconnect(s.eps[1], DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	CHK(wait_ev(s.p.n.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	peer_close(&s.p);  /* two EPs still connected to the stopped peer */
	fprintf(stderr, "%s: disconnects and dat_ia_close with a stopped peer: %llu ms\n",
		dev->ia, (unsigned long long)(now_ms() - t0));
	CHK(now_ms() - t0 < 5000);
	kill(s.p.pid, SIGKILL);
	reap(s.p.pid, 5000);
}

Test(hostile_stop, shm_disconnect, .init = set_long_timeout) { stopped_disconnect_case(&shm); }
Test(hostile_stop, tcp_disconnect, .init = set_long_timeout) { stopped_disconnect_case(&tcp); }

/* An idle peer that is alive answers: its connections outlive five
 * timeouts and still carry a send. */
static void alive_case(const struct peer_dev *dev)
{
	struct peer_job j = { .dev = dev, .mode = 0 };
	struct srv s;

	srv_up(&s, dev, &j);
	CHK(wait_ev(s.p.n.conn_evd, 5 * TIMEOUT_MS * 1000, NULL) == 0);
	for (int i = 0; i < NEPS; i++)
		CHK(ep_state(s.eps[i]) == DAT_EP_STATE_CONNECTED);
	send_wait(&s.p, s.eps[1], 4096, 64, 8);
	server_done(&s.p);
}

Test(hostile_stop, shm_alive) { alive_case(&shm); }
Test(hostile_stop, tcp_alive) { alive_case(&tcp); }
