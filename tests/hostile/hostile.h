/*
 * What the hostile-peer suites share: the devices they run on (through
 * the cm suite's dat.conf) and a look at this process's own resources.
 */
#ifndef HOSTILE_H
#define HOSTILE_H

#include <stdio.h>
#include <string.h>

#include "dat_peer.h"

static const struct peer_dev shm = { .ia = "zdapl-shm" };
static const struct peer_dev tcp = { .ia = "zdapl-tcp-lo" };
static const struct peer_dev mlx5sim = { .ia = "zdapl-mlx5sim" };

/* A number field of /proc/self/status ("VmRSS", "Threads"), or -1. */
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
