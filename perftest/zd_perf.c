/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * zd_perf: command line, clock, statistics, perftest-format printing, JSON,
 * and the process layout (server, client, or --loopback: both, forked).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "zd_perf.h"

#define RESULT_LINE "---------------------------------------------------------------------------------------\n"
/* Column headers and row formats exactly as perftest 4.5 prints them. */
#define RESULT_FMT     " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
#define RESULT_FMT_G   " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
#define RESULT_FMT_LAT " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
#define RESULT_FMT_LAT_DUR " #bytes        #iterations       t_avg[usec]    tps average"
#define REPORT_FMT     " %-7" PRIu32 "    %-10" PRIu64 "       %-7.2f            %-7.2f\t\t   %-7.6f\n"
#define REPORT_FMT_LAT " %-7" PRIu32 " %" PRIu64 "          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n"
#define REPORT_FMT_LAT_DUR " %-7" PRIu32 "       %" PRIu64 "            %-7.2f        %-7.2f\n"

bool zd_perf_use_tsc;
double zd_perf_ticks_per_usec = 1000.0;     /* clock_gettime ns until calibrated */

static const char *g_prog = "zd_perf";
static volatile sig_atomic_t g_server_pid;        /* loopback: the forked server */
static volatile sig_atomic_t g_server_status = -1; /* its exit code, once reaped */

/* ---- errors ---------------------------------------------------------------- */

void zd_perf_set_prog(const char *prog)
{
	g_prog = prog;
}

static void kill_server(void)
{
	pid_t pid = g_server_pid;

	if (pid > 0) {
		g_server_pid = 0;
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
}

/* One write(2) per message: a --loopback server and client share stderr. */
static void say(const char *fmt, va_list ap)
{
	char msg[512];
	int n = snprintf(msg, sizeof(msg), "%s: ", g_prog);

	if (n < 0 || n >= (int)sizeof(msg) - 1)
		n = 0;
	vsnprintf(msg + n, sizeof(msg) - (size_t)n - 1, fmt, ap);
	n = (int)strlen(msg);
	msg[n++] = '\n';
	if (write(2, msg, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
}

void zd_perf_die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	va_start(ap, fmt);
	say(fmt, ap);
	va_end(ap);
	kill_server();
	exit(1);
}

static void say_line(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	say(fmt, ap);
	va_end(ap);
}

const char *zd_perf_dat_strerror(DAT_RETURN ret, char *buf, size_t len)
{
	const char *major = NULL, *minor = NULL;

	if (dat_strerror(ret, &major, &minor) == DAT_SUCCESS && major)
		snprintf(buf, len, "%s%s%s", major, minor && *minor ? " " : "",
			 minor ? minor : "");
	else
		snprintf(buf, len, "DAT error %#x", (unsigned)ret);
	return buf;
}

void zd_perf_dat_die(DAT_RETURN ret, const char *call)
{
	char msg[160];

	fflush(stdout);
	if (DAT_GET_TYPE(ret) == DAT_NOT_IMPLEMENTED) {
		/* The provider has no connection manager or data path (yet):
		 * a test harness reads 77 as "skipped", not failed. */
		say_line("provider returned DAT_NOT_IMPLEMENTED for %s: "
			 "data path not available", call);
		kill_server();
		exit(ZD_PERF_EXIT_SKIP);
	}
	zd_perf_die("%s failed: %s", call, zd_perf_dat_strerror(ret, msg, sizeof(msg)));
}

void zd_perf_skip(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	va_start(ap, fmt);
	say(fmt, ap);
	va_end(ap);
	kill_server();
	exit(ZD_PERF_EXIT_SKIP);
}

/* ---- clock ----------------------------------------------------------------- */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The TSC is used only where the kernel says it ticks at a constant rate
 * through sleep states; it is calibrated against CLOCK_MONOTONIC_RAW. */
void zd_perf_clock_init(void)
{
#if defined(__x86_64__) || defined(__i386__)
	char line[4096];
	bool constant = false, nonstop = false;
	FILE *f = fopen("/proc/cpuinfo", "r");

	while (f && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "flags", 5) == 0) {
			constant = strstr(line, " constant_tsc") != NULL;
			nonstop = strstr(line, " nonstop_tsc") != NULL;
			break;
		}
	}
	if (f)
		fclose(f);
	if (constant && nonstop) {
		uint64_t n0 = mono_ns(), t0 = __rdtsc(), n1, t1;

		do {
			n1 = mono_ns();
		} while (n1 - n0 < 20 * 1000 * 1000);
		t1 = __rdtsc();
		zd_perf_ticks_per_usec = (double)(t1 - t0) * 1000.0 / (double)(n1 - n0);
		zd_perf_use_tsc = zd_perf_ticks_per_usec > 1.0;
	}
	if (!zd_perf_use_tsc)
		zd_perf_ticks_per_usec = 1000.0;
#endif
}

/* ---- names ----------------------------------------------------------------- */

const char *zd_perf_verb_name(enum zd_perf_verb verb)
{
	static const char *const names[] = { "Send", "RDMA_Write", "RDMA_Read",
					     "RDMA_Write_imm", "Atomic",
					     "Eager_ring_RDMA_Write" };

	return names[verb];
}

const char *zd_perf_test_name(enum zd_perf_verb verb, enum zd_perf_kind kind)
{
	static const char *const names[][2] = {
		{ "send_lat", "send_bw" }, { "write_lat", "write_bw" },
		{ "read_lat", "read_bw" }, { "write_imm_lat", "write_imm_bw" },
		{ "atomic_lat", "atomic_bw" },
		{ "eager_ring", "eager_ring" } };  /* one binary, --mode */

	return names[verb][kind];
}

/* perftest's spelling, for -A and the header. */
const char *zd_perf_atomic_name(enum zd_perf_atomic a)
{
	return a == ZD_PERF_CMP_AND_SWAP ? "CMP_AND_SWAP" : "FETCH_AND_ADD";
}

/* ---- options --------------------------------------------------------------- */

static void usage_eager(const struct zd_perf_opts *o, FILE *out)
{
	fprintf(out,
"Usage:\n"
"  %1$s            start a server and wait for connection\n"
"  %1$s <host>     connect to server at <host>\n"
"  %1$s --loopback run server and client on this host\n"
"\n"
"An MPI-style eager protocol: each side registers a ring of --slots slots;\n"
"the sender RDMA-writes each message into the next slot of the peer's ring,\n"
"the payload ending at an 8-byte header word (its sequence number) that the\n"
"receiver polls; credits go back by RDMA write every slots/2 messages.\n"
"\n"
"Options:\n"
"      --mode=pingpong|stream  Latency of an echo (default), or message rate\n"
"                 of a stream held back only by the credits\n"
"      --slots=<n>  Ring slots (default %2$u)\n"
"      --evd-every=<n>  While spinning on the ring for a message, dequeue the\n"
"                 request EVD once every <n> spins (default 1; 0: never, the\n"
"                 provider must place the writes by itself: MPI transports\n"
"                 that look at their EVDs only when a send is outstanding)\n"
"  -a, --all  Run sizes from %3$u till --max_size (the default without -s)\n"
"      --max_size=<size>  Last size of the sweep (default %4$u)\n"
"  -s, --size=<size>  One payload size (bytes before the header word)\n"
"  -n, --iters=<iters>  Messages per size (at least 5; default 1000, stream 10000)\n"
"  -t, --tx-depth=<dep>  Writes in flight (default and at most: --slots)\n"
"  -Q, --cq-mod  stream: a completion every <n> writes (default 100, at most slots/2)\n"
"  -p, --port=<port>  Listen on/connect to port <port> (default %5$u)\n"
"  -P, --ia=<ia_name>  DAT interface adapter from dat.conf (default " ZD_PERF_DEF_IA ")\n"
"      --report_gbits  Report BW in Gbit/sec (instead of MB/sec)\n"
"      --loopback  Fork a server and connect to it on this host\n"
"      --json=<file>  Also write the results to <file> as JSON\n"
"      --mem=malloc|pool|hugepage  Ring and staging memory: malloc (default:\n"
"                 page-aligned heap memory, as valloc), pool (zdapl_mem_alloc)\n"
"                 or hugepage\n"
"      --timeout=<sec>  Give up on a peer that does not connect or progress\n"
"                 (default 10; a server waits 60 for its client)\n"
"  -h, --help  Show this help screen.\n"
"  -V, --version  Display version number\n"
"\nA server runs the client's mode, sizes, iterations and slots.\n"
"Exit status: 0 done, 1 error (a payload that arrived wrong included), 2 bad\n"
"arguments, 77 the provider returned DAT_NOT_IMPLEMENTED.\n",
		o->prog, ZD_PERF_EAGER_DEF_SLOTS, ZD_PERF_EAGER_MIN_SIZE,
		ZD_PERF_EAGER_MAX_SIZE, ZD_PERF_DEF_PORT);
}

static void usage(const struct zd_perf_opts *o, FILE *out)
{
	bool bw = o->kind == ZD_PERF_BW, atomic = o->verb == ZD_PERF_ATOMIC;

	if (o->verb == ZD_PERF_EAGER) {
		usage_eager(o, out);
		return;
	}

	fprintf(out,
"Usage:\n"
"  %1$s            start a server and wait for connection\n"
"  %1$s <host>     connect to server at <host>\n"
"  %1$s --loopback run server and client on this host\n"
"\n"
"Options:\n", o->prog);
	if (atomic)
		fprintf(out,
"  -A, --atomic_type=<type>  type of atomic operation from {CMP_AND_SWAP,FETCH_AND_ADD} (default FETCH_AND_ADD)\n");
	else
		fprintf(out,
"  -a, --all  Run sizes from 2 till 2^23\n"
"      --max_size=<size>  Last size of -a (default 2^23)\n");
	fprintf(out,
"  -D, --duration=<sec>  Run test for a customized period of seconds.\n"
"  -F, --CPU-freq  Accepted for perftest compatibility (no cpufreq check is made)\n"
"  -h, --help  Show this help screen.\n"
"  -n, --iters=<iters>  Number of exchanges (at least 5, default %1$u)\n"
"  -p, --port=<port>  Listen on/connect to port <port>: the DAT connection qualifier (default %2$u)\n"
"  -P, --ia=<ia_name>  DAT interface adapter from dat.conf (default " ZD_PERF_DEF_IA ")\n",
		o->kind == ZD_PERF_BW && o->verb == ZD_PERF_WRITE ? 5000u : 1000u,
		ZD_PERF_DEF_PORT);
	if (!atomic)
		fprintf(out,
"  -s, --size=<size>  Size of message to exchange (default %1$u)\n"
"  -t, --tx-depth=<dep>  Size of tx queue (default %2$u)\n",
			bw ? 65536u : 2u, bw ? 128u : 1u);
	if (o->verb == ZD_PERF_SEND || o->verb == ZD_PERF_WRITE_IMM)
		fprintf(out, "  -r, --rx-depth=<dep>  Rx queue size (default 512)\n");
	if (bw)
		fprintf(out, "  -Q, --cq-mod  Generate a completion only after <--cq-mod> posts (default 100)\n"
			"      --report_gbits  Report Max/Average BW of test in Gbit/sec (instead of MB/sec)\n");
	fprintf(out,
"      --loopback  Fork a server and connect to it on this host\n"
"      --json=<file>  Also write the results to <file> as JSON\n"
"      --mem=malloc|pool|hugepage  Buffer memory: malloc (default: page-aligned\n"
"                 heap memory, what consumers register), pool (zdapl_mem_alloc,\n"
"                 zdapl's registered pool) or hugepage (2 MiB MAP_HUGETLB)\n"
"      --timeout=<sec>  Give up on a peer that does not connect or progress\n"
"                 (default 10; a server waits 60 for its client)\n"
"  -V, --version  Display version number\n"
"\nExit status: 0 done, 1 error, 2 bad arguments, 77 the provider returned\n"
"DAT_NOT_IMPLEMENTED (no connection manager or data path)%s.\n",
		o->verb == ZD_PERF_WRITE_IMM ? ",\nor does not advertise DAT_IB_IMMED_DATA" :
		o->verb == ZD_PERF_ATOMIC ? ",\nor does not advertise the -A operation "
					    "(DAT_IB_FETCH_AND_ADD, DAT_IB_CMP_AND_SWAP)" : "");
}

static _Noreturn void bad_arg(const struct zd_perf_opts *o, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", o->prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n\n", stderr);
	usage(o, stderr);
	exit(2);
}

bool zd_perf_parse_num(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	errno = 0;
	if (!s || !*s || *s == '-')
		return false;
	v = strtoull(s, &end, 0);
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (errno || *end || v > (UINT64_MAX >> shift))
		return false;
	*out = (uint64_t)v << shift;
	return true;
}

static uint64_t parse_num(const struct zd_perf_opts *o, const char *name,
			  const char *s, uint64_t min, uint64_t max)
{
	uint64_t v;

	if (!zd_perf_parse_num(s, &v))
		bad_arg(o, "invalid %s '%s'", name, s ? s : "");
	if (v < min || v > max)
		bad_arg(o, "invalid %s '%s' (%" PRIu64 "..%" PRIu64 ")", name, s, min, max);
	return v;
}

enum { OPT_GBITS = 256, OPT_LOOPBACK, OPT_JSON, OPT_MEM, OPT_TIMEOUT, OPT_MAX_SIZE,
       OPT_MODE, OPT_SLOTS, OPT_EVD_EVERY };

/* zd_eager_ring's defaults, which follow --mode: the sweep 8 B..64 KiB
 * unless -s, as many writes in flight as the ring has slots. The server
 * adopts all of it from the client. */
static void eager_opts(struct zd_perf_opts *o, bool size_given, bool iters_given,
		       bool depth_given, bool max_given)
{
	if (o->duration_s)
		bad_arg(o, "-D: zd_eager_ring runs -n messages per size");
	if (!size_given)
		o->all_sizes = true;
	if (o->all_sizes && !max_given)
		o->max_size = ZD_PERF_EAGER_MAX_SIZE;
	if (o->all_sizes && o->max_size < ZD_PERF_EAGER_MIN_SIZE)
		bad_arg(o, "--max_size %" PRIu32 ": the sweep starts at %u", o->max_size,
			ZD_PERF_EAGER_MIN_SIZE);
	if (!iters_given)
		o->iters = o->kind == ZD_PERF_BW ? 10000 : 1000;
	if (!depth_given || o->tx_depth > o->slots)
		o->tx_depth = o->slots;
	uint64_t last = o->all_sizes ? o->max_size : o->size;

	if (o->slots * zd_perf_eager_slot_bytes(last) > ZD_PERF_EAGER_MAX_RING)
		bad_arg(o, "%u slots of %" PRIu64 " bytes: more than %u MiB a ring", o->slots,
			zd_perf_eager_slot_bytes(last), ZD_PERF_EAGER_MAX_RING >> 20);
}

static void parse_opts(struct zd_perf_opts *o, int argc, char **argv)
{
	static const struct option longs[] = {
		{ "all", no_argument, NULL, 'a' },
		{ "size", required_argument, NULL, 's' },
		{ "iters", required_argument, NULL, 'n' },
		{ "duration", required_argument, NULL, 'D' },
		{ "tx-depth", required_argument, NULL, 't' },
		{ "rx-depth", required_argument, NULL, 'r' },
		{ "cq-mod", required_argument, NULL, 'Q' },
		{ "CPU-freq", no_argument, NULL, 'F' },
		{ "port", required_argument, NULL, 'p' },
		{ "ia", required_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "report_gbits", no_argument, NULL, OPT_GBITS },
		{ "loopback", no_argument, NULL, OPT_LOOPBACK },
		{ "json", required_argument, NULL, OPT_JSON },
		{ "mem", required_argument, NULL, OPT_MEM },
		{ "timeout", required_argument, NULL, OPT_TIMEOUT },
		{ "max_size", required_argument, NULL, OPT_MAX_SIZE },
		{ "max-size", required_argument, NULL, OPT_MAX_SIZE },
		{ "atomic_type", required_argument, NULL, 'A' },
		{ "mode", required_argument, NULL, OPT_MODE },
		{ "slots", required_argument, NULL, OPT_SLOTS },
		{ "evd-every", required_argument, NULL, OPT_EVD_EVERY },
		{ NULL, 0, NULL, 0 },
	};
	bool bw = o->kind == ZD_PERF_BW, iters_given = false, size_given = false;
	bool cq_given = false, atomic = o->verb == ZD_PERF_ATOMIC;
	bool eager = o->verb == ZD_PERF_EAGER, depth_given = false, max_given = false;
	int c;

	o->ia_name = ZD_PERF_DEF_IA;
	o->port = ZD_PERF_DEF_PORT;
	o->size = bw ? 65536 : atomic ? 8 : 2;
	o->max_size = ZD_PERF_MAX_SIZE;
	o->iters = bw && o->verb == ZD_PERF_WRITE ? 5000 : 1000;
	o->tx_depth = bw ? 128 : 1;
	o->rx_depth = o->verb == ZD_PERF_SEND || o->verb == ZD_PERF_WRITE_IMM ? 512 : 1;
	o->cq_mod = 100;
	o->timeout_s = 10;
	o->slots = ZD_PERF_EAGER_DEF_SLOTS;
	o->evd_every = 1;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":aA:s:n:D:t:r:Q:Fp:P:hV", longs, NULL)) != -1) {
		switch (c) {
		case 'a': o->all_sizes = true; break;
		case 'A':
			if (!atomic)
				bad_arg(o, "-A (--atomic_type) is an option of zd_atomic_lat only");
			if (strcmp(optarg, "CMP_AND_SWAP") == 0)
				o->atomic = ZD_PERF_CMP_AND_SWAP;
			else if (strcmp(optarg, "FETCH_AND_ADD") == 0)
				o->atomic = ZD_PERF_FETCH_AND_ADD;
			else
				bad_arg(o, "invalid atomic type '%s': choose from {CMP_AND_SWAP,FETCH_AND_ADD}",
					optarg);
			break;
		case 's': o->size = parse_num(o, "size", optarg, 1, 1u << 30); size_given = true; break;
		case 'n': o->iters = parse_num(o, "iterations", optarg, 5, 100000000); iters_given = true; break;
		case 'D': o->duration_s = parse_num(o, "duration", optarg, 1, 86400); break;
		case 't':
			o->tx_depth = parse_num(o, "tx depth", optarg, 1, 15000);
			depth_given = true;
			break;
		case 'r': o->rx_depth = parse_num(o, "rx depth", optarg, 1, 16384); break;
		case 'Q': o->cq_mod = parse_num(o, "cq moderation", optarg, 1, 1024); cq_given = true; break;
		case 'F': break;
		case 'p':
			o->port = parse_num(o, "port", optarg, 1, 65535);
			o->port_given = true;
			break;
		case 'P': o->ia_name = optarg; break;
		case 'h': usage(o, stdout); exit(0);
		case 'V': printf("%s (zdapl perftest over DAT 2.0) 0.1\n", o->prog); exit(0);
		case OPT_GBITS: o->report_gbits = true; break;
		case OPT_LOOPBACK: o->loopback = true; break;
		case OPT_JSON: o->json_path = optarg; break;
		case OPT_TIMEOUT:
			o->timeout_s = parse_num(o, "timeout", optarg, 1, 86400);
			o->timeout_given = true;
			break;
		case OPT_MAX_SIZE:
			o->max_size = parse_num(o, "max size", optarg, ZD_PERF_MIN_SIZE_ALL, 1u << 30);
			max_given = true;
			break;
		case OPT_MODE:
			if (!eager)
				bad_arg(o, "--mode is an option of zd_eager_ring only");
			if (strcmp(optarg, "pingpong") == 0)
				o->kind = ZD_PERF_LAT;
			else if (strcmp(optarg, "stream") == 0)
				o->kind = ZD_PERF_BW;
			else
				bad_arg(o, "--mode takes pingpong or stream, not '%s'", optarg);
			break;
		case OPT_SLOTS:
			if (!eager)
				bad_arg(o, "--slots is an option of zd_eager_ring only");
			o->slots = parse_num(o, "slots", optarg, 2, 4096);
			break;
		case OPT_EVD_EVERY:
			if (!eager)
				bad_arg(o, "--evd-every is an option of zd_eager_ring only");
			o->evd_every = parse_num(o, "evd-every", optarg, 0, 1u << 30);
			break;
		case OPT_MEM:
			if (strcmp(optarg, "malloc") == 0)
				o->mem = ZD_PERF_MEM_MALLOC;
			else if (strcmp(optarg, "pool") == 0)
				o->mem = ZD_PERF_MEM_POOL;
			else if (strcmp(optarg, "hugepage") == 0)
				o->mem = ZD_PERF_MEM_HUGEPAGE;
			else
				bad_arg(o, "--mem takes malloc, pool or hugepage, not '%s'", optarg);
			break;
		case ':': bad_arg(o, "option '%s' needs an argument", argv[optind - 1]);
		default: bad_arg(o, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		o->server_host = argv[optind++];
	if (optind < argc)
		bad_arg(o, "unexpected argument '%s'", argv[optind]);
	if (o->loopback && o->server_host)
		bad_arg(o, "--loopback runs both sides: no host argument");
	if (eager)
		eager_opts(o, size_given, iters_given, depth_given, max_given);
	if (o->all_sizes && o->duration_s)
		bad_arg(o, "-a and -D cannot be combined");
	if (o->all_sizes && size_given)
		bad_arg(o, "-a and -s cannot be combined");
	if (o->duration_s && iters_given)
		bad_arg(o, "-D and -n cannot be combined");
	/* perftest's atomics are 8 bytes, one size */
	if (atomic && o->all_sizes)
		bad_arg(o, "-a: an atomic is 8 bytes, one size");
	if (atomic && size_given && o->size != 8)
		bad_arg(o, "-s %" PRIu32 ": message size cannot be changed for atomic tests (8 bytes)",
			o->size);
	if (o->cq_mod > o->tx_depth) {
		if (cq_given && bw)
			fprintf(stderr, "%s: cq-mod %u above tx depth: using %u\n",
				o->prog, o->cq_mod, o->tx_depth);
		o->cq_mod = o->tx_depth;
	}
	if (!bw && !eager)
		o->tx_depth = 1;                /* a ping-pong has one message in flight */
	if (!o->all_sizes)
		o->max_size = o->size;
}

unsigned zd_perf_sizes(const struct zd_perf_opts *o, uint32_t *sizes, unsigned cap)
{
	unsigned n = 0;

	if (!o->all_sizes) {
		sizes[0] = o->size;
		return 1;
	}
	for (uint64_t s = o->verb == ZD_PERF_EAGER ? ZD_PERF_EAGER_MIN_SIZE : ZD_PERF_MIN_SIZE_ALL;
	     s <= o->max_size && n < cap; s <<= 1)
		sizes[n++] = (uint32_t)s;
	return n;
}

/* One stderr line per size once a -a run has been going for a while: the
 * table on stdout stays clean for parsers. */
void zd_perf_progress(const struct zd_perf_opts *o, uint32_t size, unsigned idx,
		      unsigned n, uint64_t t0)
{
	double s = (double)(zd_perf_ticks() - t0) / zd_perf_ticks_per_usec / 1e6;

	if (o->all_sizes && !o->quiet && s >= 2.0)
		fprintf(stderr, "%s: %u/%u sizes done (%" PRIu32 " B), %.1f s\n",
			o->prog, idx + 1, n, size, s);
}

/* ---- statistics ------------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* As perftest: sort, leave out the worst ZD_PERF_LAT_TAIL samples, median is
 * "typical"; t_max is the first sample left out (perftest prints that one);
 * rtt_factor 2 halves a round trip into a one-way latency. */
void zd_perf_lat_stats(uint64_t *d, uint64_t n, double rtt_factor,
		       struct zd_perf_lat_result *r)
{
	double unit = zd_perf_ticks_per_usec * rtt_factor, sum = 0, var = 0;
	uint64_t kept = n > ZD_PERF_LAT_TAIL + 1 ? n - ZD_PERF_LAT_TAIL : n;
	uint64_t i99, i999;

	qsort(d, n, sizeof(*d), cmp_u64);
	for (uint64_t i = 0; i < kept; i++)
		sum += (double)d[i] / unit;
	r->t_avg = sum / (double)kept;
	for (uint64_t i = 0; i < kept; i++) {
		double x = (double)d[i] / unit - r->t_avg;

		var += x * x;
	}
	r->t_stdev = sqrt(var / (double)kept);
	r->t_min = (double)d[0] / unit;
	r->t_max = (double)d[kept < n ? kept : n - 1] / unit;
	r->t_typical = kept % 2 ? (double)d[kept / 2] / unit :
		((double)d[kept / 2 - 1] + (double)d[kept / 2]) / 2 / unit;
	i99 = (uint64_t)ceil((double)kept * 0.99);
	i999 = (uint64_t)ceil((double)kept * 0.999);
	r->p99 = (double)d[i99 < n ? i99 : n - 1] / unit;
	r->p999 = (double)d[i999 < n ? i999 : n - 1] / unit;
}

/* ---- printing -------------------------------------------------------------- */

static const char *addr_str(const struct sockaddr_in *a, char *buf, size_t len)
{
	if (a->sin_family != AF_INET || !inet_ntop(AF_INET, &a->sin_addr, buf, len))
		snprintf(buf, len, "?");
	return buf;
}

void zd_perf_print_header(const struct zd_perf_conn *c)
{
	const struct zd_perf_opts *o = c->o;
	char la[INET_ADDRSTRLEN], ra[INET_ADDRSTRLEN];

	if (o->quiet)
		return;
	printf(RESULT_LINE);
	printf("                    %s %s%s%s Test\n", zd_perf_verb_name(o->verb),
	       o->verb == ZD_PERF_ATOMIC ? zd_perf_atomic_name(o->atomic) : "",
	       o->verb == ZD_PERF_ATOMIC ? " " : "",
	       o->kind == ZD_PERF_LAT ? "Latency" : "BW");
	printf(" Dual-port       : OFF\t\tDevice         : %s\n", o->ia_name);
	printf(" Number of qps   : 1\t\tTransport type : DAT\n");
	printf(" Connection type : RC\t\tUsing SRQ      : OFF\n");
	printf(" PCIe relax order: Unsupported\n");
	printf(" ibv_wr* API     : OFF\n");
	if (!c->is_server || o->kind == ZD_PERF_LAT)
		printf(" TX depth        : %u\n", o->tx_depth);
	if (o->verb == ZD_PERF_EAGER) {
		printf(" Mode            : %s\n", o->kind == ZD_PERF_LAT ? "pingpong" : "stream");
		printf(" Ring slots      : %u (payload + 8 B header, 64 B multiple)\n", o->slots);
	}
	if ((o->verb == ZD_PERF_SEND || o->verb == ZD_PERF_WRITE_IMM) &&
	    (c->is_server || o->kind == ZD_PERF_LAT))
		printf(" RX depth        : %u\n", o->rx_depth);
	if (o->kind == ZD_PERF_BW)
		printf(" CQ Moderation   : %u\n", !c->suppress_ok ? 1 :
		       o->verb == ZD_PERF_EAGER ? zd_perf_eager_cq(o) : o->cq_mod);
	/* DAT exposes no MTU; the largest message is what limits a run. */
	printf(" Mtu             : n/a\n");
	printf(" Max msg size    : %" PRIu64 "[B]\n", c->max_msg);
	printf(" Link type       : DAT\n");
	if (o->verb != ZD_PERF_READ && o->verb != ZD_PERF_ATOMIC)
		printf(" Max inline data : 0[B]\n");
	else
		printf(" Outstand reads  : %d\n", c->max_rdma_read_out);
	printf(" rdma_cm QPs\t : OFF\n");
	printf(" Data ex. method : DAT private data\n");
	printf(" Memory          : %s\n", c->mem_desc);
	printf(RESULT_LINE);
	printf(" local address: IA %s PORT %" PRIu64 " RKey %#08x VAddr %#016" PRIx64 "\n",
	       addr_str(&c->local_addr, la, sizeof(la)), o->port, (unsigned)c->rkey,
	       (uint64_t)(uintptr_t)c->buf);
	printf(" remote address: IA %s PORT %" PRIu64 " RKey %#08x VAddr %#016" PRIx64 "\n",
	       addr_str(&c->remote_addr, ra, sizeof(ra)), o->port,
	       (unsigned)c->peer_rkey, c->peer_addr);
	printf(RESULT_LINE);
	fflush(stdout);
}

void zd_perf_print_columns(const struct zd_perf_opts *o)
{
	if (o->quiet)
		return;
	if (o->kind == ZD_PERF_LAT)
		puts(o->duration_s ? RESULT_FMT_LAT_DUR : RESULT_FMT_LAT);
	else
		puts(o->report_gbits ? RESULT_FMT_G : RESULT_FMT);
	fflush(stdout);
}

void zd_perf_print_lat(const struct zd_perf_opts *o, const struct zd_perf_lat_result *r)
{
	if (o->quiet)
		return;
	if (r->duration)
		printf(REPORT_FMT_LAT_DUR, r->size, r->iters, r->t_avg, r->tps);
	else
		printf(REPORT_FMT_LAT, r->size, r->iters, r->t_min, r->t_max,
		       r->t_typical, r->t_avg, r->t_stdev, r->p99, r->p999);
	fflush(stdout);
}

void zd_perf_print_bw(const struct zd_perf_opts *o, const struct zd_perf_bw_result *r)
{
	if (o->quiet)
		return;
	printf(REPORT_FMT, r->size, r->iters, r->bw_peak, r->bw_avg, r->msg_rate);
	fflush(stdout);
}

void zd_perf_print_footer(void)
{
	printf(RESULT_LINE);
	fflush(stdout);
}

/* ---- JSON ------------------------------------------------------------------ */

struct zd_perf_json {
	FILE *f;
	unsigned rows;
};

struct zd_perf_json *zd_perf_json_open(const struct zd_perf_conn *c)
{
	const struct zd_perf_opts *o = c->o;
	struct zd_perf_json *j;

	if (!o->json_path || o->quiet)
		return NULL;
	j = calloc(1, sizeof(*j));
	if (!j || !(j->f = fopen(o->json_path, "w")))
		zd_perf_die("cannot write %s: %s", o->json_path, strerror(errno));
	fprintf(j->f, "{\n  \"test\": \"%s\",\n  \"ia_name\": \"%s\",\n"
		"  \"role\": \"%s\",\n  \"mem\": \"%s\",\n  \"tx_depth\": %u,\n",
		zd_perf_test_name(o->verb, o->kind), o->ia_name,
		c->is_server ? "server" : "client",
		c->mem_used == ZD_PERF_MEM_POOL ? "pool" :
		c->mem_used == ZD_PERF_MEM_HUGEPAGE ? "hugepage" : "malloc",
		o->tx_depth);
	if (o->verb == ZD_PERF_ATOMIC)
		fprintf(j->f, "  \"atomic_type\": \"%s\",\n", zd_perf_atomic_name(o->atomic));
	if (o->verb == ZD_PERF_EAGER)
		fprintf(j->f, "  \"mode\": \"%s\",\n  \"slots\": %u,\n",
			o->kind == ZD_PERF_LAT ? "pingpong" : "stream", o->slots);
	if (o->kind == ZD_PERF_BW)
		fprintf(j->f, "  \"cq_mod\": %u,\n  \"bw_unit\": \"%s\",\n",
			!c->suppress_ok ? 1 : o->verb == ZD_PERF_EAGER ? zd_perf_eager_cq(o) :
			o->cq_mod, o->report_gbits ? "Gb/sec" : "MB/sec");
	else
		fprintf(j->f, "  \"lat_unit\": \"usec\",\n");
	fprintf(j->f, "  \"duration_s\": %u,\n  \"results\": [", o->duration_s);
	return j;
}

void zd_perf_json_lat(struct zd_perf_json *j, const struct zd_perf_lat_result *r)
{
	if (!j)
		return;
	fprintf(j->f, "%s\n    {\"bytes\": %" PRIu32 ", \"iterations\": %" PRIu64,
		j->rows++ ? "," : "", r->size, r->iters);
	if (r->duration)
		fprintf(j->f, ", \"t_avg\": %.3f, \"tps\": %.1f}", r->t_avg, r->tps);
	else
		fprintf(j->f, ", \"t_min\": %.3f, \"t_max\": %.3f, \"t_typical\": %.3f, "
			"\"t_avg\": %.3f, \"t_stdev\": %.3f, \"p99\": %.3f, \"p99_9\": %.3f}",
			r->t_min, r->t_max, r->t_typical, r->t_avg, r->t_stdev,
			r->p99, r->p999);
}

void zd_perf_json_bw(struct zd_perf_json *j, const struct zd_perf_bw_result *r)
{
	if (!j)
		return;
	fprintf(j->f, "%s\n    {\"bytes\": %" PRIu32 ", \"iterations\": %" PRIu64
		", \"bw_peak\": %.3f, \"bw_avg\": %.3f, \"msg_rate_mpps\": %.6f}",
		j->rows++ ? "," : "", r->size, r->iters, r->bw_peak, r->bw_avg,
		r->msg_rate);
}

void zd_perf_json_close(struct zd_perf_json *j)
{
	if (!j)
		return;
	fprintf(j->f, "\n  ]\n}\n");
	if (fclose(j->f) != 0)
		zd_perf_die("writing JSON: %s", strerror(errno));
	free(j);
}

/* ---- processes ------------------------------------------------------------- */

/* Last resort against a provider call that never returns (every wait of
 * ours has its own timeout): SIGALRM around setup and teardown. */
static char g_alarm_msg[160];

static void on_alarm(int sig)
{
	(void)sig;
	if (write(2, g_alarm_msg, strlen(g_alarm_msg)) < 0) {
		/* nothing left to tell */
	}
	if (g_server_pid > 0)
		kill(g_server_pid, SIGKILL);
	_exit(1);
}

static void watchdog(const struct zd_perf_opts *o, const char *phase, unsigned seconds)
{
	snprintf(g_alarm_msg, sizeof(g_alarm_msg), "%s: a DAT call hung in %s for %u s; giving up\n",
		 o->prog, phase, seconds);
	signal(SIGALRM, on_alarm);
	alarm(seconds);
}

static int run_side(struct zd_perf_opts *o, bool is_server, int ready_fd)
{
	struct zd_perf_conn c;
	struct zd_perf_json *j;

	/* Setup includes a server's wait for its client (60 s by default). */
	watchdog(o, "setup", (o->timeout_s > 60 ? o->timeout_s : 60) + o->timeout_s + 10);
	zd_perf_conn_open(&c, o, is_server, ready_fd);
	alarm(0);
	zd_perf_print_header(&c);
	j = zd_perf_json_open(&c);
	if (o->verb == ZD_PERF_EAGER)
		zd_perf_run_eager(&c, j);
	else if (o->kind == ZD_PERF_LAT)
		zd_perf_run_lat(&c, j);
	else
		zd_perf_run_bw(&c, j);
	zd_perf_json_close(j);
	if (!o->quiet)
		zd_perf_print_footer();
	watchdog(o, "teardown", o->timeout_s + 5);
	zd_perf_conn_close(&c);
	alarm(0);
	return 0;
}

/* A loopback server that fails ends the client at once, with the server's
 * exit code (77 stays "skipped"), instead of leaving it to time out. */
static char g_chld_msg[160];

static void on_sigchld(int sig)
{
	int saved = errno, st;
	pid_t pid = g_server_pid;

	(void)sig;
	if (pid > 0 && waitpid(pid, &st, WNOHANG) == pid) {
		g_server_pid = 0;
		g_server_status = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
		if (g_server_status != 0) {
			if (g_server_status != ZD_PERF_EXIT_SKIP &&
			    write(2, g_chld_msg, strlen(g_chld_msg)) < 0) {
				/* nowhere left to report it */
			}
			_exit(g_server_status);
		}
	}
	errno = saved;
}

/* --loopback: the server runs in a child that reports its IA address on a
 * pipe once its PSP listens, so the client never races the listener. */
static int run_loopback(struct zd_perf_opts *o)
{
	struct sigaction sa = { .sa_handler = on_sigchld, .sa_flags = SA_RESTART | SA_NOCLDSTOP };
	sigset_t chld, old;
	int pfd[2], rc;
	pid_t pid;

	if (pipe(pfd) != 0)
		zd_perf_die("pipe: %s", strerror(errno));
	fflush(stdout);
	fflush(stderr);
	/* SIGCHLD waits until g_server_pid is set: a server that fails at
	 * once is still seen. */
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	pid = fork();
	if (pid < 0)
		zd_perf_die("fork: %s", strerror(errno));
	if (pid == 0) {
		static char name[128];

		sigprocmask(SIG_SETMASK, &old, NULL);
		close(pfd[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);   /* never outlive the client */
		if (getppid() == 1)
			_exit(1);
		snprintf(name, sizeof(name), "%s[server]", o->prog);
		g_prog = o->prog = name;
		o->quiet = true;
		o->loopback = false;
		exit(run_side(o, true, pfd[1]));
	}
	g_server_pid = pid;
	snprintf(g_chld_msg, sizeof(g_chld_msg), "%s: the loopback server failed (see above)\n",
		 o->prog);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGCHLD, &sa, NULL);
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(pfd[1]);

	struct pollfd p = { .fd = pfd[0], .events = POLLIN };
	struct zd_perf_ready ready;
	ssize_t n = 0;

	rc = poll(&p, 1, (int)o->timeout_s * 1000);
	if (rc > 0)
		n = read(pfd[0], &ready, sizeof(ready));
	close(pfd[0]);
	if (n != (ssize_t)sizeof(ready)) {
		if (rc == 0)
			zd_perf_die("the loopback server did not listen within %u s", o->timeout_s);
		/* The server failed and said why; on_sigchld exits with its code. */
		for (int i = 0; i < 500 && g_server_status < 0; i++)
			usleep(10000);
		kill_server();
		exit(g_server_status > 0 ? g_server_status : 1);
	}
	static char host[INET_ADDRSTRLEN];

	if (!inet_ntop(AF_INET, &ready.addr.sin_addr, host, sizeof(host)))
		zd_perf_die("bad address from the loopback server");
	o->server_host = host;
	o->port = ready.port;
	rc = run_side(o, false, -1);

	/* The server ends after the client's last sync and disconnect. */
	for (unsigned ms = 0; ms < (o->timeout_s + 5) * 1000u && g_server_status < 0; ms += 10)
		usleep(10000);
	if (g_server_status == 0)
		return rc;
	fprintf(stderr, "%s: the loopback server did not exit; killed\n", o->prog);
	kill_server();
	return 1;
}

int zd_perf_main(int argc, char **argv, enum zd_perf_verb verb, enum zd_perf_kind kind)
{
	struct zd_perf_opts o = { .verb = verb, .kind = kind };
	const char *slash = strrchr(argv[0], '/');

	o.prog = g_prog = slash ? slash + 1 : argv[0];
	if (kind == ZD_PERF_BW && verb > ZD_PERF_READ && verb != ZD_PERF_EAGER)
		zd_perf_die("zd_%s is not a benchmark of this suite", zd_perf_test_name(verb, kind));
	parse_opts(&o, argc, argv);
	setvbuf(stdout, NULL, _IOLBF, 0);
	zd_perf_clock_init();
	signal(SIGPIPE, SIG_IGN);
	if (o.loopback)
		return run_loopback(&o);
	return run_side(&o, o.server_host == NULL, -1);
}
