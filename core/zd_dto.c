/*
 * Data-transfer entry points: dat_ep_post_{send,recv,rdma_write,rdma_read}
 * and friends.  Each checks the handle, the EP state, the segment count
 * and the completion flags, then makes exactly one indirect call into the
 * device, which checks keys, bounds, PZ and access as hardware does.  No
 * locks, no system calls, no allocation here.  The send and RDMA
 * entries are templates (core/zd_dto_entry.h) that a device may also
 * instantiate with its own post inlined.
 */
#include "core/zd_api.h"
#include "core/zd_dto_entry.h"
#include "core/zd_ia.h"
#include "core/zd_ep.h"
#include "core/zd_obj.h"
#include "core/zd_ext.h"

#define ZD_RECV_FLAGS \
	(DAT_COMPLETION_SOLICITED_WAIT_FLAG | DAT_COMPLETION_EVD_THRESHOLD_FLAG)

/* Receives may be posted before the connection exists and after it ended
 * (they then complete flushed); not on an EP without a PZ or EVDs. */
static ZD_ALWAYS_INLINE bool ep_recv_ok(DAT_EP_STATE s)
{
	return s != DAT_EP_STATE_UNCONFIGURED_UNCONNECTED &&
	       s != DAT_EP_STATE_UNCONFIGURED_RESERVED &&
	       s != DAT_EP_STATE_UNCONFIGURED_PASSIVE &&
	       s != DAT_EP_STATE_UNCONFIGURED_TENTATIVE;
}

/* Segment count 0..max and a segment array when there are segments. */
static ZD_ALWAYS_INLINE DAT_RETURN check_iov(DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
					     DAT_COUNT max)
{
	if (ZD_UNLIKELY(n < 0))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (ZD_UNLIKELY(n > max))
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	if (ZD_UNLIKELY(n > 0 && !iov))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	return DAT_SUCCESS;
}

/* The EP's QP must exist (created with a PZ) for any DTO. */
#define EP_GET_READY_OR_RETURN(ep, h)                                           \
	do {                                                                    \
		ZD_GET_OR_RETURN((ep), (h), ZD_OBJ_EP);                         \
		if (ZD_UNLIKELY(!(ep)->dev_priv))                               \
			return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_PZ); \
	} while (0)

static ZD_ALWAYS_INLINE DAT_RETURN request_checks(struct zd_ep *ep, DAT_COUNT n,
						  const DAT_LMR_TRIPLET *iov, DAT_COUNT max,
						  DAT_COMPLETION_FLAGS flags,
						  DAT_RETURN_SUBTYPE flags_arg)
{
	DAT_EP_STATE s = atomic_load_explicit(&ep->state, memory_order_relaxed);
	DAT_RETURN ret;

	if (ZD_UNLIKELY(!zd_ep_connected(s)))
		return zd_ep_invalid_state(s);
	if ((ret = check_iov(n, iov, max)) != DAT_SUCCESS)
		return ret;
	if (ZD_UNLIKELY(flags & ~(DAT_COMPLETION_FLAGS)ZD_REQUEST_FLAGS))
		return DAT_ERROR(DAT_INVALID_PARAMETER, flags_arg);
	return DAT_SUCCESS;
}

__attribute__((noinline, cold)) DAT_RETURN
zd_ep_post_send_checked(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
		  DAT_COMPLETION_FLAGS flags)
{
	struct zd_ep *ep;
	DAT_RETURN ret;

	EP_GET_READY_OR_RETURN(ep, h);
	ret = request_checks(ep, n, iov, ep->attr.max_request_iov, flags, DAT_INVALID_ARG5);
	if (ZD_UNLIKELY(ret != DAT_SUCCESS))
		return ret;
	ret = ep->obj.ia->dev->post_send(ep, n, iov, cookie, flags);
	if (ret == DAT_SUCCESS)
		zd_count_ep_post(&ep->cnt, ZD_POST_SEND, n, iov);
	return ret;
}

DAT_RETURN zd_ep_post_send(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			   DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	return zd_ep_post_send_entry(h, n, iov, cookie, flags, NULL);
}

DAT_RETURN zd_ep_post_send_with_invalidate(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
					   DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags,
					   DAT_BOOLEAN invalidate, DAT_RMR_CONTEXT ctx)
{
	struct zd_ep *ep;

	ZD_GET_OR_RETURN(ep, h, ZD_OBJ_EP);
	return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
}

DAT_RETURN zd_ep_post_recv(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			   DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	struct zd_ep *ep;
	DAT_EP_STATE s;
	DAT_RETURN ret;

	EP_GET_READY_OR_RETURN(ep, h);
	s = atomic_load_explicit(&ep->state, memory_order_relaxed);
	if (ZD_UNLIKELY(!ep_recv_ok(s)))
		return zd_ep_invalid_state(s);
	/* Receives of an EP on an SRQ come from the SRQ only. */
	if (ZD_UNLIKELY(ep->srq != NULL))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE);
	if ((ret = check_iov(n, iov, ep->attr.max_recv_iov)) != DAT_SUCCESS)
		return ret;
	if (ZD_UNLIKELY(flags & ~(DAT_COMPLETION_FLAGS)ZD_RECV_FLAGS))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	ret = ep->obj.ia->dev->post_recv(ep, n, iov, cookie, flags);
	if (ZD_LIKELY(ret == DAT_SUCCESS))
		zd_count_ep_post(&ep->cnt, ZD_POST_RECV, n, iov);
	return ret;
}

static ZD_ALWAYS_INLINE DAT_RETURN rdma_checks(struct zd_ep *ep, DAT_COUNT n,
					       const DAT_LMR_TRIPLET *iov, DAT_COUNT max,
					       const DAT_RMR_TRIPLET *remote,
					       DAT_COMPLETION_FLAGS flags)
{
	DAT_RETURN ret = request_checks(ep, n, iov, max, flags, DAT_INVALID_ARG6);

	if (ZD_UNLIKELY(ret != DAT_SUCCESS))
		return ret;
	if (ZD_UNLIKELY(!remote))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	return DAT_SUCCESS;
}

__attribute__((noinline, cold)) DAT_RETURN
zd_ep_post_rdma_checked(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
			const DAT_RMR_TRIPLET *remote, DAT_COMPLETION_FLAGS flags, bool write)
{
	struct zd_ep *ep;
	DAT_RETURN ret;

	EP_GET_READY_OR_RETURN(ep, h);
	ret = rdma_checks(ep, n, iov,
			  zd_rdma_iov_max(ep, write ? ep->attr.max_rdma_write_iov
						    : ep->attr.max_rdma_read_iov),
			  remote, flags);
	if (ZD_UNLIKELY(ret != DAT_SUCCESS))
		return ret;
	if (write)
		ret = ep->obj.ia->dev->post_rdma_write(ep, n, iov, cookie, remote, flags);
	else
		ret = ep->obj.ia->dev->post_rdma_read(ep, n, iov, cookie, remote, flags);
	if (ret == DAT_SUCCESS)
		zd_count_ep_post(&ep->cnt, write ? ZD_POST_WRITE : ZD_POST_READ, n, iov);
	return ret;
}

DAT_RETURN zd_ep_post_rdma_write(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				 DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				 DAT_COMPLETION_FLAGS flags)
{
	return zd_ep_post_rdma_entry(h, n, iov, cookie, remote, flags, true, NULL);
}

DAT_RETURN zd_ep_post_rdma_read(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				DAT_COMPLETION_FLAGS flags)
{
	return zd_ep_post_rdma_entry(h, n, iov, cookie, remote, flags, false, NULL);
}

DAT_RETURN zd_ep_post_rdma_read_to_rmr(DAT_EP_HANDLE h, const DAT_RMR_TRIPLET *local,
				       DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				       DAT_COMPLETION_FLAGS flags)
{
	struct zd_ep *ep;

	ZD_GET_OR_RETURN(ep, h, ZD_OBJ_EP);
	return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
}

/* dat_ep_recv_query and dat_ep_set_watermark are in zd_ep.c. */

/* ---- IB extension posts (dat_ib_extensions.h): the checked paths of
 * core/zd_ext_entry.h ---- */

/* The device op of an extension, or DAT_NOT_IMPLEMENTED. */
#define EXT_OP_OR_RETURN(ep, op)                                               \
	do {                                                                   \
		if (!(ep)->obj.ia->dev->op)                                    \
			return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE); \
	} while (0)

/* dat_ib_post_rdma_write_immed(ep, n, iov, cookie, remote, imm, flags). */
__attribute__((noinline, cold)) DAT_RETURN
zd_ep_post_rdma_write_imm(DAT_EP_HANDLE h, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			  DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote, uint32_t imm,
			  DAT_COMPLETION_FLAGS flags)
{
	struct zd_ep *ep;
	DAT_RETURN ret;

	EP_GET_READY_OR_RETURN(ep, h);
	EXT_OP_OR_RETURN(ep, post_rdma_write_imm);
	if (ep->attr.service_type != DAT_SERVICE_TYPE_RC)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	ret = rdma_checks(ep, n, iov, zd_rdma_iov_max(ep, ep->attr.max_rdma_write_iov), remote,
			  flags);
	/* The flags are the 7th argument here (the immediate comes before). */
	if (ret == DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7);
	if (ZD_UNLIKELY(ret != DAT_SUCCESS))
		return ret;
	ret = ep->obj.ia->dev->post_rdma_write_imm(ep, n, iov, cookie, remote, imm, flags);
	if (ret == DAT_SUCCESS)
		zd_count_ep_post(&ep->cnt, ZD_POST_WRITE_IMM, n, iov);
	return ret;
}

/* dat_ib_post_fetch_and_add(ep, add, local, cookie, remote, flags) and
 * dat_ib_post_cmp_and_swap(ep, cmp, swap, local, cookie, remote, flags):
 * one local segment of at least 8 bytes for the old value, 8 remote bytes
 * at an 8-byte aligned address (the argument numbers name the macros'). */
__attribute__((noinline, cold)) DAT_RETURN
zd_ep_post_atomic(DAT_EP_HANDLE h, DAT_DTOS op, const DAT_LMR_TRIPLET *local, DAT_DTO_COOKIE cookie,
		  const DAT_RMR_TRIPLET *remote, uint64_t operand, uint64_t swap,
		  DAT_COMPLETION_FLAGS flags)
{
	const bool cas = op == (DAT_DTOS)DAT_IB_DTO_CMP_SWAP;
	struct zd_ep *ep;
	DAT_EP_STATE s;
	DAT_RETURN ret;

	EP_GET_READY_OR_RETURN(ep, h);
	EXT_OP_OR_RETURN(ep, post_atomic);
	if (ep->attr.service_type != DAT_SERVICE_TYPE_RC)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	s = atomic_load_explicit(&ep->state, memory_order_relaxed);
	if (!zd_ep_connected(s))
		return zd_ep_invalid_state(s);
	if (!local)
		return DAT_ERROR(DAT_INVALID_PARAMETER, cas ? DAT_INVALID_ARG4 : DAT_INVALID_ARG3);
	if (!remote)
		return DAT_ERROR(DAT_INVALID_PARAMETER, cas ? DAT_INVALID_ARG6 : DAT_INVALID_ARG5);
	if (flags & ~(DAT_COMPLETION_FLAGS)ZD_REQUEST_FLAGS)
		return DAT_ERROR(DAT_INVALID_PARAMETER, cas ? DAT_INVALID_ARG7 : DAT_INVALID_ARG6);
	if (local->segment_length < ZD_ATOMIC_BYTES)
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	if (remote->virtual_address % ZD_ATOMIC_BYTES || remote->segment_length < ZD_ATOMIC_BYTES)
		return DAT_ERROR(DAT_INVALID_PARAMETER, cas ? DAT_INVALID_ARG6 : DAT_INVALID_ARG5);
	ret = ep->obj.ia->dev->post_atomic(ep, op, local, cookie, remote, operand, swap, flags);
	if (ret == DAT_SUCCESS)
		zd_count_ep_post_op(&ep->cnt, cas ? ZD_POST_CMP_SWAP : ZD_POST_FETCH_ADD);
	return ret;
}
