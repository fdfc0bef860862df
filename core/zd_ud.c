/*
 * Unreliable datagrams (DAT_IB_SERVICE_TYPE_UD): the address handles and CM
 * handles the UD connection events hand out, posting to an address handle,
 * and freeing both.
 *
 * What the consumer holds is DAT_IB_ADDR_HANDLE, copied by value: its `ah`
 * pointer is ours to choose and never dereferenced by anyone but us, so it
 * is a token, not a pointer: (generation << 32) | (index + 1) into this
 * IA's token table.  Every UD connection event gets a token of its own (the
 * event's context, the "CM handle", is the same token): dat_ib_ud_ah_free
 * of one copy never invalidates another event's, which consumers keep
 * (dtestx keeps the first and frees the duplicates).  A token dies when
 * both its address handle and its CM handle are freed (or its EP is), and
 * a dead or foreign token is refused (DAT_INVALID_PARAMETER), never
 * followed.  Tokens name device address handles, one per remote UD QP per
 * IA (the cache), which live until the IA closes: a send racing a free in
 * another thread reads either a live token or a refusal, never a released
 * device handle.
 *
 * Threads: issuing and freeing run on the control path under ud->lock;
 * the post's lookup is lock-free (an acquire load of the token's chunk, its
 * generation read before and after its fields, as a seqlock reader).
 */
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "core/zd_api.h"
#include "core/zd_dto_entry.h"
#include "core/zd_ep.h"
#include "core/zd_ext.h"
#include "core/zd_ia.h"
#include "core/zd_obj.h"
#include "core/zd_ud.h"

#define ZD_UD_CHUNK_SHIFT 10
#define ZD_UD_CHUNK       (1u << ZD_UD_CHUNK_SHIFT)
#define ZD_UD_CHUNKS      1024u                     /* 1M live tokens per IA */

/* A device address handle: one per remote UD QP (blob) per IA. */
struct zd_ud_dev_ah {
	uint32_t qpn;
	uint16_t blob_len;
	alignas(8) uint8_t dev[ZD_UD_AH_BYTES];
	uint8_t blob[];
};

struct zd_ud_token {
	/* Even; equals the generation of the token handed out for it. */
	_Atomic uint32_t gen;
	_Atomic uint8_t ah_live;             /* dat_ib_ud_ah_free not called yet */
	uint8_t cm_live;                     /* dat_ib_ud_cm_free not called yet */
	struct zd_ep *ep;                    /* whose event it came with */
	_Atomic(struct zd_ud_dev_ah *) dev_ah;
	/* The event's private data (its connect_event_data points here):
	 * the token's own, since an EP may have many events queued; kept
	 * (ZD_CM_PDATA_MAX bytes) until the IA closes, so an event still
	 * queued when its EP or token is freed never points at freed memory. */
	void *pdata;
};

struct zd_ud {
	pthread_mutex_t lock;
	_Atomic(struct zd_ud_token *) chunks[ZD_UD_CHUNKS];
	uint32_t ntokens;                    /* indices handed out so far */
	uint32_t *free_idx;                  /* dead tokens to reuse */
	uint32_t nfree, free_cap;
	struct zd_ud_dev_ah **cache;         /* device handles (linear: connects are rare) */
	uint32_t ncache, cache_cap;
};

static struct zd_ud_token *token_at(struct zd_ud *ud, uint32_t idx)
{
	struct zd_ud_token *c;

	if (idx >= ZD_UD_CHUNKS * ZD_UD_CHUNK)
		return NULL;
	/* acquire: pairs with the release publishing a new chunk. */
	c = atomic_load_explicit(&ud->chunks[idx >> ZD_UD_CHUNK_SHIFT], memory_order_acquire);
	return c ? &c[idx & (ZD_UD_CHUNK - 1)] : NULL;
}

static uint64_t token_value(uint32_t idx, uint32_t gen)
{
	return (uint64_t)gen << 32 | (idx + 1u);
}

/* Lock-free: the device handle a live token of @ia names, or NULL. */
static const struct zd_ud_dev_ah *token_lookup(struct zd_ia *ia, uint64_t token)
{
	struct zd_ud *ud = atomic_load_explicit(&ia->ud, memory_order_acquire);
	uint32_t gen = (uint32_t)(token >> 32);
	struct zd_ud_token *t;
	struct zd_ud_dev_ah *d;

	if (!ud || (uint32_t)token == 0 || !(t = token_at(ud, (uint32_t)token - 1)))
		return NULL;
	if (atomic_load_explicit(&t->gen, memory_order_acquire) != gen)
		return NULL;
	d = atomic_load_explicit(&t->dev_ah, memory_order_relaxed);
	if (!atomic_load_explicit(&t->ah_live, memory_order_relaxed))
		return NULL;
	/* The fields were read while gen held: re-check it after them. */
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&t->gen, memory_order_relaxed) != gen)
		return NULL;
	return d;
}

static struct zd_ud *ud_get(struct zd_ia *ia)
{
	struct zd_ud *ud = atomic_load_explicit(&ia->ud, memory_order_acquire);

	if (ud)
		return ud;
	pthread_mutex_lock(&ia->lock);
	ud = atomic_load_explicit(&ia->ud, memory_order_relaxed);
	if (!ud && (ud = calloc(1, sizeof(*ud))) != NULL) {
		pthread_mutex_init(&ud->lock, NULL);
		atomic_store_explicit(&ia->ud, ud, memory_order_release);
	}
	pthread_mutex_unlock(&ia->lock);
	return ud;
}

/* The device handle for @blob, made on first use (ud->lock held). */
static struct zd_ud_dev_ah *dev_ah_get(struct zd_ia *ia, struct zd_ud *ud, const void *blob,
				       size_t len)
{
	struct zd_ud_dev_ah *d;

	for (uint32_t i = 0; i < ud->ncache; i++) {
		d = ud->cache[i];
		if (d->blob_len == len && memcmp(d->blob, blob, len) == 0)
			return d;
	}
	if (ud->ncache == ud->cache_cap) {
		uint32_t cap = ud->cache_cap ? 2 * ud->cache_cap : 16;
		struct zd_ud_dev_ah **c = realloc(ud->cache, cap * sizeof(*c));

		if (!c)
			return NULL;
		ud->cache = c;
		ud->cache_cap = cap;
	}
	d = calloc(1, sizeof(*d) + len);
	if (!d)
		return NULL;
	d->blob_len = (uint16_t)len;
	memcpy(d->blob, blob, len);
	if (ia->dev->ud_ah_create(ia, blob, len, d->dev, &d->qpn) != DAT_SUCCESS) {
		free(d);
		return NULL;
	}
	ud->cache[ud->ncache++] = d;
	return d;
}

/* A fresh token index, its chunk allocated (ud->lock held); -1: none. */
static int64_t token_alloc(struct zd_ud *ud)
{
	uint32_t idx;

	if (ud->nfree)
		return ud->free_idx[--ud->nfree];
	idx = ud->ntokens;
	if (idx >= ZD_UD_CHUNKS * ZD_UD_CHUNK)
		return -1;
	if (!(idx & (ZD_UD_CHUNK - 1))) {
		struct zd_ud_token *c = calloc(ZD_UD_CHUNK, sizeof(*c));

		if (!c)
			return -1;
		/* Generations start at an IA-specific even value, so a token
		 * of another IA rarely names a live one here. */
		for (uint32_t i = 0; i < ZD_UD_CHUNK; i++)
			atomic_init(&c[i].gen, (uint32_t)((uintptr_t)ud >> 4) & ~1u);
		atomic_store_explicit(&ud->chunks[idx >> ZD_UD_CHUNK_SHIFT], c,
				      memory_order_release);
	}
	ud->ntokens++;
	return idx;
}

/* Ends a token whose handles are both freed: a new generation, reusable. */
static void token_retire(struct zd_ud *ud, uint32_t idx, struct zd_ud_token *t)
{
	atomic_store_explicit(&t->ah_live, 0, memory_order_relaxed);
	t->cm_live = 0;
	t->ep = NULL;
	/* release: a reader holding the old generation fails its re-check. */
	atomic_store_explicit(&t->gen, atomic_load_explicit(&t->gen, memory_order_relaxed) + 2,
			      memory_order_release);
	if (ud->nfree == ud->free_cap) {
		uint32_t cap = ud->free_cap ? 2 * ud->free_cap : 64;
		uint32_t *f = realloc(ud->free_idx, cap * sizeof(*f));

		if (!f)
			return;  /* the index stays retired: a small leak, no harm */
		ud->free_idx = f;
		ud->free_cap = cap;
	}
	ud->free_idx[ud->nfree++] = idx;
}

DAT_RETURN zd_ud_issue(struct zd_ep *ep, const void *blob, size_t len,
		       const struct sockaddr_in *peer_ia, const void *pdata, size_t pdata_len,
		       DAT_IB_ADDR_HANDLE *ah, uint64_t *cm, const void **pdata_copy)
{
	struct zd_ia *ia = ep->obj.ia;
	struct zd_ud *ud = ud_get(ia);
	struct zd_ud_dev_ah *d;
	struct zd_ud_token *t = NULL;
	int64_t idx;
	uint32_t gen;

	if (!ud || pdata_len > ZD_CM_PDATA_MAX)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	pthread_mutex_lock(&ud->lock);
	d = dev_ah_get(ia, ud, blob, len);
	idx = d ? token_alloc(ud) : -1;
	if (idx >= 0) {
		t = token_at(ud, (uint32_t)idx);
		if (!t->pdata && !(t->pdata = malloc(ZD_CM_PDATA_MAX))) {
			token_retire(ud, (uint32_t)idx, t);
			idx = -1;
		}
	}
	if (idx < 0) {
		pthread_mutex_unlock(&ud->lock);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	t->ep = ep;
	if (pdata_len)
		memcpy(t->pdata, pdata, pdata_len);
	*pdata_copy = t->pdata;
	t->cm_live = 1;
	atomic_store_explicit(&t->dev_ah, d, memory_order_relaxed);
	atomic_store_explicit(&t->ah_live, 1, memory_order_relaxed);
	gen = atomic_load_explicit(&t->gen, memory_order_relaxed);
	pthread_mutex_unlock(&ud->lock);

	memset(ah, 0, sizeof(*ah));
	ah->ah = (struct ibv_ah *)(uintptr_t)token_value((uint32_t)idx, gen);
	ah->qpn = d->qpn;
	memcpy(&ah->ia_addr, peer_ia, sizeof(*peer_ia));
	*cm = token_value((uint32_t)idx, gen);
	return DAT_SUCCESS;
}

/* The token @value of @ep's IA, live and issued for an EP of that IA
 * (ud->lock held); NULL otherwise. */
static struct zd_ud_token *token_of(struct zd_ud *ud, uint64_t value, uint32_t *idx)
{
	struct zd_ud_token *t;

	if ((uint32_t)value == 0 || !(t = token_at(ud, (uint32_t)value - 1)) ||
	    atomic_load_explicit(&t->gen, memory_order_relaxed) != (uint32_t)(value >> 32) ||
	    !t->ep)
		return NULL;
	*idx = (uint32_t)value - 1;
	return t;
}

/* The UD EP behind @h, or NULL. */
static struct zd_ep *ud_ep(DAT_HANDLE h)
{
	struct zd_ep *ep = zd_obj_get(h, ZD_OBJ_EP);

	return ep && zd_ep_is_ud(ep) ? ep : NULL;
}

/* Frees one of a token's two handles (@ah_side: the address handle). */
static DAT_RETURN handle_free(DAT_HANDLE h, uint64_t value, bool ah_side)
{
	struct zd_ep *ep = ud_ep(h);
	struct zd_ud *ud;
	struct zd_ud_token *t;
	DAT_RETURN ret = DAT_SUCCESS;
	uint32_t idx;

	if (!ep)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	ud = atomic_load_explicit(&ep->obj.ia->ud, memory_order_acquire);
	if (!ud)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	pthread_mutex_lock(&ud->lock);
	t = token_of(ud, value, &idx);
	if (!t || (ah_side ? !atomic_load_explicit(&t->ah_live, memory_order_relaxed)
			   : (!t->cm_live || t->ep != ep))) {
		ret = DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	} else {
		if (ah_side)
			atomic_store_explicit(&t->ah_live, 0, memory_order_relaxed);
		else
			t->cm_live = 0;
		if (!t->cm_live && !atomic_load_explicit(&t->ah_live, memory_order_relaxed))
			token_retire(ud, idx, t);
	}
	pthread_mutex_unlock(&ud->lock);
	return ret;
}

DAT_RETURN zd_ud_ah_free(DAT_HANDLE h, DAT_IB_ADDR_HANDLE *ah)
{
	if (!ud_ep(h))
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	if (!ah)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	return handle_free(h, (uint64_t)(uintptr_t)ah->ah, true);
}

DAT_RETURN zd_ud_cm_free(DAT_HANDLE h, uint64_t cm)
{
	return handle_free(h, cm, false);
}

void zd_ud_ep_release(struct zd_ep *ep)
{
	struct zd_ud *ud = atomic_load_explicit(&ep->obj.ia->ud, memory_order_acquire);

	if (!ud)
		return;
	pthread_mutex_lock(&ud->lock);
	for (uint32_t i = 0; i < ud->ntokens; i++) {
		struct zd_ud_token *t = token_at(ud, i);

		if (t->ep == ep)
			token_retire(ud, i, t);
	}
	pthread_mutex_unlock(&ud->lock);
}

void zd_ud_ia_fini(struct zd_ia *ia)
{
	struct zd_ud *ud = atomic_load_explicit(&ia->ud, memory_order_relaxed);

	if (!ud)
		return;
	for (uint32_t i = 0; i < ud->ncache; i++) {
		ia->dev->ud_ah_destroy(ia, ud->cache[i]->dev);
		free(ud->cache[i]);
	}
	for (uint32_t i = 0; i < ud->ntokens; i++)
		free(token_at(ud, i)->pdata);
	for (uint32_t c = 0; c < ZD_UD_CHUNKS; c++)
		free(atomic_load_explicit(&ud->chunks[c], memory_order_relaxed));
	free(ud->cache);
	free(ud->free_idx);
	pthread_mutex_destroy(&ud->lock);
	free(ud);
	atomic_store_explicit(&ia->ud, NULL, memory_order_relaxed);
}

/* dat_ib_post_send_ud(ep, n, iov, ah, cookie, flags). */
DAT_RETURN zd_ep_post_send_ud(DAT_EP_HANDLE h, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			      const DAT_IB_ADDR_HANDLE *ah, DAT_DTO_COOKIE cookie,
			      DAT_COMPLETION_FLAGS flags)
{
	struct zd_ep *ep = zd_obj_get(h, ZD_OBJ_EP);
	const struct zd_ud_dev_ah *d;
	struct zd_ia *ia;
	uint64_t len = 0;
	DAT_RETURN ret;

	if (!ep || !zd_ep_is_ud(ep))
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	ia = ep->obj.ia;
	if (!ep->dev_priv || !ia->dev->post_send_ud)
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONFIGURED);
	if (n < 0)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (n > ep->attr.max_request_iov)
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	if (n > 0 && !iov)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (!ah)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (flags & ~(DAT_COMPLETION_FLAGS)ZD_REQUEST_FLAGS)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
	for (DAT_COUNT i = 0; i < n; i++)
		len += iov[i].segment_length;
	if (len > ia->limits.max_ud_payload)
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	d = token_lookup(ia, (uint64_t)(uintptr_t)ah->ah);
	if (!d)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	ret = ia->dev->post_send_ud(ep, n, iov, d->dev, cookie, flags);
	if (ret == DAT_SUCCESS)
		zd_count_ep_post_bytes(&ep->cnt, ZD_POST_SEND_UD, len);
	return ret;
}
