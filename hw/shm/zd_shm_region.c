/*
 * Shared regions of the shm device: unnamed memfds (0600 by construction,
 * never linked in /dev/shm), sealed so no side can shrink them under the
 * other's mapping, and their mappings in a peer through pidfd_getfd.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hw/shm/zd_shm.h"

int zd_shm_region_create(struct zd_shm_region *r, size_t size, const char *name)
{
	long page = sysconf(_SC_PAGESIZE);

	size = (size + (size_t)page - 1) & ~((size_t)page - 1);
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
	{
		int e = errno;
		close(r->fd);
		r->fd = -1;
		return -e;
	}
}

void zd_shm_region_destroy(struct zd_shm_region *r)
{
	if (r->base)
		munmap(r->base, r->size);
	if (r->fd >= 0)
		close(r->fd);
	r->base = NULL;
	r->fd = -1;
}

int zd_shm_region_map_remote(struct zd_shm_region *r, int pidfd, int fd, size_t size)
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
	    (uint64_t)st.st_size < size) {
		close(local);
		return -EINVAL;
	}
	r->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, local, 0);
	close(local);
	if (r->base == MAP_FAILED) {
		r->base = NULL;
		return -ENOMEM;
	}
	return 0;
}

void zd_shm_region_unmap(struct zd_shm_region *r)
{
	if (r->base)
		munmap(r->base, r->size);
	r->base = NULL;
}
