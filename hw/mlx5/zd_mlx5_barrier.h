/*
 * Barriers between the CPU and an mlx5 device (DMA memory and the UAR/
 * BlueFlame MMIO page).  rdma-core keeps its udma_barrier.h private, so
 * zdapl names the same five orderings itself, for x86-64 and arm64:
 *
 *  zd_udma_to_device_barrier()   stores to DMA memory (WQEs, doorbell
 *                                records) are visible to the device before
 *                                later stores (the doorbell record, MMIO).
 *  zd_udma_from_device_barrier() loads of DMA memory after a load that saw
 *                                the device's "valid" mark (CQE owner bit)
 *                                return data at least as new as the mark.
 *  zd_udma_ci_barrier()          loads of a CQE are done before the store
 *                                that hands its slot back (consumer index).
 *  zd_mmio_wc_start()            earlier stores (doorbell record) reach the
 *                                device before write-combining MMIO stores
 *                                that follow (the BlueFlame copy).
 *  zd_mmio_flush_writes()        write-combining buffers are flushed now,
 *                                as one burst, and not merged with later
 *                                WC stores.
 *
 * x86-64 is TSO for write-back memory, so the DMA barriers are compiler
 * barriers (lfence for reads, to keep loads after the owner bit from being
 * satisfied early); WC stores are weakly ordered, hence sfence.  arm64
 * needs real barriers to the outer-shareable domain (devices).
 */
#ifndef ZD_MLX5_BARRIER_H
#define ZD_MLX5_BARRIER_H

#if defined(__x86_64__)
#define zd_udma_to_device_barrier()   __asm__ volatile("" ::: "memory")
#define zd_udma_from_device_barrier() __asm__ volatile("lfence" ::: "memory")
#define zd_udma_ci_barrier()          __asm__ volatile("" ::: "memory")
#define zd_mmio_flush_writes()        __asm__ volatile("sfence" ::: "memory")
#define zd_mmio_wc_start()            zd_mmio_flush_writes()
#elif defined(__aarch64__)
#define zd_udma_to_device_barrier()   __asm__ volatile("dmb oshst" ::: "memory")
#define zd_udma_from_device_barrier() __asm__ volatile("dmb oshld" ::: "memory")
/* loads before a store: only a full barrier orders that on arm64 */
#define zd_udma_ci_barrier()          __asm__ volatile("dmb osh" ::: "memory")
#define zd_mmio_flush_writes()        __asm__ volatile("dsb st" ::: "memory")
#define zd_mmio_wc_start()            zd_mmio_flush_writes()
#else
#error "zd_mlx5_barrier.h: barriers defined for x86-64 and arm64 only"
#endif

#include "evd/zd_ring_arch.h"   /* ZD_TSAN */

/*
 * A word both the CPU and the device access (a doorbell record, a CQE's
 * owner byte, the BlueFlame page, the UAR doorbell): one access of its
 * width, never torn, merged or kept in a register, ordered by the barriers
 * above.  The software NIC (hw/mlx5/sim) is a thread of this process, and
 * ThreadSanitizer does not see barriers: in its builds the marking store is
 * a release and the observing load an acquire, so TSan relates the WQE or
 * CQE written before the mark to the reads after it (the pairs the barriers
 * make for a device).  On x86-64 both compile to the same plain moves.
 */
#ifdef ZD_TSAN
#define zd_dev_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define zd_dev_load(p)     __atomic_load_n((p), __ATOMIC_ACQUIRE)
#else
#define zd_dev_store(p, v) ((void)(*(volatile __typeof__(*(p)) *)(p) = (v)))
#define zd_dev_load(p)     (*(volatile __typeof__(*(p)) *)(p))
#endif

#endif /* ZD_MLX5_BARRIER_H */
