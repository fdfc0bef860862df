/*
 * zdapl-shm: sends that completed into the target's eager ring (no
 * receive posted yet) before their sender disconnected, freed its EP or
 * exited are delivered to the target's receives, those posted before the
 * disconnect and those posted after it, in order, before any receive
 * flushes (tests/cm dat_peer.h, eager_outlives_disconnect; two processes
 * over the real connection manager).
 */
#include "dat_peer.h"

static const struct peer_dev shm = { .ia = "zdapl-shm" };

TestSuite(shm_disc, .timeout = 60);

Test(shm_disc, sender_disconnects) { eager_outlives_disconnect(&shm, 0, EAGER_DISCONNECT); }
Test(shm_disc, sender_frees_its_ep) { eager_outlives_disconnect(&shm, 0, EAGER_EP_FREE); }
Test(shm_disc, sender_exits) { eager_outlives_disconnect(&shm, 0, EAGER_EXIT); }
Test(shm_disc, srq_sender_disconnects)
{
	eager_outlives_disconnect(&shm, 0, EAGER_SRQ | EAGER_DISCONNECT);
}
Test(shm_disc, srq_sender_exits) { eager_outlives_disconnect(&shm, 0, EAGER_SRQ | EAGER_EXIT); }
