/*
 * libFuzzer harness: what zdapl-tcp's UD QPs take off the network
 * (zd_tcp_ud_wire.h): a peer's address blob, which reaches ud_ah_create
 * through the CM, and a datagram, which the receive path checks.
 *
 * The input's first byte chooses: even, the rest is a blob for
 * zd_tcp_ud_blob_parse; odd, the second byte sizes the receive (4 bytes a
 * unit) and the rest is one datagram for zd_tcp_ud_check, addressed to our
 * QP (QPN, KEY; the corpus's good datagrams carry them).  An accepted
 * datagram's payload is then placed as the device places it, at offset 40
 * of a receive allocated to its exact size, only if it fits there, so
 * AddressSanitizer reports any byte an accepted datagram could put outside
 * it; the asserts say what acceptance promises.
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

#include "hw/tcp/zd_tcp_ud_wire.h"

#define QPN 7u
#define KEY 0x1122334455667788ull
#define GRH 40u  /* ZD_UD_GRH_BYTES */

static void blob(const uint8_t *d, size_t n)
{
	struct zd_tcp_ud_ah ah;

	if (!zd_tcp_ud_blob_parse(d, n, &ah))
		return;
	assert(n == sizeof(struct zd_tcp_ud_blob));
	assert(ah.sa.sin_family == AF_INET && ah.sa.sin_port != 0 && ah.sa.sin_addr.s_addr != 0);
}

static void datagram(const uint8_t *d, size_t n, size_t recv_len)
{
	struct zd_tcp_ud_hdr h;
	uint64_t payload;
	uint8_t *recv;

	/* as recvmsg fills it: what the datagram has of a header */
	memset(&h, 0, sizeof(h));
	memcpy(&h, d, n < sizeof(h) ? n : sizeof(h));
	if (zd_tcp_ud_check(&h, n, QPN, KEY) != ZD_TCP_UD_OK)
		return;
	assert(n >= sizeof(h));
	payload = n - sizeof(h);
	assert(le32toh(h.len) == payload);
	assert(le32toh(h.dst_qpn) == QPN && le64toh(h.dst_key) == KEY);
	recv = malloc(recv_len ? recv_len : 1);
	assert(recv);
	if (recv_len >= GRH && payload <= recv_len - GRH)
		memcpy(recv + GRH, d + sizeof(h), payload);
	free(recv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (!(data[0] & 1))
		blob(data + 1, size - 1);
	else if (size >= 2)
		datagram(data + 2, size - 2, (size_t)data[1] * 4);
	return 0;
}
