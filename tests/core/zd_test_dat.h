/*
 * Shared setup for tests that reach zdapl the way applications do: through
 * libdat2 and a dat.conf (DAT_OVERRIDE), never by linking zdapl directly.
 */
#ifndef ZD_TEST_DAT_H
#define ZD_TEST_DAT_H

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <unistd.h>
#include <dat2/udat.h>

/* DAT_RETURN type without the subtype, and the subtype alone. */
#define ZD_T_TYPE(r) DAT_GET_TYPE(r)
#define ZD_T_SUB(r)  DAT_GET_SUBTYPE(r)

/* libdat2 reads DAT_OVERRIDE when it loads, so meson sets it to the dat.conf
 * of gen_test_conf.sh (real devices plus broken lines). */
static inline void zd_test_use_conf(void)
{
	if (!getenv("DAT_OVERRIDE")) {
		fprintf(stderr, "DAT_OVERRIDE is not set: run through meson test\n");
		exit(77);
	}
}

/* The IA a device-neutral suite runs over: ZD_TEST_IA (meson runs some
 * suites again over other devices), else @dflt. */
static inline const char *zd_test_ia(const char *dflt)
{
	const char *ia = getenv("ZD_TEST_IA");

	return ia && *ia ? ia : dflt;
}

static inline DAT_RETURN zd_test_open(const char *name, DAT_IA_HANDLE *ia, DAT_EVD_HANDLE *async)
{
	*async = DAT_HANDLE_NULL;
	return dat_ia_open((DAT_NAME_PTR)name, 8, async, ia);
}

#endif
