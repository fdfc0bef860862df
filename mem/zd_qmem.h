/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Queue memory: the memory of zdapl's own queues (EVD rings, the software
 * devices' completion rings, the mlx5 QP, CQ and SRQ buffers and doorbell
 * records), taken from the registered pool (zd_pool.h).
 *
 * Why the pool: its chunks are registered with every device, so a device
 * (the mlx5 NIC, or the software NIC's engine in a peer process, which maps
 * the pool's chunks) can write a queue in place; they are 2 MiB aligned, so
 * shmem huge pages back them where the host enables them
 * (transparent_hugepage/shmem_enabled always or within_size); and queue
 * lines do not share pages with the application's heap.  EVD rings and the
 * software devices' local completion rings, which nothing outside this
 * process writes, come from the pool's queue arena instead
 * (zd_pool_queue_alloc): chunks no device publishes, so a peer that maps
 * the application's registered memory never reaches the events (and the
 * pointers in them) this process will act on.
 *
 * When the pool cannot give the memory (memfd or mmap refused, descriptors
 * or address space exhausted, pool init failed), zd_qmem_alloc falls back to
 * private memory (aligned_alloc) and counts it; ZDAPL_MEM_REPORT=1 says so
 * once on stderr when it first happens and sums both at exit.
 *
 * A fork() child's queues come from a pool of its own (zd_pool.h); the
 * parent's queues it frees (pool chunks are MADV_DONTFORK) are left alone.
 *
 * Fresh pool memory is untouched memfd pages, so what a queue never writes
 * stays unbacked (an EVD ring's extension lines, zd_ring.h); memory the pool
 * recycles keeps whatever pages earlier users touched (the pool never
 * purges), and a huge page backs 2 MiB at the first touch.
 *
 * Control path only (locks inside the pool's slow path); any thread.
 */
#ifndef ZD_QMEM_H
#define ZD_QMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a queue buffer is, for the accounts (memory per EVD, per QP). */
enum zd_qmem_kind {
	ZD_QMEM_EVD_RING,   /* an EVD's event ring */
	ZD_QMEM_CQ_RING,    /* a software device's local completion ring */
	ZD_QMEM_MLX5_QP,    /* mlx5 SQ + RQ buffer */
	ZD_QMEM_MLX5_CQ,    /* mlx5 CQE buffer */
	ZD_QMEM_MLX5_SRQ,   /* mlx5 SRQ buffer */
	ZD_QMEM_MLX5_DBR,   /* mlx5 doorbell records */
	ZD_QMEM_KINDS
};

/*
 * size bytes aligned to align (a power of two; below 64 means 64) from the
 * pool only; NULL when the pool cannot (the caller has its own fallback,
 * as a device allocator hook does).
 */
void *zd_qmem_pool_alloc(size_t size, size_t align, enum zd_qmem_kind kind);

/* From the pool, else private memory; NULL only when both fail. */
void *zd_qmem_alloc(size_t size, size_t align, enum zd_qmem_kind kind);

/* Releases memory of either call (NULL: no-op); kind as allocated, size as
 * asked for private memory (pool memory knows its own: any size will do). */
void zd_qmem_free(void *p, size_t size, enum zd_qmem_kind kind);

/* Whether all of [p, p + len) lies in one registered pool chunk. */
bool zd_qmem_in_pool(const void *p, size_t len);

struct zd_qmem_stats {
	/* live now, per kind: buffers and their bytes (pool: what the pool
	 * holds for them, its size class; private: what was asked) */
	uint64_t pool_live[ZD_QMEM_KINDS], pool_bytes[ZD_QMEM_KINDS];
	uint64_t private_live[ZD_QMEM_KINDS], private_bytes[ZD_QMEM_KINDS];
	uint64_t fallbacks;   /* zd_qmem_alloc calls that took private memory */
	uint64_t pool_total, private_total;   /* buffers ever allocated */
	uint64_t pool_peak, private_peak;     /* most bytes live at once */
};

void zd_qmem_get_stats(struct zd_qmem_stats *st);

/* Name of a kind ("EVD ring", ...). */
const char *zd_qmem_kind_name(enum zd_qmem_kind kind);

#endif /* ZD_QMEM_H */
