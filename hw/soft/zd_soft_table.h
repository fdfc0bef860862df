/*
 * The tables a software device's owner publishes in shared memory for its
 * peers, who check and translate without asking it (the initiator executes):
 *  - the memory-region table: one entry per key (the device picks the index
 *    from the key), what an RDMA initiator checks an rkey against (key,
 *    bounds, access, protection zone) and where the range lies;
 *  - the chunk table: the owner's memfd chunks (mem/zd_chunk.h), which a
 *    peer maps once and then reaches with plain loads and stores, and its
 *    adoption file (mem/zd_adopt.h, flag ZD_SOFT_CHUNK_ADOPTED), which a
 *    peer maps in windows where file offset == the owner's address.
 *
 * Every entry is a seqlock: its owner rewrites it on the control path, one
 * writer at a time (the device's lock), and readers on any thread of any
 * process copy it lock-free and retry while it changes.  Memory order:
 *   writer  seq_begin: seq odd, release fence   | reader: acquire load seq
 *           fields (relaxed)                    |         fields (relaxed)
 *           seq_end: release store, seq even    |         acquire fence, seq again
 * A reader that saw any field of an update sees seq odd or moved, and
 * retries.  A peer's table is untrusted: readers bound every index they
 * compute, and a lying owner only misleads accesses to its own memory.
 */
#ifndef ZD_SOFT_TABLE_H
#define ZD_SOFT_TABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/zd_compiler.h"
#include "core/zd_range.h"
#include "mem/zd_adopt.h"

#define ZD_SOFT_NO_CHUNK UINT32_MAX

/* An MR entry's chunk with this bit names the owner's adoption file,
 * which holds only the whole pages inside the region (mem/zd_adopt.h):
 * an access reaching into its first or last partial page goes by
 * cross-memory attach.  zd_soft_mr_chunk says which applies. */
#define ZD_SOFT_CHUNK_INTERIOR (1u << 30)
#define ZD_SOFT_PAGE ZD_ADOPT_PAGE

/* Chunk entry flags. */
#define ZD_SOFT_CHUNK_ADOPTED (1u << 0) /* the adoption file: base 0, offset == address */
/* The adoption file's chunk id (pool chunk ids count up from 1). */
#define ZD_SOFT_ADOPT_ID UINT32_MAX

struct zd_soft_mr_entry {
	_Atomic uint32_t seq;
	_Atomic uint32_t key;        /* 0: free */
	_Atomic uint64_t addr;
	_Atomic uint64_t len;
	_Atomic uint32_t access;     /* the device's access flags */
	_Atomic uint32_t pz;         /* the device's protection-zone number */
	_Atomic uint32_t chunk;      /* chunk table slot holding the whole range, or NO_CHUNK */
	uint32_t pad;
};

struct zd_soft_chunk_entry {
	_Atomic uint32_t seq;
	_Atomic uint32_t id;         /* chunk id, 0 when the slot is empty */
	_Atomic int32_t fd;          /* the memfd's number in the owner */
	_Atomic uint32_t flags;      /* ZD_SOFT_CHUNK_* */
	_Atomic uint64_t base;
	_Atomic uint64_t len;
} __attribute__((aligned(32)));

/* ---- writer side (the owner, under its device lock) ---- */

static inline void zd_soft_seq_begin(_Atomic uint32_t *seq)
{
	atomic_store_explicit(seq, atomic_load_explicit(seq, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	/* release fence: pairs with the readers' acquire fence: a reader
	 * that sees any field written after this sees seq odd or moved. */
	atomic_thread_fence(memory_order_release);
}

static inline void zd_soft_seq_end(_Atomic uint32_t *seq)
{
	/* release: pairs with the readers' acquire load of seq. */
	atomic_store_explicit(seq, atomic_load_explicit(seq, memory_order_relaxed) + 1,
			      memory_order_release);
}

/* Publishes (key != 0) or clears (key 0) a memory region. */
void zd_soft_mr_publish(struct zd_soft_mr_entry *e, uint32_t key, uint64_t addr, uint64_t len,
			uint32_t access, uint32_t pz, uint32_t chunk);

/* Publishes chunk @id (memfd @fd, [base, base + len), ZD_SOFT_CHUNK_*
 * @flags) in a free slot of @tab; its slot, or -1 when the table is full
 * (peers then reach that memory by cross-memory attach only). */
int zd_soft_chunk_publish(struct zd_soft_chunk_entry *tab, uint32_t n, uint32_t id, int fd,
			  uint64_t base, uint64_t len, uint32_t flags);
/* Publishes this process's adoption file (mem/zd_adopt.h) if adoption is
 * on; its slot, or -1. */
int zd_soft_chunk_publish_adopted(struct zd_soft_chunk_entry *tab, uint32_t n);
/* Clears the slot of chunk @id; 0, or -1 if it is not published. */
int zd_soft_chunk_retract(struct zd_soft_chunk_entry *tab, uint32_t n, uint32_t id);
/* The slot of the published chunk holding [addr, addr + len), or NO_CHUNK:
 * the adoption file's (with ZD_SOFT_CHUNK_INTERIOR) when adoption holds
 * the range's whole pages, else the pool chunk's.  What an MR's entry names (control path: may take a mutex). */
uint32_t zd_soft_chunk_find(const struct zd_soft_chunk_entry *tab, uint32_t n, uint64_t addr,
			    uint64_t len);

/* ---- reader side (any thread, any process) ---- */

struct zd_soft_mr_view {
	uint64_t addr, len;
	uint32_t access, pz, chunk;
};

/* Copies entry @e, which the device chose for @key; false unless it is a
 * live region of that key.  *@seq: the entry's (even) seq the copy was
 * taken at: while the entry's seq still reads that value, the copy holds
 * (zd_soft_xlat.h caches on it). */
static inline bool zd_soft_mr_read_seq(const struct zd_soft_mr_entry *e, uint32_t key,
				       struct zd_soft_mr_view *v, uint32_t *seq)
{
	/* A writer is never preempted for long inside an entry: a few
	 * retries, then the access fails as a key being changed would. */
	for (int tries = 0; tries < 64; tries++) {
		/* acquire: pairs with zd_soft_seq_end. */
		uint32_t s = atomic_load_explicit(&e->seq, memory_order_acquire);

		if (s & 1)
			continue;
		uint32_t k = atomic_load_explicit(&e->key, memory_order_relaxed);

		v->addr = atomic_load_explicit(&e->addr, memory_order_relaxed);
		v->len = atomic_load_explicit(&e->len, memory_order_relaxed);
		v->access = atomic_load_explicit(&e->access, memory_order_relaxed);
		v->pz = atomic_load_explicit(&e->pz, memory_order_relaxed);
		v->chunk = atomic_load_explicit(&e->chunk, memory_order_relaxed);
		/* acquire fence: pairs with zd_soft_seq_begin's release fence. */
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&e->seq, memory_order_relaxed) != s)
			continue;
		*seq = s;
		return k == key && key != 0;
	}
	return false;
}

static ZD_ALWAYS_INLINE bool zd_soft_mr_read(const struct zd_soft_mr_entry *e, uint32_t key,
					     struct zd_soft_mr_view *v)
{
	uint32_t seq;

	return zd_soft_mr_read_seq(e, key, v, &seq);
}

/* [addr, addr + len) inside the region, with every right of @need, in
 * protection zone @pz. */
static inline bool zd_soft_mr_allows(const struct zd_soft_mr_view *v, uint64_t addr,
				     uint64_t len, uint32_t need, uint32_t pz)
{
	return (v->access & need) == need && v->pz == pz &&
	       zd_range_in(v->addr, v->len, addr, len);
}

/* The chunk slot through which [addr, addr + len) of the region @v
 * (already checked to hold it) is reached, or NO_CHUNK. */
static ZD_ALWAYS_INLINE uint32_t zd_soft_mr_chunk(const struct zd_soft_mr_view *v,
						  uint64_t addr, uint64_t len)
{
	uint64_t lo, hi;

	if (ZD_LIKELY(!(v->chunk & ZD_SOFT_CHUNK_INTERIOR)) || v->chunk == ZD_SOFT_NO_CHUNK)
		return v->chunk;
	lo = (v->addr + ZD_SOFT_PAGE - 1) & ~(uint64_t)(ZD_SOFT_PAGE - 1);
	hi = (v->addr + v->len) & ~(uint64_t)(ZD_SOFT_PAGE - 1);
	return addr >= lo && addr <= hi && len <= hi - addr ? v->chunk & ~ZD_SOFT_CHUNK_INTERIOR
							  : ZD_SOFT_NO_CHUNK;
}

struct zd_soft_chunk_view {
	uint32_t id;
	int fd;
	uint32_t flags;
	uint64_t base, len;
};

/* Copies a chunk entry; false if it is empty or changing. */
static inline bool zd_soft_chunk_read(const struct zd_soft_chunk_entry *e,
				      struct zd_soft_chunk_view *v)
{
	/* acquire: pairs with zd_soft_seq_end. */
	uint32_t s = atomic_load_explicit(&e->seq, memory_order_acquire);

	v->id = atomic_load_explicit(&e->id, memory_order_relaxed);
	v->fd = atomic_load_explicit(&e->fd, memory_order_relaxed);
	v->flags = atomic_load_explicit(&e->flags, memory_order_relaxed);
	v->base = atomic_load_explicit(&e->base, memory_order_relaxed);
	v->len = atomic_load_explicit(&e->len, memory_order_relaxed);
	/* acquire fence: pairs with zd_soft_seq_begin's release fence. */
	atomic_thread_fence(memory_order_acquire);
	return !(s & 1) && atomic_load_explicit(&e->seq, memory_order_relaxed) == s && v->id != 0;
}

#endif /* ZD_SOFT_TABLE_H */
