/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Adoption of the consumer's pages into the shared adoption file
 * (zd_adopt.h): the registrations, the re-backing of gaps and leftovers,
 * and the fault window that keeps other threads' writes.
 */
#include "zd_adopt.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include "core/zd_log.h"
#include "mem/zd_chunk.h"
#include "mem/zd_adopt_maps.h"

static pthread_mutex_t adopt_lock = PTHREAD_MUTEX_INITIALIZER;
static int adopt_fd = -1;             /* the file; -1 until opened */
static bool adopt_tried;              /* zd_adopt_open ran (success or not) */
static bool adopt_report;             /* ZDAPL_MEM_REPORT=1: log each path */
static ino_t adopt_ino;
static dev_t adopt_dev;
static uintptr_t adopt_page;

/* Every live registration, sorted by start. */
static struct zd_adopt_rec **recs;
static size_t nrecs, recs_cap;
static struct zd_adopt_stats stats;

/* ---- the fault window ---- */

/*
 * While [win_lo, win_hi) is write-protected for re-backing, win_busy is 1.
 * A fault inside it (a write; a read too while pages are inaccessible)
 * waits for the window to close and returns, and the access is retried on
 * the new pages.  A thread preempted between its fault and its handler may
 * only run the handler after that window closed (and another opened
 * elsewhere): a fault on a page that now allows the access is such a late
 * one, and is retried too.  MADV_POPULATE_WRITE/READ asks the kernel
 * exactly that, without touching the page's bytes.  Anything else (an
 * instruction fetch, a page that still refuses the access) is not ours.
 */
static _Atomic uintptr_t win_lo, win_hi;
static _Atomic unsigned win_busy;
static struct sigaction prev_segv;

/* x86-64 page-fault error code: bit 1 a write, bit 4 an instruction fetch. */
static bool write_fault(const void *uc)
{
	return ((const ucontext_t *)uc)->uc_mcontext.gregs[REG_ERR] & 2;
}

static bool exec_fault(const void *uc)
{
	return ((const ucontext_t *)uc)->uc_mcontext.gregs[REG_ERR] & 16;
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;

	if (si->si_code == SEGV_ACCERR && !exec_fault(uc)) {
		if (a >= atomic_load_explicit(&win_lo, memory_order_acquire) &&
		    a < atomic_load_explicit(&win_hi, memory_order_acquire) &&
		    atomic_load_explicit(&win_busy, memory_order_acquire)) {
			while (atomic_load_explicit(&win_busy, memory_order_acquire))
				sched_yield();
			return;
		}
		int saved = errno;   /* the interrupted code's */
		int rc = madvise((void *)(a & ~(uintptr_t)(ZD_ADOPT_PAGE - 1)), ZD_ADOPT_PAGE,
				 write_fault(uc) ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);

		errno = saved;
		if (rc == 0)
			return;
	}
	/* Not ours: whoever handled SIGSEGV before us. */
	if (prev_segv.sa_flags & SA_SIGINFO) {
		prev_segv.sa_sigaction(sig, si, uc);
	} else if (prev_segv.sa_handler == SIG_DFL || prev_segv.sa_handler == SIG_IGN) {
		/* The default action, when the fault repeats on return. */
		struct sigaction dfl = { .sa_handler = SIG_DFL };

		sigemptyset(&dfl.sa_mask);
		sigaction(SIGSEGV, &dfl, NULL);
	} else {
		prev_segv.sa_handler(sig);
	}
}

/* Puts on_segv first in line, chaining to whatever is there (a consumer
 * may have installed its own handler since the last window). */
static int segv_claim(void)
{
	struct sigaction cur, ours = { .sa_sigaction = on_segv,
				       .sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART };

	if (sigaction(SIGSEGV, NULL, &cur) != 0)
		return -errno;
	if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_segv)
		return 0;
	sigemptyset(&ours.sa_mask);
	prev_segv = cur;
	return sigaction(SIGSEGV, &ours, NULL) == 0 ? 0 : -errno;
}

/* A library unloaded (dlclose) must not leave its handler in SIGSEGV's
 * way: the next fault would jump into unmapped code. */
__attribute__((destructor)) static void segv_unclaim(void)
{
	struct sigaction cur;

	if (sigaction(SIGSEGV, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
	    cur.sa_sigaction == on_segv)
		sigaction(SIGSEGV, &prev_segv, NULL);
}

static void window_open(uintptr_t lo, uintptr_t hi)
{
	atomic_store_explicit(&win_lo, lo, memory_order_relaxed);
	atomic_store_explicit(&win_hi, hi, memory_order_relaxed);
	/* release: a thread that faults in the range sees it busy. */
	atomic_store_explicit(&win_busy, 1, memory_order_release);
}

static void window_close(void)
{
	/* release: the new mapping is in place before waiters return. */
	atomic_store_explicit(&win_busy, 0, memory_order_release);
}

/* ---- re-backing ---- */

static int pagemap_fd = -1;          /* /proc/self/pagemap, or -1 */

/* One copy into fresh pages, allocated first in one call rather than a
 * page fault each (where the kernel has MADV_POPULATE_WRITE, 5.14). */
static void copy_run(uint8_t *dst, const void *src, size_t len)
{
	(void)madvise(dst, len, MADV_POPULATE_WRITE);
	memcpy(dst, src, len);
}

/*
 * Copies into @dst (fresh: zero) the pages of [lo, lo + len) that hold
 * data: present or swapped, as /proc/self/pagemap says.  Pages never
 * touched read as zero anyway; copying them would allocate memory the
 * application never used (dtest registers 412 MiB twice, and touches
 * little of it).
 */
static void copy_touched(uint8_t *dst, uintptr_t lo, size_t len)
{
	const size_t page = ZD_ADOPT_PAGE;
	uint64_t ent[512];

	for (size_t off = 0; off < len;) {
		size_t n = (len - off) / page < 512 ? (len - off) / page : 512;
		ssize_t got = pagemap_fd < 0 ? -1
			    : pread(pagemap_fd, ent, n * sizeof(ent[0]),
				    (off_t)((lo + off) / page * sizeof(ent[0])));

		if (got != (ssize_t)(n * sizeof(ent[0]))) {
			memcpy(dst + off, (void *)(lo + off), len - off);
			return;
		}
		for (size_t i = 0, j; i < n; i = j) {
			/* Bit 63: present; bit 62: swapped. */
			bool data = ent[i] >> 62;

			for (j = i + 1; j < n && (bool)(ent[j] >> 62) == data; j++)
				;
			if (data)
				copy_run(dst + off + i * page, (void *)(lo + off + i * page),
					 (j - i) * page);
		}
		off += n * page;
	}
}

/* Copies into @dst (fresh: zero) what the adoption file holds of
 * [lo, lo + len): its data ranges, skipping holes. */
static void copy_file_data(uint8_t *dst, uintptr_t lo, size_t len)
{
	off_t at = (off_t)lo, end = (off_t)(lo + len);

	while (at < end) {
		off_t d = lseek(adopt_fd, at, SEEK_DATA), h;

		if (d < 0 && errno == ENXIO)
			return;
		if (d < 0) {
			memcpy(dst + (at - (off_t)lo), (void *)at, (size_t)(end - at));
			return;
		}
		if (d >= end)
			return;
		h = lseek(adopt_fd, d, SEEK_HOLE);
		if (h < 0 || h > end)
			h = end;
		copy_run(dst + (d - (off_t)lo), (void *)d, (size_t)(h - d));
		at = h;
	}
}

/*
 * Moves the contents of [lo, hi) into @dst (a fresh mapping of the same
 * length) and puts @dst at lo, under the fault window.  0 or -errno; on
 * failure [lo, hi) is as it was and @dst is unmapped.
 */
static int reback(uintptr_t lo, uintptr_t hi, void *dst,
		  void (*copy)(uint8_t *dst, uintptr_t lo, size_t len))
{
	size_t len = hi - lo;
	int rc = 0;

	if (segv_claim() != 0) {
		munmap(dst, len);
		return -EPERM;
	}
	window_open(lo, hi);
	if (mprotect((void *)lo, len, PROT_READ) != 0) {
		rc = -errno;
		goto fail;
	}
	copy(dst, lo, len);
	if (mremap(dst, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)lo) == MAP_FAILED) {
		rc = -errno;
		mprotect((void *)lo, len, PROT_READ | PROT_WRITE);
		goto fail;
	}
	window_close();
	return 0;
fail:
	window_close();
	munmap(dst, len);
	return rc;
}

/* Adopts [lo, hi): its pages become the file's, at offset lo. */
static int adopt_range(uintptr_t lo, uintptr_t hi)
{
	size_t len = hi - lo;
	void *dst;
	int rc;

	/* Zero, as copy_touched expects, even if a peer wrote there late
	 * through a window after the range's last release. */
	fallocate(adopt_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)lo, (off_t)len);
	dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, adopt_fd, (off_t)lo);

	if (dst == MAP_FAILED)
		return -errno;
	/* Set before the move: a fork() at any moment never shares them. */
	if (madvise(dst, len, MADV_DONTFORK) != 0) {
		rc = -errno;
		munmap(dst, len);
		return rc;
	}
	rc = reback(lo, hi, dst, copy_touched);
	if (rc == 0) {
		stats.adopted_bytes += len;
		stats.rebacked_bytes += len;
	} else {
		fallocate(adopt_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)lo,
			  (off_t)len);
	}
	return rc;
}

/* Gives [lo, hi) back to private memory where it is still our mapping.
 * Called per maps entry; clears *@all_back (a bool) on failure. */
static void release_piece(void *all_back, uintptr_t lo, uintptr_t hi)
{
	size_t len = hi - lo;
	void *dst;

	/* Fresh pages moved in: a mapping apart from its neighbours (their
	 * anonymous memory cannot be joined again: see README, limits). */
	dst = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (dst == MAP_FAILED || reback(lo, hi, dst, copy_file_data) != 0) {
		*(bool *)all_back = false;
		zd_log_error("cannot give %zu bytes at %#lx back to private memory: they stay "
			     "shared and absent in fork() children", len, (unsigned long)lo);
	}
}

/* Gives [lo, hi) back; false if some of it stays adopted (the file keeps
 * its bytes then: the application still reaches them through it). */
static bool release_range(uintptr_t lo, uintptr_t hi)
{
	bool all_back = true;

	/* Only what still maps the file where we put it: the consumer may
	 * have unmapped (or remapped) memory it had not deregistered. */
	zd_adopt_maps_each_file_piece(lo, hi, adopt_dev, adopt_ino, release_piece, &all_back);
	if (!all_back)
		return false;
	fallocate(adopt_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)lo,
		  (off_t)(hi - lo));
	stats.adopted_bytes -= hi - lo;
	return true;
}

/* ---- the adopted pages: sorted, disjoint, merged intervals ---- */

struct ivl {
	uint64_t lo, hi;
};

static struct ivl *adopted;
static size_t nadopted, adopted_cap;

/* Room for @more intervals beyond the current ones. */
static int set_reserve(size_t more)
{
	struct ivl *grown;
	size_t cap;

	if (nadopted + more <= adopted_cap)
		return 0;
	cap = 2 * (nadopted + more);
	grown = realloc(adopted, cap * sizeof(*adopted));
	if (!grown)
		return -ENOMEM;
	adopted = grown;
	adopted_cap = cap;
	return 0;
}

/* Index of the first interval ending after @at. */
static size_t set_find(uint64_t at)
{
	size_t lo = 0, hi = nadopted;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (adopted[mid].hi <= at)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Adds [lo, hi), which is disjoint from the set; room reserved. */
static void set_add(uint64_t lo, uint64_t hi)
{
	size_t i = set_find(lo);
	bool left = i > 0 && adopted[i - 1].hi == lo;
	bool right = i < nadopted && adopted[i].lo == hi;

	if (left && right) {
		adopted[i - 1].hi = adopted[i].hi;
		memmove(&adopted[i], &adopted[i + 1], (nadopted - i - 1) * sizeof(*adopted));
		nadopted--;
	} else if (left) {
		adopted[i - 1].hi = hi;
	} else if (right) {
		adopted[i].lo = lo;
	} else {
		memmove(&adopted[i + 1], &adopted[i], (nadopted - i) * sizeof(*adopted));
		adopted[i] = (struct ivl){ lo, hi };
		nadopted++;
	}
}

/* Removes [lo, hi), which the set holds whole; room for one reserved. */
static void set_del(uint64_t lo, uint64_t hi)
{
	size_t i = set_find(lo);
	struct ivl *v = &adopted[i];

	if (v->lo == lo && v->hi == hi) {
		memmove(v, v + 1, (nadopted - i - 1) * sizeof(*adopted));
		nadopted--;
	} else if (v->lo == lo) {
		v->lo = hi;
	} else if (v->hi == hi) {
		v->hi = lo;
	} else {
		memmove(v + 1, v, (nadopted - i) * sizeof(*adopted));
		v[1].lo = hi;
		v->hi = lo;
		nadopted++;
	}
}

/* Appends [lo, hi) to the growing array *@out of *@n intervals. */
static int ivl_push(struct ivl **out, size_t *n, uint64_t lo, uint64_t hi)
{
	struct ivl *g = realloc(*out, (*n + 1) * sizeof(**out));

	if (!g)
		return -ENOMEM;
	*out = g;
	g[(*n)++] = (struct ivl){ lo, hi };
	return 0;
}

/* Appends to @out the pieces of [lo, hi) the set holds (@in) or not. */
static int set_pieces(uint64_t lo, uint64_t hi, bool in, struct ivl **out, size_t *n)
{
	uint64_t at = lo;

	for (size_t i = set_find(lo); at < hi; i++) {
		uint64_t a = i < nadopted && adopted[i].lo < hi ? adopted[i].lo : hi;
		uint64_t b = i < nadopted && adopted[i].lo < hi ? adopted[i].hi : hi;
		uint64_t p_lo = in ? (a > at ? a : at) : at;
		uint64_t p_hi = in ? (b < hi ? b : hi) : (a < hi ? a : hi);

		if (p_lo < p_hi && ivl_push(out, n, p_lo, p_hi) != 0)
			return -ENOMEM;
		at = b;
	}
	return 0;
}

/* ---- registrations ---- */

static size_t rec_insert_at(uint64_t start)
{
	size_t lo = 0, hi = nrecs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (recs[mid]->start <= start)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Whether a live registration's pages (whole or partial, any path but
 * the pool's) meet [lo, hi): peers may reach them by cross-memory attach. */
static bool touched(uint64_t lo, uint64_t hi)
{
	for (size_t i = 0; i < nrecs && recs[i]->start < hi; i++)
		if (recs[i]->path != ZD_ADOPT_POOL && recs[i]->end > lo)
			return true;
	return false;
}

/* Appends to @out the pieces of [lo, hi) no live registration touches. */
static int untouched_pieces(uint64_t lo, uint64_t hi, struct ivl **out, size_t *n)
{
	uint64_t at = lo;

	while (at < hi) {
		uint64_t next = hi, reach = at;

		for (size_t i = 0; i < nrecs && recs[i]->start < hi; i++) {
			const struct zd_adopt_rec *r = recs[i];

			if (r->path == ZD_ADOPT_POOL || r->end <= at)
				continue;
			if (r->start <= at)
				reach = r->end > reach ? r->end : reach;
			else if (r->start < next)
				next = r->start;
		}
		if (reach > at) {
			at = reach;
			continue;
		}
		if (ivl_push(out, n, at, next) != 0)
			return -ENOMEM;
		at = next;
	}
	return 0;
}

/* Whether every whole page of [lo, hi) is adopted (none: false). */
static bool interior_adopted(uint64_t lo, uint64_t hi)
{
	size_t i;

	if (lo >= hi)
		return false;
	i = set_find(lo);
	return i < nadopted && adopted[i].lo <= lo && adopted[i].hi >= hi;
}

/*
 * Whether [lo, hi), adopted by our books, still maps shared memory (the
 * file), or the application unmapped it without deregistering and mapped
 * private memory there again (undefined, as on verbs, but then RDMA
 * through the file would miss the new memory).  One system call:
 * MADV_WIPEONFORK applies only to private anonymous memory, so it fails
 * with EINVAL on our mapping; it is undone wherever it applied.
 */
static bool still_shared(uint64_t lo, uint64_t hi)
{
	int rc = madvise((void *)(uintptr_t)lo, hi - lo, MADV_WIPEONFORK);
	int err = errno;

	if (rc == 0 || err != EINVAL)
		(void)madvise((void *)(uintptr_t)lo, hi - lo, MADV_KEEPONFORK);
	return rc != 0 && err == EINVAL;
}

/* Whether [lo, hi) meets the calling thread's stack. */
static bool on_own_stack(uint64_t lo, uint64_t hi)
{
	pthread_attr_t attr;
	void *base = NULL;
	size_t size = 0;
	uintptr_t sp = (uintptr_t)&attr;

	if (pthread_getattr_np(pthread_self(), &attr) == 0) {
		pthread_attr_getstack(&attr, &base, &size);
		pthread_attr_destroy(&attr);
	}
	if (!base)   /* unknown: the 8 MiB below and a page above this frame */
		return lo < sp + ZD_ADOPT_PAGE && hi > sp - (8u << 20);
	return lo < (uintptr_t)base + size && hi > (uintptr_t)base;
}

/* Chooses the path of @r (not listed yet) and adopts its whole pages
 * that nobody has adopted. */
static void adopt_rec(struct zd_adopt_rec *r, uint64_t addr, uint64_t len)
{
	struct zd_chunk_ref c;
	struct ivl *gaps = NULL, *held = NULL;
	size_t ngaps = 0, nheld = 0, done;

	r->path = ZD_ADOPT_XMA;
	if (zd_chunk_lookup((void *)(uintptr_t)addr, len, &c)) {
		r->path = ZD_ADOPT_POOL;
		return;
	}
	if (adopt_fd < 0) {
		r->why = "adoption off (ZDAPL_MEM_ADOPT=0) or unavailable";
		return;
	}
	if (r->ilo >= r->ihi) {
		r->why = "no whole page inside (a page it shares stays private)";
		return;
	}
	if (r->ihi > ZD_ADOPT_SPAN) {
		r->why = "beyond the 47-bit address space";
		return;
	}
	if (set_pieces(r->ilo, r->ihi, false, &gaps, &ngaps) != 0) {
		r->why = "out of memory";
		goto out;
	}
	/* What is adopted already must still be. */
	if (set_pieces(r->ilo, r->ihi, true, &held, &nheld) != 0) {
		r->why = "out of memory";
		goto out;
	}
	for (size_t i = 0; i < nheld; i++) {
		if (!still_shared(held[i].lo, held[i].hi)) {
			r->why = "unmapped and mapped again under a live registration";
			goto out;
		}
	}
	for (size_t i = 0; i < ngaps; i++) {
		/* This thread writes its stack while the pages are
		 * write-protected: it would wait for itself. */
		if (on_own_stack(gaps[i].lo, gaps[i].hi)) {
			r->why = "the registering thread's own stack";
			goto out;
		}
		/* Another registration's peer may be writing there by
		 * cross-memory attach right now: never re-back it. */
		if (touched(gaps[i].lo, gaps[i].hi)) {
			r->why = "shares pages with a registration on cross-memory attach";
			goto out;
		}
		r->why = zd_adopt_maps_check_private(gaps[i].lo, gaps[i].hi);
		if (r->why)
			goto out;
	}
	if (set_reserve(ngaps) != 0) {
		r->why = "out of memory";
		goto out;
	}
	for (done = 0; done < ngaps; done++) {
		int rc = adopt_range(gaps[done].lo, gaps[done].hi);

		if (rc) {
			r->why = rc == -ENOMEM ? "the kernel refused the mapping (ENOMEM: "
						 "vm.max_map_count?)"
					       : "the kernel refused to re-back the pages";
			while (done--)
				if (release_range(gaps[done].lo, gaps[done].hi))
					set_del(gaps[done].lo, gaps[done].hi);
			goto out;
		}
		set_add(gaps[done].lo, gaps[done].hi);
	}
	r->path = ZD_ADOPT_SHARED;
	r->why = NULL;
out:
	free(gaps);
	free(held);
}

struct zd_adopt_rec *zd_adopt_acquire(uint64_t addr, uint64_t len)
{
	struct zd_adopt_rec *r = calloc(1, sizeof(*r));
	struct zd_adopt_rec **grown;
	size_t at;

	if (!r)
		return NULL;
	pthread_mutex_lock(&adopt_lock);
	if (nrecs == recs_cap) {
		size_t cap = recs_cap ? 2 * recs_cap : 64;

		grown = realloc(recs, cap * sizeof(*recs));
		if (!grown) {
			pthread_mutex_unlock(&adopt_lock);
			free(r);
			return NULL;
		}
		recs = grown;
		recs_cap = cap;
	}
	if (!adopt_page)
		adopt_page = (uintptr_t)sysconf(_SC_PAGESIZE);
	r->start = addr & ~(uint64_t)(adopt_page - 1);
	r->end = (addr + len + adopt_page - 1) & ~(uint64_t)(adopt_page - 1);
	r->ilo = (addr + adopt_page - 1) & ~(uint64_t)(adopt_page - 1);
	r->ihi = (addr + len) & ~(uint64_t)(adopt_page - 1);
	if (r->end < r->start || r->ilo < addr)
		r->start = r->end = r->ilo = r->ihi = 0;  /* wraps: nothing to adopt */
	adopt_rec(r, addr, len);
	at = rec_insert_at(r->start);
	memmove(&recs[at + 1], &recs[at], (nrecs - at) * sizeof(*recs));
	recs[at] = r;
	nrecs++;
	if (r->path == ZD_ADOPT_SHARED)
		stats.shared++;
	else if (r->path == ZD_ADOPT_POOL)
		stats.pool++;
	else
		stats.xma++;
	pthread_mutex_unlock(&adopt_lock);
	if (adopt_report)
		fprintf(stderr, "zdapl: memory [%#llx, +%llu): %s%s%s\n", (unsigned long long)addr,
			(unsigned long long)len, zd_adopt_path_name(r->path), r->why ? ": " : "",
			r->why ? r->why : "");
	return r;
}

void zd_adopt_release(struct zd_adopt_rec *r)
{
	struct ivl *free_pieces = NULL, *back = NULL;
	size_t i, nfree = 0, nback = 0;

	if (!r)
		return;
	pthread_mutex_lock(&adopt_lock);
	for (i = 0; i < nrecs && recs[i] != r; i++)
		;
	if (i < nrecs) {
		memmove(&recs[i], &recs[i + 1], (nrecs - i - 1) * sizeof(*recs));
		nrecs--;
	}
	/* Adopted pages of its range that no live registration touches go
	 * back to private memory; the others stay until their last one. */
	if (r->path != ZD_ADOPT_POOL && r->start < r->end &&
	    untouched_pieces(r->start, r->end, &free_pieces, &nfree) == 0) {
		for (i = 0; i < nfree; i++)
			if (set_pieces(free_pieces[i].lo, free_pieces[i].hi, true, &back, &nback))
				break;
		for (i = 0; i < nback && set_reserve(1) == 0; i++)
			if (release_range(back[i].lo, back[i].hi))
				set_del(back[i].lo, back[i].hi);
	}
	pthread_mutex_unlock(&adopt_lock);
	free(free_pieces);
	free(back);
	free(r);
}

bool zd_adopt_covers(uint64_t addr, uint64_t len)
{
	uint64_t lo, hi;
	bool all;

	if (!len)
		len = 1;
	pthread_mutex_lock(&adopt_lock);
	if (!adopt_page || adopt_fd < 0 || addr + len < addr) {
		pthread_mutex_unlock(&adopt_lock);
		return false;
	}
	lo = (addr + adopt_page - 1) & ~(uint64_t)(adopt_page - 1);
	hi = (addr + len) & ~(uint64_t)(adopt_page - 1);
	all = interior_adopted(lo, hi) && still_shared(lo, hi);
	pthread_mutex_unlock(&adopt_lock);
	return all;
}

const char *zd_adopt_path_name(enum zd_adopt_path path)
{
	switch (path) {
	case ZD_ADOPT_SHARED:
		return "shared in place";
	case ZD_ADOPT_POOL:
		return "pool";
	default:
		return "cross-memory attach";
	}
}

void zd_adopt_get_stats(struct zd_adopt_stats *st)
{
	pthread_mutex_lock(&adopt_lock);
	*st = stats;
	pthread_mutex_unlock(&adopt_lock);
}

static void report_at_exit(void)
{
	struct zd_adopt_stats st;

	zd_adopt_get_stats(&st);
	fprintf(stderr, "zdapl: registrations: %llu shared in place, %llu pool, %llu "
		"cross-memory attach; %llu bytes re-backed\n",
		(unsigned long long)st.shared, (unsigned long long)st.pool,
		(unsigned long long)st.xma, (unsigned long long)st.rebacked_bytes);
}

/* fork() waits for a re-backing in progress: a child must not inherit
 * pages write-protected under a window no thread of its own will close,
 * nor our lock held by a thread it does not have. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&adopt_lock);
}

static void fork_done(void)
{
	pthread_mutex_unlock(&adopt_lock);
}

static bool env_is(const char *name, const char *val)
{
	const char *e = getenv(name);

	return e && strcmp(e, val) == 0;
}

int zd_adopt_open(void)
{
	struct stat st;
	int fd;

	pthread_mutex_lock(&adopt_lock);
	if (adopt_tried)
		goto out;
	adopt_tried = true;
	pthread_atfork(fork_prepare, fork_done, fork_done);
	adopt_page = (uintptr_t)sysconf(_SC_PAGESIZE);
	adopt_report = env_is("ZDAPL_MEM_REPORT", "1");
	if (adopt_report)
		atexit(report_at_exit);
	/* Peers compute the whole pages of a region with the same size. */
	if (env_is("ZDAPL_MEM_ADOPT", "0") || adopt_page != ZD_ADOPT_PAGE)
		goto out;
	fd = memfd_create("zdapl-adopt", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		goto fail;
	/* Sparse: only adopted pages take memory.  Sealed so that no peer
	 * that gets the fd can shrink it under our mappings (SIGBUS). */
	if (ftruncate(fd, (off_t)ZD_ADOPT_SPAN) != 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
	    fstat(fd, &st) != 0 || segv_claim() != 0) {
		close(fd);
		goto fail;
	}
	pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	adopt_dev = st.st_dev;
	adopt_ino = st.st_ino;
	adopt_fd = fd;
	goto out;
fail:
	zd_log_error("cannot share registered memory in place (%s): registrations of the "
		     "application's own memory use cross-memory attach", strerror(errno));
out:
	fd = adopt_fd;
	pthread_mutex_unlock(&adopt_lock);
	return fd;
}
