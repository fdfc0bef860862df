/*
 * Shared regions of the software devices: unnamed memfds (0600 by
 * construction, never linked in /dev/shm, gone when the last fd and mapping
 * go, so a killed process leaves nothing behind), sealed against resizing
 * so no side can shrink one under the other's mapping (SIGBUS), and their
 * mappings in a peer process, which obtains the fd from us over a UNIX
 * socket (zd_soft_fdx.h: every region we create is offered there).
 *
 * Control path only: every call here is a system call or several.
 */
#ifndef ZD_SOFT_REGION_H
#define ZD_SOFT_REGION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct zd_soft_region {
	void *base;
	size_t size;
	int fd;       /* ours (created), or -1 (a peer's, mapped; or carved) */
	/* Inside a mapping someone else holds (an arena's, ours or a peer's:
	 * zd_soft_arena.h) at offset @off: never unmapped by itself. */
	bool borrowed;
	uint64_t off;
};

/* A fresh zero-filled region of at least @size bytes (rounded up to pages),
 * mapped read-write; 0 or -errno. */
int zd_soft_region_create(struct zd_soft_region *r, size_t size, const char *name);
void zd_soft_region_destroy(struct zd_soft_region *r);

/* Maps @size bytes of the peer's memfd @fd (its number in process @pid,
 * which may be this one), obtained through zd_soft_fdx_get.  Refuses a
 * region that is not sealed against shrinking or is smaller than @size.
 * The mapping is not inherited by fork() children (MADV_DONTFORK).  0 or
 * -errno (-EACCES: the peer's policy refuses our uid). */
int zd_soft_region_map_peer(struct zd_soft_region *r, pid_t pid, int fd, size_t size);
/* The same for @size bytes at file offset @off (page-aligned). */
int zd_soft_region_map_peer_at(struct zd_soft_region *r, pid_t pid, int fd, uint64_t off,
			       size_t size);
/* @size bytes at @off of the mapping @whole (a peer's arena we mapped):
 * @r borrowed; -EINVAL if they do not lie inside it. */
int zd_soft_region_carve(struct zd_soft_region *r, const struct zd_soft_region *whole,
			 uint64_t off, uint64_t size);
void zd_soft_region_unmap(struct zd_soft_region *r);

#endif /* ZD_SOFT_REGION_H */
