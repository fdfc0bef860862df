/*
 * DAT calls zdapl does not implement yet.  Each still checks its handle (a
 * bad handle is DAT_INVALID_HANDLE, as everywhere) and then answers
 * DAT_NOT_IMPLEMENTED.  README's support matrix lists every one of them;
 * remove an entry here when its real implementation lands.
 */
#include "core/zd_api.h"
#include "core/zd_obj.h"

#define ZD_NOT_IMPLEMENTED(handle, type)                           \
	do {                                                       \
		void *obj_;                                        \
		ZD_GET_OR_RETURN(obj_, (handle), (type));          \
		(void)obj_;                                        \
		return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE); \
	} while (0)

/* Connection management */
DAT_RETURN zd_cr_query(DAT_CR_HANDLE cr, DAT_CR_PARAM_MASK m, DAT_CR_PARAM *p)
{ ZD_NOT_IMPLEMENTED(cr, ZD_OBJ_CR); }
DAT_RETURN zd_cr_accept(DAT_CR_HANDLE cr, DAT_EP_HANDLE ep, DAT_COUNT n, const DAT_PVOID d)
{ ZD_NOT_IMPLEMENTED(cr, ZD_OBJ_CR); }
DAT_RETURN zd_cr_reject(DAT_CR_HANDLE cr, DAT_COUNT n, const DAT_PVOID d)
{ ZD_NOT_IMPLEMENTED(cr, ZD_OBJ_CR); }
DAT_RETURN zd_cr_handoff(DAT_CR_HANDLE cr, DAT_CONN_QUAL q)
{ ZD_NOT_IMPLEMENTED(cr, ZD_OBJ_CR); }
DAT_RETURN zd_ep_modify(DAT_EP_HANDLE ep, DAT_EP_PARAM_MASK m, const DAT_EP_PARAM *p)
{ ZD_NOT_IMPLEMENTED(ep, ZD_OBJ_EP); }
DAT_RETURN zd_ep_connect(DAT_EP_HANDLE ep, DAT_IA_ADDRESS_PTR a, DAT_CONN_QUAL q, DAT_TIMEOUT t,
			 DAT_COUNT n, const DAT_PVOID d, DAT_QOS qos, DAT_CONNECT_FLAGS f)
{ ZD_NOT_IMPLEMENTED(ep, ZD_OBJ_EP); }
DAT_RETURN zd_ep_common_connect(DAT_EP_HANDLE ep, DAT_IA_ADDRESS_PTR a, DAT_TIMEOUT t,
				DAT_COUNT n, const DAT_PVOID d)
{ ZD_NOT_IMPLEMENTED(ep, ZD_OBJ_EP); }
DAT_RETURN zd_ep_dup_connect(DAT_EP_HANDLE ep, DAT_EP_HANDLE dup, DAT_TIMEOUT t, DAT_COUNT n,
			     const DAT_PVOID d, DAT_QOS qos)
{ ZD_NOT_IMPLEMENTED(ep, ZD_OBJ_EP); }
DAT_RETURN zd_ep_disconnect(DAT_EP_HANDLE ep, DAT_CLOSE_FLAGS f)
{ ZD_NOT_IMPLEMENTED(ep, ZD_OBJ_EP); }
DAT_RETURN zd_psp_create(DAT_IA_HANDLE ia, DAT_CONN_QUAL q, DAT_EVD_HANDLE e, DAT_PSP_FLAGS f,
			 DAT_PSP_HANDLE *psp)
{ ZD_NOT_IMPLEMENTED(ia, ZD_OBJ_IA); }
DAT_RETURN zd_psp_create_any(DAT_IA_HANDLE ia, DAT_CONN_QUAL *q, DAT_EVD_HANDLE e,
			     DAT_PSP_FLAGS f, DAT_PSP_HANDLE *psp)
{ ZD_NOT_IMPLEMENTED(ia, ZD_OBJ_IA); }
DAT_RETURN zd_psp_query(DAT_PSP_HANDLE psp, DAT_PSP_PARAM_MASK m, DAT_PSP_PARAM *p)
{ ZD_NOT_IMPLEMENTED(psp, ZD_OBJ_PSP); }
DAT_RETURN zd_psp_free(DAT_PSP_HANDLE psp)
{ ZD_NOT_IMPLEMENTED(psp, ZD_OBJ_PSP); }
DAT_RETURN zd_rsp_create(DAT_IA_HANDLE ia, DAT_CONN_QUAL q, DAT_EP_HANDLE ep, DAT_EVD_HANDLE e,
			 DAT_RSP_HANDLE *rsp)
{ ZD_NOT_IMPLEMENTED(ia, ZD_OBJ_IA); }
DAT_RETURN zd_rsp_query(DAT_RSP_HANDLE rsp, DAT_RSP_PARAM_MASK m, DAT_RSP_PARAM *p)
{ ZD_NOT_IMPLEMENTED(rsp, ZD_OBJ_RSP); }
DAT_RETURN zd_rsp_free(DAT_RSP_HANDLE rsp)
{ ZD_NOT_IMPLEMENTED(rsp, ZD_OBJ_RSP); }
DAT_RETURN zd_csp_create(DAT_IA_HANDLE ia, DAT_COMM *c, DAT_IA_ADDRESS_PTR a, DAT_EVD_HANDLE e,
			 DAT_CSP_HANDLE *csp)
{ ZD_NOT_IMPLEMENTED(ia, ZD_OBJ_IA); }
DAT_RETURN zd_csp_query(DAT_CSP_HANDLE csp, DAT_CSP_PARAM_MASK m, DAT_CSP_PARAM *p)
{ ZD_NOT_IMPLEMENTED(csp, ZD_OBJ_CSP); }
DAT_RETURN zd_csp_free(DAT_CSP_HANDLE csp)
{ ZD_NOT_IMPLEMENTED(csp, ZD_OBJ_CSP); }

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
