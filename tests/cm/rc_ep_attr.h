/*
 * The RC EP attributes the connected two-process tests ask for (tests/cm's
 * peers, tests/pollers, tests/netns' zd_failtest).  Plain DAT only, so that
 * a program outside the Criterion harness can use it too.
 */
#ifndef RC_EP_ATTR_H
#define RC_EP_ATTR_H

#include <string.h>
#include <dat2/udat.h>

/* Fills @a for an RC EP with messages and RDMA up to @max_size bytes,
 * @recv_dtos and @request_dtos DTOs queued, @iov segments a DTO, and four
 * RDMA reads in flight each way; the rest zero (provider defaults). */
static inline void rc_ep_attr(DAT_EP_ATTR *a, DAT_VLEN max_size, DAT_COUNT recv_dtos,
			      DAT_COUNT request_dtos, DAT_COUNT iov)
{
	memset(a, 0, sizeof(*a));
	a->service_type = DAT_SERVICE_TYPE_RC;
	a->max_message_size = max_size;
	a->max_rdma_size = max_size;
	a->qos = DAT_QOS_BEST_EFFORT;
	a->recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a->request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a->max_recv_dtos = recv_dtos;
	a->max_request_dtos = request_dtos;
	a->max_recv_iov = iov;
	a->max_request_iov = iov;
	a->max_rdma_read_in = 4;
	a->max_rdma_read_out = 4;
}

#endif
