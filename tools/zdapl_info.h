/* SPDX-License-Identifier: BSD-3-Clause */
/* zdapl_info's commands, one file each (zdapl_info.c is the dispatcher). */
#ifndef ZDAPL_INFO_H
#define ZDAPL_INFO_H

/* The library path dat.conf lines name by default: the installed one. */
#ifndef ZDAPL_LIBPATH
#define ZDAPL_LIBPATH "/usr/lib/libzdapl.so.1"
#endif

/* Exit statuses, as a Unix tool's: 0 done, 1 failed, 2 bad usage. */
enum { ZD_EXIT_OK = 0, ZD_EXIT_FAIL = 1, ZD_EXIT_USAGE = 2 };

/* zdapl_info register|unregister|list [options] [device...] */
int zd_info_registration(int argc, char **argv);

/* zdapl_info --datconf [-l LIB] [device...] (argv[0] is "--datconf") */
int zd_info_datconf(int argc, char **argv);

/* zdapl_info [-v] [ia_name...]: the zdapl lines of the dat.conf in force */
int zd_info_show(int argc, char **argv);

/* One "zdapl_info: ..." line on stderr. */
void zd_info_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* ZDAPL_INFO_H */
