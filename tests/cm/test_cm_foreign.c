/*
 * Objects of another IA: an EP may take its connection EVD from another
 * IA of the provider (dapltest -T L -w builds every IA's EPs on IA 0's,
 * as OFED dapl allows); connection events need no device.  DTO EVDs stay
 * the EP's own IA's (a device CQ serves its own IA's QPs):
 * DAT_INVALID_HANDLE.  The other IA's abrupt close leaves the EP without
 * a connection EVD, never with a freed one.
 */
#include "cm_test.h"

TestSuite(cm_foreign, .init = zd_test_use_conf, .timeout = 30);

Test(cm_foreign, connection_evd_of_another_ia_carries_the_events)
{
	struct node a, b, srv;
	DAT_EP_HANDLE ep, sep, ep2;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL q;
	DAT_EP_PARAM epp;
	DAT_EVENT ev;

	node_open(&a);
	node_open(&b);
	node_open(&srv);
	CHK_RET(dat_ep_create(b.ia, b.pz, DAT_HANDLE_NULL, DAT_HANDLE_NULL, a.conn_evd, NULL, &ep),
		DAT_SUCCESS);
	CHK_RET(dat_ep_query(ep, DAT_EP_FIELD_ALL, &epp), DAT_SUCCESS);
	CHK(epp.connect_evd_handle == a.conn_evd && epp.ia_handle == b.ia);
	/* In use by b's EP: a cannot free it. */
	CHK_RET(dat_evd_free(a.conn_evd), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE));

	CHK_RET(dat_psp_create_any(srv.ia, &q, srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		DAT_SUCCESS);
	sep = node_ep(&srv);
	CHK_RET(connect_loopback(ep, q, 5 * SEC), DAT_SUCCESS);
	CHK(wait_ev(srv.cr_evd, 5 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, sep, 0, NULL),
		DAT_SUCCESS);
	CHK(wait_ev(a.conn_evd, 5 * SEC, &ev) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(ev.event_data.connect_event_data.ep_handle == ep && ev.evd_handle == a.conn_evd);
	CHK(wait_ev(b.conn_evd, 100000, NULL) == 0);
	CHK(wait_ev(srv.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK_RET(dat_ep_disconnect(ep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	CHK(wait_ev(a.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);

	/* A second EP, built on b's own: dat_ep_modify moves it to a's and
	 * back and to a's again.  Then a's abrupt close: both lose their
	 * connection EVD and stay usable. */
	CHK_RET(dat_ep_create(b.ia, b.pz, DAT_HANDLE_NULL, DAT_HANDLE_NULL, b.conn_evd, NULL, &ep2),
		DAT_SUCCESS);
	{
		DAT_EP_PARAM p = { .connect_evd_handle = a.conn_evd };

		CHK_RET(dat_ep_modify(ep2, DAT_EP_FIELD_CONNECT_EVD_HANDLE, &p), DAT_SUCCESS);
		CHK_RET(dat_ep_query(ep2, DAT_EP_FIELD_ALL, &epp), DAT_SUCCESS);
		CHK(epp.connect_evd_handle == a.conn_evd);
		p.connect_evd_handle = b.conn_evd;
		CHK_RET(dat_ep_modify(ep2, DAT_EP_FIELD_CONNECT_EVD_HANDLE, &p), DAT_SUCCESS);
		p.connect_evd_handle = a.conn_evd;
		CHK_RET(dat_ep_modify(ep2, DAT_EP_FIELD_CONNECT_EVD_HANDLE, &p), DAT_SUCCESS);
	}
	node_close(&a);
	CHK_RET(dat_ep_query(ep, DAT_EP_FIELD_ALL, &epp), DAT_SUCCESS);
	CHK(epp.connect_evd_handle == DAT_HANDLE_NULL);
	CHK_RET(dat_ep_query(ep2, DAT_EP_FIELD_ALL, &epp), DAT_SUCCESS);
	CHK(epp.connect_evd_handle == DAT_HANDLE_NULL);
	CHK_RET(dat_ep_free(ep2), DAT_SUCCESS);
	CHK_RET(dat_ep_free(ep), DAT_SUCCESS);
	node_close(&b);
	node_close(&srv);
}

Test(cm_foreign, dto_evds_of_another_ia_are_refused)
{
	struct node a, b;
	DAT_EVD_HANDLE dto;
	DAT_EP_HANDLE ep;

	node_open(&a);
	node_open(&b);
	CHK_RET(dat_evd_create(a.ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &dto), DAT_SUCCESS);
	CHK_RET(dat_ep_create(b.ia, b.pz, dto, DAT_HANDLE_NULL, b.conn_evd, NULL, &ep),
		ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_RECV));
	CHK_RET(dat_ep_create(b.ia, b.pz, DAT_HANDLE_NULL, dto, b.conn_evd, NULL, &ep),
		ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST));
	/* Nor a DTO EVD as the connection EVD (wrong kind, any IA). */
	CHK_RET(dat_ep_create(b.ia, b.pz, DAT_HANDLE_NULL, DAT_HANDLE_NULL, dto, NULL, &ep),
		ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN));
	CHK_RET(dat_ep_create(b.ia, b.pz, DAT_HANDLE_NULL, DAT_HANDLE_NULL, DAT_HANDLE_NULL, NULL,
			      &ep),
		DAT_SUCCESS);
	{
		DAT_EP_PARAM p = { .request_evd_handle = dto };

		CHK_RET(dat_ep_modify(ep, DAT_EP_FIELD_REQUEST_EVD_HANDLE, &p),
			ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3));
	}
	CHK_RET(dat_ep_free(ep), DAT_SUCCESS);
	CHK_RET(dat_evd_free(dto), DAT_SUCCESS);
	node_close(&a);
	node_close(&b);
}
