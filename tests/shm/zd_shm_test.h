/*
 * Harness for the shm data-path tests: IAs, EVDs, PZs and EPs through
 * libdat2, and a direct "connection" of two EPs (the QP blobs of the
 * device, exchanged by the test, and the EP state set to CONNECTED), so
 * the data path is tested without the connection manager.
 */
#ifndef ZD_SHM_TEST_H
#define ZD_SHM_TEST_H

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/types.h>
#include <dat2/udat.h>

#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "zdapl/zdapl.h"

#define T_SUB(r) DAT_GET_SUBTYPE(r)
#define T_TYPE(r) DAT_GET_TYPE(r)

struct side {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, req, rcv;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep;
};

static inline void t_need_conf(void)
{
	if (!getenv("DAT_OVERRIDE")) {
		fprintf(stderr, "DAT_OVERRIDE is not set: run through meson test\n");
		exit(77);
	}
}

static inline void t_open(struct side *s)
{
	/* ZD_TEST_IA: meson runs some of these tests over another device */
	const char *name = getenv("ZD_TEST_IA") ? getenv("ZD_TEST_IA") : "zdapl-shm";

	memset(s, 0, sizeof(*s));
	cr_assert_eq(dat_ia_open((DAT_NAME_PTR)name, 16, &s->async, &s->ia), DAT_SUCCESS, "%s", name);
	cr_assert_eq(dat_pz_create(s->ia, &s->pz), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(s->ia, 1024, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->req),
		     DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(s->ia, 1024, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->rcv),
		     DAT_SUCCESS);
}

static inline DAT_EP_HANDLE t_ep(struct side *s, const DAT_EP_ATTR *attr)
{
	DAT_EP_HANDLE ep;

	cr_assert_eq(dat_ep_create(s->ia, s->pz, s->rcv, s->req, DAT_HANDLE_NULL, attr, &ep),
		     DAT_SUCCESS);
	return ep;
}

/* An EP on @s like @like, but with unsignalled request completions
 * (DAT_COMPLETION_UNSIGNALLED_FLAG then suppresses success events). */
static inline DAT_EP_HANDLE t_ep_unsignalled(struct side *s, DAT_EP_HANDLE like)
{
	DAT_EP_PARAM p;
	DAT_EP_ATTR attr;

	dat_ep_query(like, DAT_EP_FIELD_ALL, &p);
	attr = p.ep_attr;
	attr.request_completion_flags = DAT_COMPLETION_UNSIGNALLED_FLAG;
	return t_ep(s, &attr);
}

static inline struct zd_ep *t_zep(DAT_EP_HANDLE h)
{
	return (struct zd_ep *)h;
}

static inline size_t t_blob(DAT_EP_HANDLE h, void *buf)
{
	struct zd_ep *ep = t_zep(h);

	return ep->obj.ia->dev->qp_local_blob(ep, buf, ZD_QP_BLOB_MAX);
}

static inline void t_accept_blob(DAT_EP_HANDLE h, const void *buf, size_t len)
{
	struct zd_ep *ep = t_zep(h);

	cr_assert_eq(ep->obj.ia->dev->qp_connect(ep, buf, len), DAT_SUCCESS);
	atomic_store(&ep->state, DAT_EP_STATE_CONNECTED);
}

static inline void t_connect(DAT_EP_HANDLE a, DAT_EP_HANDLE b)
{
	char ba[ZD_QP_BLOB_MAX], bb[ZD_QP_BLOB_MAX];
	size_t la = t_blob(a, ba), lb = t_blob(b, bb);

	cr_assert(la > 0 && lb > 0);
	t_accept_blob(a, bb, lb);
	t_accept_blob(b, ba, la);
}

static inline void t_flush(DAT_EP_HANDLE h)
{
	struct zd_ep *ep = t_zep(h);

	ep->obj.ia->dev->qp_flush(ep);
	atomic_store(&ep->state, DAT_EP_STATE_DISCONNECTED);
}

static inline DAT_LMR_HANDLE t_reg(struct side *s, DAT_PZ_HANDLE pz, void *addr, size_t len,
				   DAT_MEM_PRIV_FLAGS priv, DAT_LMR_CONTEXT *key)
{
	DAT_REGION_DESCRIPTION region = { .for_va = addr };
	DAT_LMR_HANDLE lmr;
	DAT_RMR_CONTEXT rkey;
	DAT_VLEN rlen;
	DAT_VADDR raddr;

	cr_assert_eq(dat_lmr_create(s->ia, DAT_MEM_TYPE_VIRTUAL, region, len, pz ? pz : s->pz,
				    priv, DAT_VA_TYPE_VA, &lmr, key, &rkey, &rlen, &raddr),
		     DAT_SUCCESS);
	cr_assert_eq(*key, rkey);
	return lmr;
}

static inline DAT_LMR_TRIPLET t_seg(DAT_LMR_CONTEXT key, void *addr, size_t len)
{
	DAT_LMR_TRIPLET t = { .lmr_context = key, .virtual_address = (DAT_VADDR)(uintptr_t)addr,
			      .segment_length = (DAT_SEG_LENGTH)len };
	return t;
}

static inline DAT_RMR_TRIPLET t_rseg(DAT_RMR_CONTEXT key, void *addr, size_t len)
{
	DAT_RMR_TRIPLET t = { .rmr_context = key, .virtual_address = (DAT_VADDR)(uintptr_t)addr,
			      .segment_length = (DAT_SEG_LENGTH)len };
	return t;
}

static inline DAT_DTO_COOKIE t_cookie(uint64_t v)
{
	DAT_DTO_COOKIE c = { .as_64 = v };
	return c;
}

/* Next event of @evd within ~2 s (polling), of any kind. */
static inline DAT_EVENT t_next_event(DAT_EVD_HANDLE evd)
{
	DAT_EVENT ev;

	for (int i = 0; i < 2000000; i++) {
		DAT_RETURN r = dat_evd_dequeue(evd, &ev);

		if (r == DAT_SUCCESS)
			return ev;
		cr_assert_eq(T_TYPE(r), DAT_QUEUE_EMPTY);
		if (i > 1000)
			usleep(1);
	}
	cr_assert_fail("no completion");
	return ev;
}

/* Next DTO event of @evd within ~2 s (polling). */
static inline DAT_DTO_COMPLETION_EVENT_DATA t_next(DAT_EVD_HANDLE evd)
{
	DAT_EVENT ev = t_next_event(evd);

	cr_assert_eq(ev.event_number, DAT_DTO_COMPLETION_EVENT);
	return ev.event_data.dto_completion_event_data;
}

static inline void t_none(DAT_EVD_HANDLE evd)
{
	DAT_EVENT ev;

	cr_assert_eq(T_TYPE(dat_evd_dequeue(evd, &ev)), DAT_QUEUE_EMPTY);
}

static inline void t_expect(DAT_EVD_HANDLE evd, DAT_EP_HANDLE ep, uint64_t cookie,
			    DAT_DTO_COMPLETION_STATUS st, DAT_DTOS op, DAT_SEG_LENGTH len)
{
	DAT_DTO_COMPLETION_EVENT_DATA d = t_next(evd);

	cr_assert_eq(d.ep_handle, ep);
	cr_assert_eq(d.user_cookie.as_64, cookie, "cookie %llu, expected %llu",
		     (unsigned long long)d.user_cookie.as_64, (unsigned long long)cookie);
	cr_assert_eq(d.status, st, "status %d, expected %d", d.status, st);
	cr_assert_eq(d.operation, op);
	if (st == DAT_DTO_SUCCESS)
		cr_assert_eq(d.transfered_length, len, "length %u, expected %u",
			     d.transfered_length, len);
}

static inline void t_close(struct side *s)
{
	cr_assert_eq(dat_ia_close(s->ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

/*
 * Two-process tests: the test process forks a peer and the two talk over a
 * pair of pipes (QP blobs, addresses and keys, one-byte go/done signals).
 * The peer returns an exit code rather than asserting: a failed assertion
 * in a forked child would be reported as the test's own.
 */

/* Moves exactly @n bytes through @fd (a pipe may split them); -1 if the
 * other end closed or the call failed. */
static inline int t_pipe_xfer(int fd, void *p, size_t n, bool out)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = out ? write(fd, (char *)p + done, n - done)
				: read(fd, (char *)p + done, n - done);
		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

static inline int t_pipe_read(int fd, void *p, size_t n)
{
	return t_pipe_xfer(fd, p, n, false);
}

static inline int t_pipe_write(int fd, const void *p, size_t n)
{
	return t_pipe_xfer(fd, (void *)p, n, true);
}

/* Forks a peer that exits with @peer_main(its read end, its write end,
 * @arg); the test's ends go to *@rd and *@wr. */
static inline pid_t t_fork_peer(int (*peer_main)(int rd, int wr, int arg), int arg,
				int *rd, int *wr)
{
	int p2c[2], c2p[2];
	pid_t pid;

	cr_assert_eq(pipe(p2c), 0);
	cr_assert_eq(pipe(c2p), 0);
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		close(p2c[1]);
		close(c2p[0]);
		_exit(peer_main(p2c[0], c2p[1], arg));
	}
	close(p2c[0]);
	close(c2p[1]);
	*rd = c2p[0];
	*wr = p2c[1];
	return pid;
}

#endif
