/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * zd_perf: the shared half of the perftest-style benchmarks
 * (zd_{write,read,send}_{lat,bw}, zd_write_imm_lat, zd_atomic_lat,
 * zd_eager_ring). Options, clock, statistics and printing in zd_perf.c; DAT
 * setup, connection, the control channel and teardown in zd_perf_dat.c; the
 * measured loops in zd_perf_lat.c, zd_perf_bw.c and zd_perf_eager.c.
 *
 * Written only against the DAT 2.0 API (libdat2), so the same binaries run
 * over any DAT provider: nothing here includes a zdapl header. zdapl's
 * registered pool is found at run time with dlsym (--mem pool; the default
 * is the consumer's own memory, --mem malloc). The two
 * extension benchmarks use the IB extension API (dat_ib_extensions.h,
 * through libdat2's dat_extension_op) and skip where the provider does not
 * advertise the operation.
 */
#ifndef ZD_PERF_H
#define ZD_PERF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <netinet/in.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>

#define ZD_PERF_DEF_PORT      18515
#define ZD_PERF_DEF_IA        "zdapl-shm"
#define ZD_PERF_MIN_SIZE_ALL  2u
#define ZD_PERF_MAX_SIZE      (8u << 20)     /* perftest's -a goes to 2^23 */
#define ZD_PERF_LAT_TAIL      2              /* perftest drops the 2 worst samples */
#define ZD_PERF_MAX_SAMPLES   (10u * 1000 * 1000) /* per-message timestamps kept up to this */
#define ZD_PERF_EXIT_SKIP     77             /* meson/automake "skipped" */

/* WRITE_IMM and ATOMIC exist as latency tests only (perftest's
 * ib_write_lat --write_with_imm and ib_atomic_lat). EAGER is zd_eager_ring,
 * an MPI-style eager ring of RDMA writes: its LAT kind is the ping-pong
 * (--mode pingpong), its BW kind the credited stream (--mode stream). */
enum zd_perf_verb { ZD_PERF_SEND, ZD_PERF_WRITE, ZD_PERF_READ, ZD_PERF_WRITE_IMM,
		    ZD_PERF_ATOMIC, ZD_PERF_EAGER };
#define ZD_PERF_VERB_LAST ZD_PERF_EAGER
enum zd_perf_atomic { ZD_PERF_FETCH_AND_ADD, ZD_PERF_CMP_AND_SWAP };
enum zd_perf_kind { ZD_PERF_LAT, ZD_PERF_BW };
/* --mem. malloc (0, the default) is what consumers register: page-aligned
 * heap memory from posix_memalign, as valloc gives; pool is zdapl's own
 * registered pool (zdapl_mem_alloc), found with dlsym. */
enum zd_perf_mem { ZD_PERF_MEM_MALLOC, ZD_PERF_MEM_POOL, ZD_PERF_MEM_HUGEPAGE };

/* Command line. The client's values rule: it sends them to the server in
 * the connection request, and the server runs the same schedule. */
struct zd_perf_opts {
	enum zd_perf_verb verb;
	enum zd_perf_kind kind;
	const char *prog;
	const char *server_host;        /* NULL: this side is the server */
	const char *ia_name;
	uint64_t port;                  /* DAT connection qualifier */
	bool port_given;
	uint32_t size;
	uint32_t max_size;              /* -a: last size */
	bool all_sizes;
	uint64_t iters;
	unsigned duration_s;            /* 0: iteration mode */
	unsigned tx_depth;
	unsigned rx_depth;
	unsigned cq_mod;                /* bw: one signalled completion per cq_mod posts */
	bool report_gbits;
	bool loopback;
	bool quiet;                     /* loopback server: results come from the client */
	const char *json_path;
	enum zd_perf_mem mem;
	unsigned timeout_s;             /* connect / peer progress timeout */
	bool timeout_given;
	enum zd_perf_atomic atomic;     /* -A */
	unsigned slots;                 /* zd_eager_ring --slots: ring slots per side */
	unsigned evd_every;             /* zd_eager_ring --evd-every: EVD polls per spins */
};

/* zd_eager_ring: the default sweep, and a slot's bytes for a payload of
 * @size: the payload ends at the 8-byte header word closing the slot. */
#define ZD_PERF_EAGER_MIN_SIZE  8u
#define ZD_PERF_EAGER_MAX_SIZE  (64u << 10)
#define ZD_PERF_EAGER_DEF_SLOTS 64u
#define ZD_PERF_EAGER_HDR_BYTES 8u
#define ZD_PERF_EAGER_MAX_RING  (256u << 20)  /* slots x slot bytes */

static inline uint64_t zd_perf_eager_slot_bytes(uint64_t size)
{
	return (size + ZD_PERF_EAGER_HDR_BYTES + 63) & ~UINT64_C(63);
}

/* The stream's completion moderation: one signalled write in at most half
 * the ring, so that a staging slot is always known free again in time. */
static inline unsigned zd_perf_eager_cq(const struct zd_perf_opts *o)
{
	unsigned half = o->slots / 2 ? o->slots / 2 : 1;

	return o->cq_mod < half ? o->cq_mod : half;
}

/* zd_atomic_lat: the server's word (its recv area's first 8 bytes) starts
 * at this value and every operation of the client moves it up by one: a
 * fetch-and-add of 1, or a compare-and-swap from the value it must hold to
 * the next.  The low half carries into the high one after 16 operations,
 * so a 32-bit or byte-swapped atomic cannot pass for a 64-bit one. */
#define ZD_PERF_ATOMIC_SEED UINT64_C(0x01234567fffffff0)

/* Both sides' buffers: [recv area | send area | control lines], one LMR. */
#define ZD_PERF_CTRL_BYTES 4096
struct zd_perf_ctrl {
	/* Written by the peer (RDMA write), read here by polling. */
	volatile uint64_t in_sync __attribute__((aligned(64)));
	volatile uint64_t in_credit __attribute__((aligned(64)));
	volatile uint64_t in_count __attribute__((aligned(64)));
	/* Local sources of the 8-byte RDMA writes to the peer's in_* words. */
	uint64_t out_sync __attribute__((aligned(64)));
	uint64_t out_credit __attribute__((aligned(64)));
	uint64_t out_count __attribute__((aligned(64)));
};

/* What one side tells the other in the connection's private data (48 bytes
 * fit every DAT provider: dtest uses 48). Little-endian on the wire. */
#define ZD_PERF_WIRE_MAGIC   0x4650445au   /* "ZDPF" */
#define ZD_PERF_WIRE_VERSION 1
#define ZD_PERF_WIRE_ALL      0x1
#define ZD_PERF_WIRE_DURATION 0x2
#define ZD_PERF_WIRE_CMP_AND_SWAP 0x4   /* zd_atomic_lat -A CMP_AND_SWAP */
struct zd_perf_wire {
	uint32_t magic;
	uint8_t version;
	uint8_t test;                   /* verb << 1 | kind: both run the same test */
	uint8_t flags;
	uint8_t reserved;
	uint32_t size;                  /* -s, or the last size with -a */
	uint32_t duration_s;
	uint32_t tx_depth;
	uint32_t rx_depth;              /* send tests: recvs the receiver keeps posted;
					 * zd_eager_ring: its ring slots */
	uint64_t iters;
	uint64_t addr;                  /* DAT_VADDR of the buffer */
	uint32_t rkey;                  /* DAT_RMR_CONTEXT */
	uint32_t buf_len_kib;           /* buffer length / 1024 */
};
_Static_assert(sizeof(struct zd_perf_wire) == 48, "the wire is 48 bytes, no padding");
_Static_assert(sizeof(struct zd_perf_ctrl) <= ZD_PERF_CTRL_BYTES, "control lines fit");

/* What a --loopback server tells its parent once its PSP listens. */
struct zd_perf_ready {
	struct sockaddr_in addr;        /* its IA address */
	uint64_t port;                  /* the connection qualifier it listens on */
};

/* One connected endpoint and its registered buffer. */
struct zd_perf_conn {
	const struct zd_perf_opts *o;
	bool is_server;
	DAT_IA_HANDLE ia;
	DAT_PZ_HANDLE pz;
	DAT_EVD_HANDLE req_evd, recv_evd, conn_evd, cr_evd;
	DAT_EP_HANDLE ep;
	DAT_PSP_HANDLE psp;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lkey;
	DAT_RMR_CONTEXT rkey;
	uint8_t *buf;                   /* recv area at 0, send area at area_len */
	uint64_t buf_len;
	uint64_t area_len;
	struct zd_perf_ctrl *ctrl;      /* at 2 * area_len */
	enum zd_perf_mem mem_used;
	const char *mem_desc;
	bool suppress_ok;               /* provider takes DAT_COMPLETION_SUPPRESS_FLAG */
	/* The IB extension operations the provider advertises (DAT_EXTENSION_IB
	 * and its provider-specific attribute "TRUE"). */
	bool has_write_imm, has_fetch_add, has_cmp_swap;
	int max_rdma_read_out;
	uint64_t max_msg;               /* min(max_message_size, max_rdma_size) */
	struct sockaddr_in local_addr, remote_addr;
	struct zd_perf_wire peer;       /* decoded peer parameters */
	uint64_t peer_addr;             /* the peer's recv area; send area follows */
	uint64_t peer_area_len;
	uint64_t peer_ctrl;             /* address of the peer's struct zd_perf_ctrl */
	DAT_RMR_CONTEXT peer_rkey;
	void (*mem_free)(void *);       /* pool: zdapl_mem_free */
	uint64_t sync_token;
	uint64_t req_posted, req_done;  /* control writes in flight (sync/credit) */
	uint64_t data_done;             /* cookie of the newest data completion reaped */
};

/* A size's measurement, ready to print. */
struct zd_perf_lat_result {
	uint32_t size;
	uint64_t iters;
	double t_min, t_max, t_typical, t_avg, t_stdev, p99, p999;   /* usec */
	double tps;                     /* duration mode */
	bool duration;
};
struct zd_perf_bw_result {
	uint32_t size;
	uint64_t iters;
	double bw_peak, bw_avg, msg_rate;   /* in the report unit; Mpps */
};

/* ---- clock --------------------------------------------------------------- */
extern bool zd_perf_use_tsc;
extern double zd_perf_ticks_per_usec;
void zd_perf_clock_init(void);

static inline uint64_t zd_perf_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
	if (zd_perf_use_tsc)
		return __rdtsc();
#endif
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t zd_perf_usec_to_ticks(double us)
{
	return (uint64_t)(us * zd_perf_ticks_per_usec);
}

/* Writes one byte of every page of [@p, +@len) so that a timed loop
 * storing there takes no page fault. */
static inline void zd_perf_prefault(void *p, size_t len)
{
	for (size_t off = 0; off < len; off += 4096)
		((volatile char *)p)[off] = 0;
}

/* ---- common -------------------------------------------------------------- */
int zd_perf_main(int argc, char **argv, enum zd_perf_verb verb,
		 enum zd_perf_kind kind);
const char *zd_perf_verb_name(enum zd_perf_verb verb);
const char *zd_perf_test_name(enum zd_perf_verb verb, enum zd_perf_kind kind);
/* The name errors start with (zd_perf_main sets it; other tools call this). */
void zd_perf_set_prog(const char *prog);
_Noreturn void zd_perf_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A DAT call failed: DAT_NOT_IMPLEMENTED exits ZD_PERF_EXIT_SKIP, else 1. */
_Noreturn void zd_perf_dat_die(DAT_RETURN ret, const char *call);
/* Says why the run cannot happen here and exits ZD_PERF_EXIT_SKIP. */
_Noreturn void zd_perf_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *zd_perf_atomic_name(enum zd_perf_atomic a);
const char *zd_perf_dat_strerror(DAT_RETURN ret, char *buf, size_t len);

/* A non-negative integer with an optional k/m/g (binary) suffix; false
 * when @s is not one (or overflows). */
bool zd_perf_parse_num(const char *s, uint64_t *out);

/* The sizes a run covers, in order. */
unsigned zd_perf_sizes(const struct zd_perf_opts *o, uint32_t *sizes, unsigned cap);
void zd_perf_progress(const struct zd_perf_opts *o, uint32_t size, unsigned idx,
		      unsigned n, uint64_t t0);

void zd_perf_lat_stats(uint64_t *deltas, uint64_t n, double rtt_factor,
		       struct zd_perf_lat_result *r);
void zd_perf_print_header(const struct zd_perf_conn *c);
void zd_perf_print_columns(const struct zd_perf_opts *o);
void zd_perf_print_lat(const struct zd_perf_opts *o, const struct zd_perf_lat_result *r);
void zd_perf_print_bw(const struct zd_perf_opts *o, const struct zd_perf_bw_result *r);
void zd_perf_print_footer(void);

struct zd_perf_json;
struct zd_perf_json *zd_perf_json_open(const struct zd_perf_conn *c);
void zd_perf_json_lat(struct zd_perf_json *j, const struct zd_perf_lat_result *r);
void zd_perf_json_bw(struct zd_perf_json *j, const struct zd_perf_bw_result *r);
void zd_perf_json_close(struct zd_perf_json *j);

/* ---- DAT (zd_perf_dat.c) ------------------------------------------------- */
/* zdapl's registered pool (--mem pool), found with dlsym once dat_ia_open
 * has loaded the provider: false where it exports none (not zdapl). */
struct zd_perf_pool {
	void *(*alloc)(size_t);
	void *(*alloc_aligned)(size_t, size_t);
	void (*free)(void *);
};
bool zd_perf_pool_find(struct zd_perf_pool *pool);
/* @len bytes, page-aligned; NULL when the pool has none. */
void *zd_perf_pool_alloc(const struct zd_perf_pool *pool, uint64_t len);

void zd_perf_conn_open(struct zd_perf_conn *c, struct zd_perf_opts *o,
		       bool is_server, int ready_fd);
void zd_perf_conn_close(struct zd_perf_conn *c);
/* Both sides call with the same token sequence; returns once the peer got
 * there too (an 8-byte RDMA write each way). */
void zd_perf_sync(struct zd_perf_conn *c, unsigned limit_s);
/* The last synchronisation before hanging up: zd_perf_sync, then our own
 * token write is known to have landed at the peer. */
void zd_perf_sync_last(struct zd_perf_conn *c);
/* Non-blocking: one completion, checked (a failed one exits); returns its
 * cookie, or 0 if none (data cookies are 1-based; control-write completions
 * are counted in req_done and also return 0). A data cookie is also left in
 * data_done, so that a wait for a control write loses none. */
uint64_t zd_perf_poll_req(struct zd_perf_conn *c);
uint64_t zd_perf_poll_recv(struct zd_perf_conn *c, uint32_t *len);
/* zd_write_imm_lat: the receive a write with immediate data consumed
 * (a DAT_IB_DTO_EVENT of type DAT_IB_RDMA_WRITE_IMMED_DATA; anything else
 * exits); its length and immediate data. */
uint64_t zd_perf_poll_recv_imm(struct zd_perf_conn *c, uint32_t *len, uint32_t *imm);
/* One post (exits on failure: the loops never exceed the EP's depth);
 * cookie > 0; unsignalled posts use DAT_COMPLETION_SUPPRESS_FLAG. */
void zd_perf_post(struct zd_perf_conn *c, enum zd_perf_verb verb, uint32_t size,
		  uint64_t cookie, bool signalled);
/* An RDMA write of @len bytes from our buffer at @local_off to the peer's
 * at @peer_off (offsets from each buffer's start). */
void zd_perf_post_write_at(struct zd_perf_conn *c, uint64_t local_off, uint64_t peer_off,
			   uint32_t len, uint64_t cookie, bool signalled);
void zd_perf_post_recv(struct zd_perf_conn *c, uint64_t cookie);

/* An RDMA write's triplets, built once as perftest builds its work
 * requests once: our send area's first @size bytes into the peer's recv
 * area; each post of the bandwidth loop sets only the cookie and flags. */
struct zd_perf_write_wr {
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r;
	DAT_COMPLETION_FLAGS unsignalled;  /* SUPPRESS, or DEFAULT where not supported */
};
void zd_perf_write_wr_init(const struct zd_perf_conn *c, uint32_t size,
			   struct zd_perf_write_wr *wr);

static inline void zd_perf_post_write_wr(struct zd_perf_conn *c, struct zd_perf_write_wr *wr,
					 uint64_t cookie, bool signalled)
{
	DAT_DTO_COOKIE ck = { .as_64 = cookie };
	DAT_RETURN ret = dat_ep_post_rdma_write(c->ep, 1, &wr->l, ck, &wr->r,
						signalled ? DAT_COMPLETION_DEFAULT_FLAG
							  : wr->unsignalled);

	if (__builtin_expect(ret != DAT_SUCCESS, 0))
		zd_perf_dat_die(ret, "dat_ep_post_rdma_write");
}

/* Our send area's first @size bytes into the peer's recv area, with @imm. */
void zd_perf_post_write_imm(struct zd_perf_conn *c, uint32_t size, uint64_t cookie,
			    uint32_t imm);
/* One -A atomic on the peer's word (its recv area's first 8 bytes), the
 * earlier value into our send area's first 8 bytes: fetch-and-add of
 * @operand, or compare-and-swap of @operand for @swap. Signalled. */
void zd_perf_post_atomic(struct zd_perf_conn *c, uint64_t cookie, uint64_t operand,
			 uint64_t swap);
/* Tells the peer a count (zd_atomic_lat: the operations done, so that the
 * server can check its word); it lands before our next sync token. */
void zd_perf_post_count(struct zd_perf_conn *c, uint64_t count);
/* Send server: tells the client how many receives it has reposted. */
void zd_perf_post_credit(struct zd_perf_conn *c, uint64_t credit);

/* Bounded spinning: every loop that waits on the peer ticks a waiter, which
 * every 1024 spins checks the clock against `limit_s` (0: --timeout) and
 * the connection EVD for a peer that went away. Reset it on progress. */
struct zd_perf_waiter {
	uint64_t spins;
	uint64_t deadline;
	unsigned limit_s;
	const char *what;
};
void zd_perf_waiter_slow(struct zd_perf_conn *c, struct zd_perf_waiter *w);

static inline void zd_perf_waiter_init(struct zd_perf_waiter *w, unsigned limit_s,
				       const char *what)
{
	w->spins = 0;
	w->deadline = 0;
	w->limit_s = limit_s;
	w->what = what;
}

static inline void zd_perf_waiter_tick(struct zd_perf_conn *c, struct zd_perf_waiter *w)
{
	if ((++w->spins & 0x3ff) == 0)
		zd_perf_waiter_slow(c, w);
}

static inline void zd_perf_waiter_progress(struct zd_perf_waiter *w)
{
	w->deadline = 0;
}

/* How long a side may sit passively while the peer measures: the peer's
 * run has no a-priori bound in iteration mode, so this is generous; a peer
 * that dies is seen on the connection EVD long before. */
unsigned zd_perf_passive_limit(const struct zd_perf_conn *c);

/* ---- the measured loops -------------------------------------------------- */
void zd_perf_run_lat(struct zd_perf_conn *c, struct zd_perf_json *j);
void zd_perf_run_bw(struct zd_perf_conn *c, struct zd_perf_json *j);
void zd_perf_run_eager(struct zd_perf_conn *c, struct zd_perf_json *j);

#endif /* ZD_PERF_H */
