/* dat_ia_query attributes: the limits the IA's device reports, nothing more. */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>

#include "core/zd_ia.h"
#include "core/zd_attr.h"

#define ZD_PROVIDER_NAME "zdapl"
#define ZD_PROVIDER_VERSION_MAJOR 0
#define ZD_PROVIDER_VERSION_MINOR 1

/* Completion flags every device honours (DAT_COMPLETION_*). */
#define ZD_COMPLETION_FLAGS                                                 \
	(DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_SOLICITED_WAIT_FLAG |   \
	 DAT_COMPLETION_UNSIGNALLED_FLAG | DAT_COMPLETION_BARRIER_FENCE_FLAG | \
	 DAT_COMPLETION_EVD_THRESHOLD_FLAG)

/* Descriptors left to the process's own use when max_eps is derived from
 * RLIMIT_NOFILE (its stdio, files, the CM's epoll, the IA's threads'). */
#define ZD_FD_RESERVE 64

/* EPs that can be connected at once: the device's own limit, and what the
 * soft RLIMIT_NOFILE holds at one CM socket plus the device's descriptors
 * per connected EP (read at each query: a consumer that raises ulimit -n
 * sees it). */
static DAT_COUNT max_eps_held(const struct zd_device_limits *l)
{
	struct rlimit r;
	uint64_t by_fds;

	if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY)
		return l->max_eps;
	by_fds = r.rlim_cur > ZD_FD_RESERVE ? (r.rlim_cur - ZD_FD_RESERVE) /
					      (uint64_t)(1 + ZD_MAX(l->fds_per_ep, 0)) : 0;
	return (DAT_COUNT)ZD_MIN((uint64_t)l->max_eps, by_fds);
}

void zd_ia_fill_attr(const struct zd_ia *ia, DAT_IA_ATTR *a)
{
	const struct zd_device_limits *l = &ia->limits;
	DAT_COUNT max_eps = max_eps_held(l);

	memset(a, 0, sizeof(*a));
	snprintf(a->adapter_name, sizeof(a->adapter_name), "%s", ia->dev->adapter_name);
	snprintf(a->vendor_name, sizeof(a->vendor_name), "zdapl");
	a->hardware_version_major = 0;
	a->firmware_version_major = ZD_PROVIDER_VERSION_MAJOR;
	a->firmware_version_minor = ZD_PROVIDER_VERSION_MINOR;
	a->ia_address_ptr = (DAT_IA_ADDRESS_PTR)&ia->addr;
	a->max_eps = max_eps;
	a->max_dto_per_ep = l->max_dto_per_ep;
	a->max_rdma_read_per_ep_in = l->max_rdma_read_per_ep;
	a->max_rdma_read_per_ep_out = l->max_rdma_read_per_ep;
	a->max_evds = l->max_evds;
	a->max_evd_qlen = l->max_evd_qlen;
	a->max_iov_segments_per_dto = l->max_iov_segments;
	a->max_lmrs = l->max_lmrs;
	a->max_lmr_block_size = l->max_lmr_block_size;
	a->max_lmr_virtual_address = ~(DAT_VADDR)0 >> 16;  /* 48-bit user space */
	a->max_pzs = l->max_pzs;
	a->max_message_size = l->max_message_size;
	a->max_rdma_size = l->max_rdma_size;
	a->max_rmrs = l->max_rmrs;
	a->max_rmr_target_address = ~(DAT_VADDR)0 >> 16;
	a->max_srqs = l->max_srqs;
	a->max_ep_per_srq = max_eps;
	a->max_recv_per_srq = l->max_recv_per_srq;
	a->max_iov_segments_per_rdma_read = l->max_iov_segments;
	a->max_iov_segments_per_rdma_write = l->max_iov_segments;
	a->max_rdma_read_in = l->max_rdma_read_per_ep;
	a->max_rdma_read_out = l->max_rdma_read_per_ep;
	a->max_rdma_read_per_ep_in_guaranteed = DAT_TRUE;
	a->max_rdma_read_per_ep_out_guaranteed = DAT_TRUE;
	a->zb_supported = DAT_FALSE;
	/* libdat2 routes dat_extension_op to us only if this is not NONE
	 * (it asks inside dat_ia_open); dtestx asks for IB. */
	a->extension_supported = DAT_EXTENSION_IB;
	a->extension_version = DAT_IB_EXTENSION_VERSION;
	a->num_transport_attr = 0;
	a->transport_attr = NULL;
	a->num_vendor_attr = 0;
	a->vendor_attr = NULL;
}

#define ZD_TRUE_IF(cond) ((cond) ? "TRUE" : "FALSE")

/* The provider-specific attributes OFED dapl publishes for its IB
 * extensions (dtestx tests an atomic only if its attribute is "TRUE"),
 * for what this IA's device does.  Strings with static storage, so the
 * array may be handed out and outlive the call. */
static DAT_COUNT fill_provider_specific(const struct zd_ia *ia, DAT_NAMED_ATTR *a)
{
	const struct zd_device_ops *d = ia->dev;
	DAT_COUNT n = 0;

	a[n++] = (DAT_NAMED_ATTR){ "ZDAPL_VERSION", "0.1" };
	a[n++] = (DAT_NAMED_ATTR){ "DAT_EXTENSION_INTERFACE", "TRUE" };
	a[n++] = (DAT_NAMED_ATTR){ DAT_IB_ATTR_FETCH_AND_ADD, ZD_TRUE_IF(d->post_atomic) };
	a[n++] = (DAT_NAMED_ATTR){ DAT_IB_ATTR_CMP_AND_SWAP, ZD_TRUE_IF(d->post_atomic) };
	a[n++] = (DAT_NAMED_ATTR){ DAT_IB_ATTR_IMMED_DATA, ZD_TRUE_IF(d->post_rdma_write_imm) };
	a[n++] = (DAT_NAMED_ATTR){ DAT_IB_ATTR_UD, ZD_TRUE_IF(d->post_send_ud) };
	/* dat_ib_query_counters and friends, every device (core/zd_counters.c);
	 * dtestx takes the name's presence, not its value. */
	a[n++] = (DAT_NAMED_ATTR){ DAT_IB_ATTR_COUNTERS, "TRUE" };
	return n;
}

void zd_ia_fill_provider_attr(const struct zd_ia *ia, DAT_PROVIDER_ATTR *p)
{
	DAT_PROVIDER_ATTR a;

	/* evd_stream_merging_supported is const: build a copy, then memcpy. */
	memset(&a, 0, sizeof(a));
	snprintf(a.provider_name, sizeof(a.provider_name), ZD_PROVIDER_NAME);
	a.provider_version_major = ZD_PROVIDER_VERSION_MAJOR;
	a.provider_version_minor = ZD_PROVIDER_VERSION_MINOR;
	/* Must echo the registry key libdat2 used, or dat_ia_close fails. */
	a.dapl_version_major = ia->prov->info.dapl_version_major;
	a.dapl_version_minor = ia->prov->info.dapl_version_minor;
	a.is_thread_safe = ia->prov->info.is_thread_safe;
	a.lmr_mem_types_supported = DAT_MEM_TYPE_VIRTUAL | DAT_MEM_TYPE_LMR;
	a.iov_ownership_on_return = DAT_IOV_CONSUMER;
	a.dat_qos_supported = DAT_QOS_BEST_EFFORT;
	a.completion_flags_supported = ZD_COMPLETION_FLAGS;
	a.max_private_data_size = ia->limits.max_private_data;
	a.supports_multipath = DAT_FALSE;
	a.ep_creator = DAT_PSP_CREATES_EP_NEVER;
	a.pz_support = DAT_PZ_UNIQUE;
	a.optimal_buffer_alignment = 64;
	/* Any EVD may take any mix of event streams. */
	for (int i = 0; i < 6; i++)
		for (int j = 0; j < 6; j++)
			((DAT_BOOLEAN *)a.evd_stream_merging_supported)[i * 6 + j] = DAT_TRUE;
	a.srq_supported = DAT_TRUE;
	a.srq_watermarks_supported = DAT_TRUE;
	a.srq_ep_pz_difference_supported = DAT_FALSE;
	/* Counts of receive buffers come from the device (rq_counts). */
	a.srq_info_supported = ia->dev->rq_counts ? DAT_TRUE : DAT_FALSE;
	a.ep_recv_info_supported = ia->dev->rq_counts ? DAT_TRUE : DAT_FALSE;
	a.lmr_sync_req = DAT_FALSE;
	a.dto_async_return_guaranteed = DAT_FALSE;
	a.rdma_write_for_rdma_read_req = DAT_FALSE;
	a.rdma_read_lmr_rmr_context_exposure = DAT_FALSE;
	a.rmr_scope_supported = DAT_RMR_SCOPE_PZ;
	a.is_signal_safe = DAT_FALSE;
	a.ha_supported = DAT_FALSE;
	a.ha_loadbalancing = DAT_HA_LB_NONE;
	a.num_provider_specific_attr = fill_provider_specific(ia, (DAT_NAMED_ATTR *)ia->named_attrs);
	a.provider_specific_attr = (DAT_NAMED_ATTR *)ia->named_attrs;
	memcpy(p, &a, sizeof(a));
}
