/*
 * Consumer notification object: one thread waits on several EVDs at once.
 * An enabled EVD that gets an event while nobody waits on it directly
 * triggers its CNO: the CNO's waiter is woken and its proxy agent called.
 */
#ifndef ZD_CNO_H
#define ZD_CNO_H

#include <pthread.h>
#include "core/zd_obj.h"
#include "evd/zd_waiter.h"

struct zd_evd;

struct zd_cno {
	struct zd_obj obj;
	struct zd_waiter waiter;
	struct zd_evd *_Atomic triggered;   /* last EVD that triggered us */
	pthread_mutex_t lock;               /* evds list and agent */
	struct zd_evd *evds;                /* linked through evd->cno_next */
	DAT_OS_WAIT_PROXY_AGENT agent;
};
ZD_OBJ_FITS(CNO, struct zd_cno);

/* For the DAT object around the CNO (core/zd_cno_obj.c): sets up a
 * zeroed @cno, and at its end wakes its waiters (kill it first: they find
 * it dead) and frees what init set up. */
void zd_cno_init(struct zd_cno *cno, DAT_OS_WAIT_PROXY_AGENT agent);
void zd_cno_fini(struct zd_cno *cno);

void zd_cno_attach(struct zd_cno *cno, struct zd_evd *evd);
void zd_cno_detach(struct zd_cno *cno, struct zd_evd *evd);
void zd_cno_trigger_from(struct zd_cno *cno, struct zd_evd *evd);

#endif
