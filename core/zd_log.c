/* Error messages (see zd_log.h). */
#include <stdarg.h>
#include <stdio.h>

#include "core/zd_log.h"

void zd_log_error(const char *fmt, ...)
{
	va_list ap;
	char line[512];

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "zdapl: %s\n", line);
}
