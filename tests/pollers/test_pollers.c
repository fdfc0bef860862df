/*
 * Pinned pollers (ZDAPL_POLLERS, evd/zd_poller.h) end to end, through
 * libdat2, over zdapl-shm, zdapl-mlx5sim and zdapl-tcp on lo (progress
 * thread, and progress=manual, where only the pollers progress): two
 * processes (the parent the server, the forked child the client) whose
 * consumers never poll a CQ: they only dequeue from the EVD ring, or sleep
 * in dat_evd_wait until a poller publishes and wakes them.  The parent's
 * poller runs on CPU 0, the child's on CPU 1 when the process may use it
 * (ZDAPL_POLLERS is read at the first dat_ia_open of each process).
 *
 * Cases: send/recv and RDMA-write ping-pong (the RDMA target only reads
 * its memory), order of many completions, a full EVD then drained (no
 * drop, order kept), dat_evd_resize while the poller feeds the EVD,
 * dat_evd_free and dat_ia_close while completions arrive, dat_evd_wait's
 * timeout and threshold, a disabled EVD, a CNO, and a bad CPU list failing
 * dat_ia_open (pollers gone once the last IA closes).
 */
#include <dirent.h>
#include <sched.h>
#include <stdlib.h>

#include "cm_test.h"
#include "rc_ep_attr.h"

#define BUF 65536
#define WIN 16

struct peer {
	struct node n;
	DAT_EVD_HANDLE req, rcv;
	DAT_EP_HANDLE ep;
	DAT_PSP_HANDLE psp;
	uint8_t *buf;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lkey;
	DAT_RMR_CONTEXT rkey;
	/* the other side's buffer */
	uint64_t raddr;
	uint32_t rrkey;
};

/* Pollers on CPU 0 (server), CPU 1 (client) if allowed, else 0. */
static void pollers_env(int child)
{
	cpu_set_t set;
	const char *cpu = "0";

	if (child && sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_ISSET(1, &set))
		cpu = "1";
	setenv("ZDAPL_POLLERS", cpu, 1);
}

/* Threads of this process named @want ("<comm>\n"), each checked to be
 * pinned to the CPU its name ends with, alone. */
static int poller_threads(const char *want)
{
	char path[300], comm[32];
	struct dirent *d;
	DIR *dir = opendir("/proc/self/task");
	int found = 0;

	CHK(dir);
	while ((d = readdir(dir)) != NULL) {
		FILE *f;

		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", d->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && strcmp(comm, want) == 0) {
			cpu_set_t set;

			CHK(sched_getaffinity(atoi(d->d_name), sizeof(set), &set) == 0);
			CHK(CPU_COUNT(&set) == 1 &&
			    CPU_ISSET(atoi(want + strlen("zd-poll-")), &set));
			found++;
		}
		fclose(f);
	}
	closedir(dir);
	return found;
}

/* The poller ZDAPL_POLLERS asked for runs: one thread zd-poll-<cpu>. */
static void check_poller(void)
{
	char want[32];

	snprintf(want, sizeof(want), "zd-poll-%s\n", getenv("ZDAPL_POLLERS"));
	CHK(poller_threads(want) == 1);
}

static void peer_open(struct peer *p, const char *ia, DAT_COUNT req_qlen, DAT_COUNT rcv_qlen)
{
	DAT_REGION_DESCRIPTION r;
	DAT_VLEN rlen;
	DAT_VADDR raddr;
	DAT_EP_ATTR a;

	memset(p, 0, sizeof(*p));
	node_open_on(&p->n, ia);
	check_poller();
	CHK_RET(dat_evd_create(p->n.ia, req_qlen, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &p->req),
		DAT_SUCCESS);
	CHK_RET(dat_evd_create(p->n.ia, rcv_qlen, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &p->rcv),
		DAT_SUCCESS);
	p->buf = aligned_alloc(4096, BUF);
	CHK(p->buf);
	memset(p->buf, 0, BUF);
	r.for_va = p->buf;
	CHK_RET(dat_lmr_create(p->n.ia, DAT_MEM_TYPE_VIRTUAL, r, BUF, p->n.pz,
			       DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &p->lmr, &p->lkey, &p->rkey,
			       &rlen, &raddr),
		DAT_SUCCESS);
	rc_ep_attr(&a, BUF, 64, 64, 1);
	CHK_RET(dat_ep_create(p->n.ia, p->n.pz, p->rcv, p->req, p->n.conn_evd, &a, &p->ep),
		DAT_SUCCESS);
}

static void peer_free(struct peer *p)
{
	node_close(&p->n);
	free(p->buf);
}

/* Connects server @s (parent) or client @c (child) and swaps buffers. */
static void server_connect(struct peer *p, int fd)
{
	DAT_EVENT ev;

	node_listen(&p->n, fd, &p->psp);
	CHK(wait_ev(p->n.cr_evd, 20 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, p->ep, 0, NULL),
		DAT_SUCCESS);
	CHK(wait_ev(p->n.conn_evd, 20 * SEC, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED);
}

static void client_connect(struct peer *p, int fd)
{
	uint32_t port = msg_recv(fd, 20000);

	CHK_RET(connect_loopback(p->ep, port, 20 * SEC), DAT_SUCCESS);
	CHK(wait_ev(p->n.conn_evd, 20 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
}

static void swap_keys(struct peer *p, int fd)
{
	uint64_t a = (uintptr_t)p->buf;

	msg_send(fd, (uint32_t)a);
	msg_send(fd, (uint32_t)(a >> 32));
	msg_send(fd, p->rkey);
	a = msg_recv(fd, 20000);
	p->raddr = a | (uint64_t)msg_recv(fd, 20000) << 32;
	p->rrkey = msg_recv(fd, 20000);
}

static DAT_LMR_TRIPLET seg(struct peer *p, size_t off, size_t len)
{
	DAT_LMR_TRIPLET t = { .lmr_context = p->lkey, .virtual_address = (uintptr_t)p->buf + off,
			      .segment_length = len };
	return t;
}

static void post_recv(struct peer *p, uint64_t cookie, size_t off, size_t len)
{
	DAT_LMR_TRIPLET t = seg(p, off, len);
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	CHK_RET(dat_ep_post_recv(p->ep, 1, &t, c, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
}

static DAT_RETURN post_send(struct peer *p, uint64_t cookie, size_t off, size_t len)
{
	DAT_LMR_TRIPLET t = seg(p, off, len);
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	return dat_ep_post_send(p->ep, 1, &t, c, DAT_COMPLETION_DEFAULT_FLAG);
}

static DAT_RETURN post_write(struct peer *p, uint64_t cookie, size_t off, size_t roff,
			     size_t len)
{
	DAT_LMR_TRIPLET t = seg(p, off, len);
	DAT_RMR_TRIPLET r = { .rmr_context = p->rrkey, .virtual_address = p->raddr + roff,
			      .segment_length = len };
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	return dat_ep_post_rdma_write(p->ep, 1, &t, c, &r, DAT_COMPLETION_DEFAULT_FLAG);
}

/* The consumer only dequeues (spinning politely): the next DTO event. */
static void dequeue_dto(DAT_EVD_HANDLE evd, DAT_EVENT *ev)
{
	uint64_t end = now_ms() + 20000;

	for (;;) {
		DAT_RETURN r = dat_evd_dequeue(evd, ev);

		if (r == DAT_SUCCESS)
			break;
		CHK(DAT_GET_TYPE(r) == DAT_QUEUE_EMPTY);
		CHK(now_ms() < end);
		sched_yield();
	}
	CHK(ev->event_number == DAT_DTO_COMPLETION_EVENT);
}

/* Sleeps in dat_evd_wait: the next DTO event. */
static void wait_dto(DAT_EVD_HANDLE evd, DAT_EVENT *ev)
{
	CHK(wait_ev(evd, 20 * SEC, ev) == DAT_DTO_COMPLETION_EVENT);
}

static void expect(const DAT_EVENT *ev, uint64_t cookie, DAT_DTO_COMPLETION_STATUS st)
{
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;

	if (d->user_cookie.as_64 != cookie || d->status != st) {
		fprintf(stderr, "%d: cookie %llu status %d, expected %llu status %d\n", getpid(),
			(unsigned long long)d->user_cookie.as_64, d->status,
			(unsigned long long)cookie, st);
		CHK(0);
	}
}

/* ---- the cases: server (parent) and client (child) halves ---- */

enum { PINGPONG, ORDER, OVERFLOW, RESIZE, CLOSE, RULES };

#define PP_SENDS  1000
#define PP_WRITES 500
#define NMSG      3000

struct ctx {
	const char *ia;
	int which;
};

/* Send/recv ping-pong: both sleep in dat_evd_wait for receives and only
 * dequeue request completions.  Then an RDMA-write ping-pong where the
 * target only reads its memory (no library call: the poller progresses,
 * which the tcp device needs for a write to land). */
static void pingpong(struct peer *p, int fd, int server)
{
	DAT_EVENT ev;
	volatile uint64_t *flag = (volatile uint64_t *)(void *)p->buf;

	for (uint64_t i = 0; i < PP_SENDS; i++) {
		post_recv(p, i, 4096, 64);
		if (i == 0)
			msg_send(fd, 1), (void)msg_recv(fd, 20000);  /* both posted */
		if (!server) {
			memcpy(p->buf + 8192, &i, 8);
			CHK_RET(post_send(p, 100000 + i, 8192, 8), DAT_SUCCESS);
			dequeue_dto(p->req, &ev);
			expect(&ev, 100000 + i, DAT_DTO_SUCCESS);
		}
		wait_dto(p->rcv, &ev);
		expect(&ev, i, DAT_DTO_SUCCESS);
		CHK(ev.event_data.dto_completion_event_data.transfered_length == 8);
		CHK(memcmp(p->buf + 4096, &i, 8) == 0);
		if (server) {
			memcpy(p->buf + 8192, &i, 8);
			CHK_RET(post_send(p, 100000 + i, 8192, 8), DAT_SUCCESS);
			dequeue_dto(p->req, &ev);
			expect(&ev, 100000 + i, DAT_DTO_SUCCESS);
		}
	}
	msg_send(fd, 2), (void)msg_recv(fd, 20000);
	for (uint64_t i = 1; i <= PP_WRITES; i++) {
		uint64_t end = now_ms() + 20000, want = server ? i : i;

		if (!server) {
			memcpy(p->buf + 16384, &i, 8);
			CHK_RET(post_write(p, 200000 + i, 16384, 0, 8), DAT_SUCCESS);
			wait_dto(p->req, &ev);
			expect(&ev, 200000 + i, DAT_DTO_SUCCESS);
		}
		while (*flag != want) {
			CHK(now_ms() < end);
			sched_yield();  /* the poller may share this CPU */
		}
		if (server) {
			memcpy(p->buf + 16384, &i, 8);
			CHK_RET(post_write(p, 200000 + i, 16384, 0, 8), DAT_SUCCESS);
			dequeue_dto(p->req, &ev);
			expect(&ev, 200000 + i, DAT_DTO_SUCCESS);
		}
	}
	msg_send(fd, 3), (void)msg_recv(fd, 20000);
}

/* NMSG sends, WIN in flight; the server checks every receive in order
 * (cookie and payload), the client every send completion in order.
 * @resize: the server resizes its recv EVD as it goes (16 <-> 64). */
static void stream(struct peer *p, int fd, int server, int resize)
{
	DAT_EVENT ev;

	if (server) {
		uint64_t next_post = 0;
		int resizes = 0;

		for (; next_post < 2 * WIN; next_post++)
			post_recv(p, next_post, 4096 + (next_post % (2 * WIN)) * 8, 8);
		msg_send(fd, 1);
		for (uint64_t i = 0; i < NMSG; i++) {
			uint64_t v;

			if (i & 1)
				dequeue_dto(p->rcv, &ev);
			else
				wait_dto(p->rcv, &ev);
			expect(&ev, i, DAT_DTO_SUCCESS);
			memcpy(&v, p->buf + 4096 + (i % (2 * WIN)) * 8, 8);
			CHK(v == i * 3 + 1);
			if (next_post < NMSG) {
				post_recv(p, next_post, 4096 + (next_post % (2 * WIN)) * 8, 8);
				next_post++;
			}
			if (resize && i % 37 == 0) {
				DAT_RETURN r = dat_evd_resize(p->rcv, (resizes++ & 1) ? 64 : 2 * WIN + 4);

				/* Smaller than what waits: DAT_INVALID_STATE, keep going. */
				CHK(r == DAT_SUCCESS || DAT_GET_TYPE(r) == DAT_INVALID_STATE);
			}
		}
		CHK(!resize || resizes > 10);
		msg_send(fd, 2);
		return;
	}
	(void)msg_recv(fd, 20000);
	uint64_t done = 0;

	for (uint64_t i = 0; i < NMSG; i++) {
		uint64_t v = i * 3 + 1;

		memcpy(p->buf + 8192 + (i % WIN) * 8, &v, 8);
		CHK_RET(post_send(p, i, 8192 + (i % WIN) * 8, 8), DAT_SUCCESS);
		if (i + 1 - done == WIN) {
			dequeue_dto(p->req, &ev);
			expect(&ev, done++, DAT_DTO_SUCCESS);
		}
	}
	while (done < NMSG) {
		wait_dto(p->req, &ev);
		expect(&ev, done++, DAT_DTO_SUCCESS);
	}
	(void)msg_recv(fd, 20000);
}

/* The client's request EVD holds 8 events; 24 writes complete while it
 * does not look.  The ring fills; the rest waits in the CQ (or the
 * device's overflow spill): all 24 arrive, in order, when it drains.
 * (24: within what the devices' CQs hold for a qlen-8 EVD, 2 * 8 + 16 on
 * mlx5, beyond which a NIC overruns the CQ whoever polls it.) */
static void overflow(struct peer *p, int fd, int server)
{
	DAT_EVENT ev;

	if (server) {
		(void)msg_recv(fd, 20000);
		return;
	}
	for (uint64_t i = 0; i < 24; i++)
		CHK_RET(post_write(p, i, i * 64, i * 64, 64), DAT_SUCCESS);
	usleep(200 * 1000);
	for (uint64_t i = 0; i < 24; i++) {
		if (i % 3 == 0)
			wait_dto(p->req, &ev);
		else
			dequeue_dto(p->req, &ev);
		expect(&ev, i, DAT_DTO_SUCCESS);
	}
	CHK(DAT_GET_TYPE(dat_evd_dequeue(p->req, &ev)) == DAT_QUEUE_EMPTY);
	msg_send(fd, 1);
}

/* The server closes its IA (abrupt) while the client's writes and sends
 * stream in; before that it frees EVDs its poller polls.  The client frees
 * its EP and request EVD with completions outstanding, then closes. */
static void close_busy(struct peer *p, int fd, int server)
{
	DAT_EVENT ev;

	if (server) {
		for (int i = 0; i < 32; i++)
			post_recv(p, (uint64_t)i, 4096 + (size_t)i * 64, 64);
		msg_send(fd, 1);
		for (int k = 0; k < 50; k++) {
			DAT_EVD_HANDLE e;

			CHK_RET(dat_evd_create(p->n.ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &e),
				DAT_SUCCESS);
			usleep(200);
			CHK_RET(dat_evd_free(e), DAT_SUCCESS);
		}
		wait_dto(p->rcv, &ev);
		/* Completions still arriving: close now. */
		CHK_RET(dat_ia_close(p->n.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
		free(p->buf);
		msg_send(fd, 2);
		return;
	}
	(void)msg_recv(fd, 20000);
	for (uint64_t i = 0; i < 400; i++) {
		DAT_RETURN r = (i % 8 == 0) ? post_send(p, i, 0, 64)
					    : post_write(p, i, 0, (i % 64) * 64, 64);

		if (r != DAT_SUCCESS)
			break;  /* the server is gone: the EP is broken */
		if (i >= WIN)
			dequeue_dto(p->req, &ev);  /* success or flushed */
	}
	(void)msg_recv(fd, 20000);
	/* Writes outstanding (maybe): free the EP, then the EVD a poller
	 * polls, while its flushes arrive. */
	for (uint64_t i = 0; i < 8; i++)
		(void)post_write(p, 1000 + i, 0, 0, 64);
	CHK_RET(dat_ep_free(p->ep), DAT_SUCCESS);
	CHK_RET(dat_evd_free(p->req), DAT_SUCCESS);
	p->req = DAT_HANDLE_NULL;
	node_close(&p->n);
	free(p->buf);
}

/* EVD rules with the poller feeding: dat_evd_wait's timeout and
 * threshold, a disabled EVD (its waiters refused, its events kept), and a
 * CNO triggered by the poller's publish. */
static void evd_rules(struct peer *p, int fd, int server)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;

	if (!server) {
		for (uint64_t round = 0; round < 3; round++) {
			(void)msg_recv(fd, 20000);
			for (uint64_t i = 0; i < 4; i++) {
				CHK_RET(post_send(p, round * 4 + i, 8192, 8), DAT_SUCCESS);
				wait_dto(p->req, &ev);
				expect(&ev, round * 4 + i, DAT_DTO_SUCCESS);
			}
		}
		(void)msg_recv(fd, 20000);
		return;
	}
	for (uint64_t i = 0; i < 12; i++)
		post_recv(p, i, 4096 + i * 8, 8);
	/* Nothing yet: the timeout expires. */
	CHK(DAT_GET_TYPE(dat_evd_wait(p->rcv, 10000, 1, &ev, &nmore)) == DAT_TIMEOUT_EXPIRED);
	/* Threshold 4: one wait returns once all four are in. */
	msg_send(fd, 1);
	CHK_RET(dat_evd_wait(p->rcv, 20 * SEC, 4, &ev, &nmore), DAT_SUCCESS);
	expect(&ev, 0, DAT_DTO_SUCCESS);
	CHK(nmore == 3);
	for (uint64_t i = 1; i < 4; i++) {
		dequeue_dto(p->rcv, &ev);
		expect(&ev, i, DAT_DTO_SUCCESS);
	}
	/* Disabled: dat_evd_wait refuses; the events still queue. */
	CHK_RET(dat_evd_disable(p->rcv), DAT_SUCCESS);
	msg_send(fd, 2);
	CHK(DAT_GET_TYPE(dat_evd_wait(p->rcv, 1000, 1, &ev, &nmore)) == DAT_INVALID_STATE);
	usleep(100 * 1000);
	CHK_RET(dat_evd_enable(p->rcv), DAT_SUCCESS);
	for (uint64_t i = 4; i < 8; i++) {
		wait_dto(p->rcv, &ev);
		expect(&ev, i, DAT_DTO_SUCCESS);
	}
	/* A CNO: the poller's wake triggers it. */
	DAT_CNO_HANDLE cno;
	DAT_EVD_HANDLE got = DAT_HANDLE_NULL;
	DAT_OS_WAIT_PROXY_AGENT agent = { NULL, NULL };

	CHK_RET(dat_cno_create(p->n.ia, agent, &cno), DAT_SUCCESS);
	CHK_RET(dat_evd_modify_cno(p->rcv, cno), DAT_SUCCESS);
	msg_send(fd, 3);
	for (uint64_t i = 8; i < 12; i++) {
		if (dat_evd_dequeue(p->rcv, &ev) != DAT_SUCCESS) {
			CHK_RET(dat_cno_wait(cno, 20 * SEC, &got), DAT_SUCCESS);
			CHK(got == p->rcv);
			dequeue_dto(p->rcv, &ev);
		}
		expect(&ev, i, DAT_DTO_SUCCESS);
	}
	CHK_RET(dat_evd_modify_cno(p->rcv, DAT_HANDLE_NULL), DAT_SUCCESS);
	CHK_RET(dat_cno_free(cno), DAT_SUCCESS);
	msg_send(fd, 4);
}

static void run(struct peer *p, int fd, int which, int server)
{
	switch (which) {
	case PINGPONG: pingpong(p, fd, server); break;
	case ORDER:    stream(p, fd, server, 0); break;
	case OVERFLOW: overflow(p, fd, server); break;
	case RESIZE:   stream(p, fd, server, 1); break;
	case CLOSE:    close_busy(p, fd, server); break;
	case RULES:    evd_rules(p, fd, server); break;
	}
}

static int client_main(int fd, void *arg)
{
	struct ctx *c = arg;
	struct peer p;

	alarm(120);
	pollers_env(1);
	peer_open(&p, c->ia, c->which == OVERFLOW ? 8 : 64, 64);
	client_connect(&p, fd);
	swap_keys(&p, fd);
	run(&p, fd, c->which, 0);
	if (c->which != CLOSE)
		peer_free(&p);
	return 0;
}

static void two_procs(const char *ia, int which)
{
	struct ctx c = { ia, which };
	struct peer p;
	pid_t pid;
	int fd, st;

	pollers_env(0);
	pid = spawn(client_main, &c, &fd);
	/* RESIZE shrinks the receive EVD to 2 * WIN + 4 and grows it back to
	 * its size at creation (an mlx5 CQ does not grow past that). */
	peer_open(&p, ia, 64, 64);
	server_connect(&p, fd);
	swap_keys(&p, fd);
	run(&p, fd, which, 1);
	st = reap(pid, 60000);
	if (which != CLOSE)
		peer_free(&p);
	close(fd);
	CHK(st == 0);
}

#define DEV_TESTS(dev, ia)                                                        \
	Test(dev, pingpong, .timeout = 150) { two_procs(ia, PINGPONG); }          \
	Test(dev, order, .timeout = 150) { two_procs(ia, ORDER); }                \
	Test(dev, overflow_drain, .timeout = 150) { two_procs(ia, OVERFLOW); }   \
	Test(dev, resize_running, .timeout = 150) { two_procs(ia, RESIZE); }     \
	Test(dev, close_busy, .timeout = 150) { two_procs(ia, CLOSE); }          \
	Test(dev, evd_rules, .timeout = 150) { two_procs(ia, RULES); }

DEV_TESTS(shm, "zdapl-shm")
DEV_TESTS(mlx5sim, "zdapl-mlx5sim")
DEV_TESTS(tcp, "zdapl-tcp-lo")
/* progress=manual: no progress thread, so only the pollers move the data
 * (an RDMA write lands while its target only reads memory). */
DEV_TESTS(tcp_manual, "zdapl-tcp-lo-manual")

/* A bad CPU list fails dat_ia_open, in a fresh process (pollers start once). */
static int bad_list(int fd, void *arg)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_RETURN r;

	(void)fd;
	setenv("ZDAPL_POLLERS", arg, 1);
	r = dat_ia_open((DAT_NAME_PTR) "zdapl-shm", 8, &async, &ia);
	if (r == DAT_SUCCESS || DAT_GET_TYPE(r) != DAT_INVALID_PARAMETER)
		return 3;
	/* A good list afterwards works. */
	setenv("ZDAPL_POLLERS", "0", 1);
	if (dat_ia_open((DAT_NAME_PTR) "zdapl-shm", 8, &async, &ia) != DAT_SUCCESS)
		return 4;
	check_poller();
	if (dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG) != DAT_SUCCESS)
		return 5;
	/* The last IA closed: its pollers are gone (joined; the kernel may
	 * list a joined thread in /proc for a moment after). */
	for (int tries = 0; tries < 1000; tries++) {
		if (poller_threads("zd-poll-0\n") == 0)
			return 0;
		usleep(1000);
	}
	return 6;
}

Test(env, bad_cpu_list_fails_open, .timeout = 60)
{
	const char *bad[] = { "4095", "x", "0,0", "1-", "-1" };

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int fd, st;
		pid_t pid = spawn(bad_list, (void *)bad[i], &fd);

		st = reap(pid, 30000);
		close(fd);
		if (st != 0)
			fprintf(stderr, "ZDAPL_POLLERS=%s: status %d\n", bad[i], st);
		CHK(st == 0);
	}
}
