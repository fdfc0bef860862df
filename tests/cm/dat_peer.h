/*
 * Two processes connected over the real connection manager, each a
 * "peer": its node (cm_test.h), DTO EVDs, one registered buffer, EPs.
 * Shared by the device suites that run a parent server against a forked
 * client (tests/tcp, tests/mlx5sim); each suite opens and closes its peers
 * itself (which IA, which memory).
 */
#ifndef DAT_PEER_H
#define DAT_PEER_H

#include <stdint.h>
#include <stdio.h>

#include "cm_test.h"

#define BUF 65536                       /* each peer's registered buffer */

struct peer {
	struct node n;
	DAT_EVD_HANDLE req, rcv;
	DAT_EP_HANDLE ep;
	DAT_PSP_HANDLE psp;
	DAT_SRQ_HANDLE srq;
	int kind;                       /* the suite's memory kind, if it has several */
	uint8_t *buf;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lkey;
	DAT_RMR_CONTEXT rkey;
};

static inline void peer_ep(struct peer *p, DAT_EP_HANDLE *ep, int with_srq)
{
	DAT_EP_ATTR a;

	memset(&a, 0, sizeof(a));
	a.service_type = DAT_SERVICE_TYPE_RC;
	a.max_message_size = BUF;
	a.max_rdma_size = BUF;
	a.qos = DAT_QOS_BEST_EFFORT;
	a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a.max_recv_dtos = 32;
	a.max_request_dtos = 32;
	a.max_recv_iov = 4;
	a.max_request_iov = 4;
	a.max_rdma_read_in = 4;
	a.max_rdma_read_out = 4;
	a.ep_transport_specific_count = 0;
	a.ep_provider_specific_count = 0;
	if (with_srq) {
		DAT_SRQ_ATTR sa = { .max_recv_dtos = 64, .max_recv_iov = 4, .low_watermark = DAT_SRQ_LW_DEFAULT };

		if (!p->srq)
			CHK_RET(dat_srq_create(p->n.ia, p->n.pz, &sa, &p->srq), DAT_SUCCESS);
		CHK_RET(dat_ep_create_with_srq(p->n.ia, p->n.pz, p->rcv, p->req, p->n.conn_evd,
					       p->srq, &a, ep),
			DAT_SUCCESS);
	} else {
		CHK_RET(dat_ep_create(p->n.ia, p->n.pz, p->rcv, p->req, p->n.conn_evd, &a, ep),
			DAT_SUCCESS);
	}
}

/* Server: listen on a fresh port and tell the client which. */
static inline DAT_CONN_QUAL server_listen(struct peer *p, int fd)
{
	DAT_CONN_QUAL port;

	CHK_RET(dat_psp_create_any(p->n.ia, &port, p->n.cr_evd, DAT_PSP_CONSUMER_FLAG, &p->psp),
		DAT_SUCCESS);
	msg_send(fd, (uint32_t)port);
	return port;
}

static inline void server_accept(struct peer *p, DAT_EP_HANDLE ep)
{
	DAT_EVENT ev;

	CHK(wait_ev(p->n.cr_evd, 10 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, ep, 0, NULL),
		DAT_SUCCESS);
	CHK(wait_ev(p->n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED);
}

static inline void client_connect(struct peer *p, DAT_EP_HANDLE ep, uint32_t port)
{
	struct sockaddr_in sa;

	CHK_RET(dat_ep_connect(ep, loopback(&sa), port, 10 * SEC, 0, NULL, DAT_QOS_BEST_EFFORT,
			       DAT_CONNECT_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(wait_ev(p->n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
}

/* Next DTO completion of @evd within @us: its status (checks the cookie
 * unless ~0, and the length when @len). */
static inline int dto_wait(DAT_EVD_HANDLE evd, DAT_TIMEOUT us, uint64_t cookie, DAT_COUNT *len)
{
	DAT_EVENT ev;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

	CHK(wait_ev(evd, us, &ev) == DAT_DTO_COMPLETION_EVENT);
	if (cookie != ~0ull && d->user_cookie.as_64 != cookie) {
		fprintf(stderr, "cookie %llu, expected %llu (status %d)\n",
			(unsigned long long)d->user_cookie.as_64, (unsigned long long)cookie,
			d->status);
		CHK(d->user_cookie.as_64 == cookie);
	}
	if (len)
		*len = (DAT_COUNT)d->transfered_length;
	return d->status;
}

static inline DAT_LMR_TRIPLET seg(struct peer *p, size_t off, size_t len)
{
	DAT_LMR_TRIPLET t = { .lmr_context = p->lkey, .virtual_address = (DAT_VADDR)(uintptr_t)(p->buf + off),
			      .segment_length = (DAT_VLEN)len };
	return t;
}

static inline void post_send(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov, uint64_t cookie)
{
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	CHK_RET(dat_ep_post_send(ep, n, iov, c, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
}

#endif
