/*
 * A consumer that never dequeues (issue 15): the server posts RECVS
 * receives, then neither dequeues nor posts again, while the client sends
 * 256-byte messages as fast as its send queue takes them for a while,
 * reaping its own completions without waiting.  What must hold on every
 * device: the client never blocks (posts fail with
 * DAT_INSUFFICIENT_RESOURCES once its send queue is full of sends that
 * wait for the receiver: flow control, RNR), at most RECVS plus the
 * device's buffering complete successfully, nothing is lost or invented
 * (every successful send is one the server can dequeue later, in order),
 * and the server's memory does not grow with the flood.  What each
 * device does is printed (README "Reliability").
 */
#include "hostile.h"

#define RECVS 8
#define FLOOD_MS 1500
#define MSG 256


TestSuite(hostile_nodeq, .timeout = 60);

/* The client's tally, sent to the server. */
struct tally {
	uint32_t posted, refused, ok, err;
};

static int c_flood(int fd, void *arg)
{
	const struct peer_job *j = arg;
	struct peer p;
	struct tally t = { 0 };
	uint64_t end;
	DAT_EVENT ev;
	DAT_COUNT nmore;

	client_open(&p, j->dev, 0, fd, NULL);
	CHK(msg_recv(fd, 10000) == 1);
	end = now_ms() + FLOOD_MS;
	while (now_ms() < end) {
		/* a slot of its own until it completes: a device may read it
		 * when the send runs (256 slots, more than any send queue) */
		size_t off = (t.posted % 256) * MSG;
		DAT_LMR_TRIPLET iov = seg(&p, off, MSG);
		DAT_DTO_COOKIE c = { .as_64 = t.posted };
		DAT_RETURN r;

		*(uint32_t *)(p.buf + off) = t.posted;
		CHK(t.posted - t.ok - t.err < 256);
		r = dat_ep_post_send(p.ep, 1, &iov, c, DAT_COMPLETION_DEFAULT_FLAG);
		if (r == DAT_SUCCESS)
			t.posted++;
		else if (DAT_GET_TYPE(r) == DAT_INSUFFICIENT_RESOURCES)
			t.refused++;
		else
			break;  /* the connection ended: the EP is no longer connected */
		while (dat_evd_dequeue(p.req, &ev) == DAT_SUCCESS) {
			if (ev.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS)
				t.ok++;
			else
				t.err++;
		}
		if (r != DAT_SUCCESS)
			usleep(1000);
	}
	(void)nmore;
	msg_send(fd, t.posted);
	msg_send(fd, t.refused);
	msg_send(fd, t.ok);
	msg_send(fd, t.err);
	return client_done(&p);
}

static void nodeq_case(const struct peer_dev *dev)
{
	struct peer_job j = { .dev = dev };
	struct peer p;
	struct tally t;
	long rss0, rss1;
	DAT_EVENT ev;
	uint32_t got = 0;

	server_start(&p, dev, 0, c_flood, &j);
	post_recvs(&p, p.ep, RECVS, 0, MSG, MSG, 0);
	server_up(&p);
	rss0 = proc_status("VmRSS");
	msg_send(p.fd, 1);
	t.posted = msg_recv(p.fd, 20000);
	t.refused = msg_recv(p.fd, 1000);
	t.ok = msg_recv(p.fd, 1000);
	t.err = msg_recv(p.fd, 1000);
	rss1 = proc_status("VmRSS");
	fprintf(stderr, "%s, a receiver with %d receives that never dequeues: %u sends posted, "
			"%u posts refused (send queue full), %u completed, %u in error; server RSS "
			"%ld -> %ld KiB\n",
		dev->ia, RECVS, t.posted, t.refused, t.ok, t.err, rss0, rss1);
	CHK(t.posted > 0 && t.refused > 0);
	CHK(rss1 <= rss0 + 2048);
	/* The receives the server posted hold the first messages, in order. */
	while (got < RECVS && wait_ev(p.rcv, 5 * SEC, &ev) == DAT_DTO_COMPLETION_EVENT &&
	       ev.event_data.dto_completion_event_data.status == DAT_DTO_SUCCESS) {
		CHK(ev.event_data.dto_completion_event_data.user_cookie.as_64 == got);
		CHK(*(uint32_t *)(p.buf + MSG * got) == got);
		got++;
	}
	CHK(got == RECVS);
	server_done(&p);
}

Test(hostile_nodeq, shm) { nodeq_case(&shm); }
Test(hostile_nodeq, tcp) { nodeq_case(&tcp); }
Test(hostile_nodeq, mlx5sim) { nodeq_case(&mlx5sim); }
