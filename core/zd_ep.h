/* Endpoints: the DAT EP object and its state machine. */
#ifndef ZD_EP_H
#define ZD_EP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <netinet/in.h>

#include "core/zd_obj.h"
#include "core/zd_mem_objs.h"
#include "core/zd_cm_wire.h"
#include "core/zd_counters.h"

struct zd_evd;
struct zd_srq;

struct zd_ep {
	struct zd_obj obj;
	_Atomic DAT_EP_STATE state;
	/* The device's QP while the EP takes one-segment requests on a
	 * device's own DTO entries (zd_request_fast1), else NULL: connected,
	 * with a QP, request and RDMA IOV limits of one or more.  Kept by
	 * zd_ep_dto_refresh through every change of the state, the QP or the
	 * attributes, so that one load and test stand for the handle's
	 * liveness, the state, the QP and the limits. */
	void *_Atomic dto_qp;
	struct zd_pz *pz;
	struct zd_evd *recv_evd;
	struct zd_evd *request_evd;
	struct zd_evd *connect_evd;     /* may be another IA's: zd_ep_set_connect_evd */
	struct zd_ep *foreign_next, **foreign_pprev;  /* connect_evd->foreign_eps */
	struct zd_srq *srq;
	DAT_EP_ATTR attr;
	struct sockaddr_in remote_addr;
	DAT_CONN_QUAL local_qual;
	DAT_CONN_QUAL remote_qual;
	void *dev_priv;                 /* the device's QP */
	/* dat_ep_set_watermark: soft high watermark on the receive buffers
	 * allocated to the EP, DAT_WATERMARK_INFINITE when disarmed (it
	 * disarms itself when it fires: zd_ep_soft_hwm_check). */
	_Atomic DAT_COUNT soft_hwm;

	/* connection management, under zd_cm.lock (zd_cm.h) */
	struct zd_cm_conn *cm_conn;     /* the CM connection, while there is one;
					 * set with zd_ep_set_cm_conn */
	uint64_t cm_serial;             /* its serial (0: none), for zd_cm_dev_broken */
	DAT_COUNT cm_pdata_len;
	/* private data of the last connection event that carried some: the
	 * event points here, valid until the next such event on this EP */
	uint8_t cm_pdata[ZD_CM_PDATA_MAX];

	/* dat_ib_query_counters (zd_counters.h): lines of their own, written
	 * by the posting thread. */
	struct zd_ep_counters cnt;
};
ZD_OBJ_FITS(EP, struct zd_ep);

void zd_ep_destroy(struct zd_obj *o);

/* Recomputes dto_qp (zd_ep.c); after every change of ep->state,
 * ep->dev_priv or ep->attr. */
void zd_ep_dto_refresh(struct zd_ep *ep);

/* The EP's state becomes @s. */
static inline void zd_ep_set_state(struct zd_ep *ep, DAT_EP_STATE s)
{
	atomic_store(&ep->state, s);
	zd_ep_dto_refresh(ep);
}

/* ep->cm_conn changes under zd_cm.lock; zd_cm_dev_broken (a device's
 * progress thread) reads it without the lock, relaxed: the CM thread acts
 * on that hint only if, under its lock, the conn is still live and still
 * the EP's.  So the writes are relaxed atomic stores too. */
/* The process-unique serial of @c (zd_cm.c). */
uint64_t zd_cm_conn_serial(const struct zd_cm_conn *c);

static inline void zd_ep_set_cm_conn(struct zd_ep *ep, struct zd_cm_conn *c)
{
	__atomic_store_n(&ep->cm_serial, c ? zd_cm_conn_serial(c) : 0, __ATOMIC_RELAXED);
	__atomic_store_n(&ep->cm_conn, c, __ATOMIC_RELAXED);
}

/* An unreliable-datagram EP (dat_ib_extensions.h's DAT_IB_SERVICE_TYPE_UD,
 * the first extension service type). */
static inline bool zd_ep_is_ud(const struct zd_ep *ep)
{
	return (int)ep->attr.service_type == (int)DAT_SERVICE_TYPE_EXTENSION_BASE;
}

/* DAT_INVALID_STATE with the subtype naming @state (DAT_INVALID_STATE_EP_*). */
DAT_RETURN zd_ep_invalid_state(DAT_EP_STATE state);

/* dat_ep_create and dat_ep_create_with_srq (@srq may be NULL). */
/* Makes @evd (NULL: none) the connection EVD of @ep, moving the
 * references; with zd_cm.lock held.  An EVD of another IA (connection
 * events need no device) lists @ep, so that IA's abrupt close detaches it
 * (zd_ep_detach_foreign): the EP then has no connection EVD. */
void zd_ep_set_connect_evd(struct zd_ep *ep, struct zd_evd *evd);
void zd_ep_detach_foreign(struct zd_evd *evd);

DAT_RETURN zd_ep_create_internal(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv_evd,
				 DAT_EVD_HANDLE request_evd, DAT_EVD_HANDLE connect_evd,
				 struct zd_srq *srq, const DAT_EP_ATTR *attr,
				 DAT_EP_HANDLE *ep_handle);

/* The soft high watermark of @ep is armed: the device should count. */
static inline bool zd_ep_hwm_armed(struct zd_ep *ep)
{
	return atomic_load_explicit(&ep->soft_hwm, memory_order_relaxed) != DAT_WATERMARK_INFINITE;
}

/* A device saw @count receive buffers allocated to @ep (posted on its RQ,
 * or taken from its SRQ, and not completed): above the armed soft high
 * watermark, posts its async event once (any thread, no locks). */
void zd_ep_soft_hwm_check(struct zd_ep *ep, DAT_COUNT count);

/* Adds @delta to the solicited-wait count of @ep's recv EVD when its recv
 * completion flags ask for DAT_COMPLETION_SOLICITED_WAIT_FLAG. */
void zd_ep_solicited_account(struct zd_ep *ep, int delta);

/* Checks consumer attributes against what the device holds. */
DAT_RETURN zd_ep_check_attr(const struct zd_ia *ia, const DAT_EP_ATTR *a);

#endif
