/*
 * The UD address exchange between two struct peer (dat_peer.h), as the
 * device suites drive it: dat_ep_connect to a PSP of this host with a
 * 4-byte tag, dat_cr_accept of the DAT_IB_UD_CONNECTION_REQUEST_EVENT on
 * the EP the tag names, and the DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED
 * each side gets (address handle, CM handle, the acceptor's echo).
 * Then datagrams: posting one, and checking the send and receive
 * completions (DAT_IB_DTO_EVENTs).  Include after dat_peer.h.
 */
#ifndef UD_PEER_H
#define UD_PEER_H

#include <stdbool.h>
#include <dat2/dat_ib_extensions.h>  /* after udat.h (dat_peer.h) */

#define GRH 40                  /* ZD_UD_GRH_BYTES: in front of each datagram received */

static DAT_IB_EXTENSION_EVENT_DATA *ext(DAT_EVENT *ev)
{
	return (DAT_IB_EXTENSION_EVENT_DATA *)ev->event_extension_data;
}

/* Active side: asks the UD PSP @port on this host for its QP, tagged @tag
 * (4 bytes of private data, which the acceptor echoes). */
static void ud_connect(DAT_EP_HANDLE ep, DAT_CONN_QUAL port, uint32_t tag)
{
	struct sockaddr_in sa;
	uint32_t pd = htonl(tag);

	CHK_RET(dat_ep_connect(ep, loopback(&sa), port, 10 * SEC, 4, &pd, DAT_QOS_BEST_EFFORT,
			       DAT_CONNECT_DEFAULT_FLAG),
		DAT_SUCCESS);
}

/* Passive side: the next UD request on @p's CR EVD, accepted on
 * @eps[its tag] with the tag echoed; the tag. */
static uint32_t ud_accept(struct peer *p, DAT_EP_HANDLE *eps, uint32_t neps)
{
	DAT_EVENT ev;
	DAT_CR_PARAM cp;
	DAT_CR_HANDLE cr;
	uint32_t tag;

	CHK(wait_ev(p->n.cr_evd, 10 * SEC, &ev) ==
	    (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_REQUEST_EVENT);
	CHK(ext(&ev)->type == DAT_IB_UD_CONNECT_REQUEST);
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	CHK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, &cp), DAT_SUCCESS);
	CHK(cp.private_data_size == 4);
	memcpy(&tag, cp.private_data, 4);
	tag = ntohl(tag);
	CHK(tag < neps);
	CHK_RET(dat_cr_accept(cr, eps[tag], 4, cp.private_data), DAT_SUCCESS);
	return tag;
}

/* One DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED. */
struct ud_est {
	DAT_EP_HANDLE ep;
	DAT_IB_ADDR_HANDLE ah;
	uint64_t cm;
	bool active;                    /* DAT_IB_UD_REMOTE_AH (else PASSIVE_) */
	uint32_t tag;                   /* active: the acceptor's echo */
};

static struct ud_est ud_established(struct peer *p)
{
	DAT_EVENT ev;
	DAT_IB_EXTENSION_EVENT_DATA *x = ext(&ev);
	const DAT_CONNECTION_EVENT_DATA *c = &ev.event_data.connect_event_data;
	struct ud_est e;

	CHK(wait_ev(p->n.conn_evd, 10 * SEC, &ev) ==
	    (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED);
	CHK(x->status == DAT_OP_SUCCESS);
	CHK(x->type == DAT_IB_UD_REMOTE_AH || x->type == DAT_IB_UD_PASSIVE_REMOTE_AH);
	memset(&e, 0, sizeof(e));
	e.active = x->type == DAT_IB_UD_REMOTE_AH;
	e.ep = c->ep_handle;
	e.ah = x->remote_ah;
	e.cm = x->context.as_64;
	CHK(e.ah.ah != NULL && e.cm != 0);
	if (e.active) {
		CHK(c->private_data_size == 4 && c->private_data);
		memcpy(&e.tag, c->private_data, 4);
		e.tag = ntohl(e.tag);
	}
	return e;
}

/* In one process: @ea of @a learns @eb of @b (*ab) and @eb learns @ea
 * (*ba), with their CM handles freed. */
static void ud_pair(struct peer *a, DAT_EP_HANDLE ea, struct peer *b, DAT_EP_HANDLE eb,
		    DAT_IB_ADDR_HANDLE *ab, DAT_IB_ADDR_HANDLE *ba)
{
	DAT_CONN_QUAL port;
	DAT_PSP_HANDLE psp;
	struct ud_est e;

	CHK_RET(dat_psp_create_any(b->n.ia, &port, b->n.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		DAT_SUCCESS);
	ud_connect(ea, port, 0);
	ud_accept(b, &eb, 1);
	e = ud_established(a);
	CHK(e.active && e.ep == ea && e.tag == 0);
	*ab = e.ah;
	CHK_RET(dat_ib_ud_cm_free(ea, (DAT_CONTEXT){ .as_64 = e.cm }), DAT_SUCCESS);
	e = ud_established(b);
	CHK(!e.active && e.ep == eb);
	*ba = e.ah;
	CHK_RET(dat_ib_ud_cm_free(eb, (DAT_CONTEXT){ .as_64 = e.cm }), DAT_SUCCESS);
	CHK_RET(dat_psp_free(psp), DAT_SUCCESS);
}

/* ---- datagrams ---- */

static DAT_RETURN send_ud(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			  DAT_IB_ADDR_HANDLE *ah, uint64_t cookie, DAT_COMPLETION_FLAGS flags)
{
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	return dat_ib_post_send_ud(ep, n, iov, ah, c, flags);
}

/* The next completion on @evd, which must be an extension event of @op
 * (DAT_IB_DTO_SEND_UD/RECV_UD) for @ep with @cookie (unless ~0): its
 * status, its length into *len. */
static int ud_wait(DAT_EVD_HANDLE evd, DAT_DTOS op, DAT_EP_HANDLE ep, uint64_t cookie,
		   DAT_COUNT *len)
{
	DAT_EVENT ev;
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

	CHK(wait_ev(evd, 10 * SEC, &ev) == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	CHK(d->operation == op);
	CHK(ext(&ev)->type == (op == (DAT_DTOS)DAT_IB_DTO_SEND_UD ? DAT_IB_UD_SEND : DAT_IB_UD_RECV));
	CHK(ext(&ev)->status == (d->status == DAT_DTO_SUCCESS ? DAT_OP_SUCCESS : DAT_IB_OP_ERR));
	CHK(d->ep_handle == ep);
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

/* Sends @len bytes at @off of @p's buffer to @ah; its successful
 * completion is checked. */
static void send_ud_wait(struct peer *p, DAT_EP_HANDLE ep, DAT_IB_ADDR_HANDLE *ah, size_t off,
			 size_t len, uint64_t cookie)
{
	DAT_LMR_TRIPLET iov = seg(p, off, len);
	DAT_COUNT got;

	CHK_RET(send_ud(ep, 1, &iov, ah, cookie, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
	CHK(ud_wait(p->req, (DAT_DTOS)DAT_IB_DTO_SEND_UD, ep, cookie, &got) == DAT_DTO_SUCCESS);
	CHK(got == (DAT_COUNT)len);
}

/* The next receive completion of @p: success, @cookie, @len payload bytes
 * at @off + GRH equal to @want. */
static void recv_check(struct peer *p, DAT_EP_HANDLE ep, uint64_t cookie, size_t off,
		       const uint8_t *want, size_t len)
{
	DAT_COUNT got;

	CHK(ud_wait(p->rcv, (DAT_DTOS)DAT_IB_DTO_RECV_UD, ep, cookie, &got) == DAT_DTO_SUCCESS);
	CHK(got == (DAT_COUNT)(len + GRH));
	CHK(memcmp(p->buf + off + GRH, want, len) == 0);
}

#endif
