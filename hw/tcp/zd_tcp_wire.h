/*
 * Wire protocol of the zdapl-tcp data path, version 1.
 *
 * One TCP connection per connected QP (TCP_NODELAY, non-blocking on both
 * ends), separate from the connection manager's socket.  Every multi-byte
 * field is little-endian.
 *
 * Setting up (see zd_tcp.h for who does what):
 *  - qp_create opens a listener on the IA address (port chosen by the
 *    kernel) and draws a random 64-bit token; qp_local_blob carries
 *    struct zd_tcp_blob (magic, version, IPv4 address and port of that
 *    listener, token) to the peer through the CM.
 *  - Of the two QPs, the one with the numerically smaller token connects to
 *    the other's listener; the other accepts (lazily, on its next progress).
 *  - Each side's first frame is HELLO, carrying the *peer's* token: only a
 *    process that saw the peer's blob (through the CM) knows it.  A frame
 *    with another magic or version, or a HELLO with a wrong token, is a
 *    foreign peer: the acceptor drops that socket and keeps listening, the
 *    connector breaks the QP.  A blob of another version is refused by
 *    qp_connect.
 *
 * Frames: a fixed 40-byte header, then `len` payload bytes (only SEND,
 * RDMA_WRITE and RDMA_READ_RESP have payload).
 *
 *  op          seq                 rkey/raddr      rlen         payload
 *  HELLO       0                   0               0            none; token = peer's token
 *  SEND        request seq         -               -            message (flags: SOLICITED)
 *  RDMA_WRITE  request seq         target range    -            data
 *  READ_REQ    request seq         source range    bytes asked  none
 *  READ_RESP   seq of the READ_REQ -               -            rlen bytes of data
 *  ACK         last request seq done (cumulative)  -            none
 *  NAK         request seq failed  -               status       none (then the sender closes)
 *
 * Request seqs are consecutive from 0 per connection (the initiator's send
 * queue position, mod 2^32); the target executes requests in order and
 * checks the seq.  The target ACKs (cumulatively) every SEND and
 * RDMA_WRITE it placed; an RDMA_WRITE completes at the initiator when an
 * ACK covers it, an RDMA_READ when its READ_RESP landed, a SEND once it was
 * handed to the kernel; completions are reported in post order.
 *
 * Validation by the receiver, before any byte of payload is placed:
 * magic, version, known op, len <= ZD_TCP_MAX_PAYLOAD and len == 0 for
 * ops without payload; request seq == the next expected; for RDMA the
 * rkey names a live LMR of the target IA, in the PZ of the target EP, with
 * REMOTE_WRITE (write) / REMOTE_READ (read) and [raddr, raddr + len) inside
 * it; a SEND fits the receive it lands in; a READ_RESP or ACK names a
 * request the initiator sent and still waits for, READ_RESP len == rlen.
 * A request failing a check is answered NAK (status: the
 * DAT_DTO_COMPLETION_STATUS the initiator reports) and the target QP breaks;
 * any other bad frame breaks the QP without a NAK.  Breaking: the QP goes
 * to error, its outstanding DTOs complete flushed, the socket is shut down
 * (the peer sees EOF and flushes too).
 */
#ifndef ZD_TCP_WIRE_H
#define ZD_TCP_WIRE_H

#include <stdint.h>

#define ZD_TCP_WIRE_MAGIC    0x5044545au  /* "ZTDP" little-endian */
#define ZD_TCP_WIRE_VERSION  1
#define ZD_TCP_BLOB_MAGIC    0x424f4c42u  /* "BLOB" */

/* Largest payload of one frame: the device's message and RDMA limit. */
#define ZD_TCP_MAX_PAYLOAD   (1u << 30)

enum zd_tcp_op {
	ZD_TCP_OP_HELLO = 1,
	ZD_TCP_OP_SEND = 2,
	ZD_TCP_OP_RDMA_WRITE = 3,
	ZD_TCP_OP_READ_REQ = 4,
	ZD_TCP_OP_READ_RESP = 5,
	ZD_TCP_OP_ACK = 6,
	ZD_TCP_OP_NAK = 7,
	ZD_TCP_OP_MAX = ZD_TCP_OP_NAK,
};

#define ZD_TCP_FLAG_SOLICITED 0x1

struct zd_tcp_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t op;
	uint16_t flags;
	uint32_t seq;
	uint32_t len;        /* payload bytes after the header */
	uint32_t rkey;
	uint32_t rlen;       /* READ_REQ: bytes asked; NAK: status */
	uint64_t raddr;
	uint64_t token;      /* HELLO only */
} __attribute__((packed));
_Static_assert(sizeof(struct zd_tcp_hdr) == 40, "wire header is 40 bytes");

/* What qp_local_blob hands the CM for the peer. */
struct zd_tcp_blob {
	uint32_t magic;
	uint16_t version;
	uint16_t port;       /* network order */
	uint32_t addr;       /* IPv4, network order */
	uint32_t pad;
	uint64_t token;
} __attribute__((packed));
_Static_assert(sizeof(struct zd_tcp_blob) == 24, "blob is 24 bytes");

#endif /* ZD_TCP_WIRE_H */
