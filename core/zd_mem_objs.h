/* Protection zones, local and remote memory regions. */
#ifndef ZD_MEM_OBJS_H
#define ZD_MEM_OBJS_H

#include "core/zd_obj.h"

struct zd_pz {
	struct zd_obj obj;
};
ZD_OBJ_FITS(PZ, struct zd_pz);

struct zd_lmr {
	struct zd_obj obj;
	struct zd_pz *pz;
	struct zd_lmr *parent;          /* DAT_MEM_TYPE_LMR: the region shared */
	DAT_MEM_TYPE mem_type;
	DAT_REGION_DESCRIPTION region;  /* as the consumer gave it */
	uint64_t addr;                  /* registered range */
	uint64_t length;
	DAT_MEM_PRIV_FLAGS priv;
	DAT_VA_TYPE va_type;
	uint32_t lkey;                  /* DAT_LMR_CONTEXT */
	uint32_t rkey;                  /* DAT_RMR_CONTEXT */
	void *dev_priv;                 /* device registration (ibv_mr, ...) */
	struct zd_adopt_rec *adopt;     /* the pages' hold (mem/zd_adopt.h), or NULL */
};
ZD_OBJ_FITS(LMR, struct zd_lmr);

struct zd_rmr {
	struct zd_obj obj;
	struct zd_pz *pz;
	struct zd_lmr *lmr;             /* bound region, NULL while unbound */
	DAT_LMR_TRIPLET window;
	DAT_MEM_PRIV_FLAGS priv;
	DAT_VA_TYPE va_type;
	uint32_t rkey;                  /* 0 while unbound */
	int for_ep;                     /* dat_rmr_create_for_ep */
};
ZD_OBJ_FITS(RMR, struct zd_rmr);

/* Forced frees used by an abrupt dat_ia_close. */
void zd_pz_destroy(struct zd_obj *o);
void zd_lmr_destroy(struct zd_obj *o);
void zd_rmr_destroy(struct zd_obj *o);

#endif
