/*
 * The shared completion ring of an shm CQ (hw/shm/zd_shm_cqring.h) with
 * producers in other processes: several at once (order per producer, no
 * loss, a full ring falls back to the QPs' own rings), one killed between
 * claiming a slot and publishing it (ZDAPL_SHM_FAULT=claim_stop stops it
 * there), and one writing garbage into the ring (random slots, forged
 * entries, a wild tail hint).  The test process is the consumer: every
 * child's EP is connected to one of its EPs, all on one recv EVD.
 */
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "zd_shm_test.h"
#include "hw/shm/zd_shm.h"

TestSuite(shm_cqring, .init = t_need_conf, .timeout = 60);

enum { MSG = 16, SLOTS = 512, RQ = 256 };
enum { PRODUCE, CLAIM_STOP, GARBAGE };

struct info {
	char blob[ZD_QP_BLOB_MAX];
	size_t blob_len;
};

struct msg {
	uint32_t who, seq;
	uint64_t check;
};

static void xwrite(int fd, const void *p, size_t n)
{
	if (t_pipe_write(fd, p, n))
		_exit(90);
}

/* Sends @n messages numbered from 0 as child @who, at most RQ in flight
 * (a queued send is copied when it executes: its buffer stays until its
 * completion).  0, or a check's number. */
static int produce(struct side *B, DAT_EP_HANDLE ep, DAT_LMR_CONTEXT k, struct msg *bufs,
		   uint32_t who, uint32_t n)
{
	uint32_t posted = 0, done = 0;
	DAT_EVENT ev;

	while (done < n) {
		if (posted < n && posted - done < RQ) {
			struct msg *m = &bufs[posted % SLOTS];
			DAT_LMR_TRIPLET s = t_seg(k, m, MSG);

			*m = (struct msg){ who, posted, (uint64_t)who << 32 ^ posted ^ 0x5a5a };
			if (dat_ep_post_send(ep, 1, &s, t_cookie(posted), 0) == DAT_SUCCESS)
				posted++;
		}
		while (dat_evd_dequeue(B->req, &ev) == DAT_SUCCESS) {
			if (ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS)
				return 60;
			done++;
		}
	}
	return 0;
}

/* Maps the consumer's CQ ring from its blob (the way a peer does) and
 * writes garbage: random lines, forged entries at positions 0..7 that
 * name our own QP out of sequence; tells the test (@wr), then moves the
 * tail hint to wild values @count times. */
static int scribble(const struct info *peer, uint32_t count, int wr)
{
	struct zd_shm_blob b;
	struct zd_shm_cq_shared *sh;
	struct zd_shm_cqe *ring;
	int pidfd, fd;

	memcpy(&b, peer->blob, sizeof(b));
	/* The IA's arena (a hostile peer may use ptrace rights where it has
	 * them); the ring at its offset. */
	pidfd = (int)syscall(SYS_pidfd_open, b.pid, 0);
	fd = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, b.ia_fd, 0);
	if (fd < 0)
		return 70;
	sh = mmap(NULL, b.cq_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)b.cq_off);
	close(fd);
	if (sh == MAP_FAILED)
		return 71;
	ring = (void *)((char *)sh + sh->ring_off);
	for (uint32_t i = 0; i < sh->depth; i++)
		if (getrandom(&ring[i], sizeof(ring[i]), 0) != sizeof(ring[i]))
			return 72;
	for (uint32_t i = 0; i < 8; i++) {
		ring[i].tag = b.qp_tag;  /* (the consumer's tag of our QP: ours to name) */
		ring[i].type_flags = ZD_SHM_COMP_DIRECT;
		ring[i].seq = 1000 + i;
		atomic_store(&ring[i].state, zd_shm_slot_word(i, b.qp_tag, ZD_SHM_CQE_PUBLISHED));
	}
	xwrite(wr, "s", 1);
	for (uint32_t i = 0; i < count; i++) {
		atomic_store(&sh->tail, 0xdeadbeef12345ull + i * 977);
		usleep(100);
	}
	munmap(sh, b.cq_size);
	return 0;
}

/* A producer child: opens its IA, connects its EP to the test's, then on
 * "g" produces (@mode, @who, count from the test). */
static int child_main(int rd, int wr, int arg)
{
	int mode = arg & 0xff;
	uint32_t who = (uint32_t)arg >> 8, count;
	struct side B;
	struct info me = { 0 }, peer;
	struct msg *bufs = zdapl_mem_alloc(SLOTS * sizeof(struct msg));
	DAT_LMR_CONTEXT k;
	DAT_EP_HANDLE ep;
	int rc = 0;
	char c;

	if (mode == CLAIM_STOP)
		setenv("ZDAPL_SHM_FAULT", "claim_stop", 1);
	t_open(&B);
	ep = t_ep(&B, NULL);
	t_reg(&B, NULL, bufs, SLOTS * sizeof(struct msg), DAT_MEM_PRIV_ALL_FLAG, &k);
	me.blob_len = t_blob(ep, me.blob);
	xwrite(wr, &me, sizeof(me));
	if (t_pipe_read(rd, &peer, sizeof(peer)))
		return 4;
	t_accept_blob(ep, peer.blob, peer.blob_len);
	xwrite(wr, "r", 1);
	if (t_pipe_read(rd, &c, 1) || t_pipe_read(rd, &count, sizeof(count)))
		return 5;
	rc = mode == GARBAGE ? scribble(&peer, count, wr) : produce(&B, ep, k, bufs, who, count);
	xwrite(wr, rc ? "f" : "d", 1);
	if (t_pipe_read(rd, &c, 1))
		return 6;
	t_close(&B);
	return rc;
}

struct kid {
	pid_t pid;
	int rd, wr;
	DAT_EP_HANDLE ep;
	uint32_t next;           /* next message number expected */
};

/* Forks a child of @mode (before the test opens its IA: a child must not
 * inherit it, nor its pool). */
static void kid_fork(struct kid *k, int mode, uint32_t who)
{
	k->pid = t_fork_peer(child_main, mode | (int)(who << 8), &k->rd, &k->wr);
	k->next = 0;
}

/* Connects the child to a fresh EP of @A. */
static void kid_connect(struct kid *k, struct side *A)
{
	struct info me = { 0 }, peer;
	char c;

	cr_assert_eq(t_pipe_read(k->rd, &peer, sizeof(peer)), 0, "child died during setup");
	k->ep = t_ep(A, NULL);
	me.blob_len = t_blob(k->ep, me.blob);
	t_accept_blob(k->ep, peer.blob, peer.blob_len);
	xwrite(k->wr, &me, sizeof(me));
	cr_assert_eq(t_pipe_read(k->rd, &c, 1), 0);
}

static void kid_go(struct kid *k, uint32_t count)
{
	xwrite(k->wr, "g", 1);
	xwrite(k->wr, &count, sizeof(count));
}

/* The child's verdict, then its exit status. */
static void kid_done(struct kid *k)
{
	int status;
	char c = 0;

	cr_assert_eq(t_pipe_read(k->rd, &c, 1), 0);
	cr_assert_eq(c, 'd', "child %d failed", (int)k->pid);
	xwrite(k->wr, "x", 1);
	cr_assert_eq(waitpid(k->pid, &status, 0), k->pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child exit %d", status);
}

/* Receive buffers of the test: RQ per child, MSG bytes each. */
static struct msg *rbufs;
static DAT_LMR_CONTEXT rkey;

static void post_rq(DAT_EP_HANDLE ep, uint32_t kidx, uint32_t slot)
{
	struct msg *m = &rbufs[kidx * RQ + slot];
	DAT_LMR_TRIPLET r = t_seg(rkey, m, MSG);

	memset(m, 0, sizeof(*m));
	cr_assert_eq(dat_ep_post_recv(ep, 1, &r, t_cookie((uint64_t)kidx << 32 | slot), 0),
		     DAT_SUCCESS);
}

static void rq_setup(struct side *A, uint32_t nkids)
{
	rbufs = zdapl_mem_alloc((size_t)nkids * RQ * sizeof(struct msg));
	t_reg(A, NULL, rbufs, (size_t)nkids * RQ * sizeof(struct msg), DAT_MEM_PRIV_ALL_FLAG,
	      &rkey);
}

/* Takes one completion of the recv EVD (dat_evd_wait: the sleeping path);
 * a receive of kids[i] in order is checked and its buffer posted again. */
static DAT_DTO_COMPLETION_EVENT_DATA take(struct side *A, struct kid *kids, uint32_t nkids)
{
	DAT_EVENT ev;
	DAT_COUNT more;
	DAT_DTO_COMPLETION_EVENT_DATA d;
	uint32_t i, slot;

	cr_assert_eq(dat_evd_wait(A->rcv, 5 * 1000 * 1000, 1, &ev, &more), DAT_SUCCESS,
		     "no completion within 5 s");
	cr_assert_eq(ev.event_number, DAT_DTO_COMPLETION_EVENT);
	d = ev.event_data.dto_completion_event_data;
	i = (uint32_t)(d.user_cookie.as_64 >> 32);
	slot = (uint32_t)d.user_cookie.as_64;
	cr_assert(i < nkids && slot < RQ && d.ep_handle == kids[i].ep);
	if (d.status == DAT_DTO_SUCCESS) {
		struct msg *m = &rbufs[i * RQ + slot];

		cr_assert_eq(d.transfered_length, MSG);
		cr_assert_eq(m->seq, kids[i].next, "child %u: message %u, expected %u", i, m->seq,
			     kids[i].next);
		cr_assert(m->who == i && m->check == ((uint64_t)i << 32 ^ m->seq ^ 0x5a5a));
		kids[i].next++;
		post_rq(kids[i].ep, i, slot);
	}
	return d;
}

/* The test's side and two children: kids[0] of @mode (the odd one), with 4
 * receives posted for it, and kids[1] a plain producer, with RQ. */
static void odd_and_plain(struct side *A, struct kid kids[2], int mode)
{
	kid_fork(&kids[0], mode, 0);
	kid_fork(&kids[1], PRODUCE, 1);
	t_open(A);
	rq_setup(A, 2);
	kid_connect(&kids[0], A);
	kid_connect(&kids[1], A);
	for (uint32_t s = 0; s < 4; s++)
		post_rq(kids[0].ep, 0, s);
	for (uint32_t s = 0; s < RQ; s++)
		post_rq(kids[1].ep, 1, s);
}

/* Takes completions until kids[1]'s @n messages came in order and
 * @flushed receives of kids[0] completed flushed (no other kind). */
static void take_plain_and_flushed(struct side *A, struct kid kids[2], uint32_t n,
				   uint32_t flushed)
{
	uint32_t f = 0;

	while (kids[1].next < n || f < flushed) {
		DAT_DTO_COMPLETION_EVENT_DATA d = take(A, kids, 2);

		if (d.ep_handle == kids[0].ep) {
			cr_assert_eq(d.status, DAT_DTO_ERR_FLUSHED);
			f++;
		} else {
			cr_assert_eq(d.status, DAT_DTO_SUCCESS);
		}
	}
	cr_assert_eq(kids[1].next, n);
}

/* Three producer processes at once, 3000 messages each, into one recv EVD
 * whose CQ ring holds 64: the test starts taking only once they have had
 * time to fill it, their receive queues (256 each) and eager rings, so the
 * QPs' own rings, the eager path and RNR all carry part of it. */
Test(shm_cqring, concurrent_producers_order_and_overflow)
{
	enum { KIDS = 3, N = 3000 };
	struct side A;
	struct kid kids[KIDS];
	uint32_t total = 0;

	setenv("ZDAPL_SHM_CQ_RING", "64", 1);
	for (uint32_t i = 0; i < KIDS; i++)
		kid_fork(&kids[i], PRODUCE, i);
	t_open(&A);
	rq_setup(&A, KIDS);
	for (uint32_t i = 0; i < KIDS; i++) {
		kid_connect(&kids[i], &A);
		for (uint32_t s = 0; s < RQ; s++)
			post_rq(kids[i].ep, i, s);
	}
	for (uint32_t i = 0; i < KIDS; i++)
		kid_go(&kids[i], N);
	usleep(100 * 1000);
	while (total < KIDS * N) {
		DAT_DTO_COMPLETION_EVENT_DATA d = take(&A, kids, KIDS);

		cr_assert_eq(d.status, DAT_DTO_SUCCESS);
		total++;
	}
	for (uint32_t i = 0; i < KIDS; i++) {
		cr_assert_eq(kids[i].next, N);
		kid_done(&kids[i]);
	}
	t_none(A.rcv);
	t_close(&A);
	unsetenv("ZDAPL_SHM_CQ_RING");
}

/* A producer stops itself right after claiming a slot of the ring, and
 * another publishes 100 completions behind it; the stopped one is then
 * killed (@kill), or left stopped.  The test, asleep in dat_evd_wait, gets
 * the 100 in order -- at once after the kill, after ZD_SHM_CQE_HOSTILE_NS
 * (2 s) of a live claimer that does not publish -- and the claimer's EP is
 * broken: its other receives complete flushed. */
static void claimer_stops(bool kill_it)
{
	enum { N = 100 };
	struct side A;
	struct kid kids[2];
	int status;
	char c;

	odd_and_plain(&A, kids, CLAIM_STOP);
	kid_go(&kids[0], 1);
	cr_assert_eq(waitpid(kids[0].pid, &status, WUNTRACED), kids[0].pid);
	cr_assert(WIFSTOPPED(status), "the claimer did not stop (status %d)", status);
	kid_go(&kids[1], N);
	cr_assert_eq(t_pipe_read(kids[1].rd, &c, 1), 0);  /* its N sends are in our memory */
	cr_assert_eq(c, 'd');
	if (kill_it) {
		cr_assert_eq(kill(kids[0].pid, SIGKILL), 0);
		cr_assert_eq(waitpid(kids[0].pid, &status, 0), kids[0].pid);
	}
	/* The claimer's receive it claimed for stays taken; the other three
	 * flush. */
	take_plain_and_flushed(&A, kids, N, 3);
	if (!kill_it) {
		cr_assert_eq(kill(kids[0].pid, SIGKILL), 0);
		cr_assert_eq(waitpid(kids[0].pid, &status, 0), kids[0].pid);
	}
	xwrite(kids[1].wr, "x", 1);
	cr_assert_eq(waitpid(kids[1].pid, &status, 0), kids[1].pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	t_none(A.rcv);
	t_close(&A);
}

Test(shm_cqring, killed_between_claim_and_publish)
{
	claimer_stops(true);
}

Test(shm_cqring, stalled_between_claim_and_publish)
{
	claimer_stops(false);
}

/* A peer writes random bytes into every slot of the ring, forges entries
 * naming its own QP out of sequence, and keeps moving the tail hint to
 * wild values while another peer sends 2000 messages: nothing crashes,
 * the forger's connection breaks (its receives flush), and the other's
 * messages all arrive, in order. */
Test(shm_cqring, garbage_in_the_ring)
{
	enum { N = 2000 };
	struct side A;
	struct kid kids[2];
	char c;

	odd_and_plain(&A, kids, GARBAGE);
	kid_go(&kids[0], 200);  /* garbage, then 200 wild tails 0.1 ms apart */
	cr_assert_eq(t_pipe_read(kids[0].rd, &c, 1), 0);
	cr_assert_eq(c, 's');
	kid_go(&kids[1], N);
	take_plain_and_flushed(&A, kids, N, 4);
	kid_done(&kids[0]);
	kid_done(&kids[1]);
	t_none(A.rcv);
	/* The forged entries were refused and the random slots skipped
	 * (counted; the zdapl: lines are rate limited). */
	cr_assert_gt(((struct zd_shm_cq *)((struct zd_evd *)A.rcv)->cq_priv)->dropped, 500);
	t_close(&A);
}
