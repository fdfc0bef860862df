/*
 * test_mlx5_direct: dat_evd_dequeue's direct poll (the device's cq_poll_one:
 * an empty EVD ring, the completion taken straight from the CQ into the
 * caller's DAT_EVENT) keeps every EVD rule.  Through core's real IA, EVD and
 * EP over a backend whose queues are plain memory; the test writes the
 * requester CQEs as the NIC would (as bench_mlx5_instr does).
 *
 *  - bytes: the direct event equals the one the ring path hands back
 *    (fields, solicited mark, zeroed extension words); the ring is not used;
 *    the same for IB extension completions (DAT_IB_DTO_EVENTs, an atomic's
 *    old value in host order);
 *  - order: an event already in the ring, or claimed there and not yet
 *    published, or spilled after an overflow, comes out before a CQE the
 *    direct path could take; overflow is reported once, as before;
 *  - a producer thread racing the direct poll: each source's events in
 *    order, none lost, and every foreign event that happened before a
 *    completion (it was posted before the NIC wrote the CQE) dequeued
 *    before it.
 *  - the device's own write entry: its one-load test of the EP (dto_qp)
 *    follows the EP's state and a freed EP, what it refuses gets core's
 *    errors and writes nothing, and an unsignalled write costs nothing at
 *    completion (the next signalled write's CQE retires it).
 * All of it twice: through core's dat_evd_dequeue (the ring, then the
 * device's cq_poll_one) and through the mlx5 device's own entry in the
 * provider table (its poll first, the ring when the CQ is empty).
 */
#include <endian.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/zd_api.h"
#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "core/zd_obj.h"
#include "core/zd_ext.h"
#include "evd/zd_evd.h"
#include "hw/mlx5/zd_mlx5.h"

#define T_IA        "zdapl-mlx5direct"
#define T_DEV       "mlx5direct"
#define SQ_WQES     64
#define BF_SIZE     256
#define FOREIGN_EP  ((DAT_EP_HANDLE)(uintptr_t)0xf0f0)  /* marks foreign events */

void dat_provider_init(const DAT_PROVIDER_INFO *info, const char *instance_data);

static int failures;

#define EXPECT(cond, ...) do {                                               \
	if (!(cond)) {                                                       \
		fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond);  \
		fprintf(stderr, __VA_ARGS__);                                \
		fprintf(stderr, "\n");                                       \
		failures++;                                                  \
	}                                                                    \
} while (0)

static void die(const char *what, DAT_RETURN ret)
{
	fprintf(stderr, "test_mlx5_direct: %s failed (%#x)\n", what, (unsigned)ret);
	exit(1);
}

#define CHECK(call) do { DAT_RETURN r_ = (call); if (r_ != DAT_SUCCESS) die(#call, r_); } while (0)

#include "mlx5_plain_backend.h"

MLX5_PLAIN_BACKEND_REGISTER(T_DEV, "mlx5 direct-poll test (plain memory)")

/* Executes the doorbells rung since the last call: a requester CQE for
 * each WQE that asked for one (CQ_UPDATE), as a NIC does. */
static void nic_run(void)
{
	struct bqp *q = the_qp;
	struct bcq *c = the_scq;
	uint16_t pi = (uint16_t)be32toh(__atomic_load_n(&q->dbrec[MLX5_SND_DBR], __ATOMIC_ACQUIRE));

	while (q->hw_ci != pi) {
		const struct mlx5_wqe_ctrl_seg *ctrl =
			(const void *)(q->sq + (size_t)(q->hw_ci & (SQ_WQES - 1)) * 64);
		uint16_t idx = (uint16_t)(be32toh(ctrl->opmod_idx_opcode) >> 8);
		unsigned nbb = ((be32toh(ctrl->qpn_ds) & 0x3f) * 16 + 63) / 64;
		struct mlx5_cqe64 *cqe =
			(void *)(c->buf + (size_t)(c->hw_pi & (c->cqe_cnt - 1)) * 64);
		uint8_t owner = !!(c->hw_pi & c->cqe_cnt);

		if (!(ctrl->fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE)) {
			q->hw_ci += nbb;
			continue;
		}
		memset(cqe, 0, 63);
		cqe->sop_drop_qpn = htobe32(q->qpn);
		cqe->wqe_counter = htobe16(idx);
		__atomic_store_n(&cqe->op_own, (uint8_t)(MLX5_CQE_REQ << 4 | owner),
				 __ATOMIC_RELEASE);
		c->hw_pi++;
		q->hw_ci += nbb;
	}
}

struct env {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async_evd, req_evd;
	DAT_EP_HANDLE ep_h;
	struct zd_evd *evd;
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r;
};

static uint64_t src __attribute__((aligned(64))), dst __attribute__((aligned(64)));

static void post_write(struct env *e, uint64_t cookie)
{
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	src = cookie;
	CHECK(zd_ep_post_rdma_write(e->ep_h, 1, &e->l, c, &e->r, DAT_COMPLETION_DEFAULT_FLAG));
}

/* A foreign DTO-shaped event (the CM thread's or a poller's kind of
 * producer), told apart by its EP handle. */
static DAT_RETURN post_foreign(struct env *e, uint64_t cookie)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_DTO_COMPLETION_EVENT;
	ev.evd_handle = e->evd;
	ev.event_data.dto_completion_event_data.ep_handle = FOREIGN_EP;
	ev.event_data.dto_completion_event_data.user_cookie.as_64 = cookie;
	ev.event_data.dto_completion_event_data.operation = DAT_DTO_SEND;
	return zd_evd_post(e->evd, &ev, 1);
}

static bool is_write(const struct env *e, const DAT_EVENT *ev, uint64_t cookie)
{
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;

	return ev->event_number == DAT_DTO_COMPLETION_EVENT && ev->evd_handle == e->req_evd &&
	       d->ep_handle == e->ep_h && d->status == DAT_DTO_SUCCESS &&
	       d->user_cookie.as_64 == cookie && d->operation == DAT_DTO_RDMA_WRITE &&
	       d->transfered_length == 8 && d->rmr_context == 0;
}

static bool is_foreign(const DAT_EVENT *ev, uint64_t cookie)
{
	return ev->event_number == DAT_DTO_COMPLETION_EVENT &&
	       ev->event_data.dto_completion_event_data.ep_handle == FOREIGN_EP &&
	       ev->event_data.dto_completion_event_data.user_cookie.as_64 == cookie;
}

static uint64_t ring_tail(const struct zd_ring *r)
{
	return atomic_load(&((struct zd_ring *)r)->tail);
}

/* The direct event is the ring path's, byte for byte where a consumer can
 * look (DTO fields, the solicited mark's word, extension words), and the
 * ring is not touched. */
/* The dat_evd_dequeue under test (see the file comment). */
static DAT_RETURN (*dequeue)(DAT_EVD_HANDLE, DAT_EVENT *);

static void test_bytes(struct env *e)
{
	DAT_EVENT direct, viaring;
	uint64_t tail0 = ring_tail(e->evd->ring);
	DAT_RETURN (*one)(struct zd_evd *, DAT_EVENT *) = e->evd->cq_poll_one;

	EXPECT(one != NULL, "the mlx5 device has no cq_poll_one");
	post_write(e, 101);
	nic_run();
	memset(&direct, 0xa5, sizeof(direct));
	EXPECT(dequeue(e->req_evd, &direct) == DAT_SUCCESS, "direct dequeue");
	EXPECT(is_write(e, &direct, 101), "direct event fields");
	EXPECT(ring_tail(e->evd->ring) == tail0, "the direct path claimed a ring slot");

	/* The same through the ring: cq_poll, then the ring's copy-out. */
	zd_evd_set_poll_one(e->evd, NULL);
	post_write(e, 101);
	nic_run();
	memset(&viaring, 0x5a, sizeof(viaring));
	EXPECT(dequeue(e->req_evd, &viaring) == DAT_SUCCESS, "ring dequeue");
	zd_evd_set_poll_one(e->evd, one);
	EXPECT(ring_tail(e->evd->ring) == tail0 + 1, "the ring path did not use the ring");
	EXPECT(is_write(e, &viaring, 101), "ring event fields");
	/* Everything up to the end of the DTO data (the union's tail is no
	 * DTO field), and the extension words, all zero on both. */
	EXPECT(!memcmp(&direct, &viaring, offsetof(DAT_EVENT, event_data) +
		       sizeof(DAT_DTO_COMPLETION_EVENT_DATA)), "direct and ring events differ");
	for (int i = 0; i < 8; i++)
		EXPECT(direct.event_extension_data[i] == 0 && viaring.event_extension_data[i] == 0,
		       "extension word %d not zeroed", i);
	EXPECT(dequeue(e->req_evd, &direct) == DAT_QUEUE_EMPTY, "EVD not empty after");
}

/* IB extension completions (an atomic, a write with immediate data) go
 * straight to the caller too, as the DAT_IB_DTO_EVENT the ring path hands
 * back, all 120 bytes; an atomic's big-endian old value is in host order
 * by then, a suppressed one's as well once a later completion is seen. */
static bool is_ext(const struct env *e, const DAT_EVENT *ev, uint64_t cookie, DAT_DTOS op,
		   DAT_IB_EXT_TYPE type)
{
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;
	const DAT_IB_EXTENSION_EVENT_DATA *x = (const void *)ev->event_extension_data;

	return ev->event_number == (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT &&
	       ev->evd_handle == e->req_evd && d->ep_handle == e->ep_h &&
	       d->status == DAT_DTO_SUCCESS && d->user_cookie.as_64 == cookie &&
	       d->operation == op && d->transfered_length == 8 && x->type == type &&
	       x->status == DAT_OP_SUCCESS;
}

static void test_ext(struct env *e, struct zd_ep *ep)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;
	DAT_EVENT direct, viaring;
	uint64_t tail0 = ring_tail(e->evd->ring);
	DAT_RETURN (*one)(struct zd_evd *, DAT_EVENT *) = e->evd->cq_poll_one;
	DAT_DTO_COOKIE c = { .as_64 = 301 };

	qp->atomic_be = true;
	CHECK(zd_ep_post_atomic(e->ep_h, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, &e->l, c, &e->r, 1, 0,
				DAT_COMPLETION_DEFAULT_FLAG));
	src = htobe64(0x0102030405060708ull);   /* as the NIC writes it */
	nic_run();
	memset(&direct, 0xa5, sizeof(direct));
	EXPECT(dequeue(e->req_evd, &direct) == DAT_SUCCESS, "direct dequeue of an atomic");
	EXPECT(is_ext(e, &direct, 301, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, DAT_IB_FETCH_AND_ADD),
	       "direct atomic event fields");
	EXPECT(src == 0x0102030405060708ull, "old value not in host order");
	EXPECT(ring_tail(e->evd->ring) == tail0, "the direct path claimed a ring slot");

	zd_evd_set_poll_one(e->evd, NULL);
	CHECK(zd_ep_post_atomic(e->ep_h, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, &e->l, c, &e->r, 1, 0,
				DAT_COMPLETION_DEFAULT_FLAG));
	src = htobe64(0x0102030405060708ull);
	nic_run();
	memset(&viaring, 0x5a, sizeof(viaring));
	EXPECT(dequeue(e->req_evd, &viaring) == DAT_SUCCESS, "ring dequeue of an atomic");
	zd_evd_set_poll_one(e->evd, one);
	EXPECT(ring_tail(e->evd->ring) == tail0 + 1, "the ring path did not use the ring");
	EXPECT(!memcmp(&direct, &viaring, sizeof(direct)), "direct and ring events differ");
	EXPECT(src == 0x0102030405060708ull, "old value not in host order (ring)");

	/* write with immediate data (its own inline path), byte for byte the
	 * ring path's event */
	c.as_64 = 302;
	CHECK(zd_ep_post_rdma_write_imm(e->ep_h, 1, &e->l, c, &e->r, 0x77,
					DAT_COMPLETION_DEFAULT_FLAG));
	nic_run();
	memset(&direct, 0xa5, sizeof(direct));
	EXPECT(dequeue(e->req_evd, &direct) == DAT_SUCCESS &&
	       is_ext(e, &direct, 302, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED,
		      DAT_IB_RDMA_WRITE_IMMED), "direct write-with-immediate event");
	EXPECT(ring_tail(e->evd->ring) == tail0 + 1, "the direct path claimed a ring slot");
	zd_evd_set_poll_one(e->evd, NULL);
	CHECK(zd_ep_post_rdma_write_imm(e->ep_h, 1, &e->l, c, &e->r, 0x77,
					DAT_COMPLETION_DEFAULT_FLAG));
	nic_run();
	memset(&viaring, 0x5a, sizeof(viaring));
	EXPECT(dequeue(e->req_evd, &viaring) == DAT_SUCCESS, "ring dequeue of a write-imm");
	zd_evd_set_poll_one(e->evd, one);
	EXPECT(ring_tail(e->evd->ring) == tail0 + 2, "the ring path did not use the ring");
	EXPECT(!memcmp(&direct, &viaring, sizeof(direct)),
	       "direct and ring write-with-immediate events differ");

	/* a suppressed atomic, then a write: one event, the value turned */
	c.as_64 = 303;
	CHECK(zd_ep_post_atomic(e->ep_h, (DAT_DTOS)DAT_IB_DTO_CMP_SWAP, &e->l, c, &e->r, 1, 2,
				DAT_COMPLETION_SUPPRESS_FLAG));
	post_write(e, 304);
	src = htobe64(42);
	nic_run();
	EXPECT(dequeue(e->req_evd, &direct) == DAT_SUCCESS && is_write(e, &direct, 304),
	       "the write's event after a suppressed atomic");
	EXPECT(src == 42, "the suppressed atomic's old value not in host order");
	EXPECT(dequeue(e->req_evd, &direct) == DAT_QUEUE_EMPTY, "EVD not empty after");
	qp->atomic_be = false;
}

/* An event already published in the ring comes first. */
static void test_ring_first(struct env *e)
{
	DAT_EVENT ev;

	CHECK(post_foreign(e, 201));
	post_write(e, 202);
	nic_run();
	EXPECT(dequeue(e->req_evd, &ev) == DAT_SUCCESS && is_foreign(&ev, 201),
	       "the ring's event is not first");
	EXPECT(dequeue(e->req_evd, &ev) == DAT_SUCCESS && is_write(e, &ev, 202),
	       "the completion is not second");
	EXPECT(dequeue(e->req_evd, &ev) == DAT_QUEUE_EMPTY, "EVD not empty after");
}

/* A producer between claim and publish holds an older event: the CQE
 * must wait behind it. */
static void test_claimed_first(struct env *e)
{
	struct zd_ring_slot *s;
	uint64_t pos;
	DAT_EVENT ev;

	s = zd_ring_claim(e->evd->ring, &pos);
	EXPECT(s != NULL, "claim");
	if (!s)
		return;
	post_write(e, 302);
	nic_run();
	EXPECT(dequeue(e->req_evd, &ev) == DAT_QUEUE_EMPTY,
	       "a completion overtook an unpublished older event");
	/* The producer finishes. */
	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_DTO_COMPLETION_EVENT;
	ev.evd_handle = e->evd;
	ev.event_data.dto_completion_event_data.ep_handle = FOREIGN_EP;
	ev.event_data.dto_completion_event_data.user_cookie.as_64 = 301;
	memcpy((void *)s, &ev, ZD_RING_EV_BYTES);
	zd_ring_publish(s, pos);
	EXPECT(dequeue(e->req_evd, &ev) == DAT_SUCCESS && is_foreign(&ev, 301),
	       "the claimed event is not first");
	EXPECT(dequeue(e->req_evd, &ev) == DAT_SUCCESS && is_write(e, &ev, 302),
	       "the completion is not second");
	EXPECT(dequeue(e->req_evd, &ev) == DAT_QUEUE_EMPTY, "EVD not empty after");
}

/* Overflow: a full ring, then spilled events, then a CQE: the ring's
 * events, then the spilled ones, then the completion; the overflow is
 * reported once on the async EVD (once in its life: not again on the
 * second pass). */
static void test_overflow_first(struct env *e)
{
	uint32_t cap = zd_ring_capacity(e->evd->ring);
	DAT_EVENT ev;
	DAT_COUNT nmore;
	static int ovf;

	for (uint32_t i = 0; i < cap + 3; i++)
		CHECK(post_foreign(e, 400 + i));
	EXPECT(zd_evd_spilling(e->evd, memory_order_seq_cst), "no spill after %u events in %u slots", cap + 3,
	       cap);
	post_write(e, 999);
	nic_run();
	for (uint32_t i = 0; i < cap + 3; i++)
		EXPECT(dequeue(e->req_evd, &ev) == DAT_SUCCESS && is_foreign(&ev, 400 + i),
		       "event %u out of order", i);
	EXPECT(dequeue(e->req_evd, &ev) == DAT_SUCCESS && is_write(e, &ev, 999),
	       "the completion is not last");
	EXPECT(dequeue(e->req_evd, &ev) == DAT_QUEUE_EMPTY, "EVD not empty after");
	while (zd_evd_wait(e->async_evd, 0, 1, &ev, &nmore) == DAT_SUCCESS)
		ovf += ev.event_number == DAT_ASYNC_ERROR_EVD_OVERFLOW;
	EXPECT(ovf == 1, "%d overflow events so far, not 1", ovf);
	/* Once the spill is gone the direct path is taken again. */
	uint64_t tail0 = ring_tail(e->evd->ring);

	post_write(e, 1000);
	nic_run();
	EXPECT(dequeue(e->req_evd, &ev) == DAT_SUCCESS && is_write(e, &ev, 1000),
	       "completion after the spill");
	EXPECT(ring_tail(e->evd->ring) == tail0, "the direct path was not taken after the spill");
}

/*
 * The device's own write entry (the provider table's, zd_mlx5_post.c),
 * whose one test of the EP is a load of its dto_qp: it follows the EP's
 * state, and every call it does not take gets core's error and writes no
 * WQE.  An unsignalled (SUPPRESS) write takes its one-block path with no
 * CQ_UPDATE and costs nothing at completion: the next signalled write's
 * CQE retires both.
 */
static void test_entry(struct env *e, struct zd_ep *ep, const DAT_PROVIDER *prov)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;
	DAT_RETURN (*post)(DAT_EP_HANDLE, DAT_COUNT, DAT_LMR_TRIPLET *, DAT_DTO_COOKIE,
			   const DAT_RMR_TRIPLET *, DAT_COMPLETION_FLAGS) =
		prov->ep_post_rdma_write_func;
	DAT_DTO_COOKIE c801 = { .as_64 = 801 }, c802 = { .as_64 = 802 }, c803 = { .as_64 = 803 };
	const struct mlx5_wqe_ctrl_seg *ctrl;
	DAT_EVENT ev;
	uint32_t pi;

	EXPECT(post == zd_mlx5_dat_post_rdma_write, "not the mlx5 write entry");
	src = 801;
	EXPECT(post(e->ep_h, 1, &e->l, c801, &e->r, DAT_COMPLETION_DEFAULT_FLAG) == DAT_SUCCESS,
	       "write");
	nic_run();
	EXPECT(dequeue(e->req_evd, &ev) == DAT_SUCCESS && is_write(e, &ev, 801), "its event");

	zd_ep_set_state(ep, DAT_EP_STATE_DISCONNECTED);
	EXPECT(atomic_load(&ep->dto_qp) == NULL, "dto_qp set on a disconnected EP");
	pi = qp->sq.pi;
	EXPECT(post(e->ep_h, 1, &e->l, c801, &e->r, DAT_COMPLETION_DEFAULT_FLAG) ==
	       DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_DISCONNECTED),
	       "write on a disconnected EP");
	EXPECT(qp->sq.pi == pi, "a refused write wrote a WQE");
	zd_ep_set_state(ep, DAT_EP_STATE_CONNECTED);
	EXPECT(atomic_load(&ep->dto_qp) == qp, "dto_qp not back on reconnection");

	/* what the fast test refuses gets the errors of core's checks */
	EXPECT(post(e->req_evd, 1, &e->l, c801, &e->r, 0) ==
	       DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP), "an EVD handle");
	EXPECT(post(e->ep_h, -1, &e->l, c801, &e->r, 0) ==
	       DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2), "n -1");
	EXPECT(post(e->ep_h, 1, NULL, c801, &e->r, 0) ==
	       DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3), "no segment array");
	EXPECT(post(e->ep_h, 1, &e->l, c801, NULL, 0) ==
	       DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5), "no remote segment");
	EXPECT(post(e->ep_h, 1, &e->l, c801, &e->r, 0x40000) ==
	       DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6), "unknown flags");
	EXPECT(qp->sq.pi == pi, "a refused write wrote a WQE");

	src = 802;
	EXPECT(post(e->ep_h, 1, &e->l, c802, &e->r, DAT_COMPLETION_SUPPRESS_FLAG) == DAT_SUCCESS,
	       "unsignalled write");
	ctrl = zd_mlx5_sq_bb(&qp->sq, pi);
	EXPECT(qp->sq.pi == pi + 1 && !(ctrl->fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) &&
	       qp->sq.wr[pi & qp->sq.mask].flags == 0 && qp->sq.wr[pi & qp->sq.mask].next_ci == pi + 1,
	       "the unsignalled write's WQE and bookkeeping");
	src = 803;
	EXPECT(post(e->ep_h, 1, &e->l, c803, &e->r, DAT_COMPLETION_DEFAULT_FLAG) == DAT_SUCCESS,
	       "signalled write");
	nic_run();
	EXPECT(dequeue(e->req_evd, &ev) == DAT_SUCCESS && is_write(e, &ev, 803),
	       "the signalled write's event, and only it");
	EXPECT(atomic_load(&qp->sq.ci) == pi + 2, "its CQE retired both");
	EXPECT(DAT_GET_TYPE(dequeue(e->req_evd, &ev)) == DAT_QUEUE_EMPTY, "no other event");
}

/* A freed EP's handle: its dto_qp was cleared first, so the device's entry,
 * which checks no magic, refuses it as core does. */
static void test_entry_freed(struct env *e, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv_evd,
			     DAT_EVD_HANDLE conn_evd, const DAT_PROVIDER *prov)
{
	DAT_EP_HANDLE h;
	struct zd_ep *ep;
	uint8_t blob[ZD_QP_BLOB_MAX];
	DAT_DTO_COOKIE c = { .as_64 = 901 };

	CHECK(zd_ep_create(e->ia, pz, recv_evd, e->req_evd, conn_evd, NULL, &h));
	ep = zd_obj_get(h, ZD_OBJ_EP);
	CHECK(ep->obj.ia->dev->qp_connect(ep, blob,
					  ep->obj.ia->dev->qp_local_blob(ep, blob, sizeof(blob))));
	zd_ep_set_state(ep, DAT_EP_STATE_CONNECTED);
	EXPECT(atomic_load(&ep->dto_qp) != NULL, "a connected EP has no dto_qp");
	CHECK(zd_ep_free(h));
	EXPECT(prov->ep_post_rdma_write_func(h, 1, &e->l, c, &e->r, 0) ==
	       DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP), "a freed EP's handle");
}

/* A disabled EVD still hands out what it has (dat_evd_disable(3DAT) only
 * stops notification); the direct path must not change that. */
static void test_disabled(struct env *e)
{
	DAT_EVENT ev;

	CHECK(zd_evd_disable(e->req_evd));
	post_write(e, 501);
	nic_run();
	EXPECT(dequeue(e->req_evd, &ev) == DAT_SUCCESS && is_write(e, &ev, 501),
	       "dequeue from a disabled EVD");
	CHECK(zd_evd_enable(e->req_evd));
}

/* The QP the last-QP cache names: last_qp while req_want matches a
 * requester CQE of it, else none. */
static struct zd_mlx5_qp *cached_qp(struct zd_mlx5_cq_obj *cq)
{
	struct zd_mlx5_qp *qp = cq->q.last_qp;

	if (!qp || atomic_load(&cq->q.req_want) != zd_mlx5_cqe_req_want(qp->qpn))
		return NULL;
	return qp;
}

/* The last-QP cache (zd_mlx5_cq.c) forgets a destroyed QP: its late CQE
 * is dropped (under ASan a stale cache would be a use after free), its
 * outstanding write completes once, flushed; a new QP is found. */
static void test_qp_cache(struct env *e, struct zd_ep *ep)
{
	struct zd_mlx5_cq_obj *cq = e->evd->cq_priv;
	const struct zd_device_ops *dev = ep->obj.ia->dev;
	uint8_t blob[ZD_QP_BLOB_MAX];
	DAT_EVENT ev;
	int flushed = 0, other = 0;

	post_write(e, 601);
	nic_run();
	EXPECT(dequeue(e->req_evd, &ev) == DAT_SUCCESS && is_write(e, &ev, 601),
	       "completion before the destroy");
	EXPECT(cached_qp(cq) == ep->dev_priv, "the poll did not cache its QP");
	post_write(e, 602);
	nic_run();   /* its CQE waits in the CQ */
	the_qp = NULL;
	dev->qp_destroy(ep);
	/* (last_qp itself is left dangling, never read while req_want is NONE) */
	EXPECT(atomic_load(&cq->q.req_want) == ZD_MLX5_CQE_REQ_NONE,
	       "the destroyed QP is still cached");
	while (dequeue(e->req_evd, &ev) == DAT_SUCCESS) {
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

		if (d->user_cookie.as_64 == 602 && d->status == DAT_DTO_ERR_FLUSHED)
			flushed++;
		else
			other++;
	}
	EXPECT(flushed == 1 && other == 0, "write 602: %d flushed, %d other events", flushed,
	       other);

	CHECK(dev->qp_create(ep));
	CHECK(dev->qp_connect(ep, blob, dev->qp_local_blob(ep, blob, sizeof(blob))));
	EXPECT(the_qp != NULL, "the new QP is not the test backend's");
	post_write(e, 603);
	nic_run();
	EXPECT(dequeue(e->req_evd, &ev) == DAT_SUCCESS && is_write(e, &ev, 603),
	       "completion on the new QP");
	EXPECT(cached_qp(cq) == ep->dev_priv, "the new QP is not cached");
}

/* ---- a producer thread racing the direct poll ---- */

#define RACE_FOREIGN 200000u
#define RACE_WRITES  100000u

struct race {
	struct env *e;
	_Atomic uint64_t posted;   /* foreign events posted so far */
};

static void *producer(void *arg)
{
	struct race *r = arg;

	for (uint64_t i = 1; i <= RACE_FOREIGN; i++) {
		if (post_foreign(r->e, i) != DAT_SUCCESS)
			abort();
		/* release: the event is posted before the count says so. */
		atomic_store_explicit(&r->posted, i, memory_order_release);
		if (!(i & 63))
			sched_yield();
	}
	return NULL;
}

static void test_race(struct env *e)
{
	struct race r = { .e = e };
	pthread_t t;
	uint64_t next_foreign = 1, next_write = 1, inflight = 0;
	uint64_t before[4] = { 0 };   /* per outstanding write: foreign posted before its CQE */
	DAT_EVENT ev;

	if (pthread_create(&t, NULL, producer, &r) != 0) {
		perror("pthread_create");
		exit(1);
	}
	for (uint64_t posted = 1; next_write <= RACE_WRITES || next_foreign <= RACE_FOREIGN;) {
		if (posted <= RACE_WRITES && inflight < 4) {
			post_write(e, posted);
			/* acquire: every foreign event counted was posted (its
			 * ring claim or spill done) before the NIC's CQE. */
			before[posted & 3] = atomic_load_explicit(&r.posted, memory_order_acquire);
			nic_run();
			posted++;
			inflight++;
		}
		DAT_RETURN ret = dequeue(e->req_evd, &ev);

		if (ret == DAT_QUEUE_EMPTY)
			continue;
		if (ret != DAT_SUCCESS)
			die("zd_evd_dequeue", ret);
		if (ev.event_data.dto_completion_event_data.ep_handle == FOREIGN_EP) {
			uint64_t c = ev.event_data.dto_completion_event_data.user_cookie.as_64;

			if (c != next_foreign) {
				EXPECT(0, "foreign event %lu, expected %lu", (unsigned long)c,
				       (unsigned long)next_foreign);
				break;
			}
			next_foreign++;
		} else {
			if (!is_write(e, &ev, next_write)) {
				EXPECT(0, "completion %lu out of order or malformed",
				       (unsigned long)next_write);
				break;
			}
			/* Foreign events posted before this CQE was written
			 * are older: already dequeued. */
			if (next_foreign <= before[next_write & 3]) {
				EXPECT(0, "completion %lu overtook foreign event %lu (posted "
				       "before its CQE)", (unsigned long)next_write,
				       (unsigned long)next_foreign);
				break;
			}
			next_write++;
			inflight--;
		}
	}
	pthread_join(t, NULL);
	/* Drain what a failure left, so the IA closes cleanly. */
	while (dequeue(e->req_evd, &ev) == DAT_SUCCESS)
		;
	while (dequeue(e->async_evd, &ev) == DAT_SUCCESS)
		;
}

int main(void)
{
	DAT_PROVIDER_INFO info = { .dapl_version_major = 2, .dapl_version_minor = 0,
				   .is_thread_safe = DAT_FALSE };
	DAT_EVD_HANDLE recv_evd, conn_evd;
	DAT_PZ_HANDLE pz;
	uint8_t blob[ZD_QP_BLOB_MAX];
	size_t blen;
	struct env e = { .async_evd = DAT_HANDLE_NULL };

	snprintf(info.ia_name, sizeof(info.ia_name), "%s", T_IA);
	dat_provider_init(&info, T_DEV);
	CHECK(zd_ia_open(T_IA, 64, &e.async_evd, &e.ia));
	CHECK(zd_pz_create(e.ia, &pz));
	/* A small EVD: the overflow test fills it. */
	CHECK(zd_evd_create(e.ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &e.req_evd));
	CHECK(zd_evd_create(e.ia, 16, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &recv_evd));
	CHECK(zd_evd_create(e.ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &conn_evd));
	CHECK(zd_ep_create(e.ia, pz, recv_evd, e.req_evd, conn_evd, NULL, &e.ep_h));

	struct zd_ep *ep = zd_obj_get(e.ep_h, ZD_OBJ_EP);

	e.evd = zd_obj_get(e.req_evd, ZD_OBJ_EVD);
	if (!ep || !e.evd || !the_qp || !the_scq) {
		fprintf(stderr, "objects not created through the test backend\n");
		return 1;
	}
	blen = ep->obj.ia->dev->qp_local_blob(ep, blob, sizeof(blob));
	CHECK(ep->obj.ia->dev->qp_connect(ep, blob, blen));
	zd_ep_set_state(ep, DAT_EP_STATE_CONNECTED);
	e.l = (DAT_LMR_TRIPLET){ .lmr_context = 0x7000, .virtual_address = (uintptr_t)&src,
				 .segment_length = sizeof(src) };
	e.r = (DAT_RMR_TRIPLET){ .rmr_context = 0x7001, .virtual_address = (uintptr_t)&dst,
				 .segment_length = sizeof(dst) };

	const DAT_PROVIDER *prov = ((struct zd_obj *)e.evd)->provider;

	EXPECT(prov->evd_dequeue_func != zd_evd_dequeue,
	       "the mlx5 device's dequeue entry is not in the provider table");
	for (int pass = 0; pass < 2; pass++) {
		dequeue = pass ? prov->evd_dequeue_func : zd_evd_dequeue;
		test_bytes(&e);
		test_ext(&e, ep);
		test_ring_first(&e);
		test_claimed_first(&e);
		test_overflow_first(&e);
		test_disabled(&e);
		test_qp_cache(&e, ep);
		test_race(&e);
		test_entry(&e, ep, prov);
	}
	test_entry_freed(&e, pz, recv_evd, conn_evd, prov);

	CHECK(zd_ia_close(e.ia, DAT_CLOSE_ABRUPT_FLAG));
	if (failures) {
		fprintf(stderr, "test_mlx5_direct: %d failure(s)\n", failures);
		return 1;
	}
	printf("test_mlx5_direct: ok\n");
	return 0;
}
