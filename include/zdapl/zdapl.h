/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * zdapl public extension API.
 *
 * Everything a DAT consumer may call beyond the standard DAT 2.0 API
 * (<dat2/udat.h>).  Only what is declared here is exported from libzdapl;
 * the library is built with hidden visibility.
 */
#ifndef ZDAPL_H
#define ZDAPL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks a declaration as part of libzdapl's exported ABI. */
#if defined(__GNUC__) || defined(__clang__)
#define ZDAPL_EXPORT __attribute__((visibility("default")))
#else
#define ZDAPL_EXPORT
#endif

/*
 * Registered memory pool
 * ----------------------
 * Memory from these calls lives in large shared-memory chunks that zdapl
 * registers with every device as soon as the device is opened (and that every
 * open device has registered already when the allocation returns).  Use it for
 * buffers that peers reach one-sidedly (RDMA write/read targets, send/recv
 * buffers): on the shm device a peer maps the same pages, so its RDMA writes
 * land without this process calling into the library, and
 * dat_lmr_create() over it registers nothing new.
 *
 * - Thread-safe; callable from any thread, before or after dat_ia_open().
 * - Contents of fresh memory are unspecified (treat as uninitialised).
 * - Release only with zdapl_mem_free(), never free(); memory that backs a live
 *   LMR must stay allocated until the LMR is freed.
 * - The pool never returns memory to the system while the process runs.
 * - Not inherited across fork(): the child has no mapping of pool memory.
 * - Not a hot-path allocator: allocate buffers up front, not per message.
 */

/*
 * Allocate size bytes of registered memory.  The result is aligned to at
 * least 64 bytes (a cache line: no two allocations share one) and to the page
 * size when size is at least one page.  size 0 yields a unique minimal
 * allocation.  Returns NULL with errno = ENOMEM on failure.
 */
ZDAPL_EXPORT void *zdapl_mem_alloc(size_t size);

/*
 * Like zdapl_mem_alloc() with an explicit alignment: a power of two; values
 * below 64 are raised to 64.  Returns NULL with errno = EINVAL for a bad
 * alignment, ENOMEM when out of memory.
 */
ZDAPL_EXPORT void *zdapl_mem_alloc_aligned(size_t size, size_t align);

/*
 * Release memory from zdapl_mem_alloc*().  NULL is a no-op.  A pointer that
 * does not come from the pool is left alone and reported with one line on
 * stderr (not a crash); a pointer into the pool that is not the start of a live
 * allocation is undefined behaviour, as with free().
 */
ZDAPL_EXPORT void zdapl_mem_free(void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* ZDAPL_H */
