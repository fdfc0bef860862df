/*
 * Public service points.  Any 64-bit conn_qual: the connection manager
 * listens for it on one of its probe ports (zd_conn_qual.h); a qualifier
 * another service point serves at this address is DAT_CONN_QUAL_IN_USE.
 *
 * DAT_PSP_PROVIDER_FLAG: for each request the provider creates an EP with
 * default attributes and no PZ or EVDs, in TENTATIVE_CONNECTION_PENDING;
 * the consumer finds it in the CR (local_ep_handle), configures it with
 * dat_ep_modify and accepts with a NULL ep_handle.
 */
#include <string.h>

#include "core/zd_api.h"
#include "core/zd_cm.h"
#include "core/zd_ia.h"
#include "evd/zd_evd.h"

static DAT_RETURN psp_create(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL conn_qual, int any,
			     DAT_EVD_HANDLE evd_handle, DAT_PSP_FLAGS flags,
			     DAT_PSP_HANDLE *psp_handle, DAT_CONN_QUAL *qual_out)
{
	struct zd_cm_listener *l;
	struct zd_psp *psp;
	struct zd_evd *evd;
	struct zd_ia *ia;
	DAT_RETURN ret;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	evd = zd_obj_get(evd_handle, ZD_OBJ_EVD);
	if (!evd || evd->obj.ia != ia || !(evd->flags & DAT_EVD_CR_FLAG))
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR);
	if (flags != DAT_PSP_CONSUMER_FLAG && flags != DAT_PSP_PROVIDER_FLAG)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (!psp_handle)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);

	psp = zd_obj_alloc(ZD_OBJ_PSP, sizeof(*psp), ia);
	if (!psp)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	zd_cm_lock();
	ret = zd_cm_listen(ia, conn_qual, any, &l);
	if (ret != DAT_SUCCESS) {
		zd_cm_unlock();
		zd_obj_release(psp);
		return ret;
	}
	psp->conn_qual = l->qual;
	psp->evd = evd;
	psp->flags = flags;
	psp->listener = l;
	l->psp = psp;
	zd_obj_ref(evd);
	zd_ia_add_child(ia, &psp->obj);
	zd_count_ia(&ia->cnt, any ? DCNT_IA_PSP_CREATE_ANY : DCNT_IA_PSP_CREATE);
	zd_cm_unlock();
	if (qual_out)
		*qual_out = psp->conn_qual;
	*psp_handle = psp;
	return DAT_SUCCESS;
}

DAT_RETURN zd_psp_create(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL conn_qual,
			 DAT_EVD_HANDLE evd_handle, DAT_PSP_FLAGS flags, DAT_PSP_HANDLE *psp_handle)
{
	return psp_create(ia_handle, conn_qual, 0, evd_handle, flags, psp_handle, NULL);
}

DAT_RETURN zd_psp_create_any(DAT_IA_HANDLE ia_handle, DAT_CONN_QUAL *conn_qual,
			     DAT_EVD_HANDLE evd_handle, DAT_PSP_FLAGS flags,
			     DAT_PSP_HANDLE *psp_handle)
{
	struct zd_ia *ia;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	(void)ia;
	if (!conn_qual)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	return psp_create(ia_handle, 0, 1, evd_handle, flags, psp_handle, conn_qual);
}

DAT_RETURN zd_psp_query(DAT_PSP_HANDLE psp_handle, DAT_PSP_PARAM_MASK mask, DAT_PSP_PARAM *p)
{
	struct zd_psp *psp;

	ZD_GET_OR_RETURN(psp, psp_handle, ZD_OBJ_PSP);
	if (!p)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	(void)mask;  /* everything is cheap: fill it all */
	memset(p, 0, sizeof(*p));
	p->ia_handle = zd_ia_consumer_handle(psp->obj.ia);
	p->conn_qual = psp->conn_qual;
	p->evd_handle = psp->evd;
	p->psp_flags = psp->flags;
	return DAT_SUCCESS;
}

/* Stops listening; CRs already posted stay valid and answerable. */
static void psp_destroy_locked(struct zd_psp *psp)
{
	if (psp->listener)
		zd_cm_listener_close(psp->listener);
	psp->listener = NULL;
	zd_obj_unref(psp->evd);
	zd_ia_del_child(psp->obj.ia, &psp->obj);
	zd_obj_release(psp);
}

DAT_RETURN zd_psp_free(DAT_PSP_HANDLE psp_handle)
{
	struct zd_psp *psp;

	zd_cm_lock();
	psp = zd_obj_get(psp_handle, ZD_OBJ_PSP);
	if (psp)
		psp_destroy_locked(psp);
	zd_cm_unlock();
	return psp ? DAT_SUCCESS : zd_obj_invalid_handle(ZD_OBJ_PSP);
}

void zd_psp_destroy(struct zd_obj *o)
{
	zd_cm_lock();
	if (zd_obj_get(o, ZD_OBJ_PSP))
		psp_destroy_locked((struct zd_psp *)o);
	zd_cm_unlock();
}
