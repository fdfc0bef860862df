/* Regions carved from one sparse memfd per owner (zd_soft_arena.h). */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hw/soft/zd_soft_arena.h"

static uint64_t arena_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t page_round(uint64_t v)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	return (v + page - 1) & ~(page - 1);
}

/* Back to zero and no memory (the owner's pages; a peer's mapping reads
 * the same hole). */
static void arena_punch(struct zd_soft_arena *a, uint64_t off, uint64_t len)
{
	(void)fallocate(a->region.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
			(off_t)len);
}

int zd_soft_arena_create(struct zd_soft_arena *a, size_t head, uint64_t span, const char *name)
{
	int rc;

	memset(a, 0, sizeof(*a));
	head = page_round(head);
	if (span < head || span > SIZE_MAX)
		return -EINVAL;
	rc = zd_soft_region_create(&a->region, (size_t)span, name);
	if (rc)
		return rc;
	a->bump = head;
	pthread_mutex_init(&a->lock, NULL);
	return 0;
}

void zd_soft_arena_destroy(struct zd_soft_arena *a)
{
	if (!a->region.base && a->region.fd < 0)
		return;
	zd_soft_region_destroy(&a->region);
	free(a->free);
	free(a->quar);
	pthread_mutex_destroy(&a->lock);
	a->free = a->quar = NULL;
	a->nfree = a->nquar = 0;
}

static int grow(struct zd_soft_extent **v, size_t *cap, size_t need)
{
	struct zd_soft_extent *n;
	size_t c = *cap ? *cap : 16;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	n = realloc(*v, c * sizeof(*n));
	if (!n)
		return -ENOMEM;
	*v = n;
	*cap = c;
	return 0;
}

/* Into the sorted free list, merged with its neighbours; a range that
 * ends at the bump pointer returns to it. */
static void free_insert(struct zd_soft_arena *a, uint64_t off, uint64_t len)
{
	size_t i = 0;

	while (i < a->nfree && a->free[i].off < off)
		i++;
	if (i > 0 && a->free[i - 1].off + a->free[i - 1].len == off) {
		a->free[i - 1].len += len;
		if (i < a->nfree && off + len == a->free[i].off) {
			a->free[i - 1].len += a->free[i].len;
			memmove(&a->free[i], &a->free[i + 1], (a->nfree - i - 1) * sizeof(*a->free));
			a->nfree--;
		}
		i--;
	} else if (i < a->nfree && off + len == a->free[i].off) {
		a->free[i].off = off;
		a->free[i].len += len;
	} else if (grow(&a->free, &a->free_cap, a->nfree + 1) == 0) {
		memmove(&a->free[i + 1], &a->free[i], (a->nfree - i) * sizeof(*a->free));
		a->free[i] = (struct zd_soft_extent){ off, len, 0 };
		a->nfree++;
	} else {
		return;  /* no memory for the list: the range is lost, not reused */
	}
	if (i == a->nfree - 1 && a->free[i].off + a->free[i].len == a->bump) {
		a->bump = a->free[i].off;
		a->nfree--;
	}
}

/* Quarantined ranges whose time has come become free. */
static void quarantine_drain(struct zd_soft_arena *a, uint64_t now)
{
	size_t n = 0;

	while (n < a->nquar && a->quar[n].until <= now) {
		free_insert(a, a->quar[n].off, a->quar[n].len);
		n++;
	}
	if (n) {
		memmove(a->quar, a->quar + n, (a->nquar - n) * sizeof(*a->quar));
		a->nquar -= n;
	}
}

int zd_soft_arena_alloc(struct zd_soft_arena *a, size_t size, struct zd_soft_region *r)
{
	uint64_t len = page_round(size ? size : 1), off = UINT64_MAX;
	bool reused = false;

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	pthread_mutex_lock(&a->lock);
	if (a->nquar)
		quarantine_drain(a, arena_now());
	for (size_t i = 0; i < a->nfree; i++) {
		if (a->free[i].len < len)
			continue;
		off = a->free[i].off;
		a->free[i].off += len;
		a->free[i].len -= len;
		if (!a->free[i].len) {
			memmove(&a->free[i], &a->free[i + 1], (a->nfree - i - 1) * sizeof(*a->free));
			a->nfree--;
		}
		reused = true;
		break;
	}
	if (off == UINT64_MAX && a->region.size - a->bump >= len) {
		off = a->bump;
		a->bump += len;
	}
	if (off != UINT64_MAX)
		a->carved += len;
	pthread_mutex_unlock(&a->lock);
	if (off == UINT64_MAX)
		return -ENOMEM;
	/* A late peer may have written into it while it was quarantined. */
	if (reused)
		arena_punch(a, off, len);
	r->base = (char *)a->region.base + off;
	r->size = (size_t)len;
	r->off = off;
	r->borrowed = true;
	return 0;
}

void zd_soft_arena_free(struct zd_soft_arena *a, struct zd_soft_region *r)
{
	if (!r->base || !r->borrowed)
		return;
	arena_punch(a, r->off, r->size);
	pthread_mutex_lock(&a->lock);
	a->carved -= r->size;
	if (grow(&a->quar, &a->quar_cap, a->nquar + 1) == 0)
		a->quar[a->nquar++] = (struct zd_soft_extent){
			r->off, r->size, arena_now() + ZD_SOFT_ARENA_QUARANTINE_NS };
	pthread_mutex_unlock(&a->lock);
	r->base = NULL;
	r->size = 0;
}
