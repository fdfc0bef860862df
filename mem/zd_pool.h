/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The registered pool: a private jemalloc arena whose extents are carved from
 * chunks (zd_chunk.h), so every allocation lies inside memory that each open
 * device has registered.  Backs zdapl_mem_alloc() and any internal buffer a
 * peer must reach one-sidedly.
 *
 * Policy towards jemalloc (why, in zd_pool.c):
 *  - carve: first fit over the pool's chunks, bump pointer per chunk; a new
 *    default-size chunk when none fits; requests larger than the default size
 *    get a chunk of their own;
 *  - never give memory back: dalloc, decommit and purge hooks are absent
 *    (jemalloc keeps such extents as retained and reuses them) and decay is
 *    off, so registered pages stay mapped and registered;
 *  - split anywhere; merge only inside one chunk (chunks are distinct memfds);
 *  - jemalloc metadata stays outside the chunks, out of reach of peers.
 * Pool pointers must only be released with zd_pool_free(), never free().
 *
 * Environment: ZDAPL_MEM_CHUNK_SIZE=<bytes>[k|m|g] sets the default chunk
 * size (default 64m, minimum 2m, rounded up to 2m).
 */
#ifndef ZD_POOL_H
#define ZD_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zd_chunk.h"

/* Smallest alignment of pool memory: a cache line. */
#define ZD_POOL_MIN_ALIGN 64

/*
 * Set up the pool (idempotent, thread-safe; the alloc calls do it lazily).
 * Chunks appear on first allocation.  Returns 0 or a negative errno.
 */
int zd_pool_init(void);

/*
 * size bytes aligned to align (a power of two, raised to ZD_POOL_MIN_ALIGN),
 * or NULL.  size 0 counts as 1.
 */
void *zd_pool_alloc(size_t size, size_t align);

/* Release p (NULL is a no-op).  p must come from zd_pool_alloc(). */
void zd_pool_free(void *p);

/*
 * The same for zdapl's own queues (zd_qmem.h): another arena whose chunks
 * are flagged ZD_CHUNK_F_QUEUE, which no device publishes to a peer, so a
 * peer that maps the application's registered pool never reaches them.
 * NULL when that arena could not be made.  Released with
 * zd_pool_queue_free() only.
 */
void *zd_pool_queue_alloc(size_t size, size_t align);
void zd_pool_queue_free(void *p);

/*
 * In a fork() child: whether p was the parent's pool memory (its chunks are
 * not mapped here).  Such memory is never freed: the parent keeps it.  The
 * child's own pool starts at its first use (new arenas, new chunks).
 */
bool zd_pool_inherited(const void *p);

/* Usable size of pool allocation p (at least the size asked for). */
size_t zd_pool_usable_size(const void *p);

/*
 * Whether [addr, addr + len) is pool memory (inside one pool chunk); if so,
 * describe that chunk in *out (fd, offset of addr, base, len, id).
 */
bool zd_pool_lookup(const void *addr, size_t len, struct zd_chunk_ref *out);

struct zd_pool_stats {
	size_t chunk_size; /* default chunk size */
	size_t nchunks;    /* pool chunks created */
	size_t mapped;     /* bytes in pool chunks */
	size_t carved;     /* bytes handed to jemalloc (incl. alignment gaps) */
	/* the consumer's calls (dat_ib_query_counters DCNT_IA_MEM_*) */
	uint64_t allocs;      /* zdapl_mem_alloc* that returned memory */
	uint64_t alloc_bytes; /* the sizes they asked for */
	uint64_t frees;       /* zdapl_mem_free of pool memory */
};

/* Counters; all zero before the first allocation. */
void zd_pool_get_stats(struct zd_pool_stats *st);

#endif /* ZD_POOL_H */
