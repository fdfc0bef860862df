/*
 * The progress engine of a tcp QP: its try-lock (qp->busy) and one round
 * of work (connect, transmit, receive, complete, flush).  Every function
 * of zd_tcp_tx.c, zd_tcp_rx.c and zd_tcp_flush.c that touches protocol
 * state runs from here, with the flag held, by whichever thread got it;
 * a thread that finds it taken leaves its bits in qp->want for the holder.
 */
#include <sched.h>

#include "hw/tcp/zd_tcp.h"
#include "hw/tcp/zd_tcp_ud.h"

void zd_tcp_qp_lock(struct zd_tcp_qp *qp)
{
	while (atomic_exchange_explicit(&qp->busy, 1, memory_order_acquire))
		sched_yield();
}

void zd_tcp_qp_unlock(struct zd_tcp_qp *qp)
{
	atomic_store_explicit(&qp->busy, 0, memory_order_seq_cst);
	/* Work asked while we held it without a holder to see it. */
	if (atomic_load(&qp->want))
		zd_tcp_qp_progress(qp, 0);
}

void zd_tcp_qp_work(struct zd_tcp_qp *qp, uint32_t want)
{
	if (ZD_UNLIKELY(qp->ud)) {
		zd_tcp_ud_work(qp, want);
		return;
	}
	if (want & ZD_TCP_W_FLUSH) {
		if (!qp->flushed)
			ZD_TCP_QP_WHY(qp, "flush asked (disconnect, reset, local check)");
		qp->local_end = true;
		if (!qp->flushed)
			zd_tcp_harvest(qp);
		if (qp->cstate == ZD_TCP_UP)
			zd_tcp_sq_complete(qp);
		atomic_store(&qp->error, 1);
	}
	if (atomic_load_explicit(&qp->error, memory_order_relaxed)) {
		zd_tcp_qp_flush_locked(qp);
		return;
	}
	if (qp->cstate == ZD_TCP_LISTEN || qp->cstate == ZD_TCP_CONNECTING)
		zd_tcp_conn_progress(qp);
	if (qp->cstate == ZD_TCP_UP) {
		/* Our HELLO first (the connector's unblocks the acceptor). */
		zd_tcp_tx_progress(qp);
		if (qp->cstate == ZD_TCP_UP && (want & ZD_TCP_W_RX))
			zd_tcp_rx_progress(qp);
		if (qp->cstate == ZD_TCP_UP)
			zd_tcp_tx_progress(qp);
	}
	if (!atomic_load_explicit(&qp->error, memory_order_relaxed))
		zd_tcp_sq_complete(qp);
	if (atomic_load_explicit(&qp->error, memory_order_relaxed))
		zd_tcp_qp_flush_locked(qp);
}

void zd_tcp_qp_progress(struct zd_tcp_qp *qp, uint32_t bits)
{
	uint32_t w = bits;

	/* seq_cst RMWs and store/load (Dekker on want vs busy): either we
	 * get the flag, or the holder's load of want after it lets go sees
	 * our bits.  A free flag (the usual case) costs two locked
	 * instructions: its exchange and the store that lets go. */
	while (atomic_exchange(&qp->busy, 1)) {
		/* Held: leave our bits to the holder, then try the flag once
		 * more (it may have let go before they were there to see).
		 * A failed try after our bits are in means its holder lets go
		 * after them, and sees them. */
		if (w == 0)
			return;
		atomic_fetch_or(&qp->want, w);
		w = 0;
	}
	for (;;) {
		/* relaxed: bits set after this load are seen by the seq_cst
		 * load after we let go. */
		if (atomic_load_explicit(&qp->want, memory_order_relaxed))
			w |= atomic_exchange(&qp->want, 0);
		if (w)
			zd_tcp_qp_work(qp, w);
		atomic_store(&qp->busy, 0);
		if (!atomic_load(&qp->want) || atomic_exchange(&qp->busy, 1))
			return;
		w = 0;
	}
}
