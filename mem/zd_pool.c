/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Registered pool: one private jemalloc arena over memfd chunks.  See
 * zd_pool.h for the policy; this file says why.
 *
 * jemalloc is zdapl's private static copy (mem/jemalloc/build.sh): symbols
 * zd_je_*, hidden, global-dynamic TLS, so libzdapl stays dlopen-able and never
 * interposes the application's malloc.
 */
#include "zd_pool.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jemalloc/jemalloc.h>
#include <zdapl/zdapl.h>

#define ZD_POOL_HUGEPAGE      ((size_t)2 << 20)
#define ZD_POOL_CHUNK_DEFAULT ((size_t)64 << 20)

/* A pool chunk that still has room: carve from bump up to end. */
struct zd_pool_room {
	uintptr_t bump;
	uintptr_t end;
};

/* The chunks one arena carves from (under zd_pool.lock). */
struct zd_pool_src {
	uint32_t        flags;       /* of its chunks (ZD_CHUNK_F_*) */
	struct zd_pool_room *room;   /* oldest first: fill old chunks first */
	size_t          nroom, room_cap;
	size_t          nchunks, mapped, carved;
};

static struct {
	pthread_once_t  once;
	int             err;         /* zd_pool_init() result */
	unsigned        arena;
	/* zdapl's own queues (zd_pool_queue_alloc): another arena, other
	 * chunks, never passed to a peer; UINT_MAX: none (queues then share
	 * the pool's chunks). */
	unsigned        qarena;
	size_t          page;
	size_t          chunk_size;
	pthread_key_t   tc_key;      /* destroys a thread's tcache at exit */
	bool            ready;       /* zd_pool_do_init() made the arenas */

	/*
	 * A fork() child whose arenas are the parent's: their extents lie in
	 * chunks that are not mapped here (MADV_DONTFORK).  Set by the atfork
	 * child handler, cleared once the child has arenas of its own
	 * (zd_pool_fork_renew; not in the handler: jemalloc must not be
	 * re-entered there).
	 */
	atomic_bool     forked;
	pthread_mutex_t renew_lock;  /* one renewal; outside lock (arena creation) */

	pthread_mutex_t lock;        /* the carving state below */
	struct zd_pool_src main, queue;

	/* The consumer's calls, counted for dat_ib_query_counters: relaxed
	 * atomics, any thread (not a hot-path allocator: zdapl.h). */
	_Atomic uint64_t allocs, alloc_bytes, frees;
} zd_pool = {
	.once = PTHREAD_ONCE_INIT,
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.renew_lock = PTHREAD_MUTEX_INITIALIZER,
	.qarena = UINT_MAX,
	.main.flags = ZD_CHUNK_F_POOL,
	.queue.flags = ZD_CHUNK_F_POOL | ZD_CHUNK_F_QUEUE,
};

/*
 * This thread's explicit tcache index + 1; 0: none yet; UINT_MAX: none ever
 * (thread exiting, or jemalloc's tcache table is full).  The automatic tcache
 * is off (tcache:false): it mixes arenas, and a cached region of another
 * arena would escape the registered chunks.
 */
static __thread unsigned zd_pool_tc;

/* --- carving chunks (extent hooks; under zd_pool.lock) --------------------- */

/* Take size bytes aligned to align from the first chunk with room; new_addr
 * (jemalloc growing an extent in place) only matches a chunk's bump pointer. */
static void *zd_pool_carve(struct zd_pool_src *s, void *new_addr, size_t size, size_t align)
{
	struct zd_pool_room *r;
	uintptr_t at;
	size_t i;

	for (i = 0; i < s->nroom; i++) {
		r = &s->room[i];
		if (new_addr) {
			at = (uintptr_t)new_addr;
			if (at != r->bump)
				continue;
		} else {
			at = (r->bump + align - 1) & ~(uintptr_t)(align - 1);
		}
		if (at < r->bump || at > r->end || size > r->end - at)
			continue;
		s->carved += at + size - r->bump;
		r->bump = at + size;
		/* Full: stop scanning it. */
		if (r->end - r->bump < zd_pool.page) {
			s->nroom--;
			memmove(r, r + 1, (s->nroom - i) * sizeof(*r));
		}
		return (void *)at;
	}
	return NULL;
}

/* Add a chunk that fits size at align: default size, or its own if bigger. */
static int zd_pool_grow(struct zd_pool_src *s, size_t size, size_t align)
{
	struct zd_chunk_ref c;
	struct zd_pool_room *room;
	size_t cap;
	int rc;

	if (s->nroom == s->room_cap) {
		cap = s->room_cap ? 2 * s->room_cap : 16;
		room = realloc(s->room, cap * sizeof(*room));
		if (!room)
			return -ENOMEM;
		s->room = room;
		s->room_cap = cap;
	}
	/* 2 MiB-aligned bases let shmem huge pages back chunks where enabled;
	 * a larger alignment is met by the base itself, with no gap. */
	rc = zd_chunk_create(size > zd_pool.chunk_size ? size : zd_pool.chunk_size,
			     align > ZD_POOL_HUGEPAGE ? align : ZD_POOL_HUGEPAGE,
			     s->flags, &c);
	if (rc)
		return rc;
	s->room[s->nroom++] = (struct zd_pool_room){
		.bump = (uintptr_t)c.base,
		.end = (uintptr_t)c.base + c.len,
	};
	s->nchunks++;
	s->mapped += c.len;
	return 0;
}

static void *zd_pool_extent_alloc(extent_hooks_t *hooks, void *new_addr,
				  size_t size, size_t align, bool *zero,
				  bool *commit, unsigned arena_ind)
{
	struct zd_pool_src *s = arena_ind == zd_pool.qarena ? &zd_pool.queue : &zd_pool.main;
	void *p;

	pthread_mutex_lock(&zd_pool.lock);
	p = zd_pool_carve(s, new_addr, size, align);
	if (!p && !new_addr && !zd_pool_grow(s, size, align))
		p = zd_pool_carve(s, NULL, size, align);
	pthread_mutex_unlock(&zd_pool.lock);
	if (!p)
		return NULL;
	/* Never handed out before: fresh memfd pages, zero and resident-able. */
	*zero = true;
	*commit = true;
	return p;
}

static bool zd_pool_extent_split(extent_hooks_t *hooks, void *addr,
				 size_t size, size_t size_a, size_t size_b,
				 bool committed, unsigned arena_ind)
{
	return false; /* any split stays inside its chunk */
}

static bool zd_pool_extent_merge(extent_hooks_t *hooks, void *addr_a,
				 size_t size_a, void *addr_b, size_t size_b,
				 bool committed, unsigned arena_ind)
{
	struct zd_chunk_ref c;

	/*
	 * Chunks may be adjacent in the address space, but each is its own
	 * memfd and registration: an extent spanning two could not be shared
	 * or registered as one.  true = refuse.
	 */
	if ((uintptr_t)addr_a + size_a != (uintptr_t)addr_b)
		return true;
	return !zd_chunk_lookup(addr_a, size_a + size_b, &c);
}

/*
 * Absent hooks are jemalloc's "cannot": dalloc (the extent is retained and
 * reused, still mapped and registered), destroy (only at arena destruction,
 * which never happens), commit/decommit (always committed) and both purges
 * (the pages stay resident: a device may be reading them, and re-faulting
 * registered memory would only be slower).
 */
static extent_hooks_t zd_pool_hooks = {
	.alloc = zd_pool_extent_alloc,
	.split = zd_pool_extent_split,
	.merge = zd_pool_extent_merge,
};

/* --- per-thread explicit tcache ----------------------------------------- */

static void zd_pool_tcache_exit(void *v)
{
	unsigned ind = (unsigned)((uintptr_t)v - 1);

	zd_pool_tc = UINT_MAX;
	zd_je_mallctl("tcache.destroy", NULL, NULL, &ind, sizeof(ind));
}

static int zd_pool_tcache_slow(void)
{
	unsigned ind;
	size_t sz = sizeof(ind);

	if (zd_pool_tc == UINT_MAX)
		return MALLOCX_TCACHE_NONE;
	if (zd_je_mallctl("tcache.create", &ind, &sz, NULL, 0))
		goto err;
	if (pthread_setspecific(zd_pool.tc_key, (void *)((uintptr_t)ind + 1))) {
		zd_je_mallctl("tcache.destroy", NULL, NULL, &ind, sizeof(ind));
		goto err;
	}
	zd_pool_tc = ind + 1;
	return MALLOCX_TCACHE(ind);
err:
	zd_pool_tc = UINT_MAX; /* do without rather than retry on every call */
	return MALLOCX_TCACHE_NONE;
}

static inline int zd_pool_tcache(void)
{
	unsigned tc = zd_pool_tc;

	if (__builtin_expect(tc - 1 < UINT_MAX - 1, 1))
		return MALLOCX_TCACHE(tc - 1);
	return zd_pool_tcache_slow();
}

/* --- setup ----------------------------------------------------------------- */

static size_t zd_pool_env_chunk_size(void)
{
	const char *s = getenv("ZDAPL_MEM_CHUNK_SIZE");
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (!s || !*s)
		return ZD_POOL_CHUNK_DEFAULT;
	errno = 0;
	v = strtoull(s, &end, 0);
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	}
	if (errno || end == s || *end || v > (SIZE_MAX >> 1) >> shift) {
		fprintf(stderr, "zdapl: ignoring bad ZDAPL_MEM_CHUNK_SIZE=%s\n", s);
		return ZD_POOL_CHUNK_DEFAULT;
	}
	v <<= shift;
	if (v < ZD_POOL_HUGEPAGE)
		v = ZD_POOL_HUGEPAGE;
	return ((size_t)v + ZD_POOL_HUGEPAGE - 1) & ~(ZD_POOL_HUGEPAGE - 1);
}

/* Mirrors jemalloc 5.3's arena_config_t; a layout change makes
 * experimental.arenas_create_ext fail (size check), never misbehave. */
struct zd_je_arena_config {
	extent_hooks_t *extent_hooks;
	bool            metadata_use_hooks;
};

static int zd_pool_arena_set(unsigned arena, const char *what, void *val,
			     size_t len)
{
	char name[64];

	snprintf(name, sizeof(name), "arena.%u.%s", arena, what);
	return zd_je_mallctl(name, NULL, NULL, val, len);
}

/* A jemalloc arena over chunks (zd_pool_hooks): 0 or a jemalloc error. */
static int zd_pool_arena_new(unsigned *out)
{
	struct zd_je_arena_config cfg = { &zd_pool_hooks, false };
	extent_hooks_t *hooks = &zd_pool_hooks;
	ssize_t never = -1;
	size_t sz, limit;
	unsigned arena;
	int rc;

	/*
	 * Keep jemalloc's own metadata for the arena (extent structs, slab
	 * bitmaps...) out of the chunks: peers can write chunk memory.
	 */
	sz = sizeof(arena);
	rc = zd_je_mallctl("experimental.arenas_create_ext", &arena, &sz,
			   &cfg, sizeof(cfg));
	if (rc) {
		sz = sizeof(arena);
		rc = zd_je_mallctl("arenas.create", &arena, &sz, &hooks,
				   sizeof(hooks));
	}
	if (rc)
		return rc;
	/* No decay: purging is impossible anyway, and dirty extents are the
	 * cheapest to reuse. */
	if ((rc = zd_pool_arena_set(arena, "dirty_decay_ms", &never, sizeof(never))) ||
	    (rc = zd_pool_arena_set(arena, "muzzy_decay_ms", &never, sizeof(never))))
		return rc;
	/*
	 * jemalloc grows its retained memory by ever larger requests; cap them
	 * at a quarter chunk so chunks fill up before new ones are made (bigger
	 * single allocations still get what they need).  Best effort.
	 */
	limit = zd_pool.chunk_size / 4;
	if (limit < ZD_POOL_HUGEPAGE)
		limit = ZD_POOL_HUGEPAGE;
	(void)zd_pool_arena_set(arena, "retain_grow_limit", &limit, sizeof(limit));
	*out = arena;
	return 0;
}

static void zd_pool_do_init(void)
{
	unsigned arena, qarena;
	int rc;

	zd_pool.page = (size_t)sysconf(_SC_PAGESIZE);
	zd_pool.chunk_size = zd_pool_env_chunk_size();

	rc = pthread_key_create(&zd_pool.tc_key, zd_pool_tcache_exit);
	if (rc)
		goto err;
	rc = zd_pool_arena_new(&arena);
	if (rc)
		goto err_key;
	zd_pool.arena = arena;
	/* Best effort: without it queues take private memory (zd_qmem.h). */
	if (zd_pool_arena_new(&qarena) == 0)
		zd_pool.qarena = qarena;
	zd_pool.ready = true;
	return;

err_key:
	pthread_key_delete(zd_pool.tc_key);
err:
	zd_pool.err = rc > 0 ? -rc : -EAGAIN;
}

/* --- fork() ---------------------------------------------------------------- */

/*
 * The child of a process that had arenas: only flag it (single-threaded,
 * no jemalloc here).  The calling thread's tcache caches the parent's
 * regions: forgotten, not destroyed (that would flush them into the old
 * arenas), like the arenas themselves: their metadata is ordinary memory,
 * a copy-on-write leak.  The chunks are zd_chunk.c's child handler's.
 */
static void zd_pool_atfork_child(void)
{
	pthread_mutex_init(&zd_pool.lock, NULL);       /* another thread's, maybe */
	pthread_mutex_init(&zd_pool.renew_lock, NULL);
	if (!zd_pool.ready)
		return; /* never used: the child's first use makes its own */
	if (zd_pool_tc && zd_pool_tc != UINT_MAX)
		pthread_setspecific(zd_pool.tc_key, NULL);
	zd_pool_tc = 0;
	/* relaxed: the child has one thread until this returns */
	atomic_store_explicit(&zd_pool.forked, true, memory_order_relaxed);
}

__attribute__((constructor)) static void zd_pool_register_atfork(void)
{
	pthread_atfork(NULL, NULL, zd_pool_atfork_child);
}

/* The child's first use: arenas of its own, carving only chunks of its own. */
static int zd_pool_fork_renew(void)
{
	unsigned arena, qarena = UINT_MAX;
	int rc = 0;

	pthread_mutex_lock(&zd_pool.renew_lock);
	if (!atomic_load_explicit(&zd_pool.forked, memory_order_relaxed))
		goto out; /* another thread did it (renew_lock orders us after it) */
	rc = zd_pool_arena_new(&arena);
	if (rc) {
		rc = rc > 0 ? -rc : -EAGAIN;
		goto out; /* still forked: the next use tries again */
	}
	if (zd_pool_arena_new(&qarena))
		qarena = UINT_MAX;
	pthread_mutex_lock(&zd_pool.lock);
	/* The parent's rooms are in chunks the child does not have. */
	free(zd_pool.main.room);
	free(zd_pool.queue.room);
	zd_pool.main = (struct zd_pool_src){ .flags = zd_pool.main.flags };
	zd_pool.queue = (struct zd_pool_src){ .flags = zd_pool.queue.flags };
	zd_pool.arena = arena;
	zd_pool.qarena = qarena;
	pthread_mutex_unlock(&zd_pool.lock);
	/* release: pairs with zd_pool_init's acquire load; whoever sees the
	 * flag clear sees the new arena indexes */
	atomic_store_explicit(&zd_pool.forked, false, memory_order_release);
out:
	pthread_mutex_unlock(&zd_pool.renew_lock);
	return rc;
}

int zd_pool_init(void)
{
	pthread_once(&zd_pool.once, zd_pool_do_init);
	/* acquire: pairs with zd_pool_fork_renew's release store; one
	 * predictable branch, taken once in a fork() child */
	if (__builtin_expect(atomic_load_explicit(&zd_pool.forked, memory_order_acquire), 0))
		return zd_pool_fork_renew();
	return zd_pool.err;
}

/* --- internal API --------------------------------------------------------- */

void *zd_pool_alloc(size_t size, size_t align)
{
	if (__builtin_expect(zd_pool_init(), 0))
		return NULL;
	if (!size)
		size = 1; /* mallocx(0) is undefined */
	if (align < ZD_POOL_MIN_ALIGN)
		align = ZD_POOL_MIN_ALIGN;
	if (align & (align - 1))
		return NULL;
	return zd_je_mallocx(size, MALLOCX_ARENA(zd_pool.arena) |
				   MALLOCX_LG_ALIGN(__builtin_ctzl(align)) |
				   zd_pool_tcache());
}

void zd_pool_free(void *p)
{
	if (p)
		zd_je_dallocx(p, zd_pool_tcache());
}

void *zd_pool_queue_alloc(size_t size, size_t align)
{
	if (__builtin_expect(zd_pool_init(), 0) || zd_pool.qarena == UINT_MAX)
		return NULL;
	if (!size)
		size = 1;
	if (align < ZD_POOL_MIN_ALIGN)
		align = ZD_POOL_MIN_ALIGN;
	if (align & (align - 1))
		return NULL;
	/* No tcache: a thread's cache serves one arena's regions to any
	 * other's allocations (queue memory must never become pool memory
	 * a peer maps, nor the reverse). */
	return zd_je_mallocx(size, MALLOCX_ARENA(zd_pool.qarena) |
				   MALLOCX_LG_ALIGN(__builtin_ctzl(align)) | MALLOCX_TCACHE_NONE);
}

void zd_pool_queue_free(void *p)
{
	if (p)
		zd_je_dallocx(p, MALLOCX_TCACHE_NONE);
}

bool zd_pool_inherited(const void *p)
{
	return zd_chunk_was_inherited(p);
}

size_t zd_pool_usable_size(const void *p)
{
	return zd_je_sallocx(p, 0);
}

bool zd_pool_lookup(const void *addr, size_t len, struct zd_chunk_ref *out)
{
	struct zd_chunk_ref c;

	if (!zd_chunk_lookup(addr, len, &c) || !(c.flags & ZD_CHUNK_F_POOL))
		return false;
	*out = c;
	return true;
}

void zd_pool_get_stats(struct zd_pool_stats *st)
{
	pthread_mutex_lock(&zd_pool.lock);
	st->chunk_size = zd_pool.chunk_size;
	st->nchunks = zd_pool.main.nchunks;
	st->mapped = zd_pool.main.mapped;
	st->carved = zd_pool.main.carved;
	pthread_mutex_unlock(&zd_pool.lock);
	st->allocs = atomic_load_explicit(&zd_pool.allocs, memory_order_relaxed);
	st->alloc_bytes = atomic_load_explicit(&zd_pool.alloc_bytes, memory_order_relaxed);
	st->frees = atomic_load_explicit(&zd_pool.frees, memory_order_relaxed);
}

/* --- public API ------------------------------------------------------------ */

void *zdapl_mem_alloc_aligned(size_t size, size_t align)
{
	void *p;

	if (!align || (align & (align - 1))) {
		errno = EINVAL;
		return NULL;
	}
	p = zd_pool_alloc(size, align);
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	atomic_fetch_add_explicit(&zd_pool.allocs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&zd_pool.alloc_bytes, size, memory_order_relaxed);
	return p;
}

void *zdapl_mem_alloc(size_t size)
{
	if (zd_pool_init()) {
		errno = ENOMEM;
		return NULL;
	}
	return zdapl_mem_alloc_aligned(size, size >= zd_pool.page ?
					     zd_pool.page : ZD_POOL_MIN_ALIGN);
}

void zdapl_mem_free(void *p)
{
	static atomic_uint nwarn;
	struct zd_chunk_ref c;
	unsigned n;

	if (!p)
		return;
	/* Every pool allocation is cache-line aligned and inside a pool chunk;
	 * anything else would corrupt jemalloc (or crash it): refuse. */
	if (!((uintptr_t)p & (ZD_POOL_MIN_ALIGN - 1)) && zd_pool_lookup(p, 1, &c)) {
		zd_pool_free(p);
		atomic_fetch_add_explicit(&zd_pool.frees, 1, memory_order_relaxed);
		return;
	}
	/* A fork() child's free of its parent's memory: not here, nothing
	 * to give back (the parent's pool keeps it). */
	if (zd_chunk_was_inherited(p))
		return;
	n = atomic_fetch_add_explicit(&nwarn, 1, memory_order_relaxed);
	if (n < 16)
		fprintf(stderr, "zdapl: zdapl_mem_free(%p): not zdapl pool memory, ignored%s\n",
			p, n == 15 ? " (further such warnings suppressed)" : "");
}
