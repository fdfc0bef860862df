/* Unreliable datagrams: the address/CM handles core hands out (zd_ud.c). */
#ifndef ZD_UD_H
#define ZD_UD_H

#include <stdint.h>
#include <netinet/in.h>
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>

struct zd_ep;
struct zd_ia;

/* For a UD connection event of @ep: a new address handle (*ah, for the
 * event's DAT_IB_ADDR_HANDLE) and CM handle (*cm, its context) for the
 * remote UD QP whose blob is @blob, of the IA at @peer_ia, and a copy of
 * the event's private data (*pdata_copy, NULL if none) that lives as long
 * as the handles: an EP may have many such events queued at once.
 * Control path. */
DAT_RETURN zd_ud_issue(struct zd_ep *ep, const void *blob, size_t len,
		       const struct sockaddr_in *peer_ia, const void *pdata, size_t pdata_len,
		       DAT_IB_ADDR_HANDLE *ah, uint64_t *cm, const void **pdata_copy);

/* dat_ep_free of a UD EP: the handles its events gave out die. */
void zd_ud_ep_release(struct zd_ep *ep);

/* dat_ia_close: every device address handle is released. */
void zd_ud_ia_fini(struct zd_ia *ia);

#endif
