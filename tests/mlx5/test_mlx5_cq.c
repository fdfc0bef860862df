/*
 * CQE polling: owner-bit ownership over passes of a 4-entry CQ, parsing of
 * every CQE kind zdapl meets, error syndromes to DAT statuses, the
 * consumer index and arm doorbells; then the device's cq_poll turning
 * hand-built CQEs into DAT events (cookies found by wqe_counter,
 * unsignaled WQEs retired, suppressed completions hidden, unknown QPs
 * dropped, SRQ receives by WQE index, the EVD ring's budget kept), and the
 * IB extensions' completions into DAT_IB_DTO_EVENTs (immediate data,
 * atomics' big-endian old values turned to host order, errors, flushes);
 * a NO_PACKET CQE completes nothing.
 */
#include "mlx5_pollenv.h"

#include "core/zd_ep.h"
#include "evd/zd_dto_event.h"
#include "evd/zd_evd.h"
#include "hw/mlx5/zd_mlx5.h"

Test(mlx5, cqe_owner_bit_over_passes)
{
	struct cqenv e;

	cqenv_init(&e, 4, 64);
	cr_assert_null(zd_mlx5_cq_next(&e.cq), "fresh CQ: nothing");
	for (uint32_t pass = 0; pass < 5; pass++) {
		for (uint32_t i = 0; i < 4; i++)
			hw_cqe(&e, MLX5_CQE_REQ, QPN, (uint16_t)(pass * 4 + i), 0, 0, 0);
		for (uint32_t i = 0; i < 4; i++) {
			struct mlx5_cqe64 *c = zd_mlx5_cq_next(&e.cq);

			cr_assert_not_null(c, "pass %u CQE %u", pass, i);
			cr_assert_eq(be16toh(c->wqe_counter), pass * 4 + i);
			e.cq.ci++;
		}
		/* the previous pass's CQEs carry the other parity: not ours */
		cr_assert_null(zd_mlx5_cq_next(&e.cq), "pass %u: stale CQE taken", pass);
		zd_mlx5_cq_update_ci(&e.cq);
		cr_assert_eq(e.dbrec[ZD_MLX5_CQ_SET_CI], htobe32((pass + 1) * 4));
	}
	cqenv_fini(&e);
}

Test(mlx5, cqe_128_bytes_reads_the_second_half)
{
	struct cqenv e;
	struct mlx5_cqe64 *c;

	cqenv_init(&e, 4, 128);
	hw_cqe(&e, MLX5_CQE_RESP_SEND, QPN, 3, 77, 0, 0);
	c = zd_mlx5_cq_next(&e.cq);
	cr_assert_eq((uint8_t *)c, e.buf + 64);
	cr_assert_eq(be32toh(c->byte_cnt), 77);
	cqenv_fini(&e);
}

Test(mlx5, cqe_parse_every_kind)
{
	struct cqenv e;
	struct zd_mlx5_cqe_info ci;
	static const uint8_t resp[] = { MLX5_CQE_RESP_SEND, MLX5_CQE_RESP_SEND_IMM,
					MLX5_CQE_RESP_WR_IMM, MLX5_CQE_RESP_SEND_INV };

	cqenv_init(&e, 4, 64);
	hw_cqe(&e, MLX5_CQE_REQ, 0x123456, 0xbeef, 0, 0, 0);
	zd_mlx5_cqe_parse(zd_mlx5_cq_next(&e.cq), &ci);
	cr_assert(ci.requester && !ci.error);
	cr_assert_eq(ci.qpn, 0x123456);
	cr_assert_eq(ci.wqe_counter, 0xbeef);
	e.cq.ci++;
	for (size_t i = 0; i < sizeof(resp); i++) {
		struct mlx5_cqe64 *c = hw_cqe(&e, resp[i], 0xff000000u | QPN, (uint16_t)i, 1000 + i, 0, 1);

		c->srqn_uidx = htobe32(0x5a5a5a);
		zd_mlx5_cqe_parse(zd_mlx5_cq_next(&e.cq), &ci);
		cr_assert(!ci.requester && !ci.error);
		cr_assert_eq(ci.opcode, resp[i]);
		cr_assert_eq(ci.qpn, QPN, "the top byte of sop_drop_qpn is not the QPN");
		cr_assert_eq(ci.byte_cnt, 1000 + i);
		cr_assert_eq(ci.srqn, 0x5a5a5a);
		cr_assert_eq(mlx5dv_get_cqe_se(c), 1);
		e.cq.ci++;
	}
	hw_cqe(&e, MLX5_CQE_REQ_ERR, QPN, 9, 0, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, 0);
	zd_mlx5_cqe_parse(zd_mlx5_cq_next(&e.cq), &ci);
	cr_assert(ci.requester && ci.error);
	cr_assert_eq(ci.syndrome, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	cr_assert_eq(ci.vendor_syndrome, 0x42);
	cr_assert_eq(ci.wqe_counter, 9);
	cr_assert_eq(ci.qpn, QPN);
	e.cq.ci++;
	hw_cqe(&e, MLX5_CQE_RESP_ERR, QPN, 2, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR, 0);
	zd_mlx5_cqe_parse(zd_mlx5_cq_next(&e.cq), &ci);
	cr_assert(!ci.requester && ci.error);
	cqenv_fini(&e);
}

Test(mlx5, syndromes_to_dat_status)
{
	static const struct {
		uint8_t syn;
		DAT_DTO_COMPLETION_STATUS st;
	} map[] = {
		{ MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, DAT_DTO_ERR_LOCAL_LENGTH },
		{ MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR, DAT_DTO_ERR_LOCAL_EP },
		{ MLX5_CQE_SYNDROME_LOCAL_PROT_ERR, DAT_DTO_ERR_LOCAL_PROTECTION },
		{ MLX5_CQE_SYNDROME_WR_FLUSH_ERR, DAT_DTO_ERR_FLUSHED },
		{ MLX5_CQE_SYNDROME_MW_BIND_ERR, DAT_RMR_OPERATION_FAILED },
		{ MLX5_CQE_SYNDROME_BAD_RESP_ERR, DAT_DTO_ERR_BAD_RESPONSE },
		{ MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR, DAT_DTO_ERR_LOCAL_PROTECTION },
		{ MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR, DAT_DTO_ERR_REMOTE_RESPONDER },
		{ MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR, DAT_DTO_ERR_REMOTE_ACCESS },
		{ MLX5_CQE_SYNDROME_REMOTE_OP_ERR, DAT_DTO_ERR_REMOTE_RESPONDER },
		{ MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR, DAT_DTO_ERR_TRANSPORT },
		{ MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR, DAT_DTO_ERR_RECEIVER_NOT_READY },
		{ MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR, DAT_DTO_ERR_REMOTE_RESPONDER },
		{ 0x77, DAT_DTO_ERR_TRANSPORT },   /* unknown: still an error */
	};

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		cr_assert_eq(zd_mlx5_syndrome_status(map[i].syn), map[i].st, "syndrome 0x%x",
			     map[i].syn);
}

Test(mlx5, arm_doorbell_words)
{
	struct cqenv e;
	uint32_t w[2];

	cqenv_init(&e, 4, 64);
	e.cq.ci = 0x1234567;   /* only 24 bits go to the device */
	zd_mlx5_cq_arm(&e.cq, false);
	cr_assert_eq(be32toh(e.dbrec[ZD_MLX5_CQ_ARM_DB]), 0x234567u | MLX5_CQ_DB_REQ_NOT);
	memcpy(w, e.uar + MLX5_CQ_DOORBELL, 8);
	cr_assert_eq(be32toh(w[0]), 0x234567u);
	cr_assert_eq(be32toh(w[1]), 0x77u, "CQN in the second word");
	/* each completion event moves the arm sequence number (2 bits) */
	for (uint32_t sn = 1; sn < 6; sn++) {
		zd_mlx5_cq_event(&e.cq);
		zd_mlx5_cq_arm(&e.cq, sn == 5);
		memcpy(w, e.uar + MLX5_CQ_DOORBELL, 8);
		cr_assert_eq(be32toh(w[0]), (sn & 3) << 28 |
			     (sn == 5 ? MLX5_CQ_DB_REQ_NOT_SOL : 0) | 0x234567u);
		cr_assert_eq(e.dbrec[ZD_MLX5_CQ_ARM_DB], w[0]);
	}
	cqenv_fini(&e);
}

/* ---- the device's cq_poll over hand-built CQEs ---- */

/* The device writes into the CQ object's copy of the geometry. */
static void cqe(struct pollenv *p, uint8_t op, uint32_t qpn, uint16_t ctr, uint32_t len,
		uint8_t syn)
{
	hw_cqe(&p->ce, op, qpn, ctr, len, syn, 0);
}

static DAT_LMR_TRIPLET one = { .virtual_address = 0x1000, .segment_length = 100,
			       .lmr_context = 5 };

Test(mlx5, poll_requester_cookies_and_unsignaled)
{
	struct pollenv p;
	DAT_DTO_COMPLETION_EVENT_DATA d;
	DAT_RMR_TRIPLET r = { .virtual_address = 0x9000, .rmr_context = 9 };

	pollenv_init(&p, 4, 16, 0, 4);
	/* 0: suppressed, 1: signalled write, 2: signalled read */
	cr_assert_eq(zd_mlx5_post_send(p.ep, 1, &one, (DAT_DTO_COOKIE){ .as_64 = 100 },
				       DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_post_rdma_write(p.ep, 1, &one, (DAT_DTO_COOKIE){ .as_64 = 101 }, &r, 0),
		     DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_post_rdma_read(p.ep, 1, &one, (DAT_DTO_COOKIE){ .as_64 = 102 }, &r, 0),
		     DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_cq_poll(p.evd, 16), 0, "nothing completed yet");
	/* the device reports only signalled WQEs: 1 retires 0 with it */
	cqe(&p, MLX5_CQE_REQ, QPN, 1, 0, 0);
	cqe(&p, MLX5_CQE_REQ, QPN, 2, 0, 0);
	cr_assert_eq(zd_mlx5_cq_poll(p.evd, 16), 2);
	d = pollenv_next_event(&p);
	cr_assert_eq(d.user_cookie.as_64, 101);
	cr_assert_eq(d.operation, DAT_DTO_RDMA_WRITE);
	cr_assert_eq(d.status, DAT_DTO_SUCCESS);
	cr_assert_eq(d.transfered_length, 100);
	d = pollenv_next_event(&p);
	cr_assert_eq(d.user_cookie.as_64, 102);
	cr_assert_eq(d.operation, DAT_DTO_RDMA_READ);
	cr_assert_eq(atomic_load(&p.qp->sq.ci), 3, "all three WQEs retired");
	cr_assert_eq(p.ce.dbrec[ZD_MLX5_CQ_SET_CI], htobe32(2));
	pollenv_fini(&p);
}

Test(mlx5, poll_errors_unknown_qps_and_budget)
{
	struct pollenv p;
	DAT_DTO_COMPLETION_EVENT_DATA d;

	pollenv_init(&p, 4, 16, 0, 4);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(zd_mlx5_post_send(p.ep, 1, &one, (DAT_DTO_COOKIE){ .as_64 = 200 + i },
					       DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	/* a CQE of a QP nobody knows: consumed, dropped */
	cqe(&p, MLX5_CQE_REQ, QPN + 1, 0, 0, 0);
	/* an unsignalled WQE fails: reported with its cookie despite SUPPRESS */
	cqe(&p, MLX5_CQE_REQ_ERR, QPN, 0, 0, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
	/* and the rest flush, each reported */
	cqe(&p, MLX5_CQE_REQ_ERR, QPN, 1, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	cqe(&p, MLX5_CQE_REQ_ERR, QPN, 2, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	/* budget 1: one event, the dropped CQE before it costs nothing */
	cr_assert_eq(zd_mlx5_cq_poll(p.evd, 1), 1);
	d = pollenv_next_event(&p);
	cr_assert_eq(d.user_cookie.as_64, 200);
	cr_assert_eq(d.status, DAT_DTO_ERR_LOCAL_PROTECTION);
	cr_assert_eq(d.transfered_length, 0);
	cr_assert_eq(p.cq->q.ci, 2);
	cr_assert_eq(zd_mlx5_cq_poll(p.evd, 16), 2);
	cr_assert_eq(pollenv_next_event(&p).status, DAT_DTO_ERR_FLUSHED);
	d = pollenv_next_event(&p);
	cr_assert_eq(d.status, DAT_DTO_ERR_FLUSHED);
	cr_assert_eq(d.user_cookie.as_64, 202);
	cr_assert_eq(atomic_load(&p.qp->sq.ci), 3);
	pollenv_fini(&p);
}

/* A CQE of opcode NO_PACKET completes nothing, whatever its body names
 * (the software device gives up a slot its dead writer never wrote so). */
Test(mlx5, poll_no_packet_cqe_completes_nothing)
{
	struct pollenv p;

	pollenv_init(&p, 4, 16, 0, 4);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(zd_mlx5_post_send(p.ep, 1, &one, (DAT_DTO_COOKIE){ .as_64 = 300 + i }, 0),
			     DAT_SUCCESS);
	cqe(&p, MLX5_CQE_NO_PACKET, QPN, 1, 0, 0);
	cqe(&p, MLX5_CQE_REQ, QPN, 0, 0, 0);
	cqe(&p, MLX5_CQE_REQ, QPN, 1, 0, 0);
	cr_assert_eq(zd_mlx5_cq_poll(p.evd, 16), 2);
	cr_assert_eq(pollenv_next_event(&p).user_cookie.as_64, 300);
	cr_assert_eq(pollenv_next_event(&p).user_cookie.as_64, 301);
	cr_assert_eq(p.cq->q.ci, 3, "the NO_PACKET CQE consumed too");
	pollenv_fini(&p);
}

Test(mlx5, poll_receives_in_order_with_owner_wrap)
{
	struct pollenv p;
	DAT_LMR_TRIPLET two[2] = {
		{ .virtual_address = 0x2000, .segment_length = 64, .lmr_context = 6 },
		{ .virtual_address = 0x3000, .segment_length = 64, .lmr_context = 7 },
	};

	pollenv_init(&p, 4, 64, 0, 4);
	for (uint32_t round = 0; round < 6; round++) {
		for (uint32_t i = 0; i < 4; i++)
			cr_assert_eq(zd_mlx5_post_recv(p.ep, 2, two,
						       (DAT_DTO_COOKIE){ .as_64 = round * 4 + i }, 0),
				     DAT_SUCCESS);
		cr_assert_eq(zd_mlx5_post_recv(p.ep, 1, two, (DAT_DTO_COOKIE){ .as_64 = 99 }, 0),
			     DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP), "RQ full");
		cr_assert_eq(p.rqdb, htobe32((round + 1) * 4));
		cqe(&p, MLX5_CQE_RESP_SEND, QPN, 0, 10, 0);
		/* a send with immediate data: the IB extension's receive */
		hw_cqe(&p.ce, MLX5_CQE_RESP_SEND_IMM, QPN, 1, 11, 0, 0)->imm_inval_pkey =
			htobe32(0xfeed0000 + round);
		cqe(&p, MLX5_CQE_RESP_ERR, QPN, 2, 0, MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR);
		cqe(&p, MLX5_CQE_RESP_ERR, QPN, 3, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
		cr_assert_eq(zd_mlx5_cq_poll(p.evd, 64), 4);
		for (uint32_t i = 0; i < 4; i++) {
			DAT_EVENT ev = pollenv_next_any(&p, i == 1 ? (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT :
								     DAT_DTO_COMPLETION_EVENT);
			DAT_DTO_COMPLETION_EVENT_DATA d = ev.event_data.dto_completion_event_data;

			cr_assert_eq(d.user_cookie.as_64, round * 4 + i);
			cr_assert_eq(d.operation, i == 1 ? (DAT_DTOS)DAT_IB_DTO_RECV_MSG_IMMED :
							   DAT_DTO_RECEIVE);
			cr_assert_eq(d.status, i < 2 ? DAT_DTO_SUCCESS :
				     i == 2 ? DAT_DTO_ERR_LOCAL_LENGTH : DAT_DTO_ERR_FLUSHED);
			cr_assert_eq(d.transfered_length, i < 2 ? 10 + i : 0);
			if (i == 1) {
				const DAT_IB_EXTENSION_EVENT_DATA *x =
					(const void *)ev.event_extension_data;

				cr_assert_eq(x->type, DAT_IB_RECV_IMMED_DATA);
				cr_assert_eq(x->val.immed.data, 0xfeed0000 + round);
			}
		}
	}
	/* receive WQE layout: two segments, then the invalid-lkey terminator */
	{
		struct mlx5_wqe_data_seg *ds = (void *)p.rqbuf;

		cr_assert_eq(ds[0].lkey, htobe32(6));
		cr_assert_eq(ds[1].addr, htobe64(0x3000));
		cr_assert_eq(ds[1].byte_count, htobe32(64));
		cr_assert_eq(ds[2].lkey, htobe32(MLX5_INVALID_LKEY));
		cr_assert_eq(ds[2].byte_count, 0);
	}
	pollenv_fini(&p);
}

/* ---- IB extension completions: DAT_IB_DTO_EVENTs, atomic results to host order ---- */

/* The next event: a DAT_IB_DTO_EVENT of @op with its extension type. */
static DAT_DTO_COMPLETION_EVENT_DATA next_ext(struct pollenv *p, DAT_DTOS op,
					      DAT_IB_EXT_TYPE type, DAT_IB_STATUS xst)
{
	DAT_EVENT ev = pollenv_next_any(p, (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	const DAT_IB_EXTENSION_EVENT_DATA *x = (const void *)ev.event_extension_data;

	cr_assert_eq(ev.event_data.dto_completion_event_data.operation, op);
	cr_assert_eq(x->type, type);
	cr_assert_eq(x->status, xst);
	return ev.event_data.dto_completion_event_data;
}

Test(mlx5, poll_extension_completions)
{
	struct pollenv p;
	DAT_DTO_COMPLETION_EVENT_DATA d;
	DAT_RMR_TRIPLET r = { .virtual_address = 0x9000, .segment_length = 8, .rmr_context = 9 };
	static uint64_t res[4];
	DAT_LMR_TRIPLET w[4];
	DAT_EVENT ev;

	pollenv_init(&p, 16, 32, 0, 4);
	p.qp->atomic_be = true;
	for (int i = 0; i < 4; i++)
		w[i] = (DAT_LMR_TRIPLET){ .virtual_address = (uintptr_t)&res[i], .segment_length = 8,
					  .lmr_context = 5 };
	/* 0 write with immediate, 1 FAA, 2 CAS, 3 FAA suppressed */
	cr_assert_eq(zd_mlx5_post_rdma_write_imm(p.ep, 1, &one, (DAT_DTO_COOKIE){ .as_64 = 300 }, &r,
						 0xabcd, 0), DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_post_atomic(p.ep, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, &w[1],
					 (DAT_DTO_COOKIE){ .as_64 = 301 }, &r, 5, 0, 0), DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_post_atomic(p.ep, (DAT_DTOS)DAT_IB_DTO_CMP_SWAP, &w[2],
					 (DAT_DTO_COOKIE){ .as_64 = 302 }, &r, 5, 6, 0), DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_post_atomic(p.ep, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, &w[3],
					 (DAT_DTO_COOKIE){ .as_64 = 303 }, &r, 5, 0,
					 DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	/* The NIC: old values big-endian, then the requester CQEs (the
	 * suppressed atomic signalled all the same: its value needs the swap). */
	cr_assert(((struct mlx5_wqe_ctrl_seg *)zd_mlx5_sq_bb(&p.qp->sq, 3))->fm_ce_se &
		  MLX5_WQE_CTRL_CQ_UPDATE);
	res[1] = htobe64(0x1122334455667788ull);
	res[2] = htobe64(5);
	res[3] = htobe64(0x8000000000000001ull);
	for (uint16_t i = 0; i < 4; i++)
		cqe(&p, MLX5_CQE_REQ, QPN, i, i ? 8 : 100, 0);
	/* the target side: a receive consumed by a write with immediate data */
	cr_assert_eq(zd_mlx5_post_recv(p.ep, 1, &one, (DAT_DTO_COOKIE){ .as_64 = 310 }, 0),
		     DAT_SUCCESS);
	hw_cqe(&p.ce, MLX5_CQE_RESP_WR_IMM, QPN, 0, 4096, 0, 1)->imm_inval_pkey = htobe32(0x7777);

	cr_assert_eq(zd_mlx5_cq_poll(p.evd, 32), 4);
	d = next_ext(&p, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED,
		     DAT_OP_SUCCESS);
	cr_assert_eq(d.user_cookie.as_64, 300);
	cr_assert_eq(d.status, DAT_DTO_SUCCESS);
	cr_assert_eq(d.transfered_length, 100);
	d = next_ext(&p, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, DAT_IB_FETCH_AND_ADD, DAT_OP_SUCCESS);
	cr_assert_eq(d.user_cookie.as_64, 301);
	cr_assert_eq(d.transfered_length, 8);
	cr_assert_eq(res[1], 0x1122334455667788ull, "the old value in host order");
	d = next_ext(&p, (DAT_DTOS)DAT_IB_DTO_CMP_SWAP, DAT_IB_CMP_AND_SWAP, DAT_OP_SUCCESS);
	cr_assert_eq(d.user_cookie.as_64, 302);
	cr_assert_eq(res[2], 5);
	/* the suppressed one: no event, its value turned all the same */
	cr_assert_eq(res[3], 0x8000000000000001ull);
	ev = pollenv_next_any(&p, (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT);
	{
		const DAT_IB_EXTENSION_EVENT_DATA *x = (const void *)ev.event_extension_data;
		uint32_t mark;

		d = ev.event_data.dto_completion_event_data;
		cr_assert_eq(d.operation, (DAT_DTOS)DAT_IB_DTO_RECV_IMMED);
		cr_assert_eq(d.user_cookie.as_64, 310);
		cr_assert_eq(d.transfered_length, 4096, "the write's length");
		cr_assert_eq(x->type, DAT_IB_RDMA_WRITE_IMMED_DATA);
		cr_assert_eq(x->val.immed.data, 0x7777);
		memcpy(&mark, (const char *)&ev + sizeof(DAT_EVENT_NUMBER), sizeof(mark));
		cr_assert_eq(mark, ZD_EVD_SOLICITED_MAGIC, "the CQE's solicited bit kept");
	}
	cr_assert_not(zd_ring_dequeue(p.evd->ring, &ev));
	cr_assert_eq(atomic_load(&p.qp->sq.ci), 4);

	/* Errors: the extension event with its status, the local word left
	 * as it was; a flush keeps the operation.  A device writing host
	 * order: nothing turned, and a suppressed atomic unsignalled. */
	p.qp->atomic_be = false;
	res[1] = res[2] = 0x0102030405060708ull;
	cr_assert_eq(zd_mlx5_post_atomic(p.ep, (DAT_DTOS)DAT_IB_DTO_CMP_SWAP, &w[1],
					 (DAT_DTO_COOKIE){ .as_64 = 320 }, &r, 1, 2, 0), DAT_SUCCESS);
	cr_assert_eq(zd_mlx5_post_atomic(p.ep, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, &w[2],
					 (DAT_DTO_COOKIE){ .as_64 = 321 }, &r, 1, 0,
					 DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	cr_assert_not(((struct mlx5_wqe_ctrl_seg *)zd_mlx5_sq_bb(&p.qp->sq, 5))->fm_ce_se &
		      MLX5_WQE_CTRL_CQ_UPDATE);
	cr_assert_eq(zd_mlx5_post_rdma_write_imm(p.ep, 1, &one, (DAT_DTO_COOKIE){ .as_64 = 322 }, &r,
						 1, DAT_COMPLETION_SUPPRESS_FLAG), DAT_SUCCESS);
	cqe(&p, MLX5_CQE_REQ_ERR, QPN, 4, 0, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	cqe(&p, MLX5_CQE_REQ_ERR, QPN, 5, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	cqe(&p, MLX5_CQE_REQ_ERR, QPN, 6, 0, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
	cr_assert_eq(zd_mlx5_cq_poll(p.evd, 32), 3);
	d = next_ext(&p, (DAT_DTOS)DAT_IB_DTO_CMP_SWAP, DAT_IB_CMP_AND_SWAP, DAT_IB_OP_ERR);
	cr_assert_eq(d.status, DAT_DTO_ERR_REMOTE_ACCESS);
	cr_assert_eq(d.user_cookie.as_64, 320);
	cr_assert_eq(d.transfered_length, 0);
	d = next_ext(&p, (DAT_DTOS)DAT_IB_DTO_FETCH_ADD, DAT_IB_FETCH_AND_ADD, DAT_IB_OP_ERR);
	cr_assert_eq(d.status, DAT_DTO_ERR_FLUSHED);
	cr_assert_eq(d.user_cookie.as_64, 321);
	d = next_ext(&p, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, DAT_IB_RDMA_WRITE_IMMED,
		     DAT_IB_OP_ERR);
	cr_assert_eq(d.status, DAT_DTO_ERR_FLUSHED);
	cr_assert_eq(d.user_cookie.as_64, 322);
	cr_assert_eq(res[1], 0x0102030405060708ull);
	cr_assert_eq(res[2], 0x0102030405060708ull);
	cr_assert_eq(atomic_load(&p.qp->sq.ci), 7);
	pollenv_fini(&p);
}
