/*
 * libFuzzer harness: the connection manager's frame reader.
 *
 * The input's first byte sets how the kernel hands the stream over (recv
 * sizes); the rest is what a peer sends on a CM socket.  It is read the
 * way conn_readable() in core/zd_cm.c reads it: into a buffer of exactly
 * ZD_CM_FRAME_MAX bytes, asking zd_cm_frame_decode how many bytes the
 * frame needs, and every decoded frame's private data and blob are copied
 * into buffers of exactly the sizes the CR and connection objects have
 * (ZD_CM_PDATA_MAX, ZD_QP_BLOB_MAX), so AddressSanitizer sees any length
 * the decoder lets through that the receiver could not hold.  A decoded
 * frame must also encode back to the very bytes it came from.
 *
 * Built by tools/run_fuzz.sh with clang -fsanitize=fuzzer, and as a corpus
 * replay for meson test (replay_main.c).
 */
#undef NDEBUG  /* the asserts are the test */
#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/zd_cm_wire.h"

struct reader {
	uint8_t *rx;              /* c->rx: exactly ZD_CM_FRAME_MAX */
	size_t rx_len;
	uint8_t *pdata;           /* cr->pdata / the EP's event data */
	uint8_t *blob;            /* c->peer_blob */
	uint8_t *again;           /* re-encoded frame */
};

static void frame_used(struct reader *r, const struct zd_cm_msg *m)
{
	const struct zd_cm_hdr *h = &m->hdr;
	size_t n;

	assert(h->magic == ZD_CM_MAGIC && h->version == ZD_CM_VERSION);
	assert(h->type >= ZD_CM_MSG_REQ && h->type < ZD_CM_MSG_TYPE_END);
	assert(h->pdata_len <= ZD_CM_PDATA_MAX && h->blob_len <= ZD_QP_BLOB_MAX);
	assert(m->len == sizeof(*h) + h->pdata_len + h->blob_len && m->len <= ZD_CM_FRAME_MAX);
	assert(m->pdata == r->rx + sizeof(*h) && m->blob == m->pdata + h->pdata_len);
	/* only the types that carry them have private data, a blob, a reason */
	bool req = h->type == ZD_CM_MSG_REQ || h->type == ZD_CM_MSG_UD_REQ;

	if (!req && h->type != ZD_CM_MSG_REP && h->type != ZD_CM_MSG_REJ)
		assert(h->pdata_len == 0);
	if (!req && h->type != ZD_CM_MSG_REP)
		assert(h->blob_len == 0);
	if (h->type == ZD_CM_MSG_REJ)
		assert(h->reason >= ZD_CM_REJ_PEER && h->reason <= ZD_CM_REJ_QUAL_HERE);
	else
		assert(h->reason == 0);
	/* what zd_cm_passive_on_req / zd_cm_active_on_rep do with the body */
	memcpy(r->pdata, m->pdata, h->pdata_len);
	memcpy(r->blob, m->blob, h->blob_len);
	/* canonical: the encoder gives back the bytes received */
	n = zd_cm_frame_encode(r->again, (enum zd_cm_msg_type)h->type, h->reason, h->conn_qual,
			       r->pdata, h->pdata_len, r->blob, h->blob_len);
	assert(n == m->len && memcmp(r->again, r->rx, n) == 0);
}

static void read_stream(struct reader *r, const uint8_t *p, size_t left, size_t chunk)
{
	for (;;) {
		struct zd_cm_msg m;
		enum zd_cm_frame_status st = zd_cm_frame_decode(r->rx, r->rx_len, &m);
		size_t n;

		if (st == ZD_CM_FRAME_OK) {
			frame_used(r, &m);
			r->rx_len = 0;
			continue;
		}
		if (st != ZD_CM_FRAME_SHORT)
			return;  /* conn_lost: this connection only */
		assert(m.len > r->rx_len && m.len <= ZD_CM_FRAME_MAX);
		n = m.len - r->rx_len;
		if (n > chunk)
			n = chunk;
		if (n > left)
			n = left;
		if (n == 0)
			return;  /* EOF */
		memcpy(r->rx + r->rx_len, p, n);
		r->rx_len += n;
		p += n;
		left -= n;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct reader r = {
		.rx = malloc(ZD_CM_FRAME_MAX),
		.pdata = malloc(ZD_CM_PDATA_MAX),
		.blob = malloc(ZD_QP_BLOB_MAX),
		.again = malloc(ZD_CM_FRAME_MAX),
	};

	if (size >= 1) {
		/* 0: whole frames at once; else recv returns at most that many */
		size_t chunk = data[0] ? data[0] : ZD_CM_FRAME_MAX;

		read_stream(&r, data + 1, size - 1, chunk);
	}
	free(r.rx);
	free(r.pdata);
	free(r.blob);
	free(r.again);
	return 0;
}
