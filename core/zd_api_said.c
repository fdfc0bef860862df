/*
 * The calls that create (IAs, EVDs, EPs, memory regions, service points,
 * connections) as libdat2 reaches them: each one that fails with
 * DAT_INSUFFICIENT_RESOURCES and said nothing itself on the way gets one
 * "zdapl:" line naming the call and the resource, so a consumer out of
 * descriptors, memory or address space always learns why.  The lines
 * that name the cause (the failed system call and its errno) come from
 * where it happened; this is the net under the paths that have none
 * (an allocation, a table full).
 */
#include "core/zd_api.h"
#include "core/zd_log.h"

static const char *resource_name(DAT_RETURN ret)
{
	switch (DAT_GET_SUBTYPE(ret)) {
	case DAT_RESOURCE_MEMORY: return "memory";
	case DAT_RESOURCE_DEVICE: return "device resources";
	case DAT_RESOURCE_TEP: return "transport endpoints";
	case DAT_RESOURCE_TEVD: return "completion queues";
	case DAT_RESOURCE_PROTECTION_DOMAIN: return "protection domains";
	case DAT_RESOURCE_MEMORY_REGION: return "memory regions";
	case DAT_RESOURCE_SRQ: return "shared receive queues";
	default: return "resources";
	}
}

static DAT_RETURN said(const char *call, DAT_RETURN ret, unsigned said_before)
{
	if (DAT_GET_TYPE(ret) == DAT_INSUFFICIENT_RESOURCES && zd_log_said() == said_before)
		zd_log_rate_limited("%s: out of %s", call, resource_name(ret));
	return ret;
}

#define SAID(call, expr)                                                      \
	do {                                                                  \
		unsigned said_before_ = zd_log_said();                        \
		return said(call, (expr), said_before_);                      \
	} while (0)

DAT_RETURN zd_said_ia_open(const DAT_NAME_PTR name, DAT_COUNT qlen, DAT_EVD_HANDLE *async,
			   DAT_IA_HANDLE *ia)
{
	SAID("dat_ia_open", zd_ia_open(name, qlen, async, ia));
}

DAT_RETURN zd_said_evd_create(DAT_IA_HANDLE ia, DAT_COUNT qlen, DAT_CNO_HANDLE cno,
			      DAT_EVD_FLAGS flags, DAT_EVD_HANDLE *evd)
{
	SAID("dat_evd_create", zd_evd_create(ia, qlen, cno, flags, evd));
}

DAT_RETURN zd_said_evd_resize(DAT_EVD_HANDLE evd, DAT_COUNT qlen)
{
	SAID("dat_evd_resize", zd_evd_resize(evd, qlen));
}

DAT_RETURN zd_said_cno_create(DAT_IA_HANDLE ia, DAT_OS_WAIT_PROXY_AGENT agent,
			      DAT_CNO_HANDLE *cno)
{
	SAID("dat_cno_create", zd_cno_create(ia, agent, cno));
}

DAT_RETURN zd_said_pz_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE *pz)
{
	SAID("dat_pz_create", zd_pz_create(ia, pz));
}

DAT_RETURN zd_said_ep_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE rcv,
			     DAT_EVD_HANDLE req, DAT_EVD_HANDLE conn, const DAT_EP_ATTR *attr,
			     DAT_EP_HANDLE *ep)
{
	SAID("dat_ep_create", zd_ep_create(ia, pz, rcv, req, conn, attr, ep));
}

DAT_RETURN zd_said_ep_create_with_srq(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE rcv,
				      DAT_EVD_HANDLE req, DAT_EVD_HANDLE conn,
				      DAT_SRQ_HANDLE srq, const DAT_EP_ATTR *attr,
				      DAT_EP_HANDLE *ep)
{
	SAID("dat_ep_create_with_srq",
	     zd_ep_create_with_srq(ia, pz, rcv, req, conn, srq, attr, ep));
}

DAT_RETURN zd_said_srq_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_SRQ_ATTR *attr,
			      DAT_SRQ_HANDLE *srq)
{
	SAID("dat_srq_create", zd_srq_create(ia, pz, attr, srq));
}

DAT_RETURN zd_said_srq_resize(DAT_SRQ_HANDLE srq, DAT_COUNT n)
{
	SAID("dat_srq_resize", zd_srq_resize(srq, n));
}

DAT_RETURN zd_said_lmr_create(DAT_IA_HANDLE ia, DAT_MEM_TYPE type, DAT_REGION_DESCRIPTION r,
			      DAT_VLEN len, DAT_PZ_HANDLE pz, DAT_MEM_PRIV_FLAGS priv,
			      DAT_VA_TYPE va_type, DAT_LMR_HANDLE *lmr, DAT_LMR_CONTEXT *lctx,
			      DAT_RMR_CONTEXT *rctx, DAT_VLEN *rlen, DAT_VADDR *raddr)
{
	SAID("dat_lmr_create",
	     zd_lmr_create(ia, type, r, len, pz, priv, va_type, lmr, lctx, rctx, rlen, raddr));
}

DAT_RETURN zd_said_rmr_create(DAT_PZ_HANDLE pz, DAT_RMR_HANDLE *rmr)
{
	SAID("dat_rmr_create", zd_rmr_create(pz, rmr));
}

DAT_RETURN zd_said_psp_create(DAT_IA_HANDLE ia, DAT_CONN_QUAL q, DAT_EVD_HANDLE evd,
			      DAT_PSP_FLAGS flags, DAT_PSP_HANDLE *psp)
{
	SAID("dat_psp_create", zd_psp_create(ia, q, evd, flags, psp));
}

DAT_RETURN zd_said_psp_create_any(DAT_IA_HANDLE ia, DAT_CONN_QUAL *q, DAT_EVD_HANDLE evd,
				  DAT_PSP_FLAGS flags, DAT_PSP_HANDLE *psp)
{
	SAID("dat_psp_create_any", zd_psp_create_any(ia, q, evd, flags, psp));
}

DAT_RETURN zd_said_rsp_create(DAT_IA_HANDLE ia, DAT_CONN_QUAL q, DAT_EP_HANDLE ep,
			      DAT_EVD_HANDLE evd, DAT_RSP_HANDLE *rsp)
{
	SAID("dat_rsp_create", zd_rsp_create(ia, q, ep, evd, rsp));
}

DAT_RETURN zd_said_cr_accept(DAT_CR_HANDLE cr, DAT_EP_HANDLE ep, DAT_COUNT len,
			     const DAT_PVOID pdata)
{
	SAID("dat_cr_accept", zd_cr_accept(cr, ep, len, pdata));
}

DAT_RETURN zd_said_ep_connect(DAT_EP_HANDLE ep, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL q,
			      DAT_TIMEOUT timeout, DAT_COUNT len, const DAT_PVOID pdata,
			      DAT_QOS qos, DAT_CONNECT_FLAGS flags)
{
	SAID("dat_ep_connect", zd_ep_connect(ep, addr, q, timeout, len, pdata, qos, flags));
}

DAT_RETURN zd_said_ep_dup_connect(DAT_EP_HANDLE ep, DAT_EP_HANDLE dup, DAT_TIMEOUT timeout,
				  DAT_COUNT len, const DAT_PVOID pdata, DAT_QOS qos)
{
	SAID("dat_ep_dup_connect", zd_ep_dup_connect(ep, dup, timeout, len, pdata, qos));
}
