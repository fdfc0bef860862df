/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CM thread against connects, disconnects and dat_ia_close from
 * several threads: a server node accepting on one thread and freeing
 * disconnected EPs on another; client threads, some on IAs of their own
 * (opened and closed every round), some sharing one IA (each with its own
 * connection EVD), that end their connections gracefully, abruptly, by
 * dat_ep_free, or by dat_ia_close, before or after they are established.
 */
#include "tsan_cm.h"

/* ---- server ----------------------------------------------------------------- */

#define MAX_LIVE 256

/* The EPs the accepter made and the reaper has not freed: the reaper frees
 * only these (a late event of an EP freed already is ignored). */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static DAT_EP_HANDLE live[MAX_LIVE];

static int live_add(DAT_EP_HANDLE ep)
{
	int ok = 0;

	pthread_mutex_lock(&live_lock);
	for (int i = 0; i < MAX_LIVE && !ok; i++)
		if (!live[i]) {
			live[i] = ep;
			ok = 1;
		}
	pthread_mutex_unlock(&live_lock);
	return ok;
}

static int live_take(DAT_EP_HANDLE ep)
{
	int found = 0;

	pthread_mutex_lock(&live_lock);
	for (int i = 0; i < MAX_LIVE && !found; i++)
		if (live[i] == ep) {
			live[i] = NULL;
			found = 1;
		}
	pthread_mutex_unlock(&live_lock);
	return found;
}

static void *accepter_main(void *arg)
{
	struct ts_server *srv = arg;

	while (!atomic_load(&srv->stop)) {
		DAT_EVENT ev;
		DAT_EP_HANDLE ep;

		if (wait_ev(srv->n.cr_evd, SEC / 10, &ev) != DAT_CONNECTION_REQUEST_EVENT)
			continue;
		CHK_RET(dat_ep_create(srv->n.ia, srv->n.pz, srv->n.dto, srv->n.dto,
				      srv->n.conn_evd, NULL, &ep), DAT_SUCCESS);
		if (!live_add(ep)) {
			/* Too many left over: refuse this one. */
			dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle, 0, NULL);
			CHK_RET(dat_ep_free(ep), DAT_SUCCESS);
			continue;
		}
		/* The requester may be gone already: its error is the peer's. */
		if (dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, ep, 0, NULL) !=
		    DAT_SUCCESS) {
			if (live_take(ep))
				CHK_RET(dat_ep_free(ep), DAT_SUCCESS);
			continue;
		}
		atomic_fetch_add(&srv->accepted, 1);
	}
	return NULL;
}

static void *reaper_main(void *arg)
{
	struct ts_server *srv = arg;

	while (!atomic_load(&srv->stop)) {
		DAT_EVENT ev;
		DAT_EVENT_NUMBER num = wait_ev(srv->n.conn_evd, SEC / 10, &ev);
		DAT_EP_HANDLE ep = ev.event_data.connect_event_data.ep_handle;

		DAT_EP_STATE st;

		if (!num || num == DAT_CONNECTION_EVENT_ESTABLISHED)
			continue;
		/* A late second event of an EP freed already may name a new
		 * EP at the same address: free only a disconnected one. */
		if (dat_ep_get_status(ep, &st, NULL, NULL) != DAT_SUCCESS ||
		    st != DAT_EP_STATE_DISCONNECTED) {
			atomic_fetch_add(&srv->stale, 1);
			continue;
		}
		if (live_take(ep)) {
			CHK_RET(dat_ep_free(ep), DAT_SUCCESS);
			atomic_fetch_add(&srv->reaped, 1);
		}
	}
	return NULL;
}

void ts_server_open(struct ts_server *srv, const char *ia, unsigned salt)
{
	memset(srv, 0, sizeof(*srv));
	ts_node_open(&srv->n, ia);
	srv->qual = ts_listen(&srv->n, &srv->psp, salt);
}

void ts_server_run(struct ts_server *srv)
{
	ts_thread(&srv->accepter, accepter_main, srv);
	ts_thread(&srv->reaper, reaper_main, srv);
}

void ts_server_stop(struct ts_server *srv)
{
	atomic_store(&srv->stop, 1);
	pthread_join(srv->accepter, NULL);
	pthread_join(srv->reaper, NULL);
	CHK_RET(dat_psp_free(srv->psp), DAT_SUCCESS);
	/* With the EPs still connected or being disconnected. */
	ts_node_close(&srv->n);
	pthread_mutex_lock(&live_lock);
	memset(live, 0, sizeof(live));
	pthread_mutex_unlock(&live_lock);
}

/* ---- clients ---------------------------------------------------------------- */

enum end_how {
	END_GRACEFUL,           /* dat_ep_disconnect graceful, then free */
	END_ABRUPT,             /* dat_ep_disconnect abrupt, then free */
	END_FREE,               /* dat_ep_free of the connected EP */
	END_FREE_EARLY,         /* dat_ep_free while the connect is on its way */
	END_IA_CLOSE,           /* dat_ia_close with the EP connected */
	END_IA_CLOSE_EARLY,     /* dat_ia_close while the connect is on its way */
	END_HOW_N
};

/* The next connection event of @ep on @evd (others' late events skipped). */
static DAT_EVENT_NUMBER conn_event(DAT_EVD_HANDLE evd, DAT_EP_HANDLE ep)
{
	uint64_t end = now_ms() + 10000;

	while (now_ms() < end) {
		DAT_EVENT ev;
		DAT_EVENT_NUMBER num = wait_ev(evd, SEC, &ev);

		if (num && ev.event_data.connect_event_data.ep_handle == ep)
			return num;
	}
	return 0;
}

static void client_round(struct ts_client *cl, struct ts_node *n, DAT_EVD_HANDLE conn_evd,
			 enum end_how how)
{
	DAT_EP_HANDLE ep;
	DAT_EVENT_NUMBER num;

	CHK_RET(dat_ep_create(n->ia, n->pz, n->dto, n->dto, conn_evd, NULL, &ep), DAT_SUCCESS);
	CHK_RET(connect_loopback(ep, cl->srv->qual, 10 * SEC), DAT_SUCCESS);
	switch (how) {
	case END_FREE_EARLY:
		CHK_RET(dat_ep_free(ep), DAT_SUCCESS);
		return;
	case END_IA_CLOSE_EARLY:
		ts_node_close(n);
		return;
	default:
		break;
	}
	num = conn_event(conn_evd, ep);
	if (num != DAT_CONNECTION_EVENT_ESTABLISHED) {
		/* The server's books say whether it refused for want of room
		 * (accepted - reaped = MAX_LIVE: terminal events missing). */
		fprintf(stderr, "tsan_stress cm: client %u: connect ended with event 0x%x "
			"(server: %u accepted, %u reaped, %u stale events)\n",
			cl->id, (unsigned)num, atomic_load(&cl->srv->accepted),
			atomic_load(&cl->srv->reaped), atomic_load(&cl->srv->stale));
		_exit(1);
	}
	switch (how) {
	case END_GRACEFUL:
	case END_ABRUPT:
		CHK_RET(dat_ep_disconnect(ep, how == END_GRACEFUL ? DAT_CLOSE_GRACEFUL_FLAG
								   : DAT_CLOSE_ABRUPT_FLAG),
			DAT_SUCCESS);
		num = conn_event(conn_evd, ep);
		/* zdapl-tcp: when the peer's data socket closes first, the
		 * device's EOF can end the connection as BROKEN before the
		 * CM's disconnect reply (not a race TSan sees; counted). */
		if (num == DAT_CONNECTION_EVENT_BROKEN)
			atomic_fetch_add(&cl->srv->broken_disc, 1);
		else if (num != DAT_CONNECTION_EVENT_DISCONNECTED) {
			fprintf(stderr, "tsan_stress cm: client %u: %s disconnect gave event 0x%x\n",
				cl->id, how == END_GRACEFUL ? "graceful" : "abrupt", (unsigned)num);
			_exit(1);
		}
		CHK_RET(dat_ep_free(ep), DAT_SUCCESS);
		break;
	case END_FREE:
		CHK_RET(dat_ep_free(ep), DAT_SUCCESS);
		break;
	default:
		ts_node_close(n);
		break;
	}
}

void *ts_client_main(void *arg)
{
	struct ts_client *cl = arg;
	struct ts_budget b;

	ts_budget_start(&b, cl->ms, cl->min_rounds);
	while (ts_budget_more(&b)) {
		enum end_how how = (enum end_how)((cl->rounds + cl->id) % END_HOW_N);

		if (cl->shared) {
			/* A connection EVD of this round's own: events an EP
			 * freed early left queued would otherwise meet a
			 * later EP at the same address. */
			DAT_EVD_HANDLE conn;

			CHK_RET(dat_evd_create(cl->shared->ia, 64, DAT_HANDLE_NULL,
					       DAT_EVD_CONNECTION_FLAG, &conn), DAT_SUCCESS);
			/* The shared IA is not ours to close. */
			if (how >= END_IA_CLOSE)
				how = how == END_IA_CLOSE ? END_FREE : END_FREE_EARLY;
			client_round(cl, cl->shared, conn, how);
			CHK_RET(dat_evd_free(conn), DAT_SUCCESS);
		} else {
			struct ts_node n;

			ts_node_open(&n, cl->ia);
			client_round(cl, &n, n.conn_evd, how);
			if (how < END_IA_CLOSE)
				ts_node_close(&n);
		}
		cl->rounds++;
	}
	return NULL;
}

/* ---- the scenario ------------------------------------------------------------ */

#define OWN_IA_CLIENTS 2
#define SHARED_IA_CLIENTS 2

int ts_cm(int argc, char **argv)
{
	const char *ia = argc > 0 ? argv[0] : "zdapl-shm";
	struct ts_client cl[OWN_IA_CLIENTS + SHARED_IA_CLIENTS];
	struct ts_server srv;
	struct ts_node shared;
	unsigned rounds = 0;

	ts_server_open(&srv, ia, 2);
	ts_server_run(&srv);
	ts_node_open(&shared, ia);
	for (unsigned i = 0; i < OWN_IA_CLIENTS + SHARED_IA_CLIENTS; i++) {
		cl[i] = (struct ts_client){ .ia = ia, .srv = &srv, .id = i, .ms = 3000,
					    .min_rounds = 2 * END_HOW_N,
					    .shared = i < OWN_IA_CLIENTS ? NULL : &shared };
		ts_thread(&cl[i].t, ts_client_main, &cl[i]);
	}
	for (unsigned i = 0; i < OWN_IA_CLIENTS + SHARED_IA_CLIENTS; i++) {
		pthread_join(cl[i].t, NULL);
		rounds += cl[i].rounds;
	}
	ts_node_close(&shared);
	ts_server_stop(&srv);
	printf("cm %s: %u client rounds, %u accepted, %u reaped, %u stale events, "
	       "%u disconnects ended BROKEN\n", ia, rounds, atomic_load(&srv.accepted),
	       atomic_load(&srv.reaped), atomic_load(&srv.stale), atomic_load(&srv.broken_disc));
	return 0;
}
