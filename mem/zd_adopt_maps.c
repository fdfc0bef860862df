/* SPDX-License-Identifier: BSD-3-Clause */
/* /proc/self/maps for adoption (zd_adopt_maps.h). */
#include "zd_adopt_maps.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* One line of /proc/self/maps. */
struct maps_ent {
	uint64_t lo, hi, off;
	char perms[5];
	unsigned dev_major, dev_minor;
	uint64_t ino;
	const char *name;      /* "" for anonymous; points into the buffer */
};

/* The whole file, NUL-terminated, or NULL. */
static char *maps_read(void)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (!buf || fd < 0)
		goto fail;
	for (;;) {
		ssize_t n;

		if (cap - len < 4096) {
			char *b = realloc(buf, cap * 2);

			if (!b)
				goto fail;
			buf = b;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0)
			goto fail;
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	return buf;
fail:
	if (fd >= 0)
		close(fd);
	free(buf);
	return NULL;
}

/* Parses the line at *cursor (and moves past it); false at the end. */
static bool maps_next(char **cursor, struct maps_ent *e)
{
	char *line = *cursor, *nl, *name;
	int used = 0;

	if (!*line)
		return false;
	nl = strchr(line, '\n');
	if (nl) {
		*nl = '\0';
		*cursor = nl + 1;
	} else {
		*cursor = line + strlen(line);
	}
	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %" SCNu64 "%n", &e->lo,
		   &e->hi, e->perms, &e->off, &e->dev_major, &e->dev_minor, &e->ino, &used) < 7)
		return maps_next(cursor, e);
	name = line + used;
	while (*name == ' ')
		name++;
	e->name = name;
	return true;
}

static bool anon_private_rw(const struct maps_ent *e)
{
	/* Named anonymous memory ("[anon:...]", prctl) is anonymous too;
	 * the main stack, vdso and the like are not ours to move. */
	return strcmp(e->perms, "rw-p") == 0 && e->ino == 0 && e->dev_major == 0 &&
	       e->dev_minor == 0 &&
	       (e->name[0] == '\0' || strcmp(e->name, "[heap]") == 0 ||
		strncmp(e->name, "[anon:", 6) == 0);
}

const char *zd_adopt_maps_check_private(uint64_t lo, uint64_t hi)
{
	char *buf = maps_read(), *cur = buf;
	const char *why = "not private anonymous read-write memory";
	struct maps_ent e;
	uint64_t at = lo;

	if (!buf)
		return "cannot read /proc/self/maps";
	while (at < hi && maps_next(&cur, &e)) {
		if (e.hi <= at)
			continue;
		if (e.lo > at) {
			why = "not mapped";
			break;
		}
		if (!anon_private_rw(&e)) {
			if (strcmp(e.name, "[stack]") == 0)
				why = "the main thread's stack";
			else if (e.perms[3] == 's')
				why = "memory shared already (a file or shared mapping)";
			else if (e.ino)
				why = "a file mapping (hugetlbfs, a file)";
			break;
		}
		at = e.hi;
	}
	free(buf);
	return at >= hi ? NULL : why;
}

void zd_adopt_maps_each_file_piece(uint64_t lo, uint64_t hi, dev_t dev, ino_t ino,
				   void (*fn)(void *arg, uintptr_t lo, uintptr_t hi), void *arg)
{
	char *buf = maps_read(), *cur = buf;
	uint64_t (*pieces)[2] = NULL;
	size_t n = 0, cap = 0;
	struct maps_ent e;

	if (!buf)
		return;
	while (maps_next(&cur, &e)) {
		if (e.hi <= lo || e.lo >= hi)
			continue;
		if (strcmp(e.perms, "rw-s") != 0 || e.ino != (uint64_t)ino ||
		    e.dev_major != major(dev) || e.dev_minor != minor(dev) || e.off != e.lo)
			continue;
		if (n == cap) {
			void *p = realloc(pieces, (cap = cap ? 2 * cap : 8) * sizeof(*pieces));

			if (!p)
				break;
			pieces = p;
		}
		pieces[n][0] = e.lo > lo ? e.lo : lo;
		pieces[n][1] = e.hi < hi ? e.hi : hi;
		n++;
	}
	free(buf);
	for (size_t i = 0; i < n; i++)
		fn(arg, (uintptr_t)pieces[i][0], (uintptr_t)pieces[i][1]);
	free(pieces);
}
