/*
 * A key check's memo (hw/tcp): the last LMR a poster's segments (or a
 * holder's incoming RDMA frames) named, so that the next DTO naming the
 * same key skips the key table (zd_keys_lmr_covers: a lock-free hash
 * lookup under urcu-bp's read lock, ~130 instructions, twice per message
 * of a send/recv ping-pong).
 *
 * Validity: the IA's LMR generation (zd_tcp_ia.lmr_gen) moves on every
 * dat_lmr_free of the IA (zd_tcp_mr_deregister, before core removes the
 * key), and a memo holds only while it has not moved since its lookup.
 * An LMR's key, region, PZ and rights never change while it lives, so a
 * memo that still holds says what the lookup would say now.  A free racing
 * with a post (another thread's) orders as a free after it, as with the
 * lookup itself; a post that happens after the free (same thread, or
 * synchronised with it) reads the new generation and looks the key up.
 *
 * Threads: a memo belongs to one thread at a time (a queue's poster, or
 * the QP's progress holder); the generation is read by any thread.
 */
#ifndef ZD_TCP_KEYMEMO_H
#define ZD_TCP_KEYMEMO_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/zd_keys.h"
#include "core/zd_range.h"

struct zd_pz;

struct zd_tcp_keymemo {
	uint64_t gen;             /* lmr_gen at the lookup; 0: empty */
	uint64_t base, size;      /* the LMR's region */
	const struct zd_pz *pz;   /* the PZ the lookup matched (NULL: any) */
	uint32_t key;
	uint32_t need;            /* the rights the lookup found granted */
};

/* The generation a check compares a memo with (one load per DTO). */
static inline uint64_t zd_tcp_keymemo_gen(_Atomic uint64_t *lmr_gen)
{
	/* acquire: pairs with the release RMW of zd_tcp_mr_deregister: a
	 * DTO after a free sees that free's generation. */
	return atomic_load_explicit(lmr_gen, memory_order_acquire);
}

/* zd_keys_lmr_covers(@ia, @key, ZD_KEY_REMOTE, @pz, @need, @addr, @len),
 * answered by @m when it holds for generation @gen (read before any
 * lookup, so that a free between the two leaves the memo stale). */
static inline bool zd_tcp_keymemo_covers(struct zd_tcp_keymemo *m, uint64_t gen,
					 struct zd_ia *ia, uint32_t key,
					 const struct zd_pz *pz, uint32_t need, uint64_t addr,
					 uint64_t len)
{
	struct zd_keys_range r;

	if (ZD_LIKELY(m->gen == gen && m->key == key && m->pz == pz &&
		      (need & ~m->need) == 0 && zd_range_in(m->base, m->size, addr, len)))
		return true;
	if (!zd_keys_lmr_covers(ia, key, ZD_KEY_REMOTE, pz, need, addr, len, &r))
		return false;
	m->gen = gen;
	m->key = key;
	m->pz = pz;
	m->need = need;
	m->base = r.base;
	m->size = r.size;
	return true;
}

#endif /* ZD_TCP_KEYMEMO_H */
