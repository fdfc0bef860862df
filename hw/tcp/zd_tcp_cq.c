/*
 * Completion queues of the tcp device, and the IA's waker thread.
 *
 * cq_poll progresses every QP feeding the CQ (zd_tcp_qp_progress: transmit,
 * receive, complete), then moves completions from the CQ's MPSC ring into
 * the EVD ring, never more than @budget.  cq_arm registers the QPs'
 * sockets one-shot in the IA's epoll set.  The IA's thread (below) serves
 * QPs whose socket became ready (progress=thread) or wakes the EVDs
 * (progress=manual).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
#include <urcu-bp.h>

#include "core/zd_ia.h"
#include "core/zd_ep.h"
#include "evd/zd_evd.h"
#include "evd/zd_evd_cq.h"
#include "evd/zd_rcu.h"
#include "hw/tcp/zd_tcp.h"

DAT_RETURN zd_tcp_cq_create(struct zd_evd *evd, uint32_t depth)
{
	/* aligned: the consumer's counters have their own line (the size
	 * is a multiple of it) */
	struct zd_tcp_cq *cq = aligned_alloc(ZD_CACHE_LINE, sizeof(*cq));
	DAT_RETURN ret;

	if (!cq)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	memset(cq, 0, sizeof(*cq));
	cq->tia = evd->obj.ia->dev_priv;
	/* None: every poll walks every QP (correct, O(QPs) system calls). */
	cq->epfd = epoll_create1(EPOLL_CLOEXEC);
	ret = zd_soft_cq_init(&cq->soft, evd, depth, &cq->tia->cqs, &cq->tia->lock);
	if (ret != DAT_SUCCESS) {
		if (cq->epfd >= 0)
			close(cq->epfd);
		free(cq);
		return ret;
	}
	evd->cq_priv = cq;
	return DAT_SUCCESS;
}

void zd_tcp_cq_destroy(struct zd_evd *evd)
{
	struct zd_tcp_cq *cq = evd->cq_priv;

	if (!cq)
		return;
	evd->cq_priv = NULL;
	zd_soft_cq_fini(&cq->soft, &cq->tia->cqs, &cq->tia->lock);
	/* EPs hold their EVDs: no QP is attached any more. */
	free(atomic_load(&cq->qps));
	if (cq->epfd >= 0)
		close(cq->epfd);
	free(cq);
}

/* Copy-on-write change of the CQ's QP list (caller holds tia->lock). */
int zd_tcp_cq_attach(struct zd_tcp_cq *cq, struct zd_tcp_qp *qp, bool add)
{
	return zd_soft_qplist_change(&cq->qps, qp, add, NULL, NULL);
}

void zd_tcp_cq_complete(struct zd_tcp_cq *cq, struct zd_ep *ep, DAT_DTO_COOKIE cookie,
			DAT_DTO_COMPLETION_STATUS st, uint64_t len, DAT_DTOS op)
{
	DAT_SEG_LENGTH n = st == DAT_DTO_SUCCESS ? (DAT_SEG_LENGTH)len : 0;

	/* Straight into the EVD ring when nothing waits in the local one
	 * (zd_evd_cq.h has the order argument): the consumer's dequeue finds
	 * it there, with no cq_poll hop. */
	if (ZD_UNLIKELY(zd_dto_is_ext(op)))
		zd_evd_cq_post_ext(cq->soft.local, cq->soft.evd, ep, cookie, st, n, op, 0);
	else
		zd_evd_cq_post_direct(cq->soft.local, cq->soft.evd, ep, cookie, st, n, op);
}

void zd_tcp_cq_complete_imm(struct zd_tcp_cq *cq, struct zd_ep *ep, DAT_DTO_COOKIE cookie,
			    uint64_t len, uint32_t imm)
{
	zd_evd_cq_post_ext(cq->soft.local, cq->soft.evd, ep, cookie, DAT_DTO_SUCCESS,
			   (DAT_SEG_LENGTH)len, (DAT_DTOS)DAT_IB_DTO_RECV_IMMED, imm);
}

/* Ready QPs one poll of many progresses at most. */
#define ZD_TCP_POLL_READY 64

/* Progresses @qp for a poll of one of its CQs; whether it read bytes. */
static inline uint64_t poll_qp(struct zd_tcp_qp *qp)
{
	uint64_t before = atomic_load_explicit(&qp->rx_moves, memory_order_relaxed);

	zd_tcp_qp_progress(qp, ZD_TCP_W_TX | ZD_TCP_W_RX);
	return atomic_load_explicit(&qp->rx_moves, memory_order_relaxed) - before;
}

int zd_tcp_cq_poll(struct zd_evd *evd, int budget)
{
	struct zd_tcp_cq *cq = evd->cq_priv;
	struct zd_soft_qplist *l;
	uint64_t moves = 0;
	int n = 0;

	if (ZD_UNLIKELY(!cq))
		return 0;
	/* A hint for the progress thread (racing pollers may lose a count). */
	atomic_store_explicit(&cq->polls, atomic_load_explicit(&cq->polls, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	if (zd_ring_ready(cq->soft.local, 1)) {
		/* Completions first: one is waiting already (a poll of the
		 * QP's other CQ read its frame, a post completed a send, the
		 * IA's thread served the QP), so it goes out without a system
		 * call; the sockets are read by the next poll that finds the
		 * ring empty. */
		atomic_store_explicit(&cq->idle_polls, 0, memory_order_relaxed);
		return zd_soft_cq_drain(&cq->soft, budget);
	}
	if (atomic_load_explicit(&cq->qps, memory_order_relaxed)) {
		rcu_read_lock();
		l = rcu_dereference(cq->qps);
		if (l && (l->n <= ZD_TCP_WALK_ALL || cq->epfd < 0)) {
			for (uint32_t i = 0; i < l->n; i++)
				moves += poll_qp(l->qp[i]);
		} else if (l) {
			/* Many QPs: the ready ones (level-triggered: one
			 * left unread comes again, after the others). */
			struct epoll_event ev[ZD_TCP_POLL_READY];
			int k = epoll_wait(cq->epfd, ev, ZD_TCP_POLL_READY, 0);

			for (int i = 0; i < k; i++)
				moves += poll_qp(ev[i].data.ptr);
		}
		zd_rcu_read_unlock();
	}
	if (ZD_UNLIKELY(!zd_ring_ready(cq->soft.local, 1) && !zd_ring_ready(evd->ring, 1)) &&
	    !evd->poller) {
		/* Idle: no completion came, in the local ring or straight
		 * into the EVD's (dequeue polls only when the EVD ring is
		 * empty; this thread is its consumer).  Drive the other EPs
		 * of the IA too (a peer may wait
		 * for one this thread does not poll, as with dapltest's
		 * per-EP EVDs).  A try-lock: never waits on the control path.
		 * Not under pinned pollers: every CQ has a poller then, which
		 * drives its own QPs above. */
		struct zd_tcp_ia *tia = cq->tia;

		if (pthread_mutex_trylock(&tia->lock) == 0) {
			/* (not this CQ's own QPs again: a recv each, for nothing) */
			for (struct zd_tcp_qp *qp = tia->qps; qp; qp = qp->next)
				if (qp->recv_cq != cq && qp->req_cq != cq)
					zd_tcp_qp_progress(qp, ZD_TCP_W_TX | ZD_TCP_W_RX);
			pthread_mutex_unlock(&tia->lock);
		}
	}
	n += zd_soft_cq_drain(&cq->soft, budget - n);
	if (ZD_LIKELY(n || moves) || evd->poller) {
		atomic_store_explicit(&cq->idle_polls, 0, memory_order_relaxed);
	} else {
		uint32_t idle = atomic_load_explicit(&cq->idle_polls, memory_order_relaxed) + 1;

		/* Nothing came: whoever we wait for (the peer process, the
		 * IA's thread) may need this CPU more than our next poll
		 * does.  With a core to spare the yield returns at once. */
		if (idle >= ZD_TCP_IDLE_YIELD) {
			idle = 0;
			sched_yield();
		}
		atomic_store_explicit(&cq->idle_polls, idle, memory_order_relaxed);
	}
	return n;
}

void zd_tcp_cq_arm(struct zd_evd *evd)
{
	struct zd_tcp_cq *cq = evd->cq_priv;
	struct zd_tcp_ia *tia;

	if (!cq)
		return;
	tia = cq->tia;
	/* Asleep from here (one more poll follows the arm): the progress
	 * thread serves this CQ's QPs at once instead of leaving them to us. */
	atomic_store_explicit(&cq->arm_polls, atomic_load_explicit(&cq->polls, memory_order_relaxed),
			      memory_order_relaxed);
	if (ZD_UNLIKELY(!__atomic_load_n(&tia->waker_running, __ATOMIC_ACQUIRE)))
		zd_tcp_waker_start(tia);
	/* About to sleep: drive every EP of the IA once (the peer may wait
	 * for one this thread does not poll), then ask for a wake-up on any
	 * of their sockets. */
	pthread_mutex_lock(&tia->lock);
	for (struct zd_tcp_qp *qp = tia->qps; qp; qp = qp->next) {
		zd_tcp_qp_progress(qp, ZD_TCP_W_TX | ZD_TCP_W_RX);
		zd_tcp_qp_arm(qp);
	}
	pthread_mutex_unlock(&tia->lock);
}

/* ---- the IA's thread ----
 *
 * progress=manual: it only wakes sleepers.  A socket armed by cq_arm
 * became ready: every DTO EVD of the IA is woken, and whoever sleeps on one
 * progresses every QP of the IA (cq_arm) before sleeping again.
 *
 * progress=thread (default): it also serves the QPs, so one-sided work
 * (RDMA writes landing, reads answered, ACKs) needs nothing of the target
 * process.  Every QP's socket stays armed (one-shot) in the IA's epoll set;
 * when one fires, the thread progresses that QP itself unless a consumer
 * polled one of the QP's CQs since the thread last looked (and is not
 * asleep in dat_evd_wait): a polling consumer drains the socket itself (the
 * fast path, no thread hop), so the QP is parked instead: not re-armed
 * (no wake-up per frame), rechecked after ZD_TCP_PARK_MIN_NS, doubling up
 * to ZD_TCP_PARK_MAX_NS while the consumer keeps polling, and served as
 * soon as a recheck finds the consumer quiet.  A QP stalled on a missing
 * receive is parked too (a receive posted to an SRQ does not progress it).
 */
#define ZD_TCP_PARK_MIN_NS (20ull * 1000)
#define ZD_TCP_PARK_MAX_NS (1000ull * 1000)

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static bool qp_member(struct zd_tcp_ia *tia, struct zd_tcp_qp *qp)
{
	for (struct zd_tcp_qp *q = tia->qps; q; q = q->next)
		if (q == qp)
			return true;
	return false;
}

/* Did a consumer poll one of @qp's CQs since we last looked (and is not
 * asleep in dat_evd_wait: cq_arm, then one more poll)? */
static bool consumer_active(struct zd_tcp_qp *qp)
{
	struct zd_tcp_cq *cq[2] = { qp->recv_cq, qp->req_cq };
	bool active = false;

	for (int i = 0; i < 2; i++) {
		uint64_t p, a;

		if (!cq[i])
			continue;
		p = atomic_load_explicit(&cq[i]->polls, memory_order_relaxed);
		a = atomic_load_explicit(&cq[i]->arm_polls, memory_order_relaxed);
		if (p != qp->seen_polls[i] && p - a > 1)
			active = true;
		qp->seen_polls[i] = p;
	}
	return active;
}

static void park(struct zd_tcp_ia *tia, struct zd_tcp_qp *qp, uint64_t now)
{
	if (!qp->parked) {
		qp->parked = true;
		tia->nparked++;
		qp->park_ns = ZD_TCP_PARK_MIN_NS;
	} else {
		qp->park_ns = ZD_MIN(2 * qp->park_ns, ZD_TCP_PARK_MAX_NS);
	}
	qp->park_until = now + qp->park_ns;
}

/* Progresses @qp and re-arms its socket (or parks it: nothing to arm). */
static void serve(struct zd_tcp_ia *tia, struct zd_tcp_qp *qp, uint64_t now)
{
	if (qp->parked) {
		qp->parked = false;
		tia->nparked--;
	}
	zd_tcp_qp_progress(qp, ZD_TCP_W_TX | ZD_TCP_W_RX);
	zd_tcp_qp_arm(qp);
	if (__atomic_load_n(&qp->cstate, __ATOMIC_RELAXED) == ZD_TCP_UP &&
	    atomic_load(&qp->rx_stalled) && !atomic_load(&qp->tx_pending)) {
		park(tia, qp, now);
		qp->park_until = now + ZD_TCP_PARK_MAX_NS;
	}
}

/* epoll_pwait2 (Linux 5.11) sleeps for nanoseconds; where it is missing
 * (an older kernel, or valgrind 3.19, which does not know the call and
 * fails it: the thread would exit and nothing would serve the QPs),
 * epoll_wait with the timeout rounded up to a millisecond. */
static int waker_wait(int epfd, struct epoll_event *ev, int max, const struct timespec *ts)
{
	static _Atomic bool no_pwait2;   /* relaxed: a hint; each thread retries once */
	int n;

	if (!atomic_load_explicit(&no_pwait2, memory_order_relaxed)) {
		n = epoll_pwait2(epfd, ev, max, ts, NULL);
		if (n >= 0 || errno != ENOSYS)
			return n;
		atomic_store_explicit(&no_pwait2, true, memory_order_relaxed);
	}
	return epoll_wait(epfd, ev, max,
			  ts ? (int)ZD_MIN((uint64_t)ts->tv_sec * 1000u +
						   ((uint64_t)ts->tv_nsec + 999999u) / 1000000u,
					   (uint64_t)INT32_MAX)
			     : -1);
}

static void *waker_main(void *arg)
{
	struct zd_tcp_ia *tia = arg;
	struct epoll_event ev[32];
	uint64_t next = UINT64_MAX;   /* earliest recheck of a parked QP */

	/* Rechecks are tens of microseconds apart: no timer slack. */
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	for (;;) {
		struct timespec ts, *tsp = NULL;
		bool stop = false, ready = false;
		uint64_t now;
		int n;

		if (next != UINT64_MAX) {
			uint64_t t = now_ns(), d = next > t ? next - t : 0;

			ts.tv_sec = (time_t)(d / 1000000000ull);
			ts.tv_nsec = (long)(d % 1000000000ull);
			tsp = &ts;
		}
		n = waker_wait(tia->epfd, ev, 32, tsp);
		if (n < 0) {
			if (errno != EINTR)
				break;
			n = 0;
		}
		now = now_ns();
		pthread_mutex_lock(&tia->lock);
		for (int i = 0; i < n; i++) {
			struct zd_tcp_qp *qp = ev[i].data.ptr;

			if (qp == NULL) {
				stop = true;
				continue;
			}
			ready = true;
			/* The QP may be gone: only a listed one is touched. */
			if (!tia->auto_progress || stop || !qp_member(tia, qp))
				continue;
			if (consumer_active(qp))
				park(tia, qp, now);
			else
				serve(tia, qp, now);
		}
		if (!tia->auto_progress && ready && !stop)
			zd_soft_cq_wake_all(tia->cqs);
		next = UINT64_MAX;
		if (tia->nparked && !stop)
			for (struct zd_tcp_qp *qp = tia->qps; qp; qp = qp->next) {
				if (!qp->parked)
					continue;
				if (qp->park_until <= now) {
					if (consumer_active(qp))
						park(tia, qp, now);
					else
						serve(tia, qp, now);
				}
				if (qp->parked)
					next = ZD_MIN(next, qp->park_until);
			}
		pthread_mutex_unlock(&tia->lock);
		if (stop)
			break;
	}
	return NULL;
}

int zd_tcp_waker_start(struct zd_tcp_ia *tia)
{
	int rc = 0;

	pthread_mutex_lock(&tia->lock);
	if (!tia->waker_running) {
		rc = pthread_create(&tia->waker, NULL, waker_main, tia);
		if (rc == 0)
			__atomic_store_n(&tia->waker_running, true, __ATOMIC_RELEASE);
		else
			zd_log_rate_limited("tcp: cannot start the IA's progress thread: %s",
					    strerror(rc));
	}
	pthread_mutex_unlock(&tia->lock);
	return rc;
}

void zd_tcp_waker_stop(struct zd_tcp_ia *tia)
{
	uint64_t one = 1;

	if (!tia->waker_running)
		return;
	if (write(tia->stopfd, &one, sizeof(one)) != sizeof(one))
		return;
	pthread_join(tia->waker, NULL);
	tia->waker_running = false;
}
