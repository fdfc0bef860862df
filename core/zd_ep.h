/* Endpoints: the DAT EP object and its state machine. */
#ifndef ZD_EP_H
#define ZD_EP_H

#include <stdatomic.h>
#include <netinet/in.h>

#include "core/zd_obj.h"
#include "core/zd_mem_objs.h"

struct zd_evd;
struct zd_srq;

struct zd_ep {
	struct zd_obj obj;
	_Atomic DAT_EP_STATE state;
	struct zd_pz *pz;
	struct zd_evd *recv_evd;
	struct zd_evd *request_evd;
	struct zd_evd *connect_evd;
	struct zd_srq *srq;
	DAT_EP_ATTR attr;
	struct sockaddr_in remote_addr;
	DAT_CONN_QUAL local_qual;
	DAT_CONN_QUAL remote_qual;
	void *dev_priv;                 /* the device's QP */
};
ZD_OBJ_FITS(EP, struct zd_ep);

void zd_ep_destroy(struct zd_obj *o);

/* dat_ep_create and dat_ep_create_with_srq (@srq may be NULL). */
DAT_RETURN zd_ep_create_internal(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv_evd,
				 DAT_EVD_HANDLE request_evd, DAT_EVD_HANDLE connect_evd,
				 struct zd_srq *srq, const DAT_EP_ATTR *attr,
				 DAT_EP_HANDLE *ep_handle);

#endif
