/* SPDX-License-Identifier: BSD-3-Clause */
/* zd_ring control path: sizing, init, create/destroy, resize helper. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "zd_ring.h"

#define ZD_RING_F_OWNED 0x1u    /* memory from zd_ring_create(_in): release it */

static bool zd_ring_valid_capacity(uint32_t capacity)
{
	return capacity >= ZD_RING_MIN_CAPACITY &&
	       capacity <= ZD_RING_MAX_CAPACITY &&
	       (capacity & (capacity - 1)) == 0;
}

size_t zd_ring_memsize(uint32_t capacity)
{
	size_t sz;

	if (!zd_ring_valid_capacity(capacity))
		return 0;
	sz = sizeof(struct zd_ring) +
	     (size_t)capacity * (sizeof(struct zd_ring_slot) + ZD_RING_EXT_BYTES);
	/* Whole line pairs (slots are single lines): the last slot shares no
	 * prefetch pair with whatever follows, and aligned_alloc gets a
	 * multiple of its alignment. */
	return (sz + ZD_CACHE_GUARD - 1) & ~(size_t)(ZD_CACHE_GUARD - 1);
}

int zd_ring_init(struct zd_ring *r, uint32_t capacity)
{
	if (!zd_ring_valid_capacity(capacity) ||
	    ((uintptr_t)r & (ZD_CACHE_GUARD - 1)) != 0)
		return -EINVAL;

	r->mask = capacity - 1;
	r->capacity = capacity;
	r->flags = 0;
	r->mem = NULL;
	/* seq 0 matches no position's "published" value (pos + 1). Plain
	 * initialisation: the ring reaches other threads through whatever
	 * hands them its pointer. */
	for (uint32_t i = 0; i < capacity; i++)
		atomic_init(&r->slots[i].seq, 0);
	atomic_init(&r->tail, 0);
	atomic_init(&r->head_cache, 0);
	atomic_init(&r->head, 0);
	/* The peek copy's event_extension_data stays zero until an
	 * extension event is peeked.  The extension lines are not touched:
	 * only a producer of an extension event writes one, and only its
	 * consumer reads it. */
	memset(&r->peeked, 0, sizeof(r->peeked));
	return 0;
}

struct zd_ring *zd_ring_create_in(uint32_t min_capacity, const struct zd_ring_mem_ops *mem)
{
	uint32_t cap = ZD_RING_MIN_CAPACITY;
	struct zd_ring *r;
	size_t size;

	if (min_capacity == 0 || min_capacity > ZD_RING_MAX_CAPACITY) {
		errno = EINVAL;
		return NULL;
	}
	while (cap < min_capacity)
		cap <<= 1;

	/* memsize is a multiple of ZD_CACHE_GUARD, as aligned_alloc
	 * requires. */
	size = zd_ring_memsize(cap);
	r = mem ? mem->alloc(size, ZD_CACHE_GUARD) : aligned_alloc(ZD_CACHE_GUARD, size);
	if (r == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	/* Cannot fail: capacity and alignment are valid by construction. */
	(void)zd_ring_init(r, cap);
	r->flags |= ZD_RING_F_OWNED;
	r->mem = mem;
	return r;
}

struct zd_ring *zd_ring_create(uint32_t min_capacity)
{
	return zd_ring_create_in(min_capacity, NULL);
}

void zd_ring_destroy(struct zd_ring *r)
{
	if (r == NULL || !(r->flags & ZD_RING_F_OWNED))
		return;
	if (r->mem)
		r->mem->free(r, zd_ring_memsize(r->capacity));
	else
		free(r);
}

int zd_ring_move(struct zd_ring *dst, struct zd_ring *src)
{
	/* Quiesced: tail and head are stable, so tail - head is exact. */
	uint64_t n = atomic_load_explicit(&src->tail, memory_order_acquire) -
		     atomic_load_explicit(&src->head, memory_order_relaxed);
	uint64_t used = atomic_load_explicit(&dst->tail, memory_order_acquire) -
			atomic_load_explicit(&dst->head, memory_order_relaxed);
	DAT_EVENT ev;

	if (zd_ring_ready(src, src->capacity) != n)
		return -EBUSY;
	if (n > dst->capacity - used)
		return -ENOSPC;

	for (uint64_t i = 0; i < n; i++) {
		/* Both cannot fail: n events are published in src and dst
		 * has room for them. */
		bool ok = zd_ring_dequeue(src, &ev);
		ok = ok && zd_ring_enqueue(dst, &ev);
		if (!ok)
			return -EBUSY;  /* someone broke the quiescence contract */
	}
	return (int)n;
}
