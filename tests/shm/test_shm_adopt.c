/*
 * Issue #13 through DAT, on the devices that adopt registered memory
 * (zdapl-shm; meson runs it again over zdapl-mlx5sim with ZD_TEST_IA):
 * two processes connected by the real connection manager (tests/cm
 * dat_peer.h), the target's buffer its own malloc'd or valloc'd memory.
 *  - RDMA write and read, sends, fetch-and-add into it, inside its whole
 *    pages (a peer's mapping of the adoption file) and across or inside
 *    its edge pages (cross-memory attach), every byte checked; the
 *    target's ZDAPL_MEM_REPORT line says "shared in place", the
 *    initiator maps a window of the target's adoption file;
 *  - an eager ring: slots the peer fills by RDMA write, each ending in an
 *    8-byte header whose last byte never changes, the owner polling the
 *    header and then checking the payload, credits back by RDMA write;
 *  - ZDAPL_MEM_ADOPT=0: the same on cross-memory attach;
 *  - a killed peer: no /dev/shm entry, nothing of the adoption files left
 *    mapped or open in the survivor once it closes;
 *  - dat_lmr_create and dat_lmr_free while threads hammer the pages;
 *    fork() children of a process holding an LMR;
 *  - memory unmapped while registered, mapped again and registered again.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <netinet/in.h>          /* before dat_ib_extensions.h */

#include "dat_peer.h"
#include <dat2/dat_ib_extensions.h>

#include "adopt_hammer_test.h"
#include "adopt_maps_test.h"

#define PG 4096u
#define PRIV_ATOMIC ((DAT_MEM_PRIV_FLAGS)(DAT_MEM_PRIV_ALL_FLAG | DAT_IB_MEM_PRIV_REMOTE_ATOMIC))

/* Memory a peer's buffer is: malloc'd, starting 200 bytes into a page
 * (edge pages at both ends), or valloc'd (whole pages only). */
enum { MALLOC = 0, VALLOC = 1 };

static void *adopt_alloc(int kind)
{
	uint8_t *raw, *buf;

	if (kind == VALLOC)
		return valloc(BUF);
	raw = malloc(BUF + 2 * PG);
	CHK(raw);
	buf = raw + (PG - (uintptr_t)raw % PG) % PG + 200;
	((void **)buf)[-1] = raw;       /* in the first edge page, outside the region */
	return buf;
}

static void adopt_free(void *buf, int kind)
{
	free(kind == VALLOC ? buf : ((void **)buf)[-1]);
}

static struct peer_dev dev = { .alloc = adopt_alloc, .free = adopt_free, .rkey_spoil = 0x5a5a00 };

static void setup(void)
{
	zd_test_use_conf();
	if (sysconf(_SC_PAGESIZE) != PG) {
		fprintf(stderr, "page size %ld: adoption works in 4 KiB pages only\n",
			sysconf(_SC_PAGESIZE));
		exit(77);
	}
	dev.ia = zd_test_ia("zdapl-shm");
}

TestSuite(shm_adopt, .init = setup, .timeout = 60);

static uint64_t load64(const volatile uint8_t *p)
{
	uint64_t v;

	memcpy(&v, (const void *)p, 8);
	return v;
}

static void store64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

/* ---- ZDAPL_MEM_REPORT, captured from stderr ---- */

struct capture {
	int saved, file;
};

static void capture_begin(struct capture *c)
{
	char path[] = "/tmp/zd-adopt-report-XXXXXX";

	fflush(stderr);
	c->file = mkstemp(path);
	CHK(c->file >= 0);
	unlink(path);
	c->saved = dup(2);
	CHK(c->saved >= 0 && dup2(c->file, 2) == 2);
}

/* Ends the capture: what was written (NUL-terminated, malloc'd), echoed
 * to the real stderr for the log. */
static char *capture_end(struct capture *c)
{
	off_t len;
	char *text;

	fflush(stderr);
	CHK(dup2(c->saved, 2) == 2);
	close(c->saved);
	len = lseek(c->file, 0, SEEK_END);
	CHK(len >= 0);
	text = calloc(1, (size_t)len + 1);
	CHK(text && pread(c->file, text, (size_t)len, 0) == len);
	close(c->file);
	fputs(text, stderr);
	return text;
}

/* The report's line for [buf, +len) says @path. */
static void report_says(const char *text, const void *buf, size_t len, const char *path)
{
	char line[64];
	const char *at;

	snprintf(line, sizeof(line), "zdapl: memory [%#llx, +%zu): ",
		 (unsigned long long)(uintptr_t)buf, len);
	at = strstr(text, line);
	if (!at || strncmp(at + strlen(line), path, strlen(path)) != 0)
		fprintf(stderr, "no \"%s%s\" in the report:\n%s\n", line, path, text);
	CHK(at && strncmp(at + strlen(line), path, strlen(path)) == 0);
}

/* Server: server_start_with (all rights, atomics too) with the report on
 * (set before the client forks: it reports too), checking what the
 * target's registration reports (the client forked first: its own
 * report, maybe of the same address, stays out of the capture). */
static void server_start_reported(struct peer *p, int kind, int (*fn)(int, void *), void *arg,
				  const char *path)
{
	struct capture c;
	char *text;
	int fd;
	pid_t pid;

	setenv("ZDAPL_MEM_REPORT", "1", 1);
	pid = spawn(fn, arg, &fd);
	capture_begin(&c);
	peer_open(p, &dev, kind, PRIV_ATOMIC);
	text = capture_end(&c);
	p->fd = fd;
	p->pid = pid;
	peer_ep(p, &p->ep, 0);
	report_says(text, p->buf, BUF, path);
	free(text);
}

/* ---- RDMA, sends and atomics into whole and edge pages ---- */

/*
 * Offsets in the target's buffer, from its whole pages [ilo, ihi) (of the
 * registered range; malloc: 3896 and 65336, valloc: 0 and BUF).
 */
struct layout {
	size_t ilo, ihi;
	size_t w_fast, w_edge, w_tail, w_small;     /* RDMA writes */
	size_t recv_edge, recv_fast;                /* receives */
	size_t last_boundary;                       /* a page boundary near the end */
	size_t a_fast, a_head, a_tail;              /* fetch-and-add words */
};

enum { W_FAST_LEN = 3000, W_EDGE_LEN = 600, W_TAIL_LEN = 80, SEND_EDGE_LEN = 400,
       SEND_FAST_LEN = 1000 };

static struct layout layout_of(uint64_t addr)
{
	struct layout l;

	l.ilo = (size_t)(((addr + PG - 1) & ~(uint64_t)(PG - 1)) - addr);
	l.ihi = (size_t)(((addr + BUF) & ~(uint64_t)(PG - 1)) - addr);
	/* across the first page boundary of the region (malloc: an edge) */
	l.w_edge = (l.ilo ? l.ilo : PG) - 300;
	l.w_fast = l.ilo + 16000;
	l.w_small = l.ilo + 30000;
	l.w_tail = BUF - 8 - W_TAIL_LEN;              /* in the last page */
	/* across the last whole page's end (malloc: into the edge) */
	l.last_boundary = l.ihi < BUF ? l.ihi : BUF - PG;
	l.recv_edge = l.last_boundary - 300;
	l.recv_fast = l.ilo + 50000;
	l.a_fast = l.ilo + 60000;
	l.a_head = 64;                                /* the first page */
	l.a_tail = BUF - 8;                           /* the last word */
	return l;
}

/* What the target holds before the client's DTOs: pattern 9 and three
 * counters. */
static void initial_image(uint8_t *img, const struct layout *l)
{
	fill(img, BUF, 9);
	store64(img + l->a_fast, 1000);
	store64(img + l->a_head, 2000);
	store64(img + l->a_tail, 3000);
}

/* ... after the client's RDMA writes ... */
static void written_image(uint8_t *img, const struct layout *l)
{
	initial_image(img, l);
	fill(img + l->w_fast, W_FAST_LEN, 5);
	fill(img + l->w_edge, W_EDGE_LEN, 6);
	fill(img + l->w_tail, W_TAIL_LEN, 7);
	fill(img + l->w_small, 8, 8);
}

/* ... and at the end: both messages too, each counter + 2 x 5. */
static void final_image(uint8_t *img, const struct layout *l)
{
	written_image(img, l);
	fill(img + l->recv_edge, SEND_EDGE_LEN, 11);
	fill(img + l->recv_fast, SEND_FAST_LEN, 12);
	store64(img + l->a_fast, 1010);
	store64(img + l->a_head, 2010);
	store64(img + l->a_tail, 3010);
}

/* Waits for the next completion on @evd: a DTO or an extension's. */
static int any_wait(DAT_EVD_HANDLE evd, uint64_t cookie)
{
	DAT_EVENT ev;
	DAT_EVENT_NUMBER n = wait_ev(evd, 10 * SEC, &ev);

	CHK(n == DAT_DTO_COMPLETION_EVENT || n == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	CHK(ev.event_data.dto_completion_event_data.user_cookie.as_64 == cookie);
	return ev.event_data.dto_completion_event_data.status;
}

struct job {
	int kind;
	int adopted;            /* adoption is on: the initiator must map a window */
};

static void client_write(struct peer *p, const DAT_RMR_TRIPLET *r, size_t off, size_t loff,
			 size_t len, uint8_t seed, uint64_t cookie)
{
	DAT_RMR_TRIPLET t = *r;
	DAT_LMR_TRIPLET iov = seg(p, loff, len);

	fill(p->buf + loff, len, seed);
	t.virtual_address += off;
	t.segment_length = len;
	post_write(p->ep, 1, &iov, cookie, &t);
	CHK(dto_wait(p->req, 10 * SEC, cookie, NULL) == DAT_DTO_SUCCESS);
}

/* Reads [off, off + len) of the target and compares with @img. */
static void client_read(struct peer *p, const DAT_RMR_TRIPLET *r, const uint8_t *img, size_t off,
			size_t len, uint64_t cookie)
{
	DAT_RMR_TRIPLET t = *r;
	DAT_LMR_TRIPLET iov = seg(p, 20000, len);

	memset(p->buf + 20000, 0, len);
	t.virtual_address += off;
	t.segment_length = len;
	post_read(p->ep, 1, &iov, cookie, &t);
	CHK(dto_wait(p->req, 10 * SEC, cookie, NULL) == DAT_DTO_SUCCESS);
	for (size_t i = 0; i < len; i++)
		if (p->buf[20000 + i] != img[off + i]) {
			fprintf(stderr, "read at %zu + %zu: %#x, expected %#x\n", off, i,
				p->buf[20000 + i], img[off + i]);
			CHK(p->buf[20000 + i] == img[off + i]);
		}
}

static void client_faa(struct peer *p, const DAT_RMR_TRIPLET *r, size_t off, uint64_t want_old,
		       uint64_t cookie)
{
	DAT_RMR_TRIPLET t = *r;
	DAT_LMR_TRIPLET l = seg(p, 30000, 8);

	store64(p->buf + 30000, 0xdeadbeef);
	t.virtual_address += off;
	t.segment_length = 8;
	CHK_RET(dat_ib_post_fetch_and_add(p->ep, 5, &l, (DAT_DTO_COOKIE){ .as_64 = cookie }, &t,
					  DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(any_wait(p->req, cookie) == DAT_DTO_SUCCESS);
	CHK(load64(p->buf + 30000) == want_old);
}

static int c_dtos(int fd, void *arg)
{
	const struct job *j = arg;
	static uint8_t img[BUF];
	struct peer p;
	DAT_RMR_TRIPLET r;
	struct layout l;
	struct adopt_count maps;

	client_open(&p, &dev, j->kind, fd, NULL);
	r = recv_region(fd);
	l = layout_of(r.virtual_address);
	initial_image(img, &l);
	/* writes: inside whole pages, across the first boundary, into the
	 * last page, and 8 bytes */
	client_write(&p, &r, l.w_fast, 0, W_FAST_LEN, 5, 1);
	client_write(&p, &r, l.w_edge, 4000, W_EDGE_LEN, 6, 2);
	client_write(&p, &r, l.w_tail, 5000, W_TAIL_LEN, 7, 3);
	client_write(&p, &r, l.w_small, 6000, 8, 8, 4);
	written_image(img, &l);
	/* reads of the same kinds */
	client_read(&p, &r, img, l.w_fast - 500, W_FAST_LEN + 1000, 10);
	client_read(&p, &r, img, l.w_edge - 100, W_EDGE_LEN + 200, 11);
	client_read(&p, &r, img, l.ilo + 40000, 8000, 12);
	client_read(&p, &r, img, BUF - 3000, 2990, 13);
	/* sends into a receive across the first boundary and one inside */
	fill(p.buf + 40000, SEND_EDGE_LEN, 11);
	send_wait(&p, p.ep, 40000, SEND_EDGE_LEN, 20);
	fill(p.buf + 41000, SEND_FAST_LEN, 12);
	send_wait(&p, p.ep, 41000, SEND_FAST_LEN, 21);
	/* fetch-and-add: a word in a whole page, in the first page, the last */
	client_faa(&p, &r, l.a_fast, 1000, 30);
	client_faa(&p, &r, l.a_fast, 1005, 31);
	client_faa(&p, &r, l.a_head, 2000, 32);
	client_faa(&p, &r, l.a_head, 2005, 33);
	client_faa(&p, &r, l.a_tail, 3000, 34);
	client_faa(&p, &r, l.a_tail, 3005, 35);
	/* and read the counters and messages back */
	final_image(img, &l);
	client_read(&p, &r, img, l.recv_edge - 8, SEND_EDGE_LEN + 16, 43);
	client_read(&p, &r, img, l.recv_fast, SEND_FAST_LEN, 44);
	client_read(&p, &r, img, l.a_fast, 8, 40);
	client_read(&p, &r, img, 0, 200, 41);
	client_read(&p, &r, img, BUF - 8, 8, 42);
	/* The fast path: we map a window of the target's adoption file. */
	maps = adopt_mappings();
	fprintf(stderr, "client: %u adopted pieces, %u windows of a peer's adoption file\n",
		maps.own, maps.elsewhere);
	CHK(j->adopted ? maps.elsewhere > 0 : maps.elsewhere == 0 && maps.own == 0);
	msg_send(fd, 1);
	return client_done(&p);
}

static void dtos_case(int kind, int adopted)
{
	struct job j = { .kind = kind, .adopted = adopted };
	static uint8_t img[BUF];
	struct peer p;
	struct layout l;
	DAT_LMR_TRIPLET rx;

	server_start_reported(&p, kind, c_dtos, &j, adopted ? "shared in place" : "cross-memory attach");
	l = layout_of((uintptr_t)p.buf);
	if (adopted)
		CHK(pages_are(p.buf + l.ilo, l.ihi - l.ilo, PB_ADOPTED));
	else
		CHK(pages_are(p.buf + l.ilo, l.ihi - l.ilo, PB_PRIVATE));
	if (kind == MALLOC)
		CHK(l.ilo == PG - 200 && page_backing(p.buf) == PB_PRIVATE &&
		    page_backing(p.buf + BUF - 1) == PB_PRIVATE);
	initial_image(p.buf, &l);
	rx = seg(&p, l.recv_edge, SEND_EDGE_LEN);
	post_recv(p.ep, 1, &rx, 1);
	rx = seg(&p, l.recv_fast, SEND_FAST_LEN);
	post_recv(p.ep, 1, &rx, 2);
	server_up(&p);
	send_region(&p, p.fd);
	CHK(dto_wait(p.rcv, 20 * SEC, 1, NULL) == DAT_DTO_SUCCESS);
	CHK(dto_wait(p.rcv, 20 * SEC, 2, NULL) == DAT_DTO_SUCCESS);
	msg_recv(p.fd, 20000);
	final_image(img, &l);
	for (size_t i = 0; i < BUF; i++)
		if (p.buf[i] != img[i]) {
			fprintf(stderr, "target byte %zu: %#x, expected %#x\n", i, p.buf[i], img[i]);
			CHK(p.buf[i] == img[i]);
		}
	server_done(&p);
}

Test(shm_adopt, dtos_into_malloc) { dtos_case(MALLOC, 1); }
Test(shm_adopt, dtos_into_valloc) { dtos_case(VALLOC, 1); }

/* ZDAPL_MEM_ADOPT=0 in this fresh test process (before any IA opens) and
 * its client: the same, by cross-memory attach, nothing adopted. */
Test(shm_adopt, dtos_with_adoption_off)
{
	setenv("ZDAPL_MEM_ADOPT", "0", 1);
	dtos_case(MALLOC, 0);
	CHK(adopt_mappings().own == 0 && adopt_mappings().elsewhere == 0);
}

/* ZDAPL_MEM_REPORT=1: a line per registration, and at exit how many took
 * each path (a process that registers a buffer with whole pages and one
 * without, then exits). */
Test(shm_adopt, report_at_exit)
{
	char path[] = "/tmp/zd-adopt-exit-XXXXXX";
	int fd = mkstemp(path), st;
	unsigned long long shared = 0, pool = 0, xma = 0;
	char text[4096] = "";
	const char *sum;
	pid_t pid;

	CHK(fd >= 0);
	unlink(path);
	pid = fork();
	CHK(pid >= 0);
	if (pid == 0) {
		struct node n;
		uint8_t *big = adopt_alloc(MALLOC), *small = malloc(100);
		DAT_REGION_DESCRIPTION rd;
		DAT_LMR_HANDLE lmr;
		DAT_LMR_CONTEXT lkey;
		DAT_RMR_CONTEXT rkey;
		DAT_VLEN rlen;
		DAT_VADDR raddr;

		cm_in_child = 1;
		setenv("ZDAPL_MEM_REPORT", "1", 1);
		dup2(fd, 2);
		node_open_on(&n, dev.ia);
		rd.for_va = big;
		CHK_RET(dat_lmr_create(n.ia, DAT_MEM_TYPE_VIRTUAL, rd, BUF, n.pz,
				       DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lkey, &rkey,
				       &rlen, &raddr),
			DAT_SUCCESS);
		rd.for_va = small;
		CHK_RET(dat_lmr_create(n.ia, DAT_MEM_TYPE_VIRTUAL, rd, 100, n.pz,
				       DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lkey, &rkey,
				       &rlen, &raddr),
			DAT_SUCCESS);
		node_close(&n);
		adopt_free(big, MALLOC);
		free(small);
		exit(0);   /* atexit handlers run */
	}
	CHK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHK(pread(fd, text, sizeof(text) - 1, 0) > 0);
	close(fd);
	fputs(text, stderr);
	CHK(strstr(text, "): shared in place") != NULL);
	CHK(strstr(text, "): cross-memory attach: ") != NULL);
	sum = strstr(text, "zdapl: registrations: ");
	CHK(sum);
	CHK(sscanf(sum, "zdapl: registrations: %llu shared in place, %llu pool, %llu cross-memory attach",
		   &shared, &pool, &xma) == 3);
	CHK(shared >= 1 && xma >= 1);
}

/* ---- an eager ring ---- */

/*
 * The owner (server) registers a valloc'd ring of RING_SLOTS slots of
 * SLOT bytes (the last page partial: slots there go by cross-memory
 * attach; some slots straddle page boundaries).  The client writes
 * message n into slot n % RING_SLOTS, ending at the slot's end: a payload
 * of varying length, then an 8-byte header n | 0xa5 << 56 (its last byte
 * the same in every message).  The owner polls the header, then checks
 * the payload, and returns credits every CREDIT_EVERY messages by RDMA
 * write into the client's buffer.
 */
enum { SLOT = 1000, RING_SLOTS = 16, RING_LEN = SLOT * RING_SLOTS, MESSAGES = 3000,
       CREDIT_EVERY = 4 };

static uint64_t header_of(uint32_t n)
{
	return (uint64_t)n | 0xa5ull << 56;
}

static size_t payload_len(uint32_t n)
{
	return (n * 37u) % (SLOT - 8);
}

static uint8_t payload_byte(uint32_t n, size_t i)
{
	return (uint8_t)(n * 13u + i * 7u + 1);
}

static int c_ring(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET ring;
	uint32_t lo, hi;
	volatile uint8_t *credit;

	(void)arg;
	client_open(&p, &dev, MALLOC, fd, NULL);
	send_region(&p, fd);            /* where the owner writes credits */
	ring.rmr_context = msg_recv(fd, 10000);
	lo = msg_recv(fd, 10000);
	hi = msg_recv(fd, 10000);
	ring.virtual_address = (DAT_VADDR)lo | (DAT_VADDR)hi << 32;
	credit = p.buf;
	for (uint32_t n = 0; n < MESSAGES; n++) {
		size_t plen = payload_len(n), len = plen + 8;
		size_t slot_end = (size_t)(n % RING_SLOTS + 1) * SLOT;
		uint8_t *msg = p.buf + 8192;
		DAT_RMR_TRIPLET t = ring;
		DAT_LMR_TRIPLET iov = seg(&p, 8192, len);
		uint64_t until = now_ms() + 10000;

		while (n - load64(credit) >= RING_SLOTS)
			CHK(now_ms() < until);
		for (size_t i = 0; i < plen; i++)
			msg[i] = payload_byte(n, i);
		store64(msg + plen, header_of(n));
		t.virtual_address += slot_end - len;
		t.segment_length = len;
		post_write(p.ep, 1, &iov, n, &t);
		CHK(dto_wait(p.req, 10 * SEC, n, NULL) == DAT_DTO_SUCCESS);
	}
	msg_send(fd, 1);
	return client_done(&p);
}

Test(shm_adopt, eager_ring)
{
	struct peer p;
	DAT_RMR_TRIPLET credit;
	DAT_REGION_DESCRIPTION rd;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lkey;
	DAT_RMR_CONTEXT rkey;
	DAT_VLEN rlen;
	DAT_VADDR raddr;
	uint8_t *ring = valloc(4 * PG);
	struct capture c;
	char *text;
	unsigned late = 0;

	CHK(ring);
	memset(ring, 0, 4 * PG);
	server_start_reported(&p, MALLOC, c_ring, NULL, "shared in place");
	capture_begin(&c);
	rd.for_va = ring;
	CHK_RET(dat_lmr_create(p.n.ia, DAT_MEM_TYPE_VIRTUAL, rd, RING_LEN, p.n.pz,
			       DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lkey, &rkey, &rlen, &raddr),
		DAT_SUCCESS);
	text = capture_end(&c);
	report_says(text, ring, RING_LEN, "shared in place");
	free(text);
	CHK(pages_are(ring, 3 * PG, PB_ADOPTED) && page_backing(ring + 3 * PG) == PB_PRIVATE);
	server_up(&p);
	credit = recv_region(p.fd);
	credit.segment_length = 8;
	msg_send(p.fd, rkey);
	msg_send(p.fd, (uint32_t)(uintptr_t)ring);
	msg_send(p.fd, (uint32_t)((uint64_t)(uintptr_t)ring >> 32));
	for (uint32_t n = 0; n < MESSAGES; n++) {
		size_t plen = payload_len(n);
		const volatile uint8_t *end = ring + (size_t)(n % RING_SLOTS + 1) * SLOT;
		uint64_t until = now_ms() + 10000;

		for (unsigned spin = 0; load64(end - 8) != header_of(n); spin++)
			if (spin % 4096 == 4095)
				CHK(now_ms() < until);
		for (size_t i = 0; i < plen; i++) {
			uint8_t got = end[-8 - (ptrdiff_t)plen + (ptrdiff_t)i];

			if (got != payload_byte(n, i)) {
				/* the header was visible before this byte */
				fprintf(stderr, "message %u (%zu bytes, slot %u): byte %zu is %#x, "
					"expected %#x\n", n, plen + 8, n % RING_SLOTS, i, got,
					payload_byte(n, i));
				late++;
				break;
			}
		}
		if ((n + 1) % CREDIT_EVERY == 0) {
			DAT_LMR_TRIPLET iov = seg(&p, 0, 8);

			store64(p.buf, n + 1);
			post_write(p.ep, 1, &iov, n, &credit);
			CHK(dto_wait(p.req, 10 * SEC, n, NULL) == DAT_DTO_SUCCESS);
		}
	}
	CHK(late == 0);
	msg_recv(p.fd, 20000);
	CHK_RET(dat_lmr_free(lmr), DAT_SUCCESS);
	CHK(pages_are(ring, 4 * PG, PB_PRIVATE));
	server_done(&p);
	free(ring);
}

/* ---- a killed peer ---- */

/* The names in /dev/shm, but Criterion's own (bxfi_*), one a line. */
static char *dev_shm_names(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	size_t cap = 4096, len = 0;
	char *out = calloc(1, cap);

	CHK(d && out);
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);

		if (e->d_name[0] == '.' || strncmp(e->d_name, "bxfi_", 5) == 0)
			continue;
		if (len + n + 2 > cap) {
			out = realloc(out, cap *= 2);
			CHK(out);
		}
		memcpy(out + len, e->d_name, n);
		len += n;
		out[len++] = '\n';
		out[len] = '\0';
	}
	closedir(d);
	return out;
}

/* Distinct adoption files open in this process (by inode). */
static unsigned adopt_files_open(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	ino_t seen[16];
	unsigned n = 0;

	CHK(d);
	while ((e = readdir(d))) {
		char path[300], link[256];
		struct stat st;
		ssize_t len;
		unsigned i;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len <= 0)
			continue;
		link[len] = '\0';
		if (strncmp(link, ADOPT_FILE_NAME, strlen(ADOPT_FILE_NAME)) != 0 ||
		    stat(path, &st) != 0)
			continue;
		for (i = 0; i < n && seen[i] != st.st_ino; i++)
			;
		if (i == n && n < 16)
			seen[n++] = st.st_ino;
	}
	closedir(d);
	return n;
}

/* The client writes into the server's whole pages (mapping its file),
 * gives its region, and waits to be killed. */
static int c_killed(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET r;

	(void)arg;
	client_open(&p, &dev, MALLOC, fd, NULL);
	r = recv_region(fd);
	client_write(&p, &r, PG + 100, 0, 5000, 3, 1);
	CHK(adopt_mappings().elsewhere > 0);
	send_region(&p, fd);
	msg_send(fd, 1);
	pause();
	return 0;
}

Test(shm_adopt, killed_peer_leaves_nothing)
{
	char *before = dev_shm_names(), *after;
	struct peer p;
	DAT_RMR_TRIPLET r;
	DAT_LMR_TRIPLET iov;

	server_start_with(&p, &dev, MALLOC, PRIV_ATOMIC, 0, c_killed, NULL);
	server_up(&p);
	send_region(&p, p.fd);
	r = recv_region(p.fd);
	/* into the client's whole pages: we map a window of its file */
	fill(p.buf + 10000, 5000, 4);
	iov = seg(&p, 10000, 5000);
	r.virtual_address += PG + 100;
	r.segment_length = 5000;
	post_write(p.ep, 1, &iov, 7, &r);
	CHK(dto_wait(p.req, 10 * SEC, 7, NULL) == DAT_DTO_SUCCESS);
	msg_recv(p.fd, 10000);
	CHK(adopt_mappings().elsewhere > 0);
	CHK(adopt_mappings().own > 0);
	CHK(kill(p.pid, SIGKILL) == 0);
	CHK(reap(p.pid, 10000) == 128 + SIGKILL);
	{
		uint8_t want[5000];

		fill(want, 5000, 3);
		CHK(memcmp(p.buf + PG + 100, want, 5000) == 0);
	}
	peer_close(&p);
	after = dev_shm_names();
	if (strcmp(before, after) != 0)
		fprintf(stderr, "/dev/shm before:\n%safter:\n%s", before, after);
	CHK(strcmp(before, after) == 0);
	/* nothing of the dead peer's file, nothing of ours adopted */
	CHK(adopt_mappings().elsewhere == 0);
	CHK(adopt_mappings().own == 0);
	CHK(adopt_files_open() <= 1);
	free(before);
	free(after);
}

/* ---- the consumer's threads while dat_lmr_create and dat_lmr_free run ---- */

Test(shm_adopt, hammer_while_lmr_create_free)
{
	struct hammer h;
	struct hammer_thread t[HAMMER_THREADS];
	struct node n;

	node_open_on(&n, dev.ia);
	hammer_start(&h, t);
	for (int i = 0; i < 60; i++) {
		DAT_REGION_DESCRIPTION rd = { .for_va = h.m + PG + 256 };
		DAT_LMR_HANDLE lmr;
		DAT_LMR_CONTEXT lkey;
		DAT_RMR_CONTEXT rkey;
		DAT_VLEN rlen;
		DAT_VADDR raddr;

		CHK_RET(dat_lmr_create(n.ia, DAT_MEM_TYPE_VIRTUAL, rd, 5 * PG, n.pz,
				       DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lkey, &rkey,
				       &rlen, &raddr),
			DAT_SUCCESS);
		if (i == 0)
			CHK(pages_are(h.m + 2 * PG, 4 * PG, PB_ADOPTED));
		CHK_RET(dat_lmr_free(lmr), DAT_SUCCESS);
	}
	hammer_check(&h, t);
	node_close(&n);
}

/* ---- fork() with an LMR ---- */

static int child_status(pid_t pid)
{
	int st;

	CHK(waitpid(pid, &st, 0) == pid);
	return st;
}

Test(shm_adopt, fork_with_an_lmr)
{
	struct node n;
	uint8_t *buf = adopt_alloc(MALLOC), *other = malloc(3 * PG);
	DAT_REGION_DESCRIPTION rd = { .for_va = buf };
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lkey;
	DAT_RMR_CONTEXT rkey;
	DAT_VLEN rlen;
	DAT_VADDR raddr;
	pid_t pid;
	int st;

	CHK(other);
	node_open_on(&n, dev.ia);
	fill(buf, BUF, 1);
	fill(other, 3 * PG, 2);
	CHK_RET(dat_lmr_create(n.ia, DAT_MEM_TYPE_VIRTUAL, rd, BUF, n.pz, DAT_MEM_PRIV_ALL_FLAG,
			       DAT_VA_TYPE_VA, &lmr, &lkey, &rkey, &rlen, &raddr),
		DAT_SUCCESS);
	/* a whole page: absent in the child */
	pid = fork();
	CHK(pid >= 0);
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		(void)*(volatile uint8_t *)(buf + 2 * PG);
		_exit(0);
	}
	st = child_status(pid);
	CHK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
	/* the edge pages and other memory: copy-on-write */
	pid = fork();
	CHK(pid >= 0);
	if (pid == 0) {
		uint8_t want[200];

		fill(want, 200, 1);
		if (memcmp(buf, want, 200) != 0)
			_exit(2);
		buf[0] ^= 0xff;             /* ours only */
		other[0] ^= 0xff;
		_exit(0);
	}
	st = child_status(pid);
	CHK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	{
		uint8_t want[BUF];

		fill(want, BUF, 1);
		CHK(memcmp(buf, want, BUF) == 0);
		fill(want, 3 * PG, 2);
		CHK(memcmp(other, want, 3 * PG) == 0);
	}
	CHK_RET(dat_lmr_free(lmr), DAT_SUCCESS);
	CHK(pages_are(buf, BUF, PB_PRIVATE));
	/* freed: an ordinary copy */
	pid = fork();
	CHK(pid >= 0);
	if (pid == 0) {
		uint8_t want[BUF];

		fill(want, BUF, 1);
		_exit(memcmp(buf, want, BUF) == 0 ? 0 : 3);
	}
	st = child_status(pid);
	CHK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	node_close(&n);
	adopt_free(buf, MALLOC);
	free(other);
}

/* ---- memory unmapped while registered, registered again ---- */

/*
 * The server maps 18 pages and registers 16 of them (LMR 1), unmaps them
 * and maps fresh memory at the same address, registers it (LMR 2) and
 * gives the client LMR 2; the client writes into it and reads it back.
 * Whatever LMR 1 left behind, the write must land in the memory LMR 2
 * registered.
 */
static int c_again(int fd, void *arg)
{
	struct peer p;
	DAT_RMR_TRIPLET r;
	uint8_t want[8192];

	(void)arg;
	client_open(&p, &dev, MALLOC, fd, NULL);
	r = recv_region(fd);
	client_write(&p, &r, PG, 0, 8192, 21, 1);
	fill(want, 8192, 21);
	{
		DAT_RMR_TRIPLET t = r;
		DAT_LMR_TRIPLET iov = seg(&p, 10000, 8192);

		t.virtual_address += PG;
		t.segment_length = 8192;
		post_read(p.ep, 1, &iov, 2, &t);
		CHK(dto_wait(p.req, 10 * SEC, 2, NULL) == DAT_DTO_SUCCESS);
		CHK(memcmp(p.buf + 10000, want, 8192) == 0);
	}
	msg_send(fd, 1);
	return client_done(&p);
}

Test(shm_adopt, rdma_into_memory_registered_again)
{
	struct peer p;
	uint8_t *m = mmap(NULL, 18 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *again, want[8192];
	DAT_REGION_DESCRIPTION rd = { .for_va = m + PG };
	DAT_LMR_HANDLE lmr1, lmr2;
	DAT_LMR_CONTEXT lkey;
	DAT_RMR_CONTEXT rkey;
	DAT_VLEN rlen;
	DAT_VADDR raddr;

	CHK(m != MAP_FAILED);
	server_start(&p, &dev, MALLOC, c_again, NULL);
	fill(m + PG, 16 * PG, 20);
	CHK_RET(dat_lmr_create(p.n.ia, DAT_MEM_TYPE_VIRTUAL, rd, 16 * PG, p.n.pz,
			       DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr1, &lkey, &rkey, &rlen,
			       &raddr),
		DAT_SUCCESS);
	CHK(munmap(m + PG, 16 * PG) == 0);
	again = mmap(m + PG, 16 * PG, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	CHK(again == m + PG);
	memset(again, 0, 16 * PG);
	CHK_RET(dat_lmr_create(p.n.ia, DAT_MEM_TYPE_VIRTUAL, rd, 16 * PG, p.n.pz,
			       DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr2, &lkey, &rkey, &rlen,
			       &raddr),
		DAT_SUCCESS);
	server_up(&p);
	msg_send(p.fd, rkey);
	msg_send(p.fd, (uint32_t)(uintptr_t)again);
	msg_send(p.fd, (uint32_t)((uint64_t)(uintptr_t)again >> 32));
	msg_recv(p.fd, 20000);
	fill(want, 8192, 21);
	/* The mlx5 devices' registration cache gives an identical range the
	 * live registration's MR (as on verbs: memory unmapped under a live
	 * registration is undefined); the peer's write then went to the old
	 * memory's backing: nothing crashed, nothing else was touched. */
	if (strstr(dev.ia, "mlx5")) {
		CHK_RET(dat_lmr_free(lmr2), DAT_SUCCESS);
		CHK_RET(dat_lmr_free(lmr1), DAT_SUCCESS);
		server_done(&p);
		munmap(m, 18 * PG);
		return;
	}
	if (memcmp(again + PG, want, 8192) != 0)
		fprintf(stderr, "the peer's write did not reach the memory LMR 2 registered "
			"(first bytes %#x %#x, page backed as %s)\n", again[PG], again[PG + 1],
			page_backing_name(page_backing(again + PG)));
	CHK(memcmp(again + PG, want, 8192) == 0);
	CHK_RET(dat_lmr_free(lmr2), DAT_SUCCESS);
	CHK_RET(dat_lmr_free(lmr1), DAT_SUCCESS);
	server_done(&p);
	munmap(m, 18 * PG);
}
