/*
 * The mlx5 device glue: IA open/close over a backend, limits, PZ -> PD,
 * and the thread that turns completion events into EVD wake-ups (memory
 * registration: zd_mlx5_mr.c).  (zd_mlx5.h describes the design.)
 */
#include <errno.h>
#include <stdlib.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/zd_ia.h"
#include "core/zd_mem_objs.h"
#include "evd/zd_evd.h"
#include "hw/mlx5/zd_mlx5.h"
#include "mem/zd_keytab.h"

static uint32_t cap_or(uint32_t v, uint32_t def)
{
	return v ? v : def;
}

static void limits_from_caps(struct zd_device_limits *l, const struct zd_mlx5_caps *c)
{
	/* A send WQE holds ctrl + raddr + data segments within 63 x 16 bytes. */
	uint32_t sge = ZD_MIN(cap_or(c->max_sge, 16), ZD_MLX5_MAX_DS - 3);

	l->max_eps = (DAT_COUNT)ZD_MIN(cap_or(c->max_qp, 4096), INT32_MAX);
	l->max_dto_per_ep = (DAT_COUNT)ZD_MIN(cap_or(c->max_qp_wr, 8192), 1u << 15);
	l->max_rdma_read_per_ep = (DAT_COUNT)cap_or(c->max_rd_atomic, 16);
	l->max_evds = (DAT_COUNT)ZD_MIN(cap_or(c->max_cq, 8192), INT32_MAX);
	l->max_evd_qlen = (DAT_COUNT)ZD_MIN(cap_or(c->max_cqe, 1u << 16), INT32_MAX);
	l->max_iov_segments = (DAT_COUNT)sge;
	l->max_lmrs = (DAT_COUNT)ZD_MIN(cap_or(c->max_mr, 1u << 20), INT32_MAX);
	l->max_lmr_block_size = (DAT_SEG_LENGTH)ZD_MIN(c->max_mr_size ? c->max_mr_size : UINT32_MAX,
						       UINT32_MAX);
	l->max_pzs = (DAT_COUNT)ZD_MIN(cap_or(c->max_pd, 1024), INT32_MAX);
	l->max_message_size = cap_or(c->max_msg_size, 1u << 30);
	l->max_rdma_size = l->max_message_size;
	l->max_rmrs = 0;          /* no memory windows on this device yet */
	l->max_srqs = (DAT_COUNT)ZD_MIN(cap_or(c->max_srq, 1024), INT32_MAX);
	l->max_recv_per_srq = (DAT_COUNT)ZD_MIN(cap_or(c->max_srq_wr, 8192), 1u << 15);
	l->max_private_data = 256;
	l->max_inline = (DAT_COUNT)ZD_MIN(cap_or(c->max_inline, ZD_MLX5_INLINE_DEF), 512);
}

DAT_RETURN zd_mlx5_ia_open(struct zd_ia *ia, const struct zd_ia_params *p,
			   const struct zd_mlx5_backend *be)
{
	struct zd_mlx5_dev *dev = calloc(1, sizeof(*dev));
	DAT_RETURN ret;

	if (!dev)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	dev->ia = ia;
	dev->be = be;
	pthread_mutex_init(&dev->lock, NULL);
	pthread_mutex_init(&dev->reg_lock, NULL);
	ret = be->open(p, &dev->bctx, &dev->caps, &ia->addr);
	if (ret != DAT_SUCCESS) {
		pthread_mutex_destroy(&dev->lock);
		pthread_mutex_destroy(&dev->reg_lock);
		free(dev);
		return ret;
	}
	limits_from_caps(&ia->limits, &dev->caps);
	/* UD QPs need address handles, which only some backends make. */
	ia->limits.max_ud_payload = be->ah_create ? dev->caps.max_ud_payload : 0;
	/* Idempotent; zd_waiter registers the same way. */
	dev->membarrier = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
				  0, 0) == 0;
	ia->dev_priv = dev;
	return DAT_SUCCESS;
}

static void waker_stop(struct zd_mlx5_dev *dev)
{
	if (!atomic_load(&dev->waker_running))
		return;
	atomic_store(&dev->waker_stop, true);
	if (dev->be->event_kick)
		dev->be->event_kick(dev->bctx);
	pthread_join(dev->waker, NULL);
	atomic_store(&dev->waker_running, false);
}

void zd_mlx5_ia_close(struct zd_ia *ia)
{
	struct zd_mlx5_dev *dev = ia->dev_priv;

	if (!dev)
		return;
	waker_stop(dev);
	/* Core freed every child first: PDs are gone unless a PZ leaked. */
	while (dev->pds) {
		struct zd_mlx5_pd *pd = dev->pds;

		dev->pds = pd->next;
		dev->be->pd_free(dev->bctx, pd->bpd);
		free(pd);
	}
	dev->be->close(dev->bctx);
	for (uint32_t i = 0; i < ZD_MLX5_QPT_ENTRIES; i++)
		free(atomic_load(&dev->qpt[i]));
	pthread_mutex_destroy(&dev->lock);
	pthread_mutex_destroy(&dev->reg_lock);
	free(dev);
	ia->dev_priv = NULL;
}

/* ---- PZ -> PD ---- */

DAT_RETURN zd_mlx5_pz_create(struct zd_pz *pz)
{
	struct zd_mlx5_dev *dev = pz->obj.ia->dev_priv;
	struct zd_mlx5_pd *pd = calloc(1, sizeof(*pd));
	DAT_RETURN ret;

	if (!pd)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	ret = dev->be->pd_alloc(dev->bctx, &pd->bpd);
	if (ret != DAT_SUCCESS) {
		free(pd);
		return ret;
	}
	pd->pz = pz;
	pthread_mutex_lock(&dev->lock);
	pd->next = dev->pds;
	dev->pds = pd;
	pthread_mutex_unlock(&dev->lock);
	return DAT_SUCCESS;
}

void zd_mlx5_pz_destroy(struct zd_pz *pz)
{
	struct zd_mlx5_dev *dev = pz->obj.ia->dev_priv;
	struct zd_mlx5_pd **pp, *pd = NULL;

	pthread_mutex_lock(&dev->lock);
	for (pp = &dev->pds; *pp; pp = &(*pp)->next)
		if ((*pp)->pz == pz) {
			pd = *pp;
			*pp = pd->next;
			break;
		}
	pthread_mutex_unlock(&dev->lock);
	if (pd) {
		dev->be->pd_free(dev->bctx, pd->bpd);
		free(pd);
	}
}

void *zd_mlx5_pd_of(struct zd_mlx5_dev *dev, const struct zd_pz *pz)
{
	void *bpd = NULL;

	pthread_mutex_lock(&dev->lock);
	for (struct zd_mlx5_pd *pd = dev->pds; pd; pd = pd->next)
		if (pd->pz == pz) {
			bpd = pd->bpd;
			break;
		}
	pthread_mutex_unlock(&dev->lock);
	return bpd;
}

/* ---- QP lifetime against pollers (zd_mlx5.h) ---- */

void zd_mlx5_sync_pollers(struct zd_mlx5_dev *dev)
{
	/* Pairs with the compiler barrier (or fence) after a poller makes its
	 * pass count odd: either we see the odd count, or its lookup sees the
	 * QP unlisted. */
	if (!dev->membarrier ||
	    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
		atomic_thread_fence(memory_order_seq_cst);
	pthread_mutex_lock(&dev->lock);
	for (struct zd_mlx5_cq_obj *cq = dev->cqs; cq; cq = cq->next) {
		/* acquire: pairs with the release ending a pass. */
		uint32_t p = atomic_load_explicit(&cq->pass, memory_order_acquire);

		while ((p & 1) && atomic_load_explicit(&cq->pass, memory_order_acquire) == p)
			sched_yield();
	}
	pthread_mutex_unlock(&dev->lock);
}

/* ---- completion events -> EVD wake-ups ---- */

#define ZD_MLX5_EVENT_WAIT_MS 100

static void waker_take_events(struct zd_mlx5_dev *dev)
{
	void *ctx;

	while (dev->be->event_get(dev->bctx, &ctx) > 0) {
		/* The CQ may be going away: only a listed one is touched. */
		pthread_mutex_lock(&dev->lock);
		for (struct zd_mlx5_cq_obj *cq = dev->cqs; cq; cq = cq->next)
			if (cq == ctx) {
				zd_mlx5_cq_event(&cq->q);
				zd_evd_wake(cq->evd);
				break;
			}
		pthread_mutex_unlock(&dev->lock);
	}
}

static void *waker_main(void *arg)
{
	struct zd_mlx5_dev *dev = arg;

	while (!atomic_load(&dev->waker_stop)) {
		int rc = dev->be->event_wait(dev->bctx, ZD_MLX5_EVENT_WAIT_MS);

		if (rc > 0)
			waker_take_events(dev);
		else if (rc < 0 && rc != -EINTR)
			break;
	}
	return NULL;
}

int zd_mlx5_waker_start(struct zd_mlx5_dev *dev)
{
	int rc = 0;

	pthread_mutex_lock(&dev->lock);
	if (!atomic_load(&dev->waker_running)) {
		atomic_store(&dev->waker_stop, false);
		rc = -pthread_create(&dev->waker, NULL, waker_main, dev);
		if (rc == 0)
			atomic_store(&dev->waker_running, true);
	}
	pthread_mutex_unlock(&dev->lock);
	return rc;
}
