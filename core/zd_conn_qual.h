/*
 * Connection qualifiers onto TCP ports.
 *
 * A DAT_CONN_QUAL is 64 bits (consumers pass process ids, 0xAffab1e,
 * hashes); a service point listens on a 16-bit TCP port.  Each qualifier
 * has ZD_QUAL_PROBES candidate ports, its probe sequence: a qualifier of
 * 1..65535 first tries the port of that number (what dtest and the OFED
 * socket CMs expect), then, like every other qualifier, ports drawn from a
 * 64-bit mix of (qualifier, probe) in ZD_QUAL_PORT_LO..ZD_QUAL_PORT_HI,
 * below Linux's default ephemeral range so they rarely meet the ports the
 * kernel hands to outgoing connections and dat_psp_create_any.
 *
 * A service point takes the first probe port it can bind that nobody
 * serving the same qualifier precedes (zd_cm_listen); the full qualifier
 * travels in every REQ, and a listener serving another one answers
 * REJ(NO_QUAL), so the requester walks the same sequence (zd_cm.c) and
 * never lands on a wrong service point.  Two service points with the same
 * qualifier on one address are DAT_CONN_QUAL_IN_USE, as are ZD_QUAL_PROBES
 * ports all taken.
 */
#ifndef ZD_CONN_QUAL_H
#define ZD_CONN_QUAL_H

#include <stdint.h>

#define ZD_QUAL_PROBES   8
#define ZD_QUAL_PORT_LO  1024u   /* unprivileged */
#define ZD_QUAL_PORT_HI  32767u  /* below ip_local_port_range's default */

/* The port of probe @probe (0..ZD_QUAL_PROBES-1) of @qual. */
static inline uint16_t zd_qual_port(uint64_t qual, unsigned probe)
{
	uint64_t x;

	if (probe == 0 && qual >= 1 && qual <= UINT16_MAX)
		return (uint16_t)qual;
	/* splitmix64's finalizer over (qual, probe): neighbouring qualifiers
	 * (dapltest's CONN_QUAL0 + w) land on unrelated ports. */
	x = qual + (uint64_t)(probe + 1) * 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	x ^= x >> 31;
	return (uint16_t)(ZD_QUAL_PORT_LO + x % (ZD_QUAL_PORT_HI - ZD_QUAL_PORT_LO + 1));
}

#endif /* ZD_CONN_QUAL_H */
