/* SPDX-License-Identifier: BSD-3-Clause */
/* Ring memory ops over queue memory (zd_ring_mem.h). */
#include "evd/zd_ring_mem.h"
#include "mem/zd_qmem.h"

static void *evd_alloc(size_t size, size_t align)
{
	return zd_qmem_alloc(size, align, ZD_QMEM_EVD_RING);
}

static void evd_free(void *p, size_t size)
{
	zd_qmem_free(p, size, ZD_QMEM_EVD_RING);
}

static void *cq_alloc(size_t size, size_t align)
{
	return zd_qmem_alloc(size, align, ZD_QMEM_CQ_RING);
}

static void cq_free(void *p, size_t size)
{
	zd_qmem_free(p, size, ZD_QMEM_CQ_RING);
}

const struct zd_ring_mem_ops zd_ring_mem_evd = { .alloc = evd_alloc, .free = evd_free };
const struct zd_ring_mem_ops zd_ring_mem_cq = { .alloc = cq_alloc, .free = cq_free };
