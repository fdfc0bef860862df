/*
 * The owner's side of zd_shm_copy.h: membarrier, then the wait for the
 * copies its peers have under way.
 */
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/zd_log.h"
#include "hw/shm/zd_shm_copy.h"

static pthread_once_t register_once = PTHREAD_ONCE_INIT;
static bool registered;      /* for MEMBARRIER_CMD_GLOBAL_EXPEDITED */

static long sys_membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

static void register_process(void)
{
	long mask = sys_membarrier(MEMBARRIER_CMD_QUERY);

	registered = mask > 0 && (mask & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
		     sys_membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
}

void zd_shm_copy_register(struct zd_shm_ia *sia)
{
	pthread_once(&register_once, register_process);
	atomic_store_explicit(&sia->sh->copies_ordered, registered && !sia->fault_unordered,
			      memory_order_relaxed);
}

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* A full barrier on every CPU running a thread of a peer (ours too: a QP
 * connected within this process); false if there is none to be had. */
static bool fence_peers(struct zd_shm_ia *sia)
{
	bool expedited = true;

	pthread_mutex_lock(&sia->lock);
	for (const struct zd_soft_peer *p = sia->peers; p; p = p->next)
		expedited &= atomic_load_explicit(&zd_shm_peer_ia(p)->copies_ordered,
						  memory_order_relaxed) != 0;
	pthread_mutex_unlock(&sia->lock);
	if (expedited && sys_membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0)
		return true;
	return sys_membarrier(MEMBARRIER_CMD_GLOBAL) == 0;
}

/* Copies seen under way in one scan; more wait for the next. */
#define SCAN_MAX 32

struct busy {
	const _Atomic uint64_t *word;
	uint64_t seen;
	struct zd_soft_peer *peer;   /* counted; NULL: none mapped */
};

/* The matching QPs' words that show a copy under way, up to SCAN_MAX;
 * *@more when some were left for the next scan. */
static unsigned scan(struct zd_shm_ia *sia, uint32_t pz_id, const struct zd_shm_qp *only,
		     struct busy *b, bool *more)
{
	unsigned n = 0;

	*more = false;
	pthread_mutex_lock(&sia->lock);
	for (struct zd_shm_qp *qp = sia->qps; qp; qp = qp->ia_next) {
		/* acquire: pairs with zd_shm_copy_end's release store. */
		uint64_t w = atomic_load_explicit(&qp->own->copying, memory_order_acquire);

		if ((only ? qp != only : qp->pz_id != pz_id) || !(w & 1))
			continue;
		if (n == SCAN_MAX) {
			*more = true;
			break;
		}
		/* qp->peer: read under the IA lock (qp_unmap_peer's put). */
		b[n] = (struct busy){ &qp->own->copying, w,
				      __atomic_load_n(&qp->peer, __ATOMIC_RELAXED) };
		if (b[n].peer)
			b[n].peer->refs++;
		n++;
	}
	pthread_mutex_unlock(&sia->lock);
	return n;
}

void zd_shm_copies_wait(struct zd_shm_ia *sia, uint32_t pz_id, const struct zd_shm_qp *only)
{
	static _Atomic bool no_membarrier_said;
	struct busy b[SCAN_MAX];
	uint64_t deadline = 0;
	bool more, said = false;
	unsigned n;

	/* No peer attached: none can hold a check that passed (a peer that
	 * connects later learns of us after this, through our accept or
	 * connect, which attach it under the lock we took to clear). */
	pthread_mutex_lock(&sia->lock);
	more = sia->peers != NULL;
	pthread_mutex_unlock(&sia->lock);
	if (!more)
		return;
	if (!fence_peers(sia)) {
		if (!atomic_exchange_explicit(&no_membarrier_said, true, memory_order_relaxed))
			zd_log_error("shm: membarrier refused (%s): a deregistration waits %u us "
				     "for peers' copies to show instead",
				     strerror(errno), ZD_SHM_COPY_SETTLE_NS / 1000);
		atomic_thread_fence(memory_order_seq_cst);
		nanosleep(&(struct timespec){ 0, ZD_SHM_COPY_SETTLE_NS }, NULL);
	}
	do {
		n = scan(sia, pz_id, only, b, &more);
		for (unsigned i = 0; i < n; i++) {
			/* acquire: as in scan. */
			while (atomic_load_explicit(b[i].word, memory_order_acquire) == b[i].seen &&
			       !(b[i].peer && zd_shm_peer_dead(b[i].peer))) {
				if (!deadline)
					deadline = now_ns() + ZD_SHM_COPY_WAIT_NS;
				if (now_ns() > deadline) {
					if (!said)
						zd_log_error("shm: a peer still copies to or from "
							     "memory deregistered (or a QP freed) "
							     "after %llu ms (a stopped peer?): "
							     "going on",
							     ZD_SHM_COPY_WAIT_NS / 1000000);
					said = true;
					break;
				}
				sched_yield();
			}
		}
		for (unsigned i = 0; i < n; i++)
			if (b[i].peer)
				zd_shm_peer_put(sia, b[i].peer);
	} while (more && !said);
}
