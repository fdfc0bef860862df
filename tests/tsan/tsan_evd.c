/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * EVD wait/wake and dat_evd_resize against producers, through libdat2:
 *  - software events: several threads dat_evd_post_se into one EVD while
 *    its consumer sleeps in dat_evd_wait, dequeues bursts and resizes the
 *    EVD between them (each producer's events stay in order, none lost);
 *  - device completions: a sender thread streams sends over a connected
 *    pair of @ia (default zdapl-shm) while the receiver sleeps in
 *    dat_evd_wait on its receive EVD (woken by the peer's completion
 *    path or the device's waker thread) and resizes that EVD between
 *    waits.
 */
#include "tsan_util.h"

#define PRODUCERS 3
#define SE_QLEN 64

struct se_producer {
	pthread_t t;
	DAT_EVD_HANDLE evd;
	uint32_t id;
	uint32_t count;
};

static void *se_produce(void *arg)
{
	struct se_producer *p = arg;

	for (uint32_t i = 0; i < p->count; i++) {
		DAT_EVENT ev = { .event_number = DAT_SOFTWARE_EVENT };

		ev.event_data.software_event_data.pointer =
			(DAT_PVOID)(uintptr_t)(((uint64_t)p->id << 32) | i);
		for (;;) {
			DAT_RETURN r = dat_evd_post_se(p->evd, &ev);

			if (r == DAT_SUCCESS)
				break;
			CHK(DAT_GET_TYPE(r) == DAT_QUEUE_FULL);
			sched_yield();
		}
	}
	return NULL;
}

/* Resizes @evd to one of a few sizes; one that its backlog does not fit
 * is refused with DAT_INVALID_STATE, as the spec says, and one its device
 * cannot give with DAT_INSUFFICIENT_RESOURCES (an mlx5 CQ does not grow:
 * README, DAT support matrix). */
static void resize_some(DAT_EVD_HANDLE evd, unsigned round)
{
	static const DAT_COUNT sizes[] = { 16, 256, SE_QLEN, 32, 128 };
	DAT_RETURN r = dat_evd_resize(evd, sizes[round % 5]);

	CHK(r == DAT_SUCCESS || DAT_GET_TYPE(r) == DAT_INVALID_STATE ||
	    DAT_GET_TYPE(r) == DAT_INSUFFICIENT_RESOURCES);
}

static void software_events(struct ts_node *n, uint32_t per)
{
	struct se_producer p[PRODUCERS];
	uint32_t next[PRODUCERS] = { 0 };
	DAT_EVD_HANDLE evd;
	uint64_t total = (uint64_t)per * PRODUCERS;

	CHK_RET(dat_evd_create(n->ia, SE_QLEN, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd),
		DAT_SUCCESS);
	for (uint32_t i = 0; i < PRODUCERS; i++) {
		p[i] = (struct se_producer){ .evd = evd, .id = i, .count = per };
		ts_thread(&p[i].t, se_produce, &p[i]);
	}
	for (uint64_t got = 0; got < total; got++) {
		DAT_EVENT ev;
		uint64_t v;
		uint32_t id;

		/* Mostly sleep for the next event; every 8th, take what is
		 * there without waiting. */
		if (got % 8 == 0 && dat_evd_dequeue(evd, &ev) == DAT_SUCCESS)
			;
		else
			CHK(wait_ev(evd, 20 * SEC, &ev) == DAT_SOFTWARE_EVENT);
		v = (uint64_t)(uintptr_t)ev.event_data.software_event_data.pointer;
		id = (uint32_t)(v >> 32);
		CHK(id < PRODUCERS);
		CHK((uint32_t)v == next[id]);
		next[id]++;
		if (got % 97 == 0)
			resize_some(evd, (unsigned)(got / 97));
	}
	for (uint32_t i = 0; i < PRODUCERS; i++)
		pthread_join(p[i].t, NULL);
	CHK_RET(dat_evd_free(evd), DAT_SUCCESS);
}

/* ---- device completions ---------------------------------------------------- */

#define WIN 16          /* receives posted ahead */
#define MSG 64

struct sender {
	pthread_t t;
	struct ts_side *s;
	uint32_t count;
};

static void *send_stream(void *arg)
{
	struct sender *x = arg;
	uint32_t out = 0;

	for (uint32_t i = 0; i < x->count; i++) {
		x->s->buf[(i % WIN) * MSG] = (uint8_t)i;
		/* The receiver reposts one receive per message, so no more
		 * than WIN messages are ever unmatched (no RNR wait). */
		while (out >= WIN / 2) {
			ts_dto(x->s->req, 1, NULL);
			out--;
		}
		CHK_RET(ts_post_send(x->s, i, (i % WIN) * MSG, MSG), DAT_SUCCESS);
		out++;
	}
	while (out--)
		ts_dto(x->s->req, 1, NULL);
	return NULL;
}

static void device_completions(const char *ia, uint32_t count)
{
	struct ts_node sn, cn;
	struct ts_side s, c;
	struct sender x;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL q;

	ts_node_open(&sn, ia);
	ts_node_open(&cn, ia);
	ts_side_open(&s, &sn, 64);
	ts_side_open(&c, &cn, 64);
	q = ts_listen(&sn, &psp, 1);
	for (uint32_t i = 0; i < WIN; i++)
		CHK_RET(ts_post_recv(&s, i, i * MSG, MSG), DAT_SUCCESS);
	ts_pair_connect(&s, &c, q);

	x = (struct sender){ .s = &c, .count = count };
	ts_thread(&x.t, send_stream, &x);
	for (uint32_t i = 0; i < count; i++) {
		DAT_EVENT ev;
		uint64_t cookie;

		ts_dto(s.rcv, 0, &ev);
		cookie = ev.event_data.dto_completion_event_data.user_cookie.as_64;
		CHK(cookie == i % WIN);
		CHK(s.buf[cookie * MSG] == (uint8_t)i);
		CHK_RET(ts_post_recv(&s, cookie, cookie * MSG, MSG), DAT_SUCCESS);
		/* Between waits, while the sender keeps completing into it. */
		if (i % 61 == 0)
			resize_some(s.rcv, i / 61);
	}
	pthread_join(x.t, NULL);

	CHK_RET(dat_psp_free(psp), DAT_SUCCESS);
	ts_side_free(&c);
	ts_side_free(&s);
	ts_node_close(&cn);
	ts_node_close(&sn);
}

int ts_evd(int argc, char **argv)
{
	const char *ia = argc > 0 ? argv[0] : "zdapl-shm";
	struct ts_node n;
	struct ts_budget b;

	ts_node_open(&n, ia);
	ts_budget_start(&b, 1500, 2);
	while (ts_budget_more(&b))
		software_events(&n, 2000);
	ts_node_close(&n);

	ts_budget_start(&b, 1500, 2);
	while (ts_budget_more(&b))
		device_completions(ia, 3000);
	return 0;
}
