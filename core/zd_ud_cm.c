/*
 * UD "connections" (dat_ib_extensions.h): dat_ep_connect and dat_cr_accept
 * on a UD EP exchange the two UD QPs' addresses through the same
 * REQ/REP/RTU frames as RC (the REQ is a UD_REQ), but nothing is connected:
 * each side gets DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED with an address
 * handle for the other QP (active: DAT_IB_UD_REMOTE_AH with the
 * acceptor's private data; passive, when the RTU arrives:
 * DAT_IB_UD_PASSIVE_REMOTE_AH), and the CM connection closes at once.  A UD
 * EP may connect and accept any number of times, in any state; its state
 * never changes (EP state is about the one RC connection), and no QP is
 * flushed when an exchange fails: the failure is an event of its own
 * (DAT_IB_UD_CONNECTION_REJECT_EVENT, DAT_IB_UD_CONNECTION_ERROR_EVENT).
 * All with zd_cm.lock held.
 */
#include <string.h>

#include "core/zd_api.h"
#include "core/zd_cm.h"
#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "core/zd_ud.h"
#include "evd/zd_evd.h"

/* Posts a UD connection event of @type (extension type @xtype) on @ep's
 * connect EVD; @ah/@cm for an ESTABLISHED one (NULL: none), whose @pdata
 * is already the token's own copy (zd_ud_issue); other events' private
 * data is copied into the EP's. */
static void ud_event(struct zd_ep *ep, DAT_IB_EVENT_NUMBER type, DAT_IB_EXT_TYPE xtype,
		     const void *pdata, size_t len, const DAT_IB_ADDR_HANDLE *ah, uint64_t cm)
{
	DAT_EVENT ev;
	DAT_IB_EXTENSION_EVENT_DATA *x = (DAT_IB_EXTENSION_EVENT_DATA *)ev.event_extension_data;

	if (!ep->connect_evd)
		return;
	memset(&ev, 0, sizeof(ev));
	ev.event_number = (DAT_EVENT_NUMBER)type;
	ev.evd_handle = ep->connect_evd;
	ev.event_data.connect_event_data.ep_handle = ep;
	if (len) {
		if (!ah) {
			memcpy(ep->cm_pdata, pdata, len);
			ep->cm_pdata_len = (DAT_COUNT)len;
			pdata = ep->cm_pdata;
		}
		ev.event_data.connect_event_data.private_data = (DAT_PVOID)pdata;
		ev.event_data.connect_event_data.private_data_size = (DAT_COUNT)len;
	}
	x->type = xtype;
	x->status = type == DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED ? DAT_OP_SUCCESS : DAT_IB_OP_ERR;
	if (ah) {
		x->remote_ah = *ah;
		x->context.as_64 = cm;
	}
	atomic_fetch_add_explicit(&ep->connect_evd->conn_events, 1, memory_order_relaxed);
	zd_evd_post(ep->connect_evd, &ev, 1);
}

/* Ends @c's exchange: its EP hears no more of it. */
static void ud_conn_done(struct zd_cm_conn *c, bool flush_first)
{
	c->ep = NULL;
	if (flush_first)
		zd_cm_conn_close_after_flush(c);
	else
		zd_cm_conn_close(c);
}

/* Both sides: the address handle for the peer QP (@blob) and the event. */
static void ud_established(struct zd_ep *ep, const struct sockaddr_in *peer, const void *blob,
			   size_t blob_len, DAT_IB_EXT_TYPE xtype, const void *pdata, size_t len)
{
	struct sockaddr_in ia = *peer;
	DAT_IB_ADDR_HANDLE ah;
	const void *copy = NULL;
	uint64_t cm;

	ia.sin_port = 0;
	if (zd_ud_issue(ep, blob, blob_len, &ia, pdata, len, &ah, &cm, &copy) != DAT_SUCCESS) {
		ud_event(ep, DAT_IB_UD_CONNECTION_ERROR_EVENT, DAT_IB_UD_CONNECT_ERROR, NULL, 0,
			 NULL, 0);
		return;
	}
	zd_count_ia(&ep->obj.ia->cnt, DCNT_IA_CM_AH_RESOLVED);
	ud_event(ep, DAT_IB_UD_CONNECTION_EVENT_ESTABLISHED, xtype, copy, len, &ah, cm);
}

void zd_cm_ud_on_rep(struct zd_cm_conn *c, const struct zd_cm_hdr *h, const uint8_t *body)
{
	if (c->ep) {
		zd_cm_conn_send(c, ZD_CM_MSG_RTU, 0, NULL, 0, NULL, 0);
		ud_established(c->ep, &c->peer, body + h->pdata_len, h->blob_len,
			       DAT_IB_UD_REMOTE_AH, body, h->pdata_len);
	}
	ud_conn_done(c, true);
}

void zd_cm_ud_on_rtu(struct zd_cm_conn *c)
{
	if (c->ep)
		ud_established(c->ep, &c->peer, c->peer_blob, c->peer_blob_len,
			       DAT_IB_UD_PASSIVE_REMOTE_AH, NULL, 0);
	ud_conn_done(c, false);
}

void zd_cm_ud_on_rej(struct zd_cm_conn *c, const struct zd_cm_hdr *h, const uint8_t *body)
{
	if (c->ep)
		ud_event(c->ep, DAT_IB_UD_CONNECTION_REJECT_EVENT, DAT_IB_UD_CONNECT_REJECT,
			 h->reason == ZD_CM_REJ_PEER ? body : NULL,
			 h->reason == ZD_CM_REJ_PEER ? h->pdata_len : 0, NULL, 0);
	ud_conn_done(c, false);
}

void zd_cm_ud_failed(struct zd_cm_conn *c)
{
	if (c->ep)
		ud_event(c->ep, DAT_IB_UD_CONNECTION_ERROR_EVENT, DAT_IB_UD_CONNECT_ERROR, NULL, 0,
			 NULL, 0);
	ud_conn_done(c, false);
}

DAT_RETURN zd_cm_ud_accept_locked(struct zd_cm_conn *c, struct zd_ep *ep, const void *pdata,
				  size_t pdata_len)
{
	const struct zd_device_ops *dev = ep->obj.ia->dev;
	uint8_t blob[ZD_QP_BLOB_MAX];
	size_t blob_len = dev->qp_local_blob(ep, blob, sizeof(blob));

	if (c->listener)
		c->listener->pending--;
	c->listener = NULL;
	c->cr = NULL;
	c->ep = ep;                      /* not ep->cm_conn: the EP may have many */
	c->state = ZD_CONN_REP_SENT;
	c->deadline = zd_cm_now() + ZD_CM_WAIT_RTU_NS;
	zd_cm_conn_send(c, ZD_CM_MSG_REP, 0, pdata, pdata_len, blob, blob_len);
	zd_cm_kick();
	return DAT_SUCCESS;
}

void zd_cm_ud_ep_release(struct zd_ep *ep)
{
	struct zd_cm_conn *c, *n;

	if (!zd_cm.conns.next)
		return;  /* the CM never started: no exchange */
	for (c = zd_cm.conns.next; c != &zd_cm.conns; c = n) {
		n = c->next;  /* closing unlinks c */
		if (c->ud && c->ep == ep)
			ud_conn_done(c, false);
	}
}
