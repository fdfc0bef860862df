/*
 * 64-bit connection qualifiers (core/zd_conn_qual.h): any DAT_CONN_QUAL
 * works for PSPs and RSPs; qualifiers whose probe ports meet never reach
 * each other's service point; the same qualifier twice on one address is
 * DAT_CONN_QUAL_IN_USE, from this process or another; a port held by a
 * program that is not zdapl is walked past.
 */
#include "cm_test.h"
#include "core/zd_conn_qual.h"

TestSuite(cm_qual, .init = zd_test_use_conf, .timeout = 60);

/* A connect of a fresh client EP of @cli to @qual, which @psp of @srv
 * serves: the CR names @psp and @qual, and both ends connect. */
static void connect_through(struct node *srv, DAT_PSP_HANDLE psp, struct node *cli,
			    DAT_CONN_QUAL qual)
{
	DAT_EP_HANDLE sep = node_ep(srv), cep = node_ep(cli);
	DAT_EVENT ev;
	DAT_EP_PARAM epp;

	CHK_RET(connect_loopback(cep, qual, 10 * SEC), DAT_SUCCESS);
	CHK(wait_ev(srv->cr_evd, 10 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK(ev.event_data.cr_arrival_event_data.sp_handle.psp_handle == psp);
	CHK(ev.event_data.cr_arrival_event_data.conn_qual == qual);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, sep, 0, NULL),
		DAT_SUCCESS);
	CHK(wait_ev(cli->conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(wait_ev(srv->conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK_RET(dat_ep_query(cep, DAT_EP_FIELD_ALL, &epp), DAT_SUCCESS);
	CHK(epp.remote_port_qual == qual);
	/* Freed while connected: the server sees it disconnect. */
	CHK_RET(dat_ep_free(cep), DAT_SUCCESS);
	CHK(wait_ev(srv->conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	CHK_RET(dat_ep_free(sep), DAT_SUCCESS);
}

static DAT_PSP_HANDLE psp_on(struct node *n, DAT_CONN_QUAL qual)
{
	DAT_PSP_HANDLE psp;
	DAT_PSP_PARAM pp;

	CHK_RET(dat_psp_create(n->ia, qual, n->cr_evd, DAT_PSP_CONSUMER_FLAG, &psp), DAT_SUCCESS);
	CHK_RET(dat_psp_query(psp, DAT_PSP_FIELD_ALL, &pp), DAT_SUCCESS);
	CHK(pp.conn_qual == qual);
	return psp;
}

Test(cm_qual, every_64_bit_qualifier_connects)
{
	const DAT_CONN_QUAL quals[] = {
		0xAffab1e,                             /* dapltest's CONN_QUAL0 */
		UINT64_MAX,
		0,
		(DAT_CONN_QUAL)getpid() << 32 | 7,    /* a process id in the high half */
		0x10000,                               /* just past a port number */
		22,                                    /* privileged: bound elsewhere */
	};
	struct node srv, cli;

	node_open(&srv);
	node_open(&cli);
	for (size_t i = 0; i < sizeof(quals) / sizeof(quals[0]); i++) {
		DAT_PSP_HANDLE psp = psp_on(&srv, quals[i]), dup;

		CHK_RET(dat_psp_create(srv.ia, quals[i], srv.cr_evd, DAT_PSP_CONSUMER_FLAG, &dup),
			DAT_CONN_QUAL_IN_USE);
		connect_through(&srv, psp, &cli, quals[i]);
		CHK_RET(dat_psp_free(psp), DAT_SUCCESS);
	}
	node_close(&cli);
	node_close(&srv);
}

/* PSP A's qualifier takes port P; PSP B's qualifier is P itself, whose
 * first port is taken: B goes to its next probe port, and a connect to
 * either qualifier reaches its own PSP. */
Test(cm_qual, qualifiers_meeting_on_a_port_reach_their_own_psp)
{
	const DAT_CONN_QUAL qa = 0xAffab1eull << 20 | 0x55;
	const DAT_CONN_QUAL qb = zd_qual_port(qa, 0);
	struct node srv, cli;
	DAT_PSP_HANDLE pa, pb;

	node_open(&srv);
	node_open(&cli);
	pa = psp_on(&srv, qa);
	pb = psp_on(&srv, qb);
	connect_through(&srv, pb, &cli, qb);
	connect_through(&srv, pa, &cli, qa);
	/* An RSP with a 64-bit qualifier meets them too. */
	{
		DAT_EP_HANDLE rep = node_ep(&srv), cep = node_ep(&cli);
		DAT_RSP_HANDLE rsp, dup;
		DAT_EVENT ev;

		CHK_RET(dat_rsp_create(srv.ia, qa + 1, rep, srv.cr_evd, &rsp), DAT_SUCCESS);
		CHK_RET(dat_rsp_create(srv.ia, qa, node_ep(&srv), srv.cr_evd, &dup),
			DAT_CONN_QUAL_IN_USE);
		CHK_RET(connect_loopback(cep, qa + 1, 10 * SEC), DAT_SUCCESS);
		CHK(wait_ev(srv.cr_evd, 10 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
		CHK(ev.event_data.cr_arrival_event_data.sp_handle.rsp_handle == rsp);
		CHK(ev.event_data.cr_arrival_event_data.conn_qual == qa + 1);
		CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, rep, 0, NULL),
			DAT_SUCCESS);
		CHK(wait_ev(cli.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
		CHK(wait_ev(srv.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	}
	node_close(&cli);
	node_close(&srv);
}

/* A program that is not zdapl holds the first port of the qualifier: it
 * accepts and says nothing (or speaks another protocol).  The PSP goes to
 * the next port and the client walks past the stranger. */
static void stranger_on_first_port(bool speaks)
{
	const DAT_CONN_QUAL q = 0x5eed0000beefull + (speaks ? 1 : 0);
	struct sockaddr_in sa;
	struct node srv, cli;
	DAT_PSP_HANDLE psp;
	int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	pid_t pid;

	loopback(&sa);
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	sa.sin_port = htons(zd_qual_port(q, 0));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
		cr_skip_test("port %u is taken on this host", zd_qual_port(q, 0));
	CHK(listen(lfd, 16) == 0);
	pid = fork();
	CHK(pid >= 0);
	if (pid == 0) {  /* the stranger: accept, then silence or noise */
		alarm(30);
		for (;;) {
			int fd = accept(lfd, NULL, NULL);

			if (fd >= 0 && speaks)
				(void)!write(fd, "SSH-2.0-OpenSSH_9.2p1 Debian\r\n\r\n\r\n", 32);
		}
	}
	close(lfd);
	node_open(&srv);
	node_open(&cli);
	psp = psp_on(&srv, q);
	connect_through(&srv, psp, &cli, q);
	node_close(&cli);
	node_close(&srv);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

Test(cm_qual, a_silent_stranger_on_the_first_port_is_walked_past)
{
	stranger_on_first_port(false);
}

Test(cm_qual, a_talking_stranger_on_the_first_port_is_walked_past)
{
	stranger_on_first_port(true);
}

/* Another process serves the qualifier: ours is DAT_CONN_QUAL_IN_USE,
 * also when its PSP had to take a later probe port; a qualifier that
 * only meets its port is fine. */
static int serve_two(int fd, void *arg)
{
	const DAT_CONN_QUAL *q = arg;
	struct node n;
	DAT_PSP_HANDLE a, b;

	node_open(&n);
	CHK_RET(dat_psp_create(n.ia, q[0], n.cr_evd, DAT_PSP_CONSUMER_FLAG, &a), DAT_SUCCESS);
	CHK_RET(dat_psp_create(n.ia, q[1], n.cr_evd, DAT_PSP_CONSUMER_FLAG, &b), DAT_SUCCESS);
	msg_send(fd, 1);
	msg_recv(fd, 20000);
	node_close(&n);
	return 0;
}

Test(cm_qual, a_qualifier_another_process_serves_is_in_use)
{
	/* q[1]'s first port is q[0]'s: the child's q[1] PSP sits on a
	 * later probe port. */
	DAT_CONN_QUAL q[2] = { 0xc0ffee0000ull | (uint64_t)getpid() };
	struct node n, cli;
	DAT_PSP_HANDLE psp;
	int fd;
	pid_t pid;

	q[1] = zd_qual_port(q[0], 0);
	pid = spawn(serve_two, q, &fd);
	CHK(msg_recv(fd, 10000) == 1);
	node_open(&n);
	CHK_RET(dat_psp_create(n.ia, q[0], n.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		DAT_CONN_QUAL_IN_USE);
	CHK_RET(dat_psp_create(n.ia, q[1], n.cr_evd, DAT_PSP_CONSUMER_FLAG, &psp),
		DAT_CONN_QUAL_IN_USE);
	/* q[0] + 1 is nobody's. */
	psp = psp_on(&n, q[0] + 1);
	node_open(&cli);
	connect_through(&n, psp, &cli, q[0] + 1);
	node_close(&cli);
	node_close(&n);
	msg_send(fd, 2);
	CHK(reap(pid, 10000) == 0);
	close(fd);
}

/* dat_psp_create_any hands out a qualifier nobody serves, and it works. */
Test(cm_qual, create_any_qualifiers_connect)
{
	struct node srv, cli;
	DAT_PSP_HANDLE psp[4];
	DAT_CONN_QUAL q[4];

	node_open(&srv);
	node_open(&cli);
	for (int i = 0; i < 4; i++) {
		CHK_RET(dat_psp_create_any(srv.ia, &q[i], srv.cr_evd, DAT_PSP_CONSUMER_FLAG,
					   &psp[i]),
			DAT_SUCCESS);
		for (int j = 0; j < i; j++)
			CHK(q[i] != q[j]);
	}
	connect_through(&srv, psp[3], &cli, q[3]);
	node_close(&cli);
	node_close(&srv);
}
