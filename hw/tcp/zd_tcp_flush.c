/*
 * The end of a tcp QP's connection: the graceful disconnect (drain what we
 * sent, harvest what arrived, then flush), the flush itself (every
 * outstanding DTO completes), and breaking on an error or a peer's
 * violation (the CM and the consumer are told).  Kept apart from the data
 * path: all of it is cold.
 */
#include <endian.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/sockios.h>

#include "core/zd_cm.h"
#include "core/zd_ia.h"
#include "core/zd_ep.h"
#include "evd/zd_evd.h"
#include "hw/tcp/zd_tcp.h"

static uint64_t mono_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000;
}

void zd_tcp_qp_flush(struct zd_ep *ep)
{
	struct zd_tcp_qp *qp = ep->dev_priv;

	if (!qp)
		return;
	/* What we sent (sends complete when the kernel has them), and,
	 * carried, the CM frame queued last (a DISC or DISC_ACK), go out, and
	 * the peer's kernel acknowledges it all before the flush shuts the
	 * socket: on a data connection of its own, the CM's DISC on its own
	 * socket could overtake it (bounded: a peer that stopped reading
	 * costs ZD_TCP_DRAIN_US at most). */
	zd_tcp_qp_progress(qp, ZD_TCP_W_TX);
	for (uint64_t t0 = mono_us(); mono_us() - t0 < ZD_TCP_DRAIN_US; usleep(200)) {
		struct tcp_info ti;
		socklen_t tl = sizeof(ti);
		int outq = 0;

		if (atomic_load(&qp->error) ||
		    __atomic_load_n(&qp->cstate, __ATOMIC_RELAXED) != ZD_TCP_UP)
			break;
		zd_tcp_qp_progress(qp, ZD_TCP_W_TX);  /* what waited for room */
		pthread_mutex_lock(&qp->fd_lock);
		/* Only while the connection stands (a reset empties nothing). */
		if (qp->fd < 0 || getsockopt(qp->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0 ||
		    ti.tcpi_state != TCP_ESTABLISHED || ioctl(qp->fd, SIOCOUTQ, &outq) != 0)
			outq = 0;
		pthread_mutex_unlock(&qp->fd_lock);
		if (outq == 0)
			break;
	}
	/* Harvest what already arrived (ACKs, responses, sends into posted
	 * receives), then flush (zd_tcp_qp_work), before returning: the CM
	 * posts the connection event next, and the completions and the SRQ
	 * "last WQE" event belong before it (the IA's thread may hold the QP:
	 * wait for it, it never waits for the CM). */
	atomic_fetch_or(&qp->want, ZD_TCP_W_FLUSH);
	zd_tcp_qp_lock(qp);
	for (uint32_t w; (w = atomic_exchange(&qp->want, 0)) != 0;)
		zd_tcp_qp_work(qp, w);
	zd_tcp_qp_unlock(qp);
}

/* Every outstanding DTO completes (flushed, or the error it carries). */
void zd_tcp_qp_flush_locked(struct zd_tcp_qp *qp)
{
	uint64_t head, tail;

	if (!qp->flushed) {
		qp->flushed = true;
		if (qp->cstate != ZD_TCP_IDLE)
			__atomic_store_n(&qp->stale, true, __ATOMIC_RELEASE);
		/* A DISC or DISC_ACK the CM queued goes out before the end
		 * when the stream is between frames (zd_cm_ep_release and
		 * an abrupt disconnect queue theirs right before this). */
		if (qp->cstate == ZD_TCP_UP)
			zd_tcp_tx_ctl_last(qp);
		zd_tcp_qp_set_cstate(qp, ZD_TCP_DOWN);
		if (qp->fd >= 0)
			shutdown(qp->fd, SHUT_RDWR);
	}
	/* IB's "last WQE reached": SRQ consumers wait for it, after the
	 * connection event and in the same order (dtestsrq pairs them), so
	 * only once the CM (or the consumer) ended the connection, not when
	 * the data path saw the end first. */
	if (qp->srq && qp->local_end && !qp->destroying && !qp->lw_sent) {
		qp->lw_sent = true;
		zd_ia_post_async(&qp->ep->obj, DAT_ASYNC_ERROR_EP_BROKEN);
	}
	atomic_store(&qp->tx_pending, 0);
	atomic_store(&qp->rx_stalled, 0);
	/* A receive taken for a payload that never came whole. */
	if (qp->rx_kind == ZD_TCP_RX_RECV || qp->rx_kind == ZD_TCP_RX_WRITE_IMM) {
		zd_tcp_recv_fail(qp, qp->rx_recv.cookie, DAT_DTO_ERR_FLUSHED);
		qp->rx_kind = ZD_TCP_RX_NONE;
	}
	qp->rx_in_payload = false;
	/* Sends that arrived whole before the end fill the receives posted
	 * for them, now or later: their senders saw them complete (a sender
	 * may disconnect before we post the receive; RC would have held its
	 * send in RNR retries instead).  Not from inside zd_tcp_eager_match. */
	if (qp->eager_head != qp->eager_tail && !qp->in_eager) {
		qp->in_eager = true;
		zd_tcp_eager_match(qp);
		qp->in_eager = false;
	}
	/* seq_cst: pairs with the seq_cst store of rq_tail in post_recv. */
	tail = atomic_load_explicit(&qp->rq_tail, memory_order_seq_cst);
	head = atomic_load_explicit(&qp->rq_head, memory_order_relaxed);
	for (; head < tail; head++)
		zd_tcp_recv_fail(qp, qp->rq[head & (qp->rq_depth - 1)].cookie, DAT_DTO_ERR_FLUSHED);
	atomic_store_explicit(&qp->rq_head, head, memory_order_release);

	tail = atomic_load_explicit(&qp->sq_tail, memory_order_acquire);
	head = atomic_load_explicit(&qp->sq_head, memory_order_relaxed);
	for (; head < tail; head++) {
		uint32_t st = qp->sq[head & (qp->sq_depth - 1)].status;

		zd_tcp_req_complete(qp, head, st != DAT_DTO_SUCCESS ? st : DAT_DTO_ERR_FLUSHED);
	}
	qp->sq_tx = qp->sq_acked = head;
}

/* ZDAPL_TCP_DEBUG=1.  Read lazily by whichever thread first has something
 * to say (a progress thread, a consumer): relaxed, as every thread computes
 * the same value. */
static int tcp_debug = -1;

bool zd_tcp_debug_on(void)
{
	int debug = __atomic_load_n(&tcp_debug, __ATOMIC_RELAXED);

	if (debug < 0) {
		const char *e = getenv("ZDAPL_TCP_DEBUG");

		debug = e && *e && *e != '0';
		__atomic_store_n(&tcp_debug, debug, __ATOMIC_RELAXED);
	}
	return debug;
}

/* ZDAPL_TCP_DEBUG=1: one line on stderr for every broken connection. */
__attribute__((cold)) void zd_tcp_qp_why(struct zd_tcp_qp *qp, const char *why,
					 const char *file, int line)
{
	if (zd_tcp_debug_on())
		zd_log_error("tcp: QP %p breaks: %s (%s:%d, op %u seq %u len %u, expect %u, errno %d)",
			     (void *)qp, why, file, line, qp->rx_hdr.op, le32toh(qp->rx_hdr.seq),
			     le32toh(qp->rx_hdr.len), qp->rx_expect, errno);
}

/* Error, flush, socket shut down; unless the consumer ended it, the CM
 * is told (@end: at once, else after its grace). */
static void qp_break_report(struct zd_tcp_qp *qp, bool end)
{
	bool live = !qp->flushed && !qp->local_end && !qp->destroying &&
		    (qp->cstate == ZD_TCP_UP || qp->cstate == ZD_TCP_CONNECTING);

	atomic_store(&qp->error, 1);
	zd_tcp_qp_flush_locked(qp);
	if (live && !qp->reported) {
		qp->reported = true;
		if (end)
			zd_cm_dev_frame(qp->ep, ZD_CM_DEV_END, 0);
		else
			zd_cm_dev_broken(qp->ep);
	}
}

/* The connection is unusable: the CM hears of it after a grace
 * (zd_cm_dev_broken), in which a graceful DISC racing on the CM's own
 * socket, or the consumer's own disconnect after the DTO error it saw,
 * still ends the EP DISCONNECTED; BROKEN otherwise. */
void zd_tcp_qp_break(struct zd_tcp_qp *qp)
{
	qp_break_report(qp, false);
}

void zd_tcp_qp_break_eof(struct zd_tcp_qp *qp)
{
	/* Carried, everything before the EOF was read, the DISC it may
	 * have brought reported first: no grace needed. */
	qp_break_report(qp, qp->carried);
}

/* The peer broke the protocol or our protection: as an HCA's QP access
 * error, the consumer also gets DAT_ASYNC_ERROR_EP_BROKEN (the CM still
 * owns the connection events). */
__attribute__((cold)) void zd_tcp_qp_break_violation(struct zd_tcp_qp *qp)
{
	bool first = !qp->flushed;

	zd_tcp_qp_break(qp);
	if (first && !qp->srq && !qp->destroying)
		zd_ia_post_async(&qp->ep->obj, DAT_ASYNC_ERROR_EP_BROKEN);
}

/* Graceful end (qp_flush): what the peer sent before it disconnected
 * still completes, as the HCA would have: everything the socket holds is
 * read, and a frame already begun is waited for (the rest of it is on its
 * way: the peer's kernel had it before the peer's DISC went out, see
 * zd_tcp_qp_flush), for ZD_TCP_HARVEST_MS at most. */
void zd_tcp_harvest(struct zd_tcp_qp *qp)
{
	for (int waited = 0; qp->cstate == ZD_TCP_UP &&
	     !atomic_load_explicit(&qp->error, memory_order_relaxed);) {
		struct pollfd p = { .fd = qp->fd, .events = POLLIN };
		int queued = 0;

		zd_tcp_rx_progress(qp);
		if (qp->cstate != ZD_TCP_UP || atomic_load_explicit(&qp->error, memory_order_relaxed) ||
		    atomic_load_explicit(&qp->rx_stalled, memory_order_relaxed))
			break;  /* ended, or a send waits for a receive */
		if (qp->rx_off != qp->rx_end ||
		    (ioctl(qp->fd, SIOCINQ, &queued) == 0 && queued > 0))
			continue;  /* more than one batch */
		if (!qp->rx_in_payload && qp->rx_hgot == 0)
			break;  /* between frames, nothing more */
		if (waited >= ZD_TCP_HARVEST_MS || poll(&p, 1, 1) < 0)
			break;
		waited++;
	}
}
