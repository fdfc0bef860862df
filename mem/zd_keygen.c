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
	uint32_t gen;  /* of the live key, or of the next one */
	uint32_t next; /* release FIFO link */
	bool     live;
};

struct zd_keygen {
	pthread_mutex_t        lock;
	unsigned               idx_bits;
	uint32_t               gen_max;   /* generations run 1..gen_max */
	uint32_t               nidx;      /* indices available */
	struct zd_keygen_slot *slot;
	uint32_t               nslot;     /* indices handed out at least once */
	uint32_t               cap;
	uint32_t               head, tail, nfree; /* released, oldest first */
	uint64_t               rnd;
};

static uint32_t zd_keygen_rand_gen(struct zd_keygen *kg)
{
	/* xorshift64*: cheap, and only has to make generations unpredictable
	 * enough that keys are not trivially guessed. */
	kg->rnd ^= kg->rnd >> 12;
	kg->rnd ^= kg->rnd << 25;
	kg->rnd ^= kg->rnd >> 27;
	return (uint32_t)((kg->rnd * 0x2545f4914f6cdd1dull) >> 32) %
	       kg->gen_max + 1;
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
	kg->slot[*idx].gen = zd_keygen_rand_gen(kg);
	return 0;
}

int zd_keygen_get(struct zd_keygen *kg, uint32_t *key)
{
	uint32_t idx;
	int rc;

	pthread_mutex_lock(&kg->lock);
	rc = zd_keygen_pick(kg, &idx);
	if (!rc) {
		kg->slot[idx].live = true;
		/* gen >= 1: never 0 */
		*key = kg->slot[idx].gen << kg->idx_bits | idx;
	}
	pthread_mutex_unlock(&kg->lock);
	return rc;
}

int zd_keygen_put(struct zd_keygen *kg, uint32_t key)
{
	uint32_t idx = zd_keygen_index(kg, key);
	uint32_t gen = key >> kg->idx_bits;
	struct zd_keygen_slot *s;
	int rc = -EINVAL;

	pthread_mutex_lock(&kg->lock);
	if (idx >= kg->nslot)
		goto out;
	s = &kg->slot[idx];
	if (!s->live || s->gen != gen)
		goto out;
	s->live = false;
	s->gen = gen == kg->gen_max ? 1 : gen + 1;
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
