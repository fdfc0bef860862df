/*
 * Queue memory of the software mlx5 device (issue 14): with the allocator
 * hook the DAT device gives it (hw/mlx5/zd_mlx5_qmem.h, the parent-domain
 * allocator rdma-core's mlx5 calls on a ConnectX), QP, CQ and SRQ buffers
 * and doorbell records lie in registered pool chunks, and the model reads
 * WQEs from and writes CQEs into them there; a hook that declines, or gives
 * memory no peer could map, leaves the queue in the NIC's own arena; memory
 * of destroyed queues is reused by the NIC's next ones and handed back to
 * the hook when it closes.
 */
#include <infiniband/mlx5dv.h>

#include <zdapl/zdapl.h>

#include "hw/mlx5/zd_mlx5_qmem.h"
#include "mem/zd_chunk.h"
#include "mem/zd_qmem.h"
#include "mlx5sim_test.h"

#define BUF 4096

static int publish(void *arg, enum zd_chunk_event ev, const struct zd_chunk_ref *c)
{
	if (ev == ZD_CHUNK_ADD)
		zd_mlx5sim_chunk_add(arg, c->base, c->len, c->fd);
	else
		zd_mlx5sim_chunk_remove(arg, c->base);
	return 0;
}

/* A NIC as the DAT device opens it: the pool's hook, pool chunks published. */
static struct zd_mlx5sim_nic *nic_open_hooked(void)
{
	struct zd_mlx5sim_nic_attr a = {
		.qmem_alloc = zd_mlx5_qmem_alloc, .qmem_free = zd_mlx5_qmem_free,
	};
	struct zd_mlx5sim_nic *n;

	cr_assert_eq(zd_mlx5sim_nic_open(&a, &n), 0);
	cr_assert_eq(zd_chunk_add_listener(publish, n), 0);
	return n;
}

static void nic_close_hooked(struct zd_mlx5sim_nic *n)
{
	cr_assert_eq(zd_chunk_remove_listener(publish, n), 0);
	zd_mlx5sim_nic_close(n);
}

static bool in_pool(const volatile void *p, size_t len)
{
	return zd_qmem_in_pool((const void *)p, len);
}

static void check_qp_in_pool(const struct t_qp *q)
{
	cr_assert(in_pool(q->sq.buf, (size_t)q->sq.wqe_cnt * MLX5_SEND_WQE_BB));
	cr_assert(in_pool(q->sq.dbrec, 4));
	cr_assert(in_pool(q->rq.dbrec, 4));
	if (q->rq.wqe_cnt)
		cr_assert(in_pool(q->rq.buf, (size_t)q->rq.wqe_cnt * q->rq.stride));
	/* The BlueFlame register is device memory: the NIC's UAR page. */
	cr_assert_not(in_pool(q->sq.bf_reg, 8));
}

static void check_cq_in_pool(const struct t_cq *c)
{
	cr_assert(in_pool(c->d.buf, (size_t)c->d.cqe_cnt * c->d.cqe_size));
	cr_assert(in_pool(c->d.dbrec, 8));
	cr_assert_not(in_pool(c->d.uar, 8));
}

Test(mlx5sim_qmem, queues_in_pool_carry_sends_and_writes, .timeout = 60)
{
	struct zd_mlx5sim_nic *na = nic_open_hooked(), *nb = nic_open_hooked();
	struct t_cq sca, rca, scb, rcb;
	struct t_qp qa, qb, qs;
	struct t_srq s = { 0 };
	struct zd_qmem_stats st;
	uint32_t pda, pdb, ka, kb, r;
	uint8_t *la = zdapl_mem_alloc(BUF), *lb = zdapl_mem_alloc(BUF);
	struct mlx5_cqe64 c;
	struct t_wqe w;

	cr_assert_eq(zd_mlx5sim_pd_alloc(na, &pda), 0);
	cr_assert_eq(zd_mlx5sim_pd_alloc(nb, &pdb), 0);
	t_cq_make(na, 4, &sca);
	t_cq_make(na, 4, &rca);
	t_cq_make(nb, 4, &scb);
	t_cq_make(nb, 64, &rcb);
	t_qp_make(na, pda, &sca, &rca, 0, 8, 4, &qa);
	t_qp_make(nb, pdb, &scb, &rcb, 0, 8, 4, &qb);
	cr_assert_eq(zd_mlx5sim_srq_create(nb, pdb, 16, 1, &s.d), 0);
	t_qp_make(nb, pdb, &scb, &rcb, s.d.srqn, 8, 0, &qs);
	check_cq_in_pool(&sca);
	check_cq_in_pool(&rcb);
	check_qp_in_pool(&qa);
	check_qp_in_pool(&qb);
	check_qp_in_pool(&qs);
	cr_assert(in_pool(s.d.buf, (size_t)s.d.wqe_cnt * s.d.stride));
	cr_assert(in_pool(s.d.dbrec, 4));
	zd_qmem_get_stats(&st);
	cr_assert_eq(st.pool_live[ZD_QMEM_MLX5_QP], 3);
	cr_assert_eq(st.pool_live[ZD_QMEM_MLX5_CQ], 4);
	cr_assert_eq(st.pool_live[ZD_QMEM_MLX5_SRQ], 1);
	cr_assert_eq(st.pool_live[ZD_QMEM_MLX5_DBR], 4 + 3 + 1);

	t_connect(na, &qa, nb, &qb);
	cr_assert_eq(zd_mlx5sim_mr_add(na, pda, la, BUF, T_ACC_ALL, &ka, &r), 0);
	cr_assert_eq(zd_mlx5sim_mr_add(nb, pdb, lb, BUF, T_ACC_ALL, &kb, &r), 0);
	memset(lb, 0, BUF);
	memcpy(la, "pool queues", 11);
	/* A send: the receive WQE is read from, its CQE written into, pool. */
	t_recv(&qb, lb, 64, kb);
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_data(&w, la, 11, ka);
	t_post(&qa, &w, T_BF);
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ);
	c = t_wait(&rcb);
	cr_assert_eq(t_op(&c), MLX5_CQE_RESP_SEND);
	cr_assert_eq(be32toh(c.byte_cnt), 11);
	cr_assert_eq(memcmp(lb, "pool queues", 11), 0);
	/* An RDMA write by 8-byte doorbell only: the WQE read from the SQ. */
	t_wqe_ctrl(&w, &qa, MLX5_OPCODE_RDMA_WRITE, MLX5_WQE_CTRL_CQ_UPDATE, 0);
	t_wqe_raddr(&w, (uintptr_t)lb + 100, kb);
	t_wqe_data(&w, la, 11, ka);
	t_post(&qa, &w, T_DB8);
	c = t_wait(&sca);
	cr_assert_eq(t_op(&c), MLX5_CQE_REQ);
	cr_assert_eq(memcmp(lb + 100, "pool queues", 11), 0);

	nic_close_hooked(na);
	nic_close_hooked(nb);
	zd_qmem_get_stats(&st);
	for (int k = ZD_QMEM_MLX5_QP; k <= ZD_QMEM_MLX5_DBR; k++)
		cr_assert_eq(st.pool_live[k], 0, "%s", zd_qmem_kind_name(k));
	zdapl_mem_free(la);
	zdapl_mem_free(lb);
}

Test(mlx5sim_qmem, destroyed_queue_memory_is_reused_then_given_back)
{
	struct zd_mlx5sim_nic *n = nic_open_hooked();
	struct t_cq sc, rc;
	struct t_qp q1, q2, q3;
	struct zd_qmem_stats st;
	uint32_t pd;

	cr_assert_eq(zd_mlx5sim_pd_alloc(n, &pd), 0);
	t_cq_make(n, 4, &sc);
	t_cq_make(n, 4, &rc);
	t_qp_make(n, pd, &sc, &rc, 0, 8, 4, &q1);
	check_qp_in_pool(&q1);
	cr_assert_eq(zd_mlx5sim_qp_destroy(n, q1.qpn), 0);
	/* Kept by the NIC, not given back (a peer may complete into it late). */
	zd_qmem_get_stats(&st);
	cr_assert_eq(st.pool_live[ZD_QMEM_MLX5_QP], 1);
	t_qp_make(n, pd, &sc, &rc, 0, 8, 4, &q2);
	cr_assert_eq(q2.sq.buf, q1.sq.buf);
	cr_assert_eq(q2.sq.dbrec, q1.sq.dbrec);
	/* A QP of another size gets new memory. */
	t_qp_make(n, pd, &sc, &rc, 0, 64, 4, &q3);
	check_qp_in_pool(&q3);
	cr_assert_neq(q3.sq.buf, q1.sq.buf);
	zd_qmem_get_stats(&st);
	cr_assert_eq(st.pool_live[ZD_QMEM_MLX5_QP], 2);
	nic_close_hooked(n);
	zd_qmem_get_stats(&st);
	cr_assert_eq(st.pool_live[ZD_QMEM_MLX5_QP], 0);
	cr_assert_eq(st.pool_live[ZD_QMEM_MLX5_DBR], 0);
}

/* Hooks the NIC must not use: one that declines, one whose memory no peer
 * could map (not in a published chunk).  The second's frees are counted. */
static unsigned hook_allocs, hook_frees;

static void *hook_decline(struct ibv_pd *pd, void *ctx, size_t size, size_t align, uint64_t type)
{
	hook_allocs++;
	return IBV_ALLOCATOR_USE_DEFAULT;
}

static void *hook_private(struct ibv_pd *pd, void *ctx, size_t size, size_t align, uint64_t type)
{
	hook_allocs++;
	return aligned_alloc(align < 64 ? 64 : align, (size + 4095) & ~(size_t)4095);
}

static void hook_free(struct ibv_pd *pd, void *ctx, void *p, uint64_t type)
{
	hook_frees++;
	free(p);
}

static void arena_fallback(void *(*alloc)(struct ibv_pd *, void *, size_t, size_t, uint64_t))
{
	struct zd_mlx5sim_nic_attr a = { .qmem_alloc = alloc, .qmem_free = hook_free };
	struct zd_mlx5sim_nic *n;
	struct t_cq sc, rc;
	struct t_qp q;
	struct t_srq s = { 0 };
	uint32_t pd;

	cr_assert_eq(zd_mlx5sim_nic_open(&a, &n), 0);
	cr_assert_eq(zd_mlx5sim_pd_alloc(n, &pd), 0);
	t_cq_make(n, 4, &sc);
	t_cq_make(n, 4, &rc);
	t_qp_make(n, pd, &sc, &rc, 0, 8, 4, &q);
	cr_assert_eq(zd_mlx5sim_srq_create(n, pd, 16, 1, &s.d), 0);
	/* CQ: buffer + record; QP: buffer + record; SRQ: buffer + record. */
	cr_assert_eq(hook_allocs, 8);
	cr_assert_not(in_pool(sc.d.buf, 64));
	cr_assert_not(in_pool(q.sq.buf, 64));
	cr_assert_not(in_pool(s.d.buf, 64));
	/* The queues work from the arena: a send to ourselves. */
	{
		struct t_qp q2;
		uint8_t *m = aligned_alloc(64, 256);
		uint32_t k, r;
		struct mlx5_cqe64 c;
		struct t_wqe w;

		t_qp_make(n, pd, &sc, &rc, 0, 8, 4, &q2);
		t_connect(n, &q, n, &q2);
		cr_assert_eq(zd_mlx5sim_mr_add(n, pd, m, 256, T_ACC_ALL, &k, &r), 0);
		memcpy(m, "arena", 5);
		t_recv(&q2, m + 128, 64, k);
		t_wqe_ctrl(&w, &q, MLX5_OPCODE_SEND, MLX5_WQE_CTRL_CQ_UPDATE, 0);
		t_wqe_data(&w, m, 5, k);
		t_post(&q, &w, T_BF);
		c = t_wait(&rc);
		cr_assert_eq(t_op(&c), MLX5_CQE_RESP_SEND);
		cr_assert_eq(memcmp(m + 128, "arena", 5), 0);
		zd_mlx5sim_nic_close(n);
		free(m);
	}
}

Test(mlx5sim_qmem, a_hook_that_declines_leaves_queues_in_the_arena)
{
	arena_fallback(hook_decline);
	cr_assert_eq(hook_frees, 0);
}

Test(mlx5sim_qmem, memory_outside_published_chunks_is_given_back)
{
	arena_fallback(hook_private);
	/* Every buffer the hook gave went straight back. */
	cr_assert_eq(hook_frees, hook_allocs);
}

/* The hook itself, as rdma-core's mlx5 calls it: the four resource types
 * it knows come from the pool at the alignment asked; any other type, or
 * a bad alignment, is left to the caller's own allocation. */
Test(mlx5sim_qmem, hook_answers_as_rdma_core_expects)
{
	static const uint64_t types[] = { MLX5DV_RES_TYPE_QP, MLX5DV_RES_TYPE_CQ,
					  MLX5DV_RES_TYPE_SRQ, MLX5DV_RES_TYPE_DBR };
	struct zd_qmem_stats st;

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		size_t size = types[i] == MLX5DV_RES_TYPE_DBR ? 8 : 3 * 4096 + 64;
		size_t align = types[i] == MLX5DV_RES_TYPE_DBR ? 8 : 4096;
		void *p = zd_mlx5_qmem_alloc(NULL, NULL, size, align, types[i]);

		cr_assert_not_null(p);
		cr_assert_neq(p, IBV_ALLOCATOR_USE_DEFAULT);
		cr_assert(in_pool(p, size));
		cr_assert_eq((uintptr_t)p % align, 0);
		zd_mlx5_qmem_free(NULL, NULL, p, types[i]);
	}
	cr_assert_eq(zd_mlx5_qmem_alloc(NULL, NULL, 4096, 4096, MLX5DV_RES_TYPE_RWQ),
		     IBV_ALLOCATOR_USE_DEFAULT);
	cr_assert_eq(zd_mlx5_qmem_alloc(NULL, NULL, 4096, 3000, MLX5DV_RES_TYPE_QP),
		     IBV_ALLOCATOR_USE_DEFAULT);
	zd_qmem_get_stats(&st);
	for (int k = ZD_QMEM_MLX5_QP; k <= ZD_QMEM_MLX5_DBR; k++)
		cr_assert_eq(st.pool_live[k], 0);
}
