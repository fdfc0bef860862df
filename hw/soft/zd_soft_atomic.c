/* One-sided atomics on a peer's memory (zd_soft_atomic.h). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "evd/zd_ring_arch.h"   /* zd_cpu_relax */
#include "hw/soft/zd_soft_atomic.h"
#include "hw/soft/zd_soft_copy.h"

/* Spins before a waiter yields and asks whether the holder still lives. */
#define ZD_SOFT_LOCK_SPINS 4096u

/* Process @pid is dead: gone, or a zombie its parent has not reaped yet
 * (which still answers kill; "Threads: 1" tells it from a live process
 * whose first thread exited).  Unsure means alive. */
static bool holder_gone(pid_t pid)
{
	char path[40], buf[2048];
	const char *st, *th;
	ssize_t n;
	int fd;

	if (kill(pid, 0) != 0)
		return errno == ESRCH;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	st = strstr(buf, "\nState:\t");
	th = strstr(buf, "\nThreads:\t");
	return st && th && st[8] == 'Z' && atoi(th + 10) == 1;
}

/* Takes @lock for @me (our pid: holders of any process share it).  A
 * holder killed inside its read-modify-write would hold it forever: a
 * waiter that spun a while finds it dead and takes over (the word is
 * whole either way: each cross-memory copy is one 8-byte copy that a kill
 * does not cut).  Yielding meanwhile lets a preempted holder on our CPU
 * finish. */
static void lock_take(_Atomic uint32_t *lock, uint32_t me)
{
	uint32_t spins = 0, z = 0;

	/* acquire: pairs with the release store unlocking: the previous
	 * holder's write is visible to our read. */
	while (!atomic_compare_exchange_weak_explicit(lock, &z, me, memory_order_acquire,
						      memory_order_relaxed)) {
		if (++spins % ZD_SOFT_LOCK_SPINS == 0) {
			if (z != 0 && holder_gone((pid_t)z) &&
			    atomic_compare_exchange_strong_explicit(lock, &z, me,
					memory_order_acquire, memory_order_relaxed))
				return;
			sched_yield();
		} else {
			zd_cpu_relax();
		}
		z = 0;
	}
}

int zd_soft_peer_atomic(struct zd_soft_peer *p, _Atomic uint32_t *lock, uint32_t chunk,
			uint64_t addr, zd_soft_atomic_fn *apply, const void *arg, uint64_t *old)
{
	/* Chunk memory: every initiator maps it, so all use CPU atomics.
	 * Other memory, even in this process: initiators elsewhere reach it
	 * by cross-memory attach, so everyone takes the lock. */
	struct iovec li = { old, 8 }, ri = { (void *)(uintptr_t)addr, 8 };
	uint64_t nv;
	bool store;
	int rc = -1;

	if (chunk != ZD_SOFT_NO_CHUNK) {
		uint64_t *t = zd_soft_peer_ptr(p, chunk, addr, 8);

		/* Unmappable (no memory for the mapping): fail rather than
		 * take the lock, which would not exclude the others' CPU
		 * atomics on this word. */
		if (!t)
			return -1;
		*old = __atomic_load_n(t, __ATOMIC_RELAXED);
		do {
			nv = apply(*old, arg, &store);
		} while (store && !__atomic_compare_exchange_n(t, old, nv, true, __ATOMIC_SEQ_CST,
							      __ATOMIC_RELAXED));
		return 0;
	}
	lock_take(lock, (uint32_t)getpid());
	if (p->self) {
		volatile uint64_t *t = (volatile uint64_t *)(uintptr_t)addr;

		*old = *t;
		nv = apply(*old, arg, &store);
		if (store)
			*t = nv;
		rc = 0;
	} else if (process_vm_readv(p->pid, &li, 1, &ri, 1, 0) == 8) {
		nv = apply(*old, arg, &store);
		li.iov_base = &nv;
		rc = !store || process_vm_writev(p->pid, &li, 1, &ri, 1, 0) == 8 ? 0 : -1;
	} else {
		rc = zd_soft_peer_xma_failed(p, errno);
	}
	atomic_store_explicit(lock, 0, memory_order_release);
	return rc;
}
