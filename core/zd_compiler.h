/* Compiler helpers used across zdapl. */
#ifndef ZD_COMPILER_H
#define ZD_COMPILER_H

#define ZD_LIKELY(x)   __builtin_expect(!!(x), 1)
#define ZD_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define ZD_ALWAYS_INLINE inline __attribute__((always_inline))
#define ZD_CACHE_LINE 64
#define ZD_CACHE_ALIGNED __attribute__((aligned(ZD_CACHE_LINE)))
#define ZD_EXPORT __attribute__((visibility("default")))
/* On the extern declaration of a variable of the library's own:
 * -fvisibility=hidden covers definitions only, and a hot path then reads
 * the variable straight rather than through the GOT. */
#define ZD_HIDDEN __attribute__((visibility("hidden")))
#define ZD_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define ZD_CONTAINER_OF(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#define ZD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define ZD_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
