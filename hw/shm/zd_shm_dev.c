/*
 * The shared-memory soft device: processes on one host.
 * ia_params: "shm [ifname | IPv4 address]"; the IA address is an AF_INET
 * address of this host (by default its first non-loopback one).
 *
 * This file holds the device's control path as far as it exists today (IA
 * open/close and limits); queues, connection setup and the one-sided data
 * path over shared memory come with the shm device issue.
 */
#include "core/zd_device.h"
#include "core/zd_ia.h"
#include "core/zd_netaddr.h"

static const struct zd_device_limits shm_limits = {
	.max_eps = 4096,
	.max_dto_per_ep = 16384,
	.max_rdma_read_per_ep = 64,
	.max_evds = 8192,
	.max_evd_qlen = 1 << 20,
	.max_iov_segments = 16,
	.max_lmrs = 1 << 20,
	.max_lmr_block_size = UINT32_MAX,  /* DAT_SEG_LENGTH is 32-bit */
	.max_pzs = 1024,
	.max_message_size = 1u << 30,     /* 1 GiB */
	.max_rdma_size = 1u << 30,
	.max_rmrs = 1 << 20,
	.max_srqs = 1024,
	.max_recv_per_srq = 16384,
	.max_private_data = 256,
	.max_inline = 256,
};

static DAT_RETURN shm_ia_open(struct zd_ia *ia, const struct zd_ia_params *p)
{
	if (p->nargs > 1) {
		zd_log_error("ia_params for shm: expected \"shm [ifname|IPv4]\", got %d arguments",
			     p->nargs);
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	}
	if (zd_netaddr_resolve(p->nargs ? p->args[0] : NULL, &ia->addr) != 0)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	ia->limits = shm_limits;
	return DAT_SUCCESS;
}

static void shm_ia_close(struct zd_ia *ia)
{
}

static const struct zd_device_ops zd_shm_ops = {
	.name = "shm",
	.adapter_name = "zdapl-shm",
	.ia_open = shm_ia_open,
	.ia_close = shm_ia_close,
};
ZD_DEVICE_REGISTER(zd_shm_ops)
