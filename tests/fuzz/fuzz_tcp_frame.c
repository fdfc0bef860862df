/*
 * libFuzzer harness: the receive side of a zdapl-tcp data connection.
 *
 * The input is a receiver's state (struct cfg: the requests this side has
 * sent, the receives it posted, the rights of one registered region,
 * REMOTE_ATOMIC among them)
 * followed by the byte stream the peer sends.  The stream is cut into
 * frames as rx_progress() does and each header goes through the checks
 * rx_dispatch() makes, with the device's own functions
 * (zd_tcp_frame_check, zd_tcp_seq_find, zd_range_in); what the QP's
 * queues and the key table do is modelled here.  Payload is then placed
 * where an accepted frame says, into buffers allocated to their exact size,
 * so AddressSanitizer reports any byte an accepted frame could put (or
 * read) outside a registered, permitted region or a posted buffer; an
 * accepted atomic runs a real CPU atomic on the region's word (an
 * unaligned or outside word is a sanitizer report too); the asserts say
 * the same for every field that chose a target.
 *
 * Built by tools/run_fuzz.sh with clang -fsanitize=fuzzer, and as a corpus
 * replay for meson test (replay_main.c).
 */
#undef NDEBUG  /* the asserts are the test */
#include <assert.h>
#include <endian.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hw/tcp/zd_tcp.h"
#include "hw/tcp/zd_tcp_wire.h"

#define TOKEN      0x1122334455667788ull  /* our token (corpus HELLOs carry it) */
#define RKEY       0x5a5a0001u            /* the one registered region's rkey */
#define VBASE      0x7f0000001000ull      /* its registered address as the peer sees it */
#define REGION_LEN 4096u
#define MAX_REQ    8
#define MAX_RECV   4

#define CFG_HELLO  0x1  /* the peer's HELLO already came */
#define CFG_RW     0x2  /* region has REMOTE_WRITE */
#define CFG_RR     0x4  /* region has REMOTE_READ */
#define CFG_RA     0x8  /* region has DAT_IB_MEM_PRIV_REMOTE_ATOMIC */
#define CFG_CARRY  0x10 /* the stream is the CM's (no HELLO; CM frames in it) */

/* Receiver state, from the first bytes of the input. */
struct cfg {
	uint8_t flags;
	uint8_t nreq;             /* requests sent by this side, mod MAX_REQ + 1 */
	uint8_t ndone;            /* ... of which the first ndone completed */
	uint8_t nrecv;            /* receives posted, mod MAX_RECV + 1 */
	uint16_t reqops;          /* 2 bits a request: send, write, read, fetch-and-add */
	uint16_t recvlen;         /* 4 bits a receive: 16 * n bytes */
	uint32_t base;            /* sq position of seq 0, in pages */
	uint32_t off;             /* requests sent before the first of ours */
	uint32_t expect;          /* next request seq from the peer */
	uint8_t rlen[MAX_REQ];    /* read lengths */
} __attribute__((packed));

struct req {
	int op;                   /* DAT_DTO_*, or DAT_IB_DTO_FETCH_ADD */
	uint32_t total;
	int done;
	uint8_t *sink;            /* a read's or an atomic's local buffer, exactly total bytes */
};

struct rx {
	struct zd_tcp_wire_limits lim;
	uint64_t base, first, head, tx, acked;  /* sq positions: ours are [first, tx) */
	struct req sq[MAX_REQ];
	uint8_t *recv[MAX_RECV];
	uint32_t recv_len[MAX_RECV];
	uint32_t nrecv, recv_head;
	uint32_t eager_n, resp_n;
	uint8_t *eager;           /* one eager slot, exactly ZD_TCP_EAGER_SIZE */
	uint8_t *operands;        /* an atomic's payload, exactly ZD_TCP_CMP_SWAP_LEN */
	uint8_t *region;          /* exactly REGION_LEN */
	uint32_t rights;
	uint64_t sum;             /* keeps the reads of the region */
};

/* The peer's [raddr, raddr + len) in the region, as zd_keys_lmr_covers
 * decides it (len 0 is checked as 1 byte, as rx_dispatch does). */
static uint8_t *region_at(struct rx *r, uint32_t rkey, uint64_t raddr, uint64_t len,
			  uint32_t need)
{
	uint64_t off;

	if (rkey != RKEY || (r->rights & need) != need ||
	    !zd_range_in(VBASE, REGION_LEN, raddr, len ? len : 1))
		return NULL;
	off = raddr - VBASE;
	assert(off < REGION_LEN && len <= REGION_LEN - off);
	return r->region + off;
}

/* Takes up to @len payload bytes from the stream into @dst; false when
 * the stream ends inside the payload (the connection stops there). */
static int payload(const uint8_t **p, size_t *left, uint8_t *dst, uint32_t len)
{
	size_t n = len < *left ? len : *left;

	if (n)
		memcpy(dst, *p, n);
	*p += n;
	*left -= n;
	return n == len;
}

static void rx_setup(struct rx *r, const struct cfg *c)
{
	memset(r, 0, sizeof(*r));
	r->lim.token = TOKEN;
	r->lim.expect_seq = le32toh(c->expect);
	r->lim.max_payload = ZD_TCP_MAX_PAYLOAD;
	r->lim.hello_rcvd = c->flags & (CFG_HELLO | CFG_CARRY);
	r->lim.carried = c->flags & CFG_CARRY;
	r->base = (uint64_t)le32toh(c->base) << 12;
	r->first = r->base + le32toh(c->off);
	r->tx = r->first + c->nreq % (MAX_REQ + 1);
	r->head = r->first + ZD_MIN(c->ndone, r->tx - r->first);
	r->acked = r->head;
	for (uint32_t i = 0; i < r->tx - r->first; i++) {
		struct req *q = &r->sq[i];
		unsigned op = (le16toh(c->reqops) >> (2 * i)) & 3;

		q->op = op == 0 ? DAT_DTO_SEND : op == 1 ? DAT_DTO_RDMA_WRITE
				: op == 2 ? DAT_DTO_RDMA_READ : DAT_IB_DTO_FETCH_ADD;
		q->total = q->op == DAT_DTO_RDMA_READ ? c->rlen[i]
			   : q->op == DAT_IB_DTO_FETCH_ADD ? ZD_TCP_ATOMIC_WORD : 64;
		q->done = r->first + i < r->head;
		if (q->op == DAT_DTO_RDMA_READ || q->op == DAT_IB_DTO_FETCH_ADD)
			q->sink = malloc(q->total ? q->total : 1);
	}
	r->nrecv = c->nrecv % (MAX_RECV + 1);
	for (uint32_t i = 0; i < r->nrecv; i++) {
		r->recv_len[i] = 16u * ((le16toh(c->recvlen) >> (4 * i)) & 15);
		r->recv[i] = malloc(r->recv_len[i] ? r->recv_len[i] : 1);
	}
	r->eager = malloc(ZD_TCP_EAGER_SIZE);
	r->operands = malloc(ZD_TCP_CMP_SWAP_LEN);
	r->region = calloc(1, REGION_LEN);
	r->rights = (c->flags & CFG_RW ? DAT_MEM_PRIV_REMOTE_WRITE_FLAG : 0) |
		    (c->flags & CFG_RR ? DAT_MEM_PRIV_REMOTE_READ_FLAG : 0) |
		    (c->flags & CFG_RA ? DAT_IB_MEM_PRIV_REMOTE_ATOMIC : 0);
}

static void rx_teardown(struct rx *r)
{
	for (int i = 0; i < MAX_REQ; i++)
		free(r->sq[i].sink);
	for (uint32_t i = 0; i < r->nrecv; i++)
		free(r->recv[i]);
	free(r->eager);
	free(r->operands);
	free(r->region);
}

/* One connection's life: returns when a frame breaks it, the receive
 * side stalls, or the stream ends. */
static void rx_stream(struct rx *r, const uint8_t *p, size_t left)
{
	while (left >= sizeof(struct zd_tcp_hdr)) {
		struct zd_tcp_hdr h;
		enum zd_tcp_frame_verdict v;
		uint32_t seq, len, rlen;
		uint64_t pos;
		uint8_t *dst;

		memcpy(&h, p, sizeof(h));
		p += sizeof(h);
		left -= sizeof(h);
		v = zd_tcp_frame_check(&h, &r->lim);
		assert((unsigned)v < ZD_TCP_FRAME_VERDICT_END);
		assert(zd_tcp_frame_verdict_str(v)[0] != '?');
		if (v != ZD_TCP_FRAME_OK)
			return;  /* foreign or bad: the connection breaks */
		seq = le32toh(h.seq);
		len = le32toh(h.len);
		rlen = le32toh(h.rlen);
		/* what every accepted frame is */
		assert(le32toh(h.magic) == ZD_TCP_WIRE_MAGIC && h.version == ZD_TCP_WIRE_VERSION);
		assert(h.op >= ZD_TCP_OP_HELLO && h.op <= ZD_TCP_OP_MAX);
		assert(len <= ZD_TCP_MAX_PAYLOAD);
		if (!r->lim.hello_rcvd) {
			assert(h.op == ZD_TCP_OP_HELLO && len == 0 && le64toh(h.value) == TOKEN);
			r->lim.hello_rcvd = true;
			continue;
		}
		assert(h.op != ZD_TCP_OP_HELLO);
		switch (h.op) {
		case ZD_TCP_OP_CM:
			/* handed to the CM, on a carried stream only: header
			 * only, one of the four types it carries */
			assert(r->lim.carried && len == 0);
			assert(rlen == ZD_TCP_CM_DISC || rlen == ZD_TCP_CM_DISC_ACK ||
			       rlen == ZD_TCP_CM_PING || rlen == ZD_TCP_CM_PONG);
			break;
		case ZD_TCP_OP_SEND:
			assert(seq == r->lim.expect_seq);
			if (r->eager_n || r->recv_head == r->nrecv) {
				/* no receive: the eager slot, or stall */
				if (len > ZD_TCP_EAGER_SIZE || r->eager_n >= ZD_TCP_EAGER_SLOTS)
					return;
				r->lim.expect_seq++;
				r->eager_n++;
				if (!payload(&p, &left, r->eager, len))
					return;
				break;
			}
			r->lim.expect_seq++;
			if (len > r->recv_len[r->recv_head])
				return;  /* NAK: longer than the receive */
			if (!payload(&p, &left, r->recv[r->recv_head++], len))
				return;
			break;
		case ZD_TCP_OP_RDMA_WRITE:
			assert(seq == r->lim.expect_seq);
			r->lim.expect_seq++;
			dst = region_at(r, le32toh(h.rkey), le64toh(h.raddr), len,
					DAT_MEM_PRIV_REMOTE_WRITE_FLAG);
			if (!dst)
				return;  /* NAK */
			if (!payload(&p, &left, dst, len))
				return;
			break;
		case ZD_TCP_OP_WRITE_IMM:
			assert(seq == r->lim.expect_seq);
			dst = region_at(r, le32toh(h.rkey), le64toh(h.raddr), len,
					DAT_MEM_PRIV_REMOTE_WRITE_FLAG);
			if (!dst) {
				r->lim.expect_seq++;
				return;  /* NAK, no receive taken */
			}
			if (r->eager_n || r->recv_head == r->nrecv) {
				/* no receive: an eager slot (no buffer), or stall */
				if (r->eager_n >= ZD_TCP_EAGER_SLOTS)
					return;
				r->eager_n++;
			} else {
				r->recv_head++;  /* consumed, its buffer not written */
			}
			r->lim.expect_seq++;
			if (!payload(&p, &left, dst, len))
				return;
			break;
		case ZD_TCP_OP_FETCH_ADD:
		case ZD_TCP_OP_CMP_SWAP: {
			uint64_t operand[2] = { 0, 0 }, *word;

			assert(seq == r->lim.expect_seq);
			assert(len == (h.op == ZD_TCP_OP_FETCH_ADD ? ZD_TCP_FETCH_ADD_LEN
								   : ZD_TCP_CMP_SWAP_LEN));
			assert(le64toh(h.raddr) % ZD_TCP_ATOMIC_WORD == 0);
			if (r->resp_n >= ZD_TCP_RESP_DEPTH)
				return;  /* stall */
			r->lim.expect_seq++;
			dst = region_at(r, le32toh(h.rkey), le64toh(h.raddr), ZD_TCP_ATOMIC_WORD,
					DAT_IB_MEM_PRIV_REMOTE_ATOMIC);
			if (!dst)
				return;  /* NAK */
			if (!payload(&p, &left, r->operands, len))
				return;
			memcpy(operand, r->operands, len);
			/* the device's own operation: a CPU atomic on the word */
			word = (uint64_t *)(void *)dst;
			if (h.op == ZD_TCP_OP_FETCH_ADD)
				r->sum += __atomic_fetch_add(word, le64toh(operand[0]), __ATOMIC_SEQ_CST);
			else
				r->sum += __atomic_compare_exchange_n(word, &operand[0],
								      le64toh(operand[1]), false,
								      __ATOMIC_SEQ_CST,
								      __ATOMIC_SEQ_CST);
			r->resp_n++;
			break;
		}
		case ZD_TCP_OP_ATOMIC_RESP:
			assert(len == 0);
			if (!zd_tcp_seq_find(seq, r->base, r->head, r->tx, &pos))
				return;
			assert(pos >= r->head && pos < r->tx && pos - r->first < MAX_REQ);
			{
				struct req *q = &r->sq[pos - r->first];
				uint64_t old = le64toh(h.value);

				if (q->op != DAT_IB_DTO_FETCH_ADD || q->done)
					return;
				q->done = 1;
				/* the old value into the 8-byte local buffer */
				assert(q->total == sizeof(old));
				memcpy(q->sink, &old, sizeof(old));
			}
			break;
		case ZD_TCP_OP_READ_REQ:
			assert(seq == r->lim.expect_seq && len == 0 && rlen <= ZD_TCP_MAX_PAYLOAD);
			if (r->resp_n >= ZD_TCP_RESP_DEPTH)
				return;  /* stall */
			r->lim.expect_seq++;
			dst = region_at(r, le32toh(h.rkey), le64toh(h.raddr), rlen,
					DAT_MEM_PRIV_REMOTE_READ_FLAG);
			if (!dst)
				return;  /* NAK */
			r->resp_n++;
			/* the response's payload goes out from there */
			for (uint32_t i = 0; i < rlen; i++)
				r->sum += dst[i];
			break;
		case ZD_TCP_OP_READ_RESP:
			if (!zd_tcp_seq_find(seq, r->base, r->head, r->tx, &pos))
				return;
			/* a request of ours, sent and not completed */
			assert(pos >= r->head && pos < r->tx && pos - r->first < MAX_REQ);
			assert((uint32_t)(pos - r->base) == seq);
			{
				struct req *q = &r->sq[pos - r->first];

				if (q->op != DAT_DTO_RDMA_READ || q->done || len != q->total)
					return;
				q->done = 1;
				if (!payload(&p, &left, q->sink, len))
					return;
			}
			break;
		case ZD_TCP_OP_ACK:
			assert(len == 0);
			if (!zd_tcp_seq_find(seq, r->base,
					     r->tx - ZD_MIN(r->tx - r->base, (uint64_t)1 << 31), r->tx,
					     &pos))
				return;
			assert(pos >= r->base && pos < r->tx && (uint32_t)(pos - r->base) == seq);
			if (pos + 1 > r->acked)
				r->acked = pos + 1;
			break;
		case ZD_TCP_OP_NAK:
			assert(len == 0);
			if (zd_tcp_seq_find(seq, r->base, r->head, r->tx, &pos))
				assert(pos >= r->head && pos < r->tx);
			return;  /* a NAK always ends the connection */
		default:
			abort();  /* zd_tcp_frame_check let an unknown op through */
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cfg c;
	struct rx r;

	if (size < sizeof(c))
		return 0;
	memcpy(&c, data, sizeof(c));
	rx_setup(&r, &c);
	rx_stream(&r, data + sizeof(c), size - sizeof(c));
	rx_teardown(&r);
	return 0;
}
