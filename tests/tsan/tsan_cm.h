/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A connection server and churning clients (tsan_cm.c), shared by the cm
 * scenario and the traffic scenario, which runs them beside a busy
 * connection.
 */
#ifndef TSAN_CM_H
#define TSAN_CM_H

#include "tsan_util.h"

/* A node that accepts every connection request on its PSP (one thread)
 * and frees each EP once it is disconnected (another thread). */
struct ts_server {
	struct ts_node n;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL qual;
	pthread_t accepter, reaper;
	atomic_int stop;
	atomic_uint accepted, reaped, stale, broken_disc;
};

/* Opens the node and its PSP; ts_server_run starts the threads (the
 * traffic scenario connects its own pair in between, by hand). */
void ts_server_open(struct ts_server *srv, const char *ia, unsigned salt);
void ts_server_run(struct ts_server *srv);
/* Stops both threads and closes the node abruptly, with whatever EPs are
 * still connected. */
void ts_server_stop(struct ts_server *srv);

/* A client thread: connects to @srv and leaves again, in every way a
 * connection can end, until its budget is spent.  @shared: an IA other
 * clients use too (NULL: the client opens its own, often). */
struct ts_client {
	pthread_t t;
	const char *ia;
	struct ts_server *srv;
	struct ts_node *shared;
	unsigned id, ms, min_rounds;
	unsigned rounds;
};

void *ts_client_main(void *arg);

#endif
