/*
 * The shared-memory soft device: processes on one host.
 * ia_params: "shm [ifname | IPv4 address]"; the IA address is an AF_INET
 * address of this host (by default its first non-loopback one).
 *
 * This file holds the IA (open/close, limits, the IA's shared region) and
 * the ops table; zd_shm.h describes the design, the other zd_shm_*.c files
 * one concept each.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/zd_device.h"
#include "core/zd_ia.h"
#include "core/zd_log.h"
#include "core/zd_netaddr.h"
#include "hw/shm/zd_shm.h"
#include "hw/shm/zd_shm_copy.h"
#include "hw/shm/zd_shm_ud.h"

static const struct zd_device_limits shm_limits = {
	/* RC QPs whose regions are 1 MiB or less (max_recv_dtos up to ~1000)
	 * fit ZD_SHM_ARENA_SPAN this many times; the tags of a CQ's IA (2^20)
	 * hold more.  A connected EP's only descriptor is its CM socket. */
	.max_eps = (DAT_COUNT)(ZD_SHM_ARENA_SPAN >> 20),
	.max_dto_per_ep = 16384,
	.max_rdma_read_per_ep = 64,
	.max_evds = 8192,
	.max_evd_qlen = 1 << 20,
	.max_iov_segments = ZD_SHM_MAX_SEGS,
	.max_lmrs = 1 << 20,
	.max_lmr_block_size = UINT32_MAX,  /* DAT_SEG_LENGTH is 32-bit */
	.max_pzs = 1024,
	.max_message_size = ZD_SHM_MAX_MESSAGE,  /* 1 GiB */
	.max_rdma_size = ZD_SHM_MAX_RDMA,
	.max_rmrs = 1 << 20,
	.max_srqs = 1024,
	.max_recv_per_srq = 16384,
	.max_private_data = 256,
	.max_inline = 256,
	.max_ud_payload = ZD_SHM_UD_MAX_PAYLOAD,
};

/* The environment's say: ZDAPL_SHM_CQ_RING=<entries> (a power of two,
 * 64..4194304) sizes every CQ ring; ZDAPL_SHM_FAULT=claim_stop or
 * unordered is for tests only (zd_shm.h). */
static void shm_ia_env(struct zd_shm_ia *sia)
{
	const char *e = getenv("ZDAPL_SHM_CQ_RING");
	uint64_t off, size;

	if (e) {
		unsigned long v = strtoul(e, NULL, 0);

		if (zd_shm_cq_layout((uint32_t)v, &off, &size) && v <= UINT32_MAX)
			sia->cq_ring_entries = (uint32_t)v;
		else
			zd_log_error("ZDAPL_SHM_CQ_RING=%s: not a power of two in 64..4194304; "
				     "ignored", e);
	}
	e = getenv("ZDAPL_SHM_FAULT");
	sia->fault_claim_stop = e && strcmp(e, "claim_stop") == 0;
	sia->fault_unordered = e && strcmp(e, "unordered") == 0;
}

int zd_shm_region_alloc(struct zd_shm_ia *sia, size_t size, struct zd_soft_region *r)
{
	int rc = zd_soft_arena_alloc(&sia->arena, size, r);

	if (rc && !atomic_exchange(&sia->arena_full_said, true))
		zd_log_error("shm: the IA's arena (%llu GiB of shared queues) has no room for "
			     "%zu more bytes: QPs, SRQs and DTO EVDs of this IA are refused "
			     "(DAT_INSUFFICIENT_RESOURCES) until some are freed",
			     (unsigned long long)(ZD_SHM_ARENA_SPAN >> 30), size);
	return rc;
}

static DAT_RETURN shm_ia_open(struct zd_ia *ia, const struct zd_ia_params *p)
{
	if (p->nargs > 1) {
		zd_log_error("ia_params for shm: expected \"shm [ifname|IPv4]\", got %d arguments",
			     p->nargs);
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	}
	DAT_RETURN ret = zd_netaddr_resolve(p->nargs ? p->args[0] : NULL, &ia->addr);

	if (ret != DAT_SUCCESS)
		return ret;
	ia->limits = shm_limits;

	struct zd_shm_ia *sia = calloc(1, sizeof(*sia));

	if (!sia)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	sia->ia = ia;
	pthread_mutex_init(&sia->lock, NULL);
	/* The MR table is sparse: pages appear as keys get used; so is the
	 * rest of the arena, as regions get carved and touched. */
	if (zd_soft_arena_create(&sia->arena, sizeof(struct zd_shm_ia_shared), ZD_SHM_ARENA_SPAN,
				 "zdapl-shm-ia") != 0)
		goto err;
	sia->sh = sia->arena.region.base;
	sia->sh->magic = ZD_SHM_MAGIC_IA;
	if (getrandom(&sia->sh->uid, sizeof(sia->sh->uid), 0) != sizeof(sia->sh->uid))
		sia->sh->uid = (uint64_t)(uintptr_t)sia ^ (uint64_t)getpid() << 32;
	for (uint32_t i = 0; i < ZD_SHM_CHUNK_SLOTS; i++)
		atomic_store(&sia->sh->chunks[i].fd, -1);
	shm_ia_env(sia);
	zd_shm_copy_register(sia);
	ia->dev_priv = sia;
	if (zd_shm_chunks_start(sia) != 0) {
		ia->dev_priv = NULL;
		goto err;
	}
	return DAT_SUCCESS;
err:
	zd_soft_arena_destroy(&sia->arena);
	pthread_mutex_destroy(&sia->lock);
	free(sia);
	return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
}

static void shm_ia_close(struct zd_ia *ia)
{
	struct zd_shm_ia *sia = ia->dev_priv;

	if (!sia)
		return;
	zd_shm_waker_stop(sia);
	zd_shm_chunks_stop(sia);
	zd_soft_arena_destroy(&sia->arena);
	pthread_mutex_destroy(&sia->lock);
	zd_shm_tags_free(sia);
	free(sia);
	ia->dev_priv = NULL;
}

static const struct zd_device_ops zd_shm_ops = {
	.name = "shm",
	.adapter_name = "zdapl-shm",
	.cm_bind_any = 1,  /* processes of this host reach any local address */
	.adopts_memory = 1,
	.ia_open = shm_ia_open,
	.ia_close = shm_ia_close,
	.mr_register = zd_shm_mr_register,
	.mr_deregister = zd_shm_mr_deregister,
	.rmr_bind = zd_shm_rmr_bind,
	.rmr_unbind = zd_shm_rmr_unbind,
	.cq_create = zd_shm_cq_create,
	.cq_destroy = zd_shm_cq_destroy,
	.cq_poll = zd_shm_cq_poll,
	.cq_poll_one = zd_shm_cq_poll_one,
	.cq_arm = zd_shm_cq_arm,
	.qp_create = zd_shm_qp_create,
	.qp_local_blob = zd_shm_qp_local_blob,
	.qp_connect = zd_shm_qp_connect,
	.qp_flush = zd_shm_qp_flush,
	.qp_reset = zd_shm_qp_reset,
	.qp_destroy = zd_shm_qp_destroy,
	.srq_create = zd_shm_srq_create,
	.srq_resize = zd_shm_srq_resize,
	.srq_destroy = zd_shm_srq_destroy,
	.rq_counts = zd_shm_rq_counts,
	.post_send = zd_shm_post_send,
	.post_recv = zd_shm_post_recv,
	.post_rdma_write = zd_shm_post_rdma_write,
	.post_rdma_read = zd_shm_post_rdma_read,
	.srq_post_recv = zd_shm_srq_post_recv,
	.post_rdma_write_imm = zd_shm_post_rdma_write_imm,
	.post_atomic = zd_shm_post_atomic,
	.ud_ah_create = zd_shm_ud_ah_create,
	.ud_ah_destroy = zd_shm_ud_ah_destroy,
	.post_send_ud = zd_shm_post_send_ud,
	.dat_entries = { .ep_post_send = zd_shm_dat_post_send,
			 .ep_post_rdma_write = zd_shm_dat_post_rdma_write },
};
ZD_DEVICE_REGISTER(zd_shm_ops)
