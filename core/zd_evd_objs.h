/* EVDs and CNOs as DAT objects of an IA (zd_evd_obj.c, zd_cno_obj.c); their
 * event machinery is evd/'s. */
#ifndef ZD_EVD_OBJS_H
#define ZD_EVD_OBJS_H

#include "core/zd_obj.h"

/* Forced frees used by an abrupt dat_ia_close. */
void zd_evd_destroy(struct zd_obj *o);
void zd_cno_destroy(struct zd_obj *o);

#endif
