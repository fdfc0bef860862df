/*
 * dat_ep_modify(3DAT), field by field, in every EP state the CM can put
 * an EP in: what may change where, DAT_INVALID_STATE (subtype naming the
 * state) where it may not, DAT_INVALID_PARAMETER for fields that never
 * change and for bad values, and nothing changed by a failed call.
 */
#include "cm_test.h"

#define ZD_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

TestSuite(cm_modify, .init = zd_test_use_conf, .timeout = 60);

static const DAT_EP_PARAM_MASK never_fields[] = {
	DAT_EP_FIELD_IA_HANDLE, DAT_EP_FIELD_EP_STATE, DAT_EP_FIELD_COMM,
	DAT_EP_FIELD_LOCAL_IA_ADDRESS_PTR, DAT_EP_FIELD_LOCAL_PORT_QUAL,
	DAT_EP_FIELD_REMOTE_IA_ADDRESS_PTR, DAT_EP_FIELD_REMOTE_PORT_QUAL,
	DAT_EP_FIELD_SRQ_HANDLE,
};

/* "Unconnected, Reserved, Passive and Tentative Connection Pending". */
static const DAT_EP_PARAM_MASK before_connect_fields[] = {
	DAT_EP_FIELD_RECV_EVD_HANDLE, DAT_EP_FIELD_REQUEST_EVD_HANDLE,
	DAT_EP_FIELD_CONNECT_EVD_HANDLE, DAT_EP_FIELD_EP_ATTR_SERVICE_TYPE,
	DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE, DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE,
	DAT_EP_FIELD_EP_ATTR_QOS, DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS,
	DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS,
	DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV,
	DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV, DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN,
	DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT,
};

/* "Quiescent (unconnected) state" only. */
static const DAT_EP_PARAM_MASK unconnected_fields[] = {
	DAT_EP_FIELD_EP_ATTR_NUM_TRANSPORT_ATTR, DAT_EP_FIELD_EP_ATTR_TRANSPORT_SPECIFIC_ATTR,
	DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR, DAT_EP_FIELD_EP_ATTR_PROVIDER_SPECIFIC_ATTR,
};

static DAT_RETURN_SUBTYPE state_sub(DAT_EP_STATE s)
{
	switch (s) {
	case DAT_EP_STATE_UNCONNECTED: return DAT_INVALID_STATE_EP_UNCONNECTED;
	case DAT_EP_STATE_RESERVED: return DAT_INVALID_STATE_EP_RESERVED;
	case DAT_EP_STATE_PASSIVE_CONNECTION_PENDING: return DAT_INVALID_STATE_EP_PASSCONNPENDING;
	case DAT_EP_STATE_ACTIVE_CONNECTION_PENDING: return DAT_INVALID_STATE_EP_ACTCONNPENDING;
	case DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING: return DAT_INVALID_STATE_EP_TENTCONNPENDING;
	case DAT_EP_STATE_CONNECTED: return DAT_INVALID_STATE_EP_CONNECTED;
	case DAT_EP_STATE_DISCONNECT_PENDING: return DAT_INVALID_STATE_EP_DISCPENDING;
	case DAT_EP_STATE_DISCONNECTED: return DAT_INVALID_STATE_EP_DISCONNECTED;
	case DAT_EP_STATE_COMPLETION_PENDING: return DAT_INVALID_STATE_EP_COMPLPENDING;
	default: return DAT_NO_SUBTYPE;
	}
}

/* Tries every field on @ep (in @want state) with its current value. */
static void check_rules(DAT_EP_HANDLE ep, DAT_EP_STATE want, DAT_PZ_HANDLE pz)
{
	DAT_RETURN forbidden = ERR(DAT_INVALID_STATE, state_sub(want));
	int before = want == DAT_EP_STATE_UNCONNECTED || want == DAT_EP_STATE_RESERVED ||
		     want == DAT_EP_STATE_PASSIVE_CONNECTION_PENDING ||
		     want == DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING;
	int quiescent = want == DAT_EP_STATE_UNCONNECTED ||
			want == DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING;
	DAT_EP_PARAM p;

	cr_assert_eq(ep_state(ep), want, "EP in state %d, expected %d", ep_state(ep), want);
	CHK_RET(dat_ep_query(ep, DAT_EP_FIELD_ALL, &p), DAT_SUCCESS);
	for (size_t i = 0; i < ZD_ARRAY_SIZE(never_fields); i++)
		CHK_RET(dat_ep_modify(ep, never_fields[i], &p),
			ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	for (size_t i = 0; i < ZD_ARRAY_SIZE(before_connect_fields); i++)
		CHK_RET(dat_ep_modify(ep, before_connect_fields[i], &p),
			before ? DAT_SUCCESS : forbidden);
	for (size_t i = 0; i < ZD_ARRAY_SIZE(unconnected_fields); i++)
		CHK_RET(dat_ep_modify(ep, unconnected_fields[i], &p),
			want == DAT_EP_STATE_UNCONNECTED ? DAT_SUCCESS : forbidden);
	p.pz_handle = pz;
	CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_PZ_HANDLE, &p), quiescent ? DAT_SUCCESS : forbidden);
	/* A mix of an allowed and a forbidden field is refused whole. */
	if (!quiescent && before)
		CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_PZ_HANDLE | DAT_EP_FIELD_EP_ATTR_QOS, &p),
			forbidden);
	/* Whatever was tried, the state did not move. */
	cr_assert_eq(ep_state(ep), want);
}

Test(cm_modify, unconnected_values_and_atomicity)
{
	struct node n;
	DAT_EP_HANDLE ep;
	DAT_EP_PARAM p, q;
	DAT_EVD_HANDLE dto;

	node_open(&n);
	ep = node_ep(&n);
	check_rules(ep, DAT_EP_STATE_UNCONNECTED, n.pz);
	CHK_RET(dat_evd_create(n.ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &dto), DAT_SUCCESS);

	CHK_RET(dat_ep_query(ep, DAT_EP_FIELD_ALL, &p), DAT_SUCCESS);
	/* Bad values: each refused, and nothing changes. */
	q = p;
	q.pz_handle = n.cr_evd;
	CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_PZ_HANDLE, &q), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	q = p;
	q.recv_evd_handle = n.cr_evd;  /* no DTO stream */
	CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_RECV_EVD_HANDLE, &q), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	q = p;
	q.connect_evd_handle = dto;  /* no connection stream */
	CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_CONNECT_EVD_HANDLE, &q), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	q = p;
	q.ep_attr.qos = DAT_QOS_PREMIUM;
	CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_QOS, &q), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	q = p;
	q.ep_attr.max_recv_dtos = 1 << 30;
	q.ep_attr.max_request_dtos = 3;
	CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS | DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS, &q),
		ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	q = p;
	q.ep_attr.service_type = DAT_SERVICE_TYPE_RC + 77;
	CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_SERVICE_TYPE, &q), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	q = p;
	q.ep_attr.recv_completion_flags = DAT_COMPLETION_BARRIER_FENCE_FLAG;
	CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS, &q), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	q = p;
	q.ep_attr.ep_provider_specific_count = 1;
	CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_NUM_PROVIDER_ATTR, &q), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	CHK_RET(dat_ep_modify(ep, (DAT_EP_PARAM_MASK)1 << 40, &p), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2));
	CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_QOS, NULL), ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	CHK_RET(dat_ep_modify(n.pz, DAT_EP_FIELD_EP_ATTR_QOS, &p), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHK_RET(dat_ep_query(ep, DAT_EP_FIELD_ALL, &q), DAT_SUCCESS);
	cr_assert_eq(q.ep_attr.max_request_dtos, p.ep_attr.max_request_dtos);
	cr_assert_eq(q.pz_handle, p.pz_handle);

	/* Good values take. */
	q = p;
	q.ep_attr.max_recv_dtos = 17;
	q.recv_evd_handle = dto;
	q.request_evd_handle = dto;
	CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS | DAT_EP_FIELD_RECV_EVD_HANDLE |
				      DAT_EP_FIELD_REQUEST_EVD_HANDLE, &q), DAT_SUCCESS);
	CHK_RET(dat_ep_query(ep, DAT_EP_FIELD_ALL, &q), DAT_SUCCESS);
	cr_assert_eq(q.ep_attr.max_recv_dtos, 17);
	cr_assert_eq(q.recv_evd_handle, dto);
	/* The EVD is in use by the EP now. */
	cr_assert_eq(DAT_GET_TYPE(dat_evd_free(dto)), DAT_INVALID_STATE);
	q.recv_evd_handle = DAT_HANDLE_NULL;
	q.request_evd_handle = DAT_HANDLE_NULL;
	CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_RECV_EVD_HANDLE | DAT_EP_FIELD_REQUEST_EVD_HANDLE, &q),
		DAT_SUCCESS);
	CHK_RET(dat_evd_free(dto), DAT_SUCCESS);
	node_close(&n);
}

Test(cm_modify, reserved_passive_and_connected_states)
{
	struct node srv, cli;
	DAT_RSP_HANDLE rsp;
	DAT_EP_HANDLE sep, cep;
	DAT_EVENT ev;
	uint16_t port = free_port();

	node_pair_open(&srv, &sep, &cli, &cep);
	CHK_RET(dat_rsp_create(srv.ia, port, sep, srv.cr_evd, &rsp), DAT_SUCCESS);
	check_rules(sep, DAT_EP_STATE_RESERVED, srv.pz);
	CHK_RET(connect_loopback(cep, port, 5 * SEC), DAT_SUCCESS);
	CHK(wait_ev(srv.cr_evd, 5 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	check_rules(sep, DAT_EP_STATE_PASSIVE_CONNECTION_PENDING, srv.pz);
	check_rules(cep, DAT_EP_STATE_ACTIVE_CONNECTION_PENDING, cli.pz);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, DAT_HANDLE_NULL, 0,
			      NULL),
		DAT_SUCCESS);
	CHK(wait_ev(cli.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(wait_ev(srv.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	check_rules(sep, DAT_EP_STATE_CONNECTED, srv.pz);
	check_rules(cep, DAT_EP_STATE_CONNECTED, cli.pz);
	CHK_RET(dat_ep_disconnect(cep, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	CHK(wait_ev(cli.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	CHK(wait_ev(srv.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	check_rules(sep, DAT_EP_STATE_DISCONNECTED, srv.pz);
	check_rules(cep, DAT_EP_STATE_DISCONNECTED, cli.pz);
	/* Wrong-state calls name the state. */
	CHK_RET(connect_loopback(cep, port, SEC),
		ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_DISCONNECTED));
	CHK_RET(dat_ep_reset(cep), DAT_SUCCESS);
	check_rules(cep, DAT_EP_STATE_UNCONNECTED, cli.pz);
	node_close(&cli);
	node_close(&srv);
}

Test(cm_modify, tentative_state_of_a_provider_ep)
{
	struct node srv, cli;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
	DAT_CR_PARAM crp;
	DAT_EVENT ev;

	node_open(&srv);
	node_open(&cli);
	CHK_RET(dat_psp_create_any(srv.ia, &port, srv.cr_evd, DAT_PSP_PROVIDER_FLAG, &psp),
		DAT_SUCCESS);
	CHK_RET(connect_loopback(node_ep(&cli), port, 5 * SEC), DAT_SUCCESS);
	CHK(wait_ev(srv.cr_evd, 5 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_query(ev.event_data.cr_arrival_event_data.cr_handle, DAT_CR_FIELD_ALL, &crp),
		DAT_SUCCESS);
	check_rules(crp.local_ep_handle, DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING, srv.pz);
	node_close(&cli);
	node_close(&srv);
}

/* COMPLETION_PENDING: a raw peer that never sends its RTU. */
Test(cm_modify, completion_pending_state)
{
	struct node srv;
	struct zd_cm_hdr h;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port;
	DAT_EP_HANDLE sep;
	DAT_EVENT ev;
	int fd;

	node_open_on(&srv, RAW_PEER_IA);
	sep = node_ep(&srv);
	CHK_RET(dat_psp_create_any(srv.ia, &port, srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		DAT_SUCCESS);
	fd = raw_connect((uint16_t)port);
	raw_send(fd, ZD_CM_MSG_REQ, 0, (uint32_t)port, NULL, 0);
	CHK(wait_ev(srv.cr_evd, 5 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, sep, 0, NULL),
		DAT_SUCCESS);
	if (raw_recv(fd, &h) != ZD_CM_MSG_REP) {
		close(fd);
		node_close(&srv);
		cr_skip_test(RAW_PEER_IA " now needs a QP blob, which a raw peer cannot give");
	}
	check_rules(sep, DAT_EP_STATE_COMPLETION_PENDING, srv.pz);
	CHK_RET(dat_ep_reset(sep), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_COMPLPENDING));
	close(fd);  /* no RTU ever: the accept cannot complete */
	CHK(wait_ev(srv.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR);
	CHK(ep_state(sep) == DAT_EP_STATE_DISCONNECTED);
	node_close(&srv);
}

/* DISCONNECT_PENDING: a raw peer that never acknowledges our DISC. */
Test(cm_modify, disconnect_pending_state)
{
	struct node cli;
	struct sockaddr_in sa;
	struct zd_cm_hdr h;
	socklen_t len = sizeof(sa);
	struct pollfd pfd;
	DAT_EP_HANDLE cep;
	uint64_t t0;
	int lfd, fd;

	node_open_on(&cli, RAW_PEER_IA);
	cep = node_ep(&cli);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	loopback(&sa);
	CHK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 4) == 0);
	CHK(getsockname(lfd, (struct sockaddr *)&sa, &len) == 0);
	CHK_RET(dat_ep_connect(cep, (DAT_IA_ADDRESS_PTR)&sa, ntohs(sa.sin_port), 5 * SEC, 0, NULL,
			       DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		DAT_SUCCESS);
	pfd = (struct pollfd){ .fd = lfd, .events = POLLIN };
	CHK(poll(&pfd, 1, 5000) == 1);
	fd = accept(lfd, NULL, NULL);
	CHK(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ .tv_sec = 3 }, sizeof(struct timeval));
	CHK(raw_recv(fd, &h) == ZD_CM_MSG_REQ);
	raw_send(fd, ZD_CM_MSG_REP, 0, h.conn_qual, NULL, 0);
	CHK(wait_ev(cli.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(raw_recv(fd, &h) == ZD_CM_MSG_RTU);
	t0 = now_ms();
	CHK_RET(dat_ep_disconnect(cep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	CHK(raw_recv(fd, &h) == ZD_CM_MSG_DISC);
	check_rules(cep, DAT_EP_STATE_DISCONNECT_PENDING, cli.pz);
	/* Unanswered, the graceful disconnect completes on its own. */
	CHK(wait_ev(cli.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	cr_assert_lt(now_ms() - t0, 3000);
	close(fd);
	close(lfd);
	node_close(&cli);
}
