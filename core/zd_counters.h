/*
 * The counters of dat_ib_query_counters (dat_ib_extensions.h DCNT_*): where
 * each object keeps them and how they are counted.
 *
 * Every counter is a raw count that only grows, plus a base: the value
 * reported is raw - base, and a reset (query or print with reset) sets
 * base to the raw value it read.  So a reset never writes the counting
 * thread's memory, and nothing counted after the read is lost.
 *
 * Who writes the raw counts decides how:
 *  - IA counters (object lifetimes, connection requests, async events, the
 *    connection manager's messages): any thread, on the control path:
 *    relaxed atomic adds;
 *  - EP post counters: the posting thread, on the data path.  One thread
 *    posts to an EP at a time (dat.conf lines are nonthreadsafe, and the
 *    devices' send queues assume it: hw/mlx5/zd_mlx5_post.c), so a plain
 *    add into the EP's own lines is exact and writes no shared cache line;
 *    CONNECT and DISCONNECT, counted by whoever calls dat_ep_connect or
 *    dat_ep_disconnect, are relaxed atomic adds on a line of their own;
 *  - EVD counters: the EVD's one consumer, with plain adds into its own
 *    line (evd/zd_evd.h, enum zd_evd_tally), except connection events,
 *    counted atomically by the thread that posts them.
 * The only other access to a plainly counted word is a reader's relaxed
 * atomic load of the aligned 64-bit word, which the targets zdapl builds
 * for (x86-64, aarch64) read whole.
 */
#ifndef ZD_COUNTERS_H
#define ZD_COUNTERS_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <netinet/in.h>   /* dat_ib_extensions.h uses struct sockaddr_in6 */
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>

#include "core/zd_compiler.h"

/* The IA's counters: raw counts written by any thread (atomic), and the
 * base of each.  The MEM_* raw counts are the process's pool calls
 * (mem/zd_pool.h), so their base starts at the value dat_ia_open saw. */
struct zd_ia_counters {
	alignas(ZD_CACHE_LINE) _Atomic uint64_t raw[DCNT_IA_ALL_COUNTERS];
	alignas(ZD_CACHE_LINE) uint64_t base[DCNT_IA_ALL_COUNTERS];
};

/* The kinds of post an EP counts, each with a DCNT_EP_POST_* count and,
 * but for the atomics, a DCNT_EP_POST_*_DATA byte count. */
enum zd_ep_post_kind {
	ZD_POST_SEND,
	ZD_POST_SEND_UD,
	ZD_POST_RECV,
	ZD_POST_WRITE,
	ZD_POST_WRITE_IMM,
	ZD_POST_READ,
	ZD_POST_CMP_SWAP,
	ZD_POST_FETCH_ADD,
	ZD_POST_KINDS
};

/* The EP's counters.  The posting thread's two lines: counts and bytes a
 * line apart (adjacent, the compiler would pair the two adds into a
 * vector add that costs more than both).  CONNECT and DISCONNECT on a
 * line of their own; the RECV_* counts are not counted (README); base,
 * written by resets only, indexed by DCNT_EP_*. */
struct zd_ep_counters {
	alignas(ZD_CACHE_LINE) uint64_t posts[ZD_POST_KINDS];
	alignas(ZD_CACHE_LINE) uint64_t post_bytes[ZD_POST_KINDS];
	alignas(ZD_CACHE_LINE) _Atomic uint64_t connects, disconnects;
	uint64_t base[DCNT_EP_ALL_COUNTERS];
};

/* A control-path event of the IA: one relaxed atomic add. */
static inline void zd_count_ia(struct zd_ia_counters *c, DAT_IA_COUNTERS idx)
{
	atomic_fetch_add_explicit(&c->raw[idx], 1, memory_order_relaxed);
}

/* A post the device took: one more of @kind, of @bytes bytes. */
static ZD_ALWAYS_INLINE void zd_count_ep_post_bytes(struct zd_ep_counters *c,
						    enum zd_ep_post_kind kind, uint64_t bytes)
{
	c->posts[kind]++;
	c->post_bytes[kind] += bytes;
}

/* A post the device took: one more of @kind and the bytes of its @n
 * segments.  The posting thread's plain adds (see file comment).  One
 * segment, the common case (and the only one on a device's inlined path,
 * where the compiler knows it), takes no loop. */
static ZD_ALWAYS_INLINE void zd_count_ep_post(struct zd_ep_counters *c, enum zd_ep_post_kind kind,
					      DAT_COUNT n, const DAT_LMR_TRIPLET *iov)
{
	uint64_t bytes;

	if (ZD_LIKELY(n == 1)) {
		bytes = iov[0].segment_length;
	} else {
		bytes = 0;
		for (DAT_COUNT i = 0; i < n; i++)
			bytes += iov[i].segment_length;
	}
	zd_count_ep_post_bytes(c, kind, bytes);
}

/* A post without a byte count (the atomics). */
static ZD_ALWAYS_INLINE void zd_count_ep_post_op(struct zd_ep_counters *c,
						 enum zd_ep_post_kind kind)
{
	c->posts[kind]++;
}

#endif /* ZD_COUNTERS_H */
