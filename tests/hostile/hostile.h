/*
 * What the hostile-peer suites share: the devices they run on (through
 * the cm suite's dat.conf) and a look at this process's own resources.
 */
#ifndef HOSTILE_H
#define HOSTILE_H

#include <stdio.h>
#include <string.h>

#include "dat_peer.h"
#include "proc_status.h"

static const struct peer_dev shm = { .ia = "zdapl-shm" };
static const struct peer_dev tcp = { .ia = "zdapl-tcp-lo" };
static const struct peer_dev mlx5sim = { .ia = "zdapl-mlx5sim" };

/* Two peers of this process, each with its EP, and a PSP of @a's. */
static inline DAT_CONN_QUAL local_pair_open(struct peer *a, struct peer *b,
					    const struct peer_dev *dev, DAT_PSP_HANDLE *psp)
{
	DAT_CONN_QUAL port;

	peer_open(a, dev, 0, DAT_MEM_PRIV_ALL_FLAG);
	peer_open(b, dev, 0, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(a, &a->ep, 0);
	peer_ep(b, &b->ep, 0);
	CHK_RET(dat_psp_create_any(a->n.ia, &port, a->n.cr_evd, DAT_PSP_CONSUMER_FLAG, psp),
		DAT_SUCCESS);
	return port;
}

/* @b's EP connects to @a's PSP @port, @a accepts on its EP. */
static inline void local_connect(struct peer *a, struct peer *b, DAT_CONN_QUAL port)
{
	DAT_EVENT ev;

	CHK_RET(connect_loopback(b->ep, port, 10 * SEC), DAT_SUCCESS);
	CHK(wait_ev(a->n.cr_evd, 10 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, a->ep, 0, NULL),
		DAT_SUCCESS);
	CHK(wait_ev(a->n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(wait_ev(b->n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
}

#endif
