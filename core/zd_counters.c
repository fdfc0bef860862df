/*
 * dat_ib_query_counters, dat_ib_print_counters and dat_ib_start/stop_counters
 * (dat_ib_extensions.h) on IA, EP and EVD handles, with OFED dapl's
 * selection: the *_ALL_COUNTERS index of the handle's type fills
 * out[0..ALL-1], any other index only out[index]; a reset zeroes what was
 * read.  What is counted where, and how cheaply, is zd_counters.h's;
 * README "IB extension counters" lists what is counted at all (the rest
 * reads 0).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

#include "core/zd_api.h"
#include "core/zd_counters.h"
#include "core/zd_ep.h"
#include "core/zd_ext.h"
#include "core/zd_ia.h"
#include "core/zd_obj.h"
#include "evd/zd_evd.h"
#include "mem/zd_pool.h"

#define NAME(x) [x] = #x

static const char *const ia_names[DCNT_IA_ALL_COUNTERS] = {
	NAME(DCNT_IA_PZ_CREATE), NAME(DCNT_IA_PZ_FREE),
	NAME(DCNT_IA_LMR_CREATE), NAME(DCNT_IA_LMR_FREE),
	NAME(DCNT_IA_RMR_CREATE), NAME(DCNT_IA_RMR_FREE),
	NAME(DCNT_IA_PSP_CREATE), NAME(DCNT_IA_PSP_CREATE_ANY), NAME(DCNT_IA_PSP_FREE),
	NAME(DCNT_IA_RSP_CREATE), NAME(DCNT_IA_RSP_FREE),
	NAME(DCNT_IA_EVD_CREATE), NAME(DCNT_IA_EVD_FREE),
	NAME(DCNT_IA_EP_CREATE), NAME(DCNT_IA_EP_FREE),
	NAME(DCNT_IA_SRQ_CREATE), NAME(DCNT_IA_SRQ_FREE),
	NAME(DCNT_IA_SP_CR), NAME(DCNT_IA_SP_CR_ACCEPTED), NAME(DCNT_IA_SP_CR_REJECTED),
	NAME(DCNT_IA_MEM_ALLOC), NAME(DCNT_IA_MEM_ALLOC_DATA), NAME(DCNT_IA_MEM_FREE),
	NAME(DCNT_IA_ASYNC_ERROR), NAME(DCNT_IA_ASYNC_QP_ERROR), NAME(DCNT_IA_ASYNC_CQ_ERROR),
	NAME(DCNT_IA_CM_LISTEN),
	NAME(DCNT_IA_CM_REQ_TX), NAME(DCNT_IA_CM_REQ_RX),
	NAME(DCNT_IA_CM_REP_TX), NAME(DCNT_IA_CM_REP_RX),
	NAME(DCNT_IA_CM_RTU_TX), NAME(DCNT_IA_CM_RTU_RX),
	NAME(DCNT_IA_CM_USER_REJ_TX), NAME(DCNT_IA_CM_USER_REJ_RX),
	NAME(DCNT_IA_CM_ACTIVE_EST), NAME(DCNT_IA_CM_PASSIVE_EST),
	NAME(DCNT_IA_CM_AH_REQ_TX), NAME(DCNT_IA_CM_AH_REQ_RX), NAME(DCNT_IA_CM_AH_RESOLVED),
	NAME(DCNT_IA_CM_DREQ_TX), NAME(DCNT_IA_CM_DREQ_RX),
	NAME(DCNT_IA_CM_DREP_TX), NAME(DCNT_IA_CM_DREP_RX),
	NAME(DCNT_IA_CM_MRA_TX), NAME(DCNT_IA_CM_MRA_RX),
	NAME(DCNT_IA_CM_REQ_FULLQ_POLL),
	NAME(DCNT_IA_CM_ERR),
	NAME(DCNT_IA_CM_ERR_REQ_FULLQ), NAME(DCNT_IA_CM_ERR_REQ_DUP), NAME(DCNT_IA_CM_ERR_REQ_RETRY),
	NAME(DCNT_IA_CM_ERR_REP_DUP), NAME(DCNT_IA_CM_ERR_REP_RETRY),
	NAME(DCNT_IA_CM_ERR_RTU_DUP), NAME(DCNT_IA_CM_ERR_RTU_RETRY),
	NAME(DCNT_IA_CM_ERR_REFUSED), NAME(DCNT_IA_CM_ERR_RESET), NAME(DCNT_IA_CM_ERR_TIMEOUT),
	NAME(DCNT_IA_CM_ERR_REJ_TX), NAME(DCNT_IA_CM_ERR_REJ_RX),
	NAME(DCNT_IA_CM_ERR_DREQ_DUP), NAME(DCNT_IA_CM_ERR_DREQ_RETRY),
	NAME(DCNT_IA_CM_ERR_DREP_DUP), NAME(DCNT_IA_CM_ERR_DREP_RETRY),
	NAME(DCNT_IA_CM_ERR_MRA_DUP), NAME(DCNT_IA_CM_ERR_MRA_RETRY),
	NAME(DCNT_IA_CM_ERR_UNEXPECTED),
	NAME(DCNT_IA_LNK_ERR_RCV), NAME(DCNT_IA_LNK_ERR_RCV_REM_PHYS),
	NAME(DCNT_IA_LNK_ERR_RCV_CONSTRAINT), NAME(DCNT_IA_LNK_ERR_XMT_DISCARDS),
	NAME(DCNT_IA_LNK_ERR_XMT_CONTRAINT), NAME(DCNT_IA_LNK_ERR_INTEGRITY),
	NAME(DCNT_IA_LNK_ERR_EXC_BUF_OVERRUN), NAME(DCNT_IA_LNK_WARN_RCV_SW_RELAY),
	NAME(DCNT_IA_LNK_WARN_XMT_WAIT),
	NAME(DCNT_IA_DIAG_ERR_RQ_RAE), NAME(DCNT_IA_DIAG_ERR_RQ_OOS),
	NAME(DCNT_IA_DIAG_ERR_RQ_RIRE), NAME(DCNT_IA_DIAG_ERR_RQ_UDSDPRD),
	NAME(DCNT_IA_DIAG_ERR_SQ_RAE), NAME(DCNT_IA_DIAG_ERR_SQ_OOS),
	NAME(DCNT_IA_DIAG_ERR_SQ_RIRE), NAME(DCNT_IA_DIAG_ERR_SQ_RREE),
	NAME(DCNT_IA_DIAG_ERR_SQ_TREE),
};

static const char *const ep_names[DCNT_EP_ALL_COUNTERS] = {
	NAME(DCNT_EP_CONNECT), NAME(DCNT_EP_DISCONNECT),
	NAME(DCNT_EP_POST_SEND), NAME(DCNT_EP_POST_SEND_DATA),
	NAME(DCNT_EP_POST_SEND_UD), NAME(DCNT_EP_POST_SEND_UD_DATA),
	NAME(DCNT_EP_POST_RECV), NAME(DCNT_EP_POST_RECV_DATA),
	NAME(DCNT_EP_POST_WRITE), NAME(DCNT_EP_POST_WRITE_DATA),
	NAME(DCNT_EP_POST_WRITE_IMM), NAME(DCNT_EP_POST_WRITE_IMM_DATA),
	NAME(DCNT_EP_POST_READ), NAME(DCNT_EP_POST_READ_DATA),
	NAME(DCNT_EP_POST_CMP_SWAP), NAME(DCNT_EP_POST_FETCH_ADD),
	NAME(DCNT_EP_RECV), NAME(DCNT_EP_RECV_DATA),
	NAME(DCNT_EP_RECV_UD), NAME(DCNT_EP_RECV_UD_DATA),
	NAME(DCNT_EP_RECV_IMM), NAME(DCNT_EP_RECV_IMM_DATA),
	NAME(DCNT_EP_RECV_RDMA_IMM), NAME(DCNT_EP_RECV_RDMA_IMM_DATA),
};

static const char *const evd_names[DCNT_EVD_ALL_COUNTERS] = {
	NAME(DCNT_EVD_WAIT), NAME(DCNT_EVD_WAIT_BLOCKED), NAME(DCNT_EVD_WAIT_NOTIFY),
	NAME(DCNT_EVD_DEQUEUE), NAME(DCNT_EVD_DEQUEUE_FOUND), NAME(DCNT_EVD_DEQUEUE_NOT_FOUND),
	NAME(DCNT_EVD_DEQUEUE_POLL), NAME(DCNT_EVD_DEQUEUE_POLL_FOUND),
	NAME(DCNT_EVD_CONN_CALLBACK), NAME(DCNT_EVD_DTO_CALLBACK),
};

/* ---- counting (control path) ---- */

void zd_counters_child(struct zd_ia *ia, enum zd_obj_type type, bool created)
{
	DAT_IA_COUNTERS idx;

	switch (type) {
	case ZD_OBJ_PZ:  idx = created ? DCNT_IA_PZ_CREATE : DCNT_IA_PZ_FREE; break;
	case ZD_OBJ_LMR: idx = created ? DCNT_IA_LMR_CREATE : DCNT_IA_LMR_FREE; break;
	case ZD_OBJ_RMR: idx = created ? DCNT_IA_RMR_CREATE : DCNT_IA_RMR_FREE; break;
	case ZD_OBJ_RSP: idx = created ? DCNT_IA_RSP_CREATE : DCNT_IA_RSP_FREE; break;
	case ZD_OBJ_EVD: idx = created ? DCNT_IA_EVD_CREATE : DCNT_IA_EVD_FREE; break;
	case ZD_OBJ_EP:  idx = created ? DCNT_IA_EP_CREATE : DCNT_IA_EP_FREE; break;
	case ZD_OBJ_SRQ: idx = created ? DCNT_IA_SRQ_CREATE : DCNT_IA_SRQ_FREE; break;
	/* Created: zd_psp.c, which knows dat_psp_create from _create_any. */
	case ZD_OBJ_PSP:
		if (created)
			return;
		idx = DCNT_IA_PSP_FREE;
		break;
	/* A connection request that reached a service point. */
	case ZD_OBJ_CR:
		if (!created)
			return;
		idx = DCNT_IA_SP_CR;
		break;
	default:
		return;
	}
	zd_count_ia(&ia->cnt, idx);
}

/* As OFED dapl's three async callbacks: about an EP (its QP), about an EVD
 * (its CQ), and the rest. */
void zd_counters_async(struct zd_ia *ia, DAT_EVENT_NUMBER type)
{
	switch (type) {
	case DAT_ASYNC_ERROR_EP_BROKEN:
	case DAT_ASYNC_ERROR_TIMED_OUT:
		zd_count_ia(&ia->cnt, DCNT_IA_ASYNC_QP_ERROR);
		break;
	case DAT_ASYNC_ERROR_EVD_OVERFLOW:
		zd_count_ia(&ia->cnt, DCNT_IA_ASYNC_CQ_ERROR);
		break;
	default:
		zd_count_ia(&ia->cnt, DCNT_IA_ASYNC_ERROR);
		break;
	}
}

/* The pool is the process's: an IA counts its calls from its open on. */
void zd_counters_ia_open(struct zd_ia *ia)
{
	struct zd_pool_stats st;

	zd_pool_get_stats(&st);
	ia->cnt.base[DCNT_IA_MEM_ALLOC] = st.allocs;
	ia->cnt.base[DCNT_IA_MEM_ALLOC_DATA] = st.alloc_bytes;
	ia->cnt.base[DCNT_IA_MEM_FREE] = st.frees;
}

/* ---- reading ---- */

/* The counters of one handle: how many, their names, each raw count, and
 * the bases. */
struct group {
	int all;                        /* the *_ALL_COUNTERS index */
	const char *const *names;
	uint64_t (*raw)(void *obj, int idx, const struct zd_pool_stats *pool);
	uint64_t *base;
	void *obj;
};

static uint64_t ia_raw(void *obj, int idx, const struct zd_pool_stats *pool)
{
	struct zd_ia *ia = obj;

	switch (idx) {
	case DCNT_IA_MEM_ALLOC:      return pool->allocs;
	case DCNT_IA_MEM_ALLOC_DATA: return pool->alloc_bytes;
	case DCNT_IA_MEM_FREE:       return pool->frees;
	default: return atomic_load_explicit(&ia->cnt.raw[idx], memory_order_relaxed);
	}
}

/* A word the owner counts with plain adds (zd_counters.h). */
static uint64_t load_plain(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static uint64_t ep_raw(void *obj, int idx, const struct zd_pool_stats *pool)
{
	/* Where each DCNT_EP_POST_* and _DATA counter is kept. */
	static const struct {
		enum zd_ep_post_kind kind;
		bool bytes;
	} post[DCNT_EP_ALL_COUNTERS] = {
		[DCNT_EP_POST_SEND] = { ZD_POST_SEND, false },
		[DCNT_EP_POST_SEND_DATA] = { ZD_POST_SEND, true },
		[DCNT_EP_POST_SEND_UD] = { ZD_POST_SEND_UD, false },
		[DCNT_EP_POST_SEND_UD_DATA] = { ZD_POST_SEND_UD, true },
		[DCNT_EP_POST_RECV] = { ZD_POST_RECV, false },
		[DCNT_EP_POST_RECV_DATA] = { ZD_POST_RECV, true },
		[DCNT_EP_POST_WRITE] = { ZD_POST_WRITE, false },
		[DCNT_EP_POST_WRITE_DATA] = { ZD_POST_WRITE, true },
		[DCNT_EP_POST_WRITE_IMM] = { ZD_POST_WRITE_IMM, false },
		[DCNT_EP_POST_WRITE_IMM_DATA] = { ZD_POST_WRITE_IMM, true },
		[DCNT_EP_POST_READ] = { ZD_POST_READ, false },
		[DCNT_EP_POST_READ_DATA] = { ZD_POST_READ, true },
		[DCNT_EP_POST_CMP_SWAP] = { ZD_POST_CMP_SWAP, false },
		[DCNT_EP_POST_FETCH_ADD] = { ZD_POST_FETCH_ADD, false },
	};
	struct zd_ep *ep = obj;

	(void)pool;
	if (idx == DCNT_EP_CONNECT)
		return atomic_load_explicit(&ep->cnt.connects, memory_order_relaxed);
	if (idx == DCNT_EP_DISCONNECT)
		return atomic_load_explicit(&ep->cnt.disconnects, memory_order_relaxed);
	if (idx >= DCNT_EP_POST_SEND && idx <= DCNT_EP_POST_FETCH_ADD)
		return load_plain(post[idx].bytes ? &ep->cnt.post_bytes[post[idx].kind]
						  : &ep->cnt.posts[post[idx].kind]);
	return 0;  /* DCNT_EP_RECV_*: not counted (README) */
}

static uint64_t evd_raw(void *obj, int idx, const struct zd_pool_stats *pool)
{
	struct zd_evd *evd = obj;
	uint64_t found = load_plain(&evd->tally[ZD_EVD_DQ_FOUND]);
	uint64_t poll = load_plain(&evd->tally[ZD_EVD_DQ_POLL]);
	uint64_t empty = load_plain(&evd->tally[ZD_EVD_DQ_EMPTY]);

	(void)pool;
	switch (idx) {
	case DCNT_EVD_WAIT:              return load_plain(&evd->tally[ZD_EVD_WAITS]);
	case DCNT_EVD_WAIT_BLOCKED:      return load_plain(&evd->tally[ZD_EVD_WAITS_BLOCKED]);
	case DCNT_EVD_WAIT_NOTIFY:       return load_plain(&evd->tally[ZD_EVD_WAITS_ARMED]);
	case DCNT_EVD_DEQUEUE:
		return found + poll + empty + load_plain(&evd->tally[ZD_EVD_DQ_REFUSED]);
	case DCNT_EVD_DEQUEUE_FOUND:     return found;
	case DCNT_EVD_DEQUEUE_NOT_FOUND: return empty;
	case DCNT_EVD_DEQUEUE_POLL:      return poll;
	case DCNT_EVD_CONN_CALLBACK:
		return atomic_load_explicit(&evd->conn_events, memory_order_relaxed);
	default:  /* DEQUEUE_POLL_FOUND, DTO_CALLBACK: not counted (README) */
		return 0;
	}
}

/* The counters of @h, or the DAT error for a handle that has none. */
static DAT_RETURN group_of(DAT_HANDLE h, struct group *g)
{
	struct zd_ia *ia;
	struct zd_ep *ep;
	struct zd_evd *evd;

	if ((ia = zd_obj_get(h, ZD_OBJ_IA)) != NULL)
		*g = (struct group){ DCNT_IA_ALL_COUNTERS, ia_names, ia_raw, ia->cnt.base, ia };
	else if ((ep = zd_obj_get(h, ZD_OBJ_EP)) != NULL)
		*g = (struct group){ DCNT_EP_ALL_COUNTERS, ep_names, ep_raw, ep->cnt.base, ep };
	else if ((evd = zd_obj_get(h, ZD_OBJ_EVD)) != NULL)
		*g = (struct group){ DCNT_EVD_ALL_COUNTERS, evd_names, evd_raw, evd->cnt_base, evd };
	else
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1);
	return DAT_SUCCESS;
}

/* Resets move bases: one at a time, so two resets never lose each
 * other's reads. */
static pthread_mutex_t reset_lock = PTHREAD_MUTEX_INITIALIZER;

/* Reads counter @cntr of @g (its ALL index: every one) into out[i] and/or
 * prints it, then resets what it read if @reset. */
static void read_counters(const struct group *g, int cntr, uint64_t *out, bool print, int reset)
{
	struct zd_pool_stats pool = { 0 };

	if (g->raw == ia_raw)
		zd_pool_get_stats(&pool);
	pthread_mutex_lock(&reset_lock);
	for (int i = 0; i < g->all; i++) {
		uint64_t raw, val;

		if (cntr != g->all && cntr != i)
			continue;
		raw = g->raw(g->obj, i, &pool);
		val = raw - g->base[i];
		if (out)
			out[i] = val;
		if (print)
			printf("%s = %" PRIu64 "\n", g->names[i], val);
		if (reset)
			g->base[i] = raw;
	}
	pthread_mutex_unlock(&reset_lock);
}

DAT_RETURN zd_counters_query(DAT_HANDLE h, int cntr, uint64_t *out, int reset)
{
	struct group g;
	DAT_RETURN ret = group_of(h, &g);

	if (ret != DAT_SUCCESS)
		return ret;
	if (cntr < 0 || cntr > g.all)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (!out)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	read_counters(&g, cntr, out, false, reset);
	return DAT_SUCCESS;
}

DAT_RETURN zd_counters_print(DAT_HANDLE h, int cntr, int reset)
{
	struct group g;
	DAT_RETURN ret = group_of(h, &g);

	if (ret != DAT_SUCCESS)
		return ret;
	if (cntr < 0 || cntr > g.all)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	read_counters(&g, cntr, NULL, true, reset);
	return DAT_SUCCESS;
}

/*
 * dat_ib_start_counters / dat_ib_stop_counters(ia, type): OFED dapl samples
 * a group into the IA's counters between start and stop.  Here the CM
 * group (DCNT_IA_CM_*) is counted all the time by the connection manager
 * (zd_cm.c), so starting or stopping it changes nothing and succeeds;
 * there is no link (LNK) or diagnostics (DIAG) counter source on any
 * device, so those are DAT_NOT_IMPLEMENTED rather than a sample of
 * nothing.
 */
DAT_RETURN zd_counters_sample(DAT_HANDLE h, bool start, int type)
{
	(void)start;
	if (!zd_obj_get(h, ZD_OBJ_IA))
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	switch (type) {
	case DCNT_IA_CM:
		return DAT_SUCCESS;
	case DCNT_IA_LNK:
	case DCNT_IA_DIAG:
		return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
	default:
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	}
}
