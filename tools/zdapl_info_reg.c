/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * zdapl_info register | unregister | list: zdapl's lines in /etc/dat.conf.
 *
 * Only zdapl's own marked block is ever written (zd_datconf.h); every other
 * byte of the file is kept.  A change is written as a temporary file in the
 * same directory, given the file's mode and owner, synced and renamed over
 * it, so a reader (libdat2 in any process) sees the old or the new file,
 * never a part.  Writers serialise on flock(2) of the file itself,
 * re-checked after the lock is granted since a rename by the previous
 * holder leaves the lock on the replaced inode.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "zd_datconf.h"
#include "zd_hostdev.h"
#include "zdapl_info.h"

#define DEFAULT_DATCONF "/etc/dat.conf"
#define LINE_MAX_LEN 1024

struct reg_opts {
	const char *file;
	const char *lib;
	bool dry_run;
	bool quiet;
	double lock_timeout;    /* seconds */
};

/* Locks path against other zdapl_info writers; returns the locked fd
 * (its inode still the path's), or -1 after a message. */
static int lock_file(const char *path, double timeout)
{
	struct timespec start, now, nap = { 0, 20 * 1000 * 1000 };
	bool told = false;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		struct stat held, cur;
		int fd = open(path, O_RDONLY | O_CLOEXEC);

		if (fd < 0) {
			zd_info_err("%s: %s", path, strerror(errno));
			return -1;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			if (fstat(fd, &held) == 0 && stat(path, &cur) == 0 &&
			    held.st_dev == cur.st_dev && held.st_ino == cur.st_ino)
				return fd;
			close(fd);      /* replaced meanwhile: lock the new one */
			continue;
		}
		close(fd);
		if (errno != EWOULDBLOCK) {
			zd_info_err("%s: cannot lock: %s", path, strerror(errno));
			return -1;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 >= timeout) {
			zd_info_err("%s: locked by another process for %.0f s; not changed",
				    path, timeout);
			return -1;
		}
		if (!told) {
			fprintf(stderr, "zdapl_info: %s: waiting for the lock another zdapl_info holds\n", path);
			told = true;
		}
		nanosleep(&nap, NULL);
	}
}

/* Writes len bytes of text over path atomically, keeping mode and owner. */
static int replace_file(const char *path, const struct stat *st, const char *text, size_t len)
{
	char dirbuf[PATH_MAX], basebuf[PATH_MAX], tmp[PATH_MAX + 32];
	const char *dir, *base;
	int fd, dfd;
	size_t done = 0;

	snprintf(dirbuf, sizeof(dirbuf), "%s", path);
	snprintf(basebuf, sizeof(basebuf), "%s", path);
	dir = dirname(dirbuf);
	base = basename(basebuf);
	snprintf(tmp, sizeof(tmp), "%s/.%s.zdapl-XXXXXX", dir, base);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0) {
		zd_info_err("%s: cannot create a temporary file beside it: %s", path, strerror(errno));
		return -1;
	}
	while (done < len) {
		ssize_t w = write(fd, text + done, len - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			goto fail;
		done += w;
	}
	/* Owner first: chown clears set-id bits, which the chmod restores. */
	if (fchown(fd, st->st_uid, st->st_gid) < 0 && (st->st_uid != geteuid() || errno != EPERM))
		goto fail;
	if (fchmod(fd, st->st_mode & 07777) < 0 || fsync(fd) < 0)
		goto fail;
	if (close(fd) < 0) {
		fd = -1;
		goto fail;
	}
	fd = -1;
	if (rename(tmp, path) < 0)
		goto fail;
	/* The rename itself durable too. */
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	return 0;
fail:
	zd_info_err("%s: cannot write: %s; not changed", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	return -1;
}

/* The block's lines as they stand: each a malloc'd entry line with '\n'. */
static size_t block_lines(const struct zd_datconf *dc, char **out, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < dc->nlines && n < max; i++) {
		const struct zd_dc_line *l = &dc->line[i];

		if (zd_dc_in_block(dc, i)) {
			bool nl = l->len && dc->text[l->off + l->len - 1] == '\n';

			out[n] = malloc(l->len + 2);
			if (!out[n])
				break;
			memcpy(out[n], dc->text + l->off, l->len);
			if (!nl)
				out[n][l->len] = '\n';
			out[n][l->len + !nl] = '\0';
			n++;
		}
	}
	return n;
}

/* The ia_name of an entry line we formatted (its first blank-ended word). */
static bool same_name(const char *line, const char *ia_name)
{
	size_t n = strlen(ia_name);

	return strncmp(line, ia_name, n) == 0 && (line[n] == ' ' || line[n] == '\t');
}

/* A line outside zdapl's block that already uses ia_name (libdat2 takes a
 * name's first line only, so ours would be shadowed or shadow it). */
static ssize_t foreign_use(const struct zd_datconf *dc, const char *ia_name)
{
	for (size_t i = 0; i < dc->nlines; i++)
		if (dc->line[i].kind == ZD_DC_ENTRY && !zd_dc_in_block(dc, i) &&
		    strcmp(dc->line[i].field[ZD_DC_IA_NAME], ia_name) == 0)
			return i;
	return -1;
}

static void free_lines(char **l, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(l[i]);
}

static bool contains(char *const *set, size_t n, const char *line)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(set[i], line) == 0)
			return true;
	return false;
}

/* Prints what changes: "-" lines going, "+" lines coming. */
static void print_change(FILE *f, char *const *old, size_t nold, char *const *new, size_t nnew)
{
	for (size_t i = 0; i < nold; i++)
		if (!contains(new, nnew, old[i]))
			fprintf(f, "-%s", old[i]);
	for (size_t i = 0; i < nnew; i++)
		if (!contains(old, nold, new[i]))
			fprintf(f, "+%s", new[i]);
}

/* The new block for register (adding) or unregister (!adding) of the
 * named devices (all when none named).  Returns the line count, or -1. */
static ssize_t new_block(const struct zd_datconf *dc, const struct reg_opts *o, bool adding,
			 char **names, int nnames, char **old, size_t nold, char **out)
{
	struct zd_hostdev dev[ZD_HOSTDEV_MAX];
	size_t ndev = zd_hostdev_list(dev), n = 0;
	char line[LINE_MAX_LEN];

	if (!adding) {
		/* Keep the lines of devices not named; none when none named. */
		for (size_t i = 0; i < nold && nnames > 0; i++) {
			bool named = false;

			for (int k = 0; k < nnames; k++)
				named |= same_name(old[i], names[k]) ||
					 (strncmp(old[i], "zdapl-", 6) == 0 &&
					  same_name(old[i] + 6, names[k]));
			if (!named && !(out[n++] = strdup(old[i])))
				return -1;
		}
		return n;
	}
	/* Named devices join the block's other lines; no name: the block
	 * becomes this host's devices (a refresh after hardware changed). */
	if (nnames > 0)
		for (size_t i = 0; i < nold; i++)
			if (!(out[n++] = strdup(old[i])))
				return -1;
	for (size_t d = 0; d < ndev; d++) {
		ssize_t other;
		size_t i;

		if (!zd_hostdev_named(&dev[d], names, nnames))
			continue;
		other = foreign_use(dc, dev[d].ia_name);
		if (other >= 0) {
			zd_info_err("%s: line %zu already names %s (libdat2 reads only a name's first line); remove it first",
				    o->file, zd_dc_lineno(other), dev[d].ia_name);
			return -1;
		}
		zd_dc_format_entry(line, sizeof(line), dev[d].ia_name, o->lib, dev[d].ia_params);
		for (i = 0; i < n && !same_name(out[i], dev[d].ia_name); i++)
			;
		if (i < n)
			free(out[i]);
		else
			n++;
		if (!(out[i] = strdup(line)))
			return -1;
	}
	return n;
}

/* Every name on the command line is one of this host's devices (for
 * register) -- unregister may name lines of devices long gone. */
static int check_names(char **names, int nnames, bool adding)
{
	struct zd_hostdev dev[ZD_HOSTDEV_MAX];
	size_t ndev = zd_hostdev_list(dev);
	const char *unknown = adding ? zd_hostdev_unknown(dev, ndev, names, nnames) : NULL;

	if (unknown) {
		zd_info_err("no device %s on this host (zdapl_info --datconf lists them)", unknown);
		return -1;
	}
	return 0;
}

static int do_list(const struct zd_datconf *dc, const char *file)
{
	for (size_t i = 0; i < dc->nlines; i++) {
		const struct zd_dc_line *l = &dc->line[i];

		if (!zd_dc_is_zdapl(l))
			continue;
		printf("%-20s %s:%zu %s \"%s\"%s\n", l->field[ZD_DC_IA_NAME], file,
		       zd_dc_lineno(i), l->field[ZD_DC_LIB], l->field[ZD_DC_IA_PARAMS],
		       zd_dc_in_block(dc, i) ? "" : " (not in zdapl's block: not managed)");
	}
	return ZD_EXIT_OK;
}

static int change(const struct zd_datconf *dc, const struct reg_opts *o, bool adding,
		  char **names, int nnames)
{
	char *old[ZD_HOSTDEV_MAX * 2] = { 0 }, *new[ZD_HOSTDEV_MAX * 3] = { 0 };
	size_t nold = block_lines(dc, old, ZD_HOSTDEV_MAX * 2), len;
	ssize_t nnew = new_block(dc, o, adding, names, nnames, old, nold, new);
	struct stat st;
	char *text = NULL;
	int rc = ZD_EXIT_FAIL;
	bool same;

	if (nnew < 0)
		goto out;
	same = (size_t)nnew == nold;
	for (ssize_t i = 0; same && i < nnew; i++)
		same = strcmp(old[i], new[i]) == 0;
	if (same) {
		if (!o->quiet)
			printf("zdapl_info: %s: %s\n", o->file,
			       adding ? "already registered, unchanged" : "nothing to remove, unchanged");
		rc = ZD_EXIT_OK;
		goto out;
	}
	if (o->dry_run) {
		printf("zdapl_info: %s: would change (dry run, nothing written):\n", o->file);
		print_change(stdout, old, nold, new, nnew);
		rc = ZD_EXIT_OK;
		goto out;
	}
	text = zd_datconf_with_block(dc, (const char *const *)new, nnew, &len);
	if (!text) {
		zd_info_err("out of memory");
		goto out;
	}
	if (stat(o->file, &st) < 0) {
		zd_info_err("%s: %s", o->file, strerror(errno));
		goto out;
	}
	if (replace_file(o->file, &st, text, len) < 0)
		goto out;
	if (!o->quiet) {
		printf("zdapl_info: %s: changed:\n", o->file);
		print_change(stdout, old, nold, new, nnew);
	}
	rc = ZD_EXIT_OK;
out:
	free(text);
	free_lines(old, nold);
	free_lines(new, nnew > 0 ? (size_t)nnew : 0);
	return rc;
}

/* The file a change may go to: writable for us, and not marked read-only
 * (root could write it anyway; a 0444 dat.conf says someone froze it). */
static int check_writable(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		zd_info_err("%s: %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		zd_info_err("%s: not a regular file", path);
		return -1;
	}
	if ((st.st_mode & 0222) == 0) {
		zd_info_err("%s: read-only (mode %04o); not changed", path, st.st_mode & 07777);
		return -1;
	}
	if (access(path, W_OK) < 0) {
		zd_info_err("%s: %s; not changed", path, strerror(errno));
		return -1;
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zdapl_info register [-n] [-q] [-f FILE] [-l LIB] [--lock-timeout S] [device...]\n"
		"       zdapl_info unregister [-n] [-q] [-f FILE] [--lock-timeout S] [device...]\n"
		"       zdapl_info list [-f FILE]\n"
		"  register    add this host's devices (or those named) to zdapl's block of FILE\n"
		"  unregister  remove them (all when none named; the block goes when empty)\n"
		"  list        print FILE's zdapl lines\n"
		"  -f, --file FILE      the dat.conf to edit (default " DEFAULT_DATCONF ")\n"
		"  -l, --lib LIB        the library the lines name (default " ZDAPL_LIBPATH ")\n"
		"  -n, --dry-run        print what would change, write nothing\n"
		"  -q, --quiet          say nothing when all went well\n"
		"      --lock-timeout S wait at most S seconds for another writer (default 10)\n");
}

int zd_info_registration(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "file", required_argument, NULL, 'f' },
		{ "lib", required_argument, NULL, 'l' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "lock-timeout", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *cmd = argv[0];
	struct reg_opts o = { DEFAULT_DATCONF, ZDAPL_LIBPATH, false, false, 10 };
	bool adding = strcmp(cmd, "register") == 0, listing = strcmp(cmd, "list") == 0;
	char real[PATH_MAX], err[512], *end;
	struct zd_datconf dc;
	int c, fd, rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "f:l:nqh", longopts, NULL)) != -1) {
		switch (c) {
		case 'f': o.file = optarg; break;
		case 'l': o.lib = optarg; break;
		case 'n': o.dry_run = true; break;
		case 'q': o.quiet = true; break;
		case 'T':
			o.lock_timeout = strtod(optarg, &end);
			if (*end || o.lock_timeout < 0) {
				zd_info_err("--lock-timeout wants seconds, not '%s'", optarg);
				return ZD_EXIT_USAGE;
			}
			break;
		case 'h': usage(stdout); return ZD_EXIT_OK;
		default: usage(stderr); return ZD_EXIT_USAGE;
		}
	}
	if (listing && optind < argc) {
		usage(stderr);
		return ZD_EXIT_USAGE;
	}
	if (o.lib[0] != '/') {
		zd_info_err("--lib wants an absolute path, not '%s'", o.lib);
		return ZD_EXIT_USAGE;
	}
	/* A symlinked dat.conf: edit (and rename over) its target. */
	if (!realpath(o.file, real)) {
		zd_info_err("%s: %s", o.file, strerror(errno));
		return ZD_EXIT_FAIL;
	}
	if (listing) {
		if (zd_datconf_load(&dc, real, false, err, sizeof(err)) < 0) {
			zd_info_err("%s", err);
			return ZD_EXIT_FAIL;
		}
		rc = do_list(&dc, o.file);
		zd_datconf_free(&dc);
		return rc;
	}
	if (check_names(argv + optind, argc - optind, adding) < 0)
		return ZD_EXIT_FAIL;
	if (!o.dry_run && check_writable(real) < 0)
		return ZD_EXIT_FAIL;
	fd = o.dry_run ? -1 : lock_file(real, o.lock_timeout);
	if (!o.dry_run && fd < 0)
		return ZD_EXIT_FAIL;
	if (zd_datconf_load(&dc, real, false, err, sizeof(err)) < 0) {
		zd_info_err("%s; not changed", err);
		rc = ZD_EXIT_FAIL;
	} else {
		struct reg_opts ro = o;

		ro.file = real;
		rc = change(&dc, &ro, adding, argv + optind, argc - optind);
		zd_datconf_free(&dc);
	}
	if (fd >= 0)
		close(fd);      /* the lock goes with it */
	return rc;
}
