/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What /proc/self/maps says about a range, for adoption (zd_adopt.h):
 * whether it is private anonymous read-write memory, and which pieces of
 * it still map the adoption file where adoption put them.  Control path:
 * reads the whole maps file.
 */
#ifndef ZD_ADOPT_MAPS_H
#define ZD_ADOPT_MAPS_H

#include <stdint.h>
#include <sys/types.h>

/* NULL when every page of [lo, hi) is private anonymous read-write memory
 * that may be re-backed; otherwise why not, for the log. */
const char *zd_adopt_maps_check_private(uint64_t lo, uint64_t hi);

/* Calls @fn for each piece of [lo, hi) that maps file (@dev, @ino) shared,
 * read-write, at file offset == address.  The pieces are collected before
 * the first call, so @fn may change the mappings. */
void zd_adopt_maps_each_file_piece(uint64_t lo, uint64_t hi, dev_t dev, ino_t ino,
				   void (*fn)(void *arg, uintptr_t lo, uintptr_t hi), void *arg);

#endif /* ZD_ADOPT_MAPS_H */
