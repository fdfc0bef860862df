/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Small arch helpers shared by the EVD ring and waiter (and free for anyone
 * else in the tree): cache geometry and the spin-loop pause.
 */
#ifndef ZD_RING_ARCH_H
#define ZD_RING_ARCH_H

#ifndef ZD_CACHE_LINE
#define ZD_CACHE_LINE 64
#endif

/*
 * Data written by different threads is kept this far apart, not just one line:
 * the L2 adjacent-line (spatial) prefetchers of current Intel and AMD cores
 * fetch 128-byte pairs, which makes 64-byte neighbours falsely share.
 */
#ifndef ZD_CACHE_GUARD
#define ZD_CACHE_GUARD 128
#endif

#ifndef zd_likely
#define zd_likely(x)   __builtin_expect(!!(x), 1)
#define zd_unlikely(x) __builtin_expect(!!(x), 0)
#endif

/* ThreadSanitizer build (gcc defines the macro, clang has the feature). GCC's
 * TSan does not support atomic_thread_fence; code that needs a full fence
 * uses an equivalent RMW under ZD_TSAN. */
#ifndef ZD_TSAN
#if defined(__SANITIZE_THREAD__)
#define ZD_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ZD_TSAN 1
#endif
#endif
#endif

/* Happens-before edges TSan cannot see for itself (liburcu's grace periods
 * inside an uninstrumented library; two mappings of one memfd): a release
 * on an address, then an acquire on it.  Nothing in other builds. */
#ifdef ZD_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define zd_tsan_acquire(addr) __tsan_acquire(addr)
#define zd_tsan_release(addr) __tsan_release(addr)
#else
#define zd_tsan_acquire(addr) do { } while (0)
#define zd_tsan_release(addr) do { } while (0)
#endif

#ifndef ZD_HAVE_CPU_RELAX
#define ZD_HAVE_CPU_RELAX 1
/* Spin-wait hint: frees pipeline resources for the sibling hyperthread and
 * avoids the memory-order machine clear when the awaited line changes. */
static inline void zd_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	__asm__ __volatile__("" ::: "memory");
#endif
}
#endif

#endif /* ZD_RING_ARCH_H */
