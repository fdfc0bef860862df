/*
 * What /proc/self/maps says backs a page, as a user checks adoption
 * (mem/zd_adopt.h) from outside: the adoption file ("/memfd:zdapl-adopt",
 * shared, file offset == address), private anonymous memory, nothing, or
 * something else; and how many mappings of some process's adoption file
 * sit elsewhere (a peer's windows).  Shared by tests/mem and tests/shm.
 */
#ifndef ADOPT_MAPS_TEST_H
#define ADOPT_MAPS_TEST_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADOPT_FILE_NAME "/memfd:zdapl-adopt"

enum page_backing {
	PB_UNMAPPED,
	PB_ADOPTED,     /* the adoption file, rw-s, at offset == address */
	PB_PRIVATE,     /* private anonymous read-write */
	PB_OTHER,
};

static inline const char *page_backing_name(enum page_backing b)
{
	static const char *const names[] = { "unmapped", "adopted", "private", "other" };

	return names[b];
}

struct maps_line {
	uint64_t lo, hi, off, ino;
	char perms[8];
	char name[256];
};

/* Calls @fn on every line of /proc/self/maps until it returns false. */
static inline void maps_each(bool (*fn)(void *arg, const struct maps_line *l), void *arg)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char *line = NULL;
	size_t cap = 0;

	if (!f)
		return;
	while (getline(&line, &cap, f) > 0) {
		struct maps_line l = { 0 };
		unsigned maj, min;
		int used = 0;
		char *name;

		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64 "%n",
			   &l.lo, &l.hi, l.perms, &l.off, &maj, &min, &l.ino, &used) < 7)
			continue;
		for (name = line + used; *name == ' '; name++)
			;
		name[strcspn(name, "\n")] = '\0';
		snprintf(l.name, sizeof(l.name), "%s", name);
		if (!fn(arg, &l))
			break;
	}
	free(line);
	fclose(f);
}

static inline bool is_adopt_file(const struct maps_line *l)
{
	return strncmp(l->name, ADOPT_FILE_NAME, strlen(ADOPT_FILE_NAME)) == 0;
}

struct page_query {
	uint64_t addr;
	enum page_backing b;
};

static inline bool page_query_fn(void *arg, const struct maps_line *l)
{
	struct page_query *q = arg;

	if (q->addr < l->lo || q->addr >= l->hi)
		return true;
	if (strcmp(l->perms, "rw-s") == 0 && is_adopt_file(l) && l->off + (q->addr - l->lo) == q->addr)
		q->b = PB_ADOPTED;
	else if (strcmp(l->perms, "rw-p") == 0 && l->ino == 0 &&
		 (l->name[0] == '\0' || strcmp(l->name, "[heap]") == 0 ||
		  strncmp(l->name, "[anon:", 6) == 0))
		q->b = PB_PRIVATE;
	else
		q->b = PB_OTHER;
	return false;
}

static inline enum page_backing page_backing(const void *addr)
{
	struct page_query q = { .addr = (uintptr_t)addr & ~(uint64_t)4095, .b = PB_UNMAPPED };

	maps_each(page_query_fn, &q);
	return q.b;
}

/* Whether every page of [addr, addr + len) is backed as @b; prints the
 * first that is not. */
static inline bool pages_are(const void *addr, size_t len, enum page_backing b)
{
	uintptr_t lo = (uintptr_t)addr & ~(uintptr_t)4095;

	for (uintptr_t a = lo; a < (uintptr_t)addr + len; a += 4096) {
		enum page_backing got = page_backing((void *)a);

		if (got != b) {
			fprintf(stderr, "page %#lx is %s, expected %s\n", (unsigned long)a,
				page_backing_name(got), page_backing_name(b));
			return false;
		}
	}
	return true;
}

struct adopt_count {
	unsigned own, elsewhere;
};

static inline bool adopt_count_fn(void *arg, const struct maps_line *l)
{
	struct adopt_count *c = arg;

	if (is_adopt_file(l)) {
		if (l->off == l->lo)
			c->own++;
		else
			c->elsewhere++;
	}
	return true;
}

/* Mappings of an adoption file: at offset == address (this process's
 * adopted pages) and elsewhere (windows of a peer's file). */
static inline struct adopt_count adopt_mappings(void)
{
	struct adopt_count c = { 0, 0 };

	maps_each(adopt_count_fn, &c);
	return c;
}

#endif
