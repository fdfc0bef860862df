/*
 * Peers of an IA: the other IAs (in this process or another) its QPs are
 * connected to, attached through hw/soft/zd_soft_peer.h (one entry per
 * peer IA, shared by every QP to it: its pidfd, the mapping of its arena,
 * whose header is its IA region, the mappings of its memfd chunks), and
 * the doorbell by which we wake a peer's sleeping consumers.
 */
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hw/shm/zd_shm.h"

/* A peer's IA region, checked once when first mapped (zd_soft_peer_check_fn). */
static const struct zd_soft_chunk_entry *ia_region_check(const void *region, size_t size,
							  uint64_t uid, uint32_t *nchunks)
{
	const struct zd_shm_ia_shared *ia = region;

	if (size < sizeof(*ia) || ia->magic != ZD_SHM_MAGIC_IA || ia->uid != uid)
		return NULL;
	*nchunks = ZD_SHM_CHUNK_SLOTS;
	return ia->chunks;
}

struct zd_soft_peer *zd_shm_peer_get(struct zd_shm_ia *sia, const struct zd_shm_blob *b)
{
	struct zd_soft_peer *p = NULL;

	if (b->ia_size < sizeof(struct zd_shm_ia_shared) || b->ia_size > ZD_SHM_ARENA_SPAN)
		return NULL;
	pthread_mutex_lock(&sia->lock);
	p = zd_soft_peer_get(&sia->peers, b->pid, b->ia_uid, b->ia_fd, b->ia_size,
			     ia_region_check);
	pthread_mutex_unlock(&sia->lock);
	return p;
}

void zd_shm_peer_put(struct zd_shm_ia *sia, struct zd_soft_peer *p)
{
	pthread_mutex_lock(&sia->lock);
	zd_soft_peer_put(&sia->peers, p);
	pthread_mutex_unlock(&sia->lock);
}

bool zd_shm_peer_dead(const struct zd_soft_peer *p)
{
	struct pollfd pfd = { .fd = p->pidfd, .events = POLLIN };

	if (p->self || p->pidfd < 0)
		return false;
	return poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLIN | POLLHUP));
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
