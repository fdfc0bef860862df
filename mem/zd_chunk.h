/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Chunks: large memfd-backed mappings that devices register once.
 *
 * A chunk is a MAP_SHARED mapping of a sealed memfd, so another process (the
 * shm device's peer) maps the very same pages from (fd, offset), and the mlx5
 * device registers it with one ibv_reg_mr.  The pool (zd_pool.h) carves its
 * jemalloc extents out of chunks; other users may create chunks directly.
 *
 * The registry answers "which chunk holds this address" lock-free (an
 * RCU-published sorted array; chunks are few).  Devices learn about chunks
 * through listeners, which see every chunk, past and future, before any of
 * its memory is handed out.
 *
 * Chunks are not inherited across fork() (MADV_DONTFORK): the child's copy of
 * the allocator would hand out the very pages the parent is using.  A child's
 * registry starts empty, without listeners (they are the parent's devices);
 * zd_chunk_was_inherited() tells the parent's chunk addresses.
 */
#ifndef ZD_CHUNK_H
#define ZD_CHUNK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Chunk flags. */
#define ZD_CHUNK_F_POOL (1u << 0) /* carved by zd_pool: jemalloc owns the contents */
/* zdapl's own queues (zd_pool_queue_alloc): never published to a peer */
#define ZD_CHUNK_F_QUEUE (1u << 1)

/*
 * A copy of one chunk's description, stable for the chunk's lifetime.
 * The fd belongs to the chunk: do not close it (dup it to keep it longer).
 */
struct zd_chunk_ref {
	void     *base;   /* mapping of memfd offset 0 */
	size_t    len;    /* bytes, a page multiple */
	int       fd;     /* the memfd, MFD_CLOEXEC, sealed against resizing */
	uint32_t  id;     /* unique in this process, never reused; names the chunk to peers */
	uint32_t  flags;  /* ZD_CHUNK_F_* */
	size_t    offset; /* zd_chunk_lookup(): offset of addr from base; else 0 */
};

/*
 * Create a chunk of len bytes (rounded up to the page size) whose base is
 * aligned to align (a power of two; below the page size means page size).
 * Every listener has accepted the chunk when this returns 0; if one refuses,
 * the others see ZD_CHUNK_DEL and its error is returned.
 * Returns 0 and fills *out, or a negative errno.
 */
int zd_chunk_create(size_t len, size_t align, uint32_t flags,
		    struct zd_chunk_ref *out);

/*
 * Unregister (listeners see ZD_CHUNK_DEL), unmap and close the chunk that
 * starts at base.  The caller guarantees nothing uses its memory any more.
 * Returns 0, -ENOENT if no chunk starts at base, -EBUSY for a pool chunk.
 */
int zd_chunk_destroy(void *base);

/*
 * Find the chunk holding all of [addr, addr + len) (len 0 counts as 1) and
 * copy its description, with offset = addr - base, to *out.  Lock-free; any
 * thread.  False if no single chunk holds the whole range.
 */
bool zd_chunk_lookup(const void *addr, size_t len, struct zd_chunk_ref *out);

/*
 * In a fork() child: whether addr lay in one of the parent's chunks (not
 * mapped here; its memory stays the parent's).  False in any other process.
 */
bool zd_chunk_was_inherited(const void *addr);

/* Number of chunks and their total length, for statistics. */
void zd_chunk_usage(size_t *nchunks, size_t *bytes);

enum zd_chunk_event {
	ZD_CHUNK_ADD, /* register the chunk; a non-zero return refuses it */
	ZD_CHUNK_DEL, /* unregister it; the return value is ignored */
};

/*
 * Called with the registry lock held, so calls to one listener are serialised
 * and a listener is never called after its removal returns.  A listener must
 * not create or destroy chunks, add or remove listeners, or allocate from the
 * pool; it may call zd_chunk_lookup().  Return 0 or a negative errno.
 */
typedef int (*zd_chunk_listener_t)(void *arg, enum zd_chunk_event ev,
				   const struct zd_chunk_ref *chunk);

/*
 * Add a listener and call it with ZD_CHUNK_ADD for every existing chunk, then
 * for every new one until it is removed.  If it refuses an existing chunk, it
 * sees ZD_CHUNK_DEL for the ones it accepted, is not added, and its error is
 * returned.  -EEXIST if (cb, arg) is already a listener.
 */
int zd_chunk_add_listener(zd_chunk_listener_t cb, void *arg);

/*
 * Remove a listener; it sees ZD_CHUNK_DEL for every existing chunk first (a
 * device closing drops its registrations here).  -ENOENT if not a listener.
 */
int zd_chunk_remove_listener(zd_chunk_listener_t cb, void *arg);

#endif /* ZD_CHUNK_H */
