/* The CNO's wake-up machinery and its DAT calls that need no IA (see
 * zd_cno.h); create, query and free are core/zd_cno_obj.c's. */
#include <time.h>

#include "evd/zd_cno.h"
#include "evd/zd_evd.h"
#include "evd/zd_evd_api.h"

void zd_cno_attach(struct zd_cno *cno, struct zd_evd *evd)
{
	pthread_mutex_lock(&cno->lock);
	evd->cno_next = cno->evds;
	cno->evds = evd;
	zd_obj_ref(cno);
	atomic_store_explicit(&evd->cno, cno, memory_order_release);
	pthread_mutex_unlock(&cno->lock);
}

void zd_cno_detach(struct zd_cno *cno, struct zd_evd *evd)
{
	pthread_mutex_lock(&cno->lock);
	for (struct zd_evd **pp = &cno->evds; *pp; pp = &(*pp)->cno_next) {
		if (*pp == evd) {
			*pp = evd->cno_next;
			evd->cno_next = NULL;
			zd_obj_unref(cno);
			break;
		}
	}
	atomic_store_explicit(&evd->cno, NULL, memory_order_release);
	struct zd_evd *expected = evd;
	atomic_compare_exchange_strong(&cno->triggered, &expected, NULL);
	pthread_mutex_unlock(&cno->lock);
}

void zd_cno_trigger_from(struct zd_cno *cno, struct zd_evd *evd)
{
	DAT_AGENT_FUNC fn;
	DAT_PVOID data;

	atomic_store_explicit(&cno->triggered, evd, memory_order_release);
	zd_waiter_notify(&cno->waiter);
	fn = cno->agent.proxy_agent_func;
	data = cno->agent.instance_data;
	if (fn)
		fn(data, evd);
}

void zd_cno_init(struct zd_cno *cno, DAT_OS_WAIT_PROXY_AGENT agent)
{
	zd_waiter_init(&cno->waiter, 0);
	pthread_mutex_init(&cno->lock, NULL);
	cno->agent = agent;
}

void zd_cno_fini(struct zd_cno *cno)
{
	zd_waiter_notify_all(&cno->waiter);
	pthread_mutex_destroy(&cno->lock);
	zd_waiter_fini(&cno->waiter);
}

DAT_RETURN zd_cno_trigger(DAT_CNO_HANDLE cno_handle, DAT_EVD_HANDLE *evd_handle)
{
	struct zd_cno *cno;

	ZD_GET_OR_RETURN(cno, cno_handle, ZD_OBJ_CNO);
	return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
}

DAT_RETURN zd_cno_modify_agent(DAT_CNO_HANDLE cno_handle, DAT_OS_WAIT_PROXY_AGENT agent)
{
	struct zd_cno *cno;

	ZD_GET_OR_RETURN(cno, cno_handle, ZD_OBJ_CNO);
	pthread_mutex_lock(&cno->lock);
	cno->agent = agent;
	pthread_mutex_unlock(&cno->lock);
	return DAT_SUCCESS;
}

/* An EVD of the CNO with an event ready, after one round of progress. */
static struct zd_evd *cno_ready_evd(struct zd_cno *cno)
{
	struct zd_evd *found = NULL;

	pthread_mutex_lock(&cno->lock);
	for (struct zd_evd *e = cno->evds; e && !found; e = e->cno_next) {
		if (!atomic_load(&e->enabled) || zd_evd_has_waiter(e, memory_order_seq_cst))
			continue;
		zd_evd_progress(e);
		if (zd_evd_ready(e))
			found = e;
	}
	pthread_mutex_unlock(&cno->lock);
	return found;
}

/* Asks each EVD's device CQ for a wake-up (zd_evd_wake, which triggers
 * this CNO) before the waiter sleeps. */
static void cno_arm(struct zd_cno *cno)
{
	pthread_mutex_lock(&cno->lock);
	for (struct zd_evd *e = cno->evds; e; e = e->cno_next)
		if (e->cq_poll && e->cq_arm && atomic_load(&e->enabled))
			e->cq_arm(e);
	pthread_mutex_unlock(&cno->lock);
}

DAT_RETURN zd_cno_wait(DAT_CNO_HANDLE cno_handle, DAT_TIMEOUT timeout,
		       DAT_EVD_HANDLE *evd_handle)
{
	struct zd_cno *cno;
	struct timespec ts;
	uint64_t deadline = 0;

	ZD_GET_OR_RETURN(cno, cno_handle, ZD_OBJ_CNO);
	if (!evd_handle)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (timeout != DAT_TIMEOUT_INFINITE)
		deadline = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u + timeout;
	for (;;) {
		struct zd_evd *evd = atomic_exchange(&cno->triggered, NULL);
		uint64_t now, left = ZD_WAIT_INFINITE;
		uint32_t ticket;

		if (!evd)
			evd = cno_ready_evd(cno);
		if (evd) {
			*evd_handle = evd;
			return DAT_SUCCESS;
		}
		if (atomic_load(&cno->obj.magic) != ZD_OBJ_MAGIC_LIVE(ZD_OBJ_CNO))
			return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_DEAD);
		ticket = zd_waiter_prepare(&cno->waiter);
		cno_arm(cno);
		if (atomic_load(&cno->triggered) || (evd = cno_ready_evd(cno)) != NULL) {
			zd_waiter_cancel(&cno->waiter);
			if (evd) {
				*evd_handle = evd;
				return DAT_SUCCESS;
			}
			continue;
		}
		if (deadline) {
			clock_gettime(CLOCK_MONOTONIC, &ts);
			now = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
			if (now >= deadline) {
				zd_waiter_cancel(&cno->waiter);
				*evd_handle = DAT_HANDLE_NULL;
				return DAT_ERROR(DAT_TIMEOUT_EXPIRED, DAT_NO_SUBTYPE);
			}
			left = deadline - now;
		}
		zd_waiter_wait(&cno->waiter, ticket, left);
	}
}
