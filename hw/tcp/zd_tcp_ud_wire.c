/*
 * Validation of zdapl-tcp UD blobs and datagram headers (format:
 * zd_tcp_ud_wire.h).  Pure functions, so that zd_tcp_ud.c and the fuzzer
 * (tests/fuzz) run the very same checks.
 */
#include <endian.h>
#include <string.h>

#include "hw/tcp/zd_tcp_ud_wire.h"

bool zd_tcp_ud_blob_parse(const void *blob, size_t len, struct zd_tcp_ud_ah *ah)
{
	struct zd_tcp_ud_blob b;

	if (!blob || len != sizeof(b))
		return false;
	memcpy(&b, blob, sizeof(b));
	if (le32toh(b.magic) != ZD_TCP_UD_BLOB_MAGIC || le16toh(b.version) != ZD_TCP_UD_VERSION ||
	    b.addr == 0 || b.port == 0)
		return false;
	memset(ah, 0, sizeof(*ah));
	ah->sa.sin_family = AF_INET;
	ah->sa.sin_addr.s_addr = b.addr;
	ah->sa.sin_port = b.port;
	ah->qpn = le32toh(b.qpn);
	ah->key = le64toh(b.key);
	return true;
}

enum zd_tcp_ud_verdict zd_tcp_ud_check(const struct zd_tcp_ud_hdr *h, uint64_t dgram_len,
				       uint32_t qpn, uint64_t key)
{
	if (dgram_len < sizeof(*h))
		return ZD_TCP_UD_SHORT;
	if (le32toh(h->magic) != ZD_TCP_UD_MAGIC)
		return ZD_TCP_UD_BAD_MAGIC;
	if (h->version != ZD_TCP_UD_VERSION)
		return ZD_TCP_UD_BAD_VERSION;
	if (h->op != ZD_TCP_UD_OP_DATAGRAM || h->reserved != 0)
		return ZD_TCP_UD_BAD_OP;
	if ((uint64_t)le32toh(h->len) != dgram_len - sizeof(*h))
		return ZD_TCP_UD_BAD_LEN;
	if (le32toh(h->dst_qpn) != qpn || le64toh(h->dst_key) != key)
		return ZD_TCP_UD_NOT_OURS;
	return ZD_TCP_UD_OK;
}

const char *zd_tcp_ud_verdict_str(enum zd_tcp_ud_verdict v)
{
	static const char *const s[ZD_TCP_UD_VERDICT_END] = {
		[ZD_TCP_UD_OK] = "ok",
		[ZD_TCP_UD_SHORT] = "shorter than a header",
		[ZD_TCP_UD_BAD_MAGIC] = "bad magic",
		[ZD_TCP_UD_BAD_VERSION] = "other protocol version",
		[ZD_TCP_UD_BAD_OP] = "bad op",
		[ZD_TCP_UD_BAD_LEN] = "length field is not the datagram's",
		[ZD_TCP_UD_NOT_OURS] = "for another QP (freed, or never ours)",
	};

	return (unsigned)v < ZD_TCP_UD_VERDICT_END ? s[v] : "?";
}
