/*
 * zd_scale_conn: N connected RC EP pairs between two processes, each
 * carrying traffic, with what they cost.
 *
 * The parent (server) forks the client; both open the IA named by -P
 * (through DAT_OVERRIDE), one request and one receive EVD for all EPs,
 * one registered buffer with a 64-byte slot per EP.  The client connects
 * its N EPs to the server's PSP, at most -b at a time; the server accepts
 * each on an EP made beforehand.  Then on every connection the client
 * writes its index into the server's slot (RDMA write) and sends it; the
 * server checks both and sends the index back, which the client checks.
 * Then both stay idle for a second (their CPU time over it is reported),
 * and the client disconnects every EP.
 *
 * Each side prints one line: connect time and rate (client), descriptors
 * before and after (per connection), resident memory (RSS and PSS from
 * /proc/self/smaps_rollup) per connected EP after the traffic, idle CPU.
 * Exit 0 only if every connection was established, every message and
 * write arrived, every disconnect completed, and no side holds more than
 * -f descriptors per connection (and, with -u, no more than -u per EP
 * made but not yet connected).  Exit 77 when the
 * descriptors the run needs exceed RLIMIT_NOFILE (with the figure).
 *
 * usage: zd_scale_conn -P <ia_name> -n <pairs> [-b <batch>] [-f <fds per pair>]
 *                      [-u <fds per unconnected EP>]
 */
#include <arpa/inet.h>
#include <dat2/udat.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rc_ep_attr.h"

#define SLOT 64
#define SEC 1000000

static const char *ia_name = "zdapl-shm";
static unsigned npairs = 2000, batch = 256, fds_per_pair = 2;
static int fds_per_unconnected = -1;  /* -u: checked when >= 0 */

#define DIE(...)                                                           \
	do {                                                               \
		fprintf(stderr, "zd_scale_conn[%d]: ", (int)getpid());     \
		fprintf(stderr, __VA_ARGS__);                              \
		fputc('\n', stderr);                                       \
		exit(1);                                                   \
	} while (0)
#define OK(call)                                                           \
	do {                                                               \
		DAT_RETURN r_ = (call);                                    \
		if (r_ != DAT_SUCCESS)                                     \
			DIE("%s: 0x%x", #call, (unsigned)r_);              \
	} while (0)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static unsigned fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	unsigned n = 0;

	if (!d)
		return 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3;  /* ., .. and the DIR's own */
}

/* kB of Rss and Pss in /proc/self/smaps_rollup. */
static void mem_kb(uint64_t *rss, uint64_t *pss)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	unsigned long long v;

	*rss = *pss = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "Rss: %llu kB", &v) == 1)
			*rss = v;
		else if (sscanf(line, "Pss: %llu kB", &v) == 1)
			*pss = v;
	}
	fclose(f);
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static void xsend(int fd, uint64_t v)
{
	if (write(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
		DIE("socketpair write: %s", strerror(errno));
}

static uint64_t xrecv(int fd)
{
	uint64_t v;
	struct pollfd p = { fd, POLLIN, 0 };

	if (poll(&p, 1, 120 * 1000) != 1 || read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
		DIE("socketpair read: the other side is gone or silent");
	return v;
}

struct side {
	DAT_IA_HANDLE ia;
	DAT_PZ_HANDLE pz;
	DAT_EVD_HANDLE async, req, rcv, conn, cr;
	DAT_EP_HANDLE *ep;
	uint8_t *buf;                   /* npairs slots: [i] receives i, is written i */
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lkey;
	DAT_RMR_CONTEXT rkey;
	unsigned fds0;
	unsigned fds_eps;               /* with the EPs made, none connected */
	uint64_t rss0, pss0;
	uint64_t rss_up, pss_up;        /* all connected, before any traffic */
};

static void side_open(struct side *s)
{
	DAT_REGION_DESCRIPTION r;
	DAT_VLEN rlen;
	DAT_VADDR raddr;
	DAT_COUNT qlen = (DAT_COUNT)npairs * 2 + 64;

	s->async = DAT_HANDLE_NULL;
	OK(dat_ia_open((DAT_NAME_PTR)ia_name, 64, &s->async, &s->ia));
	OK(dat_pz_create(s->ia, &s->pz));
	OK(dat_evd_create(s->ia, qlen, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->req));
	OK(dat_evd_create(s->ia, qlen, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->rcv));
	OK(dat_evd_create(s->ia, qlen, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &s->conn));
	OK(dat_evd_create(s->ia, qlen, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &s->cr));
	/* (aligned_alloc wants a multiple of the alignment) */
	s->buf = aligned_alloc(4096, ((size_t)npairs * SLOT * 2 + 4095) & ~(size_t)4095);
	s->ep = calloc(npairs, sizeof(*s->ep));
	if (!s->buf || !s->ep)
		DIE("out of memory");
	memset(s->buf, 0, (size_t)npairs * SLOT * 2);
	r.for_va = s->buf;
	OK(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, r, (DAT_VLEN)npairs * SLOT * 2, s->pz,
			  DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &s->lmr, &s->lkey, &s->rkey, &rlen,
			  &raddr));
	/* The baseline: everything but the EPs. */
	s->fds0 = fd_count();
	mem_kb(&s->rss0, &s->pss0);
}

/* npairs EPs, each with one receive posted into its slot. */
static void side_eps(struct side *s)
{
	DAT_EP_ATTR a;

	rc_ep_attr(&a, SLOT, 2, 4, 1);
	for (unsigned i = 0; i < npairs; i++) {
		DAT_LMR_TRIPLET t = { .lmr_context = s->lkey, .segment_length = 8,
				      .virtual_address = (DAT_VADDR)(uintptr_t)(s->buf + i * SLOT) };
		DAT_DTO_COOKIE c = { .as_64 = i };

		OK(dat_ep_create(s->ia, s->pz, s->rcv, s->req, s->conn, &a, &s->ep[i]));
		OK(dat_ep_post_recv(s->ep[i], 1, &t, c, DAT_COMPLETION_DEFAULT_FLAG));
	}
	s->fds_eps = fd_count();
	if (fds_per_unconnected >= 0 &&
	    s->fds_eps > s->fds0 + npairs * (unsigned)fds_per_unconnected + 16)
		DIE("%u descriptors for %u EPs not connected yet, more than %d each",
		    s->fds_eps - s->fds0, npairs, fds_per_unconnected);
}

static DAT_EVENT_NUMBER wait_ev(DAT_EVD_HANDLE evd, DAT_EVENT *ev)
{
	DAT_COUNT n;
	DAT_RETURN r = dat_evd_wait(evd, 60 * SEC, 1, ev, &n);

	if (r != DAT_SUCCESS)
		DIE("dat_evd_wait: 0x%x", (unsigned)r);
	return ev->event_number;
}

/* The index @i's EP completes: a receive of i, or any request. */
static void dto_wait(struct side *s, DAT_EVD_HANDLE evd, unsigned n, bool recv)
{
	DAT_EVENT ev;

	for (unsigned k = 0; k < n; k++) {
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

		if (wait_ev(evd, &ev) != DAT_DTO_COMPLETION_EVENT || d->status != DAT_DTO_SUCCESS)
			DIE("DTO event 0x%x status %d", ev.event_number, (int)d->status);
		if (recv) {
			uint64_t i = d->user_cookie.as_64, got;

			memcpy(&got, s->buf + i * SLOT, 8);
			if (i >= npairs || got != i || d->transfered_length != 8)
				DIE("receive %" PRIu64 " brought %" PRIu64, i, got);
		}
	}
}

static void report(const char *side, struct side *s, double connect_s, double idle_cpu)
{
	uint64_t rss, pss;
	unsigned fds = fd_count();

	/* -f is the device's promise, checked: a connection that costs
	 * more descriptors than it says fails the run. */
	if (fds > s->fds0 + npairs * fds_per_pair + 16)
		DIE("%s: %u descriptors for %u connections, more than %u each", side,
		    fds - s->fds0, npairs, fds_per_pair);

	mem_kb(&rss, &pss);
	printf("zd_scale_conn: %s %s pairs=%u", ia_name, side, npairs);
	if (connect_s > 0)
		printf(" connect_s=%.3f conn_per_s=%.0f", connect_s, npairs / connect_s);
	printf(" fds_before=%u fds_unconnected_per_ep=%.2f fds_after=%u fds_per_conn=%.2f "
	       "connected: rss_per_ep_B=%.0f "
	       "pss_per_ep_B=%.0f after traffic: rss_per_ep_B=%.0f pss_per_ep_B=%.0f "
	       "idle_cpu_ms=%.1f\n",
	       s->fds0, (double)(s->fds_eps - s->fds0) / npairs, fds,
	       (double)(fds - s->fds0) / npairs,
	       (double)(s->rss_up - s->rss0) * 1024 / npairs,
	       (double)(s->pss_up - s->pss0) * 1024 / npairs,
	       (double)(rss - s->rss0) * 1024 / npairs, (double)(pss - s->pss0) * 1024 / npairs,
	       idle_cpu * 1000);
	fflush(stdout);
}

static double idle_second(void)
{
	double c0 = cpu_s();

	usleep(1000 * 1000);
	return cpu_s() - c0;
}

static void disconnect_wait(struct side *s, bool initiate)
{
	DAT_EVENT ev;

	if (initiate)
		for (unsigned i = 0; i < npairs; i++)
			OK(dat_ep_disconnect(s->ep[i], DAT_CLOSE_GRACEFUL_FLAG));
	for (unsigned i = 0; i < npairs; i++)
		if (wait_ev(s->conn, &ev) != DAT_CONNECTION_EVENT_DISCONNECTED)
			DIE("disconnect %u: event 0x%x", i, ev.event_number);
}

static void side_close(struct side *s)
{
	for (unsigned i = 0; i < npairs; i++)
		OK(dat_ep_free(s->ep[i]));
	OK(dat_ia_close(s->ia, DAT_CLOSE_ABRUPT_FLAG));
	free(s->ep);
	free(s->buf);
}

/* Seconds since the last call, on stderr with @what (ZD_SCALE_PHASES=1). */
static void phase(const char *side, const char *what)
{
	static double last;
	double t = now_s();

	if (last && getenv("ZD_SCALE_PHASES"))
		fprintf(stderr, "zd_scale_conn: %s %s %.3f s\n", side, what, t - last);
	last = t;
}

static int client(int fd)
{
	struct side s;
	DAT_CONN_QUAL qual = xrecv(fd);
	uint64_t raddr = xrecv(fd);
	DAT_RMR_CONTEXT rkey = (DAT_RMR_CONTEXT)xrecv(fd);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = (in_addr_t)xrecv(fd) };
	unsigned sent = 0, up = 0;
	double t0, t1, idle;
	DAT_EVENT ev;

	phase("client", "start");
	side_open(&s);
	side_eps(&s);
	phase("client", "open + EPs");
	t0 = now_s();
	while (up < npairs) {
		while (sent < npairs && sent - up < batch)
			OK(dat_ep_connect(s.ep[sent++], (DAT_IA_ADDRESS_PTR)&sa, qual, 30 * SEC, 0,
					  NULL, DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
		if (wait_ev(s.conn, &ev) != DAT_CONNECTION_EVENT_ESTABLISHED)
			DIE("connection %u: event 0x%x", up, ev.event_number);
		up++;
	}
	t1 = now_s();
	mem_kb(&s.rss_up, &s.pss_up);
	/* Traffic: index i into the server's slot i, by RDMA write and by send. */
	for (unsigned i = 0; i < npairs; i++) {
		uint64_t v = i;
		DAT_LMR_TRIPLET t = { .lmr_context = s.lkey, .segment_length = 8,
				      .virtual_address = (DAT_VADDR)(uintptr_t)(s.buf +
									  (npairs + i) * SLOT) };
		DAT_RMR_TRIPLET r = { .rmr_context = rkey, .segment_length = 8,
				      .virtual_address = raddr + (uint64_t)(npairs + i) * SLOT };
		DAT_DTO_COOKIE c = { .as_64 = i };

		memcpy(s.buf + (npairs + i) * SLOT, &v, 8);
		OK(dat_ep_post_rdma_write(s.ep[i], 1, &t, c, &r, DAT_COMPLETION_DEFAULT_FLAG));
		OK(dat_ep_post_send(s.ep[i], 1, &t, c, DAT_COMPLETION_DEFAULT_FLAG));
	}
	dto_wait(&s, s.req, 2 * npairs, false);
	dto_wait(&s, s.rcv, npairs, true);  /* the server's answers */
	phase("client", "connect + traffic");
	xsend(fd, 1);
	idle = idle_second();
	report("client", &s, t1 - t0, idle);
	xrecv(fd);
	phase("client", "idle");
	disconnect_wait(&s, true);
	phase("client", "disconnect");
	side_close(&s);
	phase("client", "free + close");
	return 0;
}

static int server(int fd, pid_t child)
{
	struct side s;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL qual;
	unsigned up = 0;
	double idle;
	DAT_EVENT ev;
	int st;

	side_open(&s);
	side_eps(&s);
	OK(dat_psp_create_any(s.ia, &qual, s.cr, DAT_PSP_CONSUMER_FLAG, &psp));
	xsend(fd, qual);
	xsend(fd, (uint64_t)(uintptr_t)s.buf);
	xsend(fd, s.rkey);
	{
		DAT_IA_ATTR ia_attr;
		DAT_EVD_HANDLE async;

		/* Where its CM listens (the IA's address: a tcp IA on an
		 * interface listens there only). */
		OK(dat_ia_query(s.ia, &async, DAT_IA_ALL, &ia_attr, 0, NULL));
		xsend(fd, ((struct sockaddr_in *)ia_attr.ia_address_ptr)->sin_addr.s_addr);
	}
	while (up < npairs) {
		const DAT_CR_ARRIVAL_EVENT_DATA *d = &ev.event_data.cr_arrival_event_data;

		if (wait_ev(s.cr, &ev) != DAT_CONNECTION_REQUEST_EVENT)
			DIE("CR %u: event 0x%x", up, ev.event_number);
		OK(dat_cr_accept(d->cr_handle, s.ep[up], 0, NULL));
		up++;
	}
	for (unsigned i = 0; i < npairs; i++)
		if (wait_ev(s.conn, &ev) != DAT_CONNECTION_EVENT_ESTABLISHED)
			DIE("accepted %u: event 0x%x", i, ev.event_number);
	mem_kb(&s.rss_up, &s.pss_up);
	/* Each EP's receive brings an index; its write landed before it. */
	for (unsigned k = 0; k < npairs; k++) {
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
		uint64_t i, w;

		if (wait_ev(s.rcv, &ev) != DAT_DTO_COMPLETION_EVENT || d->status != DAT_DTO_SUCCESS)
			DIE("receive: event 0x%x status %d", ev.event_number, (int)d->status);
		i = d->user_cookie.as_64;
		memcpy(&w, s.buf + (npairs + i) * SLOT, 8);
		if (i >= npairs || memcmp(s.buf + i * SLOT, &i, 8) || w != i)
			DIE("EP %" PRIu64 ": message or write missing", i);
		{
			DAT_LMR_TRIPLET t = { .lmr_context = s.lkey, .segment_length = 8,
					      .virtual_address = (DAT_VADDR)(uintptr_t)(s.buf + i * SLOT) };

			OK(dat_ep_post_send(s.ep[i], 1, &t, d->user_cookie,
					    DAT_COMPLETION_DEFAULT_FLAG));
		}
	}
	dto_wait(&s, s.req, npairs, false);
	xrecv(fd);
	idle = idle_second();
	report("server", &s, 0, idle);
	xsend(fd, 1);
	disconnect_wait(&s, false);
	phase("server", "up to disconnected");
	OK(dat_psp_free(psp));
	side_close(&s);
	phase("server", "free + close");
	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		DIE("the client failed");
	return 0;
}

int main(int argc, char **argv)
{
	struct rlimit rl;
	int opt, sv[2];
	pid_t pid;

	while ((opt = getopt(argc, argv, "P:n:b:f:u:")) != -1) {
		switch (opt) {
		case 'P': ia_name = optarg; break;
		case 'n': npairs = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'b': batch = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'f': fds_per_pair = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'u': fds_per_unconnected = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s -P ia_name -n pairs [-b batch] [-f fds per pair]"
				" [-u fds per unconnected EP]\n", argv[0]);
			return 2;
		}
	}
	if (!npairs || !batch)
		return 2;
	/* Raise the soft limit to the hard one: the run needs its descriptors. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    (uint64_t)npairs * fds_per_pair + 128 > rl.rlim_cur) {
		printf("zd_scale_conn: %u pairs on %s need ~%u descriptors per process, "
		       "RLIMIT_NOFILE is %llu: skipped\n", npairs, ia_name, npairs * fds_per_pair + 128,
		       (unsigned long long)rl.rlim_cur);
		return 77;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		DIE("socketpair: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		DIE("fork: %s", strerror(errno));
	if (pid == 0) {
		close(sv[0]);
		return client(sv[1]);
	}
	close(sv[1]);
	return server(sv[0], pid);
}
