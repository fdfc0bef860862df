#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <string.h>
#include <arpa/inet.h>

#include "core/zd_ia.h"
#include "core/zd_netaddr.h"

DAT_RETURN zd_netaddr_resolve(const char *spec, struct sockaddr_in *out)
{
	struct ifaddrs *ifs, *i;
	struct in_addr want;
	int by_addr = spec && spec[0] && inet_pton(AF_INET, spec, &want) == 1;
	int found = 0;

	memset(out, 0, sizeof(*out));
	out->sin_family = AF_INET;
	/* getifaddrs needs a netlink socket and memory, nothing else. */
	if (getifaddrs(&ifs) != 0) {
		zd_log_error("cannot list network interfaces: %s", strerror(errno));
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES,
				 errno == ENOMEM ? DAT_RESOURCE_MEMORY : DAT_RESOURCE_DEVICE);
	}
	for (i = ifs; i && !found; i = i->ifa_next) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)i->ifa_addr;

		if (!sin || sin->sin_family != AF_INET || !(i->ifa_flags & IFF_UP))
			continue;
		if (by_addr)
			found = sin->sin_addr.s_addr == want.s_addr;
		else if (spec && spec[0])
			found = strcmp(i->ifa_name, spec) == 0;
		else
			found = !(i->ifa_flags & IFF_LOOPBACK);
		if (found)
			out->sin_addr = sin->sin_addr;
	}
	freeifaddrs(ifs);
	if (found)
		return DAT_SUCCESS;
	if (!spec || !spec[0]) {
		out->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		return DAT_SUCCESS;
	}
	zd_log_error("\"%s\" is neither an interface with an IPv4 address that is up "
		     "nor an IPv4 address of this host", spec);
	return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
}
