/* Shared receive queues: the DAT SRQ object. */
#ifndef ZD_SRQ_H
#define ZD_SRQ_H

#include <stdatomic.h>

#include "core/zd_obj.h"
#include "core/zd_mem_objs.h"

struct zd_srq {
	struct zd_obj obj;
	struct zd_pz *pz;
	DAT_COUNT max_recv_dtos;        /* queue size the device holds */
	DAT_COUNT max_recv_iov;
	_Atomic DAT_COUNT low_watermark; /* DAT_SRQ_LW_DEFAULT: no event */
	_Atomic DAT_SRQ_STATE state;
	void *dev_priv;                  /* the device's SRQ */
};
ZD_OBJ_FITS(SRQ, struct zd_srq);

/* Devices call this when receives were taken from the SRQ: @avail
 * buffers are left.  Below the low watermark it posts the SRQ low
 * watermark event once per dat_srq_set_lw (the watermark disarms itself). */
void zd_srq_check_lw(struct zd_srq *srq, uint64_t avail);

/* Forced free for an abrupt dat_ia_close. */
void zd_srq_destroy(struct zd_obj *o);

#endif
