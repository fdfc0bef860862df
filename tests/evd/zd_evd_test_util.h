/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared helpers for the evd unit tests: self-checking events, start gates. */
#ifndef ZD_EVD_TEST_UTIL_H
#define ZD_EVD_TEST_UTIL_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <dat2/udat.h>

/*
 * An event that carries (producer, seq) and fills every other word the ring
 * carries with a pattern derived from them, so a torn or half-written copy is
 * detected. Everything lives in the fields a ring slot holds (event_number,
 * evd_handle, event_data): event_extension_data is not carried by zd_ring
 * and is left zero, which is also what a dequeued event must show.
 */
static inline uint64_t tu_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= UINT64_C(0xff51afd7ed558ccd);
	x ^= x >> 33;
	return x;
}

#define TU_DATA_WORDS (sizeof(DAT_EVENT_DATA) / sizeof(uint64_t))

static inline void tu_make_ev(DAT_EVENT *ev, uint32_t producer, uint64_t seq)
{
	uint64_t key = ((uint64_t)producer << 48) ^ seq;
	uint64_t w[TU_DATA_WORDS];

	memset(ev, 0, sizeof(*ev));
	ev->event_number = DAT_SOFTWARE_EVENT;
	ev->evd_handle = (DAT_EVD_HANDLE)(uintptr_t)(tu_mix(key) | 1);
	w[0] = producer;
	w[1] = seq;
	for (size_t i = 2; i < TU_DATA_WORDS; i++)
		w[i] = tu_mix(key + (uint64_t)i);
	memcpy(&ev->event_data, w, sizeof(w));
}

static inline void tu_ev_words(const DAT_EVENT *ev, uint32_t *producer,
			       uint64_t *seq)
{
	uint64_t w[2];

	memcpy(w, &ev->event_data, sizeof(w));
	*producer = (uint32_t)w[0];
	*seq = w[1];
}

/* True if ev is a well-formed tu_make_ev event (all 120 bytes, extension
 * words zero included); returns its fields. */
static inline bool tu_check_ev(const DAT_EVENT *ev, uint32_t *producer,
			       uint64_t *seq)
{
	DAT_EVENT ref;

	tu_ev_words(ev, producer, seq);
	tu_make_ev(&ref, *producer, *seq);
	return memcmp(&ref, ev, sizeof(ref)) == 0;
}

static inline uint64_t tu_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Back off while retrying: pause a little, then give the CPU away (this box
 * has two cores and the tests run more threads than that). */
static inline void tu_backoff(unsigned *spins)
{
	if (++*spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	} else {
		*spins = 0;
		sched_yield();
	}
}

#endif /* ZD_EVD_TEST_UTIL_H */
