/*
 * The verbs backend of the mlx5 device: a ConnectX through libibverbs,
 * its queues handed to the data path with mlx5dv_init_obj.
 *
 * ia_params: "mlx5_<n> <port> [gid=<index>] [ifname | IPv4]"
 *  - port: the HCA port (1-based);
 *  - gid=<index>: GID table entry for RoCE (default 0; InfiniBand ports
 *    address by LID and use the GID only if given);
 *  - ifname/IPv4: the IA address zdapl's TCP connection manager listens
 *    on (default: the host's first non-loopback IPv4 address).
 *
 * Connecting: the peer blob carries LID, GID, QPN, PSN and MTU;
 * qp_connect moves the QP RESET -> INIT -> RTR -> RTS, with a GRH when the
 * port is Ethernet (RoCE) or a GID was asked for.
 *
 * Unreliable datagrams: a UD QP goes to RTS at creation with a random
 * Q_Key; its blob carries LID, GID, QPN and Q_Key, from which a peer's
 * ah_create makes an ibv_ah (on a PD of the context's own: an mlx5 AV is
 * copied into each WQE, so no QP's PD matters) and takes its address
 * vector with mlx5dv_init_obj(MLX5DV_OBJ_AH).  A datagram carries at most
 * the port's active MTU.
 *
 * Fork safety: ibv_fork_init before the first registration, so a child
 * never shares registered pages (queue buffers included) with us.
 *
 * Queue memory: every PD has a parent domain whose allocator is the glue's
 * hook (zd_mlx5_qmem.h), and QPs and SRQs are made on it, CQs on the
 * context's own (ibv_create_cq_ex with IBV_CQ_INIT_ATTR_MASK_PD): rdma-core's
 * mlx5 provider then takes their buffers and doorbell records from the
 * registered pool.  Where ibv_alloc_parent_domain or a CQ on a parent
 * domain is refused (an older rdma-core, another provider), objects are
 * made on the plain PD and rdma-core allocates as usual.
 *
 * This file cannot run here (no RDMA device): it must build, and
 * dat_ia_open must fail with one line when the device does not exist.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>          /* before dat_ib_extensions.h */
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>
#include <infiniband/mlx5dv.h>

#include "core/zd_ia.h"
#include "core/zd_netaddr.h"
#include "hw/mlx5/zd_mlx5.h"
#include "hw/mlx5/zd_mlx5_qmem.h"

#define ZD_VERBS_BLOB_MAGIC 0x7a647631u   /* "zdv1" */
#define ZD_VERBS_UD_MAGIC   0x7a647531u   /* "zdu1" */

struct zd_verbs_ctx {
	struct ibv_context *ctx;
	struct ibv_comp_channel *chan;
	int kick_fd;                  /* eventfd: event_kick */
	uint8_t port;
	uint8_t link_layer;           /* IBV_LINK_LAYER_* */
	enum ibv_mtu mtu;
	uint16_t lid;
	int gid_index;                /* -1: LID addressing */
	union ibv_gid gid;
	struct ibv_pd *ah_pd;         /* UD address handles */
	struct ibv_pd *cq_parent;     /* parent domain of ah_pd for CQs, or NULL */
};

/* A PD, and the parent domain over it that queues are made on (NULL: the
 * provider has none; they are made on the PD). */
struct zd_verbs_pd {
	struct ibv_pd *pd;
	struct ibv_pd *parent;
};

/* What queues of @pd are made on. */
static struct ibv_pd *queue_pd(const struct zd_verbs_pd *p)
{
	return p->parent ? p->parent : p->pd;
}

struct zd_verbs_qp {
	struct ibv_qp *qp;
	uint32_t psn;
	uint32_t max_rd_atomic;
	bool ud;
	uint32_t qkey;                /* UD */
};

/* Wire form of a QP's address (all fields little-endian on the wire). */
struct zd_verbs_blob {
	uint32_t magic;
	uint32_t qpn;
	uint32_t psn;
	uint16_t lid;
	uint8_t link_layer;
	uint8_t mtu;
	uint8_t has_gid;
	uint8_t pad[3];
	uint8_t gid[16];
};

/* Wire form of a UD QP's address (little-endian): what ibv_create_ah
 * needs of the peer's port, its QPN and Q_Key. */
struct zd_verbs_ud_blob {
	uint32_t magic;
	uint32_t qpn;
	uint32_t qkey;
	uint16_t lid;
	uint8_t link_layer;
	uint8_t has_gid;
	uint8_t gid[16];
};

static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
	char *end;

	errno = 0;
	*out = strtoul(s, &end, 10);
	return (errno || end == s || *end || *out > max) ? -1 : 0;
}

/* A parent domain over @pd whose queue memory comes from the glue's hook,
 * or NULL when the provider refuses one (the fallback: plain PD). */
static struct ibv_pd *parent_domain(struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct ibv_parent_domain_init_attr a = {
		.pd = pd,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS,
		.alloc = zd_mlx5_qmem_alloc,
		.free = zd_mlx5_qmem_free,
	};

	return ibv_alloc_parent_domain(ctx, &a);
}

static DAT_RETURN verbs_open(const struct zd_ia_params *p, void **out, struct zd_mlx5_caps *caps,
			     struct sockaddr_in *addr)
{
	struct ibv_device **list;
	struct ibv_device *found = NULL;
	struct zd_verbs_ctx *v;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	const char *addr_spec = NULL;
	unsigned long port, gidx = 0;
	bool want_gid = false;
	DAT_RETURN ret;
	int num = 0;

	if (p->nargs < 1 || parse_uint(p->args[0], 255, &port) != 0 || port == 0) {
		zd_log_error("ia_params for %s: expected \"%s <port> [gid=<index>] [ifname|IPv4]\"",
			     p->device, p->device);
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
	}
	for (int i = 1; i < p->nargs; i++) {
		if (strncmp(p->args[i], "gid=", 4) == 0) {
			if (parse_uint(p->args[i] + 4, 0xffff, &gidx) != 0) {
				zd_log_error("ia_params for %s: bad \"%s\"", p->device, p->args[i]);
				return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
			}
			want_gid = true;
		} else if (!addr_spec) {
			addr_spec = p->args[i];
		} else {
			zd_log_error("ia_params for %s: unexpected \"%s\"", p->device, p->args[i]);
			return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
		}
	}

	list = ibv_get_device_list(&num);
	for (int i = 0; list && i < num; i++)
		if (strcmp(ibv_get_device_name(list[i]), p->device) == 0)
			found = list[i];
	if (!found || !mlx5dv_is_supported(found)) {
		zd_log_error("%s: no such mlx5 RDMA device on this host", p->device);
		if (list)
			ibv_free_device_list(list);
		return DAT_ERROR(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED);
	}
	/* Before any registration: children get no registered pages. */
	ibv_fork_init();
	v = calloc(1, sizeof(*v));
	if (!v) {
		ibv_free_device_list(list);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	v->kick_fd = -1;
	v->ctx = ibv_open_device(found);
	ibv_free_device_list(list);
	if (!v->ctx) {
		zd_log_error("%s: cannot open the device: %s", p->device, strerror(errno));
		goto err;
	}
	if (ibv_query_device(v->ctx, &da) != 0 || ibv_query_port(v->ctx, (uint8_t)port, &pa) != 0) {
		zd_log_error("%s: port %lu cannot be queried", p->device, port);
		goto err;
	}
	if (pa.state != IBV_PORT_ACTIVE)
		zd_log_error("%s: port %lu is not active (connections will fail)", p->device, port);
	v->port = (uint8_t)port;
	v->link_layer = pa.link_layer;
	v->mtu = pa.active_mtu;
	v->lid = pa.lid;
	v->gid_index = -1;
	if (want_gid || pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
		v->gid_index = (int)gidx;
		if (ibv_query_gid(v->ctx, v->port, v->gid_index, &v->gid) != 0) {
			zd_log_error("%s: port %lu has no GID %lu", p->device, port, gidx);
			goto err;
		}
	}
	v->chan = ibv_create_comp_channel(v->ctx);
	if (!v->chan ||
	    fcntl(v->chan->fd, F_SETFL, fcntl(v->chan->fd, F_GETFL) | O_NONBLOCK) != 0) {
		zd_log_error("%s: no completion channel: %s", p->device, strerror(errno));
		goto err;
	}
	v->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (v->kick_fd < 0) {
		zd_log_error("%s: eventfd: %s", p->device, strerror(errno));
		goto err;
	}
	v->ah_pd = ibv_alloc_pd(v->ctx);
	if (!v->ah_pd) {
		zd_log_error("%s: no protection domain: %s", p->device, strerror(errno));
		goto err;
	}
	v->cq_parent = parent_domain(v->ctx, v->ah_pd);
	ret = zd_netaddr_resolve(addr_spec, addr);
	if (ret != DAT_SUCCESS)
		goto err_addr;

	memset(caps, 0, sizeof(*caps));
	caps->max_qp = (uint32_t)da.max_qp;
	caps->max_qp_wr = (uint32_t)da.max_qp_wr;
	/* RDMA reads share the send SGE limit in DAT: take the smaller. */
	caps->max_sge = (uint32_t)ZD_MIN(da.max_sge, da.max_sge_rd ? da.max_sge_rd : da.max_sge);
	caps->max_cq = (uint32_t)da.max_cq;
	caps->max_cqe = (uint32_t)da.max_cqe;
	caps->max_mr = (uint32_t)da.max_mr;
	caps->max_mr_size = da.max_mr_size;
	caps->max_pd = (uint32_t)da.max_pd;
	caps->max_srq = (uint32_t)da.max_srq;
	caps->max_srq_wr = (uint32_t)da.max_srq_wr;
	caps->max_srq_sge = (uint32_t)da.max_srq_sge;
	caps->max_rd_atomic = (uint32_t)da.max_qp_rd_atom;
	caps->max_inline = ZD_MLX5_INLINE_DEF;
	caps->max_msg_size = pa.max_msg_sz;
	/* enum ibv_mtu: 1 is 256 bytes, 5 is 4096 */
	caps->max_ud_payload = 128u << pa.active_mtu;
	/* The byte order of an atomic's old value (PRM: the HCA cap
	 * atomic_req_8B_endianness_mode, 0 big-endian, 1 host order).  The
	 * kernel (mlx5_core) sets host order when the HCA supports it, and
	 * mlx5_ib then reports IBV_ATOMIC_HCA; otherwise IBV_ATOMIC_NONE --
	 * an HCA without atomics (the WQE then fails), or one left in
	 * big-endian mode, whose values the data path swaps.  (DevX's
	 * QUERY_HCA_CAP would read the mode itself, as UCX does; the answer
	 * here is the same without a DevX context.) */
	caps->atomic_reply_be = da.atomic_cap == IBV_ATOMIC_NONE;
	*out = v;
	return DAT_SUCCESS;
err_addr:
	if (v->cq_parent)
		ibv_dealloc_pd(v->cq_parent);
	ibv_dealloc_pd(v->ah_pd);
	close(v->kick_fd);
	if (v->chan)
		ibv_destroy_comp_channel(v->chan);
	ibv_close_device(v->ctx);
	free(v);
	return ret;
err:
	if (v->cq_parent)
		ibv_dealloc_pd(v->cq_parent);
	if (v->ah_pd)
		ibv_dealloc_pd(v->ah_pd);
	if (v->kick_fd >= 0)
		close(v->kick_fd);
	if (v->chan)
		ibv_destroy_comp_channel(v->chan);
	if (v->ctx)
		ibv_close_device(v->ctx);
	free(v);
	return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_DEVICE);
}

static void verbs_close(void *ctx)
{
	struct zd_verbs_ctx *v = ctx;

	if (v->cq_parent)
		ibv_dealloc_pd(v->cq_parent);
	ibv_dealloc_pd(v->ah_pd);
	close(v->kick_fd);
	ibv_destroy_comp_channel(v->chan);
	ibv_close_device(v->ctx);
	free(v);
}

static int verbs_event_wait(void *ctx, int timeout_ms)
{
	struct zd_verbs_ctx *v = ctx;
	struct pollfd pfd[2] = {
		{ .fd = v->chan->fd, .events = POLLIN },
		{ .fd = v->kick_fd, .events = POLLIN },
	};
	int rc = poll(pfd, 2, timeout_ms);

	if (rc < 0)
		return -errno;
	return pfd[0].revents ? 1 : 0;
}

static void verbs_event_kick(void *ctx)
{
	uint64_t one = 1;

	if (write(((struct zd_verbs_ctx *)ctx)->kick_fd, &one, sizeof(one)) != sizeof(one))
		zd_log_error("mlx5: cannot wake the completion event thread");
}

static int verbs_event_get(void *ctx, void **cq_ctx)
{
	struct zd_verbs_ctx *v = ctx;
	struct ibv_cq *cq;
	void *c;

	if (ibv_get_cq_event(v->chan, &cq, &c) != 0)
		return errno == EAGAIN ? 0 : -errno;
	ibv_ack_cq_events(cq, 1);
	*cq_ctx = c;
	return 1;
}

static DAT_RETURN verbs_pd_alloc(void *ctx, void **out)
{
	struct zd_verbs_ctx *v = ctx;
	struct zd_verbs_pd *p = calloc(1, sizeof(*p));

	if (!p)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	p->pd = ibv_alloc_pd(v->ctx);
	if (!p->pd) {
		free(p);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_PROTECTION_DOMAIN);
	}
	p->parent = parent_domain(v->ctx, p->pd);
	*out = p;
	return DAT_SUCCESS;
}

static void verbs_pd_free(void *ctx, void *pd)
{
	struct zd_verbs_pd *p = pd;

	if (p->parent)
		ibv_dealloc_pd(p->parent);
	ibv_dealloc_pd(p->pd);
	free(p);
}

static DAT_RETURN verbs_mr_reg(void *ctx, void *pd, uint64_t addr, uint64_t len,
			       DAT_MEM_PRIV_FLAGS priv, void **mr, uint32_t *lkey, uint32_t *rkey)
{
	int access = 0;
	struct ibv_mr *m;

	if (priv & DAT_MEM_PRIV_LOCAL_WRITE_FLAG)
		access |= IBV_ACCESS_LOCAL_WRITE;
	if (priv & DAT_MEM_PRIV_REMOTE_READ_FLAG)
		access |= IBV_ACCESS_REMOTE_READ;
	/* verbs requires local write with remote write or atomic */
	if (priv & DAT_MEM_PRIV_REMOTE_WRITE_FLAG)
		access |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
	if (priv & DAT_IB_MEM_PRIV_REMOTE_ATOMIC)
		access |= IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
	m = ibv_reg_mr(((struct zd_verbs_pd *)pd)->pd, (void *)(uintptr_t)addr, len, access);
	if (!m)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY_REGION);
	*mr = m;
	*lkey = m->lkey;
	*rkey = m->rkey;
	return DAT_SUCCESS;
}

static void verbs_mr_dereg(void *ctx, void *mr)
{
	ibv_dereg_mr(mr);
}

static DAT_RETURN verbs_cq_create(void *ctx, uint32_t min_cqe, void *cq_ctx, void **out,
				  struct zd_mlx5_cq_desc *d)
{
	struct zd_verbs_ctx *v = ctx;
	int cqe = (int)ZD_MIN(min_cqe, (uint32_t)INT32_MAX);
	struct ibv_cq *cq = NULL;
	struct mlx5dv_cq dv;
	struct mlx5dv_obj obj;

	/* On the parent domain: the CQE buffer and doorbell record come from
	 * the hook; else (refused) as rdma-core allocates them. */
	if (v->cq_parent) {
		struct ibv_cq_init_attr_ex a = {
			.cqe = (uint32_t)cqe, .cq_context = cq_ctx, .channel = v->chan,
			.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = v->cq_parent,
		};
		struct ibv_cq_ex *cx = ibv_create_cq_ex(v->ctx, &a);

		cq = cx ? ibv_cq_ex_to_cq(cx) : NULL;
	}
	if (!cq)
		cq = ibv_create_cq(v->ctx, cqe, cq_ctx, v->chan, 0);
	obj.cq.in = cq;
	obj.cq.out = &dv;
	if (!cq)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEVD);
	if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ) != 0) {
		ibv_destroy_cq(cq);
		return DAT_ERROR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
	}
	d->buf = dv.buf;
	d->cqe_cnt = dv.cqe_cnt;
	d->cqe_size = dv.cqe_size;
	d->dbrec = (volatile __be32 *)dv.dbrec;
	d->uar = dv.cq_uar;
	d->cqn = dv.cqn;
	*out = cq;
	return DAT_SUCCESS;
}

static void verbs_cq_destroy(void *ctx, void *cq)
{
	ibv_destroy_cq(cq);
}

static DAT_RETURN verbs_srq_create(void *ctx, void *pd, uint32_t max_wr, uint32_t max_sge,
				   void **out, struct zd_mlx5_srq_desc *d)
{
	struct ibv_srq_init_attr a = { .attr = { .max_wr = max_wr, .max_sge = max_sge } };
	struct ibv_srq *srq = ibv_create_srq(queue_pd(pd), &a);
	struct mlx5dv_srq dv;
	struct mlx5dv_obj obj = { .srq = { .in = srq, .out = &dv } };

	if (!srq)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
	dv.comp_mask = MLX5DV_SRQ_MASK_SRQN;
	if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_SRQ) != 0) {
		ibv_destroy_srq(srq);
		return DAT_ERROR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
	}
	d->buf = dv.buf;
	d->wqe_cnt = dv.tail + 1;      /* as created: 0 -> 1 -> ... -> tail */
	d->stride = dv.stride;
	d->dbrec = (volatile __be32 *)dv.dbrec;
	d->head = dv.head;
	d->tail = dv.tail;
	d->srqn = dv.srqn;
	*out = srq;
	return DAT_SUCCESS;
}

static void verbs_srq_destroy(void *ctx, void *srq)
{
	ibv_destroy_srq(srq);
}

/* RESET -> INIT: receives may be posted before the connection exists
 * (DAT allows it; verbs takes them from INIT on).  The QP takes remote
 * atomics (the IB extensions; each MR still says whether it does) unless
 * the HCA has none (mlx5_ib then refuses the access flag): without. */
static int qp_to_init(struct zd_verbs_ctx *v, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = v->port,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
	};
	const int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;

	if (ibv_modify_qp(qp, &a, mask) == 0)
		return 0;
	a.qp_access_flags &= ~IBV_ACCESS_REMOTE_ATOMIC;
	return ibv_modify_qp(qp, &a, mask);
}

/* A UD QP needs no peer: RESET -> INIT (its Q_Key) -> RTR -> RTS. */
static int ud_to_rts(struct zd_verbs_ctx *v, struct zd_verbs_qp *q)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = v->port, .qkey = q->qkey,
	};

	if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_QKEY) != 0)
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE) != 0)
		return -1;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = q->psn;
	return ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static DAT_RETURN verbs_qp_create(void *ctx, const struct zd_mlx5_qp_init *init, void **out,
				  struct zd_mlx5_sq_desc *sq, struct zd_mlx5_rq_desc *rq,
				  uint32_t *max_inline)
{
	struct ibv_qp_init_attr a = {
		.send_cq = init->send_cq, .recv_cq = init->recv_cq, .srq = init->srq,
		.cap = {
			.max_send_wr = init->max_send_wr, .max_recv_wr = init->max_recv_wr,
			.max_send_sge = init->max_send_sge, .max_recv_sge = init->max_recv_sge,
			.max_inline_data = init->max_inline,
		},
		.qp_type = init->ud ? IBV_QPT_UD : IBV_QPT_RC,
	};
	struct zd_verbs_qp *q = calloc(1, sizeof(*q));
	struct mlx5dv_qp dv;
	struct mlx5dv_obj obj;

	if (!q)
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	q->qp = ibv_create_qp(queue_pd(init->pd), &a);
	if (!q->qp) {
		free(q);
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	}
	memset(&dv, 0, sizeof(dv));
	obj.qp.in = q->qp;
	obj.qp.out = &dv;
	if (getrandom(&q->psn, sizeof(q->psn), 0) != sizeof(q->psn))
		q->psn = q->qp->qp_num * 2654435761u;
	q->psn &= 0xffffff;
	q->ud = init->ud;
	/* A random Q_Key: datagrams meant for an earlier QP of this number
	 * (a stale address handle) do not get in; never a controlled one. */
	if (getrandom(&q->qkey, sizeof(q->qkey), 0) != sizeof(q->qkey))
		q->qkey = q->psn * 2246822519u;
	q->qkey &= 0x7fffffff;
	if ((q->ud ? ud_to_rts(ctx, q) : qp_to_init(ctx, q->qp)) != 0 ||
	    mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP) != 0) {
		ibv_destroy_qp(q->qp);
		free(q);
		return DAT_ERROR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
	}
	sq->buf = dv.sq.buf;
	sq->wqe_cnt = dv.sq.wqe_cnt;
	sq->stride = dv.sq.stride;
	sq->dbrec = (volatile __be32 *)&dv.dbrec[MLX5_SND_DBR];
	sq->bf_reg = dv.bf.reg;
	sq->bf_size = dv.bf.size;
	sq->qpn = q->qp->qp_num;
	rq->buf = init->srq ? NULL : dv.rq.buf;
	rq->wqe_cnt = init->srq ? 0 : dv.rq.wqe_cnt;
	rq->stride = dv.rq.stride;
	rq->dbrec = (volatile __be32 *)&dv.dbrec[MLX5_RCV_DBR];
	*max_inline = a.cap.max_inline_data;
	q->max_rd_atomic = init->max_rd_atomic;
	*out = q;
	return DAT_SUCCESS;
}

static size_t verbs_ud_blob(struct zd_verbs_ctx *v, struct zd_verbs_qp *q, void *blob,
			    size_t max)
{
	struct zd_verbs_ud_blob b = {
		.magic = htole32(ZD_VERBS_UD_MAGIC), .qpn = htole32(q->qp->qp_num),
		.qkey = htole32(q->qkey), .lid = htole16(v->lid), .link_layer = v->link_layer,
		.has_gid = v->gid_index >= 0,
	};

	if (max < sizeof(b))
		return 0;
	memcpy(b.gid, v->gid.raw, sizeof(b.gid));
	memcpy(blob, &b, sizeof(b));
	return sizeof(b);
}

static size_t verbs_qp_blob(void *ctx, void *qp, void *blob, size_t max)
{
	struct zd_verbs_ctx *v = ctx;
	struct zd_verbs_qp *q = qp;
	struct zd_verbs_blob b = {
		.magic = htole32(ZD_VERBS_BLOB_MAGIC), .qpn = htole32(q->qp->qp_num),
		.psn = htole32(q->psn), .lid = htole16(v->lid), .link_layer = v->link_layer,
		.mtu = (uint8_t)v->mtu, .has_gid = v->gid_index >= 0,
	};

	if (q->ud)
		return verbs_ud_blob(v, q, blob, max);
	if (max < sizeof(b))
		return 0;
	memcpy(b.gid, v->gid.raw, sizeof(b.gid));
	memcpy(blob, &b, sizeof(b));
	return sizeof(b);
}

static DAT_RETURN verbs_qp_connect(void *ctx, void *qp, const void *peer, size_t len)
{
	struct zd_verbs_ctx *v = ctx;
	struct zd_verbs_qp *q = qp;
	struct zd_verbs_blob b;
	struct ibv_qp_attr a;
	uint8_t rd = (uint8_t)ZD_MIN(q->max_rd_atomic, 255u);

	if (len != sizeof(b))
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	memcpy(&b, peer, sizeof(b));
	if (le32toh(b.magic) != ZD_VERBS_BLOB_MAGIC || b.link_layer != v->link_layer ||
	    (v->link_layer == IBV_LINK_LAYER_ETHERNET && !b.has_gid) ||
	    b.mtu < IBV_MTU_256 || b.mtu > IBV_MTU_4096)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);

	/* INIT since qp_create */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = ZD_MIN(v->mtu, (enum ibv_mtu)b.mtu);
	a.dest_qp_num = le32toh(b.qpn) & 0xffffff;
	a.rq_psn = le32toh(b.psn) & 0xffffff;
	a.max_dest_rd_atomic = rd;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = v->port;
	a.ah_attr.dlid = le16toh(b.lid);
	if (b.has_gid && v->gid_index >= 0) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, b.gid, sizeof(b.gid));
		a.ah_attr.grh.sgid_index = (uint8_t)v->gid_index;
		a.ah_attr.grh.hop_limit = 64;
	}
	if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
		goto err;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;   /* infinite: DAT has no receiver-not-ready retry limit */
	a.sq_psn = q->psn;
	a.max_rd_atomic = rd;
	if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0)
		goto err;
	return DAT_SUCCESS;
err:
	zd_log_error("mlx5: QP %u cannot connect to QP %u: %s", q->qp->qp_num,
		     le32toh(b.qpn), strerror(errno));
	return DAT_ERROR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
}

static void verbs_qp_to_error(void *ctx, void *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	ibv_modify_qp(((struct zd_verbs_qp *)qp)->qp, &a, IBV_QP_STATE);
}

static void verbs_qp_destroy(void *ctx, void *qp)
{
	struct zd_verbs_qp *q = qp;

	ibv_destroy_qp(q->qp);
	free(q);
}

static DAT_RETURN verbs_ah_create(void *ctx, const void *peer, size_t len,
				  struct mlx5_wqe_av *av, uint32_t *qpn, uint32_t *qkey, void **out)
{
	struct zd_verbs_ctx *v = ctx;
	struct zd_verbs_ud_blob b;
	struct ibv_ah_attr a;
	struct ibv_ah *ah;
	struct mlx5dv_ah dv;
	struct mlx5dv_obj obj;

	if (len != sizeof(b))
		return DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_MALFORMED);
	memcpy(&b, peer, sizeof(b));
	if (le32toh(b.magic) != ZD_VERBS_UD_MAGIC || b.link_layer != v->link_layer ||
	    (v->link_layer == IBV_LINK_LAYER_ETHERNET && !b.has_gid))
		return DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_MALFORMED);
	/* As verbs_qp_connect addresses the peer. */
	memset(&a, 0, sizeof(a));
	a.port_num = v->port;
	a.dlid = le16toh(b.lid);
	if (b.has_gid && v->gid_index >= 0) {
		a.is_global = 1;
		memcpy(a.grh.dgid.raw, b.gid, sizeof(b.gid));
		a.grh.sgid_index = (uint8_t)v->gid_index;
		a.grh.hop_limit = 64;
	}
	ah = ibv_create_ah(v->ah_pd, &a);
	if (!ah) {
		zd_log_error("mlx5: no address handle for QP %u: %s", le32toh(b.qpn),
			     strerror(errno));
		return DAT_ERROR(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNREACHABLE);
	}
	memset(&dv, 0, sizeof(dv));
	obj.ah.in = ah;
	obj.ah.out = &dv;
	if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH) != 0 || !dv.av) {
		ibv_destroy_ah(ah);
		return DAT_ERROR(DAT_INTERNAL_ERROR, DAT_NO_SUBTYPE);
	}
	*av = *dv.av;
	*qpn = le32toh(b.qpn) & 0xffffff;
	*qkey = le32toh(b.qkey);
	*out = ah;
	return DAT_SUCCESS;
}

static void verbs_ah_destroy(void *ctx, void *ah)
{
	ibv_destroy_ah(ah);
}

static const struct zd_mlx5_backend zd_mlx5_verbs = {
	.open = verbs_open,
	.close = verbs_close,
	.event_wait = verbs_event_wait,
	.event_kick = verbs_event_kick,
	.event_get = verbs_event_get,
	.pd_alloc = verbs_pd_alloc,
	.pd_free = verbs_pd_free,
	.mr_reg = verbs_mr_reg,
	.mr_dereg = verbs_mr_dereg,
	.cq_create = verbs_cq_create,
	.cq_destroy = verbs_cq_destroy,
	.srq_create = verbs_srq_create,
	.srq_destroy = verbs_srq_destroy,
	.qp_create = verbs_qp_create,
	.qp_blob = verbs_qp_blob,
	.qp_connect = verbs_qp_connect,
	.qp_to_error = verbs_qp_to_error,
	.qp_destroy = verbs_qp_destroy,
	.ah_create = verbs_ah_create,
	.ah_destroy = verbs_ah_destroy,
};

ZD_MLX5_BACKEND_REGISTER(zd_mlx5_verbs, "mlx5_*", "zdapl-mlx5", 0, 0)
