/*
 * A number field of /proc/self/status ("VmRSS", "Threads", "VmLck"), for
 * tests that watch their own resources (tests/hostile, tests/exhaust).
 * Plain libc, no Criterion.
 */
#ifndef PROC_STATUS_H
#define PROC_STATUS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The field's number (kB for sizes), or -1. */
static inline long proc_status(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t n = strlen(field);
	long v = -1;

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) && line[n] == ':') {
			v = strtol(line + n + 1, NULL, 10);
			break;
		}
	if (f)
		fclose(f);
	return v;
}

#endif
