/*
 * Remote memory regions (memory windows).  dat_rmr_bind checks the bind
 * here (handles, IA, PZ, window inside the LMR, rights the LMR grants, a
 * connected EP), gives the RMR a fresh key in ia->keys and hands the rest
 * to the device (rmr_bind in zd_device.h): making the key reach the window
 * only, retiring the old key and queueing the completion behind the EP's
 * earlier ones.  A bound RMR holds its LMR (dat_lmr_free: DAT_INVALID_STATE).
 * Binds of one RMR are the consumer's to serialise, as posts to one EP are.
 */
#include <string.h>

#include "core/zd_api.h"
#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "core/zd_keys.h"
#include "core/zd_mem_objs.h"

#define ZD_RMR_REMOTE_PRIV (DAT_MEM_PRIV_REMOTE_READ_FLAG | DAT_MEM_PRIV_REMOTE_WRITE_FLAG)
#define ZD_RMR_BIND_FLAGS                                                   \
	(DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_UNSIGNALLED_FLAG |    \
	 DAT_COMPLETION_BARRIER_FENCE_FLAG)

static DAT_RETURN rmr_create(DAT_PZ_HANDLE pz_handle, DAT_RMR_HANDLE *rmr_handle, int for_ep)
{
	struct zd_pz *pz;
	struct zd_rmr *rmr;

	ZD_GET_OR_RETURN(pz, pz_handle, ZD_OBJ_PZ);
	if (!rmr_handle)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	rmr = zd_obj_alloc(ZD_OBJ_RMR, sizeof(*rmr), pz->obj.ia);
	if (!rmr)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	rmr->pz = pz;
	rmr->for_ep = for_ep;
	zd_obj_ref(pz);
	zd_ia_add_child(pz->obj.ia, &rmr->obj);
	*rmr_handle = rmr;
	return DAT_SUCCESS;
}

DAT_RETURN zd_rmr_create(DAT_PZ_HANDLE pz, DAT_RMR_HANDLE *rmr)
{
	return rmr_create(pz, rmr, 0);
}

DAT_RETURN zd_rmr_create_for_ep(DAT_PZ_HANDLE pz, DAT_RMR_HANDLE *rmr)
{
	return rmr_create(pz, rmr, 1);
}

DAT_RETURN zd_rmr_query(DAT_RMR_HANDLE rmr_handle, DAT_RMR_PARAM_MASK mask,
			DAT_RMR_PARAM *p)
{
	struct zd_rmr *rmr;

	ZD_GET_OR_RETURN(rmr, rmr_handle, ZD_OBJ_RMR);
	if (!p)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	p->ia_handle = zd_ia_consumer_handle(rmr->obj.ia);
	p->pz_handle = rmr->pz;
	p->lmr_triplet = rmr->window;
	p->mem_priv = rmr->priv;
	p->rmr_context = rmr->rkey;
	p->rmr_scope = DAT_RMR_SCOPE_PZ;
	p->va_type = rmr->va_type;
	return DAT_SUCCESS;
}

static bool ep_connected(DAT_EP_STATE s)
{
	return s == DAT_EP_STATE_CONNECTED || s == DAT_EP_STATE_CONNECTED_SINGLE_PATH ||
	       s == DAT_EP_STATE_CONNECTED_MULTI_PATH;
}

DAT_RETURN zd_rmr_bind(DAT_RMR_HANDLE rmr_handle, DAT_LMR_HANDLE lmr_handle,
		       const DAT_LMR_TRIPLET *triplet, DAT_MEM_PRIV_FLAGS priv,
		       DAT_VA_TYPE va_type, DAT_EP_HANDLE ep_handle, DAT_RMR_COOKIE cookie,
		       DAT_COMPLETION_FLAGS flags, DAT_RMR_CONTEXT *context)
{
	const struct zd_device_ops *dev;
	struct zd_rmr *rmr;
	struct {
		struct zd_lmr *lmr;
		DAT_LMR_TRIPLET window;
		DAT_MEM_PRIV_FLAGS priv;
		DAT_VA_TYPE va_type;
		uint32_t rkey;
	} saved;
	struct zd_lmr *lmr = NULL;
	struct zd_ep *ep;
	struct zd_ia *ia;
	DAT_EP_STATE state;
	DAT_EVENT ev, *evp = NULL;
	DAT_RETURN ret;
	bool bind;

	ZD_GET_OR_RETURN(rmr, rmr_handle, ZD_OBJ_RMR);
	ia = rmr->obj.ia;
	ZD_GET_OR_RETURN(ep, ep_handle, ZD_OBJ_EP);
	if (ep->obj.ia != ia)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	/* lmr_handle NULL or an empty window: unbind. */
	bind = lmr_handle != DAT_HANDLE_NULL && triplet && triplet->segment_length != 0;
	if (bind) {
		lmr = zd_obj_get(lmr_handle, ZD_OBJ_LMR);
		if (!lmr || lmr->obj.ia != ia)
			return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
		if (triplet->lmr_context != lmr->lkey)
			return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
		/* DAT_MEM_PRIV_EXTENSION_BASE: the IB extensions' remote atomic
		 * right (DAT_IB_MEM_PRIV_REMOTE_ATOMIC), as for an LMR. */
		if (priv & ~(DAT_MEM_PRIV_FLAGS)(DAT_MEM_PRIV_ALL_FLAG |
						 DAT_MEM_PRIV_EXTENSION_BASE))
			return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
		if (va_type != DAT_VA_TYPE_VA && va_type != DAT_VA_TYPE_ZB)
			return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
		if (va_type != lmr->va_type)
			return DAT_ERROR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE);
		if (!zd_range_in(lmr->addr, lmr->length, triplet->virtual_address,
				 triplet->segment_length))
			return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	} else if (lmr_handle != DAT_HANDLE_NULL) {
		if (!zd_obj_get(lmr_handle, ZD_OBJ_LMR))
			return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
		if (!triplet)
			return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	}
	if (flags & ~(DAT_COMPLETION_FLAGS)ZD_RMR_BIND_FLAGS)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8);
	/* One PZ for the RMR, the LMR and the EP. */
	if (ep->pz != rmr->pz || (lmr && lmr->pz != rmr->pz))
		return DAT_ERROR(DAT_PROTECTION_VIOLATION, DAT_NO_SUBTYPE);
	/* The window grants no right its LMR lacks. */
	if (lmr && (priv & ~lmr->priv))
		return DAT_ERROR(DAT_PRIVILEGES_VIOLATION, DAT_NO_SUBTYPE);
	/* A bind is a request on the EP's send queue: it needs the connection. */
	state = atomic_load(&ep->state);
	if (!ep_connected(state) || !ep->dev_priv)
		return zd_ep_invalid_state(state);
	dev = ia->dev;
	if (!dev->rmr_bind)
		return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);

	saved.lmr = rmr->lmr;
	saved.window = rmr->window;
	saved.priv = rmr->priv;
	saved.va_type = rmr->va_type;
	saved.rkey = rmr->rkey;
	rmr->lmr = lmr;
	rmr->priv = bind ? priv : DAT_MEM_PRIV_NONE_FLAG;
	rmr->va_type = bind ? va_type : DAT_VA_TYPE_VA;
	rmr->rkey = 0;
	if (bind) {
		rmr->window = *triplet;
		ret = zd_keys_assign(ia, &rmr->obj, NULL, &rmr->rkey);
		if (ret != DAT_SUCCESS)
			goto err_restore;
	} else {
		memset(&rmr->window, 0, sizeof(rmr->window));
	}
	if (ep->request_evd &&
	    !((flags & DAT_COMPLETION_SUPPRESS_FLAG) ||
	      ((flags & DAT_COMPLETION_UNSIGNALLED_FLAG) &&
	       (ep->attr.request_completion_flags & DAT_COMPLETION_UNSIGNALLED_FLAG)))) {
		memset(&ev, 0, sizeof(ev));
		ev.event_number = DAT_RMR_BIND_COMPLETION_EVENT;
		ev.evd_handle = ep->request_evd;
		ev.event_data.rmr_completion_event_data.rmr_handle = rmr;
		ev.event_data.rmr_completion_event_data.user_cookie = cookie;
		ev.event_data.rmr_completion_event_data.status = DAT_RMR_BIND_SUCCESS;
		evp = &ev;
	}
	ret = dev->rmr_bind(ep, rmr, saved.rkey, evp);
	if (ret != DAT_SUCCESS)
		goto err_keys;
	if (saved.rkey)
		zd_keys_remove(ia, 0, saved.rkey);
	if (lmr)
		zd_obj_ref(lmr);
	if (saved.lmr)
		zd_obj_unref(saved.lmr);
	if (context)
		*context = rmr->rkey;
	return DAT_SUCCESS;

err_keys:
	if (rmr->rkey)
		zd_keys_remove(ia, 0, rmr->rkey);
err_restore:
	rmr->lmr = saved.lmr;
	rmr->window = saved.window;
	rmr->priv = saved.priv;
	rmr->va_type = saved.va_type;
	rmr->rkey = saved.rkey;
	return ret;
}

void zd_rmr_destroy(struct zd_obj *o)
{
	struct zd_rmr *rmr = (struct zd_rmr *)o;

	if (rmr->rkey) {
		if (o->ia->dev->rmr_unbind)
			o->ia->dev->rmr_unbind(o->ia, rmr);
		zd_keys_remove(o->ia, 0, rmr->rkey);
	}
	if (rmr->lmr)
		zd_obj_unref(rmr->lmr);
	zd_obj_unref(rmr->pz);
	zd_ia_del_child(o->ia, o);
	zd_obj_release(o);
}

DAT_RETURN zd_rmr_free(DAT_RMR_HANDLE rmr_handle)
{
	struct zd_rmr *rmr;

	ZD_GET_OR_RETURN(rmr, rmr_handle, ZD_OBJ_RMR);
	zd_rmr_destroy(&rmr->obj);
	return DAT_SUCCESS;
}
