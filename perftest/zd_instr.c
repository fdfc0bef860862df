/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * zd_instr: instructions one 8-byte RDMA write costs the poster -- the post
 * plus polling its completion into a DAT event -- counted by callgrind.
 *
 *   valgrind --tool=callgrind --collect-atstart=no --separate-threads=yes \
 *       zd_instr [-P ia_name] [-n iters] [-o write|imm|faa|send]
 *                                               (tools/instr_count.sh runs it)
 *
 * -o unsig counts a bandwidth loop's writes: each pass posts ZD_INSTR_BATCH
 * writes, all but the last with DAT_COMPLETION_SUPPRESS_FLAG, and polls the
 * last one's completion (the device's moderation CQEs included), so the
 * counts divided by ZD_INSTR_BATCH are the cost of one write of such a
 * stream (tools/instr_count.sh does).
 *
 * -o imm and -o faa count an IB extension instead: an 8-byte RDMA write
 * with immediate data (the target's receive posted and its completion
 * taken uncounted) or a fetch-and-add of 1 on the 8-byte word, posted
 * through the provider's handle_extendedop_func as libdat2's
 * dat_extension_op hands it over (its va_list decoding counted).
 *
 * One process, two EPs connected to each other over the provider's own
 * connection manager.  The provider is called through its DAT_PROVIDER
 * table (the DAT_*() redirection macros), so libdat2's dispatch is not
 * counted.  Collection is toggled on around the posts of one pass of
 * @iters writes (dump 1), around the dequeues of a second pass (dump 2),
 * around @iters dequeues of an empty EVD (dump 3: a device that completes
 * asynchronously -- the software mlx5 NIC's thread -- makes the poster
 * dequeue in vain a few times, and the tool takes those out), and around
 * nothing (dump 4: what the toggles cost inside a window).  The tool
 * counts the provider's own instructions (its object alone), so the
 * toggles and the application's call sequences drop out:
 *
 *   post = zdapl(1) / iters
 *   poll = (zdapl(2) - empty_dequeues * zdapl(3) / iters) / iters
 *
 * Without valgrind the tool runs the same loops and prints only the counts
 * of calls (a smoke test).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <dat2/udat.h>
#include <dat2/dat_registry.h>   /* the DAT_*() redirection macros */
#include <dat2/dat_ib_extensions.h>
#include <valgrind/callgrind.h>

#define COOKIE_MAGIC 0x5a44494e53545231ull   /* "ZDINSTR1" */
#define ZD_INSTR_BATCH 16                     /* -o unsig: writes per signalled one */

static void die(const char *what, DAT_RETURN ret)
{
	const char *maj = "?", *min = "?";

	dat_strerror(ret, &maj, &min);
	fprintf(stderr, "zd_instr: %s failed: %s %s\n", what, maj, min);
	exit(DAT_GET_TYPE(ret) == DAT_NOT_IMPLEMENTED ? 77 : 1);
}

#define CHECK(call) do { DAT_RETURN r_ = (call); if (r_ != DAT_SUCCESS) die(#call, r_); } while (0)

static void wait_event(DAT_EVD_HANDLE evd, DAT_EVENT_NUMBER want, DAT_EVENT *ev)
{
	DAT_COUNT nmore;

	CHECK(dat_evd_wait(evd, 10 * 1000 * 1000, 1, ev, &nmore));
	if (ev->event_number != want) {
		fprintf(stderr, "zd_instr: event %#x, expected %#x\n",
			(unsigned)ev->event_number, (unsigned)want);
		exit(1);
	}
}

struct side {
	DAT_EVD_HANDLE req_evd, recv_evd, conn_evd;
	DAT_EP_HANDLE ep;
};

static void side_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, struct side *s)
{
	CHECK(dat_evd_create(ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->req_evd));
	CHECK(dat_evd_create(ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &s->recv_evd));
	CHECK(dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &s->conn_evd));
	CHECK(dat_ep_create(ia, pz, s->recv_evd, s->req_evd, s->conn_evd, NULL, &s->ep));
}

/* What libdat2's dat_extension_op does with an extension call: hands the
 * rest of the arguments to the provider as a va_list. */
static DAT_RETURN ext_op(DAT_HANDLE h, DAT_EXTENDED_OP op, ...)
{
	va_list args;
	DAT_RETURN ret;

	va_start(args, op);
	ret = DAT_HANDLE_EXTENDEDOP(h, op, args);
	va_end(args);
	return ret;
}

enum instr_op { OP_WRITE, OP_IMM, OP_FAA, OP_SEND, OP_UNSIG };

int main(int argc, char **argv)
{
	char *ia_name = "zdapl-shm";
	unsigned long iters = 1000;
	enum instr_op op = OP_WRITE;
	int opt;

	while ((opt = getopt(argc, argv, "P:n:o:")) != -1) {
		if (opt == 'P')
			ia_name = optarg;
		else if (opt == 'n')
			iters = strtoul(optarg, NULL, 0);
		else if (opt == 'o' && !strcmp(optarg, "write"))
			op = OP_WRITE;
		else if (opt == 'o' && !strcmp(optarg, "imm"))
			op = OP_IMM;
		else if (opt == 'o' && !strcmp(optarg, "faa"))
			op = OP_FAA;
		else if (opt == 'o' && !strcmp(optarg, "send"))
			op = OP_SEND;
		else if (opt == 'o' && !strcmp(optarg, "unsig"))
			op = OP_UNSIG;
		else {
			fprintf(stderr, "usage: zd_instr [-P ia_name] [-n iters] [-o write|imm|faa|send|unsig]\n");
			return 2;
		}
	}
	if (iters == 0)
		iters = 1;

	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async_evd = DAT_HANDLE_NULL, cr_evd;
	DAT_PZ_HANDLE pz;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL qual;
	struct side a, b;
	DAT_EVENT ev;
	DAT_IA_ATTR ia_attr;

	CHECK(dat_ia_open(ia_name, 8, &async_evd, &ia));
	CHECK(dat_ia_query(ia, NULL, DAT_IA_FIELD_IA_ADDRESS_PTR, &ia_attr, 0, NULL));
	CHECK(dat_pz_create(ia, &pz));
	CHECK(dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CR_FLAG, &cr_evd));
	side_create(ia, pz, &a);
	side_create(ia, pz, &b);
	CHECK(dat_psp_create_any(ia, &qual, cr_evd, DAT_PSP_CONSUMER_FLAG, &psp));

	/* a connects, b accepts */
	CHECK(dat_ep_connect(a.ep, ia_attr.ia_address_ptr, qual, 10 * 1000 * 1000, 0, NULL,
			     DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG));
	wait_event(cr_evd, DAT_CONNECTION_REQUEST_EVENT, &ev);
	CHECK(dat_cr_accept(ev.event_data.cr_arrival_event_data.cr_handle, b.ep, 0, NULL));
	wait_event(b.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, &ev);
	wait_event(a.conn_evd, DAT_CONNECTION_EVENT_ESTABLISHED, &ev);

	static uint64_t src __attribute__((aligned(64))), dst __attribute__((aligned(64)));
	static uint64_t rcv __attribute__((aligned(64)));
	DAT_LMR_HANDLE src_lmr, dst_lmr, rcv_lmr;
	DAT_LMR_CONTEXT src_lkey, dst_lkey, rcv_lkey;
	DAT_RMR_CONTEXT src_rkey, dst_rkey, rcv_rkey;
	DAT_VLEN reg_len;
	DAT_VADDR reg_addr;
	DAT_REGION_DESCRIPTION rd;

	rd.for_va = &src;
	CHECK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, rd, sizeof(src), pz,
			     DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &src_lmr, &src_lkey,
			     &src_rkey, &reg_len, &reg_addr));
	rd.for_va = &dst;
	CHECK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, rd, sizeof(dst), pz,
			     op == OP_FAA ? DAT_MEM_PRIV_ALL_FLAG | DAT_IB_MEM_PRIV_REMOTE_ATOMIC :
					    DAT_MEM_PRIV_ALL_FLAG,
			     DAT_VA_TYPE_VA, &dst_lmr, &dst_lkey, &dst_rkey, &reg_len, &reg_addr));
	/* b's receive, which each write with immediate data consumes */
	rd.for_va = &rcv;
	CHECK(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, rd, sizeof(rcv), pz,
			     DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &rcv_lmr, &rcv_lkey,
			     &rcv_rkey, &reg_len, &reg_addr));
	DAT_LMR_TRIPLET rl = { .lmr_context = rcv_lkey, .virtual_address = (uintptr_t)&rcv,
			       .segment_length = sizeof(rcv) };

	DAT_LMR_TRIPLET l = { .lmr_context = src_lkey, .virtual_address = (uintptr_t)&src,
			      .segment_length = sizeof(src) };
	DAT_RMR_TRIPLET r = { .rmr_context = dst_rkey, .virtual_address = (uintptr_t)&dst,
			      .segment_length = sizeof(dst) };
	DAT_DTO_COOKIE cookie = { .as_64 = COOKIE_MAGIC };
	unsigned long empty = 0, faas = 0;
	const DAT_EVENT_NUMBER want_ev = op == OP_WRITE || op == OP_SEND || op == OP_UNSIG ?
						 DAT_DTO_COMPLETION_EVENT :
				       (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT;

	/* Warm up (caches, lazy binding, first-touch) uncounted, then one
	 * pass counting the posts, one counting the dequeues. */
	for (int pass = 0; pass < 3; pass++) {
		unsigned long n = pass ? iters : 100;
		bool count_post = pass == 1, count_poll = pass == 2;

		for (unsigned long i = 0; i < n; i++) {
			DAT_RETURN ret;

			uint64_t landed;

			src = i + 1;
			if (op == OP_IMM || op == OP_SEND)
				CHECK(DAT_EP_POST_RECV(b.ep, 1, &rl, cookie, DAT_COMPLETION_DEFAULT_FLAG));
			if (count_post)
				CALLGRIND_TOGGLE_COLLECT;
			if (op == OP_WRITE)
				ret = DAT_EP_POST_RDMA_WRITE(a.ep, 1, &l, cookie, &r,
							     DAT_COMPLETION_DEFAULT_FLAG);
			else if (op == OP_UNSIG)
				for (int k = 0; k < ZD_INSTR_BATCH; k++) {
					ret = DAT_EP_POST_RDMA_WRITE(
						a.ep, 1, &l, cookie, &r,
						k < ZD_INSTR_BATCH - 1 ? DAT_COMPLETION_SUPPRESS_FLAG
								       : DAT_COMPLETION_DEFAULT_FLAG);
					if (ret != DAT_SUCCESS)
						break;
				}
			else if (op == OP_SEND)
				ret = DAT_EP_POST_SEND(a.ep, 1, &l, cookie, DAT_COMPLETION_DEFAULT_FLAG);
			else if (op == OP_IMM)
				ret = ext_op(a.ep, DAT_IB_RDMA_WRITE_IMMED_OP, (DAT_COUNT)1, &l, cookie,
					     &r, (DAT_UINT32)i, DAT_COMPLETION_DEFAULT_FLAG);
			else
				ret = ext_op(a.ep, DAT_IB_FETCH_AND_ADD_OP, (DAT_UINT64)1, &l, cookie,
					     &r, DAT_COMPLETION_DEFAULT_FLAG);
			if (count_post)
				CALLGRIND_TOGGLE_COLLECT;
			if (ret != DAT_SUCCESS)
				die("post", ret);
			/* Uncounted: let an asynchronous device (the software
			 * NIC's thread; valgrind runs one thread at a time) land
			 * the data and write its CQE, so that few dequeues find
			 * nothing. */
			landed = op == OP_FAA ? ++faas : src;
			/* A small send on zdapl-shm rides in its completion
			 * entry and lands when the receive is polled: give up
			 * waiting for it after a few yields. */
			for (int y = 0; __atomic_load_n(op == OP_SEND ? &rcv : &dst,
							__ATOMIC_ACQUIRE) != landed; y++) {
				if (op == OP_SEND && y >= 64)
					break;
				sched_yield();
			}
			for (int y = 0; y < 20; y++)
				sched_yield();
			for (;;) {
				if (count_poll)
					CALLGRIND_TOGGLE_COLLECT;
				ret = DAT_EVD_DEQUEUE(a.req_evd, &ev);
				if (count_poll)
					CALLGRIND_TOGGLE_COLLECT;
				if (ret == DAT_SUCCESS)
					break;
				if (DAT_GET_TYPE(ret) != DAT_QUEUE_EMPTY)
					die("dat_evd_dequeue", ret);
				empty += count_poll;
			}
			if (ev.event_number != want_ev ||
			    ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS ||
			    ev.event_data.dto_completion_event_data.user_cookie.as_64 != COOKIE_MAGIC ||
			    (op == OP_FAA && src != landed - 1)) {
				fprintf(stderr, "zd_instr: bad completion\n");
				return 1;
			}
			/* -o send: the receive's completion is counted too. */
			while (op == OP_SEND) {
				if (count_poll)
					CALLGRIND_TOGGLE_COLLECT;
				ret = DAT_EVD_DEQUEUE(b.recv_evd, &ev);
				if (count_poll)
					CALLGRIND_TOGGLE_COLLECT;
				if (ret == DAT_SUCCESS)
					break;
				if (DAT_GET_TYPE(ret) != DAT_QUEUE_EMPTY)
					die("dat_evd_dequeue (receive)", ret);
				empty += count_poll;
			}
			if (op == OP_SEND &&
			    (ev.event_data.dto_completion_event_data.operation != DAT_DTO_RECEIVE ||
			     ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS)) {
				fprintf(stderr, "zd_instr: bad receive completion\n");
				return 1;
			}
			/* Uncounted: the target's receive of the immediate data. */
			if (op == OP_IMM) {
				DAT_COUNT nmore;
				const DAT_IB_EXTENSION_EVENT_DATA *x =
					(const void *)ev.event_extension_data;

				CHECK(dat_evd_wait(b.recv_evd, 10 * 1000 * 1000, 1, &ev, &nmore));
				if (ev.event_number != (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT ||
				    ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS ||
				    x->val.immed.data != (DAT_UINT32)i) {
					fprintf(stderr, "zd_instr: bad receive of the immediate\n");
					return 1;
				}
			}
		}
		if (count_post)
			CALLGRIND_DUMP_STATS_AT("post");
		if (count_poll)
			CALLGRIND_DUMP_STATS_AT("poll");
	}

	/* The cost of one dequeue that finds nothing, on the same EVD. */
	for (unsigned long i = 0; i < iters; i++) {
		DAT_RETURN ret;

		CALLGRIND_TOGGLE_COLLECT;
		ret = DAT_EVD_DEQUEUE(a.req_evd, &ev);
		CALLGRIND_TOGGLE_COLLECT;
		if (DAT_GET_TYPE(ret) != DAT_QUEUE_EMPTY)
			die("dat_evd_dequeue (empty)", ret);
	}
	CALLGRIND_DUMP_STATS_AT("empty");

	/* The cost of an empty counted window (the toggles' own share). */
	for (unsigned long i = 0; i < iters; i++) {
		CALLGRIND_TOGGLE_COLLECT;
		__asm__ __volatile__("" ::: "memory");
		CALLGRIND_TOGGLE_COLLECT;
	}
	CALLGRIND_DUMP_STATS_AT("window");

	if (op != OP_SEND && dst != (op == OP_FAA ? faas : iters)) {
		fprintf(stderr, "zd_instr: target holds %" PRIu64 ", expected %lu\n", dst,
			op == OP_FAA ? faas : iters);
		return 1;
	}
	printf("ia=%s iters=%lu empty_dequeues=%lu\n", ia_name, iters, empty);

	dat_lmr_free(src_lmr);
	dat_lmr_free(dst_lmr);
	dat_lmr_free(rcv_lmr);
	dat_ep_disconnect(a.ep, DAT_CLOSE_ABRUPT_FLAG);
	dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
	return 0;
}
