/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Key generator: unique, non-zero 32-bit keys for the software devices'
 * lkeys/rkeys (keys of zd_keytab.h).
 *
 * key = generation << idx_bits | index, both secret permutations: the
 * index is a keyed permutation of a dense slot number (so any index of
 * [0, 2^idx_bits) may come out, and the one after a key says nothing of
 * the next), the generation a keyed permutation, per index, of a counter
 * that each reuse of that index moves on.  An index is reused only after
 * a quarantine of other releases, and its counter then differs, so a
 * stale key held by a peer after its region was freed does not match the
 * next region at that index: it only could after 2^(32 - idx_bits) - 1
 * reuses of that one index.  The round keys come from getrandom() per
 * generator: a peer that saw any number of keys cannot tell another live
 * key better than by trying (about 2^32 / live keys tries; every wrong
 * one costs it the connection, see README "Reliability").
 *
 * Thread-safe (a mutex: key creation is control path).
 */
#ifndef ZD_KEYGEN_H
#define ZD_KEYGEN_H

#include <stdint.h>

struct zd_keygen;

/* Released indices wait behind this many others before reuse. */
#define ZD_KEYGEN_QUARANTINE 256

/* Feistel rounds of the key permutations (zd_keygen.c). */
#define ZD_KEYGEN_ROUNDS 4

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

/* The index part of key, in [0, 2^idx_bits): an array of 2^idx_bits
 * entries (the shm device's MR table) is indexed by it. */
uint32_t zd_keygen_index(const struct zd_keygen *kg, uint32_t key);

#endif /* ZD_KEYGEN_H */
