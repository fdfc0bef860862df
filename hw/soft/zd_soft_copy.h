/*
 * One-sided copies between this process and a peer's memory: what an RDMA
 * write, an RDMA read or a send's placement does on a software device.
 *
 * PLACEMENT ORDER.  A copy to a peer makes its last 8 bytes visible after
 * every other byte, as an RDMA write reaches memory in order over PCIe.
 * Consumers poll the end of a write target and then read the rest: the last
 * byte (dtest -W), or an 8-byte header word ending an eager-ring slot (MPI
 * transports), whose last byte may well not change from one message to the
 * next.  memcpy and the kernel's copy store in no defined order, so the
 * tail is held back and stored after a release:
 *  - through a pointer: the body, then the tail as one 8-byte release
 *    store (aligned) or after a release fence (unaligned);
 *  - by cross-memory attach: the tail is the last remote iovec of the same
 *    process_vm_writev (the kernel copies remote iovecs one after another,
 *    and on x86 the stores of one copy are visible before the next's).
 * Under 8 bytes the last byte goes last.  When the final segment of the
 * peer's buffer is shorter than 8 bytes, the tail is that segment.
 * Tested by tests/shm/test_shm_order.c (both rules, both paths).
 */
#ifndef ZD_SOFT_COPY_H
#define ZD_SOFT_COPY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "core/zd_compiler.h"
#include "hw/soft/zd_soft_peer.h"

/* Segments one copy takes on either side. */
#define ZD_SOFT_MAX_SEGS 64
/* The tail stored last. */
#define ZD_SOFT_TAIL 8u

/* A checked range of a peer's memory, and the chunk slot its region table
 * gave for it (a layout other processes read: fixed-size fields). */
struct zd_soft_seg {
	uint64_t addr;
	uint32_t len;
	uint32_t chunk;
};

/* Copies @n (1..) bytes with no ordering promise; up to 16 bytes in two
 * overlapping fixed-size loads and stores, no call. */
static ZD_ALWAYS_INLINE void zd_soft_copy_body(uint8_t *d, const uint8_t *s, uint64_t n)
{
	if (ZD_UNLIKELY(n > 16)) {
		memcpy(d, s, n);
	} else if (n >= 8) {
		uint64_t a, b;

		memcpy(&a, s, 8);
		memcpy(&b, s + n - 8, 8);
		memcpy(d, &a, 8);
		memcpy(d + n - 8, &b, 8);
	} else if (n >= 4) {
		uint32_t a, b;

		memcpy(&a, s, 4);
		memcpy(&b, s + n - 4, 4);
		memcpy(d, &a, 4);
		memcpy(d + n - 4, &b, 4);
	} else if (n >= 2) {
		uint16_t a, b;

		memcpy(&a, s, 2);
		memcpy(&b, s + n - 2, 2);
		memcpy(d, &a, 2);
		memcpy(d + n - 2, &b, 2);
	} else {
		d[0] = s[0];
	}
}

/* Stores the 8-byte tail @v at @d after every earlier store. */
static ZD_ALWAYS_INLINE void zd_soft_store_tail8(uint8_t *d, uint64_t v)
{
	if (ZD_LIKELY(((uintptr_t)d & 7) == 0)) {
		/* release: the body is visible before any byte of the tail,
		 * and the tail is one store (an aligned word never tears). */
		__atomic_store_n((uint64_t *)(void *)d, v, __ATOMIC_RELEASE);
	} else {
		/* release fence: orders the body before the tail's stores. */
		atomic_thread_fence(memory_order_release);
		memcpy(d, &v, 8);
	}
}

/* Stores @n (1..8) tail bytes from @s at @d after every earlier store. */
static inline void zd_soft_store_tail(uint8_t *d, const uint8_t *s, uint32_t n)
{
	if (n == ZD_SOFT_TAIL) {
		uint64_t v;

		memcpy(&v, s, 8);
		zd_soft_store_tail8(d, v);
		return;
	}
	if (n > 1)
		zd_soft_copy_body(d, s, n - 1);
	/* release: every byte above is visible before the last. */
	__atomic_store_n(d + n - 1, s[n - 1], __ATOMIC_RELEASE);
}

/* Copies @len (> 0) bytes to peer memory we can address, tail last. */
static ZD_ALWAYS_INLINE void zd_soft_copy_to_peer(void *dst, const void *src, uint64_t len)
{
	uint8_t *d = dst;
	const uint8_t *s = src;

	if (ZD_LIKELY(len >= ZD_SOFT_TAIL)) {
		uint64_t body = len - ZD_SOFT_TAIL, tail;

		if (body)
			zd_soft_copy_body(d, s, body);
		memcpy(&tail, s + body, 8);
		zd_soft_store_tail8(d + body, tail);
	} else {
		zd_soft_store_tail(d, s, (uint32_t)len);
	}
}

/* A cross-memory attach to @p failed with @err: -EACCES when the kernel
 * refused us ptrace rights over it (Yama ptrace_scope, a non-dumpable
 * peer, another user: a zdapl: line once per peer says so), else -1 (the
 * peer is gone).  Callers complete DAT_DTO_ERR_REMOTE_ACCESS for the
 * first, DAT_DTO_ERR_REMOTE_RESPONDER for the second. */
int zd_soft_peer_xma_failed(struct zd_soft_peer *p, int err);

/* Copies between local segments and the peer's (@to_peer: into the
 * peer's, tail last), through pointers where the peer's memory is mapped
 * or ours, else by cross-memory attach.  The peer's segments must cover
 * the local total.  0, -EACCES (cross-memory attach refused:
 * zd_soft_peer_xma_failed), or -1 (more than ZD_SOFT_MAX_SEGS segments,
 * short remote segments, or the peer is gone). */
int zd_soft_peer_copy(struct zd_soft_peer *p, bool to_peer, const struct iovec *local, int nlocal,
		      const struct zd_soft_seg *remote, int nremote);

#endif /* ZD_SOFT_COPY_H */
