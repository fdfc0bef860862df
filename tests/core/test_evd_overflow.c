/* EVD overflow from a foreign producer (the CM thread, a poller): the
 * event is kept, order per producer holds, and the IA's async EVD gets
 * DAT_ASYNC_ERROR_EVD_OVERFLOW once.  Links the library statically to post
 * as those producers do; the provider registers itself with libdat2 here. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include "core/zd_ia.h"
#include "evd/zd_evd.h"

#include "core/zd_api.h"

static DAT_IA_HANDLE ia_handle;
static DAT_EVD_HANDLE async_handle;

void dat_provider_init(const DAT_PROVIDER_INFO *info, const char *instance_data);
DAT_RETURN dats_get_ia_handle(DAT_IA_HANDLE handle, DAT_IA_HANDLE *ia_handle_p);

/* libdat2's dat_ia_close reports an error for a provider that did not come
 * from a dat.conf line, after closing it; close ours directly. */
static void close_ia(void)
{
	DAT_IA_HANDLE raw;

	cr_assert_eq(dats_get_ia_handle(ia_handle, &raw), DAT_SUCCESS);
	cr_assert_eq(zd_ia_close(raw, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}


static void open_static_provider(void)
{
	DAT_PROVIDER_INFO info;

	memset(&info, 0, sizeof(info));
	strcpy(info.ia_name, "zdapl-static-shm");
	info.dapl_version_major = DAT_VERSION_MAJOR;
	info.dapl_version_minor = DAT_VERSION_MINOR;
	info.is_thread_safe = DAT_FALSE;
	dat_provider_init(&info, "shm lo");
	async_handle = DAT_HANDLE_NULL;
	cr_assert_eq(dat_ia_open("zdapl-static-shm", 4, &async_handle, &ia_handle), DAT_SUCCESS);
}

static DAT_EVENT conn_event(struct zd_evd *evd, uint64_t n)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	ev.evd_handle = evd;
	ev.event_data.software_event_data.pointer = (DAT_PVOID)(uintptr_t)n;
	return ev;
}

TestSuite(evd_overflow, .init = open_static_provider);

Test(evd_overflow, foreign_events_spill_in_order_and_report_once)
{
	DAT_EVD_HANDLE h;
	struct zd_evd *evd;
	DAT_EVENT ev;
	DAT_COUNT nmore;
	int overflow_events = 0;
	const uint64_t n = 100;

	cr_assert_eq(dat_evd_create(ia_handle, 4, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &h),
		     DAT_SUCCESS);
	evd = zd_obj_get(h, ZD_OBJ_EVD);
	cr_assert_not_null(evd);
	for (uint64_t i = 1; i <= n; i++) {
		ev = conn_event(evd, i);
		cr_assert_eq(zd_evd_post(evd, &ev, 1), DAT_SUCCESS);
		if (i == n / 2) {  /* the consumer takes a few in between */
			for (int k = 0; k < 3; k++)
				cr_assert_eq(dat_evd_dequeue(h, &ev), DAT_SUCCESS);
		}
	}
	/* Events 1..3 were taken; the rest arrive in order, none lost. */
	for (uint64_t i = 4; i <= n; i++) {
		cr_assert_eq(dat_evd_wait(h, 0, 1, &ev, &nmore), DAT_SUCCESS, "event %lu", (unsigned long)i);
		cr_assert_eq((uint64_t)(uintptr_t)ev.event_data.software_event_data.pointer, i);
	}
	cr_assert_eq(DAT_GET_TYPE(dat_evd_dequeue(h, &ev)), DAT_QUEUE_EMPTY);
	while (dat_evd_dequeue(async_handle, &ev) == DAT_SUCCESS) {
		cr_assert_eq(ev.event_number, DAT_ASYNC_ERROR_EVD_OVERFLOW);
		cr_assert_eq(ev.event_data.asynch_error_event_data.dat_handle, h);
		overflow_events++;
	}
	cr_assert_eq(overflow_events, 1, "overflow is reported, once");
	/* After draining, the ring is used again. */
	ev = conn_event(evd, 999);
	cr_assert_eq(zd_evd_post(evd, &ev, 1), DAT_SUCCESS);
	cr_assert_eq(dat_evd_dequeue(h, &ev), DAT_SUCCESS);
	close_ia();
}

struct producer {
	struct zd_evd *evd;
	int id;
	int count;
};

static void *produce(void *arg)
{
	struct producer *p = arg;

	for (int i = 0; i < p->count; i++) {
		DAT_EVENT ev = conn_event(p->evd, ((uint64_t)p->id << 32) | (uint64_t)i);
		cr_assert_eq(zd_evd_post(p->evd, &ev, 1), DAT_SUCCESS);
	}
	return NULL;
}

Test(evd_overflow, racing_producers_lose_nothing, .timeout = 60)
{
	enum { NPROD = 3, COUNT = 20000 };
	DAT_EVD_HANDLE h;
	struct producer prod[NPROD];
	pthread_t t[NPROD];
	int next[NPROD] = { 0 };
	int got = 0;
	DAT_EVENT ev;

	cr_assert_eq(dat_evd_create(ia_handle, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &h),
		     DAT_SUCCESS);
	for (int i = 0; i < NPROD; i++) {
		prod[i] = (struct producer){ zd_obj_get(h, ZD_OBJ_EVD), i, COUNT };
		pthread_create(&t[i], NULL, produce, &prod[i]);
	}
	while (got < NPROD * COUNT) {
		if (dat_evd_dequeue(h, &ev) != DAT_SUCCESS) {
			sched_yield();
			continue;
		}
		uint64_t v = (uint64_t)(uintptr_t)ev.event_data.software_event_data.pointer;
		int id = (int)(v >> 32), seq = (int)(v & 0xffffffffu);
		cr_assert(id >= 0 && id < NPROD);
		cr_assert_eq(seq, next[id], "producer %d: got %d, expected %d", id, seq, next[id]);
		next[id]++;
		got++;
	}
	for (int i = 0; i < NPROD; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(DAT_GET_TYPE(dat_evd_dequeue(h, &ev)), DAT_QUEUE_EMPTY);
	close_ia();
}
