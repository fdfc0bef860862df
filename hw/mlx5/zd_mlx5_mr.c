/*
 * Memory registration of the mlx5 devices, and its cache.
 *
 * dat_lmr_create registers the LMR's range with the backend (ibv_reg_mr on
 * hardware: pinning, a system call, milliseconds for large ranges).  A
 * range already registered in the same PZ with the same privileges is a
 * cache hit: the new LMR shares that MR and its keys, counted, and the MR
 * goes with the last LMR that uses it.  Only exact ranges are shared: an
 * MR larger than the LMR (a whole pool chunk, say) would make the NIC
 * accept accesses outside the LMR that DAT says must fail.
 *
 * The device's keys replace core's in the LMR and in the IA's key table
 * (core looks LMRs up by the context the consumer holds: dat_lmr_sync_*);
 * core's keys stay reserved in its generator and come back at
 * deregistration, so core releases exactly what it assigned.  A shared key
 * names one of the LMRs that share it (they cover the same range), and
 * another once that one is freed.
 *
 * Control path: one mutex per device (dev->reg_lock) around the cache.
 */
#include <stdlib.h>

#include "core/zd_ia.h"
#include "core/zd_mem_objs.h"
#include "hw/mlx5/zd_mlx5.h"
#include "mem/zd_keytab.h"

_Atomic uint32_t zd_mlx5_reg_gen = 1;

/* One backend MR, shared by the LMRs of one exact registration. */
struct zd_mlx5_reg {
	struct zd_mlx5_reg *next;      /* dev->regs */
	void *bpd;
	uint64_t addr, len;
	DAT_MEM_PRIV_FLAGS priv;
	void *bmr;
	uint32_t lkey, rkey;
	struct zd_mlx5_mr *users;      /* the LMRs sharing it */
};

/* One LMR's registration (lmr->dev_priv). */
struct zd_mlx5_mr {
	struct zd_mlx5_reg *reg;
	struct zd_mlx5_mr *next_user;
	struct zd_lmr *lmr;
	uint32_t core_lkey, core_rkey;
	bool in_table_l, in_table_r;   /* its LMR is the one the key names */
};

static struct zd_mlx5_reg *reg_find(struct zd_mlx5_dev *dev, void *bpd, const struct zd_lmr *lmr)
{
	for (struct zd_mlx5_reg *r = dev->regs; r; r = r->next)
		if (r->bpd == bpd && r->addr == lmr->addr && r->len == lmr->length &&
		    r->priv == lmr->priv)
			return r;
	return NULL;
}

static struct zd_mlx5_reg *reg_new(struct zd_mlx5_dev *dev, void *bpd, const struct zd_lmr *lmr,
				   DAT_RETURN *ret)
{
	struct zd_mlx5_reg *r = calloc(1, sizeof(*r));

	if (!r) {
		*ret = DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
		return NULL;
	}
	*ret = dev->be->mr_reg(dev->bctx, bpd, lmr->addr, lmr->length, lmr->priv, &r->bmr,
			       &r->lkey, &r->rkey);
	if (*ret != DAT_SUCCESS) {
		free(r);
		return NULL;
	}
	r->bpd = bpd;
	r->addr = lmr->addr;
	r->len = lmr->length;
	r->priv = lmr->priv;
	r->next = dev->regs;
	dev->regs = r;
	return r;
}

static void reg_unlink(struct zd_mlx5_dev *dev, struct zd_mlx5_reg *r)
{
	for (struct zd_mlx5_reg **pp = &dev->regs; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			return;
		}
}

DAT_RETURN zd_mlx5_mr_register(struct zd_ia *ia, struct zd_lmr *lmr)
{
	struct zd_mlx5_dev *dev = ia->dev_priv;
	struct zd_mlx5_mr *mr = calloc(1, sizeof(*mr));
	void *bpd = zd_mlx5_pd_of(dev, lmr->pz);
	struct zd_mlx5_reg *reg;
	DAT_RETURN ret = DAT_SUCCESS;

	if (!mr)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	if (!bpd) {
		free(mr);
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	}
	pthread_mutex_lock(&dev->reg_lock);
	reg = reg_find(dev, bpd, lmr);
	if (!reg && !(reg = reg_new(dev, bpd, lmr, &ret))) {
		pthread_mutex_unlock(&dev->reg_lock);
		free(mr);
		return ret;
	}
	mr->reg = reg;
	mr->lmr = lmr;
	mr->next_user = reg->users;
	reg->users = mr;
	mr->core_lkey = lmr->lkey;
	mr->core_rkey = lmr->rkey;
	zd_keytab_remove(ia->keys, lmr->lkey, NULL);
	if (lmr->rkey != lmr->lkey)
		zd_keytab_remove(ia->keys, lmr->rkey, NULL);
	/* A key already listed (an LMR sharing the MR, or an RMR's core key
	 * equal to it) stays as it is. */
	mr->in_table_l = zd_keytab_insert(ia->keys, reg->lkey, &lmr->obj) == 0;
	mr->in_table_r = reg->rkey != reg->lkey &&
			 zd_keytab_insert(ia->keys, reg->rkey, &lmr->obj) == 0;
	pthread_mutex_unlock(&dev->reg_lock);
	lmr->lkey = reg->lkey;
	lmr->rkey = reg->rkey;
	lmr->dev_priv = mr;
	return DAT_SUCCESS;
}

/* @key named @mr's LMR: name another sharer's, if any is left. */
static void key_pass_on(struct zd_ia *ia, struct zd_mlx5_reg *reg, uint32_t key, bool rkey)
{
	struct zd_mlx5_mr *heir = reg->users;

	zd_keytab_remove(ia->keys, key, NULL);
	if (heir && zd_keytab_insert(ia->keys, key, &heir->lmr->obj) == 0) {
		if (rkey)
			heir->in_table_r = true;
		else
			heir->in_table_l = true;
	}
}

void zd_mlx5_mr_deregister(struct zd_ia *ia, struct zd_lmr *lmr)
{
	struct zd_mlx5_dev *dev = ia->dev_priv;
	struct zd_mlx5_mr *mr = lmr->dev_priv, **pp;
	struct zd_mlx5_reg *reg;

	if (!mr)
		return;
	reg = mr->reg;
	pthread_mutex_lock(&dev->reg_lock);
	for (pp = &reg->users; *pp; pp = &(*pp)->next_user)
		if (*pp == mr) {
			*pp = mr->next_user;
			break;
		}
	if (mr->in_table_l)
		key_pass_on(ia, reg, reg->lkey, false);
	if (mr->in_table_r)
		key_pass_on(ia, reg, reg->rkey, true);
	/* Inline posts checked their source against it: check again. */
	atomic_fetch_add_explicit(&zd_mlx5_reg_gen, 1, memory_order_release);
	if (!reg->users) {
		reg_unlink(dev, reg);
		dev->be->mr_dereg(dev->bctx, reg->bmr);
		free(reg);
	}
	pthread_mutex_unlock(&dev->reg_lock);
	/* Back to core's keys for zd_keys_remove. */
	zd_keytab_insert(ia->keys, mr->core_lkey, &lmr->obj);
	if (mr->core_rkey != mr->core_lkey)
		zd_keytab_insert(ia->keys, mr->core_rkey, &lmr->obj);
	lmr->lkey = mr->core_lkey;
	lmr->rkey = mr->core_rkey;
	lmr->dev_priv = NULL;
	free(mr);
}
