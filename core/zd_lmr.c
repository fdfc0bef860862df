/* Local memory regions: registration of a virtual range with the IA's
 * device, the keys that name it, and the sync calls. */
#include <string.h>

#include "core/zd_api.h"
#include "core/zd_ia.h"
#include "core/zd_keys.h"
#include "core/zd_mem_objs.h"
#include "mem/zd_adopt.h"

static DAT_RETURN lmr_register(struct zd_ia *ia, struct zd_lmr *lmr)
{
	if (ia->dev->mr_register)
		return ia->dev->mr_register(ia, lmr);
	return DAT_SUCCESS;
}

DAT_RETURN zd_lmr_create(DAT_IA_HANDLE ia_handle, DAT_MEM_TYPE mem_type,
			 DAT_REGION_DESCRIPTION region, DAT_VLEN length,
			 DAT_PZ_HANDLE pz_handle, DAT_MEM_PRIV_FLAGS priv,
			 DAT_VA_TYPE va_type, DAT_LMR_HANDLE *lmr_handle,
			 DAT_LMR_CONTEXT *lmr_context, DAT_RMR_CONTEXT *rmr_context,
			 DAT_VLEN *registered_length, DAT_VADDR *registered_address)
{
	struct zd_ia *ia;
	struct zd_pz *pz;
	struct zd_lmr *lmr, *parent = NULL;
	uint64_t addr;
	DAT_RETURN ret;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	ZD_GET_OR_RETURN(pz, pz_handle, ZD_OBJ_PZ);
	if (pz->obj.ia != ia)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	if (!lmr_handle)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8);
	if (va_type != DAT_VA_TYPE_VA && va_type != DAT_VA_TYPE_ZB)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7);
	if (va_type == DAT_VA_TYPE_ZB)
		return DAT_ERROR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE);
	if (priv & ~(DAT_MEM_PRIV_FLAGS)(DAT_MEM_PRIV_ALL_FLAG | DAT_MEM_PRIV_EXTENSION_BASE))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);

	switch (mem_type) {
	case DAT_MEM_TYPE_VIRTUAL:
		if (length == 0)
			return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
		if (!region.for_va)
			return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
		addr = (uint64_t)(uintptr_t)region.for_va;
		if (addr + length < addr)
			return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
		break;
	case DAT_MEM_TYPE_LMR:
		/* A new LMR over the memory of an existing one (same IA). */
		parent = zd_obj_get(region.for_lmr_handle, ZD_OBJ_LMR);
		if (!parent || parent->obj.ia != ia)
			return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
		addr = parent->addr;
		length = parent->length;
		break;
	default:
		return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
	}

	lmr = zd_obj_alloc(ZD_OBJ_LMR, sizeof(*lmr), ia);
	if (!lmr)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	lmr->pz = pz;
	lmr->parent = parent;
	lmr->mem_type = mem_type;
	lmr->region = region;
	lmr->addr = addr;
	lmr->length = length;
	lmr->priv = priv;
	lmr->va_type = va_type;

	/* Shared in place before the device publishes it, so peers find the
	 * range in shared memory from the first access.  A failure to adopt
	 * only leaves the slow path. */
	if (ia->dev->adopts_memory) {
		lmr->adopt = zd_adopt_acquire(addr, length);
		if (!lmr->adopt) {
			ret = DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
			goto err_release;
		}
	}
	ret = zd_keys_assign(ia, &lmr->obj, &lmr->lkey, &lmr->rkey);
	if (ret != DAT_SUCCESS)
		goto err_adopt;
	ret = lmr_register(ia, lmr);
	if (ret != DAT_SUCCESS)
		goto err_keys;

	zd_obj_ref(pz);
	if (parent)
		zd_obj_ref(parent);
	zd_ia_add_child(ia, &lmr->obj);
	*lmr_handle = lmr;
	if (lmr_context)
		*lmr_context = lmr->lkey;
	if (rmr_context)
		*rmr_context = lmr->rkey;
	if (registered_length)
		*registered_length = lmr->length;
	if (registered_address)
		*registered_address = lmr->addr;
	return DAT_SUCCESS;

err_keys:
	zd_keys_remove(ia, lmr->lkey, lmr->rkey);
err_adopt:
	zd_adopt_release(lmr->adopt);
err_release:
	zd_obj_release(lmr);
	return ret;
}

DAT_RETURN zd_lmr_query(DAT_LMR_HANDLE lmr_handle, DAT_LMR_PARAM_MASK mask,
			DAT_LMR_PARAM *p)
{
	struct zd_lmr *lmr;

	ZD_GET_OR_RETURN(lmr, lmr_handle, ZD_OBJ_LMR);
	if (!p)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	p->ia_handle = zd_ia_consumer_handle(lmr->obj.ia);
	p->mem_type = lmr->mem_type;
	p->region_desc = lmr->region;
	p->length = lmr->length;
	p->pz_handle = lmr->pz;
	p->mem_priv = lmr->priv;
	p->va_type = lmr->va_type;
	p->lmr_context = lmr->lkey;
	p->rmr_context = lmr->rkey;
	p->registered_size = lmr->length;
	p->registered_address = lmr->addr;
	return DAT_SUCCESS;
}

void zd_lmr_destroy(struct zd_obj *o)
{
	struct zd_lmr *lmr = (struct zd_lmr *)o;
	struct zd_ia *ia = o->ia;

	if (ia->dev->mr_deregister)
		ia->dev->mr_deregister(ia, lmr);
	zd_keys_remove(ia, lmr->lkey, lmr->rkey);
	/* After the device stopped reaching it. */
	zd_adopt_release(lmr->adopt);
	zd_obj_unref(lmr->pz);
	if (lmr->parent)
		zd_obj_unref(lmr->parent);
	zd_ia_del_child(ia, o);
	zd_obj_release(o);
}

DAT_RETURN zd_lmr_free(DAT_LMR_HANDLE lmr_handle)
{
	struct zd_lmr *lmr;

	ZD_GET_OR_RETURN(lmr, lmr_handle, ZD_OBJ_LMR);
	if (zd_obj_in_use(lmr))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_LMR_IN_USE);
	zd_lmr_destroy(&lmr->obj);
	return DAT_SUCCESS;
}

/* Checks every segment names a live LMR of @ia covering it.  Soft devices
 * are cache coherent, so beyond the checks there is nothing to flush. */
static DAT_RETURN lmr_sync(DAT_IA_HANDLE ia_handle, const DAT_LMR_TRIPLET *segs,
			   DAT_VLEN nsegs)
{
	struct zd_ia *ia;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	if (!segs || nsegs == 0)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	for (DAT_VLEN i = 0; i < nsegs; i++) {
		if (!zd_keys_lmr_covers(ia, segs[i].lmr_context, ZD_KEY_ANY, NULL, 0,
					segs[i].virtual_address, segs[i].segment_length, NULL))
			return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	}
	return DAT_SUCCESS;
}

DAT_RETURN zd_lmr_sync_rdma_read(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET *segs,
				 DAT_VLEN nsegs)
{
	return lmr_sync(ia, segs, nsegs);
}

DAT_RETURN zd_lmr_sync_rdma_write(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET *segs,
				  DAT_VLEN nsegs)
{
	return lmr_sync(ia, segs, nsegs);
}
