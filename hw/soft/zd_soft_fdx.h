/*
 * Descriptor exchange of the software devices: how a peer process obtains
 * the memfds it maps (an IA's arena, the pool's chunks, the adoption
 * file, a NIC model's region) without ptrace rights over us.
 *
 * Every process that offers memfds serves them on an abstract UNIX socket
 * named after its pid ("zdapl-fdx.<pid>", no file anywhere), from one
 * thread that sleeps in accept() and costs nothing while nobody asks.  A
 * peer connects, names the fd by its number in our process (the number
 * our shared tables and connection blobs carry), and receives a duplicate
 * with SCM_RIGHTS.  pidfd_getfd would need PTRACE_MODE_ATTACH over us,
 * which Yama ptrace_scope 1-3, a non-dumpable process or a container
 * without CAP_SYS_PTRACE refuse between unrelated processes.
 *
 * Only fds offered here are handed out (never any other descriptor of
 * ours), and only to a process of our effective uid, or of a uid listed in
 * ZDAPL_PEER_UIDS ("<uid>[,<uid>...]" or "any": the consumer's opt-in to
 * let other users' processes map our shared memory).  The asker checks
 * that the socket's owner is the pid it meant (SO_PEERCRED).  Both sides
 * must share a network namespace (abstract sockets live there).
 *
 * Control path only (system calls); any thread.  A stopped or hung
 * server costs an asker at most ZD_SOFT_FDX_TIMEOUT_MS.
 */
#ifndef ZD_SOFT_FDX_H
#define ZD_SOFT_FDX_H

#include <stdbool.h>
#include <sys/types.h>

#define ZD_SOFT_FDX_TIMEOUT_MS 2000

/* Lets peers ask for @fd (counted: offers of one fd nest); starts the
 * server on the first offer.  0 or -errno (the server could not start). */
int zd_soft_fdx_offer(int fd);
/* Takes one offer of @fd back (before the fd is closed). */
void zd_soft_fdx_withdraw(int fd);

/* A duplicate of process @pid's offered fd @fd, close-on-exec, or -errno:
 * -EACCES (its owner refuses our uid), -EBADF (not offered), -ECONNREFUSED
 * or -ENOENT-like errors (no server: gone, or another network namespace),
 * -ETIMEDOUT (it did not answer).  @pid our own: a local duplicate. */
int zd_soft_fdx_get(pid_t pid, int fd);

/* Whether a process of uid @uid may ask us for fds (our policy). */
bool zd_soft_fdx_uid_allowed(uid_t uid);

#endif /* ZD_SOFT_FDX_H */
