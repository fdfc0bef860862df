/*
 * fork() after dat_ia_open: what a child can do with what it inherited.
 * As with verbs, the parent's IAs are not usable in a child (their
 * threads, the CM's, the pollers', the software NIC's and liburcu's, did
 * not come along, and their queues are shared with the parent's peers);
 * but the child must not hang: dat_ia_close of an inherited IA returns
 * DAT_SUCCESS at once without touching what the parent still uses, after
 * which that IA's handles are invalid in the child, and the child's own
 * dat_ia_open works (connect, send, close).  The parent's connection goes
 * on undisturbed, and the child holds none of its sockets (the CM's, which
 * zdapl-tcp's data rides): a peer sees it end when the parent does.  On
 * zdapl-shm, zdapl-tcp (lo) and zdapl-mlx5sim.
 */
#include <dirent.h>
#include <stdlib.h>
#include <sys/prctl.h>

#include "hostile.h"

TestSuite(hostile_fork, .timeout = 60);

#define MSG 256

/* The parent's peer: connects, then sends MSG bytes each time it is
 * told, until told 0. */
static int c_sender(int fd, void *arg)
{
	const struct peer_job *j = arg;
	struct peer p;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	client_open(&p, j->dev, 0, fd, NULL);
	while (msg_recv(fd, 20000)) {
		fill(p.buf, MSG, 0x5a);
		send_wait(&p, p.ep, 0, MSG, 1);
		msg_send(fd, 1);
	}
	peer_close(&p);
	return 0;
}

/* The parent receives MSG bytes from its peer over its connection. */
static void parent_receives(struct peer *s)
{
	uint8_t want[MSG];
	DAT_LMR_TRIPLET iov = seg(s, 0, MSG);
	DAT_COUNT len;

	memset(s->buf, 0, MSG);
	post_recv(s->ep, 1, &iov, 9);
	msg_send(s->fd, 1);
	CHK(msg_recv(s->fd, 20000) == 1);
	CHK(dto_wait(s->rcv, 10 * SEC, 9, &len) == DAT_DTO_SUCCESS && len == MSG);
	fill(want, MSG, 0x5a);
	CHK(memcmp(s->buf, want, MSG) == 0);
}

/* In the child: its own two IAs, connected through the CM, one send. */
static void child_own_ia(const struct peer_dev *dev)
{
	struct peer a, b;
	DAT_PSP_HANDLE psp;
	DAT_CONN_QUAL port = local_pair_open(&a, &b, dev, &psp);
	DAT_LMR_TRIPLET in, out;
	DAT_COUNT len;

	in = seg(&a, 0, MSG);
	post_recv(a.ep, 1, &in, 3);
	local_connect(&a, &b, port);
	fill(b.buf, MSG, 0x33);
	out = seg(&b, 0, MSG);
	post_send(b.ep, 1, &out, 4);
	CHK(dto_wait(b.req, 10 * SEC, 4, NULL) == DAT_DTO_SUCCESS);
	CHK(dto_wait(a.rcv, 10 * SEC, 3, &len) == DAT_DTO_SUCCESS && len == MSG);
	CHK(memcmp(a.buf, b.buf, MSG) == 0);
	peer_close(&b);
	peer_close(&a);
}

struct inherited {
	const struct peer_dev *dev;
	struct peer *parent;
};

/* Connected TCP sockets this process holds. */
static int tcp_connected(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	CHK(d);
	while ((e = readdir(d)) != NULL) {
		int fd = atoi(e->d_name), type = 0;
		socklen_t l = sizeof(type);
		struct sockaddr_in sa;
		socklen_t sl = sizeof(sa);

		if (fd > 2 && fd != dirfd(d) &&
		    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) == 0 && type == SOCK_STREAM &&
		    getpeername(fd, (struct sockaddr *)&sa, &sl) == 0 && sa.sin_family == AF_INET)
			n++;
	}
	closedir(d);
	return n;
}

static int c_forked(int fd, void *arg)
{
	const struct inherited *h = arg;
	uint64_t t0 = now_ms();

	(void)fd;
	CHK(tcp_connected() == 0);  /* the parent's connection is not ours */
	/* The parent's IA, with a connected EP, EVDs, an LMR and a PSP. */
	CHK_RET(dat_ia_close(h->parent->n.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	CHK(now_ms() - t0 < 2000);
	/* Gone in the child: the IA and what it held. */
	CHK_RET(dat_ia_close(h->parent->n.ia, DAT_CLOSE_ABRUPT_FLAG),
		ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA));
	CHK_RET(dat_ep_free(h->parent->ep), ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP));
	CHK(DAT_GET_TYPE(dat_evd_free(h->parent->rcv)) == DAT_INVALID_HANDLE);
	/* Twice: a second round of threads and tables of the child's own. */
	child_own_ia(h->dev);
	child_own_ia(h->dev);
	return 0;
}

/* A child that never closes what it inherited opens and closes its own. */
static int c_forked_keeps(int fd, void *arg)
{
	const struct inherited *h = arg;

	(void)fd;
	CHK(tcp_connected() == 0);
	child_own_ia(h->dev);
	return 0;
}

static void fork_case(const struct peer_dev *dev, int (*child)(int fd, void *arg))
{
	struct peer_job j = { .dev = dev };
	struct peer s;
	struct inherited h = { .dev = dev, .parent = &s };
	pid_t pid;
	int fd, st;

	server_start(&s, dev, 0, c_sender, &j);
	server_up(&s);
	parent_receives(&s);
	pid = spawn(child, &h, &fd);
	st = reap(pid, 30000);
	if (st)
		fprintf(stderr, "%s: the forked child ended with %d\n", dev->ia, st);
	CHK(st == 0);
	close(fd);
	/* The child's close left the parent's connection alone. */
	parent_receives(&s);
	msg_send(s.fd, 0);
	CHK(reap(s.pid, 20000) == 0);
	peer_close(&s);
}

Test(hostile_fork, shm_close) { fork_case(&shm, c_forked); }
Test(hostile_fork, tcp_close) { fork_case(&tcp, c_forked); }
Test(hostile_fork, mlx5sim_close) { fork_case(&mlx5sim, c_forked); }
Test(hostile_fork, shm_keep) { fork_case(&shm, c_forked_keeps); }
Test(hostile_fork, tcp_keep) { fork_case(&tcp, c_forked_keeps); }
Test(hostile_fork, mlx5sim_keep) { fork_case(&mlx5sim, c_forked_keeps); }
