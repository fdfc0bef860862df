/* Remote memory regions (memory windows).  Binding needs a connected EP
 * and arrives with the transports; until then dat_rmr_bind says so. */
#include "core/zd_api.h"
#include "core/zd_ia.h"
#include "core/zd_keys.h"
#include "core/zd_mem_objs.h"

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
	p->va_type = rmr->va_type;
	return DAT_SUCCESS;
}

DAT_RETURN zd_rmr_bind(DAT_RMR_HANDLE rmr_handle, DAT_LMR_HANDLE lmr_handle,
		       const DAT_LMR_TRIPLET *triplet, DAT_MEM_PRIV_FLAGS priv,
		       DAT_VA_TYPE va_type, DAT_EP_HANDLE ep_handle, DAT_RMR_COOKIE cookie,
		       DAT_COMPLETION_FLAGS flags, DAT_RMR_CONTEXT *context)
{
	struct zd_rmr *rmr;

	ZD_GET_OR_RETURN(rmr, rmr_handle, ZD_OBJ_RMR);
	return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
}

void zd_rmr_destroy(struct zd_obj *o)
{
	struct zd_rmr *rmr = (struct zd_rmr *)o;

	if (rmr->rkey)
		zd_keys_remove(o->ia, 0, rmr->rkey);
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
