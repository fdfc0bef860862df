/*
 * Wire protocol of the zdapl-tcp data path, version 3 (version 2 always
 * opened a TCP connection of its own per QP, after the CM's, with a token
 * HELLO; version 1 had no IB extension frames: WRITE_IMM, FETCH_ADD,
 * CMP_SWAP, ATOMIC_RESP).
 *
 * With progress=thread on both sides (the default) the data path rides
 * the connection manager's TCP connection ("carried"): once the
 * CM connection is ESTABLISHED (the active side sent RTU, the passive side
 * read it), each side's CM hands its socket to the QP (qp_carry), and
 * every byte after the RTU is a frame of this protocol (TCP_NODELAY,
 * non-blocking on both ends): one descriptor per connected EP, no
 * listener, no second handshake.  The CM's own frames of an established
 * connection (DISC, DISC_ACK, PING, PONG: core/zd_cm_wire.h) travel as CM
 * frames of this protocol, in the stream: a DISC follows every DTO posted
 * before it, as on InfiniBand.  Every multi-byte field is little-endian.
 *
 * Setting up: qp_local_blob carries struct zd_tcp_blob to the peer through
 * the CM, and qp_connect checks the peer's: a blob of another version is
 * refused (so two builds that disagree on the frames never connect).  The
 * active side's REQ blob says whether it can ride the CM's socket
 * (ZD_TCP_BLOB_CARRY: its IA's thread reads the stream, progress=thread),
 * the passive side's REP blob whether they will (it can, and the active
 * side can).  Carried, the socket is the one the CM connection was set up
 * on, so the peer is the process that took part in the CM exchange.
 *
 * A data connection of its own (progress=manual on either side: see
 * zd_tcp.h for why):
 *  - each side draws a random 64-bit token for its blob; the passive
 *    side's also names its listener (IA address, port chosen by the
 *    kernel), opened when its blob is made;
 *  - the active side connects to that listener; the passive side accepts
 *    (lazily, on its next progress);
 *  - each side's first frame is HELLO, carrying the *peer's* token: only a
 *    process that saw the peer's blob (through the CM) knows it.  A frame
 *    with another magic or version, or a HELLO with a wrong token, is a
 *    foreign peer: the acceptor drops that socket and keeps listening, the
 *    connector breaks the QP.  The CM's frames stay on the CM's socket.
 *
 * Frames: a fixed 40-byte header, then `len` payload bytes (only SEND,
 * RDMA_WRITE, WRITE_IMM, READ_RESP and the two atomics have payload).
 *
 *  op          seq                 rkey/raddr      rlen/imm     payload
 *  HELLO       0                   0               0            none; value = peer's token
 *                                                               (a data connection of its own)
 *  CM          0                   0               CM type      none; value = the CM header's
 *                                                               conn_qual (its sender's id)
 *                                                               (carried only)
 *  SEND        request seq         -               -            message (flags: SOLICITED)
 *  RDMA_WRITE  request seq         target range    -            data
 *  READ_REQ    request seq         source range    bytes asked  none
 *  READ_RESP   seq of the READ_REQ -               -            rlen bytes of data
 *  ACK         last request seq done (cumulative)  -            none
 *  NAK         request seq failed  -               status       none (then the sender closes)
 *  WRITE_IMM   request seq         target range    imm          data (RDMA_WRITE + immediate)
 *  FETCH_ADD   request seq         target word     -            8: addend
 *  CMP_SWAP    request seq         target word     -            16: compare, swap
 *  ATOMIC_RESP seq of the atomic   -               -            none; value = the word before
 *
 * The IB extensions.  WRITE_IMM is an RDMA_WRITE whose target, once the
 * data is placed, consumes its next posted receive (RQ or SRQ) and
 * completes it with the immediate data (the receive's buffer is not
 * written); with no receive posted it waits as an early SEND does (in
 * the eager queue, behind the sends already there, taking a slot but no
 * buffer; with the queue full the socket is not read).  It is ACKed as a
 * write once placed.  FETCH_ADD and CMP_SWAP name an 8-byte aligned word;
 * the target executes them as they arrive (with a CPU atomic: the word may
 * be the target of other connections too) and answers ATOMIC_RESP, in
 * order with the READ_RESPs.  Immediate data, operands and values travel
 * little-endian and reach the consumers in host order, unchanged.
 *
 * Request seqs are consecutive from 0 per connection (the initiator's send
 * queue position, mod 2^32); the target executes requests in order and
 * checks the seq.  The target ACKs (cumulatively) every RDMA_WRITE and
 * WRITE_IMM it placed (an ACK also covers the SENDs before it; a SEND
 * alone is never ACKed: nothing waits for it); an RDMA_WRITE or WRITE_IMM
 * completes at the initiator when an ACK covers it, an RDMA_READ when its
 * READ_RESP landed, an atomic when its ATOMIC_RESP did, a SEND once it was
 * handed to the kernel; completions are reported in post order.
 *
 * Validation by the receiver, before any byte of payload is placed:
 * magic, version, known op, len <= ZD_TCP_MAX_PAYLOAD and len == 0 for
 * ops without payload, len == 8 (FETCH_ADD) or 16 (CMP_SWAP) for the
 * atomics; request seq == the next expected; an atomic's raddr is 8-byte
 * aligned; for RDMA the rkey names a live LMR of the target IA, in the PZ
 * of the target EP, with REMOTE_WRITE (write, write with immediate) /
 * REMOTE_READ (read) / DAT_IB_MEM_PRIV_REMOTE_ATOMIC (atomics) and
 * [raddr, raddr + len) inside it (the 8 bytes of the word for an atomic);
 * a SEND fits the receive it lands in; a READ_RESP, ATOMIC_RESP or ACK
 * names a request the initiator sent and still waits for (an ATOMIC_RESP
 * an atomic), READ_RESP len == rlen.
 * A request failing a check is answered NAK (status: the
 * DAT_DTO_COMPLETION_STATUS the initiator reports) and the target QP breaks;
 * any other bad frame breaks the QP without a NAK.  Breaking: the QP goes
 * to error, its outstanding DTOs complete flushed, the socket is shut down
 * (the peer sees EOF and flushes too).
 */
#ifndef ZD_TCP_WIRE_H
#define ZD_TCP_WIRE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/zd_range.h"   /* zd_range_in, for the receiver's checks */

#define ZD_TCP_WIRE_MAGIC    0x5044545au  /* "ZTDP" little-endian */
#define ZD_TCP_WIRE_VERSION  3
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
	ZD_TCP_OP_WRITE_IMM = 8,
	ZD_TCP_OP_FETCH_ADD = 9,
	ZD_TCP_OP_CMP_SWAP = 10,
	ZD_TCP_OP_ATOMIC_RESP = 11,
	ZD_TCP_OP_CM = 12,
	ZD_TCP_OP_MAX = ZD_TCP_OP_CM,
};

/* The CM frame types a CM frame of the stream may carry (the values of
 * core/zd_cm_wire.h's enum zd_cm_msg_type; the CM checks them again). */
#define ZD_TCP_CM_DISC     5
#define ZD_TCP_CM_DISC_ACK 6
#define ZD_TCP_CM_PING     10
#define ZD_TCP_CM_PONG     11

/* The word an atomic works on, and the operands each atomic carries. */
#define ZD_TCP_ATOMIC_WORD      8u
#define ZD_TCP_FETCH_ADD_LEN    8u    /* addend */
#define ZD_TCP_CMP_SWAP_LEN     16u   /* compare, then swap */

#define ZD_TCP_FLAG_SOLICITED 0x1

struct zd_tcp_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t op;
	uint16_t flags;
	uint32_t seq;
	uint32_t len;        /* payload bytes after the header */
	uint32_t rkey;
	union {
		uint32_t rlen;   /* READ_REQ: bytes asked; NAK: status; CM: its type */
		uint32_t imm;    /* WRITE_IMM: the immediate data */
	};
	uint64_t raddr;
	uint64_t value;      /* ATOMIC_RESP: the word's value before the atomic;
			      * CM: the CM header's conn_qual; HELLO: the
			      * receiver's token */
} __attribute__((packed));
_Static_assert(sizeof(struct zd_tcp_hdr) == 40, "wire header is 40 bytes");

/* What qp_local_blob hands the CM for the peer. */
struct zd_tcp_blob {
	uint32_t magic;
	uint16_t version;
	uint16_t port;       /* the passive side's listener, network order (or 0) */
	uint32_t addr;       /* IPv4, network order */
	uint32_t flags;      /* ZD_TCP_BLOB_* */
	uint64_t token;
} __attribute__((packed));

/* REQ: the active side can ride the CM's socket; REP: both will. */
#define ZD_TCP_BLOB_CARRY 0x1u
_Static_assert(sizeof(struct zd_tcp_blob) == 24, "blob is 24 bytes");

/* ---- validation (zd_tcp_wire.c): pure functions, no I/O, no QP ----
 * rx_dispatch() runs every received header through zd_tcp_frame_check()
 * and locates the requests an answer names with zd_tcp_seq_find(); the
 * fuzzer in tests/fuzz drives the same functions. */

/* What the receiver expects of the next frame. */
struct zd_tcp_wire_limits {
	uint64_t token;          /* our token: the peer's HELLO must carry it */
	uint32_t expect_seq;     /* next request seq from the peer */
	uint32_t max_payload;    /* ZD_TCP_MAX_PAYLOAD */
	bool hello_rcvd;         /* the peer's HELLO came (carried: none comes):
				  * no other frame before it */
	bool carried;            /* the stream carries the CM's frames too */
};

enum zd_tcp_frame_verdict {
	ZD_TCP_FRAME_OK = 0,
	ZD_TCP_FRAME_BAD_MAGIC,
	ZD_TCP_FRAME_BAD_VERSION,
	ZD_TCP_FRAME_BAD_OP,     /* unknown op, a HELLO after the HELLO (or on a
				  * carried stream), a CM frame on a stream
				  * that does not carry them */
	ZD_TCP_FRAME_TOO_LONG,   /* len > max_payload */
	ZD_TCP_FRAME_BAD_LEN,    /* payload on an op that carries none, or an
				  * atomic's operands of the wrong length */
	ZD_TCP_FRAME_BAD_RLEN,   /* READ_REQ asks for more than max_payload */
	ZD_TCP_FRAME_BAD_SEQ,    /* request out of order */
	ZD_TCP_FRAME_NO_HELLO,   /* first frame is not a HELLO */
	ZD_TCP_FRAME_BAD_TOKEN,  /* HELLO from a process that never saw our blob */
	ZD_TCP_FRAME_BAD_ALIGN,  /* an atomic on a word that is not 8-byte aligned */
	ZD_TCP_FRAME_BAD_CM,     /* a CM frame of a type the stream does not carry */
	ZD_TCP_FRAME_VERDICT_END
};

/* Checks header @h (wire order, as received) against @lim: everything
 * that does not depend on the QP's queues.  Payload-free ops have len 0,
 * atomics exactly their operands and an aligned word; the requests (SEND,
 * RDMA_WRITE, WRITE_IMM, READ_REQ, FETCH_ADD, CMP_SWAP) carry the next
 * expected seq.  What it does not check: rkey and range
 * (zd_keys_lmr_covers against the live LMR), the room of the receive, and
 * that a READ_RESP/ATOMIC_RESP/ACK/NAK names a request (zd_tcp_seq_find). */
enum zd_tcp_frame_verdict zd_tcp_frame_check(const struct zd_tcp_hdr *h,
					     const struct zd_tcp_wire_limits *lim);
const char *zd_tcp_frame_verdict_str(enum zd_tcp_frame_verdict v);

/* The send queue position in [lo, hi) of request @seq, whose seqs count
 * from position @base (mod 2^32); false if none.  hi - lo <= 2^32. */
static inline bool zd_tcp_seq_find(uint32_t seq, uint64_t base, uint64_t lo, uint64_t hi,
				   uint64_t *pos)
{
	uint32_t d = seq - (uint32_t)(lo - base);

	if (d >= hi - lo)
		return false;
	*pos = lo + d;
	return true;
}


#endif /* ZD_TCP_WIRE_H */
