/*
 * Connection establishment and teardown through libdat2, as
 * dat_ep_connect(3DAT) defines the events: accept and reject with private
 * data, nobody listening, a late listener, no answer, disconnects, a killed
 * peer, RSPs, provider-created EPs, dup_connect, abrupt IA close.  Where
 * the process boundary matters the peer is a forked process.
 */
#include "cm_test.h"

TestSuite(cm_connect, .init = zd_test_use_conf, .timeout = 30);

/* ---- two processes: accept with private data both ways, at the maximum ---- */

static int server_accept_max(int fd, void *arg)
{
	struct node n;
	DAT_CONN_QUAL port;
	DAT_PSP_HANDLE psp;
	DAT_EP_HANDLE ep;
	DAT_EVENT ev;
	DAT_CR_PARAM crp;
	DAT_EP_PARAM epp;
	uint8_t want[ZD_CM_PDATA_MAX], reply[ZD_CM_PDATA_MAX];
	struct sockaddr_in *peer;

	(void)arg;
	node_open(&n);
	ep = node_ep(&n);
	port = node_listen(&n, fd, &psp);
	CHK(wait_ev(n.cr_evd, 10 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK(ev.event_data.cr_arrival_event_data.sp_handle.psp_handle == psp);
	CHK(ev.event_data.cr_arrival_event_data.conn_qual == port);
	CHK_RET(dat_cr_query(ev.event_data.cr_arrival_event_data.cr_handle, DAT_CR_FIELD_ALL,
			     &crp),
		DAT_SUCCESS);
	CHK(crp.private_data_size == n.max_pdata);
	fill(want, (size_t)n.max_pdata, 1);
	CHK(memcmp(crp.private_data, want, (size_t)n.max_pdata) == 0);
	peer = (struct sockaddr_in *)crp.remote_ia_address_ptr;
	CHK(peer->sin_family == AF_INET && peer->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
	CHK(crp.remote_port_qual != 0);
	CHK(crp.local_ep_handle == DAT_HANDLE_NULL);
	/* One byte too many is refused, and the CR stays answerable. */
	fill(reply, sizeof(reply), 2);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, ep,
			      n.max_pdata + 1, reply),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, ep, n.max_pdata,
			      reply),
		DAT_SUCCESS);
	CHK(wait_ev(n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(ev.event_data.connect_event_data.ep_handle == ep);
	CHK(ep_state(ep) == DAT_EP_STATE_CONNECTED);
	CHK_RET(dat_ep_query(ep, DAT_EP_FIELD_ALL, &epp), DAT_SUCCESS);
	CHK(epp.local_port_qual == port);
	CHK(epp.remote_port_qual == crp.remote_port_qual);
	msg_send(fd, 2);  /* checked: the client may disconnect now */
	/* The client disconnects gracefully. */
	CHK(wait_ev(n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
	CHK(ep_state(ep) == DAT_EP_STATE_DISCONNECTED);
	CHK_RET(dat_ep_free(ep), DAT_SUCCESS);
	CHK_RET(dat_psp_free(psp), DAT_SUCCESS);
	node_close(&n);
	return 0;
}

Test(cm_connect, accept_with_max_private_data_two_processes)
{
	struct node n;
	struct sockaddr_in sa;
	uint8_t pdata[ZD_CM_PDATA_MAX], want[ZD_CM_PDATA_MAX];
	DAT_EP_HANDLE ep;
	DAT_EP_PARAM epp;
	DAT_EVENT ev;
	uint32_t port;
	int fd;
	pid_t pid = spawn(server_accept_max, NULL, &fd);

	port = msg_recv(fd, 10000);
	node_open(&n);
	ep = node_ep(&n);
	fill(pdata, sizeof(pdata), 1);
	CHK_RET(dat_ep_connect(ep, loopback(&sa), port, 10 * SEC, n.max_pdata + 1, pdata,
			       DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5));
	CHK_RET(dat_ep_connect(ep, loopback(&sa), port, 10 * SEC, n.max_pdata, pdata,
			       DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(wait_ev(n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(ev.event_data.connect_event_data.ep_handle == ep);
	CHK(ev.event_data.connect_event_data.private_data_size == n.max_pdata);
	fill(want, sizeof(want), 2);
	CHK(memcmp(ev.event_data.connect_event_data.private_data, want, (size_t)n.max_pdata) == 0);
	CHK(ep_state(ep) == DAT_EP_STATE_CONNECTED);
	CHK_RET(dat_ep_query(ep, DAT_EP_FIELD_ALL, &epp), DAT_SUCCESS);
	CHK(epp.remote_port_qual == port);
	CHK(epp.local_port_qual != 0);
	CHK(((struct sockaddr_in *)epp.remote_ia_address_ptr)->sin_addr.s_addr ==
	    htonl(INADDR_LOOPBACK));
	CHK(msg_recv(fd, 10000) == 2);
	CHK_RET(dat_ep_disconnect(ep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	CHK(wait_ev(n.conn_evd, 5 * SEC, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
	CHK(ep_state(ep) == DAT_EP_STATE_DISCONNECTED);
	cr_assert_eq(reap(pid, 10000), 0, "server side failed");
	node_close(&n);
	close(fd);
}

/* ---- one process, both ends ---- */

struct pair {
	struct node srv, cli;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
	DAT_EP_HANDLE sep, cep;
};

static void pair_open_on(struct pair *p, const char *ia_name)
{
	node_open_on(&p->srv, ia_name);
	node_open_on(&p->cli, ia_name);
	CHK_RET(dat_psp_create_any(p->srv.ia, &p->port, p->srv.cr_evd, DAT_PSP_CONSUMER_FLAG,
				   &p->psp),
		DAT_SUCCESS);
	p->sep = node_ep(&p->srv);
	p->cep = node_ep(&p->cli);
}

static void pair_open(struct pair *p)
{
	pair_open_on(p, "zdapl-shm");
}

static DAT_CR_HANDLE pair_request(struct pair *p, DAT_TIMEOUT timeout)
{
	DAT_EVENT ev;

	CHK_RET(connect_loopback(p->cep, p->port, timeout), DAT_SUCCESS);
	CHK(ep_state(p->cep) == DAT_EP_STATE_ACTIVE_CONNECTION_PENDING);
	CHK(wait_ev(p->srv.cr_evd, 5 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	return ev.event_data.cr_arrival_event_data.cr_handle;
}

static void pair_connect(struct pair *p)
{
	DAT_CR_HANDLE cr = pair_request(p, 5 * SEC);

	CHK_RET(dat_cr_accept(cr, p->sep, 0, NULL), DAT_SUCCESS);
	CHK(wait_ev(p->cli.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(wait_ev(p->srv.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(ep_state(p->cep) == DAT_EP_STATE_CONNECTED);
	CHK(ep_state(p->sep) == DAT_EP_STATE_CONNECTED);
}

static void pair_close(struct pair *p)
{
	node_close(&p->cli);
	node_close(&p->srv);
}

Test(cm_connect, reject_with_private_data_gives_peer_rejected)
{
	struct pair p;
	uint8_t pd[ZD_CM_PDATA_MAX];
	DAT_EVENT ev;
	DAT_CR_HANDLE cr;

	pair_open(&p);
	cr = pair_request(&p, 5 * SEC);
	fill(pd, sizeof(pd), 9);
	CHK_RET(dat_cr_reject(cr, p.srv.max_pdata + 1, pd),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHK_RET(dat_cr_reject(cr, 5, NULL), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	CHK_RET(dat_cr_reject(cr, p.srv.max_pdata, pd), DAT_SUCCESS);
	/* A CR is gone once answered. */
	CHK(DAT_GET_TYPE(dat_cr_reject(cr, 0, NULL)) == DAT_INVALID_HANDLE);
	CHK(wait_ev(p.cli.conn_evd, 5 * SEC, &ev) == DAT_CONNECTION_EVENT_PEER_REJECTED);
	CHK(ev.event_data.connect_event_data.private_data_size == p.srv.max_pdata);
	CHK(memcmp(ev.event_data.connect_event_data.private_data, pd, (size_t)p.srv.max_pdata) == 0);
	CHK(ep_state(p.cep) == DAT_EP_STATE_DISCONNECTED);
	/* Reset, and the same EP connects again. */
	CHK_RET(dat_ep_reset(p.cep), DAT_SUCCESS);
	CHK(ep_state(p.cep) == DAT_EP_STATE_UNCONNECTED);
	pair_connect(&p);
	pair_close(&p);
}

Test(cm_connect, no_listener_is_non_peer_rejected_after_the_timeout)
{
	struct node n;
	DAT_EP_HANDLE ep;
	uint64_t t0;
	uint16_t port = free_port();

	node_open(&n);
	ep = node_ep(&n);
	t0 = now_ms();
	CHK_RET(connect_loopback(ep, port, 400000), DAT_SUCCESS);
	CHK(wait_ev(n.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
	/* Retried until the timeout (the listener might have come late). */
	cr_assert_geq(now_ms() - t0, 350);
	cr_assert_lt(now_ms() - t0, 2000);
	CHK(ep_state(ep) == DAT_EP_STATE_DISCONNECTED);
	node_close(&n);
}

Test(cm_connect, connect_before_the_psp_exists_is_retried)
{
	struct node srv, cli;
	DAT_PSP_HANDLE psp;
	DAT_EP_HANDLE sep, cep;
	DAT_EVENT ev;
	uint16_t port = free_port();

	node_pair_open(&srv, &sep, &cli, &cep);
	CHK_RET(connect_loopback(cep, port, 5 * SEC), DAT_SUCCESS);
	usleep(300000);
	CHK(wait_ev(cli.conn_evd, 0, NULL) == 0);  /* still pending */
	CHK_RET(dat_psp_create(srv.ia, port, srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		DAT_SUCCESS);
	CHK(wait_ev(srv.cr_evd, 5 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, sep, 0, NULL),
		DAT_SUCCESS);
	CHK(wait_ev(cli.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(wait_ev(srv.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	node_close(&cli);
	node_close(&srv);
}

Test(cm_connect, server_that_never_answers_times_out)
{
	struct pair p;
	DAT_CR_HANDLE cr;
	uint64_t t0;

	pair_open(&p);
	t0 = now_ms();
	cr = pair_request(&p, 400000);
	CHK(wait_ev(p.cli.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_TIMED_OUT);
	cr_assert_geq(now_ms() - t0, 350);
	CHK(ep_state(p.cep) == DAT_EP_STATE_DISCONNECTED);
	/* Accepting the abandoned request cannot complete. */
	usleep(50000);
	CHK_RET(dat_cr_accept(cr, p.sep, 0, NULL), DAT_SUCCESS);
	CHK(wait_ev(p.srv.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR);
	CHK(ep_state(p.sep) == DAT_EP_STATE_DISCONNECTED);
	pair_close(&p);
}

static void disconnect_both(DAT_CLOSE_FLAGS how, int from_server)
{
	struct pair p;
	DAT_EP_HANDLE me;
	DAT_EVENT ev;

	pair_open(&p);
	pair_connect(&p);
	me = from_server ? p.sep : p.cep;
	CHK_RET(dat_ep_disconnect(me, how), DAT_SUCCESS);
	CHK(wait_ev(p.cli.conn_evd, 3 * SEC, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
	CHK(ev.event_data.connect_event_data.ep_handle == p.cep);
	CHK(wait_ev(p.srv.conn_evd, 3 * SEC, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
	CHK(ev.event_data.connect_event_data.ep_handle == p.sep);
	CHK(ep_state(p.cep) == DAT_EP_STATE_DISCONNECTED);
	CHK(ep_state(p.sep) == DAT_EP_STATE_DISCONNECTED);
	/* Disconnecting again changes nothing and posts nothing. */
	CHK_RET(dat_ep_disconnect(me, how), DAT_SUCCESS);
	CHK(wait_ev(p.cli.conn_evd, 100000, NULL) == 0);
	CHK(wait_ev(p.srv.conn_evd, 1000, NULL) == 0);
	pair_close(&p);
}

Test(cm_connect, graceful_disconnect_from_client) { disconnect_both(DAT_CLOSE_GRACEFUL_FLAG, 0); }
Test(cm_connect, graceful_disconnect_from_server) { disconnect_both(DAT_CLOSE_GRACEFUL_FLAG, 1); }
Test(cm_connect, abrupt_disconnect_from_client) { disconnect_both(DAT_CLOSE_ABRUPT_FLAG, 0); }
Test(cm_connect, abrupt_disconnect_from_server) { disconnect_both(DAT_CLOSE_ABRUPT_FLAG, 1); }

/* Our outgoing connection's local port, once it sits in TIME_WAIT (we
 * closed first), is free for a service point at once, as after a
 * passive close: the dtest family's fixed conn_qual lies in the kernel's
 * local port range, and a test run right after another one failed with
 * DAT_CONN_QUAL_IN_USE when an earlier connection had taken that port. */
Test(cm_connect, local_port_of_a_closed_connection_is_free_for_a_psp)
{
	struct pair p;
	struct node n;
	DAT_EP_PARAM epp;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL local;

	pair_open(&p);
	pair_connect(&p);
	CHK_RET(dat_ep_query(p.cep, DAT_EP_FIELD_ALL, &epp), DAT_SUCCESS);
	local = epp.local_port_qual;
	CHK(local != 0 && local != p.port);
	/* The server disconnects: the client answers and closes first, so its
	 * socket goes to TIME_WAIT. */
	CHK_RET(dat_ep_disconnect(p.sep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	CHK(wait_ev(p.cli.conn_evd, 3 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	CHK(wait_ev(p.srv.conn_evd, 3 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	usleep(100 * 1000);
	node_close(&p.cli);
	node_close(&p.srv);
	node_open(&n);
	CHK_RET(dat_psp_create(n.ia, local, n.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp), DAT_SUCCESS);
	CHK_RET(dat_psp_free(psp), DAT_SUCCESS);
	node_close(&n);
}

Test(cm_connect, disconnect_while_pending_abandons_the_connect)
{
	struct pair p;
	DAT_CR_HANDLE cr;

	pair_open(&p);
	cr = pair_request(&p, 5 * SEC);
	CHK_RET(dat_ep_disconnect(p.cep, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	CHK(wait_ev(p.cli.conn_evd, 3 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	CHK(ep_state(p.cep) == DAT_EP_STATE_DISCONNECTED);
	usleep(50000);
	CHK_RET(dat_cr_accept(cr, p.sep, 0, NULL), DAT_SUCCESS);
	CHK(wait_ev(p.srv.conn_evd, 3 * SEC, NULL) == DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR);
	pair_close(&p);
}

Test(cm_connect, ep_free_while_connected_disconnects_the_peer)
{
	struct pair p;

	pair_open(&p);
	pair_connect(&p);
	CHK_RET(dat_ep_free(p.cep), DAT_SUCCESS);
	CHK(wait_ev(p.srv.conn_evd, 2 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	pair_close(&p);
}

/* ---- events keep the peer's order across connections ---- */

#define ORDER_CONNS 48

/* Server: accepts every request, says so, and then expects every
 * ESTABLISHED before any DISCONNECTED: its peer sends all RTUs before any
 * DISC, and IB's one CM channel would deliver them in that order (dtestcm
 * counts connection events without looking at their type). */
static int server_expects_the_peers_order(int fd, void *arg)
{
	struct node n;
	DAT_PSP_HANDLE psp;
	DAT_EP_HANDLE eps[ORDER_CONNS];
	int seen[ORDER_CONNS] = { 0 };

	(void)arg;
	node_open_on(&n, RAW_PEER_IA);
	node_listen(&n, fd, &psp);
	for (int i = 0; i < ORDER_CONNS; i++) {
		DAT_EVENT ev;

		eps[i] = node_ep(&n);
		CHK(wait_ev(n.cr_evd, 10 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
		CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, eps[i], 0,
				      NULL),
			DAT_SUCCESS);
	}
	msg_send(fd, 1);
	for (int k = 0; k < 2 * ORDER_CONNS; k++) {
		DAT_EVENT ev;
		DAT_EVENT_NUMBER want = k < ORDER_CONNS ? DAT_CONNECTION_EVENT_ESTABLISHED
							: DAT_CONNECTION_EVENT_DISCONNECTED;
		int i;

		CHK(wait_ev(n.conn_evd, 10 * SEC, &ev) == want);
		for (i = 0; i < ORDER_CONNS; i++)
			if (eps[i] == ev.event_data.connect_event_data.ep_handle)
				break;
		CHK(i < ORDER_CONNS && seen[i] == (k >= ORDER_CONNS));
		seen[i]++;
	}
	node_close(&n);
	return 0;
}

/* The requester is a raw socket peer, so that its frames wait in the
 * server's sockets while the server is stopped: each socket then holds an
 * RTU and a DISC when its CM thread runs again. */
Test(cm_connect, events_keep_the_peers_order_across_connections)
{
	int socks[ORDER_CONNS], fd, st;
	struct zd_cm_hdr h;
	uint32_t port;
	pid_t pid = spawn(server_expects_the_peers_order, NULL, &fd);

	port = msg_recv(fd, 10000);
	for (int i = 0; i < ORDER_CONNS; i++) {
		int one = 1;

		socks[i] = raw_connect((uint16_t)port);
		/* As zdapl's CM sockets: no frame waits for the ACK of the last. */
		CHK(setsockopt(socks[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0);
		raw_send(socks[i], ZD_CM_MSG_REQ, 0, port, NULL, 0);
	}
	CHK(msg_recv(fd, 10000) == 1);
	for (int i = 0; i < ORDER_CONNS; i++) {
		CHK(raw_recv(socks[i], &h) == ZD_CM_MSG_MRA);
		CHK(raw_recv(socks[i], &h) == ZD_CM_MSG_REP);
	}
	CHK(kill(pid, SIGSTOP) == 0);
	CHK(waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st));
	for (int i = 0; i < ORDER_CONNS; i++)
		raw_send(socks[i], ZD_CM_MSG_RTU, 0, 0, NULL, 0);
	for (int i = 0; i < ORDER_CONNS; i++)
		raw_send(socks[i], ZD_CM_MSG_DISC, 0, 0, NULL, 0);
	CHK(kill(pid, SIGCONT) == 0);
	for (int i = 0; i < ORDER_CONNS; i++) {
		CHK(raw_recv(socks[i], &h) == ZD_CM_MSG_DISC_ACK);
		close(socks[i]);
	}
	cr_assert_eq(reap(pid, 10000), 0, "the server's connection events lost the peer's order");
	close(fd);
}

/* ---- a killed peer is seen within a second ---- */

static int peer_connects_then_sleeps(int fd, void *arg)
{
	struct node n;
	DAT_EP_HANDLE ep;
	uint32_t port = msg_recv(fd, 10000);

	(void)arg;
	node_open(&n);
	ep = node_ep(&n);
	CHK_RET(connect_loopback(ep, port, 10 * SEC), DAT_SUCCESS);
	CHK(wait_ev(n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	msg_send(fd, 1);
	pause();
	return 0;
}

Test(cm_connect, killed_peer_is_broken_within_a_second)
{
	struct node n;
	DAT_PSP_HANDLE psp;
	DAT_EP_HANDLE ep;
	DAT_EVENT ev;
	DAT_EVENT_NUMBER got;
	uint64_t t0;
	int fd;
	pid_t pid = spawn(peer_connects_then_sleeps, NULL, &fd);

	node_open(&n);
	ep = node_ep(&n);
	node_listen(&n, fd, &psp);
	CHK(wait_ev(n.cr_evd, 10 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, ep, 0, NULL),
		DAT_SUCCESS);
	CHK(wait_ev(n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(msg_recv(fd, 10000) == 1);
	t0 = now_ms();
	kill(pid, SIGKILL);
	got = wait_ev(n.conn_evd, SEC, NULL);
	cr_assert(got == DAT_CONNECTION_EVENT_BROKEN || got == DAT_CONNECTION_EVENT_DISCONNECTED,
		  "event 0x%x", got);
	cr_assert_lt(now_ms() - t0, 1000);
	CHK(ep_state(ep) == DAT_EP_STATE_DISCONNECTED);
	reap(pid, 5000);
	node_close(&n);
	close(fd);
}

/* ---- service points ---- */

Test(cm_connect, psp_conn_qual_in_use_and_create_any)
{
	struct node a, b;
	DAT_PSP_HANDLE p1, p2;
	DAT_CONN_QUAL q;
	DAT_PSP_PARAM pp;

	node_open(&a);
	node_open(&b);
	CHK_RET(dat_psp_create_any(a.ia, &q, a.cr_evd, DAT_PSP_CONSUMER_FLAG, &p1), DAT_SUCCESS);
	CHK(q != 0);
	CHK_RET(dat_psp_query(p1, DAT_PSP_FIELD_ALL, &pp), DAT_SUCCESS);
	CHK(pp.conn_qual == q && pp.evd_handle == a.cr_evd && pp.psp_flags == DAT_PSP_CONSUMER_FLAG);
	CHK(pp.ia_handle == a.ia);
	/* Taken, from the same IA and from another. */
	CHK_RET(dat_psp_create(a.ia, q, a.cr_evd, DAT_PSP_CONSUMER_FLAG, &p2), DAT_CONN_QUAL_IN_USE);
	CHK_RET(dat_psp_create(b.ia, q, b.cr_evd, DAT_PSP_CONSUMER_FLAG, &p2), DAT_CONN_QUAL_IN_USE);
	CHK_RET(dat_psp_free(p1), DAT_SUCCESS);
	CHK_RET(dat_psp_create(b.ia, q, b.cr_evd, DAT_PSP_PROVIDER_FLAG, &p2), DAT_SUCCESS);
	CHK_RET(dat_psp_query(p2, DAT_PSP_FIELD_ALL, &pp), DAT_SUCCESS);
	CHK(pp.conn_qual == q && pp.psp_flags == DAT_PSP_PROVIDER_FLAG);
	/* Left for dat_ia_close to free. */
	node_close(&a);
	node_close(&b);
}

Test(cm_connect, rsp_reserves_its_ep_and_goes_with_the_request)
{
	struct node srv, cli;
	DAT_RSP_HANDLE rsp;
	DAT_RSP_PARAM rp;
	DAT_EP_HANDLE sep, cep, other;
	DAT_CR_PARAM crp;
	DAT_EVENT ev;
	DAT_CR_HANDLE cr;
	uint16_t port = free_port();

	node_pair_open(&srv, &sep, &cli, &cep);
	other = node_ep(&srv);
	CHK_RET(dat_rsp_create(srv.ia, port, sep, srv.cr_evd, &rsp), DAT_SUCCESS);
	CHK(ep_state(sep) == DAT_EP_STATE_RESERVED);
	CHK_RET(dat_rsp_query(rsp, DAT_RSP_FIELD_ALL, &rp), DAT_SUCCESS);
	CHK(rp.conn_qual == port && rp.ep_handle == sep && rp.evd_handle == srv.cr_evd);
	CHK_RET(dat_ep_free(sep), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_RESERVED));
	CHK_RET(dat_rsp_create(srv.ia, free_port(), sep, srv.cr_evd, &(DAT_RSP_HANDLE){ 0 }),
		ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_RESERVED));
	/* Freed before any request: the EP is the consumer's again. */
	CHK_RET(dat_rsp_free(rsp), DAT_SUCCESS);
	CHK(ep_state(sep) == DAT_EP_STATE_UNCONNECTED);
	CHK_RET(dat_rsp_create(srv.ia, port, sep, srv.cr_evd, &rsp), DAT_SUCCESS);

	CHK_RET(connect_loopback(cep, port, 5 * SEC), DAT_SUCCESS);
	CHK(wait_ev(srv.cr_evd, 5 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	/* The event names the RSP, which is used up but stays valid until
	 * dat_rsp_free, as with the reference provider (dapltest -T T -r
	 * checks sp_handle, then frees the RSP once connected). */
	CHK(ev.event_data.cr_arrival_event_data.sp_handle.rsp_handle == rsp);
	CHK(ev.event_data.cr_arrival_event_data.conn_qual == port);
	CHK_RET(dat_rsp_query(rsp, DAT_RSP_FIELD_ALL, &rp), DAT_SUCCESS);
	CHK(rp.conn_qual == port && rp.ep_handle == DAT_HANDLE_NULL);
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	CHK_RET(dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp), DAT_SUCCESS);
	CHK(crp.local_ep_handle == sep);
	CHK(ep_state(sep) == DAT_EP_STATE_PASSIVE_CONNECTION_PENDING);
	/* Only the reserved EP may accept it. */
	CHK_RET(dat_cr_accept(cr, other, 0, NULL), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHK_RET(dat_cr_accept(cr, DAT_HANDLE_NULL, 0, NULL), DAT_SUCCESS);
	CHK(wait_ev(cli.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(wait_ev(srv.conn_evd, 5 * SEC, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(ev.event_data.connect_event_data.ep_handle == sep);
	CHK(ep_state(sep) == DAT_EP_STATE_CONNECTED);
	/* Single use: a second request to the port finds nobody. */
	other = node_ep(&cli);
	CHK_RET(connect_loopback(other, port, SEC / 2), DAT_SUCCESS);
	CHK(wait_ev(cli.conn_evd, 5 * SEC, NULL) != DAT_CONNECTION_EVENT_ESTABLISHED);
	/* Freeing the used RSP leaves the connection alone. */
	CHK_RET(dat_rsp_free(rsp), DAT_SUCCESS);
	CHK(DAT_GET_TYPE(dat_rsp_free(rsp)) == DAT_INVALID_HANDLE);
	CHK(ep_state(sep) == DAT_EP_STATE_CONNECTED);
	node_close(&cli);
	node_close(&srv);
}

Test(cm_connect, provider_psp_creates_the_ep)
{
	struct node srv, cli;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
	DAT_EP_HANDLE cep, pep;
	DAT_EP_PARAM epp;
	DAT_CR_PARAM crp;
	DAT_EVENT ev;

	node_open(&srv);
	node_open(&cli);
	cep = node_ep(&cli);
	CHK_RET(dat_psp_create_any(srv.ia, &port, srv.cr_evd, DAT_PSP_PROVIDER_FLAG, &psp),
		DAT_SUCCESS);
	for (int round = 0; round < 2; round++) {
		CHK_RET(connect_loopback(cep, port, 5 * SEC), DAT_SUCCESS);
		CHK(wait_ev(srv.cr_evd, 5 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
		CHK_RET(dat_cr_query(ev.event_data.cr_arrival_event_data.cr_handle,
				     DAT_CR_FIELD_ALL, &crp),
			DAT_SUCCESS);
		pep = crp.local_ep_handle;
		CHK(pep != DAT_HANDLE_NULL);
		CHK(ep_state(pep) == DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING);
		if (round == 0) {
			/* Rejected: the provider's EP goes with the CR. */
			CHK_RET(dat_cr_reject(ev.event_data.cr_arrival_event_data.cr_handle, 0,
					      NULL),
				DAT_SUCCESS);
			CHK(DAT_GET_TYPE(dat_ep_free(pep)) == DAT_INVALID_HANDLE);
			CHK(wait_ev(cli.conn_evd, 5 * SEC, NULL) ==
			    DAT_CONNECTION_EVENT_PEER_REJECTED);
			CHK_RET(dat_ep_reset(cep), DAT_SUCCESS);
			continue;
		}
		/* Configured by the consumer (PZ: quiescent state), then accepted. */
		memset(&epp, 0, sizeof(epp));
		epp.pz_handle = srv.pz;
		epp.connect_evd_handle = srv.conn_evd;
		CHK_RET(dat_ep_modify(pep, DAT_EP_FIELD_PZ_HANDLE | DAT_EP_FIELD_CONNECT_EVD_HANDLE,
				      &epp),
			DAT_SUCCESS);
		CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle,
				      DAT_HANDLE_NULL, 0, NULL),
			DAT_SUCCESS);
		CHK(wait_ev(cli.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
		CHK(wait_ev(srv.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
		CHK(ep_state(pep) == DAT_EP_STATE_CONNECTED);
	}
	node_close(&cli);
	node_close(&srv);
}

Test(cm_connect, dup_connect_reaches_the_same_service_point)
{
	struct pair p;
	DAT_EP_HANDLE cep2, sep2;
	DAT_EP_PARAM epp;
	DAT_EVENT ev;

	pair_open(&p);
	cep2 = node_ep(&p.cli);
	sep2 = node_ep(&p.srv);
	/* The EP to duplicate must be connected. */
	CHK_RET(dat_ep_dup_connect(cep2, p.cep, 5 * SEC, 0, NULL, DAT_QOS_BEST_EFFORT),
		ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED));
	pair_connect(&p);
	CHK_RET(dat_ep_dup_connect(cep2, p.cep, 5 * SEC, 0, NULL, DAT_QOS_HIGH_THROUGHPUT),
		ERR(DAT_MODEL_NOT_SUPPORTED, 0));
	CHK_RET(dat_ep_dup_connect(cep2, p.srv.pz, 5 * SEC, 0, NULL, DAT_QOS_BEST_EFFORT),
		ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHK_RET(dat_ep_dup_connect(cep2, p.cep, 5 * SEC, 0, NULL, DAT_QOS_BEST_EFFORT),
		DAT_SUCCESS);
	CHK(wait_ev(p.srv.cr_evd, 5 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK(ev.event_data.cr_arrival_event_data.conn_qual == p.port);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, sep2, 0, NULL),
		DAT_SUCCESS);
	CHK(wait_ev(p.cli.conn_evd, 5 * SEC, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(ev.event_data.connect_event_data.ep_handle == cep2);
	CHK_RET(dat_ep_query(cep2, DAT_EP_FIELD_ALL, &epp), DAT_SUCCESS);
	CHK(epp.remote_port_qual == p.port);
	pair_close(&p);
}

/* ---- dat_ia_close(ABRUPT) with everything live ---- */

Test(cm_connect, ia_close_abrupt_with_live_connections)
{
	struct pair p;
	DAT_RSP_HANDLE rsp;
	DAT_EP_HANDLE rep, cep2;
	DAT_EVENT_NUMBER got;
	uint16_t rport = free_port();

	pair_open(&p);
	pair_connect(&p);
	rep = node_ep(&p.srv);
	CHK_RET(dat_rsp_create(p.srv.ia, rport, rep, p.srv.cr_evd, &rsp), DAT_SUCCESS);
	/* A CR left pending too. */
	cep2 = node_ep(&p.cli);
	CHK_RET(connect_loopback(cep2, p.port, 5 * SEC), DAT_SUCCESS);
	CHK(wait_ev(p.srv.cr_evd, 5 * SEC, NULL) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_ia_close(p.srv.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	/* The client sees both of its connections end. */
	for (int i = 0; i < 2; i++) {
		DAT_EVENT ev;

		got = wait_ev(p.cli.conn_evd, 2 * SEC, &ev);
		if (ev.event_data.connect_event_data.ep_handle == p.cep)
			cr_assert(got == DAT_CONNECTION_EVENT_DISCONNECTED ||
				  got == DAT_CONNECTION_EVENT_BROKEN, "event 0x%x", got);
		else
			cr_assert_eq(got, DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
	}
	/* Its ports are free again. */
	node_open(&p.srv);
	CHK_RET(dat_psp_create(p.srv.ia, p.port, p.srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &p.psp),
		DAT_SUCCESS);
	CHK_RET(dat_psp_create(p.srv.ia, rport, p.srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &p.psp),
		DAT_SUCCESS);
	pair_close(&p);
}

/* ---- foreign and malformed frames break only their connection ---- */

Test(cm_connect, malformed_frames_break_only_their_connection)
{
	struct pair p;
	struct zd_cm_hdr h;
	uint8_t junk[64];
	int fd;

	pair_open(&p);
	/* Not our protocol at all. */
	fd = raw_connect((uint16_t)p.port);
	memset(junk, 'G', sizeof(junk));
	CHK(send(fd, junk, sizeof(junk), MSG_NOSIGNAL) == (ssize_t)sizeof(junk));
	CHK(raw_sees_eof(fd, 2000));
	close(fd);
	/* Our magic, a length beyond the maximum. */
	fd = raw_connect((uint16_t)p.port);
	memset(&h, 0, sizeof(h));
	h.magic = htonl(ZD_CM_MAGIC);
	h.version = ZD_CM_VERSION;
	h.type = ZD_CM_MSG_REQ;
	h.pdata_len = htons(ZD_CM_PDATA_MAX + 1);
	CHK(send(fd, &h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h));
	CHK(raw_sees_eof(fd, 2000));
	close(fd);
	/* Another version. */
	fd = raw_connect((uint16_t)p.port);
	h.pdata_len = 0;
	h.version = ZD_CM_VERSION + 1;
	CHK(send(fd, &h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h));
	CHK(raw_sees_eof(fd, 2000));
	close(fd);
	/* A frame out of turn (RTU before any REQ). */
	fd = raw_connect((uint16_t)p.port);
	raw_send(fd, ZD_CM_MSG_RTU, 0, 0, NULL, 0);
	CHK(raw_sees_eof(fd, 2000));
	close(fd);
	/* A REQ for another qualifier: not here, try the next probe port. */
	fd = raw_connect((uint16_t)p.port);
	raw_send(fd, ZD_CM_MSG_REQ, 0, (uint32_t)p.port + 1, NULL, 0);
	CHK(raw_recv(fd, &h) == ZD_CM_MSG_REJ && h.reason == ZD_CM_REJ_NO_QUAL);
	close(fd);
	/* QUERY: which qualifier does this listener serve? */
	fd = raw_connect((uint16_t)p.port);
	raw_send(fd, ZD_CM_MSG_QUERY, 0, (uint32_t)p.port + 1, NULL, 0);
	CHK(raw_recv(fd, &h) == ZD_CM_MSG_REJ && h.reason == ZD_CM_REJ_NO_QUAL);
	CHK(raw_sees_eof(fd, 2000));
	close(fd);
	fd = raw_connect((uint16_t)p.port);
	raw_send(fd, ZD_CM_MSG_QUERY, 0, (uint32_t)p.port, NULL, 0);
	CHK(raw_recv(fd, &h) == ZD_CM_MSG_REJ && h.reason == ZD_CM_REJ_QUAL_HERE);
	CHK(raw_sees_eof(fd, 2000));
	close(fd);
	/* None of it reached the consumer, and the PSP still works. */
	CHK(wait_ev(p.srv.cr_evd, 1000, NULL) == 0);
	pair_connect(&p);
	/* Garbage on an established connection breaks that one alone. */
	pair_close(&p);
}

Test(cm_connect, raw_peer_gets_the_frames_of_the_protocol)
{
	struct pair p;
	struct zd_cm_hdr h;
	DAT_EVENT ev;
	uint8_t pd[8] = "zdapl!!";
	int fd;

	pair_open_on(&p, RAW_PEER_IA);
	fd = raw_connect((uint16_t)p.port);
	raw_send(fd, ZD_CM_MSG_REQ, 0, (uint32_t)p.port, pd, sizeof(pd));
	/* Received (MRA) before the consumer decides. */
	CHK(raw_recv(fd, &h) == ZD_CM_MSG_MRA);
	CHK(wait_ev(p.srv.cr_evd, 2 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, p.sep, 3, "abc"),
		DAT_SUCCESS);
	if (raw_recv(fd, &h) == ZD_CM_MSG_REJ) {
		close(fd);
		pair_close(&p);
		cr_skip_test(RAW_PEER_IA " now needs a QP blob, which a raw peer cannot give");
	}
	CHK(h.type == ZD_CM_MSG_REP && h.pdata_len == 3);
	CHK(ep_state(p.sep) == DAT_EP_STATE_COMPLETION_PENDING);
	raw_send(fd, ZD_CM_MSG_RTU, 0, 0, NULL, 0);
	CHK(wait_ev(p.srv.conn_evd, 2 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	/* Junk on an established connection: BROKEN for it alone. */
	CHK(send(fd, "GARBAGE-GARBAGE-GARBAGE-GARBAGE-", 32, MSG_NOSIGNAL) == 32);
	CHK(wait_ev(p.srv.conn_evd, 2 * SEC, NULL) == DAT_CONNECTION_EVENT_BROKEN);
	CHK(raw_sees_eof(fd, 2000));
	close(fd);
	pair_close(&p);
}

/* A host that does not answer: a local listener whose accept queue is
 * full drops our SYNs, so the TCP handshake never completes. */
Test(cm_connect, silent_host_is_unreachable_after_the_timeout)
{
	struct node n;
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	DAT_EP_HANDLE ep;
	DAT_EVENT_NUMBER got;
	int lfd, fill_fd[4];
	uint64_t t0;

	node_open(&n);
	ep = node_ep(&n);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	loopback(&sa);
	CHK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 0) == 0);
	CHK(getsockname(lfd, (struct sockaddr *)&sa, &len) == 0);
	for (int i = 0; i < 4; i++) {
		fill_fd[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		connect(fill_fd[i], (struct sockaddr *)&sa, sizeof(sa));
	}
	usleep(50000);
	t0 = now_ms();
	CHK_RET(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&sa, ntohs(sa.sin_port), 400000, 0, NULL,
			       DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		DAT_SUCCESS);
	got = wait_ev(n.conn_evd, 5 * SEC, NULL);
	cr_assert_eq(got, DAT_CONNECTION_EVENT_UNREACHABLE, "event 0x%x", got);
	cr_assert_geq(now_ms() - t0, 350);
	cr_assert_lt(now_ms() - t0, 2000);
	CHK(ep_state(ep) == DAT_EP_STATE_DISCONNECTED);
	for (int i = 0; i < 4; i++)
		close(fill_fd[i]);
	close(lfd);
	node_close(&n);
}

Test(cm_connect, unreachable_host)
{
	struct node n;
	struct sockaddr_in sa;
	DAT_EP_HANDLE ep;
	DAT_EVENT_NUMBER got;
	uint64_t t0;

	node_open(&n);
	ep = node_ep(&n);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	inet_pton(AF_INET, "203.0.113.1", &sa.sin_addr);  /* TEST-NET-3: nobody */
	t0 = now_ms();
	CHK_RET(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&sa, 4791, 300000, 0, NULL,
			       DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		DAT_SUCCESS);
	got = wait_ev(n.conn_evd, 5 * SEC, NULL);
	if (got == DAT_CONNECTION_EVENT_NON_PEER_REJECTED) {
		node_close(&n);
		cr_skip_test("this network refuses connections to TEST-NET-3 instead of dropping them");
	}
	cr_assert_eq(got, DAT_CONNECTION_EVENT_UNREACHABLE, "event 0x%x", got);
	cr_assert_lt(now_ms() - t0, 2000);
	CHK(ep_state(ep) == DAT_EP_STATE_DISCONNECTED);
	node_close(&n);
}

static int thread_count(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	int n = -1;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	if (f)
		fclose(f);
	return n;
}

/* The CM thread starts with the first service point or connect, and is
 * gone shortly after the last socket it watched. */
Test(cm_connect, cm_thread_comes_and_goes)
{
	struct pair p;
	int base, during, after = -1;

	node_open(&p.srv);
	base = thread_count();
	node_close(&p.srv);
	pair_open(&p);
	pair_connect(&p);
	during = thread_count();
	cr_assert_gt(during, base, "no CM thread while connected (%d, %d)", during, base);
	pair_close(&p);
	for (int i = 0; i < 40 && after != base; i++) {
		usleep(50000);
		after = thread_count();
	}
	cr_assert_eq(after, base, "CM thread still there after 2 s idle (%d, base %d)", after, base);
}
