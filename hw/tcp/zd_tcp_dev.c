/*
 * The TCP soft device: hosts without RDMA hardware.
 * ia_params: "tcp <ifname | IPv4 address>"; that address is the IA address.
 *
 * This file holds the device's control path as far as it exists today (IA
 * open/close and limits); sockets, the wire protocol and the data path come
 * with the tcp device issue.
 */
#include "core/zd_device.h"
#include "core/zd_ia.h"
#include "core/zd_netaddr.h"

static const struct zd_device_limits tcp_limits = {
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
	.max_inline = 0,
};

static DAT_RETURN tcp_ia_open(struct zd_ia *ia, const struct zd_ia_params *p)
{
	if (p->nargs != 1) {
		zd_log_error("ia_params for tcp: expected \"tcp <ifname|IPv4>\", got %d arguments",
			     p->nargs);
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	}
	if (zd_netaddr_resolve(p->args[0], &ia->addr) != 0)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	ia->limits = tcp_limits;
	return DAT_SUCCESS;
}

static void tcp_ia_close(struct zd_ia *ia)
{
}

static const struct zd_device_ops zd_tcp_ops = {
	.name = "tcp",
	.adapter_name = "zdapl-tcp",
	.ia_open = tcp_ia_open,
	.ia_close = tcp_ia_close,
};
ZD_DEVICE_REGISTER(zd_tcp_ops)
