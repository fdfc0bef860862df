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

static void qsort_u32(uint32_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u32);
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

/* Keys are unpredictable (issue 15): over 200,000 keys of a 20-bit
 * generator (the IAs'), none repeats, every one of the 32 bits is set in
 * about half of them, consecutive keys show no common step, and a key
 * reissued at a slot says nothing of the next there. */
Test(keygen, unpredictable)
{
	enum { N = 200000 };
	struct zd_keygen *kg = zd_keygen_create(20);
	uint32_t *k = malloc(N * sizeof(*k)), *delta = malloc(N * sizeof(*delta));
	unsigned ones[32] = { 0 }, same_delta = 0, linear_hits = 0;

	cr_assert(kg && k && delta);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(zd_keygen_get(kg, &k[i]), 0);
		for (int b = 0; b < 32; b++)
			ones[b] += k[i] >> b & 1;
		if (i)
			delta[i - 1] = k[i] - k[i - 1];
		/* the best linear guess: the last step again */
		if (i >= 2 && k[i] == 2 * k[i - 1] - k[i - 2])
			linear_hits++;
	}
	for (int b = 0; b < 32; b++)  /* 50% +- 1% (the binomial sd is 0.11%) */
		cr_assert(ones[b] > N / 100 * 49 && ones[b] < N / 100 * 51,
			  "bit %d set in %u of %d keys", b, ones[b], N);
	/* no repeats */
	qsort_u32(k, N);
	for (int i = 1; i < N; i++)
		cr_assert_neq(k[i], k[i - 1]);
	qsort_u32(delta, N - 1);
	for (int i = 1; i < N - 1; i++)
		same_delta += delta[i] == delta[i - 1];
	/* random 32-bit steps: about N^2 / 2^33 = 5 equal pairs expected */
	cr_assert_lt(same_delta, 100, "%u consecutive-key steps repeat", same_delta);
	cr_assert_lt(linear_hits, 10);
	free(k);
	free(delta);
	zd_keygen_destroy(kg);
}

/* A released key's slot comes back with a generation that is neither the
 * old one nor a fixed step from it. */
Test(keygen, reissue_unpredictable)
{
	struct zd_keygen *kg = zd_keygen_create(9);
	uint32_t keys[512], k, steps[256];
	unsigned same = 0;

	for (int i = 0; i < 512; i++)
		cr_assert_eq(zd_keygen_get(kg, &keys[i]), 0);
	for (int i = 0; i < 256; i++) {
		cr_assert_eq(zd_keygen_put(kg, keys[i]), 0);
		cr_assert_eq(zd_keygen_get(kg, &k), 0);  /* full: that slot at once */
		cr_assert_eq(zd_keygen_index(kg, k), zd_keygen_index(kg, keys[i]));
		cr_assert_neq(k, keys[i]);
		steps[i] = (k >> 9) - (keys[i] >> 9);
	}
	qsort_u32(steps, 256);
	for (int i = 1; i < 256; i++)
		same += steps[i] == steps[i - 1];
	/* 23-bit generations: a repeated step is rare */
	cr_assert_lt(same, 8, "%u generation steps repeat", same);
	zd_keygen_destroy(kg);
}
