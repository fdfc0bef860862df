/*
 * The range test every key check makes: does [addr, addr + len) lie inside
 * a region [base, base + size)?  Regions never wrap the address space
 * (dat_lmr_create refuses one that would), so the offset of @addr, taken
 * first, is huge for an address below the region and fails with the rest:
 * two compares, no overflow, for any @addr and @len.
 */
#ifndef ZD_RANGE_H
#define ZD_RANGE_H

#include <stdbool.h>
#include <stdint.h>

static inline bool zd_range_in(uint64_t base, uint64_t size, uint64_t addr, uint64_t len)
{
	uint64_t off = addr - base;

	return off <= size && len <= size - off;
}

#endif /* ZD_RANGE_H */
