/*
 * Every CM call with a handle of the wrong type or a freed one, and with
 * each bad parameter: the DAT error the calls' pages name, and nothing
 * created or changed.
 */
#include "cm_test.h"

/* libdat2 exports no dat_ep_common_connect: call through the provider
 * table, as its other entry points do. */
#include <dat2/udat_redirection.h>

TestSuite(cm_params, .init = zd_test_use_conf, .timeout = 30);

#define BAD_HANDLE(call, sub) CHK_RET(call, ERR(DAT_INVALID_HANDLE, sub))
#define BAD_PARAM(call, arg)  CHK_RET(call, ERR(DAT_INVALID_PARAMETER, arg))

Test(cm_params, wrong_and_freed_handles)
{
	struct node n;
	struct sockaddr_in sa;
	DAT_PSP_HANDLE psp, dead_psp;
	DAT_RSP_HANDLE rsp;
	DAT_CONN_QUAL q;
	DAT_EP_HANDLE ep = DAT_HANDLE_NULL, dead_ep;
	DAT_PSP_PARAM pp;
	DAT_RSP_PARAM rp;
	DAT_CR_PARAM crp;
	DAT_EP_PARAM epp;
	DAT_EVD_HANDLE pz_as_evd;
	void *x;

	node_open(&n);
	x = n.pz;  /* a live handle of the wrong type */
	pz_as_evd = n.pz;
	dead_ep = node_ep(&n);
	CHK_RET(dat_ep_free(dead_ep), DAT_SUCCESS);
	CHK_RET(dat_psp_create_any(n.ia, &q, n.cr_evd, DAT_PSP_CONSUMER_FLAG, &dead_psp),
		DAT_SUCCESS);
	CHK_RET(dat_psp_free(dead_psp), DAT_SUCCESS);
	loopback(&sa);

	BAD_HANDLE(dat_psp_create(x, 4000, n.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		   DAT_INVALID_HANDLE_IA);
	BAD_HANDLE(dat_psp_create_any(x, &q, n.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		   DAT_INVALID_HANDLE_IA);
	BAD_HANDLE(dat_psp_create(n.ia, 4000, pz_as_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		   DAT_INVALID_HANDLE_EVD_CR);
	BAD_HANDLE(dat_psp_create(n.ia, 4000, n.conn_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		   DAT_INVALID_HANDLE_EVD_CR);
	BAD_HANDLE(dat_psp_query(x, DAT_PSP_FIELD_ALL, &pp), DAT_INVALID_HANDLE_PSP);
	BAD_HANDLE(dat_psp_query(dead_psp, DAT_PSP_FIELD_ALL, &pp), DAT_INVALID_HANDLE_PSP);
	BAD_HANDLE(dat_psp_free(dead_psp), DAT_INVALID_HANDLE_PSP);
	BAD_HANDLE(dat_rsp_create(x, 4000, dead_ep, n.cr_evd, &rsp), DAT_INVALID_HANDLE_IA);
	BAD_HANDLE(dat_rsp_create(n.ia, 4000, dead_ep, n.cr_evd, &rsp), DAT_INVALID_HANDLE_EP);
	BAD_HANDLE(dat_rsp_query(x, DAT_RSP_FIELD_ALL, &rp), DAT_INVALID_HANDLE_RSP);
	BAD_HANDLE(dat_rsp_free(x), DAT_INVALID_HANDLE_RSP);
	BAD_HANDLE(dat_cr_query(x, DAT_CR_FIELD_ALL, &crp), DAT_INVALID_HANDLE_CR);
	BAD_HANDLE(dat_cr_accept(x, dead_ep, 0, NULL), DAT_INVALID_HANDLE_CR);
	BAD_HANDLE(dat_cr_reject(x, 0, NULL), DAT_INVALID_HANDLE_CR);
	BAD_HANDLE(dat_cr_handoff(x, 4000), DAT_INVALID_HANDLE_CR);
	BAD_HANDLE(dat_ep_connect(x, (DAT_IA_ADDRESS_PTR)&sa, 4000, SEC, 0, NULL,
				  DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		   DAT_INVALID_HANDLE_EP);
	BAD_HANDLE(dat_ep_connect(dead_ep, (DAT_IA_ADDRESS_PTR)&sa, 4000, SEC, 0, NULL,
				  DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		   DAT_INVALID_HANDLE_EP);
	BAD_HANDLE(dat_ep_dup_connect(x, dead_ep, SEC, 0, NULL, DAT_QOS_BEST_EFFORT),
		   DAT_INVALID_HANDLE_EP);
	BAD_HANDLE(DAT_EP_COMMON_CONNECT(x, (DAT_IA_ADDRESS_PTR)&sa, SEC, 0, NULL),
		   DAT_INVALID_HANDLE_EP);
	BAD_HANDLE(dat_ep_disconnect(x, DAT_CLOSE_ABRUPT_FLAG), DAT_INVALID_HANDLE_EP);
	BAD_HANDLE(dat_ep_disconnect(dead_ep, DAT_CLOSE_ABRUPT_FLAG), DAT_INVALID_HANDLE_EP);
	BAD_HANDLE(dat_ep_modify(dead_ep, DAT_EP_FIELD_EP_ATTR_QOS, &epp), DAT_INVALID_HANDLE_EP);
	BAD_HANDLE(dat_ep_reset(x), DAT_INVALID_HANDLE_EP);
	BAD_HANDLE(dat_ep_free(dead_ep), DAT_INVALID_HANDLE_EP);
	(void)ep;
	node_close(&n);
}

Test(cm_params, bad_parameters)
{
	struct node n;
	struct sockaddr_in sa;
	struct sockaddr_in6 sa6 = { .sin6_family = AF_INET6 };
	DAT_PSP_HANDLE psp;
	DAT_RSP_HANDLE rsp;
	DAT_EP_HANDLE ep, ep2;
	DAT_EVENT ev;
	DAT_CR_HANDLE cr;
	uint8_t pd[ZD_CM_PDATA_MAX + 1] = { 0 };
	uint16_t port = free_port();

	node_open(&n);
	ep = node_ep(&n);
	loopback(&sa);

	/* PSP (every 64-bit conn_qual is valid: test_cm_qual.c) */
	BAD_PARAM(dat_psp_create(n.ia, port, n.cr_evd, (DAT_PSP_FLAGS)7, &psp), DAT_INVALID_ARG4);
	BAD_PARAM(dat_psp_create(n.ia, port, n.cr_evd, DAT_PSP_CONSUMER_FLAG, NULL),
		  DAT_INVALID_ARG5);
	BAD_PARAM(dat_psp_create_any(n.ia, NULL, n.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		  DAT_INVALID_ARG2);
	CHK_RET(dat_psp_create(n.ia, port, n.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp), DAT_SUCCESS);
	BAD_PARAM(dat_psp_query(psp, DAT_PSP_FIELD_ALL, NULL), DAT_INVALID_ARG3);

	/* RSP */
	BAD_PARAM(dat_rsp_create(n.ia, free_port(), ep, n.cr_evd, NULL), DAT_INVALID_ARG5);
	CHK_RET(dat_rsp_create(n.ia, port, ep, n.cr_evd, &rsp), DAT_CONN_QUAL_IN_USE);
	CHK(ep_state(ep) == DAT_EP_STATE_UNCONNECTED);
	CHK_RET(dat_rsp_create(n.ia, free_port(), ep, n.cr_evd, &rsp), DAT_SUCCESS);
	BAD_PARAM(dat_rsp_query(rsp, DAT_RSP_FIELD_ALL, NULL), DAT_INVALID_ARG3);
	CHK_RET(dat_rsp_free(rsp), DAT_SUCCESS);

	/* dat_ep_connect */
	BAD_PARAM(dat_ep_connect(ep, NULL, port, SEC, 0, NULL, DAT_QOS_BEST_EFFORT,
				 DAT_CONNECT_DEFAULT_FLAG),
		  DAT_INVALID_ARG2);
	CHK_RET(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&sa6, port, SEC, 0, NULL,
			       DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		ERR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED));
	BAD_PARAM(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&sa, port, 0, 0, NULL, DAT_QOS_BEST_EFFORT,
				 DAT_CONNECT_DEFAULT_FLAG),
		  DAT_INVALID_ARG4);
	BAD_PARAM(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&sa, port, SEC, -1, pd,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_INVALID_ARG5);
	BAD_PARAM(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&sa, port, SEC, n.max_pdata + 1, pd,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_INVALID_ARG5);
	BAD_PARAM(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&sa, port, SEC, 4, NULL,
				 DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		  DAT_INVALID_ARG6);
	CHK_RET(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&sa, port, SEC, 0, NULL, DAT_QOS_LOW_LATENCY,
			       DAT_CONNECT_DEFAULT_FLAG),
		ERR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE));
	CHK_RET(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&sa, port, SEC, 0, NULL, DAT_QOS_BEST_EFFORT,
			       DAT_CONNECT_MULTIPATH_REQUIRED_FLAG),
		ERR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE));
	BAD_PARAM(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&sa, port, SEC, 0, NULL,
				 DAT_QOS_BEST_EFFORT, (DAT_CONNECT_FLAGS)0x40),
		  DAT_INVALID_ARG8);
	/* None of that moved the EP. */
	CHK(ep_state(ep) == DAT_EP_STATE_UNCONNECTED);
	CHK(wait_ev(n.conn_evd, 1000, NULL) == 0);
	/* An EP without a connection EVD cannot report the outcome. */
	CHK_RET(dat_ep_create(n.ia, n.pz, DAT_HANDLE_NULL, DAT_HANDLE_NULL, DAT_HANDLE_NULL, NULL,
			      &ep2),
		DAT_SUCCESS);
	CHK_RET(dat_ep_connect(ep2, (DAT_IA_ADDRESS_PTR)&sa, port, SEC, 0, NULL,
			       DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN));
	CHK_RET(DAT_EP_COMMON_CONNECT(ep, (DAT_IA_ADDRESS_PTR)&sa, SEC, 0, NULL),
		ERR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE));

	/* dat_ep_disconnect, dat_ep_reset in the wrong state */
	BAD_PARAM(dat_ep_disconnect(ep, (DAT_CLOSE_FLAGS)5), DAT_INVALID_ARG2);
	CHK_RET(dat_ep_disconnect(ep, DAT_CLOSE_ABRUPT_FLAG),
		ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED));

	/* The CR calls */
	CHK_RET(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&sa, port, 5 * SEC, 0, NULL,
			       DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK_RET(dat_ep_connect(ep, (DAT_IA_ADDRESS_PTR)&sa, port, 5 * SEC, 0, NULL,
			       DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG),
		ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_ACTCONNPENDING));
	CHK_RET(dat_ep_reset(ep), ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_ACTCONNPENDING));
	CHK(wait_ev(n.cr_evd, 5 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	cr = ev.event_data.cr_arrival_event_data.cr_handle;
	BAD_PARAM(dat_cr_query(cr, DAT_CR_FIELD_ALL, NULL), DAT_INVALID_ARG3);
	CHK_RET(dat_cr_accept(cr, DAT_HANDLE_NULL, 0, NULL),
		ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHK_RET(dat_cr_accept(cr, n.pz, 0, NULL), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	/* The connecting EP itself is not UNCONNECTED. */
	CHK_RET(dat_cr_accept(cr, ep, 0, NULL),
		ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_ACTCONNPENDING));
	BAD_PARAM(dat_cr_accept(cr, ep2, -1, pd), DAT_INVALID_ARG3);
	BAD_PARAM(dat_cr_accept(cr, ep2, n.max_pdata + 1, pd), DAT_INVALID_ARG3);
	BAD_PARAM(dat_cr_accept(cr, ep2, 3, NULL), DAT_INVALID_ARG4);
	CHK_RET(dat_cr_accept(cr, ep2, 0, NULL), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN));
	BAD_PARAM(dat_cr_reject(cr, -1, pd), DAT_INVALID_ARG2);
	CHK_RET(dat_cr_handoff(cr, 4000), ERR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE));
	/* Still answerable after all the refusals. */
	CHK_RET(dat_cr_reject(cr, 0, NULL), DAT_SUCCESS);
	CHK(wait_ev(n.conn_evd, 5 * SEC, NULL) == DAT_CONNECTION_EVENT_PEER_REJECTED);
	CHK(ep_state(ep) == DAT_EP_STATE_DISCONNECTED);
	node_close(&n);
}
