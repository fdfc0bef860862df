/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Key generator: unique, non-zero 32-bit keys for the software devices'
 * lkeys/rkeys (keys of zd_keytab.h).
 *
 * key = generation << idx_bits | index.  An index is reused only after a
 * quarantine of other releases, and each reuse bumps its generation, so a stale
 * key held by a peer after its region was freed does not match the next region
 * at that index: it only could after 2^(32 - idx_bits) - 1 reuses of that one
 * index.  Generations start at a random value per index, which makes keys
 * harder to guess; keys are still not secrets.
 *
 * Thread-safe (a mutex: key creation is control path).
 */
#ifndef ZD_KEYGEN_H
#define ZD_KEYGEN_H

#include <stdint.h>

struct zd_keygen;

/* Released indices wait behind this many others before reuse. */
#define ZD_KEYGEN_QUARANTINE 256

/*
 * A generator of up to 2^idx_bits live keys, idx_bits in [9, 24] (at least
 * 8 generation bits).  NULL on bad idx_bits (errno EINVAL) or no memory.
 */
struct zd_keygen *zd_keygen_create(unsigned idx_bits);
void zd_keygen_destroy(struct zd_keygen *kg);

/* A fresh key in *key.  0, -ENOSPC if all indices are live, -ENOMEM. */
int zd_keygen_get(struct zd_keygen *kg, uint32_t *key);

/* Release a live key.  0, or -EINVAL if key is not live (stale, foreign). */
int zd_keygen_put(struct zd_keygen *kg, uint32_t key);

/* The index part of key: dense, usable to index a side array. */
uint32_t zd_keygen_index(const struct zd_keygen *kg, uint32_t key);

#endif /* ZD_KEYGEN_H */
