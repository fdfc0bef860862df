/*
 * zdapl-shm between processes without ptrace rights over each other, as
 * Yama ptrace_scope 1-3, containers without CAP_SYS_PTRACE and other users
 * make them: two forked processes drop root for unprivileged users made
 * here (useradd), non-dumpable (PR_SET_DUMPABLE 0 denies ptrace access
 * as Yama does), and connect over the CM.  Scenarios (argv[1]):
 *
 *  same   both of one user, non-dumpable: pidfd_getfd is refused (checked:
 *         the emulation holds), yet the connection comes up (memfds over
 *         SCM_RIGHTS), a send and an RDMA write into pool memory land, and
 *         an RDMA write into registered memory only cross-memory attach
 *         reaches (a registration with no whole page) completes
 *         DAT_DTO_ERR_REMOTE_ACCESS, with a zdapl: line.
 *  cross  two users: the accepting side's dat_cr_accept ends in
 *         DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, the requester's
 *         connect in DAT_CONNECTION_EVENT_NON_PEER_REJECTED (each refuses
 *         the other its memory), with zdapl: lines.
 *  optin  two users, each naming the other in ZDAPL_PEER_UIDS: connected,
 *         the send and the pool write land.
 *  yama   one user, dumpable, under this kernel's Yama ptrace_scope (77
 *         without Yama): connected; the cross-memory write lands where
 *         scope 1 lets PR_SET_PTRACER name the peer, else REMOTE_ACCESS.
 *
 * Exit 0: as expected; 77: not root, no useradd, or (yama) no Yama.
 */
#include <arpa/inet.h>
#include <dat2/udat.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zdapl/zdapl.h"

#define SEC 1000000
#define POOL_BYTES 4096

static const char *scenario;

#define FAIL(...)                                                          \
	do {                                                               \
		fprintf(stderr, "shm_users %s [%d]: ", scenario, (int)getpid()); \
		fprintf(stderr, __VA_ARGS__);                              \
		fputc('\n', stderr);                                       \
		_exit(1);                                                  \
	} while (0)
#define OK(call)                                                           \
	do {                                                               \
		DAT_RETURN r_ = (call);                                    \
		if (r_ != DAT_SUCCESS)                                     \
			FAIL("%s: 0x%x", #call, (unsigned)r_);             \
	} while (0)

/* The test's users: made once, kept (useradd is slow; harmless). */
static uid_t user_uid(const char *name)
{
	struct passwd *pw = getpwnam(name);
	char cmd[160];

	if (!pw) {
		snprintf(cmd, sizeof(cmd), "useradd -r -M -d /nonexistent -s /usr/sbin/nologin %s "
			 ">/dev/null 2>&1", name);
		if (system(cmd) != 0 || !(pw = getpwnam(name))) {
			printf("shm_users: cannot create user %s (useradd): skipped\n", name);
			exit(77);
		}
	}
	return pw->pw_uid;
}

static void become(uid_t uid, bool dumpable)
{
	if (setgroups(0, NULL) != 0 || setresgid(uid, uid, uid) != 0 ||
	    setresuid(uid, uid, uid) != 0)
		FAIL("dropping root for uid %u: %s", (unsigned)uid, strerror(errno));
	/* A credential change left us non-dumpable already; say it. */
	if (prctl(PR_SET_DUMPABLE, dumpable ? 1 : 0, 0, 0, 0) != 0)
		FAIL("PR_SET_DUMPABLE: %s", strerror(errno));
}

static void xsend(int fd, uint64_t v)
{
	if (write(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
		FAIL("pipe write");
}

static uint64_t xrecv(int fd)
{
	struct pollfd p = { fd, POLLIN, 0 };
	uint64_t v;

	if (poll(&p, 1, 30000) != 1 || read(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
		FAIL("pipe read: the other side is gone");
	return v;
}

struct side {
	DAT_IA_HANDLE ia;
	DAT_PZ_HANDLE pz;
	DAT_EVD_HANDLE async, req, rcv, conn, cr;
	DAT_EP_HANDLE ep;
	uint8_t *pool;                  /* zdapl_mem_alloc: a pool chunk */
	uint8_t *heap;                  /* 64 bytes inside a page: cross-memory attach only */
	DAT_LMR_HANDLE pool_lmr, heap_lmr;
	DAT_LMR_CONTEXT pool_lkey, heap_lkey;
	DAT_RMR_CONTEXT pool_rkey, heap_rkey;
};

static void reg(struct side *s, void *p, size_t len, DAT_LMR_HANDLE *h, DAT_LMR_CONTEXT *l,
		DAT_RMR_CONTEXT *r)
{
	DAT_REGION_DESCRIPTION d = { .for_va = p };
	DAT_VLEN rlen;
	DAT_VADDR raddr;

	OK(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, d, len, s->pz, DAT_MEM_PRIV_ALL_FLAG,
			  DAT_VA_TYPE_VA, h, l, r, &rlen, &raddr));
}

static void side_open(struct side *s)
{
	static uint8_t page[2 * 4096] __attribute__((aligned(4096)));
	DAT_EP_ATTR a = {
		.service_type = DAT_SERVICE_TYPE_RC,
		.max_message_size = POOL_BYTES, .max_rdma_size = POOL_BYTES,
		.qos = DAT_QOS_BEST_EFFORT, .recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG,
		.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG, .max_recv_dtos = 4,
		.max_request_dtos = 4, .max_recv_iov = 1, .max_request_iov = 1,
	};

	memset(s, 0, sizeof(*s));
	OK(dat_ia_open("zdapl-shm", 16, &s->async, &s->ia));
	OK(dat_pz_create(s->ia, &s->pz));
	OK(dat_evd_create(s->ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->req));
	OK(dat_evd_create(s->ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->rcv));
	OK(dat_evd_create(s->ia, 64, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &s->conn));
	OK(dat_evd_create(s->ia, 64, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &s->cr));
	OK(dat_ep_create(s->ia, s->pz, s->rcv, s->req, s->conn, &a, &s->ep));
	s->pool = zdapl_mem_alloc(POOL_BYTES);
	if (!s->pool)
		FAIL("zdapl_mem_alloc");
	memset(s->pool, 0, POOL_BYTES);
	/* 64 bytes in the middle of a page of .bss: no whole page, nothing
	 * adopts it; peers reach it by cross-memory attach only. */
	s->heap = page + 4096 + 512;
	reg(s, s->pool, POOL_BYTES, &s->pool_lmr, &s->pool_lkey, &s->pool_rkey);
	reg(s, s->heap, 64, &s->heap_lmr, &s->heap_lkey, &s->heap_rkey);
}

static DAT_EVENT_NUMBER next_event(DAT_EVD_HANDLE evd, DAT_EVENT *ev)
{
	DAT_COUNT n;
	DAT_RETURN r = dat_evd_wait(evd, 20 * SEC, 1, ev, &n);

	if (r != DAT_SUCCESS)
		FAIL("dat_evd_wait: 0x%x", (unsigned)r);
	return ev->event_number;
}

static DAT_DTO_COMPLETION_STATUS dto_status(DAT_EVD_HANDLE evd)
{
	DAT_EVENT ev;

	if (next_event(evd, &ev) != DAT_DTO_COMPLETION_EVENT)
		FAIL("event 0x%x, not a DTO completion", ev.event_number);
	return ev.event_data.dto_completion_event_data.status;
}

/* The connection event of @s's EP: ESTABLISHED (true), or, when the
 * other side is another user's (@refused), @refusal (false). */
static bool connected(struct side *s, bool refused, DAT_EVENT_NUMBER refusal, const char *what)
{
	DAT_EVENT ev;
	DAT_EVENT_NUMBER want = refused ? refusal : DAT_CONNECTION_EVENT_ESTABLISHED;

	if (next_event(s->conn, &ev) != want)
		FAIL("%s%s: event 0x%x, not 0x%x", what, refused ? " with another user" : "",
		     ev.event_number, want);
	return !refused;
}

/* The server: accepts, receives, and lets the client write. */
static int server(int rd, int wr, uid_t uid, bool dumpable, bool refused)
{
	struct side s;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL qual;
	DAT_EVENT ev;
	DAT_LMR_TRIPLET t;

	become(uid, dumpable);
	side_open(&s);
	OK(dat_psp_create_any(s.ia, &qual, s.cr, DAT_PSP_CONSUMER_FLAG, &psp));
	t = (DAT_LMR_TRIPLET){ .lmr_context = s.pool_lkey, .segment_length = 64,
			       .virtual_address = (DAT_VADDR)(uintptr_t)s.pool };
	OK(dat_ep_post_recv(s.ep, 1, &t, (DAT_DTO_COOKIE){ .as_64 = 1 }, 0));
	xsend(wr, getpid());
	xsend(wr, qual);
	xsend(wr, (uintptr_t)s.pool);
	xsend(wr, s.pool_rkey);
	xsend(wr, (uintptr_t)s.heap);
	xsend(wr, s.heap_rkey);
	if (next_event(s.cr, &ev) != DAT_CONNECTION_REQUEST_EVENT)
		FAIL("no connection request: 0x%x", ev.event_number);
	OK(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, s.ep, 0, NULL));
	if (!connected(&s, refused, DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, "accept"))
		return 0;
	if (dto_status(s.rcv) != DAT_DTO_SUCCESS || memcmp(s.pool, "hello", 6) != 0)
		FAIL("the send did not land");
	xsend(wr, 1);       /* received: the client writes */
	xrecv(rd);          /* written */
	if (memcmp(s.pool + 128, "written", 8) != 0)
		FAIL("the RDMA write into pool memory did not land");
	xsend(wr, 2);
	xrecv(rd);          /* the client is done */
	return 0;
}

/* What the client's write into cross-memory-attach memory must give. */
enum { XMA_REFUSED, XMA_LANDS, XMA_SKIP };

static int client(int rd, int wr, uid_t uid, bool dumpable, bool refused, int xma)
{
	struct side s;
	pid_t server_pid = (pid_t)xrecv(rd);
	DAT_CONN_QUAL qual = xrecv(rd);
	uint64_t pool = xrecv(rd), pool_rkey = xrecv(rd), heap = xrecv(rd), heap_rkey = xrecv(rd);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	DAT_LMR_TRIPLET t;
	DAT_RMR_TRIPLET r;
	DAT_DTO_COMPLETION_STATUS st;

	become(uid, dumpable);
	side_open(&s);
	if (!dumpable) {
		/* The premise: we have no ptrace rights over the server. */
		int pidfd = (int)syscall(SYS_pidfd_open, server_pid, 0);
		int fd = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, 0, 0);

		if (fd >= 0)
			FAIL("pidfd_getfd on the server succeeded: the refusal is not emulated");
	}
	OK(dat_ep_connect(s.ep, (DAT_IA_ADDRESS_PTR)&sa, qual, 20 * SEC, 0, NULL,
			  DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
	if (!connected(&s, refused, DAT_CONNECTION_EVENT_NON_PEER_REJECTED, "connect"))
		return 0;
	memcpy(s.pool, "hello", 6);
	t = (DAT_LMR_TRIPLET){ .lmr_context = s.pool_lkey, .segment_length = 6,
			       .virtual_address = (DAT_VADDR)(uintptr_t)s.pool };
	OK(dat_ep_post_send(s.ep, 1, &t, (DAT_DTO_COOKIE){ .as_64 = 2 }, 0));
	if ((st = dto_status(s.req)) != DAT_DTO_SUCCESS)
		FAIL("send: status %d", (int)st);
	xrecv(rd);
	memcpy(s.pool + 64, "written", 8);
	t = (DAT_LMR_TRIPLET){ .lmr_context = s.pool_lkey, .segment_length = 8,
			       .virtual_address = (DAT_VADDR)(uintptr_t)s.pool + 64 };
	r = (DAT_RMR_TRIPLET){ .rmr_context = (DAT_RMR_CONTEXT)pool_rkey, .segment_length = 8,
			       .virtual_address = pool + 128 };
	OK(dat_ep_post_rdma_write(s.ep, 1, &t, (DAT_DTO_COOKIE){ .as_64 = 3 }, &r, 0));
	if ((st = dto_status(s.req)) != DAT_DTO_SUCCESS)
		FAIL("RDMA write into pool memory: status %d", (int)st);
	xsend(wr, 1);
	xrecv(rd);
	if (xma != XMA_SKIP) {
		/* Last: a refusal breaks the connection. */
		r = (DAT_RMR_TRIPLET){ .rmr_context = (DAT_RMR_CONTEXT)heap_rkey,
				       .segment_length = 8, .virtual_address = heap };
		OK(dat_ep_post_rdma_write(s.ep, 1, &t, (DAT_DTO_COOKIE){ .as_64 = 4 }, &r, 0));
		st = dto_status(s.req);
		if (xma == XMA_REFUSED && st != DAT_DTO_ERR_REMOTE_ACCESS)
			FAIL("RDMA write by cross-memory attach without ptrace rights: status %d, "
			     "not DAT_DTO_ERR_REMOTE_ACCESS", (int)st);
		if (xma == XMA_LANDS && st != DAT_DTO_SUCCESS)
			FAIL("RDMA write by cross-memory attach: status %d", (int)st);
	}
	xsend(wr, 2);
	return 0;
}

static int run(uid_t su, uid_t cu, bool dumpable, bool refused, int xma)
{
	int to_client[2], to_server[2], st, bad = 0;
	pid_t sp, cp;

	if (pipe(to_client) || pipe(to_server))
		return 1;
	sp = fork();
	if (sp == 0)
		_exit(server(to_server[0], to_client[1], su, dumpable, refused));
	cp = fork();
	if (cp == 0)
		_exit(client(to_client[0], to_server[1], cu, dumpable, refused, xma));
	close(to_client[0]);
	close(to_client[1]);
	close(to_server[0]);
	close(to_server[1]);
	for (int i = 0; i < 2; i++) {
		pid_t p = wait(&st);

		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "shm_users %s: %s failed (status 0x%x)\n", scenario,
				p == sp ? "server" : "client", st);
			bad = 1;
			kill(p == sp ? cp : sp, SIGKILL);
		}
	}
	return bad;
}

int main(int argc, char **argv)
{
	uid_t u1, u2;
	char allow[32];

	scenario = argc > 1 ? argv[1] : "same";
	if (geteuid() != 0) {
		printf("shm_users: needs root to make unprivileged users: skipped\n");
		return 77;
	}
	if (strcmp(scenario, "yama") == 0 && access("/proc/sys/kernel/yama/ptrace_scope", R_OK)) {
		printf("shm_users: this kernel has no Yama: skipped\n");
		return 77;
	}
	u1 = user_uid("zdapl-t1");
	u2 = user_uid("zdapl-t2");
	setvbuf(stdout, NULL, _IONBF, 0);
	if (strcmp(scenario, "same") == 0)
		return run(u1, u1, false, false, XMA_REFUSED);
	if (strcmp(scenario, "cross") == 0)
		return run(u1, u2, false, true, XMA_SKIP);
	if (strcmp(scenario, "optin") == 0) {
		snprintf(allow, sizeof(allow), "%u,%u", (unsigned)u1, (unsigned)u2);
		setenv("ZDAPL_PEER_UIDS", allow, 1);
		return run(u1, u2, false, false, XMA_SKIP);
	}
	if (strcmp(scenario, "yama") == 0) {
		FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
		int scope = 0;

		if (!f || fscanf(f, "%d", &scope) != 1)
			return 1;
		fclose(f);
		return run(u1, u1, true, false, scope <= 1 ? XMA_LANDS : XMA_REFUSED);
	}
	fprintf(stderr, "usage: %s same|cross|optin|yama\n", argv[0]);
	return 2;
}
