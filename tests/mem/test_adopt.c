/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Adoption (mem/zd_adopt.h) through its internal API, as issue #13's
 * constraints put it and as a user checks them from outside: the bytes,
 * /proc/self/maps, a peer's view of the adoption file (a mapping of it at
 * offset == address, what a peer process maps), fork() children.
 *  - contents kept across acquire and release, aligned and not, edge pages
 *    private, zd_adopt_covers only for whole adopted pages;
 *  - threads hammering the pages (inside the region, and outside it on the
 *    pages it shares) while registrations come and go: no write lost;
 *  - overlapping registrations: pages private again with the last one;
 *  - memory that cannot be adopted takes cross-memory attach, with a reason;
 *  - memory unmapped (and mapped again) before its release;
 *  - fork(): adopted pages absent in the child, the rest copy-on-write,
 *    and a normal private copy again after the release.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mem/zd_adopt.h"
#include "adopt_maps_test.h"
#include "adopt_hammer_test.h"

#define PG ((size_t)4096)

static void need_adoption(void)
{
	if (sysconf(_SC_PAGESIZE) != (long)ZD_ADOPT_PAGE) {
		fprintf(stderr, "page size %ld: adoption works in 4 KiB pages only\n",
			sysconf(_SC_PAGESIZE));
		exit(77);
	}
	cr_assert_geq(zd_adopt_open(), 0, "the adoption file (memfd) cannot be created");
}

TestSuite(adopt, .init = need_adoption, .timeout = 60);
/* Tests that choose the environment before the adoption file opens. */
TestSuite(adopt_env, .timeout = 30);

/* ---- helpers ---- */

/* The byte an address holds in pattern @seed: any misplaced, lost or
 * stale byte shows. */
static uint8_t pat(const volatile uint8_t *p, uint8_t seed)
{
	uintptr_t a = (uintptr_t)p;

	return (uint8_t)(a * 31 + (a >> 12) * 7 + seed);
}

static void fill_pat(uint8_t *p, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pat(p + i, seed);
}

/* Through another mapping @v of the consumer's @p: what a peer stores. */
static void fill_pat_via(uint8_t *v, const uint8_t *p, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		v[i] = pat(p + i, seed);
}

/* The first byte of [p, p + len) not in pattern @seed, or NULL. */
static const uint8_t *bad_pat(const uint8_t *p, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != pat(p + i, seed))
			return p + i;
	return NULL;
}

#define assert_pat(p, len, seed)                                                  \
	do {                                                                      \
		const uint8_t *bad_ = bad_pat((const uint8_t *)(p), (len), (seed)); \
		cr_assert_null(bad_, "byte at %p (offset %zu) is %#x, expected %#x",      \
			       (const void *)bad_, (size_t)(bad_ - (const uint8_t *)(p)),  \
			       bad_ ? *bad_ : 0, bad_ ? pat(bad_, (seed)) : 0);            \
	} while (0)

static uint8_t *map_pages(size_t n)
{
	uint8_t *p = mmap(NULL, n * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED);
	return p;
}

static struct zd_adopt_stats stats_now(void)
{
	struct zd_adopt_stats st;

	zd_adopt_get_stats(&st);
	return st;
}

/* What a peer maps: the adoption file at offset == @addr. */
static uint8_t *peer_view(const void *addr, size_t len)
{
	uint8_t *v = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, zd_adopt_open(),
			  (off_t)(uintptr_t)addr);

	cr_assert_neq(v, MAP_FAILED, "mapping the adoption file: %s", strerror(errno));
	return v;
}

static struct zd_adopt_rec *acquire(const void *addr, size_t len)
{
	struct zd_adopt_rec *r = zd_adopt_acquire((uintptr_t)addr, len);

	cr_assert_not_null(r);
	return r;
}

static struct zd_adopt_rec *acquire_shared(const void *addr, size_t len)
{
	struct zd_adopt_rec *r = acquire(addr, len);

	cr_assert_eq(r->path, ZD_ADOPT_SHARED, "[%p, +%zu): %s: %s", addr, len,
		     zd_adopt_path_name(r->path), r->why ? r->why : "");
	return r;
}

/* ---- contents, edges, covers ---- */

Test(adopt, contents_kept_aligned_and_unaligned)
{
	uint8_t *m = map_pages(16), *va, *vb;
	struct zd_adopt_stats st0 = stats_now(), st;
	struct zd_adopt_rec *a, *b;

	fill_pat(m, 16 * PG, 1);
	/* A: pages 1..4, page-aligned.  B: 6 + 100 .. 10 + 200, whole pages
	 * 7..9, edge pages 6 and 10. */
	a = acquire_shared(m + PG, 4 * PG);
	b = acquire_shared(m + 6 * PG + 100, 4 * PG + 100);
	assert_pat(m, 16 * PG, 1);

	cr_assert(pages_are(m, PG, PB_PRIVATE));
	cr_assert(pages_are(m + PG, 4 * PG, PB_ADOPTED));
	cr_assert(pages_are(m + 5 * PG, 2 * PG, PB_PRIVATE), "gap and B's first edge page");
	cr_assert(pages_are(m + 7 * PG, 3 * PG, PB_ADOPTED));
	cr_assert(pages_are(m + 10 * PG, 6 * PG, PB_PRIVATE), "B's last edge page and beyond");
	st = stats_now();
	cr_assert_eq(st.adopted_bytes - st0.adopted_bytes, 7 * PG);
	cr_assert_eq(st.shared - st0.shared, 2);

	/* covers: the range's whole pages, all adopted */
	cr_assert(zd_adopt_covers((uintptr_t)(m + PG), 4 * PG));
	cr_assert(zd_adopt_covers((uintptr_t)(m + 2 * PG), PG));
	cr_assert(zd_adopt_covers((uintptr_t)(m + 6 * PG + 100), 4 * PG + 100));
	cr_assert(zd_adopt_covers((uintptr_t)(m + 7 * PG), 3 * PG));
	cr_assert_not(zd_adopt_covers((uintptr_t)m, 2 * PG), "page 0 is not adopted");
	cr_assert_not(zd_adopt_covers((uintptr_t)(m + PG), 5 * PG), "page 5 is not adopted");
	cr_assert_not(zd_adopt_covers((uintptr_t)(m + 6 * PG), 2 * PG), "edge page 6");
	cr_assert_not(zd_adopt_covers((uintptr_t)(m + 7 * PG), 4 * PG), "edge page 10");
	cr_assert_not(zd_adopt_covers((uintptr_t)(m + 2 * PG + 8), 100), "no whole page");
	cr_assert_not(zd_adopt_covers((uintptr_t)(m + 6 * PG + 100), 200), "edge, no whole page");
	cr_assert_not(zd_adopt_covers((uintptr_t)(m + 12 * PG), PG), "never registered");

	/* Shared for real: a peer's view and the consumer see each other's
	 * stores, both ways. */
	va = peer_view(m + PG, 4 * PG);
	vb = peer_view(m + 7 * PG, 3 * PG);
	for (size_t i = 0; i < 4 * PG; i++)
		cr_assert_eq(va[i], m[PG + i]);
	for (size_t i = 0; i < 3 * PG; i++)
		cr_assert_eq(vb[i], m[7 * PG + i]);
	fill_pat_via(va, m + PG, 4 * PG, 2);  /* a peer writes */
	assert_pat(m + PG, 4 * PG, 2);
	fill_pat(m + 7 * PG, 3 * PG, 3);  /* the consumer writes */
	for (size_t i = 0; i < 3 * PG; i++)
		cr_assert_eq(vb[i], m[7 * PG + i]);
	/* the consumer writes the edges and the rest while held */
	fill_pat(m + 6 * PG, PG, 4);
	fill_pat(m + 10 * PG, 6 * PG, 4);

	zd_adopt_release(a);
	zd_adopt_release(b);
	st = stats_now();
	cr_assert_eq(st.adopted_bytes, st0.adopted_bytes);
	cr_assert(pages_are(m, 16 * PG, PB_PRIVATE));
	assert_pat(m, PG, 1);
	assert_pat(m + PG, 4 * PG, 2);
	assert_pat(m + 5 * PG, PG, 1);
	assert_pat(m + 6 * PG, PG, 4);
	assert_pat(m + 7 * PG, 3 * PG, 3);
	assert_pat(m + 10 * PG, 6 * PG, 4);
	cr_assert_not(zd_adopt_covers((uintptr_t)(m + PG), 4 * PG));
	cr_assert_not(zd_adopt_covers((uintptr_t)(m + 7 * PG), 3 * PG));

	/* Private again: a peer's store through the file no longer reaches
	 * the consumer, whose stores stay its own; the file's pages are gone. */
	for (size_t i = 0; i < 4 * PG; i++)
		cr_assert_eq(va[i], 0, "the file kept adopted page data after the release");
	memset(va, 0xee, 4 * PG);
	assert_pat(m + PG, 4 * PG, 2);
	m[7 * PG] ^= 0xff;
	cr_assert_eq(vb[0], 0);
	munmap(va, 4 * PG);
	munmap(vb, 3 * PG);
	munmap(m, 16 * PG);
}

/* The allocators consumers use: malloc (pages shared with malloc's own
 * data), valloc, posix_memalign; the heap stays usable around them. */
Test(adopt, allocators)
{
	struct {
		const char *what;
		size_t len;
	} cases[] = { { "malloc", 5 * PG + 123 }, { "valloc", 4 * PG }, { "posix_memalign", 3 * PG + 5 } };
	struct zd_adopt_stats st0 = stats_now();

	for (unsigned c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		size_t len = cases[c].len;
		uint8_t *p = NULL, *small[64];
		struct zd_adopt_rec *r;
		uintptr_t ilo, ihi;

		if (c == 0)
			p = malloc(len);
		else if (c == 1)
			p = valloc(len);
		else
			cr_assert_eq(posix_memalign((void **)&p, 64, len), 0);
		cr_assert_not_null(p);
		fill_pat(p, len, (uint8_t)(10 + c));
		ilo = ((uintptr_t)p + PG - 1) & ~(PG - 1);
		ihi = ((uintptr_t)p + len) & ~(PG - 1);
		r = acquire_shared(p, len);
		assert_pat(p, len, (uint8_t)(10 + c));
		cr_assert(zd_adopt_covers((uintptr_t)p, len), "%s", cases[c].what);
		cr_assert(pages_are((void *)ilo, ihi - ilo, PB_ADOPTED), "%s", cases[c].what);
		if ((uintptr_t)p != ilo)
			cr_assert_neq(page_backing(p), PB_ADOPTED, "%s: first edge page", cases[c].what);
		if ((uintptr_t)p + len != ihi)
			cr_assert_neq(page_backing((void *)ihi), PB_ADOPTED, "%s: last edge page",
				      cases[c].what);
		/* malloc and free around it while it is held */
		for (int i = 0; i < 64; i++) {
			small[i] = malloc((size_t)(16 + i * 40));
			cr_assert_not_null(small[i]);
			memset(small[i], i, (size_t)(16 + i * 40));
		}
		for (int i = 0; i < 64; i += 2)
			free(small[i]);
		fill_pat(p, len, (uint8_t)(20 + c));
		zd_adopt_release(r);
		assert_pat(p, len, (uint8_t)(20 + c));
		cr_assert(pages_are((void *)ilo, ihi - ilo, PB_PRIVATE), "%s", cases[c].what);
		for (int i = 1; i < 64; i += 2) {
			for (int k = 0; k < 16 + i * 40; k++)
				cr_assert_eq(small[i][k], (uint8_t)i);
			free(small[i]);
		}
		free(p);
	}
	cr_assert_eq(stats_now().adopted_bytes, st0.adopted_bytes);
	cr_assert_eq(stats_now().shared - st0.shared, 3);
}

/* ---- threads hammering while the backing changes (adopt_hammer_test.h) ---- */

/* One registration [1 + 256 B, 6 + 256 B): whole pages 2..5, edge pages 1
 * and 6 (written inside and outside the region), pages 0 and 7 beyond. */
Test(adopt, hammer_while_acquire_release)
{
	struct hammer h;
	struct hammer_thread t[HAMMER_THREADS];
	struct zd_adopt_stats st0 = stats_now();

	hammer_start(&h, t);
	for (int i = 0; i < 150; i++) {
		struct zd_adopt_rec *r = acquire_shared(h.m + PG + 256, 5 * PG);

		if (i == 0)
			cr_assert(pages_are(h.m + 2 * PG, 4 * PG, PB_ADOPTED));
		zd_adopt_release(r);
	}
	cr_assert_eq(stats_now().shared - st0.shared, 150);
	cr_assert_geq(stats_now().rebacked_bytes - st0.rebacked_bytes, 150 * 4 * PG);
	hammer_check(&h, t);
}

/* Registrations that come and go in turns and overlap, so the window of
 * one re-backing follows another's at other addresses: [1, 4), [3 + 256 B,
 * 7), [4, 6) and [2, 7) pages, acquired and released in varying orders. */
Test(adopt, hammer_while_registrations_overlap)
{
	struct hammer h;
	struct hammer_thread t[HAMMER_THREADS];
	static const struct {
		size_t off, len;
	} reg[] = { { PG, 3 * PG }, { 3 * PG + 256, 4 * PG - 256 }, { 4 * PG, 2 * PG },
		    { 2 * PG, 5 * PG } };
	struct zd_adopt_rec *r[4];

	hammer_start(&h, t);
	for (int i = 0; i < 60; i++) {
		for (int k = 0; k < 4; k++)
			r[(k + i) % 4] = acquire(h.m + reg[(k + i) % 4].off, reg[(k + i) % 4].len);
		for (int k = 0; k < 4; k++)
			zd_adopt_release(r[(i % 2 ? 3 - k : k + i) % 4]);
	}
	hammer_check(&h, t);
}

/* ---- overlapping registrations ---- */

/* A [1, 5) and B [3, 8) pages: releasing either first gives back only the
 * pages the other does not hold; the last release gives back the rest. */
Test(adopt, overlap_released_in_either_order)
{
	for (int order = 0; order < 2; order++) {
		uint8_t *m = map_pages(10);
		struct zd_adopt_stats st0 = stats_now();
		struct zd_adopt_rec *a, *b;

		fill_pat(m, 10 * PG, (uint8_t)(30 + order));
		a = acquire_shared(m + PG, 4 * PG);
		b = acquire_shared(m + 3 * PG, 5 * PG);
		cr_assert(pages_are(m + PG, 7 * PG, PB_ADOPTED));
		cr_assert_eq(stats_now().adopted_bytes - st0.adopted_bytes, 7 * PG,
			     "pages held twice count once");
		assert_pat(m, 10 * PG, (uint8_t)(30 + order));

		zd_adopt_release(order ? b : a);
		if (order == 0) {
			cr_assert(pages_are(m + PG, 2 * PG, PB_PRIVATE), "A's own pages go");
			cr_assert(pages_are(m + 3 * PG, 5 * PG, PB_ADOPTED), "B's pages stay");
			cr_assert(zd_adopt_covers((uintptr_t)(m + 3 * PG), 5 * PG));
			cr_assert_not(zd_adopt_covers((uintptr_t)(m + PG), 4 * PG));
			cr_assert_eq(stats_now().adopted_bytes - st0.adopted_bytes, 5 * PG);
		} else {
			cr_assert(pages_are(m + PG, 4 * PG, PB_ADOPTED), "A's pages stay");
			cr_assert(pages_are(m + 5 * PG, 3 * PG, PB_PRIVATE), "B's own pages go");
			cr_assert(zd_adopt_covers((uintptr_t)(m + PG), 4 * PG));
			cr_assert_eq(stats_now().adopted_bytes - st0.adopted_bytes, 4 * PG);
		}
		assert_pat(m, 10 * PG, (uint8_t)(30 + order));
		fill_pat(m, 10 * PG, (uint8_t)(40 + order));

		zd_adopt_release(order ? a : b);
		cr_assert(pages_are(m, 10 * PG, PB_PRIVATE));
		cr_assert_eq(stats_now().adopted_bytes, st0.adopted_bytes);
		assert_pat(m, 10 * PG, (uint8_t)(40 + order));
		munmap(m, 10 * PG);
	}
}

/* A page-aligned registration inside another, and one with no whole page
 * inside it: the middle page stays until the last of the three goes. */
Test(adopt, nested_registrations)
{
	uint8_t *m = map_pages(6);
	struct zd_adopt_stats st0 = stats_now();
	struct zd_adopt_rec *outer, *inner, *tiny;

	fill_pat(m, 6 * PG, 50);
	outer = acquire_shared(m + PG, 4 * PG);
	inner = acquire_shared(m + 2 * PG, PG);
	tiny = acquire(m + 2 * PG + 100, 200);
	cr_assert_eq(tiny->path, ZD_ADOPT_XMA, "no whole page inside");
	cr_assert_not_null(tiny->why);
	zd_adopt_release(outer);
	cr_assert(pages_are(m + PG, PG, PB_PRIVATE));
	cr_assert(pages_are(m + 2 * PG, PG, PB_ADOPTED));
	cr_assert(pages_are(m + 3 * PG, 2 * PG, PB_PRIVATE));
	zd_adopt_release(inner);
	cr_assert(pages_are(m + 2 * PG, PG, PB_ADOPTED), "the tiny one still touches it");
	zd_adopt_release(tiny);
	cr_assert(pages_are(m, 6 * PG, PB_PRIVATE));
	cr_assert_eq(stats_now().adopted_bytes, st0.adopted_bytes);
	assert_pat(m, 6 * PG, 50);
	munmap(m, 6 * PG);
}

/* How many lines of /proc/self/maps cover [p, p + len). */
struct span_count {
	uint64_t lo, hi;
	unsigned n;
};

static bool span_count_fn(void *arg, const struct maps_line *l)
{
	struct span_count *c = arg;

	if (l->hi > c->lo && l->lo < c->hi)
		c->n++;
	return true;
}

static unsigned maps_lines_over(const void *p, size_t len)
{
	struct span_count c = { (uintptr_t)p, (uintptr_t)p + len, 0 };

	maps_each(span_count_fn, &c);
	return c.n;
}

/*
 * After their release, registrations leave the memory private, with its
 * bytes, but the kernel cannot join the fresh anonymous pages moved in
 * with their neighbours again: each distinct range released leaves at
 * most two more mappings (README, limits), and registering the same range
 * again and again adds none.
 */
Test(adopt, released_memory_mappings_bounded)
{
	uint8_t *m = map_pages(64);
	unsigned after_first;

	fill_pat(m, 64 * PG, 55);
	cr_assert_eq(maps_lines_over(m, 64 * PG), 1);
	for (int i = 0; i < 16; i++)
		zd_adopt_release(acquire_shared(m + (size_t)i * 4 * PG + PG, 2 * PG));
	assert_pat(m, 64 * PG, 55);
	cr_assert(pages_are(m, 64 * PG, PB_PRIVATE));
	after_first = maps_lines_over(m, 64 * PG);
	cr_assert_leq(after_first, 1 + 2 * 16, "16 releases left %u pieces", after_first);
	for (int r = 0; r < 8; r++)
		for (int i = 0; i < 16; i++)
			zd_adopt_release(acquire_shared(m + (size_t)i * 4 * PG + PG, 2 * PG));
	assert_pat(m, 64 * PG, 55);
	cr_assert_eq(maps_lines_over(m, 64 * PG), after_first,
		     "registering the same ranges again grew %u pieces to %u", after_first,
		     maps_lines_over(m, 64 * PG));
	munmap(m, 64 * PG);
}

/* ---- memory that keeps cross-memory attach ---- */

/* [p, p + len) takes the slow path with a reason and is left as it was. */
static void expect_xma(uint8_t *p, size_t len, const char *what)
{
	struct zd_adopt_stats st0 = stats_now();
	uintptr_t lo = (uintptr_t)p & ~(PG - 1), hi = ((uintptr_t)p + len + PG - 1) & ~(PG - 1);
	enum page_backing before[16];
	struct zd_adopt_rec *r;

	cr_assert_leq((hi - lo) / PG, 16);
	for (uintptr_t a = lo; a < hi; a += PG)
		before[(a - lo) / PG] = page_backing((void *)a);
	fill_pat(p, len, 60);
	r = acquire(p, len);
	cr_assert_eq(r->path, ZD_ADOPT_XMA, "%s: took %s", what, zd_adopt_path_name(r->path));
	cr_assert(r->why && r->why[0], "%s: no reason given", what);
	fprintf(stderr, "%s: %s: %s\n", what, zd_adopt_path_name(r->path), r->why);
	cr_assert_not(zd_adopt_covers((uintptr_t)p, len), "%s", what);
	cr_assert_eq(stats_now().xma - st0.xma, 1);
	cr_assert_eq(stats_now().adopted_bytes, st0.adopted_bytes);
	for (uintptr_t a = lo; a < hi; a += PG)
		cr_assert_eq(page_backing((void *)a), before[(a - lo) / PG], "%s: page %#lx changed",
			     what, (unsigned long)a);
	assert_pat(p, len, 60);
	fill_pat(p, len, 61);
	zd_adopt_release(r);
	assert_pat(p, len, 61);
	for (uintptr_t a = lo; a < hi; a += PG)
		cr_assert_eq(page_backing((void *)a), before[(a - lo) / PG]);
}

Test(adopt, ineligible_shared_anonymous)
{
	uint8_t *p = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED);
	expect_xma(p, 4 * PG, "MAP_SHARED|MAP_ANONYMOUS");
	expect_xma(p + 100, 3 * PG, "MAP_SHARED|MAP_ANONYMOUS, unaligned");
	munmap(p, 4 * PG);
}

Test(adopt, ineligible_file_mappings)
{
	FILE *f = tmpfile();
	uint8_t *priv, *shr;

	cr_assert_not_null(f);
	cr_assert_eq(ftruncate(fileno(f), 4 * PG), 0);
	priv = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fileno(f), 0);
	shr = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fileno(f), 0);
	cr_assert_neq(priv, MAP_FAILED);
	cr_assert_neq(shr, MAP_FAILED);
	expect_xma(shr, 4 * PG, "a shared file mapping");
	expect_xma(priv, 4 * PG, "a private file mapping");
	munmap(priv, 4 * PG);
	munmap(shr, 4 * PG);
	fclose(f);
}

Test(adopt, ineligible_no_whole_page)
{
	uint8_t *m = map_pages(4);
	uint8_t *small = malloc(300);

	/* within a page; straddling two pages without a whole one */
	expect_xma(m + PG + 10, 1000, "inside one page");
	expect_xma(m + PG + 4000, PG + 50, "two partial pages");
	expect_xma(m + 3 * PG, PG - 1, "one page but a byte");
	cr_assert_not_null(small);
	expect_xma(small, 300, "a small malloc");
	free(small);
	munmap(m, 4 * PG);
}

Test(adopt, ineligible_read_only_and_unmapped)
{
	uint8_t *m = map_pages(8);

	/* read-only: expect_xma writes it, so make it writable by another
	 * mapping: check the registration alone */
	cr_assert_eq(mprotect(m, 2 * PG, PROT_READ), 0);
	{
		struct zd_adopt_rec *r = acquire(m, 2 * PG);

		cr_assert_eq(r->path, ZD_ADOPT_XMA, "read-only memory");
		cr_assert_not_null(r->why);
		cr_assert(pages_are(m, 2 * PG, PB_OTHER));
		zd_adopt_release(r);
		cr_assert(pages_are(m, 2 * PG, PB_OTHER));
	}
	/* a hole in the middle */
	cr_assert_eq(munmap(m + 5 * PG, PG), 0);
	{
		struct zd_adopt_rec *r = acquire(m + 3 * PG, 4 * PG);

		cr_assert_eq(r->path, ZD_ADOPT_XMA, "a range with a hole");
		cr_assert_not_null(r->why);
		cr_assert(pages_are(m + 3 * PG, 2 * PG, PB_PRIVATE));
		zd_adopt_release(r);
	}
	munmap(m, 8 * PG);
}

Test(adopt, ineligible_hugetlbfs)
{
	size_t huge = 2 << 20;
	uint8_t *p = mmap(NULL, huge, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);

	if (p == MAP_FAILED)
		cr_skip_test("no huge pages here (MAP_HUGETLB: %s)", strerror(errno));
	fill_pat(p, huge, 62);
	{
		struct zd_adopt_rec *r = acquire(p, huge);

		cr_assert_eq(r->path, ZD_ADOPT_XMA, "hugetlbfs took %s", zd_adopt_path_name(r->path));
		cr_assert_not_null(r->why);
		assert_pat(p, huge, 62);
		zd_adopt_release(r);
	}
	assert_pat(p, huge, 62);
	munmap(p, huge);
}

/* A registration that leaves a page on cross-memory attach keeps a later
 * one from re-backing that page (a peer may be writing it right now). */
Test(adopt, page_of_a_slow_registration_stays_private)
{
	uint8_t *m = map_pages(6);
	struct zd_adopt_rec *slow, *later;

	fill_pat(m, 6 * PG, 63);
	slow = acquire(m + 2 * PG + 8, 64);
	cr_assert_eq(slow->path, ZD_ADOPT_XMA);
	later = acquire(m + PG, 4 * PG);
	cr_assert(later->path == ZD_ADOPT_XMA || page_backing(m + 2 * PG) != PB_ADOPTED,
		  "page 2 was re-backed under a registration on cross-memory attach");
	if (later->path == ZD_ADOPT_XMA)
		cr_assert_not_null(later->why);
	cr_assert_not(zd_adopt_covers((uintptr_t)(m + PG), 4 * PG));
	zd_adopt_release(later);
	zd_adopt_release(slow);
	cr_assert(pages_are(m, 6 * PG, PB_PRIVATE));
	assert_pat(m, 6 * PG, 63);
	munmap(m, 6 * PG);
}

/* ZDAPL_MEM_ADOPT=0 before the file opens: no file, every registration
 * of the application's own memory on cross-memory attach. */
Test(adopt_env, off_by_environment)
{
	uint8_t *m = map_pages(4);
	struct zd_adopt_rec *r;

	setenv("ZDAPL_MEM_ADOPT", "0", 1);
	cr_assert_eq(zd_adopt_open(), -1);
	r = zd_adopt_acquire((uintptr_t)m, 4 * PG);
	cr_assert_not_null(r);
	cr_assert_eq(r->path, ZD_ADOPT_XMA);
	cr_assert_not_null(r->why);
	cr_assert(pages_are(m, 4 * PG, PB_PRIVATE));
	cr_assert_not(zd_adopt_covers((uintptr_t)m, 4 * PG));
	zd_adopt_release(r);
	munmap(m, 4 * PG);
}

/* ---- unmapped before the release ---- */

/* The consumer unmaps registered memory and maps something else there
 * before the release: the release leaves the new mapping alone. */
Test(adopt, unmapped_then_released)
{
	uint8_t *m = map_pages(8), *again, *view;
	struct zd_adopt_stats st0 = stats_now();
	struct zd_adopt_rec *r;

	fill_pat(m, 8 * PG, 70);
	r = acquire_shared(m + 2 * PG + 100, 4 * PG);   /* whole pages 3..5 */
	view = peer_view(m + 3 * PG, 3 * PG);
	cr_assert_eq(munmap(m + 2 * PG, 4 * PG), 0);     /* pages 2..5 */
	again = mmap(m + 2 * PG, 4 * PG, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	cr_assert_eq(again, m + 2 * PG);
	fill_pat(again, 4 * PG, 71);
	zd_adopt_release(r);
	assert_pat(again, 4 * PG, 71);
	cr_assert(pages_are(again, 4 * PG, PB_PRIVATE));
	assert_pat(m, 2 * PG, 70);
	assert_pat(m + 6 * PG, 2 * PG, 70);
	cr_assert_eq(stats_now().adopted_bytes, st0.adopted_bytes);
	/* and a peer still holding the file sees nothing of the new memory */
	memset(view, 0x5c, 3 * PG);
	assert_pat(again, 4 * PG, 71);
	munmap(view, 3 * PG);
	munmap(m, 8 * PG);
}

/* The same, the registration simply unmapped: released later, nothing
 * appears there. */
Test(adopt, unmapped_and_left_unmapped)
{
	uint8_t *m = map_pages(6);
	struct zd_adopt_rec *r;

	r = acquire_shared(m + PG, 4 * PG);
	cr_assert_eq(munmap(m + PG, 4 * PG), 0);
	zd_adopt_release(r);
	cr_assert(pages_are(m + PG, 4 * PG, PB_UNMAPPED));
	cr_assert(pages_are(m, PG, PB_PRIVATE));
	cr_assert(pages_are(m + 5 * PG, PG, PB_PRIVATE));
	munmap(m, 6 * PG);
}

/*
 * Memory unmapped while registered, mapped again, and registered again
 * before the first registration goes (malloc hands the address out
 * again): whatever path the new registration reports must be true -- if
 * its pages count as shared, a peer writing them through the adoption
 * file must reach the consumer's new memory.
 */
Test(adopt, remapped_and_registered_again)
{
	uint8_t *m = map_pages(8), *view;
	struct zd_adopt_rec *old, *r;

	fill_pat(m, 8 * PG, 72);
	old = acquire_shared(m + 2 * PG, 4 * PG);
	cr_assert_eq(munmap(m + 2 * PG, 4 * PG), 0);
	cr_assert_eq(mmap(m + 2 * PG, 4 * PG, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0),
		     m + 2 * PG);
	fill_pat(m + 2 * PG, 4 * PG, 73);
	r = acquire(m + 2 * PG, 4 * PG);
	assert_pat(m + 2 * PG, 4 * PG, 73);
	if (r->path == ZD_ADOPT_SHARED || zd_adopt_covers((uintptr_t)(m + 2 * PG), 4 * PG)) {
		cr_assert(pages_are(m + 2 * PG, 4 * PG, PB_ADOPTED),
			  "the new memory counts as shared (%s, covers %d) but is not in the file",
			  zd_adopt_path_name(r->path),
			  zd_adopt_covers((uintptr_t)(m + 2 * PG), 4 * PG));
		view = peer_view(m + 2 * PG, 4 * PG);
		fill_pat_via(view, m + 2 * PG, 4 * PG, 74);
		assert_pat(m + 2 * PG, 4 * PG, 74);
		munmap(view, 4 * PG);
	}
	zd_adopt_release(r);
	zd_adopt_release(old);
	cr_assert(pages_are(m, 8 * PG, PB_PRIVATE));
	munmap(m, 8 * PG);
}

/* ---- fork() ---- */

/* Exit codes of a child: 0 all good, else the line of the failed check. */
#define CHILD_CHK(cond)                                                         \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "child: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			_exit(__LINE__ % 250 + 1);                              \
		}                                                               \
	} while (0)

static int wait_child(pid_t pid)
{
	int st;

	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return st;
}

/* A child that reads @p and, if it could, exits 0. */
static void expect_absent_in_child(volatile uint8_t *p, const char *what)
{
	pid_t pid = fork();
	int st;

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* The default action, whatever a sanitizer installed. */
		signal(SIGSEGV, SIG_DFL);
		(void)*p;
		_exit(0);
	}
	st = wait_child(pid);
	cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
		  "%s: the child read it (status %#x): the page is present in the child", what, st);
}

/*
 * Eight mapped pages, a registration [1 + 100 B, 5 + 100 B): whole pages
 * 2..4 adopted, edge pages 1 and 5; pages 0, 6, 7 and a malloc'd buffer
 * unregistered.  After fork, the child cannot touch the adopted pages; it
 * has copy-on-write copies of the rest: the parent's later stores do not
 * reach it, and its stores do not reach the parent.  After the release,
 * a child has an ordinary private copy of everything.
 */
Test(adopt, fork_children)
{
	uint8_t *m = map_pages(8), *heap = malloc(3 * PG);
	int to_child[2], to_parent[2];
	struct zd_adopt_rec *r;
	pid_t pid;
	char c;
	int st;

	cr_assert_not_null(heap);
	fill_pat(m, 8 * PG, 80);
	fill_pat(heap, 3 * PG, 80);
	r = acquire_shared(m + PG + 100, 4 * PG);

	expect_absent_in_child(m + 2 * PG, "adopted page 2");
	expect_absent_in_child(m + 4 * PG + PG - 1, "adopted page 4's last byte");

	/* With zdapl's SIGSEGV handler in place (inherited): still fatal
	 * (under ASan its handler reports the SEGV: expected). */
	fprintf(stderr, "fork_children: a child reads an adopted page and must die:\n");
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		(void)*(volatile uint8_t *)(m + 3 * PG);
		_exit(0);
	}
	st = wait_child(pid);
	cr_assert(!(WIFEXITED(st) && WEXITSTATUS(st) == 0),
		  "the child read an adopted page with the inherited handler");

	cr_assert_eq(pipe(to_child), 0);
	cr_assert_eq(pipe(to_parent), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* before the parent's stores: the fork-time contents */
		CHILD_CHK(!bad_pat(m, PG + 100, 80));                  /* page 0, edge 1 outside */
		CHILD_CHK(!bad_pat(m + PG + 100, PG - 100, 80));       /* edge page 1, inside */
		CHILD_CHK(!bad_pat(m + 5 * PG, 3 * PG, 80));           /* edge page 5, 6, 7 */
		CHILD_CHK(!bad_pat(heap, 3 * PG, 80));
		CHILD_CHK(write(to_parent[1], "a", 1) == 1);
		CHILD_CHK(read(to_child[0], &c, 1) == 1);  /* the parent stored */
		CHILD_CHK(!bad_pat(m, 2 * PG, 80));
		CHILD_CHK(!bad_pat(m + 5 * PG, 3 * PG, 80));
		CHILD_CHK(!bad_pat(heap, 3 * PG, 80));
		/* our own stores */
		fill_pat(m, 2 * PG, 82);
		fill_pat(m + 5 * PG, 3 * PG, 82);
		fill_pat(heap, 3 * PG, 82);
		CHILD_CHK(write(to_parent[1], "b", 1) == 1);
		CHILD_CHK(read(to_child[0], &c, 1) == 1);
		CHILD_CHK(!bad_pat(m, 2 * PG, 82));
		CHILD_CHK(!bad_pat(m + 5 * PG, 3 * PG, 82));
		CHILD_CHK(!bad_pat(heap, 3 * PG, 82));
		_exit(0);
	}
	cr_assert_eq(read(to_parent[0], &c, 1), 1);
	/* the parent stores everywhere, the registered pages included */
	fill_pat(m, 8 * PG, 81);
	fill_pat(heap, 3 * PG, 81);
	cr_assert_eq(write(to_child[1], "A", 1), 1);
	cr_assert_eq(read(to_parent[0], &c, 1), 1);  /* the child stored */
	assert_pat(m, 8 * PG, 81);
	assert_pat(heap, 3 * PG, 81);
	cr_assert(pages_are(m + 2 * PG, 3 * PG, PB_ADOPTED), "still shared in the parent");
	cr_assert_eq(write(to_child[1], "B", 1), 1);
	st = wait_child(pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);

	/* released: an ordinary private copy */
	zd_adopt_release(r);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		CHILD_CHK(!bad_pat(m, 8 * PG, 81));
		CHILD_CHK(write(to_parent[1], "c", 1) == 1);
		CHILD_CHK(read(to_child[0], &c, 1) == 1);
		CHILD_CHK(!bad_pat(m, 8 * PG, 81));
		fill_pat(m, 8 * PG, 84);
		CHILD_CHK(write(to_parent[1], "d", 1) == 1);
		_exit(0);
	}
	cr_assert_eq(read(to_parent[0], &c, 1), 1);
	fill_pat(m, 8 * PG, 83);
	cr_assert_eq(write(to_child[1], "C", 1), 1);
	cr_assert_eq(read(to_parent[0], &c, 1), 1);
	st = wait_child(pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	assert_pat(m, 8 * PG, 83);
	free(heap);
	munmap(m, 8 * PG);
}


/*
 * fork() while another thread registers: the child gets each page either
 * absent (adopted by then) or as a private copy it can write (not yet).
 * Never a page left write-protected by a re-backing the child's copy of
 * the registering thread will not finish (a write to it would wait for
 * that thread forever).
 */
struct registrar {
	uint8_t *m;
	size_t len;
	_Atomic int stop;
	unsigned rounds;
};

static void *register_loop(void *arg)
{
	struct registrar *g = arg;

	while (!atomic_load(&g->stop)) {
		zd_adopt_release(acquire(g->m + PG, g->len - 2 * PG));
		g->rounds++;
	}
	return NULL;
}

Test(adopt, fork_while_registering)
{
	struct registrar g = { .len = 256 * PG };
	unsigned absent = 0, copied = 0;
	pthread_t tid;

	g.m = map_pages(256);
	fill_pat(g.m, g.len, 90);
	cr_assert_eq(pthread_create(&tid, NULL, register_loop, &g), 0);
	for (int i = 0; i < 100; i++) {
		uint8_t *page = g.m + 128 * PG;
		pid_t pid = fork();
		int st;

		cr_assert_geq(pid, 0);
		if (pid == 0) {
			enum page_backing b = page_backing(page);

			if (b == PB_UNMAPPED)
				_exit(10);
			if (b != PB_PRIVATE) {
				fprintf(stderr, "child: page %p is %s in the child\n", (void *)page,
					page_backing_name(b));
				/* a write waits for a window nobody will close */
				alarm(1);
			}
			page[0] ^= 1;
			_exit(b == PB_PRIVATE ? 11 : 12);
		}
		st = wait_child(pid);
		cr_assert(WIFEXITED(st) && (WEXITSTATUS(st) == 10 || WEXITSTATUS(st) == 11),
			  "fork %d: the child %s", i,
			  WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM
				  ? "hung writing a page write-protected at the fork"
				  : "found the page neither absent nor private");
		absent += WEXITSTATUS(st) == 10;
		copied += WEXITSTATUS(st) == 11;
	}
	atomic_store(&g.stop, 1);
	cr_assert_eq(pthread_join(tid, NULL), 0);
	fprintf(stderr, "fork_while_registering: %u rounds, children: %u absent, %u copied\n",
		g.rounds, absent, copied);
	assert_pat(g.m, g.len, 90);
	cr_assert(pages_are(g.m, g.len, PB_PRIVATE));
	munmap(g.m, g.len);
}

/*
 * A registration the kernel refuses: the process at vm.max_map_count but
 * for @spare mappings, so that the mmap, the mprotect split or the mremap
 * of a re-backing fails.  Whatever path it takes, the memory keeps its
 * bytes and stays writable; on cross-memory attach it says why.
 */
Test(adopt, kernel_refuses)
{
	enum { MAX_FILL = 70000 };
	uint8_t **fill, *m;
	unsigned n = 0, xma = 0;

#if defined(__SANITIZE_ADDRESS__)
	cr_skip_test("under ASan: the sanitizer maps memory of its own as it goes");
#endif
	fill = calloc(MAX_FILL, sizeof(*fill));
	m = map_pages(16);
	cr_assert_not_null(fill);
	fill_pat(m, 16 * PG, 91);
	/* single pages, alternately writable and not: they never merge */
	while (n < MAX_FILL) {
		fill[n] = mmap(NULL, PG, n % 2 ? PROT_READ : PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (fill[n] == MAP_FAILED)
			break;
		n++;
	}
	if (n == MAX_FILL)
		cr_skip_test("vm.max_map_count is above %d", MAX_FILL);
	for (unsigned spare = 0; spare < 24; spare++) {
		struct zd_adopt_rec *r;

		/* free @spare more slots than the last round */
		cr_assert_eq(munmap(fill[--n], PG), 0);
		r = acquire(m + 4 * PG + 100, 8 * PG);
		if (r->path == ZD_ADOPT_XMA) {
			cr_assert(r->why && r->why[0]);
			fprintf(stderr, "%u spare: %s\n", spare + 1, r->why);
			xma++;
		}
		assert_pat(m, 16 * PG, (uint8_t)(91 + spare));
		fill_pat(m, 16 * PG, (uint8_t)(92 + spare));   /* writable, every page */
		zd_adopt_release(r);
		assert_pat(m, 16 * PG, (uint8_t)(92 + spare));
	}
	cr_assert_gt(xma, 0, "the kernel never refused: the test proves nothing");
	while (n)
		munmap(fill[--n], PG);
	free(fill);
	munmap(m, 16 * PG);
}

/* ---- the consumer's own SIGSEGV handler ---- */

/* A consumer that catches faults on its own guard pages: its handler
 * opens the page and the access is retried. */
static uint8_t *guard;
static _Atomic unsigned guard_faults;

static void open_guard(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if ((uint8_t *)si->si_addr < guard || (uint8_t *)si->si_addr >= guard + PG)
		_exit(66);
	atomic_fetch_add(&guard_faults, 1);
	mprotect(guard, PG, PROT_READ | PROT_WRITE);
}

static void open_guard_plain(int sig)
{
	(void)sig;
	atomic_fetch_add(&guard_faults, 1);
	mprotect(guard, PG, PROT_READ | PROT_WRITE);
}

static void install_guard_handler(bool siginfo)
{
	struct sigaction sa = { 0 };

	if (siginfo) {
		sa.sa_sigaction = open_guard;
		sa.sa_flags = SA_SIGINFO;
	} else {
		sa.sa_handler = open_guard_plain;
	}
	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGSEGV, &sa, NULL), 0);
}

/* The consumer's handler (installed before the adoption file opened, or
 * after: each order, each kind of handler) still gets its own faults,
 * before and after registrations, and a registration still keeps every
 * write. */
static void guard_case(bool before, bool siginfo)
{
	uint8_t *m = map_pages(6);
	unsigned want = 0;

	guard = map_pages(1);
	atomic_store(&guard_faults, 0);
	if (before)
		install_guard_handler(siginfo);
	cr_assert_geq(zd_adopt_open(), 0);
	if (!before)
		install_guard_handler(siginfo);
	for (int i = 0; i < 3; i++) {
		struct zd_adopt_rec *r;

		cr_assert_eq(mprotect(guard, PG, PROT_NONE), 0);
		guard[i] = (uint8_t)i;                 /* faults once, retried */
		cr_assert_eq(atomic_load(&guard_faults), ++want);
		fill_pat(m, 6 * PG, (uint8_t)(100 + i));
		r = acquire_shared(m + PG, 4 * PG);
		assert_pat(m, 6 * PG, (uint8_t)(100 + i));
		cr_assert_eq(mprotect(guard, PG, PROT_NONE), 0);
		guard[i + 10] = 1;
		cr_assert_eq(atomic_load(&guard_faults), ++want);
		zd_adopt_release(r);
	}
	munmap(guard, PG);
	munmap(m, 6 * PG);
}

/* (adopt_env: these choose what runs before the file opens) */
Test(adopt_env, consumer_handler_before) { guard_case(true, true); }
Test(adopt_env, consumer_handler_after) { guard_case(false, true); }
Test(adopt_env, consumer_plain_handler_before) { guard_case(true, false); }
Test(adopt_env, consumer_plain_handler_after) { guard_case(false, false); }

/* ---- a write fault whose handler runs after another window ---- */

/*
 * A thread's write faults in the window of one re-backing (A), and its
 * SIGSEGV handler runs only after the window has moved on to another
 * range (B): what a thread preempted between the fault and its handler
 * sees on a busy machine.  Made deterministic here by a tracer process
 * that holds the thread in its signal-delivery stop (ptrace) while the
 * main thread adopts A, then B.  The fault is adoption's: the write must
 * be retried on A's new pages, never handed to the consumer's handler
 * (installed first here; with none, the process's default action).
 */
static _Atomic unsigned consumer_faults;
static _Atomic pid_t writer_tid;
static _Atomic uint64_t writer_rounds;
static _Atomic int writer_stop;

static void consumer_segv(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	/* a real consumer would abort here; count it and let it retry */
	atomic_fetch_add(&consumer_faults, 1);
}

static void *late_writer(void *arg)
{
	volatile uint64_t *w = arg;

	atomic_store(&writer_tid, (pid_t)gettid());
	while (!atomic_load(&writer_stop)) {
		*w = atomic_load(&writer_rounds) + 1;
		atomic_fetch_add(&writer_rounds, 1);
	}
	return NULL;
}

/* The tracer: holds @tid's first SIGSEGV until told, passes the rest on;
 * says 'S' (seized), 'F' (holding a fault) on @out, waits 'C' on @in. */
static void tracer(pid_t tid, int in, int out)
{
	bool held = false;
	char c;

	if (ptrace(PTRACE_SEIZE, tid, 0, 0) != 0) {
		c = 'E';
		(void)!write(out, &c, 1);
		_exit(0);
	}
	c = 'S';
	(void)!write(out, &c, 1);
	for (;;) {
		int st, sig = 0;

		if (waitpid(tid, &st, __WALL) != tid || !WIFSTOPPED(st))
			_exit(0);
		if (st >> 16 == 0)      /* a signal-delivery stop */
			sig = WSTOPSIG(st);
		if (sig == SIGSEGV && !held) {
			held = true;
			c = 'F';
			(void)!write(out, &c, 1);
			if (read(in, &c, 1) != 1)
				_exit(0);
		}
		ptrace(PTRACE_CONT, tid, 0, sig);
	}
}

Test(adopt_env, late_fault_after_another_window)
{
	enum { A_PAGES = 1024 };
	uint8_t *a = map_pages(A_PAGES + 1), *b = map_pages(4);
	volatile uint64_t *word = (volatile uint64_t *)(a + (A_PAGES - 1) * PG);
	struct sigaction sa = { .sa_sigaction = consumer_segv, .sa_flags = SA_SIGINFO };
	int to_tracer[2], from_tracer[2];
	struct zd_adopt_rec *ra = NULL, *rb;
	pthread_t tid;
	pid_t pid;
	char c = 0;

	sigemptyset(&sa.sa_mask);
	cr_assert_eq(sigaction(SIGSEGV, &sa, NULL), 0);
	cr_assert_geq(zd_adopt_open(), 0);
	fill_pat(b, 4 * PG, 1);
	cr_assert_eq(pthread_create(&tid, NULL, late_writer, (void *)word), 0);
	while (!atomic_load(&writer_tid) || atomic_load(&writer_rounds) < 1000)
		sched_yield();
	cr_assert_eq(pipe(to_tracer), 0);
	cr_assert_eq(pipe(from_tracer), 0);
	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		tracer(atomic_load(&writer_tid), to_tracer[0], from_tracer[1]);
	cr_assert_eq(read(from_tracer[0], &c, 1), 1);
	if (c != 'S') {
		atomic_store(&writer_stop, 1);
		pthread_join(tid, NULL);
		waitpid(pid, NULL, 0);
		cr_skip_test("ptrace is not allowed here");
	}
	/* A, until the writer faults in its window */
	for (int i = 0; i < 50 && c != 'F'; i++) {
		struct pollfd pf = { .fd = from_tracer[0], .events = POLLIN };

		ra = acquire_shared(a, A_PAGES * PG);
		if (poll(&pf, 1, 200) == 1 && read(from_tracer[0], &c, 1) == 1 && c == 'F')
			break;
		zd_adopt_release(ra);
	}
	if (c != 'F') {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		atomic_store(&writer_stop, 1);
		pthread_join(tid, NULL);
		cr_skip_test("the writer never wrote during a re-backing");
	}
	/* the window moves on to B; then the writer's handler runs */
	rb = acquire_shared(b, 4 * PG);
	cr_assert_eq(write(to_tracer[1], "C", 1), 1);
	{
		uint64_t r0 = atomic_load(&writer_rounds);

		while (atomic_load(&writer_rounds) < r0 + 1000)
			sched_yield();
	}
	atomic_store(&writer_stop, 1);
	cr_assert_eq(pthread_join(tid, NULL), 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	cr_assert_eq(atomic_load(&consumer_faults), 0,
		     "adoption's own write fault went to the consumer's SIGSEGV handler "
		     "(%u times): without one, the process's default action",
		     atomic_load(&consumer_faults));
	cr_assert_eq(*word, atomic_load(&writer_rounds));
	assert_pat(b, 4 * PG, 1);
	zd_adopt_release(rb);
	zd_adopt_release(ra);
	munmap(a, (A_PAGES + 1) * PG);
	munmap(b, 4 * PG);
}
