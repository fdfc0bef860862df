/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A dat.conf as libdat2 reads it, held byte for byte.
 *
 * zdapl owns one block of it, between two marker comments; everything else
 * (other providers' lines, comments, blank lines, the lack of a final
 * newline) belongs to the administrator and to libdapl2, whose conffile
 * /etc/dat.conf is.  Editing replaces only the bytes of that block, so
 * adding and then removing it gives back the original file exactly.
 *
 * The tokens follow libdat2's parser (udat_sr_parser.c): fields separated by
 * blanks, a '#' at the start of a token comments out the rest of the line,
 * "quoted strings" may hold blanks and backslash escapes, and an entry is
 * eight fields on one line.  Where libdat2 would silently skip a line (the
 * wrong number of fields, an open quote) we refuse the file instead: an
 * editor that does not understand a line cannot promise to keep it.
 */
#ifndef ZD_DATCONF_H
#define ZD_DATCONF_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define ZD_DC_FIELDS 8

/* The fields of an entry, in the order dat.conf gives them. */
enum zd_dc_field {
	ZD_DC_IA_NAME, ZD_DC_API, ZD_DC_THREADSAFE, ZD_DC_DEFAULT,
	ZD_DC_LIB, ZD_DC_PROVIDER, ZD_DC_IA_PARAMS, ZD_DC_PLATFORM,
};

enum zd_dc_kind {
	ZD_DC_BLANK,            /* nothing but blanks */
	ZD_DC_COMMENT,          /* blanks, then '#' */
	ZD_DC_ENTRY,            /* eight fields, maybe a trailing comment */
	ZD_DC_BEGIN,            /* zdapl's opening marker */
	ZD_DC_END,              /* zdapl's closing marker */
	ZD_DC_SKIPPED,          /* unparsable, read leniently: ignored as libdat2 does */
};

struct zd_dc_line {
	size_t off;             /* first byte in zd_datconf.text */
	size_t len;             /* bytes, its '\n' included when it has one */
	enum zd_dc_kind kind;
	char *field[ZD_DC_FIELDS];  /* ZD_DC_ENTRY: unquoted, unescaped */
};

struct zd_datconf {
	char *text;
	size_t len;
	struct zd_dc_line *line;
	size_t nlines;
	/* zdapl's block: line indexes of its markers, -1 when absent. */
	ssize_t begin, end;
	/* The block was put after a last line that had no '\n': the block
	 * starts with the '\n' it added, which removal takes away again. */
	bool begin_added_newline;
};

/* Marker comments.  The opening one says who writes the block. */
#define ZD_DC_BEGIN_TEXT "# zdapl: begin of the lines zdapl_info register manages (see zdapl_info(1)); edit only outside this block"
#define ZD_DC_BEGIN_NL_TEXT ZD_DC_BEGIN_TEXT " [newline added]"
#define ZD_DC_END_TEXT "# zdapl: end"

/* Parses text (len bytes, taken over: freed by zd_datconf_free).  On
 * failure returns -1 with err holding "line N: why".  lenient (for
 * reading only, never for editing): a line libdat2 would skip is kept as
 * ZD_DC_SKIPPED instead of failing, and a damaged block is not an error. */
int zd_datconf_parse(struct zd_datconf *dc, char *text, size_t len, bool lenient,
		     char *err, size_t errlen);
void zd_datconf_free(struct zd_datconf *dc);

/* Reads and parses path; -1 with err ("path: why") on failure. */
int zd_datconf_load(struct zd_datconf *dc, const char *path, bool lenient,
		    char *err, size_t errlen);

/* 1-based line number of line i, for messages. */
static inline size_t zd_dc_lineno(size_t i) { return i + 1; }

/* Whether an entry names a zdapl library (its lib_path's file name starts
 * with "libzdapl"). */
bool zd_dc_is_zdapl(const struct zd_dc_line *l);

/* Whether line i lies inside zdapl's block (markers excluded). */
bool zd_dc_in_block(const struct zd_datconf *dc, size_t i);

/* The file with zdapl's block replaced by the given lines (each ending in
 * '\n'; none: the block goes, markers and all).  The block stays where it
 * was, or goes to the end of the file.  Returns a malloc'd buffer and its
 * length in *outlen, NULL on ENOMEM. */
char *zd_datconf_with_block(const struct zd_datconf *dc, const char *const *lines,
			    size_t n, size_t *outlen);

/* dat.conf syntax of one entry: the eight fields, ia_params and
 * platform_params quoted.  Writes at most size bytes with '\n'; returns
 * what snprintf returns. */
int zd_dc_format_entry(char *buf, size_t size, const char *ia_name,
		       const char *lib, const char *ia_params);

#endif /* ZD_DATCONF_H */
