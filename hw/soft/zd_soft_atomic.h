/*
 * One-sided 64-bit atomics on a peer's memory (fetch-and-add,
 * compare-and-swap), atomic with respect to every other initiator of any
 * process: a CPU atomic through the mapping where the peer's memory is
 * mapped or ours; elsewhere (cross-memory attach) a read-modify-write under
 * the target's atomic lock, a word in its shared region that every
 * initiator takes, in this process or another.  The lock word holds its
 * holder's pid (0: free), so that a waiter takes over the lock of a
 * holder killed inside.  The operation itself is the caller's @apply
 * (byte order included).
 */
#ifndef ZD_SOFT_ATOMIC_H
#define ZD_SOFT_ATOMIC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hw/soft/zd_soft_peer.h"

/* The new value from @old, and whether to store it. */
typedef uint64_t zd_soft_atomic_fn(uint64_t old, const void *arg, bool *store);

/* Applies @apply to the peer's checked, 8-byte aligned word at @addr
 * (chunk slot @chunk of its region table); the old value lands in *@old.
 * 0, -EACCES (cross-memory attach refused: zd_soft_peer_xma_failed), or -1
 * if the peer cannot be reached (or its chunk not mapped). */
int zd_soft_peer_atomic(struct zd_soft_peer *p, _Atomic uint32_t *lock, uint32_t chunk,
			uint64_t addr, zd_soft_atomic_fn *apply, const void *arg, uint64_t *old);

#endif /* ZD_SOFT_ATOMIC_H */
