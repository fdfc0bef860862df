/*
 * Memory keys of an IA: every LMR gets one key used as both its
 * DAT_LMR_CONTEXT and DAT_RMR_CONTEXT, every bound RMR its own.  The key
 * names the region in the IA's lock-free key table, so a DTO's segments are
 * checked (liveness, bounds, PZ, access) without a lock.
 */
#ifndef ZD_KEYS_H
#define ZD_KEYS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/zd_ia.h"

/* Gives @obj (an LMR or RMR) a fresh key and publishes it. */
DAT_RETURN zd_keys_assign(struct zd_ia *ia, struct zd_obj *obj,
			  uint32_t *lkey, uint32_t *rkey);
void zd_keys_remove(struct zd_ia *ia, uint32_t lkey, uint32_t rkey);
/* True when @lkey names a live LMR of @ia that covers [addr, addr+len). */
bool zd_keys_lkey_covers(struct zd_ia *ia, uint32_t lkey, uint64_t addr, uint64_t len);

int zd_keys_init(struct zd_ia *ia);
void zd_keys_fini(struct zd_ia *ia);

#endif
