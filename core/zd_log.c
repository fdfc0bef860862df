/* Error messages (see zd_log.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "core/zd_log.h"

static __thread unsigned zd_log_said_n;

unsigned zd_log_said(void)
{
	return zd_log_said_n;
}

void zd_log_error(const char *fmt, ...)
{
	va_list ap;
	char line[512];

	zd_log_said_n++;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "zdapl: %s\n", line);
}

/* Every site's allowance is read and written under this lock: failures are
 * rare next to everything else, and never on a data path. */
static pthread_mutex_t zd_log_lock = PTHREAD_MUTEX_INITIALIZER;

void zd_log_limited(struct zd_log_limit *lim, const char *fmt, ...)
{
	struct timespec ts;
	uint64_t now_ms;
	uint32_t left_out;
	va_list ap;
	char line[512];

	zd_log_said_n++;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	pthread_mutex_lock(&zd_log_lock);
	if (now_ms - lim->window_ms >= 1000) {
		lim->window_ms = now_ms;
		lim->printed = 0;
	}
	if (lim->printed == ZD_LOG_BURST) {
		lim->suppressed++;
		pthread_mutex_unlock(&zd_log_lock);
		return;
	}
	lim->printed++;
	left_out = lim->suppressed;
	lim->suppressed = 0;
	pthread_mutex_unlock(&zd_log_lock);

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (left_out)
		fprintf(stderr, "zdapl: %s (and %u more like it before)\n", line, left_out);
	else
		fprintf(stderr, "zdapl: %s\n", line);
}
