/*
 * The tcp suites reach behind the device for its sockets (one TCP
 * connection per connected QP: the CM's, which the data rides since wire
 * version 3, zd_tcp_wire.h) to break them on purpose: shut one down, or
 * write a malformed frame into it.
 */
#ifndef TCP_SOCKETS_H
#define TCP_SOCKETS_H

#include <dirent.h>
#include <stdlib.h>

#include "cm_test.h"

/* The connected TCP sockets of this process (each carries one connected
 * QP; @cm_port, the CM's, is no longer told apart).  Returns how many
 * were found (into @fds). */
static inline int data_sockets(uint16_t cm_port, int *fds, int max)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	CHK(d);
	while ((e = readdir(d)) != NULL && n < max) {
		int fd = atoi(e->d_name), type = 0;
		socklen_t l = sizeof(type);
		struct sockaddr_in sa;
		socklen_t sl = sizeof(sa);

		if (fd <= 2 || getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) != 0 ||
		    type != SOCK_STREAM || getpeername(fd, (struct sockaddr *)&sa, &sl) != 0 ||
		    sa.sin_family != AF_INET)
			continue;
		(void)cm_port;
		fds[n++] = fd;
	}
	closedir(d);
	return n;
}

/* The data socket that is not among the @nb of @before (data_sockets
 * before the QP connected); -1 if none. */
static inline int data_socket_added(uint16_t cm_port, const int *before, int nb)
{
	int after[16], na = data_sockets(cm_port, after, 16);

	for (int i = 0; i < na; i++) {
		int seen = 0;

		for (int j = 0; j < nb; j++)
			seen |= before[j] == after[i];
		if (!seen)
			return after[i];
	}
	return -1;
}

#endif
