/*
 * The EP side of connection management: dat_ep_connect, dup_connect,
 * common_connect, disconnect, and the EP states and connection events
 * that the CM thread's frames and timers lead to (dat_ep_connect(3DAT)).
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <arpa/inet.h>

#include "core/zd_api.h"
#include "core/zd_cm.h"
#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "core/zd_ud.h"
#include "evd/zd_evd.h"

void zd_cm_ep_event(struct zd_ep *ep, DAT_EVENT_NUMBER type, const void *pdata, size_t len)
{
	DAT_EVENT ev;

	if (!ep->connect_evd)
		return;
	memset(&ev, 0, sizeof(ev));
	ev.event_number = type;
	ev.evd_handle = ep->connect_evd;
	ev.event_data.connect_event_data.ep_handle = ep;
	if (len) {
		memcpy(ep->cm_pdata, pdata, len);
		ep->cm_pdata_len = (DAT_COUNT)len;
		ev.event_data.connect_event_data.private_data = ep->cm_pdata;
		ev.event_data.connect_event_data.private_data_size = (DAT_COUNT)len;
	}
	/* Any thread may post one (the CM's, a dat_cr_accept caller): atomic. */
	atomic_fetch_add_explicit(&ep->connect_evd->conn_events, 1, memory_order_relaxed);
	zd_evd_post(ep->connect_evd, &ev, 1);
}

static void ep_qp_flush(struct zd_ep *ep)
{
	const struct zd_device_ops *dev = ep->obj.ia->dev;

	if (dev->qp_flush && ep->dev_priv)
		dev->qp_flush(ep);
}

void zd_cm_ep_conn_lost(struct zd_ep *ep, DAT_EVENT_NUMBER type)
{
	struct zd_cm_conn *c = ep->cm_conn;

	if (c) {
		c->ep = NULL;
		zd_ep_set_cm_conn(ep, NULL);
	}
	ep_qp_flush(ep);
	zd_ep_set_state(ep, DAT_EP_STATE_DISCONNECTED);
	zd_cm_ep_event(ep, type, NULL, 0);
}

void zd_cm_active_failed(struct zd_cm_conn *c, DAT_EVENT_NUMBER type)
{
	if (c->ud) {
		zd_cm_ud_failed(c);
		return;
	}
	if (c->ep)
		zd_cm_ep_conn_lost(c->ep, type);
	zd_cm_conn_close(c);
}

DAT_RETURN zd_cm_qp_connect(struct zd_ep *ep, const void *blob, size_t len)
{
	const struct zd_device_ops *dev = ep->obj.ia->dev;
	unsigned said = zd_log_said();
	DAT_RETURN ret;
	int err;

	if (!dev->qp_connect || !ep->dev_priv)
		return DAT_SUCCESS;
	errno = 0;
	ret = dev->qp_connect(ep, blob, len);
	err = errno;
	if (ret != DAT_SUCCESS && zd_log_said() == said)
		zd_log_rate_limited("%s: connection with %s, qualifier %#" PRIx64 ": cannot join the "
				    "peer's queue pair (DAT error %#x%s%s): refused", dev->name,
				    inet_ntoa(ep->remote_addr.sin_addr), (uint64_t)ep->remote_qual,
				    (unsigned)ret, err ? ", " : "", err ? strerror(err) : "");
	return ret;
}

void zd_cm_active_on_rep(struct zd_cm_conn *c, const struct zd_cm_hdr *h, const uint8_t *body)
{
	struct zd_ep *ep = c->ep;

	if (!ep) {
		zd_cm_conn_close(c);
		return;
	}
	if (zd_cm_qp_connect(ep, body + h->pdata_len, h->blob_len) != DAT_SUCCESS) {
		/* Our EOF tells the passive side (ACCEPT_COMPLETION_ERROR). */
		zd_cm_active_failed(c, DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
		return;
	}
	c->state = ZD_CONN_ESTABLISHED;
	c->deadline = 0;
	zd_count_ia(&ep->obj.ia->cnt, DCNT_IA_CM_ACTIVE_EST);
	zd_ep_set_state(ep, DAT_EP_STATE_CONNECTED);
	zd_cm_conn_send(c, ZD_CM_MSG_RTU, 0, NULL, 0, NULL, 0);
	/* The RTU was the CM's last frame on its socket if the data path
	 * takes it (tcp); our EOF tells the passive side if that fails. */
	if (zd_cm_conn_carry(c) < 0) {
		zd_cm_active_failed(c, DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
		return;
	}
	zd_cm_ep_event(ep, DAT_CONNECTION_EVENT_ESTABLISHED, body, h->pdata_len);
}

void zd_cm_active_on_rej(struct zd_cm_conn *c, const struct zd_cm_hdr *h, const uint8_t *body)
{
	struct zd_ep *ep = c->ep;

	if (ep) {
		zd_ep_set_cm_conn(ep, NULL);
		c->ep = NULL;
		ep_qp_flush(ep);
		zd_ep_set_state(ep, DAT_EP_STATE_DISCONNECTED);
		if (h->reason == ZD_CM_REJ_PEER)
			zd_cm_ep_event(ep, DAT_CONNECTION_EVENT_PEER_REJECTED, body, h->pdata_len);
		else
			zd_cm_ep_event(ep, DAT_CONNECTION_EVENT_NON_PEER_REJECTED, NULL, 0);
	}
	zd_cm_conn_close(c);
}

void zd_cm_ep_release(struct zd_ep *ep)
{
	struct zd_cm_conn *c;

	zd_cm_lock();
	zd_cm_ud_ep_release(ep);
	c = ep->cm_conn;
	if (c) {
		/* Carried: the DISC goes on the data stream, while the EP
		 * still names it (the QP's end sends what is queued). */
		if (c->carried && c->state == ZD_CONN_ESTABLISHED)
			zd_cm_conn_send(c, ZD_CM_MSG_DISC, 0, NULL, 0, NULL, 0);
		zd_ep_set_cm_conn(ep, NULL);
		c->ep = NULL;
		if (c->carried) {
			zd_cm_conn_close(c);
		} else if (c->state == ZD_CONN_ESTABLISHED) {
			/* Freed while connected: an abrupt disconnect, so the
			 * peer sees DISCONNECTED rather than BROKEN. */
			zd_cm_conn_send(c, ZD_CM_MSG_DISC, 0, NULL, 0, NULL, 0);
			zd_cm_conn_close_after_flush(c);
		} else {
			zd_cm_conn_close(c);
		}
	}
	zd_cm_unlock();
}

/* ---- dat_ep_connect and friends ---- */

static DAT_RETURN ep_connect_checks(struct zd_ep *ep, DAT_TIMEOUT timeout, DAT_COUNT pdata_len,
				    const DAT_PVOID pdata, DAT_QOS qos)
{
	if (timeout == 0)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (pdata_len < 0 || pdata_len > zd_cm_pdata_max(ep->obj.ia))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
	if (pdata_len > 0 && !pdata)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
	if (qos != DAT_QOS_BEST_EFFORT)
		return DAT_ERROR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE);
	return DAT_SUCCESS;
}

static DAT_RETURN ep_connect_locked(struct zd_ep *ep, const struct sockaddr_in *dst,
				    DAT_CONN_QUAL conn_qual, DAT_TIMEOUT timeout,
				    DAT_COUNT pdata_len, const DAT_PVOID pdata)
{
	const struct zd_device_ops *dev = ep->obj.ia->dev;
	DAT_EP_STATE s = atomic_load(&ep->state);
	const bool ud = zd_ep_is_ud(ep);
	DAT_RETURN ret;

	/* A UD EP exchanges addresses any number of times, in any state. */
	if (s != DAT_EP_STATE_UNCONNECTED && !ud)
		return zd_ep_invalid_state(s);
	if (!ep->connect_evd)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN);
	/* A device with queue pairs needs one to connect (it comes with a PZ). */
	if (dev->qp_create && !ep->dev_priv)
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONFIGURED);
	if (ud)
		return zd_cm_connect(ep, dst, conn_qual, timeout, pdata,
				     (size_t)pdata_len);
	zd_ep_set_state(ep, DAT_EP_STATE_ACTIVE_CONNECTION_PENDING);
	ep->remote_addr = *dst;
	ep->remote_addr.sin_port = 0;
	ep->remote_qual = conn_qual;
	ret = zd_cm_connect(ep, dst, conn_qual, timeout, pdata, (size_t)pdata_len);
	if (ret != DAT_SUCCESS)
		zd_ep_set_state(ep, DAT_EP_STATE_UNCONNECTED);
	else
		atomic_fetch_add_explicit(&ep->cnt.connects, 1, memory_order_relaxed);
	return ret;
}

DAT_RETURN zd_ep_connect(DAT_EP_HANDLE ep_handle, DAT_IA_ADDRESS_PTR remote_addr,
			 DAT_CONN_QUAL conn_qual, DAT_TIMEOUT timeout, DAT_COUNT pdata_len,
			 const DAT_PVOID pdata, DAT_QOS qos, DAT_CONNECT_FLAGS flags)
{
	struct sockaddr_in dst;
	struct zd_ep *ep;
	DAT_RETURN ret;

	ZD_GET_OR_RETURN(ep, ep_handle, ZD_OBJ_EP);
	if (!remote_addr)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (remote_addr->sa_family != AF_INET)
		return DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED);
	ret = ep_connect_checks(ep, timeout, pdata_len, pdata, qos);
	if (ret != DAT_SUCCESS)
		return ret;
	if (flags & ~(DAT_CONNECT_MULTIPATH_REQUESTED_FLAG | DAT_CONNECT_MULTIPATH_REQUIRED_FLAG))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8);
	/* One path only: a request for multipath is served with one, a
	 * requirement cannot be. */
	if (flags & DAT_CONNECT_MULTIPATH_REQUIRED_FLAG)
		return DAT_ERROR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE);
	memcpy(&dst, remote_addr, sizeof(dst));

	zd_cm_lock();
	ret = ep_connect_locked(ep, &dst, conn_qual, timeout, pdata_len, pdata);
	zd_cm_unlock();
	return ret;
}

DAT_RETURN zd_ep_dup_connect(DAT_EP_HANDLE ep_handle, DAT_EP_HANDLE dup_handle,
			     DAT_TIMEOUT timeout, DAT_COUNT pdata_len, const DAT_PVOID pdata,
			     DAT_QOS qos)
{
	struct zd_ep *ep, *dup;
	DAT_EP_STATE s;
	DAT_RETURN ret;

	ZD_GET_OR_RETURN(ep, ep_handle, ZD_OBJ_EP);
	dup = zd_obj_get(dup_handle, ZD_OBJ_EP);
	if (!dup || dup->obj.ia != ep->obj.ia)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	ret = ep_connect_checks(ep, timeout, pdata_len, pdata, qos);
	if (ret != DAT_SUCCESS)
		return ret;

	zd_cm_lock();
	s = atomic_load(&dup->state);
	if (s != DAT_EP_STATE_CONNECTED) {
		ret = zd_ep_invalid_state(s);
	} else {
		struct sockaddr_in dst = dup->remote_addr;

		/* The same remote IA and service point that @dup connected to. */
		ret = ep_connect_locked(ep, &dst, dup->remote_qual, timeout, pdata_len, pdata);
	}
	zd_cm_unlock();
	return ret;
}

DAT_RETURN zd_ep_common_connect(DAT_EP_HANDLE ep_handle, DAT_IA_ADDRESS_PTR remote_addr,
				DAT_TIMEOUT timeout, DAT_COUNT pdata_len, const DAT_PVOID pdata)
{
	struct zd_ep *ep;

	(void)remote_addr;
	(void)timeout;
	(void)pdata_len;
	(void)pdata;
	ZD_GET_OR_RETURN(ep, ep_handle, ZD_OBJ_EP);
	(void)ep;
	/* Needs a CSP (common service point), which zdapl does not offer. */
	return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
}

DAT_RETURN zd_ep_disconnect(DAT_EP_HANDLE ep_handle, DAT_CLOSE_FLAGS flags)
{
	struct zd_cm_conn *c;
	struct zd_ep *ep;
	DAT_EP_STATE s;
	DAT_RETURN ret = DAT_SUCCESS;

	ZD_GET_OR_RETURN(ep, ep_handle, ZD_OBJ_EP);
	if (flags != DAT_CLOSE_ABRUPT_FLAG && flags != DAT_CLOSE_GRACEFUL_FLAG)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);

	zd_cm_lock();
	s = atomic_load(&ep->state);
	c = ep->cm_conn;
	switch (s) {
	case DAT_EP_STATE_CONNECTED:
		if (flags == DAT_CLOSE_GRACEFUL_FLAG && c) {
			/* DISCONNECTED comes with the peer's DISC_ACK (or EOF). */
			zd_ep_set_state(ep, DAT_EP_STATE_DISCONNECT_PENDING);
			zd_cm_conn_send(c, ZD_CM_MSG_DISC, 0, NULL, 0, NULL, 0);
			c->state = ZD_CONN_DISC_SENT;
			c->deadline = zd_cm_now() + ZD_CM_DISC_NS;
			zd_cm_kick();
			break;
		}
		/* Carried: the DISC is queued on the data stream before the
		 * flush ends it (the flush sends what is queued). */
		if (c && c->carried)
			zd_cm_conn_send(c, ZD_CM_MSG_DISC, 0, NULL, 0, NULL, 0);
		zd_cm_ep_conn_lost(ep, DAT_CONNECTION_EVENT_DISCONNECTED);
		if (c) {
			if (!c->carried)
				zd_cm_conn_send(c, ZD_CM_MSG_DISC, 0, NULL, 0, NULL, 0);
			zd_cm_conn_close_after_flush(c);
		}
		break;
	case DAT_EP_STATE_DISCONNECT_PENDING:
		if (flags == DAT_CLOSE_GRACEFUL_FLAG)
			break;  /* already on its way; abrupt cuts the wait short */
		__attribute__((fallthrough));
	case DAT_EP_STATE_ACTIVE_CONNECTION_PENDING:
	case DAT_EP_STATE_COMPLETION_PENDING:
		/* Abandons the connection; the peer sees the socket close. */
		zd_cm_ep_conn_lost(ep, DAT_CONNECTION_EVENT_DISCONNECTED);
		if (c)
			zd_cm_conn_close(c);
		break;
	case DAT_EP_STATE_DISCONNECTED:
		break;  /* nothing left to tear down */
	default:
		ret = zd_ep_invalid_state(s);
		break;
	}
	zd_cm_unlock();
	if (ret == DAT_SUCCESS)
		atomic_fetch_add_explicit(&ep->cnt.disconnects, 1, memory_order_relaxed);
	return ret;
}
