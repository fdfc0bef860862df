/* Data-transfer and SRQ calls until the shm data path lands; this file
 * goes away with it. */
#include "core/zd_unimplemented.h"

/* Data transfer */
DAT_RETURN zd_ep_post_send(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			   DAT_DTO_COOKIE c, DAT_COMPLETION_FLAGS f)
{ ZD_NOT_IMPLEMENTED(ep, ZD_OBJ_EP); }
DAT_RETURN zd_ep_post_send_with_invalidate(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
					   DAT_DTO_COOKIE c, DAT_COMPLETION_FLAGS f,
					   DAT_BOOLEAN inv, DAT_RMR_CONTEXT ctx)
{ ZD_NOT_IMPLEMENTED(ep, ZD_OBJ_EP); }
DAT_RETURN zd_ep_post_recv(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			   DAT_DTO_COOKIE c, DAT_COMPLETION_FLAGS f)
{ ZD_NOT_IMPLEMENTED(ep, ZD_OBJ_EP); }
DAT_RETURN zd_ep_post_rdma_read(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				DAT_DTO_COOKIE c, const DAT_RMR_TRIPLET *r,
				DAT_COMPLETION_FLAGS f)
{ ZD_NOT_IMPLEMENTED(ep, ZD_OBJ_EP); }
DAT_RETURN zd_ep_post_rdma_read_to_rmr(DAT_EP_HANDLE ep, const DAT_RMR_TRIPLET *l,
				       DAT_DTO_COOKIE c, const DAT_RMR_TRIPLET *r,
				       DAT_COMPLETION_FLAGS f)
{ ZD_NOT_IMPLEMENTED(ep, ZD_OBJ_EP); }
DAT_RETURN zd_ep_post_rdma_write(DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				 DAT_DTO_COOKIE c, const DAT_RMR_TRIPLET *r,
				 DAT_COMPLETION_FLAGS f)
{ ZD_NOT_IMPLEMENTED(ep, ZD_OBJ_EP); }
DAT_RETURN zd_ep_recv_query(DAT_EP_HANDLE ep, DAT_COUNT *bufs, DAT_COUNT *bytes)
{ ZD_NOT_IMPLEMENTED(ep, ZD_OBJ_EP); }
DAT_RETURN zd_ep_set_watermark(DAT_EP_HANDLE ep, DAT_COUNT soft, DAT_COUNT hard)
{ ZD_NOT_IMPLEMENTED(ep, ZD_OBJ_EP); }

/* Shared receive queues */
DAT_RETURN zd_srq_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_SRQ_ATTR *a, DAT_SRQ_HANDLE *srq)
{ ZD_NOT_IMPLEMENTED(ia, ZD_OBJ_IA); }
DAT_RETURN zd_srq_free(DAT_SRQ_HANDLE srq)
{ ZD_NOT_IMPLEMENTED(srq, ZD_OBJ_SRQ); }
DAT_RETURN zd_srq_post_recv(DAT_SRQ_HANDLE srq, DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE c)
{ ZD_NOT_IMPLEMENTED(srq, ZD_OBJ_SRQ); }
DAT_RETURN zd_srq_query(DAT_SRQ_HANDLE srq, DAT_SRQ_PARAM_MASK m, DAT_SRQ_PARAM *p)
{ ZD_NOT_IMPLEMENTED(srq, ZD_OBJ_SRQ); }
DAT_RETURN zd_srq_resize(DAT_SRQ_HANDLE srq, DAT_COUNT n)
{ ZD_NOT_IMPLEMENTED(srq, ZD_OBJ_SRQ); }
DAT_RETURN zd_srq_set_lw(DAT_SRQ_HANDLE srq, DAT_COUNT lw)
{ ZD_NOT_IMPLEMENTED(srq, ZD_OBJ_SRQ); }

DAT_RETURN zd_ep_create_with_srq(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE r,
				 DAT_EVD_HANDLE q, DAT_EVD_HANDLE c, DAT_SRQ_HANDLE srq,
				 const DAT_EP_ATTR *attr, DAT_EP_HANDLE *ep)
{ ZD_NOT_IMPLEMENTED(srq, ZD_OBJ_SRQ); }
