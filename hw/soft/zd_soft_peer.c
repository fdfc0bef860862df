/*
 * Peers of the software devices (zd_soft_peer.h): attachment (a pidfd,
 * which tells whether it lives), the mapping of the peer's main region, and
 * the lazily made mappings of its memfd chunks.
 *
 * Costs: same process: the address itself; a target in a published chunk
 * of the peer: one fd exchange (zd_soft_fdx.h) + mmap on the first touch
 * of each chunk, then a pointer add; anything else: cross-memory attach
 * per access.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hw/soft/zd_soft_fdx.h"
#include "hw/soft/zd_soft_peer.h"
#include "mem/zd_adopt.h"

/* A chunk mapping replaced (the peer reused the slot) while another thread
 * may still copy through it: unmapped when the peer goes. */
struct zd_soft_retired {
	struct zd_soft_retired *next;
	void *base;
	size_t len;
};

/* Bytes window @k maps: two windows' worth, within the file. */
static size_t window_len(uint64_t k)
{
	uint64_t off = k << ZD_SOFT_WIN_SHIFT, len = 2ull << ZD_SOFT_WIN_SHIFT;

	return (size_t)(ZD_ADOPT_SPAN - off < len ? ZD_ADOPT_SPAN - off : len);
}

static int peer_setup(struct zd_soft_peer *p, uint32_t nchunks)
{
	p->adopt_fd = p->adopt_peer_fd = -1;
	p->nchunks = nchunks;
	p->maps = calloc(nchunks ? nchunks : 1, sizeof(*p->maps));
	if (!p->maps)
		return -ENOMEM;
	p->refs = 1;
	pthread_mutex_init(&p->map_lock, NULL);
	return 0;
}

static void peer_unmap_chunks(struct zd_soft_peer *p)
{
	for (uint32_t i = 0; i < p->nchunks; i++)
		if (p->maps[i].base)
			munmap(p->maps[i].base, p->maps[i].len);
	while (p->retired) {
		struct zd_soft_retired *r = p->retired;

		p->retired = r->next;
		munmap(r->base, r->len);
		free(r);
	}
	for (uint32_t d = 0; d < ZD_SOFT_WIN_DIRS; d++) {
		struct zd_soft_win_leaf *leaf = p->win[d];

		for (uint32_t i = 0; leaf && i < (1u << ZD_SOFT_WIN_LEAF_BITS); i++)
			if (leaf->base[i])
				munmap(leaf->base[i],
				       window_len((uint64_t)d << ZD_SOFT_WIN_LEAF_BITS | i));
		free(leaf);
		p->win[d] = NULL;
	}
	free(p->maps);
	p->maps = NULL;
	if (p->adopt_fd >= 0)
		close(p->adopt_fd);
	p->adopt_fd = -1;
	pthread_mutex_destroy(&p->map_lock);
}

/* Yama's ptrace_scope (0 where there is no Yama), read once. */
static int yama_scope(void)
{
	static int scope = -1;
	int v = 0;
	FILE *f;

	if (__atomic_load_n(&scope, __ATOMIC_RELAXED) >= 0)
		return scope;
	f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 0;
		fclose(f);
	}
	__atomic_store_n(&scope, v, __ATOMIC_RELAXED);
	return v;
}

/* Under Yama ptrace_scope 1 only a process we name may attach to us: the
 * peer we just attached to gets to reach our memory no chunk covers by
 * cross-memory attach, as we reach its (one ptracer per process: the
 * latest peer; scope 2 and 3 allow none).  Only a peer our policy trusts
 * with our memory (zd_soft_fdx_uid_allowed). */
static void let_peer_trace(pid_t pid)
{
	char path[32];
	struct stat st;

	if (yama_scope() != 1)
		return;
	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (stat(path, &st) == 0 && zd_soft_fdx_uid_allowed(st.st_uid))
		prctl(PR_SET_PTRACER, (unsigned long)pid, 0, 0, 0);
}

static void peer_prefetch(struct zd_soft_peer *p);

struct zd_soft_peer *zd_soft_peer_get(struct zd_soft_peer **list, pid_t pid, uint64_t uid,
				      int fd, size_t size, zd_soft_peer_check_fn *check)
{
	struct zd_soft_peer *p;
	uint32_t nchunks = 0;

	for (p = *list; p; p = p->next) {
		if (p->pid == pid && p->uid == uid) {
			p->refs++;
			return p;
		}
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->self = pid == getpid();
	p->pid = pid;
	p->uid = uid;
	/* Our own process needs no pidfd: its fds are ours already. */
	p->pidfd = p->self ? -1 : (int)syscall(SYS_pidfd_open, pid, 0);
	if (!p->self && p->pidfd < 0)
		goto err;
	if (zd_soft_region_map_peer(&p->region, pid, fd, size) != 0)
		goto err;
	p->chunk_tab = check(p->region.base, size, uid, &nchunks);
	if (!p->chunk_tab || peer_setup(p, nchunks) != 0)
		goto err_unmap;
	if (!p->self) {
		let_peer_trace(pid);
		peer_prefetch(p);
	}
	p->next = *list;
	*list = p;
	return p;
err_unmap:
	zd_soft_region_unmap(&p->region);
err:
	if (p->pidfd >= 0)
		close(p->pidfd);
	free(p);
	return NULL;
}

void zd_soft_peer_put(struct zd_soft_peer **list, struct zd_soft_peer *p)
{
	if (p->pinned || --p->refs)
		return;
	for (struct zd_soft_peer **pp = list; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	peer_unmap_chunks(p);
	zd_soft_region_unmap(&p->region);
	if (p->pidfd >= 0)
		close(p->pidfd);
	free(p);
}

int zd_soft_peer_init_own(struct zd_soft_peer *p, void *region, size_t size, uint64_t uid,
			  const struct zd_soft_chunk_entry *tab, uint32_t nchunks)
{
	*p = (struct zd_soft_peer){
		.self = true, .pinned = true, .pid = getpid(), .pidfd = -1, .uid = uid,
		.region = { .base = region, .size = size, .fd = -1 }, .chunk_tab = tab,
	};
	return peer_setup(p, nchunks);
}

void zd_soft_peer_fini_own(struct zd_soft_peer *p)
{
	if (p->maps)
		peer_unmap_chunks(p);
}

/* Our mapping of the chunk @v describes, if @m holds it. */
static inline void *map_read(const struct zd_soft_chunk_map *m, const struct zd_soft_chunk_view *v)
{
	/* acquire: pairs with the release store of id in chunk_map. */
	uint32_t id = __atomic_load_n(&m->id, __ATOMIC_ACQUIRE);
	void *base = __atomic_load_n(&m->base, __ATOMIC_RELAXED);
	bool same = __atomic_load_n(&m->remote_base, __ATOMIC_RELAXED) == v->base &&
		    __atomic_load_n(&m->len, __ATOMIC_RELAXED) == v->len;

	/* acquire fence: pairs with chunk_map's release fence. */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return id == v->id && same && __atomic_load_n(&m->id, __ATOMIC_RELAXED) == id ? base : NULL;
}

/* Maps the peer's chunk in @slot (as @v describes it); control-path work
 * done once per chunk, under map_lock. */
static void *chunk_map(struct zd_soft_peer *p, uint32_t slot, const struct zd_soft_chunk_view *v)
{
	struct zd_soft_chunk_map *m = &p->maps[slot];
	struct zd_soft_region r;
	void *ret = NULL;

	pthread_mutex_lock(&p->map_lock);
	ret = map_read(m, v);
	if (ret)
		goto out;
	if (v->len == 0 || v->len > (1ull << 40) ||
	    zd_soft_region_map_peer(&r, p->pid, v->fd, v->len) != 0)
		goto out;
	if (m->base) {
		/* The slot was reused by the peer: another thread may still
		 * copy through the old mapping; it goes with the peer. */
		struct zd_soft_retired *old = malloc(sizeof(*old));

		if (!old) {
			zd_soft_region_unmap(&r);
			goto out;
		}
		*old = (struct zd_soft_retired){ p->retired, m->base, m->len };
		p->retired = old;
	}
	/* id 0 while the fields change (a seqlock whose odd state is 0;
	 * chunk ids are never reused, so a reader that sees the same id
	 * before and after its reads saw no rewrite). */
	__atomic_store_n(&m->id, 0, __ATOMIC_RELAXED);
	/* release fence: pairs with the reader's acquire fence. */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&m->base, r.base, __ATOMIC_RELAXED);
	__atomic_store_n(&m->len, v->len, __ATOMIC_RELAXED);
	__atomic_store_n(&m->remote_base, v->base, __ATOMIC_RELAXED);
	/* release: pairs with the reader's acquire load of id. */
	__atomic_store_n(&m->id, v->id, __ATOMIC_RELEASE);
	ret = r.base;
out:
	pthread_mutex_unlock(&p->map_lock);
	return ret;
}

/* At attach, while the peer answers (it just handed us its region): maps
 * every chunk it publishes and keeps its adoption file's fd, so the data
 * path reaches that memory later without asking it again; a chunk it
 * publishes afterwards is asked for at its first touch. */
static void peer_prefetch(struct zd_soft_peer *p)
{
	for (uint32_t i = 0; i < p->nchunks; i++) {
		struct zd_soft_chunk_view v;

		if (!zd_soft_chunk_read(&p->chunk_tab[i], &v) || v.id == 0)
			continue;
		if (!(v.flags & ZD_SOFT_CHUNK_ADOPTED)) {
			chunk_map(p, i, &v);
		} else if (p->adopt_fd < 0) {
			int fd = zd_soft_fdx_get(p->pid, v.fd);

			if (fd >= 0) {
				p->adopt_fd = fd;
				p->adopt_peer_fd = v.fd;
			}
		}
	}
}

/* Maps window @k of the peer's adoption file (@v), under map_lock. */
static void *window_map(struct zd_soft_peer *p, const struct zd_soft_chunk_view *v, uint64_t k)
{
	struct zd_soft_win_leaf *leaf;
	struct zd_soft_region r;
	void *ret = NULL;

	pthread_mutex_lock(&p->map_lock);
	leaf = p->win[k >> ZD_SOFT_WIN_LEAF_BITS];
	if (!leaf) {
		leaf = calloc(1, sizeof(*leaf));
		if (!leaf)
			goto out;
		/* release: the leaf's zeroes before its pointer. */
		__atomic_store_n(&p->win[k >> ZD_SOFT_WIN_LEAF_BITS], leaf, __ATOMIC_RELEASE);
	}
	ret = leaf->base[k & ((1u << ZD_SOFT_WIN_LEAF_BITS) - 1)];
	if (ret)
		goto out;
	/* From our own duplicate where attach took one (no round trip to a
	 * peer that may be stopped now). */
	if ((p->adopt_fd >= 0 && v->fd == p->adopt_peer_fd
		     ? zd_soft_region_map_peer_at(&r, getpid(), p->adopt_fd, k << ZD_SOFT_WIN_SHIFT,
						  window_len(k))
		     : zd_soft_region_map_peer_at(&r, p->pid, v->fd, k << ZD_SOFT_WIN_SHIFT,
						  window_len(k))) != 0)
		goto out;
	ret = r.base;
	/* release: pairs with the reader's acquire load of the base. */
	__atomic_store_n(&leaf->base[k & ((1u << ZD_SOFT_WIN_LEAF_BITS) - 1)], ret,
			 __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&p->map_lock);
	return ret;
}

/* Pointer to the peer's adopted [addr, addr + len) through a window; the
 * window's span of peer addresses in [*lo, *hi). */
static void *window_ptr(struct zd_soft_peer *p, const struct zd_soft_chunk_view *v,
			uint64_t addr, uint64_t len, uint64_t *lo, uint64_t *hi)
{
	uint64_t k = addr >> ZD_SOFT_WIN_SHIFT;
	const struct zd_soft_win_leaf *leaf;
	void *base = NULL;

	if (len > (1ull << ZD_SOFT_WIN_SHIFT) || addr >= ZD_ADOPT_SPAN ||
	    len > ZD_ADOPT_SPAN - addr)
		return NULL;
	/* acquire: pairs with window_map's release stores. */
	leaf = __atomic_load_n(&p->win[k >> ZD_SOFT_WIN_LEAF_BITS], __ATOMIC_ACQUIRE);
	if (leaf)
		base = __atomic_load_n(&leaf->base[k & ((1u << ZD_SOFT_WIN_LEAF_BITS) - 1)],
				       __ATOMIC_ACQUIRE);
	if (ZD_UNLIKELY(!base))
		base = window_map(p, v, k);
	*lo = k << ZD_SOFT_WIN_SHIFT;
	*hi = *lo + window_len(k);
	return base ? (char *)base + (addr - (k << ZD_SOFT_WIN_SHIFT)) : NULL;
}

void *zd_soft_peer_ptr_span(struct zd_soft_peer *p, uint32_t chunk, uint64_t addr, uint64_t len,
			    uint64_t *lo, uint64_t *hi)
{
	struct zd_soft_chunk_view v;
	struct zd_soft_chunk_map *m;
	void *base;

	if (p->self) {
		*lo = 0;
		*hi = UINT64_MAX;
		return (void *)(uintptr_t)addr;
	}
	if (chunk >= p->nchunks || !zd_soft_chunk_read(&p->chunk_tab[chunk], &v) ||
	    !zd_range_in(v.base, v.len, addr, len))
		return NULL;
	if (v.flags & ZD_SOFT_CHUNK_ADOPTED)
		return window_ptr(p, &v, addr, len, lo, hi);
	m = &p->maps[chunk];
	base = map_read(m, &v);
	if (ZD_UNLIKELY(!base))
		base = chunk_map(p, chunk, &v);
	*lo = v.base;
	*hi = v.base + v.len;
	return base ? (char *)base + (addr - v.base) : NULL;
}

void *zd_soft_peer_ptr(struct zd_soft_peer *p, uint32_t chunk, uint64_t addr, uint64_t len)
{
	uint64_t lo, hi;

	return zd_soft_peer_ptr_span(p, chunk, addr, len, &lo, &hi);
}
