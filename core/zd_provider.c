/*
 * Registration with the OFED DAT registry (libdat2).
 *
 * libdat2 calls dat_provider_init once per dat.conf line that names this
 * library, with that line's ia_params.  Each line gets its own DAT_PROVIDER
 * (device_name = the line's ia_name) so handles carry the line they were
 * opened through; the slots are the same for all of them, but for the hot
 * entries a device may supply (zd_device_ops.dat_entries).
 */
#include <stdio.h>
#include <string.h>
#include <pthread.h>

#include "core/zd_api.h"
#include "core/zd_ia.h"
#include "core/zd_compiler.h"

#define ZD_MAX_PROVIDERS 64

static struct zd_provider providers[ZD_MAX_PROVIDERS];
static pthread_mutex_t providers_lock = PTHREAD_MUTEX_INITIALIZER;

static const DAT_PROVIDER zd_dat_provider_template = {
	.device_name = NULL,
	.extension = NULL,
	.ia_open_func = zd_said_ia_open,
	.ia_query_func = zd_ia_query,
	.ia_close_func = zd_ia_close,
	.set_consumer_context_func = zd_set_consumer_context,
	.get_consumer_context_func = zd_get_consumer_context,
	.get_handle_type_func = zd_get_handle_type,
	.cno_create_func = zd_said_cno_create,
	.cno_modify_agent_func = zd_cno_modify_agent,
	.cno_query_func = zd_cno_query,
	.cno_free_func = zd_cno_free,
	.cno_wait_func = zd_cno_wait,
	.cr_query_func = zd_cr_query,
	.cr_accept_func = zd_said_cr_accept,
	.cr_reject_func = zd_cr_reject,
	.cr_handoff_func = zd_cr_handoff,
	.evd_create_func = zd_said_evd_create,
	.evd_query_func = zd_evd_query,
	.evd_modify_cno_func = zd_evd_modify_cno,
	.evd_enable_func = zd_evd_enable,
	.evd_disable_func = zd_evd_disable,
	.evd_wait_func = zd_evd_wait,
	.evd_resize_func = zd_said_evd_resize,
	.evd_post_se_func = zd_evd_post_se,
	.evd_dequeue_func = zd_evd_dequeue,
	.evd_free_func = zd_evd_free,
	.ep_create_func = zd_said_ep_create,
	.ep_query_func = zd_ep_query,
	.ep_modify_func = zd_ep_modify,
	.ep_connect_func = zd_said_ep_connect,
	.ep_dup_connect_func = zd_said_ep_dup_connect,
	.ep_disconnect_func = zd_ep_disconnect,
	.ep_post_send_func = zd_ep_post_send,
	.ep_post_recv_func = zd_ep_post_recv,
	.ep_post_rdma_read_func = zd_ep_post_rdma_read,
	.ep_post_rdma_write_func = zd_ep_post_rdma_write,
	.ep_get_status_func = zd_ep_get_status,
	.ep_free_func = zd_ep_free,
	.lmr_create_func = zd_said_lmr_create,
	.lmr_query_func = zd_lmr_query,
	.lmr_free_func = zd_lmr_free,
	.rmr_create_func = zd_said_rmr_create,
	.rmr_query_func = zd_rmr_query,
	.rmr_bind_func = zd_rmr_bind,
	.rmr_free_func = zd_rmr_free,
	.psp_create_func = zd_said_psp_create,
	.psp_query_func = zd_psp_query,
	.psp_free_func = zd_psp_free,
	.rsp_create_func = zd_said_rsp_create,
	.rsp_query_func = zd_rsp_query,
	.rsp_free_func = zd_rsp_free,
	.pz_create_func = zd_said_pz_create,
	.pz_query_func = zd_pz_query,
	.pz_free_func = zd_pz_free,
	.psp_create_any_func = zd_said_psp_create_any,
	.ep_reset_func = zd_ep_reset,
	.evd_set_unwaitable_func = zd_evd_set_unwaitable,
	.evd_clear_unwaitable_func = zd_evd_clear_unwaitable,
	.lmr_sync_rdma_read_func = zd_lmr_sync_rdma_read,
	.lmr_sync_rdma_write_func = zd_lmr_sync_rdma_write,
	.ep_create_with_srq_func = zd_said_ep_create_with_srq,
	.ep_recv_query_func = zd_ep_recv_query,
	.ep_set_watermark_func = zd_ep_set_watermark,
	.srq_create_func = zd_said_srq_create,
	.srq_free_func = zd_srq_free,
	.srq_post_recv_func = zd_srq_post_recv,
	.srq_query_func = zd_srq_query,
	.srq_resize_func = zd_said_srq_resize,
	.srq_set_lw_func = zd_srq_set_lw,
	.csp_create_func = zd_csp_create,
	.csp_query_func = zd_csp_query,
	.csp_free_func = zd_csp_free,
	.ep_common_connect_func = zd_ep_common_connect,
	.rmr_create_for_ep_func = zd_rmr_create_for_ep,
	.ep_post_send_with_invalidate_func = zd_ep_post_send_with_invalidate,
	.ep_post_rdma_read_to_rmr_func = zd_ep_post_rdma_read_to_rmr,
	.cno_fd_create_func = zd_cno_fd_create,
	.cno_trigger_func = zd_cno_trigger,
	.ia_ha_related_func = zd_ia_ha_related,
	.handle_extendedop_func = zd_handle_extendedop,
};

/* The slot for @name, reused if that line was registered before (libdat2
 * calls init again after a fini when an IA is reopened). */
static struct zd_provider *provider_slot(const char *name)
{
	struct zd_provider *free_slot = NULL;

	for (int i = 0; i < ZD_MAX_PROVIDERS; i++) {
		struct zd_provider *p = &providers[i];
		if (p->info.ia_name[0] == '\0') {
			if (!free_slot)
				free_slot = p;
		} else if (strcmp(p->info.ia_name, name) == 0) {
			return p;
		}
	}
	return free_slot;
}

struct zd_provider *zd_provider_find(const char *ia_name)
{
	struct zd_provider *found = NULL;

	pthread_mutex_lock(&providers_lock);
	for (int i = 0; i < ZD_MAX_PROVIDERS; i++) {
		if (providers[i].registered &&
		    strcmp(providers[i].info.ia_name, ia_name) == 0) {
			found = &providers[i];
			break;
		}
	}
	pthread_mutex_unlock(&providers_lock);
	return found;
}

/* The device's own entry points for the hot calls (zd_device_ops
 * .dat_entries), when the line's ia_params name a device that has them.
 * Before registration: no handle of this line exists yet.  A line whose
 * params do not parse keeps core's entries (dat_ia_open reports it). */
static void install_device_entries(struct zd_provider *p)
{
	struct zd_ia_params params;
	const struct zd_device_ops *dev;

	if (zd_ia_params_parse(p->ia_params, &params) != 0 ||
	    !(dev = zd_device_find(params.device)))
		return;
	if (dev->dat_entries.ep_post_send)
		p->dat.ep_post_send_func = dev->dat_entries.ep_post_send;
	if (dev->dat_entries.ep_post_rdma_write)
		p->dat.ep_post_rdma_write_func = dev->dat_entries.ep_post_rdma_write;
	if (dev->dat_entries.evd_dequeue)
		p->dat.evd_dequeue_func = dev->dat_entries.evd_dequeue;
	if (dev->dat_entries.handle_extendedop)
		p->dat.handle_extendedop_func = dev->dat_entries.handle_extendedop;
}

ZD_EXPORT void dat_provider_init(const DAT_PROVIDER_INFO *info, const char *instance_data)
{
	struct zd_provider *p;

	if (!info)
		return;
	pthread_mutex_lock(&providers_lock);
	p = provider_slot(info->ia_name);
	if (!p) {
		pthread_mutex_unlock(&providers_lock);
		zd_log_error("too many dat.conf lines name this library (max %d); %s ignored",
			     ZD_MAX_PROVIDERS, info->ia_name);
		return;
	}
	if (!p->registered) {
		/* The const array member makes DAT_PROVIDER unassignable. */
		memcpy(&p->dat, &zd_dat_provider_template, sizeof(p->dat));
		p->info = *info;
		p->dat.device_name = p->info.ia_name;
		snprintf(p->ia_params, sizeof(p->ia_params), "%s",
			 instance_data ? instance_data : "");
		install_device_entries(p);
		if (dat_registry_add_provider(&p->dat, &p->info) == DAT_SUCCESS)
			p->registered = 1;
		else
			zd_log_error("libdat2 refused to register %s", info->ia_name);
	}
	pthread_mutex_unlock(&providers_lock);
}

ZD_EXPORT void dat_provider_fini(const DAT_PROVIDER_INFO *info)
{
	struct zd_provider *p;

	if (!info)
		return;
	pthread_mutex_lock(&providers_lock);
	p = provider_slot(info->ia_name);
	if (p && p->registered) {
		dat_registry_remove_provider(&p->dat, &p->info);
		/* The slot keeps its name and table: handles of closed IAs may
		 * still point at it, and init reuses it. */
		p->registered = 0;
	}
	pthread_mutex_unlock(&providers_lock);
}

__attribute__((constructor)) static void zd_library_init(void)
{
	if (zd_obj_init() != 0)
		zd_log_error("cannot reserve address space for objects");
}
