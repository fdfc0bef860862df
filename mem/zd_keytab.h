/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Key tables: 32-bit lkey/rkey -> object, read lock-free.
 *
 * A liburcu lock-free resizable hash table (cds_lfht, urcu-bp flavour: any
 * application thread may read without registering).  Lookups run inside an
 * RCU read-side section; inserts and removes may run concurrently with them
 * and with each other.  A removed object stays valid for readers that found it
 * until a grace period has passed: free it in the reclaim callback, or after
 * zd_keytab_synchronize().
 *
 * The RCU flavour stays inside zd_keytab.c, so this header does not pull
 * liburcu into its users (who may use another flavour elsewhere).
 */
#ifndef ZD_KEYTAB_H
#define ZD_KEYTAB_H

#include <stddef.h>
#include <stdint.h>

struct zd_keytab;

/* Called once no reader can still see obj (in the call_rcu thread: it must not
 * wait for grace periods itself). */
typedef void (*zd_keytab_reclaim_t)(void *obj);

/* An empty table, or NULL (out of memory). */
struct zd_keytab *zd_keytab_create(void);

/*
 * Destroy kt, reclaiming the objects still in it (after a grace period; reclaim
 * may be NULL).  No concurrent insert/remove, no reader may still reach kt, and
 * not from inside a read-side section or a reclaim callback.
 */
void zd_keytab_destroy(struct zd_keytab *kt, zd_keytab_reclaim_t reclaim);

/* Map key to obj (non-NULL).  0, -EEXIST if key is present, -ENOMEM. */
int zd_keytab_insert(struct zd_keytab *kt, uint32_t key, void *obj);

/*
 * Unmap key; reclaim(obj) runs after a grace period (reclaim may be NULL).
 * 0, or -ENOENT if key is absent (or a concurrent remove took it).
 */
int zd_keytab_remove(struct zd_keytab *kt, uint32_t key,
		     zd_keytab_reclaim_t reclaim);

/* Read-side section bracket for zd_keytab_lookup(); sections nest. */
void zd_keytab_read_lock(void);
void zd_keytab_read_unlock(void);

/*
 * The object mapped to key, or NULL.  Call between zd_keytab_read_lock() and
 * zd_keytab_read_unlock(); the object is valid until the unlock.
 */
void *zd_keytab_lookup(struct zd_keytab *kt, uint32_t key);

/*
 * Lookup with the section handled here: calls fn(obj, arg) inside it (to copy
 * out what is needed) and returns its result, or -ENOENT if key is absent.
 */
int zd_keytab_visit(struct zd_keytab *kt, uint32_t key,
		    int (*fn)(void *obj, void *arg), void *arg);

/* Entries right now (approximate while others insert or remove). */
size_t zd_keytab_count(struct zd_keytab *kt);

/* Wait until every reader that might see a removed object has left. */
void zd_keytab_synchronize(void);

/* Wait until every reclaim callback queued so far has run. */
void zd_keytab_barrier(void);

#endif /* ZD_KEYTAB_H */
