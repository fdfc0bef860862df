/*
 * dat_ep_modify: the state-dependent rules of dat_ep_modify(3DAT).
 *
 *  - IA, state, addresses, port qualifiers (and the SRQ, fixed at
 *    dat_ep_create_with_srq): never; asking is DAT_INVALID_PARAMETER.
 *  - PZ: quiescent states only (UNCONNECTED, TENTATIVE_CONNECTION_PENDING).
 *  - EVDs and the EP attributes: before the connection is requested or
 *    accepted (UNCONNECTED, RESERVED, PASSIVE_ and TENTATIVE_CONNECTION_PENDING).
 *  - transport- and provider-specific attributes: UNCONNECTED only.
 * A field asked for in a state that forbids it is DAT_INVALID_STATE (the
 * subtype names the state); bad values are DAT_INVALID_PARAMETER.  All
 * checks run before anything changes: a failed call changes nothing.
 */
#include <string.h>

#include "core/zd_api.h"
#include "core/zd_cm.h"
#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "evd/zd_evd.h"

#define EP_MODIFY_NEVER                                                             \
	(DAT_EP_FIELD_IA_HANDLE | DAT_EP_FIELD_EP_STATE | DAT_EP_FIELD_COMM |       \
	 DAT_EP_FIELD_LOCAL_IA_ADDRESS_PTR | DAT_EP_FIELD_LOCAL_PORT_QUAL |         \
	 DAT_EP_FIELD_REMOTE_IA_ADDRESS_PTR | DAT_EP_FIELD_REMOTE_PORT_QUAL |       \
	 DAT_EP_FIELD_SRQ_HANDLE)
#define EP_MODIFY_QUIESCENT DAT_EP_FIELD_PZ_HANDLE
#define EP_MODIFY_UNCONNECTED_ONLY                                                  \
	(DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR |                                  \
	 DAT_EP_FIELD_EP_ATTR_TRANSPORT_SPECIFIC_ATTR |                             \
	 DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR |                                   \
	 DAT_EP_FIELD_EP_ATTR_PROVIDER_SPECIFIC_ATTR)
#define EP_MODIFY_BEFORE_CONNECT                                                    \
	(DAT_EP_FIELD_ALL & ~(EP_MODIFY_NEVER | EP_MODIFY_QUIESCENT |              \
			      EP_MODIFY_UNCONNECTED_ONLY))
#define EP_MODIFY_EVDS                                                              \
	(DAT_EP_FIELD_RECV_EVD_HANDLE | DAT_EP_FIELD_REQUEST_EVD_HANDLE |           \
	 DAT_EP_FIELD_CONNECT_EVD_HANDLE)

/* Recv attributes may not ask for what only request postings do. */
#define RECV_COMPLETION_FLAGS                                                       \
	(DAT_COMPLETION_SOLICITED_WAIT_FLAG | DAT_COMPLETION_UNSIGNALLED_FLAG |     \
	 DAT_COMPLETION_EVD_THRESHOLD_FLAG)
#define REQUEST_COMPLETION_FLAGS                                                    \
	(DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_SOLICITED_WAIT_FLAG |        \
	 DAT_COMPLETION_UNSIGNALLED_FLAG | DAT_COMPLETION_BARRIER_FENCE_FLAG |      \
	 DAT_COMPLETION_EVD_THRESHOLD_FLAG)

static int state_in(DAT_EP_STATE s, int quiescent_only)
{
	switch (s) {
	case DAT_EP_STATE_UNCONNECTED:
	case DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING:
		return 1;
	case DAT_EP_STATE_RESERVED:
	case DAT_EP_STATE_PASSIVE_CONNECTION_PENDING:
		return !quiescent_only;
	default:
		return 0;
	}
}

static DAT_RETURN modify_state_check(DAT_EP_STATE s, DAT_EP_PARAM_MASK mask)
{
	if ((mask & EP_MODIFY_QUIESCENT) && !state_in(s, 1))
		return zd_ep_invalid_state(s);
	if ((mask & EP_MODIFY_BEFORE_CONNECT) && !state_in(s, 0))
		return zd_ep_invalid_state(s);
	if ((mask & EP_MODIFY_UNCONNECTED_ONLY) && s != DAT_EP_STATE_UNCONNECTED)
		return zd_ep_invalid_state(s);
	return DAT_SUCCESS;
}

/* An optional EVD handle carrying @need events, of @ia (NULL: of any IA,
 * for the connection EVD: zd_ep_set_connect_evd). */
static int evd_ok(struct zd_ia *ia, DAT_EVD_HANDLE h, DAT_EVD_FLAGS need, struct zd_evd **out)
{
	struct zd_evd *evd;

	*out = NULL;
	if (h == DAT_HANDLE_NULL)
		return 1;
	evd = zd_obj_get(h, ZD_OBJ_EVD);
	if (!evd || (ia && evd->obj.ia != ia) || !(evd->flags & need))
		return 0;
	*out = evd;
	return 1;
}

/* The attributes @ep would have after the call. */
static void merge_attr(DAT_EP_ATTR *a, DAT_EP_PARAM_MASK m, const DAT_EP_ATTR *in)
{
#define TAKE(bit, field)                  \
	do {                              \
		if (m & (bit))            \
			a->field = in->field; \
	} while (0)
	TAKE(DAT_EP_FIELD_EP_ATTR_SERVICE_TYPE, service_type);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE, max_message_size);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE, max_rdma_size);
	TAKE(DAT_EP_FIELD_EP_ATTR_QOS, qos);
	TAKE(DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS, recv_completion_flags);
	TAKE(DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS, request_completion_flags);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS, max_recv_dtos);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, max_request_dtos);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV, max_recv_iov);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV, max_request_iov);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN, max_rdma_read_in);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT, max_rdma_read_out);
	TAKE(DAT_EP_FIELD_EP_ATTR_SRQ_SOFT_HW, srq_soft_hw);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IOV, max_rdma_read_iov);
	TAKE(DAT_EP_FIELD_EP_ATTR_MAX_RDMA_WRITE_IOV, max_rdma_write_iov);
	TAKE(DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR, ep_transport_specific_count);
	TAKE(DAT_EP_FIELD_EP_ATTR_TRANSPORT_SPECIFIC_ATTR, ep_transport_specific);
	TAKE(DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR, ep_provider_specific_count);
	TAKE(DAT_EP_FIELD_EP_ATTR_PROVIDER_SPECIFIC_ATTR, ep_provider_specific);
#undef TAKE
}

static int attr_ok(struct zd_ia *ia, const DAT_EP_ATTR *a)
{
	return zd_ep_check_attr(ia, a) == DAT_SUCCESS &&
	       a->qos == DAT_QOS_BEST_EFFORT &&
	       !(a->recv_completion_flags & ~RECV_COMPLETION_FLAGS) &&
	       !(a->request_completion_flags & ~REQUEST_COMPLETION_FLAGS) &&
	       a->ep_transport_specific_count == 0 &&  /* none are defined */
	       a->ep_provider_specific_count == 0;
}

static void swap_ref(void *old_obj, void *new_obj)
{
	if (new_obj)
		zd_obj_ref(new_obj);
	if (old_obj)
		zd_obj_unref(old_obj);
}

DAT_RETURN zd_ep_modify(DAT_EP_HANDLE ep_handle, DAT_EP_PARAM_MASK mask, const DAT_EP_PARAM *p)
{
	const struct zd_device_ops *dev;
	struct zd_evd *rcv = NULL, *req = NULL, *conn = NULL;
	struct zd_pz *pz = NULL;
	struct zd_ia *ia;
	struct zd_ep *ep;
	DAT_EP_ATTR attr;
	DAT_RETURN ret;

	ZD_GET_OR_RETURN(ep, ep_handle, ZD_OBJ_EP);
	ia = ep->obj.ia;
	dev = ia->dev;
	if ((mask & ~DAT_EP_FIELD_ALL) || (mask & EP_MODIFY_NEVER))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (mask && !p)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (!mask)
		return DAT_SUCCESS;

	zd_cm_lock();
	ret = modify_state_check(atomic_load(&ep->state), mask);
	if (ret != DAT_SUCCESS)
		goto out;

	ret = DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (mask & DAT_EP_FIELD_PZ_HANDLE) {
		if (p->pz_handle != DAT_HANDLE_NULL) {
			pz = zd_obj_get(p->pz_handle, ZD_OBJ_PZ);
			if (!pz || pz->obj.ia != ia)
				goto out;
		}
	} else {
		pz = ep->pz;
	}
	if (((mask & DAT_EP_FIELD_RECV_EVD_HANDLE) &&
	     !evd_ok(ia, p->recv_evd_handle, DAT_EVD_DTO_FLAG, &rcv)) ||
	    ((mask & DAT_EP_FIELD_REQUEST_EVD_HANDLE) &&
	     !evd_ok(ia, p->request_evd_handle, DAT_EVD_DTO_FLAG | DAT_EVD_RMR_BIND_FLAG, &req)) ||
	    ((mask & DAT_EP_FIELD_CONNECT_EVD_HANDLE) &&
	     !evd_ok(NULL, p->connect_evd_handle, DAT_EVD_CONNECTION_FLAG, &conn)))
		goto out;
	attr = ep->attr;
	merge_attr(&attr, mask, &p->ep_attr);
	if (!attr_ok(ia, &attr))
		goto out;

	/* Everything checked: apply. */
	ret = DAT_SUCCESS;
	zd_ep_solicited_account(ep, -1);  /* the recv EVD or its flags may change */
	if (mask & DAT_EP_FIELD_RECV_EVD_HANDLE) {
		swap_ref(ep->recv_evd, rcv);
		ep->recv_evd = rcv;
	}
	if (mask & DAT_EP_FIELD_REQUEST_EVD_HANDLE) {
		swap_ref(ep->request_evd, req);
		ep->request_evd = req;
	}
	if (mask & DAT_EP_FIELD_CONNECT_EVD_HANDLE)
		zd_ep_set_connect_evd(ep, conn);
	ep->attr = attr;
	zd_ep_solicited_account(ep, 1);
	if (pz != ep->pz) {
		swap_ref(ep->pz, pz);
		ep->pz = pz;
	}
	/* The device sized its QP from the PZ, EVDs and attributes: a QP made
	 * before connecting is made again (DTOs posted to it are lost). */
	if (dev->qp_create) {
		if (ep->dev_priv && dev->qp_destroy)
			dev->qp_destroy(ep);
		ep->dev_priv = NULL;
		if (ep->pz)
			ret = dev->qp_create(ep);
	}
	zd_ep_dto_refresh(ep);
out:
	zd_cm_unlock();
	return ret;
}
