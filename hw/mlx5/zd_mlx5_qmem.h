/*
 * Queue memory of the mlx5 device: the allocator hook every backend takes
 * its QP, CQ and SRQ buffers and doorbell records from.
 *
 * It has the shape of struct ibv_parent_domain_init_attr's alloc and free,
 * so the verbs backend hands it to ibv_alloc_parent_domain and rdma-core's
 * mlx5 provider calls it for every queue of an object made on that parent
 * domain (MLX5DV_RES_TYPE_QP, _CQ, _SRQ, _DBR); the software model calls it
 * the same way at its create commands, so the path tested without a NIC is
 * the one a ConnectX runs.  The memory comes from the registered pool
 * (mem/zd_qmem.h): huge-page backed where the pool is, reachable by the
 * software model's peers.  When the pool cannot give it, or for a resource
 * type it does not know, the hook answers IBV_ALLOCATOR_USE_DEFAULT and the
 * caller allocates as it would without the hook.
 *
 * @pd and @pd_context are ignored (the pool is process-wide); control path.
 */
#ifndef ZD_MLX5_QMEM_H
#define ZD_MLX5_QMEM_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

void *zd_mlx5_qmem_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
			 uint64_t resource_type);
void zd_mlx5_qmem_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type);

#endif /* ZD_MLX5_QMEM_H */
