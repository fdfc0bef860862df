/*
 * The NIC of the software mlx5 device: its sealed memfd region (layout in
 * zd_mlx5sim_priv.h) and engine thread, open, close and statistics, PDs,
 * and the page arena UAR pages (and queues the hook does not give) are
 * carved from.  Control path: all
 * of it under nic->lock but open and close.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static uint64_t new_uid(void)
{
	struct timespec ts;
	static _Atomic uint32_t ctr;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)getpid() << 40 ^ (uint64_t)ts.tv_nsec << 8 ^ (uint64_t)ts.tv_sec << 20 ^
	       atomic_fetch_add(&ctr, 1);
}

/* The engine's per-QP state, 2.7 KB a slot (BlueFlame shadows): tens of
 * MB for a full table, of which only slots QPs used are ever touched.
 * mmap, not calloc: an allocator may fill what it hands out (glibc with
 * MALLOC_PERTURB_, as meson's tests run) and 1,000 IAs would then commit
 * 44 GB. */
static struct zd_ms_qpe *qpe_table_new(uint32_t n)
{
	void *p = mmap(NULL, (size_t)n * sizeof(struct zd_ms_qpe), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void qpe_table_free(struct zd_ms_qpe *t, uint32_t n)
{
	if (t)
		munmap(t, (size_t)n * sizeof(*t));
}

/* ---- page arena (queue memory) ---- */

int64_t zd_ms_arena_alloc(struct zd_mlx5sim_nic *nic, uint64_t bytes)
{
	uint32_t n = (uint32_t)(align_up(bytes ? bytes : 1, ZD_MS_PAGE) / ZD_MS_PAGE);
	uint32_t run = 0;

	for (uint32_t i = 0; i < nic->sh->arena_pages; i++) {
		run = nic->pages[i] ? 0 : run + 1;
		if (run == n) {
			uint32_t first = i + 1 - n;
			uint64_t off = nic->sh->arena_off + (uint64_t)first * ZD_MS_PAGE;

			memset(nic->pages + first, 1, n);
			memset(zd_ms_at(nic->sh, off), 0, (size_t)n * ZD_MS_PAGE);
			return (int64_t)off;
		}
	}
	return -ENOMEM;
}

void zd_ms_arena_free(struct zd_mlx5sim_nic *nic, uint64_t off, uint64_t bytes)
{
	uint32_t n = (uint32_t)(align_up(bytes ? bytes : 1, ZD_MS_PAGE) / ZD_MS_PAGE);

	memset(nic->pages + (off - nic->sh->arena_off) / ZD_MS_PAGE, 0, n);
}

/* ---- NIC ---- */

int zd_mlx5sim_nic_open(const struct zd_mlx5sim_nic_attr *attr, struct zd_mlx5sim_nic **out)
{
	struct zd_mlx5sim_nic_attr a = attr ? *attr : (struct zd_mlx5sim_nic_attr){ 0 };
	struct zd_mlx5sim_nic *nic;
	struct zd_ms_shared *sh;
	uint64_t off, size;
	int ret;

	a.queue_mem = a.queue_mem ? a.queue_mem : 4u << 20;
	a.max_qp = a.max_qp ? a.max_qp : 256;
	a.max_cq = a.max_cq ? a.max_cq : 256;
	a.max_srq = a.max_srq ? a.max_srq : 64;
	a.max_mr = zd_ms_pow2_up(a.max_mr ? a.max_mr : 4096);
	if (a.max_qp > (1u << 16) || a.max_cq > (1u << 16) || a.max_srq > (1u << 16) ||
	    a.max_mr > (1u << 23) || a.queue_mem > (1ull << 32))
		return -EINVAL;

	nic = calloc(1, sizeof(*nic));
	if (!nic)
		return -ENOMEM;
	off = align_up(sizeof(*sh), ZD_CACHE_LINE);
	uint64_t qp_off = off;
	off = align_up(off + a.max_qp * sizeof(struct zd_ms_qp), ZD_CACHE_LINE);
	uint64_t cq_off = off;
	off = align_up(off + a.max_cq * sizeof(struct zd_ms_cq), ZD_CACHE_LINE);
	uint64_t srq_off = off;
	off = align_up(off + a.max_srq * sizeof(struct zd_ms_srq), ZD_CACHE_LINE);
	uint64_t mr_off = off;
	off = align_up(off + a.max_mr * sizeof(struct zd_soft_mr_entry), ZD_CACHE_LINE);
	uint64_t mr_busy_off = off;
	off = align_up(off + a.max_mr * sizeof(_Atomic uint32_t), ZD_CACHE_LINE);
	uint64_t chunk_off = off;
	off = align_up(off + ZD_MS_CHUNKS * sizeof(struct zd_soft_chunk_entry), ZD_CACHE_LINE);
	uint64_t fired_off = off;
	off = align_up(off + (a.max_cq + 63) / 64 * 8, ZD_MS_PAGE);
	uint64_t arena_off = off;
	size = align_up(off + a.queue_mem, ZD_MS_PAGE);

	ret = zd_soft_region_create(&nic->region, size, "zdapl-mlx5sim");
	if (ret != 0)
		goto err_free;
	sh = nic->region.base;
	/* Queue memory is never shared with a child (fork safety, as verbs). */
	madvise(sh, size, MADV_DONTFORK);
	nic->sh = sh;
	sh->uid = new_uid();
	sh->size = size;
	sh->pid = getpid();
	sh->max_qp = a.max_qp;
	sh->max_cq = a.max_cq;
	sh->max_srq = a.max_srq;
	sh->max_mr = a.max_mr;
	sh->qp_off = qp_off;
	sh->cq_off = cq_off;
	sh->srq_off = srq_off;
	sh->mr_off = mr_off;
	sh->mr_busy_off = mr_busy_off;
	sh->chunk_off = chunk_off;
	sh->fired_off = fired_off;
	sh->arena_off = arena_off;
	sh->arena_pages = (uint32_t)((size - arena_off) / ZD_MS_PAGE);
	nic->pages = calloc(sh->arena_pages, 1);
	nic->qpe = qpe_table_new(a.max_qp);
	nic->qpe_n = a.max_qp;
	nic->cq_user = calloc(a.max_cq, sizeof(*nic->cq_user));
	nic->cq_watch = calloc(a.max_cq, sizeof(*nic->cq_watch));
	if (!nic->pages || !nic->qpe || !nic->cq_user || !nic->cq_watch) {
		ret = -ENOMEM;
		goto err_unmap;
	}
	nic->qmem_alloc = a.qmem_free ? a.qmem_alloc : NULL;
	nic->qmem_free = a.qmem_free;
	nic->qmem_ctx = a.qmem_ctx;
	nic->next_tag = 1;
	nic->debug = getenv("ZDAPL_MLX5SIM_DEBUG") && getenv("ZDAPL_MLX5SIM_DEBUG")[0] == '1';
	pthread_mutex_init(&nic->lock, NULL);
	pthread_mutex_init(&nic->chunk_lock, NULL);
	zd_ms_peers_init(nic);
	/* release: peers check magic last. */
	atomic_store_explicit(&sh->magic, ZD_MS_MAGIC, memory_order_release);
	ret = pthread_create(&nic->engine, NULL, zd_ms_engine_main, nic);
	if (ret) {
		ret = -ret;
		goto err_mutex;
	}
	*out = nic;
	return 0;
err_mutex:
	zd_ms_peers_fini(nic);
	pthread_mutex_destroy(&nic->lock);
	pthread_mutex_destroy(&nic->chunk_lock);
err_unmap:
	free(nic->pages);
	qpe_table_free(nic->qpe, nic->qpe_n);
	free(nic->cq_user);
	free(nic->cq_watch);
	zd_soft_region_destroy(&nic->region);
err_free:
	free(nic);
	return ret;
}

void zd_mlx5sim_nic_close(struct zd_mlx5sim_nic *nic)
{
	if (!nic)
		return;
	atomic_store(&nic->stop, true);
	pthread_join(nic->engine, NULL);
	for (uint32_t i = 0; i < nic->sh->max_qp; i++) {
		if (zd_ms_qp_slot_used(zd_ms_qp_ctx(nic->sh, i)))
			zd_mlx5sim_qp_destroy(nic, zd_ms_qp_ctx(nic->sh, i)->qpn);
	}
	/* Their queue memory may be the hook's: back to it below. */
	for (uint32_t i = 0; i < nic->sh->max_srq; i++)
		if (atomic_load(&zd_ms_srq_ctx(nic->sh, i)->live))
			zd_mlx5sim_srq_destroy(nic, i + 1);
	for (uint32_t i = 0; i < nic->sh->max_cq; i++)
		if (atomic_load(&zd_ms_cq_ctx(nic->sh, i)->live))
			zd_mlx5sim_cq_destroy(nic, i + 1);
	zd_ms_peers_fini(nic);
	zd_ms_qmem_fini(nic);
	atomic_store(&nic->sh->magic, 0);
	zd_soft_region_destroy(&nic->region);
	pthread_mutex_destroy(&nic->lock);
	pthread_mutex_destroy(&nic->chunk_lock);
	free(nic->pages);
	qpe_table_free(nic->qpe, nic->qpe_n);
	free(nic->cq_user);
	free(nic->cq_watch);
	free(nic);
}

void zd_mlx5sim_nic_stats(struct zd_mlx5sim_nic *nic, struct zd_mlx5sim_stats *st)
{
	st->wqes = atomic_load(&nic->cnt_wqes);
	st->rnr_retries = atomic_load(&nic->cnt_rnr);
	st->wqe_errors = atomic_load(&nic->cnt_err);
	st->bf_checked = atomic_load(&nic->cnt_bf_checked);
	st->bf_mismatch = atomic_load(&nic->cnt_bf_mismatch);
	st->db_order = atomic_load(&nic->cnt_db_order);
	st->cqes = atomic_load(&nic->sh->cnt_cqes);
	st->cq_overrun = atomic_load(&nic->sh->cnt_overrun);
	st->cq_holes = atomic_load(&nic->cnt_cq_holes);
	st->events = atomic_load(&nic->sh->cnt_events);
	st->ud_sent = atomic_load(&nic->cnt_ud_sent);
	st->ud_lost = atomic_load(&nic->cnt_ud_lost);
}

/* ---- PD ---- */

int zd_mlx5sim_pd_alloc(struct zd_mlx5sim_nic *nic, uint32_t *pdn)
{
	int ret = -ENOMEM;

	pthread_mutex_lock(&nic->lock);
	for (uint32_t i = 0; i < ZD_ARRAY_SIZE(nic->pd_used); i++) {
		if (!nic->pd_used[i]) {
			nic->pd_used[i] = 1;
			*pdn = i + 1;
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

bool zd_ms_pd_ok(struct zd_mlx5sim_nic *nic, uint32_t pdn)
{
	return pdn >= 1 && pdn <= ZD_ARRAY_SIZE(nic->pd_used) && nic->pd_used[pdn - 1];
}

int zd_mlx5sim_pd_free(struct zd_mlx5sim_nic *nic, uint32_t pdn)
{
	int ret = 0;

	pthread_mutex_lock(&nic->lock);
	if (!zd_ms_pd_ok(nic, pdn))
		ret = -EINVAL;
	else if (nic->pd_used[pdn - 1] > 1)
		ret = -EBUSY;
	else
		nic->pd_used[pdn - 1] = 0;
	pthread_mutex_unlock(&nic->lock);
	return ret;
}
