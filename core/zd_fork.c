/* fork() hooks of the library (see zd_fork.h). */
#include <pthread.h>
#include <urcu-bp.h>
#include <urcu/call-rcu.h>

#include "core/zd_fork.h"
#include "core/zd_obj.h"

uint32_t zd_fork_gen;

/* liburcu's order: call_rcu's threads are paused before the grace-period
 * and registry locks are taken (a paused thread may be waiting for a
 * grace period), and resumed after they are let go.  call_rcu's hooks
 * carry the hash tables' resize worker with them (cds_lfht registers with
 * the flavour's call_rcu), which otherwise a child's cds_lfht_destroy
 * would wait for forever. */
static void fork_prepare(void)
{
	call_rcu_before_fork();
	urcu_bp_before_fork();
}

static void fork_parent(void)
{
	urcu_bp_after_fork_parent();
	call_rcu_after_fork_parent();
}

static void fork_child(void)
{
	/* Drops the registrations of threads that are not here. */
	urcu_bp_after_fork_child();
	/* A fresh call_rcu thread and resize worker (if the parent had them);
	 * callbacks the parent had queued run in them. */
	call_rcu_after_fork_child();
	zd_obj_fork_child();
	zd_fork_gen++;
}

__attribute__((constructor)) static void fork_register(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}
