/*
 * The software mlx5 device as a DAT device ("zdapl-mlx5sim", ia_params
 * "mlx5sim [ifname | IPv4]"): the hw/mlx5 glue and data path over a
 * backend whose control path is the model's (zd_mlx5sim.h).  The data path
 * cannot tell it from a ConnectX: it drives the same descriptors.
 *
 * One NIC per IA.  The IA address is an AF_INET address of this host, as
 * for zdapl-shm (by default the first non-loopback one), and the
 * connection manager binds every local address: the device reaches this
 * host only.
 *
 * Pool chunks (zd_chunk.h) are handed to the NIC as they come and go, and
 * the adoption file (zd_adopt.h) when the NIC opens, so RDMA into a peer's
 * pool memory or registered own memory goes through a mapping of the
 * peer's memfd; everything else goes through process_vm_writev/readv.
 * The queues' memory comes from the pool too, through the allocator hook
 * the verbs backend gives rdma-core (zd_mlx5_qmem.h).
 *
 * Backend handles are the model's object numbers (PD, CQ, SRQ numbers, MR
 * keys, QPNs: never 0) carried in the pointer.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>          /* before dat_ib_extensions.h */
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>
#include <sys/random.h>

#include "core/zd_ia.h"
#include "core/zd_netaddr.h"
#include "hw/mlx5/sim/zd_mlx5sim.h"
#include "hw/mlx5/zd_mlx5.h"
#include "hw/mlx5/zd_mlx5_qmem.h"
#include "mem/zd_chunk.h"

/* What one IA's NIC holds.  Its page arena (UAR pages, and the queues the
 * pool cannot give) is a sparse memfd: only pages of live objects are
 * touched, so it is sized for many connections (dtestcm opens a thousand
 * at once, each side). */
#define ZD_MS_BE_QUEUE_MEM (1ull << 30)
#define ZD_MS_BE_MAX_QP    16384u
#define ZD_MS_BE_MAX_CQ    1024u
#define ZD_MS_BE_MAX_SRQ   256u
#define ZD_MS_BE_MAX_MR    16384u
#define ZD_MS_BE_MAX_PD    64u      /* the model's PD table */
#define ZD_MS_BE_MAX_WR    4096u    /* SQ, RQ and SRQ depth */
#define ZD_MS_BE_MAX_SGE   16u
#define ZD_MS_BE_MAX_BB    (1u << 15)  /* SQ basic blocks per QP */
/* Device contexts per process, as a NIC has a bounded number of UARs:
 * each NIC costs an engine thread and about half a MiB, so opening IAs
 * until something breaks ends here, cleanly. */
#define ZD_MS_BE_MAX_NICS  1024u

static _Atomic uint32_t zd_ms_be_nics;

struct zd_ms_be {
	struct zd_mlx5sim_nic *nic;
	bool listening;               /* our chunk listener is registered */
};

/* A UD QP's blob: its address and the Q_Key datagrams to it carry. */
struct ms_ud_blob {
	struct zd_mlx5sim_qp_addr a;
	uint32_t qkey;
	uint32_t pad;
};

/* A UD QP's Q_Key: random, so that a datagram for an earlier QP of the
 * same number (a stale address handle) does not get in; never a
 * controlled one (high bit). */
static uint32_t ud_qkey(void)
{
	uint32_t k;

	if (getrandom(&k, sizeof(k), 0) != sizeof(k))
		k = (uint32_t)random();
	return k & 0x7fffffff;
}

static inline void *h_of(uint32_t n)
{
	return (void *)(uintptr_t)n;
}

static inline uint32_t n_of(const void *h)
{
	return (uint32_t)(uintptr_t)h;
}

static int chunk_listener(void *arg, enum zd_chunk_event ev, const struct zd_chunk_ref *c)
{
	struct zd_ms_be *b = arg;

	/* zdapl's own queues: the NIC never touches them, no peer maps them. */
	if (c->flags & ZD_CHUNK_F_QUEUE)
		return 0;
	/* A chunk the NIC cannot list (table full) is still reachable by
	 * cross-memory attach: never refuse it. */
	if (ev == ZD_CHUNK_ADD)
		zd_mlx5sim_chunk_add(b->nic, c->base, c->len, c->fd);
	else
		zd_mlx5sim_chunk_remove(b->nic, c->base);
	return 0;
}

static DAT_RETURN ms_open(const struct zd_ia_params *p, void **ctx, struct zd_mlx5_caps *caps,
			  struct sockaddr_in *addr)
{
	struct zd_mlx5sim_nic_attr na = {
		.queue_mem = ZD_MS_BE_QUEUE_MEM, .max_qp = ZD_MS_BE_MAX_QP,
		.max_cq = ZD_MS_BE_MAX_CQ, .max_srq = ZD_MS_BE_MAX_SRQ, .max_mr = ZD_MS_BE_MAX_MR,
		/* Queue memory through the hook rdma-core's mlx5 calls on a
		 * ConnectX (zd_mlx5_verbs.c's parent domains). */
		.qmem_alloc = zd_mlx5_qmem_alloc, .qmem_free = zd_mlx5_qmem_free,
	};
	struct zd_ms_be *b;
	DAT_RETURN ret;
	int rc;

	if (p->nargs > 1) {
		zd_log_error("ia_params for mlx5sim: expected \"mlx5sim [ifname|IPv4]\", got %d arguments",
			     p->nargs);
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	}
	ret = zd_netaddr_resolve(p->nargs ? p->args[0] : NULL, addr);
	if (ret != DAT_SUCCESS)
		return ret;
	if (atomic_fetch_add(&zd_ms_be_nics, 1) >= ZD_MS_BE_MAX_NICS) {
		atomic_fetch_sub(&zd_ms_be_nics, 1);
		zd_log_error("mlx5sim: %u software devices are open in this process already",
			     ZD_MS_BE_MAX_NICS);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
	}
	b = calloc(1, sizeof(*b));
	if (!b) {
		rc = -ENOMEM;
		goto err;
	}
	rc = zd_mlx5sim_nic_open(&na, &b->nic);
	if (rc != 0) {
		zd_log_error("mlx5sim: cannot open the software device: %s", strerror(-rc));
		goto err;
	}
	/* The application's own registered memory, shared in place; then
	 * every existing pool chunk, and each new one. */
	zd_mlx5sim_chunk_add_adopted(b->nic);
	rc = zd_chunk_add_listener(chunk_listener, b);
	if (rc != 0) {
		zd_log_error("mlx5sim: cannot follow the memory pool's chunks: %s", strerror(-rc));
		zd_mlx5sim_nic_close(b->nic);
		goto err;
	}
	b->listening = true;

	memset(caps, 0, sizeof(*caps));
	caps->max_qp = ZD_MS_BE_MAX_QP;
	caps->max_qp_wr = ZD_MS_BE_MAX_WR;
	caps->max_sge = ZD_MS_BE_MAX_SGE;
	caps->max_cq = ZD_MS_BE_MAX_CQ;
	caps->max_cqe = 1u << 22;
	caps->max_mr = ZD_MS_BE_MAX_MR;
	caps->max_mr_size = UINT32_MAX;
	caps->max_pd = ZD_MS_BE_MAX_PD;
	caps->max_srq = ZD_MS_BE_MAX_SRQ;
	caps->max_srq_wr = ZD_MS_BE_MAX_WR;
	caps->max_srq_sge = ZD_MS_BE_MAX_SGE;
	caps->max_rd_atomic = 16;
	caps->max_inline = ZD_MLX5_INLINE_DEF;
	caps->max_msg_size = 1u << 30;
	caps->max_ud_payload = ZD_MLX5SIM_UD_MTU;
	/* As a ConnectX left in its default requester mode. */
	caps->atomic_reply_be = true;
	*ctx = b;
	return DAT_SUCCESS;
err:
	free(b);
	atomic_fetch_sub(&zd_ms_be_nics, 1);
	return rc == -ENOMEM ? DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY)
			     : DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
}

static void ms_close(void *ctx)
{
	struct zd_ms_be *b = ctx;

	if (b->listening)
		zd_chunk_remove_listener(chunk_listener, b);
	zd_mlx5sim_nic_close(b->nic);
	free(b);
	atomic_fetch_sub(&zd_ms_be_nics, 1);
}

static int ms_event_wait(void *ctx, int timeout_ms)
{
	return zd_mlx5sim_event_wait(((struct zd_ms_be *)ctx)->nic, timeout_ms);
}

static void ms_event_kick(void *ctx)
{
	zd_mlx5sim_event_kick(((struct zd_ms_be *)ctx)->nic);
}

static int ms_event_get(void *ctx, void **cq_ctx)
{
	/* The model reports the cq_ctx given to cq_create, and acks. */
	return zd_mlx5sim_event_get(((struct zd_ms_be *)ctx)->nic, cq_ctx);
}

static DAT_RETURN ms_pd_alloc(void *ctx, void **pd)
{
	uint32_t pdn;

	if (zd_mlx5sim_pd_alloc(((struct zd_ms_be *)ctx)->nic, &pdn) != 0)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_PROTECTION_DOMAIN);
	*pd = h_of(pdn);
	return DAT_SUCCESS;
}

static void ms_pd_free(void *ctx, void *pd)
{
	zd_mlx5sim_pd_free(((struct zd_ms_be *)ctx)->nic, n_of(pd));
}

static DAT_RETURN ms_mr_reg(void *ctx, void *pd, uint64_t addr, uint64_t len,
			    DAT_MEM_PRIV_FLAGS priv, void **mr, uint32_t *lkey, uint32_t *rkey)
{
	uint32_t access = 0;
	int rc;

	if (priv & DAT_MEM_PRIV_LOCAL_WRITE_FLAG)
		access |= ZD_MLX5SIM_ACCESS_LOCAL_WRITE;
	if (priv & DAT_MEM_PRIV_REMOTE_READ_FLAG)
		access |= ZD_MLX5SIM_ACCESS_REMOTE_READ;
	/* The model, as verbs, wants local write with remote write or atomic. */
	if (priv & DAT_MEM_PRIV_REMOTE_WRITE_FLAG)
		access |= ZD_MLX5SIM_ACCESS_REMOTE_WRITE | ZD_MLX5SIM_ACCESS_LOCAL_WRITE;
	if (priv & DAT_IB_MEM_PRIV_REMOTE_ATOMIC)
		access |= ZD_MLX5SIM_ACCESS_REMOTE_ATOMIC | ZD_MLX5SIM_ACCESS_LOCAL_WRITE;
	rc = zd_mlx5sim_mr_add(((struct zd_ms_be *)ctx)->nic, n_of(pd), (void *)(uintptr_t)addr,
			       len, access, lkey, rkey);
	if (rc == -EINVAL)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (rc != 0)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY_REGION);
	*mr = h_of(*lkey);
	return DAT_SUCCESS;
}

static void ms_mr_dereg(void *ctx, void *mr)
{
	zd_mlx5sim_mr_remove(((struct zd_ms_be *)ctx)->nic, n_of(mr));
}

static DAT_RETURN ms_cq_create(void *ctx, uint32_t min_cqe, void *cq_ctx, void **cq,
			       struct zd_mlx5_cq_desc *d)
{
	/* Each CQ gets its own UAR page from the model: arming one never
	 * touches another's doorbell. */
	if (zd_mlx5sim_cq_create(((struct zd_ms_be *)ctx)->nic, min_cqe ? min_cqe : 1, cq_ctx,
				 d) != 0)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEVD);
	*cq = h_of(d->cqn);
	return DAT_SUCCESS;
}

static void ms_cq_destroy(void *ctx, void *cq)
{
	zd_mlx5sim_cq_destroy(((struct zd_ms_be *)ctx)->nic, n_of(cq));
}

static DAT_RETURN ms_srq_create(void *ctx, void *pd, uint32_t max_wr, uint32_t max_sge,
				void **srq, struct zd_mlx5_srq_desc *d)
{
	/* The model's size counts the WQE that always ends the free list. */
	if (max_wr > ZD_MS_BE_MAX_WR || max_sge > ZD_MS_BE_MAX_SGE)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
	if (zd_mlx5sim_srq_create(((struct zd_ms_be *)ctx)->nic, n_of(pd), max_wr + 1,
				  max_sge ? max_sge : 1, d) != 0)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
	*srq = h_of(d->srqn);
	return DAT_SUCCESS;
}

static void ms_srq_destroy(void *ctx, void *srq)
{
	zd_mlx5sim_srq_destroy(((struct zd_ms_be *)ctx)->nic, n_of(srq));
}

static uint32_t pow2_up(uint32_t v)
{
	uint32_t p = 1;

	while (p < v && p < (1u << 31))
		p <<= 1;
	return p;
}

static DAT_RETURN ms_qp_create(void *ctx, const struct zd_mlx5_qp_init *init, void **qp,
			       struct zd_mlx5_sq_desc *sq, struct zd_mlx5_rq_desc *rq,
			       uint32_t *max_inline)
{
	struct zd_ms_be *b = ctx;
	uint32_t sge = init->max_send_sge ? init->max_send_sge : 1;
	uint32_t inl_ds = init->max_inline ?
		(uint32_t)(sizeof(struct mlx5_wqe_inl_data_seg) + init->max_inline + 15) / 16 : 0;
	/* Largest WQE the data path may build: ctrl + raddr (UD: the datagram
	 * segment, 3 units) + the larger of its data segments and its inline
	 * data (an atomic's four segments take one block, which any SQ has). */
	uint32_t ds = (init->ud ? 4 : 2) + (sge > inl_ds ? sge : inl_ds);
	uint32_t bb = (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
	uint64_t sq_bb = (uint64_t)pow2_up(init->max_send_wr ? init->max_send_wr : 1) * bb;
	struct zd_mlx5sim_qp_attr a = {
		.pdn = n_of(init->pd),
		.send_cqn = n_of(init->send_cq),
		.recv_cqn = n_of(init->recv_cq),
		.srqn = n_of(init->srq),
		.rq_wqe_cnt = init->srq ? 0 : (init->max_recv_wr ? init->max_recv_wr : 1),
		.rq_max_sge = init->srq ? 0 : (init->max_recv_sge ? init->max_recv_sge : 1),
		.type = init->ud ? ZD_MLX5SIM_QPT_UD : ZD_MLX5SIM_QPT_RC,
	};
	uint32_t qpn;
	int rc;

	if (ds > ZD_MLX5_MAX_DS || sq_bb > ZD_MS_BE_MAX_BB || init->max_recv_wr > ZD_MS_BE_MAX_WR ||
	    init->max_recv_sge > ZD_MS_BE_MAX_SGE)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	a.sq_wqe_cnt = (uint32_t)sq_bb;
	rc = zd_mlx5sim_qp_create(b->nic, &a, sq, rq, &qpn);
	if (rc != 0)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	/* Receives may be posted before the connection (DAT): to INIT now,
	 * as verbs does; a UD QP on to RTS, with a Q_Key of its own. */
	if (zd_mlx5sim_qp_modify(b->nic, qpn, ZD_MLX5SIM_QPS_INIT) != 0 ||
	    (init->ud && zd_mlx5sim_qp_ud_ready(b->nic, qpn, ud_qkey()) != 0)) {
		zd_mlx5sim_qp_destroy(b->nic, qpn);
		return DAT_ERROR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
	}
	if (init->srq) {
		rq->buf = NULL;
		rq->wqe_cnt = 0;
	}
	*max_inline = init->max_inline;
	*qp = h_of(qpn);
	return DAT_SUCCESS;
}

static size_t ms_qp_blob(void *ctx, void *qp, void *blob, size_t max)
{
	struct zd_mlx5sim_nic *nic = ((struct zd_ms_be *)ctx)->nic;
	struct ms_ud_blob u = { 0 };

	if (max < sizeof(u) || zd_mlx5sim_qp_addr(nic, n_of(qp), &u.a) != 0)
		return 0;
	/* An RC QP's blob is its address; a UD QP's adds its Q_Key. */
	if (zd_mlx5sim_qp_ud_qkey(nic, n_of(qp), &u.qkey) != 0) {
		memcpy(blob, &u.a, sizeof(u.a));
		return sizeof(u.a);
	}
	memcpy(blob, &u, sizeof(u));
	return sizeof(u);
}

static DAT_RETURN ms_qp_connect(void *ctx, void *qp, const void *peer, size_t len)
{
	struct zd_ms_be *b = ctx;
	struct zd_mlx5sim_qp_addr a;
	int rc;

	/* The blob came over the network: the model checks what it names
	 * (magic, a live process, a sealed region of the stated size). */
	if (len != sizeof(a))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	memcpy(&a, peer, sizeof(a));
	rc = zd_mlx5sim_qp_connect(b->nic, n_of(qp), &a);
	if (rc == 0)
		return DAT_SUCCESS;
	zd_log_error("mlx5sim: QP %u cannot connect to QP %u of process %d: %s", n_of(qp), a.qpn,
		     (int)a.pid, strerror(-rc));
	if (rc == -EINVAL)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	if (rc == -ENOMEM || rc == -EMFILE || rc == -ENFILE)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	return DAT_ERROR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
}

static void ms_qp_to_error(void *ctx, void *qp)
{
	zd_mlx5sim_qp_modify(((struct zd_ms_be *)ctx)->nic, n_of(qp), ZD_MLX5SIM_QPS_ERR);
}

static void ms_qp_destroy(void *ctx, void *qp)
{
	zd_mlx5sim_qp_destroy(((struct zd_ms_be *)ctx)->nic, n_of(qp));
}

static DAT_RETURN ms_ah_create(void *ctx, const void *peer, size_t len, struct mlx5_wqe_av *av,
			       uint32_t *qpn, uint32_t *qkey, void **ah)
{
	struct ms_ud_blob u;
	int rc;

	/* The blob came over the network: the model checks what it names. */
	if (len != sizeof(u))
		return DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_MALFORMED);
	memcpy(&u, peer, sizeof(u));
	rc = zd_mlx5sim_ah_create(((struct zd_ms_be *)ctx)->nic, &u.a, av, ah);
	if (rc == -EINVAL)
		return DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_MALFORMED);
	if (rc != 0)
		return DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNREACHABLE);
	*qpn = u.a.qpn;
	*qkey = u.qkey;
	return DAT_SUCCESS;
}

static void ms_ah_destroy(void *ctx, void *ah)
{
	zd_mlx5sim_ah_destroy(((struct zd_ms_be *)ctx)->nic, ah);
}

static const struct zd_mlx5_backend zd_mlx5sim_backend = {
	.open = ms_open,
	.close = ms_close,
	.event_wait = ms_event_wait,
	.event_kick = ms_event_kick,
	.event_get = ms_event_get,
	.pd_alloc = ms_pd_alloc,
	.pd_free = ms_pd_free,
	.mr_reg = ms_mr_reg,
	.mr_dereg = ms_mr_dereg,
	.cq_create = ms_cq_create,
	.cq_destroy = ms_cq_destroy,
	.srq_create = ms_srq_create,
	.srq_destroy = ms_srq_destroy,
	.qp_create = ms_qp_create,
	.qp_blob = ms_qp_blob,
	.qp_connect = ms_qp_connect,
	.qp_to_error = ms_qp_to_error,
	.qp_destroy = ms_qp_destroy,
	.ah_create = ms_ah_create,
	.ah_destroy = ms_ah_destroy,
};

/* Processes of this host reach any local address: bind the CM to all. */
ZD_MLX5_BACKEND_REGISTER(zd_mlx5sim_backend, "mlx5sim", "zdapl-mlx5sim", 1, 1)
