/*
 * Send queue of an mlx5 RC QP, driven directly: WQE builders in the
 * formats of <infiniband/mlx5dv.h>, per-WQE bookkeeping, and the doorbell
 * (doorbell record, then BlueFlame or the 8-byte doorbell).
 *
 * A WQE is a run of 16-byte segments (ctrl, [raddr], [atomic], data or
 * inline) in 64-byte basic blocks (WQEBBs).  The buffer is a ring of
 * wqe_cnt WQEBBs; a WQE that reaches the end of the buffer continues at
 * its start (segments are 16-aligned, so none straddles the end; inline
 * data may, and is copied in two pieces).
 *
 * Bookkeeping: wr[] is indexed by the WQEBB index of a WQE's first block,
 * which is exactly the CQE's wqe_counter, so a completion finds its cookie
 * with a mask.  A CQE for WQE w retires w and every unsignaled WQE before
 * it: ci = wr[w].next_ci (w's position plus its WQEBBs), read, like all
 * of wr[w], before that store hands the entries back to the poster.
 *
 * The latency case -- one inline segment that fits a single WQEBB --
 * has its own builder (zd_mlx5_sq_post_inl1): the same bytes, bookkeeping
 * and doorbell as zd_mlx5_sq_post, without its loops, divisions and wrap
 * checks (tests/mlx5/test_mlx5_fast.c holds both to mlx5dv.h's bytes).
 *
 * Threads: one poster per SQ (pi, unsig, the buffer, wr[] writes); the CQ
 * poller writes ci and reads wr[] of WQEs the device completed.
 */
#ifndef ZD_MLX5_SQ_H
#define ZD_MLX5_SQ_H

#include <endian.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <dat2/udat.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "core/zd_compiler.h"
#include "evd/zd_dto_event.h"
#include "hw/mlx5/zd_mlx5_barrier.h"
#include "hw/mlx5/zd_mlx5_queue.h"

/* zd_mlx5_sq_wr.flags.  An IB extension WQE never carries WR_EVENT,
 * which is all the plain latency paths of the poll (zd_mlx5_cq.c) test
 * for, so they cost it nothing.  A write with immediate data that wants
 * its event carries WR_IMM_EVENT as well: cq_poll_one's own inline path
 * for it (a DAT_IB_DTO_EVENT of constant shape, no atomic's old value to
 * turn). */
#define ZD_MLX5_WR_EVENT     0x1  /* report a DAT event on success */
#define ZD_MLX5_WR_SIGNALED  0x2  /* posted with CQ_UPDATE */
#define ZD_MLX5_WR_EXT       0x4  /* an IB extension op: a DAT_IB_DTO_EVENT */
#define ZD_MLX5_WR_EXT_EVENT 0x8  /* ... reported on success too */
#define ZD_MLX5_WR_SWAP64    0x10 /* an atomic whose old value the NIC writes
				   * big-endian: to host order at its CQE */
#define ZD_MLX5_WR_IMM_EVENT 0x20 /* EXT_EVENT of DAT_IB_DTO_RDMA_WRITE_IMMED */

/* Largest WQE: ds is 6 bits of 16-byte units. */
#define ZD_MLX5_MAX_DS      63

/* Inline payload that still fits one WQEBB with a remote-address segment
 * (64 - ctrl - raddr - inline header = 28), and without one (send: 44; the
 * fast copy below takes up to 32). */
#define ZD_MLX5_INL1_MAX_RDMA 28
#define ZD_MLX5_INL1_MAX_SEND 32

/*
 * The bookkeeping of one WQE, 32 bytes.  Its first 24 are the tail of the
 * DAT_DTO_COMPLETION_EVENT_DATA a successful completion reports, laid out
 * as the event lays them (user_cookie, status DAT_DTO_SUCCESS,
 * transfered_length, operation, rmr_context 0): the poll copies them in
 * two moves.  next_ci is the SQ's consumer index once this WQE completes
 * (its position plus its WQEBBs): retiring it and every unsignaled WQE
 * before it is one store.
 */
struct zd_mlx5_sq_wr {
	DAT_DTO_COOKIE cookie;
	uint32_t status;              /* DAT_DTO_SUCCESS: 0 from the allocation, never written */
	uint32_t len;                 /* bytes, for the DAT event */
	uint32_t op;                  /* DAT_DTOS */
	uint32_t rmr;                 /* the event's rmr_context: 0, as status */
	uint32_t next_ci;
	uint8_t nbb;                  /* WQEBBs of this WQE */
	uint8_t flags;                /* ZD_MLX5_WR_* */
	uint16_t pad;
};

_Static_assert(offsetof(struct zd_mlx5_sq_wr, status) ==
		       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, status) -
			       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, user_cookie) &&
	       offsetof(struct zd_mlx5_sq_wr, len) ==
		       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, transfered_length) -
			       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, user_cookie) &&
	       offsetof(struct zd_mlx5_sq_wr, op) ==
		       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, operation) -
			       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, user_cookie) &&
	       offsetof(struct zd_mlx5_sq_wr, rmr) ==
		       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, rmr_context) -
			       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, user_cookie) &&
	       offsetof(struct zd_mlx5_sq_wr, next_ci) == 24 &&
	       offsetof(struct zd_mlx5_sq_wr, nbb) == 28 &&
	       offsetof(struct zd_mlx5_sq_wr, flags) == 29 &&
	       sizeof(struct zd_mlx5_sq_wr) == 32 && DAT_DTO_SUCCESS == 0 &&
	       sizeof(DAT_DTOS) == 4 && sizeof(DAT_RMR_CONTEXT) == 4,
	       "zd_mlx5_sq_wr begins as the DTO event's tail from user_cookie");

/* Bytes of a zd_mlx5_sq_wr that are a successful DTO event's tail. */
#define ZD_MLX5_WR_EVENT_BYTES offsetof(struct zd_mlx5_sq_wr, next_ci)

struct zd_mlx5_sq {
	/* poster */
	uint8_t *buf;
	uint8_t *end;                 /* buf + wqe_cnt * 64 */
	uint32_t pi;                  /* next WQEBB (free-running) */
	uint32_t wqe_cnt;
	uint32_t mask;                /* wqe_cnt - 1 */
	uint32_t qpn8;                /* qpn << 8, for qpn_ds */
	volatile __be32 *dbrec;
	uint8_t *bf_reg;
	uint32_t bf_size;
	uint8_t *bf_cur;              /* the BlueFlame buffer next used: bf_reg, + bf_size */
	uintptr_t bf_flip;            /* bf_cur ^= bf_flip toggles it */
	uint32_t max_inline;          /* 0: never inline */
	/* min(max_inline, ZD_MLX5_INL1_MAX_*), 0 without BlueFlame (the
	 * one-block path rings the doorbell with its BlueFlame copy). */
	uint32_t inl1_rdma;
	uint32_t inl1_send;
	/* The control segment's first word for each opcode of the one-block
	 * path but its WQE index and ds, prebuilt (zd_mlx5_sq_set_heads). */
	uint64_t ctrl_head[5];
	uint32_t unsig;               /* unsignaled WQEs since the last forced CQE */
	uint32_t unsig_max;           /* force CQ_UPDATE after this many */
	struct zd_mlx5_sq_wr *wr;     /* wqe_cnt entries */
	/* poller: WQEBBs before ci are free again */
	alignas(ZD_CACHE_LINE) _Atomic uint32_t ci;
};

/* zd_mlx5_queue.c: fills @sq from @d (allocates wr[]); 0 or -errno. */
int zd_mlx5_sq_init(struct zd_mlx5_sq *sq, const struct zd_mlx5_sq_desc *d, uint32_t max_inline);
void zd_mlx5_sq_fini(struct zd_mlx5_sq *sq);

/* The bookkeeping flags of a WQE for @op but WR_SIGNALED (and an
 * atomic's WR_SWAP64): an IB extension operation's completion is a
 * DAT_IB_DTO_EVENT (see the flags above). */
static ZD_ALWAYS_INLINE uint8_t zd_mlx5_wr_flags(DAT_DTOS op, bool event)
{
	if (!zd_dto_is_ext(op))
		return event ? ZD_MLX5_WR_EVENT : 0;
	if (!event)
		return ZD_MLX5_WR_EXT;
	return ZD_MLX5_WR_EXT | ZD_MLX5_WR_EXT_EVENT |
	       (op == (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED ? ZD_MLX5_WR_IMM_EVENT : 0);
}

/* The bookkeeping entry of the WQE of @nbb blocks at @pi (status and
 * rmr stay 0: zd_mlx5_sq_init allocates the entries zeroed). */
static ZD_ALWAYS_INLINE void zd_mlx5_sq_wr_set(struct zd_mlx5_sq_wr *wr, DAT_DTO_COOKIE cookie,
					       uint32_t len, DAT_DTOS op, uint32_t pi,
					       uint8_t nbb, uint8_t flags)
{
#if __BYTE_ORDER == __LITTLE_ENDIAN
	const uint16_t nbb_flags = (uint16_t)(nbb | flags << 8);
#else
	const uint16_t nbb_flags = (uint16_t)(nbb << 8 | flags);
#endif

	_Static_assert(offsetof(struct zd_mlx5_sq_wr, flags) ==
		       offsetof(struct zd_mlx5_sq_wr, nbb) + 1, "nbb, flags");
	wr->cookie = cookie;
	wr->len = len;
	wr->op = (uint32_t)op;
	wr->next_ci = pi + nbb;
	/* one store (the compiler may build a pair of constants in .rodata) */
	memcpy(&wr->nbb, &nbb_flags, sizeof(nbb_flags));
}

/* ---- segment builders ---------------------------------------------------- */

static ZD_ALWAYS_INLINE void *zd_mlx5_sq_bb(const struct zd_mlx5_sq *sq, uint32_t idx)
{
	return sq->buf + ((size_t)(idx & sq->mask) << MLX5_SEND_WQE_SHIFT);
}

/* The 16-byte segment after @seg, wrapping at the end of the buffer. */
static ZD_ALWAYS_INLINE void *zd_mlx5_sq_next_seg(const struct zd_mlx5_sq *sq, void *seg)
{
	uint8_t *p = (uint8_t *)seg + 16;

	return ZD_UNLIKELY(p == sq->end) ? sq->buf : p;
}

static ZD_ALWAYS_INLINE void zd_mlx5_set_ctrl(struct mlx5_wqe_ctrl_seg *c, uint32_t pi,
					      uint8_t opcode, uint32_t qpn8, uint32_t ds,
					      uint8_t fm_ce_se, uint32_t imm)
{
	c->opmod_idx_opcode = htobe32((pi & 0xffff) << 8 | opcode);
	c->qpn_ds = htobe32(qpn8 | ds);
	c->signature = 0;
	c->dci_stream_channel_id = 0;   /* reserved on RC */
	c->fm_ce_se = fm_ce_se;
	c->imm = imm;
}

static ZD_ALWAYS_INLINE void zd_mlx5_set_raddr(struct mlx5_wqe_raddr_seg *r, uint64_t raddr,
					       uint32_t rkey)
{
	r->raddr = htobe64(raddr);
	r->rkey = htobe32(rkey);
	r->reserved = 0;
}

static ZD_ALWAYS_INLINE void zd_mlx5_set_dseg(struct mlx5_wqe_data_seg *d, uint64_t addr,
					      uint32_t len, uint32_t lkey)
{
	d->byte_count = htobe32(len);
	d->lkey = htobe32(lkey);
	d->addr = htobe64(addr);
}

static ZD_ALWAYS_INLINE void zd_mlx5_set_atomic(struct mlx5_wqe_atomic_seg *a, uint64_t swap_add,
						uint64_t compare)
{
	a->swap_add = htobe64(swap_add);
	a->compare = htobe64(compare);
}

/* Copies @len bytes to @dst inside the SQ, continuing at the start of the
 * buffer at its end; returns the byte after the copy. */
static ZD_ALWAYS_INLINE uint8_t *zd_mlx5_sq_copy(const struct zd_mlx5_sq *sq, uint8_t *dst,
						 const void *src, size_t len)
{
	size_t room = (size_t)(sq->end - dst);

	/* Small messages (the latency case): two overlapping word copies
	 * instead of a call. */
	if (ZD_LIKELY(len >= 8 && len <= 16 && len < room)) {
		uint64_t a, b;

		memcpy(&a, src, 8);
		memcpy(&b, (const uint8_t *)src + len - 8, 8);
		memcpy(dst, &a, 8);
		memcpy(dst + len - 8, &b, 8);
		return dst + len;
	}
	if (ZD_UNLIKELY(len >= room)) {
		memcpy(dst, src, room);
		src = (const uint8_t *)src + room;
		len -= room;
		dst = sq->buf;
	}
	memcpy(dst, src, len);
	return dst + len;
}

/* DAT completion flags -> fm_ce_se.  @event: the DTO wants a completion
 * event; the caller may also force CQ_UPDATE (moderation). */
static ZD_ALWAYS_INLINE uint8_t zd_mlx5_fm_ce_se(DAT_COMPLETION_FLAGS flags, bool signaled,
						 bool solicited_ok)
{
	uint8_t f = signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0;

	if (solicited_ok && (flags & DAT_COMPLETION_SOLICITED_WAIT_FLAG))
		f |= MLX5_WQE_CTRL_SOLICITED;
	if (flags & DAT_COMPLETION_BARRIER_FENCE_FLAG)
		f |= MLX5_WQE_CTRL_FENCE;
	return f;
}

/* Does a DTO with these flags want a DAT event when it succeeds?  DAT:
 * SUPPRESS always hides it; UNSIGNALLED hides it on an EP created with
 * request_completion_flags UNSIGNALLED. */
static ZD_ALWAYS_INLINE bool zd_mlx5_wants_event(DAT_COMPLETION_FLAGS flags,
						 DAT_COMPLETION_FLAGS ep_req_flags)
{
	return !((flags & DAT_COMPLETION_SUPPRESS_FLAG) ||
		 ((flags & DAT_COMPLETION_UNSIGNALLED_FLAG) &&
		  (ep_req_flags & DAT_COMPLETION_UNSIGNALLED_FLAG)));
}

/* What one WQE carries besides its local segments. */
struct zd_mlx5_wqe {
	uint8_t opcode;               /* MLX5_OPCODE_* */
	uint8_t fm_ce_se;
	uint32_t imm;                 /* big-endian, as the PRM carries it */
	const DAT_RMR_TRIPLET *remote;/* RDMA and atomics, else NULL */
	uint64_t swap_add, compare;   /* atomics */
	bool inl;                     /* local data inline (caller checked max_inline) */
};

/* Segments of a WQE before its local data, in 16-byte units. */
static ZD_ALWAYS_INLINE uint32_t zd_mlx5_wqe_hdr_ds(const struct zd_mlx5_wqe *w)
{
	bool atomic = w->opcode == MLX5_OPCODE_ATOMIC_CS || w->opcode == MLX5_OPCODE_ATOMIC_FA;

	return 1 + (w->remote != NULL) + atomic;
}

/* Upper bound of the WQEBBs a WQE of @n segments (@total bytes) takes. */
static ZD_ALWAYS_INLINE uint32_t zd_mlx5_wqe_max_bb(const struct zd_mlx5_wqe *w, uint32_t n,
						    uint32_t total)
{
	uint32_t ds = zd_mlx5_wqe_hdr_ds(w) +
		      (w->inl ? (uint32_t)(sizeof(struct mlx5_wqe_inl_data_seg) + total + 15) / 16 : n);

	return (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
}

/*
 * Writes the WQE at sq->pi (room checked by the caller) and returns its
 * number of WQEBBs; sq->pi is not moved.  Zero-length local segments are
 * skipped (a data segment of byte_count 0 means 2 GiB to the device).
 */
static ZD_ALWAYS_INLINE uint32_t zd_mlx5_sq_build_(struct zd_mlx5_sq *sq, const struct zd_mlx5_wqe *w,
						   const DAT_LMR_TRIPLET *iov, uint32_t n,
						   uint32_t total, bool may_wrap)
{
	struct mlx5_wqe_ctrl_seg *ctrl = zd_mlx5_sq_bb(sq, sq->pi);
	uint8_t *seg = (uint8_t *)ctrl + 16;   /* a block never ends the buffer early */
	uint32_t ds = 1;

/* A WQE known to fit its first block cannot reach the end of the buffer. */
#define ZD_MLX5_NEXT(p) (may_wrap ? (uint8_t *)zd_mlx5_sq_next_seg(sq, (p)) : (p) + 16)
	if (w->remote) {
		zd_mlx5_set_raddr((void *)seg, w->remote->virtual_address, w->remote->rmr_context);
		seg = ZD_MLX5_NEXT(seg);
		ds++;
	}
	if (w->opcode == MLX5_OPCODE_ATOMIC_CS || w->opcode == MLX5_OPCODE_ATOMIC_FA) {
		zd_mlx5_set_atomic((void *)seg, w->swap_add, w->compare);
		seg = ZD_MLX5_NEXT(seg);
		ds++;
	}
	if (w->inl) {
		struct mlx5_wqe_inl_data_seg *inl = (void *)seg;
		uint8_t *d = (uint8_t *)(inl + 1);

		for (uint32_t i = 0; i < n; i++)
			if (iov[i].segment_length)
				d = zd_mlx5_sq_copy(sq, d,
						    (const void *)(uintptr_t)iov[i].virtual_address,
						    iov[i].segment_length);
		inl->byte_count = htobe32(total | MLX5_INLINE_SEG);
		ds += (uint32_t)(sizeof(*inl) + total + 15) / 16;
	} else {
		for (uint32_t i = 0; i < n; i++) {
			if (ZD_UNLIKELY(!iov[i].segment_length))
				continue;
			zd_mlx5_set_dseg((void *)seg, iov[i].virtual_address,
					 (uint32_t)iov[i].segment_length, iov[i].lmr_context);
			seg = ZD_MLX5_NEXT(seg);
			ds++;
		}
	}
#undef ZD_MLX5_NEXT
	zd_mlx5_set_ctrl(ctrl, sq->pi, w->opcode, sq->qpn8, ds, w->fm_ce_se, w->imm);
	return (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
}

static ZD_ALWAYS_INLINE uint32_t zd_mlx5_sq_build(struct zd_mlx5_sq *sq, const struct zd_mlx5_wqe *w,
						  const DAT_LMR_TRIPLET *iov, uint32_t n,
						  uint32_t total)
{
	/* The latency case -- one block -- without wrap checks. */
	if (ZD_LIKELY(zd_mlx5_wqe_max_bb(w, n, total) == 1))
		return zd_mlx5_sq_build_(sq, w, iov, n, total, false);
	return zd_mlx5_sq_build_(sq, w, iov, n, total, true);
}

/* One 64-byte block to the BlueFlame register, in as few stores as the
 * CPU has (the WC buffer merges them; zd_mmio_flush_writes ends the burst). */
static ZD_ALWAYS_INLINE void zd_mlx5_bf_copy64(volatile uint64_t *dst, const uint64_t *src)
{
#if defined(ZD_TSAN)
	/* The software NIC reads the page with 8-byte atomic loads. */
	for (int i = 0; i < 8; i++)
		__atomic_store_n(&dst[i], src[i], __ATOMIC_RELAXED);
#elif defined(__x86_64__)
	__m128i a = _mm_load_si128((const __m128i *)src), b = _mm_load_si128((const __m128i *)src + 1),
		c = _mm_load_si128((const __m128i *)src + 2), d = _mm_load_si128((const __m128i *)src + 3);

	_mm_store_si128((__m128i *)dst, a);
	_mm_store_si128((__m128i *)dst + 1, b);
	_mm_store_si128((__m128i *)dst + 2, c);
	_mm_store_si128((__m128i *)dst + 3, d);
#else
	for (int i = 0; i < 8; i++)
		dst[i] = src[i];
#endif
}

/*
 * Unsignaled WQEs are retired by a later CQE; never let the SQ fill with
 * them (the device would never report progress): every unsig_max-th
 * unsignaled WQE is signaled anyway.  Signaled WQEs in between do not
 * restart the count (one store less on the common, signaled path; a
 * forced CQE a little early costs nothing).
 */
static ZD_ALWAYS_INLINE bool zd_mlx5_sq_unsig_full(struct zd_mlx5_sq *sq)
{
	if (++sq->unsig < sq->unsig_max)
		return false;
	sq->unsig = 0;
	return true;
}

/* Free WQEBBs (the poller moves ci). */
static ZD_ALWAYS_INLINE uint32_t zd_mlx5_sq_room(const struct zd_mlx5_sq *sq)
{
	/* acquire: pairs with the release store of ci in zd_mlx5_sq_retire_to:
	 * the device is done with the blocks below ci before we rewrite them. */
	return sq->wqe_cnt - (sq->pi - atomic_load_explicit(&sq->ci, memory_order_acquire));
}

/*
 * Rings the doorbell for the WQE of @nbb blocks at sq->pi and moves pi:
 * doorbell record first (the device may fetch the WQE from it alone), then
 * the BlueFlame copy of the WQE when it fits bf_size (it carries the WQE
 * itself, saving the device a DMA read), else the first 8 bytes of the
 * ctrl segment as the doorbell; flush the WC buffer; toggle the BF half.
 */
static ZD_ALWAYS_INLINE void zd_mlx5_sq_doorbell(struct zd_mlx5_sq *sq, uint32_t nbb)
{
	const uint64_t *src = zd_mlx5_sq_bb(sq, sq->pi);
	volatile uint64_t *dst = (volatile uint64_t *)sq->bf_cur;

	sq->pi += nbb;
	/* WQE (and wr[]) stores before the doorbell record. */
	zd_udma_to_device_barrier();
	zd_dev_store(sq->dbrec, htobe32(sq->pi & 0xffff));
	/* Doorbell record before the MMIO (WC) write. */
	zd_mmio_wc_start();
	if (ZD_LIKELY(nbb == 1 && sq->bf_size)) {
		zd_mlx5_bf_copy64(dst, src);
	} else if (nbb * MLX5_SEND_WQE_BB <= sq->bf_size) {
		for (uint32_t b = 0; b < nbb; b++) {
			zd_mlx5_bf_copy64(dst, src);
			dst += 8;
			src += 8;
			if (ZD_UNLIKELY((const uint8_t *)src == sq->end))
				src = (const uint64_t *)sq->buf;
		}
	} else {
		zd_dev_store(dst, *src);
	}
	zd_mmio_flush_writes();
	sq->bf_cur = (uint8_t *)((uintptr_t)sq->bf_cur ^ sq->bf_flip);
}

/* zd_mlx5_sq_doorbell for a one-block WQE at @wqe on an SQ with BlueFlame
 * (inl1_*); @pi: sq->pi after it. */
static ZD_ALWAYS_INLINE void zd_mlx5_sq_doorbell1(struct zd_mlx5_sq *sq, const uint8_t *wqe,
						  uint32_t pi)
{
	uint8_t *bf = sq->bf_cur;
	volatile __be32 *dbrec = sq->dbrec;

	sq->pi = pi;
	sq->bf_cur = (uint8_t *)((uintptr_t)bf ^ sq->bf_flip);
	/* WQE (and wr[]) stores before the doorbell record. */
	zd_udma_to_device_barrier();
	zd_dev_store(dbrec, htobe32(pi & 0xffff));
	/* Doorbell record before the MMIO (WC) write. */
	zd_mmio_wc_start();
	zd_mlx5_bf_copy64((volatile uint64_t *)bf, (const uint64_t *)wqe);
	zd_mmio_flush_writes();
}

/* The BlueFlame buffer's offset in the register (bf_off of rdma-core). */
static inline uint32_t zd_mlx5_sq_bf_off(const struct zd_mlx5_sq *sq)
{
	return (uint32_t)(sq->bf_cur - sq->bf_reg);
}

/*
 * Builds, books and rings one WQE.  @flags: its ZD_MLX5_WR_* bookkeeping
 * but WR_SIGNALED; @signal: ask the NIC for its CQE (moderation may ask
 * anyway).  Returns false (nothing written) when the SQ has no room.
 */
static ZD_ALWAYS_INLINE bool zd_mlx5_sq_post_wr(struct zd_mlx5_sq *sq, struct zd_mlx5_wqe *w,
						const DAT_LMR_TRIPLET *iov, uint32_t n,
						uint32_t total, DAT_DTO_COOKIE cookie,
						DAT_DTOS op, uint8_t flags, bool signal)
{
	uint32_t nbb;
	bool signaled = signal;

	if (ZD_UNLIKELY(zd_mlx5_wqe_max_bb(w, n, total) > zd_mlx5_sq_room(sq)))
		return false;
	if (!signaled)
		signaled = zd_mlx5_sq_unsig_full(sq);
	if (signaled)
		w->fm_ce_se |= MLX5_WQE_CTRL_CQ_UPDATE;
	nbb = zd_mlx5_sq_build(sq, w, iov, n, total);
	zd_mlx5_sq_wr_set(&sq->wr[sq->pi & sq->mask], cookie, total, op, sq->pi, (uint8_t)nbb,
			  (uint8_t)(flags | (signaled ? ZD_MLX5_WR_SIGNALED : 0)));
	zd_mlx5_sq_doorbell(sq, nbb);
	return true;
}

/* zd_mlx5_sq_post_wr of a DAT 2.0 operation.  @event: report a DAT event
 * on success. */
static ZD_ALWAYS_INLINE bool zd_mlx5_sq_post(struct zd_mlx5_sq *sq, struct zd_mlx5_wqe *w,
					     const DAT_LMR_TRIPLET *iov, uint32_t n, uint32_t total,
					     DAT_DTO_COOKIE cookie, DAT_DTOS op, bool event)
{
	return zd_mlx5_sq_post_wr(sq, w, iov, n, total, cookie, op,
				  event ? ZD_MLX5_WR_EVENT : 0, event);
}

/* ---- the latency case: one WQEBB, one inline segment ------------------- */

/* 1..32 bytes inside one WQEBB (no wrap): overlapping word copies, no call.
 * 8..16 bytes first, with one compare. */
static ZD_ALWAYS_INLINE void zd_mlx5_copy_small(uint8_t *dst, const uint8_t *src, uint32_t len)
{
	if (ZD_LIKELY(len - 8u <= 8u)) {
		uint64_t a, b;

		memcpy(&a, src, 8);
		memcpy(&b, src + len - 8, 8);
		memcpy(dst, &a, 8);
		memcpy(dst + len - 8, &b, 8);
	} else if (len > 16) {
		uint64_t a, b, c, d;

		memcpy(&a, src, 8);
		memcpy(&b, src + 8, 8);
		memcpy(&c, src + len - 16, 8);
		memcpy(&d, src + len - 8, 8);
		memcpy(dst, &a, 8);
		memcpy(dst + 8, &b, 8);
		memcpy(dst + len - 16, &c, 8);
		memcpy(dst + len - 8, &d, 8);
	} else if (len >= 4) {
		uint32_t a, b;

		memcpy(&a, src, 4);
		memcpy(&b, src + len - 4, 4);
		memcpy(dst, &a, 4);
		memcpy(dst + len - 4, &b, 4);
	} else {
		/* 1..3: first, middle, last */
		uint8_t a = src[0], b = src[len >> 1], c = src[len - 1];

		dst[0] = a;
		dst[len >> 1] = b;
		dst[len - 1] = c;
	}
}

/*
 * The first 16 bytes of a WQE as two 64-bit stores: opmod_idx_opcode and
 * qpn_ds (big-endian, as one big-endian 64-bit word), then signature,
 * stream id (0 on RC), fm_ce_se and imm.  Same bytes as zd_mlx5_set_ctrl,
 * but @imm_host is in host order: its big-endian bytes end the second
 * word, which on a little-endian host is the whole word byte-swapped
 * (one swap, no shift).
 */
static ZD_ALWAYS_INLINE void zd_mlx5_set_ctrl64(void *ctrl, uint32_t pi, uint8_t opcode,
						uint32_t qpn8, uint32_t ds, uint8_t fm_ce_se,
						uint32_t imm_host)
{
	uint64_t w0 = htobe64((uint64_t)(((pi & 0xffff) << 8) | opcode) << 32 | qpn8 | ds);
#if __BYTE_ORDER == __LITTLE_ENDIAN
	uint64_t w1 = (uint64_t)fm_ce_se << 24 | htobe64((uint64_t)imm_host);
#else
	uint64_t w1 = (uint64_t)fm_ce_se << 32 | imm_host;
#endif

	memcpy(ctrl, &w0, 8);
	memcpy((uint8_t *)ctrl + 8, &w1, 8);
}

/*
 * Prebuilt control segments: what the first 8 bytes of a one-block WQE's
 * control segment hold besides its WQE index and ds -- its opcode and the
 * QPN -- as a host-order word per opcode, set up with the SQ; a post ORs in
 * the index and ds, swaps once and stores (zd_mlx5_set_ctrl64_head).  The
 * second 8 bytes are constants of the post (fm_ce_se, the immediate).
 */
static ZD_ALWAYS_INLINE unsigned zd_mlx5_ctrl_head_of(uint8_t opcode)
{
	switch (opcode) {
	case MLX5_OPCODE_SEND:           return 0;
	case MLX5_OPCODE_RDMA_WRITE:     return 1;
	case MLX5_OPCODE_RDMA_WRITE_IMM: return 2;
	case MLX5_OPCODE_ATOMIC_FA:      return 3;
	default:                         return 4;  /* MLX5_OPCODE_ATOMIC_CS */
	}
}

static inline void zd_mlx5_sq_set_heads(struct zd_mlx5_sq *sq)
{
	static const uint8_t ops[] = { MLX5_OPCODE_SEND, MLX5_OPCODE_RDMA_WRITE,
				       MLX5_OPCODE_RDMA_WRITE_IMM, MLX5_OPCODE_ATOMIC_FA,
				       MLX5_OPCODE_ATOMIC_CS };

	_Static_assert(ZD_ARRAY_SIZE(ops) == ZD_ARRAY_SIZE(((struct zd_mlx5_sq *)0)->ctrl_head),
		       "a head per one-block opcode");
	for (unsigned i = 0; i < ZD_ARRAY_SIZE(ops); i++)
		sq->ctrl_head[zd_mlx5_ctrl_head_of(ops[i])] = (uint64_t)ops[i] << 32 | sq->qpn8;
}

/* zd_mlx5_set_ctrl64 from the SQ's prebuilt head of @opcode. */
static ZD_ALWAYS_INLINE void zd_mlx5_set_ctrl64_head(const struct zd_mlx5_sq *sq, void *ctrl,
						     uint32_t pi, uint8_t opcode, uint32_t ds,
						     uint8_t fm_ce_se, uint32_t imm_host)
{
	uint64_t w0 = htobe64((uint64_t)(uint16_t)pi << 40 |
			      sq->ctrl_head[zd_mlx5_ctrl_head_of(opcode)] | ds);
#if __BYTE_ORDER == __LITTLE_ENDIAN
	uint64_t w1 = (uint64_t)fm_ce_se << 24 | htobe64((uint64_t)imm_host);
#else
	uint64_t w1 = (uint64_t)fm_ce_se << 32 | imm_host;
#endif

	memcpy(ctrl, &w0, 8);
	memcpy((uint8_t *)ctrl + 8, &w1, 8);
}

/* Room for a one-block WQE at @pi (sq->pi): the SQ is full exactly when pi
 * is wqe_cnt blocks ahead of ci (posts never go further), one add and one
 * compare that leave pi as it is. */
static ZD_ALWAYS_INLINE bool zd_mlx5_sq_room1(const struct zd_mlx5_sq *sq, uint32_t pi)
{
	/* acquire: as in zd_mlx5_sq_room. */
	return pi != atomic_load_explicit(&sq->ci, memory_order_acquire) + sq->wqe_cnt;
}

/*
 * zd_mlx5_sq_post for a WQE of ctrl, [raddr], one inline segment of
 * 1..ZD_MLX5_INL1_MAX_* bytes (caller checked against sq->inl1_*, which
 * also says the SQ has BlueFlame, and the room: zd_mlx5_sq_room1) at @pi
 * (sq->pi): one WQEBB, so no wrap checks, no division, no loop.  Same
 * bytes, same bookkeeping, same doorbell as the general path.
 * @imm_host: the control segment's immediate in host order (the WQE
 * carries it big-endian).
 */
static ZD_ALWAYS_INLINE void zd_mlx5_sq_put_inl1(struct zd_mlx5_sq *sq, uint32_t pi, uint8_t opcode,
						 uint8_t fm_ce_se, bool rdma,
						 const DAT_RMR_TRIPLET *remote, const void *src,
						 uint32_t len, DAT_DTO_COOKIE cookie, DAT_DTOS op,
						 bool event, uint32_t imm_host)
{
	const uint32_t ds = 1 + rdma +
			    (uint32_t)(sizeof(struct mlx5_wqe_inl_data_seg) + len + 15) / 16;
	uint8_t *wqe, *seg;
	bool signaled = event;

	if (!signaled)
		signaled = zd_mlx5_sq_unsig_full(sq);
	if (signaled)
		fm_ce_se |= MLX5_WQE_CTRL_CQ_UPDATE;
	/* Stores in an order that keeps few values live: bookkeeping and
	 * ctrl first, the byte copies (which the compiler must assume alias
	 * @sq) last. */
	zd_mlx5_sq_wr_set(&sq->wr[pi & sq->mask], cookie, len, op, pi, 1,
			  (uint8_t)(zd_mlx5_wr_flags(op, event) |
				    (signaled ? ZD_MLX5_WR_SIGNALED : 0)));
	wqe = zd_mlx5_sq_bb(sq, pi);
	zd_mlx5_set_ctrl64_head(sq, wqe, pi, opcode, ds, fm_ce_se, imm_host);
	seg = wqe + 16;
	if (rdma) {
		/* raddr, then rkey and the reserved word as one store */
		uint64_t raddr = htobe64(remote->virtual_address);
		uint64_t rkey = (uint64_t)htobe32(remote->rmr_context);

#if __BYTE_ORDER != __LITTLE_ENDIAN
		rkey <<= 32;
#endif
		memcpy(seg, &raddr, 8);
		memcpy(seg + 8, &rkey, 8);
		seg += 16;
	}
	((struct mlx5_wqe_inl_data_seg *)seg)->byte_count = htobe32(len | MLX5_INLINE_SEG);
	zd_mlx5_copy_small(seg + sizeof(struct mlx5_wqe_inl_data_seg), src, len);
	zd_mlx5_sq_doorbell1(sq, wqe, pi + 1);
}

/*
 * The one block of an atomic (zdapl_mlx5_post.c's post_atomic: ctrl,
 * raddr, the atomic segment with its operands big-endian, one 8-byte data
 * segment for the old value): the bytes of the general builder for it,
 * without its loops and geometry.  Room checked by the caller (room1).
 * @flags: its ZD_MLX5_WR_* but WR_SIGNALED; @signal: ask for its CQE.
 */
static ZD_ALWAYS_INLINE void zd_mlx5_sq_put_atomic1(struct zd_mlx5_sq *sq, uint32_t pi,
						    uint8_t opcode, const DAT_RMR_TRIPLET *remote,
						    uint64_t swap_add, uint64_t compare,
						    const DAT_LMR_TRIPLET *local,
						    DAT_DTO_COOKIE cookie, DAT_DTOS op, uint8_t flags,
						    bool signal)
{
	const uint32_t ds = 4;
	bool signaled = signal;
	uint8_t *wqe;

	if (!signaled)
		signaled = zd_mlx5_sq_unsig_full(sq);
	zd_mlx5_sq_wr_set(&sq->wr[pi & sq->mask], cookie, 8, op, pi, 1,
			  (uint8_t)(flags | (signaled ? ZD_MLX5_WR_SIGNALED : 0)));
	wqe = zd_mlx5_sq_bb(sq, pi);
	zd_mlx5_set_ctrl64_head(sq, wqe, pi, opcode, ds, signaled ? MLX5_WQE_CTRL_CQ_UPDATE : 0, 0);
	zd_mlx5_set_raddr((void *)(wqe + 16), remote->virtual_address, remote->rmr_context);
	zd_mlx5_set_atomic((void *)(wqe + 32), swap_add, compare);
	zd_mlx5_set_dseg((void *)(wqe + 48), local->virtual_address, 8, local->lmr_context);
	if (ZD_LIKELY(sq->bf_size))
		zd_mlx5_sq_doorbell1(sq, wqe, pi + 1);
	else
		zd_mlx5_sq_doorbell(sq, 1);
}

/* zd_mlx5_sq_put_inl1 with its room check; false (nothing written) when
 * the SQ is full. */
static ZD_ALWAYS_INLINE bool zd_mlx5_sq_post_inl1(struct zd_mlx5_sq *sq, uint8_t opcode,
						  uint8_t fm_ce_se, bool rdma,
						  const DAT_RMR_TRIPLET *remote, const void *src,
						  uint32_t len, DAT_DTO_COOKIE cookie, DAT_DTOS op,
						  bool event, uint32_t imm_host)
{
	const uint32_t pi = sq->pi;

	if (ZD_UNLIKELY(!zd_mlx5_sq_room1(sq, pi)))
		return false;
	zd_mlx5_sq_put_inl1(sq, pi, opcode, fm_ce_se, rdma, remote, src, len, cookie, op, event,
			    imm_host);
	return true;
}

/*
 * Poller: the CQE of the WQE whose bookkeeping is @wr arrived; frees it
 * and every WQE before it.  Whatever the completion needs from @wr is read
 * before: from this store on, a poster on another thread may reuse the
 * entry (a full SQ's next post lands exactly there).  @next_ci: @wr's.
 */
static ZD_ALWAYS_INLINE void zd_mlx5_sq_retire_to(struct zd_mlx5_sq *sq, uint32_t next_ci)
{
	/* release: pairs with the acquire in zd_mlx5_sq_room; our reads of
	 * the entries below next_ci are done before a poster reuses them. */
	atomic_store_explicit(&sq->ci, next_ci, memory_order_release);
}

/* Poller: the WQE at @wqe_counter completed: a copy of its bookkeeping,
 * read before it and every WQE before it are freed. */
static ZD_ALWAYS_INLINE struct zd_mlx5_sq_wr zd_mlx5_sq_retire(struct zd_mlx5_sq *sq,
							       uint16_t wqe_counter)
{
	const struct zd_mlx5_sq_wr w = sq->wr[wqe_counter & sq->mask];

	zd_mlx5_sq_retire_to(sq, w.next_ci);
	return w;
}

#endif /* ZD_MLX5_SQ_H */
