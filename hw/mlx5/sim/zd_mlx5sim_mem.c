/*
 * Memory shared with peers, all of it in one place: the MR and chunk
 * tables of our region, the key checks against them, the peers whose
 * regions our QPs reach, the mappings of their chunks, and the one-sided
 * copies and atomics on their memory.  The rest of the model reaches peer
 * memory only through the group "memory shared with peers" of
 * zd_mlx5sim_priv.h.
 *
 * The tables are seqlocks: written here on the control path (under
 * nic->lock), read lock-free by every engine that targets us, in this
 * process or another.  Copies: same process: memcpy; a range inside a
 * chunk of the peer: memcpy through our mapping of that chunk (pidfd_getfd
 * and mmap on first touch); anything else: process_vm_writev/readv.
 * Atomics on a peer's chunk memory are CPU atomics through the mapping; on
 * other memory they run under the target NIC's atomic_lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

/* ---- seqlocked tables ---- */

static void seq_begin(_Atomic uint32_t *seq)
{
	atomic_store_explicit(seq, atomic_load_explicit(seq, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	/* release fence: pairs with the acquire fence of the readers: a reader
	 * that sees a field written below also sees seq odd. */
	atomic_thread_fence(memory_order_release);
}

static void seq_end(_Atomic uint32_t *seq)
{
	/* release: pairs with the readers' acquire load of seq. */
	atomic_store_explicit(seq, atomic_load_explicit(seq, memory_order_relaxed) + 1,
			      memory_order_release);
}

/* ---- chunks ---- */

int zd_mlx5sim_chunk_add(struct zd_mlx5sim_nic *nic, void *base, size_t len, int fd)
{
	static _Atomic uint32_t next_id = 1;
	int ret = -ENOSPC;

	if (!base || !len || fd < 0)
		return -EINVAL;
	pthread_mutex_lock(&nic->lock);
	for (uint32_t i = 0; i < ZD_MS_CHUNKS; i++) {
		struct zd_ms_chunk *c = zd_ms_chunk_ctx(nic->sh, i);

		if (atomic_load(&c->id))
			continue;
		seq_begin(&c->seq);
		atomic_store_explicit(&c->fd, fd, memory_order_relaxed);
		atomic_store_explicit(&c->base, (uint64_t)(uintptr_t)base, memory_order_relaxed);
		atomic_store_explicit(&c->len, len, memory_order_relaxed);
		atomic_store_explicit(&c->id, atomic_fetch_add(&next_id, 1), memory_order_relaxed);
		seq_end(&c->seq);
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

int zd_mlx5sim_chunk_remove(struct zd_mlx5sim_nic *nic, void *base)
{
	int ret = -ENOENT;

	pthread_mutex_lock(&nic->lock);
	for (uint32_t i = 0; i < ZD_MS_CHUNKS; i++) {
		struct zd_ms_chunk *c = zd_ms_chunk_ctx(nic->sh, i);

		if (!atomic_load(&c->id) || atomic_load(&c->base) != (uint64_t)(uintptr_t)base)
			continue;
		seq_begin(&c->seq);
		atomic_store_explicit(&c->id, 0, memory_order_relaxed);
		seq_end(&c->seq);
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

static uint32_t chunk_of(struct zd_mlx5sim_nic *nic, uint64_t addr, uint64_t len)
{
	for (uint32_t i = 0; i < ZD_MS_CHUNKS; i++) {
		struct zd_ms_chunk *c = zd_ms_chunk_ctx(nic->sh, i);
		uint64_t b = atomic_load(&c->base), l = atomic_load(&c->len);

		if (atomic_load(&c->id) && addr >= b && len <= l && addr - b <= l - len)
			return i;
	}
	return ZD_MS_NO_CHUNK;
}

/* ---- MRs ---- */

int zd_mlx5sim_mr_add(struct zd_mlx5sim_nic *nic, uint32_t pdn, void *addr, uint64_t len,
		      uint32_t access, uint32_t *lkey, uint32_t *rkey)
{
	int ret = -ENOMEM;

	if (access & ~0xfu)
		return -EINVAL;
	/* Remote write or atomic needs local write, as verbs insists. */
	if ((access & (ZD_MLX5SIM_ACCESS_REMOTE_WRITE | ZD_MLX5SIM_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & ZD_MLX5SIM_ACCESS_LOCAL_WRITE))
		return -EINVAL;
	pthread_mutex_lock(&nic->lock);
	if (!zd_ms_pd_ok(nic, pdn)) {
		ret = -EINVAL;
		goto out;
	}
	for (uint32_t i = 0; i < nic->sh->max_mr; i++) {
		struct zd_ms_mr *e = zd_ms_mr_ctx(nic->sh, i);
		uint32_t key;

		if (atomic_load(&e->key))
			continue;
		key = i << 8 | nic->next_tag;
		nic->next_tag = nic->next_tag % 255 + 1;   /* 1..255: never 0x100 */
		seq_begin(&e->seq);
		atomic_store_explicit(&e->access, access, memory_order_relaxed);
		atomic_store_explicit(&e->pdn, pdn, memory_order_relaxed);
		atomic_store_explicit(&e->addr, (uint64_t)(uintptr_t)addr, memory_order_relaxed);
		atomic_store_explicit(&e->len, len, memory_order_relaxed);
		atomic_store_explicit(&e->chunk, chunk_of(nic, (uintptr_t)addr, len),
				      memory_order_relaxed);
		atomic_store_explicit(&e->key, key, memory_order_relaxed);
		seq_end(&e->seq);
		nic->pd_used[pdn - 1]++;
		*lkey = *rkey = key;
		ret = 0;
		break;
	}
out:
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

int zd_mlx5sim_mr_remove(struct zd_mlx5sim_nic *nic, uint32_t lkey)
{
	uint32_t idx = lkey >> 8;
	int ret = -EINVAL;

	pthread_mutex_lock(&nic->lock);
	if (idx < nic->sh->max_mr) {
		struct zd_ms_mr *e = zd_ms_mr_ctx(nic->sh, idx);

		if (atomic_load(&e->key) == lkey && lkey) {
			uint32_t pdn = atomic_load(&e->pdn);

			seq_begin(&e->seq);
			atomic_store_explicit(&e->key, 0, memory_order_relaxed);
			seq_end(&e->seq);
			nic->pd_used[pdn - 1]--;
			ret = 0;
		}
	}
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

struct mr_view {
	uint32_t access, pdn, chunk;
	uint64_t addr, len;
};

/* Copies a consistent entry of MR key; false if the key is unknown. */
static bool mr_read(struct zd_ms_shared *sh, uint32_t key, struct mr_view *v)
{
	uint32_t idx = key >> 8, s;
	struct zd_ms_mr *e;

	if (idx >= sh->max_mr)
		return false;
	e = zd_ms_mr_ctx(sh, idx);
	for (int tries = 0; tries < 1000; tries++) {
		s = atomic_load_explicit(&e->seq, memory_order_acquire);
		if (s & 1)
			continue;
		uint32_t k = atomic_load_explicit(&e->key, memory_order_relaxed);

		v->access = atomic_load_explicit(&e->access, memory_order_relaxed);
		v->pdn = atomic_load_explicit(&e->pdn, memory_order_relaxed);
		v->addr = atomic_load_explicit(&e->addr, memory_order_relaxed);
		v->len = atomic_load_explicit(&e->len, memory_order_relaxed);
		v->chunk = atomic_load_explicit(&e->chunk, memory_order_relaxed);
		/* acquire fence: pairs with seq_begin's release fence. */
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&e->seq, memory_order_relaxed) == s)
			return k == key && k != 0;
	}
	return false;
}

bool zd_ms_mr_check(struct zd_ms_shared *sh, uint32_t key, uint32_t pdn, uint32_t need,
		    uint64_t addr, uint64_t len, uint32_t *chunk)
{
	struct mr_view v;

	if (key == MLX5_INVALID_LKEY || !mr_read(sh, key, &v))
		return false;
	if (v.pdn != pdn || (v.access & need) != need)
		return false;
	if (addr < v.addr || len > v.len || addr - v.addr > v.len - len)
		return false;
	if (chunk)
		*chunk = v.chunk;
	return true;
}

/* ---- peers ---- */

/* Maps the memfd fd of the process behind pidfd, size bytes of it. */
static int map_remote(int pidfd, int fd, size_t size, void **base)
{
	struct stat st;
	int local, seals;
	void *p;

	local = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
	if (local < 0)
		return -errno;
	/* A region the owner could shrink would SIGBUS us: insist on seals. */
	seals = fcntl(local, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(local, &st) != 0 ||
	    (uint64_t)st.st_size < size) {
		close(local);
		return -EINVAL;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, local, 0);
	close(local);
	if (p == MAP_FAILED)
		return -ENOMEM;
	madvise(p, size, MADV_DONTFORK);
	*base = p;
	return 0;
}

void zd_ms_peers_init(struct zd_mlx5sim_nic *nic)
{
	/* Our own region seen as a peer (QPs connected inside this NIC). */
	nic->self.sh = nic->sh;
	nic->self.size = nic->size;
	nic->self.uid = nic->sh->uid;
	nic->self.pid = getpid();
	nic->self.self_proc = true;
	nic->self.own = true;
	nic->self.pidfd = -1;
	nic->self.refs = 1;
	pthread_mutex_init(&nic->self.map_lock, NULL);
}

void zd_ms_peers_fini(struct zd_mlx5sim_nic *nic)
{
	while (nic->peers)
		zd_ms_peer_put(nic, nic->peers);
	pthread_mutex_destroy(&nic->self.map_lock);
}

struct zd_ms_peer *zd_ms_peer_get(struct zd_mlx5sim_nic *nic, const struct zd_mlx5sim_qp_addr *a)
{
	struct zd_ms_peer *p;
	void *base;

	if (a->nic_uid == nic->sh->uid)
		return &nic->self;
	pthread_mutex_lock(&nic->lock);
	for (p = nic->peers; p; p = p->next) {
		if (p->uid == a->nic_uid && p->pid == a->pid) {
			p->refs++;
			goto out;
		}
	}
	if (a->region_size < sizeof(struct zd_ms_shared) || a->region_size > (1ull << 36))
		goto out;
	p = calloc(1, sizeof(*p));
	if (!p)
		goto out;
	p->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)a->pid, 0);
	if (p->pidfd < 0 || map_remote(p->pidfd, a->region_fd, a->region_size, &base) != 0)
		goto err;
	p->sh = base;
	p->size = a->region_size;
	/* acquire: pairs with the owner's release store of magic. */
	if (atomic_load_explicit(&p->sh->magic, memory_order_acquire) !=
		    ZD_MS_MAGIC ||
	    p->sh->uid != a->nic_uid || p->sh->size != a->region_size ||
	    p->sh->arena_off > p->size || p->sh->qp_off + p->sh->max_qp * sizeof(struct zd_ms_qp) >
						  p->size ||
	    p->sh->cq_off + p->sh->max_cq * sizeof(struct zd_ms_cq) > p->size ||
	    p->sh->srq_off + p->sh->max_srq * sizeof(struct zd_ms_srq) > p->size ||
	    p->sh->mr_off + (uint64_t)p->sh->max_mr * sizeof(struct zd_ms_mr) > p->size ||
	    p->sh->chunk_off + ZD_MS_CHUNKS * sizeof(struct zd_ms_chunk) > p->size ||
	    p->sh->fired_off + (p->sh->max_cq + 63) / 64 * 8 > p->size) {
		munmap(base, a->region_size);
		goto err;
	}
	p->pid = a->pid;
	p->self_proc = a->pid == getpid();
	p->uid = a->nic_uid;
	p->refs = 1;
	pthread_mutex_init(&p->map_lock, NULL);
	p->next = nic->peers;
	nic->peers = p;
	goto out;
err:
	if (p->pidfd >= 0)
		close(p->pidfd);
	free(p);
	p = NULL;
out:
	pthread_mutex_unlock(&nic->lock);
	return p;
}

void zd_ms_peer_put(struct zd_mlx5sim_nic *nic, struct zd_ms_peer *p)
{
	struct zd_ms_peer **pp;

	if (p->own)
		return;
	pthread_mutex_lock(&nic->lock);
	if (--p->refs) {
		pthread_mutex_unlock(&nic->lock);
		return;
	}
	for (pp = &nic->peers; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	pthread_mutex_unlock(&nic->lock);
	for (uint32_t i = 0; i < ZD_MS_CHUNKS; i++)
		if (p->chunks[i].base)
			munmap(p->chunks[i].base, p->chunks[i].len);
	munmap(p->sh, p->size);
	close(p->pidfd);
	pthread_mutex_destroy(&p->map_lock);
	free(p);
}

/* Pointer to [addr, addr + len) of the peer's memory if reachable by
 * load/store (same process or a mapped chunk), else NULL. */
static void *peer_ptr(struct zd_ms_peer *p, uint32_t chunk, uint64_t addr, uint64_t len)
{
	struct zd_ms_chunk_map *m;
	struct zd_ms_chunk *c;
	uint32_t s, id;
	uint64_t base, clen;
	int fd;

	if (p->self_proc)
		return (void *)(uintptr_t)addr;
	if (chunk >= ZD_MS_CHUNKS)
		return NULL;
	c = zd_ms_chunk_ctx(p->sh, chunk);
	m = &p->chunks[chunk];
	/* acquire: pairs with seq_end in zd_mlx5sim_chunk_add. */
	s = atomic_load_explicit(&c->seq, memory_order_acquire);
	id = atomic_load_explicit(&c->id, memory_order_relaxed);
	fd = atomic_load_explicit(&c->fd, memory_order_relaxed);
	base = atomic_load_explicit(&c->base, memory_order_relaxed);
	clen = atomic_load_explicit(&c->len, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	if ((s & 1) || atomic_load_explicit(&c->seq, memory_order_relaxed) != s || !id)
		return NULL;
	if (addr < base || len > clen || addr - base > clen - len)
		return NULL;
	if (m->id != id || m->remote_base != base || m->len != clen) {
		void *b;

		/* Only the engine maps chunks; the lock covers close. */
		pthread_mutex_lock(&p->map_lock);
		if (map_remote(p->pidfd, fd, clen, &b) != 0) {
			pthread_mutex_unlock(&p->map_lock);
			return NULL;
		}
		if (m->base)
			munmap(m->base, m->len);
		m->base = b;
		m->len = clen;
		m->remote_base = base;
		m->id = id;
		pthread_mutex_unlock(&p->map_lock);
	}
	return (char *)m->base + (addr - base);
}

/* ---- one-sided access ---- */

int zd_ms_peer_copy(struct zd_ms_peer *p, bool to_peer, struct iovec *l, int nl,
		    const struct zd_ms_rseg *r, int nr, bool last_last)
{
	struct iovec riov[ZD_MS_MAX_SGE * 2 + 2];
	bool mapped = true;
	size_t total = 0;
	uint8_t *last_dst = NULL, last_val = 0;

	if (nr > (int)ZD_ARRAY_SIZE(riov) - 1)
		return -1;
	for (int i = 0; i < nl; i++)
		total += l[i].iov_len;
	if (!total)
		return 0;
	for (int i = 0; i < nr; i++) {
		void *ptr = peer_ptr(p, r[i].chunk, r[i].addr, r[i].len);

		if (!ptr)
			mapped = false;
		riov[i].iov_base = mapped ? ptr : (void *)(uintptr_t)r[i].addr;
		riov[i].iov_len = r[i].len;
	}
	if (!mapped)
		for (int i = 0; i < nr; i++)
			riov[i].iov_base = (void *)(uintptr_t)r[i].addr;

	if (to_peer && last_last) {
		/* Hold the last byte back from both lists. */
		while (nl && !l[nl - 1].iov_len)
			nl--;
		while (nr && !riov[nr - 1].iov_len)
			nr--;
		last_val = *((uint8_t *)l[nl - 1].iov_base + l[nl - 1].iov_len - 1);
		last_dst = (uint8_t *)riov[nr - 1].iov_base + riov[nr - 1].iov_len - 1;
		l[nl - 1].iov_len--;
		riov[nr - 1].iov_len--;
		total--;
	}
	if (mapped) {
		int i = 0, j = 0;
		size_t io = 0, jo = 0;

		while (i < nl && j < nr) {
			size_t n = ZD_MIN(l[i].iov_len - io, riov[j].iov_len - jo);
			char *a = (char *)l[i].iov_base + io, *b = (char *)riov[j].iov_base + jo;

			if (n)
				memcpy(to_peer ? b : a, to_peer ? a : b, n);
			io += n;
			jo += n;
			if (io == l[i].iov_len) {
				i++;
				io = 0;
			}
			if (jo == riov[j].iov_len) {
				j++;
				jo = 0;
			}
		}
		if (last_dst)
			/* release: every byte above is visible before this one. */
			__atomic_store_n(last_dst, last_val, __ATOMIC_RELEASE);
		return 0;
	}
	if (total) {
		ssize_t got = to_peer ? process_vm_writev(p->pid, l, (unsigned long)nl, riov,
							  (unsigned long)nr, 0)
				      : process_vm_readv(p->pid, l, (unsigned long)nl, riov,
							 (unsigned long)nr, 0);

		if (got != (ssize_t)total)
			return -1;
	}
	if (last_dst) {
		/* A second, later copy: the first one's stores precede it. */
		struct iovec li = { &last_val, 1 }, ri = { last_dst, 1 };

		if (process_vm_writev(p->pid, &li, 1, &ri, 1, 0) != 1)
			return -1;
	}
	return 0;
}

static inline void *ptr_of(uint64_t addr)
{
	return (void *)(uintptr_t)addr;
}

int zd_ms_peer_atomic(struct zd_ms_peer *p, uint32_t chunk, uint64_t addr,
		      zd_ms_atomic_fn *apply, const void *arg, uint64_t *old)
{
	uint64_t nv;
	bool store;
	void *ptr;

	/* Chunk memory: CPU atomics through the mapping (every initiator maps
	 * it).  Other memory: under the target NIC's atomic lock, which every
	 * initiator takes, in this process or another. */
	ptr = chunk != ZD_MS_NO_CHUNK ? peer_ptr(p, chunk, addr, 8) : NULL;
	if (ptr) {
		uint64_t *t = ptr;

		*old = __atomic_load_n(t, __ATOMIC_RELAXED);
		do {
			nv = apply(*old, arg, &store);
		} while (store && !__atomic_compare_exchange_n(t, old, nv, true, __ATOMIC_SEQ_CST,
							      __ATOMIC_RELAXED));
	} else {
		struct iovec li = { old, 8 }, ri = { (void *)(uintptr_t)addr, 8 };
		uint32_t z = 0;
		int rc = -1;

		while (!atomic_compare_exchange_weak(&p->sh->atomic_lock, &z, 1)) {
			z = 0;
			zd_ms_cpu_relax();
		}
		if (p->self_proc) {
			*old = *(volatile uint64_t *)ptr_of(addr);
			nv = apply(*old, arg, &store);
			if (store)
				*(volatile uint64_t *)ptr_of(addr) = nv;
			rc = 0;
		} else if (process_vm_readv(p->pid, &li, 1, &ri, 1, 0) == 8) {
			nv = apply(*old, arg, &store);
			li.iov_base = &nv;
			rc = store ? (process_vm_writev(p->pid, &li, 1, &ri, 1, 0) == 8 ? 0 : -1) : 0;
		}
		atomic_store(&p->sh->atomic_lock, 0);
		if (rc)
			return -1;
	}
	return 0;
}
