/*
 * Connection requests: what a REQ turns into on the passive side, and the
 * consumer's answer to it (dat_cr_accept, dat_cr_reject).  A CR is gone
 * once answered.  If the requester goes away first, the CR stays for the
 * consumer to answer: accepting it then ends in ACCEPT_COMPLETION_ERROR.
 */
#include <string.h>

#include "core/zd_api.h"
#include "core/zd_cm.h"
#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "core/zd_ud.h"
#include "evd/zd_evd.h"

static void refuse(struct zd_cm_conn *c)
{
	zd_cm_conn_send(c, ZD_CM_MSG_REJ, ZD_CM_REJ_NON_PEER, NULL, 0, NULL, 0);
	zd_cm_conn_close_after_flush(c);
}

static void post_cr_event(struct zd_evd *evd, struct zd_cr *cr, DAT_PSP_HANDLE sp)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_CONNECTION_REQUEST_EVENT;
	if (cr->ud) {
		/* The request of a UD QP: the extension's event (zd_ud_cm.c). */
		DAT_IB_EXTENSION_EVENT_DATA *x =
			(DAT_IB_EXTENSION_EVENT_DATA *)ev.event_extension_data;

		ev.event_number = (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_REQUEST_EVENT;
		x->type = DAT_IB_UD_CONNECT_REQUEST;
	}
	ev.evd_handle = evd;
	ev.event_data.cr_arrival_event_data.sp_handle.psp_handle = sp;
	ev.event_data.cr_arrival_event_data.local_ia_address_ptr =
		(DAT_IA_ADDRESS_PTR)&cr->obj.ia->addr;
	ev.event_data.cr_arrival_event_data.conn_qual = cr->conn_qual;
	ev.event_data.cr_arrival_event_data.cr_handle = cr;
	ev.event_data.cr_arrival_event_data.truncate_flag = DAT_FALSE;
	zd_evd_post(evd, &ev, 1);
}

void zd_cm_passive_on_query(struct zd_cm_conn *c, const struct zd_cm_hdr *h)
{
	const struct zd_cm_listener *l = c->listener;
	bool here = l && (l->psp || l->rsp) && h->conn_qual == l->qual;

	zd_cm_conn_send(c, ZD_CM_MSG_REJ, here ? ZD_CM_REJ_QUAL_HERE : ZD_CM_REJ_NO_QUAL,
			NULL, 0, NULL, 0);
	zd_cm_conn_close_after_flush(c);
}

void zd_cm_passive_on_req(struct zd_cm_conn *c, const struct zd_cm_hdr *h, const uint8_t *body)
{
	struct zd_cm_listener *l = c->listener;
	struct zd_ia *ia;
	struct zd_cr *cr;

	/* Another qualifier's service point: the requester tries its next
	 * probe port (zd_conn_qual.h). */
	if (l && (l->psp || l->rsp) && h->conn_qual != l->qual) {
		zd_cm_passive_on_query(c, h);
		return;
	}
	/* The service point is gone, or its backlog is full. */
	if (!l || (!l->psp && !l->rsp) || (l->psp && l->pending >= ZD_CM_BACKLOG)) {
		refuse(c);
		return;
	}
	ia = l->ia;
	zd_cm_conn_send(c, ZD_CM_MSG_MRA, 0, NULL, 0, NULL, 0);
	cr = zd_obj_alloc(ZD_OBJ_CR, sizeof(*cr), ia);
	if (!cr) {
		refuse(c);
		return;
	}
	cr->conn_qual = l->qual;
	cr->ud = h->type == ZD_CM_MSG_UD_REQ;
	cr->remote_addr = c->peer;
	cr->remote_addr.sin_port = 0;
	cr->remote_port_qual = ntohs(c->peer.sin_port);
	cr->pdata_len = h->pdata_len;
	memcpy(cr->pdata, body, h->pdata_len);
	c->peer_blob_len = h->blob_len;
	memcpy(c->peer_blob, body + h->pdata_len, h->blob_len);

	if (l->rsp) {
		struct zd_rsp *rsp = l->rsp;
		struct zd_evd *evd = rsp->evd;

		/* The RSP's reference on its EP passes to the CR. */
		cr->local_ep = rsp->ep;
		zd_ep_set_state(cr->local_ep, DAT_EP_STATE_PASSIVE_CONNECTION_PENDING);
		zd_obj_ref(evd);  /* outlives the RSP's reference until posted */
		zd_rsp_use_locked(rsp);
		cr->conn = c;
		c->cr = cr;
		c->state = ZD_CONN_CR_PENDING;
		c->deadline = 0;
		zd_ia_add_child(ia, &cr->obj);
		/* The used RSP, as the reference provider does (zd_rsp.c). */
		post_cr_event(evd, cr, (DAT_PSP_HANDLE)rsp);
		zd_obj_unref(evd);
		return;
	}
	if (l->psp->flags == DAT_PSP_PROVIDER_FLAG) {
		DAT_EP_HANDLE eh;

		if (zd_ep_create_internal(ia, DAT_HANDLE_NULL, DAT_HANDLE_NULL, DAT_HANDLE_NULL,
					  DAT_HANDLE_NULL, NULL, NULL, &eh) != DAT_SUCCESS) {
			zd_obj_release(cr);
			refuse(c);
			return;
		}
		cr->local_ep = eh;
		cr->local_ep_ours = 1;
		cr->local_ep->local_qual = l->qual;
		zd_ep_set_state(cr->local_ep, DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING);
		zd_obj_ref(cr->local_ep);
	}
	cr->conn = c;
	c->cr = cr;
	c->state = ZD_CONN_CR_PENDING;
	c->deadline = 0;
	l->pending++;
	zd_ia_add_child(ia, &cr->obj);
	post_cr_event(l->psp->evd, cr, l->psp);
}

/* Frees @cr; returns a provider-created EP the caller must free (after
 * dropping the lock) when @free_own_ep. */
static struct zd_ep *cr_destroy_locked(struct zd_cr *cr, int free_own_ep)
{
	struct zd_ep *ep = cr->local_ep, *to_free = NULL;

	if (cr->conn) {
		cr->conn->cr = NULL;
		zd_cm_conn_close(cr->conn);
		cr->conn = NULL;
	}
	if (ep) {
		zd_obj_unref(ep);
		if (cr->local_ep_ours) {
			if (free_own_ep)
				to_free = ep;
		} else if (atomic_load(&ep->state) == DAT_EP_STATE_PASSIVE_CONNECTION_PENDING) {
			zd_ep_set_state(ep, DAT_EP_STATE_UNCONNECTED);
			ep->local_qual = 0;
		}
	}
	zd_ia_del_child(cr->obj.ia, &cr->obj);
	zd_obj_release(cr);
	return to_free;
}

DAT_RETURN zd_cr_query(DAT_CR_HANDLE cr_handle, DAT_CR_PARAM_MASK mask, DAT_CR_PARAM *p)
{
	struct zd_cr *cr;

	ZD_GET_OR_RETURN(cr, cr_handle, ZD_OBJ_CR);
	if (!p)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	(void)mask;
	memset(p, 0, sizeof(*p));
	p->remote_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&cr->remote_addr;
	p->remote_port_qual = cr->remote_port_qual;
	p->private_data_size = cr->pdata_len;
	p->private_data = cr->pdata_len ? cr->pdata : NULL;
	p->local_ep_handle = cr->local_ep;
	return DAT_SUCCESS;
}

static DAT_RETURN cr_accept_locked(struct zd_cr *cr, DAT_EP_HANDLE ep_handle, DAT_COUNT pdata_len,
				   const DAT_PVOID pdata)
{
	struct zd_ia *ia = cr->obj.ia;
	const struct zd_device_ops *dev = ia->dev;
	struct zd_cm_conn *c = cr->conn;
	uint8_t blob[ZD_QP_BLOB_MAX];
	size_t blob_len = 0;
	struct zd_ep *ep;
	DAT_EP_STATE s;

	if (ep_handle == DAT_HANDLE_NULL) {
		ep = cr->local_ep;
		if (!ep)
			return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	} else {
		ep = zd_obj_get(ep_handle, ZD_OBJ_EP);
		if (!ep || ep->obj.ia != ia)
			return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
		/* An RSP's or provider's EP is the only one that may accept. */
		if (cr->local_ep && ep != cr->local_ep)
			return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	}
	if (pdata_len < 0 || pdata_len > zd_cm_pdata_max(ia))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (pdata_len > 0 && !pdata)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	/* A UD request is answered by a UD EP, an RC one by an RC EP. */
	if (cr->ud != zd_ep_is_ud(ep))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (cr->ud) {
		if (!ep->connect_evd)
			return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN);
		if (!ep->dev_priv)
			return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONFIGURED);
		if (!c || c->state != ZD_CONN_CR_PENDING) {
			zd_cm_ep_event(ep, (DAT_EVENT_NUMBER)DAT_IB_UD_CONNECTION_ERROR_EVENT, NULL, 0);
			return DAT_SUCCESS;
		}
		cr->conn = NULL;
		c->ud = 1;
		return zd_cm_ud_accept_locked(c, ep, pdata, (size_t)pdata_len);
	}
	s = atomic_load(&ep->state);
	if (ep == cr->local_ep ? (s != DAT_EP_STATE_PASSIVE_CONNECTION_PENDING &&
				  s != DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING)
			       : s != DAT_EP_STATE_UNCONNECTED)
		return zd_ep_invalid_state(s);
	if (!ep->connect_evd)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN);
	if (dev->qp_create && !ep->dev_priv)
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONFIGURED);

	ep->remote_addr = cr->remote_addr;
	ep->remote_qual = cr->remote_port_qual;
	ep->local_qual = cr->conn_qual;
	if (!c || c->state != ZD_CONN_CR_PENDING) {
		/* The requester left: nothing to complete the accept with. */
		zd_ep_set_state(ep, DAT_EP_STATE_DISCONNECTED);
		zd_cm_ep_event(ep, DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, NULL, 0);
		return DAT_SUCCESS;
	}
	if (zd_cm_qp_connect(ep, c->peer_blob, c->peer_blob_len) != DAT_SUCCESS) {
		refuse(c);
		cr->conn = NULL;
		zd_ep_set_state(ep, DAT_EP_STATE_DISCONNECTED);
		zd_cm_ep_event(ep, DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR, NULL, 0);
		return DAT_SUCCESS;
	}
	if (dev->qp_local_blob && ep->dev_priv)
		blob_len = dev->qp_local_blob(ep, blob, sizeof(blob));

	/* The conn moves from the CR to the EP. */
	if (c->listener)
		c->listener->pending--;
	c->listener = NULL;
	c->cr = NULL;
	cr->conn = NULL;
	c->ep = ep;
	zd_ep_set_cm_conn(ep, c);
	c->state = ZD_CONN_REP_SENT;
	c->deadline = zd_cm_now() + ZD_CM_WAIT_RTU_NS;
	zd_ep_set_state(ep, DAT_EP_STATE_COMPLETION_PENDING);
	zd_cm_conn_send(c, ZD_CM_MSG_REP, 0, pdata, (size_t)pdata_len, blob, blob_len);
	zd_cm_kick();
	return DAT_SUCCESS;
}

DAT_RETURN zd_cr_accept(DAT_CR_HANDLE cr_handle, DAT_EP_HANDLE ep_handle, DAT_COUNT pdata_len,
			const DAT_PVOID pdata)
{
	struct zd_cr *cr;
	DAT_RETURN ret;

	zd_cm_lock();
	cr = zd_obj_get(cr_handle, ZD_OBJ_CR);
	if (!cr) {
		zd_cm_unlock();
		return zd_obj_invalid_handle(ZD_OBJ_CR);
	}
	ret = cr_accept_locked(cr, ep_handle, pdata_len, pdata);
	if (ret == DAT_SUCCESS) {
		zd_count_ia(&cr->obj.ia->cnt, DCNT_IA_SP_CR_ACCEPTED);
		/* The EP (the provider's too) is the consumer's now. */
		cr->local_ep_ours = 0;
		if (cr->local_ep)
			zd_obj_unref(cr->local_ep);
		cr->local_ep = NULL;
		cr_destroy_locked(cr, 0);
	}
	zd_cm_unlock();
	return ret;
}

DAT_RETURN zd_cr_reject(DAT_CR_HANDLE cr_handle, DAT_COUNT pdata_len, const DAT_PVOID pdata)
{
	struct zd_ep *own_ep = NULL;
	struct zd_cr *cr;
	DAT_RETURN ret = DAT_SUCCESS;

	zd_cm_lock();
	cr = zd_obj_get(cr_handle, ZD_OBJ_CR);
	if (!cr) {
		ret = zd_obj_invalid_handle(ZD_OBJ_CR);
	} else if (pdata_len < 0 || pdata_len > zd_cm_pdata_max(cr->obj.ia)) {
		ret = DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	} else if (pdata_len > 0 && !pdata) {
		ret = DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	} else {
		struct zd_cm_conn *c = cr->conn;

		if (c && c->state == ZD_CONN_CR_PENDING) {
			zd_cm_conn_send(c, ZD_CM_MSG_REJ, ZD_CM_REJ_PEER, pdata, (size_t)pdata_len,
					NULL, 0);
			cr->conn = NULL;
			zd_cm_conn_close_after_flush(c);
		}
		zd_count_ia(&cr->obj.ia->cnt, DCNT_IA_SP_CR_REJECTED);
		own_ep = cr_destroy_locked(cr, 1);
	}
	zd_cm_unlock();
	if (own_ep)
		zd_ep_destroy(&own_ep->obj);  /* the provider's EP goes with its CR */
	return ret;
}

DAT_RETURN zd_cr_handoff(DAT_CR_HANDLE cr_handle, DAT_CONN_QUAL handoff)
{
	struct zd_cr *cr;

	(void)handoff;
	ZD_GET_OR_RETURN(cr, cr_handle, ZD_OBJ_CR);
	(void)cr;
	return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
}

void zd_cr_destroy(struct zd_obj *o)
{
	zd_cm_lock();
	/* The provider's EP, if any, is an IA child freed after the CRs. */
	if (zd_obj_get(o, ZD_OBJ_CR))
		cr_destroy_locked((struct zd_cr *)o, 0);
	zd_cm_unlock();
}
