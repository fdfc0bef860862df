/*
 * Failure test peer over plain DAT (any zdapl device, named by its dat.conf
 * line): connects one RC EP to its peer, then both stream RDMA writes and
 * sends at each other (a window of DTOs always outstanding) until the
 * connection fails under them (netns.sh takes the veth link down or kills
 * the peer).  The survivor must then see, within its bound:
 *  - DAT_CONNECTION_EVENT_BROKEN or _DISCONNECTED on the EP;
 *  - every outstanding DTO completed (flushed or done), none lost;
 *  - after freeing everything and dat_ia_close, no socket more than before
 *    dat_ia_open (and at most the connection manager's two process-wide
 *    descriptors, its epoll set and eventfd, more fds in all).
 * It prints what it saw, with the wall-clock time of the event in ms
 * ("EVENT <name> <ms>") so the script can bound the detection time from
 * the moment it broke the link.
 *
 * usage: zd_failtest -s <ia> <port>            server (accepts one)
 *        zd_failtest -c <ia> <port> <server>   client
 * Exit 0 only if all of the above held.
 */
#include <dat2/udat.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "rc_ep_attr.h"

#define BUF      (1u << 20)
#define CHUNK    (64u * 1024)
#define WINDOW   16      /* requests outstanding */
#define RECVS    16      /* receives outstanding */
#define MSG      256     /* send size */
#define DRAIN_MS 10000   /* outstanding DTOs must complete within this */

static uint64_t now_ms(int clock)
{
	struct timespec t;

	clock_gettime(clock, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* Descriptors of this process: all but the registered pool's chunks
 * (memfd "zdapl-pool": kept for the process's life, as malloc keeps its
 * arenas; queues take their memory there since issue 14), which come back
 * in @pool; sockets among them. */
static void count_fds(int *all, int *sockets, int *pool)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char path[300], to[256];

	*all = *sockets = *pool = 0;
	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		ssize_t n;

		if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		n = readlink(path, to, sizeof(to) - 1);
		to[n > 0 ? n : 0] = '\0';
		if (strncmp(to, "/memfd:zdapl-pool", 17) == 0) {
			(*pool)++;
			continue;
		}
		(*all)++;
		if (strncmp(to, "socket:", 7) == 0)
			(*sockets)++;
	}
	closedir(d);
}

#define DIE(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)
#define OK(call) do { DAT_RETURN r_ = (call); \
	if (r_ != DAT_SUCCESS) DIE("%s: 0x%x", #call, (unsigned)r_); } while (0)

struct ctx {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, conn, cr, req, rcv;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep;
	DAT_PSP_HANDLE psp;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lkey;
	DAT_RMR_CONTEXT rkey;
	uint8_t *buf;
	int reqs_out, recvs_out;
	uint64_t reqs_done, recvs_done, flushed;
	DAT_RMR_TRIPLET peer;     /* the peer's buffer, from its first send */
	int have_peer;
};

static DAT_LMR_TRIPLET seg(struct ctx *c, uint64_t off, uint32_t len)
{
	DAT_LMR_TRIPLET t = {
		.lmr_context = c->lkey, .virtual_address = (DAT_VADDR)(uintptr_t)(c->buf + off),
		.segment_length = len,
	};
	return t;
}

static void post_recv(struct ctx *c)
{
	DAT_LMR_TRIPLET t = seg(c, BUF - (uint64_t)MSG * RECVS + (uint64_t)MSG * (c->recvs_out % RECVS), MSG);
	DAT_DTO_COOKIE k = { .as_64 = 0 };

	OK(dat_ep_post_recv(c->ep, 1, &t, k, DAT_COMPLETION_DEFAULT_FLAG));
	c->recvs_out++;
}

/* Our buffer's key and address: the first message each way. */
static void post_hello(struct ctx *c)
{
	DAT_LMR_TRIPLET t = seg(c, 0, MSG);
	DAT_DTO_COOKIE k = { .as_64 = 1 };
	uint64_t v[2] = { c->rkey, (uint64_t)(uintptr_t)c->buf };

	memcpy(c->buf, v, sizeof(v));
	OK(dat_ep_post_send(c->ep, 1, &t, k, DAT_COMPLETION_DEFAULT_FLAG));
	c->reqs_out++;
}

/* Another request: an RDMA write of CHUNK, every fourth a send. */
static DAT_RETURN post_one(struct ctx *c, uint64_t n)
{
	DAT_DTO_COOKIE k = { .as_64 = 2 };
	DAT_LMR_TRIPLET t;
	DAT_RETURN r;

	if (n % 4 == 3) {
		t = seg(c, CHUNK, MSG);
		r = dat_ep_post_send(c->ep, 1, &t, k, DAT_COMPLETION_DEFAULT_FLAG);
	} else {
		DAT_RMR_TRIPLET rt = c->peer;

		rt.virtual_address += (n % 8) * CHUNK;
		rt.segment_length = CHUNK;
		t = seg(c, (n % 8) * CHUNK, CHUNK);
		r = dat_ep_post_rdma_write(c->ep, 1, &t, k, &rt, DAT_COMPLETION_DEFAULT_FLAG);
	}
	if (r == DAT_SUCCESS)
		c->reqs_out++;
	return r;
}

/* Takes what completed; returns how many. */
static int reap(struct ctx *c, int repost)
{
	DAT_EVENT ev;
	int n = 0;

	while (dat_evd_dequeue(c->req, &ev) == DAT_SUCCESS) {
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

		if (ev.event_number != DAT_DTO_COMPLETION_EVENT)
			DIE("request EVD: event 0x%x", ev.event_number);
		c->reqs_out--;
		c->reqs_done++;
		if (d->status == DAT_DTO_ERR_FLUSHED)
			c->flushed++;
		n++;
	}
	while (dat_evd_dequeue(c->rcv, &ev) == DAT_SUCCESS) {
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

		if (ev.event_number != DAT_DTO_COMPLETION_EVENT)
			DIE("receive EVD: event 0x%x", ev.event_number);
		c->recvs_out--;
		c->recvs_done++;
		if (d->status == DAT_DTO_ERR_FLUSHED) {
			c->flushed++;
		} else if (d->status == DAT_DTO_SUCCESS && !c->have_peer) {
			uint64_t v[2];
			uint64_t off = BUF - (uint64_t)MSG * RECVS +
				       (uint64_t)MSG * ((c->recvs_done - 1) % RECVS);

			memcpy(v, c->buf + off, sizeof(v));
			c->peer.rmr_context = (DAT_RMR_CONTEXT)v[0];
			c->peer.virtual_address = v[1];
			c->have_peer = 1;
		}
		if (repost && d->status == DAT_DTO_SUCCESS)
			post_recv(c);
		n++;
	}
	return n;
}

static const char *conn_name(DAT_EVENT_NUMBER e)
{
	switch (e) {
	case DAT_CONNECTION_EVENT_BROKEN: return "BROKEN";
	case DAT_CONNECTION_EVENT_DISCONNECTED: return "DISCONNECTED";
	case DAT_CONNECTION_EVENT_ESTABLISHED: return "ESTABLISHED";
	case DAT_CONNECTION_EVENT_PEER_REJECTED: return "PEER_REJECTED";
	case DAT_CONNECTION_EVENT_NON_PEER_REJECTED: return "NON_PEER_REJECTED";
	case DAT_CONNECTION_EVENT_UNREACHABLE: return "UNREACHABLE";
	case DAT_CONNECTION_EVENT_TIMED_OUT: return "TIMED_OUT";
	default: return "other";
	}
}

static void setup(struct ctx *c, char *ia_name)
{
	DAT_REGION_DESCRIPTION r;
	DAT_VLEN rlen;
	DAT_VADDR raddr;
	DAT_EP_ATTR a;

	c->async = DAT_HANDLE_NULL;
	OK(dat_ia_open(ia_name, 8, &c->async, &c->ia));
	OK(dat_pz_create(c->ia, &c->pz));
	OK(dat_evd_create(c->ia, 64, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &c->conn));
	OK(dat_evd_create(c->ia, 64, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &c->cr));
	OK(dat_evd_create(c->ia, 256, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &c->req));
	OK(dat_evd_create(c->ia, 256, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &c->rcv));
	c->buf = aligned_alloc(4096, BUF);
	if (!c->buf)
		DIE("out of memory");
	memset(c->buf, 0xa5, BUF);
	r.for_va = c->buf;
	OK(dat_lmr_create(c->ia, DAT_MEM_TYPE_VIRTUAL, r, BUF, c->pz, DAT_MEM_PRIV_ALL_FLAG,
			  DAT_VA_TYPE_VA, &c->lmr, &c->lkey, &c->rkey, &rlen, &raddr));
	rc_ep_attr(&a, BUF, RECVS * 2, WINDOW * 2, 1);
	OK(dat_ep_create(c->ia, c->pz, c->rcv, c->req, c->conn, &a, &c->ep));
	for (int i = 0; i < RECVS; i++)
		post_recv(c);
}

static DAT_EVENT_NUMBER wait_conn(struct ctx *c, DAT_TIMEOUT us)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;

	if (dat_evd_wait(c->conn, us, 1, &ev, &nmore) != DAT_SUCCESS)
		return 0;
	return ev.event_number;
}

static void connect_server(struct ctx *c, int port)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;

	OK(dat_psp_create(c->ia, (DAT_CONN_QUAL)port, c->cr, DAT_PSP_CONSUMER_FLAG, &c->psp));
	printf("LISTENING\n");
	fflush(stdout);
	OK(dat_evd_wait(c->cr, 60 * 1000000, 1, &ev, &nmore));
	if (ev.event_number != DAT_CONNECTION_REQUEST_EVENT)
		DIE("CR EVD: event 0x%x", ev.event_number);
	OK(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, c->ep, 0, NULL));
	if (wait_conn(c, 30 * 1000000) != DAT_CONNECTION_EVENT_ESTABLISHED)
		DIE("accept: not established");
}

static void connect_client(struct ctx *c, int port, const char *host)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	uint64_t t0 = now_ms(CLOCK_MONOTONIC);

	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		DIE("bad address %s", host);
	for (;;) {
		DAT_EVENT_NUMBER e;

		OK(dat_ep_connect(c->ep, (DAT_IA_ADDRESS_PTR)&sa, (DAT_CONN_QUAL)port,
				  10 * 1000000, 0, NULL, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
		e = wait_conn(c, 20 * 1000000);
		if (e == DAT_CONNECTION_EVENT_ESTABLISHED)
			return;
		if (now_ms(CLOCK_MONOTONIC) - t0 > 30000)
			DIE("connect: %s", conn_name(e));
		/* The server may not listen yet: reset and try again, with
		 * fresh receives (the reset flushed ours). */
		OK(dat_ep_reset(c->ep));
		while (c->recvs_out && now_ms(CLOCK_MONOTONIC) - t0 < 40000) {
			DAT_EVENT ev;

			if (dat_evd_dequeue(c->rcv, &ev) == DAT_SUCCESS)
				c->recvs_out--;
			else
				usleep(1000);
		}
		if (c->recvs_out)
			DIE("reset: receives never flushed");
		for (int i = 0; i < RECVS; i++)
			post_recv(c);
		usleep(100 * 1000);
	}
}

int main(int argc, char **argv)
{
	struct ctx c;
	int server, port, fds0, socks0, pool0, fds1, socks1, pool1;
	uint64_t posted = 0, t0, ev_ms = 0;
	DAT_EVENT_NUMBER ev = 0;
	int ok = 1;

	if (argc < 4 || (strcmp(argv[1], "-s") && strcmp(argv[1], "-c")) ||
	    (!strcmp(argv[1], "-c") && argc < 5)) {
		fprintf(stderr, "usage: %s -s <ia> <port> | -c <ia> <port> <server>\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	memset(&c, 0, sizeof(c));
	server = !strcmp(argv[1], "-s");
	port = atoi(argv[3]);
	count_fds(&fds0, &socks0, &pool0);
	setup(&c, argv[2]);
	if (server)
		connect_server(&c, port);
	else
		connect_client(&c, port, argv[4]);
	printf("CONNECTED\n");
	post_hello(&c);

	/* Stream until the connection ends under us. */
	for (;;) {
		DAT_EVENT e;

		if (dat_evd_dequeue(c.conn, &e) == DAT_SUCCESS) {
			ev = e.event_number;
			ev_ms = now_ms(CLOCK_REALTIME);
			break;
		}
		reap(&c, 1);
		while (c.have_peer && c.reqs_out < WINDOW && post_one(&c, posted) == DAT_SUCCESS)
			if (++posted == 64)
				printf("STREAMING\n");
		usleep(200);
	}
	printf("EVENT %s %" PRIu64 "\n", conn_name(ev), ev_ms);
	if (ev != DAT_CONNECTION_EVENT_BROKEN && ev != DAT_CONNECTION_EVENT_DISCONNECTED)
		ok = 0;
	if (posted < 64) {
		printf("FAIL: the connection ended before streaming (%" PRIu64 " posted)\n", posted);
		ok = 0;
	}

	/* Everything outstanding completes, flushed or done. */
	t0 = now_ms(CLOCK_MONOTONIC);
	while ((c.reqs_out || c.recvs_out) && now_ms(CLOCK_MONOTONIC) - t0 < DRAIN_MS) {
		if (!reap(&c, 0))
			usleep(1000);
	}
	printf("DTOS requests %" PRIu64 " receives %" PRIu64 " flushed %" PRIu64
	       " outstanding %d+%d after %" PRIu64 " ms\n", c.reqs_done, c.recvs_done, c.flushed,
	       c.reqs_out, c.recvs_out, now_ms(CLOCK_MONOTONIC) - t0);
	if (c.reqs_out || c.recvs_out) {
		printf("FAIL: DTOs never completed\n");
		ok = 0;
	}
	if (!c.flushed) {
		printf("FAIL: nothing completed flushed\n");
		ok = 0;
	}

	/* Teardown: nothing left behind. */
	OK(dat_ep_free(c.ep));
	if (c.psp)
		OK(dat_psp_free(c.psp));
	OK(dat_lmr_free(c.lmr));
	OK(dat_evd_free(c.req));
	OK(dat_evd_free(c.rcv));
	OK(dat_evd_free(c.conn));
	OK(dat_evd_free(c.cr));
	OK(dat_pz_free(c.pz));
	OK(dat_ia_close(c.ia, DAT_CLOSE_GRACEFUL_FLAG));
	free(c.buf);
	count_fds(&fds1, &socks1, &pool1);
	printf("FDS before %d (sockets %d) after %d (sockets %d); pool chunks %d -> %d\n", fds0,
	       socks0, fds1, socks1, pool0, pool1);
	/* A pool chunk is 64 MiB: a handful at most for this test's queues. */
	if (socks1 != socks0 || fds1 > fds0 + 2 || pool1 > pool0 + 4) {
		printf("FAIL: descriptors leaked\n");
		ok = 0;
	}
	printf("%s\n", ok ? "PASS" : "FAIL");
	return ok ? 0 : 1;
}
