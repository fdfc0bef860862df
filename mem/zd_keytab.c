/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Key table on liburcu's cds_lfht, urcu-bp flavour.  See zd_keytab.h.
 *
 * urcu-bp because lookups come from arbitrary application threads (whoever
 * calls dat_evd_dequeue or posts) that never register with RCU; bp registers
 * them on their first read-side section.
 */
#include "evd/zd_rcu.h"
#include "zd_keytab.h"

#include <errno.h>
#include <stdlib.h>

#include <urcu-bp.h>
#include <urcu/rculfhash.h> /* after the flavour: cds_lfht_new() binds to it */

struct zd_keytab {
	struct cds_lfht *ht;
};

struct zd_keytab_node {
	struct cds_lfht_node lf;
	uint32_t             key;
	void                *obj;
	zd_keytab_reclaim_t  reclaim;
	struct rcu_head      rcu;
	struct zd_keytab_node *dead_next; /* zd_keytab_destroy() only */
};

/*
 * cds_lfht picks buckets from the low hash bits.  Keys may be index-like
 * (zd_keygen) or carry a variant byte in the low bits (mlx5), so spread every
 * key bit over the whole word: multiply by 2^64/phi, fold the high half down.
 */
static inline unsigned long zd_keytab_hash(uint32_t key)
{
	uint64_t h = (uint64_t)key * 0x9e3779b97f4a7c15ull;

	return (unsigned long)(h ^ (h >> 32));
}

static int zd_keytab_match(struct cds_lfht_node *node, const void *key)
{
	return caa_container_of(node, struct zd_keytab_node, lf)->key ==
	       *(const uint32_t *)key;
}

static void zd_keytab_node_free(struct rcu_head *head)
{
	struct zd_keytab_node *n =
		caa_container_of(head, struct zd_keytab_node, rcu);

	zd_rcu_reclaim_begin();
	if (n->reclaim)
		n->reclaim(n->obj);
	free(n);
}

struct zd_keytab *zd_keytab_create(void)
{
	struct zd_keytab *kt;

	kt = malloc(sizeof(*kt));
	if (!kt)
		return NULL;
	kt->ht = cds_lfht_new(64, 64, 0,
			      CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING, NULL);
	if (!kt->ht) {
		free(kt);
		return NULL;
	}
	return kt;
}

void zd_keytab_destroy(struct zd_keytab *kt, zd_keytab_reclaim_t reclaim)
{
	struct zd_keytab_node *n, *dead = NULL;
	struct cds_lfht_iter it;

	if (!kt)
		return;
	rcu_read_lock();
	cds_lfht_for_each_entry(kt->ht, &it, n, lf) {
		if (!cds_lfht_del(kt->ht, &n->lf)) {
			n->dead_next = dead;
			dead = n;
		}
	}
	zd_rcu_read_unlock();
	zd_synchronize_rcu();
	while (dead) {
		n = dead;
		dead = n->dead_next;
		if (reclaim)
			reclaim(n->obj);
		free(n);
	}
	cds_lfht_destroy(kt->ht, NULL);
	free(kt);
}

int zd_keytab_insert(struct zd_keytab *kt, uint32_t key, void *obj)
{
	struct zd_keytab_node *n;
	struct cds_lfht_node *got;

	if (!obj)
		return -EINVAL;
	n = malloc(sizeof(*n));
	if (!n)
		return -ENOMEM;
	cds_lfht_node_init(&n->lf);
	n->key = key;
	n->obj = obj;
	n->reclaim = NULL;

	rcu_read_lock();
	got = cds_lfht_add_unique(kt->ht, zd_keytab_hash(key), zd_keytab_match,
				  &key, &n->lf);
	zd_rcu_read_unlock();
	if (got != &n->lf) {
		free(n); /* never published */
		return -EEXIST;
	}
	return 0;
}

int zd_keytab_remove(struct zd_keytab *kt, uint32_t key,
		     zd_keytab_reclaim_t reclaim)
{
	struct zd_keytab_node *n;
	struct cds_lfht_node *lf;
	struct cds_lfht_iter it;

	rcu_read_lock();
	cds_lfht_lookup(kt->ht, zd_keytab_hash(key), zd_keytab_match, &key, &it);
	lf = cds_lfht_iter_get_node(&it);
	/* cds_lfht_del fails if a concurrent remove got there first. */
	if (!lf || cds_lfht_del(kt->ht, lf)) {
		zd_rcu_read_unlock();
		return -ENOENT;
	}
	zd_rcu_read_unlock();

	n = caa_container_of(lf, struct zd_keytab_node, lf);
	n->reclaim = reclaim;
	zd_call_rcu(&n->rcu, zd_keytab_node_free);
	return 0;
}

void zd_keytab_read_lock(void)
{
	rcu_read_lock();
}

void zd_keytab_read_unlock(void)
{
	zd_rcu_read_unlock();
}

void *zd_keytab_lookup(struct zd_keytab *kt, uint32_t key)
{
	struct cds_lfht_node *lf;
	struct cds_lfht_iter it;

	cds_lfht_lookup(kt->ht, zd_keytab_hash(key), zd_keytab_match, &key, &it);
	lf = cds_lfht_iter_get_node(&it);
	return lf ? caa_container_of(lf, struct zd_keytab_node, lf)->obj : NULL;
}

int zd_keytab_visit(struct zd_keytab *kt, uint32_t key,
		    int (*fn)(void *obj, void *arg), void *arg)
{
	void *obj;
	int rc = -ENOENT;

	rcu_read_lock();
	obj = zd_keytab_lookup(kt, key);
	if (obj)
		rc = fn(obj, arg);
	zd_rcu_read_unlock();
	return rc;
}

size_t zd_keytab_count(struct zd_keytab *kt)
{
	unsigned long count;
	long before, after;

	rcu_read_lock();
	cds_lfht_count_nodes(kt->ht, &before, &count, &after);
	zd_rcu_read_unlock();
	return count;
}

void zd_keytab_synchronize(void)
{
	zd_synchronize_rcu();
}

void zd_keytab_barrier(void)
{
	rcu_barrier();
}
