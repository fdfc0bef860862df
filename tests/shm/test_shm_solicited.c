/* shm device: solicited wait.  An EP whose recv completion flags are
 * DAT_COMPLETION_SOLICITED_WAIT_FLAG puts its recv EVD in solicited mode
 * (dat_ep_create(3DAT)): a consumer in dat_evd_wait (threshold 1) is woken
 * by a receive whose sender posted DAT_COMPLETION_SOLICITED_WAIT_FLAG, or
 * by an error, not by a plain receive; every completion is still queued,
 * in order.  The receive a write with immediate data consumes counts as a
 * receive (solicited if its writer asked). */
#include <poll.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>

#include "zd_shm_test.h"
#include <dat2/dat_ib_extensions.h>

TestSuite(shm_solicited, .init = t_need_conf, .timeout = 60);

enum { LEN = 64 };

static struct side A, B;
static DAT_EP_HANDLE ea, eb;
static char src[4][LEN], dst[4][LEN];
static DAT_LMR_CONTEXT ka, kb;

struct waiter {
	pthread_t th;
	DAT_EVD_HANDLE evd;
	DAT_TIMEOUT timeout;
	_Atomic int done;
	DAT_RETURN ret;
	DAT_EVENT ev;
	DAT_COUNT nmore;
};

static void *wait_main(void *arg)
{
	struct waiter *w = arg;

	w->ret = dat_evd_wait(w->evd, w->timeout, 1, &w->ev, &w->nmore);
	atomic_store(&w->done, 1);
	return NULL;
}

static void wait_start(struct waiter *w, DAT_EVD_HANDLE evd)
{
	memset(w, 0, sizeof(*w));
	w->evd = evd;
	w->timeout = 10 * 1000 * 1000;  /* 10 s: far beyond what the test needs */
	cr_assert_eq(pthread_create(&w->th, NULL, wait_main, w), 0);
	/* Let it poll, arm and fall asleep. */
	usleep(100 * 1000);
	cr_assert_eq(atomic_load(&w->done), 0, "dat_evd_wait returned with nothing queued");
}

/* True if the waiter returns within @ms. */
static bool wait_returns_within(struct waiter *w, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (atomic_load(&w->done))
			return true;
		usleep(1000);
	}
	return atomic_load(&w->done);
}

/* The waiter must be woken (within 3 s) and its dat_evd_wait succeed;
 * @fail says what did not wake it. */
static void wait_woken(struct waiter *w, const char *fail)
{
	cr_assert(wait_returns_within(w, 3000), "%s", fail);
	pthread_join(w->th, NULL);
	cr_assert_eq(w->ret, DAT_SUCCESS);
}

/* B's EP asks for solicited wait (@solicited) before it connects. */
static void setup(bool solicited)
{
	t_open(&A);
	t_open(&B);
	ea = t_ep(&A, NULL);
	eb = t_ep(&B, NULL);
	if (solicited) {
		DAT_EP_PARAM p;

		memset(&p, 0, sizeof(p));
		p.ep_attr.recv_completion_flags = DAT_COMPLETION_SOLICITED_WAIT_FLAG;
		cr_assert_eq(dat_ep_modify(eb, DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS, &p),
			     DAT_SUCCESS);
	}
	t_connect(ea, eb);
	t_reg(&A, NULL, src, sizeof(src), DAT_MEM_PRIV_ALL_FLAG, &ka);
	t_reg(&B, NULL, dst, sizeof(dst), DAT_MEM_PRIV_ALL_FLAG, &kb);
	for (int i = 0; i < 4; i++) {
		DAT_LMR_TRIPLET r = t_seg(kb, dst[i], LEN);

		snprintf(src[i], LEN, "message %d", i);
		cr_assert_eq(dat_ep_post_recv(eb, 1, &r, t_cookie((uint64_t)i), 0), DAT_SUCCESS);
	}
}

static void send_msg(int i, DAT_COMPLETION_FLAGS flags)
{
	DAT_LMR_TRIPLET s = t_seg(ka, src[i], LEN);

	cr_assert_eq(dat_ep_post_send(ea, 1, &s, t_cookie(100 + (uint64_t)i), flags), DAT_SUCCESS);
	t_expect(A.req, ea, 100 + (uint64_t)i, DAT_DTO_SUCCESS, DAT_DTO_SEND, LEN);
}

/* B's receive EVD is configured @want (solicited or threshold; the three
 * configuration values share two bits of the state). */
static void expect_rcv_config(DAT_EVD_STATE want)
{
	DAT_EVD_PARAM p;

	cr_assert_eq(dat_evd_query(B.rcv, DAT_EVD_FIELD_EVD_STATE, &p), DAT_SUCCESS);
	cr_assert_eq(p.evd_state & DAT_EVD_STATE_CONFIG_THRESHOLD, want);
}

static void teardown(void)
{
	t_close(&A);
	t_close(&B);
}

Test(shm_solicited, plain_receive_does_not_wake_solicited_does)
{
	struct waiter w;

	setup(true);
	expect_rcv_config(DAT_EVD_STATE_CONFIG_SOLICITED);

	wait_start(&w, B.rcv);
	send_msg(0, DAT_COMPLETION_DEFAULT_FLAG);
	cr_assert_not(wait_returns_within(&w, 400), "a plain receive woke a solicited waiter");
	send_msg(1, DAT_COMPLETION_SOLICITED_WAIT_FLAG);
	wait_woken(&w, "a solicited receive did not wake the waiter");
	/* Completions stay in order: the plain receive comes first. */
	cr_assert_eq(w.ev.event_number, DAT_DTO_COMPLETION_EVENT);
	cr_assert_eq(w.ev.event_data.dto_completion_event_data.user_cookie.as_64, 0);
	cr_assert_eq(w.ev.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
	cr_assert_eq(w.nmore, 1);
	cr_assert_str_eq(dst[0], "message 0");
	/* The solicited one is still queued: a new wait returns it at once. */
	cr_assert_eq(dat_evd_wait(B.rcv, 0, 1, &w.ev, &w.nmore), DAT_SUCCESS);
	cr_assert_eq(w.ev.event_data.dto_completion_event_data.user_cookie.as_64, 1);
	cr_assert_str_eq(dst[1], "message 1");
	t_none(B.rcv);

	/* A plain receive alone: the wait times out, the event is queued. */
	send_msg(2, DAT_COMPLETION_DEFAULT_FLAG);
	cr_assert_eq(T_TYPE(dat_evd_wait(B.rcv, 200 * 1000, 1, &w.ev, &w.nmore)),
		     DAT_TIMEOUT_EXPIRED);
	t_expect(B.rcv, eb, 2, DAT_DTO_SUCCESS, DAT_DTO_RECEIVE, LEN);
	teardown();
}

/* A write with immediate data (@n bytes of src[3] to dst[3], or none) whose
 * receive completion is a DAT_IB_DTO_EVENT; its own completion at A. */
static void write_imm_msg(int n, uint64_t ck, uint32_t imm, DAT_COMPLETION_FLAGS flags)
{
	DAT_LMR_TRIPLET s = t_seg(ka, src[3], LEN);
	DAT_RMR_TRIPLET r = t_rseg(kb, dst[3], LEN);
	DAT_EVENT ev;

	cr_assert_eq(dat_ib_post_rdma_write_immed(ea, n, &s, t_cookie(ck), &r, imm, flags),
		     DAT_SUCCESS);
	ev = t_next_event(A.req);
	cr_assert_eq((int)ev.event_number, DAT_IB_DTO_EVENT);
	cr_assert_eq(ev.event_data.dto_completion_event_data.user_cookie.as_64, ck);
	cr_assert_eq(ev.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
}

/* The receive completion of a write with immediate data: cookie @ck. */
static void expect_recv_imm(const DAT_EVENT *ev, uint64_t ck, uint32_t imm)
{
	const DAT_IB_EXTENSION_EVENT_DATA *x = (const void *)ev->event_extension_data;

	cr_assert_eq((int)ev->event_number, DAT_IB_DTO_EVENT);
	cr_assert_eq((int)ev->event_data.dto_completion_event_data.operation,
		     DAT_IB_DTO_RECV_IMMED);
	cr_assert_eq(ev->event_data.dto_completion_event_data.user_cookie.as_64, ck);
	cr_assert_eq(ev->event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
	cr_assert_eq((uint32_t)x->val.immed.data, imm);
}

Test(shm_solicited, write_imm_receive_wakes_only_when_solicited)
{
	struct waiter w;

	setup(true);
	wait_start(&w, B.rcv);
	write_imm_msg(1, 200, 0x11, DAT_COMPLETION_DEFAULT_FLAG);
	cr_assert_not(wait_returns_within(&w, 400),
		      "an unsolicited write-immediate's receive woke a solicited waiter");
	write_imm_msg(0, 201, 0x22, DAT_COMPLETION_SOLICITED_WAIT_FLAG);
	wait_woken(&w, "a solicited write-immediate's receive did not wake the waiter");
	/* In order: the unsolicited one first, the solicited one queued. */
	expect_recv_imm(&w.ev, 0, 0x11);
	cr_assert_eq(w.nmore, 1);
	cr_assert_str_eq(dst[3], "message 3");
	cr_assert_eq(dat_evd_wait(B.rcv, 0, 1, &w.ev, &w.nmore), DAT_SUCCESS);
	expect_recv_imm(&w.ev, 1, 0x22);
	t_none(B.rcv);

	/* An unsolicited one alone, there before the wait: it times out,
	 * the event is queued. */
	write_imm_msg(0, 202, 0x33, DAT_COMPLETION_DEFAULT_FLAG);
	cr_assert_eq(T_TYPE(dat_evd_wait(B.rcv, 200 * 1000, 1, &w.ev, &w.nmore)),
		     DAT_TIMEOUT_EXPIRED);
	w.ev = t_next_event(B.rcv);
	expect_recv_imm(&w.ev, 2, 0x33);
	teardown();
}

Test(shm_solicited, error_wakes_solicited_waiter)
{
	struct waiter w;

	setup(true);
	wait_start(&w, B.rcv);
	/* The connection breaks: the posted receives complete flushed. */
	t_flush(eb);
	wait_woken(&w, "a flushed receive did not wake the waiter");
	cr_assert_eq(w.ev.event_data.dto_completion_event_data.status, DAT_DTO_ERR_FLUSHED);
	teardown();
}

Test(shm_solicited, without_the_attribute_every_receive_wakes)
{
	struct waiter w;

	setup(false);
	expect_rcv_config(DAT_EVD_STATE_CONFIG_THRESHOLD);
	wait_start(&w, B.rcv);
	send_msg(0, DAT_COMPLETION_DEFAULT_FLAG);
	wait_woken(&w, "a plain receive did not wake a plain waiter");
	cr_assert_eq(w.ev.event_data.dto_completion_event_data.user_cookie.as_64, 0);
	teardown();
}

Test(shm_solicited, threshold_must_be_one)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;

	setup(true);
	/* dat_evd_wait(3DAT): consumer-controlled notification wants 1. */
	cr_assert_eq(T_TYPE(dat_evd_wait(B.rcv, 0, 2, &ev, &nmore)), DAT_INVALID_STATE);
	cr_assert_eq(T_TYPE(dat_evd_wait(B.rcv, 0, 1, &ev, &nmore)), DAT_TIMEOUT_EXPIRED);
	/* Freed, the EP no longer puts the EVD in solicited mode. */
	cr_assert_eq(dat_ep_free(eb), DAT_SUCCESS);
	while (dat_evd_dequeue(B.rcv, &ev) == DAT_SUCCESS)
		;
	cr_assert_eq(T_TYPE(dat_evd_wait(B.rcv, 0, 2, &ev, &nmore)), DAT_TIMEOUT_EXPIRED);
	teardown();
}

/* ---- across two processes: the peer rings the doorbell only when asked ---- */

struct blob_msg {
	char blob[ZD_QP_BLOB_MAX];
	size_t len;
};

/* Receiver: a solicited-wait EP, two receives (heap memory, reached by
 * cross-memory attach), then dat_evd_wait; reports each cookie it gets. */
static int child_main(int rd, int wr, int unused)
{
	struct side C;
	struct blob_msg me, peer;
	char *buf = malloc(2 * LEN);
	DAT_LMR_CONTEXT k;
	DAT_EP_HANDLE ep;
	DAT_EP_PARAM p;
	DAT_EVENT ev;
	DAT_COUNT more;
	char c;

	t_open(&C);
	ep = t_ep(&C, NULL);
	memset(&p, 0, sizeof(p));
	p.ep_attr.recv_completion_flags = DAT_COMPLETION_SOLICITED_WAIT_FLAG;
	if (dat_ep_modify(ep, DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS, &p) != DAT_SUCCESS)
		return 2;
	t_reg(&C, NULL, buf, 2 * LEN, DAT_MEM_PRIV_ALL_FLAG, &k);
	for (int i = 0; i < 2; i++) {
		DAT_LMR_TRIPLET r = t_seg(k, buf + i * LEN, LEN);

		if (dat_ep_post_recv(ep, 1, &r, t_cookie((uint64_t)i), 0) != DAT_SUCCESS)
			return 3;
	}
	me.len = t_blob(ep, me.blob);
	if (t_pipe_write(wr, &me, sizeof(me)) || t_pipe_read(rd, &peer, sizeof(peer)))
		return 4;
	t_accept_blob(ep, peer.blob, peer.len);
	if (t_pipe_write(wr, "r", 1))
		return 5;
	for (int i = 0; i < 2; i++) {
		if (dat_evd_wait(C.rcv, 10 * 1000 * 1000, 1, &ev, &more) != DAT_SUCCESS ||
		    ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS)
			return 6;
		c = (char)('0' + ev.event_data.dto_completion_event_data.user_cookie.as_64);
		if (t_pipe_write(wr, &c, 1))
			return 7;
	}
	if (t_pipe_read(rd, &c, 1))  /* the parent is done: close */
		return 8;
	t_close(&C);
	return 0;
}

static bool readable_within(int fd, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	return poll(&pfd, 1, ms) == 1;
}

Test(shm_solicited, across_processes)
{
	int rd, wr, status;
	struct blob_msg me, peer;
	pid_t pid = t_fork_peer(child_main, 0, &rd, &wr);
	char c;

	t_open(&A);
	ea = t_ep(&A, NULL);
	t_reg(&A, NULL, src, sizeof(src), DAT_MEM_PRIV_ALL_FLAG, &ka);
	snprintf(src[0], LEN, "plain");
	snprintf(src[1], LEN, "solicited");
	me.len = t_blob(ea, me.blob);
	cr_assert_eq(t_pipe_read(rd, &peer, sizeof(peer)), 0, "child died during setup");
	cr_assert_eq(t_pipe_write(wr, &me, sizeof(me)), 0);
	t_accept_blob(ea, peer.blob, peer.len);
	cr_assert_eq(t_pipe_read(rd, &c, 1), 0);
	usleep(100 * 1000);  /* the child arms and sleeps */

	send_msg(0, DAT_COMPLETION_DEFAULT_FLAG);
	cr_assert_not(readable_within(rd, 400), "a plain receive woke the solicited waiter");
	send_msg(1, DAT_COMPLETION_SOLICITED_WAIT_FLAG);
	cr_assert(readable_within(rd, 3000), "a solicited receive did not wake the waiter");
	/* In order: the plain receive first, then the solicited one. */
	cr_assert_eq(t_pipe_read(rd, &c, 1), 0);
	cr_assert_eq(c, '0');
	cr_assert_eq(t_pipe_read(rd, &c, 1), 0);
	cr_assert_eq(c, '1');
	cr_assert_eq(t_pipe_write(wr, "q", 1), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	t_close(&A);
}
