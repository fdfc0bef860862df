/*
 * Reserved service points: a conn_qual (any 64 bits, as for PSPs) bound to one
 * EP, which goes RESERVED.  The first request turns into a CR for that EP
 * (now PASSIVE_CONNECTION_PENDING) and the RSP stops listening: it is
 * single-use.  The connection request event names the RSP, and the RSP
 * handle stays valid, used up, until dat_rsp_free (or dat_ia_close), as in
 * the OFED reference provider (dapl_cr_callback.c posts sp_ptr; dapltest
 * -T T -r checks sp_handle against its RSP and frees the RSP once
 * connected).  dat.h's comment on DAT_CR_ARRIVAL_EVENT_DATA says the RSP is
 * destroyed and sp_handle is NULL; no client relies on that.  A used RSP
 * holds no EP and no EVD, so the EP and the EVD can go before it.
 */
#include <string.h>

#include "core/zd_api.h"
#include "core/zd_cm.h"
#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "evd/zd_evd.h"

DAT_RETURN zd_rsp_create(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL conn_qual,
			 DAT_EP_HANDLE ep_handle, DAT_EVD_HANDLE evd_handle,
			 DAT_RSP_HANDLE *rsp_handle)
{
	struct zd_cm_listener *l;
	struct zd_rsp *rsp;
	struct zd_evd *evd;
	struct zd_ep *ep;
	struct zd_ia *ia;
	DAT_EP_STATE s;
	DAT_RETURN ret;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	ep = zd_obj_get(ep_handle, ZD_OBJ_EP);
	if (!ep || ep->obj.ia != ia)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	evd = zd_obj_get(evd_handle, ZD_OBJ_EVD);
	if (!evd || evd->obj.ia != ia || !(evd->flags & DAT_EVD_CR_FLAG))
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR);
	if (!rsp_handle)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);

	rsp = zd_obj_alloc(ZD_OBJ_RSP, sizeof(*rsp), ia);
	if (!rsp)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	zd_cm_lock();
	s = atomic_load(&ep->state);
	if (s != DAT_EP_STATE_UNCONNECTED) {
		ret = zd_ep_invalid_state(s);
		goto err_unlock;
	}
	ret = zd_cm_listen(ia, conn_qual, false, &l);
	if (ret != DAT_SUCCESS)
		goto err_unlock;
	rsp->conn_qual = conn_qual;
	rsp->evd = evd;
	rsp->ep = ep;
	rsp->listener = l;
	l->rsp = rsp;
	zd_obj_ref(evd);
	zd_obj_ref(ep);
	zd_ep_set_state(ep, DAT_EP_STATE_RESERVED);
	ep->local_qual = conn_qual;
	zd_ia_add_child(ia, &rsp->obj);
	zd_cm_unlock();
	*rsp_handle = rsp;
	return DAT_SUCCESS;

err_unlock:
	zd_cm_unlock();
	zd_obj_release(rsp);
	return ret;
}

DAT_RETURN zd_rsp_query(DAT_RSP_HANDLE rsp_handle, DAT_RSP_PARAM_MASK mask, DAT_RSP_PARAM *p)
{
	struct zd_rsp *rsp;

	ZD_GET_OR_RETURN(rsp, rsp_handle, ZD_OBJ_RSP);
	if (!p)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	(void)mask;
	memset(p, 0, sizeof(*p));
	p->ia_handle = zd_ia_consumer_handle(rsp->obj.ia);
	p->conn_qual = rsp->conn_qual;
	p->evd_handle = rsp->evd;
	p->ep_handle = rsp->ep;
	return DAT_SUCCESS;
}

/* A request arrived: the EP (and the RSP's reference on it) passes to the
 * CR, the listener closes; the RSP lives on, used, until freed. */
void zd_rsp_use_locked(struct zd_rsp *rsp)
{
	if (rsp->listener)
		zd_cm_listener_close(rsp->listener);
	rsp->listener = NULL;
	rsp->ep = NULL;
	if (rsp->evd)
		zd_obj_unref(rsp->evd);
	rsp->evd = NULL;
}

void zd_rsp_destroy_locked(struct zd_rsp *rsp)
{
	if (rsp->listener)
		zd_cm_listener_close(rsp->listener);
	rsp->listener = NULL;
	if (rsp->ep) {
		if (atomic_load(&rsp->ep->state) == DAT_EP_STATE_RESERVED) {
			zd_ep_set_state(rsp->ep, DAT_EP_STATE_UNCONNECTED);
			rsp->ep->local_qual = 0;
		}
		zd_obj_unref(rsp->ep);
	}
	if (rsp->evd)
		zd_obj_unref(rsp->evd);
	zd_ia_del_child(rsp->obj.ia, &rsp->obj);
	zd_obj_release(rsp);
}

DAT_RETURN zd_rsp_free(DAT_RSP_HANDLE rsp_handle)
{
	struct zd_rsp *rsp;

	zd_cm_lock();
	rsp = zd_obj_get(rsp_handle, ZD_OBJ_RSP);
	if (rsp)
		zd_rsp_destroy_locked(rsp);
	zd_cm_unlock();
	return rsp ? DAT_SUCCESS : zd_obj_invalid_handle(ZD_OBJ_RSP);
}

void zd_rsp_destroy(struct zd_obj *o)
{
	zd_cm_lock();
	if (zd_obj_get(o, ZD_OBJ_RSP))
		zd_rsp_destroy_locked((struct zd_rsp *)o);
	zd_cm_unlock();
}
