/* SPDX-License-Identifier: BSD-3-Clause */
/* dat.conf parsing and zdapl's block in it (see zd_datconf.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zd_datconf.h"

static int fail(char *err, size_t errlen, size_t lineno, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(err, errlen, "line %zu: ", lineno);

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < errlen)
		vsnprintf(err + n, errlen - n, fmt, ap);
	va_end(ap);
	return -1;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';   /* isblank() in the C locale, as libdat2 */
}

/* One quoted token starting at s[0] == '"' within [s, end): its value with
 * backslash escapes undone, *next past the closing quote; NULL when the
 * quote is not closed on this line. */
static char *quoted_token(const char *s, const char *end, const char **next)
{
	char *v = malloc(end - s), *o = v;
	const char *p = s + 1;
	bool escaped = false;

	if (!v)
		return NULL;
	for (; p < end; p++) {
		if (!escaped && *p == '\\') {
			escaped = true;
			continue;
		}
		if (!escaped && *p == '"') {
			*o = '\0';
			*next = p + 1;
			return v;
		}
		*o++ = *p;
		escaped = false;
	}
	free(v);
	return NULL;
}

/* Splits [s, end) (no '\n') into l->field; sets l->kind. */
static int parse_line(struct zd_dc_line *l, const char *s, const char *end,
		      size_t lineno, char *err, size_t errlen)
{
	const char *p = s;
	size_t n = 0;
	bool comment = false;
	char *tok[ZD_DC_FIELDS + 1];

	if (memchr(s, '\0', end - s))
		return fail(err, errlen, lineno, "a NUL byte");
	for (;;) {
		const char *t;

		while (p < end && is_blank(*p))
			p++;
		if (p == end)
			break;
		if (*p == '#') {
			comment = true;
			break;
		}
		if (*p == '"') {
			tok[n] = quoted_token(p, end, &p);
			if (!tok[n]) {
				for (size_t i = 0; i < n; i++)
					free(tok[i]);
				return fail(err, errlen, lineno, "a quote that is not closed");
			}
		} else {
			for (t = p; p < end && !is_blank(*p); p++)
				;
			tok[n] = strndup(t, p - t);
		}
		if (!tok[n]) {
			for (size_t i = 0; i < n; i++)
				free(tok[i]);
			return fail(err, errlen, lineno, "out of memory");
		}
		if (++n > ZD_DC_FIELDS) {
			for (size_t i = 0; i < n; i++)
				free(tok[i]);
			return fail(err, errlen, lineno, "more than %d fields, a dat.conf entry has %d",
				    ZD_DC_FIELDS, ZD_DC_FIELDS);
		}
	}
	if (n == ZD_DC_FIELDS) {
		l->kind = ZD_DC_ENTRY;
		memcpy(l->field, tok, sizeof(l->field));
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		free(tok[i]);
	if (n > 0)
		return fail(err, errlen, lineno, "%zu fields, a dat.conf entry has %d",
			    n, ZD_DC_FIELDS);
	l->kind = comment ? ZD_DC_COMMENT : ZD_DC_BLANK;
	if (comment) {
		size_t len = end - s;

		if (len == strlen(ZD_DC_BEGIN_TEXT) && !memcmp(s, ZD_DC_BEGIN_TEXT, len))
			l->kind = ZD_DC_BEGIN;
		else if (len == strlen(ZD_DC_BEGIN_NL_TEXT) && !memcmp(s, ZD_DC_BEGIN_NL_TEXT, len))
			l->kind = ZD_DC_BEGIN;
		else if (len == strlen(ZD_DC_END_TEXT) && !memcmp(s, ZD_DC_END_TEXT, len))
			l->kind = ZD_DC_END;
		else if (len >= 8 && !memcmp(s, "# zdapl:", 8))
			return fail(err, errlen, lineno, "a damaged zdapl marker line");
	}
	return 0;
}

/* One block at most, opened before closed, holding only zdapl entries. */
static int check_block(struct zd_datconf *dc, char *err, size_t errlen)
{
	for (size_t i = 0; i < dc->nlines; i++) {
		const struct zd_dc_line *l = &dc->line[i];

		if (l->kind == ZD_DC_BEGIN) {
			if (dc->begin >= 0)
				return fail(err, errlen, zd_dc_lineno(i), "a second zdapl block");
			dc->begin = i;
			dc->begin_added_newline =
				l->len >= strlen(ZD_DC_BEGIN_NL_TEXT) &&
				!memcmp(dc->text + l->off, ZD_DC_BEGIN_NL_TEXT,
					strlen(ZD_DC_BEGIN_NL_TEXT));
		} else if (l->kind == ZD_DC_END) {
			if (dc->begin < 0 || dc->end >= 0)
				return fail(err, errlen, zd_dc_lineno(i),
					    "a zdapl end marker without its begin");
			dc->end = i;
		} else if (dc->begin >= 0 && dc->end < 0) {
			if (l->kind != ZD_DC_ENTRY || !zd_dc_is_zdapl(l))
				return fail(err, errlen, zd_dc_lineno(i),
					    "a line that is not a zdapl entry inside zdapl's block");
		}
	}
	if (dc->begin >= 0 && dc->end < 0)
		return fail(err, errlen, zd_dc_lineno(dc->begin),
			    "zdapl's block is not closed (no \"%s\" line)", ZD_DC_END_TEXT);
	return 0;
}

int zd_datconf_parse(struct zd_datconf *dc, char *text, size_t len, bool lenient,
		     char *err, size_t errlen)
{
	size_t cap = 0;

	memset(dc, 0, sizeof(*dc));
	dc->text = text;
	dc->len = len;
	dc->begin = dc->end = -1;
	for (size_t off = 0; off < len;) {
		const char *nl = memchr(text + off, '\n', len - off);
		size_t end = nl ? (size_t)(nl - text) : len;
		struct zd_dc_line *l;

		if (dc->nlines == cap) {
			size_t ncap = cap ? 2 * cap : 64;
			struct zd_dc_line *nline = realloc(dc->line, ncap * sizeof(*nline));

			if (!nline) {
				fail(err, errlen, dc->nlines + 1, "out of memory");
				return -1;
			}
			dc->line = nline;
			cap = ncap;
		}
		l = &dc->line[dc->nlines];
		memset(l, 0, sizeof(*l));
		l->off = off;
		l->len = end - off + (nl != NULL);
		if (parse_line(l, text + off, text + end, dc->nlines + 1, err, errlen) < 0) {
			if (!lenient)
				return -1;
			l->kind = ZD_DC_SKIPPED;
		}
		dc->nlines++;
		off += l->len;
	}
	/* Leniently read, a damaged block still shows where it was. */
	if (check_block(dc, err, errlen) < 0 && !lenient)
		return -1;
	return 0;
}

void zd_datconf_free(struct zd_datconf *dc)
{
	for (size_t i = 0; i < dc->nlines; i++)
		if (dc->line[i].kind == ZD_DC_ENTRY)
			for (int f = 0; f < ZD_DC_FIELDS; f++)
				free(dc->line[i].field[f]);
	free(dc->line);
	free(dc->text);
	memset(dc, 0, sizeof(*dc));
	dc->begin = dc->end = -1;
}

int zd_datconf_load(struct zd_datconf *dc, const char *path, bool lenient,
		    char *err, size_t errlen)
{
	char *text = NULL;
	size_t len = 0, cap = 0;
	ssize_t r;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	do {
		if (len == cap) {
			char *nt = realloc(text, cap = cap ? 2 * cap : 16384);

			if (!nt) {
				r = -1;
				break;
			}
			text = nt;
		}
		r = read(fd, text + len, cap - len);
		if (r > 0)
			len += r;
	} while (r > 0 || (r < 0 && errno == EINTR));
	close(fd);
	if (r < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno ? errno : ENOMEM));
		free(text);
		return -1;
	}
	if (zd_datconf_parse(dc, text, len, lenient, err, errlen) < 0) {
		char why[256];

		snprintf(why, sizeof(why), "%s", err);
		snprintf(err, errlen, "%s: %s", path, why);
		zd_datconf_free(dc);
		return -1;
	}
	return 0;
}

bool zd_dc_is_zdapl(const struct zd_dc_line *l)
{
	const char *lib, *base;

	if (l->kind != ZD_DC_ENTRY)
		return false;
	lib = l->field[ZD_DC_LIB];
	base = strrchr(lib, '/');
	base = base ? base + 1 : lib;
	return strncmp(base, "libzdapl", 8) == 0;
}

bool zd_dc_in_block(const struct zd_datconf *dc, size_t i)
{
	return dc->begin >= 0 && (ssize_t)i > dc->begin && (ssize_t)i < dc->end;
}

/* An append-only buffer; on ENOMEM it frees itself and stays NULL. */
struct buf {
	char *p;
	size_t len, cap;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (!b->p && b->cap)
		return;         /* failed before */
	if (b->len + n > b->cap) {
		size_t cap = 2 * (b->len + n) + 256;
		char *p = realloc(b->p, cap);

		if (!p) {
			free(b->p);
			b->p = NULL;
			b->cap = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void put_str(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

static void put_block(struct buf *b, bool added_newline, const char *const *lines, size_t n)
{
	put_str(b, added_newline ? ZD_DC_BEGIN_NL_TEXT "\n" : ZD_DC_BEGIN_TEXT "\n");
	for (size_t i = 0; i < n; i++)
		put_str(b, lines[i]);
	put_str(b, ZD_DC_END_TEXT "\n");
}

char *zd_datconf_with_block(const struct zd_datconf *dc, const char *const *lines,
			    size_t n, size_t *outlen)
{
	struct buf b = { 0 };

	if (dc->begin < 0) {
		bool add_nl = dc->len > 0 && dc->text[dc->len - 1] != '\n';

		put(&b, dc->text, dc->len);
		if (n > 0) {
			if (add_nl)
				put_str(&b, "\n");
			put_block(&b, add_nl, lines, n);
		}
	} else {
		const struct zd_dc_line *first = &dc->line[dc->begin];
		const struct zd_dc_line *last = &dc->line[dc->end];
		size_t head = first->off, tail = last->off + last->len;

		/* The '\n' we once added before the block goes with it, if
		 * nothing was appended after the block since. */
		if (n == 0 && dc->begin_added_newline && tail == dc->len && head > 0)
			head--;
		put(&b, dc->text, head);
		if (n > 0)
			put_block(&b, dc->begin_added_newline, lines, n);
		put(&b, dc->text + tail, dc->len - tail);
	}
	if (!b.p && b.cap)
		return NULL;
	if (!b.p)               /* an empty result: still a buffer */
		b.p = calloc(1, 1);
	*outlen = b.len;
	return b.p;
}

/* s quoted for dat.conf when it holds a blank, '#', a quote or a backslash. */
static void quote_if_needed(char *out, size_t size, const char *s, bool always)
{
	size_t o = 0;
	bool need = always || *s == '\0' || strpbrk(s, " \t#\"\\") != NULL;

	if (!need) {
		snprintf(out, size, "%s", s);
		return;
	}
	if (size < 3) {
		*out = '\0';
		return;
	}
	out[o++] = '"';
	for (; *s && o + 3 < size; s++) {
		if (*s == '"' || *s == '\\')
			out[o++] = '\\';
		out[o++] = *s;
	}
	out[o++] = '"';
	out[o] = '\0';
}

int zd_dc_format_entry(char *buf, size_t size, const char *ia_name,
		       const char *lib, const char *ia_params)
{
	char qlib[1024], qparams[512];

	quote_if_needed(qlib, sizeof(qlib), lib, false);
	quote_if_needed(qparams, sizeof(qparams), ia_params, true);
	/* nonthreadsafe: the stock clients ask for that key (libdat2 matches
	 * name, version and thread-safety). */
	return snprintf(buf, size, "%s u2.0 nonthreadsafe default %s dapl.2.0 %s \"\"\n",
			ia_name, qlib, qparams);
}
