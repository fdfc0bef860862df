/* Queue memory (mem/zd_qmem.h, issue 14): EVD rings and the software
 * devices' completion rings live in registered pool memory (its queue
 * chunks, which no device publishes to peers: issue 15), stay there
 * across dat_evd_resize, leave an EVD ring's extension lines unbacked until
 * an extension event uses them, and fall back to private memory (with a
 * ZDAPL_MEM_REPORT line) when the pool cannot give any.  Links the library
 * statically to look at the rings; the provider registers itself here. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/zd_api.h"
#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "core/zd_srq.h"
#include "evd/zd_evd.h"
#include "hw/mlx5/zd_mlx5.h"
#include "hw/shm/zd_shm.h"
#include "mem/zd_pool.h"
#include "mem/zd_qmem.h"

static DAT_IA_HANDLE ia_handle;
static DAT_EVD_HANDLE async_handle;

void dat_provider_init(const DAT_PROVIDER_INFO *info, const char *instance_data);

static void open_static(const char *name, const char *params)
{
	DAT_PROVIDER_INFO info;

	memset(&info, 0, sizeof(info));
	strcpy(info.ia_name, name);
	info.dapl_version_major = DAT_VERSION_MAJOR;
	info.dapl_version_minor = DAT_VERSION_MINOR;
	info.is_thread_safe = DAT_FALSE;
	dat_provider_init(&info, params);
	async_handle = DAT_HANDLE_NULL;
	cr_assert_eq(dat_ia_open((DAT_NAME_PTR)name, 4, &async_handle, &ia_handle), DAT_SUCCESS);
}

static void open_shm(void)
{
	open_static("zdapl-static-shm", "shm lo");
}

/* The shared tables (what its peers map) of @evd's shm IA. */
static struct zd_shm_ia_shared *shm_tables(struct zd_evd *evd)
{
	return ((struct zd_shm_ia *)evd->obj.ia->dev_priv)->sh;
}

static struct zd_evd *evd_of(DAT_EVD_HANDLE h)
{
	struct zd_evd *evd = zd_obj_get(h, ZD_OBJ_EVD);

	cr_assert_not_null(evd);
	return evd;
}

static bool ring_in_pool(const struct zd_ring *r)
{
	return zd_qmem_in_pool(r, zd_ring_memsize(zd_ring_capacity(r)));
}

static DAT_EVENT se(uintptr_t v)
{
	DAT_EVENT ev;

	memset(&ev, 0, sizeof(ev));
	ev.event_number = DAT_SOFTWARE_EVENT;
	ev.event_data.software_event_data.pointer = (DAT_PVOID)v;
	return ev;
}

TestSuite(queue_mem, .init = open_shm);

Test(queue_mem, evd_and_completion_rings_in_pool)
{
	struct zd_qmem_stats before, during, after;
	DAT_EVD_HANDLE h;

	zd_qmem_get_stats(&before);
	cr_assert_eq(dat_evd_create(ia_handle, 100, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &h),
		     DAT_SUCCESS);
	cr_assert(ring_in_pool(evd_of(h)->ring));
	{
		/* In a queue chunk: one no device publishes to peers. */
		struct zd_chunk_ref c;

		cr_assert(zd_pool_lookup(evd_of(h)->ring, 1, &c));
		cr_assert(c.flags & ZD_CHUNK_F_QUEUE);
		for (uint32_t i = 0; i < ZD_SHM_CHUNK_SLOTS; i++)
			cr_assert_neq(atomic_load(&shm_tables(evd_of(h))->chunks[i].id), c.id,
				      "a queue chunk is in the shm IA's chunk table");
	}
	zd_qmem_get_stats(&during);
	cr_assert_eq(during.pool_live[ZD_QMEM_EVD_RING], before.pool_live[ZD_QMEM_EVD_RING] + 1);
	/* the shm device's local completion ring behind the DTO EVD */
	cr_assert_eq(during.pool_live[ZD_QMEM_CQ_RING], before.pool_live[ZD_QMEM_CQ_RING] + 1);
	cr_assert_eq(during.fallbacks, 0);
	cr_assert_eq(dat_evd_free(h), DAT_SUCCESS);
	zd_qmem_get_stats(&after);
	cr_assert_eq(after.pool_live[ZD_QMEM_EVD_RING], before.pool_live[ZD_QMEM_EVD_RING]);
	cr_assert_eq(after.pool_live[ZD_QMEM_CQ_RING], before.pool_live[ZD_QMEM_CQ_RING]);
	cr_assert_eq(after.pool_bytes[ZD_QMEM_EVD_RING], before.pool_bytes[ZD_QMEM_EVD_RING]);
}

Test(queue_mem, resize_stays_in_pool_and_keeps_events)
{
	DAT_EVD_HANDLE h;
	struct zd_evd *evd;
	DAT_EVENT ev;
	const uintptr_t n = 10;

	cr_assert_eq(dat_evd_create(ia_handle, 16, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &h),
		     DAT_SUCCESS);
	evd = evd_of(h);
	for (uintptr_t i = 1; i <= n; i++) {
		ev = se(i);
		cr_assert_eq(dat_evd_post_se(h, &ev), DAT_SUCCESS);
	}
	cr_assert_eq(dat_evd_resize(h, 4096), DAT_SUCCESS);
	cr_assert(ring_in_pool(evd->ring));
	cr_assert_not_null(evd->draining);
	cr_assert(ring_in_pool(evd->draining));
	cr_assert_eq(dat_evd_resize(h, 12), DAT_SUCCESS);   /* a second drain on top */
	cr_assert(ring_in_pool(evd->ring));
	cr_assert(ring_in_pool(evd->draining));
	for (uintptr_t i = 1; i <= n; i++) {
		cr_assert_eq(dat_evd_dequeue(h, &ev), DAT_SUCCESS);
		cr_assert_eq((uintptr_t)ev.event_data.software_event_data.pointer, i);
	}
	cr_assert_eq(DAT_GET_TYPE(dat_evd_dequeue(h, &ev)), DAT_QUEUE_EMPTY);
	cr_assert_eq(dat_evd_free(h), DAT_SUCCESS);
}

/* Resident pages of [p, p + len) (whole pages inside it). */
static size_t resident_pages(const void *p, size_t len)
{
	const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = ((uintptr_t)p + pg - 1) & ~(pg - 1);
	uintptr_t hi = ((uintptr_t)p + len) & ~(pg - 1);
	unsigned char vec[1024];
	size_t n = 0;

	cr_assert_leq((hi - lo) / pg, sizeof(vec));
	cr_assert_eq(mincore((void *)lo, hi - lo, vec), 0);
	for (size_t i = 0; i < (hi - lo) / pg; i++)
		n += vec[i] & 1;
	return n;
}

Test(queue_mem, extension_lines_stay_unbacked)
{
	const uint32_t cap = 8192;   /* 512 KiB of extension lines */
	DAT_EVD_HANDLE h;
	struct zd_ring *r;
	const void *ext;
	DAT_EVENT ev;

	cr_assert_eq(dat_evd_create(ia_handle, cap, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &h),
		     DAT_SUCCESS);
	r = evd_of(h)->ring;
	cr_assert(ring_in_pool(r));
	cr_assert_eq(zd_ring_capacity(r), cap);
	ext = &r->slots[cap];
	for (uintptr_t i = 1; i <= 100; i++) {
		ev = se(i);
		cr_assert_eq(dat_evd_post_se(h, &ev), DAT_SUCCESS);
		cr_assert_eq(dat_evd_dequeue(h, &ev), DAT_SUCCESS);
	}
	/* Fresh pool pages: the slot lines are written at init, the extension
	 * lines never (no extension event went through). */
	cr_assert_eq(resident_pages(ext, (size_t)cap * ZD_RING_EXT_BYTES), 0);
	cr_assert_gt(resident_pages(r->slots, (size_t)cap * sizeof(r->slots[0])), 0);
	cr_assert_eq(dat_evd_free(h), DAT_SUCCESS);
}

/* A fork() child has none of the pool's chunks (MADV_DONTFORK): its own
 * EVDs take a pool of its own (new arenas, new chunks) and work. */
Test(queue_mem, fork_child_queues_in_its_own_pool)
{
	struct zd_qmem_stats parent;
	DAT_EVD_HANDLE h;
	pid_t pid;
	int st;

	cr_assert_eq(dat_evd_create(ia_handle, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &h),
		     DAT_SUCCESS);
	cr_assert(ring_in_pool(evd_of(h)->ring));
	zd_qmem_get_stats(&parent);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		DAT_IA_HANDLE ia2;
		DAT_EVD_HANDLE a2 = DAT_HANDLE_NULL, e2;
		DAT_EVENT ev = se(5);
		struct zd_qmem_stats q0, qs;

		if (dat_ia_open("zdapl-static-shm", 4, &a2, &ia2) != DAT_SUCCESS)
			_exit(1);
		zd_qmem_get_stats(&q0);   /* the IA's async EVD is one */
		if (q0.private_live[ZD_QMEM_EVD_RING] != parent.private_live[ZD_QMEM_EVD_RING] ||
		    q0.pool_live[ZD_QMEM_EVD_RING] != parent.pool_live[ZD_QMEM_EVD_RING] + 1 ||
		    dat_evd_create(ia2, 64, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG | DAT_EVD_SOFTWARE_FLAG,
				   &e2) != DAT_SUCCESS)
			_exit(1);
		if (!ring_in_pool(evd_of(e2)->ring) || zd_pool_inherited(evd_of(e2)->ring))
			_exit(2);
		if (dat_evd_post_se(e2, &ev) != DAT_SUCCESS || dat_evd_dequeue(e2, &ev) != DAT_SUCCESS ||
		    (uintptr_t)ev.event_data.software_event_data.pointer != 5)
			_exit(3);
		if (dat_evd_free(e2) != DAT_SUCCESS)
			_exit(4);
		zd_qmem_get_stats(&qs);
		/* The parent's rings are still counted in the pool. */
		_exit(qs.private_live[ZD_QMEM_EVD_RING] == parent.private_live[ZD_QMEM_EVD_RING] &&
		      qs.pool_live[ZD_QMEM_EVD_RING] == parent.pool_live[ZD_QMEM_EVD_RING] + 1 &&
		      qs.fallbacks == parent.fallbacks ? 0 : 6);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %s %d",
		  WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	cr_assert_eq(dat_evd_free(h), DAT_SUCCESS);
}

/* The pool cannot grow: no descriptor is left for a memfd. */
TestSuite(queue_mem_fallback);

Test(queue_mem_fallback, private_memory_when_the_pool_cannot_grow)
{
	struct rlimit old, low = { .rlim_cur = 64 };
	struct zd_qmem_stats st;
	char log[4096] = "", *path = strdup("/tmp/zd_qmem_XXXXXX");
	int logfd = mkstemp(path), saved = dup(2), fds[64], nfd = 0, fd;
	DAT_EVD_HANDLE h, small;
	DAT_EVENT ev;
	ssize_t got;

	setenv("ZDAPL_MEM_REPORT", "1", 1);
	setenv("ZDAPL_MEM_CHUNK_SIZE", "2m", 1);
	open_shm();
	cr_assert_geq(logfd, 0);
	unlink(path);
	dup2(logfd, 2);
	/* Take every descriptor below a low limit. */
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	low.rlim_max = old.rlim_max;
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	while ((fd = dup(0)) >= 0)
		fds[nfd++] = fd;
	cr_assert_eq(errno, EMFILE);
	/* 16 MiB of ring: more than a 2 MiB chunk, so a new chunk, so a memfd. */
	cr_assert_eq(dat_evd_create(ia_handle, 1 << 17, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &h),
		     DAT_SUCCESS);
	while (nfd)
		close(fds[--nfd]);
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
	dup2(saved, 2);
	cr_assert_not(ring_in_pool(evd_of(h)->ring));
	zd_qmem_get_stats(&st);
	cr_assert_eq(st.fallbacks, 1);
	cr_assert_eq(st.private_live[ZD_QMEM_EVD_RING], 1);
	got = pread(logfd, log, sizeof(log) - 1, 0);
	cr_assert_gt(got, 0);
	cr_assert_not_null(strstr(log, "zdapl: queue memory: the registered pool cannot give"),
			   "stderr: %s", log);
	/* It works as any ring, and resizes back into the pool. */
	ev = se(7);
	cr_assert_eq(dat_evd_post_se(h, &ev), DAT_SUCCESS);
	cr_assert_eq(dat_evd_resize(h, 64), DAT_SUCCESS);
	cr_assert(ring_in_pool(evd_of(h)->ring));
	cr_assert_eq(dat_evd_dequeue(h, &ev), DAT_SUCCESS);
	cr_assert_eq((uintptr_t)ev.event_data.software_event_data.pointer, 7);
	cr_assert_eq(dat_evd_create(ia_handle, 8, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &small),
		     DAT_SUCCESS);
	cr_assert(ring_in_pool(evd_of(small)->ring));
	cr_assert_eq(dat_evd_free(small), DAT_SUCCESS);
	cr_assert_eq(dat_evd_free(h), DAT_SUCCESS);
	zd_qmem_get_stats(&st);
	cr_assert_eq(st.private_live[ZD_QMEM_EVD_RING], 0);
	close(logfd);
	free(path);
}

/* zdapl-mlx5sim: the QP, CQ and SRQ buffers and doorbell records behind
 * DAT objects come from the pool through the mlx5 allocator hook. */
static void open_mlx5sim(void)
{
	open_static("zdapl-static-mlx5sim", "mlx5sim 127.0.0.1");
}

TestSuite(queue_mem_mlx5sim, .init = open_mlx5sim);

Test(queue_mem_mlx5sim, qp_cq_srq_in_pool)
{
	DAT_PZ_HANDLE pz;
	DAT_EVD_HANDLE evd;
	DAT_EP_HANDLE ep, ep_srq;
	DAT_SRQ_HANDLE srq;
	DAT_SRQ_ATTR sa = { .max_recv_dtos = 64, .max_recv_iov = 1 };
	struct zd_mlx5_cq_obj *cq;
	struct zd_mlx5_qp *qp;
	struct zd_mlx5_srq_obj *s;
	struct zd_ep *e;

	cr_assert_eq(dat_pz_create(ia_handle, &pz), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia_handle, 256, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &evd),
		     DAT_SUCCESS);
	cq = evd_of(evd)->cq_priv;
	cr_assert(zd_qmem_in_pool(cq->q.buf, (size_t)cq->q.cqe_cnt << cq->q.cqe_shift));
	cr_assert(zd_qmem_in_pool((const void *)cq->q.dbrec, 8));
	cr_assert(ring_in_pool(evd_of(evd)->ring));

	cr_assert_eq(dat_ep_create(ia_handle, pz, evd, evd, DAT_HANDLE_NULL, NULL, &ep),
		     DAT_SUCCESS);
	e = zd_obj_get(ep, ZD_OBJ_EP);
	qp = e->dev_priv;
	cr_assert(zd_qmem_in_pool(qp->sq.buf, (size_t)(qp->sq.end - qp->sq.buf)));
	cr_assert(zd_qmem_in_pool((const void *)qp->sq.dbrec, 4));
	cr_assert(zd_qmem_in_pool(qp->rq.buf, (size_t)qp->rq.wqe_cnt * qp->rq.stride));
	cr_assert(zd_qmem_in_pool((const void *)qp->rq.dbrec, 4));

	cr_assert_eq(dat_srq_create(ia_handle, pz, &sa, &srq), DAT_SUCCESS);
	s = ((struct zd_srq *)zd_obj_get(srq, ZD_OBJ_SRQ))->dev_priv;
	cr_assert(zd_qmem_in_pool(s->q.buf, (size_t)s->q.wqe_cnt * s->q.stride));
	cr_assert(zd_qmem_in_pool((const void *)s->q.dbrec, 4));
	cr_assert_eq(dat_ep_create_with_srq(ia_handle, pz, evd, evd, DAT_HANDLE_NULL, srq, NULL,
					    &ep_srq), DAT_SUCCESS);
	qp = ((struct zd_ep *)zd_obj_get(ep_srq, ZD_OBJ_EP))->dev_priv;
	cr_assert(zd_qmem_in_pool(qp->sq.buf, 64));
	cr_assert_eq(dat_ep_free(ep_srq), DAT_SUCCESS);
	cr_assert_eq(dat_srq_free(srq), DAT_SUCCESS);
	cr_assert_eq(dat_ep_free(ep), DAT_SUCCESS);
	cr_assert_eq(dat_evd_free(evd), DAT_SUCCESS);
	cr_assert_eq(dat_pz_free(pz), DAT_SUCCESS);
}
