/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * zd_perf over DAT: IA, PZ, EVDs, the registered buffer, EP, PSP/connect
 * with the test parameters in private data, the control channel (8-byte
 * RDMA writes into the peer's control lines) and teardown; the IB extension
 * posts and completions of zd_write_imm_lat and zd_atomic_lat.
 *
 * Every wait outside the measured loops uses dat_evd_wait with a timeout;
 * inside them the loops poll with dat_evd_dequeue and tick a waiter.
 */
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "zd_perf.h"

#define CTRL_COOKIE   (UINT64_C(1) << 63)   /* request cookies of control writes */
#define EVD_SLACK     64                    /* control writes, flushes */
#define SERVER_WAIT_S 60                    /* a server's default wait for its client */
#define HUGE_2M       (2u << 20)
/* DAT_IB_DTO_EVENT as the DAT_EVENT_NUMBER an event carries */
#define IB_DTO_EVENT  ((DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT)

static uint64_t usec_now(void)
{
	return (uint64_t)((double)zd_perf_ticks() / zd_perf_ticks_per_usec);
}

static DAT_TIMEOUT usec_left(uint64_t deadline_us)
{
	uint64_t now = usec_now();

	return now >= deadline_us ? 0 : (DAT_TIMEOUT)(deadline_us - now);
}

static const char *event_name(DAT_EVENT_NUMBER n, char *buf, size_t len)
{
	switch (n) {
	case DAT_CONNECTION_EVENT_ESTABLISHED: return "ESTABLISHED";
	case DAT_CONNECTION_EVENT_PEER_REJECTED: return "PEER_REJECTED";
	case DAT_CONNECTION_EVENT_NON_PEER_REJECTED: return "NON_PEER_REJECTED";
	case DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR: return "ACCEPT_COMPLETION_ERROR";
	case DAT_CONNECTION_EVENT_DISCONNECTED: return "DISCONNECTED";
	case DAT_CONNECTION_EVENT_BROKEN: return "BROKEN";
	case DAT_CONNECTION_EVENT_TIMED_OUT: return "TIMED_OUT";
	case DAT_CONNECTION_EVENT_UNREACHABLE: return "UNREACHABLE";
	case DAT_CONNECTION_REQUEST_EVENT: return "CONNECTION_REQUEST";
	case DAT_DTO_COMPLETION_EVENT: return "DTO_COMPLETION";
	case IB_DTO_EVENT: return "IB_DTO_EVENT";
	default:
		snprintf(buf, len, "event %#x", (unsigned)n);
		return buf;
	}
}

/* One event within the deadline, or exit with `what` in the message. */
static void wait_event(DAT_EVD_HANDLE evd, uint64_t deadline_us, DAT_EVENT *ev,
		       const char *what, unsigned limit_s)
{
	DAT_COUNT nmore;
	DAT_RETURN ret = dat_evd_wait(evd, usec_left(deadline_us), 1, ev, &nmore);

	if (DAT_GET_TYPE(ret) == DAT_TIMEOUT_EXPIRED)
		zd_perf_die("timed out after %u s waiting for %s", limit_s, what);
	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_evd_wait");
}

/* ---- the wire -------------------------------------------------------------- */

static void wire_encode(const struct zd_perf_conn *c, struct zd_perf_wire *w)
{
	const struct zd_perf_opts *o = c->o;

	memset(w, 0, sizeof(*w));
	w->magic = htole32(ZD_PERF_WIRE_MAGIC);
	w->version = ZD_PERF_WIRE_VERSION;
	w->test = (uint8_t)(o->verb << 1 | o->kind);
	w->flags = (o->all_sizes ? ZD_PERF_WIRE_ALL : 0) |
		   (o->duration_s ? ZD_PERF_WIRE_DURATION : 0) |
		   (o->atomic == ZD_PERF_CMP_AND_SWAP ? ZD_PERF_WIRE_CMP_AND_SWAP : 0);
	w->size = htole32(o->all_sizes ? o->max_size : o->size);
	w->duration_s = htole32(o->duration_s);
	w->tx_depth = htole32(o->tx_depth);
	w->rx_depth = htole32(o->verb == ZD_PERF_EAGER ? o->slots : o->rx_depth);
	w->iters = htole64(o->iters);
	w->addr = htole64((uint64_t)(uintptr_t)c->buf);
	w->rkey = htole32((uint32_t)c->rkey);
	w->buf_len_kib = htole32((uint32_t)(c->buf_len / 1024));
}

/* false if `p` is not a zd_perf peer of the same version. */
static bool wire_decode(const void *p, DAT_COUNT len, struct zd_perf_wire *w)
{
	if (!p || len < (DAT_COUNT)sizeof(*w))
		return false;
	memcpy(w, p, sizeof(*w));
	w->magic = le32toh(w->magic);
	w->size = le32toh(w->size);
	w->duration_s = le32toh(w->duration_s);
	w->tx_depth = le32toh(w->tx_depth);
	w->rx_depth = le32toh(w->rx_depth);
	w->iters = le64toh(w->iters);
	w->addr = le64toh(w->addr);
	w->rkey = le32toh(w->rkey);
	w->buf_len_kib = le32toh(w->buf_len_kib);
	return w->magic == ZD_PERF_WIRE_MAGIC && w->version == ZD_PERF_WIRE_VERSION &&
	       (w->test >> 1) <= ZD_PERF_VERB_LAST;
}

static void adopt_peer(struct zd_perf_conn *c, const struct zd_perf_wire *w)
{
	uint64_t len = (uint64_t)w->buf_len_kib * 1024;

	if (len < ZD_PERF_CTRL_BYTES + 2 || !w->addr)
		zd_perf_die("peer sent a bad buffer description");
	c->peer = *w;
	c->peer_addr = w->addr;
	c->peer_rkey = (DAT_RMR_CONTEXT)w->rkey;
	c->peer_area_len = (len - ZD_PERF_CTRL_BYTES) / 2;
	c->peer_ctrl = w->addr + len - ZD_PERF_CTRL_BYTES;
}

/* ---- memory ---------------------------------------------------------------- */

/* libdat2 dlopens providers RTLD_GLOBAL, so after dat_ia_open a
 * provider's exported pool is visible without linking to it. */
bool zd_perf_pool_find(struct zd_perf_pool *pool)
{
	pool->alloc = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "zdapl_mem_alloc");
	pool->alloc_aligned = (void *(*)(size_t, size_t))
		dlsym(RTLD_DEFAULT, "zdapl_mem_alloc_aligned");
	pool->free = (void (*)(void *))dlsym(RTLD_DEFAULT, "zdapl_mem_free");
	return (pool->alloc || pool->alloc_aligned) && pool->free;
}

void *zd_perf_pool_alloc(const struct zd_perf_pool *pool, uint64_t len)
{
	/* zdapl_mem_alloc aligns to the page from a page up. */
	return pool->alloc_aligned ? pool->alloc_aligned(len, 4096) : pool->alloc(len);
}

static void alloc_buffer(struct zd_perf_conn *c, uint64_t max_size)
{
	struct zd_perf_opts *o = (struct zd_perf_opts *)c->o;
	struct zd_perf_pool pool;
	enum zd_perf_mem mem = o->mem;     /* malloc unless --mem says otherwise */
	void *p = NULL;

	c->area_len = (max_size + 4095) & ~UINT64_C(4095);
	c->buf_len = 2 * c->area_len + ZD_PERF_CTRL_BYTES;

	switch (mem) {
	case ZD_PERF_MEM_POOL:
		if (!zd_perf_pool_find(&pool))
			zd_perf_die("--mem pool: provider %s exports no zdapl_mem_alloc "
				    "(not zdapl?); use --mem malloc", o->ia_name);
		p = zd_perf_pool_alloc(&pool, c->buf_len);
		if (!p)
			zd_perf_die("zdapl_mem_alloc(%" PRIu64 ") failed", c->buf_len);
		c->mem_free = pool.free;
		c->mem_desc = "pool (zdapl_mem_alloc)";
		break;
	case ZD_PERF_MEM_HUGEPAGE:
		c->buf_len = (c->buf_len + HUGE_2M - 1) & ~(uint64_t)(HUGE_2M - 1);
		p = mmap(NULL, c->buf_len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
		if (p == MAP_FAILED)
			zd_perf_die("--mem hugepage: mmap(MAP_HUGETLB, %" PRIu64 " bytes) "
				    "failed: %s (reserve 2 MiB pages: sysctl vm.nr_hugepages=N)",
				    c->buf_len, strerror(errno));
		c->mem_desc = "hugepage (2 MiB MAP_HUGETLB)";
		break;
	default:
		if (posix_memalign(&p, 4096, c->buf_len) != 0)
			zd_perf_die("out of memory for %" PRIu64 " bytes", c->buf_len);
		c->mem_desc = "malloc (page-aligned posix_memalign)";
		break;
	}
	c->mem_used = mem;
	c->buf = p;
	memset(c->buf, 0, c->buf_len);          /* fault every page in before timing */
	c->ctrl = (struct zd_perf_ctrl *)(c->buf + 2 * c->area_len);

	/* zd_atomic_lat: the peer's atomics need the extension's right. */
	bool atomic = o->verb == ZD_PERF_ATOMIC;
	DAT_MEM_PRIV_FLAGS priv = atomic ? (DAT_MEM_PRIV_FLAGS)(DAT_MEM_PRIV_ALL_FLAG |
							       DAT_IB_MEM_PRIV_REMOTE_ATOMIC)
					 : DAT_MEM_PRIV_ALL_FLAG;

	if (atomic)
		*(volatile uint64_t *)c->buf = ZD_PERF_ATOMIC_SEED;

	DAT_REGION_DESCRIPTION region = { .for_va = c->buf };
	DAT_VLEN reg_len = 0;
	DAT_VADDR reg_addr = 0;
	DAT_RETURN ret = dat_lmr_create(c->ia, DAT_MEM_TYPE_VIRTUAL, region, c->buf_len,
					c->pz, priv, DAT_VA_TYPE_VA,
					&c->lmr, &c->lkey, &c->rkey, &reg_len, &reg_addr);
	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_lmr_create");
	if (reg_addr > (DAT_VADDR)(uintptr_t)c->buf ||
	    reg_addr + reg_len < (DAT_VADDR)(uintptr_t)c->buf + c->buf_len)
		zd_perf_die("dat_lmr_create registered [%#" PRIx64 ", +%" PRIu64 "), "
			    "not the whole buffer", (uint64_t)reg_addr, (uint64_t)reg_len);
}

static void free_buffer(struct zd_perf_conn *c)
{
	if (c->lmr)
		dat_lmr_free(c->lmr);
	if (!c->buf)
		return;
	if (c->mem_used == ZD_PERF_MEM_POOL)
		c->mem_free(c->buf);
	else if (c->mem_used == ZD_PERF_MEM_HUGEPAGE)
		munmap(c->buf, c->buf_len);
	else
		free(c->buf);
	c->buf = NULL;
}

/* ---- IA and objects -------------------------------------------------------- */

static DAT_EVD_HANDLE make_evd(struct zd_perf_conn *c, DAT_COUNT qlen, DAT_EVD_FLAGS flags,
			       DAT_COUNT max_qlen)
{
	DAT_EVD_HANDLE evd;
	DAT_RETURN ret;

	if (max_qlen > 0 && qlen > max_qlen)
		qlen = max_qlen;
	ret = dat_evd_create(c->ia, qlen, DAT_HANDLE_NULL, flags, &evd);
	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_evd_create");
	return evd;
}

/* The IB extension operations a provider advertises: DAT_EXTENSION_IB
 * and the provider-specific attribute set to "TRUE" (what dtestx checks). */
static void read_ext_attrs(struct zd_perf_conn *c, const DAT_IA_ATTR *ia_attr,
			   const DAT_PROVIDER_ATTR *pr_attr)
{
	if (ia_attr->extension_supported != DAT_EXTENSION_IB)
		return;
	for (DAT_COUNT i = 0; i < pr_attr->num_provider_specific_attr; i++) {
		const DAT_NAMED_ATTR *a = &pr_attr->provider_specific_attr[i];
		bool on = a->name && a->value && strcmp(a->value, "TRUE") == 0;

		if (!a->name)
			continue;
		if (strcmp(a->name, DAT_IB_ATTR_IMMED_DATA) == 0)
			c->has_write_imm = on;
		else if (strcmp(a->name, DAT_IB_ATTR_FETCH_AND_ADD) == 0)
			c->has_fetch_add = on;
		else if (strcmp(a->name, DAT_IB_ATTR_CMP_AND_SWAP) == 0)
			c->has_cmp_swap = on;
	}
}

/* The run's extension operation, if it has one, is advertised: else skip
 * (so the benchmark runs, or says why not, over any DAT provider). */
static void require_ext_op(const struct zd_perf_conn *c)
{
	const struct zd_perf_opts *o = c->o;

	if (o->verb == ZD_PERF_WRITE_IMM && !c->has_write_imm)
		zd_perf_skip("%s does not advertise " DAT_IB_ATTR_IMMED_DATA " (RDMA write with "
			     "immediate data): skipped", o->ia_name);
	if (o->verb != ZD_PERF_ATOMIC)
		return;
	if (o->atomic == ZD_PERF_FETCH_AND_ADD && !c->has_fetch_add)
		zd_perf_skip("%s does not advertise " DAT_IB_ATTR_FETCH_AND_ADD ": skipped",
			     o->ia_name);
	if (o->atomic == ZD_PERF_CMP_AND_SWAP && !c->has_cmp_swap)
		zd_perf_skip("%s does not advertise " DAT_IB_ATTR_CMP_AND_SWAP ": skipped",
			     o->ia_name);
}

/* One connection per process: the IA's limits, kept for the EP. */
static DAT_EP_ATTR ep_attr_template;
static DAT_COUNT max_evd_qlen, max_dto_per_ep;

/* The DTO EVDs and queue depths follow the run's parameters, which a
 * server knows only from the client's request. */
static void make_dto_evds(struct zd_perf_conn *c)
{
	const struct zd_perf_opts *o = c->o;
	DAT_EP_ATTR *a = &ep_attr_template;

	a->max_request_dtos = (DAT_COUNT)o->tx_depth + 8;
	a->max_recv_dtos = (DAT_COUNT)o->rx_depth + 8;
	if (a->max_request_dtos > max_dto_per_ep || a->max_recv_dtos > max_dto_per_ep)
		zd_perf_die("tx/rx depth %u/%u above the provider's %d DTOs per endpoint",
			    o->tx_depth, o->rx_depth, max_dto_per_ep - 8);
	c->req_evd = make_evd(c, (DAT_COUNT)o->tx_depth + EVD_SLACK, DAT_EVD_DTO_FLAG,
			      max_evd_qlen);
	c->recv_evd = make_evd(c, (DAT_COUNT)o->rx_depth + EVD_SLACK, DAT_EVD_DTO_FLAG,
			       max_evd_qlen);
}

static void create_ep(struct zd_perf_conn *c)
{
	DAT_RETURN ret = dat_ep_create(c->ia, c->pz, c->recv_evd, c->req_evd, c->conn_evd,
				       &ep_attr_template, &c->ep);

	if (ret != DAT_SUCCESS && c->suppress_ok) {
		/* A provider may refuse suppression as an EP attribute:
		 * then every post is signalled (CQ moderation 1). */
		ep_attr_template.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
		c->suppress_ok = false;
		ret = dat_ep_create(c->ia, c->pz, c->recv_evd, c->req_evd, c->conn_evd,
				    &ep_attr_template, &c->ep);
	}
	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_ep_create");
}

static void open_ia(struct zd_perf_conn *c)
{
	const struct zd_perf_opts *o = c->o;
	DAT_EVD_HANDLE async_evd = DAT_HANDLE_NULL;
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR pr_attr;
	DAT_RETURN ret;
	char msg[160], name[DAT_NAME_MAX_LENGTH];

	snprintf(name, sizeof(name), "%s", o->ia_name);  /* the ABI takes char * */
	ret = dat_ia_open(name, 8, &async_evd, &c->ia);
	if (ret != DAT_SUCCESS)
		zd_perf_die("dat_ia_open(%s) failed: %s (is it in %s?)", o->ia_name,
			    zd_perf_dat_strerror(ret, msg, sizeof(msg)),
			    getenv("DAT_OVERRIDE") ? getenv("DAT_OVERRIDE") : "/etc/dat.conf");
	ret = dat_ia_query(c->ia, &async_evd, DAT_IA_FIELD_ALL, &ia_attr,
			   DAT_PROVIDER_FIELD_ALL, &pr_attr);
	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_ia_query");
	if (ia_attr.ia_address_ptr && ia_attr.ia_address_ptr->sa_family == AF_INET)
		memcpy(&c->local_addr, ia_attr.ia_address_ptr, sizeof(c->local_addr));
	read_ext_attrs(c, &ia_attr, &pr_attr);
	require_ext_op(c);      /* before a --loopback server listens */

	c->max_msg = ia_attr.max_message_size;
	if (ia_attr.max_rdma_size && ia_attr.max_rdma_size < c->max_msg)
		c->max_msg = ia_attr.max_rdma_size;
	if (!c->max_msg)
		c->max_msg = UINT32_MAX;
	c->suppress_ok = (pr_attr.completion_flags_supported & DAT_COMPLETION_SUPPRESS_FLAG) != 0;
	c->max_rdma_read_out = ia_attr.max_rdma_read_per_ep_out > 0 ?
		ia_attr.max_rdma_read_per_ep_out : 1;
	if (pr_attr.max_private_data_size > 0 &&
	    pr_attr.max_private_data_size < (DAT_COUNT)sizeof(struct zd_perf_wire))
		zd_perf_die("provider %s carries %d bytes of private data; %zu needed",
			    o->ia_name, pr_attr.max_private_data_size, sizeof(struct zd_perf_wire));

	ret = dat_pz_create(c->ia, &c->pz);
	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_pz_create");

	max_evd_qlen = ia_attr.max_evd_qlen;
	max_dto_per_ep = ia_attr.max_dto_per_ep > 0 ? ia_attr.max_dto_per_ep : 1024;
	c->conn_evd = make_evd(c, 8, DAT_EVD_CONNECTION_FLAG, max_evd_qlen);

	DAT_EP_ATTR *a = &ep_attr_template;

	memset(a, 0, sizeof(*a));
	a->service_type = DAT_SERVICE_TYPE_RC;
	a->max_message_size = (DAT_SEG_LENGTH)(c->max_msg > UINT32_MAX ? UINT32_MAX : c->max_msg);
	a->max_rdma_size = a->max_message_size;
	a->qos = DAT_QOS_BEST_EFFORT;
	a->recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
	a->request_completion_flags = c->suppress_ok ? DAT_COMPLETION_SUPPRESS_FLAG
						     : DAT_COMPLETION_DEFAULT_FLAG;
	a->max_recv_iov = 1;
	a->max_request_iov = 1;
	a->max_rdma_read_in = c->max_rdma_read_out;
	a->max_rdma_read_out = c->max_rdma_read_out;
	a->max_rdma_read_iov = 1;
	a->max_rdma_write_iov = 1;
}

/* Tell the --loopback parent where to connect, once the PSP listens. */
static void report_ready(struct zd_perf_conn *c, int ready_fd)
{
	struct zd_perf_ready r = { .addr = c->local_addr, .port = c->o->port };

	if (ready_fd < 0)
		return;
	if (r.addr.sin_family != AF_INET) {
		r.addr.sin_family = AF_INET;
		r.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	}
	if (write(ready_fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		zd_perf_die("cannot report readiness: %s", strerror(errno));
	close(ready_fd);
}

/* The largest single transfer of a message of @size bytes: zd_eager_ring
 * writes its header word after the payload. */
static uint64_t write_bytes(const struct zd_perf_opts *o, uint64_t size)
{
	return o->verb == ZD_PERF_EAGER ? size + ZD_PERF_EAGER_HDR_BYTES : size;
}

/* Each of the recv and send areas: a message of the largest size, or
 * zd_eager_ring's ring (recv) and its staging slots (send). */
static uint64_t area_bytes(const struct zd_perf_opts *o)
{
	if (o->verb == ZD_PERF_EAGER)
		return o->slots * zd_perf_eager_slot_bytes(o->max_size);
	return o->max_size;
}

/* The client's parameters rule; the server runs what the client asks. */
static void server_adopt(struct zd_perf_opts *o, const struct zd_perf_wire *w)
{
	o->all_sizes = w->flags & ZD_PERF_WIRE_ALL;
	o->duration_s = w->flags & ZD_PERF_WIRE_DURATION ? w->duration_s : 0;
	o->max_size = w->size;
	o->size = w->size;
	o->iters = w->iters;
	o->tx_depth = w->tx_depth;
	if (o->verb == ZD_PERF_SEND || o->verb == ZD_PERF_WRITE_IMM)
		o->rx_depth = w->rx_depth;
	if (o->verb == ZD_PERF_EAGER) {         /* and its --mode */
		o->slots = w->rx_depth;
		o->kind = (enum zd_perf_kind)(w->test & 1);
	}
	o->atomic = w->flags & ZD_PERF_WIRE_CMP_AND_SWAP ? ZD_PERF_CMP_AND_SWAP
							 : ZD_PERF_FETCH_AND_ADD;
}

static void post_initial_recvs(struct zd_perf_conn *c)
{
	if (c->o->verb != ZD_PERF_SEND && c->o->verb != ZD_PERF_WRITE_IMM)
		return;
	for (unsigned i = 0; i < c->o->rx_depth; i++)
		zd_perf_post_recv(c, i + 1);
}

static void server_accept(struct zd_perf_conn *c, struct zd_perf_opts *o, int ready_fd)
{
	unsigned limit_s = o->timeout_given ? o->timeout_s : SERVER_WAIT_S;
	struct zd_perf_wire mine, theirs;
	DAT_CR_PARAM crp;
	DAT_EVENT ev;
	DAT_RETURN ret;
	char buf[32];

	c->cr_evd = make_evd(c, 8, DAT_EVD_CR_FLAG, 0);
	ret = dat_psp_create(c->ia, o->port, c->cr_evd, DAT_PSP_CONSUMER_FLAG, &c->psp);
	if (DAT_GET_TYPE(ret) == DAT_CONN_QUAL_IN_USE && ready_fd >= 0 && !o->port_given) {
		/* --loopback tells its client the port: when the default one
		 * is taken (another run on this host), any free one will do. */
		DAT_CONN_QUAL any;

		if (dat_psp_create_any(c->ia, &any, c->cr_evd, DAT_PSP_CONSUMER_FLAG,
				       &c->psp) == DAT_SUCCESS) {
			o->port = any;
			ret = DAT_SUCCESS;
		}
	}
	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_psp_create");
	report_ready(c, ready_fd);
	if (!o->quiet)
		printf("\n************************************\n"
		       "* Waiting for client to connect... *\n"
		       "************************************\n");

	wait_event(c->cr_evd, usec_now() + limit_s * UINT64_C(1000000), &ev,
		   "a client to connect", limit_s);
	if (ev.event_number != DAT_CONNECTION_REQUEST_EVENT)
		zd_perf_die("unexpected %s on the CR EVD",
			    event_name(ev.event_number, buf, sizeof(buf)));
	DAT_CR_HANDLE cr = ev.event_data.cr_arrival_event_data.cr_handle;

	ret = dat_cr_query(cr, DAT_CR_FIELD_ALL, &crp);
	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_cr_query");
	if (crp.remote_ia_address_ptr && crp.remote_ia_address_ptr->sa_family == AF_INET)
		memcpy(&c->remote_addr, crp.remote_ia_address_ptr, sizeof(c->remote_addr));
	if (!wire_decode(crp.private_data, crp.private_data_size, &theirs)) {
		dat_cr_reject(cr, 0, NULL);
		zd_perf_die("rejected a connection that is not from a zd_perf client");
	}
	if (theirs.test != (uint8_t)(o->verb << 1 | o->kind) &&
	    (o->verb != ZD_PERF_EAGER || theirs.test >> 1 != ZD_PERF_EAGER)) {
		wire_encode(c, &mine);
		dat_cr_reject(cr, sizeof(mine), &mine);
		zd_perf_die("the client runs zd_%s; this is zd_%s",
			    zd_perf_test_name(theirs.test >> 1, theirs.test & 1),
			    zd_perf_test_name(o->verb, o->kind));
	}
	server_adopt(o, &theirs);
	if (o->verb == ZD_PERF_EAGER && (theirs.rx_depth < 2 || theirs.rx_depth > 4096 ||
	    o->slots * zd_perf_eager_slot_bytes(theirs.size) > ZD_PERF_EAGER_MAX_RING)) {
		dat_cr_reject(cr, 0, NULL);
		zd_perf_die("client asks for %" PRIu32 " slots of %" PRIu32 " bytes", theirs.rx_depth,
			    theirs.size);
	}
	if (write_bytes(o, theirs.size) > c->max_msg) {
		dat_cr_reject(cr, 0, NULL);
		zd_perf_die("client asks for %" PRIu32 "-byte messages; %s carries %" PRIu64,
			    theirs.size, o->ia_name, c->max_msg);
	}
	adopt_peer(c, &theirs);
	make_dto_evds(c);
	alloc_buffer(c, area_bytes(o));
	create_ep(c);
	post_initial_recvs(c);          /* before accepting: the first send may follow at once */

	wire_encode(c, &mine);
	ret = dat_cr_accept(cr, c->ep, sizeof(mine), &mine);
	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_cr_accept");
	wait_event(c->conn_evd, usec_now() + o->timeout_s * UINT64_C(1000000), &ev,
		   "the connection to be established", o->timeout_s);
	if (ev.event_number != DAT_CONNECTION_EVENT_ESTABLISHED)
		zd_perf_die("accept ended in %s", event_name(ev.event_number, buf, sizeof(buf)));
}

static void resolve(const struct zd_perf_opts *o, struct sockaddr_in *out)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;
	int rc = getaddrinfo(o->server_host, NULL, &hints, &ai);

	if (rc != 0)
		zd_perf_die("cannot resolve '%s': %s", o->server_host, gai_strerror(rc));
	memcpy(out, ai->ai_addr, sizeof(*out));
	freeaddrinfo(ai);
}

/* Connect within --timeout; a listener that is not up yet (refused,
 * unreachable) is retried until then, since DAT servers may publish their
 * address before their PSP exists. */
static void client_connect(struct zd_perf_conn *c, struct zd_perf_opts *o)
{
	uint64_t deadline = usec_now() + o->timeout_s * UINT64_C(1000000);
	struct zd_perf_wire mine, theirs;
	DAT_EVENT ev;
	DAT_RETURN ret;
	char buf[32];

	resolve(o, &c->remote_addr);
	if (write_bytes(o, o->max_size) > c->max_msg) {
		if (!o->all_sizes)
			zd_perf_die("-s %" PRIu32 " is above what %s carries (%" PRIu64 " bytes)",
				    o->size, o->ia_name, c->max_msg);
		while (write_bytes(o, o->max_size) > c->max_msg)
			o->max_size >>= 1;
		fprintf(stderr, "%s: %s carries at most %" PRIu64 " bytes: -a stops at %" PRIu32 "\n",
			o->prog, o->ia_name, c->max_msg, o->max_size);
	}
	make_dto_evds(c);
	alloc_buffer(c, area_bytes(o));
	create_ep(c);
	for (;;) {
		DAT_TIMEOUT left = usec_left(deadline);

		wire_encode(c, &mine);
		ret = dat_ep_connect(c->ep, (DAT_IA_ADDRESS_PTR)&c->remote_addr, o->port,
				     left ? left : 1, sizeof(mine), &mine,
				     DAT_QOS_BEST_EFFORT, DAT_CONNECT_DEFAULT_FLAG);
		if (ret != DAT_SUCCESS)
			zd_perf_dat_die(ret, "dat_ep_connect");
		wait_event(c->conn_evd, deadline + 1000000, &ev,
			   "the server to accept", o->timeout_s);
		if (ev.event_number == DAT_CONNECTION_EVENT_ESTABLISHED)
			break;
		if (ev.event_number == DAT_CONNECTION_EVENT_PEER_REJECTED) {
			const DAT_CONNECTION_EVENT_DATA *d = &ev.event_data.connect_event_data;

			if (wire_decode(d->private_data, d->private_data_size, &theirs))
				zd_perf_die("the server runs zd_%s; this is zd_%s",
					    zd_perf_test_name(theirs.test >> 1, theirs.test & 1),
					    zd_perf_test_name(o->verb, o->kind));
			zd_perf_die("the server rejected the connection (see its output)");
		}
		if (usec_left(deadline) < 100000)
			zd_perf_die("no server at %s port %" PRIu64 " within %u s (last: %s)",
				    o->server_host, o->port, o->timeout_s,
				    event_name(ev.event_number, buf, sizeof(buf)));
		/* Refused or unreachable: a fresh EP, and try again shortly. */
		dat_ep_free(c->ep);
		c->ep = DAT_HANDLE_NULL;
		usleep(100000);
		create_ep(c);
	}
	const DAT_CONNECTION_EVENT_DATA *d = &ev.event_data.connect_event_data;

	if (!wire_decode(d->private_data, d->private_data_size, &theirs))
		zd_perf_die("the server's accept carries no zd_perf parameters");
	adopt_peer(c, &theirs);
	post_initial_recvs(c);          /* the server sends only after our first message */
}

void zd_perf_conn_open(struct zd_perf_conn *c, struct zd_perf_opts *o, bool is_server,
		       int ready_fd)
{
	memset(c, 0, sizeof(*c));
	c->o = o;
	c->is_server = is_server;
	open_ia(c);
	if (is_server)
		server_accept(c, o, ready_fd);
	else
		client_connect(c, o);
}

void zd_perf_conn_close(struct zd_perf_conn *c)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;

	if (c->ep) {
		/* The client hangs up; the server waits a moment for that. */
		if (!c->is_server)
			dat_ep_disconnect(c->ep, DAT_CLOSE_GRACEFUL_FLAG);
		for (int i = 0; i < 4; i++) {
			DAT_RETURN ret = dat_evd_wait(c->conn_evd, 500000, 1, &ev, &nmore);

			if (ret != DAT_SUCCESS)
				break;
			if (ev.event_number == DAT_CONNECTION_EVENT_DISCONNECTED ||
			    ev.event_number == DAT_CONNECTION_EVENT_BROKEN)
				break;
		}
		if (c->is_server)
			dat_ep_disconnect(c->ep, DAT_CLOSE_ABRUPT_FLAG);
		/* Flushed completions are not errors at this point. */
		while (c->req_evd && dat_evd_dequeue(c->req_evd, &ev) == DAT_SUCCESS)
			;
		while (c->recv_evd && dat_evd_dequeue(c->recv_evd, &ev) == DAT_SUCCESS)
			;
		dat_ep_free(c->ep);
	}
	free_buffer(c);
	if (c->psp)
		dat_psp_free(c->psp);
	if (c->cr_evd)
		dat_evd_free(c->cr_evd);
	dat_evd_free(c->conn_evd);
	if (c->recv_evd)
		dat_evd_free(c->recv_evd);
	if (c->req_evd)
		dat_evd_free(c->req_evd);
	dat_pz_free(c->pz);
	if (dat_ia_close(c->ia, DAT_CLOSE_GRACEFUL_FLAG) != DAT_SUCCESS)
		dat_ia_close(c->ia, DAT_CLOSE_ABRUPT_FLAG);
}

/* ---- completions and posts ------------------------------------------------- */

static const DAT_IB_EXTENSION_EVENT_DATA *ext_data(const DAT_EVENT *ev)
{
	return (const DAT_IB_EXTENSION_EVENT_DATA *)ev->event_extension_data;
}

static _Noreturn void dto_failed(const DAT_EVENT *ev, const char *evd)
{
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;
	char buf[32];

	if (ev->event_number == IB_DTO_EVENT && d->status == DAT_DTO_SUCCESS)
		zd_perf_die("unexpected IB extension completion on the %s EVD: type %d, "
			    "operation %d, cookie %#" PRIx64, evd, (int)ext_data(ev)->type,
			    (int)d->operation, d->user_cookie.as_64);
	if (ev->event_number != DAT_DTO_COMPLETION_EVENT && ev->event_number != IB_DTO_EVENT)
		zd_perf_die("unexpected %s on the %s EVD",
			    event_name(ev->event_number, buf, sizeof(buf)), evd);
	zd_perf_die("%s completion failed: DAT_DTO_COMPLETION_STATUS %d (op %d, cookie %#" PRIx64 ")",
		    evd, (int)d->status, (int)d->operation, d->user_cookie.as_64);
}

/* The initiator's completion of the run's extension post: a DAT_IB_DTO_EVENT
 * of the type that operation has. */
static bool is_own_ext_completion(const struct zd_perf_conn *c, const DAT_EVENT *ev)
{
	DAT_IB_EXT_TYPE want;

	if (ev->event_number != IB_DTO_EVENT ||
	    ev->event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS)
		return false;
	switch (c->o->verb) {
	case ZD_PERF_WRITE_IMM:
		want = DAT_IB_RDMA_WRITE_IMMED;
		break;
	case ZD_PERF_ATOMIC:
		want = c->o->atomic == ZD_PERF_CMP_AND_SWAP ? DAT_IB_CMP_AND_SWAP
							    : DAT_IB_FETCH_AND_ADD;
		break;
	default:
		return false;
	}
	return ext_data(ev)->type == want;
}

/* A request completion taken from the request EVD: zd_perf_poll_req's
 * answer for it. */
static uint64_t req_event(struct zd_perf_conn *c, const DAT_EVENT *e)
{
	DAT_EVENT ev = *e;
	uint64_t cookie;

	if ((ev.event_number != DAT_DTO_COMPLETION_EVENT ||
	     ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS) &&
	    !is_own_ext_completion(c, &ev))
		dto_failed(&ev, "request");
	cookie = ev.event_data.dto_completion_event_data.user_cookie.as_64;
	if (cookie & CTRL_COOKIE) {
		c->req_done = cookie & ~CTRL_COOKIE;  /* all signalled, in order */
		return 0;
	}
	c->data_done = cookie;
	return cookie;
}

uint64_t zd_perf_poll_req(struct zd_perf_conn *c)
{
	DAT_EVENT ev;
	DAT_RETURN ret = dat_evd_dequeue(c->req_evd, &ev);

	if (ret != DAT_SUCCESS) {
		if (DAT_GET_TYPE(ret) == DAT_QUEUE_EMPTY)
			return 0;
		zd_perf_dat_die(ret, "dat_evd_dequeue");
	}
	return req_event(c, &ev);
}

/* zd_perf_poll_req asleep: up to @usec in dat_evd_wait on the request EVD
 * (which also progresses devices whose progress is the consumer's). */
static uint64_t wait_req(struct zd_perf_conn *c, DAT_TIMEOUT usec)
{
	DAT_EVENT ev;
	DAT_COUNT nmore;
	DAT_RETURN ret = dat_evd_wait(c->req_evd, usec, 1, &ev, &nmore);

	if (ret != DAT_SUCCESS) {
		if (DAT_GET_TYPE(ret) == DAT_TIMEOUT_EXPIRED)
			return 0;
		zd_perf_dat_die(ret, "dat_evd_wait");
	}
	return req_event(c, &ev);
}

uint64_t zd_perf_poll_recv(struct zd_perf_conn *c, uint32_t *len)
{
	DAT_EVENT ev;
	DAT_RETURN ret = dat_evd_dequeue(c->recv_evd, &ev);

	if (ret != DAT_SUCCESS) {
		if (DAT_GET_TYPE(ret) == DAT_QUEUE_EMPTY)
			return 0;
		zd_perf_dat_die(ret, "dat_evd_dequeue");
	}
	if (ev.event_number != DAT_DTO_COMPLETION_EVENT ||
	    ev.event_data.dto_completion_event_data.status != DAT_DTO_SUCCESS)
		dto_failed(&ev, "receive");
	*len = ev.event_data.dto_completion_event_data.transfered_length;
	return ev.event_data.dto_completion_event_data.user_cookie.as_64;
}

uint64_t zd_perf_poll_recv_imm(struct zd_perf_conn *c, uint32_t *len, uint32_t *imm)
{
	DAT_EVENT ev;
	DAT_RETURN ret = dat_evd_dequeue(c->recv_evd, &ev);
	const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

	if (ret != DAT_SUCCESS) {
		if (DAT_GET_TYPE(ret) == DAT_QUEUE_EMPTY)
			return 0;
		zd_perf_dat_die(ret, "dat_evd_dequeue");
	}
	if (ev.event_number != IB_DTO_EVENT || d->status != DAT_DTO_SUCCESS)
		dto_failed(&ev, "receive");
	if (ext_data(&ev)->type != DAT_IB_RDMA_WRITE_IMMED_DATA ||
	    d->operation != (DAT_DTOS)DAT_IB_DTO_RECV_IMMED)
		zd_perf_die("a receive completed as IB extension type %d, operation %d: "
			    "expected DAT_IB_RDMA_WRITE_IMMED_DATA (%d), DAT_IB_DTO_RECV_IMMED (%d)",
			    (int)ext_data(&ev)->type, (int)d->operation,
			    (int)DAT_IB_RDMA_WRITE_IMMED_DATA, (int)DAT_IB_DTO_RECV_IMMED);
	*len = d->transfered_length;
	*imm = ext_data(&ev)->val.immed.data;
	return d->user_cookie.as_64;
}

void zd_perf_post(struct zd_perf_conn *c, enum zd_perf_verb verb, uint32_t size,
		  uint64_t cookie, bool signalled)
{
	DAT_COMPLETION_FLAGS flags = signalled || !c->suppress_ok ?
		DAT_COMPLETION_DEFAULT_FLAG : DAT_COMPLETION_SUPPRESS_FLAG;
	DAT_DTO_COOKIE ck = { .as_64 = cookie };
	DAT_LMR_TRIPLET l = { .lmr_context = c->lkey, .segment_length = size };
	DAT_RMR_TRIPLET r = { .rmr_context = c->peer_rkey, .segment_length = size };
	DAT_RETURN ret;

	switch (verb) {
	case ZD_PERF_WRITE:     /* our send area into the peer's recv area */
		zd_perf_post_write_at(c, c->area_len, 0, size, cookie, signalled);
		break;
	case ZD_PERF_READ:      /* the peer's send area into our recv area */
		l.virtual_address = (DAT_VADDR)(uintptr_t)c->buf;
		r.virtual_address = c->peer_addr + c->peer_area_len;
		ret = dat_ep_post_rdma_read(c->ep, 1, &l, ck, &r, flags);
		if (ret != DAT_SUCCESS)
			zd_perf_dat_die(ret, "dat_ep_post_rdma_read");
		break;
	default:
		l.virtual_address = (DAT_VADDR)(uintptr_t)(c->buf + c->area_len);
		ret = dat_ep_post_send(c->ep, 1, &l, ck, flags);
		if (ret != DAT_SUCCESS)
			zd_perf_dat_die(ret, "dat_ep_post_send");
		break;
	}
}

void zd_perf_post_write_at(struct zd_perf_conn *c, uint64_t local_off, uint64_t peer_off,
			   uint32_t len, uint64_t cookie, bool signalled)
{
	DAT_COMPLETION_FLAGS flags = signalled || !c->suppress_ok ?
		DAT_COMPLETION_DEFAULT_FLAG : DAT_COMPLETION_SUPPRESS_FLAG;
	DAT_DTO_COOKIE ck = { .as_64 = cookie };
	DAT_LMR_TRIPLET l = {
		.lmr_context = c->lkey,
		.virtual_address = (DAT_VADDR)(uintptr_t)(c->buf + local_off),
		.segment_length = len,
	};
	DAT_RMR_TRIPLET r = {
		.rmr_context = c->peer_rkey,
		.virtual_address = c->peer_addr + peer_off,
		.segment_length = len,
	};
	DAT_RETURN ret = dat_ep_post_rdma_write(c->ep, 1, &l, ck, &r, flags);

	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_ep_post_rdma_write");
}

void zd_perf_write_wr_init(const struct zd_perf_conn *c, uint32_t size,
			   struct zd_perf_write_wr *wr)
{
	*wr = (struct zd_perf_write_wr){
		.l = { .lmr_context = c->lkey,
		       .virtual_address = (DAT_VADDR)(uintptr_t)(c->buf + c->area_len),
		       .segment_length = size },
		.r = { .rmr_context = c->peer_rkey, .virtual_address = c->peer_addr,
		       .segment_length = size },
		.unsignalled = c->suppress_ok ? DAT_COMPLETION_SUPPRESS_FLAG
					      : DAT_COMPLETION_DEFAULT_FLAG,
	};
}

/* Every receive lands in the whole recv area: any size of this run fits. */
void zd_perf_post_recv(struct zd_perf_conn *c, uint64_t cookie)
{
	DAT_DTO_COOKIE ck = { .as_64 = cookie };
	DAT_LMR_TRIPLET l = {
		.lmr_context = c->lkey,
		.virtual_address = (DAT_VADDR)(uintptr_t)c->buf,
		.segment_length = (DAT_SEG_LENGTH)c->area_len,
	};
	DAT_RETURN ret = dat_ep_post_recv(c->ep, 1, &l, ck, DAT_COMPLETION_DEFAULT_FLAG);

	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_ep_post_recv");
}

void zd_perf_post_write_imm(struct zd_perf_conn *c, uint32_t size, uint64_t cookie,
			    uint32_t imm)
{
	DAT_DTO_COOKIE ck = { .as_64 = cookie };
	DAT_LMR_TRIPLET l = {
		.lmr_context = c->lkey,
		.virtual_address = (DAT_VADDR)(uintptr_t)(c->buf + c->area_len),
		.segment_length = size,
	};
	DAT_RMR_TRIPLET r = {
		.rmr_context = c->peer_rkey,
		.virtual_address = c->peer_addr,
		.segment_length = size,
	};
	DAT_RETURN ret = dat_ib_post_rdma_write_immed(c->ep, 1, &l, ck, &r, imm,
						      DAT_COMPLETION_DEFAULT_FLAG);

	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_ib_post_rdma_write_immed");
}

void zd_perf_post_atomic(struct zd_perf_conn *c, uint64_t cookie, uint64_t operand,
			 uint64_t swap)
{
	DAT_DTO_COOKIE ck = { .as_64 = cookie };
	DAT_LMR_TRIPLET l = {
		.lmr_context = c->lkey,
		.virtual_address = (DAT_VADDR)(uintptr_t)(c->buf + c->area_len),
		.segment_length = sizeof(uint64_t),
	};
	DAT_RMR_TRIPLET r = {
		.rmr_context = c->peer_rkey,
		.virtual_address = c->peer_addr,
		.segment_length = sizeof(uint64_t),
	};
	DAT_RETURN ret;

	if (c->o->atomic == ZD_PERF_CMP_AND_SWAP) {
		ret = dat_ib_post_cmp_and_swap(c->ep, operand, swap, &l, ck, &r,
					       DAT_COMPLETION_DEFAULT_FLAG);
		if (ret != DAT_SUCCESS)
			zd_perf_dat_die(ret, "dat_ib_post_cmp_and_swap");
	} else {
		ret = dat_ib_post_fetch_and_add(c->ep, operand, &l, ck, &r,
						DAT_COMPLETION_DEFAULT_FLAG);
		if (ret != DAT_SUCCESS)
			zd_perf_dat_die(ret, "dat_ib_post_fetch_and_add");
	}
}

/* An 8-byte control write from our ctrl line to the peer's; signalled, so
 * req_done tells when it left. */
static void post_ctrl(struct zd_perf_conn *c, uint64_t *src, size_t peer_off)
{
	DAT_DTO_COOKIE ck = { .as_64 = CTRL_COOKIE | ++c->req_posted };
	DAT_LMR_TRIPLET l = {
		.lmr_context = c->lkey,
		.virtual_address = (DAT_VADDR)(uintptr_t)src,
		.segment_length = sizeof(*src),
	};
	DAT_RMR_TRIPLET r = {
		.rmr_context = c->peer_rkey,
		.virtual_address = c->peer_ctrl + peer_off,
		.segment_length = sizeof(*src),
	};
	DAT_RETURN ret = dat_ep_post_rdma_write(c->ep, 1, &l, ck, &r,
						DAT_COMPLETION_DEFAULT_FLAG);

	if (ret != DAT_SUCCESS)
		zd_perf_dat_die(ret, "dat_ep_post_rdma_write");
}

void zd_perf_post_credit(struct zd_perf_conn *c, uint64_t credit)
{
	/* The previous credit write must be done reading out_credit. */
	struct zd_perf_waiter w;

	zd_perf_waiter_init(&w, 0, "a credit write to complete");
	while (c->req_done < c->req_posted) {
		zd_perf_poll_req(c);
		zd_perf_waiter_tick(c, &w);
	}
	c->ctrl->out_credit = credit;
	post_ctrl(c, &c->ctrl->out_credit, offsetof(struct zd_perf_ctrl, in_credit));
}

void zd_perf_post_count(struct zd_perf_conn *c, uint64_t count)
{
	struct zd_perf_waiter w;

	zd_perf_waiter_init(&w, 0, "a count write to complete");
	while (c->req_done < c->req_posted) {   /* out_count may still be read */
		zd_perf_poll_req(c);
		zd_perf_waiter_tick(c, &w);
	}
	c->ctrl->out_count = count;
	post_ctrl(c, &c->ctrl->out_count, offsetof(struct zd_perf_ctrl, in_count));
}

/* A passive side's wait for the peer's token: this many looks spinning,
 * then a look every PASSIVE_WAIT_US asleep. */
#define PASSIVE_SPINS   4096u
#define PASSIVE_WAIT_US 200

void zd_perf_sync(struct zd_perf_conn *c, unsigned limit_s)
{
	uint64_t token = ++c->sync_token;
	struct zd_perf_waiter w;

	zd_perf_waiter_init(&w, limit_s, "the peer to synchronise");
	while (c->req_done < c->req_posted) {       /* out_sync may still be read */
		zd_perf_poll_req(c);
		zd_perf_waiter_tick(c, &w);
	}
	c->ctrl->out_sync = token;
	post_ctrl(c, &c->ctrl->out_sync, offsetof(struct zd_perf_ctrl, in_sync));
	/* Acquire pairs with the peer's RDMA write landing: what it wrote
	 * before its token is visible once the token is. Our own write's
	 * completion is reaped later (before out_sync is reused): waiting for
	 * it here would race the peer's disconnect after the last sync.
	 * A passive side (@limit_s: it waits out the peer's whole run) spins
	 * only briefly, then sleeps in dat_evd_wait between looks, as
	 * ucx_perftest's passive side blocks in its barrier: on a shared
	 * host a spinner here takes a CPU from whatever runs beside the
	 * measuring peer, and the peer loses it. */
	for (unsigned spins = 0;
	     __atomic_load_n(&c->ctrl->in_sync, __ATOMIC_ACQUIRE) < token; spins++) {
		bool sleep = limit_s && spins >= PASSIVE_SPINS;

		if (sleep ? wait_req(c, PASSIVE_WAIT_US) : zd_perf_poll_req(c))
			zd_perf_die("a data completion arrived during a synchronisation");
		if (sleep)
			w.spins |= 0x3ff;  /* each sleep takes the waiter's slow look */
		zd_perf_waiter_tick(c, &w);
	}
}

/* Seeing the peer's token does not say the peer saw ours: on a device
 * that executes asynchronously (a NIC, the software mlx5 model) our write
 * may still be queued, and hanging up now would flush it and leave the
 * peer waiting.  Its completion says it landed.  A flushed completion or a
 * connection event instead means the peer hung up first, which it does only
 * once it has our token: also done. */
void zd_perf_sync_last(struct zd_perf_conn *c)
{
	uint64_t deadline;
	DAT_EVENT ev;

	zd_perf_sync(c, 0);
	deadline = zd_perf_ticks() + zd_perf_usec_to_ticks(c->o->timeout_s * 1e6);
	while (c->req_done < c->req_posted) {
		DAT_RETURN ret = dat_evd_dequeue(c->req_evd, &ev);

		if (ret == DAT_SUCCESS) {
			const DAT_DTO_COMPLETION_EVENT_DATA *d = &ev.event_data.dto_completion_event_data;

			if (ev.event_number != DAT_DTO_COMPLETION_EVENT || d->status != DAT_DTO_SUCCESS)
				return;         /* flushed: the peer hung up */
			if (d->user_cookie.as_64 & CTRL_COOKIE)
				c->req_done = d->user_cookie.as_64 & ~CTRL_COOKIE;
			continue;
		}
		if (DAT_GET_TYPE(ret) != DAT_QUEUE_EMPTY)
			zd_perf_dat_die(ret, "dat_evd_dequeue");
		if (dat_evd_dequeue(c->conn_evd, &ev) == DAT_SUCCESS)
			return;                 /* the peer hung up */
		if (zd_perf_ticks() > deadline)
			zd_perf_die("no completion of the last synchronisation write in %u s",
				    c->o->timeout_s);
	}
}

unsigned zd_perf_passive_limit(const struct zd_perf_conn *c)
{
	unsigned base = c->o->timeout_s > 600 ? c->o->timeout_s : 600;

	return base + c->o->duration_s;
}

void zd_perf_waiter_slow(struct zd_perf_conn *c, struct zd_perf_waiter *w)
{
	uint64_t now = zd_perf_ticks();
	unsigned limit = w->limit_s ? w->limit_s : c->o->timeout_s;
	DAT_EVENT ev;
	char buf[32];

	if (!w->deadline) {
		w->deadline = now + zd_perf_usec_to_ticks(limit * 1e6);
	} else if (now > w->deadline) {
		zd_perf_die("no progress for %u s waiting for %s (peer gone?)", limit, w->what);
	}
	if ((w->spins & 0xffff) == 0 && dat_evd_dequeue(c->conn_evd, &ev) == DAT_SUCCESS)
		zd_perf_die("connection %s while waiting for %s",
			    event_name(ev.event_number, buf, sizeof(buf)), w->what);
}
