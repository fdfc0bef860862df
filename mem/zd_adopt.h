/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Adoption: the consumer's own memory (malloc, valloc, posix_memalign,
 * anonymous mmap) made reachable by peers with plain loads and stores,
 * in place, for as long as a registration holds it.
 *
 * A software device's peer can only reach another process's private
 * pages by a system call per access (process_vm_writev/readv).  Pool
 * chunks are shared memfds (zd_chunk.h), but consumers register memory
 * they allocated themselves.  So registration re-backs the registered
 * pages with a shared file, at the same address, with the same contents:
 *
 *  - One memfd for the whole process, sized to the user address space and
 *    sparse, where the page at address A lives at file offset A.  Peers
 *    map windows of it (zd_soft_peer.h), so adopting, merging or releasing
 *    ranges never moves a byte another process may be writing, and
 *    adjacent adopted ranges are one mapping (the kernel merges them).
 *  - Only whole pages inside a registration are adopted: its first and
 *    last page may hold other data (malloc's headers, other objects, a
 *    futex another thread sleeps on) and stay private.  Peers reach those
 *    edges, and any registration without a whole page, by cross-memory
 *    attach; the MR's entry tells them so (ZD_SOFT_CHUNK_INTERIOR).
 *  - A registration adopts only the whole pages nobody adopted yet (its
 *    "gaps"), and never a page another live registration touches (a peer
 *    may be writing it by cross-memory attach).  A release gives back to
 *    private memory the adopted pages no live registration touches.
 *  - Re-backing a gap: write-protect it (mprotect), copy it into the file
 *    through a temporary mapping, mark that mapping MADV_DONTFORK, and
 *    mremap it over the gap, which replaces the old pages atomically.
 *    Another thread that writes to the gap meanwhile faults; our SIGSEGV
 *    handler recognises the address, waits for the window to close and
 *    returns, and the write is retried on the new pages: none is lost.
 *    Release is the same dance into fresh private anonymous pages, then a
 *    hole punched in the file.
 *  - fork(): adopted pages are MADV_DONTFORK, absent in the child, as
 *    ibv_fork_init makes registered pages on verbs; everything else,
 *    including the edge pages of registrations, keeps copy-on-write.
 *
 * Only private anonymous read-write memory is adopted (the heap, anonymous
 * mappings, other threads' stacks; not the main stack or the registering
 * thread's, files, hugetlbfs, memory already shared, or a page another
 * registration reaches by cross-memory attach and a peer may be writing
 * that way right now).  Everything else
 * keeps the cross-memory-attach path: correct, slower.
 *
 * Limits, by construction: a system call writing into a gap while it is
 * write-protected (read(2) into a buffer that another thread registers at
 * that moment) fails with EFAULT; a thread sleeping in a process-shared
 * futex on a registered buffer's whole page when it changes backing is
 * not woken by a wake through the new backing; mlock and madvise settings
 * of adopted pages are not kept.  ZDAPL_MEM_ADOPT=0 turns adoption off.
 *
 * Control path only; one mutex.  zd_adopt_covers is for registration.
 */
#ifndef ZD_ADOPT_H
#define ZD_ADOPT_H

#include <stdbool.h>
#include <stdint.h>

/* The file spans the x86-64 user address space: offset == address. */
#define ZD_ADOPT_SPAN (1ull << 47)
/* The page size it works in (x86-64); another turns adoption off. */
#define ZD_ADOPT_PAGE 4096u

/* What path a registration's pages took. */
enum zd_adopt_path {
	ZD_ADOPT_SHARED,   /* adopted (or already held): peers use a mapping */
	ZD_ADOPT_POOL,     /* inside a pool chunk: shared from the start */
	ZD_ADOPT_XMA,      /* left private: cross-memory attach per access */
};

/* One registration's hold on its pages. */
struct zd_adopt_rec {
	uint64_t start, end;       /* every page it touches */
	uint64_t ilo, ihi;         /* its whole pages (ilo >= ihi: none) */
	enum zd_adopt_path path;
	const char *why;           /* ZD_ADOPT_XMA: the reason, for the log */
};

/*
 * The adoption file's descriptor (created on the first call, with the
 * fault handler installed), or -1 when adoption is off or unavailable.
 * A device that publishes the file to its peers calls this when it opens.
 */
int zd_adopt_open(void);

/*
 * Holds [addr, addr + len) (len > 0), adopting what it can.  NULL only
 * when memory runs out; otherwise a record whose path says what happened
 * (never an error: the slow path still works).  Release it with
 * zd_adopt_release when the registration goes.
 */
struct zd_adopt_rec *zd_adopt_acquire(uint64_t addr, uint64_t len);
void zd_adopt_release(struct zd_adopt_rec *rec);

/* True when [addr, addr + len) has whole pages and every one is adopted:
 * what lets a device name the adoption file in the range's MR entry. */
bool zd_adopt_covers(uint64_t addr, uint64_t len);

/* Name of a path ("shared", "pool", "cross-memory attach"). */
const char *zd_adopt_path_name(enum zd_adopt_path path);

struct zd_adopt_stats {
	uint64_t shared, pool, xma;   /* registrations that took each path */
	uint64_t adopted_bytes;       /* pages adopted now */
	uint64_t rebacked_bytes;      /* copied into the file so far */
};
void zd_adopt_get_stats(struct zd_adopt_stats *st);

#endif /* ZD_ADOPT_H */
