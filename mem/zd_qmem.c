/* SPDX-License-Identifier: BSD-3-Clause */
/* Queue memory from the registered pool, private as a fallback (zd_qmem.h). */
#include "zd_qmem.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zd_pool.h"

static struct {
	pthread_once_t once;
	bool report;                 /* ZDAPL_MEM_REPORT=1 */
	pthread_mutex_t lock;        /* the accounts */
	struct zd_qmem_stats st;
} qmem = {
	.once = PTHREAD_ONCE_INIT,
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

static const char *const kind_names[ZD_QMEM_KINDS] = {
	[ZD_QMEM_EVD_RING] = "EVD ring",
	[ZD_QMEM_CQ_RING] = "completion ring",
	[ZD_QMEM_MLX5_QP] = "mlx5 QP buffer",
	[ZD_QMEM_MLX5_CQ] = "mlx5 CQ buffer",
	[ZD_QMEM_MLX5_SRQ] = "mlx5 SRQ buffer",
	[ZD_QMEM_MLX5_DBR] = "mlx5 doorbell record",
};

const char *zd_qmem_kind_name(enum zd_qmem_kind kind)
{
	return kind < ZD_QMEM_KINDS ? kind_names[kind] : "?";
}

static void report_at_exit(void)
{
	struct zd_qmem_stats st;

	zd_qmem_get_stats(&st);
	fprintf(stderr, "zdapl: queue memory: %llu buffers from the pool (at most %llu bytes at "
		"once), %llu private (at most %llu bytes; %llu fell back from the pool)\n",
		(unsigned long long)st.pool_total, (unsigned long long)st.pool_peak,
		(unsigned long long)st.private_total, (unsigned long long)st.private_peak,
		(unsigned long long)st.fallbacks);
}

static void qmem_init(void)
{
	const char *e = getenv("ZDAPL_MEM_REPORT");

	qmem.report = e && strcmp(e, "1") == 0;
	if (qmem.report)
		atexit(report_at_exit);
}

static void account(bool pool, enum zd_qmem_kind kind, size_t size, int sign)
{
	uint64_t *live = pool ? qmem.st.pool_live : qmem.st.private_live;
	uint64_t *bytes = pool ? qmem.st.pool_bytes : qmem.st.private_bytes;

	uint64_t now = 0;

	pthread_mutex_lock(&qmem.lock);
	live[kind] += (uint64_t)(int64_t)sign;
	bytes[kind] += (uint64_t)((int64_t)sign * (int64_t)size);
	if (sign > 0) {
		for (int k = 0; k < ZD_QMEM_KINDS; k++)
			now += bytes[k];
		if (pool) {
			qmem.st.pool_total++;
			qmem.st.pool_peak = now > qmem.st.pool_peak ? now : qmem.st.pool_peak;
		} else {
			qmem.st.private_total++;
			qmem.st.private_peak = now > qmem.st.private_peak ? now : qmem.st.private_peak;
		}
	}
	pthread_mutex_unlock(&qmem.lock);
}

void *zd_qmem_pool_alloc(size_t size, size_t align, enum zd_qmem_kind kind)
{
	void *p;

	pthread_once(&qmem.once, qmem_init);
	if (kind >= ZD_QMEM_KINDS)
		return NULL;
	/* The software devices' queues are written by this process only:
	 * chunks no peer maps.  mlx5 queues are written by the device, a
	 * peer's engine on the software NIC: the pool's, which it maps. */
	p = kind == ZD_QMEM_EVD_RING || kind == ZD_QMEM_CQ_RING ? zd_pool_queue_alloc(size, align)
								: zd_pool_alloc(size, align);
	if (p)
		account(true, kind, zd_pool_usable_size(p), 1);
	return p;
}

void *zd_qmem_alloc(size_t size, size_t align, enum zd_qmem_kind kind)
{
	void *p = zd_qmem_pool_alloc(size, align, kind);
	uint64_t nth;
	int init;

	if (p || kind >= ZD_QMEM_KINDS)
		return p;
	init = zd_pool_init();
	if (align < ZD_POOL_MIN_ALIGN)
		align = ZD_POOL_MIN_ALIGN;
	/* aligned_alloc wants a multiple of the alignment. */
	p = aligned_alloc(align, (size + align - 1) & ~(align - 1));
	if (!p)
		return NULL;
	pthread_mutex_lock(&qmem.lock);
	nth = qmem.st.fallbacks++;
	pthread_mutex_unlock(&qmem.lock);
	account(false, kind, size, 1);
	if (qmem.report && nth == 0)
		fprintf(stderr, "zdapl: queue memory: the registered pool cannot give %zu bytes "
			"(%s; %s): private memory instead (not huge-page backed, not "
			"reachable by peers)\n", size, zd_qmem_kind_name(kind),
			init ? strerror(-init) : "pool allocation failed");
	return p;
}

static bool in_queue_chunk(const void *p)
{
	struct zd_chunk_ref c;

	return zd_pool_lookup(p, 1, &c) && (c.flags & ZD_CHUNK_F_QUEUE);
}

void zd_qmem_free(void *p, size_t size, enum zd_qmem_kind kind)
{
	bool pool;

	/* A fork() child's queue from its parent (an inherited IA closing):
	 * not mapped here, the parent's pool keeps it. */
	if (!p || zd_pool_inherited(p))
		return;
	pool = zd_qmem_in_pool(p, 1);
	if (pool)
		size = zd_pool_usable_size(p);
	if (kind < ZD_QMEM_KINDS)
		account(pool, kind, size, -1);
	if (!pool)
		free(p);
	else if (in_queue_chunk(p))
		zd_pool_queue_free(p);
	else
		zd_pool_free(p);
}

bool zd_qmem_in_pool(const void *p, size_t len)
{
	struct zd_chunk_ref c;

	return zd_pool_lookup(p, len, &c);
}

void zd_qmem_get_stats(struct zd_qmem_stats *st)
{
	pthread_mutex_lock(&qmem.lock);
	*st = qmem.st;
	pthread_mutex_unlock(&qmem.lock);
}
