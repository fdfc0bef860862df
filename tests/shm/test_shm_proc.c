/* shm device across two processes: blobs over a pipe, sends and RDMA on
 * pool memory (chunk mappings) and malloc'd memory (cross-memory attach),
 * a sleeping dat_evd_wait woken by the peer, and a peer killed mid-transfer. */
#include <signal.h>
#include <sys/wait.h>

#include "zd_shm_test.h"

TestSuite(shm_proc, .init = t_need_conf, .timeout = 60);

enum { BUF = 4096 };

struct info {
	char blob[ZD_QP_BLOB_MAX];
	size_t blob_len;
	uint64_t pool_addr, heap_addr;
	uint32_t pool_key, heap_key;
};

/* A write the other side must see; either side gives up at once if not. */
static void xwrite(int fd, const void *p, size_t n)
{
	if (t_pipe_write(fd, p, n))
		_exit(90);
}

enum { STREAM_MSGS = 20000, STREAM_RQ = 16, STREAM_MAX = 3 * 4096 };

static int stream_run(DAT_EVD_HANDLE rcv, DAT_EP_HANDLE ep, DAT_LMR_CONTEXT k, char *bufs)
{
	DAT_EVENT ev;
	DAT_COUNT more;

	for (uint32_t n = 0; n < STREAM_MSGS; n++) {
		DAT_DTO_COMPLETION_EVENT_DATA d;
		uint64_t slot;
		uint32_t got;

		if (dat_evd_wait(rcv, 10 * 1000 * 1000, 1, &ev, &more) != DAT_SUCCESS)
			return 51;
		d = ev.event_data.dto_completion_event_data;
		slot = d.user_cookie.as_64;
		if (d.status != DAT_DTO_SUCCESS || slot >= STREAM_RQ)
			return 52;
		memcpy(&got, bufs + slot * STREAM_MAX, 4);
		if (got != n || d.transfered_length != 8 + (n * 37) % (STREAM_MAX - 8)) {
			fprintf(stderr, "message %u: got %u, length %u\n", n, got,
				d.transfered_length);
			return 53;
		}
		if (bufs[slot * STREAM_MAX + d.transfered_length - 1] != (char)n)
			return 54;
		DAT_LMR_TRIPLET r = t_seg(k, bufs + slot * STREAM_MAX, STREAM_MAX);
		if (dat_ep_post_recv(ep, 1, &r, t_cookie(slot), 0) != DAT_SUCCESS)
			return 55;
	}
	return 0;
}

/* Stream child: receives STREAM_MSGS messages of varying sizes through a
 * small receive queue, sleeping in dat_evd_wait, and checks their order. */
static int stream_child(int rd, int wr)
{
	struct side B;
	struct info me = { 0 }, peer;
	char *bufs = zdapl_mem_alloc((size_t)STREAM_RQ * STREAM_MAX);
	DAT_LMR_CONTEXT k;
	DAT_EP_HANDLE ep;
	int rc;
	char c;

	t_open(&B);
	ep = t_ep(&B, NULL);
	t_reg(&B, NULL, bufs, (size_t)STREAM_RQ * STREAM_MAX, DAT_MEM_PRIV_ALL_FLAG, &k);
	for (int i = 0; i < STREAM_RQ; i++) {
		DAT_LMR_TRIPLET r = t_seg(k, bufs + (size_t)i * STREAM_MAX, STREAM_MAX);
		if (dat_ep_post_recv(ep, 1, &r, t_cookie((uint64_t)i), 0) != DAT_SUCCESS)
			return 50;
	}
	me.blob_len = t_blob(ep, me.blob);
	xwrite(wr, &me, sizeof(me));
	if (t_pipe_read(rd, &peer, sizeof(peer)))
		return 4;
	t_accept_blob(ep, peer.blob, peer.blob_len);
	xwrite(wr, "r", 1);
	rc = stream_run(B.rcv, ep, k, bufs);
	if (rc)
		fprintf(stderr, "stream child: check %d failed\n", rc);
	xwrite(wr, rc ? "f" : "d", 1);
	if (t_pipe_read(rd, &c, 1))
		return 6;
	t_close(&B);
	return rc;
}

/* Child half: returns an exit code (0 = all checks passed). */
static int child_main(int rd, int wr, bool linger)
{
	struct side B;
	struct info me = { 0 }, peer;
	char *pool = zdapl_mem_alloc(BUF), *heap = malloc(BUF);
	char *rpool = zdapl_mem_alloc(BUF), *rheap = malloc(BUF);
	DAT_LMR_CONTEXT kp, kh, krp, krh;
	DAT_LMR_TRIPLET r;
	DAT_EP_HANDLE ep;
	DAT_EVENT ev;
	DAT_COUNT more;
	char go;

	t_open(&B);
	ep = t_ep(&B, NULL);
	memset(pool, 'P', BUF);
	memset(heap, 'H', BUF);
	memset(rpool, 0, BUF);
	memset(rheap, 0, BUF);
	t_reg(&B, NULL, pool, BUF, DAT_MEM_PRIV_ALL_FLAG, &kp);
	t_reg(&B, NULL, heap, BUF, DAT_MEM_PRIV_ALL_FLAG, &kh);
	t_reg(&B, NULL, rpool, BUF, DAT_MEM_PRIV_ALL_FLAG, &krp);
	t_reg(&B, NULL, rheap, BUF, DAT_MEM_PRIV_ALL_FLAG, &krh);
	r = t_seg(krp, rpool, BUF);
	if (dat_ep_post_recv(ep, 1, &r, t_cookie(1), 0) != DAT_SUCCESS)
		return 2;
	r = t_seg(krh, rheap, BUF);
	if (dat_ep_post_recv(ep, 1, &r, t_cookie(2), 0) != DAT_SUCCESS)
		return 3;
	me.blob_len = t_blob(ep, me.blob);
	me.pool_addr = (uintptr_t)pool;
	me.heap_addr = (uintptr_t)heap;
	me.pool_key = kp;
	me.heap_key = kh;
	xwrite(wr, &me, sizeof(me));
	if (t_pipe_read(rd, &peer, sizeof(peer)))
		return 4;
	t_accept_blob(ep, peer.blob, peer.blob_len);
	xwrite(wr, "r", 1);
	if (linger)
		for (;;)
			pause();
	/* Sleep in dat_evd_wait: the peer's completion must wake us. */
	for (int i = 1; i <= 2; i++) {
		if (dat_evd_wait(B.rcv, 10 * 1000 * 1000, 1, &ev, &more) != DAT_SUCCESS)
			return 10 + i;
		DAT_DTO_COMPLETION_EVENT_DATA d = ev.event_data.dto_completion_event_data;
		if (d.status != DAT_DTO_SUCCESS || d.user_cookie.as_64 != (uint64_t)i ||
		    d.transfered_length != 100 || d.ep_handle != ep)
			return 20 + i;
	}
	for (int i = 0; i < 100; i++)
		if (rpool[i] != 'a' || rheap[i] != 'b')
			return 30;
	if (rpool[100] || rheap[100])
		return 31;
	/* Wait for the peer's RDMA, then check what it wrote. */
	if (t_pipe_read(rd, &go, 1))
		return 5;
	for (int i = 0; i < BUF; i++) {
		char want_p = i >= 64 && i < 64 + 512 ? 'w' : 'P';
		char want_h = i >= 128 && i < 128 + 300 ? 'x' : 'H';
		if (pool[i] != want_p || heap[i] != want_h)
			return 40;
	}
	xwrite(wr, "d", 1);
	if (t_pipe_read(rd, &go, 1))  /* peer done: close */
		return 6;
	t_close(&B);
	return 0;
}

/* The child of each test: @mode 0 receives and checks, 1 lingers to be
 * killed, 2 streams. */
static int child_run(int rd, int wr, int mode)
{
	return mode == 2 ? stream_child(rd, wr) : child_main(rd, wr, mode == 1);
}

static pid_t spawn(int *rd, int *wr, int mode)
{
	return t_fork_peer(child_run, mode, rd, wr);
}

static void connect_child(struct side *A, DAT_EP_HANDLE ep, int rd, int wr, struct info *peer)
{
	struct info me = { 0 };
	char c;

	cr_assert_eq(t_pipe_read(rd, peer, sizeof(*peer)), 0, "child died during setup");
	me.blob_len = t_blob(ep, me.blob);
	t_accept_blob(ep, peer->blob, peer->blob_len);
	xwrite(wr, &me, sizeof(me));
	cr_assert_eq(t_pipe_read(rd, &c, 1), 0);
	(void)A;
}

Test(shm_proc, send_and_rdma_across_processes)
{
	struct side A;
	struct info peer;
	int rd, wr, status;
	pid_t pid = spawn(&rd, &wr, 0);
	char *pool = zdapl_mem_alloc(BUF), *heap = malloc(BUF);
	DAT_LMR_CONTEXT kp, kh;
	DAT_LMR_TRIPLET l;
	DAT_RMR_TRIPLET r;
	DAT_EP_HANDLE ep;
	char c;

	t_open(&A);
	ep = t_ep(&A, NULL);
	t_reg(&A, NULL, pool, BUF, DAT_MEM_PRIV_ALL_FLAG, &kp);
	t_reg(&A, NULL, heap, BUF, DAT_MEM_PRIV_ALL_FLAG, &kh);
	connect_child(&A, ep, rd, wr, &peer);
	/* Let the child fall asleep in dat_evd_wait first. */
	usleep(200 * 1000);
	memset(pool, 'a', BUF);
	memset(heap, 'b', BUF);
	l = t_seg(kp, pool, 100);
	cr_assert_eq(dat_ep_post_send(ep, 1, &l, t_cookie(1), 0), DAT_SUCCESS);
	t_expect(A.req, ep, 1, DAT_DTO_SUCCESS, DAT_DTO_SEND, 100);
	usleep(50 * 1000);
	l = t_seg(kh, heap, 100);
	cr_assert_eq(dat_ep_post_send(ep, 1, &l, t_cookie(2), 0), DAT_SUCCESS);
	t_expect(A.req, ep, 2, DAT_DTO_SUCCESS, DAT_DTO_SEND, 100);
	/* RDMA write into the child's pool memory and its heap. */
	memset(pool, 'w', BUF);
	memset(heap, 'x', BUF);
	l = t_seg(kp, pool, 512);
	r = t_rseg(peer.pool_key, (void *)(uintptr_t)(peer.pool_addr + 64), 512);
	cr_assert_eq(dat_ep_post_rdma_write(ep, 1, &l, t_cookie(3), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ep, 3, DAT_DTO_SUCCESS, DAT_DTO_RDMA_WRITE, 512);
	l = t_seg(kh, heap, 300);
	r = t_rseg(peer.heap_key, (void *)(uintptr_t)(peer.heap_addr + 128), 300);
	cr_assert_eq(dat_ep_post_rdma_write(ep, 1, &l, t_cookie(4), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ep, 4, DAT_DTO_SUCCESS, DAT_DTO_RDMA_WRITE, 300);
	/* Read both back whole. */
	memset(pool, 0, BUF);
	memset(heap, 0, BUF);
	l = t_seg(kp, pool, BUF);
	r = t_rseg(peer.pool_key, (void *)(uintptr_t)peer.pool_addr, BUF);
	cr_assert_eq(dat_ep_post_rdma_read(ep, 1, &l, t_cookie(5), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ep, 5, DAT_DTO_SUCCESS, DAT_DTO_RDMA_READ, BUF);
	l = t_seg(kh, heap, BUF);
	r = t_rseg(peer.heap_key, (void *)(uintptr_t)peer.heap_addr, BUF);
	cr_assert_eq(dat_ep_post_rdma_read(ep, 1, &l, t_cookie(6), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ep, 6, DAT_DTO_SUCCESS, DAT_DTO_RDMA_READ, BUF);
	cr_assert_eq(pool[63], 'P');
	cr_assert_eq(pool[64], 'w');
	cr_assert_eq(pool[64 + 511], 'w');
	cr_assert_eq(pool[64 + 512], 'P');
	cr_assert_eq(heap[127], 'H');
	cr_assert_eq(heap[128], 'x');
	cr_assert_eq(heap[128 + 300], 'H');
	/* A remote access violation across processes. */
	l = t_seg(kh, heap, 8);
	r = t_rseg(peer.heap_key + 1, (void *)(uintptr_t)peer.heap_addr, 8);
	cr_assert_eq(dat_ep_post_rdma_write(ep, 1, &l, t_cookie(7), &r, 0), DAT_SUCCESS);
	t_expect(A.req, ep, 7, DAT_DTO_ERR_REMOTE_ACCESS, DAT_DTO_RDMA_WRITE, 0);
	xwrite(wr, "g", 1);
	cr_assert_eq(t_pipe_read(rd, &c, 1), 0, "child failed its checks");
	xwrite(wr, "q", 1);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status 0x%x", status);
	t_close(&A);
	zdapl_mem_free(pool);
	free(heap);
}

Test(shm_proc, peer_killed_mid_transfer)
{
	struct side A;
	struct info peer;
	int rd, wr, status;
	pid_t pid = spawn(&rd, &wr, 1);
	char *heap = malloc(BUF);
	DAT_LMR_CONTEXT kh;
	DAT_EP_HANDLE ep;
	DAT_EVENT ev;
	int posted = 0, done = 0;

	t_open(&A);
	ep = t_ep(&A, NULL);
	t_reg(&A, NULL, heap, BUF, DAT_MEM_PRIV_ALL_FLAG, &kh);
	connect_child(&A, ep, rd, wr, &peer);
	for (int i = 0; i < 2000; i++) {
		DAT_LMR_TRIPLET l = t_seg(kh, heap, (i % 5 == 0) ? BUF : 64);
		DAT_RMR_TRIPLET r = t_rseg(i % 2 ? peer.pool_key : peer.heap_key,
					   (void *)(uintptr_t)(i % 2 ? peer.pool_addr : peer.heap_addr),
					   BUF);
		DAT_RETURN ret;

		if (i == 300)
			kill(pid, SIGKILL);
		if (i == 600)
			cr_assert_eq(waitpid(pid, &status, 0), pid);
		ret = i % 3 ? dat_ep_post_rdma_write(ep, 1, &l, t_cookie(i), &r, 0)
			    : dat_ep_post_send(ep, 1, &l, t_cookie(i), 0);
		if (ret == DAT_SUCCESS)
			posted++;
		else
			cr_assert_eq(T_TYPE(ret), DAT_INSUFFICIENT_RESOURCES);
		while (dat_evd_dequeue(A.req, &ev) == DAT_SUCCESS)
			done++;
	}
	/* The connection manager flushes on the peer's EOF; so do we. */
	t_flush(ep);
	for (int spins = 0; done < posted && spins < 100000; spins++)
		while (dat_evd_dequeue(A.req, &ev) == DAT_SUCCESS)
			done++;
	cr_assert_eq(done, posted, "%d of %d DTOs completed", done, posted);
	t_none(A.req);
	cr_assert_eq(dat_ep_free(ep), DAT_SUCCESS);
	t_close(&A);
	free(heap);
}

Test(shm_proc, stream_with_small_receive_queue)
{
	struct side A;
	struct info peer;
	int rd, wr, status, inflight = 0;
	pid_t pid = spawn(&rd, &wr, 2);
	char *src = malloc(STREAM_MAX);
	DAT_LMR_CONTEXT k;
	DAT_EP_HANDLE ep;
	DAT_EVENT ev;
	char c;

	t_open(&A);
	ep = t_ep(&A, NULL);
	t_reg(&A, NULL, src, STREAM_MAX, DAT_MEM_PRIV_ALL_FLAG, &k);
	connect_child(&A, ep, rd, wr, &peer);
	/* Sizes cycle through eager-sized and larger messages; the receiver
	 * reposts as it goes, so sends find receives, the eager ring, or
	 * neither (queued until the sender's next progress). */
	for (uint32_t n = 0; n < STREAM_MSGS; n++) {
		uint32_t len = 8 + (n * 37) % (STREAM_MAX - 8);
		DAT_LMR_TRIPLET l = t_seg(k, src, len);
		DAT_RETURN ret;

		memcpy(src, &n, 4);
		src[len - 1] = (char)n;
		while ((ret = dat_ep_post_send(ep, 1, &l, t_cookie(n), 0)) != DAT_SUCCESS) {
			cr_assert_eq(T_TYPE(ret), DAT_INSUFFICIENT_RESOURCES);
			if (dat_evd_dequeue(A.req, &ev) == DAT_SUCCESS) {
				cr_assert_eq(ev.event_data.dto_completion_event_data.status,
					     DAT_DTO_SUCCESS);
				inflight--;
			}
		}
		inflight++;
		/* The send buffer is reused: wait for this send to be done,
		 * asleep: a send queued for room (RNR) must be woken by the
		 * receiver's doorbell, not by a timeout. */
		while (inflight > 0) {
			DAT_COUNT more;

			cr_assert_eq(dat_evd_wait(A.req, 5 * 1000 * 1000, 1, &ev, &more),
				     DAT_SUCCESS, "send %u never completed", n);
			cr_assert_eq(ev.event_data.dto_completion_event_data.status, DAT_DTO_SUCCESS);
			inflight--;
		}
	}
	cr_assert_eq(t_pipe_read(rd, &c, 1), 0);
	xwrite(wr, "q", 1);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status 0x%x", status);
	cr_assert_eq(c, 'd');
	t_close(&A);
	free(src);
}
