/*
 * The tcp device's data path between two processes (fork) connected by
 * the real connection manager over 127.0.0.1, through libdat2 and a
 * dat.conf with a "tcp lo" line: send/recv with several segments, RDMA
 * write and read with data checks, SRQ, protection violations, a killed
 * peer, flush on disconnect, and a malformed frame injected on the data
 * socket (it breaks that connection only).
 *
 * The parent is the server (PSP, accept), the forked child the client; they
 * exchange addresses and keys over a socketpair (msg_*).
 */
#include <dirent.h>
#include <stdlib.h>

#include "dat_peer.h"
#include "hw/tcp/zd_tcp_wire.h"

#define IA_TCP "zdapl-tcp-lo"

static void peer_open_on(struct peer *p, DAT_MEM_PRIV_FLAGS priv, const char *ia)
{
	DAT_REGION_DESCRIPTION r;
	DAT_VLEN rlen;
	DAT_VADDR raddr;

	memset(p, 0, sizeof(*p));
	node_open_on(&p->n, ia);
	CHK_RET(dat_evd_create(p->n.ia, 256, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &p->req),
		DAT_SUCCESS);
	CHK_RET(dat_evd_create(p->n.ia, 256, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &p->rcv),
		DAT_SUCCESS);
	p->buf = aligned_alloc(4096, BUF);
	CHK(p->buf);
	memset(p->buf, 0, BUF);
	r.for_va = p->buf;
	CHK_RET(dat_lmr_create(p->n.ia, DAT_MEM_TYPE_VIRTUAL, r, BUF, p->n.pz, priv,
			       DAT_VA_TYPE_VA, &p->lmr, &p->lkey, &p->rkey, &rlen, &raddr),
		DAT_SUCCESS);
}

static void peer_open(struct peer *p, DAT_MEM_PRIV_FLAGS priv)
{
	peer_open_on(p, priv, IA_TCP);
}

static void post_recv(struct peer *p, DAT_EP_HANDLE ep, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
		      uint64_t cookie)
{
	DAT_DTO_COOKIE c = { .as_64 = cookie };

	CHK_RET(dat_ep_post_recv(ep, n, iov, c, DAT_COMPLETION_DEFAULT_FLAG), DAT_SUCCESS);
}

static void peer_close(struct peer *p)
{
	CHK_RET(dat_ia_close(p->n.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	free(p->buf);
}

static int run_child(int (*fn)(int, void *), void *arg, int *fd)
{
	return spawn(fn, arg, fd);
}

/* ---- send/recv, several segments each way ---- */

static int c_sendrecv(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov[3];
	DAT_COUNT len;

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	iov[0] = seg(&p, 1000, 100);
	iov[1] = seg(&p, 5000, 2000);
	iov[2] = seg(&p, 9000, 3000);
	post_recv(&p, p.ep, 3, iov, 7);
	client_connect(&p, p.ep, msg_recv(fd, 10000));
	/* 3 segments out: 10 + 0 + 40000 bytes */
	fill(p.buf + 20000, 10, 1);
	fill(p.buf + 30000, 40000 - 10000, 2);
	iov[0] = seg(&p, 20000, 10);
	iov[1] = seg(&p, 25000, 0);
	iov[2] = seg(&p, 30000, 30000);
	post_send(p.ep, 3, iov, 11);
	CHK(dto_wait(p.req, 10 * SEC, 11, &len) == DAT_DTO_SUCCESS);
	/* the server's answer: 5000 bytes over our 3 receive segments */
	CHK(dto_wait(p.rcv, 10 * SEC, 7, &len) == DAT_DTO_SUCCESS);
	CHK(len == 5000);
	for (int i = 0; i < 5000; i++) {
		uint8_t want = (uint8_t)(3 + i * 7);
		uint8_t got = i < 100 ? p.buf[1000 + i] : i < 2100 ? p.buf[5000 + i - 100]
							    : p.buf[9000 + i - 2100];
		CHK(got == want);
	}
	CHK(p.buf[9000 + 2900] == 0);  /* nothing past the message */
	msg_send(fd, 1);
	msg_recv(fd, 10000);
	peer_close(&p);
	return 0;
}

Test(tcp, sendrecv_multiseg, .timeout = 60)
{
	struct peer p;
	DAT_LMR_TRIPLET iov[2];
	DAT_COUNT len;
	int fd;
	pid_t pid = run_child(c_sendrecv, NULL, &fd);

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	iov[0] = seg(&p, 0, 16);
	iov[1] = seg(&p, 100, 40000);
	post_recv(&p, p.ep, 2, iov, 5);
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	CHK(dto_wait(p.rcv, 10 * SEC, 5, &len) == DAT_DTO_SUCCESS);
	CHK(len == 30010);
	for (int i = 0; i < 10; i++)
		CHK(p.buf[i] == (uint8_t)(1 + i * 7));
	for (int i = 0; i < 6; i++)
		CHK(p.buf[10 + i] == (uint8_t)(2 + i * 7));
	for (int i = 6; i < 30000; i++)
		CHK(p.buf[100 + i - 6] == (uint8_t)(2 + i * 7));
	fill(p.buf + 50000, 5000, 3);
	iov[0] = seg(&p, 50000, 5000);
	post_send(p.ep, 1, iov, 9);
	CHK(dto_wait(p.req, 10 * SEC, 9, NULL) == DAT_DTO_SUCCESS);
	msg_recv(fd, 10000);
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

/* ---- RDMA write and read ---- */

static int c_rdma(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov[2];
	DAT_RMR_TRIPLET r;
	DAT_DTO_COOKIE c = { .as_64 = 21 };
	uint32_t rkey, lo, hi;

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	client_connect(&p, p.ep, msg_recv(fd, 10000));
	rkey = msg_recv(fd, 10000);
	lo = msg_recv(fd, 10000);
	hi = msg_recv(fd, 10000);
	r.rmr_context = rkey;
	r.virtual_address = (DAT_VADDR)lo | (DAT_VADDR)hi << 32;
	/* write 2 segments to server buf + 4096 */
	fill(p.buf, 1000, 5);
	fill(p.buf + 2000, 20000, 6);
	iov[0] = seg(&p, 0, 1000);
	iov[1] = seg(&p, 2000, 20000);
	r.virtual_address += 4096;
	r.segment_length = 21000;
	CHK_RET(dat_ep_post_rdma_write(p.ep, 2, iov, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(dto_wait(p.req, 10 * SEC, 21, NULL) == DAT_DTO_SUCCESS);
	/* read it back (the server wrote its own pattern in front) */
	r.virtual_address -= 4096;
	r.segment_length = 4096 + 21000;
	iov[0] = seg(&p, 30000, 4096 + 21000);
	c.as_64 = 22;
	CHK_RET(dat_ep_post_rdma_read(p.ep, 1, iov, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(dto_wait(p.req, 10 * SEC, 22, NULL) == DAT_DTO_SUCCESS);
	for (int i = 0; i < 4096; i++)
		CHK(p.buf[30000 + i] == (uint8_t)(9 + i * 7));
	CHK(memcmp(p.buf + 30000 + 4096, p.buf, 1000) == 0);
	CHK(memcmp(p.buf + 30000 + 4096 + 1000, p.buf + 2000, 20000) == 0);
	/* tell the server (through the data path) we are done */
	iov[0] = seg(&p, 0, 4);
	post_send(p.ep, 1, iov, 23);
	CHK(dto_wait(p.req, 10 * SEC, 23, NULL) == DAT_DTO_SUCCESS);
	msg_recv(fd, 10000);
	peer_close(&p);
	return 0;
}

Test(tcp, rdma_write_read, .timeout = 60)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	uint8_t want[21000];
	int fd;
	pid_t pid = run_child(c_rdma, NULL, &fd);

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	fill(p.buf, 4096, 9);
	iov = seg(&p, 60000, 64);
	post_recv(&p, p.ep, 1, &iov, 1);
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	msg_send(fd, p.rkey);
	msg_send(fd, (uint32_t)(uintptr_t)p.buf);
	msg_send(fd, (uint32_t)((uint64_t)(uintptr_t)p.buf >> 32));
	/* Waiting (asleep) on the recv EVD is what progresses the write
	 * and the read here. */
	CHK(dto_wait(p.rcv, 20 * SEC, 1, NULL) == DAT_DTO_SUCCESS);
	fill(want, 1000, 5);
	fill(want + 1000, 20000, 6);
	CHK(memcmp(p.buf + 4096, want, 21000) == 0);
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

/* ---- a burst of sends and RDMA writes of awkward sizes ----
 * Frames of 1 byte to past the receive staging buffer (16 KiB), back to
 * back in both kinds, so one recv holds several frames, headers straddle
 * recv boundaries and large payloads switch to in-place reads mid-frame. */

static const uint32_t mix_send[] = { 1, 39, 40, 41, 100, 4095, 4096, 8191, 8192, 8193, 16383 };
static const uint32_t mix_write[] = { 1, 2, 3000, 12000 };
#define MIX_NSEND (sizeof(mix_send) / sizeof(mix_send[0]))
#define MIX_NWRITE (sizeof(mix_write) / sizeof(mix_write[0]))
#define MIX_WBASE 49400u   /* writes land after the sends' receives */

static int c_mixed(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r;
	uint32_t rkey, lo, hi, off = 0, woff = MIX_WBASE;
	uint64_t raddr;
	size_t w = 0;

	(void)arg;
	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	client_connect(&p, p.ep, msg_recv(fd, 10000));
	rkey = msg_recv(fd, 10000);
	lo = msg_recv(fd, 10000);
	hi = msg_recv(fd, 10000);
	raddr = (uint64_t)lo | (uint64_t)hi << 32;
	for (size_t i = 0; i < MIX_NSEND; i++) {
		fill(p.buf + off, mix_send[i], (uint8_t)(30 + i));
		iov = seg(&p, off, mix_send[i]);
		post_send(p.ep, 1, &iov, 100 + i);
		off += mix_send[i];
		if (i % 3 == 1 && w < MIX_NWRITE) {
			DAT_DTO_COOKIE c = { .as_64 = 200 + w };

			fill(p.buf + woff, mix_write[w], (uint8_t)(60 + w));
			iov = seg(&p, woff, mix_write[w]);
			r.rmr_context = rkey;
			r.virtual_address = raddr + woff;
			r.segment_length = mix_write[w];
			CHK_RET(dat_ep_post_rdma_write(p.ep, 1, &iov, c, &r,
						       DAT_COMPLETION_DEFAULT_FLAG),
				DAT_SUCCESS);
			woff += mix_write[w++];
		}
	}
	CHK(w == MIX_NWRITE);
	/* in post order: every send, and every write once the server ACKed it */
	for (size_t i = 0, k = 0; i < MIX_NSEND; i++) {
		CHK(dto_wait(p.req, 10 * SEC, 100 + i, NULL) == DAT_DTO_SUCCESS);
		if (i % 3 == 1 && k < MIX_NWRITE)
			CHK(dto_wait(p.req, 10 * SEC, 200 + k++, NULL) == DAT_DTO_SUCCESS);
	}
	msg_send(fd, 1);
	msg_recv(fd, 10000);
	peer_close(&p);
	return 0;
}

Test(tcp, mixed_sizes_burst, .timeout = 60)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_COUNT len;
	uint8_t want[16384];
	uint32_t off = 0, woff = MIX_WBASE;
	int fd;
	pid_t pid = run_child(c_mixed, NULL, &fd);

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	for (size_t i = 0; i < MIX_NSEND; i++) {
		iov = seg(&p, off, mix_send[i]);
		post_recv(&p, p.ep, 1, &iov, 100 + i);
		off += mix_send[i];
	}
	CHK(off <= MIX_WBASE);
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	msg_send(fd, p.rkey);
	msg_send(fd, (uint32_t)(uintptr_t)p.buf);
	msg_send(fd, (uint32_t)((uint64_t)(uintptr_t)p.buf >> 32));
	off = 0;
	for (size_t i = 0; i < MIX_NSEND; i++) {
		CHK(dto_wait(p.rcv, 10 * SEC, 100 + i, &len) == DAT_DTO_SUCCESS);
		CHK(len == (DAT_COUNT)mix_send[i]);
		fill(want, mix_send[i], (uint8_t)(30 + i));
		CHK(memcmp(p.buf + off, want, mix_send[i]) == 0);
		off += mix_send[i];
	}
	/* the client saw its writes ACKed: they are in place */
	CHK(msg_recv(fd, 20000) == 1);
	for (size_t w = 0; w < MIX_NWRITE; w++) {
		fill(want, mix_write[w], (uint8_t)(60 + w));
		CHK(memcmp(p.buf + woff, want, mix_write[w]) == 0);
		woff += mix_write[w];
	}
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

/* ---- protection: a bad rkey / no REMOTE_WRITE leave memory untouched ---- */

static int c_prot(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r;
	DAT_DTO_COOKIE c = { .as_64 = 31 };
	int mode = (int)(intptr_t)arg;
	uint32_t rkey, lo, hi;

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	client_connect(&p, p.ep, msg_recv(fd, 10000));
	rkey = msg_recv(fd, 10000);
	lo = msg_recv(fd, 10000);
	hi = msg_recv(fd, 10000);
	r.rmr_context = mode == 0 ? rkey ^ 0x5a5a0 : rkey;
	r.virtual_address = (DAT_VADDR)lo | (DAT_VADDR)hi << 32;
	r.segment_length = 4096;
	if (mode == 2)
		r.virtual_address += BUF - 100;  /* past the end */
	fill(p.buf, 4096, 4);
	iov = seg(&p, 0, 4096);
	CHK_RET(dat_ep_post_rdma_write(p.ep, 1, &iov, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(dto_wait(p.req, 20 * SEC, 31, NULL) == DAT_DTO_ERR_REMOTE_ACCESS);
	/* the connection is broken: later DTOs flush */
	c.as_64 = 32;
	if (dat_ep_post_rdma_write(p.ep, 1, &iov, c, &r, DAT_COMPLETION_DEFAULT_FLAG) == DAT_SUCCESS)
		CHK(dto_wait(p.req, 20 * SEC, 32, NULL) == DAT_DTO_ERR_FLUSHED);
	/* local protection: a bad lkey completes in error locally */
	msg_send(fd, 1);
	msg_recv(fd, 10000);
	peer_close(&p);
	return 0;
}

static void prot_case(int mode, DAT_MEM_PRIV_FLAGS priv)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	int fd;
	pid_t pid = run_child(c_prot, (void *)(intptr_t)mode, &fd);

	peer_open(&p, priv);
	peer_ep(&p, &p.ep, 0);
	iov = seg(&p, 60000, 64);
	post_recv(&p, p.ep, 1, &iov, 1);
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	msg_send(fd, p.rkey);
	msg_send(fd, (uint32_t)(uintptr_t)p.buf);
	msg_send(fd, (uint32_t)((uint64_t)(uintptr_t)p.buf >> 32));
	/* the bad frame breaks our QP: the posted receive flushes */
	CHK(dto_wait(p.rcv, 20 * SEC, 1, NULL) == DAT_DTO_ERR_FLUSHED);
	for (int i = 0; i < BUF; i++)
		CHK(p.buf[i] == 0);
	msg_recv(fd, 20000);
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

Test(tcp, bad_rkey, .timeout = 60) { prot_case(0, DAT_MEM_PRIV_ALL_FLAG); }
Test(tcp, no_remote_write, .timeout = 60)
{
	prot_case(1, DAT_MEM_PRIV_LOCAL_READ_FLAG | DAT_MEM_PRIV_LOCAL_WRITE_FLAG |
			     DAT_MEM_PRIV_REMOTE_READ_FLAG);
}
Test(tcp, out_of_bounds, .timeout = 60) { prot_case(2, DAT_MEM_PRIV_ALL_FLAG); }

Test(tcp, local_protection, .timeout = 30)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;

	/* no peer needed: a receive with a bad lkey completes in error */
	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	iov = seg(&p, 0, 64);
	iov.lmr_context ^= 0x12340;
	post_recv(&p, p.ep, 1, &iov, 3);
	CHK(dto_wait(p.rcv, 5 * SEC, 3, NULL) == DAT_DTO_ERR_LOCAL_PROTECTION);
	iov = seg(&p, BUF - 10, 64);  /* out of bounds */
	post_recv(&p, p.ep, 1, &iov, 4);
	CHK(dto_wait(p.rcv, 5 * SEC, 4, NULL) == DAT_DTO_ERR_LOCAL_PROTECTION);
	peer_close(&p);
}

/* ---- the peer is killed: no hang, receives flush ---- */

static int c_killed(int fd, void *arg)
{
	struct peer p;

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	client_connect(&p, p.ep, msg_recv(fd, 10000));
	msg_send(fd, 1);
	pause();  /* SIGKILLed here */
	return 0;
}

Test(tcp, peer_killed, .timeout = 60)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r = { 0 };
	DAT_DTO_COOKIE c = { .as_64 = 2 };
	int fd;
	pid_t pid = run_child(c_killed, NULL, &fd);
	uint64_t t0;

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	iov = seg(&p, 0, 64);
	post_recv(&p, p.ep, 1, &iov, 1);
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	msg_recv(fd, 10000);
	kill(pid, SIGKILL);
	reap(pid, 5000);
	/* an RDMA read to a dead peer must not hang either */
	r.rmr_context = 1;
	r.segment_length = 64;
	iov = seg(&p, 100, 64);
	dat_ep_post_rdma_read(p.ep, 1, &iov, c, &r, DAT_COMPLETION_DEFAULT_FLAG);
	t0 = now_ms();
	CHK(dto_wait(p.rcv, 20 * SEC, 1, NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(now_ms() - t0 < 15000);
	peer_close(&p);
}

/* ---- flush on disconnect ---- */

static int c_disc(int fd, void *arg)
{
	struct peer p;
	DAT_EVENT ev;

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	client_connect(&p, p.ep, msg_recv(fd, 10000));
	msg_recv(fd, 10000);
	CHK_RET(dat_ep_disconnect(p.ep, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	CHK(wait_ev(p.n.conn_evd, 10 * SEC, &ev) == DAT_CONNECTION_EVENT_DISCONNECTED);
	msg_send(fd, 1);
	peer_close(&p);
	return 0;
}

Test(tcp, flush_on_disconnect, .timeout = 60)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	int fd;
	pid_t pid = run_child(c_disc, NULL, &fd);

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	for (int i = 0; i < 4; i++) {
		iov = seg(&p, (size_t)i * 100, 64);
		post_recv(&p, p.ep, 1, &iov, (uint64_t)(10 + i));
	}
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	msg_send(fd, 1);
	for (int i = 0; i < 4; i++)
		CHK(dto_wait(p.rcv, 10 * SEC, (uint64_t)(10 + i), NULL) == DAT_DTO_ERR_FLUSHED);
	CHK(wait_ev(p.n.conn_evd, 10 * SEC, NULL) == DAT_CONNECTION_EVENT_DISCONNECTED);
	msg_recv(fd, 10000);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

/* ---- a malformed frame on the data socket breaks that connection only ---- */

/* The data sockets of this process: TCP sockets whose peer port is not
 * @cm_port (the CM's).  Returns how many were found (into @fds). */
static int data_sockets(uint16_t cm_port, int *fds, int max)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	CHK(d);
	while ((e = readdir(d)) != NULL && n < max) {
		int fd = atoi(e->d_name), type = 0;
		socklen_t l = sizeof(type);
		struct sockaddr_in sa;
		socklen_t sl = sizeof(sa);

		if (fd <= 2 || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) != 0 ||
		    type != SOCK_STREAM || getpeername(fd, (struct sockaddr *)&sa, &sl) != 0 ||
		    sa.sin_family != AF_INET || ntohs(sa.sin_port) == cm_port)
			continue;
		fds[n++] = fd;
	}
	closedir(d);
	return n;
}

static int c_malformed(int fd, void *arg)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	DAT_LMR_TRIPLET iov;
	uint32_t port = msg_recv(fd, 10000);
	int before[16], after[16], nb, na, victim = -1;
	struct zd_tcp_hdr h;

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	peer_ep(&p, &ep2, 0);
	client_connect(&p, p.ep, port);
	/* the first EP's data socket is up once a send went through */
	iov = seg(&p, 0, 8);
	post_send(p.ep, 1, &iov, 1);
	CHK(dto_wait(p.req, 10 * SEC, 1, NULL) == DAT_DTO_SUCCESS);
	nb = data_sockets((uint16_t)port, before, 16);
	client_connect(&p, ep2, port);
	post_send(ep2, 1, &iov, 2);
	CHK(dto_wait(p.req, 10 * SEC, 2, NULL) == DAT_DTO_SUCCESS);
	na = data_sockets((uint16_t)port, after, 16);
	CHK(na >= 2 && nb >= 1);
	/* the second EP's socket: in after, not in before */
	for (int i = 0; i < na && victim < 0; i++) {
		int seen = 0;

		for (int j = 0; j < nb; j++)
			seen |= before[j] == after[i];
		if (!seen)
			victim = after[i];
	}
	CHK(victim >= 0);
	/* a frame with a foreign version, then garbage */
	memset(&h, 0, sizeof(h));
	h.magic = ZD_TCP_WIRE_MAGIC;
	h.version = ZD_TCP_WIRE_VERSION + 1;
	h.op = ZD_TCP_OP_SEND;
	h.len = 8;
	CHK(send(victim, &h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h));
	msg_send(fd, 1);
	/* the first connection still works */
	msg_recv(fd, 10000);
	post_send(p.ep, 1, &iov, 3);
	CHK(dto_wait(p.req, 10 * SEC, 3, NULL) == DAT_DTO_SUCCESS);
	msg_recv(fd, 10000);
	peer_close(&p);
	return 0;
}

Test(tcp, malformed_frame, .timeout = 60)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	DAT_LMR_TRIPLET iov;
	int fd;
	pid_t pid = run_child(c_malformed, NULL, &fd);

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	peer_ep(&p, &ep2, 0);
	for (int i = 0; i < 2; i++) {
		iov = seg(&p, (size_t)i * 100, 64);
		post_recv(&p, p.ep, 1, &iov, (uint64_t)(10 + i));
		iov = seg(&p, 1000 + (size_t)i * 100, 64);
		post_recv(&p, ep2, 1, &iov, (uint64_t)(20 + i));
	}
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	CHK(dto_wait(p.rcv, 10 * SEC, 10, NULL) == DAT_DTO_SUCCESS);
	server_accept(&p, ep2);
	CHK(dto_wait(p.rcv, 10 * SEC, 20, NULL) == DAT_DTO_SUCCESS);
	msg_recv(fd, 10000);
	/* ep2's other receive flushes: the bad frame broke that QP, and
	 * the consumer hears of it on the async EVD */
	CHK(dto_wait(p.rcv, 10 * SEC, 21, NULL) == DAT_DTO_ERR_FLUSHED);
	{
		DAT_EVENT ev;

		CHK(wait_ev(p.n.async, 5 * SEC, &ev) == DAT_ASYNC_ERROR_EP_BROKEN);
		CHK(ev.event_data.asynch_error_event_data.dat_handle == ep2);
	}
	msg_send(fd, 1);
	CHK(dto_wait(p.rcv, 10 * SEC, 11, NULL) == DAT_DTO_SUCCESS);
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

/* ---- SRQ: two EPs' sends land in one shared receive queue ---- */

static int c_srq(int fd, void *arg)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	DAT_LMR_TRIPLET iov;
	uint32_t port = msg_recv(fd, 10000);

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	peer_ep(&p, &ep2, 0);
	client_connect(&p, p.ep, port);
	client_connect(&p, ep2, port);
	for (int i = 0; i < 8; i++) {
		fill(p.buf + i * 256, 256, (uint8_t)i);
		iov = seg(&p, (size_t)i * 256, 256);
		post_send(i & 1 ? ep2 : p.ep, 1, &iov, (uint64_t)i);
	}
	for (int i = 0; i < 8; i++)
		CHK(dto_wait(p.req, 10 * SEC, ~0ull, NULL) == DAT_DTO_SUCCESS);
	msg_recv(fd, 10000);
	peer_close(&p);
	return 0;
}

Test(tcp, srq, .timeout = 60)
{
	struct peer p;
	DAT_EP_HANDLE ep2;
	DAT_LMR_TRIPLET iov;
	DAT_DTO_COOKIE c;
	int fd, seen[8] = { 0 };
	pid_t pid = run_child(c_srq, NULL, &fd);

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 1);
	peer_ep(&p, &ep2, 1);
	for (int i = 0; i < 8; i++) {
		iov = seg(&p, 4096 + (size_t)i * 512, 512);
		c.as_64 = (uint64_t)i;
		CHK_RET(dat_srq_post_recv(p.srq, 1, &iov, c), DAT_SUCCESS);
	}
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	server_accept(&p, ep2);
	for (int i = 0; i < 8; i++) {
		DAT_EVENT ev;
		const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;
		uint8_t *b;

		CHK(wait_ev(p.rcv, 10 * SEC, &ev) == DAT_DTO_COMPLETION_EVENT);
		CHK(d->status == DAT_DTO_SUCCESS && d->transfered_length == 256);
		CHK(d->user_cookie.as_64 < 8 && !seen[d->user_cookie.as_64]);
		seen[d->user_cookie.as_64] = 1;
		b = p.buf + 4096 + d->user_cookie.as_64 * 512;
		/* which message landed here: its first byte names it */
		CHK(b[0] < 8);
		for (int k = 0; k < 256; k++)
			CHK(b[k] == (uint8_t)(b[0] + k * 7));
	}
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

/* ---- a thread asleep in dat_cno_wait is woken by arriving data ---- */

static int c_cno(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	client_connect(&p, p.ep, msg_recv(fd, 10000));
	msg_recv(fd, 10000);  /* the server sleeps in dat_cno_wait by now */
	usleep(200000);
	fill(p.buf, 64, 4);
	iov = seg(&p, 0, 64);
	post_send(p.ep, 1, &iov, 21);
	CHK(dto_wait(p.req, 10 * SEC, 21, NULL) == DAT_DTO_SUCCESS);
	msg_recv(fd, 10000);
	peer_close(&p);
	return 0;
}

Test(tcp, cno_wait_woken_by_arriving_send, .timeout = 60)
{
	struct peer p;
	DAT_CNO_HANDLE cno;
	DAT_EVD_HANDLE got = DAT_HANDLE_NULL;
	DAT_LMR_TRIPLET iov;
	int fd;
	pid_t pid = run_child(c_cno, NULL, &fd);

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	CHK_RET(dat_cno_create(p.n.ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno), DAT_SUCCESS);
	CHK_RET(dat_evd_modify_cno(p.rcv, cno), DAT_SUCCESS);
	peer_ep(&p, &p.ep, 0);
	iov = seg(&p, 1000, 64);
	post_recv(&p, p.ep, 1, &iov, 22);
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	msg_send(fd, 1);
	/* Nobody polls: only the device's wake-up can end this wait. */
	CHK_RET(dat_cno_wait(cno, 10 * SEC, &got), DAT_SUCCESS);
	CHK(got == p.rcv);
	CHK(dto_wait(p.rcv, 10 * SEC, 22, NULL) == DAT_DTO_SUCCESS);
	for (int i = 0; i < 64; i++)
		CHK(p.buf[1000 + i] == (uint8_t)(4 + i * 7));
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	CHK_RET(dat_evd_modify_cno(p.rcv, DAT_HANDLE_NULL), DAT_SUCCESS);
	CHK_RET(dat_cno_free(cno), DAT_SUCCESS);
	peer_close(&p);
}

/* ---- the data socket dies under a live CM connection: BROKEN ---- */

static int c_datadeath(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_EVENT ev;
	uint32_t port = msg_recv(fd, 10000);
	int socks[16], n;

	(void)arg;
	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	client_connect(&p, p.ep, port);
	iov = seg(&p, 0, 8);
	post_send(p.ep, 1, &iov, 1);
	CHK(dto_wait(p.req, 10 * SEC, 1, NULL) == DAT_DTO_SUCCESS);
	n = data_sockets((uint16_t)port, socks, 16);
	CHK(n == 1);
	/* The data connection ends; the CM's stays up. */
	CHK(shutdown(socks[0], SHUT_RDWR) == 0);
	/* Nobody polls the DTO EVDs: the IA's thread notices, the CM ends
	 * the connection. */
	CHK(wait_ev(p.n.conn_evd, 5 * SEC, &ev) == DAT_CONNECTION_EVENT_BROKEN);
	msg_send(fd, 1);
	peer_close(&p);
	return 0;
}

Test(tcp, data_socket_death_breaks_ep, .timeout = 60)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_EVENT ev;
	int fd;
	pid_t pid = run_child(c_datadeath, NULL, &fd);

	peer_open(&p, DAT_MEM_PRIV_ALL_FLAG);
	peer_ep(&p, &p.ep, 0);
	for (int i = 0; i < 2; i++) {
		iov = seg(&p, (size_t)i * 100, 64);
		post_recv(&p, p.ep, 1, &iov, (uint64_t)(10 + i));
	}
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	CHK(dto_wait(p.rcv, 10 * SEC, 10, NULL) == DAT_DTO_SUCCESS);
	/* Both ends: the EP goes BROKEN (the CM socket did not fail), and
	 * what was outstanding flushes. */
	CHK(wait_ev(p.n.conn_evd, 5 * SEC, &ev) == DAT_CONNECTION_EVENT_BROKEN);
	CHK(dto_wait(p.rcv, 5 * SEC, 11, NULL) == DAT_DTO_ERR_FLUSHED);
	msg_recv(fd, 10000);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

/* ---- who makes progress at an RDMA target (zd_tcp.h) ---- */

Test(tcp, unknown_option_refused, .timeout = 30)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;

	CHK(DAT_GET_TYPE(dat_ia_open((DAT_NAME_PTR) "zdapl-tcp-lo-badopt", 8, &async, &ia)) ==
	    DAT_INVALID_PARAMETER);
}

/* Initiator: one RDMA write of 4 KiB ending in a marker byte into the
 * target's buffer; its completion needs the target's ACK. */
static int c_spin_write(int fd, void *arg)
{
	struct peer p;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r;
	DAT_DTO_COOKIE c = { .as_64 = 41 };
	uint32_t port = msg_recv(fd, 10000), lo, hi;

	peer_open_on(&p, DAT_MEM_PRIV_ALL_FLAG, arg);
	peer_ep(&p, &p.ep, 0);
	client_connect(&p, p.ep, port);
	r.rmr_context = msg_recv(fd, 10000);
	lo = msg_recv(fd, 10000);
	hi = msg_recv(fd, 10000);
	r.virtual_address = (DAT_VADDR)lo | (DAT_VADDR)hi << 32;
	r.segment_length = 4096;
	fill(p.buf, 4096, 9);
	p.buf[4095] = 0xee;
	iov = seg(&p, 0, 4096);
	CHK_RET(dat_ep_post_rdma_write(p.ep, 1, &iov, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		DAT_SUCCESS);
	CHK(dto_wait(p.req, 20 * SEC, 41, NULL) == DAT_DTO_SUCCESS);
	msg_send(fd, 1);
	msg_recv(fd, 20000);
	peer_close(&p);
	return 0;
}

/* Target: after the connection, no DAT call at all, only memory reads,
 * for @spin_ms; whether the marker landed meanwhile. */
static bool spin_target(struct peer *p, int fd, uint64_t spin_ms)
{
	volatile uint8_t *last = p->buf + 4095;

	msg_send(fd, p->rkey);
	msg_send(fd, (uint32_t)(uintptr_t)p->buf);
	msg_send(fd, (uint32_t)((uint64_t)(uintptr_t)p->buf >> 32));
	for (uint64_t t0 = now_ms(); now_ms() - t0 < spin_ms; usleep(100))
		if (*last == 0xee)
			return true;
	return false;
}

Test(tcp, progress_thread_serves_spinning_target, .timeout = 60)
{
	struct peer p;
	uint8_t want[4096];
	int fd;
	pid_t pid = run_child(c_spin_write, (void *)"zdapl-tcp-lo-thread", &fd);

	peer_open_on(&p, DAT_MEM_PRIV_ALL_FLAG, "zdapl-tcp-lo-thread");
	peer_ep(&p, &p.ep, 0);
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	/* The IA's thread lands the write and ACKs it: the initiator's
	 * write completes while we never call into DAT. */
	CHK(spin_target(&p, fd, 10000));
	CHK(msg_recv(fd, 20000) == 1);
	fill(want, 4096, 9);
	want[4095] = 0xee;
	CHK(memcmp(p.buf, want, 4096) == 0);
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}

Test(tcp, progress_manual_needs_target_poll, .timeout = 60)
{
	struct peer p;
	DAT_EVENT ev;
	int fd;
	pid_t pid = run_child(c_spin_write, (void *)"zdapl-tcp-lo-manual", &fd);

	peer_open_on(&p, DAT_MEM_PRIV_ALL_FLAG, "zdapl-tcp-lo-manual");
	peer_ep(&p, &p.ep, 0);
	server_listen(&p, fd);
	server_accept(&p, p.ep);
	/* progress=manual: a target that only spins on memory stalls the
	 * initiator's write (README, "How it works")... */
	CHK(!spin_target(&p, fd, 1000));
	/* ...until it polls a DTO EVD of the IA. */
	for (uint64_t t0 = now_ms(); p.buf[4095] != 0xee && now_ms() - t0 < 10000; usleep(100))
		CHK(dat_evd_dequeue(p.rcv, &ev) != DAT_SUCCESS);
	CHK(p.buf[4095] == 0xee);
	CHK(msg_recv(fd, 20000) == 1);
	msg_send(fd, 1);
	CHK(reap(pid, 20000) == 0);
	peer_close(&p);
}
