/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Pinned pollers (ZDAPL_POLLERS, evd/zd_poller.h) against consumers that
 * only dequeue or sleep, and that free EPs and EVDs, and close IAs, while
 * completions are still arriving.  Each round: a connected pair of @ia
 * carries a stream of sends and RDMA writes (the consumers spinning on
 * dat_evd_dequeue or sleeping in dat_evd_wait, alternately), then both
 * sides post a burst and at once free their EPs and EVDs, or close their
 * IAs with everything in them.  Pollers start with the first IA of a
 * round and stop with its last.
 */
#include "tsan_util.h"

#define WIN 16
#define MSG 128

struct stream {
	pthread_t t;
	struct ts_side *s, *peer;
	uint32_t count;
	int spin;
};

static void *stream_main(void *arg)
{
	struct stream *x = arg;
	struct ts_side *s = x->s;
	uint32_t out = 0;

	for (uint32_t i = 0; i < x->count; i++) {
		size_t off = (i % WIN) * MSG;

		while (out >= WIN / 2) {
			ts_dto(s->req, x->spin, NULL);
			out--;
		}
		s->buf[off] = (uint8_t)i;
		if (i % 2)
			CHK_RET(ts_post_write(s, x->peer, i, off, TS_BUF / 2 + off, MSG),
				DAT_SUCCESS);
		else
			CHK_RET(ts_post_send(s, i, off, MSG), DAT_SUCCESS);
		out++;
	}
	while (out--)
		ts_dto(s->req, x->spin, NULL);
	return NULL;
}

/* Both sides post what they can without waiting for any of it. */
static void burst(struct ts_side *a, struct ts_side *b)
{
	for (uint32_t i = 0; i < WIN / 2; i++) {
		/* Errors are fine here: the other side may be freeing. */
		(void)ts_post_send(a, i, i * MSG, MSG);
		(void)ts_post_write(b, a, i, i * MSG, TS_BUF / 2 + i * MSG, MSG);
	}
}

static void round_once(const char *ia, unsigned round, uint32_t count)
{
	struct ts_node sn, cn;
	struct ts_side s, c;
	struct stream x;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL q;
	int spin = round % 2 == 0;

	ts_node_open(&sn, ia);
	ts_node_open(&cn, ia);
	ts_side_open(&s, &sn, 64);
	ts_side_open(&c, &cn, 64);
	q = ts_listen(&sn, &psp, 4);
	for (uint32_t i = 0; i < WIN; i++)
		CHK_RET(ts_post_recv(&s, i, i * MSG, MSG), DAT_SUCCESS);
	ts_pair_connect(&s, &c, q);

	x = (struct stream){ .s = &c, .peer = &s, .count = count, .spin = spin };
	ts_thread(&x.t, stream_main, &x);
	for (uint32_t i = 0; i < count; i += 2) {
		DAT_EVENT ev;
		uint64_t slot;

		ts_dto(s.rcv, spin, &ev);
		slot = ev.event_data.dto_completion_event_data.user_cookie.as_64;
		CHK(slot == (i / 2) % WIN);
		CHK_RET(ts_post_recv(&s, slot, slot * MSG, MSG), DAT_SUCCESS);
	}
	pthread_join(x.t, NULL);

	/* Everything goes while completions are on their way. */
	burst(&s, &c);
	CHK_RET(dat_psp_free(psp), DAT_SUCCESS);
	if (round % 3 == 2) {
		ts_node_close(&sn);
		ts_node_close(&cn);
		free(s.buf);
		free(c.buf);
	} else {
		ts_side_free(&s);
		ts_side_free(&c);
		ts_node_close(&sn);
		ts_node_close(&cn);
	}
}

int ts_pollers(int argc, char **argv)
{
	const char *ia = argc > 0 ? argv[0] : "zdapl-shm";
	struct ts_budget b;
	cpu_set_t set;

	char cpus[32] = "";
	int n = 0;

	/* A poller on each of the first two CPUs this process may use (read
	 * at the first dat_ia_open of each round). */
	CHK(sched_getaffinity(0, sizeof(set), &set) == 0);
	for (int cpu = 0; cpu < CPU_SETSIZE && n < 2; cpu++)
		if (CPU_ISSET(cpu, &set))
			snprintf(cpus + strlen(cpus), sizeof(cpus) - strlen(cpus), "%s%d",
				 n++ ? "," : "", cpu);
	setenv("ZDAPL_POLLERS", cpus, 1);
	ts_budget_start(&b, 3000, 3);
	while (ts_budget_more(&b))
		round_once(ia, b.iter, 400);
	return 0;
}
