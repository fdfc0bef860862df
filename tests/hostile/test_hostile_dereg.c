/*
 * dat_lmr_free against a peer's RDMA write in flight (issue 15): a peer
 * process writes 32 MiB into our region and we free the LMR once its
 * middle byte has landed.  From the moment dat_lmr_free returns the
 * memory is the application's again: we fill it with our own pattern, and
 * no byte of the write may land over it any more.  The write completes in
 * success or in error (both legal: on tcp the rest is dropped and the
 * write fails, breaking that connection).  On zdapl-shm, zdapl-tcp (lo)
 * and zdapl-mlx5sim, through DAT only.
 */
#include "hostile.h"

#define BIG     (32u << 20)
#define WRITTEN 0x5a   /* what the peer writes */
#define OURS    0xc3   /* what we write once the memory is ours again */

TestSuite(hostile_dereg, .timeout = 120);

static DAT_LMR_HANDLE big_lmr(struct node *n, uint8_t *buf, DAT_LMR_CONTEXT *lkey,
			      DAT_RMR_CONTEXT *rkey)
{
	DAT_REGION_DESCRIPTION r = { .for_va = buf };
	DAT_LMR_HANDLE lmr;
	DAT_VLEN rlen;
	DAT_VADDR raddr;

	CHK_RET(dat_lmr_create(n->ia, DAT_MEM_TYPE_VIRTUAL, r, BIG, n->pz, DAT_MEM_PRIV_ALL_FLAG,
			       DAT_VA_TYPE_VA, &lmr, lkey, rkey, &rlen, &raddr),
		DAT_SUCCESS);
	return lmr;
}

/* The writer: one 32 MiB RDMA write into the region the server names. */
static int c_writer(int fd, void *arg)
{
	const struct peer_job *j = arg;
	uint8_t *src = aligned_alloc(4096, BIG);
	DAT_LMR_CONTEXT lkey;
	DAT_RMR_CONTEXT rkey;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_TRIPLET iov;
	DAT_RMR_TRIPLET r = { 0 };
	struct peer p;
	uint32_t lo, hi;
	int st;

	CHK(src);
	memset(src, WRITTEN, BIG);
	client_open(&p, j->dev, 0, fd, NULL);
	lmr = big_lmr(&p.n, src, &lkey, &rkey);
	r.rmr_context = msg_recv(fd, 10000);
	lo = msg_recv(fd, 10000);
	hi = msg_recv(fd, 10000);
	r.virtual_address = (DAT_VADDR)lo | (DAT_VADDR)hi << 32;
	r.segment_length = BIG;
	iov = (DAT_LMR_TRIPLET){ .lmr_context = lkey, .virtual_address = (DAT_VADDR)(uintptr_t)src,
				 .segment_length = BIG };
	post_write(p.ep, 1, &iov, 1, &r);
	st = dto_wait(p.req, 30 * SEC, 1, NULL);
	fprintf(stderr, "%s: the write completed with status %d\n", j->dev->ia, st);
	CHK(st == DAT_DTO_SUCCESS || st == DAT_DTO_ERR_REMOTE_ACCESS ||
	    st == DAT_DTO_ERR_FLUSHED || st == DAT_DTO_ERR_TRANSPORT);
	msg_send(fd, 1);
	msg_recv(fd, 30000);
	CHK_RET(dat_lmr_free(lmr), DAT_SUCCESS);
	peer_close(&p);
	free(src);
	return 0;
}

static void dereg_case(const struct peer_dev *dev)
{
	struct peer_job j = { .dev = dev };
	uint8_t *dst = aligned_alloc(4096, BIG);
	DAT_LMR_CONTEXT lkey;
	DAT_RMR_CONTEXT rkey;
	DAT_LMR_HANDLE lmr;
	struct peer p;
	uint64_t end;
	size_t over = 0;

	CHK(dst);
	memset(dst, 0, BIG);
	server_start(&p, dev, 0, c_writer, &j);
	lmr = big_lmr(&p.n, dst, &lkey, &rkey);
	server_up(&p);
	msg_send(p.fd, rkey);
	msg_send(p.fd, (uint32_t)(uintptr_t)dst);
	msg_send(p.fd, (uint32_t)((uint64_t)(uintptr_t)dst >> 32));
	/* Halfway (whichever way the copy runs), free the region. */
	end = now_ms() + 20000;
	while (!__atomic_load_n(&dst[BIG / 2], __ATOMIC_RELAXED))
		CHK(now_ms() < end);
	CHK_RET(dat_lmr_free(lmr), DAT_SUCCESS);
	memset(dst, OURS, BIG);
	/* The writer's completion, then a little more for anything late. */
	CHK(msg_recv(p.fd, 30000) == 1);
	usleep(100 * 1000);
	for (size_t i = 0; i < BIG; i++)
		over += dst[i] != OURS;
	fprintf(stderr, "%s: %zu bytes written after dat_lmr_free returned\n", dev->ia, over);
	CHK(over == 0);
	/* The connection may have broken (tcp NAKs the write): either way
	 * the server's last word, and the client exits 0. */
	msg_send(p.fd, 1);
	CHK(reap(p.pid, 20000) == 0);
	peer_close(&p);
	free(dst);
}

Test(hostile_dereg, shm) { dereg_case(&shm); }
Test(hostile_dereg, tcp) { dereg_case(&tcp); }
Test(hostile_dereg, mlx5sim) { dereg_case(&mlx5sim); }
