/*
 * The waiting and loopback helpers of the connection tests, plain DAT and
 * libc only (no Criterion), so that tests/tsan's programs share them with
 * cm_test.h.
 */
#ifndef DAT_WAIT_H
#define DAT_WAIT_H

#include <stdint.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <dat2/udat.h>

#define SEC 1000000u  /* DAT timeouts are in microseconds */

/* The next event of @evd within @us, or 0 (its number otherwise). */
static inline DAT_EVENT_NUMBER wait_ev(DAT_EVD_HANDLE evd, DAT_TIMEOUT us, DAT_EVENT *ev)
{
	DAT_COUNT nmore;
	DAT_EVENT tmp;

	if (!ev)
		ev = &tmp;
	memset(ev, 0, sizeof(*ev));
	if (dat_evd_wait(evd, us, 1, ev, &nmore) != DAT_SUCCESS)
		return (DAT_EVENT_NUMBER)0;
	return ev->event_number;
}

static inline uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline DAT_IA_ADDRESS_PTR loopback(struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return (DAT_IA_ADDRESS_PTR)sa;
}

/* dat_ep_connect of @ep to @port on this host, no private data. */
static inline DAT_RETURN connect_loopback(DAT_EP_HANDLE ep, DAT_CONN_QUAL port, DAT_TIMEOUT us)
{
	struct sockaddr_in sa;

	return dat_ep_connect(ep, loopback(&sa), port, us, 0, NULL, DAT_QOS_BEST_EFFORT,
			      DAT_CONNECT_DEFAULT_FLAG);
}

#endif
