/* Endpoint creation, query, reset and free.  Connecting is in zd_ep_cm.c,
 * dat_ep_modify in zd_ep_modify.c. */
#include <string.h>

#include "core/zd_api.h"
#include "core/zd_ia.h"
#include "core/zd_ep.h"
#include "core/zd_cm.h"
#include "core/zd_dto_entry.h"
#include "core/zd_ud.h"
#include "evd/zd_evd.h"

static void ep_default_attr(const struct zd_ia *ia, DAT_EP_ATTR *a)
{
	const struct zd_device_limits *l = &ia->limits;

	memset(a, 0, sizeof(*a));
	a->service_type = DAT_SERVICE_TYPE_RC;
	a->max_message_size = l->max_message_size;
	a->max_rdma_size = l->max_rdma_size;
	a->qos = DAT_QOS_BEST_EFFORT;
	a->recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a->request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a->max_recv_dtos = ZD_MIN(l->max_dto_per_ep, 256);
	a->max_request_dtos = ZD_MIN(l->max_dto_per_ep, 256);
	a->max_recv_iov = l->max_iov_segments;
	a->max_request_iov = l->max_iov_segments;
	a->max_rdma_read_in = l->max_rdma_read_per_ep;
	a->max_rdma_read_out = l->max_rdma_read_per_ep;
	a->max_rdma_read_iov = l->max_iov_segments;
	a->max_rdma_write_iov = l->max_iov_segments;
}

DAT_RETURN zd_ep_check_attr(const struct zd_ia *ia, const DAT_EP_ATTR *a)
{
	const struct zd_device_limits *l = &ia->limits;

	if ((int)a->service_type == DAT_IB_SERVICE_TYPE_UD) {
		/* A datagram is at most the device's UD payload (OFED: the MTU). */
		if (!ia->dev->post_send_ud)
			return DAT_ERROR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE);
		if (a->max_message_size > l->max_ud_payload)
			return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
	} else if (a->service_type != DAT_SERVICE_TYPE_RC) {
		return DAT_ERROR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE);
	}
	if (a->max_message_size > l->max_message_size ||
	    a->max_rdma_size > l->max_rdma_size ||
	    a->max_recv_dtos < 0 || a->max_recv_dtos > l->max_dto_per_ep ||
	    a->max_request_dtos < 0 || a->max_request_dtos > l->max_dto_per_ep ||
	    a->max_recv_iov < 0 || a->max_recv_iov > l->max_iov_segments ||
	    a->max_request_iov < 0 || a->max_request_iov > l->max_iov_segments ||
	    a->max_rdma_read_in < 0 || a->max_rdma_read_in > l->max_rdma_read_per_ep ||
	    a->max_rdma_read_out < 0 || a->max_rdma_read_out > l->max_rdma_read_per_ep ||
	    a->max_rdma_read_iov < 0 || a->max_rdma_read_iov > l->max_iov_segments ||
	    a->max_rdma_write_iov < 0 || a->max_rdma_write_iov > l->max_iov_segments)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
	return DAT_SUCCESS;
}

/* An optional EVD handle that carries @need events: of @ia, or, for
 * connection events alone, of any IA (zd_ep_set_connect_evd). */
static DAT_RETURN ep_evd(struct zd_ia *ia, DAT_EVD_HANDLE h, DAT_EVD_FLAGS need,
			 DAT_RETURN_SUBTYPE bad, struct zd_evd **out)
{
	struct zd_evd *evd;

	*out = NULL;
	if (h == DAT_HANDLE_NULL)
		return DAT_SUCCESS;
	evd = zd_obj_get(h, ZD_OBJ_EVD);
	if (!evd || !(evd->flags & need) ||
	    (evd->obj.ia != ia && need != DAT_EVD_CONNECTION_FLAG))
		return DAT_ERROR(DAT_INVALID_HANDLE, bad);
	*out = evd;
	return DAT_SUCCESS;
}

void zd_ep_set_connect_evd(struct zd_ep *ep, struct zd_evd *evd)
{
	struct zd_evd *old = ep->connect_evd;

	if (old == evd)
		return;
	if (ep->foreign_pprev) {
		*ep->foreign_pprev = ep->foreign_next;
		if (ep->foreign_next)
			ep->foreign_next->foreign_pprev = ep->foreign_pprev;
		ep->foreign_next = NULL;
		ep->foreign_pprev = NULL;
	}
	if (evd) {
		zd_obj_ref(evd);
		if (evd->obj.ia != ep->obj.ia) {
			ep->foreign_next = evd->foreign_eps;
			if (ep->foreign_next)
				ep->foreign_next->foreign_pprev = &ep->foreign_next;
			ep->foreign_pprev = &evd->foreign_eps;
			evd->foreign_eps = ep;
		}
	}
	ep->connect_evd = evd;
	if (old)
		zd_obj_unref(old);
}

void zd_ep_detach_foreign(struct zd_evd *evd)
{
	while (evd->foreign_eps)
		zd_ep_set_connect_evd(evd->foreign_eps, NULL);
}

DAT_RETURN zd_ep_create_internal(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE pz_handle,
				 DAT_EVD_HANDLE recv_evd, DAT_EVD_HANDLE request_evd,
				 DAT_EVD_HANDLE connect_evd, struct zd_srq *srq,
				 const DAT_EP_ATTR *attr, DAT_EP_HANDLE *ep_handle)
{
	struct zd_ia *ia;
	struct zd_pz *pz = NULL;
	struct zd_evd *rcv, *req, *conn;
	struct zd_ep *ep;
	DAT_RETURN ret;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	if (pz_handle != DAT_HANDLE_NULL) {
		pz = zd_obj_get(pz_handle, ZD_OBJ_PZ);
		if (!pz || pz->obj.ia != ia)
			return zd_obj_invalid_handle(ZD_OBJ_PZ);
	}
	if ((ret = ep_evd(ia, recv_evd, DAT_EVD_DTO_FLAG, DAT_INVALID_HANDLE_EVD_RECV, &rcv)) ||
	    (ret = ep_evd(ia, request_evd, DAT_EVD_DTO_FLAG | DAT_EVD_RMR_BIND_FLAG,
			  DAT_INVALID_HANDLE_EVD_REQUEST, &req)) ||
	    (ret = ep_evd(ia, connect_evd, DAT_EVD_CONNECTION_FLAG,
			  DAT_INVALID_HANDLE_EVD_CONN, &conn)))
		return ret;
	if (attr && (ret = zd_ep_check_attr(ia, attr)) != DAT_SUCCESS)
		return ret;
	if (!ep_handle)
		return DAT_ERROR(DAT_INVALID_PARAMETER, srq ? DAT_INVALID_ARG8 : DAT_INVALID_ARG7);

	ep = zd_obj_alloc(ZD_OBJ_EP, sizeof(*ep), ia);
	if (!ep)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	/* (dto_qp: NULL from the allocation until connected) */
	if (attr)
		ep->attr = *attr;
	else
		ep_default_attr(ia, &ep->attr);
	ep->pz = pz;
	ep->recv_evd = rcv;
	ep->request_evd = req;
	ep->srq = srq;
	zd_ep_set_state(ep, DAT_EP_STATE_UNCONNECTED);
	atomic_store(&ep->soft_hwm, DAT_WATERMARK_INFINITE);
	if (ia->dev->qp_create && pz) {
		ret = ia->dev->qp_create(ep);
		if (ret != DAT_SUCCESS) {
			zd_obj_release(ep);
			return ret;
		}
	}
	if (pz)
		zd_obj_ref(pz);
	if (rcv)
		zd_obj_ref(rcv);
	if (req)
		zd_obj_ref(req);
	/* The lock only for another IA's EVD (its list of EPs): the CM
	 * thread creates EPs for provider PSPs with it held, and none. */
	if (conn && conn->obj.ia != ia) {
		zd_cm_lock();
		zd_ep_set_connect_evd(ep, conn);
		zd_cm_unlock();
	} else {
		zd_ep_set_connect_evd(ep, conn);
	}
	if (srq)
		zd_obj_ref(srq);
	zd_ep_solicited_account(ep, 1);
	zd_ia_add_child(ia, &ep->obj);
	*ep_handle = ep;
	return DAT_SUCCESS;
}

DAT_RETURN zd_ep_create(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE pz_handle,
			DAT_EVD_HANDLE recv_evd, DAT_EVD_HANDLE request_evd,
			DAT_EVD_HANDLE connect_evd, const DAT_EP_ATTR *attr,
			DAT_EP_HANDLE *ep_handle)
{
	return zd_ep_create_internal(ia_handle, pz_handle, recv_evd, request_evd,
				     connect_evd, NULL, attr, ep_handle);
}

DAT_RETURN zd_ep_query(DAT_EP_HANDLE ep_handle, DAT_EP_PARAM_MASK mask, DAT_EP_PARAM *p)
{
	struct zd_ep *ep;

	ZD_GET_OR_RETURN(ep, ep_handle, ZD_OBJ_EP);
	if (!p)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	memset(p, 0, sizeof(*p));
	p->ia_handle = zd_ia_consumer_handle(ep->obj.ia);
	p->ep_state = atomic_load(&ep->state);
	p->local_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&ep->obj.ia->addr;
	p->local_port_qual = ep->local_qual;
	p->remote_ia_address_ptr = (DAT_IA_ADDRESS_PTR)&ep->remote_addr;
	p->remote_port_qual = ep->remote_qual;
	p->pz_handle = ep->pz;
	p->recv_evd_handle = ep->recv_evd;
	p->request_evd_handle = ep->request_evd;
	p->connect_evd_handle = ep->connect_evd;
	p->srq_handle = ep->srq;
	p->ep_attr = ep->attr;
	return DAT_SUCCESS;
}

DAT_RETURN zd_ep_get_status(DAT_EP_HANDLE ep_handle, DAT_EP_STATE *state,
			    DAT_BOOLEAN *recv_idle, DAT_BOOLEAN *request_idle)
{
	struct zd_ep *ep;

	ZD_GET_OR_RETURN(ep, ep_handle, ZD_OBJ_EP);
	if (state)
		*state = atomic_load(&ep->state);
	/* No DTO can be outstanding before the data path exists. */
	if (recv_idle)
		*recv_idle = DAT_TRUE;
	if (request_idle)
		*request_idle = DAT_TRUE;
	return DAT_SUCCESS;
}

/*
 * dto_qp from the state, the QP and the limits as they are now.  The
 * state may change on another thread meanwhile (the CM thread, a
 * disconnect): each setter stores, then refreshes, and a refresher that
 * finds the state changed under it goes again, so the last store follows
 * the last state.
 */
void zd_ep_dto_refresh(struct zd_ep *ep)
{
	DAT_EP_STATE s;

	do {
		s = atomic_load(&ep->state);
		const bool ready = zd_ep_connected(s) && ep->dev_priv != NULL &&
				   ep->attr.max_request_iov >= 1 &&
				   zd_rdma_iov_max(ep, ep->attr.max_rdma_write_iov) >= 1 &&
				   zd_rdma_iov_max(ep, ep->attr.max_rdma_read_iov) >= 1;

		/* release: a poster that loads the QP from here sees it set
		 * up (pairs with the address dependency of its loads). */
		atomic_store_explicit(&ep->dto_qp, ready ? ep->dev_priv : NULL,
				      memory_order_release);
	} while (atomic_load(&ep->state) != s);
}

void zd_ep_destroy(struct zd_obj *o)
{
	struct zd_ep *ep = (struct zd_ep *)o;
	struct zd_ia *ia = o->ia;

	zd_cm_ep_release(ep);  /* no CM event can reach it after this */
	zd_ud_ep_release(ep);
	/* The fast entries stop at the handle from here (zd_request_fast1:
	 * they check no magic), before the QP goes. */
	atomic_store(&ep->dto_qp, NULL);
	if (ep->dev_priv && ia->dev->qp_destroy)
		ia->dev->qp_destroy(ep);
	zd_ep_solicited_account(ep, -1);
	if (ep->pz)
		zd_obj_unref(ep->pz);
	if (ep->recv_evd)
		zd_obj_unref(ep->recv_evd);
	if (ep->request_evd)
		zd_obj_unref(ep->request_evd);
	zd_cm_lock();  /* not held here: zd_cm_ep_release took it */
	zd_ep_set_connect_evd(ep, NULL);
	zd_cm_unlock();
	if (ep->srq)
		zd_obj_unref(ep->srq);
	zd_ia_del_child(ia, o);
	zd_obj_release(o);
}

DAT_RETURN zd_ep_free(DAT_EP_HANDLE ep_handle)
{
	struct zd_ep *ep;

	ZD_GET_OR_RETURN(ep, ep_handle, ZD_OBJ_EP);
	if (zd_obj_in_use(ep))  /* an RSP or a pending CR holds it */
		return zd_ep_invalid_state(atomic_load(&ep->state));
	zd_ep_destroy(&ep->obj);
	return DAT_SUCCESS;
}

DAT_RETURN zd_ep_reset(DAT_EP_HANDLE ep_handle)
{
	const struct zd_device_ops *dev;
	DAT_RETURN ret = DAT_SUCCESS;
	struct zd_ep *ep;
	DAT_EP_STATE s;

	ZD_GET_OR_RETURN(ep, ep_handle, ZD_OBJ_EP);
	dev = ep->obj.ia->dev;
	zd_cm_lock();
	s = atomic_load(&ep->state);
	if (s == DAT_EP_STATE_DISCONNECTED) {
		/* Back to quiescent: a fresh QP, no peer. */
		if (dev->qp_reset && ep->dev_priv)
			ret = dev->qp_reset(ep);
		if (ret == DAT_SUCCESS) {
			zd_ep_set_state(ep, DAT_EP_STATE_UNCONNECTED);
			memset(&ep->remote_addr, 0, sizeof(ep->remote_addr));
			ep->remote_qual = 0;
			ep->local_qual = 0;
		}
	} else if (s != DAT_EP_STATE_UNCONNECTED) {
		ret = zd_ep_invalid_state(s);
	}
	zd_cm_unlock();
	return ret;
}

void zd_ep_solicited_account(struct zd_ep *ep, int delta)
{
	if (ep->recv_evd && (ep->attr.recv_completion_flags & DAT_COMPLETION_SOLICITED_WAIT_FLAG))
		atomic_fetch_add(&ep->recv_evd->solicited_eps, delta);
}

/* ---- receive-side queries and watermarks ---- */

/* Receive buffers allocated to @ep and not completed, or DAT_VALUE_UNKNOWN. */
static DAT_COUNT ep_recv_held(struct zd_ep *ep)
{
	const struct zd_device_ops *dev = ep->obj.ia->dev;
	DAT_COUNT avail = DAT_VALUE_UNKNOWN, held = DAT_VALUE_UNKNOWN;

	if (!ep->dev_priv)
		return 0;  /* no QP: no receive can be posted */
	if (!dev->rq_counts)
		return DAT_VALUE_UNKNOWN;
	dev->rq_counts(ep, NULL, &avail, &held);
	return held;
}

/*
 * dat_ep_recv_query(3DAT).  A device that counts allocates buffers to an EP
 * in message order (posted receives are matched in order; an SRQ buffer is
 * taken for the EP's next message), so the span equals the count.  One
 * that does not count answers DAT_VALUE_UNKNOWN for both, as the page allows.
 */
DAT_RETURN zd_ep_recv_query(DAT_EP_HANDLE h, DAT_COUNT *nbufs_allocated, DAT_COUNT *bufs_alloc_span)
{
	struct zd_ep *ep;
	DAT_COUNT held;

	ZD_GET_OR_RETURN(ep, h, ZD_OBJ_EP);
	if (!nbufs_allocated && !bufs_alloc_span)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	held = ep_recv_held(ep);
	if (nbufs_allocated)
		*nbufs_allocated = held;
	if (bufs_alloc_span)
		*bufs_alloc_span = held;
	return DAT_SUCCESS;
}

void zd_ep_soft_hwm_check(struct zd_ep *ep, DAT_COUNT count)
{
	DAT_COUNT hwm = atomic_load_explicit(&ep->soft_hwm, memory_order_relaxed);

	if (hwm == DAT_WATERMARK_INFINITE || count == DAT_VALUE_UNKNOWN || count <= hwm)
		return;
	/* Once per setting: whoever disarms it posts the event. */
	if (atomic_compare_exchange_strong(&ep->soft_hwm, &hwm, DAT_WATERMARK_INFINITE))
		zd_ia_async_error(ep->obj.ia, ep, DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT);
}

/*
 * dat_ep_set_watermark(3DAT), any EP state.  The soft watermark fires once
 * per setting, at once if already exceeded.  A hard watermark (breaking
 * the connection when exceeded) is not supported: DAT_MODEL_NOT_SUPPORTED
 * unless it is DAT_WATERMARK_INFINITE.
 */
DAT_RETURN zd_ep_set_watermark(DAT_EP_HANDLE h, DAT_COUNT soft, DAT_COUNT hard)
{
	struct zd_ep *ep;

	ZD_GET_OR_RETURN(ep, h, ZD_OBJ_EP);
	if (soft < 0 && soft != DAT_WATERMARK_INFINITE)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (hard < 0 && hard != DAT_WATERMARK_INFINITE)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (hard != DAT_WATERMARK_INFINITE)
		return DAT_ERROR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE);
	/* A soft watermark needs the device to count the EP's buffers (a NIC
	 * does not say which EP took an SRQ buffer before it completes). */
	if (soft != DAT_WATERMARK_INFINITE && ep_recv_held(ep) == DAT_VALUE_UNKNOWN)
		return DAT_ERROR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE);
	/* dat_ep_query reports it; EP attributes never arm it (stock clients
	 * zero them, which would read as a watermark of 0). */
	ep->attr.srq_soft_hw = soft;
	atomic_store(&ep->soft_hwm, soft);
	if (soft != DAT_WATERMARK_INFINITE)
		zd_ep_soft_hwm_check(ep, ep_recv_held(ep));
	return DAT_SUCCESS;
}

/* DAT_INVALID_STATE with the subtype naming the EP's state (cold). */
__attribute__((noinline, cold)) DAT_RETURN zd_ep_invalid_state(DAT_EP_STATE s)
{
	DAT_RETURN_SUBTYPE sub;

	switch (s) {
	case DAT_EP_STATE_UNCONNECTED:
		sub = DAT_INVALID_STATE_EP_UNCONNECTED;
		break;
	case DAT_EP_STATE_RESERVED:
		sub = DAT_INVALID_STATE_EP_RESERVED;
		break;
	case DAT_EP_STATE_PASSIVE_CONNECTION_PENDING:
		sub = DAT_INVALID_STATE_EP_PASSCONNPENDING;
		break;
	case DAT_EP_STATE_ACTIVE_CONNECTION_PENDING:
		sub = DAT_INVALID_STATE_EP_ACTCONNPENDING;
		break;
	case DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING:
		sub = DAT_INVALID_STATE_EP_TENTCONNPENDING;
		break;
	case DAT_EP_STATE_CONNECTED:
	case DAT_EP_STATE_CONNECTED_SINGLE_PATH:
	case DAT_EP_STATE_CONNECTED_MULTI_PATH:
		sub = DAT_INVALID_STATE_EP_CONNECTED;
		break;
	case DAT_EP_STATE_DISCONNECT_PENDING:
		sub = DAT_INVALID_STATE_EP_DISCPENDING;
		break;
	case DAT_EP_STATE_DISCONNECTED:
		sub = DAT_INVALID_STATE_EP_DISCONNECTED;
		break;
	case DAT_EP_STATE_COMPLETION_PENDING:
		sub = DAT_INVALID_STATE_EP_COMPLPENDING;
		break;
	case DAT_EP_STATE_UNCONFIGURED_UNCONNECTED:
		sub = DAT_INVALID_STATE_EP_UNCONFIGURED;
		break;
	case DAT_EP_STATE_UNCONFIGURED_RESERVED:
		sub = DAT_INVALID_STATE_EP_UNCONFRESERVED;
		break;
	case DAT_EP_STATE_UNCONFIGURED_PASSIVE:
		sub = DAT_INVALID_STATE_EP_UNCONFPASSIVE;
		break;
	case DAT_EP_STATE_UNCONFIGURED_TENTATIVE:
		sub = DAT_INVALID_STATE_EP_UNCONFTENTATIVE;
		break;
	default:
		sub = DAT_INVALID_STATE_EP_NOTREADY;
		break;
	}
	return DAT_ERROR(DAT_INVALID_STATE, sub);
}
