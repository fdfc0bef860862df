/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The library's rings in queue memory (mem/zd_qmem.h): registered pool
 * memory, private memory when the pool cannot give it.  For
 * zd_ring_create_in; each kind is accounted apart.
 */
#ifndef ZD_RING_MEM_H
#define ZD_RING_MEM_H

#include "evd/zd_ring.h"

/* An EVD's event ring. */
extern const struct zd_ring_mem_ops zd_ring_mem_evd;
/* A software device's local completion ring (hw/soft/zd_soft_cq.h). */
extern const struct zd_ring_mem_ops zd_ring_mem_cq;

#endif /* ZD_RING_MEM_H */
