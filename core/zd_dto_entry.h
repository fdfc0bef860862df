/*
 * The DAT entry points of the hottest posts -- dat_ep_post_send and
 * dat_ep_post_rdma_write/read -- as inline templates that take the
 * device's data-path function as an argument (dat_evd_dequeue's:
 * evd/zd_evd_entry.h).
 *
 * Core instantiates them with the indirect call through the device ops
 * (core/zd_dto.c, evd/zd_evd.c: any device).  A device whose data path can
 * be inlined instantiates them again with its own function, a constant,
 * and lists the result in its ops (zd_device_ops.dat_entries); dat.conf
 * lines served by that device then carry those entries in their
 * DAT_PROVIDER (core/zd_provider.c), so libdat2 calls them directly: one
 * function from the handle check to the doorbell, no indirect call, no
 * second look at the EP.  The checks, the fallbacks and the errors are the
 * same code either way: a call the fast test does not pass goes to core's
 * checked path, which returns the error the spec names.  A post the
 * device took is counted on either path, here (zd_counters.h: two plain
 * adds to the EP's own counter line).  A device may also write its own
 * entry around zd_request_fast1 (one segment, default flags: the EP's
 * dto_qp says the rest), as the mlx5 device does for its one-block posts.
 */
#ifndef ZD_DTO_ENTRY_H
#define ZD_DTO_ENTRY_H

#include <stdbool.h>
#include <dat2/udat.h>

#include "core/zd_compiler.h"
#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "core/zd_obj.h"

#define ZD_REQUEST_FLAGS                                                     \
	(DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_SOLICITED_WAIT_FLAG |  \
	 DAT_COMPLETION_UNSIGNALLED_FLAG | DAT_COMPLETION_BARRIER_FENCE_FLAG | \
	 DAT_COMPLETION_EVD_THRESHOLD_FLAG)

#define ZD_EP_CONNECTED_MASK                                                  \
	((1u << DAT_EP_STATE_CONNECTED) | (1u << DAT_EP_STATE_CONNECTED_SINGLE_PATH) | \
	 (1u << DAT_EP_STATE_CONNECTED_MULTI_PATH))
_Static_assert(DAT_EP_STATE_CONNECTED_MULTI_PATH < 32, "EP states fit a 32-bit mask");

/* One bit test instead of three compares. */
static ZD_ALWAYS_INLINE bool zd_ep_connected(DAT_EP_STATE s)
{
	return (unsigned)s < 32 && ((ZD_EP_CONNECTED_MASK >> (unsigned)s) & 1u);
}

/* An RDMA IOV limit left 0 (stock clients memset the attributes and set
 * only max_request_iov) falls back to the request limit, as on verbs where
 * RDMA WRs share the send queue's SGE limit. */
static ZD_ALWAYS_INLINE DAT_COUNT zd_rdma_iov_max(const struct zd_ep *ep, DAT_COUNT rdma_max)
{
	return rdma_max ? rdma_max : ep->attr.max_request_iov;
}

/*
 * The hot path of a request post: every check of the handle, the EP
 * state, the segment count and the flags folded into one test that holds
 * for a correct call with 1..max segments.  Anything else (an error, or no
 * segment at all) takes the checked path, which runs the checks one by
 * one and returns the error the spec names.
 */
static ZD_ALWAYS_INLINE bool zd_request_fast_ok(const struct zd_ep *ep, DAT_COUNT n,
						const DAT_LMR_TRIPLET *iov, DAT_COUNT max,
						DAT_COMPLETION_FLAGS flags)
{
	DAT_EP_STATE s = atomic_load_explicit(&ep->state, memory_order_relaxed);

	return ep->dev_priv != NULL && zd_ep_connected(s) && (uint32_t)n - 1u < (uint32_t)max &&
	       iov != NULL && !(flags & ~(DAT_COMPLETION_FLAGS)ZD_REQUEST_FLAGS);
}

/*
 * The latency shape a device's own entry takes in line, or NULL: the QP of
 * @ep -- a slot of the EP zone (zd_obj_slot) -- when the call has one
 * segment and the default completion flags, and the EP is alive,
 * connected, with its QP and IOV limits of one or more (all of which its
 * dto_qp says at once).  ((n - 1) | flags) == 0 is one test of the first
 * two.  Anything else goes to the checked path, which names the error.
 */
static ZD_ALWAYS_INLINE bool zd_request_shape1(DAT_COUNT n, DAT_COMPLETION_FLAGS flags)
{
	return !(((uint32_t)n - 1u) | (uint32_t)flags);
}

/* ... the same, the shape known: the QP, for a segment array. */
static ZD_ALWAYS_INLINE void *zd_request_qp1(struct zd_ep *ep, const DAT_LMR_TRIPLET *iov)
{
	if (ZD_UNLIKELY(iov == NULL))
		return NULL;
	/* acquire: pairs with zd_ep_dto_refresh's release (x86: a plain
	 * load). */
	return atomic_load_explicit(&ep->dto_qp, memory_order_acquire);
}

static ZD_ALWAYS_INLINE void *zd_request_fast1(struct zd_ep *ep, DAT_COUNT n,
					       const DAT_LMR_TRIPLET *iov,
					       DAT_COMPLETION_FLAGS flags)
{
	return ZD_LIKELY(zd_request_shape1(n, flags)) ? zd_request_qp1(ep, iov) : NULL;
}

/* The checked paths (core/zd_dto.c): every check, then the device's op. */
DAT_RETURN zd_ep_post_send_checked(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				   DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags);
DAT_RETURN zd_ep_post_rdma_checked(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				   DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				   DAT_COMPLETION_FLAGS flags, bool write);

typedef DAT_RETURN zd_post_send_fn(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				   DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags);
typedef DAT_RETURN zd_post_rdma_fn(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				   DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				   DAT_COMPLETION_FLAGS flags);

/* A device's instance (@post given) passes one segment -- the case its
 * inlined post is for, whatever the completion flags -- and sends several
 * through the checked path to the same device op: stated here, the
 * compiler drops the device's own test of it. */
static ZD_ALWAYS_INLINE bool zd_request_fast_shape(bool device, DAT_COUNT n)
{
	return !device || n == 1;
}

/* dat_ep_post_send; @post: the device's post_send, or NULL for the call
 * through the EP's device ops. */
static ZD_ALWAYS_INLINE DAT_RETURN zd_ep_post_send_entry(DAT_EP_HANDLE h, DAT_COUNT n,
							 DAT_LMR_TRIPLET *iov,
							 DAT_DTO_COOKIE cookie,
							 DAT_COMPLETION_FLAGS flags,
							 zd_post_send_fn *post)
{
	struct zd_ep *ep = zd_obj_get(h, ZD_OBJ_EP);

	if (ZD_LIKELY(ep != NULL) && ZD_LIKELY(zd_request_fast_shape(post != NULL, n)) &&
	    ZD_LIKELY(zd_request_fast_ok(ep, n, iov, ep->attr.max_request_iov, flags))) {
		DAT_RETURN ret = post ? post(ep, n, iov, cookie, flags)
				      : ep->obj.ia->dev->post_send(ep, n, iov, cookie, flags);

		if (ZD_LIKELY(ret == DAT_SUCCESS))
			zd_count_ep_post(&ep->cnt, ZD_POST_SEND, n, iov);
		return ret;
	}
	return zd_ep_post_send_checked(h, n, iov, cookie, flags);
}

/* The fast test of an RDMA post (@ep from zd_obj_get, maybe NULL), for a
 * device's instance (@device: one segment) or core's. */
static ZD_ALWAYS_INLINE bool zd_rdma_fast_ok(const struct zd_ep *ep, bool device, DAT_COUNT n,
					     const DAT_LMR_TRIPLET *iov,
					     const DAT_RMR_TRIPLET *remote,
					     DAT_COMPLETION_FLAGS flags, bool write)
{
	return ZD_LIKELY(ep != NULL) && ZD_LIKELY(zd_request_fast_shape(device, n)) &&
	       ZD_LIKELY(zd_request_fast_ok(ep, n, iov,
					    zd_rdma_iov_max(ep, write ? ep->attr.max_rdma_write_iov
								      : ep->attr.max_rdma_read_iov),
					    flags) &&
			 remote != NULL);
}

/* dat_ep_post_rdma_write (@write) or _read; @post as above. */
static ZD_ALWAYS_INLINE DAT_RETURN zd_ep_post_rdma_entry(DAT_EP_HANDLE h, DAT_COUNT n,
							 DAT_LMR_TRIPLET *iov,
							 DAT_DTO_COOKIE cookie,
							 const DAT_RMR_TRIPLET *remote,
							 DAT_COMPLETION_FLAGS flags, bool write,
							 zd_post_rdma_fn *post)
{
	struct zd_ep *ep = zd_obj_get(h, ZD_OBJ_EP);

	if (zd_rdma_fast_ok(ep, post != NULL, n, iov, remote, flags, write)) {
		DAT_RETURN ret;

		if (post)
			ret = post(ep, n, iov, cookie, remote, flags);
		else if (write)
			ret = ep->obj.ia->dev->post_rdma_write(ep, n, iov, cookie, remote, flags);
		else
			ret = ep->obj.ia->dev->post_rdma_read(ep, n, iov, cookie, remote, flags);
		if (ZD_LIKELY(ret == DAT_SUCCESS))
			zd_count_ep_post(&ep->cnt, write ? ZD_POST_WRITE : ZD_POST_READ,
					 n, iov);
		return ret;
	}
	return zd_ep_post_rdma_checked(h, n, iov, cookie, remote, flags, write);
}

#endif /* ZD_DTO_ENTRY_H */
