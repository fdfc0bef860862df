/*
 * Exhausted resources (issue 15): a process that runs out of descriptors,
 * address space (mmap and the registered pool's growth), memfd size, locked
 * memory or disk gets DAT_INSUFFICIENT_RESOURCES and one "zdapl:" line on
 * stderr for every creation that fails, never a crash or a hang, and goes
 * on: once it frees objects or raises its limit, the same creation
 * succeeds and a new connection carries data.
 *
 * usage: exhaust <ia> nofile|as|fsize|memlock|fulldisk
 *
 * Two processes through libdat2: a server with no limits (accepts every
 * connection request and echoes each connection's one message) and this
 * process, the victim, which lowers its own soft limit and then creates
 * objects of one kind after another until one fails:
 *  - nofile: RLIMIT_NOFILE a few descriptors above those open: IAs, EVDs,
 *    EPs, LMRs of malloc'd memory, PSPs and connections until one fails;
 *    the failed call leaves no descriptor behind;
 *  - as: RLIMIT_AS a little above the address space in use: the pool's
 *    growth (zdapl_mem_alloc), registrations of malloc'd memory, EVDs, EPs
 *    and connections (skipped under ASan, whose shadow reserves terabytes);
 *  - fsize: RLIMIT_FSIZE small (SIGXFSZ ignored): every memfd larger than
 *    it cannot be sized, the memfd failure a full tmpfs or a memory cgroup
 *    gives; IAs, EVDs, EPs, LMRs, the pool and connections;
 *  - memlock: RLIMIT_MEMLOCK 0: nothing of the software devices locks or
 *    pins memory (VmLck and VmPin stay 0), so everything works;
 *  - fulldisk: /tmp, /var/tmp, /dev/shm and the working directory on full
 *    file systems (a private mount namespace): no file is created, so
 *    everything works, and no descriptor of the process names a file.
 * Each kind is then recovered twice: the limit raised, the failed creation
 * succeeds; the limit back and every object of the kind freed, the process
 * is back at its descriptors and creates one again (a connection carries
 * data).  Exit 0 if all held, 77 if the case cannot run here.
 */
#include <dat2/udat.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "dat_wait.h"
#include "proc_status.h"
#include "rc_ep_attr.h"

#define MSG 64                  /* one message each way per connection */
#define SLOTS 256               /* message slots of a buffer */
#define BUF (SLOTS * 256)
#define CAP 64                  /* objects of a kind made at most */
#define LMR_SIZE (256 << 10)    /* each malloc'd registration */

#define CHK(cond)                                                             \
	do {                                                                  \
		if (!(cond))                                                  \
			failed(__LINE__, #cond);                              \
	} while (0)

static FILE *out;                       /* the real stderr (ours is captured) */
static int zdapl_lines(void);

static void __attribute__((noreturn)) failed(int line, const char *cond)
{
	if (out != stderr)
		zdapl_lines();          /* what the library said last */
	fprintf(out, "exhaust: %s:%d: %s failed\n", __FILE__, line, cond);
	exit(1);
}

/* ---- our stderr: a pipe we drain, to see the library's lines ---- */

static int err_rd;                      /* the pipe's read end */
static char last_line[512];             /* the last "zdapl:" line seen */

static void capture_stderr(void)
{
	int p[2];

	out = fdopen(dup(2), "w");
	CHK(out && pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
	setvbuf(out, NULL, _IOLBF, 0);
	fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
	CHK(dup2(p[1], 2) == 2);
	close(p[1]);
	err_rd = p[0];
}

/* "zdapl:" lines written since the last call (copied to the real stderr). */
static int zdapl_lines(void)
{
	static char pend[4096];
	static size_t n;
	int lines = 0;
	ssize_t got;

	while ((got = read(err_rd, pend + n, sizeof(pend) - 1 - n)) > 0) {
		char *s = pend, *nl;

		n += (size_t)got;
		pend[n] = 0;
		while ((nl = strchr(s, '\n'))) {
			*nl = 0;
			fprintf(out, "  | %s\n", s);
			if (!strncmp(s, "zdapl: ", 7)) {
				lines++;
				snprintf(last_line, sizeof(last_line), "%.500s", s);
			}
			s = nl + 1;
		}
		n -= (size_t)(s - pend);
		memmove(pend, s, n);
		if (n == sizeof(pend) - 1)
			n = 0;          /* a line longer than the buffer: drop it */
	}
	return lines;
}

/* ---- this process's resources ---- */

/* Open descriptors (without opening one: at the limit that would fail). */
static int count_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < 4096; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

static int limit_res = -1;              /* the case's RLIMIT_*, or none */
static int nofile_spare = 12;           /* descriptors left under RLIMIT_NOFILE */
static bool limit_per_object;           /* it bounds each object, not their sum */
static rlim_t limit_low;                /* its lowered soft limit */

static void set_soft(rlim_t v)
{
	struct rlimit r;

	if (limit_res < 0)
		return;
	CHK(getrlimit(limit_res, &r) == 0);
	r.rlim_cur = v;
	CHK(setrlimit(limit_res, &r) == 0);
}

/* The soft limit a little above what the process uses now. */
static void limit_lower(void)
{
	switch (limit_res) {
	case RLIMIT_NOFILE: {
		/* Free numbers below the limit (those open above it stay). */
		int fd = 0;

		for (int spare = 0; spare < nofile_spare; fd++)
			spare += fcntl(fd, F_GETFD) < 0;
		limit_low = (rlim_t)fd;
		break;
	}
	case RLIMIT_AS:
		limit_low = (rlim_t)proc_status("VmSize") * 1024 + (24 << 20);
		break;
	default:
		break;          /* the case set it */
	}
	set_soft(limit_low);
}

static void limit_raise(void)
{
	struct rlimit r;

	if (limit_res < 0)
		return;
	CHK(getrlimit(limit_res, &r) == 0);
	set_soft(limit_res == RLIMIT_NOFILE && limit_low + 64 < r.rlim_max ? limit_low + 64
									   : r.rlim_max);
}

/* ---- the server: accepts every request, echoes each connection's message ---- */

struct node {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, cr, conn, req, rcv;
	DAT_PZ_HANDLE pz;
	uint8_t *buf;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lkey;
};

static DAT_RETURN node_open(struct node *n, const char *ia)
{
	DAT_REGION_DESCRIPTION r;
	DAT_RETURN ret;

	memset(n, 0, sizeof(*n));
	ret = dat_ia_open((DAT_NAME_PTR)ia, 8, &n->async, &n->ia);
	if (ret != DAT_SUCCESS)
		return ret;
	CHK(dat_pz_create(n->ia, &n->pz) == DAT_SUCCESS);
	CHK(dat_evd_create(n->ia, 1024, NULL, DAT_EVD_CR_FLAG, &n->cr) == DAT_SUCCESS);
	CHK(dat_evd_create(n->ia, 1024, NULL, DAT_EVD_CONNECTION_FLAG, &n->conn) == DAT_SUCCESS);
	CHK(dat_evd_create(n->ia, 1024, NULL, DAT_EVD_DTO_FLAG, &n->req) == DAT_SUCCESS);
	CHK(dat_evd_create(n->ia, 1024, NULL, DAT_EVD_DTO_FLAG, &n->rcv) == DAT_SUCCESS);
	n->buf = aligned_alloc(4096, BUF);
	CHK(n->buf);
	memset(n->buf, 0, BUF);
	r.for_va = n->buf;
	CHK(dat_lmr_create(n->ia, DAT_MEM_TYPE_VIRTUAL, r, BUF, n->pz, DAT_MEM_PRIV_ALL_FLAG,
			   DAT_VA_TYPE_VA, &n->lmr, &n->lkey, NULL, NULL, NULL) == DAT_SUCCESS);
	return DAT_SUCCESS;
}

static DAT_LMR_TRIPLET slot(struct node *n, unsigned i)
{
	DAT_LMR_TRIPLET t = {
		.lmr_context = n->lkey,
		.virtual_address = (DAT_VADDR)(uintptr_t)(n->buf + (i % SLOTS) * 256),
		.segment_length = MSG,
	};
	return t;
}

static DAT_RETURN ep_new(struct node *n, unsigned i, DAT_EP_HANDLE *ep)
{
	DAT_LMR_TRIPLET t = slot(n, i);
	DAT_DTO_COOKIE c = { .as_64 = i };
	DAT_EP_ATTR a;
	DAT_RETURN ret;

	rc_ep_attr(&a, 4096, 4, 4, 1);
	ret = dat_ep_create(n->ia, n->pz, n->rcv, n->req, n->conn, &a, ep);
	if (ret == DAT_SUCCESS)
		CHK(dat_ep_post_recv(*ep, 1, &t, c, DAT_COMPLETION_DEFAULT_FLAG) == DAT_SUCCESS);
	return ret;
}

/* Echoes a receive can ask for before its EP is CONNECTED (on tcp the
 * message may come before the server's ESTABLISHED): sent once it is. */
static struct echo {
	DAT_EP_HANDLE ep;
	DAT_DTO_COOKIE cookie;
} echo_wait[SLOTS];
static unsigned echo_waiting;

static bool echo(struct node *n, DAT_EP_HANDLE ep, DAT_DTO_COOKIE cookie)
{
	DAT_LMR_TRIPLET t = slot(n, (unsigned)cookie.as_64);

	return dat_ep_post_send(ep, 1, &t, cookie, DAT_COMPLETION_DEFAULT_FLAG) == DAT_SUCCESS;
}

static void serve_events(struct node *n, unsigned *accepted)
{
	DAT_EVENT ev;

	while (dat_evd_dequeue(n->cr, &ev) == DAT_SUCCESS) {
		DAT_CR_HANDLE cr = ev.event_data.cr_arrival_event_data.cr_handle;
		DAT_EP_HANDLE ep;

		if (ep_new(n, *accepted, &ep) != DAT_SUCCESS) {
			dat_cr_reject(cr, 0, NULL);
			continue;
		}
		if (dat_cr_accept(cr, ep, 0, NULL) == DAT_SUCCESS)
			++*accepted;
		else
			dat_ep_free(ep);
	}
	while (dat_evd_dequeue(n->rcv, &ev) == DAT_SUCCESS) {
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

		if (d->status != DAT_DTO_SUCCESS && d->status != DAT_DTO_ERR_FLUSHED)
			fprintf(out, "server: receive %llu completed with status %d\n",
				(unsigned long long)d->user_cookie.as_64, d->status);
		if (d->status == DAT_DTO_SUCCESS && !echo(n, d->ep_handle, d->user_cookie) &&
		    echo_waiting < SLOTS)
			echo_wait[echo_waiting++] = (struct echo){ d->ep_handle, d->user_cookie };
	}
	while (dat_evd_dequeue(n->conn, &ev) == DAT_SUCCESS) {
		DAT_EP_HANDLE ep = ev.event_data.connect_event_data.ep_handle;

		for (unsigned i = 0; i < echo_waiting; i++)
			if (echo_wait[i].ep == ep) {
				if (ev.event_number == DAT_CONNECTION_EVENT_ESTABLISHED)
					echo(n, ep, echo_wait[i].cookie);
				echo_wait[i--] = echo_wait[--echo_waiting];
			}
		if (ev.event_number != DAT_CONNECTION_EVENT_ESTABLISHED)
			dat_ep_free(ep);
	}
	while (dat_evd_dequeue(n->req, &ev) == DAT_SUCCESS)
		if (ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS &&
		    ev.event_data.dto_completion_event_data.status != DAT_DTO_ERR_FLUSHED)
			fprintf(out, "server: echo %llu completed with status %d\n",
				(unsigned long long)ev.event_data.dto_completion_event_data.user_cookie.as_64,
				ev.event_data.dto_completion_event_data.status);
}

/* Serves until its parent's word (or its end) on @fd; 0 if it ran. */
static int server(const char *ia, int fd)
{
	struct node n;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
	unsigned accepted = 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };

	alarm(120);
	CHK(node_open(&n, ia) == DAT_SUCCESS);
	CHK(dat_psp_create_any(n.ia, &port, n.cr, DAT_PSP_CONSUMER_FLAG, &psp) == DAT_SUCCESS);
	CHK(write(fd, &port, sizeof(port)) == sizeof(port));
	while (poll(&p, 1, 0) == 0) {
		serve_events(&n, &accepted);
		usleep(200);
	}
	fprintf(out, "server: %u connections accepted\n", accepted);
	CHK(dat_ia_close(n.ia, DAT_CLOSE_ABRUPT_FLAG) == DAT_SUCCESS);
	return 0;
}

/* ---- the victim's objects ---- */

enum kind { K_IA, K_EVD, K_EP, K_LMR, K_PSP, K_POOL, K_CONN, K_KINDS };
static const char *const kind_name[] = { "IA", "EVD", "EP", "LMR", "PSP", "pool", "connection" };

static struct node v;                   /* the victim's node */
static const char *ia_name;
static DAT_CONN_QUAL server_port;
static uint8_t *lmr_mem;                /* CAP + 1 malloc'd regions of LMR_SIZE */
static unsigned seq;                    /* connections made (message slots) */

#define ASYNC_FAILED ((DAT_RETURN)1)    /* a connection failed by event */

/* Connects a new EP to the server and checks the echo of one message. */
static DAT_RETURN conn_new(DAT_EP_HANDLE *ep)
{
	unsigned i = ++seq;
	DAT_LMR_TRIPLET t = slot(&v, i + SLOTS / 2);
	DAT_DTO_COOKIE c = { .as_64 = i };
	struct sockaddr_in sa;
	DAT_EVENT ev;
	DAT_RETURN ret;

	ret = ep_new(&v, i, ep);
	if (ret != DAT_SUCCESS)
		return ret;
	ret = dat_ep_connect(*ep, loopback(&sa), server_port, 5 * SEC, 0, NULL,
			     DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG);
	if (ret != DAT_SUCCESS) {
		CHK(dat_ep_free(*ep) == DAT_SUCCESS);
		return ret;
	}
	if (wait_ev(v.conn, 10 * SEC, &ev) != DAT_CONNECTION_EVENT_ESTABLISHED) {
		fprintf(out, "connection %u: event %#x\n", i, ev.event_number);
		CHK(ev.event_number != 0);      /* no hang */
		CHK(dat_ep_free(*ep) == DAT_SUCCESS);
		return ASYNC_FAILED;
	}
	for (int b = 0; b < MSG; b++)
		v.buf[(i + SLOTS / 2) % SLOTS * 256 + b] = (uint8_t)(i * 7 + b);
	CHK(dat_ep_post_send(*ep, 1, &t, c, DAT_COMPLETION_DEFAULT_FLAG) == DAT_SUCCESS);
	CHK(wait_ev(v.req, 10 * SEC, &ev) == DAT_DTO_COMPLETION_EVENT);
	if (ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS)
		fprintf(out, "connection %u: send status %d\n", i,
			ev.event_data.dto_completion_event_data.status);
	CHK(ev.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS);
	/* (Receives of connections that failed before come flushed.) */
	do
		CHK(wait_ev(v.rcv, 10 * SEC, &ev) == DAT_DTO_COMPLETION_EVENT);
	while (ev.event_data.dto_completion_event_data.user_cookie.as_64 != i &&
	       ev.event_data.dto_completion_event_data.status == DAT_DTO_ERR_FLUSHED);
	if (ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS)
		fprintf(out, "connection %u: receive %llu status %d\n", i,
			(unsigned long long)ev.event_data.dto_completion_event_data.user_cookie.as_64,
			ev.event_data.dto_completion_event_data.status);
	CHK(ev.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS);
	CHK(ev.event_data.dto_completion_event_data.user_cookie.as_64 == i);
	for (int b = 0; b < MSG; b++)
		CHK(v.buf[i % SLOTS * 256 + b] == (uint8_t)(i * 7 + b));
	return DAT_SUCCESS;
}

/* Connections that ended before their graceful disconnect. */
static DAT_EP_HANDLE ended[CAP + 1];
static unsigned nended;

static void conn_free(DAT_EP_HANDLE ep)
{
	DAT_EVENT ev;

	for (unsigned i = 0; i < nended; i++)
		if (ended[i] == ep) {
			ended[i] = ended[--nended];
			CHK(dat_ep_free(ep) == DAT_SUCCESS);
			return;
		}
	CHK(dat_ep_disconnect(ep, DAT_CLOSE_GRACEFUL_FLAG) == DAT_SUCCESS);
	for (;;) {
		CHK(wait_ev(v.conn, 10 * SEC, &ev) != 0);
		if (ev.event_data.connect_event_data.ep_handle == ep)
			break;
		/* Open finding (README, Exhaustion): on zdapl-tcp an idle
		 * connection among several, after the descriptor limit was
		 * reached and lifted, now and then breaks by itself. */
		fprintf(out, "another connection: event %#x\n", ev.event_number);
		CHK(ev.event_number == DAT_CONNECTION_EVENT_BROKEN && nended <= CAP);
		ended[nended++] = ev.event_data.connect_event_data.ep_handle;
	}
	CHK(ev.event_number == DAT_CONNECTION_EVENT_DISCONNECTED);
	CHK(dat_ep_free(ep) == DAT_SUCCESS);
}

/* The @i-th object of kind @k (a handle, or the memory for K_POOL). */
static DAT_RETURN make(enum kind k, unsigned i, void **h)
{
	DAT_REGION_DESCRIPTION r;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_CONN_QUAL q;

	switch (k) {
	case K_IA:
		return dat_ia_open((DAT_NAME_PTR)ia_name, 8, &async, (DAT_IA_HANDLE *)h);
	case K_EVD:
		return dat_evd_create(v.ia, 256, NULL, DAT_EVD_DTO_FLAG, (DAT_EVD_HANDLE *)h);
	case K_EP:
		return dat_ep_create(v.ia, v.pz, v.rcv, v.req, v.conn, NULL, (DAT_EP_HANDLE *)h);
	case K_LMR:
		r.for_va = lmr_mem + (size_t)i * LMR_SIZE;
		return dat_lmr_create(v.ia, DAT_MEM_TYPE_VIRTUAL, r, LMR_SIZE, v.pz,
				      DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, (DAT_LMR_HANDLE *)h,
				      &(DAT_LMR_CONTEXT){ 0 }, NULL, NULL, NULL);
	case K_PSP:
		return dat_psp_create_any(v.ia, &q, v.cr, DAT_PSP_CONSUMER_FLAG,
					  (DAT_PSP_HANDLE *)h);
	case K_POOL: {
		/* The extension, as an application finds it (libdat2 loads
		 * the provider RTLD_GLOBAL). */
		static void *(*mem_alloc)(size_t);

		if (!mem_alloc)
			*(void **)&mem_alloc = dlsym(RTLD_DEFAULT, "zdapl_mem_alloc");
		CHK(mem_alloc);
		*h = mem_alloc(8 << 20);
		return *h ? DAT_SUCCESS : (DAT_RETURN)(DAT_CLASS_ERROR | DAT_INSUFFICIENT_RESOURCES | DAT_RESOURCE_MEMORY);
	}
	case K_CONN:
		return conn_new((DAT_EP_HANDLE *)h);
	default:
		return DAT_NOT_IMPLEMENTED;
	}
}

static void unmake(enum kind k, void *h)
{
	static void (*mem_free)(void *);

	switch (k) {
	case K_IA:
		CHK(dat_ia_close(h, DAT_CLOSE_ABRUPT_FLAG) == DAT_SUCCESS);
		break;
	case K_EVD:
		CHK(dat_evd_free(h) == DAT_SUCCESS);
		break;
	case K_EP:
		CHK(dat_ep_free(h) == DAT_SUCCESS);
		break;
	case K_LMR:
		CHK(dat_lmr_free(h) == DAT_SUCCESS);
		break;
	case K_PSP:
		CHK(dat_psp_free(h) == DAT_SUCCESS);
		break;
	case K_POOL:
		if (!mem_free)
			*(void **)&mem_free = dlsym(RTLD_DEFAULT, "zdapl_mem_free");
		mem_free(h);
		break;
	case K_CONN:
		conn_free(h);
		break;
	default:
		break;
	}
}

/* Descriptors back to @want within a second (a connection's end is
 * finished by the CM thread). */
static bool fds_settle(int want)
{
	for (int i = 0; i < 100; i++) {
		if (count_fds() == want)
			return true;
		usleep(10000);
	}
	return false;
}

/*
 * Objects of kind @k under the lowered limit until one fails: the DAT
 * error, one "zdapl:" line, no descriptor left by the failed call; then
 * the limit raised, the creation succeeds; the limit back, all freed, the
 * descriptors are back and one more can be made.  The number made before
 * the failure, or -1 if CAP were made without one (the kind does not
 * consume what the case limits).
 */
static void (*at_peak)(void);           /* the case's look at the process */

static int exhaust(enum kind k)
{
	void *h[CAP + 1];
	int n = 0, fds0 = count_fds(), fds;
	DAT_RETURN ret;

	zdapl_lines();
	limit_lower();
	for (;;) {
		fds = count_fds();
		ret = make(k, (unsigned)n, &h[n]);
		if (ret != DAT_SUCCESS)
			break;
		if (++n == CAP)
			break;
	}
	if (at_peak)
		at_peak();
	if (ret == DAT_SUCCESS) {
		limit_raise();
		fprintf(out, "%s: %d made, none failed (%d descriptors, limit %lu)\n", kind_name[k], n,
			count_fds(), (unsigned long)limit_low);
		while (n)
			unmake(k, h[--n]);
		CHK(zdapl_lines() == 0);
		CHK(k == K_POOL || fds_settle(fds0));
		return -1;
	}
	fprintf(out, "%s: %d made, then %#x%s\n", kind_name[k], n, ret,
		ret == ASYNC_FAILED ? " (connection event)" : "");
	CHK(ret == ASYNC_FAILED || DAT_GET_TYPE(ret) == DAT_INSUFFICIENT_RESOURCES);
	CHK(zdapl_lines() >= 1);
	fprintf(out, "%s: said \"%s\"\n", kind_name[k], last_line);
	CHK(fds_settle(fds));

	/* Recovery 1: the limit raised, the same creation succeeds. */
	limit_raise();
	ret = make(k, (unsigned)n, &h[n]);
	if (ret != DAT_SUCCESS)
		fprintf(out, "%s: %#x after the limit was raised\n", kind_name[k], ret);
	CHK(ret == DAT_SUCCESS);
	n++;
	/* Recovery 2: under the limit again, once everything is freed (the
	 * pool keeps its chunks, as malloc keeps its arenas). */
	if (!limit_per_object)
		limit_lower();
	while (n)
		unmake(k, h[--n]);
	CHK(k == K_POOL || fds_settle(fds0));
	if (!limit_per_object) {
		CHK(make(k, 0, &h[0]) == DAT_SUCCESS);
		unmake(k, h[0]);
		limit_raise();
	}
	zdapl_lines();
	return n;
}

/* After any case, under no limit: a connection carries data. */
static void still_works(void)
{
	DAT_EP_HANDLE ep;

	CHK(conn_new(&ep) == DAT_SUCCESS);
	conn_free(ep);
}

/* ---- the cases ---- */

static int case_limits(const enum kind *kinds, int n)
{
	int failed_some = 0;

	for (int i = 0; i < n; i++) {
		int made = exhaust(kinds[i]);

		failed_some += made >= 0;
		still_works();
	}
	return failed_some;
}

static int case_nofile(void)
{
	static const enum kind kinds[] = { K_IA, K_EVD, K_EP, K_LMR, K_PSP, K_CONN };

	limit_res = RLIMIT_NOFILE;
	CHK(case_limits(kinds, 6) > 0);
	/* A connection takes several descriptors: run out at each. */
	for (nofile_spare = 13; nofile_spare < 16; nofile_spare++) {
		CHK(exhaust(K_CONN) >= 0);
		still_works();
	}
	return 0;
}

static int case_as(void)
{
	static const enum kind kinds[] = { K_POOL, K_LMR, K_EVD, K_EP, K_IA, K_CONN };

	limit_res = RLIMIT_AS;
	CHK(case_limits(kinds, 6) > 0);
	return 0;
}

static int prepare_as(void)
{
#if defined(__SANITIZE_ADDRESS__)
	fprintf(out, "skip: AddressSanitizer reserves terabytes of shadow: RLIMIT_AS means nothing\n");
	return 77;
#endif
	return 0;
}

static int case_fsize(void)
{
	static const enum kind kinds[] = { K_IA, K_EVD, K_EP, K_LMR, K_POOL, K_CONN };

	signal(SIGXFSZ, SIG_IGN);
	limit_res = RLIMIT_FSIZE;
	limit_low = 4096;
	limit_per_object = true;
	case_limits(kinds, 6);
	return 0;
}

static int case_memlock(void)
{
	static const enum kind kinds[] = { K_IA, K_EVD, K_EP, K_LMR, K_POOL, K_CONN };

	limit_res = RLIMIT_MEMLOCK;
	limit_low = 0;
	CHK(case_limits(kinds, 6) == 0);
	fprintf(out, "VmLck %ld kB, VmPin %ld kB\n", proc_status("VmLck"), proc_status("VmPin"));
	CHK(proc_status("VmLck") == 0 && proc_status("VmPin") == 0);
	return 0;
}

static bool fd_ours[4096];              /* open before the first IA */

/* Every descriptor the process opened since its start names a socket,
 * pipe, anonymous inode, memfd or /dev/null: no file on any disk. */
static void no_files(void)
{
	static const char *const ok[] = { "socket:", "pipe:", "anon_inode:", "/memfd:",
					  "/dev/null", "/proc/" };
	char path[64], to[256];

	for (int fd = 0; fd < 4096; fd++) {
		ssize_t n;
		bool fine = false;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n = readlink(path, to, sizeof(to) - 1);
		if (n < 0 || fd_ours[fd])
			continue;
		to[n] = 0;
		for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
			fine |= !strncmp(to, ok[i], strlen(ok[i]));
		if (!fine)
			fprintf(out, "descriptor %d is %s\n", fd, to);
		CHK(fine);
	}
}

/* A full file system over @dir (this process's mount namespace only). */
static void fill_over(const char *dir)
{
	char path[256], block[4096];
	int fd;

	CHK(mount("exhaust", dir, "tmpfs", 0, "size=64k") == 0);
	snprintf(path, sizeof(path), "%s/filler", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	CHK(fd >= 0);
	memset(block, 1, sizeof(block));
	while (write(fd, block, sizeof(block)) > 0)
		;
	CHK(errno == ENOSPC);
	close(fd);
}

/* Whether @dir holds the build tree this test runs from (its dat.conf and
 * the library it names): a full file system over it would hide them. */
static bool holds_build_tree(const char *dir)
{
	const char *conf = getenv("DAT_OVERRIDE");
	char real[4096];
	size_t n = strlen(dir);

	return conf && realpath(conf, real) && strncmp(real, dir, n) == 0 && real[n] == '/';
}

/* Before any IA (a mount namespace cannot be entered by a process with
 * threads): /tmp, /var/tmp, /dev/shm and the working directory full (but
 * for one that holds the build tree, which stays as it is). */
static int prepare_fulldisk(void)
{
	static const char *const dirs[] = { "/var/tmp", "/dev/shm", "/tmp" };
	const char *cwd = NULL;

	if (unshare(CLONE_NEWNS) != 0) {
		fprintf(out, "skip: no private mount namespace here (%s)\n", strerror(errno));
		return 77;
	}
	CHK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0);
	for (unsigned i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		if (holds_build_tree(dirs[i])) {
			fprintf(out, "%s holds the build tree: left as it is\n", dirs[i]);
			continue;
		}
		fill_over(dirs[i]);
		cwd = dirs[i];
	}
	CHK(cwd && chdir(cwd) == 0);
	return 0;
}

static int case_fulldisk(void)
{
	static const enum kind kinds[] = { K_IA, K_EVD, K_EP, K_LMR, K_PSP, K_POOL, K_CONN };

	at_peak = no_files;
	CHK(case_limits(kinds, 7) == 0);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*prepare)(void);
		int (*run)(void);
	} cases[] = {
		{ "nofile", NULL, case_nofile }, { "as", prepare_as, case_as },
		{ "fsize", NULL, case_fsize }, { "memlock", NULL, case_memlock },
		{ "fulldisk", prepare_fulldisk, case_fulldisk },
	};
	int sv[2], st, rc = -1, which = -1;
	pid_t pid;

	out = stderr;
	if (argc != 3) {
		fprintf(stderr, "usage: exhaust <ia> nofile|as|fsize|memlock|fulldisk\n");
		return 2;
	}
	ia_name = argv[1];
	if (!getenv("DAT_OVERRIDE")) {
		fprintf(stderr, "skip: DAT_OVERRIDE is not set: run through meson test\n");
		return 77;
	}
	/* The server first: a child forked after an IA is open would inherit
	 * threads that do not survive fork. */
	CHK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	pid = fork();
	CHK(pid >= 0);
	if (pid == 0) {
		close(sv[0]);
		_exit(server(ia_name, sv[1]));
	}
	close(sv[1]);
	CHK(read(sv[0], &server_port, sizeof(server_port)) == sizeof(server_port));

	alarm(60);
	capture_stderr();
	for (int i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++)
		if (!strcmp(argv[2], cases[i].name))
			which = i;
	CHK(which >= 0);
	if (cases[which].prepare && (rc = cases[which].prepare()) != 0)
		goto out;
	lmr_mem = aligned_alloc(4096, (size_t)(CAP + 1) * LMR_SIZE);
	CHK(lmr_mem);
	memset(lmr_mem, 1, (size_t)(CAP + 1) * LMR_SIZE);
	for (int fd = 0; fd < 4096; fd++)
		fd_ours[fd] = fcntl(fd, F_GETFD) >= 0;
	CHK(node_open(&v, ia_name) == DAT_SUCCESS);
	still_works();
	rc = cases[which].run();
	if (rc == 0) {
		CHK(dat_ia_close(v.ia, DAT_CLOSE_ABRUPT_FLAG) == DAT_SUCCESS);
		zdapl_lines();
	}
out:
	close(sv[0]);
	CHK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return rc;
}
