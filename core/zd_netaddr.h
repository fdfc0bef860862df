/* IPv4 addresses of this host, for the IA address of the soft devices. */
#ifndef ZD_NETADDR_H
#define ZD_NETADDR_H

#include <netinet/in.h>
#include <dat2/udat.h>

/* Resolves @spec (an interface name or an IPv4 address assigned to this
 * host; NULL or "" = the first non-loopback IPv4 address that is up, else
 * 127.0.0.1) into @out.  DAT_SUCCESS, or after one clear line on stderr
 * DAT_INVALID_PARAMETER/ARG1 (no such interface or address) or
 * DAT_INSUFFICIENT_RESOURCES (the interfaces cannot be listed: no
 * descriptor or memory left). */
DAT_RETURN zd_netaddr_resolve(const char *spec, struct sockaddr_in *out);

#endif
