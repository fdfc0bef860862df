/*
 * A peer of a software device: another process (or this one) whose main
 * shared region we mapped, and whose memory we reach for one-sided work.
 * One per peer region, shared by every QP to it and counted, kept in the
 * device's list under the device's lock (control path).
 *
 * Address translation (data path, any thread, lock-free): a peer address
 * in one of its published chunks (zd_soft_table.h) becomes a pointer into
 * our mapping of that chunk, or of a window of its adoption file (memory
 * of its own it registered), made on first touch and kept; in this same
 * process it is the address itself; anything else is reached by
 * cross-memory attach only (zd_soft_copy.h).  A dead peer's memory stays
 * mapped until the last reference goes: writes into it are harmless.
 */
#ifndef ZD_SOFT_PEER_H
#define ZD_SOFT_PEER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/zd_compiler.h"
#include "hw/soft/zd_soft_region.h"
#include "hw/soft/zd_soft_table.h"

struct zd_soft_chunk_map {
	uint32_t id;                 /* 0: not mapped; written last (release) */
	void *base;
	size_t len;
	uint64_t remote_base;
};

/*
 * The peer's adoption file (mem/zd_adopt.h) is mapped in windows: window
 * k maps file offsets [k, k + 2) GiB, so any access of at most 1 GiB that
 * starts in [k, k + 1) GiB lies in it.  A two-level table of window bases,
 * filled on first touch and kept until the peer goes.
 */
#define ZD_SOFT_WIN_SHIFT 30
#define ZD_SOFT_WIN_LEAF_BITS 9
#define ZD_SOFT_WIN_DIRS (1u << (47 - ZD_SOFT_WIN_SHIFT - ZD_SOFT_WIN_LEAF_BITS))

struct zd_soft_win_leaf {
	void *base[1u << ZD_SOFT_WIN_LEAF_BITS];
};

struct zd_soft_peer {
	struct zd_soft_peer *next;   /* the device's list */
	unsigned refs;
	bool self;                   /* this process: its addresses are ours */
	bool pinned;                 /* the device's own region: never released */
	pid_t pid;
	int pidfd;                   /* -1 when self; readable once it is gone */
	uint64_t uid;                /* names the peer region among the peer's */
	struct zd_soft_region region;                 /* its main region, mapped */
	const struct zd_soft_chunk_entry *chunk_tab;  /* inside region */
	uint32_t nchunks;
	struct zd_soft_chunk_map *maps;               /* nchunks, lazily mapped */
	struct zd_soft_retired *retired;              /* maps replaced while in use */
	struct zd_soft_win_leaf *win[ZD_SOFT_WIN_DIRS];  /* adoption windows */
	pthread_mutex_t map_lock;                     /* first mapping of a chunk */
	/* Our duplicate of its adoption file's fd (number adopt_peer_fd in
	 * the peer), taken at attach: windows are mapped from it later
	 * without asking the peer, which may be stopped by then; -1: none. */
	int adopt_fd, adopt_peer_fd;
	_Atomic bool xma_refused_said;                /* zd_soft_peer_xma_failed's line */
};

/* Checks the peer's freshly mapped main region (magic, uid, layout inside
 * @size) and returns its chunk table and slot count, or NULL to refuse it. */
typedef const struct zd_soft_chunk_entry *zd_soft_peer_check_fn(const void *region, size_t size,
								 uint64_t uid, uint32_t *nchunks);

/* The peer region (@pid, @uid) of @list, counted; attaches to it (pidfd,
 * map @size bytes of its memfd @fd obtained through zd_soft_fdx_get,
 * @check; under Yama ptrace_scope 1, PR_SET_PTRACER for a peer of a uid we
 * trust, so it may reach our memory by cross-memory attach as we reach
 * its) when it is new.  NULL if the process is gone, refuses us its
 * memory, the region is refused or memory runs out.  The caller holds the
 * lock guarding @list. */
struct zd_soft_peer *zd_soft_peer_get(struct zd_soft_peer **list, pid_t pid, uint64_t uid,
				      int fd, size_t size, zd_soft_peer_check_fn *check);
/* Drops a reference; the last one unmaps everything and closes the pidfd.
 * The caller holds the lock guarding @list. */
void zd_soft_peer_put(struct zd_soft_peer **list, struct zd_soft_peer *p);
/* A device's own region as a peer of itself (this process, never put):
 * what its engine uses to reach its own memory. */
int zd_soft_peer_init_own(struct zd_soft_peer *p, void *region, size_t size, uint64_t uid,
			  const struct zd_soft_chunk_entry *tab, uint32_t nchunks);
void zd_soft_peer_fini_own(struct zd_soft_peer *p);

/* @size bytes at offset @off of the peer's main region (a QP's, SRQ's or
 * CQ ring's region carved from its arena, zd_soft_arena.h) into @r,
 * borrowed from our mapping of it; 0 or -EINVAL (not inside it). */
static inline int zd_soft_peer_carve(const struct zd_soft_peer *p, uint64_t off, uint64_t size,
				     struct zd_soft_region *r)
{
	return zd_soft_region_carve(r, &p->region, off, size);
}

/* Pointer to the peer's [addr, addr + len), which its region table says
 * lies in chunk slot @chunk; NULL when only cross-memory attach reaches
 * it.  Any thread. */
void *zd_soft_peer_ptr(struct zd_soft_peer *p, uint32_t chunk, uint64_t addr, uint64_t len);

/* The same, and the span [*@lo, *@hi) of peer addresses around @addr
 * that the same mapping reaches at the same displacement (the pointer
 * minus @addr): a chunk's whole range, an adoption window's, or (same
 * process) everything.  Mappings stay until the peer goes, so the
 * displacement holds that long (zd_soft_xlat.h caches it). */
void *zd_soft_peer_ptr_span(struct zd_soft_peer *p, uint32_t chunk, uint64_t addr, uint64_t len,
			    uint64_t *lo, uint64_t *hi);

/* zd_soft_peer_ptr with the same-process case inline (the data path's). */
static ZD_ALWAYS_INLINE void *zd_soft_peer_ptr_fast(struct zd_soft_peer *p, uint32_t chunk,
						    uint64_t addr, uint64_t len)
{
	if (ZD_LIKELY(p->self))
		return (void *)(uintptr_t)addr;
	return zd_soft_peer_ptr(p, chunk, addr, len);
}

#endif /* ZD_SOFT_PEER_H */
