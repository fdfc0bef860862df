/*
 * The software mlx5 device across two processes (fork, QP addresses over a
 * socketpair): RDMA writes land in the child's private memory
 * (process_vm_writev) and in its memfd chunk (mapping), reads and atomics
 * reach them, sends consume its receives, while the child only spins on
 * memory: it never calls into the device after setup.
 */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "mlx5sim_test.h"

#define LEN 8192

struct hello {
	struct zd_mlx5sim_qp_addr addr;
	uint64_t priv, chunk;    /* buffers in the child */
	uint32_t kpriv, kchunk;
};

static void xfer(int fd, void *p, size_t n, bool out)
{
	ssize_t r = out ? write(fd, p, n) : read(fd, p, n);

	if (r != (ssize_t)n)
		_exit(90);
}

/* The child: one NIC, one QP, two buffers; then only loads and stores. */
static int child(int sock)
{
	struct zd_mlx5sim_nic *n;
	struct t_cq scq, rcq;
	struct t_qp qp;
	struct hello h = { 0 }, peer;
	struct mlx5_cqe64 c;
	uint32_t pd, r, klocal;
	uint8_t *priv = aligned_alloc(64, LEN), *chunk, *rbuf = aligned_alloc(64, 64);
	int mfd = memfd_create("t-chunk", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	uint64_t end;

	if (mfd < 0 || ftruncate(mfd, LEN) != 0 ||
	    fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
		return 10;
	chunk = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (chunk == MAP_FAILED || zd_mlx5sim_nic_open(NULL, &n) || zd_mlx5sim_pd_alloc(n, &pd))
		return 11;
	memset(priv, 0, LEN);
	memset(chunk, 0, LEN);
	memset(rbuf, 0, 64);
	if (zd_mlx5sim_chunk_add(n, chunk, LEN, mfd) ||
	    zd_mlx5sim_mr_add(n, pd, priv, LEN, T_ACC_ALL, &h.kpriv, &r) ||
	    zd_mlx5sim_mr_add(n, pd, chunk, LEN, T_ACC_ALL, &h.kchunk, &r) ||
	    zd_mlx5sim_mr_add(n, pd, rbuf, 64, T_ACC_ALL, &klocal, &r))
		return 12;
	if (zd_mlx5sim_cq_create(n, 4, &scq, &scq.d) || zd_mlx5sim_cq_create(n, 4, &rcq, &rcq.d))
		return 13;
	scq.ci = rcq.ci = 0;
	struct zd_mlx5sim_qp_attr a = { .pdn = pd, .send_cqn = scq.d.cqn, .recv_cqn = rcq.d.cqn,
					.sq_wqe_cnt = 4, .rq_wqe_cnt = 4, .rq_max_sge = 1 };

	memset(&qp, 0, sizeof(qp));
	if (zd_mlx5sim_qp_create(n, &a, &qp.sq, &qp.rq, &qp.qpn) ||
	    zd_mlx5sim_qp_addr(n, qp.qpn, &h.addr))
		return 14;
	h.priv = (uintptr_t)priv;
	h.chunk = (uintptr_t)chunk;
	*(uint64_t *)(priv + 64) = 1000;
	*(uint64_t *)(chunk + 64) = 2000;
	t_recv(&qp, rbuf, 64, klocal);
	xfer(sock, &h, sizeof(h), true);
	xfer(sock, &peer, sizeof(peer), false);
	if (zd_mlx5sim_qp_connect(n, qp.qpn, &peer.addr))
		return 15;
	xfer(sock, &r, 1, true);

	/* From here on: memory only.  Both write targets end in a flag byte. */
	end = t_now_ms() + 20000;
	while (!__atomic_load_n(&priv[4095], __ATOMIC_ACQUIRE) ||
	       !__atomic_load_n(&chunk[4095], __ATOMIC_ACQUIRE)) {
		if (t_now_ms() > end)
			return 20;
	}
	for (int i = 128; i < 4095; i++)
		if (priv[i] != (uint8_t)(i * 7) || chunk[i] != (uint8_t)(i * 3))
			return 21;
	/* the send lands in the posted receive and its CQE appears */
	struct mlx5_cqe64 *cq0 = rcq.d.buf;

	while ((__atomic_load_n(&cq0->op_own, __ATOMIC_ACQUIRE) >> 4) == MLX5_CQE_INVALID)
		if (t_now_ms() > end)
			return 22;
	memcpy(&c, cq0, sizeof(c));
	if ((c.op_own >> 4) != MLX5_CQE_RESP_SEND || be32toh(c.byte_cnt) != 5 ||
	    memcmp(rbuf, "child", 5) != 0)
		return 23;
	/* the atomics landed (host order in memory) */
	while (*(volatile uint64_t *)(priv + 64) != 1005 ||
	       *(volatile uint64_t *)(chunk + 64) != 2007)
		if (t_now_ms() > end)
			return 24;
	xfer(sock, &r, 1, true);
	xfer(sock, &r, 1, false);          /* parent done */
	zd_mlx5sim_nic_close(n);
	return 0;
}

/* One signaled one-sided WQE to the child: @opcode at @raddr (@rkey), the
 * local side @len bytes at @laddr (@lkey); an atomic's two operands in
 * @at (NULL for others).  Waits for it: its CQE. */
static struct mlx5_cqe64 one_sided(struct t_qp *qp, struct t_cq *scq, uint8_t opcode,
				   uint64_t raddr, uint32_t rkey, const uint64_t *at, void *laddr,
				   uint32_t len, uint32_t lkey)
{
	struct t_wqe w;

	t_wqe_ctrl(&w, qp, opcode, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, raddr, rkey);
	if (at)
		t_wqe_atomic(&w, at[0], at[1]);
	t_wqe_data(&w, laddr, len, lkey);
	t_post(qp, &w, T_BF);
	return t_wait(scq);
}

Test(proc, two_processes_target_only_spins, .timeout = 60)
{
	int sv[2], status;
	pid_t pid;
	struct zd_mlx5sim_nic *n;
	struct t_cq scq, rcq;
	struct t_qp qp;
	struct hello h, mine = { 0 };
	struct mlx5_cqe64 c;
	struct t_wqe w;
	uint32_t pd, k, r;
	uint8_t *buf = aligned_alloc(64, LEN), b;

	t_need_pidfd();
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		close(sv[0]);
		_exit(child(sv[1]));
	}
	close(sv[1]);
	cr_assert_eq(zd_mlx5sim_nic_open(NULL, &n), 0);
	cr_assert_eq(zd_mlx5sim_pd_alloc(n, &pd), 0);
	for (int i = 0; i < LEN; i++)
		buf[i] = (uint8_t)(i < 4096 ? i * 7 : (i - 4096) * 3);
	buf[4095] = buf[4096 + 4095] = 1;
	cr_assert_eq(zd_mlx5sim_mr_add(n, pd, buf, LEN, T_ACC_ALL, &k, &r), 0);
	t_cq_make(n, 4, &scq);
	t_cq_make(n, 4, &rcq);
	t_qp_make(n, pd, &scq, &rcq, 0, 8, 4, &qp);
	cr_assert_eq(read(sv[0], &h, sizeof(h)), (ssize_t)sizeof(h));
	cr_assert_eq(zd_mlx5sim_qp_addr(n, qp.qpn, &mine.addr), 0);
	cr_assert_eq(write(sv[0], &mine, sizeof(mine)), (ssize_t)sizeof(mine));
	cr_assert_eq(zd_mlx5sim_qp_connect(n, qp.qpn, &h.addr), 0);
	cr_assert_eq(read(sv[0], &b, 1), 1);

	/* writes: private memory, then the chunk (mapped) */
	c = one_sided(&qp, &scq, MLX5_OPCODE_RDMA_WRITE, h.priv + 128, h.kpriv, NULL, buf + 128,
		      4096 - 128, k);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ, "syndrome %#x", t_syn(&c));
	c = one_sided(&qp, &scq, MLX5_OPCODE_RDMA_WRITE, h.chunk + 128, h.kchunk, NULL,
		      buf + 4096 + 128, 4096 - 128, k);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ, "syndrome %#x", t_syn(&c));

	/* reads back from both */
	memset(buf, 0, 512);
	c = one_sided(&qp, &scq, MLX5_OPCODE_RDMA_READ, h.priv + 128, h.kpriv, NULL, buf, 100, k);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(buf[i], (uint8_t)((i + 128) * 7));
	c = one_sided(&qp, &scq, MLX5_OPCODE_RDMA_READ, h.chunk + 128, h.kchunk, NULL, buf + 200,
		      100, k);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(buf[200 + i], (uint8_t)((i + 128) * 3));

	/* a send into the child's receive */
	t_wqe_ctrl(&w, &qp, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_inline(&w, "child", 5);
	t_post(&qp, &w, T_BF);
	c = t_wait(&scq);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ);

	/* atomics on private memory (process_vm) and on the chunk (mapped);
	 * the old values come back big-endian */
	c = one_sided(&qp, &scq, MLX5_OPCODE_ATOMIC_FA, h.priv + 64, h.kpriv, (uint64_t[]){ 5, 0 },
		      buf + 400, 8, k);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ);
	cr_assert_eq(be64toh(*(uint64_t *)(buf + 400)), 1000);
	c = one_sided(&qp, &scq, MLX5_OPCODE_ATOMIC_CS, h.chunk + 64, h.kchunk,
		      (uint64_t[]){ 2007, 2000 }, buf + 408, 8, k);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ);
	cr_assert_eq(be64toh(*(uint64_t *)(buf + 408)), 2000);

	/* a bad rkey across processes: remote access error, child untouched */
	t_wqe_ctrl(&w, &qp, MLX5_OPCODE_RDMA_WRITE, 0, 0);
	t_wqe_raddr(&w, h.priv + 128, h.kpriv + 0x100);
	t_wqe_data(&w, buf, 8, k);
	cr_assert_eq(read(sv[0], &b, 1), 1);   /* child verified everything */
	t_post(&qp, &w, T_BF);
	c = t_wait(&scq);
	cr_assert_eq(t_syn(&c), MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
	cr_assert_eq(write(sv[0], &b, 1), 1);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d",
		  WEXITSTATUS(status));
	zd_mlx5sim_nic_close(n);
	free(buf);
}
