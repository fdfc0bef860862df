/*
 * Peers of an IA: the other IAs (in this process or another) its QPs are
 * connected to.  One entry per peer IA, shared by every QP to it: its pidfd,
 * the mapping of its IA region (MR table, chunk table, doorbell) and the
 * mappings of its memfd chunks, made on first use and kept until the last
 * QP to the peer goes (a dead peer's memory stays mapped: writes into it
 * are harmless).
 *
 * Copy costs: same process: memcpy; target range in a pool chunk of the
 * peer: memcpy through our mapping of that chunk (pidfd_getfd + mmap on the
 * first touch of each chunk only); anything else: one process_vm_writev or
 * process_vm_readv per DTO (the kernel copies page by page through the
 * target's page tables: a syscall plus get_user_pages, a few microseconds
 * for small messages).
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/zd_ia.h"
#include "hw/shm/zd_shm.h"

struct zd_shm_peer *zd_shm_peer_get(struct zd_shm_ia *sia, const struct zd_shm_blob *b)
{
	struct zd_shm_peer *p;
	struct zd_shm_region r;

	pthread_mutex_lock(&sia->lock);
	for (p = sia->peers; p; p = p->next) {
		if (p->pid == b->pid && p->uid == b->ia_uid) {
			p->refs++;
			goto out;
		}
	}
	if (b->ia_size < sizeof(struct zd_shm_ia_shared) || b->ia_size > (1ull << 32))
		goto out;
	p = calloc(1, sizeof(*p));
	if (!p)
		goto out;
	p->chunks = calloc(ZD_SHM_CHUNK_SLOTS, sizeof(*p->chunks));
	/* Our own IA needs no pidfd: its fds are ours (region_map_remote). */
	p->pidfd = b->pid == getpid() ? -1 : (int)syscall(SYS_pidfd_open, (pid_t)b->pid, 0);
	if (!p->chunks || (p->pidfd < 0 && b->pid != getpid()))
		goto err;
	if (zd_shm_region_map_remote(&r, p->pidfd, b->ia_fd, b->ia_size) != 0)
		goto err;
	p->ia = r.base;
	p->ia_size = r.size;
	if (p->ia->magic != ZD_SHM_MAGIC_IA || p->ia->uid != b->ia_uid) {
		zd_shm_region_unmap(&r);
		goto err;
	}
	p->pid = b->pid;
	p->self = b->pid == getpid();
	p->uid = b->ia_uid;
	p->refs = 1;
	pthread_mutex_init(&p->map_lock, NULL);
	p->next = sia->peers;
	sia->peers = p;
	goto out;
err:
	if (p->pidfd >= 0)
		close(p->pidfd);
	free(p->chunks);
	free(p);
	p = NULL;
out:
	pthread_mutex_unlock(&sia->lock);
	return p;
}

void zd_shm_peer_put(struct zd_shm_ia *sia, struct zd_shm_peer *p)
{
	struct zd_shm_peer **pp;

	pthread_mutex_lock(&sia->lock);
	if (--p->refs) {
		pthread_mutex_unlock(&sia->lock);
		return;
	}
	for (pp = &sia->peers; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	pthread_mutex_unlock(&sia->lock);
	for (uint32_t i = 0; i < ZD_SHM_CHUNK_SLOTS; i++) {
		if (p->chunks[i].base)
			munmap(p->chunks[i].base, p->chunks[i].len);
	}
	munmap(p->ia, p->ia_size);
	if (p->pidfd >= 0)
		close(p->pidfd);
	pthread_mutex_destroy(&p->map_lock);
	free(p->chunks);
	free(p);
}

/* Maps the peer's chunk in @slot (id @id, [base, base+len)); control-path
 * work done once per chunk, under map_lock. */
static void *chunk_map(struct zd_shm_peer *p, uint32_t slot, uint32_t id, int fd,
		       uint64_t base, uint64_t len)
{
	struct zd_shm_chunk_map *m = &p->chunks[slot];
	struct zd_shm_region r;
	void *ret = NULL;

	pthread_mutex_lock(&p->map_lock);
	if (__atomic_load_n(&m->id, __ATOMIC_ACQUIRE) == id) {
		ret = m->base;
		goto out;
	}
	if (len == 0 || len > (1ull << 40) ||
	    zd_shm_region_map_remote(&r, p->pidfd, fd, len) != 0)
		goto out;
	/* A chunk slot reused by the peer: the old mapping may still be in use
	 * by another thread, so it is leaked (chunks are rarely destroyed). */
	m->base = r.base;
	m->len = len;
	m->remote_base = base;
	/* release: pairs with the acquire load of id in zd_shm_peer_ptr. */
	__atomic_store_n(&m->id, id, __ATOMIC_RELEASE);
	ret = r.base;
out:
	pthread_mutex_unlock(&p->map_lock);
	return ret;
}

void *zd_shm_peer_ptr(struct zd_shm_peer *p, uint32_t chunk_slot, uint64_t raddr, uint64_t len)
{
	if (p->self)
		return (void *)(uintptr_t)raddr;
	if (chunk_slot >= ZD_SHM_CHUNK_SLOTS)
		return NULL;

	struct zd_shm_chunk_map *m = &p->chunks[chunk_slot];
	const struct zd_shm_chunk_entry *e = &p->ia->chunks[chunk_slot];
	uint32_t s1, id;
	uint64_t base, clen;
	int fd;

	/* acquire: pairs with the owner's seq_end release (zd_shm_mr.c). */
	s1 = atomic_load_explicit(&e->seq, memory_order_acquire);
	id = atomic_load_explicit(&e->id, memory_order_relaxed);
	fd = atomic_load_explicit(&e->fd, memory_order_relaxed);
	base = atomic_load_explicit(&e->base, memory_order_relaxed);
	clen = atomic_load_explicit(&e->len, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	if ((s1 & 1) || atomic_load_explicit(&e->seq, memory_order_relaxed) != s1 || id == 0)
		return NULL;
	if (raddr < base || len > clen || raddr - base > clen - len)
		return NULL;
	/* acquire: pairs with the release store of id in chunk_map. */
	if (ZD_UNLIKELY(__atomic_load_n(&m->id, __ATOMIC_ACQUIRE) != id ||
			m->remote_base != base || m->len != clen)) {
		if (!chunk_map(p, chunk_slot, id, fd, base, clen) || m->remote_base != base)
			return NULL;
	}
	return (char *)m->base + (raddr - base);
}

/* Scatter/gather memcpy between two segment lists of equal total. */
static void sg_copy(bool to_b, const struct iovec *a, int na, struct iovec *b, int nb)
{
	size_t ao = 0, bo = 0;
	int i = 0, j = 0;

	while (i < na && j < nb) {
		size_t n = ZD_MIN(a[i].iov_len - ao, b[j].iov_len - bo);

		if (n) {
			if (to_b)
				memcpy((char *)b[j].iov_base + bo, (char *)a[i].iov_base + ao, n);
			else
				memcpy((char *)a[i].iov_base + ao, (char *)b[j].iov_base + bo, n);
		}
		ao += n;
		bo += n;
		if (ao == a[i].iov_len) {
			i++;
			ao = 0;
		}
		if (j < nb && bo == b[j].iov_len) {
			j++;
			bo = 0;
		}
	}
}

/* Holds the last byte of a copy to the peer back from @l/@r (which end at
 * it) into slot n of each list, so it lands after every other byte. */
static void split_last(struct iovec *l, int *nl, struct iovec *r, int *nr)
{
	while (*nl > 0 && l[*nl - 1].iov_len == 0)
		(*nl)--;
	l[*nl].iov_base = (char *)l[*nl - 1].iov_base + l[*nl - 1].iov_len - 1;
	l[*nl].iov_len = 1;
	if (--l[*nl - 1].iov_len == 0)
		l[*nl - 1] = l[*nl];
	else
		(*nl)++;
	r[*nr].iov_base = (char *)r[*nr - 1].iov_base + r[*nr - 1].iov_len - 1;
	r[*nr].iov_len = 1;
	if (--r[*nr - 1].iov_len == 0)
		r[*nr - 1] = r[*nr];
	else
		(*nr)++;
}

/*
 * Copies between local segments and the peer's.  A copy to the peer writes
 * its last byte last, after every other byte is visible (as an RDMA write
 * over PCIe places data in order): consumers poll the last byte of an RDMA
 * write target (dtest -W, MPI eager protocols) and then read the rest.
 * memcpy and the kernel's copy (rep movsb) store in no defined order, so
 * the last byte is a separate, later store: a release store through a
 * mapping, a separate final iovec of the same process_vm_writev (the kernel
 * copies the remote iovecs one after another, and on x86 the stores of one
 * copy are visible before those of the next).  Costs one more iovec, no
 * syscall.  Tested by tests/shm/test_shm_order.c.
 */
int zd_shm_peer_copy(struct zd_shm_peer *p, bool to_peer, const struct iovec *local_in,
		     int nlocal, const struct zd_shm_seg *remote, int nremote)
{
	struct iovec riov[ZD_SHM_MAX_SEGS + 1], local[ZD_SHM_MAX_SEGS + 1];
	size_t want = 0, rtotal = 0;
	bool mapped = true;
	ssize_t got;
	int used = 0;

	if (nremote > ZD_SHM_MAX_SEGS || nlocal > ZD_SHM_MAX_SEGS || nlocal < 0)
		return -1;
	/* The common case: one local segment into (or from) the first remote
	 * one, which a pointer reaches: no iovecs, a fixed-size copy when
	 * small, the last byte last as below. */
	if (ZD_LIKELY(nlocal == 1 && nremote >= 1 && local_in[0].iov_len != 0 &&
		      local_in[0].iov_len <= remote[0].len)) {
		size_t len = local_in[0].iov_len;
		void *ptr = zd_shm_peer_ptr_fast(p, remote[0].chunk_slot, remote[0].addr, len);

		if (ZD_LIKELY(ptr != NULL)) {
			if (to_peer)
				zd_shm_copy_to_peer(ptr, local_in[0].iov_base, len);
			else
				memcpy(local_in[0].iov_base, ptr, len);
			return 0;
		}
	}
	if (nlocal > 0)
		memcpy(local, local_in, (size_t)nlocal * sizeof(local[0]));
	for (int i = 0; i < nlocal; i++)
		want += local[i].iov_len;
	for (int i = 0; i < nremote && rtotal < want; i++) {
		size_t len = ZD_MIN((size_t)remote[i].len, want - rtotal);
		void *ptr = mapped ? zd_shm_peer_ptr(p, remote[i].chunk_slot, remote[i].addr, len)
				   : NULL;

		if (!ptr) {
			mapped = false;
			ptr = (void *)(uintptr_t)remote[i].addr;
		}
		riov[i].iov_base = ptr;
		riov[i].iov_len = len;
		rtotal += len;
		used = i + 1;
	}
	nremote = used;
	if (want == 0)
		return 0;
	if (rtotal < want)
		return -1;
	if (mapped) {
		if (to_peer && want > 1) {
			split_last(local, &nlocal, riov, &nremote);
			sg_copy(true, local, nlocal - 1, riov, nremote - 1);
			/* release: every byte above is visible before the last. */
			__atomic_store_n((uint8_t *)riov[nremote - 1].iov_base,
					 *(const uint8_t *)local[nlocal - 1].iov_base,
					 __ATOMIC_RELEASE);
			return 0;
		}
		sg_copy(to_peer, local, nlocal, riov, nremote);
		return 0;
	}
	/* Rebuild the remote list with the peer's own addresses. */
	rtotal = 0;
	for (int i = 0; i < nremote; i++) {
		riov[i].iov_base = (void *)(uintptr_t)remote[i].addr;
		rtotal += riov[i].iov_len;
	}
	if (to_peer && want > 1)
		split_last(local, &nlocal, riov, &nremote);
	got = to_peer ? process_vm_writev(p->pid, local, (unsigned long)nlocal, riov,
					  (unsigned long)nremote, 0)
		      : process_vm_readv(p->pid, local, (unsigned long)nlocal, riov,
					 (unsigned long)nremote, 0);
	return got == (ssize_t)want ? 0 : -1;
}

void zd_shm_peer_ring(struct zd_shm_ia_shared *ia, uint32_t need)
{
	/* seq_cst fence: pairs with the one in zd_shm_cq_arm (Dekker): either
	 * the armed consumer's re-poll sees what we published, or we see its
	 * armed flag and wake it. */
	atomic_thread_fence(memory_order_seq_cst);
	if (ZD_LIKELY(!(atomic_load_explicit(&ia->armed, memory_order_relaxed) & need)))
		return;
	atomic_fetch_add_explicit(&ia->doorbell, 1, memory_order_release);
	/* Not FUTEX_PRIVATE: the waker sleeps in another process. */
	syscall(SYS_futex, &ia->doorbell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
