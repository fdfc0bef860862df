/*
 * The connection manager's wire protocol: small versioned frames over one
 * TCP connection per DAT connection.  The socket stays open while the DAT
 * connection lives, so its EOF is how a peer's death is seen.
 *
 *   active                       passive
 *   REQ(pdata, qp blob)  ---->                  CONNECTION_REQUEST_EVENT
 *                       <----  REP(pdata, blob)  dat_cr_accept
 *   ESTABLISHED, RTU     ---->                  ESTABLISHED
 *                       <----  REJ(reason, pdata) dat_cr_reject / no SP
 *   DISC                 ---->                  DISCONNECTED
 *   DISCONNECTED        <----  DISC_ACK
 *
 * A UD EP's dat_ep_connect sends UD_REQ instead of REQ; REP and RTU then
 * only exchange the UD QPs' addresses and the socket closes (zd_ud_cm.c).
 *
 * Connection qualifiers are 64 bits and travel whole; the port a service
 * point listens on is one of its qualifier's probe ports (zd_conn_qual.h).
 * A listener that does not serve the qualifier asked for answers
 * REJ(NO_QUAL) and the requester tries the next probe port.  QUERY asks a
 * listener whether it serves a qualifier (REJ(QUAL_HERE) or REJ(NO_QUAL)),
 * for a process about to listen on a later probe port of the same one.
 * A service point that takes a REQ answers MRA at once (IB CM's "message
 * received"), before its consumer decides: a requester with later probe
 * ports left moves on when no MRA comes (a silent listener of another
 * program holds the port).
 *
 * Once established, each side's CM sends PING when its peer process
 * has been silent for a while, and answers a PING with PONG
 * (zd_cm_liveness.h): a stopped peer's connections break in bounded time.
 *
 * Every field is in network byte order.  A frame is a fixed header followed
 * by pdata_len bytes of private data and blob_len bytes of device QP blob;
 * both lengths are checked against the maxima before any byte of the body
 * is read, and a bad frame breaks only the connection it came on.
 */
#ifndef ZD_CM_WIRE_H
#define ZD_CM_WIRE_H

#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <endian.h>

#include "core/zd_device.h"

#define ZD_CM_MAGIC   0x5a44434du  /* "ZDCM" */
#define ZD_CM_VERSION 3  /* 2: 64-bit conn_qual, QUERY; 3: PING/PONG, sender id in REP/RTU */

/* Largest private data any device may advertise; the wire and the buffers
 * in the CR and EP objects are sized for it. */
#define ZD_CM_PDATA_MAX 512

enum zd_cm_msg_type {
	ZD_CM_MSG_REQ = 1,       /* connection request: pdata, blob, conn_qual */
	ZD_CM_MSG_REP,           /* accept: pdata, blob */
	ZD_CM_MSG_RTU,           /* ready to use: the active side is connected */
	ZD_CM_MSG_REJ,           /* reject: reason, pdata */
	ZD_CM_MSG_DISC,          /* disconnect request */
	ZD_CM_MSG_DISC_ACK,      /* disconnect acknowledged: the socket closes next */
	ZD_CM_MSG_UD_REQ,        /* REQ from a UD QP (zd_ud_cm.c): an address exchange */
	ZD_CM_MSG_QUERY,         /* do you serve conn_qual? (answered by a REJ) */
	ZD_CM_MSG_MRA,           /* REQ received by its service point; REP or REJ follow */
	ZD_CM_MSG_PING,          /* are you alive? (zd_cm_liveness.h) */
	ZD_CM_MSG_PONG,          /* PING's answer */
	ZD_CM_MSG_TYPE_END
};

enum zd_cm_rej_reason {
	ZD_CM_REJ_PEER = 1,      /* the consumer called dat_cr_reject */
	ZD_CM_REJ_NON_PEER,      /* no service point, backlog full, transport failure */
	ZD_CM_REJ_NO_QUAL,       /* nothing here serves that conn_qual: try the next port */
	ZD_CM_REJ_QUAL_HERE,     /* QUERY's answer: this listener serves it */
};

struct zd_cm_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t type;            /* enum zd_cm_msg_type */
	uint16_t reason;         /* REJ: enum zd_cm_rej_reason; 0 otherwise */
	uint16_t pdata_len;
	uint16_t blob_len;
	uint32_t zero;           /* reserved, 0 (frames stay canonical) */
	/* REQ, QUERY: the service point asked for; REP, RTU, PING, PONG: the
	 * sender's CM instance id (zd_cm_liveness.h); others: ignored. */
	uint64_t conn_qual;
};
_Static_assert(sizeof(struct zd_cm_hdr) == 24, "wire header must stay 24 bytes");

#define ZD_CM_FRAME_MAX (sizeof(struct zd_cm_hdr) + ZD_CM_PDATA_MAX + ZD_QP_BLOB_MAX)

static inline size_t zd_cm_frame_encode(void *buf, enum zd_cm_msg_type type, uint16_t reason,
					uint64_t conn_qual, const void *pdata, size_t pdata_len,
					const void *blob, size_t blob_len)
{
	struct zd_cm_hdr h = {
		.magic = htonl(ZD_CM_MAGIC),
		.version = ZD_CM_VERSION,
		.type = (uint8_t)type,
		.reason = htons(reason),
		.pdata_len = htons((uint16_t)pdata_len),
		.blob_len = htons((uint16_t)blob_len),
		.conn_qual = htobe64(conn_qual),
	};
	uint8_t *p = buf;

	memcpy(p, &h, sizeof(h));
	if (pdata_len)
		memcpy(p + sizeof(h), pdata, pdata_len);
	if (blob_len)
		memcpy(p + sizeof(h) + pdata_len, blob, blob_len);
	return sizeof(h) + pdata_len + blob_len;
}

/* ---- decoding: everything zd_cm.c accepts from a socket goes through
 * zd_cm_frame_decode (the fuzzer in tests/fuzz drives it too) ---- */

enum zd_cm_frame_status {
	ZD_CM_FRAME_OK = 0,
	ZD_CM_FRAME_SHORT,       /* incomplete: the frame needs msg.len bytes in all */
	ZD_CM_FRAME_BAD_MAGIC,   /* not our protocol */
	ZD_CM_FRAME_BAD_VERSION,
	ZD_CM_FRAME_BAD_TYPE,
	ZD_CM_FRAME_TOO_LONG,    /* private data or blob over its maximum */
	ZD_CM_FRAME_BAD_FIELD,   /* a field its type does not carry, an unknown reason */
};

/* A decoded frame; pdata and blob point into the buffer decoded. */
struct zd_cm_msg {
	struct zd_cm_hdr hdr;    /* host order */
	const uint8_t *pdata;    /* hdr.pdata_len bytes (<= ZD_CM_PDATA_MAX) */
	const uint8_t *blob;     /* hdr.blob_len bytes (<= ZD_QP_BLOB_MAX) */
	size_t len;              /* bytes of the frame, <= ZD_CM_FRAME_MAX */
};

/* Decodes a received header in place (host order) and checks it: only
 * REQ, REP and REJ carry private data, only REQ and REP a blob, only REJ a
 * reason (one of enum zd_cm_rej_reason). */
static inline enum zd_cm_frame_status zd_cm_hdr_check(struct zd_cm_hdr *h)
{
	h->magic = ntohl(h->magic);
	h->reason = ntohs(h->reason);
	h->pdata_len = ntohs(h->pdata_len);
	h->blob_len = ntohs(h->blob_len);
	h->conn_qual = be64toh(h->conn_qual);
	if (h->magic != ZD_CM_MAGIC)
		return ZD_CM_FRAME_BAD_MAGIC;
	if (h->version != ZD_CM_VERSION)
		return ZD_CM_FRAME_BAD_VERSION;
	if (h->type < ZD_CM_MSG_REQ || h->type >= ZD_CM_MSG_TYPE_END)
		return ZD_CM_FRAME_BAD_TYPE;
	if (h->pdata_len > ZD_CM_PDATA_MAX || h->blob_len > ZD_QP_BLOB_MAX)
		return ZD_CM_FRAME_TOO_LONG;
	if (h->zero)
		return ZD_CM_FRAME_BAD_FIELD;
	switch (h->type) {
	case ZD_CM_MSG_REQ:
	case ZD_CM_MSG_UD_REQ:
	case ZD_CM_MSG_REP:
		if (h->reason)
			return ZD_CM_FRAME_BAD_FIELD;
		break;
	case ZD_CM_MSG_REJ:
		if (h->blob_len || h->reason < ZD_CM_REJ_PEER || h->reason > ZD_CM_REJ_QUAL_HERE)
			return ZD_CM_FRAME_BAD_FIELD;
		break;
	default:
		if (h->reason || h->pdata_len || h->blob_len)
			return ZD_CM_FRAME_BAD_FIELD;
		break;
	}
	return ZD_CM_FRAME_OK;
}

/* As zd_cm_hdr_check; returns the body length that follows, or -1. */
static inline int zd_cm_hdr_decode(struct zd_cm_hdr *h)
{
	if (zd_cm_hdr_check(h) != ZD_CM_FRAME_OK)
		return -1;
	return (int)(h->pdata_len + h->blob_len);
}

/* Decodes the frame at the start of @buf, of which @len bytes arrived.
 * SHORT: m->len says how many bytes the frame needs in all (the header
 * first, then exactly the body it names, so a reader never takes a byte
 * of the next frame); the header is checked as soon as it is complete, so
 * m->len never exceeds ZD_CM_FRAME_MAX.  OK: m is the frame (the bytes
 * past m->len are not part of it). */
static inline enum zd_cm_frame_status zd_cm_frame_decode(const void *buf, size_t len,
							 struct zd_cm_msg *m)
{
	const uint8_t *p = buf;
	enum zd_cm_frame_status st;

	m->pdata = m->blob = NULL;
	m->len = sizeof(m->hdr);
	if (len < sizeof(m->hdr))
		return ZD_CM_FRAME_SHORT;
	memcpy(&m->hdr, p, sizeof(m->hdr));
	st = zd_cm_hdr_check(&m->hdr);
	if (st != ZD_CM_FRAME_OK)
		return st;
	m->len = sizeof(m->hdr) + (size_t)m->hdr.pdata_len + m->hdr.blob_len;
	if (len < m->len)
		return ZD_CM_FRAME_SHORT;
	m->pdata = p + sizeof(m->hdr);
	m->blob = m->pdata + m->hdr.pdata_len;
	return ZD_CM_FRAME_OK;
}

#endif /* ZD_CM_WIRE_H */
