/* Shared receive queues: dat_srq_* and dat_ep_create_with_srq.  The queue
 * itself is the device's (srq_create/srq_post_recv). */
#include <string.h>

#include "core/zd_api.h"
#include "core/zd_ia.h"
#include "core/zd_ep.h"
#include "core/zd_srq.h"

DAT_RETURN zd_srq_create(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE pz_handle, DAT_SRQ_ATTR *attr,
			 DAT_SRQ_HANDLE *srq_handle)
{
	struct zd_ia *ia;
	struct zd_pz *pz;
	struct zd_srq *srq;
	DAT_RETURN ret;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	ZD_GET_OR_RETURN(pz, pz_handle, ZD_OBJ_PZ);
	if (pz->obj.ia != ia)
		return zd_obj_invalid_handle(ZD_OBJ_PZ);
	if (!attr || attr->max_recv_dtos <= 0 ||
	    attr->max_recv_dtos > ia->limits.max_recv_per_srq ||
	    attr->max_recv_iov <= 0 || attr->max_recv_iov > ia->limits.max_iov_segments ||
	    attr->low_watermark < 0 || attr->low_watermark > attr->max_recv_dtos)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (!srq_handle)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (!ia->dev->srq_create || !ia->dev->srq_post_recv)
		return DAT_ERROR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE);

	srq = zd_obj_alloc(ZD_OBJ_SRQ, sizeof(*srq), ia);
	if (!srq)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	srq->pz = pz;
	srq->max_recv_dtos = attr->max_recv_dtos;
	srq->max_recv_iov = attr->max_recv_iov;
	atomic_store(&srq->low_watermark, attr->low_watermark);
	atomic_store(&srq->state, DAT_SRQ_STATE_OPERATIONAL);
	ret = ia->dev->srq_create(srq);
	if (ret != DAT_SUCCESS) {
		zd_obj_release(srq);
		return ret;
	}
	zd_obj_ref(pz);
	zd_ia_add_child(ia, &srq->obj);
	*srq_handle = srq;
	return DAT_SUCCESS;
}

void zd_srq_destroy(struct zd_obj *o)
{
	struct zd_srq *srq = (struct zd_srq *)o;
	struct zd_ia *ia = o->ia;

	if (ia->dev->srq_destroy)
		ia->dev->srq_destroy(srq);
	zd_obj_unref(srq->pz);
	zd_ia_del_child(ia, o);
	zd_obj_release(o);
}

DAT_RETURN zd_srq_free(DAT_SRQ_HANDLE srq_handle)
{
	struct zd_srq *srq;

	ZD_GET_OR_RETURN(srq, srq_handle, ZD_OBJ_SRQ);
	if (zd_obj_in_use(srq))  /* EPs use it */
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE);
	zd_srq_destroy(&srq->obj);
	return DAT_SUCCESS;
}

DAT_RETURN zd_srq_post_recv(DAT_SRQ_HANDLE srq_handle, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			    DAT_DTO_COOKIE cookie)
{
	struct zd_srq *srq;

	ZD_GET_OR_RETURN(srq, srq_handle, ZD_OBJ_SRQ);
	if (ZD_UNLIKELY(n < 0))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (ZD_UNLIKELY(n > srq->max_recv_iov))
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	if (ZD_UNLIKELY(n > 0 && !iov))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	return srq->obj.ia->dev->srq_post_recv(srq, n, iov, cookie);
}

DAT_RETURN zd_srq_query(DAT_SRQ_HANDLE srq_handle, DAT_SRQ_PARAM_MASK mask, DAT_SRQ_PARAM *p)
{
	struct zd_srq *srq;

	ZD_GET_OR_RETURN(srq, srq_handle, ZD_OBJ_SRQ);
	if (!p)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	memset(p, 0, sizeof(*p));
	p->ia_handle = zd_ia_consumer_handle(srq->obj.ia);
	p->srq_state = atomic_load(&srq->state);
	p->pz_handle = srq->pz;
	p->max_recv_dtos = srq->max_recv_dtos;
	p->max_recv_iov = srq->max_recv_iov;
	p->low_watermark = atomic_load(&srq->low_watermark);
	p->available_dto_count = DAT_VALUE_UNKNOWN;
	p->outstanding_dto_count = DAT_VALUE_UNKNOWN;
	/* A device without the counts leaves them unknown (dat_srq_query(3DAT)). */
	if (srq->obj.ia->dev->rq_counts)
		srq->obj.ia->dev->rq_counts(NULL, srq, &p->available_dto_count,
					    &p->outstanding_dto_count);
	return DAT_SUCCESS;
}

DAT_RETURN zd_srq_resize(DAT_SRQ_HANDLE srq_handle, DAT_COUNT n)
{
	struct zd_srq *srq;
	struct zd_ia *ia;
	DAT_RETURN ret;

	ZD_GET_OR_RETURN(srq, srq_handle, ZD_OBJ_SRQ);
	ia = srq->obj.ia;
	if (n <= 0 || n > ia->limits.max_recv_per_srq)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (ia->dev->srq_resize && (ret = ia->dev->srq_resize(srq, (uint32_t)n)) != DAT_SUCCESS)
		return ret;
	srq->max_recv_dtos = n;
	return DAT_SUCCESS;
}

DAT_RETURN zd_srq_set_lw(DAT_SRQ_HANDLE srq_handle, DAT_COUNT lw)
{
	struct zd_srq *srq;

	ZD_GET_OR_RETURN(srq, srq_handle, ZD_OBJ_SRQ);
	if (lw < 0 || lw > srq->max_recv_dtos)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	/* Armed until the available count falls below it once. */
	atomic_store(&srq->low_watermark, lw);
	return DAT_SUCCESS;
}

DAT_RETURN zd_ep_create_with_srq(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE pz_handle,
				 DAT_EVD_HANDLE recv_evd, DAT_EVD_HANDLE request_evd,
				 DAT_EVD_HANDLE connect_evd, DAT_SRQ_HANDLE srq_handle,
				 const DAT_EP_ATTR *attr, DAT_EP_HANDLE *ep_handle)
{
	struct zd_ia *ia;
	struct zd_srq *srq;

	ZD_GET_OR_RETURN(ia, ia_handle, ZD_OBJ_IA);
	ZD_GET_OR_RETURN(srq, srq_handle, ZD_OBJ_SRQ);
	if (srq->obj.ia != ia)
		return zd_obj_invalid_handle(ZD_OBJ_SRQ);
	/* srq_ep_pz_difference_supported is false. */
	if (pz_handle != srq->pz)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	return zd_ep_create_internal(ia_handle, pz_handle, recv_evd, request_evd, connect_evd,
				     srq, attr, ep_handle);
}

void zd_srq_check_lw(struct zd_srq *srq, uint64_t avail)
{
	DAT_COUNT lw = atomic_load_explicit(&srq->low_watermark, memory_order_relaxed);

	if (lw == DAT_SRQ_LW_DEFAULT || avail >= (uint64_t)lw)
		return;
	if (atomic_compare_exchange_strong(&srq->low_watermark, &lw, DAT_SRQ_LW_DEFAULT))
		zd_ia_async_error(srq->obj.ia, srq, DAT_SRQ_LOW_WATERMARK_EVENT);
}
