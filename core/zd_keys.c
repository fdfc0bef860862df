/* Memory keys of an IA over the key generator and the lock-free key table
 * (see zd_keys.h). */
#include <errno.h>

#include "core/zd_keys.h"
#include "core/zd_mem_objs.h"
#include "mem/zd_keygen.h"
#include "mem/zd_keytab.h"

/* 2^20 live regions per IA; 12 generation bits keep stale keys apart. */
#define ZD_KEY_INDEX_BITS 20

int zd_keys_init(struct zd_ia *ia)
{
	ia->keys = zd_keytab_create();
	ia->keygen = zd_keygen_create(ZD_KEY_INDEX_BITS);
	if (ia->keys && ia->keygen)
		return 0;
	zd_keys_fini(ia);
	return -1;
}

void zd_keys_fini(struct zd_ia *ia)
{
	/* Objects are type-stable slots, never reclaimed through the table. */
	if (ia->keys)
		zd_keytab_destroy(ia->keys, NULL);
	if (ia->keygen)
		zd_keygen_destroy(ia->keygen);
	ia->keys = NULL;
	ia->keygen = NULL;
}

DAT_RETURN zd_keys_assign(struct zd_ia *ia, struct zd_obj *obj, uint32_t *lkey,
			  uint32_t *rkey)
{
	uint32_t key;
	int rc = zd_keygen_get(ia->keygen, &key);

	if (rc == 0) {
		rc = zd_keytab_insert(ia->keys, key, obj);
		if (rc != 0)
			zd_keygen_put(ia->keygen, key);
	}
	if (rc != 0)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES,
				 rc == -ENOMEM ? DAT_RESOURCE_MEMORY : DAT_RESOURCE_MEMORY_REGION);
	if (lkey)
		*lkey = key;
	if (rkey)
		*rkey = key;
	return DAT_SUCCESS;
}

static void key_drop(struct zd_ia *ia, uint32_t key)
{
	if (zd_keytab_remove(ia->keys, key, NULL) == 0)
		zd_keygen_put(ia->keygen, key);
}

void zd_keys_remove(struct zd_ia *ia, uint32_t lkey, uint32_t rkey)
{
	if (lkey)
		key_drop(ia, lkey);
	if (rkey && rkey != lkey)
		key_drop(ia, rkey);
}

bool zd_keys_lmr_covers(struct zd_ia *ia, uint32_t key, enum zd_key_role role,
			const struct zd_pz *pz, uint32_t need, uint64_t addr, uint64_t len,
			struct zd_keys_range *range)
{
	const struct zd_lmr *lmr;
	bool ok = false;

	zd_keytab_read_lock();
	lmr = zd_keytab_lookup(ia->keys, key);
	/* Slots are type-stable: a racing free leaves a dead magic, never
	 * unmapped memory, so the checks below are safe to make. */
	if (lmr && zd_obj_get(lmr, ZD_OBJ_LMR) &&
	    (role != ZD_KEY_LOCAL || lmr->lkey == key) &&
	    (role != ZD_KEY_REMOTE || lmr->rkey == key) && (!pz || lmr->pz == pz) &&
	    ((uint32_t)lmr->priv & need) == need &&
	    zd_range_in(lmr->addr, lmr->length, addr, len)) {
		if (range) {
			range->base = lmr->addr;
			range->size = lmr->length;
		}
		ok = true;
	}
	zd_keytab_read_unlock();
	return ok;
}
