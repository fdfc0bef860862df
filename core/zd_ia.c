/* IA open/query/close and the handle-generic calls. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "core/zd_api.h"
#include "core/zd_ia.h"
#include "core/zd_teardown.h"
#include "core/zd_attr.h"
#include "core/zd_fork.h"
#include "core/zd_keys.h"
#include "core/zd_ud.h"
#include "evd/zd_evd.h"
#include "evd/zd_poller.h"

struct zd_provider *zd_provider_find(const char *ia_name);

int zd_ia_params_parse(const char *str, struct zd_ia_params *out)
{
	const char *p = str ? str : "";

	memset(out, 0, sizeof(*out));
	for (int tok = 0;; tok++) {
		size_t n;

		p += strspn(p, " \t");
		if (*p == '\0')
			break;
		n = strcspn(p, " \t");
		if (n >= ZD_PARAMS_ARG_LEN) {
			zd_log_error("ia_params \"%s\": word %d is longer than %d characters",
				     str, tok + 1, ZD_PARAMS_ARG_LEN - 1);
			return -1;
		}
		if (tok == 0) {
			memcpy(out->device, p, n);
		} else if (out->nargs < ZD_PARAMS_MAX_ARGS) {
			memcpy(out->args[out->nargs++], p, n);
		} else {
			zd_log_error("ia_params \"%s\": more than %d arguments after the device",
				     str, ZD_PARAMS_MAX_ARGS);
			return -1;
		}
		p += n;
	}
	if (out->device[0] == '\0') {
		zd_log_error("ia_params is empty: expected \"shm\", \"tcp <ifname|IPv4>\", "
			     "\"mlx5sim\" or \"<mlx5 device> <port>\"");
		return -1;
	}
	return 0;
}

/* Exported by libdat2 (not in its public headers). */
extern DAT_RETURN dats_get_ia_handle(DAT_IA_HANDLE handle, DAT_IA_HANDLE *ia_handle_p);

DAT_IA_HANDLE zd_ia_consumer_handle(struct zd_ia *ia)
{
	DAT_IA_HANDLE h;

	/* Given a provider pointer, libdat2 answers with its own handle. */
	if (dats_get_ia_handle(ia, &h) == DAT_SUCCESS)
		return h;
	return ia;
}

void zd_ia_add_child(struct zd_ia *ia, struct zd_obj *child)
{
	pthread_mutex_lock(&ia->lock);
	child->ia_next = ia->children.ia_next;
	child->ia_prev = &ia->children;
	ia->children.ia_next->ia_prev = child;
	ia->children.ia_next = child;
	pthread_mutex_unlock(&ia->lock);
	zd_counters_child(ia, child->type, true);
}

void zd_ia_del_child(struct zd_ia *ia, struct zd_obj *child)
{
	pthread_mutex_lock(&ia->lock);
	child->ia_prev->ia_next = child->ia_next;
	child->ia_next->ia_prev = child->ia_prev;
	child->ia_next = child->ia_prev = NULL;
	pthread_mutex_unlock(&ia->lock);
	zd_counters_child(ia, child->type, false);
}

DAT_RETURN zd_ia_open(const DAT_NAME_PTR name, DAT_COUNT async_qlen,
		      DAT_EVD_HANDLE *async_evd, DAT_IA_HANDLE *ia_handle)
{
	struct zd_provider *prov;
	struct zd_ia_params params;
	const struct zd_device_ops *dev;
	struct zd_ia *ia;
	DAT_RETURN ret;

	if (!name)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	if (!async_evd)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (!ia_handle)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	prov = zd_provider_find(name);
	if (!prov)
		return DAT_ERROR(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED);
	if (zd_ia_params_parse(prov->ia_params, &params) != 0)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	dev = zd_device_find(params.device);
	if (!dev) {
		zd_log_error("%s: unknown device \"%s\" in ia_params \"%s\"", name,
			     params.device, prov->ia_params);
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	}
	if (*async_evd != DAT_HANDLE_NULL) {
		/* An async EVD belongs to an IA, and this IA does not exist yet. */
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_ASYNC);
	}
	/* ZDAPL_POLLERS: the pinned pollers start with the first IA of the
	 * process (evd/zd_poller.h); a bad CPU list fails the open. */
	ret = zd_pollers_get();
	if (ret != DAT_SUCCESS)
		return ret;

	ia = zd_obj_alloc(ZD_OBJ_IA, sizeof(*ia), NULL);
	if (!ia) {
		zd_pollers_put();
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	ia->obj.ia = ia;
	ia->obj.provider = &prov->dat;
	ia->prov = prov;
	ia->dev = dev;
	ia->params = params;
	ia->fork_gen = zd_fork_gen;
	ia->children.ia_next = ia->children.ia_prev = &ia->children;
	pthread_mutex_init(&ia->lock, NULL);
	zd_counters_ia_open(ia);

	if (zd_keys_init(ia) != 0) {
		ret = DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
		goto err_release;
	}
	ret = dev->ia_open(ia, &params);
	if (ret != DAT_SUCCESS)
		goto err_keys;

	ret = zd_evd_create(ia, async_qlen > 0 ? async_qlen : 8, DAT_HANDLE_NULL,
			    DAT_EVD_ASYNC_FLAG, async_evd);
	if (ret != DAT_SUCCESS)
		goto err_close;
	ia->async_evd = zd_obj_get(*async_evd, ZD_OBJ_EVD);
	ia->async_evd_ours = 1;
	zd_obj_ref(ia->async_evd);  /* the IA uses it until it closes */
	*ia_handle = ia;
	return DAT_SUCCESS;

err_close:
	dev->ia_close(ia);
err_keys:
	zd_keys_fini(ia);
err_release:
	pthread_mutex_destroy(&ia->lock);
	zd_obj_release(ia);
	zd_pollers_put();
	return ret;
}

DAT_RETURN zd_ia_close(DAT_IA_HANDLE ia_handle, DAT_CLOSE_FLAGS flags)
{
	struct zd_ia *ia;
	int live = 0;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	if (flags != DAT_CLOSE_ABRUPT_FLAG && flags != DAT_CLOSE_GRACEFUL_FLAG)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	/* A forked child's copy of its parent's IA: forgotten, not torn
	 * down (its locks may be held by threads that are not here, its
	 * rings are shared with the parent's peers). */
	if (zd_fork_inherited(ia->fork_gen)) {
		zd_obj_forget_ia(ia);
		return DAT_SUCCESS;
	}

	pthread_mutex_lock(&ia->lock);
	for (struct zd_obj *c = ia->children.ia_next; c != &ia->children; c = c->ia_next)
		if (!(ia->async_evd_ours && c == &ia->async_evd->obj))
			live++;
	pthread_mutex_unlock(&ia->lock);

	if (live && flags != DAT_CLOSE_ABRUPT_FLAG)
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_IA_IN_USE);

	/* Abrupt: free children in dependency order (users before the objects
	 * they use), so each free below succeeds. */
	zd_teardown_children(ia);
	zd_ud_ia_fini(ia);
	ia->dev->ia_close(ia);
	zd_keys_fini(ia);
	pthread_mutex_destroy(&ia->lock);
	zd_obj_release(ia);
	zd_pollers_put();
	return DAT_SUCCESS;
}

DAT_RETURN zd_ia_query(DAT_IA_HANDLE ia_handle, DAT_EVD_HANDLE *async_evd,
		       DAT_IA_ATTR_MASK ia_mask, DAT_IA_ATTR *ia_attr,
		       DAT_PROVIDER_ATTR_MASK prov_mask, DAT_PROVIDER_ATTR *prov_attr)
{
	struct zd_ia *ia;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	if (ia_mask && !ia_attr)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (prov_mask && !prov_attr)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
	if (async_evd)
		*async_evd = ia->async_evd;
	if (ia_mask && ia_attr)
		zd_ia_fill_attr(ia, ia_attr);
	if (prov_mask && prov_attr)
		zd_ia_fill_provider_attr(ia, prov_attr);
	return DAT_SUCCESS;
}

DAT_RETURN zd_ia_ha_related(DAT_IA_HANDLE ia_handle, const DAT_NAME_PTR name,
			    DAT_BOOLEAN *answer)
{
	struct zd_ia *ia;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	if (!name)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (!answer)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	return DAT_MODEL_NOT_SUPPORTED;
}

/* ---- handle-generic calls: any live zdapl object ---- */

static const DAT_HANDLE_TYPE dat_type_of[ZD_OBJ_TYPE_COUNT] = {
	[ZD_OBJ_IA] = DAT_HANDLE_TYPE_IA,   [ZD_OBJ_PZ] = DAT_HANDLE_TYPE_PZ,
	[ZD_OBJ_LMR] = DAT_HANDLE_TYPE_LMR, [ZD_OBJ_RMR] = DAT_HANDLE_TYPE_RMR,
	[ZD_OBJ_EVD] = DAT_HANDLE_TYPE_EVD, [ZD_OBJ_CNO] = DAT_HANDLE_TYPE_CNO,
	[ZD_OBJ_EP] = DAT_HANDLE_TYPE_EP,   [ZD_OBJ_SRQ] = DAT_HANDLE_TYPE_SRQ,
	[ZD_OBJ_PSP] = DAT_HANDLE_TYPE_PSP, [ZD_OBJ_RSP] = DAT_HANDLE_TYPE_RSP,
	[ZD_OBJ_CR] = DAT_HANDLE_TYPE_CR,   [ZD_OBJ_CSP] = DAT_HANDLE_TYPE_CSP,
};

static struct zd_obj *any_obj(DAT_HANDLE h)
{
	int t = zd_obj_type_of(h);

	return t < 0 ? NULL : (struct zd_obj *)h;
}

DAT_RETURN zd_set_consumer_context(DAT_HANDLE h, DAT_CONTEXT ctx)
{
	struct zd_obj *o = any_obj(h);

	if (!o)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1);
	o->context = ctx;
	return DAT_SUCCESS;
}

DAT_RETURN zd_get_consumer_context(DAT_HANDLE h, DAT_CONTEXT *ctx)
{
	struct zd_obj *o = any_obj(h);

	if (!o)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1);
	if (!ctx)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	*ctx = o->context;
	return DAT_SUCCESS;
}

DAT_RETURN zd_get_handle_type(DAT_HANDLE h, DAT_HANDLE_TYPE *type)
{
	int t = zd_obj_type_of(h);

	if (t < 0)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1);
	if (!type)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	*type = dat_type_of[t];
	return DAT_SUCCESS;
}

/* ---- async events: on the IA's async EVD (none: dropped) ---- */

static void ia_post_async(struct zd_ia *ia, DAT_EVENT_NUMBER type, DAT_HANDLE handle,
			  DAT_COUNT reason)
{
	DAT_EVENT ev;

	zd_counters_async(ia, type);
	if (!ia->async_evd)
		return;
	memset(&ev, 0, sizeof(ev));
	ev.event_number = type;
	ev.evd_handle = ia->async_evd;
	ev.event_data.asynch_error_event_data.dat_handle = handle;
	ev.event_data.asynch_error_event_data.reason = reason;
	zd_evd_post(ia->async_evd, &ev, 1);
}

void zd_ia_post_async(struct zd_obj *source, DAT_EVENT_NUMBER type)
{
	if (source->ia)
		ia_post_async(source->ia, type, source, 0);
}

void zd_ia_async_error(struct zd_ia *ia, DAT_HANDLE handle, DAT_COUNT reason)
{
	ia_post_async(ia, DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR, handle, reason);
}
