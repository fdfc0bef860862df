/* shm device: shared receive queues (several EPs, eager, low watermark),
 * and the SRQ calls' checks. */
#include "zd_shm_test.h"
#include "core/zd_srq.h"

TestSuite(shm_srq, .init = t_need_conf, .timeout = 60);

enum { NEP = 3, PER = 4, LEN = 32 };

static struct side A, B;
static DAT_SRQ_HANDLE srq;
static DAT_EP_HANDLE ea[NEP], eb[NEP];
static char src[NEP][PER][LEN], dst[NEP * PER * 2][LEN];
static DAT_LMR_CONTEXT ka, kb;

static void setup(DAT_COUNT depth)
{
	DAT_SRQ_ATTR sa = { .max_recv_dtos = depth, .max_recv_iov = 4,
			    .low_watermark = DAT_SRQ_LW_DEFAULT };

	t_open(&A);
	t_open(&B);
	cr_assert_eq(dat_srq_create(B.ia, B.pz, &sa, &srq), DAT_SUCCESS);
	for (int i = 0; i < NEP; i++) {
		ea[i] = t_ep(&A, NULL);
		cr_assert_eq(dat_ep_create_with_srq(B.ia, B.pz, B.rcv, B.req, DAT_HANDLE_NULL, srq,
						    NULL, &eb[i]), DAT_SUCCESS);
		t_connect(ea[i], eb[i]);
	}
	t_reg(&A, NULL, src, sizeof(src), DAT_MEM_PRIV_ALL_FLAG, &ka);
	t_reg(&B, NULL, dst, sizeof(dst), DAT_MEM_PRIV_ALL_FLAG, &kb);
	for (int e = 0; e < NEP; e++)
		for (int m = 0; m < PER; m++)
			snprintf(src[e][m], LEN, "ep%d msg%d", e, m);
}

static void post_srq(int first, int n)
{
	for (int i = first; i < first + n; i++) {
		DAT_LMR_TRIPLET r = t_seg(kb, dst[i], LEN);
		cr_assert_eq(dat_srq_post_recv(srq, 1, &r, t_cookie((uint64_t)i)), DAT_SUCCESS);
	}
}

static void send_all(void)
{
	for (int m = 0; m < PER; m++)
		for (int e = 0; e < NEP; e++) {
			DAT_LMR_TRIPLET s = t_seg(ka, src[e][m], LEN);
			cr_assert_eq(dat_ep_post_send(ea[e], 1, &s, t_cookie(100), 0), DAT_SUCCESS);
		}
}

/* Every message arrives once, on the EP its sender is connected to, in
 * per-connection order. */
static void check_all(void)
{
	int next[NEP] = { 0 };

	for (int i = 0; i < NEP * PER; i++) {
		DAT_DTO_COMPLETION_EVENT_DATA d = t_next(B.rcv);
		int e = -1, m;
		char *buf;

		cr_assert_eq(d.status, DAT_DTO_SUCCESS);
		cr_assert_eq(d.operation, DAT_DTO_RECEIVE);
		cr_assert_eq(d.transfered_length, LEN);
		for (int k = 0; k < NEP; k++)
			if (d.ep_handle == eb[k])
				e = k;
		cr_assert(e >= 0, "completion names no EP of the SRQ");
		cr_assert(d.user_cookie.as_64 < NEP * PER * 2);
		buf = dst[d.user_cookie.as_64];
		cr_assert_eq(sscanf(buf, "ep%*d msg%d", &m), 1, "buffer holds '%s'", buf);
		cr_assert_eq(buf[2] - '0', e, "ep%d's message completed on ep%d", buf[2] - '0', e);
		cr_assert_eq(m, next[e], "ep%d: message %d before %d", e, m, next[e]);
		next[e]++;
	}
	t_none(B.rcv);
}

static void drain_sends(int n)
{
	for (int i = 0; i < n; i++) {
		DAT_DTO_COMPLETION_EVENT_DATA d = t_next(A.req);
		cr_assert_eq(d.status, DAT_DTO_SUCCESS);
		cr_assert_eq(d.operation, DAT_DTO_SEND);
	}
}

Test(shm_srq, several_eps_share_buffers)
{
	setup(64);
	post_srq(0, NEP * PER);
	send_all();
	drain_sends(NEP * PER);
	check_all();
	t_close(&A);
	t_close(&B);
}

Test(shm_srq, sends_before_buffers)
{
	setup(64);
	/* Nothing posted: every message waits in its QP's eager ring. */
	send_all();
	drain_sends(NEP * PER);
	t_none(B.rcv);
	post_srq(0, NEP * PER);
	check_all();
	t_close(&A);
	t_close(&B);
}

/* Messages waiting in the eager rings when their EPs are flushed (the
 * peers disconnected) still take the SRQ's buffers, in order, and each
 * EP's "last WQE reached" (DAT_ASYNC_ERROR_EP_BROKEN) waits for them:
 * an SRQ consumer frees its EP on that event. */
Test(shm_srq, eager_messages_outlive_the_flush_and_last_wqe_waits)
{
	DAT_EVENT ev;

	setup(64);
	send_all();
	drain_sends(NEP * PER);
	for (int e = 0; e < NEP; e++)
		t_flush(eb[e]);
	t_none(B.rcv);
	cr_assert_eq(T_TYPE(dat_evd_dequeue(B.async, &ev)), DAT_QUEUE_EMPTY);
	post_srq(0, NEP * PER);
	check_all();
	for (int e = 0; e < NEP; e++) {
		cr_assert_eq(dat_evd_dequeue(B.async, &ev), DAT_SUCCESS);
		cr_assert_eq(ev.event_number, DAT_ASYNC_ERROR_EP_BROKEN);
	}
	cr_assert_eq(T_TYPE(dat_evd_dequeue(B.async, &ev)), DAT_QUEUE_EMPTY);
	/* Buffers posted now stay with the SRQ. */
	post_srq(NEP * PER, 2);
	t_none(B.rcv);
	t_close(&A);
	t_close(&B);
}

Test(shm_srq, low_watermark_event)
{
	DAT_EVENT ev;
	DAT_SRQ_PARAM p;
	DAT_LMR_TRIPLET s;

	setup(64);
	post_srq(0, 6);
	cr_assert_eq(dat_srq_set_lw(srq, 3), DAT_SUCCESS);
	cr_assert_eq(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &p), DAT_SUCCESS);
	cr_assert_eq(p.low_watermark, 3);
	cr_assert_eq(p.max_recv_dtos, 64);
	cr_assert_eq(p.max_recv_iov, 4);
	cr_assert_eq(p.pz_handle, B.pz);
	cr_assert_eq(p.srq_state, DAT_SRQ_STATE_OPERATIONAL);
	/* 6 -> 3 available: not below the watermark yet. */
	s = t_seg(ka, src[0][0], LEN);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(dat_ep_post_send(ea[i % NEP], 1, &s, t_cookie(1), 0), DAT_SUCCESS);
		t_next(B.rcv);
	}
	cr_assert_eq(T_TYPE(dat_evd_dequeue(B.async, &ev)), DAT_QUEUE_EMPTY);
	/* 2 available: one event, naming the SRQ. */
	cr_assert_eq(dat_ep_post_send(ea[0], 1, &s, t_cookie(1), 0), DAT_SUCCESS);
	t_next(B.rcv);
	cr_assert_eq(dat_evd_dequeue(B.async, &ev), DAT_SUCCESS);
	cr_assert_eq(ev.event_data.asynch_error_event_data.dat_handle, srq);
	cr_assert_eq(ev.event_data.asynch_error_event_data.reason, DAT_SRQ_LOW_WATERMARK_EVENT);
	/* It fires once per dat_srq_set_lw. */
	cr_assert_eq(dat_ep_post_send(ea[1], 1, &s, t_cookie(1), 0), DAT_SUCCESS);
	t_next(B.rcv);
	cr_assert_eq(T_TYPE(dat_evd_dequeue(B.async, &ev)), DAT_QUEUE_EMPTY);
	cr_assert_eq(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &p), DAT_SUCCESS);
	cr_assert_eq(p.low_watermark, DAT_SRQ_LW_DEFAULT);
	t_close(&A);
	t_close(&B);
}

Test(shm_srq, lifetime_and_checks)
{
	DAT_SRQ_ATTR sa = { .max_recv_dtos = 8, .max_recv_iov = 2, .low_watermark = 0 };
	DAT_SRQ_HANDLE s2;
	DAT_EP_HANDLE ep;
	DAT_PZ_HANDLE pz2;
	DAT_LMR_TRIPLET r[3];
	DAT_SRQ_ATTR bad;

	setup(8);
	/* In use by EPs. */
	cr_assert_eq(dat_srq_free(srq),
		     DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE));
	/* Receives of an SRQ EP come from the SRQ. */
	r[0] = t_seg(kb, dst[0], LEN);
	cr_assert_eq(T_TYPE(dat_ep_post_recv(eb[0], 1, r, t_cookie(0), 0)), DAT_INVALID_STATE);
	/* The SRQ's PZ only. */
	cr_assert_eq(dat_pz_create(B.ia, &pz2), DAT_SUCCESS);
	cr_assert_eq(T_TYPE(dat_ep_create_with_srq(B.ia, pz2, B.rcv, B.req, DAT_HANDLE_NULL,
						   srq, NULL, &ep)),
		     DAT_INVALID_PARAMETER);
	cr_assert_eq(dat_ep_create_with_srq(B.ia, B.pz, B.rcv, B.req, DAT_HANDLE_NULL, B.pz,
					    NULL, &ep),
		     DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	/* create */
	bad = sa;
	bad.max_recv_dtos = 0;
	cr_assert_eq(T_TYPE(dat_srq_create(B.ia, B.pz, &bad, &s2)), DAT_INVALID_PARAMETER);
	bad = sa;
	bad.max_recv_iov = 1000;
	cr_assert_eq(T_TYPE(dat_srq_create(B.ia, B.pz, &bad, &s2)), DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_srq_create(B.ia, B.pz, NULL, &s2)), DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_srq_create(B.ia, B.rcv, &sa, &s2)), DAT_INVALID_HANDLE);
	cr_assert_eq(dat_srq_create(B.ia, B.pz, &sa, &s2), DAT_SUCCESS);
	/* post_recv */
	r[1] = r[2] = r[0];
	cr_assert_eq(T_TYPE(dat_srq_post_recv(s2, 3, r, t_cookie(0))), DAT_LENGTH_ERROR);
	cr_assert_eq(T_TYPE(dat_srq_post_recv(s2, -1, r, t_cookie(0))), DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_srq_post_recv(s2, 1, NULL, t_cookie(0))), DAT_INVALID_PARAMETER);
	r[0].lmr_context ^= 0x100000;
	cr_assert_eq(T_TYPE(dat_srq_post_recv(s2, 1, r, t_cookie(0))), DAT_PROTECTION_VIOLATION);
	r[0].lmr_context ^= 0x100000;
	for (int i = 0; i < 8; i++)
		cr_assert_eq(dat_srq_post_recv(s2, 1, r, t_cookie(0)), DAT_SUCCESS);
	cr_assert_eq(T_TYPE(dat_srq_post_recv(s2, 1, r, t_cookie(0))),
		     DAT_INSUFFICIENT_RESOURCES);
	cr_assert_eq(dat_srq_resize(s2, 16), DAT_SUCCESS);
	cr_assert_eq(dat_srq_post_recv(s2, 1, r, t_cookie(0)), DAT_SUCCESS);
	cr_assert_eq(T_TYPE(dat_srq_resize(s2, 0)), DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_srq_set_lw(s2, -1)), DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_srq_set_lw(s2, 17)), DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_srq_query(s2, DAT_SRQ_FIELD_ALL, NULL)), DAT_INVALID_PARAMETER);
	/* bad handles: live handles of other types */
	cr_assert_eq(dat_srq_free(B.pz), DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ));
	cr_assert_eq(T_TYPE(dat_srq_post_recv(B.rcv, 1, r, t_cookie(0))), DAT_INVALID_HANDLE);
	cr_assert_eq(T_TYPE(dat_srq_set_lw(B.pz, 1)), DAT_INVALID_HANDLE);
	cr_assert_eq(T_TYPE(dat_srq_resize(B.pz, 1)), DAT_INVALID_HANDLE);
	cr_assert_eq(dat_srq_free(s2), DAT_SUCCESS);
	cr_assert_eq(T_TYPE(dat_srq_free(s2)), DAT_INVALID_HANDLE);
	/* Free after its EPs. */
	for (int i = 0; i < NEP; i++)
		cr_assert_eq(dat_ep_free(eb[i]), DAT_SUCCESS);
	cr_assert_eq(dat_srq_free(srq), DAT_SUCCESS);
	t_close(&A);
	t_close(&B);
}

Test(shm_srq, flush_returns_taken_buffers_only)
{
	setup(64);
	post_srq(0, 4);
	t_flush(eb[0]);
	/* Untaken SRQ buffers stay with the SRQ: nothing to report. */
	t_none(B.rcv);
	/* Sends to the flushed EP fail; the others still get buffers. */
	{
		DAT_LMR_TRIPLET s = t_seg(ka, src[1][0], LEN);
		cr_assert_eq(dat_ep_post_send(ea[0], 1, &s, t_cookie(1), 0), DAT_SUCCESS);
		t_expect(A.req, ea[0], 1, DAT_DTO_ERR_FLUSHED, DAT_DTO_SEND, 0);
		cr_assert_eq(dat_ep_post_send(ea[1], 1, &s, t_cookie(2), 0), DAT_SUCCESS);
		t_expect(A.req, ea[1], 2, DAT_DTO_SUCCESS, DAT_DTO_SEND, LEN);
		t_expect(B.rcv, eb[1], 0, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE, LEN);
	}
	/* IA close with live SRQ, EPs and buffers. */
	t_close(&A);
	t_close(&B);
}
