/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One connection's traffic while other connections come and go on the
 * same IAs: the device threads that serve a connection (zdapl-tcp's
 * progress thread, which also serves RDMA at a target that never polls;
 * the mlx5 event thread that wakes dat_evd_wait; the software NIC's
 * engine under zdapl-mlx5sim; the shm waker) against the consumers and
 * the CM thread.
 *
 * The initiator streams sends, RDMA writes and RDMA reads and sleeps in
 * dat_evd_wait for their completions; the target sleeps in dat_evd_wait
 * for the sends and checks each message, never polling for the RDMA; two
 * clients churn connections to the target's IA meanwhile, one of them on
 * the initiator's IA.
 */
#include "tsan_cm.h"

#define WIN 8           /* receives posted ahead, and sends in flight */
#define MSG 256
#define RDMA_OFF (TS_BUF / 2)    /* RDMA writes land here at the target */
#define READ_OFF (RDMA_OFF + WIN * MSG) /* RDMA reads read here (never written) */

struct initiator {
	pthread_t t;
	struct ts_side *s;
	struct ts_remote peer;
	uint32_t count;
};

static void *initiator_main(void *arg)
{
	struct initiator *x = arg;
	struct ts_side *s = x->s;
	uint32_t out = 0;

	for (uint32_t i = 0; i < x->count; i++) {
		size_t off = (i % WIN) * MSG;

		/* At most WIN/2 operations unfinished: a reused slot's
		 * earlier operation has completed. */
		while (out >= WIN / 2) {
			ts_dto(s->req, 0, NULL);
			out--;
		}
		memset(s->buf + off, (int)(i & 0xff), MSG);
		switch (i % 3) {
		case 0:
			CHK_RET(ts_post_send(s, i, off, MSG), DAT_SUCCESS);
			break;
		case 1:
			CHK_RET(ts_post_rdma(s, &x->peer, 1, i, off, RDMA_OFF + off, MSG),
				DAT_SUCCESS);
			break;
		default:
			CHK_RET(ts_post_rdma(s, &x->peer, 0, i, RDMA_OFF + off, READ_OFF, MSG),
				DAT_SUCCESS);
			break;
		}
		out++;
	}
	while (out--)
		ts_dto(s->req, 0, NULL);
	return NULL;
}

int ts_traffic(int argc, char **argv)
{
	const char *ia = argc > 0 ? argv[0] : "zdapl-tcp-lo";
	struct ts_client cl[2];
	struct ts_server srv;
	struct ts_node cn;
	struct ts_side s, c;
	struct initiator x;
	struct ts_budget b;
	uint32_t sends = 0, rounds = 0;

	ts_server_open(&srv, ia, 3);
	ts_node_open(&cn, ia);
	ts_side_open(&s, &srv.n, 64);
	ts_side_open(&c, &cn, 64);
	for (uint32_t i = 0; i < WIN; i++)
		CHK_RET(ts_post_recv(&s, i, i * MSG, MSG), DAT_SUCCESS);
	ts_pair_connect(&s, &c, srv.qual);
	ts_server_run(&srv);
	for (unsigned i = 0; i < 2; i++) {
		cl[i] = (struct ts_client){ .ia = ia, .srv = &srv, .id = i, .ms = 2500,
					    .min_rounds = 6, .shared = i ? &cn : NULL };
		ts_thread(&cl[i].t, ts_client_main, &cl[i]);
	}

	ts_budget_start(&b, 2500, 2);
	while (ts_budget_more(&b)) {
		x = (struct initiator){ .s = &c, .peer = ts_side_remote(&s), .count = 600 };
		ts_thread(&x.t, initiator_main, &x);
		/* Every third operation is a send, in order. */
		for (uint32_t i = 0; i < x.count; i += 3) {
			DAT_EVENT ev;
			uint64_t slot;

			ts_dto(s.rcv, 0, &ev);
			slot = ev.event_data.dto_completion_event_data.user_cookie.as_64;
			CHK(slot == sends % WIN);
			CHK(s.buf[slot * MSG] == (uint8_t)i && s.buf[slot * MSG + MSG - 1] == (uint8_t)i);
			CHK_RET(ts_post_recv(&s, slot, slot * MSG, MSG), DAT_SUCCESS);
			sends++;
		}
		pthread_join(x.t, NULL);
	}
	for (unsigned i = 0; i < 2; i++) {
		pthread_join(cl[i].t, NULL);
		rounds += cl[i].rounds;
	}
	ts_side_free(&c);
	ts_node_close(&cn);
	ts_server_stop(&srv);   /* closes the target's IA with its side */
	free(s.buf);
	printf("traffic %s: %u sends checked, %u client rounds\n", ia, sends, rounds);
	return 0;
}
