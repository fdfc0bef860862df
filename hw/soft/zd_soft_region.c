/* Shared memfd regions of the software devices (zd_soft_region.h). */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/zd_log.h"
#include "hw/soft/zd_soft_fdx.h"
#include "hw/soft/zd_soft_region.h"

int zd_soft_region_create(struct zd_soft_region *r, size_t size, const char *name)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	const char *step = "memfd_create";
	int e;

	size = (size + page - 1) & ~(page - 1);
	r->base = NULL;
	r->size = size;
	r->borrowed = false;
	r->off = 0;
	r->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (r->fd < 0)
		goto err;
	step = "ftruncate";
	if (ftruncate(r->fd, (off_t)size) != 0)
		goto err;
	step = "F_ADD_SEALS";
	if (fcntl(r->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		goto err;
	step = "mmap";
	r->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
	if (r->base == MAP_FAILED) {
		r->base = NULL;
		goto err;
	}
	/* Peers obtain it from us (they map it: that is what it is for). */
	if ((e = zd_soft_fdx_offer(r->fd)) != 0) {
		munmap(r->base, size);
		r->base = NULL;
		close(r->fd);
		r->fd = -1;
		return e;
	}
	return 0;
err:
	e = errno;
	/* Out of descriptors, memfd size or address space: the object that
	 * needed the region fails with DAT_INSUFFICIENT_RESOURCES. */
	zd_log_rate_limited("no shared memory for %s (%zu bytes): %s: %s", name, size, step,
			    strerror(e));
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	return -e;
}

void zd_soft_region_destroy(struct zd_soft_region *r)
{
	if (r->base && !r->borrowed)
		munmap(r->base, r->size);
	if (r->fd >= 0) {
		zd_soft_fdx_withdraw(r->fd);
		close(r->fd);
	}
	r->base = NULL;
	r->fd = -1;
}

int zd_soft_region_map_peer(struct zd_soft_region *r, pid_t pid, int fd, size_t size)
{
	return zd_soft_region_map_peer_at(r, pid, fd, 0, size);
}

int zd_soft_region_carve(struct zd_soft_region *r, const struct zd_soft_region *whole,
			 uint64_t off, uint64_t size)
{
	r->base = NULL;
	r->fd = -1;
	r->size = 0;
	if (!whole->base || size == 0 || off > whole->size || size > whole->size - off)
		return -EINVAL;
	r->base = (char *)whole->base + off;
	r->size = (size_t)size;
	r->off = off;
	r->borrowed = true;
	return 0;
}

int zd_soft_region_map_peer_at(struct zd_soft_region *r, pid_t pid, int fd, uint64_t off,
			       size_t size)
{
	struct stat st;
	int local, seals;

	r->base = NULL;
	r->fd = -1;
	r->size = size;
	r->borrowed = false;
	r->off = 0;
	if (fd < 0 || size == 0)
		return -EINVAL;
	/* The peer hands it over (no ptrace rights needed); this very
	 * process duplicates its own. */
	local = zd_soft_fdx_get(pid, fd);
	if (local < 0)
		return local;
	/* A region the peer could shrink would SIGBUS us: insist on seals. */
	seals = fcntl(local, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(local, &st) != 0 ||
	    (uint64_t)st.st_size < off || (uint64_t)st.st_size - off < size) {
		close(local);
		return -EINVAL;
	}
	/* NORESERVE: an adoption window spans mostly holes. */
	r->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, local,
		       (off_t)off);
	close(local);
	if (r->base == MAP_FAILED) {
		r->base = NULL;
		return -ENOMEM;
	}
	/* A fork() child must not write into a peer behind our back. */
	madvise(r->base, size, MADV_DONTFORK);
	return 0;
}

void zd_soft_region_unmap(struct zd_soft_region *r)
{
	if (r->base && !r->borrowed)
		munmap(r->base, r->size);
	r->base = NULL;
}
