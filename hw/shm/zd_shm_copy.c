/*
 * The owner's side of zd_shm_copy.h: membarrier, then the wait for the
 * copies its peers have under way.
 */
#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/zd_log.h"
#include "hw/shm/zd_shm_copy.h"

static long sys_membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

void zd_shm_copy_register(struct zd_shm_ia *sia)
{
	/* At every IA open, not once per process: idempotent (a syscall once
	 * registered), and right in a fork() child too, whatever it kept. */
	long mask = sys_membarrier(MEMBARRIER_CMD_QUERY);
	bool registered = mask > 0 && (mask & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
			  sys_membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;

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
	/* relaxed: written at the peer's IA open, before it could connect. */
	for (const struct zd_soft_peer *p = sia->peers; p; p = p->next)
		expedited &= atomic_load_explicit(&zd_shm_peer_ia(p)->copies_ordered,
						  memory_order_relaxed) != 0;
	pthread_mutex_unlock(&sia->lock);
	if (expedited && sys_membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0)
		return true;
	return sys_membarrier(MEMBARRIER_CMD_GLOBAL) == 0;
}

struct busy {
	const _Atomic uint64_t *word;
	uint64_t seen;
	struct zd_soft_peer *peer;   /* counted; NULL: none mapped */
};

/* The words of the QPs that show a copy under way. */
struct busy_set {
	struct busy one, *v;         /* v: one, or an array of cap */
	unsigned n, cap;
};

/* @qp's word into @s if it shows a copy under way (under the IA lock);
 * false if there is no memory for it (then wait for those in @s, look
 * again). */
static bool busy_add(struct zd_shm_qp *qp, struct busy_set *s)
{
	/* acquire: pairs with zd_shm_copy_end's release store. */
	uint64_t w = atomic_load_explicit(&qp->own->copying, memory_order_acquire);
	struct busy *b;

	if (!(w & 1))
		return true;
	if (s->n == s->cap) {
		unsigned cap = s->cap * 2;
		struct busy *v = s->v == &s->one ? malloc(cap * sizeof(*v))
						 : realloc(s->v, cap * sizeof(*v));

		if (!v)
			return false;
		if (s->v == &s->one)
			v[0] = s->one;
		s->v = v;
		s->cap = cap;
	}
	b = &s->v[s->n++];
	/* qp->peer: read under the IA lock (qp_unmap_peer's put). */
	*b = (struct busy){ &qp->own->copying, w, __atomic_load_n(&qp->peer, __ATOMIC_RELAXED) };
	if (b->peer)
		b->peer->refs++;
	return true;
}

/* The words of @only (or of the IA's QPs in PZ @pz_id: only those pass a
 * check against the MR) that show a copy under way, into @s; false if
 * some were left for another scan. */
static bool scan(struct zd_shm_ia *sia, uint32_t pz_id, struct zd_shm_qp *only,
		 struct busy_set *s)
{
	bool all = true;

	pthread_mutex_lock(&sia->lock);
	if (only)
		all = busy_add(only, s);
	for (struct zd_shm_qp *qp = only ? NULL : sia->qps; qp && all; qp = qp->ia_next)
		if (qp->pz_id == pz_id)
			all = busy_add(qp, s);
	pthread_mutex_unlock(&sia->lock);
	return all;
}

void zd_shm_copies_wait(struct zd_shm_ia *sia, uint32_t pz_id, struct zd_shm_qp *only)
{
	static _Atomic bool no_membarrier_said;
	uint64_t deadline = 0;
	bool all, said = false;

	/* No peer attached: none can hold a check that passed (a peer that
	 * connects later learns of us after this, through our accept or
	 * connect, which attach it under the lock we took to clear). */
	pthread_mutex_lock(&sia->lock);
	all = sia->peers == NULL;
	pthread_mutex_unlock(&sia->lock);
	if (all)
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
		struct busy_set s = { .v = &s.one, .cap = 1 };

		all = scan(sia, pz_id, only, &s);
		for (unsigned i = 0; i < s.n; i++) {
			struct busy *b = &s.v[i];

			/* acquire: as in busy_add. */
			while (!said &&
			       atomic_load_explicit(b->word, memory_order_acquire) == b->seen &&
			       !(b->peer && zd_shm_peer_dead(b->peer))) {
				if (!deadline)
					deadline = now_ns() + ZD_SHM_COPY_WAIT_NS;
				if (now_ns() > deadline) {
					zd_log_error("shm: a peer still copies to or from memory "
						     "deregistered (or a QP freed) after %llu ms "
						     "(a stopped peer?): going on",
						     ZD_SHM_COPY_WAIT_NS / 1000000);
					said = true;
				}
				sched_yield();
			}
			if (b->peer)
				zd_shm_peer_put(sia, b->peer);
		}
		if (s.v != &s.one)
			free(s.v);
	} while (!all && !said);
}
