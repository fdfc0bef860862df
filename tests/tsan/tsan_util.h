/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the ThreadSanitizer stress scenarios share (tests/tsan/README in
 * tsan_stress.c): plain C checks that print and exit (Criterion cannot run
 * under TSan), a "node" opened through libdat2 (IA, PZ, CR and connection
 * EVDs), a connected pair of EPs with one registered buffer each, and
 * posting helpers.  Everything runs in one process, so TSan sees both
 * sides of every connection and every thread of the library.
 */
#ifndef TSAN_UTIL_H
#define TSAN_UTIL_H

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <dat2/udat.h>

#include "dat_wait.h"
#include "rc_ep_attr.h"

#define TS_BUF 65536            /* each pair side's registered buffer */

extern const char *ts_scenario;

#define CHK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "tsan_stress %s: %s:%d: %s\n", ts_scenario, \
			__FILE__, __LINE__, #cond); \
		_exit(1); \
	} \
} while (0)

#define CHK_RET(call, want) do { \
	DAT_RETURN r_ = (call); \
	if (r_ != (DAT_RETURN)(want)) { \
		fprintf(stderr, "tsan_stress %s: %s:%d: %s: got 0x%x want 0x%x\n", \
			ts_scenario, __FILE__, __LINE__, #call, (unsigned)r_, \
			(unsigned)(want)); \
		_exit(1); \
	} \
} while (0)

/* Loops run until both: at least @min_iter rounds and @ms milliseconds
 * (TSan slows code 5-15x and the host is shared: time bounds the run,
 * the count makes sure something happened). */
struct ts_budget {
	uint64_t end_ms;
	unsigned min_iter, iter;
};

static inline void ts_budget_start(struct ts_budget *b, unsigned ms, unsigned min_iter)
{
	b->end_ms = now_ms() + ms;
	b->min_iter = min_iter;
	b->iter = 0;
}

static inline int ts_budget_more(struct ts_budget *b)
{
	return b->iter++ < b->min_iter || now_ms() < b->end_ms;
}

static inline void ts_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
	CHK(pthread_create(t, NULL, fn, arg) == 0);
}

/* ---- nodes: an IA with what connections need ---------------------------- */

struct ts_node {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, cr_evd, conn_evd;
	DAT_EVD_HANDLE dto;             /* both DTO EVDs of EPs that carry no traffic */
	DAT_PZ_HANDLE pz;
};

static inline void ts_node_open(struct ts_node *n, const char *ia_name)
{
	memset(n, 0, sizeof(*n));
	CHK_RET(dat_ia_open((DAT_NAME_PTR)ia_name, 8, &n->async, &n->ia), DAT_SUCCESS);
	CHK_RET(dat_evd_create(n->ia, 256, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &n->cr_evd),
		DAT_SUCCESS);
	CHK_RET(dat_evd_create(n->ia, 256, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG,
			       &n->conn_evd), DAT_SUCCESS);
	CHK_RET(dat_evd_create(n->ia, 256, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &n->dto),
		DAT_SUCCESS);
	CHK_RET(dat_pz_create(n->ia, &n->pz), DAT_SUCCESS);
}

static inline void ts_node_close(struct ts_node *n)
{
	CHK_RET(dat_ia_close(n->ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

/* A PSP on @n with a qualifier of this process's own (pid-based, so that
 * scenarios running at once in other processes do not meet). */
static inline DAT_CONN_QUAL ts_listen(struct ts_node *n, DAT_PSP_HANDLE *psp, unsigned salt)
{
	DAT_CONN_QUAL q = 0x75a0000000000000ull | ((DAT_CONN_QUAL)getpid() << 8) | salt;

	CHK_RET(dat_psp_create(n->ia, q, n->cr_evd, DAT_PSP_CONSUMER_FLAG, psp), DAT_SUCCESS);
	return q;
}

/* ---- a connected pair of EPs, each with its DTO EVDs and buffer ---------- */

struct ts_side {
	struct ts_node *n;
	DAT_EVD_HANDLE req, rcv;
	DAT_EP_HANDLE ep;
	uint8_t *buf;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lkey;
	DAT_RMR_CONTEXT rkey;
};

static inline void ts_side_open(struct ts_side *s, struct ts_node *n, DAT_COUNT qlen)
{
	DAT_REGION_DESCRIPTION r;
	DAT_VLEN rlen;
	DAT_VADDR raddr;
	DAT_EP_ATTR a;

	memset(s, 0, sizeof(*s));
	s->n = n;
	CHK_RET(dat_evd_create(n->ia, qlen, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->req),
		DAT_SUCCESS);
	CHK_RET(dat_evd_create(n->ia, qlen, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->rcv),
		DAT_SUCCESS);
	s->buf = aligned_alloc(4096, TS_BUF);
	CHK(s->buf);
	memset(s->buf, 0, TS_BUF);
	r.for_va = s->buf;
	CHK_RET(dat_lmr_create(n->ia, DAT_MEM_TYPE_VIRTUAL, r, TS_BUF, n->pz, DAT_MEM_PRIV_ALL_FLAG,
			       DAT_VA_TYPE_VA, &s->lmr, &s->lkey, &s->rkey, &rlen, &raddr),
		DAT_SUCCESS);
	rc_ep_attr(&a, TS_BUF, 64, 64, 1);
	CHK_RET(dat_ep_create(n->ia, n->pz, s->rcv, s->req, n->conn_evd, &a, &s->ep), DAT_SUCCESS);
}

/* Frees what ts_side_open made; the EP may be connected (abrupt free). */
static inline void ts_side_free(struct ts_side *s)
{
	CHK_RET(dat_ep_free(s->ep), DAT_SUCCESS);
	CHK_RET(dat_evd_free(s->req), DAT_SUCCESS);
	CHK_RET(dat_evd_free(s->rcv), DAT_SUCCESS);
	CHK_RET(dat_lmr_free(s->lmr), DAT_SUCCESS);
	free(s->buf);
}

/* Connects @c's EP to @s's through @s's node's PSP @qual (the caller
 * serves nothing else on that PSP meanwhile). */
static inline void ts_pair_connect(struct ts_side *s, struct ts_side *c, DAT_CONN_QUAL qual)
{
	DAT_EVENT ev;

	CHK_RET(connect_loopback(c->ep, qual, 10 * SEC), DAT_SUCCESS);
	CHK(wait_ev(s->n->cr_evd, 10 * SEC, &ev) == DAT_CONNECTION_REQUEST_EVENT);
	CHK_RET(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, s->ep, 0, NULL),
		DAT_SUCCESS);
	CHK(wait_ev(s->n->conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
	CHK(wait_ev(c->n->conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_ESTABLISHED);
}

static inline DAT_LMR_TRIPLET ts_seg(struct ts_side *s, size_t off, size_t len)
{
	DAT_LMR_TRIPLET t = { .lmr_context = s->lkey,
			      .virtual_address = (DAT_VADDR)(uintptr_t)(s->buf + off),
			      .segment_length = len };
	return t;
}

static inline DAT_RETURN ts_post_recv(struct ts_side *s, uint64_t cookie, size_t off, size_t len)
{
	DAT_LMR_TRIPLET t = ts_seg(s, off, len);

	return dat_ep_post_recv(s->ep, 1, &t, (DAT_DTO_COOKIE){ .as_64 = cookie },
				DAT_COMPLETION_DEFAULT_FLAG);
}

static inline DAT_RETURN ts_post_send(struct ts_side *s, uint64_t cookie, size_t off, size_t len)
{
	DAT_LMR_TRIPLET t = ts_seg(s, off, len);

	return dat_ep_post_send(s->ep, 1, &t, (DAT_DTO_COOKIE){ .as_64 = cookie },
				DAT_COMPLETION_DEFAULT_FLAG);
}

/* Another side's registered buffer, as RDMA names it. */
struct ts_remote {
	DAT_RMR_CONTEXT rkey;
	uint64_t addr;
};

static inline struct ts_remote ts_side_remote(const struct ts_side *s)
{
	return (struct ts_remote){ .rkey = s->rkey, .addr = (uint64_t)(uintptr_t)s->buf };
}

/* RDMA write (@write) of @len bytes at @off of @s's buffer to @roff of
 * @r's, or RDMA read of them the other way. */
static inline DAT_RETURN ts_post_rdma(struct ts_side *s, const struct ts_remote *r, int write,
				      uint64_t cookie, size_t off, size_t roff, size_t len)
{
	DAT_LMR_TRIPLET l = ts_seg(s, off, len);
	DAT_RMR_TRIPLET t = { .rmr_context = r->rkey, .virtual_address = r->addr + roff,
			      .segment_length = len };
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	return write ? dat_ep_post_rdma_write(s->ep, 1, &l, c, &t, DAT_COMPLETION_DEFAULT_FLAG)
		     : dat_ep_post_rdma_read(s->ep, 1, &l, c, &t, DAT_COMPLETION_DEFAULT_FLAG);
}

/* The next DTO completion of @evd, waiting (dat_evd_wait) or spinning on
 * dat_evd_dequeue; it must be a success. */
static inline void ts_dto(DAT_EVD_HANDLE evd, int spin, DAT_EVENT *ev)
{
	DAT_EVENT tmp;

	if (!ev)
		ev = &tmp;
	if (spin) {
		uint64_t end = now_ms() + 20000;

		while (dat_evd_dequeue(evd, ev) != DAT_SUCCESS) {
			CHK(now_ms() < end);
			sched_yield();
		}
	} else {
		CHK(wait_ev(evd, 20 * SEC, ev) == DAT_DTO_COMPLETION_EVENT);
	}
	CHK(ev->event_number == DAT_DTO_COMPLETION_EVENT);
	if (ev->event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS) {
		fprintf(stderr, "tsan_stress %s (pid %d): DTO status %d, cookie %llu\n",
			ts_scenario, (int)getpid(),
			(int)ev->event_data.dto_completion_event_data.status,
			(unsigned long long)ev->event_data.dto_completion_event_data.user_cookie.as_64);
		_exit(1);
	}
}

/* Scenarios (one file each): 0 passed, else exit with a message. */
int ts_evd(int argc, char **argv);
int ts_pollers(int argc, char **argv);
int ts_cm(int argc, char **argv);
int ts_traffic(int argc, char **argv);

#endif
