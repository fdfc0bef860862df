/*
 * The DAT CNO as an object of its IA: dat_cno_create (and its fd form),
 * dat_cno_query and dat_cno_free, which check the IA handle, link the CNO
 * into its IA and name the IA as the consumer knows it, around the
 * wake-up machinery of evd/zd_cno.c.
 */
#include "core/zd_api.h"
#include "core/zd_evd_objs.h"
#include "core/zd_ia.h"
#include "evd/zd_cno.h"

DAT_RETURN zd_cno_create(DAT_IA_HANDLE ia_handle, DAT_OS_WAIT_PROXY_AGENT agent,
			 DAT_CNO_HANDLE *cno_handle)
{
	struct zd_ia *ia;
	struct zd_cno *cno;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	if (!cno_handle)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	cno = zd_obj_alloc(ZD_OBJ_CNO, sizeof(*cno), ia);
	if (!cno)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	zd_cno_init(cno, agent);
	zd_ia_add_child(ia, &cno->obj);
	*cno_handle = cno;
	return DAT_SUCCESS;
}

DAT_RETURN zd_cno_fd_create(DAT_IA_HANDLE ia_handle, DAT_FD *fd, DAT_CNO_HANDLE *cno_handle)
{
	struct zd_ia *ia;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
}

DAT_RETURN zd_cno_query(DAT_CNO_HANDLE cno_handle, DAT_CNO_PARAM_MASK mask, DAT_CNO_PARAM *p)
{
	struct zd_cno *cno;

	ZD_GET_OR_RETURN(cno, cno_handle, ZD_OBJ_CNO);
	if (!p)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	p->ia_handle = zd_ia_consumer_handle(cno->obj.ia);
	p->proxy_type = DAT_PROXY_TYPE_AGENT;
	p->proxy.agent = cno->agent;
	return DAT_SUCCESS;
}

void zd_cno_destroy(struct zd_obj *o)
{
	zd_ia_del_child(o->ia, o);
	zd_obj_kill(o);                     /* a waiter wakes to a dead CNO */
	zd_cno_fini((struct zd_cno *)o);
	zd_obj_release(o);
}

DAT_RETURN zd_cno_free(DAT_CNO_HANDLE cno_handle)
{
	struct zd_cno *cno;

	ZD_GET_OR_RETURN(cno, cno_handle, ZD_OBJ_CNO);
	if (zd_obj_in_use(cno))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE);
	zd_cno_destroy(&cno->obj);
	return DAT_SUCCESS;
}
