/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Key generator: index + generation keys.  See zd_keygen.h.
 */
#include "zd_keygen.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

#define ZD_KEYGEN_NIL UINT32_MAX

struct zd_keygen_slot {
	uint32_t ctr;  /* generation counter of the live key, or of the next one */
	uint32_t next; /* release FIFO link */
	bool     live;
};

struct zd_keygen {
	pthread_mutex_t        lock;
	unsigned               idx_bits;
	uint32_t               gen_max;   /* generations run 1..gen_max */
	uint32_t               nidx;      /* indices available */
	struct zd_keygen_slot *slot;      /* by dense index */
	uint32_t               nslot;     /* indices handed out at least once */
	uint32_t               cap;
	uint32_t               head, tail, nfree; /* released, oldest first */
	uint64_t               rnd;       /* xorshift state: first counters */
	uint64_t               idx_key[ZD_KEYGEN_ROUNDS]; /* secret round keys */
	uint64_t               gen_key[ZD_KEYGEN_ROUNDS];
};

static uint32_t zd_keygen_rand_ctr(struct zd_keygen *kg)
{
	/* xorshift64*: only spreads first counters; the keys' secrecy is
	 * the permutations' round keys. */
	kg->rnd ^= kg->rnd >> 12;
	kg->rnd ^= kg->rnd << 25;
	kg->rnd ^= kg->rnd >> 27;
	return (uint32_t)((kg->rnd * 0x2545f4914f6cdd1dull) >> 32) %
	       kg->gen_max + 1;
}

/* splitmix64's finaliser: the Feistel round function. */
static uint64_t zd_keygen_mix(uint64_t x)
{
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * A keyed permutation of [0, 2^bits): balanced Feistel rounds over the
 * next even width, cycle-walked back into the domain (at most a few
 * steps: the domain is at least half the width).  @tweak picks one of
 * many permutations (each index's own sequence of generations).
 */
static uint32_t zd_keygen_perm(const uint64_t *rk, unsigned bits, uint64_t tweak, uint32_t x,
			       bool inverse)
{
	unsigned half = (bits + 1) / 2;
	uint32_t hmask = (1u << half) - 1;

	do {
		uint32_t l = x >> half, r = x & hmask;

		for (int i = 0; i < ZD_KEYGEN_ROUNDS; i++) {
			int k = inverse ? ZD_KEYGEN_ROUNDS - 1 - i : i;
			uint32_t f;

			if (!inverse) {
				f = (uint32_t)zd_keygen_mix(rk[k] ^ tweak ^ r) & hmask;
				uint32_t t = r;
				r = l ^ f;
				l = t;
			} else {
				f = (uint32_t)zd_keygen_mix(rk[k] ^ tweak ^ l) & hmask;
				uint32_t t = l;
				l = r ^ f;
				r = t;
			}
		}
		x = l << half | r;
	} while (x >> bits);
	return x;
}

/* Public index of dense slot @idx, and back. */
static uint32_t zd_keygen_pub(const struct zd_keygen *kg, uint32_t idx)
{
	return zd_keygen_perm(kg->idx_key, kg->idx_bits, 0, idx, false);
}

static uint32_t zd_keygen_dense(const struct zd_keygen *kg, uint32_t pub)
{
	return zd_keygen_perm(kg->idx_key, kg->idx_bits, 0, pub, true);
}

/* Generation (1..gen_max) of counter @ctr at public index @pub: a
 * permutation of the counters per index, so the gen_max generations an
 * index goes through are all distinct, yet none follows from another. */
static uint32_t zd_keygen_gen(const struct zd_keygen *kg, uint32_t pub, uint32_t ctr)
{
	uint32_t g = ctr;

	/* cycle-walk [1, gen_max] inside [0, gen_max]: skip 0 */
	do
		g = zd_keygen_perm(kg->gen_key, 32 - kg->idx_bits, (uint64_t)pub << 32 | 1, g,
				   false);
	while (!g);
	return g;
}

struct zd_keygen *zd_keygen_create(unsigned idx_bits)
{
	struct zd_keygen *kg;
	struct timespec ts;

	if (idx_bits < 9 || idx_bits > 24) {
		errno = EINVAL;
		return NULL;
	}
	kg = calloc(1, sizeof(*kg));
	if (!kg)
		return NULL;
	pthread_mutex_init(&kg->lock, NULL);
	kg->idx_bits = idx_bits;
	kg->gen_max = (uint32_t)((1ull << (32 - idx_bits)) - 1);
	kg->nidx = 1u << idx_bits;
	kg->head = kg->tail = ZD_KEYGEN_NIL;
	if (getrandom(&kg->rnd, sizeof(kg->rnd), GRND_NONBLOCK) !=
	    (ssize_t)sizeof(kg->rnd)) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		kg->rnd = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^
			  (uintptr_t)kg;
	}
	kg->rnd |= 1; /* xorshift state must not be 0 */
	if (getrandom(kg->idx_key, sizeof(kg->idx_key), GRND_NONBLOCK) !=
		    (ssize_t)sizeof(kg->idx_key) ||
	    getrandom(kg->gen_key, sizeof(kg->gen_key), GRND_NONBLOCK) !=
		    (ssize_t)sizeof(kg->gen_key)) {
		/* No entropy yet (early boot): derive from the seed above. */
		for (int i = 0; i < ZD_KEYGEN_ROUNDS; i++) {
			kg->idx_key[i] = zd_keygen_mix(kg->rnd + 2 * (uint64_t)i);
			kg->gen_key[i] = zd_keygen_mix(kg->rnd + 2 * (uint64_t)i + 1);
		}
	}
	return kg;
}

void zd_keygen_destroy(struct zd_keygen *kg)
{
	if (!kg)
		return;
	pthread_mutex_destroy(&kg->lock);
	free(kg->slot);
	free(kg);
}

/* Index to hand out next: the oldest released one once enough wait behind it
 * (or when no fresh ones are left), else a fresh one. */
static int zd_keygen_pick(struct zd_keygen *kg, uint32_t *idx)
{
	struct zd_keygen_slot *s;
	uint32_t cap;

	if (kg->nfree && (kg->nfree > ZD_KEYGEN_QUARANTINE || kg->nslot == kg->nidx)) {
		*idx = kg->head;
		kg->head = kg->slot[*idx].next;
		if (--kg->nfree == 0)
			kg->tail = ZD_KEYGEN_NIL;
		return 0;
	}
	if (kg->nslot == kg->nidx)
		return -ENOSPC;
	if (kg->nslot == kg->cap) {
		cap = kg->cap ? 2 * kg->cap : 256;
		if (cap > kg->nidx)
			cap = kg->nidx;
		s = realloc(kg->slot, cap * sizeof(*s));
		if (!s)
			return -ENOMEM;
		kg->slot = s;
		kg->cap = cap;
	}
	*idx = kg->nslot++;
	kg->slot[*idx].ctr = zd_keygen_rand_ctr(kg);
	return 0;
}

int zd_keygen_get(struct zd_keygen *kg, uint32_t *key)
{
	uint32_t idx;
	int rc;

	pthread_mutex_lock(&kg->lock);
	rc = zd_keygen_pick(kg, &idx);
	if (!rc) {
		uint32_t pub = zd_keygen_pub(kg, idx);

		kg->slot[idx].live = true;
		/* gen >= 1: never 0 */
		*key = zd_keygen_gen(kg, pub, kg->slot[idx].ctr) << kg->idx_bits | pub;
	}
	pthread_mutex_unlock(&kg->lock);
	return rc;
}

int zd_keygen_put(struct zd_keygen *kg, uint32_t key)
{
	uint32_t pub = zd_keygen_index(kg, key);
	uint32_t idx = zd_keygen_dense(kg, pub);
	uint32_t gen = key >> kg->idx_bits;
	struct zd_keygen_slot *s;
	int rc = -EINVAL;

	pthread_mutex_lock(&kg->lock);
	if (idx >= kg->nslot)
		goto out;
	s = &kg->slot[idx];
	if (!s->live || zd_keygen_gen(kg, pub, s->ctr) != gen)
		goto out;
	s->live = false;
	s->ctr = s->ctr == kg->gen_max ? 1 : s->ctr + 1;
	s->next = ZD_KEYGEN_NIL;
	if (kg->tail == ZD_KEYGEN_NIL)
		kg->head = idx;
	else
		kg->slot[kg->tail].next = idx;
	kg->tail = idx;
	kg->nfree++;
	rc = 0;
out:
	pthread_mutex_unlock(&kg->lock);
	return rc;
}

uint32_t zd_keygen_index(const struct zd_keygen *kg, uint32_t key)
{
	return key & (kg->nidx - 1);
}
