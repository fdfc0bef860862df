/* shm device: receive-queue counts and watermarks: dat_ep_recv_query,
 * dat_ep_set_watermark, dat_srq_query's available/outstanding counts, and
 * their error paths. */
#include "zd_shm_test.h"

TestSuite(shm_recvq, .init = t_need_conf, .timeout = 60);

enum { LEN = 32, NBUF = 8 };

static struct side A, B;
static DAT_EP_HANDLE ea, eb;
static DAT_SRQ_HANDLE srq;
static char src[NBUF][LEN], dst[NBUF][LEN];
static DAT_LMR_CONTEXT ka, kb;

static void setup(bool with_srq)
{
	t_open(&A);
	t_open(&B);
	ea = t_ep(&A, NULL);
	if (with_srq) {
		DAT_SRQ_ATTR sa = { .max_recv_dtos = 10, .max_recv_iov = 1,
				    .low_watermark = DAT_SRQ_LW_DEFAULT };

		cr_assert_eq(dat_srq_create(B.ia, B.pz, &sa, &srq), DAT_SUCCESS);
		cr_assert_eq(dat_ep_create_with_srq(B.ia, B.pz, B.rcv, B.req, DAT_HANDLE_NULL, srq,
						    NULL, &eb), DAT_SUCCESS);
	} else {
		eb = t_ep(&B, NULL);
	}
	t_reg(&A, NULL, src, sizeof(src), DAT_MEM_PRIV_ALL_FLAG, &ka);
	t_reg(&B, NULL, dst, sizeof(dst), DAT_MEM_PRIV_ALL_FLAG, &kb);
	for (int i = 0; i < NBUF; i++)
		snprintf(src[i], LEN, "msg %d", i);
}

static void post_recv(int i)
{
	DAT_LMR_TRIPLET r = t_seg(kb, dst[i], LEN);

	cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie((uint64_t)i), 0), DAT_SUCCESS);
}

static void post_srq(int i)
{
	DAT_LMR_TRIPLET r = t_seg(kb, dst[i], LEN);

	cr_assert_eq(dat_srq_post_recv(srq, 1, &r, t_cookie((uint64_t)i)), DAT_SUCCESS);
}

static void send_msg(int i)
{
	DAT_LMR_TRIPLET s = t_seg(ka, src[i], LEN);

	cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie(100), 0), DAT_SUCCESS);
	t_expect(A.req, ea, 100, DAT_DTO_SUCCESS, DAT_DTO_SEND, LEN);
}

static void expect_bufs(DAT_EP_HANDLE ep, DAT_COUNT n)
{
	DAT_COUNT nbufs = -1, span = -1;

	cr_assert_eq(dat_ep_recv_query(ep, &nbufs, &span), DAT_SUCCESS);
	cr_assert_eq(nbufs, n, "nbufs_allocated %d, expected %d", nbufs, n);
	/* Buffers are allocated in message order: the span is the count. */
	cr_assert_eq(span, n, "bufs_alloc_span %d, expected %d", span, n);
}

static void expect_srq(DAT_COUNT avail, DAT_COUNT outstanding)
{
	DAT_SRQ_PARAM p;

	cr_assert_eq(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &p), DAT_SUCCESS);
	cr_assert_eq(p.max_recv_dtos, 10);
	cr_assert_eq(p.available_dto_count, avail, "available %d, expected %d",
		     p.available_dto_count, avail);
	cr_assert_eq(p.outstanding_dto_count, outstanding, "outstanding %d, expected %d",
		     p.outstanding_dto_count, outstanding);
}

/* The soft high watermark event of @ep, or none (@ep NULL). */
static void expect_hwm_event(DAT_EP_HANDLE ep)
{
	DAT_EVENT ev;

	if (!ep) {
		cr_assert_eq(T_TYPE(dat_evd_dequeue(B.async, &ev)), DAT_QUEUE_EMPTY);
		return;
	}
	cr_assert_eq(dat_evd_dequeue(B.async, &ev), DAT_SUCCESS, "no watermark event");
	cr_assert_eq(ev.event_number, DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR);
	cr_assert_eq(ev.event_data.asynch_error_event_data.dat_handle, ep);
	cr_assert_eq(ev.event_data.asynch_error_event_data.reason,
		     DAT_SRQ_SOFT_HIGH_WATERMARK_EVENT);
}

Test(shm_recvq, recv_query_counts_posted_not_completed)
{
	setup(false);
	expect_bufs(eb, 0);
	for (int i = 0; i < 3; i++)
		post_recv(i);
	/* Posted before the connection: allocated already. */
	expect_bufs(eb, 3);
	t_connect(ea, eb);
	send_msg(0);
	/* Arrived, but completed only once the EVD hands it out. */
	t_expect(B.rcv, eb, 0, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE, LEN);
	expect_bufs(eb, 2);
	/* Either count alone may be asked for. */
	{
		DAT_COUNT n = -1;

		cr_assert_eq(dat_ep_recv_query(eb, &n, NULL), DAT_SUCCESS);
		cr_assert_eq(n, 2);
		n = -1;
		cr_assert_eq(dat_ep_recv_query(eb, NULL, &n), DAT_SUCCESS);
		cr_assert_eq(n, 2);
	}
	/* Flushed receives are completed. */
	t_flush(eb);
	expect_bufs(eb, 0);
	t_close(&A);
	t_close(&B);
}

Test(shm_recvq, srq_counts_follow_the_spec_example)
{
	setup(true);
	t_connect(ea, eb);
	/* dat_srq_query(3DAT)'s example: 10 entries, one EP, 3 posted. */
	for (int i = 0; i < 3; i++)
		post_srq(i);
	expect_srq(3, 3);
	expect_bufs(eb, 0);
	/* A message arrives: its buffer is the EP's until it completes. */
	send_msg(0);
	expect_srq(2, 3);
	expect_bufs(eb, 1);
	/* The consumer takes the completion. */
	t_expect(B.rcv, eb, 0, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE, LEN);
	expect_srq(2, 2);
	expect_bufs(eb, 0);
	cr_assert_str_eq(dst[0], "msg 0");
	t_close(&A);
	t_close(&B);
}

Test(shm_recvq, soft_watermark_fires_once_per_setting)
{
	DAT_EP_PARAM p;

	setup(false);
	t_connect(ea, eb);
	cr_assert_eq(dat_ep_set_watermark(eb, 2, DAT_WATERMARK_INFINITE), DAT_SUCCESS);
	cr_assert_eq(dat_ep_query(eb, DAT_EP_FIELD_EP_ATTR_SRQ_SOFT_HW, &p), DAT_SUCCESS);
	cr_assert_eq(p.ep_attr.srq_soft_hw, 2);
	post_recv(0);
	post_recv(1);
	expect_hwm_event(NULL);  /* 2 is not above 2 */
	post_recv(2);
	expect_hwm_event(eb);
	post_recv(3);
	expect_hwm_event(NULL);  /* once per setting */
	/* Set below the current count: it fires during the call. */
	cr_assert_eq(dat_ep_set_watermark(eb, 1, DAT_WATERMARK_INFINITE), DAT_SUCCESS);
	expect_hwm_event(eb);
	/* Disarmed by DAT_WATERMARK_INFINITE. */
	cr_assert_eq(dat_ep_set_watermark(eb, DAT_WATERMARK_INFINITE, DAT_WATERMARK_INFINITE),
		     DAT_SUCCESS);
	post_recv(4);
	expect_hwm_event(NULL);
	t_close(&A);
	t_close(&B);
}

Test(shm_recvq, soft_watermark_on_an_srq_ep)
{
	DAT_EVENT ev;

	setup(true);
	t_connect(ea, eb);
	for (int i = 0; i < 4; i++)
		post_srq(i);
	cr_assert_eq(dat_ep_set_watermark(eb, 1, DAT_WATERMARK_INFINITE), DAT_SUCCESS);
	expect_hwm_event(NULL);
	/* Two buffers taken for the EP: seen when its EVD is polled. */
	send_msg(0);
	send_msg(1);
	cr_assert_eq(dat_evd_dequeue(B.rcv, &ev), DAT_SUCCESS);
	expect_hwm_event(eb);
	t_close(&A);
	t_close(&B);
}

Test(shm_recvq, error_paths)
{
	DAT_COUNT n, m;
	DAT_SRQ_PARAM sp;

	setup(true);
	/* Handles: none, another object's, a freed EP's. */
	cr_assert_eq(T_TYPE(dat_ep_recv_query(DAT_HANDLE_NULL, &n, &m)), DAT_INVALID_HANDLE);
	cr_assert_eq(T_TYPE(dat_ep_recv_query((DAT_EP_HANDLE)B.pz, &n, &m)), DAT_INVALID_HANDLE);
	cr_assert_eq(T_TYPE(dat_ep_set_watermark(DAT_HANDLE_NULL, 1, 1)), DAT_INVALID_HANDLE);
	cr_assert_eq(T_TYPE(dat_ep_set_watermark((DAT_EP_HANDLE)B.rcv, 1, 1)),
		     DAT_INVALID_HANDLE);
	cr_assert_eq(T_TYPE(dat_srq_query(DAT_HANDLE_NULL, DAT_SRQ_FIELD_ALL, &sp)),
		     DAT_INVALID_HANDLE);
	cr_assert_eq(T_TYPE(dat_srq_query((DAT_SRQ_HANDLE)eb, DAT_SRQ_FIELD_ALL, &sp)),
		     DAT_INVALID_HANDLE);
	{
		DAT_EP_HANDLE gone = t_ep(&B, NULL);

		cr_assert_eq(dat_ep_free(gone), DAT_SUCCESS);
		cr_assert_eq(T_TYPE(dat_ep_recv_query(gone, &n, &m)), DAT_INVALID_HANDLE);
		cr_assert_eq(T_TYPE(dat_ep_set_watermark(gone, 1, DAT_WATERMARK_INFINITE)),
			     DAT_INVALID_HANDLE);
	}
	/* Parameters: nothing to return; negative watermarks; NULL param. */
	cr_assert_eq(T_TYPE(dat_ep_recv_query(eb, NULL, NULL)), DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_ep_set_watermark(eb, -5, DAT_WATERMARK_INFINITE)),
		     DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_ep_set_watermark(eb, 1, -7)), DAT_INVALID_PARAMETER);
	cr_assert_eq(T_TYPE(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, NULL)), DAT_INVALID_PARAMETER);
	/* A hard watermark (break the connection) is not supported. */
	cr_assert_eq(T_TYPE(dat_ep_set_watermark(eb, DAT_WATERMARK_INFINITE, 4)),
		     DAT_MODEL_NOT_SUPPORTED);
	/* No state is wrong for these calls (the pages name none): each works
	 * unconnected, connected and disconnected. */
	for (int phase = 0; phase < 3; phase++) {
		if (phase == 1)
			t_connect(ea, eb);
		if (phase == 2)
			t_flush(eb);
		cr_assert_eq(dat_ep_recv_query(eb, &n, &m), DAT_SUCCESS);
		cr_assert_eq(dat_ep_set_watermark(eb, 3, DAT_WATERMARK_INFINITE), DAT_SUCCESS);
		cr_assert_eq(dat_ep_set_watermark(eb, DAT_WATERMARK_INFINITE,
						  DAT_WATERMARK_INFINITE), DAT_SUCCESS);
		cr_assert_eq(dat_srq_query(srq, DAT_SRQ_FIELD_ALL, &sp), DAT_SUCCESS);
	}
	/* An EP without a PZ holds no buffers. */
	{
		DAT_EP_HANDLE bare;

		cr_assert_eq(dat_ep_create(B.ia, DAT_HANDLE_NULL, B.rcv, B.req, DAT_HANDLE_NULL,
					   NULL, &bare), DAT_SUCCESS);
		n = m = -1;
		cr_assert_eq(dat_ep_recv_query(bare, &n, &m), DAT_SUCCESS);
		cr_assert_eq(n, 0);
		cr_assert_eq(m, 0);
	}
	t_close(&A);
	t_close(&B);
}
