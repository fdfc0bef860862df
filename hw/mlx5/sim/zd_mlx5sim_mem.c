/*
 * Memory shared with peers: the MR and chunk tables of our region (hw/soft
 * seqlocked tables, written here on the control path under nic->lock and
 * nic->chunk_lock, read
 * lock-free by every engine that targets us, in this process or another),
 * the key checks against them, and the peer NICs whose regions our QPs
 * reach (hw/soft peers).  The copies and atomics on a peer's memory are
 * hw/soft's (zd_soft_copy.h, zd_soft_atomic.h).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/zd_log.h"
#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

/* The busy word of a peer NIC's MR is reached through our mapping of its
 * region, the owner's through its own: two addresses TSan cannot relate.
 * A count-out releases this token, a quiesced deregistration acquires it. */
static char mr_quiesce_token __attribute__((unused));

/* ---- chunks ---- */

int zd_mlx5sim_chunk_add(struct zd_mlx5sim_nic *nic, void *base, size_t len, int fd)
{
	static _Atomic uint32_t next_id = 1;
	int slot;

	if (!base || !len || fd < 0)
		return -EINVAL;
	pthread_mutex_lock(&nic->chunk_lock);
	slot = zd_soft_chunk_publish(zd_ms_chunk_ctx(nic->sh, 0), ZD_MS_CHUNKS,
				     atomic_fetch_add(&next_id, 1), fd, (uint64_t)(uintptr_t)base,
				     len, 0);
	pthread_mutex_unlock(&nic->chunk_lock);
	return slot < 0 ? -ENOSPC : 0;
}

int zd_mlx5sim_chunk_add_adopted(struct zd_mlx5sim_nic *nic)
{
	int slot;

	pthread_mutex_lock(&nic->chunk_lock);
	slot = zd_soft_chunk_publish_adopted(zd_ms_chunk_ctx(nic->sh, 0), ZD_MS_CHUNKS);
	pthread_mutex_unlock(&nic->chunk_lock);
	return slot < 0 ? -ENOENT : 0;
}

int zd_mlx5sim_chunk_remove(struct zd_mlx5sim_nic *nic, void *base)
{
	struct zd_soft_chunk_entry *tab = zd_ms_chunk_ctx(nic->sh, 0);
	struct zd_soft_chunk_view v;
	int ret = -ENOENT;

	pthread_mutex_lock(&nic->chunk_lock);
	for (uint32_t i = 0; i < ZD_MS_CHUNKS; i++)
		if (zd_soft_chunk_read(&tab[i], &v) && v.base == (uint64_t)(uintptr_t)base) {
			ret = zd_soft_chunk_retract(tab, ZD_MS_CHUNKS, v.id) == 0 ? 0 : -ENOENT;
			break;
		}
	pthread_mutex_unlock(&nic->chunk_lock);
	return ret;
}

/* ---- MRs ---- */

int zd_mlx5sim_mr_add(struct zd_mlx5sim_nic *nic, uint32_t pdn, void *addr, uint64_t len,
		      uint32_t access, uint32_t *lkey, uint32_t *rkey)
{
	int ret = -ENOMEM;

	if (access & ~0xfu)
		return -EINVAL;
	/* Remote write or atomic needs local write, as verbs insists. */
	if ((access & (ZD_MLX5SIM_ACCESS_REMOTE_WRITE | ZD_MLX5SIM_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & ZD_MLX5SIM_ACCESS_LOCAL_WRITE))
		return -EINVAL;
	pthread_mutex_lock(&nic->lock);
	if (!zd_ms_pd_ok(nic, pdn)) {
		ret = -EINVAL;
		goto out;
	}
	for (uint32_t i = 0; i < nic->sh->max_mr; i++) {
		struct zd_soft_mr_entry *e = zd_ms_mr_ctx(nic->sh, i);
		uint32_t key;

		if (atomic_load(&e->key))
			continue;
		key = i << 8 | nic->next_tag;
		nic->next_tag = nic->next_tag % 255 + 1;   /* 1..255: never 0x100 */
		zd_soft_mr_publish(e, key, (uint64_t)(uintptr_t)addr, len, access, pdn,
				   zd_soft_chunk_find(zd_ms_chunk_ctx(nic->sh, 0), ZD_MS_CHUNKS,
						      (uintptr_t)addr, len));
		nic->pd_used[pdn - 1]++;
		*lkey = *rkey = key;
		ret = 0;
		break;
	}
out:
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

/* How long a deregistration waits for engines still copying (a peer's
 * engine stopped mid-copy, say); then it goes on, and says so. */
#define ZD_MS_MR_QUIESCE_NS (2ull * 1000 * 1000 * 1000)

/* Returns once no engine copies to or from MR @idx any more (it was
 * cleared: none can start). */
static void mr_quiesce(struct zd_mlx5sim_nic *nic, uint32_t idx)
{
	_Atomic uint32_t *busy = zd_ms_mr_busy(nic->sh, idx);
	struct timespec t0, t;

	/* seq_cst fence: pairs with zd_ms_mr_check's seq_cst count-in. */
	atomic_thread_fence(memory_order_seq_cst);
	/* acquire: pairs with zd_ms_pins_release. */
	if (!atomic_load_explicit(busy, memory_order_acquire)) {
		zd_tsan_acquire(&mr_quiesce_token);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (atomic_load_explicit(busy, memory_order_acquire)) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)t.tv_nsec -
		    (uint64_t)t0.tv_nsec > ZD_MS_MR_QUIESCE_NS) {
			zd_log_error("mlx5sim: memory region %#x deregistered while an engine "
				     "still copies to it (a stopped peer?)", idx);
			return;
		}
		sched_yield();
	}
	zd_tsan_acquire(&mr_quiesce_token);
}

int zd_mlx5sim_mr_remove(struct zd_mlx5sim_nic *nic, uint32_t lkey)
{
	uint32_t idx = lkey >> 8;
	int ret = -EINVAL;

	pthread_mutex_lock(&nic->lock);
	/* Posts before the deregistration still find their memory. */
	zd_ms_engine_catch_up(nic);
	if (idx < nic->sh->max_mr) {
		struct zd_soft_mr_entry *e = zd_ms_mr_ctx(nic->sh, idx);

		if (atomic_load(&e->key) == lkey && lkey) {
			uint32_t pdn = atomic_load(&e->pz);

			zd_soft_mr_publish(e, 0, 0, 0, 0, 0, ZD_SOFT_NO_CHUNK);
			nic->pd_used[pdn - 1]--;
			ret = 0;
		}
	}
	pthread_mutex_unlock(&nic->lock);
	/* (not under the lock: an engine in mid-copy may want it) */
	if (ret == 0)
		mr_quiesce(nic, idx);
	return ret;
}

bool zd_ms_mr_check(struct zd_ms_shared *sh, uint32_t key, uint32_t pdn, uint32_t need,
		    uint64_t addr, uint64_t len, uint32_t *chunk, struct zd_ms_pins *pins)
{
	struct zd_soft_mr_view v;
	uint32_t idx = key >> 8;
	_Atomic uint32_t *busy;

	if (key == MLX5_INVALID_LKEY || idx >= sh->max_mr || pins->n == ZD_MS_PINS_MAX)
		return false;
	busy = zd_ms_mr_busy(sh, idx);
	/* seq_cst: pairs with the one in zd_mlx5sim_mr_remove (Dekker): we
	 * read the entry after counting in, it reads the count after
	 * clearing the entry. */
	atomic_fetch_add(busy, 1);
	if (!zd_soft_mr_read(zd_ms_mr_ctx(sh, idx), key, &v) ||
	    !zd_soft_mr_allows(&v, addr, len, need, pdn)) {
		atomic_fetch_sub_explicit(busy, 1, memory_order_relaxed);
		return false;
	}
	pins->busy[pins->n++] = busy;
	if (chunk)
		*chunk = zd_soft_mr_chunk(&v, addr, len);
	return true;
}

void zd_ms_pins_release(struct zd_ms_pins *pins)
{
	if (pins->n)
		zd_tsan_release(&mr_quiesce_token);
	/* release: our copies are done before the owner sees the count drop
	 * (its acquire load in zd_mlx5sim_mr_remove). */
	for (unsigned i = 0; i < pins->n; i++)
		atomic_fetch_sub_explicit(pins->busy[i], 1, memory_order_release);
	pins->n = 0;
}

/* ---- peers ---- */

void zd_ms_peers_init(struct zd_mlx5sim_nic *nic)
{
	/* Our own region seen as a peer (QPs connected inside this NIC). */
	zd_soft_peer_init_own(&nic->self, nic->sh, nic->region.size, nic->sh->uid,
			      zd_ms_chunk_ctx(nic->sh, 0), ZD_MS_CHUNKS);
}

void zd_ms_peers_fini(struct zd_mlx5sim_nic *nic)
{
	while (nic->peers)
		zd_soft_peer_put(&nic->peers, nic->peers);
	zd_soft_peer_fini_own(&nic->self);
}

/* A peer NIC's region, checked once when first mapped: every table inside
 * the mapping (zd_soft_peer_check_fn). */
static const struct zd_soft_chunk_entry *nic_region_check(const void *region, size_t size,
							   uint64_t uid, uint32_t *nchunks)
{
	const struct zd_ms_shared *sh = region;

	/* acquire: pairs with the owner's release store of magic. */
	if (atomic_load_explicit(&sh->magic, memory_order_acquire) != ZD_MS_MAGIC ||
	    sh->uid != uid || sh->size != size || sh->arena_off > size ||
	    sh->qp_off + sh->max_qp * sizeof(struct zd_ms_qp) > size ||
	    sh->cq_off + sh->max_cq * sizeof(struct zd_ms_cq) > size ||
	    sh->srq_off + sh->max_srq * sizeof(struct zd_ms_srq) > size ||
	    sh->mr_off + (uint64_t)sh->max_mr * sizeof(struct zd_soft_mr_entry) > size ||
	    sh->mr_busy_off + (uint64_t)sh->max_mr * sizeof(_Atomic uint32_t) > size ||
	    sh->chunk_off + ZD_MS_CHUNKS * sizeof(struct zd_soft_chunk_entry) > size ||
	    sh->fired_off + (sh->max_cq + 63) / 64 * 8 > size)
		return NULL;
	*nchunks = ZD_MS_CHUNKS;
	return (const void *)((const char *)sh + sh->chunk_off);
}

struct zd_soft_peer *zd_ms_peer_get(struct zd_mlx5sim_nic *nic,
				    const struct zd_mlx5sim_qp_addr *a)
{
	struct zd_soft_peer *p;

	if (a->nic_uid == nic->sh->uid)
		return &nic->self;
	if (a->region_size < sizeof(struct zd_ms_shared) || a->region_size > (1ull << 36))
		return NULL;
	pthread_mutex_lock(&nic->lock);
	p = zd_soft_peer_get(&nic->peers, (pid_t)a->pid, a->nic_uid, a->region_fd,
			     a->region_size, nic_region_check);
	pthread_mutex_unlock(&nic->lock);
	return p;
}

void zd_ms_peer_put(struct zd_mlx5sim_nic *nic, struct zd_soft_peer *p)
{
	pthread_mutex_lock(&nic->lock);
	zd_soft_peer_put(&nic->peers, p);
	pthread_mutex_unlock(&nic->lock);
}
