/*
 * hw/soft one-sided copies (zd_soft_copy.h): every split of a message into
 * local and remote segments, both ways, through a pointer (a peer in this
 * process) and by cross-memory attach (a peer reached by pid, here our own
 * process without its mappings), lands every byte where it belongs and
 * touches nothing around the target.  The order of the tail is tested
 * across processes by tests/shm/test_shm_order.c.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hw/soft/zd_soft_copy.h"

#define MAXLEN 64
#define GUARD  16

static struct zd_soft_peer peer_of(bool mapped)
{
	/* No chunk table: an unmapped peer is reached by pid alone. */
	return (struct zd_soft_peer){ .self = mapped, .pid = getpid(), .pidfd = -1 };
}

/* Cuts @len bytes at @buf into segments after the bits of @cuts. */
static int split(uint8_t *buf, uint32_t len, uint32_t cuts, struct iovec *iov)
{
	int n = 0;
	uint32_t start = 0;

	for (uint32_t i = 1; i <= len; i++)
		if (i == len || (cuts >> (i % 31) & 1)) {
			iov[n].iov_base = buf + start;
			iov[n].iov_len = i - start;
			start = i;
			n++;
		}
	return n;
}

static void one_case(bool mapped, bool to_peer, uint32_t len, uint32_t lcuts, uint32_t rcuts)
{
	uint8_t local[MAXLEN], remote[MAXLEN + 2 * GUARD], *r = remote + GUARD;
	struct iovec liov[MAXLEN], riov[MAXLEN];
	struct zd_soft_seg rseg[MAXLEN];
	struct zd_soft_peer p = peer_of(mapped);
	int nl, nr;

	for (uint32_t i = 0; i < MAXLEN; i++)
		local[i] = (uint8_t)(i * 7 + 1);
	memset(remote, 0xee, sizeof(remote));
	for (uint32_t i = 0; i < len; i++)
		r[i] = (uint8_t)(i * 13 + 5);
	nl = split(local, len, lcuts, liov);
	nr = split(r, len, rcuts, riov);
	for (int i = 0; i < nr; i++)
		rseg[i] = (struct zd_soft_seg){ .addr = (uintptr_t)riov[i].iov_base,
						.len = (uint32_t)riov[i].iov_len,
						.chunk = ZD_SOFT_NO_CHUNK };
	cr_assert_eq(zd_soft_peer_copy(&p, to_peer, liov, nl, rseg, nr), 0,
		     "len %u mapped %d to_peer %d", len, mapped, to_peer);
	for (uint32_t i = 0; i < len; i++) {
		uint8_t want = to_peer ? (uint8_t)(i * 7 + 1) : (uint8_t)(i * 13 + 5);

		cr_assert_eq(to_peer ? r[i] : local[i], want,
			     "byte %u of %u (segments %d/%d, mapped %d, to_peer %d)", i, len, nl, nr,
			     mapped, to_peer);
	}
	for (uint32_t i = 0; i < GUARD; i++) {
		cr_assert_eq(remote[i], 0xee);
		cr_assert_eq(r[len + i], 0xee, "byte %u past the end, len %u", i, len);
	}
}

Test(soft_copy, every_split_lands_exactly)
{
	static const uint32_t cuts[] = { 0, 0x1, 0x2, 0x80, 0x100, 0x2aaaaaaa, 0x7fffffff, 0x155 };

	for (int mapped = 0; mapped < 2; mapped++)
		for (int to_peer = 0; to_peer < 2; to_peer++)
			for (uint32_t len = 1; len <= 40; len++)
				for (size_t a = 0; a < ZD_ARRAY_SIZE(cuts); a++)
					for (size_t b = 0; b < ZD_ARRAY_SIZE(cuts); b++)
						one_case(mapped, to_peer, len, cuts[a], cuts[b]);
}

Test(soft_copy, small_copies_to_peer)
{
	uint8_t src[MAXLEN], dst[MAXLEN + GUARD];

	for (uint32_t i = 0; i < MAXLEN; i++)
		src[i] = (uint8_t)(i + 1);
	for (uint32_t len = 1; len <= MAXLEN - 8; len++)
		for (uint32_t off = 0; off < 8; off++) {
			memset(dst, 0, sizeof(dst));
			zd_soft_copy_to_peer(dst + off, src, len);
			cr_assert_arr_eq(dst + off, src, len, "len %u offset %u", len, off);
			for (uint32_t i = 0; i < off; i++)
				cr_assert_eq(dst[i], 0);
			cr_assert_eq(dst[off + len], 0, "len %u offset %u overran", len, off);
		}
}

Test(soft_copy, refuses_what_it_cannot_do)
{
	uint8_t a[16] = { 0 }, b[16];
	struct iovec l = { a, 16 };
	struct zd_soft_seg shortseg = { (uintptr_t)b, 8, ZD_SOFT_NO_CHUNK };
	struct zd_soft_seg many[ZD_SOFT_MAX_SEGS + 1];
	struct zd_soft_peer p = peer_of(true), gone = peer_of(false);

	/* The peer's segments are shorter than the message. */
	cr_assert_eq(zd_soft_peer_copy(&p, true, &l, 1, &shortseg, 1), -1);
	/* More segments than a copy takes. */
	for (int i = 0; i <= ZD_SOFT_MAX_SEGS; i++)
		many[i] = (struct zd_soft_seg){ (uintptr_t)b, 1, ZD_SOFT_NO_CHUNK };
	cr_assert_eq(zd_soft_peer_copy(&p, true, &l, 1, many, ZD_SOFT_MAX_SEGS + 1), -1);
	/* A process that is not there. */
	gone.pid = 0x7ffffff0;
	shortseg.len = 16;
	cr_assert_eq(zd_soft_peer_copy(&gone, true, &l, 1, &shortseg, 1), -1);
	/* Nothing to copy is done at once. */
	l.iov_len = 0;
	cr_assert_eq(zd_soft_peer_copy(&gone, true, &l, 1, &shortseg, 1), 0);
}
