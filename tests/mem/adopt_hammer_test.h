/*
 * Threads hammering memory while registrations change its backing
 * (mem/zd_adopt.h): eight pages, words every thread increments atomically
 * and words each thread owns and increments with plain loads and stores
 * (reading each store back), on every page -- a registration's whole
 * pages, its edge pages inside and outside the region, pages it does not
 * touch.  hammer_check: every increment is there.  Shared by tests/mem
 * (the adoption API) and tests/shm (dat_lmr_create and dat_lmr_free).
 */
#ifndef ADOPT_HAMMER_TEST_H
#define ADOPT_HAMMER_TEST_H

#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>

#include "adopt_maps_test.h"

#define HAMMER_PG ((size_t)4096)

enum { HAMMER_PAGES = 8, HAMMER_THREADS = 3, OWN_WORDS = 2 * HAMMER_PAGES };

struct hammer {
	uint8_t *m;
	_Atomic int stop;
	_Atomic int started;
};

struct hammer_thread {
	struct hammer *h;
	int id;
	uint64_t rounds;
	uint64_t readback_misses;
	pthread_t tid;
};

static _Atomic uint64_t *shared_word(uint8_t *m, int page, size_t off)
{
	return (_Atomic uint64_t *)(m + (size_t)page * HAMMER_PG + off);
}

/* The shared words: first, middle and last word of every page. */
static const size_t shared_offs[] = { 0, 2048 + 64, HAMMER_PG - 8 };

/* Thread @id's own words: one near the start (below 256: outside a
 * region that starts at +256) and one in the middle of every page. */
static volatile uint64_t *own_word(uint8_t *m, int id, int k)
{
	int page = k / 2;
	size_t off = k % 2 ? 1024 + (size_t)id * 64 : 64 + (size_t)id * 8;

	return (volatile uint64_t *)(m + (size_t)page * HAMMER_PG + off);
}

static void *hammer_run(void *arg)
{
	struct hammer_thread *t = arg;
	uint8_t *m = t->h->m;

	atomic_fetch_add(&t->h->started, 1);
	while (!atomic_load_explicit(&t->h->stop, memory_order_relaxed)) {
		for (int p = 0; p < HAMMER_PAGES; p++)
			for (unsigned s = 0; s < 3; s++)
				atomic_fetch_add_explicit(shared_word(m, p, shared_offs[s]), 1,
							  memory_order_relaxed);
		t->rounds++;
		for (int k = 0; k < OWN_WORDS; k++) {
			volatile uint64_t *w = own_word(m, t->id, k);

			*w = *w + 1;
			if (*w != t->rounds)
				t->readback_misses++;
		}
	}
	return NULL;
}

static void hammer_start(struct hammer *h, struct hammer_thread *t)
{
	h->m = mmap(NULL, HAMMER_PAGES * HAMMER_PG, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(h->m, MAP_FAILED);
	atomic_store(&h->stop, 0);
	atomic_store(&h->started, 0);
	for (int i = 0; i < HAMMER_THREADS; i++) {
		t[i] = (struct hammer_thread){ .h = h, .id = i };
		cr_assert_eq(pthread_create(&t[i].tid, NULL, hammer_run, &t[i]), 0);
	}
	while (atomic_load(&h->started) < HAMMER_THREADS)
		sched_yield();
}

/* Stops the threads; every increment is there. */
static void hammer_check(struct hammer *h, struct hammer_thread *t)
{
	uint64_t total = 0;

	atomic_store(&h->stop, 1);
	for (int i = 0; i < HAMMER_THREADS; i++) {
		cr_assert_eq(pthread_join(t[i].tid, NULL), 0);
		total += t[i].rounds;
		cr_assert_eq(t[i].readback_misses, 0, "thread %d read back another value %llu times",
			     i, (unsigned long long)t[i].readback_misses);
		for (int k = 0; k < OWN_WORDS; k++)
			cr_assert_eq(*own_word(h->m, i, k), t[i].rounds,
				     "thread %d word %d (page %d): %llu, expected %llu: a store was lost",
				     i, k, k / 2, (unsigned long long)*own_word(h->m, i, k),
				     (unsigned long long)t[i].rounds);
	}
	cr_assert_gt(total, 0);
	for (int p = 0; p < HAMMER_PAGES; p++)
		for (unsigned s = 0; s < 3; s++)
			cr_assert_eq(atomic_load(shared_word(h->m, p, shared_offs[s])), total,
				     "page %d word +%zu: %llu, expected %llu: an increment was lost", p,
				     shared_offs[s],
				     (unsigned long long)atomic_load(shared_word(h->m, p, shared_offs[s])),
				     (unsigned long long)total);
	cr_assert(pages_are(h->m, HAMMER_PAGES * HAMMER_PG, PB_PRIVATE));
	munmap(h->m, HAMMER_PAGES * HAMMER_PG);
}

#endif
