/* SPDX-License-Identifier: BSD-3-Clause */
/* Key table: lfht + urcu-bp, lookups racing inserts and removes. */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "mem/zd_keytab.h"

#define LIVE 0x11feb0a7u
#define DEAD 0xdeadbeefu

struct obj {
	_Atomic uint32_t magic;
	uint32_t         key;
};

static atomic_ulong created, reclaimed;

static struct obj *obj_new(uint32_t key)
{
	struct obj *o = malloc(sizeof(*o));

	cr_assert_not_null(o);
	atomic_store(&o->magic, LIVE);
	o->key = key;
	atomic_fetch_add(&created, 1);
	return o;
}

/* Poison, then free: a reader that still saw it would notice (or ASan). */
static void obj_reclaim(void *p)
{
	struct obj *o = p;

	atomic_store(&o->magic, DEAD);
	atomic_fetch_add(&reclaimed, 1);
	free(o);
}

static int copy_key(void *obj, void *arg)
{
	*(uint32_t *)arg = ((struct obj *)obj)->key;
	return 7;
}

Test(keytab, basic)
{
	struct zd_keytab *kt = zd_keytab_create();
	struct obj *o[100];
	uint32_t k, got;

	cr_assert_not_null(kt);
	cr_assert_eq(zd_keytab_count(kt), 0);
	for (k = 0; k < 100; k++) {
		o[k] = obj_new(k * 977 + 1);
		cr_assert_eq(zd_keytab_insert(kt, o[k]->key, o[k]), 0);
	}
	cr_assert_eq(zd_keytab_count(kt), 100);
	cr_assert_eq(zd_keytab_insert(kt, o[3]->key, o[4]), -EEXIST);
	cr_assert_eq(zd_keytab_insert(kt, 12345678, NULL), -EINVAL);

	zd_keytab_read_lock();
	for (k = 0; k < 100; k++)
		cr_assert_eq(zd_keytab_lookup(kt, o[k]->key), o[k]);
	cr_assert_null(zd_keytab_lookup(kt, 0));
	cr_assert_null(zd_keytab_lookup(kt, 2));
	zd_keytab_read_unlock();

	cr_assert_eq(zd_keytab_visit(kt, o[9]->key, copy_key, &got), 7);
	cr_assert_eq(got, o[9]->key);
	cr_assert_eq(zd_keytab_visit(kt, 2, copy_key, &got), -ENOENT);

	/* o[9] may be reclaimed any time after the remove: use a copy of its key. */
	k = o[9]->key;
	cr_assert_eq(zd_keytab_remove(kt, k, obj_reclaim), 0);
	cr_assert_eq(zd_keytab_remove(kt, k, obj_reclaim), -ENOENT);
	zd_keytab_read_lock();
	cr_assert_null(zd_keytab_lookup(kt, k));
	zd_keytab_read_unlock();
	zd_keytab_barrier();
	cr_assert_eq(atomic_load(&reclaimed), 1);
	cr_assert_eq(zd_keytab_count(kt), 99);

	/* The key is free again. */
	o[9] = obj_new(k);
	cr_assert_eq(zd_keytab_insert(kt, k, o[9]), 0);

	zd_keytab_destroy(kt, obj_reclaim);
	cr_assert_eq(atomic_load(&reclaimed), atomic_load(&created));
}

Test(keytab, remove_without_reclaim)
{
	struct zd_keytab *kt = zd_keytab_create();
	struct obj *o = obj_new(5);

	cr_assert_eq(zd_keytab_insert(kt, 5, o), 0);
	cr_assert_eq(zd_keytab_remove(kt, 5, NULL), 0);
	zd_keytab_synchronize();
	free(o); /* no reader can see it any more */
	zd_keytab_destroy(kt, NULL);
	zd_keytab_destroy(NULL, NULL);
}

/* --- races ---------------------------------------------------------------- */

#define NKEYS    512
#define NREADERS 3
#define NWRITERS 2
#define WRITES   60000

static struct zd_keytab *rkt;
static atomic_bool writers_done;
static atomic_ulong bad, hits;

static void *reader(void *arg)
{
	uint64_t r = (uintptr_t)arg;
	unsigned long n = 0, h = 0;
	struct obj *o;
	uint32_t key;

	while (!atomic_load_explicit(&writers_done, memory_order_relaxed) ||
	       n < 10000) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		key = (uint32_t)(r >> 33) % NKEYS + 1;
		zd_keytab_read_lock();
		o = zd_keytab_lookup(rkt, key);
		if (o) {
			h++;
			if (atomic_load(&o->magic) != LIVE || o->key != key)
				atomic_fetch_add(&bad, 1);
		}
		zd_keytab_read_unlock();
		n++;
	}
	atomic_fetch_add(&hits, h);
	return NULL;
}

static void *writer(void *arg)
{
	uint64_t r = (uintptr_t)arg;
	struct obj *o;
	uint32_t key;
	int rc;

	for (int i = 0; i < WRITES; i++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		key = (uint32_t)(r >> 33) % NKEYS + 1;
		/* Writers overlap on keys: removes and inserts race each other. */
		if (zd_keytab_remove(rkt, key, obj_reclaim) == -ENOENT) {
			o = obj_new(key);
			rc = zd_keytab_insert(rkt, key, o);
			if (rc == -EEXIST) {
				free(o); /* never published */
				atomic_fetch_sub(&created, 1);
			} else if (rc) {
				atomic_fetch_add(&bad, 1);
			}
		}
	}
	return NULL;
}

Test(keytab, lookups_race_updates, .timeout = 120)
{
	pthread_t rd[NREADERS], wr[NWRITERS];
	uint32_t key;
	int i;

	rkt = zd_keytab_create();
	cr_assert_not_null(rkt);
	for (key = 1; key <= NKEYS; key += 2)
		cr_assert_eq(zd_keytab_insert(rkt, key, obj_new(key)), 0);

	for (i = 0; i < NREADERS; i++)
		cr_assert_eq(pthread_create(&rd[i], NULL, reader, (void *)(uintptr_t)(i + 1)), 0);
	for (i = 0; i < NWRITERS; i++)
		cr_assert_eq(pthread_create(&wr[i], NULL, writer, (void *)(uintptr_t)(i + 100)), 0);
	for (i = 0; i < NWRITERS; i++)
		pthread_join(wr[i], NULL);
	atomic_store(&writers_done, true);
	for (i = 0; i < NREADERS; i++)
		pthread_join(rd[i], NULL);

	cr_assert_eq(atomic_load(&bad), 0, "readers saw %lu torn or freed objects",
		     atomic_load(&bad));
	cr_assert_gt(atomic_load(&hits), 0);
	zd_keytab_destroy(rkt, obj_reclaim);
	zd_keytab_barrier();
	cr_assert_eq(atomic_load(&reclaimed), atomic_load(&created));
}

/* Concurrent inserts of the same keys: each key lands exactly once. */
static atomic_ulong inserted;

static void *insert_all(void *arg)
{
	static struct obj dummy = { .magic = LIVE };

	for (uint32_t key = 1; key <= 20000; key++)
		if (zd_keytab_insert(rkt, key, &dummy) == 0)
			atomic_fetch_add(&inserted, 1);
	return NULL;
}

Test(keytab, unique_under_race)
{
	pthread_t th[4];
	int i;

	rkt = zd_keytab_create();
	for (i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, insert_all, NULL);
	for (i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&inserted), 20000);
	cr_assert_eq(zd_keytab_count(rkt), 20000);
	zd_keytab_destroy(rkt, NULL);
}
