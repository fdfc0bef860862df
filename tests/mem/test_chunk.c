/* SPDX-License-Identifier: BSD-3-Clause */
/* Chunk registry: memfd mappings, lookups, listeners. */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mem/zd_chunk.h"

#define MiB ((size_t)1 << 20)

Test(chunk, create_map_share)
{
	struct zd_chunk_ref c, l;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char *p, *q;

	cr_assert_eq(zd_chunk_create(MiB + 1, 0, 0, &c), 0);
	cr_assert_eq(c.len, MiB + page, "length rounds up to pages");
	cr_assert_eq((uintptr_t)c.base % page, 0);
	cr_assert_geq(c.fd, 0);
	cr_assert_neq(c.id, 0);
	cr_assert_eq(c.flags, 0);

	/* A second mapping of the memfd (what a peer does) sees the same bytes. */
	p = c.base;
	memset(p, 0xa5, c.len);
	q = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, c.fd,
		 (off_t)(c.len - page));
	cr_assert_neq(q, MAP_FAILED);
	cr_assert_eq(q[7], 0xa5);
	q[9] = 0x3c;
	cr_assert_eq(p[c.len - page + 9], 0x3c);
	munmap(q, page);

	/* Sealed: a peer cannot shrink (SIGBUS for us) or grow it. */
	cr_assert_neq(ftruncate(c.fd, 0), 0);
	cr_assert_eq(errno, EPERM);

	cr_assert(zd_chunk_lookup(p + 123, 77, &l));
	cr_assert_eq(l.base, c.base);
	cr_assert_eq(l.offset, 123);
	cr_assert_eq(l.fd, c.fd);
	cr_assert_eq(l.id, c.id);
	cr_assert(zd_chunk_lookup(p + c.len - 1, 0, &l), "len 0 counts as 1");
	cr_assert(zd_chunk_lookup(p, c.len, &l));
	cr_assert_not(zd_chunk_lookup(p, c.len + 1, &l), "range past the end");
	cr_assert_not(zd_chunk_lookup(p + c.len, 1, &l));
	cr_assert_not(zd_chunk_lookup(p - 1, 1, &l));

	cr_assert_eq(zd_chunk_destroy(c.base), 0);
	cr_assert_not(zd_chunk_lookup(p, 1, &l));
	cr_assert_eq(zd_chunk_destroy(c.base), -ENOENT);
}

Test(chunk, bad_args)
{
	struct zd_chunk_ref c;

	cr_assert_eq(zd_chunk_create(0, 0, 0, &c), -EINVAL);
	cr_assert_eq(zd_chunk_create(MiB, 3 * 4096, 0, &c), -EINVAL);
	cr_assert_eq(zd_chunk_create(SIZE_MAX, 0, 0, &c), -EINVAL);
	cr_assert_eq(zd_chunk_destroy(&c), -ENOENT);
}

Test(chunk, aligned_and_many)
{
	struct zd_chunk_ref c[32], l;
	size_t n, bytes, i;

	for (i = 0; i < 32; i++) {
		cr_assert_eq(zd_chunk_create(MiB, 16 * MiB, 0, &c[i]), 0);
		cr_assert_eq((uintptr_t)c[i].base % (16 * MiB), 0);
	}
	zd_chunk_usage(&n, &bytes);
	cr_assert_eq(n, 32);
	cr_assert_eq(bytes, 32 * MiB);
	for (i = 0; i < 32; i++) {
		cr_assert(zd_chunk_lookup((char *)c[i].base + i, 1, &l));
		cr_assert_eq(l.id, c[i].id);
		cr_assert_eq(l.offset, i);
	}
	/* Ids are never reused. */
	cr_assert_eq(zd_chunk_destroy(c[5].base), 0);
	cr_assert_eq(zd_chunk_create(MiB, 0, 0, &l), 0);
	for (i = 0; i < 32; i++)
		cr_assert_neq(l.id, c[i].id);
	for (i = 0; i < 32; i++)
		if (i != 5)
			cr_assert_eq(zd_chunk_destroy(c[i].base), 0);
	cr_assert_eq(zd_chunk_destroy(l.base), 0);
	zd_chunk_usage(&n, &bytes);
	cr_assert_eq(n, 0);
	cr_assert_eq(bytes, 0);
}

Test(chunk, pool_chunks_stay)
{
	struct zd_chunk_ref c;

	cr_assert_eq(zd_chunk_create(MiB, 0, ZD_CHUNK_F_POOL, &c), 0);
	cr_assert_eq(zd_chunk_destroy(c.base), -EBUSY);
}

/* A listener recording what it has registered, like a device would. */
struct rec {
	uint32_t live[64]; /* chunk ids currently registered */
	int      nlive;
	int      adds, dels;
	uint32_t refuse_id; /* refuse this chunk id (0: none) */
	int      refuse_after; /* refuse once this many adds happened (-1: never) */
};

static int rec_find(struct rec *r, uint32_t id)
{
	for (int i = 0; i < r->nlive; i++)
		if (r->live[i] == id)
			return i;
	return -1;
}

static int rec_cb(void *arg, enum zd_chunk_event ev,
		  const struct zd_chunk_ref *c)
{
	struct rec *r = arg;
	int at;

	cr_assert_neq(c->base, NULL);
	cr_assert_eq(c->offset, 0);
	if (ev == ZD_CHUNK_ADD) {
		if (c->id == r->refuse_id ||
		    (r->refuse_after >= 0 && r->adds >= r->refuse_after))
			return -ENOSPC;
		cr_assert_eq(rec_find(r, c->id), -1, "added twice");
		r->live[r->nlive++] = c->id;
		r->adds++;
	} else {
		at = rec_find(r, c->id);
		cr_assert_neq(at, -1, "deleted without add");
		r->live[at] = r->live[--r->nlive];
		r->dels++;
	}
	return 0;
}

Test(chunk, listeners)
{
	struct rec a = { .refuse_after = -1 }, b = { .refuse_after = -1 };
	struct zd_chunk_ref c1, c2, c3;

	cr_assert_eq(zd_chunk_create(MiB, 0, 0, &c1), 0);
	/* Existing chunks are announced on add. */
	cr_assert_eq(zd_chunk_add_listener(rec_cb, &a), 0);
	cr_assert_eq(a.nlive, 1);
	cr_assert_eq(a.live[0], c1.id);
	cr_assert_eq(zd_chunk_add_listener(rec_cb, &a), -EEXIST);

	/* ...and new ones before create returns. */
	cr_assert_eq(zd_chunk_create(MiB, 0, 0, &c2), 0);
	cr_assert_eq(a.nlive, 2);
	cr_assert_geq(rec_find(&a, c2.id), 0);

	/* A refusing listener fails the create; the others are rolled back. */
	cr_assert_eq(zd_chunk_add_listener(rec_cb, &b), 0);
	cr_assert_eq(b.nlive, 2);
	b.refuse_after = b.adds;
	cr_assert_eq(zd_chunk_create(MiB, 0, 0, &c3), -ENOSPC);
	cr_assert_eq(a.nlive, 2);
	cr_assert_eq(a.adds - a.dels, 2);
	b.refuse_after = -1;

	/* Destroy unregisters everywhere. */
	cr_assert_eq(zd_chunk_destroy(c1.base), 0);
	cr_assert_eq(rec_find(&a, c1.id), -1);
	cr_assert_eq(rec_find(&b, c1.id), -1);

	/* Removing a listener drops its registrations; it hears no more. */
	cr_assert_eq(zd_chunk_remove_listener(rec_cb, &a), 0);
	cr_assert_eq(a.nlive, 0);
	cr_assert_eq(zd_chunk_remove_listener(rec_cb, &a), -ENOENT);
	cr_assert_eq(zd_chunk_create(MiB, 0, 0, &c3), 0);
	cr_assert_eq(a.adds, 3);
	cr_assert_eq(b.nlive, 2);

	/* Refusing an existing chunk on add: rolled back, not added. */
	a = (struct rec){ .refuse_id = c3.id, .refuse_after = -1 };
	cr_assert_eq(zd_chunk_add_listener(rec_cb, &a), -ENOSPC);
	cr_assert_eq(a.nlive, 0);
	cr_assert_eq(zd_chunk_remove_listener(rec_cb, &a), -ENOENT);

	cr_assert_eq(zd_chunk_remove_listener(rec_cb, &b), 0);
	cr_assert_eq(b.nlive, 0);
	cr_assert_eq(zd_chunk_add_listener(NULL, NULL), -EINVAL);
}

/* Lookups of a stable chunk never fail while other chunks come and go. */
static struct zd_chunk_ref stable;
static atomic_bool stop;
static atomic_uint errors; /* Criterion asserts belong to the test thread */

static void *lookup_loop(void *arg)
{
	struct zd_chunk_ref l;
	unsigned long n = 0;
	size_t off;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		off = (n * 4099) % stable.len;
		if (!zd_chunk_lookup((char *)stable.base + off, 1, &l) ||
		    l.id != stable.id || l.offset != off)
			atomic_fetch_add(&errors, 1);
		n++;
	}
	return NULL;
}

Test(chunk, lookup_races_updates)
{
	pthread_t th[3];
	struct zd_chunk_ref c;
	int i;

	cr_assert_eq(zd_chunk_create(4 * MiB, 0, 0, &stable), 0);
	for (i = 0; i < 3; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, lookup_loop, NULL), 0);
	for (i = 0; i < 300; i++) {
		cr_assert_eq(zd_chunk_create(64 * 1024, 0, 0, &c), 0);
		cr_assert_eq(zd_chunk_destroy(c.base), 0);
	}
	atomic_store(&stop, true);
	for (i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(atomic_load(&errors), 0);
}
