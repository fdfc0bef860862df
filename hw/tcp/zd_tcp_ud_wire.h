/*
 * Wire format of zdapl-tcp's unreliable datagrams (zd_tcp_ud.c), version 1.
 *
 * A UD QP is one UDP socket bound to the IA address (port chosen by the
 * kernel).  Its address, which qp_local_blob hands the CM for the peer,
 * is struct zd_tcp_ud_blob: IPv4 address and UDP port of that socket, the
 * QP's number (unique in its process, for DAT_IB_ADDR_HANDLE.qpn) and a
 * random 64-bit key drawn when the QP was created.
 *
 * One UD send is one UDP datagram: struct zd_tcp_ud_hdr, then the payload.
 * The header names the destination QP (number and key) so that a datagram
 * for a QP that was freed, whose port a newer QP of the host now holds, or
 * one from a sender that never saw the QP's blob, is dropped and counted,
 * never delivered; its len must be the rest of the datagram.  Multi-byte
 * fields are little-endian, except the address and port of the blob
 * (network order, as in a sockaddr_in).
 *
 * The largest payload is what one UDP/IPv4 datagram carries after our
 * header (ZD_TCP_UD_MAX_PAYLOAD): the transport's own limit, far above an
 * InfiniBand MTU, so any consumer sizing messages for IB fits.  On links
 * with a smaller MTU the kernel fragments the datagram; losing one
 * fragment loses the datagram, as UD allows.
 */
#ifndef ZD_TCP_UD_WIRE_H
#define ZD_TCP_UD_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>

#define ZD_TCP_UD_MAGIC       0x4455445au  /* "ZDUD" little-endian */
#define ZD_TCP_UD_BLOB_MAGIC  0x4c424455u  /* "UDBL" */
#define ZD_TCP_UD_VERSION     1
#define ZD_TCP_UD_OP_DATAGRAM 1

struct zd_tcp_ud_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t op;          /* ZD_TCP_UD_OP_DATAGRAM */
	uint16_t reserved;   /* 0 */
	uint32_t dst_qpn;    /* the receiving QP's number ... */
	uint32_t len;        /* payload bytes after the header */
	uint64_t dst_key;    /* ... and key, from its blob */
} __attribute__((packed));
_Static_assert(sizeof(struct zd_tcp_ud_hdr) == 24, "UD header is 24 bytes");

/* IPv4 max datagram 65535 - IP header 20 - UDP header 8 - ours. */
#define ZD_TCP_UD_MAX_PAYLOAD (65535u - 20u - 8u - (uint32_t)sizeof(struct zd_tcp_ud_hdr))

/* What qp_local_blob of a UD QP hands the CM for the peer. */
struct zd_tcp_ud_blob {
	uint32_t magic;      /* ZD_TCP_UD_BLOB_MAGIC */
	uint16_t version;
	uint16_t port;       /* network order */
	uint32_t addr;       /* IPv4, network order */
	uint32_t qpn;
	uint64_t key;
} __attribute__((packed));
_Static_assert(sizeof(struct zd_tcp_ud_blob) == 24, "UD blob is 24 bytes");

/* An address handle: where a peer's blob says to send. */
struct zd_tcp_ud_ah {
	struct sockaddr_in sa;
	uint32_t qpn;
	uint32_t pad;
	uint64_t key;
};

/* ---- validation (zd_tcp_ud_wire.c): pure functions, no I/O ----
 * The receive path and tests/fuzz run the same checks. */

/* Parses a peer's blob (@len bytes, straight off the network) into @ah;
 * false if it is not a usable UD address (size, magic, version, address
 * 0, port 0). */
bool zd_tcp_ud_blob_parse(const void *blob, size_t len, struct zd_tcp_ud_ah *ah);

enum zd_tcp_ud_verdict {
	ZD_TCP_UD_OK = 0,
	ZD_TCP_UD_SHORT,         /* shorter than the header */
	ZD_TCP_UD_BAD_MAGIC,
	ZD_TCP_UD_BAD_VERSION,
	ZD_TCP_UD_BAD_OP,        /* unknown op or reserved bits set */
	ZD_TCP_UD_BAD_LEN,       /* len is not the rest of the datagram */
	ZD_TCP_UD_NOT_OURS,      /* another QP's number or key: stale or forged */
	ZD_TCP_UD_VERDICT_END
};

/* Checks the header @h of a datagram of @dgram_len bytes (wire order, as
 * received) for the QP @qpn with @key. */
enum zd_tcp_ud_verdict zd_tcp_ud_check(const struct zd_tcp_ud_hdr *h, uint64_t dgram_len,
				       uint32_t qpn, uint64_t key);
const char *zd_tcp_ud_verdict_str(enum zd_tcp_ud_verdict v);

#endif /* ZD_TCP_UD_WIRE_H */
