/*
 * bench_mlx5_instr: instructions the poster spends on the mlx5 hot path --
 * one 8-byte inline RDMA write posted, then its completion polled into a
 * DAT event -- counted by callgrind on queues in plain memory.
 *
 *   valgrind --tool=callgrind --collect-atstart=no \
 *       bench_mlx5_instr [-m dev|core] [-n iters]     (tools/mlx5_instr.sh)
 *
 * (-q: no client requests, for --toggle-collect=<function> instead.)
 *
 * The real IA, PZ, EVD and EP are created through core with a backend whose
 * queues are ordinary memory (the BlueFlame register included), so the
 * code counted is exactly what runs on a ConnectX.  The harness plays the
 * NIC between post and poll: it reads the WQE the doorbell announced and
 * writes the requester CQE as hardware would (owner bit, wqe_counter, QPN,
 * op_own last).  That is the only work left out of the count.
 *
 *   -m dev   the device ops alone: zd_mlx5_post_rdma_write and
 *            zd_mlx5_cq_poll (the event lands in the EVD ring slot)
 *   -m core  the DAT entry points: zd_ep_post_rdma_write (handle, EP state,
 *            segment and flag checks) and zd_evd_dequeue (-> cq_poll ->
 *            EVD ring -> the caller's DAT_EVENT); libdat2's dispatch aside
 *
 * Three counted phases, each dumped on its own: posts only, polls only,
 * and empty toggle pairs (what CALLGRIND_TOGGLE_COLLECT itself leaves in a
 * count, to subtract).  Every iteration checks the WQE bytes, the BlueFlame
 * copy and the event, so the harness is also a smoke test without valgrind.
 */
#include <endian.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

#include "core/zd_api.h"
#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "core/zd_obj.h"
#include "evd/zd_evd.h"
#include "hw/mlx5/zd_mlx5.h"

#define BENCH_IA     "zdapl-mlx5bench"
#define BENCH_DEV    "mlx5bench"
#define SQ_WQES      64
#define BF_SIZE      256          /* a ConnectX BlueFlame register half */
#define COOKIE_MAGIC 0x5a444d4c58354231ull

/* core/zd_provider.c: what libdat2 calls per dat.conf line (no header
 * declares it; DAT_PROVIDER_INIT_FUNC_NAME names it). */
void dat_provider_init(const DAT_PROVIDER_INFO *info, const char *instance_data);

static void die(const char *what, DAT_RETURN ret)
{
	fprintf(stderr, "bench_mlx5_instr: %s failed (%#x)\n", what, (unsigned)ret);
	exit(1);
}

#define CHECK(call) do { DAT_RETURN r_ = (call); if (r_ != DAT_SUCCESS) die(#call, r_); } while (0)

#include "mlx5_plain_backend.h"

MLX5_PLAIN_BACKEND_REGISTER(BENCH_DEV, "mlx5 bench (plain memory)")

/* ---- the NIC's part: uncounted ---- */

static void fail(const char *what)
{
	fprintf(stderr, "bench_mlx5_instr: %s\n", what);
	exit(1);
}

/* Executes the doorbell: checks the WQE the doorbell record announced (an
 * inline RDMA write of @src) and its BlueFlame copy, then writes its
 * requester CQE. */
static void nic_complete(const uint64_t *src, uint64_t raddr, uint32_t rkey)
{
	struct bqp *q = the_qp;
	struct bcq *c = the_scq;
	uint16_t pi = (uint16_t)be32toh(q->dbrec[MLX5_SND_DBR]);
	const uint8_t *wqe = q->sq + (size_t)(q->hw_ci & (SQ_WQES - 1)) * 64;
	const struct mlx5_wqe_ctrl_seg *ctrl = (const void *)wqe;
	const struct mlx5_wqe_raddr_seg *r = (const void *)(wqe + 16);
	const struct mlx5_wqe_inl_data_seg *inl = (const void *)(wqe + 32);
	uint32_t op = be32toh(ctrl->opmod_idx_opcode);
	uint16_t wqe_idx = (uint16_t)(op >> 8);
	int bf_ok = !memcmp(q->bf, wqe, 64) || !memcmp(q->bf + BF_SIZE, wqe, 64);

	if ((uint16_t)(pi - q->hw_ci) != 1)
		fail("doorbell record did not move by one WQEBB");
	if ((op & 0xff) != MLX5_OPCODE_RDMA_WRITE || wqe_idx != q->hw_ci ||
	    be32toh(ctrl->qpn_ds) != (q->qpn << 8 | 3) ||
	    !(ctrl->fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) || be64toh(r->raddr) != raddr ||
	    be32toh(r->rkey) != rkey || be32toh(inl->byte_count) != (8 | MLX5_INLINE_SEG) ||
	    memcmp(inl + 1, src, 8) || !bf_ok)
		fail("WQE is not the inline RDMA write posted");
	q->hw_ci = pi;

	struct mlx5_cqe64 *cqe = (void *)(c->buf + (size_t)(c->hw_pi & (c->cqe_cnt - 1)) * 64);
	uint8_t owner = !!(c->hw_pi & c->cqe_cnt);

	memset(cqe, 0, 63);
	cqe->sop_drop_qpn = htobe32(q->qpn);
	cqe->wqe_counter = htobe16(wqe_idx);
	__atomic_store_n(&cqe->op_own, (uint8_t)(MLX5_CQE_REQ << 4 | owner), __ATOMIC_RELEASE);
	c->hw_pi++;
}

static void check_event(const DAT_EVENT *ev, DAT_EP_HANDLE ep)
{
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;

	if (ev->event_number != DAT_DTO_COMPLETION_EVENT || d->ep_handle != ep ||
	    d->status != DAT_DTO_SUCCESS || d->user_cookie.as_64 != COOKIE_MAGIC ||
	    d->operation != DAT_DTO_RDMA_WRITE || d->transfered_length != 8)
		fail("bad completion event");
}

enum phase { PH_WARM, PH_POST, PH_POLL, PH_TOGGLE, PH_QUIET };

struct bench {
	DAT_EP_HANDLE ep_h;
	DAT_EVD_HANDLE evd_h;
	struct zd_ep *ep;
	struct zd_evd *evd;
	const struct zd_device_ops *dev;
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r;
	uint64_t *src;
};

/*
 * The counted calls, each between a toggle pair in a function of its own,
 * every argument already in a register: what lies between the toggles is
 * the call and its argument moves, as in any caller.
 */
typedef DAT_RETURN (*write_fn)(void *, DAT_COUNT, const DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
			       const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS);
typedef int (*poll_fn)(void *, int);

static __attribute__((noinline)) DAT_RETURN counted_write(write_fn fn, void *ep,
							  const DAT_LMR_TRIPLET *l,
							  DAT_DTO_COOKIE c,
							  const DAT_RMR_TRIPLET *r)
{
	DAT_RETURN ret;

	CALLGRIND_TOGGLE_COLLECT;
	ret = fn(ep, 1, l, c, r, DAT_COMPLETION_DEFAULT_FLAG);
	CALLGRIND_TOGGLE_COLLECT;
	return ret;
}

static __attribute__((noinline)) int counted_poll(poll_fn fn, void *evd, int budget)
{
	int ret;

	CALLGRIND_TOGGLE_COLLECT;
	ret = fn(evd, budget);
	CALLGRIND_TOGGLE_COLLECT;
	return ret;
}

static __attribute__((noinline)) DAT_RETURN counted_dequeue(void *evd, DAT_EVENT *ev)
{
	DAT_RETURN ret;

	CALLGRIND_TOGGLE_COLLECT;
	ret = zd_evd_dequeue(evd, ev);
	CALLGRIND_TOGGLE_COLLECT;
	return ret;
}

/* The toggles alone, shaped as the calls above (subtracted). */
static __attribute__((noinline)) int counted_nothing(void *p)
{
	CALLGRIND_TOGGLE_COLLECT;
	CALLGRIND_TOGGLE_COLLECT;
	return p != NULL;
}

/* One phase of @n iterations: only @ph's part is counted. */
static void run(struct bench *b, int core, enum phase ph, unsigned long n)
{
	const DAT_DTO_COOKIE cookie = { .as_64 = COOKIE_MAGIC };
	write_fn wfn = core ? (write_fn)zd_ep_post_rdma_write : (write_fn)b->dev->post_rdma_write;
	void *wtarget = core ? (void *)b->ep_h : (void *)b->ep;
	poll_fn pfn = (poll_fn)b->dev->cq_poll;

	for (unsigned long i = 0; i < n; i++) {
		DAT_EVENT ev;
		DAT_RETURN ret;
		int got;

		*b->src = i + 1;
		if (ph == PH_POST)
			ret = counted_write(wfn, wtarget, &b->l, cookie, &b->r);
		else
			ret = wfn(wtarget, 1, &b->l, cookie, &b->r, DAT_COMPLETION_DEFAULT_FLAG);
		if (ret != DAT_SUCCESS)
			die("post_rdma_write", ret);

		nic_complete(b->src, b->r.virtual_address, b->r.rmr_context);

		if (core) {
			ret = ph == PH_POLL ? counted_dequeue(b->evd_h, &ev) :
					      zd_evd_dequeue(b->evd_h, &ev);
			got = ret == DAT_SUCCESS;
		} else {
			/* manual progress's budget: the room in the ring */
			int budget = (int)(zd_ring_capacity(b->evd->ring) -
					   zd_ring_count(b->evd->ring));

			got = ph == PH_POLL ? counted_poll(pfn, b->evd, budget) :
					      pfn(b->evd, budget);
			got = got == 1 && zd_ring_dequeue(b->evd->ring, &ev);
		}
		if (!got)
			fail("no completion polled");
		check_event(&ev, b->ep_h);
		if (ph == PH_TOGGLE)
			counted_nothing(b);
	}
	if (ph != PH_WARM && ph != PH_QUIET)
		CALLGRIND_DUMP_STATS_AT(ph == PH_POST ? "post" : ph == PH_POLL ? "poll" : "toggle");
}

/* @tog 0: no client requests at all, for callgrind's own
 * --toggle-collect=<function> (per-function analysis). */
static void run_all(struct bench *b, int core, unsigned long iters, int tog)
{
	if (!tog) {
		run(b, core, PH_QUIET, iters);
		return;
	}
	run(b, core, PH_WARM, 200);
	run(b, core, PH_POST, iters);
	run(b, core, PH_POLL, iters);
	run(b, core, PH_TOGGLE, iters);
}

int main(int argc, char **argv)
{
	unsigned long iters = 1000;
	int core = 0, tog = 1, opt;

	while ((opt = getopt(argc, argv, "m:n:q")) != -1) {
		if (opt == 'm' && (!strcmp(optarg, "dev") || !strcmp(optarg, "core")))
			core = !strcmp(optarg, "core");
		else if (opt == 'n' && (iters = strtoul(optarg, NULL, 0)) > 0)
			;
		else if (opt == 'q')
			tog = 0;
		else {
			fprintf(stderr, "usage: bench_mlx5_instr [-m dev|core] [-n iters] [-q]\n");
			return 2;
		}
	}

	DAT_PROVIDER_INFO info = { .dapl_version_major = 2, .dapl_version_minor = 0,
				   .is_thread_safe = DAT_FALSE };
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async_evd = DAT_HANDLE_NULL, req_evd, recv_evd, conn_evd;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep_h;
	uint8_t blob[ZD_QP_BLOB_MAX];
	size_t blen;

	snprintf(info.ia_name, sizeof(info.ia_name), "%s", BENCH_IA);
	dat_provider_init(&info, BENCH_DEV);
	CHECK(zd_ia_open(BENCH_IA, 8, &async_evd, &ia));
	CHECK(zd_pz_create(ia, &pz));
	CHECK(zd_evd_create(ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &req_evd));
	CHECK(zd_evd_create(ia, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &recv_evd));
	CHECK(zd_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &conn_evd));
	CHECK(zd_ep_create(ia, pz, recv_evd, req_evd, conn_evd, NULL, &ep_h));

	/* Connected to itself, as a loopback RC QP; the CM's handshake is not
	 * what is measured. */
	struct zd_ep *ep = zd_obj_get(ep_h, ZD_OBJ_EP);
	struct zd_evd *evd = zd_obj_get(req_evd, ZD_OBJ_EVD);

	if (!ep || !evd || !the_qp || !the_scq)
		fail("objects not created through the bench backend");
	blen = ep->obj.ia->dev->qp_local_blob(ep, blob, sizeof(blob));
	CHECK(ep->obj.ia->dev->qp_connect(ep, blob, blen));
	zd_ep_set_state(ep, DAT_EP_STATE_CONNECTED);

	static uint64_t src __attribute__((aligned(64))), dst __attribute__((aligned(64)));
	/* The source registered, as a consumer's is (the post checks an
	 * inline source against its LMR). */
	DAT_LMR_HANDLE src_lmr;
	DAT_LMR_CONTEXT src_lkey;
	DAT_RMR_CONTEXT src_rkey;
	DAT_VLEN reg_len;
	DAT_VADDR reg_addr;

	CHECK(zd_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, (DAT_REGION_DESCRIPTION){ .for_va = &src },
			    sizeof(src), pz, DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &src_lmr,
			    &src_lkey, &src_rkey, &reg_len, &reg_addr));

	struct bench b = {
		.ep_h = ep_h, .evd_h = req_evd, .ep = ep, .evd = evd, .dev = ep->obj.ia->dev,
		.l = { .lmr_context = src_lkey, .virtual_address = (uintptr_t)&src,
		       .segment_length = sizeof(src) },
		.r = { .rmr_context = 0x7001, .virtual_address = (uintptr_t)&dst,
		       .segment_length = sizeof(dst) },
		.src = &src,
	};

	run_all(&b, core, iters, tog);
	printf("mode=%s iters=%lu\n", core ? "core" : "dev", iters);

	CHECK(zd_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG));
	return 0;
}
