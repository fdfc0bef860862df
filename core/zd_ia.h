/* Interface adapter: one open device, parent of every other object. */
#ifndef ZD_IA_H
#define ZD_IA_H

#include <pthread.h>
#include <netinet/in.h>

#include "core/zd_obj.h"
#include "core/zd_counters.h"
#include "core/zd_device.h"
#include "core/zd_log.h"    /* zd_log_error, for the IA's many users */

/* One per dat.conf line: libdat2 dispatches through @dat, and every handle
 * of an IA opened through that line points at it. */
struct zd_provider {
	DAT_PROVIDER dat;
	DAT_PROVIDER_INFO info;
	char ia_params[256];
	int registered;
};

#define ZD_IA_NAMED_ATTRS 8

struct zd_evd;
struct zd_cm_ia;
struct zd_keytab;
struct zd_keygen;
struct zd_ud;

struct zd_ia {
	struct zd_obj obj;
	struct zd_provider *prov;
	const struct zd_device_ops *dev;
	void *dev_priv;
	struct zd_ia_params params;
	struct sockaddr_in addr;            /* DAT IA address (AF_INET) */
	struct zd_device_limits limits;
	struct zd_evd *async_evd;
	struct zd_cm_ia *cm;                /* connection manager state (zd_cm) */
	int async_evd_ours;                 /* created by ia_open: freed by close */
	struct zd_keytab *keys;             /* LMR/RMR keys, see zd_keys.h */
	struct zd_keygen *keygen;           /* fresh keys for them */
	_Atomic(struct zd_ud *) ud;         /* UD address handles (zd_ud.c), lazily */
	/* dat_ia_query's provider-specific attributes (zd_attr.c) */
	DAT_NAMED_ATTR named_attrs[ZD_IA_NAMED_ATTRS];
	uint32_t fork_gen;                  /* zd_fork_gen at open (zd_fork.h) */
	pthread_mutex_t lock;               /* children list; control path only */
	struct zd_obj children;             /* list head (only the links are used) */
	struct zd_ia_counters cnt;          /* dat_ib_query_counters (zd_counters.h) */
};
ZD_OBJ_FITS(IA, struct zd_ia);

/* Links/unlinks a child into its IA's list (control path), counting its
 * creation or end (zd_counters_child). */
void zd_ia_add_child(struct zd_ia *ia, struct zd_obj *child);
void zd_ia_del_child(struct zd_ia *ia, struct zd_obj *child);

/* The IA handle the consumer holds for @ia: libdat2 hands out its own small
 * integers for IAs and maps them back on the way in, so query results
 * must name the IA that way too. */
DAT_IA_HANDLE zd_ia_consumer_handle(struct zd_ia *ia);

/* Parses "<device> [args...]" strictly; 0 or -1 with a message on stderr. */
int zd_ia_params_parse(const char *str, struct zd_ia_params *out);

/* Posts an async error event of @type about @source (reason 0) to its
 * IA's async EVD. */
void zd_ia_post_async(struct zd_obj *source, DAT_EVENT_NUMBER type);

/* Posts DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR with @reason about
 * @handle on the IA's async EVD (the headers name no event of their own for
 * the SRQ low watermark or the EP soft high watermark). */
void zd_ia_async_error(struct zd_ia *ia, DAT_HANDLE handle, DAT_COUNT reason);

/* zd_counters.c: the IA's counters of an object of @type created or freed
 * (its DCNT_IA_*_CREATE or _FREE; a CR is a DCNT_IA_SP_CR), of an async
 * event of @type, and their start at dat_ia_open. */
void zd_counters_child(struct zd_ia *ia, enum zd_obj_type type, bool created);
void zd_counters_async(struct zd_ia *ia, DAT_EVENT_NUMBER type);
void zd_counters_ia_open(struct zd_ia *ia);

#endif
