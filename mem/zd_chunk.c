/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Chunk registry: memfd-backed mappings, a lock-free address lookup and the
 * listeners that register chunks with devices.  See zd_chunk.h.
 *
 * Readers (zd_chunk_lookup) see an immutable sorted array published with RCU
 * (urcu-bp: any application thread may look up without registering).  Writers
 * (create, destroy, listener changes) are serialised by one mutex; they are
 * rare, so each change copies the array and frees the old one after a grace
 * period.  Entries are copies, so a destroyed chunk's struct never dangles.
 */
#include "evd/zd_rcu.h"
#include "core/zd_log.h"
#include "zd_chunk.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <urcu-bp.h>

struct zd_chunk_tab {
	struct rcu_head     rcu;
	size_t              n;
	struct zd_chunk_ref ent[]; /* sorted by base, non-overlapping */
};

struct zd_chunk_listener {
	zd_chunk_listener_t cb;
	void               *arg;
};

static pthread_mutex_t zd_chunk_lock = PTHREAD_MUTEX_INITIALIZER;
static struct zd_chunk_tab *zd_chunk_tab;         /* RCU; NULL = no chunks */
static struct zd_chunk_listener *zd_chunk_lsn;    /* under zd_chunk_lock */
static size_t zd_chunk_nlsn, zd_chunk_lsn_cap;
static uint32_t zd_chunk_next_id = 1;
/* A fork() child: the chunks it inherited the registry of (none of them is
 * mapped here); NULL otherwise.  Immutable, never freed. */
static const struct zd_chunk_tab *zd_chunk_inherited;

static size_t zd_chunk_page(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

static void zd_chunk_tab_free(struct rcu_head *head)
{
	zd_rcu_reclaim_begin();
	free(caa_container_of(head, struct zd_chunk_tab, rcu));
}

/* Publish tab as the registry; the old one goes after a grace period. */
static void zd_chunk_tab_publish(struct zd_chunk_tab *tab)
{
	struct zd_chunk_tab *old = zd_chunk_tab;

	rcu_assign_pointer(zd_chunk_tab, tab);
	if (old)
		zd_call_rcu(&old->rcu, zd_chunk_tab_free);
}

static struct zd_chunk_tab *zd_chunk_tab_alloc(size_t n)
{
	struct zd_chunk_tab *tab;

	tab = malloc(sizeof(*tab) + n * sizeof(tab->ent[0]));
	if (tab)
		tab->n = n;
	return tab;
}

/* Map len bytes of fd at an address aligned to align (> page: over-reserve). */
static void *zd_chunk_map(int fd, size_t len, size_t align)
{
	const int prot = PROT_READ | PROT_WRITE;
	size_t page = zd_chunk_page(), span, head, tail;
	uintptr_t raw, at;
	void *p;

	if (align <= page)
		return mmap(NULL, len, prot, MAP_SHARED, fd, 0);

	span = len + align - page;
	if (span < len) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	p = mmap(NULL, span, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return p;
	raw = (uintptr_t)p;
	at = (raw + align - 1) & ~(uintptr_t)(align - 1);
	if (mmap((void *)at, len, prot, MAP_SHARED | MAP_FIXED, fd, 0) ==
	    MAP_FAILED) {
		munmap(p, span);
		return MAP_FAILED;
	}
	head = at - raw;
	tail = span - head - len;
	if (head)
		munmap(p, head);
	if (tail)
		munmap((void *)(at + len), tail);
	return (void *)at;
}

/* Tell listeners [0, upto) that chunk c is gone. */
static void zd_chunk_notify_del(const struct zd_chunk_ref *c, size_t upto)
{
	while (upto--)
		zd_chunk_lsn[upto].cb(zd_chunk_lsn[upto].arg, ZD_CHUNK_DEL, c);
}

static int zd_chunk_notify_add(const struct zd_chunk_ref *c)
{
	size_t i;
	int rc;

	for (i = 0; i < zd_chunk_nlsn; i++) {
		rc = zd_chunk_lsn[i].cb(zd_chunk_lsn[i].arg, ZD_CHUNK_ADD, c);
		if (rc) {
			zd_chunk_notify_del(c, i);
			return rc < 0 ? rc : -EPERM;
		}
	}
	return 0;
}

/* Out of descriptors, memfd size or address space: what the chunk was
 * for fails (zdapl_mem_alloc returns NULL, an object creation
 * DAT_INSUFFICIENT_RESOURCES); this says why. */
static void chunk_failed(const struct zd_chunk_ref *c, const char *step, int rc)
{
	zd_log_rate_limited("%s: no memory chunk of %zu bytes: %s: %s",
			    c->flags & ZD_CHUNK_F_POOL ? "registered pool" : "registration",
			    c->len, step, strerror(-rc));
}

int zd_chunk_create(size_t len, size_t align, uint32_t flags,
		    struct zd_chunk_ref *out)
{
	const size_t page = zd_chunk_page();
	struct zd_chunk_tab *old, *tab;
	struct zd_chunk_ref c = { .flags = flags };
	size_t i, n;
	int rc;

	if (!len || len > SIZE_MAX - page || (align & (align - 1)))
		return -EINVAL;
	c.len = (len + page - 1) & ~(page - 1);

	c.fd = memfd_create(flags & ZD_CHUNK_F_POOL ? "zdapl-pool" : "zdapl-chunk",
			    MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (c.fd < 0) {
		rc = -errno;
		chunk_failed(&c, "memfd_create", rc);
		return rc;
	}
	if (ftruncate(c.fd, (off_t)c.len)) {
		rc = -errno;
		chunk_failed(&c, "ftruncate", rc);
		goto err_close;
	}
	/*
	 * Peers get this fd: a peer that shrank the file would make our own
	 * accesses fault (SIGBUS), so freeze its size.
	 */
	if (fcntl(c.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		rc = -errno;
		goto err_close;
	}
	c.base = zd_chunk_map(c.fd, c.len, align);
	if (c.base == MAP_FAILED) {
		rc = -errno;
		chunk_failed(&c, "mmap", rc);
		goto err_close;
	}
	/* A forked child would share these pages but allocate them anew. */
	(void)madvise(c.base, c.len, MADV_DONTFORK);

	pthread_mutex_lock(&zd_chunk_lock);
	old = zd_chunk_tab;
	n = old ? old->n : 0;
	tab = zd_chunk_tab_alloc(n + 1);
	if (!tab) {
		rc = -ENOMEM;
		goto err_unlock;
	}
	c.id = zd_chunk_next_id;
	/* Registered everywhere before anyone can find (and use) it. */
	rc = zd_chunk_notify_add(&c);
	if (rc)
		goto err_free_tab;
	zd_chunk_next_id++;
	for (i = 0; i < n && (uintptr_t)old->ent[i].base < (uintptr_t)c.base; i++)
		tab->ent[i] = old->ent[i];
	tab->ent[i] = c;
	if (n > i)
		memcpy(&tab->ent[i + 1], &old->ent[i], (n - i) * sizeof(c));
	zd_chunk_tab_publish(tab);
	pthread_mutex_unlock(&zd_chunk_lock);

	*out = c;
	return 0;

err_free_tab:
	free(tab);
err_unlock:
	pthread_mutex_unlock(&zd_chunk_lock);
	munmap(c.base, c.len);
err_close:
	close(c.fd);
	return rc;
}

int zd_chunk_destroy(void *base)
{
	struct zd_chunk_tab *old, *tab = NULL;
	struct zd_chunk_ref c;
	size_t i, n;

	pthread_mutex_lock(&zd_chunk_lock);
	old = zd_chunk_tab;
	n = old ? old->n : 0;
	for (i = 0; i < n && old->ent[i].base != base; i++)
		;
	if (i == n) {
		pthread_mutex_unlock(&zd_chunk_lock);
		return -ENOENT;
	}
	c = old->ent[i];
	if (c.flags & ZD_CHUNK_F_POOL) {
		pthread_mutex_unlock(&zd_chunk_lock);
		return -EBUSY;
	}
	if (n > 1) {
		tab = zd_chunk_tab_alloc(n - 1);
		if (!tab) {
			pthread_mutex_unlock(&zd_chunk_lock);
			return -ENOMEM;
		}
		memcpy(tab->ent, old->ent, i * sizeof(c));
		memcpy(&tab->ent[i], &old->ent[i + 1], (n - i - 1) * sizeof(c));
	}
	zd_chunk_tab_publish(tab);
	zd_chunk_notify_del(&c, zd_chunk_nlsn);
	pthread_mutex_unlock(&zd_chunk_lock);

	munmap(c.base, c.len);
	close(c.fd);
	return 0;
}

bool zd_chunk_lookup(const void *addr, size_t len, struct zd_chunk_ref *out)
{
	const uintptr_t a = (uintptr_t)addr;
	const struct zd_chunk_tab *tab;
	const struct zd_chunk_ref *e;
	size_t lo = 0, hi, mid, off;
	bool hit = false;

	if (!len)
		len = 1;
	rcu_read_lock();
	tab = rcu_dereference(zd_chunk_tab);
	if (!tab)
		goto out;
	/* Last chunk whose base is <= addr. */
	hi = tab->n;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if ((uintptr_t)tab->ent[mid].base <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		goto out;
	e = &tab->ent[lo - 1];
	off = a - (uintptr_t)e->base;
	if (off >= e->len || len > e->len - off)
		goto out;
	*out = *e;
	out->offset = off;
	hit = true;
out:
	zd_rcu_read_unlock();
	return hit;
}

bool zd_chunk_was_inherited(const void *addr)
{
	const struct zd_chunk_tab *tab = zd_chunk_inherited;
	const uintptr_t a = (uintptr_t)addr;
	size_t i;

	/* Rare (a child freeing its parent's memory): a linear scan. */
	for (i = 0; tab && i < tab->n; i++)
		if (a - (uintptr_t)tab->ent[i].base < tab->ent[i].len)
			return true;
	return false;
}

void zd_chunk_usage(size_t *nchunks, size_t *bytes)
{
	const struct zd_chunk_tab *tab;
	size_t i, n = 0, b = 0;

	rcu_read_lock();
	tab = rcu_dereference(zd_chunk_tab);
	if (tab) {
		n = tab->n;
		for (i = 0; i < n; i++)
			b += tab->ent[i].len;
	}
	zd_rcu_read_unlock();
	if (nchunks)
		*nchunks = n;
	if (bytes)
		*bytes = b;
}

static ssize_t zd_chunk_lsn_find(zd_chunk_listener_t cb, void *arg)
{
	size_t i;

	for (i = 0; i < zd_chunk_nlsn; i++)
		if (zd_chunk_lsn[i].cb == cb && zd_chunk_lsn[i].arg == arg)
			return (ssize_t)i;
	return -1;
}

int zd_chunk_add_listener(zd_chunk_listener_t cb, void *arg)
{
	struct zd_chunk_listener *lsn;
	const struct zd_chunk_tab *tab;
	size_t i, cap;
	int rc = 0;

	if (!cb)
		return -EINVAL;
	pthread_mutex_lock(&zd_chunk_lock);
	if (zd_chunk_lsn_find(cb, arg) >= 0) {
		rc = -EEXIST;
		goto out;
	}
	if (zd_chunk_nlsn == zd_chunk_lsn_cap) {
		cap = zd_chunk_lsn_cap ? 2 * zd_chunk_lsn_cap : 8;
		lsn = realloc(zd_chunk_lsn, cap * sizeof(*lsn));
		if (!lsn) {
			rc = -ENOMEM;
			goto out;
		}
		zd_chunk_lsn = lsn;
		zd_chunk_lsn_cap = cap;
	}
	/* The table cannot change under the lock. */
	tab = zd_chunk_tab;
	for (i = 0; tab && i < tab->n; i++) {
		rc = cb(arg, ZD_CHUNK_ADD, &tab->ent[i]);
		if (rc) {
			while (i--)
				cb(arg, ZD_CHUNK_DEL, &tab->ent[i]);
			rc = rc < 0 ? rc : -EPERM;
			goto out;
		}
	}
	zd_chunk_lsn[zd_chunk_nlsn++] = (struct zd_chunk_listener){ cb, arg };
out:
	pthread_mutex_unlock(&zd_chunk_lock);
	return rc;
}

int zd_chunk_remove_listener(zd_chunk_listener_t cb, void *arg)
{
	const struct zd_chunk_tab *tab;
	ssize_t at;
	size_t i;

	pthread_mutex_lock(&zd_chunk_lock);
	at = zd_chunk_lsn_find(cb, arg);
	if (at < 0) {
		pthread_mutex_unlock(&zd_chunk_lock);
		return -ENOENT;
	}
	memmove(&zd_chunk_lsn[at], &zd_chunk_lsn[at + 1],
		(zd_chunk_nlsn - (size_t)at - 1) * sizeof(zd_chunk_lsn[0]));
	zd_chunk_nlsn--;
	tab = zd_chunk_tab;
	for (i = tab ? tab->n : 0; i--;)
		cb(arg, ZD_CHUNK_DEL, &tab->ent[i]);
	pthread_mutex_unlock(&zd_chunk_lock);
	return 0;
}

/*
 * A fork() child (single-threaded here, so no lock and no grace period:
 * only async-signal-safe calls).  Every chunk is MADV_DONTFORK, so none is
 * mapped: the registry forgets them all, so lookups (LMRs, the pool) never
 * answer for memory that is not here, and closes their memfds.  Their
 * address ranges are reserved inaccessible, so nothing new is mapped there
 * and zd_chunk_was_inherited() stays true of them only.  The listeners are
 * the parent's devices (their tables are shared with the parent): dropped
 * without a ZD_CHUNK_DEL, which would retract the parent's chunks.
 */
static void zd_chunk_atfork_child(void)
{
	struct zd_chunk_tab *tab = zd_chunk_tab;
	size_t i;

	pthread_mutex_init(&zd_chunk_lock, NULL); /* another thread's, maybe */
	zd_chunk_nlsn = 0;
	if (!tab)
		return;
	for (i = 0; i < tab->n; i++) {
		(void)mmap(tab->ent[i].base, tab->ent[i].len, PROT_NONE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
			   -1, 0);
		close(tab->ent[i].fd);
	}
	rcu_assign_pointer(zd_chunk_tab, NULL);
	zd_chunk_inherited = tab;
}

__attribute__((constructor)) static void zd_chunk_register_atfork(void)
{
	pthread_atfork(NULL, NULL, zd_chunk_atfork_child);
}
