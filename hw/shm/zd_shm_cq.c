/*
 * Completion queues of the shm device, one per DTO EVD.
 *
 * Three sources feed an EVD, drained by cq_poll on the EVD consumer's
 * thread (manual progress), straight into evd->ring and never more than
 * @budget, in this order:
 *  - receive completions the peers published in the CQ's shared ring
 *    (zd_shm_cqring.h), checked against our own state and turned into DAT
 *    events; dat_evd_dequeue on an empty EVD ring takes the next one
 *    straight into the caller's event (zd_shm_cq_poll_one);
 *  - receive completions the peers left in the completion rings of the QPs
 *    whose recv EVD this is (zd_shm_qp_reap: eager messages, a full CQ
 *    ring, UD), scanned in turn only when a producer raised the ring's
 *    fallback flag, a walk left entries behind, or UD QPs are attached;
 *  - completions of this process's own DTOs (sends, RDMA, flushes), which
 *    any thread pushes into the local ring, an MPSC ring of DAT events.
 * Request completions skip the first step while the local ring is drained: the
 * poster writes them straight into evd->ring (zd_shm_cq_complete_req; the
 * order argument is at zd_evd_cq_post_direct), so a dequeue finds them
 * without polling.  Receive flushes keep to the local ring: they must stay
 * behind the receives still waiting in the completion rings.
 *
 * Waking a sleeping consumer: local completions notify evd->waiter
 * directly.  A peer in another process cannot wake a private futex, so
 * cq_arm raises the IA region's "armed" flag; a peer that publishes a
 * completion and sees it bumps the shared doorbell futex and FUTEX_WAKEs
 * it (zd_shm_peer_ring), and the IA's waker thread, asleep on that futex
 * only while some consumer armed, wakes every CQ waiter of the IA.  No
 * syscall on either side while nobody sleeps.  A consumer in solicited
 * wait (its EVD has solicited_eps) arms ZD_SHM_ARMED_SOLICITED only: a
 * peer rings for it only for a solicited receive or an error, and the
 * consumer, woken, sees the receives before it in order (zd_evd.c).
 *
 * Pinned pollers (ZDAPL_POLLERS, evd/zd_poller.h): the EVD's poller is then
 * the only caller of zd_shm_cq_poll, and nothing here assumes that caller
 * is the EVD's consumer:
 *  - the local ring stays single-consumer: its consumer is whoever calls
 *    cq_poll, now the poller alone (zd_shm_cq_poll_one, the consumer's
 *    shortcut, is not called for a polled EVD);
 *  - posters that write request completions straight into evd->ring
 *    (zd_evd_cq_post_direct) keep EVD order: its argument needs only that
 *    local's consumer enqueues into the EVD ring before it frees the slot
 *    in local (zd_evd_cq_drain does), not which thread that is;
 *  - the recv_qps walk and the CQ ring's tag lookups are flagged in
 *    @polling by one thread at a time, the poller; poller_wait's heavy
 *    fence (membarrier) reaches it as any thread of the process; the CQ
 *    ring's head is private to whoever polls, the poller;
 *  - reaping only produces into evd->ring (recv_event spills when a
 *    claim fails), so it runs while the consumer dequeues; the poller
 *    holds evd->direct_users around the call, so dat_evd_resize cannot
 *    swap the ring under it;
 *  - nobody arms (cq_arm is manual progress only): peers never ring the
 *    doorbell futex, and the poller wakes the consumer after each poll
 *    that published.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <urcu-bp.h>

#include "core/zd_ia.h"
#include "core/zd_ep.h"
#include "evd/zd_evd.h"
#include "evd/zd_evd_cq.h"
#include "evd/zd_rcu.h"
#include "hw/shm/zd_shm.h"

DAT_RETURN zd_shm_cq_create(struct zd_evd *evd, uint32_t depth)
{
	struct zd_shm_ia *sia = evd->obj.ia->dev_priv;
	struct zd_shm_cq *cq = calloc(1, sizeof(*cq));
	DAT_RETURN ret;

	if (!cq)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	cq->sia = sia;
	cq->ring_region.fd = -1;
	if (zd_shm_cqring_create(cq, depth) != 0) {
		free(cq);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	evd->marks_solicited = 1;  /* receive completions carry the sender's mark */
	ret = zd_soft_cq_init(&cq->soft, evd, depth, &sia->cqs, &sia->lock);
	if (ret != DAT_SUCCESS) {
		zd_shm_cqring_destroy(cq);
		free(cq);
		return ret;
	}
	evd->cq_priv = cq;
	return DAT_SUCCESS;
}

void zd_shm_cq_destroy(struct zd_evd *evd)
{
	struct zd_shm_cq *cq = evd->cq_priv;

	if (!cq)
		return;
	evd->cq_priv = NULL;
	zd_soft_cq_fini(&cq->soft, &cq->sia->cqs, &cq->sia->lock);
	/* EPs hold their EVDs: no QP is attached any more. */
	free(atomic_load(&cq->recv_qps));
	free(atomic_load(&cq->send_qps));
	zd_shm_cqring_destroy(cq);
	free(cq);
}

/* Waits until @cq's poller is not inside its @polling section (the walk of
 * recv_qps, the CQ ring's tag lookups), after the list was swapped or a
 * tag cleared.  Dekker with poll_enter: we stored the new list (or the
 * tag), then the heavy fence, then load polling; the poller stores
 * polling, then the light fence, then loads the list (or the tag).  Either
 * it loads the new one, or we see it inside and wait for its release
 * store leaving. */
static void poller_wait(void *arg)
{
	struct zd_shm_cq *cq = arg;

#ifdef ZD_TSAN
	/* seq_cst store (caller) and loads: the Dekker pair without fences. */
	while (atomic_load_explicit(&cq->polling, memory_order_seq_cst))
		sched_yield();
#else
	zd_waiter_fence_heavy(&cq->soft.evd->waiter);
	/* acquire: pairs with the poller's release store leaving the walk:
	 * its reads of the old list and its QPs happen before our free. */
	while (atomic_load_explicit(&cq->polling, memory_order_acquire))
		sched_yield();
#endif
}

int zd_shm_cq_attach(struct zd_shm_cq *cq, struct zd_shm_qp *qp, bool recv)
{
	int rc;

	pthread_mutex_lock(&cq->sia->lock);
	rc = recv ? zd_soft_qplist_change(&cq->recv_qps, qp, true, poller_wait, cq)
		  : zd_soft_qplist_change(&cq->send_qps, qp, true, NULL, NULL);
	if (rc == 0 && recv && qp->ud)
		atomic_fetch_add_explicit(&cq->ud_qps, 1, memory_order_relaxed);
	pthread_mutex_unlock(&cq->sia->lock);
	return rc;
}

void zd_shm_cq_detach(struct zd_shm_cq *cq, struct zd_shm_qp *qp, bool recv)
{
	pthread_mutex_lock(&cq->sia->lock);
	/* seq_cst: the Dekker store poller_wait's fence pairs with (the
	 * list change below waits the poller out after it). */
	if (recv && qp->tag && !qp->ud &&
	    zd_shm_tag_qp(cq->sia, qp->tag, memory_order_relaxed) == qp) {
		zd_shm_tag_set(cq->sia, qp->tag, NULL, memory_order_seq_cst);
		atomic_store_explicit(&cq->gone_tag[cq->gone_next++ % ZD_SHM_GONE_TAGS], qp->tag,
				      memory_order_relaxed);
	}
	/* On ENOMEM keep the QP listed; it is then a flushed, empty QP. */
	if (recv && zd_soft_qplist_change(&cq->recv_qps, qp, false, poller_wait, cq) == 0 &&
	    qp->ud)
		atomic_fetch_sub_explicit(&cq->ud_qps, 1, memory_order_relaxed);
	if (!recv)
		zd_soft_qplist_change(&cq->send_qps, qp, false, NULL, NULL);
	pthread_mutex_unlock(&cq->sia->lock);
}

/* The poller enters its @polling section (poller_wait's other side). */
static ZD_ALWAYS_INLINE void poll_enter(struct zd_shm_cq *cq)
{
#ifdef ZD_TSAN
	atomic_exchange_explicit(&cq->polling, 1, memory_order_seq_cst);
#else
	atomic_store_explicit(&cq->polling, 1, memory_order_relaxed);
	/* The light half of the Dekker pair (poller_wait). */
	zd_waiter_fence_light(&cq->soft.evd->waiter);
#endif
}

static ZD_ALWAYS_INLINE void poll_leave(struct zd_shm_cq *cq)
{
	/* release: our reads of the list, the tag table and the QPs are done. */
	atomic_store_explicit(&cq->polling, 0, memory_order_release);
}

/* ---- the shared CQ ring, consumer side (zd_shm_cqring.h) ---- */

static bool tag_gone(struct zd_shm_cq *cq, uint32_t tag)
{
	for (unsigned i = 0; i < ZD_SHM_GONE_TAGS; i++)
		if (atomic_load_explicit(&cq->gone_tag[i], memory_order_relaxed) == tag)
			return true;
	return false;
}

/* The QP's receive completion of a CQE copied out of the ring (@tag from
 * its state word), checked against our own state; false when it gives no
 * event (refused, or a receive a flush reported already).  Inside the
 * @polling section (the QP found by tag stays until we leave). */
static ZD_ALWAYS_INLINE bool cqe_event(struct zd_shm_cq *cq, const struct zd_shm_cqe *c,
				       uint32_t tag, DAT_EVENT *ev)
{
	/* acquire: pairs with the release store of the entry at QP create:
	 * the QP is set up. */
	struct zd_shm_qp *qp = zd_shm_tag_qp(cq->sia, tag, memory_order_acquire);
	DAT_DTO_COMPLETION_STATUS st;
	uint64_t pos = c->rpos, w;

	if (ZD_UNLIKELY(!qp || qp->recv_cq != cq || c->tag != tag ||
			(c->type_flags & 0xff) != ZD_SHM_COMP_DIRECT)) {
		/* A QP that left this CQ (freed, reset: its tag dropped) may
		 * still have entries its peer published before it knew: those
		 * go without a warning, they are no forgery. */
		if (!qp && tag && c->tag == tag && tag_gone(cq, tag)) {
			cq->stale++;
			return false;
		}
		return zd_shm_cq_refuse(cq, NULL, "names no receive QP of this CQ");
	}
	if (ZD_UNLIKELY(c->seq != (uint32_t)qp->comp_seen || c->len > ZD_SHM_MAX_MESSAGE))
		return zd_shm_cq_refuse(cq, qp, "out of sequence or too long");
	st = c->status <= DAT_DTO_ERR_PARTIAL_PACKET ? (DAT_DTO_COMPLETION_STATUS)c->status
						     : DAT_DTO_ERR_TRANSPORT;
	qp->comp_seen++;
	if (ZD_UNLIKELY(qp->srq != NULL)) {
		struct zd_shm_srq *s = qp->srq;

		if (ZD_UNLIKELY(c->inline_len))
			return zd_shm_cq_refuse(cq, qp, "inline data for a shared receive queue");
		struct zd_shm_rq_slot *slot = &s->slots[pos & (s->depth - 1)];
		bool ok;

		if (ZD_UNLIKELY(zd_ep_hwm_armed(qp->ep)))
			zd_ep_soft_hwm_check(qp->ep, zd_shm_qp_recv_held(qp));
		/* Only a buffer this QP's peer filled completes here; the CAS
		 * also loses to a flush (which reported it). */
		w = zd_shm_slot_word(pos, qp->tag, ZD_SHM_SLOT_DONE);
		ok = atomic_compare_exchange_strong(&slot->state, &w,
						    zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_FREE));
		if (ok)
			zd_shm_recv_event(ev, qp, s->cookie[pos & (s->depth - 1)], st,
					  c->type_flags, c->len, c->imm);
		zd_shm_srq_check_lw(s);
		return ok;
	}
	if (ZD_UNLIKELY(pos != qp->msg_seen))
		return zd_shm_cq_refuse(cq, qp, "names another receive than the next");
	qp->msg_seen = pos + 1;
	{
		const uint32_t i = (uint32_t)pos & (qp->rq_depth - 1);
		struct zd_shm_rq_slot *slot = &qp->rq[i];
		/* The message inline: it must be the whole message and fit
		 * the receive's first segment as we posted it. */
		const uint32_t inl = c->inline_len;

		if (ZD_UNLIKELY(inl && (inl != c->len || inl > ZD_SHM_CQE_INLINE ||
					inl > qp->rq_first[i].len)))
			return zd_shm_cq_refuse(cq, qp, "inline data that does not fit");
		w = zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_DONE);
		if (ZD_LIKELY(atomic_compare_exchange_strong(&slot->state, &w,
				zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_FREE)))) {
			if (inl)
				memcpy((void *)(uintptr_t)qp->rq_first[i].addr, c->data, inl);
			zd_shm_recv_event(ev, qp, qp->rq_cookie[pos & (qp->rq_depth - 1)], st,
					  c->type_flags, c->len, c->imm);
			return true;
		}
		if (w == zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_FLUSHED)) {
			/* The flush reported it: free the slot. */
			atomic_store_explicit(&slot->state, zd_shm_slot_word(pos, 0, ZD_SHM_SLOT_FREE),
					      memory_order_release);
			return false;
		}
	}
	return zd_shm_cq_refuse(cq, qp, "completes a receive its peer did not fill");
}

/* The state word of the slot at the consumer's head, and whether it is
 * published (then cqring_take it). */
static ZD_ALWAYS_INLINE bool cqring_ready(const struct zd_shm_cq *cq, uint64_t *w)
{
	const struct zd_shm_cqe *s = &cq->ring[cq->head & (cq->ring_depth - 1)];
	/* acquire: pairs with the producer's release store publishing the
	 * slot: its fields are written. */
	uint64_t v = atomic_load_explicit(&((struct zd_shm_cqe *)s)->state, memory_order_acquire);

	*w = v;
	return v == zd_shm_slot_word(cq->head, (uint32_t)(v >> 4) & ZD_SHM_TAG_MASK,
				     ZD_SHM_CQE_PUBLISHED);
}

/* Takes the published CQE at the consumer's head (@v its state word, from
 * cqring_ready): true and @ev filled, or false (refused, or a flushed
 * receive's).  Inside @polling (the tag lookup). */
static ZD_ALWAYS_INLINE bool cqring_take(struct zd_shm_cq *cq, uint64_t v, DAT_EVENT *ev)
{
	uint64_t h = cq->head;
	struct zd_shm_cqe *s = &cq->ring[h & (cq->ring_depth - 1)];
	uint32_t tag = (uint32_t)(v >> 4) & ZD_SHM_TAG_MASK;
	union {
		struct zd_shm_cqe e;
		uint64_t w[8];
	} c;
	/* One copy of the untrusted line, each word read once (volatile:
	 * the checks and the use see the same values): the header's three
	 * words, and the inline message's words if it has one. */
	const volatile uint64_t *src = (const volatile uint64_t *)(const void *)s;

	_Static_assert(offsetof(struct zd_shm_cqe, imm) == 32 && sizeof(c) == 64,
		       "the CQE: state, three header words, four of data");
	c.w[1] = src[1];
	c.w[2] = src[2];
	c.w[3] = src[3];
	c.w[4] = src[4];  /* the immediate data, or the message's first word */
	for (unsigned k = 5; k < 4 + (c.e.inline_len + 7u) / 8 && k < 8; k++)
		c.w[k] = src[k];
	/* release: pairs with the producers' acquire load of the state before
	 * their claim: our reads of this lap are done before the slot's
	 * next tenant writes it. */
	atomic_store_explicit(&s->state, zd_shm_slot_word(h + cq->ring_depth, 0, ZD_SHM_CQE_FREE),
			      memory_order_release);
	cq->head = h + 1;
	return cqe_event(cq, &c.e, tag, ev);
}

/* Whether the QP rings must be walked: a producer used one (its flag), a
 * walk left entries behind, or UD QPs (their rings only). */
static ZD_ALWAYS_INLINE bool walk_needed(struct zd_shm_cq *cq)
{
	return cq->walk_again || atomic_load_explicit(&cq->ud_qps, memory_order_relaxed) ||
	       atomic_load_explicit(&cq->ring_sh->fallback, memory_order_relaxed);
}

int zd_shm_cq_poll(struct zd_evd *evd, int budget)
{
	struct zd_shm_cq *cq = evd->cq_priv;
	struct zd_soft_qplist *l;
	uint64_t w = 0;
	int n = 0;
	bool r = false;

	if (ZD_UNLIKELY(!cq))
		return DAT_QUEUE_EMPTY;
again:
	poll_enter(cq);
	/* The CQ ring first: receives complete before the flushes of later
	 * ones, which wait in the local ring. */
	while (n < budget && (r = cqring_ready(cq, &w))) {
		DAT_EVENT ev;

		if (cqring_take(cq, w, &ev)) {
			zd_shm_recv_enqueue(evd, &ev);
			n++;
		}
	}
	if (walk_needed(cq)) {
		cq->walk_again = false;
		/* acquire: pairs with the release store a producer raised the
		 * flag with, after its entry: the walk below sees it.  A flag
		 * raised after this exchange stays for the next poll.  A
		 * producer fell back: perhaps from a wild tail hint. */
		if (atomic_exchange_explicit(&cq->ring_sh->fallback, 0, memory_order_acquire))
			zd_shm_cqring_check_tail(cq);
		/* acquire: pairs with the writer's store of the list. */
		l = atomic_load_explicit(&cq->recv_qps, memory_order_acquire);
		for (uint32_t i = 0; l && i < l->n; i++) {
			if (n >= budget) {
				cq->walk_again = true;
				break;
			}
			n += zd_shm_qp_reap(l->qp[i], budget - n);
		}
	}
	poll_leave(cq);
	/* A slot claimed and not published (or garbage) at head, with room
	 * left: look at its claimer (rarely: zd_shm_cqring_unstick keeps
	 * time), and go on if it was skipped. */
	if (ZD_UNLIKELY(!r && n < budget &&
			w != zd_shm_slot_word(cq->head, 0, ZD_SHM_CQE_FREE)) &&
	    zd_shm_cqring_unstick(cq, w, false))
		goto again;
	if (ZD_UNLIKELY(atomic_load_explicit(&cq->backlog, memory_order_relaxed))) {
		rcu_read_lock();
		l = rcu_dereference(cq->send_qps);
		for (uint32_t i = 0; l && i < l->n; i++)
			zd_shm_qp_progress_sq(l->qp[i]);
		zd_rcu_read_unlock();
	}
	return n + zd_soft_cq_drain(&cq->soft, budget - n);
}

/*
 * cq_poll_one (core/zd_device.h): the consumer's dequeue, with no QP ring to
 * walk and no queued send.  The CQE at the CQ ring's head straight into the
 * consumer's DAT_EVENT when nothing older waits (the EVD ring drained and
 * nothing spilled, zd_evd_direct_ok, checked after the CQE was read; and
 * the local ring drained: a request completion it holds may be older);
 * else it goes into the EVD ring behind them.  Then the next completion of
 * the local ring, as before: checked against the EVD after its slot reads
 * as published, and freed only once copied out, so a poster that then
 * finds the local ring drained and goes direct (zd_evd_cq_post_direct) is
 * behind it, as after a cq_poll drain.
 */
DAT_RETURN zd_shm_cq_poll_one(struct zd_evd *evd, DAT_EVENT *out)
{
	struct zd_shm_cq *cq = evd->cq_priv;
	const struct zd_ring_slot *s;
	uint64_t w;
	bool ok;

	if (ZD_UNLIKELY(!cq))
		return 0;
	if (ZD_UNLIKELY(walk_needed(cq) || atomic_load_explicit(&cq->backlog, memory_order_relaxed)))
		goto slow;
	if (ZD_LIKELY(cqring_ready(cq, &w))) {
		poll_enter(cq);
		ok = cqring_take(cq, w, out);
		poll_leave(cq);
		if (ZD_LIKELY(ok && zd_evd_direct_ok(evd) && zd_ring_drained(cq->soft.local)))
			return DAT_SUCCESS;
		if (ok)
			zd_shm_recv_enqueue(evd, out);
		goto slow;
	}
	if (ZD_UNLIKELY(w != zd_shm_slot_word(cq->head, 0, ZD_SHM_CQE_FREE)))
		goto slow;
	s = zd_ring_front(cq->soft.local);
	if (!s)
		return DAT_QUEUE_EMPTY;
	if (ZD_UNLIKELY(!zd_evd_direct_ok(evd)))
		goto slow;
	zd_ring_take_front(cq->soft.local, s, out);
	return DAT_SUCCESS;
slow:
	zd_shm_cq_poll(evd, zd_evd_room(evd));
	return zd_evd_take(evd, out);
}

void zd_shm_cq_arm(struct zd_evd *evd)
{
	struct zd_shm_cq *cq = evd->cq_priv;
	struct zd_shm_ia *sia;

	if (!cq)
		return;
	sia = cq->sia;
	if (ZD_UNLIKELY(!__atomic_load_n(&sia->waker_running, __ATOMIC_ACQUIRE)))
		zd_shm_waker_start(sia);
	/* A slot claimed and not published at the ring's head: a dead claimer
	 * is skipped now (the re-poll after this arm goes on behind it); a
	 * live one, until it publishes or is given up on, makes the waker
	 * wake us every ZD_SHM_WAKER_TICK_NS to look again. */
	{
		uint64_t w;

		if (!cqring_ready(cq, &w) && w != zd_shm_slot_word(cq->head, 0, ZD_SHM_CQE_FREE) &&
		    !zd_shm_cqring_unstick(cq, w, true) &&
		    !atomic_exchange_explicit(&sia->stuck, 1, memory_order_relaxed))
			/* The waker may sleep untimed: it looks at @stuck again. */
			syscall(SYS_futex, &sia->sh->doorbell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	}
	/* Solicited wait: peers ring only for solicited receives and errors
	 * (zd_shm_post.c comp_publish); the rest waits in the rings. */
	atomic_fetch_or_explicit(&sia->sh->armed,
				 atomic_load_explicit(&evd->solicited_eps, memory_order_relaxed) > 0 ?
				 ZD_SHM_ARMED_SOLICITED : ZD_SHM_ARMED_ANY, memory_order_relaxed);
	/* seq_cst fence: pairs with the one in zd_shm_peer_ring (Dekker): the
	 * re-poll after this arm sees a peer's completion, or the peer sees
	 * armed and rings the doorbell. */
	atomic_thread_fence(memory_order_seq_cst);
	/* Queued (RNR) sends: the target rings our doorbell when it posts a
	 * receive or frees ring space (zd_shm_qp_rnr_ring). */
}

/* Sleeps ZD_SHM_WAKER_TICK_NS, or until the doorbell moves past @seen. */
static void waker_tick(struct zd_shm_ia_shared *sh, uint32_t seen)
{
	struct timespec now, end;

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_nsec += ZD_SHM_WAKER_TICK_NS;
	if (end.tv_nsec >= 1000000000) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000;
	}
	/* relaxed: a re-check only; the caller's loop acquires it. */
	while (atomic_load_explicit(&sh->doorbell, memory_order_relaxed) == seen) {
		struct timespec left;

		clock_gettime(CLOCK_MONOTONIC, &now);
		left.tv_sec = end.tv_sec - now.tv_sec;
		left.tv_nsec = end.tv_nsec - now.tv_nsec;
		if (left.tv_nsec < 0) {
			left.tv_sec--;
			left.tv_nsec += 1000000000;
		}
		if (left.tv_sec < 0)
			break;
		syscall(SYS_futex, &sh->doorbell, FUTEX_WAIT, seen, &left, NULL, 0);
	}
}

static void *waker_main(void *arg)
{
	struct zd_shm_ia *sia = arg;
	struct zd_shm_ia_shared *sh = sia->sh;
	/* Read before any consumer armed (zd_shm_waker_start): a ring after
	 * an arm always moves the doorbell past it. */
	uint32_t seen = sia->waker_seen;

	for (;;) {
		uint32_t now;

		if (atomic_load_explicit(&sh->closing, memory_order_acquire))
			break;
		/* acquire: pairs with the ringer's release increment. */
		now = atomic_load_explicit(&sh->doorbell, memory_order_acquire);
		if (now == seen) {
			/* A consumer waits behind a claimed slot: it is woken
			 * after a tick (or a ring), to look again. */
			if (atomic_exchange_explicit(&sia->stuck, 0, memory_order_relaxed)) {
				waker_tick(sh, seen);
				pthread_mutex_lock(&sia->lock);
				zd_soft_cq_wake_all(sia->cqs);
				pthread_mutex_unlock(&sia->lock);
			} else {
				syscall(SYS_futex, &sh->doorbell, FUTEX_WAIT, seen, NULL, NULL, 0);
			}
			continue;
		}
		seen = now;
		/* Clear before waking: a consumer arming after this is woken
		 * by the next ring; one that armed before is woken now. */
		atomic_store_explicit(&sh->armed, 0, memory_order_seq_cst);
		pthread_mutex_lock(&sia->lock);
		zd_soft_cq_wake_all(sia->cqs);
		pthread_mutex_unlock(&sia->lock);
	}
	return NULL;
}

int zd_shm_waker_start(struct zd_shm_ia *sia)
{
	int rc = 0;

	pthread_mutex_lock(&sia->lock);
	if (!sia->waker_running) {
		sia->waker_seen = atomic_load(&sia->sh->doorbell);
		rc = pthread_create(&sia->waker, NULL, waker_main, sia);
		if (rc == 0)
			__atomic_store_n(&sia->waker_running, true, __ATOMIC_RELEASE);
		else
			zd_log_rate_limited("shm: cannot start the IA's wake-up thread: %s",
					    strerror(rc));
	}
	pthread_mutex_unlock(&sia->lock);
	return rc;
}

void zd_shm_waker_stop(struct zd_shm_ia *sia)
{
	if (!sia->waker_running)
		return;
	atomic_store(&sia->sh->closing, 1);
	atomic_fetch_add(&sia->sh->doorbell, 1);
	syscall(SYS_futex, &sia->sh->doorbell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	pthread_join(sia->waker, NULL);
	sia->waker_running = false;
}
