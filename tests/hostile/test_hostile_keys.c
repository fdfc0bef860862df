/*
 * RDMA with guessed keys (issue 15).  A peer that tries random rkeys
 * against a target: every guess completes DAT_DTO_ERR_REMOTE_ACCESS at
 * the guesser and breaks that connection (both sides see it end), so
 * each guess costs a new connection; the target's memory keeps its
 * checksum.  The keys themselves: 2000 registrations of one IA give 2000
 * different rkeys whose every bit varies (mem/zd_keygen.h; the key
 * statistics are in tests/mem/test_keygen).  On zdapl-shm, zdapl-tcp (lo)
 * and zdapl-mlx5sim.
 */
#include <sys/random.h>

#include "hostile.h"

#define GUESSES 8
#define NKEYS 2000


TestSuite(hostile_keys, .timeout = 120);

static uint64_t checksum(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/* The guesser: GUESSES connections, each ending with its one wrong key
 * (writes and reads in turn). */
static int c_guess(int fd, void *arg)
{
	const struct peer_job *j = arg;
	struct peer p;
	DAT_RMR_TRIPLET r;

	client_open(&p, j->dev, 0, fd, NULL);
	r = recv_region(fd);
	for (int g = 0; g < GUESSES; g++) {
		DAT_LMR_TRIPLET iov = seg(&p, 0, 4096);
		DAT_RMR_TRIPLET guess = r;
		DAT_EVENT ev;

		do
			CHK(getrandom(&guess.rmr_context, sizeof(guess.rmr_context), 0) == 4);
		while (guess.rmr_context == r.rmr_context);
		guess.segment_length = 4096;
		fill(p.buf, 4096, (uint8_t)(50 + g));
		if (g & 1)
			post_read(p.ep, 1, &iov, 40 + (uint64_t)g, &guess);
		else
			post_write(p.ep, 1, &iov, 40 + (uint64_t)g, &guess);
		CHK(dto_wait(p.req, 10 * SEC, 40 + (uint64_t)g, NULL) == DAT_DTO_ERR_REMOTE_ACCESS);
		/* that connection is over */
		CHK(wait_ev(p.n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_BROKEN ||
		    ev.event_number == DAT_CONNECTION_EVENT_DISCONNECTED);
		CHK_RET(dat_ep_free(p.ep), DAT_SUCCESS);
		if (g + 1 < GUESSES) {
			peer_ep(&p, &p.ep, 0);
			client_connect(&p, p.ep, p.port);
		}
	}
	p.ep = NULL;
	msg_send(fd, 1);
	msg_recv(fd, 10000);
	peer_close(&p);
	return 0;
}

static void guess_case(const struct peer_dev *dev)
{
	struct peer_job j = { .dev = dev };
	struct peer p;
	uint64_t sum;

	server_start(&p, dev, 0, c_guess, &j);
	fill(p.buf, BUF, 77);
	sum = checksum(p.buf, BUF);
	server_up(&p);
	send_region(&p, p.fd);
	for (int g = 0; g < GUESSES; g++) {
		DAT_EVENT ev;

		CHK(wait_ev(p.n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_BROKEN ||
		    ev.event_number == DAT_CONNECTION_EVENT_DISCONNECTED);
		CHK_RET(dat_ep_free(p.ep), DAT_SUCCESS);
		p.ep = NULL;
		if (g + 1 < GUESSES) {
			peer_ep(&p, &p.ep, 0);
			server_accept(&p, p.ep);
		}
	}
	CHK(msg_recv(p.fd, 10000) == 1);
	CHK(checksum(p.buf, BUF) == sum);
	server_done(&p);
}

Test(hostile_keys, shm_guesses) { guess_case(&shm); }
Test(hostile_keys, tcp_guesses) { guess_case(&tcp); }
Test(hostile_keys, mlx5sim_guesses) { guess_case(&mlx5sim); }

/* NKEYS registrations: distinct rkeys, every bit both set and clear. */
static void keys_case(const struct peer_dev *dev, uint32_t want_varying)
{
	static DAT_LMR_HANDLE lmr[NKEYS];
	static uint32_t key[NKEYS];
	struct node n;
	uint8_t *buf = aligned_alloc(4096, (NKEYS * 64 + 4095) & ~(size_t)4095);
	uint32_t and = ~0u, or = 0;

	CHK(buf);
	node_open_on(&n, dev->ia);
	for (int i = 0; i < NKEYS; i++) {
		DAT_REGION_DESCRIPTION r = { .for_va = buf + 64 * i };
		DAT_LMR_CONTEXT lkey;
		DAT_VLEN rlen;
		DAT_VADDR raddr;

		CHK_RET(dat_lmr_create(n.ia, DAT_MEM_TYPE_VIRTUAL, r, 64, n.pz, DAT_MEM_PRIV_ALL_FLAG,
				       DAT_VA_TYPE_VA, &lmr[i], &lkey, &key[i], &rlen, &raddr),
			DAT_SUCCESS);
		and &= key[i];
		or |= key[i];
		for (int k = 0; k < i; k++)
			CHK(key[k] != key[i]);
	}
	fprintf(stderr, "%s: %d rkeys, bits that vary: 0x%08x\n", dev->ia, NKEYS, or & ~and);
	CHK((or & ~and & want_varying) == want_varying);
	for (int i = 0; i < NKEYS; i++)
		CHK_RET(dat_lmr_free(lmr[i]), DAT_SUCCESS);
	node_close(&n);
	free(buf);
}

Test(hostile_keys, shm_keys) { keys_case(&shm, ~0u); }
Test(hostile_keys, tcp_keys) { keys_case(&tcp, ~0u); }

/* A wrong key breaks its connection after a short grace (the data path
 * tells the CM, zd_cm_dev_broken); a consumer that ends the connection
 * itself within the grace and at once connects the same EPs again (as
 * dapltest's server reuses its EP for every client) keeps the new
 * connection: the report names the old one, not whatever reuses its EP
 * and its memory.  Both peers in this process, ROUNDS times. */
#define ROUNDS 2

static void drain(DAT_EVD_HANDLE evd)
{
	while (wait_ev(evd, 0, NULL) != 0)
		;
}

static void stale_report_case(const struct peer_dev *dev)
{
	struct peer a, b;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port = local_pair_open(&a, &b, dev, &psp);
	DAT_EVENT ev;

	for (int round = 0; round < ROUNDS; round++) {
		DAT_LMR_TRIPLET iov = seg(&b, 0, 64);
		DAT_RMR_TRIPLET wrong = { .rmr_context = a.rkey ^ 0x5a5a5a5au,
					  .virtual_address = (DAT_VADDR)(uintptr_t)a.buf,
					  .segment_length = 64 };
		DAT_EVENT_NUMBER e;

		local_connect(&a, &b, port);
		post_write(b.ep, 1, &iov, 1, &wrong);
		CHK(dto_wait(b.req, 10 * SEC, 1, NULL) == DAT_DTO_ERR_REMOTE_ACCESS);
		/* Within the grace: ended by the consumer, and again. */
		CHK_RET(dat_ep_disconnect(b.ep, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
		CHK(wait_ev(b.n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
		e = wait_ev(a.n.conn_evd, 10 * SEC, NULL);
		CHK(e == DAT_CONNECTION_EVENT_DISCONNECTED || e == DAT_CONNECTION_EVENT_BROKEN);
		CHK_RET(dat_ep_reset(a.ep), DAT_SUCCESS);
		CHK_RET(dat_ep_reset(b.ep), DAT_SUCCESS);
		drain(a.rcv);
		drain(b.req);
		local_connect(&a, &b, port);
		/* Well past the grace: the new connection stands and carries. */
		CHK(wait_ev(b.n.conn_evd, 500000, &ev) == 0);  /* 2.5 x the grace */
		CHK(wait_ev(a.n.conn_evd, 0, &ev) == 0);
		CHK(ep_state(a.ep) == DAT_EP_STATE_CONNECTED && ep_state(b.ep) == DAT_EP_STATE_CONNECTED);
		iov = seg(&a, 128, 64);
		post_recv(a.ep, 1, &iov, 2);
		send_wait(&b, b.ep, 0, 64, 3);
		CHK(dto_wait(a.rcv, 10 * SEC, 2, NULL) == DAT_DTO_SUCCESS);
		CHK_RET(dat_ep_disconnect(b.ep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
		CHK(wait_ev(b.n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
		CHK(wait_ev(a.n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
		CHK_RET(dat_ep_reset(a.ep), DAT_SUCCESS);
		CHK_RET(dat_ep_reset(b.ep), DAT_SUCCESS);
	}
	peer_close(&b);
	peer_close(&a);
}

Test(hostile_keys, shm_stale_report) { stale_report_case(&shm); }
Test(hostile_keys, tcp_stale_report) { stale_report_case(&tcp); }
Test(hostile_keys, mlx5sim_stale_report) { stale_report_case(&mlx5sim); }
