/*
 * fork() without exec: what a child inherits from a parent that opened IAs.
 *
 * As with verbs, the parent's IAs are not usable in a child: the threads
 * that serve them (the CM's, the pollers', the software NIC's engines,
 * tcp's progress) did not come along, and their queues and rings are
 * shared with the parent's peers.  The child may close them, which only
 * forgets them (nothing of the parent's is touched, no thread waited
 * for), and it may open IAs of its own.  For that liburcu must work in the
 * child: its call_rcu and hash-table resize threads are recreated there by
 * liburcu's own fork hooks (urcu-bp's and call_rcu's), which the library
 * runs around every fork() of the process (pthread_atfork).
 */
#ifndef ZD_FORK_H
#define ZD_FORK_H

#include <stdbool.h>
#include <stdint.h>

#include "core/zd_compiler.h"

/* Forks between the process that loaded the library and this one: bumped
 * in each child, before it runs anything else. */
extern ZD_HIDDEN uint32_t zd_fork_gen;

/* Was an object stamped with @gen (zd_fork_gen at its creation) made by
 * an ancestor of this process? */
static inline bool zd_fork_inherited(uint32_t gen)
{
	return gen != zd_fork_gen;
}

#endif
