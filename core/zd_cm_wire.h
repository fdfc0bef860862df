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

#include "core/zd_device.h"

#define ZD_CM_MAGIC   0x5a44434du  /* "ZDCM" */
#define ZD_CM_VERSION 1

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
	ZD_CM_MSG_TYPE_END
};

enum zd_cm_rej_reason {
	ZD_CM_REJ_PEER = 1,      /* the consumer called dat_cr_reject */
	ZD_CM_REJ_NON_PEER,      /* no service point, backlog full, transport failure */
};

struct zd_cm_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t type;            /* enum zd_cm_msg_type */
	uint16_t reason;         /* REJ: enum zd_cm_rej_reason; 0 otherwise */
	uint16_t pdata_len;
	uint16_t blob_len;
	uint32_t conn_qual;      /* REQ: the service point asked for */
};
_Static_assert(sizeof(struct zd_cm_hdr) == 16, "wire header must stay 16 bytes");

#define ZD_CM_FRAME_MAX (sizeof(struct zd_cm_hdr) + ZD_CM_PDATA_MAX + ZD_QP_BLOB_MAX)

static inline size_t zd_cm_frame_encode(void *buf, enum zd_cm_msg_type type, uint16_t reason,
					uint32_t conn_qual, const void *pdata, size_t pdata_len,
					const void *blob, size_t blob_len)
{
	struct zd_cm_hdr h = {
		.magic = htonl(ZD_CM_MAGIC),
		.version = ZD_CM_VERSION,
		.type = (uint8_t)type,
		.reason = htons(reason),
		.pdata_len = htons((uint16_t)pdata_len),
		.blob_len = htons((uint16_t)blob_len),
		.conn_qual = htonl(conn_qual),
	};
	uint8_t *p = buf;

	memcpy(p, &h, sizeof(h));
	if (pdata_len)
		memcpy(p + sizeof(h), pdata, pdata_len);
	if (blob_len)
		memcpy(p + sizeof(h) + pdata_len, blob, blob_len);
	return sizeof(h) + pdata_len + blob_len;
}

/* Decodes and validates a received header in place (host order).  Returns
 * the body length that follows, or -1 if the frame is not ours or breaks a
 * rule: only REQ, REP and REJ carry private data, only REQ and REP a blob. */
static inline int zd_cm_hdr_decode(struct zd_cm_hdr *h)
{
	h->magic = ntohl(h->magic);
	h->reason = ntohs(h->reason);
	h->pdata_len = ntohs(h->pdata_len);
	h->blob_len = ntohs(h->blob_len);
	h->conn_qual = ntohl(h->conn_qual);
	if (h->magic != ZD_CM_MAGIC || h->version != ZD_CM_VERSION ||
	    h->type < ZD_CM_MSG_REQ || h->type >= ZD_CM_MSG_TYPE_END ||
	    h->pdata_len > ZD_CM_PDATA_MAX || h->blob_len > ZD_QP_BLOB_MAX)
		return -1;
	switch (h->type) {
	case ZD_CM_MSG_REQ:
	case ZD_CM_MSG_REP:
		if (h->reason)
			return -1;
		break;
	case ZD_CM_MSG_REJ:
		if (h->blob_len || (h->reason != ZD_CM_REJ_PEER && h->reason != ZD_CM_REJ_NON_PEER))
			return -1;
		break;
	default:
		if (h->reason || h->pdata_len || h->blob_len)
			return -1;
		break;
	}
	return (int)(h->pdata_len + h->blob_len);
}

#endif /* ZD_CM_WIRE_H */
