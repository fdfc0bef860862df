/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tsan_stress: the multi-threaded parts of zdapl driven hard enough for
 * ThreadSanitizer to see their races, as a plain program (Criterion cannot
 * run under TSan: "Could not initialize inheritable arena").  Each
 * scenario reaches the library through libdat2 (DAT_OVERRIDE) and runs a
 * few seconds; a failed check prints a line and exits 1, a TSan report
 * exits 66 (TSAN_OPTIONS, tests/tsan/meson.build).
 *
 *   tsan_stress evd [ia]          EVD wait/wake and resize against producers
 *   tsan_stress pollers <ia>      pinned pollers (ZDAPL_POLLERS) against
 *                                 consumers dequeuing and freeing EVDs/EPs
 *   tsan_stress cm <ia>           the CM thread against connects, disconnects
 *                                 and dat_ia_close from several threads
 *   tsan_stress traffic <ia>      a connection's traffic (the tcp progress
 *                                 thread, the mlx5 event thread and the
 *                                 software NIC's engine) while other
 *                                 connections come and go
 */
#include "tsan_util.h"

const char *ts_scenario = "?";

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
} scenarios[] = {
	{ "evd", ts_evd },
	{ "pollers", ts_pollers },
	{ "cm", ts_cm },
	{ "traffic", ts_traffic },
};

int main(int argc, char **argv)
{
	if (!getenv("DAT_OVERRIDE")) {
		fprintf(stderr, "tsan_stress: DAT_OVERRIDE is not set: run through meson test\n");
		return 77;
	}
	/* A stuck scenario never outlives its test. */
	alarm(120);
	for (size_t i = 0; argc > 1 && i < sizeof(scenarios) / sizeof(scenarios[0]); i++) {
		if (strcmp(argv[1], scenarios[i].name) == 0) {
			uint64_t t0 = now_ms();
			int rc;

			ts_scenario = argv[1];
			rc = scenarios[i].fn(argc - 2, argv + 2);
			printf("tsan_stress %s%s%s: %s in %.1f s\n", argv[1], argc > 2 ? " " : "",
			       argc > 2 ? argv[2] : "", rc ? "FAILED" : "ok",
			       (double)(now_ms() - t0) / 1000);
			return rc;
		}
	}
	fprintf(stderr, "usage: tsan_stress evd|pollers|cm|traffic [ia_name]\n");
	return 2;
}
