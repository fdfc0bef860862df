/*
 * Queue memory of the software mlx5 device: QP, CQ and SRQ buffers and
 * doorbell records from the allocator hook (host memory, as a ConnectX's
 * are), from the page arena when the hook has none to give or gives memory
 * no peer could reach.  Control path, under nic->lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

/* Hook memory a destroyed object left: exactly @size of @type, or NULL. */
static void *kept_take(struct zd_mlx5sim_nic *nic, size_t size, size_t align, uint64_t type)
{
	for (struct zd_ms_kept **pp = &nic->kept; *pp; pp = &(*pp)->next) {
		struct zd_ms_kept *k = *pp;
		void *p = k->p;

		if (k->size != size || k->type != type || ((uintptr_t)p & (align - 1)))
			continue;
		*pp = k->next;
		free(k);
		return p;
	}
	return NULL;
}

/* From the hook, if it gives memory inside a chunk we publish. */
static void *hook_alloc(struct zd_mlx5sim_nic *nic, size_t size, size_t align, uint64_t type,
			uint32_t *chunk)
{
	void *p = kept_take(nic, size, align, type);

	if (!p && nic->qmem_alloc) {
		p = nic->qmem_alloc(NULL, nic->qmem_ctx, size, align, type);
		if (p == IBV_ALLOCATOR_USE_DEFAULT)
			return NULL;
	}
	if (!p)
		return NULL;
	*chunk = zd_soft_chunk_find(zd_ms_chunk_ctx(nic->sh, 0), ZD_MS_CHUNKS,
				    (uint64_t)(uintptr_t)p, size);
	if (*chunk == ZD_SOFT_NO_CHUNK) {
		/* Not where a peer can map it (private memory, or a chunk the
		 * table had no room for): the arena's instead. */
		nic->qmem_free(NULL, nic->qmem_ctx, p, type);
		return NULL;
	}
	memset(p, 0, size);
	return p;
}

int zd_ms_qmem_alloc(struct zd_mlx5sim_nic *nic, uint64_t bytes, size_t align, uint64_t type,
		     uint32_t *chunk, uint64_t *at)
{
	void *p = bytes <= SIZE_MAX ? hook_alloc(nic, (size_t)bytes, align, type, chunk) : NULL;
	int64_t off;

	if (p) {
		*at = (uint64_t)(uintptr_t)p;
		return 0;
	}
	off = zd_ms_arena_alloc(nic, bytes);
	if (off < 0)
		return -ENOMEM;
	*chunk = ZD_SOFT_NO_CHUNK;
	*at = (uint64_t)off;
	return 0;
}

bool zd_ms_qmem_dbr(struct zd_mlx5sim_nic *nic, uint32_t *chunk, uint64_t *at)
{
	void *p = hook_alloc(nic, 8, 8, MLX5DV_RES_TYPE_DBR, chunk);

	*at = (uint64_t)(uintptr_t)p;
	return p != NULL;
}

void zd_ms_qmem_free(struct zd_mlx5sim_nic *nic, uint32_t chunk, uint64_t at, uint64_t bytes,
		     uint64_t type)
{
	struct zd_ms_kept *k;

	if (chunk == ZD_SOFT_NO_CHUNK) {
		zd_ms_arena_free(nic, at, bytes);
		return;
	}
	k = malloc(sizeof(*k));
	if (!k) {
		/* Cannot keep it: give it back now (the risk kept memory
		 * avoids is a peer's late CQE, not a crash of ours). */
		nic->qmem_free(NULL, nic->qmem_ctx, (void *)(uintptr_t)at, type);
		return;
	}
	*k = (struct zd_ms_kept){ .next = nic->kept, .p = (void *)(uintptr_t)at,
				  .size = (size_t)bytes, .type = type };
	nic->kept = k;
}

void zd_ms_qmem_fini(struct zd_mlx5sim_nic *nic)
{
	while (nic->kept) {
		struct zd_ms_kept *k = nic->kept;

		nic->kept = k->next;
		nic->qmem_free(NULL, nic->qmem_ctx, k->p, k->type);
		free(k);
	}
}
