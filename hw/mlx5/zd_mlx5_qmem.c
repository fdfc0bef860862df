/* The mlx5 queue-memory hook over the registered pool (zd_mlx5_qmem.h). */
#include <infiniband/mlx5dv.h>

#include "hw/mlx5/zd_mlx5_qmem.h"
#include "mem/zd_qmem.h"

/* The account a resource type is kept in; false for types not ours. */
static bool kind_of(uint64_t resource_type, enum zd_qmem_kind *kind)
{
	switch (resource_type) {
	case MLX5DV_RES_TYPE_QP:
		*kind = ZD_QMEM_MLX5_QP;
		return true;
	case MLX5DV_RES_TYPE_CQ:
		*kind = ZD_QMEM_MLX5_CQ;
		return true;
	case MLX5DV_RES_TYPE_SRQ:
		*kind = ZD_QMEM_MLX5_SRQ;
		return true;
	case MLX5DV_RES_TYPE_DBR:
		*kind = ZD_QMEM_MLX5_DBR;
		return true;
	default:
		return false;
	}
}

void *zd_mlx5_qmem_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment,
			 uint64_t resource_type)
{
	enum zd_qmem_kind kind;
	void *p;

	(void)pd;
	(void)pd_context;
	if (!kind_of(resource_type, &kind) || (alignment & (alignment - 1)))
		return IBV_ALLOCATOR_USE_DEFAULT;
	/* The pool hands out whole cache lines at least: a doorbell record
	 * (8 bytes) shares its line with nothing. */
	p = zd_qmem_pool_alloc(size, alignment, kind);
	return p ? p : IBV_ALLOCATOR_USE_DEFAULT;
}

void zd_mlx5_qmem_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type)
{
	enum zd_qmem_kind kind;

	(void)pd;
	(void)pd_context;
	if (kind_of(resource_type, &kind))
		zd_qmem_free(ptr, 0, kind);
}
