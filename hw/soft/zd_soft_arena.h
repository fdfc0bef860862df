/*
 * An arena: one sealed, sparse memfd per owner (an shm IA) from which the
 * regions it shares with peers are carved (its own header at offset 0,
 * then QP, SRQ and CQ-ring regions).  A peer maps the whole arena once
 * (its first connection to the owner) and reaches every later region by
 * offset: no descriptor, no mmap and no VMA per connection on either side.
 *
 * The span is reserved, not committed: the memfd is sparse and both
 * mappings are MAP_NORESERVE, so a page costs memory only once touched.
 * A freed region's pages go back at once (hole punched: it reads zero
 * again), and its range is reused only after ZD_SOFT_ARENA_QUARANTINE_NS,
 * so a peer still finishing a post into a region whose connection just
 * ended writes into nothing anybody uses (unless it is that late).
 *
 * Control path only; the arena's lock; any thread.
 */
#ifndef ZD_SOFT_ARENA_H
#define ZD_SOFT_ARENA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "hw/soft/zd_soft_region.h"

#define ZD_SOFT_ARENA_QUARANTINE_NS (2ull * 1000 * 1000 * 1000)

struct zd_soft_extent {
	uint64_t off, len;
	uint64_t until;              /* quarantined: reusable from then (ns) */
};

struct zd_soft_arena {
	struct zd_soft_region region;  /* the whole span, mapped; fd offered to peers */
	pthread_mutex_t lock;
	uint64_t bump;                 /* [bump, span): never carved yet */
	struct zd_soft_extent *free;   /* sorted by offset, coalesced */
	size_t nfree, free_cap;
	struct zd_soft_extent *quar;   /* FIFO: freed, not yet reusable */
	size_t nquar, quar_cap;
	uint64_t carved;               /* bytes in live regions */
};

/* A span of @span bytes whose first @head bytes (page-rounded) are the
 * owner's header, region.base; 0 or -errno. */
int zd_soft_arena_create(struct zd_soft_arena *a, size_t head, uint64_t span, const char *name);
void zd_soft_arena_destroy(struct zd_soft_arena *a);

/* A zero-filled region of at least @size bytes (page-rounded) into @r
 * (r->off its offset, r->fd -1: not ours to close); 0 or -ENOMEM. */
int zd_soft_arena_alloc(struct zd_soft_arena *a, size_t size, struct zd_soft_region *r);
/* Gives @r back (its pages at once, its range after the quarantine). */
void zd_soft_arena_free(struct zd_soft_arena *a, struct zd_soft_region *r);

#endif /* ZD_SOFT_ARENA_H */
