/*
 * The DAT EVD as an object of its IA: dat_evd_create/free/query/modify_cno
 * and dat_evd_resize, which check the handles and the IA's limits, link the
 * EVD into its IA and wire it to the device's CQ around the event machinery
 * of evd/zd_evd.c.
 */
#include "core/zd_api.h"
#include "core/zd_cm.h"
#include "core/zd_ep.h"
#include "core/zd_evd_objs.h"
#include "core/zd_ia.h"
#include "evd/zd_cno.h"
#include "evd/zd_evd.h"
#include "evd/zd_poller.h"

#define ZD_EVD_KNOWN_FLAGS                                                  \
	(DAT_EVD_SOFTWARE_FLAG | DAT_EVD_CR_FLAG | DAT_EVD_DTO_FLAG |          \
	 DAT_EVD_CONNECTION_FLAG | DAT_EVD_RMR_BIND_FLAG | DAT_EVD_ASYNC_FLAG)

/* evd->on_overflow: the IA hears of an EVD's first spill. */
static void evd_obj_overflowed(struct zd_evd *evd)
{
	zd_ia_post_async(&evd->obj, DAT_ASYNC_ERROR_EVD_OVERFLOW);
}

/* @h as a CNO of @ia into @out (NULL for DAT_HANDLE_NULL); false when it
 * is no live CNO of @ia. */
static bool cno_of_ia(DAT_CNO_HANDLE h, struct zd_ia *ia, struct zd_cno **out)
{
	*out = NULL;
	if (h == DAT_HANDLE_NULL)
		return true;
	*out = zd_obj_get(h, ZD_OBJ_CNO);
	return *out && (*out)->obj.ia == ia;
}

DAT_RETURN zd_evd_create(DAT_IA_HANDLE ia_handle, DAT_COUNT qlen, DAT_CNO_HANDLE cno_handle,
			 DAT_EVD_FLAGS flags, DAT_EVD_HANDLE *evd_handle)
{
	struct zd_ia *ia;
	struct zd_cno *cno;
	struct zd_evd *evd;
	DAT_RETURN ret;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	if (qlen <= 0 || qlen > ia->limits.max_evd_qlen)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (!cno_of_ia(cno_handle, ia, &cno))
		return zd_obj_invalid_handle(ZD_OBJ_CNO);
	if (flags == 0 || (flags & ~(DAT_EVD_FLAGS)ZD_EVD_KNOWN_FLAGS))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	/* One async EVD per IA: the one dat_ia_open made or was given. */
	if ((flags & DAT_EVD_ASYNC_FLAG) && ia->async_evd)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (!evd_handle)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);

	evd = zd_obj_alloc(ZD_OBJ_EVD, sizeof(*evd), ia);
	if (!evd)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	ret = zd_evd_init(evd, flags, qlen);
	if (ret != DAT_SUCCESS)
		goto err_release;
	/* The async EVD's own overflow has nowhere to go. */
	if (!(flags & DAT_EVD_ASYNC_FLAG))
		evd->on_overflow = evd_obj_overflowed;

	if ((flags & (DAT_EVD_DTO_FLAG | DAT_EVD_RMR_BIND_FLAG)) && ia->dev->cq_create) {
		ret = ia->dev->cq_create(evd, (uint32_t)qlen);
		if (ret != DAT_SUCCESS)
			goto err_fini;
		evd->dev_poll = ia->dev->cq_poll;
		evd->cq_poll = ia->dev->cq_poll;
		evd->cq_arm = ia->dev->cq_arm;
		zd_evd_set_poll_one(evd, ia->dev->cq_poll_one);
		/* Pinned pollers: from here the poller alone polls the CQ. */
		if (zd_pollers_on())
			zd_poller_add(evd);
	}
	if (cno)
		zd_cno_attach(cno, evd);
	zd_ia_add_child(ia, &evd->obj);
	*evd_handle = evd;
	return DAT_SUCCESS;

err_fini:
	zd_evd_fini(evd);
err_release:
	zd_obj_release(evd);
	return ret;
}

void zd_evd_destroy(struct zd_obj *o)
{
	struct zd_evd *evd = (struct zd_evd *)o;
	struct zd_ia *ia = o->ia;
	struct zd_cno *cno = atomic_load(&evd->cno);

	/* First: after this no poller touches the EVD or its CQ. */
	zd_poller_del(evd);
	if (cno)
		zd_cno_detach(cno, evd);
	if (evd->dev_poll && ia->dev->cq_destroy)
		ia->dev->cq_destroy(evd);
	if (evd->flags & DAT_EVD_CONNECTION_FLAG) {
		zd_cm_lock();
		zd_ep_detach_foreign(evd);
		zd_cm_unlock();
	}
	zd_ia_del_child(ia, o);
	if (ia->async_evd == evd)
		ia->async_evd = NULL;
	/* Stale handles now fail; then the rings go. */
	zd_obj_kill(o);
	zd_evd_retire(evd);
	zd_obj_release(o);
}

DAT_RETURN zd_evd_free(DAT_EVD_HANDLE evd_handle)
{
	struct zd_evd *evd;

	ZD_GET_OR_RETURN(evd, evd_handle, ZD_OBJ_EVD);
	if (zd_obj_in_use(evd))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
	if (zd_evd_has_waiter(evd, memory_order_seq_cst))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_WAITER);
	zd_evd_destroy(&evd->obj);
	return DAT_SUCCESS;
}

DAT_RETURN zd_evd_query(DAT_EVD_HANDLE evd_handle, DAT_EVD_PARAM_MASK mask,
			DAT_EVD_PARAM *p)
{
	struct zd_evd *evd;

	ZD_GET_OR_RETURN(evd, evd_handle, ZD_OBJ_EVD);
	if (!p)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	p->ia_handle = zd_ia_consumer_handle(evd->obj.ia);
	p->evd_qlen = evd->qlen;
	p->evd_state = (atomic_load(&evd->enabled) ? DAT_EVD_STATE_ENABLED
						   : DAT_EVD_STATE_DISABLED) |
		       (atomic_load(&evd->waitable) ? DAT_EVD_STATE_WAITABLE
						    : DAT_EVD_STATE_UNWAITABLE) |
		       (atomic_load(&evd->solicited_eps) > 0 ? DAT_EVD_STATE_CONFIG_SOLICITED
							      : DAT_EVD_STATE_CONFIG_THRESHOLD);
	p->cno_handle = atomic_load(&evd->cno);
	p->evd_flags = evd->flags;
	return DAT_SUCCESS;
}

DAT_RETURN zd_evd_modify_cno(DAT_EVD_HANDLE evd_handle, DAT_CNO_HANDLE cno_handle)
{
	struct zd_evd *evd;
	struct zd_cno *cno, *old;

	ZD_GET_OR_RETURN(evd, evd_handle, ZD_OBJ_EVD);
	if (!cno_of_ia(cno_handle, evd->obj.ia, &cno))
		return zd_obj_invalid_handle(ZD_OBJ_CNO);
	old = atomic_load(&evd->cno);
	if (old == cno)
		return DAT_SUCCESS;
	if (old)
		zd_cno_detach(old, evd);
	if (cno)
		zd_cno_attach(cno, evd);
	return DAT_SUCCESS;
}

DAT_RETURN zd_evd_resize(DAT_EVD_HANDLE evd_handle, DAT_COUNT qlen)
{
	struct zd_evd *evd;
	const struct zd_device_ops *dev;
	DAT_RETURN ret;

	ZD_GET_OR_RETURN(evd, evd_handle, ZD_OBJ_EVD);
	if (qlen <= 0 || qlen > evd->obj.ia->limits.max_evd_qlen)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	ret = zd_evd_resize_check(evd, qlen);
	if (ret != DAT_SUCCESS)
		return ret;
	/* The device's CQ must hold what an EVD of this size may owe it. */
	dev = evd->obj.ia->dev;
	if (evd->cq_priv && dev->cq_resize &&
	    (ret = dev->cq_resize(evd, (uint32_t)qlen)) != DAT_SUCCESS)
		return ret;
	return zd_evd_resize_ring(evd, qlen);
}
