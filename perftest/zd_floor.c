/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * zd_floor: what this machine allows at best, for reading the zd_* numbers
 * against (same columns as the benchmarks):
 *  - cache-line ping-pong between two threads pinned to CPUs 0 and 1: the
 *    cheapest one-way hand-off between cores (a shared-memory transport
 *    cannot beat it);
 *  - single-core memcpy bandwidth by size, 8 B..8 MiB (an RDMA write over
 *    shared memory is at best one memcpy);
 *  - loopback TCP: ping-pong one-way latency by size (TCP_NODELAY, both
 *    sides busy-polling non-blocking sockets, pinned) and stream bandwidth
 *    (what the TCP device can hope for on this host).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "zd_perf.h"

#define RESULT_LINE "---------------------------------------------------------------------------------------\n"
#define TCP_TIMEOUT_S 10

static bool quick;
static FILE *json;
static bool pinned = true;
static unsigned ncpus;

/* ---- helpers --------------------------------------------------------------- */

static void pin_self(int cpu)
{
	cpu_set_t set;

	if ((unsigned)cpu >= ncpus) {
		pinned = false;
		return;
	}
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0)
		pinned = false;
}

static void spawn(pthread_t *t, void *(*fn)(void *), void *arg)
{
	int rc = pthread_create(t, NULL, fn, arg);

	if (rc)
		zd_perf_die("pthread_create: %s", strerror(rc));
}

static uint64_t *alloc_u64(uint64_t n)
{
	uint64_t *p = calloc(n, sizeof(*p));

	if (!p)
		zd_perf_die("out of memory");
	return p;
}

static void section(const char *title, const struct zd_perf_opts *o)
{
	printf(RESULT_LINE " %s\n", title);
	zd_perf_print_columns(o);
}

static void json_section(const char *name)
{
	if (json)
		fprintf(json, "  \"%s\": [", name);
}

static void json_end_section(void)
{
	if (json)
		fprintf(json, "\n  ],\n");
}

static void json_lat(const struct zd_perf_lat_result *r, bool first)
{
	if (json)
		fprintf(json, "%s\n    {\"bytes\": %" PRIu32 ", \"iterations\": %" PRIu64
			", \"t_min\": %.4f, \"t_max\": %.4f, \"t_typical\": %.4f, \"t_avg\": %.4f"
			", \"t_stdev\": %.4f, \"p99\": %.4f, \"p99_9\": %.4f}", first ? "" : ",",
			r->size, r->iters, r->t_min, r->t_max, r->t_typical, r->t_avg,
			r->t_stdev, r->p99, r->p999);
}

static void json_bw(const struct zd_perf_bw_result *r, bool first)
{
	if (json)
		fprintf(json, "%s\n    {\"bytes\": %" PRIu32 ", \"iterations\": %" PRIu64
			", \"bw_peak\": %.2f, \"bw_avg\": %.2f, \"msg_rate_mpps\": %.6f}",
			first ? "" : ",", r->size, r->iters, r->bw_peak, r->bw_avg, r->msg_rate);
}

static double ticks_to_sec(uint64_t t)
{
	return (double)t / zd_perf_ticks_per_usec / 1e6;
}

/* ---- cache-line ping-pong -------------------------------------------------- */

struct line_pp {
	_Alignas(64) volatile uint64_t line;
	uint64_t iters;
	uint64_t deadline;
};

/* The responder: waits for each odd value, answers with the next even one. */
static void *line_responder(void *arg)
{
	struct line_pp *pp = arg;

	pin_self(1);
	for (uint64_t i = 0; i < pp->iters; i++) {
		uint64_t want = 2 * i + 1;

		for (uint64_t spins = 0; __atomic_load_n(&pp->line, __ATOMIC_ACQUIRE) != want;)
			if ((++spins & 0xfffff) == 0 && zd_perf_ticks() > pp->deadline)
				return NULL;    /* the initiator gave up */
		__atomic_store_n(&pp->line, want + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

static void run_cacheline(void)
{
	struct zd_perf_opts o = { .kind = ZD_PERF_LAT };
	uint64_t warm = quick ? 2000 : 20000, n = quick ? 20000 : 200000;
	struct line_pp *pp = aligned_alloc(64, sizeof(*pp));
	uint64_t *t = alloc_u64(n + 1), *d = alloc_u64(n);
	pthread_t thr;

	if (!pp)
		zd_perf_die("out of memory");
	memset(pp, 0, sizeof(*pp));
	pp->iters = warm + n;
	pp->deadline = zd_perf_ticks() + zd_perf_usec_to_ticks(60e6);
	spawn(&thr, line_responder, pp);
	pin_self(0);
	for (uint64_t i = 0; i < warm + n; i++) {
		uint64_t k = i >= warm ? i - warm : 0;

		if (i >= warm)
			t[k] = zd_perf_ticks();
		__atomic_store_n(&pp->line, 2 * i + 1, __ATOMIC_RELEASE);
		for (uint64_t spins = 0; __atomic_load_n(&pp->line, __ATOMIC_ACQUIRE) != 2 * i + 2;)
			if ((++spins & 0xfffff) == 0 && zd_perf_ticks() > pp->deadline)
				zd_perf_die("cache-line ping-pong stalled (is CPU 1 busy?)");
	}
	t[n] = zd_perf_ticks();
	pthread_join(thr, NULL);
	for (uint64_t i = 0; i < n; i++)
		d[i] = t[i + 1] - t[i];

	struct zd_perf_lat_result r = { .size = 8, .iters = n };

	zd_perf_lat_stats(d, n, 2.0, &r);
	section("Cache-line ping-pong, one-way (one shared 64-byte line, CPU 0 <-> CPU 1)", &o);
	zd_perf_print_lat(&o, &r);
	json_section("cacheline_pingpong");
	json_lat(&r, true);
	json_end_section();
	free(t);
	free(d);
	free(pp);
}

/* ---- memcpy ---------------------------------------------------------------- */

/* Called through a volatile pointer so the compiler cannot inline or elide
 * the copies: the floor is the C library's memcpy as a provider calls it. */
static void *(*volatile copy_fn)(void *, const void *, size_t) = memcpy;

static void run_memcpy(void)
{
	struct zd_perf_opts o = { .kind = ZD_PERF_BW };
	const uint64_t max = 8u << 20, batches = 10;
	uint8_t *src = aligned_alloc(4096, max), *dst = aligned_alloc(4096, max);

	if (!src || !dst)
		zd_perf_die("out of memory");
	memset(src, 0x5a, max);
	memset(dst, 0, max);
	pin_self(0);
	section("memcpy, one core (source and destination 4 KiB aligned, reused)", &o);
	json_section("memcpy");
	for (uint64_t size = 8; size <= max; size <<= 1) {
		/* ~512 MiB per size (64 MiB quick), at least 100 copies. */
		uint64_t reps = ((quick ? 64u : 512u) << 20) / size;
		uint64_t per = 0, best = UINT64_MAX, total = 0;

		if (reps < 100)
			reps = 100;
		if (reps > 50000000)
			reps = 50000000;
		per = (reps + batches - 1) / batches;
		for (uint64_t i = 0; i < per; i++)           /* warm caches and TLB */
			copy_fn(dst, src, size);
		for (uint64_t b = 0; b < batches; b++) {
			uint64_t t0 = zd_perf_ticks();

			for (uint64_t i = 0; i < per; i++)
				copy_fn(dst, src, size);
			uint64_t dt = zd_perf_ticks() - t0;

			total += dt;
			if (dt < best)
				best = dt;
		}
		struct zd_perf_bw_result r = {
			.size = (uint32_t)size,
			.iters = per * batches,
			.bw_peak = (double)(per * size) / ticks_to_sec(best) / 1048576.0,
			.bw_avg = (double)(per * batches * size) / ticks_to_sec(total) / 1048576.0,
			.msg_rate = (double)(per * batches) / (ticks_to_sec(total) * 1e6),
		};
		zd_perf_print_bw(&o, &r);
		json_bw(&r, size == 8);
	}
	json_end_section();
	free(src);
	free(dst);
}

/* ---- loopback TCP ---------------------------------------------------------- */

static int tcp_listener(uint16_t *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 4) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) != 0)
		zd_perf_die("loopback TCP listener: %s", strerror(errno));
	*port = ntohs(a.sin_port);
	return fd;
}

static void tcp_tune(int fd, bool nodelay)
{
	int one = 1, big = 4 << 20;
	struct timeval tv = { .tv_sec = TCP_TIMEOUT_S };

	if (nodelay)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* A connected pair over 127.0.0.1 (both ends in this process). */
static void tcp_pair(int fds[2], bool nodelay)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	uint16_t port;
	int lfd = tcp_listener(&port);

	a.sin_port = htons(port);
	fds[0] = socket(AF_INET, SOCK_STREAM, 0);
	if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&a, sizeof(a)) != 0)
		zd_perf_die("loopback TCP connect: %s", strerror(errno));
	fds[1] = accept(lfd, NULL, NULL);
	if (fds[1] < 0)
		zd_perf_die("loopback TCP accept: %s", strerror(errno));
	close(lfd);
	tcp_tune(fds[0], nodelay);
	tcp_tune(fds[1], nodelay);
}

/* Busy-polls a non-blocking socket until `len` bytes moved; false on a
 * stall longer than TCP_TIMEOUT_S or an error. */
static bool xfer_spin(int fd, uint8_t *buf, size_t len, bool sending)
{
	uint64_t deadline = zd_perf_ticks() + zd_perf_usec_to_ticks(TCP_TIMEOUT_S * 1e6);
	size_t done = 0;
	uint64_t spins = 0;

	while (done < len) {
		ssize_t n = sending ? send(fd, buf + done, len - done, MSG_DONTWAIT | MSG_NOSIGNAL)
				    : recv(fd, buf + done, len - done, MSG_DONTWAIT);

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			return false;
		if ((++spins & 0xfff) == 0 && zd_perf_ticks() > deadline)
			return false;
	}
	return true;
}

struct tcp_pp {
	int fd;
	uint32_t size;
	uint64_t iters;
	bool ok;
};

static void *tcp_echo(void *arg)
{
	struct tcp_pp *pp = arg;
	uint8_t *buf = malloc(pp->size);

	pin_self(1);
	pp->ok = buf != NULL;
	for (uint64_t i = 0; pp->ok && i < pp->iters; i++)
		pp->ok = xfer_spin(pp->fd, buf, pp->size, false) &&
			 xfer_spin(pp->fd, buf, pp->size, true);
	free(buf);
	return NULL;
}

static void run_tcp_pingpong(void)
{
	struct zd_perf_opts o = { .kind = ZD_PERF_LAT };
	bool first = true;

	section("Loopback TCP ping-pong, one-way (TCP_NODELAY, busy-polling, CPU 0 <-> CPU 1)", &o);
	json_section("tcp_pingpong");
	for (uint32_t size = 8; size <= (2u << 20); size <<= 3) {
		uint64_t n = size <= 4096 ? (quick ? 2000 : 20000) : size <= 262144 ?
			(quick ? 200 : 2000) : (quick ? 50 : 300);
		uint64_t warm = n / 10 + 1;
		uint64_t *t = alloc_u64(n + 1), *d = alloc_u64(n);
		uint8_t *buf = calloc(1, size);
		struct tcp_pp pp = { .size = size, .iters = warm + n };
		int fds[2];
		pthread_t thr;

		if (!buf)
			zd_perf_die("out of memory");
		tcp_pair(fds, true);
		pp.fd = fds[1];
		spawn(&thr, tcp_echo, &pp);
		pin_self(0);
		for (uint64_t i = 0; i < warm + n; i++) {
			if (i >= warm)
				t[i - warm] = zd_perf_ticks();
			if (!xfer_spin(fds[0], buf, size, true) || !xfer_spin(fds[0], buf, size, false))
				zd_perf_die("loopback TCP ping-pong of %" PRIu32 " bytes failed", size);
		}
		t[n] = zd_perf_ticks();
		pthread_join(thr, NULL);
		close(fds[0]);
		close(fds[1]);
		if (!pp.ok)
			zd_perf_die("loopback TCP echo of %" PRIu32 " bytes failed", size);
		for (uint64_t i = 0; i < n; i++)
			d[i] = t[i + 1] - t[i];

		struct zd_perf_lat_result r = { .size = size, .iters = n };

		zd_perf_lat_stats(d, n, 2.0, &r);
		zd_perf_print_lat(&o, &r);
		json_lat(&r, first);
		first = false;
		free(t);
		free(d);
		free(buf);
	}
	json_end_section();
}

struct tcp_stream {
	int fd;
	uint32_t size;
	double seconds;
	uint64_t sends;
	bool ok;
};

static void *tcp_sender(void *arg)
{
	struct tcp_stream *s = arg;
	uint8_t *buf = calloc(1, s->size);
	uint64_t end = zd_perf_ticks() + zd_perf_usec_to_ticks(s->seconds * 1e6);

	pin_self(1);
	s->ok = buf != NULL;
	while (s->ok && zd_perf_ticks() < end) {
		size_t done = 0;

		while (s->ok && done < s->size) {
			ssize_t n = send(s->fd, buf + done, s->size - done, MSG_NOSIGNAL);

			s->ok = n > 0;
			done += n > 0 ? (size_t)n : 0;
		}
		s->sends++;
	}
	shutdown(s->fd, SHUT_WR);
	free(buf);
	return NULL;
}

static void run_tcp_stream(void)
{
	struct zd_perf_opts o = { .kind = ZD_PERF_BW };
	const uint32_t rbuf_len = 1u << 20;
	uint8_t *rbuf = malloc(rbuf_len);
	bool first = true;

	if (!rbuf)
		zd_perf_die("out of memory");
	section("Loopback TCP stream (blocking send of #bytes per call, CPU 1 -> CPU 0)", &o);
	json_section("tcp_stream");
	for (uint32_t size = 4096; size <= (1u << 20); size <<= 4) {
		struct tcp_stream s = { .size = size, .seconds = quick ? 0.2 : 1.0 };
		uint64_t bytes = 0, t_first = 0, t_last = 0, slice_t = 0, slice_b = 0;
		uint64_t slice = zd_perf_usec_to_ticks(20000);     /* 20 ms peak windows */
		double peak = 0;
		int fds[2];
		pthread_t thr;

		tcp_pair(fds, false);
		s.fd = fds[1];
		pin_self(0);
		spawn(&thr, tcp_sender, &s);
		for (;;) {
			ssize_t n = recv(fds[0], rbuf, rbuf_len, 0);
			uint64_t now = zd_perf_ticks();

			if (n <= 0)
				break;          /* EOF after shutdown, or SO_RCVTIMEO */
			if (!t_first)
				t_first = slice_t = now;
			bytes += (uint64_t)n;
			t_last = now;
			slice_b += (uint64_t)n;
			if (now - slice_t >= slice) {
				double bw = (double)slice_b / ticks_to_sec(now - slice_t) / 1048576.0;

				peak = bw > peak ? bw : peak;
				slice_t = now;
				slice_b = 0;
			}
		}
		pthread_join(thr, NULL);
		close(fds[0]);
		close(fds[1]);
		if (!s.ok || !bytes || t_last <= t_first)
			zd_perf_die("loopback TCP stream of %" PRIu32 "-byte sends failed", size);

		double sec = ticks_to_sec(t_last - t_first);
		struct zd_perf_bw_result r = {
			.size = size,
			.iters = s.sends,
			.bw_avg = (double)bytes / sec / 1048576.0,
			.msg_rate = (double)s.sends / (sec * 1e6),
		};
		r.bw_peak = peak > r.bw_avg ? peak : r.bw_avg;
		zd_perf_print_bw(&o, &r);
		json_bw(&r, first);
		first = false;
	}
	json_end_section();
	free(rbuf);
}

/* ---- main ------------------------------------------------------------------ */

static _Noreturn void usage(FILE *out, int status)
{
	fprintf(out,
"Usage: zd_floor [--quick] [--json=<file>]\n"
"  This machine's limits, in the benchmarks' columns: cache-line ping-pong\n"
"  between CPUs 0 and 1, single-core memcpy bandwidth (8 B..8 MiB), loopback\n"
"  TCP ping-pong latency and stream bandwidth.\n"
"  -q, --quick        fewer repetitions (a smoke test, not a measurement)\n"
"      --json=<file>  also write the results to <file> as JSON\n"
"  -h, --help         this text\n");
	exit(status);
}

int main(int argc, char **argv)
{
	static const struct option longs[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "json", required_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *json_path = NULL;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "qh", longs, NULL)) != -1) {
		switch (c) {
		case 'q': quick = true; break;
		case 'j': json_path = optarg; break;
		case 'h': usage(stdout, 0);
		default:
			fprintf(stderr, "zd_floor: bad option '%s'\n\n", argv[optind - 1]);
			usage(stderr, 2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "zd_floor: unexpected argument '%s'\n\n", argv[optind]);
		usage(stderr, 2);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	zd_perf_clock_init();
	ncpus = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	if (json_path && !(json = fopen(json_path, "w")))
		zd_perf_die("cannot write %s: %s", json_path, strerror(errno));
	if (json)
		fprintf(json, "{\n  \"tool\": \"zd_floor\",\n  \"cpus\": %u,\n  \"quick\": %s,\n"
			"  \"clock\": \"%s\",\n  \"ticks_per_usec\": %.3f,\n", ncpus,
			quick ? "true" : "false", zd_perf_use_tsc ? "tsc" : "clock_gettime",
			zd_perf_ticks_per_usec);

	printf(RESULT_LINE "                    zd_floor: this machine's limits\n");
	printf(" CPUs            : %u online, threads pinned to CPUs 0 and 1\n", ncpus);
	printf(" Clock           : %s, %.1f MHz\n",
	       zd_perf_use_tsc ? "TSC (constant, nonstop)" : "clock_gettime(CLOCK_MONOTONIC_RAW)",
	       zd_perf_use_tsc ? zd_perf_ticks_per_usec : 1000.0);
	printf(" Repetitions     : %s\n", quick ? "quick (smoke test, not a measurement)" : "full");
	if (ncpus < 2)
		printf(" WARNING: one CPU: ping-pong numbers measure the scheduler, not the cache\n");

	run_cacheline();
	run_memcpy();
	run_tcp_pingpong();
	run_tcp_stream();
	printf(RESULT_LINE);
	if (!pinned)
		printf(" WARNING: could not pin every thread to its CPU\n");
	if (json) {
		fprintf(json, "  \"pinned\": %s\n}\n", pinned ? "true" : "false");
		if (fclose(json) != 0)
			zd_perf_die("writing %s: %s", json_path, strerror(errno));
	}
	return 0;
}
