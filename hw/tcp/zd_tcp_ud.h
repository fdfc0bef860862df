/*
 * Unreliable datagrams on the tcp device (zd_tcp_ud.c; wire format
 * zd_tcp_ud_wire.h).  A UD QP is a struct zd_tcp_qp whose ->ud is set: it
 * has the RC QP's receive queue (or SRQ), CQ links, progress flag and
 * place in the IA's lists, so the consumer's polls, cq_arm and the IA's
 * thread drive it as they drive an RC QP, but its socket is one UDP
 * socket, its work (zd_tcp_ud_work) is reading datagrams, and it has no
 * send queue: post_send_ud is one sendmsg.
 */
#ifndef ZD_TCP_UD_H
#define ZD_TCP_UD_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/zd_device.h"
#include "hw/tcp/zd_tcp_ud_wire.h"

struct zd_tcp_qp;

/* What a UD QP has beyond an RC QP's receive side. */
struct zd_tcp_ud {
	uint32_t qpn;                     /* unique in this process */
	uint64_t key;                     /* random: datagrams must name it */
	uint32_t addr;                    /* its socket's, network order (the blob) */
	uint16_t port;
	/* Datagrams dropped (progress holder): no receive posted, not for
	 * this QP, and by the kernel for want of socket buffer room (its
	 * count, SO_RXQ_OVFL).  ZDAPL_TCP_DEBUG=1 logs each drop. */
	uint64_t rx_no_recv, rx_bad, rx_overflow;
	/* Datagrams the kernel refused to send (poster). */
	_Atomic uint64_t tx_dropped;
};

/* qp_create of a UD EP (after the receive queue exists and qp_state_init):
 * the UDP socket on the IA address in qp->fd, registered in the IA's epoll
 * set, and qp->ud; 0, or -1 (nothing left to undo but what qp_free frees). */
int zd_tcp_ud_open(struct zd_tcp_qp *qp);
/* qp_local_blob of a UD QP. */
size_t zd_tcp_ud_blob(struct zd_tcp_qp *qp, void *blob, size_t max);
/* Holder: one round of the work bits @want (zd_tcp_qp_work's UD twin). */
void zd_tcp_ud_work(struct zd_tcp_qp *qp, uint32_t want);

zd_device_ud_ah_create_fn zd_tcp_ud_ah_create;
zd_device_ud_ah_destroy_fn zd_tcp_ud_ah_destroy;
zd_device_post_send_ud_fn zd_tcp_post_send_ud;

#endif /* ZD_TCP_UD_H */
