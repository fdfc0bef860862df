/*
 * A deregistration against a peer's copy in flight (issue 15): a peer
 * process RDMA-writes 32 MiB into our region, we free the LMR once the
 * middle byte has landed, and from the moment dat_lmr_free returns the
 * memory is the application's again: nothing of the write may land any
 * more.  The write itself completes in success or in error (both legal).
 * Into pool memory (the peer's memcpy through its mapping of our chunk),
 * by one segment (the post's own path) and by two (the general path), and
 * into malloc'd memory (through our adoption window; its release copies
 * the pages back and takes as long as the copy: that case held before);
 * by three peers at once; with the peer unregistered for membarrier, or membarrier refused to
 * both (seccomp); and with the
 * peer stopped mid-copy (the free gives up after its bound, and says so)
 * or killed there (the free does not wait for the dead).
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "zd_shm_test.h"

TestSuite(shm_dereg, .init = t_need_conf, .timeout = 60);

enum { BIG = 32 << 20, PAGE = 4096 };
#define WRITTEN 0x5a  /* what the peer writes */
#define OURS    0xc3  /* what we write once the region is ours again */

/* The case: where the write lands, who may not use membarrier, what
 * happens to the peer mid-copy. */
enum { IN_POOL = 0, IN_HEAP = 1, TWO_SEGMENTS = 2, WHERE = 3 };
enum { PEER_UNORDERED = 4, PEER_STOPPED = 8, PEER_KILLED = 16, THREE_WRITERS = 32 };

struct info {
	char blob[ZD_QP_BLOB_MAX];
	size_t blob_len;
	uint64_t addr;
	uint32_t key;
};

static uint64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* membarrier fails with EPERM in this process and its children from now
 * on, as a container's seccomp profile may have it; 0 or -1. */
static int refuse_membarrier(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_membarrier, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
		return -1;
	return syscall(SYS_membarrier, 0 /* MEMBARRIER_CMD_QUERY */, 0, 0) == -1 ? 0 : -1;
}

/* The peer: connects, writes BIG bytes of WRITTEN into our region at the
 * parent's word, reports the write's status byte ('s' success, 'e'
 * error), waits to be told to quit. */
static int writer(int rd, int wr, int how)
{
	struct side B;
	struct info me = { 0 }, peer;
	uint8_t *src = zdapl_mem_alloc(BIG);
	bool two = (how & WHERE) == TWO_SEGMENTS;
	DAT_LMR_CONTEXT k;
	DAT_LMR_TRIPLET l[2];
	DAT_RMR_TRIPLET r;
	DAT_DTO_COMPLETION_EVENT_DATA d;
	DAT_EVENT ev;
	DAT_COUNT more;
	DAT_EP_HANDLE ep;
	char c;

	if (!src)
		return 2;
	if (how & PEER_UNORDERED)
		setenv("ZDAPL_SHM_FAULT", "unordered", 1);
	memset(src, WRITTEN, BIG);
	t_open(&B);
	ep = t_ep(&B, NULL);
	t_reg(&B, NULL, src, BIG, DAT_MEM_PRIV_ALL_FLAG, &k);
	me.blob_len = t_blob(ep, me.blob);
	if (t_pipe_read(rd, &peer, sizeof(peer)) || t_pipe_write(wr, &me, sizeof(me)))
		return 3;
	t_accept_blob(ep, peer.blob, peer.blob_len);
	if (t_pipe_read(rd, &c, 1))  /* go */
		return 4;
	/* Two segments: the middle byte lies inside the second one's copy. */
	l[0] = t_seg(k, src, two ? BIG / 4 : BIG);
	l[1] = t_seg(k, src + BIG / 4, BIG - BIG / 4);
	r = t_rseg(peer.key, (void *)(uintptr_t)peer.addr, BIG);
	if (dat_ep_post_rdma_write(ep, two ? 2 : 1, l, t_cookie(1), &r, 0) != DAT_SUCCESS)
		return 5;
	if (dat_evd_wait(B.req, 10 * 1000 * 1000, 1, &ev, &more) != DAT_SUCCESS)
		return 6;
	d = ev.event_data.dto_completion_event_data;
	c = d.status == DAT_DTO_SUCCESS ? 's' : 'e';
	if (t_pipe_write(wr, &c, 1) || t_pipe_read(rd, &c, 1))
		return 7;
	t_close(&B);
	return 0;
}

/* Pages of @dst the write has not reached yet. */
static size_t unwritten(const uint8_t *dst)
{
	size_t n = 0;

	for (size_t i = 0; i < BIG; i += PAGE)
		n += __atomic_load_n(&dst[i + PAGE - 1], __ATOMIC_RELAXED) != WRITTEN;
	return n;
}

/* Our stderr from now on goes to a file, until log_end; its fd. */
static int log_begin(int *saved)
{
	FILE *f = tmpfile();

	cr_assert(f);
	fflush(stderr);
	*saved = dup(2);
	cr_assert_eq(dup2(fileno(f), 2), 2);
	return dup(fileno(f));
}

/* Puts stderr back; whether what went to @fd says @what (and echoes it). */
static bool log_end(int fd, int saved, const char *what)
{
	char buf[4096] = "";
	ssize_t n;

	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	buf[n > 0 ? n : 0] = 0;
	fputs(buf, stderr);
	return strstr(buf, what) != NULL;
}

static void dereg_in_flight(int how)
{
	enum { MAXW = 3 };
	const int nw = how & THREE_WRITERS ? MAXW : 1;
	struct side A;
	struct info me = { 0 }, peer;
	int rd[MAXW], wr[MAXW], status, log = -1, saved = -1;
	pid_t pid[MAXW];
	bool heap = (how & WHERE) == IN_HEAP;
	uint8_t *dst;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT k;
	DAT_EP_HANDLE ep;
	uint64_t end;
	size_t late = 0, first_late = 0, left = 0;
	char c;

	for (int w = 0; w < nw; w++)
		pid[w] = t_fork_peer(writer, how, &rd[w], &wr[w]);
	dst = heap ? aligned_alloc(PAGE, BIG) : zdapl_mem_alloc(BIG);
	cr_assert(dst);
	memset(dst, 0, BIG);
	t_open(&A);
	lmr = t_reg(&A, NULL, dst, BIG, DAT_MEM_PRIV_ALL_FLAG, &k);
	me.addr = (uintptr_t)dst;
	me.key = k;
	for (int w = 0; w < nw; w++) {
		ep = t_ep(&A, NULL);
		me.blob_len = t_blob(ep, me.blob);
		cr_assert_eq(t_pipe_write(wr[w], &me, sizeof(me)), 0);
		cr_assert_eq(t_pipe_read(rd[w], &peer, sizeof(peer)), 0, "peer died during setup");
		t_accept_blob(ep, peer.blob, peer.blob_len);
	}
	for (int w = 0; w < nw; w++)
		cr_assert_eq(t_pipe_write(wr[w], "g", 1), 0);

	/* The write is halfway (whichever way its copy runs). */
	end = now_ms() + 10000;
	while (!__atomic_load_n(&dst[BIG / 2], __ATOMIC_RELAXED))
		cr_assert(now_ms() < end, "the write never started");
	if (how & (PEER_STOPPED | PEER_KILLED)) {
		kill(pid[0], how & PEER_STOPPED ? SIGSTOP : SIGKILL);
		if (how & PEER_KILLED)
			cr_assert_eq(waitpid(pid[0], &status, 0), pid[0]);
		else
			cr_assert_eq(waitpid(pid[0], &status, WUNTRACED), pid[0]);
		left = unwritten(dst);
		log = log_begin(&saved);
	}
	cr_assert_eq(dat_lmr_free(lmr), DAT_SUCCESS);
	if (log >= 0) {
		bool said = log_end(log, saved, "still copies");

		/* Stopped mid-copy (pages left unwritten): the free gave up
		 * waiting, with its line; killed: it did not wait at all. */
		if (how & PEER_KILLED)
			cr_assert_not(said, "the free waited for a dead peer");
		else if (left)
			cr_assert(said, "%zu pages left, and no line", left);
		else
			cr_log_warn("the peer was stopped after its copy: nothing to wait for");
		if (how & PEER_STOPPED)
			kill(pid[0], SIGCONT);
	}

	/* Ours again: a mark in every page at once (long before a copy of
	 * the other half could end), then every byte. */
	for (size_t i = PAGE - 1; i < BIG; i += PAGE)
		__atomic_store_n(&dst[i], OURS, __ATOMIC_RELAXED);
	memset(dst, OURS, BIG);
	/* Nothing lands over the next 100 ms (a stopped peer resumed may). */
	end = now_ms() + 100;
	do {
		for (size_t i = 0; i < BIG; i += 64)
			if (__atomic_load_n(&dst[i], __ATOMIC_RELAXED) != OURS ||
			    __atomic_load_n(&dst[i + 63], __ATOMIC_RELAXED) != OURS) {
				if (!late++)
					first_late = i;
				dst[i] = dst[i + 63] = OURS;
			}
	} while (now_ms() < end);
	if (!(how & PEER_STOPPED))
		cr_assert_eq(late, 0, "%zu lines written after dat_lmr_free returned (first at %zu)",
			     late, first_late);

	for (int w = how & PEER_KILLED ? 1 : 0; w < nw; w++) {
		cr_assert_eq(t_pipe_read(rd[w], &c, 1), 0, "writer %d died", w);
		cr_assert(c == 's' || c == 'e');
		cr_assert_eq(t_pipe_write(wr[w], "q", 1), 0);
		cr_assert_eq(waitpid(pid[w], &status, 0), pid[w]);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "writer %d status 0x%x",
			  w, status);
	}
	t_close(&A);
	if (heap)
		free(dst);
	else
		zdapl_mem_free(dst);
}

Test(shm_dereg, no_byte_lands_after_free_pool)
{
	dereg_in_flight(IN_POOL);
}

Test(shm_dereg, no_byte_lands_after_free_heap)
{
	dereg_in_flight(IN_HEAP);
}

Test(shm_dereg, no_byte_lands_after_free_two_segments)
{
	dereg_in_flight(TWO_SEGMENTS);
}

/* Three peers write at once: the free waits for each of them. */
Test(shm_dereg, three_writers)
{
	dereg_in_flight(IN_POOL | THREE_WRITERS);
}

/* The peer's process did not register for membarrier (ZDAPL_SHM_FAULT,
 * as if its kernel or seccomp had refused): we ask for the slower
 * MEMBARRIER_CMD_GLOBAL, which needs no registration. */
Test(shm_dereg, peer_unregistered)
{
	dereg_in_flight(IN_POOL | PEER_UNORDERED);
}

/* No membarrier at all (a seccomp profile refusing it from the start, in
 * both processes): the fallback on time, with its line.  The filter must
 * be in place before the libraries start (liburcu, zd_waiter probe
 * membarrier once), so the test runs again under it, in a new process. */
Test(shm_dereg, without_membarrier)
{
	int status;
	pid_t pid = fork();

	cr_assert(pid >= 0);
	if (pid == 0) {
		if (refuse_membarrier() != 0)
			_exit(90);
		char conf[4096];
		/* A clean environment: Criterion's own would make the new
		 * runner take itself for one of its workers. */
		char *env[] = { conf, "ZD_TEST_NO_MEMBARRIER=1", NULL };

		snprintf(conf, sizeof(conf), "DAT_OVERRIDE=%s", getenv("DAT_OVERRIDE"));
		execle("/proc/self/exe", "test_shm_dereg", "--filter=shm_dereg/no_membarrier_inner",
		       "-j1", (char *)NULL, env);
		_exit(91);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the run under seccomp: 0x%x",
		  status);
}

Test(shm_dereg, no_membarrier_inner)
{
	int log, saved;

	if (!getenv("ZD_TEST_NO_MEMBARRIER"))
		cr_skip_test("run by without_membarrier, under its seccomp filter");
	cr_assert_eq(syscall(SYS_membarrier, 0, 0, 0), -1);
	log = log_begin(&saved);
	dereg_in_flight(IN_POOL);
	cr_assert(log_end(log, saved, "membarrier refused"));
}

Test(shm_dereg, peer_stopped_mid_copy)
{
	dereg_in_flight(IN_POOL | PEER_STOPPED);
}

Test(shm_dereg, peer_killed_mid_copy)
{
	dereg_in_flight(IN_POOL | PEER_KILLED);
}
