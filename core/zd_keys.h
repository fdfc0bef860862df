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
#include "core/zd_range.h"

struct zd_pz;

/* Gives @obj (an LMR or RMR) a fresh key and publishes it. */
DAT_RETURN zd_keys_assign(struct zd_ia *ia, struct zd_obj *obj,
			  uint32_t *lkey, uint32_t *rkey);
void zd_keys_remove(struct zd_ia *ia, uint32_t lkey, uint32_t rkey);
/* Which of an LMR's keys a key check accepts (they differ on mlx5). */
enum zd_key_role {
	ZD_KEY_ANY,       /* either */
	ZD_KEY_LOCAL,     /* its lkey (DAT_LMR_CONTEXT) */
	ZD_KEY_REMOTE,    /* its rkey (DAT_RMR_CONTEXT) */
};

/* The region of an LMR, as a key check found it. */
struct zd_keys_range {
	uint64_t base, size;
};

/*
 * True when @key names, in the role @role, a live LMR of @ia that lies in
 * @pz (NULL: any PZ), grants the rights @need and covers [addr, addr+len);
 * its region then goes to @range when not NULL.  Lock-free (the key table's
 * read side); any thread.
 */
bool zd_keys_lmr_covers(struct zd_ia *ia, uint32_t key, enum zd_key_role role,
			const struct zd_pz *pz, uint32_t need, uint64_t addr, uint64_t len,
			struct zd_keys_range *range);

int zd_keys_init(struct zd_ia *ia);
void zd_keys_fini(struct zd_ia *ia);

#endif
