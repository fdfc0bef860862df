/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * main() of zd_{write,read,send}_{lat,bw}: meson builds this file once per
 * benchmark with ZD_PERF_VERB and ZD_PERF_KIND set (see meson.build).
 */
#include "zd_perf.h"

#if !defined(ZD_PERF_VERB) || !defined(ZD_PERF_KIND)
#error "build with -DZD_PERF_VERB=ZD_PERF_{SEND,WRITE,READ} -DZD_PERF_KIND=ZD_PERF_{LAT,BW}"
#endif

int main(int argc, char **argv)
{
	return zd_perf_main(argc, argv, ZD_PERF_VERB, ZD_PERF_KIND);
}
