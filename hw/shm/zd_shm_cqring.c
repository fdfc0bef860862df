/*
 * The shared completion ring of an shm CQ (zd_shm_cqring.h): its region,
 * a peer's mapping of it, and the consumer's cold paths -- a slot claimed
 * and never published, garbage, refused entries, a wild tail hint.  The
 * hot paths are the producer's publish (zd_shm_post.c) and the consumer's
 * take (zd_shm_cq.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <time.h>

#include "core/zd_cm.h"
#include "core/zd_ep.h"
#include "core/zd_log.h"
#include "hw/shm/zd_shm.h"

/* Entries of a CQ ring: the EVD's length, within [64, 4096] (a fuller
 * ring sends producers to the QPs' own rings, so it needs not hold all). */
#define ZD_SHM_CQ_RING_MAX 4096u

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int zd_shm_cqring_create(struct zd_shm_cq *cq, uint32_t qlen)
{
	uint32_t depth = 64;
	uint64_t off, size;
	int rc;

	while (depth < qlen && depth < ZD_SHM_CQ_RING_MAX)
		depth <<= 1;
	if (cq->sia->cq_ring_entries)
		depth = cq->sia->cq_ring_entries;
	if (!zd_shm_cq_layout(depth, &off, &size))
		return -EINVAL;
	rc = zd_shm_region_alloc(cq->sia, size, &cq->ring_region);
	if (rc != 0)
		return rc;
	cq->ring_sh = cq->ring_region.base;
	cq->ring_sh->magic = ZD_SHM_MAGIC_CQ;
	cq->ring_sh->depth = depth;
	cq->ring_sh->ring_off = off;
	cq->ring_sh->size = size;
	cq->ring = (void *)((char *)cq->ring_sh + off);
	cq->ring_depth = depth;
	for (uint32_t i = 0; i < depth; i++)
		atomic_store_explicit(&cq->ring[i].state,
				      zd_shm_slot_word(i, 0, ZD_SHM_CQE_FREE), memory_order_relaxed);
	cq->head = 0;
	return 0;
}

void zd_shm_cqring_destroy(struct zd_shm_cq *cq)
{
	zd_shm_region_free(cq->sia, &cq->ring_region);
	cq->ring_sh = NULL;
	cq->ring = NULL;
}

int zd_shm_cqring_map(struct zd_shm_qp *qp, const struct zd_shm_blob *b)
{
	const struct zd_shm_cq_shared *sh;
	uint64_t off, size;

	if (b->cq_size == 0)
		return 0;  /* the peer EP has no recv EVD: nothing to complete */
	if (b->cq_size < sizeof(*sh) || b->cq_size > (1ull << 32) ||
	    zd_soft_peer_carve(qp->peer, b->cq_off, b->cq_size, &qp->rcq_region) != 0)
		return -1;
	sh = qp->rcq_region.base;
	/* Read the geometry once, check it, and never trust it again. */
	if (sh->magic != ZD_SHM_MAGIC_CQ || !zd_shm_cq_layout(sh->depth, &off, &size) ||
	    off != sh->ring_off || size > b->cq_size) {
		zd_soft_region_unmap(&qp->rcq_region);
		return -1;
	}
	qp->r_cq_depth = sh->depth;
	qp->rcqe = (void *)((char *)qp->rcq_region.base + off);
	qp->rcq = qp->rcq_region.base;
	return 0;
}

void zd_shm_cqring_unmap(struct zd_shm_qp *qp)
{
	qp->rcq = NULL;
	qp->rcqe = NULL;
	zd_soft_region_unmap(&qp->rcq_region);
}

/* One zdapl: line a second at most, with the count so far. */
static void cq_warn(struct zd_shm_cq *cq, const char *what, const char *why)
{
	uint64_t now = now_ns();

	cq->dropped++;
	if (cq->warned_at && now - cq->warned_at < 1000000000u)
		return;
	cq->warned_at = now;
	zd_log_error("shm: completion ring of an EVD: %s (%s); %" PRIu64 " so far", what, why,
		     cq->dropped);
}

void zd_shm_qp_peer_corrupt(struct zd_shm_qp *qp)
{
	/* Stop listening to it: its receives flush, the connection breaks. */
	if (atomic_exchange(&qp->flushed_rq, 1))
		return;
	atomic_store(&qp->error, 1);
	zd_shm_qp_flush_recvs(qp, false);
	zd_cm_dev_broken(qp->ep);
}

bool zd_shm_cq_refuse(struct zd_shm_cq *cq, struct zd_shm_qp *qp, const char *why)
{
	cq_warn(cq, "entry refused", why);
	if (qp)
		zd_shm_qp_peer_corrupt(qp);
	return false;
}

void zd_shm_cqring_check_tail(struct zd_shm_cq *cq)
{
	uint64_t t = atomic_load_explicit(&cq->ring_sh->tail, memory_order_relaxed);
	uint64_t h = cq->head;

	/* Producers keep it within a few positions of [head, head + depth]:
	 * farther either way, someone wrote it. */
	if (t - h <= cq->ring_depth || h - t <= cq->ring_depth)
		return;
	/* relaxed: a hint; producers check every claim on the slot's state. */
	if (atomic_compare_exchange_strong_explicit(&cq->ring_sh->tail, &t, h,
						    memory_order_relaxed, memory_order_relaxed))
		cq_warn(cq, "tail hint put back", "written out of protocol");
}

/* Reports broken every EP of the IA connected to @p (under the IA lock,
 * which guards the CQ list and the QP lists): their receives flush, and
 * the CM ends them as if their sockets failed (zd_cm_dev_broken). */
static void break_peer(struct zd_shm_ia *sia, const struct zd_soft_peer *p)
{
	for (struct zd_soft_cq *sc = sia->cqs; sc; sc = sc->next) {
		struct zd_shm_cq *cq = ZD_CONTAINER_OF(sc, struct zd_shm_cq, soft);
		struct zd_soft_qplist *lists[2] = {
			atomic_load_explicit(&cq->recv_qps, memory_order_acquire),
			atomic_load_explicit(&cq->send_qps, memory_order_acquire),
		};

		for (int k = 0; k < 2; k++)
			for (uint32_t i = 0; lists[k] && i < lists[k]->n; i++) {
				struct zd_shm_qp *qp = lists[k]->qp[i];

				if (__atomic_load_n(&qp->peer, __ATOMIC_RELAXED) == p)
					zd_shm_qp_peer_corrupt(qp);
			}
	}
}

bool zd_shm_cqring_unstick(struct zd_shm_cq *cq, uint64_t w, bool look_now)
{
	struct zd_shm_ia *sia = cq->sia;
	uint64_t h = cq->head, now = now_ns();
	struct zd_shm_cqe *s = &cq->ring[h & (cq->ring_depth - 1)];
	uint32_t tag = (uint32_t)(w >> 4) & ZD_SHM_TAG_MASK;
	struct zd_soft_peer *p = NULL;
	const char *why = "garbage in the slot";
	bool skipped;

	pthread_mutex_lock(&sia->lock);
	if (w == zd_shm_slot_word(h, tag, ZD_SHM_CQE_CLAIMED)) {
		struct zd_shm_qp *qp;
		bool dead;

		if (w != cq->stuck_word) {
			cq->stuck_word = w;
			cq->stuck_since = cq->stuck_checked = now;
			if (!look_now) {
				pthread_mutex_unlock(&sia->lock);
				return false;
			}
		} else if (!look_now && now - cq->stuck_checked < ZD_SHM_CQE_STUCK_NS) {
			pthread_mutex_unlock(&sia->lock);
			return false;
		}
		cq->stuck_checked = now;
		/* Under the lock: QPs leave the table, and their peers, under it. */
		qp = zd_shm_tag_qp(sia, tag, memory_order_relaxed);
		p = qp && qp->recv_cq == cq ? __atomic_load_n(&qp->peer, __ATOMIC_RELAXED) : NULL;
		dead = !p || zd_shm_peer_dead(p);
		if (!dead && now - cq->stuck_since < ZD_SHM_CQE_HOSTILE_NS) {
			pthread_mutex_unlock(&sia->lock);
			return false;
		}
		why = !p ? "claimed for no QP of this CQ" :
		      dead ? "claimed by a process that died" : "claimed and never published";
	}
	/* CAS: a publish racing with us wins, and we look again. */
	skipped = atomic_compare_exchange_strong(&s->state, &w,
			zd_shm_slot_word(h + cq->ring_depth, 0, ZD_SHM_CQE_FREE));
	if (skipped) {
		cq->head = h + 1;
		cq->stuck_word = 0;
		if (p)
			break_peer(sia, p);
	}
	pthread_mutex_unlock(&sia->lock);
	if (skipped)
		cq_warn(cq, "slot skipped", why);
	return true;
}
