/*
 * Validation of received zdapl-tcp frames (protocol: zd_tcp_wire.h).
 * Pure functions of the header and the receiver's expectations, so that
 * rx_dispatch() and the fuzzer (tests/fuzz) run the very same checks.
 */
#include <endian.h>

#include "hw/tcp/zd_tcp_wire.h"

enum zd_tcp_frame_verdict zd_tcp_frame_check(const struct zd_tcp_hdr *h,
					     const struct zd_tcp_wire_limits *lim)
{
	uint32_t len = le32toh(h->len);

	if (le32toh(h->magic) != ZD_TCP_WIRE_MAGIC)
		return ZD_TCP_FRAME_BAD_MAGIC;
	if (h->version != ZD_TCP_WIRE_VERSION)
		return ZD_TCP_FRAME_BAD_VERSION;
	if (h->op == 0 || h->op > ZD_TCP_OP_MAX)
		return ZD_TCP_FRAME_BAD_OP;
	if (len > lim->max_payload)
		return ZD_TCP_FRAME_TOO_LONG;
	if (!lim->hello_rcvd) {
		/* Only a HELLO proves the peer saw our blob. */
		if (h->op != ZD_TCP_OP_HELLO)
			return ZD_TCP_FRAME_NO_HELLO;
		if (len != 0)
			return ZD_TCP_FRAME_BAD_LEN;
		if (le64toh(h->value) != lim->token)
			return ZD_TCP_FRAME_BAD_TOKEN;
		return ZD_TCP_FRAME_OK;
	}
	switch (h->op) {
	case ZD_TCP_OP_SEND:
	case ZD_TCP_OP_RDMA_WRITE:
	case ZD_TCP_OP_WRITE_IMM:
		if (le32toh(h->seq) != lim->expect_seq)
			return ZD_TCP_FRAME_BAD_SEQ;
		return ZD_TCP_FRAME_OK;
	case ZD_TCP_OP_FETCH_ADD:
	case ZD_TCP_OP_CMP_SWAP:
		if (le32toh(h->seq) != lim->expect_seq)
			return ZD_TCP_FRAME_BAD_SEQ;
		if (len != (h->op == ZD_TCP_OP_FETCH_ADD ? ZD_TCP_FETCH_ADD_LEN : ZD_TCP_CMP_SWAP_LEN))
			return ZD_TCP_FRAME_BAD_LEN;
		/* A word straddling two could not be one CPU atomic. */
		if (le64toh(h->raddr) % ZD_TCP_ATOMIC_WORD)
			return ZD_TCP_FRAME_BAD_ALIGN;
		return ZD_TCP_FRAME_OK;
	case ZD_TCP_OP_READ_REQ:
		if (le32toh(h->seq) != lim->expect_seq)
			return ZD_TCP_FRAME_BAD_SEQ;
		if (len != 0)
			return ZD_TCP_FRAME_BAD_LEN;
		if (le32toh(h->rlen) > lim->max_payload)
			return ZD_TCP_FRAME_BAD_RLEN;
		return ZD_TCP_FRAME_OK;
	case ZD_TCP_OP_READ_RESP:
		/* len == the read's length: the QP checks it */
		return ZD_TCP_FRAME_OK;
	case ZD_TCP_OP_ACK:
	case ZD_TCP_OP_NAK:
	case ZD_TCP_OP_ATOMIC_RESP:
		return len ? ZD_TCP_FRAME_BAD_LEN : ZD_TCP_FRAME_OK;
	case ZD_TCP_OP_CM:
		if (!lim->carried)
			return ZD_TCP_FRAME_BAD_OP;  /* the CM has a socket of its own */
		if (len)
			return ZD_TCP_FRAME_BAD_LEN;
		switch (le32toh(h->rlen)) {
		case ZD_TCP_CM_DISC:
		case ZD_TCP_CM_DISC_ACK:
		case ZD_TCP_CM_PING:
		case ZD_TCP_CM_PONG:
			return ZD_TCP_FRAME_OK;
		default:
			return ZD_TCP_FRAME_BAD_CM;
		}
	default:
		return ZD_TCP_FRAME_BAD_OP;  /* a second HELLO */
	}
}

const char *zd_tcp_frame_verdict_str(enum zd_tcp_frame_verdict v)
{
	static const char *const s[ZD_TCP_FRAME_VERDICT_END] = {
		[ZD_TCP_FRAME_OK] = "ok",
		[ZD_TCP_FRAME_BAD_MAGIC] = "bad magic",
		[ZD_TCP_FRAME_BAD_VERSION] = "other protocol version",
		[ZD_TCP_FRAME_BAD_OP] = "bad op",
		[ZD_TCP_FRAME_TOO_LONG] = "payload too long",
		[ZD_TCP_FRAME_BAD_LEN] = "payload length wrong for the op",
		[ZD_TCP_FRAME_BAD_RLEN] = "read too long",
		[ZD_TCP_FRAME_BAD_SEQ] = "request out of order",
		[ZD_TCP_FRAME_NO_HELLO] = "first frame not a HELLO",
		[ZD_TCP_FRAME_BAD_TOKEN] = "HELLO with a wrong token",
		[ZD_TCP_FRAME_BAD_ALIGN] = "atomic on a misaligned word",
		[ZD_TCP_FRAME_BAD_CM] = "CM frame of a type the stream does not carry",
	};

	return (unsigned)v < ZD_TCP_FRAME_VERDICT_END ? s[v] : "?";
}
