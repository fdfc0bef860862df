/* Error messages on stderr.  As basic as zd_compiler.h: every layer may
 * include it (evd/ does, for the pinned pollers' setup errors). */
#ifndef ZD_LOG_H
#define ZD_LOG_H

/* One clear line on stderr, prefixed "zdapl: ". */
void zd_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
