/* Error messages on stderr.  As basic as zd_compiler.h: every layer may
 * include it (evd/ does, for the pinned pollers' setup errors). */
#ifndef ZD_LOG_H
#define ZD_LOG_H

#include <stdint.h>

/* One clear line on stderr, prefixed "zdapl: ". */
void zd_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * A call site's allowance, for a failure that may repeat as fast as a
 * consumer retries (out of descriptors, memory, address space): the first
 * ZD_LOG_BURST lines of a second are printed, the rest of that second
 * only counted, and the next printed line says how many were left out.
 */
#define ZD_LOG_BURST 5

struct zd_log_limit {
	uint64_t window_ms;     /* start of the current second */
	uint32_t printed;       /* lines printed in it */
	uint32_t suppressed;    /* lines left out since the last printed */
};

void zd_log_limited(struct zd_log_limit *lim, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Lines this thread said so far, those a limit left out included: a
 * call that failed without adding one said nothing of why. */
unsigned zd_log_said(void);

/* zd_log_limited with an allowance of its own per call site. */
#define zd_log_rate_limited(...)                                      \
	do {                                                          \
		static struct zd_log_limit zd_log_site_;              \
		zd_log_limited(&zd_log_site_, __VA_ARGS__);           \
	} while (0)

#endif
