/*
 * The TCP soft device: hosts without RDMA hardware.
 * ia_params: "tcp <ifname | IPv4 address>"; that address is the IA address.
 *
 * This file holds the IA (open/close, limits, the waker's epoll set) and
 * the ops table; zd_tcp.h describes the design, zd_tcp_wire.h the
 * protocol, the other zd_tcp_*.c files one concept each.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/zd_cm.h"
#include "core/zd_device.h"
#include "core/zd_ia.h"
#include "core/zd_keys.h"
#include "core/zd_mem_objs.h"
#include "core/zd_netaddr.h"
#include "hw/tcp/zd_tcp.h"
#include "hw/tcp/zd_tcp_ud.h"

static const struct zd_device_limits tcp_limits = {
	/* Nothing of the device's own below what descriptors allow: a
	 * connected EP holds the CM's socket, which its data rides
	 * (qp_carry), and no other (progress=manual: tcp_ia_open). */
	.max_eps = 1 << 20,
	.fds_per_ep = 0,
	.max_dto_per_ep = 16384,
	.max_rdma_read_per_ep = 64,
	.max_evds = 8192,
	.max_evd_qlen = 1 << 20,
	.max_iov_segments = ZD_TCP_MAX_SEGS,
	.max_lmrs = 1 << 20,
	.max_lmr_block_size = UINT32_MAX,  /* DAT_SEG_LENGTH is 32-bit */
	.max_pzs = 1024,
	.max_message_size = 1u << 30,     /* 1 GiB */
	.max_rdma_size = 1u << 30,
	.max_rmrs = 0,                    /* no memory windows on this device (dat_rmr_bind) */
	.max_srqs = 1024,
	.max_recv_per_srq = 16384,
	.max_private_data = 256,
	.max_inline = 0,
	.max_ud_payload = ZD_TCP_UD_MAX_PAYLOAD,  /* one UDP datagram (zd_tcp_ud_wire.h) */
};

static DAT_RETURN tcp_ia_open(struct zd_ia *ia, const struct zd_ia_params *p)
{
	bool auto_progress = true;
	DAT_RETURN ret;

	if (p->nargs < 1) {
		zd_log_error("ia_params for tcp: expected \"tcp <ifname|IPv4> [progress=thread|manual]\","
			     " got %d arguments", p->nargs);
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	}
	for (int i = 1; i < p->nargs; i++) {
		if (strcmp(p->args[i], "progress=thread") == 0) {
			auto_progress = true;
		} else if (strcmp(p->args[i], "progress=manual") == 0) {
			auto_progress = false;
		} else {
			zd_log_error("ia_params for tcp: unknown option \"%s\" (known:"
				     " progress=thread, progress=manual)", p->args[i]);
			return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
		}
	}
	ret = zd_netaddr_resolve(p->args[0], &ia->addr);
	if (ret != DAT_SUCCESS)
		return ret;
	ia->limits = tcp_limits;
	/* progress=manual: a data connection of its own beside the CM's. */
	ia->limits.fds_per_ep = auto_progress ? 0 : 1;

	struct zd_tcp_ia *tia = calloc(1, sizeof(*tia));
	struct epoll_event e = { .events = EPOLLIN, .data.ptr = NULL };

	if (!tia)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	tia->ia = ia;
	tia->auto_progress = auto_progress;
	atomic_init(&tia->lmr_gen, 1);   /* a memo of generation 0 is empty */
	pthread_mutex_init(&tia->lock, NULL);
	tia->epfd = epoll_create1(EPOLL_CLOEXEC);
	tia->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (tia->epfd < 0 || tia->stopfd < 0 ||
	    epoll_ctl(tia->epfd, EPOLL_CTL_ADD, tia->stopfd, &e) != 0) {
		if (tia->epfd >= 0)
			close(tia->epfd);
		if (tia->stopfd >= 0)
			close(tia->stopfd);
		pthread_mutex_destroy(&tia->lock);
		free(tia);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
	}
	ia->dev_priv = tia;
	return DAT_SUCCESS;
}

static void tcp_ia_close(struct zd_ia *ia)
{
	struct zd_tcp_ia *tia = ia->dev_priv;

	if (!tia)
		return;
	zd_tcp_waker_stop(tia);
	close(tia->epfd);
	close(tia->stopfd);
	pthread_mutex_destroy(&tia->lock);
	free(tia);
	ia->dev_priv = NULL;
}

/* A remote write whose bytes are being placed (zd_tcp_rx.c's
 * rx_place_begin) when the generation moved: wait for its mark to move,
 * ZD_TCP_PLACE_WAIT_NS at most (a placement is one memcpy or readv). */
#define ZD_TCP_PLACE_WAIT_NS (2000ull * 1000 * 1000)

static void placements_wait(struct zd_tcp_ia *tia)
{
	pthread_mutex_lock(&tia->lock);
	for (struct zd_tcp_qp *qp = tia->qps; qp; qp = qp->next) {
		/* acquire: pairs with rx_place_end's release. */
		uint32_t v = atomic_load_explicit(&qp->rx_placing, memory_order_acquire);
		uint64_t t0 = 0;

		while ((v & 1) && atomic_load_explicit(&qp->rx_placing, memory_order_acquire) == v) {
			uint64_t t = zd_cm_now();

			if (!t0)
				t0 = t;
			else if (t - t0 > ZD_TCP_PLACE_WAIT_NS) {
				zd_log_error("tcp: dat_lmr_free: a peer's write still being placed "
					     "after 2 s: returning anyway");
				break;
			}
			sched_yield();
		}
	}
	pthread_mutex_unlock(&tia->lock);
}

/* An LMR goes: its keys leave the table now (core's removal after us then
 * finds nothing), and then the IA's LMR generation moves, so that no key
 * memo (zd_tcp_keymemo.h) holds it any more: a lookup that read the new
 * generation cannot find the key (removed before), and one that read the
 * old generation memoises it as stale.  A write whose bytes are coming
 * checks the generation before each placement (zd_tcp_rx.c): one that
 * began before the move is waited for, so once this returns nothing of
 * the peer's lands in that memory. */
void zd_tcp_mr_deregister(struct zd_ia *ia, struct zd_lmr *lmr)
{
	struct zd_tcp_ia *tia = ia->dev_priv;

	zd_keys_remove(ia, lmr->lkey, lmr->rkey);
	/* release: pairs with zd_tcp_keymemo_gen's acquire load: a check that
	 * reads the new generation finds the keys removed.  Then a seq_cst
	 * fence: pairs with rx_place_begin's (Dekker: it sees the new
	 * generation, or we see its mark). */
	atomic_fetch_add_explicit(&tia->lmr_gen, 1, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	placements_wait(tia);
}

static const struct zd_device_ops zd_tcp_ops = {
	.name = "tcp",
	.adapter_name = "zdapl-tcp",
	.ia_open = tcp_ia_open,
	.ia_close = tcp_ia_close,
	/* No mr_register: the key table core fills is all the device reads. */
	.cq_create = zd_tcp_cq_create,
	.cq_destroy = zd_tcp_cq_destroy,
	.cq_poll = zd_tcp_cq_poll,
	.cq_arm = zd_tcp_cq_arm,
	.qp_create = zd_tcp_qp_create,
	.qp_local_blob = zd_tcp_qp_local_blob,
	.qp_connect = zd_tcp_qp_connect,
	.qp_flush = zd_tcp_qp_flush,
	.qp_reset = zd_tcp_qp_reset,
	.qp_destroy = zd_tcp_qp_destroy,
	.qp_carry = zd_tcp_qp_carry,
	.qp_cm_send = zd_tcp_qp_cm_send,
	.mr_deregister = zd_tcp_mr_deregister,
	.ud_ah_create = zd_tcp_ud_ah_create,
	.ud_ah_destroy = zd_tcp_ud_ah_destroy,
	.post_send_ud = zd_tcp_post_send_ud,
	.srq_create = zd_tcp_srq_create,
	.srq_resize = zd_tcp_srq_resize,
	.srq_destroy = zd_tcp_srq_destroy,
	.post_send = zd_tcp_post_send,
	.post_recv = zd_tcp_post_recv,
	.post_rdma_write = zd_tcp_post_rdma_write,
	.post_rdma_read = zd_tcp_post_rdma_read,
	.post_rdma_write_imm = zd_tcp_post_rdma_write_imm,
	.post_atomic = zd_tcp_post_atomic,
	.srq_post_recv = zd_tcp_srq_post_recv,
};
ZD_DEVICE_REGISTER(zd_tcp_ops)
