/* One-sided copies to and from a peer (zd_soft_copy.h). */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "core/zd_log.h"
#include "hw/soft/zd_soft_copy.h"

/* Scatter/gather memcpy between two segment lists (@to_b: a into b),
 * up to the shorter total. */
static void sg_copy(bool to_b, const struct iovec *a, int na, const struct iovec *b, int nb)
{
	size_t ao = 0, bo = 0;
	int i = 0, j = 0;

	while (i < na && j < nb) {
		size_t n = ZD_MIN(a[i].iov_len - ao, b[j].iov_len - bo);
		char *pa = (char *)a[i].iov_base + ao, *pb = (char *)b[j].iov_base + bo;

		if (n)
			memcpy(to_b ? pb : pa, to_b ? pa : pb, n);
		ao += n;
		bo += n;
		if (ao == a[i].iov_len) {
			i++;
			ao = 0;
		}
		if (bo == b[j].iov_len) {
			j++;
			bo = 0;
		}
	}
}

/* Takes the last @n bytes off the segment list @l (of at least @n bytes)
 * into @out. */
static void take_tail(struct iovec *l, int *nl, uint8_t *out, uint32_t n)
{
	while (n) {
		struct iovec *s = &l[*nl - 1];
		size_t k = ZD_MIN((size_t)n, s->iov_len);

		memcpy(out + n - k, (char *)s->iov_base + s->iov_len - k, k);
		s->iov_len -= k;
		n -= (uint32_t)k;
		if (s->iov_len == 0)
			(*nl)--;
	}
}

int zd_soft_peer_copy(struct zd_soft_peer *p, bool to_peer, const struct iovec *local_in,
		      int nlocal, const struct zd_soft_seg *remote, int nremote)
{
	struct iovec local[ZD_SOFT_MAX_SEGS + 1], riov[ZD_SOFT_MAX_SEGS + 1];
	uint8_t tail[ZD_SOFT_TAIL];
	uint32_t ntail = 0;
	size_t want = 0, rtotal = 0;
	bool mapped = true;
	ssize_t got;
	int nr = 0;

	if (nremote > ZD_SOFT_MAX_SEGS || nlocal > ZD_SOFT_MAX_SEGS || nlocal < 0)
		return -1;
	/* The common case: one local segment into (or from) the first remote
	 * one, which a pointer reaches: no iovecs. */
	if (ZD_LIKELY(nlocal == 1 && nremote >= 1 && local_in[0].iov_len != 0 &&
		      local_in[0].iov_len <= remote[0].len)) {
		size_t len = local_in[0].iov_len;
		void *ptr = zd_soft_peer_ptr_fast(p, remote[0].chunk, remote[0].addr, len);

		if (ZD_LIKELY(ptr != NULL)) {
			if (to_peer)
				zd_soft_copy_to_peer(ptr, local_in[0].iov_base, len);
			else
				memcpy(local_in[0].iov_base, ptr, len);
			return 0;
		}
	}
	for (int i = 0; i < nlocal; i++) {
		local[i] = local_in[i];
		want += local[i].iov_len;
	}
	if (want == 0)
		return 0;
	/* The peer's segments, cut at the local total. */
	for (int i = 0; i < nremote && rtotal < want; i++) {
		size_t len = ZD_MIN((size_t)remote[i].len, want - rtotal);
		void *ptr = mapped ? zd_soft_peer_ptr(p, remote[i].chunk, remote[i].addr, len) : NULL;

		mapped = ptr != NULL;
		riov[i].iov_base = ptr;
		riov[i].iov_len = len;
		rtotal += len;
		nr = i + 1;
	}
	if (rtotal < want)
		return -1;
	if (!mapped)
		for (int i = 0; i < nr; i++)
			riov[i].iov_base = (void *)(uintptr_t)remote[i].addr;
	if (to_peer) {
		/* The tail: the end of the last (non-empty) remote segment. */
		struct iovec *last = &riov[nr - 1];

		ntail = (uint32_t)ZD_MIN((size_t)ZD_SOFT_TAIL, last->iov_len);
		last->iov_len -= ntail;
		take_tail(local, &nlocal, tail, ntail);
		riov[nr].iov_base = (char *)last->iov_base + last->iov_len;
		riov[nr].iov_len = ntail;
	}
	if (mapped) {
		sg_copy(to_peer, local, nlocal, riov, nr);
		if (ntail)
			zd_soft_store_tail(riov[nr].iov_base, tail, ntail);
		return 0;
	}
	if (ntail) {
		/* The tail as the last iovec pair of the same call. */
		local[nlocal].iov_base = tail;
		local[nlocal].iov_len = ntail;
		nlocal++;
		nr++;
	}
	got = to_peer ? process_vm_writev(p->pid, local, (unsigned long)nlocal, riov,
					  (unsigned long)nr, 0)
		      : process_vm_readv(p->pid, local, (unsigned long)nlocal, riov,
					 (unsigned long)nr, 0);
	return got == (ssize_t)want ? 0 : got < 0 ? zd_soft_peer_xma_failed(p, errno) : -1;
}

int zd_soft_peer_xma_failed(struct zd_soft_peer *p, int err)
{
	if (err != EPERM && err != EACCES)
		return -1;
	if (!atomic_exchange_explicit(&p->xma_refused_said, true, memory_order_relaxed))
		zd_log_error("soft: process %d refuses us cross-memory attach (%s): its registered "
			     "memory outside zdapl's pool and whole adopted pages is unreachable "
			     "(ptrace rights: Yama ptrace_scope, a non-dumpable process, another "
			     "user); such RDMA and sends complete DAT_DTO_ERR_REMOTE_ACCESS. "
			     "Register zdapl_mem_alloc memory or whole pages there", (int)p->pid,
			     strerror(err));
	return -EACCES;
}
