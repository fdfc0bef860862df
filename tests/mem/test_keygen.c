/* SPDX-License-Identifier: BSD-3-Clause */
/* Key generator: unique non-zero keys, stale keys not matched soon. */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "mem/zd_keygen.h"

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

Test(keygen, bad_bits)
{
	cr_assert_null(zd_keygen_create(8));
	cr_assert_eq(errno, EINVAL);
	cr_assert_null(zd_keygen_create(25));
	zd_keygen_destroy(NULL);
}

Test(keygen, unique_nonzero_exhaust)
{
	struct zd_keygen *kg = zd_keygen_create(9);
	uint32_t keys[513], k;
	int i;

	cr_assert_not_null(kg);
	for (i = 0; i < 512; i++) {
		cr_assert_eq(zd_keygen_get(kg, &keys[i]), 0);
		cr_assert_neq(keys[i], 0);
		cr_assert_lt(zd_keygen_index(kg, keys[i]), 512);
	}
	cr_assert_eq(zd_keygen_get(kg, &k), -ENOSPC);
	qsort(keys, 512, sizeof(keys[0]), cmp_u32);
	for (i = 1; i < 512; i++)
		cr_assert_neq(keys[i], keys[i - 1]);

	/* Full: a released index comes back at once, with a new generation. */
	cr_assert_eq(zd_keygen_put(kg, keys[100]), 0);
	cr_assert_eq(zd_keygen_get(kg, &k), 0);
	cr_assert_neq(k, keys[100]);
	cr_assert_eq(zd_keygen_index(kg, k), zd_keygen_index(kg, keys[100]));
	zd_keygen_destroy(kg);
}

Test(keygen, stale_and_foreign_put)
{
	struct zd_keygen *kg = zd_keygen_create(16);
	uint32_t a, b;

	cr_assert_eq(zd_keygen_get(kg, &a), 0);
	cr_assert_eq(zd_keygen_put(kg, a), 0);
	cr_assert_eq(zd_keygen_put(kg, a), -EINVAL, "double put");
	cr_assert_eq(zd_keygen_put(kg, a ^ (1u << 20)), -EINVAL, "never issued");
	cr_assert_eq(zd_keygen_put(kg, 0xffff), -EINVAL, "index never used");
	cr_assert_eq(zd_keygen_get(kg, &b), 0);
	cr_assert_eq(zd_keygen_put(kg, b), 0);
	zd_keygen_destroy(kg);
}

/* Released indices wait in quarantine; a stale key never matches a new one. */
Test(keygen, quarantine)
{
	struct zd_keygen *kg = zd_keygen_create(12);
	uint32_t first, k, idx;
	int i, reuse_at = -1;

	cr_assert_eq(zd_keygen_get(kg, &first), 0);
	idx = zd_keygen_index(kg, first);
	cr_assert_eq(zd_keygen_put(kg, first), 0);
	/* Churn: get one, put one; the first index must wait its turn. */
	for (i = 0; i < 3 * ZD_KEYGEN_QUARANTINE; i++) {
		cr_assert_eq(zd_keygen_get(kg, &k), 0);
		cr_assert_neq(k, first, "stale key reissued");
		if (zd_keygen_index(kg, k) == idx && reuse_at < 0)
			reuse_at = i;
		cr_assert_eq(zd_keygen_put(kg, k), 0);
	}
	cr_assert_geq(reuse_at, ZD_KEYGEN_QUARANTINE, "index reused after %d", reuse_at);

	zd_keygen_destroy(kg);
}

/* Every index live, churn on one: each reuse bumps its generation. */
Test(keygen, generations_advance)
{
	struct zd_keygen *kg = zd_keygen_create(9);
	uint32_t all[512], seen[1000], k;
	int i, j;

	for (i = 0; i < 512; i++)
		cr_assert_eq(zd_keygen_get(kg, &all[i]), 0);
	seen[0] = all[7];
	for (i = 1; i < 1000; i++) {
		cr_assert_eq(zd_keygen_put(kg, seen[i - 1]), 0);
		cr_assert_eq(zd_keygen_get(kg, &k), 0);
		cr_assert_eq(zd_keygen_index(kg, k), zd_keygen_index(kg, all[7]));
		for (j = 0; j < i; j++)
			cr_assert_neq(k, seen[j]);
		seen[i] = k;
	}
	zd_keygen_destroy(kg);
}

static struct zd_keygen *tkg;
static atomic_uint terr;

static void *churn(void *arg)
{
	uint32_t keys[64];

	for (int round = 0; round < 2000; round++) {
		for (int i = 0; i < 64; i++)
			if (zd_keygen_get(tkg, &keys[i]) || !keys[i])
				atomic_fetch_add(&terr, 1);
		for (int i = 0; i < 64; i++)
			if (zd_keygen_put(tkg, keys[i]))
				atomic_fetch_add(&terr, 1);
	}
	return NULL;
}

Test(keygen, threads)
{
	pthread_t th[4];

	tkg = zd_keygen_create(12);
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, churn, NULL);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	/* A put of a key someone else holds would fail: keys were unique. */
	cr_assert_eq(atomic_load(&terr), 0);
	zd_keygen_destroy(tkg);
}
