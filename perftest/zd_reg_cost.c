/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * zd_reg_cost: what registering memory costs, the price issue 13 lets
 * registration pay so that peers reach the application's own memory
 * without a system call per access.  Per size, one page-aligned buffer
 * (every page touched first, as a consumer's buffer would be), and:
 *  - dat_lmr_create(DAT_MEM_TYPE_VIRTUAL) + dat_lmr_free of it, one LMR at
 *    a time: on zdapl-shm and zdapl-mlx5sim a pair adopts the buffer's
 *    whole pages into the shared adoption file and gives them back;
 *  - the same pair while another LMR over the same range lives ("held"):
 *    the pages are adopted already, so it costs only the bookkeeping.
 * Each measurement runs pairs until it has taken --time seconds (at least
 * MIN_ITERS pairs), or exactly -n.  --split also times the two calls
 * apart.
 *
 * One process, an IA and a PZ, no connection; the DAT 2.0 API only, so it
 * runs over any provider (--mem pool needs zdapl's pool, found with dlsym
 * as the other benchmarks find it).  Shares zd_perf's clock and errors.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "zd_perf.h"

#define RESULT_LINE "---------------------------------------------------------------------------------------\n"
#define DEF_SIZES   "4k,64k,1m,16m,256m"
#define MAX_SIZES   32
#define MAX_SIZE    (UINT64_C(16) << 30)
#define MIN_ITERS   3u
#define MAX_ITERS   (1000u * 1000)   /* adaptive runs stop here too */
#define DEF_TIME_S  0.3
#define MIB         1048576.0

struct reg_opts {
	const char *prog;
	const char *ia_name;
	uint64_t sizes[MAX_SIZES];
	unsigned nsizes;
	uint64_t iters;         /* 0: adaptive */
	double time_s;          /* adaptive: seconds a measurement */
	enum zd_perf_mem mem;
	bool split;             /* time create and free apart */
	bool held;              /* also re-register while held */
	const char *json_path;
};

struct reg_ctx {
	const struct reg_opts *o;
	DAT_IA_HANDLE ia;
	DAT_PZ_HANDLE pz;
	struct zd_perf_pool pool;
	uint64_t *samples;      /* one per pair, MAX_ITERS at most */
};

/* One measurement: pairs, in usec. */
struct reg_meas {
	uint64_t iters;
	double avg, typical, min;
	double create_avg, free_avg;    /* --split */
};

/* ---- DAT ------------------------------------------------------------------- */

static void open_ia(struct reg_ctx *x)
{
	DAT_EVD_HANDLE async_evd = DAT_HANDLE_NULL;
	DAT_RETURN ret;
	char msg[160], name[DAT_NAME_MAX_LENGTH];

	snprintf(name, sizeof(name), "%s", x->o->ia_name);  /* the ABI takes char * */
	ret = dat_ia_open(name, 8, &async_evd, &x->ia);
	if (ret != DAT_SUCCESS)
		zd_perf_die("dat_ia_open(%s) failed: %s (is it in %s?)", x->o->ia_name,
			    zd_perf_dat_strerror(ret, msg, sizeof(msg)),
			    getenv("DAT_OVERRIDE") ? getenv("DAT_OVERRIDE") : "/etc/dat.conf");
	ret = dat_pz_create(x->ia, &x->pz);
	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_pz_create");
}

static void close_ia(struct reg_ctx *x)
{
	DAT_RETURN ret = dat_pz_free(x->pz);

	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_pz_free");
	ret = dat_ia_close(x->ia, DAT_CLOSE_GRACEFUL_FLAG);
	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_ia_close");
}

static DAT_LMR_HANDLE reg(struct reg_ctx *x, void *buf, uint64_t len, bool check)
{
	DAT_REGION_DESCRIPTION region = { .for_va = buf };
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lkey;
	DAT_RMR_CONTEXT rkey;
	DAT_VLEN reg_len = 0;
	DAT_VADDR reg_addr = 0;
	DAT_RETURN ret = dat_lmr_create(x->ia, DAT_MEM_TYPE_VIRTUAL, region, len, x->pz,
					DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lkey,
					&rkey, &reg_len, &reg_addr);

	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_lmr_create");
	if (check && (reg_addr > (DAT_VADDR)(uintptr_t)buf ||
		      reg_addr + reg_len < (DAT_VADDR)(uintptr_t)buf + len))
		zd_perf_die("dat_lmr_create registered [%#" PRIx64 ", +%" PRIu64 "), "
			    "not the whole buffer", (uint64_t)reg_addr, (uint64_t)reg_len);
	return lmr;
}

static void unreg(DAT_LMR_HANDLE lmr)
{
	DAT_RETURN ret = dat_lmr_free(lmr);

	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_lmr_free");
}

/* ---- memory ---------------------------------------------------------------- */

static void *alloc_buf(struct reg_ctx *x, uint64_t len)
{
	void *p = NULL;

	if (x->o->mem == ZD_PERF_MEM_POOL) {
		p = zd_perf_pool_alloc(&x->pool, len);
		if (!p)
			zd_perf_die("zdapl_mem_alloc(%" PRIu64 ") failed", len);
	} else if (posix_memalign(&p, 4096, len) != 0) {
		zd_perf_die("out of memory for %" PRIu64 " bytes", len);
	}
	return p;
}

static void free_buf(struct reg_ctx *x, void *p)
{
	if (x->o->mem == ZD_PERF_MEM_POOL)
		x->pool.free(p);
	else
		free(p);
}

/* Registration must leave the contents alone (issue 13: they move to a
 * shared file and back): every page still holds the fill byte. */
static void check_fill(const uint8_t *buf, uint64_t len, uint8_t fill)
{
	for (uint64_t off = 0; off < len; off += 4096) {
		uint64_t last = off + 4095 < len ? off + 4095 : len - 1;

		if (buf[off] != fill || buf[last] != fill)
			zd_perf_die("the buffer changed under registration: byte %#" PRIx64
				    " or %#" PRIx64 " of %" PRIu64 " is not %#x", off, last,
				    len, fill);
	}
}

/* ---- measuring ------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Pairs of dat_lmr_create + dat_lmr_free over [buf, +len) until the time
 * is up (or -n), after one untimed pair.  One clock read a pair; --split
 * adds one between the two calls. */
static void measure(struct reg_ctx *x, void *buf, uint64_t len, struct reg_meas *m)
{
	const struct reg_opts *o = x->o;
	uint64_t cap = o->iters ? o->iters : MAX_ITERS;
	uint64_t budget = zd_perf_usec_to_ticks(o->time_s * 1e6);
	uint64_t n = 0, t_create = 0, t0, prev;

	unreg(reg(x, buf, len, true));
	t0 = prev = zd_perf_ticks();
	while (n < cap) {
		DAT_LMR_HANDLE lmr = reg(x, buf, len, false);
		uint64_t now;

		if (o->split) {
			uint64_t mid = zd_perf_ticks();

			t_create += mid - prev;
		}
		unreg(lmr);
		now = zd_perf_ticks();
		x->samples[n++] = now - prev;
		prev = now;
		if (!o->iters && n >= MIN_ITERS && now - t0 >= budget)
			break;
	}

	double unit = zd_perf_ticks_per_usec, total = (double)(prev - t0);

	m->iters = n;
	m->avg = total / (double)n / unit;
	m->create_avg = (double)t_create / (double)n / unit;
	m->free_avg = (total - (double)t_create) / (double)n / unit;
	qsort(x->samples, n, sizeof(*x->samples), cmp_u64);
	m->min = (double)x->samples[0] / unit;
	m->typical = (n % 2 ? (double)x->samples[n / 2] :
		      ((double)x->samples[n / 2 - 1] + (double)x->samples[n / 2]) / 2) / unit;
}

/* ---- printing -------------------------------------------------------------- */

static void print_columns(const struct reg_opts *o, const char *title)
{
	printf(RESULT_LINE " %s\n", title);
	printf(" #bytes       #iterations    t_avg[usec]    t_typical[usec]    t_min[usec]"
	       "    t_avg per MiB[usec]%s\n",
	       o->split ? "    create_avg[usec]    free_avg[usec]" : "");
}

static void print_row(const struct reg_opts *o, uint64_t size, const struct reg_meas *m)
{
	double per_mib = m->avg * MIB / (double)size;

	printf(" %-12" PRIu64 " %-14" PRIu64 " %-14.3f %-18.3f %-14.3f ", size, m->iters,
	       m->avg, m->typical, m->min);
	if (o->split)
		printf("%-22.3f %-19.3f %.3f\n", per_mib, m->create_avg, m->free_avg);
	else
		printf("%.3f\n", per_mib);
}

static void json_meas(FILE *j, const struct reg_opts *o, uint64_t size,
		      const struct reg_meas *m)
{
	fprintf(j, "\"iterations\": %" PRIu64 ", \"pair_avg\": %.4f, \"pair_typical\": %.4f, "
		"\"pair_min\": %.4f, \"pair_avg_per_mib\": %.4f", m->iters, m->avg,
		m->typical, m->min, m->avg * MIB / (double)size);
	if (o->split)
		fprintf(j, ", \"create_avg\": %.4f, \"free_avg\": %.4f", m->create_avg,
			m->free_avg);
}

static const char *mem_desc(const struct reg_opts *o)
{
	return o->mem == ZD_PERF_MEM_POOL ? "pool (zdapl_mem_alloc), every page touched"
					  : "malloc (page-aligned posix_memalign), every page touched";
}

static void print_header(const struct reg_opts *o)
{
	const char *adopt = getenv("ZDAPL_MEM_ADOPT");

	printf(RESULT_LINE "                    dat_lmr_create + dat_lmr_free Cost Test\n");
	printf(" Device          : %s\n", o->ia_name);
	printf(" Memory          : %s\n", mem_desc(o));
	printf(" Registration    : DAT_MEM_TYPE_VIRTUAL, DAT_MEM_PRIV_ALL_FLAG, whole buffer\n");
	printf(" ZDAPL_MEM_ADOPT : %s\n", adopt ? adopt : "(unset: adoption on)");
	if (o->iters)
		printf(" Iterations      : %" PRIu64 " pairs a measurement, after one untimed\n",
		       o->iters);
	else
		printf(" Iterations      : adaptive, %.2f s a measurement (at least %u pairs),"
		       " after one untimed\n", o->time_s, MIN_ITERS);
	printf(" Clock           : %s\n", zd_perf_use_tsc ? "TSC (constant, nonstop)"
							  : "clock_gettime(CLOCK_MONOTONIC_RAW)");
}

/* ---- options --------------------------------------------------------------- */

static _Noreturn void usage(const struct reg_opts *o, FILE *out, int status)
{
	fprintf(out,
"Usage: %s [options]\n"
"  What dat_lmr_create(DAT_MEM_TYPE_VIRTUAL) + dat_lmr_free of a page-aligned\n"
"  buffer cost, per size: one LMR at a time, and while another LMR over the\n"
"  same range lives (re-register while held). One process, no connection.\n"
"\n"
"  -P, --ia=<ia_name>      DAT interface adapter from dat.conf (default " ZD_PERF_DEF_IA ")\n"
"  -s, --size=<list>       Sizes, comma-separated, k/m/g suffixes (default " DEF_SIZES ")\n"
"  -n, --iters=<n>         Exactly n pairs a measurement (default: adaptive)\n"
"      --time=<sec>        Adaptive: run pairs for this long a measurement,\n"
"                          at least %u (default %.1f)\n"
"      --mem=malloc|pool   Buffer memory: malloc (default: page-aligned heap\n"
"                          memory, what consumers register) or pool (zdapl_mem_alloc)\n"
"      --split             Also time dat_lmr_create and dat_lmr_free apart\n"
"      --no-held           Leave out the re-register-while-held measurement\n"
"      --json=<file>       Also write the results to <file> as JSON\n"
"  -h, --help              This text\n"
"\nExit status: 0 done, 1 error, 2 bad arguments, 77 the provider returned\n"
"DAT_NOT_IMPLEMENTED.\n", o->prog, MIN_ITERS, DEF_TIME_S);
	exit(status);
}

static _Noreturn void bad_arg(const struct reg_opts *o, const char *what, const char *arg)
{
	fprintf(stderr, "%s: invalid %s '%s'\n\n", o->prog, what, arg ? arg : "");
	usage(o, stderr, 2);
}

static void parse_sizes(struct reg_opts *o, const char *arg)
{
	char buf[512], *save = NULL;

	if (strlen(arg) >= sizeof(buf))
		bad_arg(o, "size list", arg);
	snprintf(buf, sizeof(buf), "%s", arg);
	o->nsizes = 0;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (o->nsizes == MAX_SIZES || !zd_perf_parse_num(t, &v) || v == 0 ||
		    v > MAX_SIZE)
			bad_arg(o, "size (1..16g, at most 32 of them)", t);
		o->sizes[o->nsizes++] = v;
	}
	if (!o->nsizes)
		bad_arg(o, "size list", arg);
}

enum { OPT_TIME = 256, OPT_MEM, OPT_SPLIT, OPT_NO_HELD, OPT_JSON };

static void parse_opts(struct reg_opts *o, int argc, char **argv)
{
	static const struct option longs[] = {
		{ "ia", required_argument, NULL, 'P' },
		{ "size", required_argument, NULL, 's' },
		{ "iters", required_argument, NULL, 'n' },
		{ "time", required_argument, NULL, OPT_TIME },
		{ "mem", required_argument, NULL, OPT_MEM },
		{ "split", no_argument, NULL, OPT_SPLIT },
		{ "no-held", no_argument, NULL, OPT_NO_HELD },
		{ "json", required_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	int c;

	o->ia_name = ZD_PERF_DEF_IA;
	o->time_s = DEF_TIME_S;
	o->held = true;
	parse_sizes(o, DEF_SIZES);
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":P:s:n:h", longs, NULL)) != -1) {
		switch (c) {
		case 'P': o->ia_name = optarg; break;
		case 's': parse_sizes(o, optarg); break;
		case 'n':
			if (!zd_perf_parse_num(optarg, &o->iters) || o->iters < 1 ||
			    o->iters > MAX_ITERS)
				bad_arg(o, "iterations (1..1000000)", optarg);
			break;
		case OPT_TIME:
			errno = 0;
			o->time_s = strtod(optarg, &end);
			if (errno || *end || end == optarg || !(o->time_s > 0 && o->time_s <= 3600))
				bad_arg(o, "time (seconds, above 0, at most 3600)", optarg);
			break;
		case OPT_MEM:
			if (strcmp(optarg, "malloc") == 0)
				o->mem = ZD_PERF_MEM_MALLOC;
			else if (strcmp(optarg, "pool") == 0)
				o->mem = ZD_PERF_MEM_POOL;
			else
				bad_arg(o, "--mem (malloc or pool)", optarg);
			break;
		case OPT_SPLIT: o->split = true; break;
		case OPT_NO_HELD: o->held = false; break;
		case OPT_JSON: o->json_path = optarg; break;
		case 'h': usage(o, stdout, 0);
		case ':':
			fprintf(stderr, "%s: option '%s' needs an argument\n\n", o->prog,
				argv[optind - 1]);
			usage(o, stderr, 2);
		default:
			fprintf(stderr, "%s: unknown option '%s'\n\n", o->prog, argv[optind - 1]);
			usage(o, stderr, 2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n\n", o->prog, argv[optind]);
		usage(o, stderr, 2);
	}
}

/* ---- main ------------------------------------------------------------------ */

/* One table: every size on a fresh buffer, each row printed as measured.
 * @held: a first LMR over the buffer lives while the pairs run. */
static void run_section(struct reg_ctx *x, bool held, FILE *json)
{
	const struct reg_opts *o = x->o;

	print_columns(o, held ? "Re-register while held (a second LMR over the range while "
				"a first lives)" : "Register and free (one LMR at a time)");
	if (json)
		fprintf(json, "  \"%s\": [", held ? "held" : "results");
	for (unsigned i = 0; i < o->nsizes; i++) {
		uint64_t len = o->sizes[i];
		uint8_t fill = (uint8_t)(0xa5 + i + (held ? 0x20 : 0));
		uint8_t *buf = alloc_buf(x, len);
		DAT_LMR_HANDLE first = NULL;
		struct reg_meas m;

		memset(buf, fill, len);         /* every page present before timing */
		if (held)
			first = reg(x, buf, len, true);
		measure(x, buf, len, &m);
		if (held)
			unreg(first);
		check_fill(buf, len, fill);
		free_buf(x, buf);
		print_row(o, len, &m);
		if (json) {
			fprintf(json, "%s\n    {\"bytes\": %" PRIu64 ", ", i ? "," : "", len);
			json_meas(json, o, len, &m);
			fprintf(json, "}");
		}
	}
	if (json)
		fprintf(json, "\n  ]");
}

int main(int argc, char **argv)
{
	struct reg_opts o = { 0 };
	struct reg_ctx x = { .o = &o };
	const char *slash = strrchr(argv[0], '/');
	FILE *json = NULL;

	o.prog = slash ? slash + 1 : argv[0];
	zd_perf_set_prog(o.prog);
	parse_opts(&o, argc, argv);
	setvbuf(stdout, NULL, _IOLBF, 0);
	zd_perf_clock_init();
	x.samples = malloc((o.iters ? o.iters : MAX_ITERS) * sizeof(*x.samples));
	if (!x.samples)
		zd_perf_die("out of memory");
	open_ia(&x);
	if (o.mem == ZD_PERF_MEM_POOL && !zd_perf_pool_find(&x.pool))
		zd_perf_die("--mem pool: provider %s exports no zdapl_mem_alloc (not zdapl?); "
			    "use --mem malloc", o.ia_name);
	if (o.json_path) {
		const char *adopt = getenv("ZDAPL_MEM_ADOPT");

		if (!(json = fopen(o.json_path, "w")))
			zd_perf_die("cannot write %s: %s", o.json_path, strerror(errno));
		fprintf(json, "{\n  \"test\": \"reg_cost\",\n  \"ia_name\": \"%s\",\n"
			"  \"mem\": \"%s\",\n  \"zdapl_mem_adopt\": %s%s%s,\n"
			"  \"split\": %s,\n  \"time_s\": %.3f,\n  \"fixed_iters\": %" PRIu64 ",\n"
			"  \"unit\": \"usec\",\n", o.ia_name,
			o.mem == ZD_PERF_MEM_POOL ? "pool" : "malloc", adopt ? "\"" : "",
			adopt ? adopt : "null", adopt ? "\"" : "", o.split ? "true" : "false",
			o.iters ? 0.0 : o.time_s, o.iters);
	}
	print_header(&o);
	run_section(&x, false, json);
	if (o.held) {
		if (json)
			fprintf(json, ",\n");
		run_section(&x, true, json);
	}
	printf(RESULT_LINE);
	if (json) {
		fprintf(json, "\n}\n");
		if (fclose(json) != 0)
			zd_perf_die("writing %s: %s", o.json_path, strerror(errno));
	}
	close_ia(&x);
	free(x.samples);
	return 0;
}
