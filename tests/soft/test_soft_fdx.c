/*
 * hw/soft descriptor exchange (zd_soft_fdx.h) and arenas (zd_soft_arena.h):
 * a peer process obtains exactly the fds we offer, nothing else and
 * nothing after a withdrawal; a gone or stopped server costs a bounded
 * wait; the uid policy follows ZDAPL_PEER_UIDS.  An arena's regions are
 * disjoint, page-aligned, zero, reused only after the quarantine, and
 * run out cleanly.  Processes of other users: tests/shm/shm_users.c.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hw/soft/zd_soft_arena.h"
#include "hw/soft/zd_soft_fdx.h"

static int child_status(pid_t pid)
{
	int st;

	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static bool same_file(int a, int b)
{
	struct stat sa, sb;

	return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_ino == sb.st_ino &&
	       sa.st_dev == sb.st_dev;
}

Test(fdx, offered_only)
{
	int fd = memfd_create("fdx-test", MFD_CLOEXEC), other = memfd_create("other", MFD_CLOEXEC);
	pid_t parent = getpid(), pid;

	cr_assert(fd >= 0 && other >= 0);
	cr_assert_eq(zd_soft_fdx_offer(fd), 0);
	cr_assert_eq(zd_soft_fdx_offer(fd), 0);  /* offers nest */
	pid = fork();
	if (pid == 0) {
		int got = zd_soft_fdx_get(parent, fd);

		if (got < 0 || !same_file(got, fd))
			_exit(1);
		if (zd_soft_fdx_get(parent, other) != -EBADF)  /* never offered */
			_exit(2);
		if (zd_soft_fdx_get(parent, 0) != -EBADF)      /* stdin: ours, not offered */
			_exit(3);
		_exit(0);
	}
	cr_assert_eq(child_status(pid), 0);
	zd_soft_fdx_withdraw(fd);
	pid = fork();
	if (pid == 0)
		_exit(zd_soft_fdx_get(parent, fd) >= 0 ? 0 : 1);  /* one offer left */
	cr_assert_eq(child_status(pid), 0);
	zd_soft_fdx_withdraw(fd);
	pid = fork();
	if (pid == 0)
		_exit(zd_soft_fdx_get(parent, fd) == -EBADF ? 0 : 1);
	cr_assert_eq(child_status(pid), 0, "a withdrawn fd is still handed out");
	close(fd);
	close(other);
}

Test(fdx, own_process_duplicates)
{
	int fd = memfd_create("fdx-self", MFD_CLOEXEC), got;

	cr_assert(fd >= 0);
	got = zd_soft_fdx_get(getpid(), fd);
	cr_assert(got >= 0 && got != fd && same_file(got, fd));
	close(got);
	close(fd);
}

Test(fdx, gone_and_stopped_servers)
{
	int fd = memfd_create("fdx-stop", MFD_CLOEXEC), p[2];
	pid_t gone = fork(), stopped;
	struct timespec t0, t1;
	char c;
	int rc;

	cr_assert(fd >= 0 && gone >= 0);
	if (gone == 0)
		_exit(0);
	child_status(gone);
	cr_assert_lt(zd_soft_fdx_get(gone, fd), 0, "a gone process answered");

	/* A server that stops right after offering: the asker waits its
	 * bounded time, then gives up. */
	cr_assert_eq(pipe(p), 0);
	stopped = fork();
	if (stopped == 0) {
		if (zd_soft_fdx_offer(fd) != 0)
			_exit(1);
		if (write(p[1], "r", 1) != 1)
			_exit(2);
		raise(SIGSTOP);
		_exit(0);
	}
	cr_assert_eq(read(p[0], &c, 1), 1);
	usleep(50 * 1000);  /* (it stops itself) */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = zd_soft_fdx_get(stopped, fd);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	cr_expect_eq(rc, -ETIMEDOUT, "got %d", rc);
	cr_expect_lt(t1.tv_sec - t0.tv_sec, ZD_SOFT_FDX_TIMEOUT_MS / 1000 + 2);
	kill(stopped, SIGKILL);
	child_status(stopped);
	close(fd);
}

Test(fdx, uid_policy)
{
	static const struct {
		const char *env;
		uid_t yes, no;
	} cases[] = {
		{ NULL, 0, 4242 },
		{ "4242,4243", 4243, 4244 },
		{ "any", 4244, (uid_t)-1 },
		{ "4242,bogus", 4242, 4245 },
	};

	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		pid_t pid = fork();

		if (pid == 0) {
			/* The policy is read once per process: a fresh one. */
			if (cases[i].env)
				setenv("ZDAPL_PEER_UIDS", cases[i].env, 1);
			else
				unsetenv("ZDAPL_PEER_UIDS");
			if (!zd_soft_fdx_uid_allowed(geteuid()))
				_exit(1);  /* our own uid, always */
			if (cases[i].yes && !zd_soft_fdx_uid_allowed(cases[i].yes))
				_exit(2);
			if (cases[i].no != (uid_t)-1 && cases[i].no != geteuid() &&
			    zd_soft_fdx_uid_allowed(cases[i].no))
				_exit(3);
			_exit(0);
		}
		cr_assert_eq(child_status(pid), 0, "ZDAPL_PEER_UIDS=%s", cases[i].env ?: "(unset)");
	}
}

Test(arena, carve_free_quarantine_full)
{
	struct zd_soft_arena a;
	struct zd_soft_region r[3], again, big;
	uint64_t span = 16ull << 20;
	uint64_t off0;

	cr_assert_eq(zd_soft_arena_create(&a, 100, span, "arena-test"), 0);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(zd_soft_arena_alloc(&a, 5000, &r[i]), 0);
		cr_assert_eq(r[i].off % 4096, 0);
		cr_assert_geq(r[i].off, 4096, "carved over the header");
		cr_assert_eq(r[i].size, 8192);
		cr_assert(r[i].borrowed);
		cr_assert_eq((char *)r[i].base, (char *)a.region.base + r[i].off);
		for (int j = 0; j < i; j++)
			cr_assert(r[i].off >= r[j].off + r[j].size || r[j].off >= r[i].off + r[i].size);
		memset(r[i].base, 0xab, r[i].size);
	}
	off0 = r[0].off;
	zd_soft_arena_free(&a, &r[0]);
	/* Quarantined: not handed out again at once. */
	cr_assert_eq(zd_soft_arena_alloc(&a, 5000, &again), 0);
	cr_assert_neq(again.off, off0);
	zd_soft_arena_free(&a, &again);
	/* Its pages went back: the peer's view of it reads zero too. */
	cr_assert_eq(((uint8_t *)a.region.base)[off0], 0);
	/* After the quarantine: reused, zero. */
	usleep((useconds_t)(ZD_SOFT_ARENA_QUARANTINE_NS / 1000) + 100 * 1000);
	cr_assert_eq(zd_soft_arena_alloc(&a, 5000, &again), 0);
	cr_assert_eq(again.off, off0);
	for (size_t k = 0; k < again.size; k++)
		cr_assert_eq(((uint8_t *)again.base)[k], 0);
	/* More than the span holds: refused, nothing carved. */
	cr_assert_eq(zd_soft_arena_alloc(&a, span, &big), -ENOMEM);
	cr_assert_null(big.base);
	zd_soft_arena_destroy(&a);
}
