/* The DAT EVD calls through libdat2: flags, post_se/dequeue/wait semantics,
 * thresholds and timeouts, overflow, resize, enable/disable, unwaitable. */
#include <string.h>
#include <criterion/criterion.h>
#include <pthread.h>
#include <time.h>

#include "zd_test_dat.h"

TestSuite(evd_api, .init = zd_test_use_conf);

static DAT_IA_HANDLE ia;
static DAT_EVD_HANDLE async;

static void open_ia(void)
{
	cr_assert_eq(zd_test_open(zd_test_ia("zdapl-shm"), &ia, &async), DAT_SUCCESS);
}

static DAT_EVENT se(uint64_t n)
{
	DAT_EVENT ev = { 0 };

	ev.event_number = DAT_SOFTWARE_EVENT;
	ev.event_data.software_event_data.pointer = (DAT_PVOID)(uintptr_t)n;
	return ev;
}

static uint64_t se_val(const DAT_EVENT *ev)
{
	return (uint64_t)(uintptr_t)ev->event_data.software_event_data.pointer;
}

static DAT_EVD_HANDLE sw_evd(DAT_COUNT qlen)
{
	DAT_EVD_HANDLE evd;

	cr_assert_eq(dat_evd_create(ia, qlen, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &evd),
		     DAT_SUCCESS);
	return evd;
}

Test(evd_api, every_flag_combination)
{
	static const DAT_EVD_FLAGS bits[] = {
		DAT_EVD_SOFTWARE_FLAG, DAT_EVD_CR_FLAG, DAT_EVD_DTO_FLAG,
		DAT_EVD_CONNECTION_FLAG, DAT_EVD_RMR_BIND_FLAG,
	};

	open_ia();
	for (unsigned m = 1; m < 32; m++) {
		DAT_EVD_FLAGS f = 0;
		DAT_EVD_HANDLE evd;
		DAT_EVD_PARAM p;

		for (unsigned b = 0; b < 5; b++)
			if (m & (1u << b))
				f |= bits[b];
		cr_assert_eq(dat_evd_create(ia, 4, DAT_HANDLE_NULL, f, &evd), DAT_SUCCESS, "flags 0x%x", f);
		cr_assert_eq(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p), DAT_SUCCESS);
		cr_assert_eq(p.evd_flags, f);
		cr_assert_geq(p.evd_qlen, 4);
		cr_assert_eq(dat_evd_free(evd), DAT_SUCCESS);
	}
	/* The IA already has its async EVD; unknown bits and 0 are invalid. */
	cr_assert_eq(DAT_GET_TYPE(dat_evd_create(ia, 4, DAT_HANDLE_NULL, DAT_EVD_ASYNC_FLAG,
						 &(DAT_EVD_HANDLE){ 0 })), DAT_INVALID_PARAMETER);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_create(ia, 4, DAT_HANDLE_NULL, 0,
						 &(DAT_EVD_HANDLE){ 0 })), DAT_INVALID_PARAMETER);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_create(ia, 4, DAT_HANDLE_NULL, 0x4000,
						 &(DAT_EVD_HANDLE){ 0 })), DAT_INVALID_PARAMETER);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_create(ia, 0, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG,
						 &(DAT_EVD_HANDLE){ 0 })), DAT_INVALID_PARAMETER);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_create(ia, -5, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG,
						 &(DAT_EVD_HANDLE){ 0 })), DAT_INVALID_PARAMETER);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_create(ia, 1 << 30, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG,
						 &(DAT_EVD_HANDLE){ 0 })), DAT_INVALID_PARAMETER);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
}

Test(evd_api, post_se_dequeue_fifo_and_empty)
{
	DAT_EVD_HANDLE evd;
	DAT_EVENT ev, in;

	open_ia();
	evd = sw_evd(8);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_dequeue(evd, &ev)), DAT_QUEUE_EMPTY);
	for (uint64_t i = 1; i <= 5; i++) {
		in = se(i);
		cr_assert_eq(dat_evd_post_se(evd, &in), DAT_SUCCESS);
	}
	for (uint64_t i = 1; i <= 5; i++) {
		cr_assert_eq(dat_evd_dequeue(evd, &ev), DAT_SUCCESS);
		cr_assert_eq(ev.event_number, DAT_SOFTWARE_EVENT);
		cr_assert_eq(ev.evd_handle, evd, "the event names its EVD");
		cr_assert_eq(se_val(&ev), i);
	}
	cr_assert_eq(DAT_GET_TYPE(dat_evd_dequeue(evd, &ev)), DAT_QUEUE_EMPTY);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_dequeue(evd, NULL)), DAT_INVALID_PARAMETER);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

Test(evd_api, post_se_rules)
{
	DAT_EVD_HANDLE evd, dto;
	DAT_EVENT in = se(1);
	DAT_EVD_PARAM p;
	int posted = 0;

	open_ia();
	evd = sw_evd(4);
	cr_assert_eq(dat_evd_create(ia, 4, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &dto), DAT_SUCCESS);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_post_se(dto, &in)), DAT_INVALID_PARAMETER,
		     "only a SOFTWARE EVD takes software events");
	cr_assert_eq(DAT_GET_TYPE(dat_evd_post_se(evd, NULL)), DAT_INVALID_PARAMETER);
	in.event_number = DAT_CONNECTION_EVENT_ESTABLISHED;
	cr_assert_eq(DAT_GET_TYPE(dat_evd_post_se(evd, &in)), DAT_INVALID_PARAMETER);
	in = se(1);
	/* Fill to the queue's real capacity, then QUEUE_FULL, nothing lost. */
	cr_assert_eq(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p), DAT_SUCCESS);
	for (;;) {
		DAT_RETURN r = dat_evd_post_se(evd, &in);
		if (r != DAT_SUCCESS) {
			cr_assert_eq(DAT_GET_TYPE(r), DAT_QUEUE_FULL);
			break;
		}
		cr_assert_lt(++posted, 1 << 20);
	}
	cr_assert_geq(posted, p.evd_qlen);
	for (int i = 0; i < posted; i++)
		cr_assert_eq(dat_evd_dequeue(evd, &in), DAT_SUCCESS);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_dequeue(evd, &in)), DAT_QUEUE_EMPTY);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

Test(evd_api, wait_timeout_threshold_and_nmore)
{
	DAT_EVD_HANDLE evd;
	DAT_EVENT ev, in;
	DAT_COUNT nmore = -1;
	struct timespec t0, t1;
	DAT_RETURN r;

	open_ia();
	evd = sw_evd(8);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = dat_evd_wait(evd, 20000, 1, &ev, &nmore);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	cr_assert_eq(DAT_GET_TYPE(r), DAT_TIMEOUT_EXPIRED, "0x%x", r);
	cr_assert_eq(nmore, 0);
	cr_assert_geq((t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000, 20000);

	/* Two events, threshold 3: times out, reporting the two. */
	for (uint64_t i = 1; i <= 2; i++) {
		in = se(i);
		cr_assert_eq(dat_evd_post_se(evd, &in), DAT_SUCCESS);
	}
	r = dat_evd_wait(evd, 1000, 3, &ev, &nmore);
	cr_assert_eq(DAT_GET_TYPE(r), DAT_TIMEOUT_EXPIRED);
	cr_assert_eq(nmore, 2);
	/* Threshold met: first event, nmore counts the rest. */
	in = se(3);
	cr_assert_eq(dat_evd_post_se(evd, &in), DAT_SUCCESS);
	cr_assert_eq(dat_evd_wait(evd, DAT_TIMEOUT_INFINITE, 3, &ev, &nmore), DAT_SUCCESS);
	cr_assert_eq(se_val(&ev), 1);
	cr_assert_eq(nmore, 2);
	/* Zero timeout polls. */
	cr_assert_eq(dat_evd_wait(evd, 0, 1, &ev, &nmore), DAT_SUCCESS);
	cr_assert_eq(se_val(&ev), 2);

	cr_assert_eq(DAT_GET_TYPE(dat_evd_wait(evd, 0, 0, &ev, &nmore)), DAT_INVALID_PARAMETER);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_wait(evd, 0, 9, &ev, &nmore)), DAT_INVALID_PARAMETER);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_wait(evd, 0, 1, NULL, &nmore)), DAT_INVALID_PARAMETER);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_wait(evd, 0, 1, &ev, NULL)), DAT_INVALID_PARAMETER);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

struct poster {
	DAT_EVD_HANDLE evd;
	int count;
	int delay_us;
};

static void *post_later(void *arg)
{
	struct poster *p = arg;

	for (int i = 1; i <= p->count; i++) {
		DAT_EVENT in = se((uint64_t)i);
		if (p->delay_us)
			usleep((useconds_t)p->delay_us);
		while (dat_evd_post_se(p->evd, &in) != DAT_SUCCESS)
			sched_yield();
	}
	return NULL;
}

Test(evd_api, wait_is_woken_by_another_thread, .timeout = 60)
{
	struct poster p;
	pthread_t t;
	DAT_EVENT ev;
	DAT_COUNT nmore;

	open_ia();
	p.evd = sw_evd(64);
	p.count = 2000;
	p.delay_us = 0;
	pthread_create(&t, NULL, post_later, &p);
	for (int i = 1; i <= p.count; i++) {
		cr_assert_eq(dat_evd_wait(p.evd, DAT_TIMEOUT_INFINITE, 1, &ev, &nmore), DAT_SUCCESS);
		cr_assert_eq(se_val(&ev), (uint64_t)i, "lost or reordered wake-up");
	}
	pthread_join(t, NULL);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

static void *set_unwaitable_later(void *arg)
{
	usleep(50000);
	dat_evd_set_unwaitable(arg);
	return NULL;
}

Test(evd_api, unwaitable_and_disabled, .timeout = 30)
{
	DAT_EVD_HANDLE evd;
	DAT_EVENT ev, in = se(7);
	DAT_COUNT nmore;
	DAT_EVD_PARAM p;
	pthread_t t;
	DAT_RETURN r;

	open_ia();
	evd = sw_evd(8);
	/* A blocked waiter returns DAT_INVALID_STATE when the EVD turns unwaitable. */
	pthread_create(&t, NULL, set_unwaitable_later, evd);
	r = dat_evd_wait(evd, DAT_TIMEOUT_INFINITE, 1, &ev, &nmore);
	pthread_join(t, NULL);
	cr_assert_eq(DAT_GET_TYPE(r), DAT_INVALID_STATE, "0x%x", r);
	cr_assert_eq(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p), DAT_SUCCESS);
	cr_assert(p.evd_state & DAT_EVD_STATE_UNWAITABLE);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_wait(evd, 0, 1, &ev, &nmore)), DAT_INVALID_STATE);
	/* Events still queue and dequeue while unwaitable. */
	cr_assert_eq(dat_evd_post_se(evd, &in), DAT_SUCCESS);
	cr_assert_eq(dat_evd_dequeue(evd, &ev), DAT_SUCCESS);
	cr_assert_eq(dat_evd_clear_unwaitable(evd), DAT_SUCCESS);
	cr_assert_eq(dat_evd_post_se(evd, &in), DAT_SUCCESS);
	cr_assert_eq(dat_evd_wait(evd, 0, 1, &ev, &nmore), DAT_SUCCESS);

	cr_assert_eq(dat_evd_disable(evd), DAT_SUCCESS);
	cr_assert_eq(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p), DAT_SUCCESS);
	cr_assert(p.evd_state & DAT_EVD_STATE_DISABLED);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_wait(evd, 0, 1, &ev, &nmore)), DAT_INVALID_STATE);
	cr_assert_eq(dat_evd_post_se(evd, &in), DAT_SUCCESS);
	cr_assert_eq(dat_evd_dequeue(evd, &ev), DAT_SUCCESS);
	cr_assert_eq(dat_evd_enable(evd), DAT_SUCCESS);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

Test(evd_api, resize_keeps_order_and_refuses_too_small)
{
	DAT_EVD_HANDLE evd;
	DAT_EVENT ev, in;
	DAT_EVD_PARAM p;

	open_ia();
	evd = sw_evd(8);
	for (uint64_t i = 1; i <= 6; i++) {
		in = se(i);
		cr_assert_eq(dat_evd_post_se(evd, &in), DAT_SUCCESS);
	}
	cr_assert_eq(DAT_GET_TYPE(dat_evd_resize(evd, 4)), DAT_INVALID_STATE);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_resize(evd, 0)), DAT_INVALID_PARAMETER);
	cr_assert_eq(dat_evd_resize(evd, 64), DAT_SUCCESS);
	cr_assert_eq(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p), DAT_SUCCESS);
	cr_assert_eq(p.evd_qlen, 64);
	for (uint64_t i = 7; i <= 40; i++) {
		in = se(i);
		cr_assert_eq(dat_evd_post_se(evd, &in), DAT_SUCCESS, "event %lu", (unsigned long)i);
	}
	/* Resize again while the old ring still drains. */
	cr_assert_eq(dat_evd_resize(evd, 128), DAT_SUCCESS);
	for (uint64_t i = 41; i <= 50; i++) {
		in = se(i);
		cr_assert_eq(dat_evd_post_se(evd, &in), DAT_SUCCESS);
	}
	for (uint64_t i = 1; i <= 50; i++) {
		cr_assert_eq(dat_evd_dequeue(evd, &ev), DAT_SUCCESS, "event %lu", (unsigned long)i);
		cr_assert_eq(se_val(&ev), i);
	}
	cr_assert_eq(DAT_GET_TYPE(dat_evd_dequeue(evd, &ev)), DAT_QUEUE_EMPTY);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

/* A DTO EVD (the device's CQ behind it): shrinking and a little growth
 * always work; a device whose CQ cannot follow (mlx5: a directly driven
 * CQ keeps its size) refuses more, and the EVD stays as it was. */
Test(evd_api, resize_dto_evd)
{
	DAT_EVD_HANDLE evd;
	DAT_EVD_PARAM p;
	DAT_EVENT ev, in;
	DAT_RETURN ret;
	bool fixed_cq = strcmp(zd_test_ia("zdapl-shm"), "zdapl-mlx5sim") == 0;

	open_ia();
	cr_assert_eq(dat_evd_create(ia, 64, DAT_HANDLE_NULL,
				    DAT_EVD_DTO_FLAG | DAT_EVD_SOFTWARE_FLAG, &evd), DAT_SUCCESS);
	in = se(1);
	cr_assert_eq(dat_evd_post_se(evd, &in), DAT_SUCCESS);
	cr_assert_eq(dat_evd_resize(evd, 16), DAT_SUCCESS);
	cr_assert_eq(dat_evd_resize(evd, 70), DAT_SUCCESS);
	ret = dat_evd_resize(evd, 64 * 1024);
	cr_assert_eq(dat_evd_query(evd, DAT_EVD_FIELD_ALL, &p), DAT_SUCCESS);
	if (fixed_cq) {
		cr_assert_eq(DAT_GET_TYPE(ret), DAT_INSUFFICIENT_RESOURCES);
		cr_assert_eq(p.evd_qlen, 70);
	} else {
		cr_assert_eq(ret, DAT_SUCCESS);
		cr_assert_eq(p.evd_qlen, 64 * 1024);
	}
	/* the event survived every resize, failed or not */
	cr_assert_eq(dat_evd_dequeue(evd, &ev), DAT_SUCCESS);
	cr_assert_eq(se_val(&ev), 1);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_dequeue(evd, &ev)), DAT_QUEUE_EMPTY);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

Test(evd_api, in_use_evd_is_not_freed)
{
	DAT_EVD_HANDLE dto;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep;
	DAT_RETURN r;

	open_ia();
	cr_assert_eq(dat_pz_create(ia, &pz), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &dto), DAT_SUCCESS);
	cr_assert_eq(dat_ep_create(ia, pz, dto, dto, DAT_HANDLE_NULL, NULL, &ep), DAT_SUCCESS);
	r = dat_evd_free(dto);
	cr_assert_eq(DAT_GET_TYPE(r), DAT_INVALID_STATE);
	cr_assert_eq(DAT_GET_SUBTYPE(r), DAT_INVALID_STATE_EVD_IN_USE);
	r = dat_pz_free(pz);
	cr_assert_eq(DAT_GET_TYPE(r), DAT_INVALID_STATE);
	cr_assert_eq(dat_ep_free(ep), DAT_SUCCESS);
	cr_assert_eq(dat_evd_free(dto), DAT_SUCCESS);
	cr_assert_eq(dat_pz_free(pz), DAT_SUCCESS);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
}
