/* Protection zones: a PZ only groups objects; devices map it to a PD. */
#include "core/zd_api.h"
#include "core/zd_ia.h"
#include "core/zd_mem_objs.h"

DAT_RETURN zd_pz_create(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE *pz_handle)
{
	struct zd_ia *ia;
	struct zd_pz *pz;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	if (!pz_handle)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	pz = zd_obj_alloc(ZD_OBJ_PZ, sizeof(*pz), ia);
	if (!pz)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	if (ia->dev->pz_create) {
		DAT_RETURN ret = ia->dev->pz_create(pz);

		if (ret != DAT_SUCCESS) {
			zd_obj_release(pz);
			return ret;
		}
	}
	zd_ia_add_child(ia, &pz->obj);
	*pz_handle = pz;
	return DAT_SUCCESS;
}

DAT_RETURN zd_pz_query(DAT_PZ_HANDLE pz_handle, DAT_PZ_PARAM_MASK mask, DAT_PZ_PARAM *param)
{
	struct zd_pz *pz;

	ZD_GET_OR_RETURN(pz, pz_handle, ZD_OBJ_PZ);
	if (!param)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	param->ia_handle = zd_ia_consumer_handle(pz->obj.ia);
	return DAT_SUCCESS;
}

void zd_pz_destroy(struct zd_obj *o)
{
	if (o->ia->dev->pz_destroy)
		o->ia->dev->pz_destroy((struct zd_pz *)o);
	zd_ia_del_child(o->ia, o);
	zd_obj_release(o);
}

DAT_RETURN zd_pz_free(DAT_PZ_HANDLE pz_handle)
{
	struct zd_pz *pz;

	ZD_GET_OR_RETURN(pz, pz_handle, ZD_OBJ_PZ);
	if (zd_obj_in_use(pz))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_PZ_IN_USE);
	zd_pz_destroy(&pz->obj);
	return DAT_SUCCESS;
}
