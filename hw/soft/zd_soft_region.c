/* Shared memfd regions of the software devices (zd_soft_region.h). */
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hw/soft/zd_soft_region.h"

int zd_soft_region_create(struct zd_soft_region *r, size_t size, const char *name)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	int e;

	size = (size + page - 1) & ~(page - 1);
	r->base = NULL;
	r->size = size;
	r->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (r->fd < 0)
		return -errno;
	if (ftruncate(r->fd, (off_t)size) != 0 ||
	    fcntl(r->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		goto err;
	r->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
	if (r->base == MAP_FAILED) {
		r->base = NULL;
		goto err;
	}
	return 0;
err:
	e = errno;
	close(r->fd);
	r->fd = -1;
	return -e;
}

void zd_soft_region_destroy(struct zd_soft_region *r)
{
	if (r->base)
		munmap(r->base, r->size);
	if (r->fd >= 0)
		close(r->fd);
	r->base = NULL;
	r->fd = -1;
}

int zd_soft_region_map_peer(struct zd_soft_region *r, int pidfd, int fd, size_t size)
{
	return zd_soft_region_map_peer_at(r, pidfd, fd, 0, size);
}

int zd_soft_region_map_peer_at(struct zd_soft_region *r, int pidfd, int fd, uint64_t off,
			       size_t size)
{
	struct stat st;
	int local, seals;

	r->base = NULL;
	r->fd = -1;
	r->size = size;
	if (fd < 0 || size == 0)
		return -EINVAL;
	/* pidfd < 0: the peer is this very process, the fd is ours already
	 * (and tools without pidfd_getfd, valgrind 3.19, still work). */
	local = pidfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0)
			   : fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (local < 0)
		return -errno;
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
	if (r->base)
		munmap(r->base, r->size);
	r->base = NULL;
}
