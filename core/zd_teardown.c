/* Abrupt teardown: children are freed users-first, so every object's
 * references are gone by the time it is destroyed itself. */
#include "core/zd_ia.h"
#include "core/zd_teardown.h"
#include "core/zd_ep.h"
#include "core/zd_cm.h"
#include "core/zd_mem_objs.h"
#include "core/zd_srq.h"
#include "core/zd_evd_objs.h"

typedef void (*zd_destroy_fn)(struct zd_obj *o);

static const struct {
	enum zd_obj_type type;
	zd_destroy_fn destroy;
} teardown_order[] = {
	/* Listeners first, so no new CR can appear behind the CR pass. */
	{ ZD_OBJ_PSP, zd_psp_destroy },
	{ ZD_OBJ_RSP, zd_rsp_destroy },
	{ ZD_OBJ_CR, zd_cr_destroy },
	{ ZD_OBJ_EP, zd_ep_destroy },
	{ ZD_OBJ_SRQ, zd_srq_destroy },
	{ ZD_OBJ_RMR, zd_rmr_destroy },
	{ ZD_OBJ_LMR, zd_lmr_destroy },
	{ ZD_OBJ_EVD, zd_evd_destroy },
	{ ZD_OBJ_CNO, zd_cno_destroy },
	{ ZD_OBJ_PZ, zd_pz_destroy },
};

/* First child of @type, or NULL.  The list is re-walked after each destroy
 * because destroy unlinks (and may unlink others). */
static struct zd_obj *first_of(struct zd_ia *ia, enum zd_obj_type type)
{
	struct zd_obj *found = NULL;

	pthread_mutex_lock(&ia->lock);
	for (struct zd_obj *c = ia->children.ia_next; c != &ia->children; c = c->ia_next) {
		if (c->type == type) {
			found = c;
			break;
		}
	}
	pthread_mutex_unlock(&ia->lock);
	return found;
}

void zd_teardown_children(struct zd_ia *ia)
{
	for (size_t i = 0; i < ZD_ARRAY_SIZE(teardown_order); i++) {
		struct zd_obj *o;

		while ((o = first_of(ia, teardown_order[i].type)) != NULL)
			teardown_order[i].destroy(o);
	}
}
