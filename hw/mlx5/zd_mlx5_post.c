/*
 * The DAT posts of the mlx5 device: one WQE straight into the SQ/RQ/SRQ
 * buffer and one doorbell per call (zd_mlx5_sq.h, zd_mlx5_rq.h).  Core
 * checked the handle, the EP state and the segment count; keys, bounds and
 * access are the device's to check (errors come back as error CQEs).
 *
 * A send or RDMA write of one small segment that fits inline takes a
 * fast path (post_inl1); the rest, post_sq.  The mlx5 lines' own DAT
 * entries (zd_mlx5_dat_post_*) take that case from the handle to the
 * doorbell in one function: the handle's zone, one test of the shape
 * ((n - 1) | flags), one load of the EP's dto_qp for its liveness, state,
 * QP and IOV limits (core/zd_dto_entry.h zd_request_fast1), the inline
 * source against the QP's memo, room, then the one-block WQE from the
 * SQ's prebuilt control-segment head (zd_mlx5_sq.h); everything else goes
 * to core's checked entry with post_send/post_rdma_write inlined.  The IB
 * extensions' posts are inlined into their dat_extension_op entry the same
 * way (zd_mlx5_dat_handle_extendedop, core/zd_ext_entry.h).
 * tools/mlx5_instr.sh and tools/instr_count.sh count the instructions of
 * the latency case (ZD_INSTR_OP=unsig: of a bandwidth stream's write).
 *
 * Threads: one poster per EP (and per SRQ) at a time, as the DAT's
 * non-thread-safe registration promises.
 */
#include "core/zd_dto_entry.h"
#include "core/zd_ext_entry.h"
#include "core/zd_ep.h"
#include "core/zd_srq.h"
#include "core/zd_keys.h"
#include "evd/zd_dto_event.h"
#include "hw/mlx5/zd_mlx5.h"

#define ZD_MLX5_SQ_FULL DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP)

/*
 * Inline data is copied by the CPU, so no NIC checks its lmr_context: the
 * post does, as the NIC would for a data segment (a live LMR of the EP's
 * PZ whose lkey it is, the segment inside it), so that a bad context
 * completes DAT_DTO_ERR_LOCAL_PROTECTION as DAT says -- the WQE then
 * carries a data segment and the NIC reports it -- and a bad address is
 * never read.  A latency loop posts from one LMR: the last range checked
 * is remembered per QP (qp->inl_memo) until a deregistration
 * (zd_mlx5_reg_gen).
 */
static __attribute__((noinline)) bool inl_src_check(struct zd_mlx5_qp *qp,
						   const DAT_LMR_TRIPLET *s)
{
	/* acquire: pairs with the deregistration's bump; an LMR found live
	 * below was registered in this generation or before. */
	uint32_t gen = atomic_load_explicit(&zd_mlx5_reg_gen, memory_order_acquire);
	struct zd_keys_range range;

	if (!zd_keys_lmr_covers(qp->ep->obj.ia, s->lmr_context, ZD_KEY_LOCAL, qp->ep->pz, 0,
				s->virtual_address, s->segment_length, &range))
		return false;
	qp->inl_memo.lkey = s->lmr_context;
	qp->inl_memo.gen = gen;
	qp->inl_memo.base = range.base;
	qp->inl_memo.size = range.size;
	return true;
}

/* The segment lies in the range the last check found (no call).  The
 * range test of zd_range_in as one sum: the segment's end offset, which
 * carries out exactly when @addr is below the base by less than @len (an
 * address further below gives a huge offset that fails the compare), and
 * is at most the size exactly when the segment is inside. */
static ZD_ALWAYS_INLINE bool inl_src_memo_in(const struct zd_mlx5_qp *qp, uint32_t lkey,
					     uint64_t addr, uint32_t len)
{
	uint64_t end;

	return ZD_LIKELY(lkey == qp->inl_memo.lkey) &&
	       ZD_LIKELY(qp->inl_memo.gen ==
			 atomic_load_explicit(&zd_mlx5_reg_gen, memory_order_relaxed)) &&
	       !__builtin_add_overflow(addr - qp->inl_memo.base, (uint64_t)len, &end) &&
	       ZD_LIKELY(end <= qp->inl_memo.size);
}

static ZD_ALWAYS_INLINE bool inl_src_memo_ok(const struct zd_mlx5_qp *qp, const DAT_LMR_TRIPLET *s)
{
	return inl_src_memo_in(qp, s->lmr_context, s->virtual_address, s->segment_length);
}

static ZD_ALWAYS_INLINE bool inl_src_ok(struct zd_mlx5_qp *qp, const DAT_LMR_TRIPLET *s)
{
	return inl_src_memo_ok(qp, s) || inl_src_check(qp, s);
}

/* Every segment of a multi-segment inline post (zero-length ones are
 * skipped by the builder). */
static bool inl_srcs_ok(struct zd_mlx5_qp *qp, const DAT_LMR_TRIPLET *iov, DAT_COUNT n)
{
	for (DAT_COUNT i = 0; i < n; i++)
		if (iov[i].segment_length && !inl_src_ok(qp, &iov[i]))
			return false;
	return true;
}

/* Sum of the segment lengths; false above the device's message size. */
static ZD_ALWAYS_INLINE bool iov_total(const DAT_LMR_TRIPLET *iov, DAT_COUNT n, uint32_t max,
				       uint32_t *total)
{
	uint64_t t = 0;

	if (ZD_LIKELY(n == 1)) {
		*total = iov[0].segment_length;   /* DAT_SEG_LENGTH: 32 bits */
		return ZD_LIKELY(*total <= max);
	}
	for (DAT_COUNT i = 0; i < n; i++)
		t += iov[i].segment_length;
	*total = (uint32_t)t;
	return ZD_LIKELY(t <= max);
}

/* @imm: the immediate data in the WQE's byte order (big-endian). */
static ZD_ALWAYS_INLINE DAT_RETURN post_sq(struct zd_ep *ep, uint8_t opcode, DAT_DTOS op,
					   DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
					   DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
					   uint32_t imm, DAT_COMPLETION_FLAGS flags)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;
	struct zd_mlx5_wqe w;
	uint32_t total;
	bool event;

	if (ZD_UNLIKELY(!iov_total(iov, n, qp->max_msg, &total)))
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	w.opcode = opcode;
	/* The operations that consume a receive may wake a solicited wait. */
	w.fm_ce_se = zd_mlx5_fm_ce_se(flags, false, opcode == MLX5_OPCODE_SEND ||
					     opcode == MLX5_OPCODE_RDMA_WRITE_IMM);
	w.imm = imm;
	w.remote = remote;
	w.swap_add = 0;
	w.compare = 0;
	/* Reads land in local memory: never inline.  A source that fails
	 * the check goes as data segments, for the NIC to report. */
	w.inl = opcode != MLX5_OPCODE_RDMA_READ && total <= qp->sq.max_inline && n > 0 &&
		inl_srcs_ok(qp, iov, n);
	event = zd_mlx5_wants_event(flags, qp->req_flags);
	if (ZD_UNLIKELY(!zd_mlx5_sq_post_wr(&qp->sq, &w, iov, (uint32_t)n, total, cookie, op,
					    zd_mlx5_wr_flags(op, event), event)))
		return ZD_MLX5_SQ_FULL;
	return DAT_SUCCESS;
}

/* The general path out of line, with the op's own arguments: the fast
 * path reaches it with a jump and keeps no registers for it. */
static __attribute__((noinline)) DAT_RETURN post_send_slow(struct zd_ep *ep, DAT_COUNT n,
							   const DAT_LMR_TRIPLET *iov,
							   DAT_DTO_COOKIE cookie,
							   DAT_COMPLETION_FLAGS flags)
{
	return post_sq(ep, MLX5_OPCODE_SEND, DAT_DTO_SEND, n, iov, cookie, NULL, 0, flags);
}

static __attribute__((noinline)) DAT_RETURN post_write_slow(struct zd_ep *ep, DAT_COUNT n,
							    const DAT_LMR_TRIPLET *iov,
							    DAT_DTO_COOKIE cookie,
							    const DAT_RMR_TRIPLET *remote,
							    DAT_COMPLETION_FLAGS flags)
{
	return post_sq(ep, MLX5_OPCODE_RDMA_WRITE, DAT_DTO_RDMA_WRITE, n, iov, cookie, remote, 0,
		       flags);
}

/*
 * The latency case: one segment of 1..@max bytes that fits the QP's inline
 * limit -- a one-block inline WQE (zd_mlx5_sq_post_inl1).  A message this
 * small is within any device's max_msg (IB: at least one MTU), so the
 * length check of iov_total cannot fail here.  Default completion flags
 * (a signalled DTO with an event) are the common case and need no mapping.
 */
static ZD_ALWAYS_INLINE bool inl1_ok(DAT_COUNT n, const DAT_LMR_TRIPLET *iov, uint32_t max)
{
	/* 1..max: a zero-length segment takes the general path */
	return ZD_LIKELY(n == 1) && iov[0].segment_length - 1 < max;
}

static ZD_ALWAYS_INLINE DAT_RETURN post_inl1(struct zd_mlx5_qp *qp, uint8_t opcode, DAT_DTOS op,
					     const DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
					     bool rdma, const DAT_RMR_TRIPLET *remote,
					     uint8_t fm_ce_se, bool event)
{
	if (ZD_UNLIKELY(!zd_mlx5_sq_post_inl1(&qp->sq, opcode, fm_ce_se, rdma, remote,
					      (const void *)(uintptr_t)iov[0].virtual_address,
					      iov[0].segment_length, cookie, op, event, 0)))
		return ZD_MLX5_SQ_FULL;
	return DAT_SUCCESS;
}

/* The fast path under completion flags other than the default, out of
 * line so that the default case keeps few registers live. */
static __attribute__((noinline)) DAT_RETURN post_send_inl1_flags(struct zd_mlx5_qp *qp,
								 const DAT_LMR_TRIPLET *iov,
								 DAT_DTO_COOKIE cookie,
								 DAT_COMPLETION_FLAGS flags)
{
	return post_inl1(qp, MLX5_OPCODE_SEND, DAT_DTO_SEND, iov, cookie, false, NULL,
			 zd_mlx5_fm_ce_se(flags, false, true),
			 zd_mlx5_wants_event(flags, qp->req_flags));
}

static __attribute__((noinline)) DAT_RETURN post_write_inl1_flags(struct zd_mlx5_qp *qp,
								  const DAT_LMR_TRIPLET *iov,
								  DAT_DTO_COOKIE cookie,
								  const DAT_RMR_TRIPLET *remote,
								  DAT_COMPLETION_FLAGS flags)
{
	return post_inl1(qp, MLX5_OPCODE_RDMA_WRITE, DAT_DTO_RDMA_WRITE, iov, cookie, true, remote,
			 zd_mlx5_fm_ce_se(flags, false, false),
			 zd_mlx5_wants_event(flags, qp->req_flags));
}

static ZD_ALWAYS_INLINE DAT_RETURN post_send(struct zd_ep *ep, DAT_COUNT n,
					     const DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
					     DAT_COMPLETION_FLAGS flags)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;

	if (inl1_ok(n, iov, qp->sq.inl1_send) && inl_src_ok(qp, iov)) {
		if (ZD_LIKELY(flags == DAT_COMPLETION_DEFAULT_FLAG))
			return post_inl1(qp, MLX5_OPCODE_SEND, DAT_DTO_SEND, iov, cookie, false,
					 NULL, 0, true);
		return post_send_inl1_flags(qp, iov, cookie, flags);
	}
	return post_send_slow(ep, n, iov, cookie, flags);
}

static ZD_ALWAYS_INLINE DAT_RETURN post_rdma_write(struct zd_ep *ep, DAT_COUNT n,
						   const DAT_LMR_TRIPLET *iov,
						   DAT_DTO_COOKIE cookie,
						   const DAT_RMR_TRIPLET *remote,
						   DAT_COMPLETION_FLAGS flags)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;

	if (inl1_ok(n, iov, qp->sq.inl1_rdma) && inl_src_ok(qp, iov)) {
		/* core checked @remote (DAT_INVALID_ARG5 when NULL) */
		if (ZD_LIKELY(flags == DAT_COMPLETION_DEFAULT_FLAG))
			return post_inl1(qp, MLX5_OPCODE_RDMA_WRITE, DAT_DTO_RDMA_WRITE, iov,
					 cookie, true, remote, 0, true);
		return post_write_inl1_flags(qp, iov, cookie, remote, flags);
	}
	return post_write_slow(ep, n, iov, cookie, remote, flags);
}

/* The device ops (core's entries, the tests) */
DAT_RETURN zd_mlx5_post_send(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			     DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	return post_send(ep, n, iov, cookie, flags);
}

DAT_RETURN zd_mlx5_post_rdma_write(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				   DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				   DAT_COMPLETION_FLAGS flags)
{
	return post_rdma_write(ep, n, iov, cookie, remote, flags);
}

/*
 * ... and the DAT entries with them inlined (zd_device_ops.dat_entries).
 * The latency case -- one segment from the LMR the last inline post
 * checked (inl_src_memo_ok), default flags, room in the SQ -- goes from
 * the handle check to the doorbell in line (dat_post_inl1); so does, one
 * call further, the bandwidth loops' unsignalled post (SUPPRESS: no CQE
 * unless moderation asks for one, nothing to do at completion time).
 * Every other call, errors included, goes on with the entry's own
 * arguments to the same entry with the device's op inlined: a tail call,
 * so the fast path keeps no registers for it.
 */
typedef DAT_RETURN dat_post_fn(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			       DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
			       DAT_COMPLETION_FLAGS flags);

/* One segment on @ep (a slot of the EP zone), completion flags @want:
 * @rdma: an RDMA write (else a send, @remote unused); @other: everything
 * else, with the same arguments. */
static ZD_ALWAYS_INLINE DAT_RETURN dat_post_inl1(struct zd_ep *ep, DAT_LMR_TRIPLET *iov,
						 DAT_DTO_COOKIE cookie,
						 const DAT_RMR_TRIPLET *remote, bool rdma,
						 DAT_COMPLETION_FLAGS want, dat_post_fn *other)
{
	struct zd_mlx5_qp *qp = zd_request_qp1(ep, iov);

	if (ZD_LIKELY(qp != NULL) && ZD_LIKELY(!rdma || remote != NULL)) {
		/* The segment read once (the stores below may alias it). */
		const uint32_t len = iov->segment_length, lkey = iov->lmr_context;
		const uint64_t addr = iov->virtual_address;
		uint32_t pi;

		if (ZD_LIKELY(len - 1u < (rdma ? qp->sq.inl1_rdma : qp->sq.inl1_send)) &&
		    inl_src_memo_in(qp, lkey, addr, len) &&
		    ZD_LIKELY(zd_mlx5_sq_room1(&qp->sq, pi = qp->sq.pi))) {
			/* Counted first: the EP is not needed after. */
			zd_count_ep_post_bytes(&ep->cnt, rdma ? ZD_POST_WRITE : ZD_POST_SEND, len);
			zd_mlx5_sq_put_inl1(&qp->sq, pi,
					    rdma ? MLX5_OPCODE_RDMA_WRITE : MLX5_OPCODE_SEND, 0,
					    rdma, remote, (const void *)(uintptr_t)addr, len,
					    cookie, rdma ? DAT_DTO_RDMA_WRITE : DAT_DTO_SEND,
					    want == DAT_COMPLETION_DEFAULT_FLAG, 0);
			return DAT_SUCCESS;
		}
	}
	return other(ep, 1, iov, cookie, remote, want);
}

/* The entries: the default flags in line, SUPPRESS one jump away (the
 * handle checked once; its arguments where they came, in the registers
 * they came in), the rest to @other. */
static ZD_ALWAYS_INLINE DAT_RETURN dat_post_entry(DAT_EP_HANDLE h, DAT_COUNT n,
						  DAT_LMR_TRIPLET *iov, DAT_DTO_COOKIE cookie,
						  const DAT_RMR_TRIPLET *remote,
						  DAT_COMPLETION_FLAGS flags, bool rdma,
						  dat_post_fn *other, dat_post_fn *suppressed)
{
	struct zd_ep *ep = zd_obj_slot(h, ZD_OBJ_EP);

	if (ZD_LIKELY(ep != NULL)) {
		if (ZD_LIKELY(zd_request_shape1(n, flags)))
			return dat_post_inl1(ep, iov, cookie, remote, rdma,
					     DAT_COMPLETION_DEFAULT_FLAG, other);
		if (n == 1 && flags == DAT_COMPLETION_SUPPRESS_FLAG)
			return suppressed(ep, n, iov, cookie, remote, flags);
	}
	return other(h, n, iov, cookie, remote, flags);
}

static __attribute__((noinline)) DAT_RETURN dat_post_send_other(DAT_EP_HANDLE h, DAT_COUNT n,
								DAT_LMR_TRIPLET *iov,
								DAT_DTO_COOKIE cookie,
								const DAT_RMR_TRIPLET *remote,
								DAT_COMPLETION_FLAGS flags)
{
	(void)remote;
	return zd_ep_post_send_entry(h, n, iov, cookie, flags, post_send);
}

/* (@h: an EP slot, @n 1, @flags SUPPRESS; noipa: kept with the entry's
 * signature, so the entry jumps here with its registers as they are) */
static __attribute__((noipa)) DAT_RETURN dat_post_send_suppressed(DAT_EP_HANDLE h, DAT_COUNT n,
								     DAT_LMR_TRIPLET *iov,
								     DAT_DTO_COOKIE cookie,
								     const DAT_RMR_TRIPLET *remote,
								     DAT_COMPLETION_FLAGS flags)
{
	(void)n, (void)flags;
	return dat_post_inl1(h, iov, cookie, remote, false, DAT_COMPLETION_SUPPRESS_FLAG,
			     dat_post_send_other);
}

DAT_RETURN zd_mlx5_dat_post_send(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				 DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	return dat_post_entry(h, n, iov, cookie, NULL, flags, false, dat_post_send_other,
			      dat_post_send_suppressed);
}

static __attribute__((noinline)) DAT_RETURN dat_post_rdma_write_other(DAT_EP_HANDLE h, DAT_COUNT n,
								      DAT_LMR_TRIPLET *iov,
								      DAT_DTO_COOKIE cookie,
								      const DAT_RMR_TRIPLET *remote,
								      DAT_COMPLETION_FLAGS flags)
{
	return zd_ep_post_rdma_entry(h, n, iov, cookie, remote, flags, true, post_rdma_write);
}

static __attribute__((noipa)) DAT_RETURN
dat_post_rdma_write_suppressed(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
			       DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
			       DAT_COMPLETION_FLAGS flags)
{
	(void)n, (void)flags;
	return dat_post_inl1(h, iov, cookie, remote, true, DAT_COMPLETION_SUPPRESS_FLAG,
			     dat_post_rdma_write_other);
}

DAT_RETURN zd_mlx5_dat_post_rdma_write(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET *iov,
				       DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				       DAT_COMPLETION_FLAGS flags)
{
	return dat_post_entry(h, n, iov, cookie, remote, flags, true, dat_post_rdma_write_other,
			      dat_post_rdma_write_suppressed);
}

DAT_RETURN zd_mlx5_post_rdma_read(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				  DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				  DAT_COMPLETION_FLAGS flags)
{
	return post_sq(ep, MLX5_OPCODE_RDMA_READ, DAT_DTO_RDMA_READ, n, iov, cookie, remote, 0,
		       flags);
}

/* ---- the IB extensions (core/zd_device.h: post_rdma_write_imm, post_atomic) ---- */

/*
 * dat_ib_post_rdma_write_immed: a plain write's WQE (inline when small)
 * with opcode RDMA_WRITE_IMM and the immediate in the control segment,
 * big-endian as the PRM carries it; the target's poll turns it back
 * (zd_mlx5_cq.c), so it gets the 32-bit value posted here.
 */
static ZD_ALWAYS_INLINE DAT_RETURN post_write_imm_inl1(struct zd_mlx5_qp *qp,
						       const DAT_LMR_TRIPLET *iov,
						       DAT_DTO_COOKIE cookie,
						       const DAT_RMR_TRIPLET *remote, uint32_t imm,
						       uint8_t fm_ce_se, bool event)
{
	if (ZD_UNLIKELY(!zd_mlx5_sq_post_inl1(&qp->sq, MLX5_OPCODE_RDMA_WRITE_IMM, fm_ce_se, true,
					      remote,
					      (const void *)(uintptr_t)iov[0].virtual_address,
					      iov[0].segment_length, cookie,
					      (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, event, imm)))
		return ZD_MLX5_SQ_FULL;
	return DAT_SUCCESS;
}

/* Every case but the latency one, out of line: nothing of the caller's
 * needs to survive a call on that path. */
static __attribute__((noinline)) DAT_RETURN post_write_imm_other(struct zd_ep *ep, DAT_COUNT n,
								 const DAT_LMR_TRIPLET *iov,
								 DAT_DTO_COOKIE cookie,
								 const DAT_RMR_TRIPLET *remote,
								 uint32_t imm,
								 DAT_COMPLETION_FLAGS flags)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;

	if (inl1_ok(n, iov, qp->sq.inl1_rdma) && inl_src_ok(qp, iov))
		/* It consumes a receive: it may wake a solicited wait. */
		return post_write_imm_inl1(qp, iov, cookie, remote, imm,
					   zd_mlx5_fm_ce_se(flags, false, true),
					   zd_mlx5_wants_event(flags, qp->req_flags));
	return post_sq(ep, MLX5_OPCODE_RDMA_WRITE_IMM, (DAT_DTOS)DAT_IB_DTO_RDMA_WRITE_IMMED, n,
		       iov, cookie, remote, htobe32(imm), flags);
}

/* The latency case -- one small segment from the LMR the last inline post
 * checked (inl_src_ok's memo), default flags -- inline. */
static ZD_ALWAYS_INLINE DAT_RETURN post_rdma_write_imm(struct zd_ep *ep, DAT_COUNT n,
						       const DAT_LMR_TRIPLET *iov,
						       DAT_DTO_COOKIE cookie,
						       const DAT_RMR_TRIPLET *remote, uint32_t imm,
						       DAT_COMPLETION_FLAGS flags)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;

	if (ZD_LIKELY(flags == DAT_COMPLETION_DEFAULT_FLAG) && inl1_ok(n, iov, qp->sq.inl1_rdma) &&
	    inl_src_memo_ok(qp, iov))
		return post_write_imm_inl1(qp, iov, cookie, remote, imm, 0, true);
	return post_write_imm_other(ep, n, iov, cookie, remote, imm, flags);
}

DAT_RETURN zd_mlx5_post_rdma_write_imm(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				       DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				       uint32_t imm, DAT_COMPLETION_FLAGS flags)
{
	return post_rdma_write_imm(ep, n, iov, cookie, remote, imm, flags);
}

/*
 * dat_ib_post_fetch_and_add / dat_ib_post_cmp_and_swap: ctrl, raddr, the
 * atomic segment (operands big-endian) and one 8-byte data segment for
 * the old value -- 64 bytes, one WQEBB.  Where the NIC writes that value
 * big-endian (qp->atomic_be: the PRM's default requester mode, which the
 * software NIC keeps), the WQE is always signalled so that its CQE comes
 * and the poll turns the value to host order before reporting it (or, if
 * suppressed, before anything after it: the consumer cannot tell it is
 * done earlier).  The default completion flags inline (the latency
 * case: no mapping of flags), the others out of line.
 */
static ZD_ALWAYS_INLINE DAT_RETURN post_atomic_wqe(struct zd_ep *ep, DAT_DTOS op,
						   const DAT_LMR_TRIPLET *local,
						   DAT_DTO_COOKIE cookie,
						   const DAT_RMR_TRIPLET *remote, uint64_t operand,
						   uint64_t swap, DAT_COMPLETION_FLAGS flags)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;
	const bool cas = op == (DAT_DTOS)DAT_IB_DTO_CMP_SWAP;
	const bool event = zd_mlx5_wants_event(flags, qp->req_flags);
	/* Core checked the local segment holds the 8 bytes. */
	const DAT_LMR_TRIPLET old = { .lmr_context = local->lmr_context,
				      .virtual_address = local->virtual_address,
				      .segment_length = 8 };
	struct zd_mlx5_wqe w = {
		.opcode = cas ? MLX5_OPCODE_ATOMIC_CS : MLX5_OPCODE_ATOMIC_FA,
		.fm_ce_se = zd_mlx5_fm_ce_se(flags, false, false),
		.remote = remote,
		.swap_add = cas ? swap : operand,
		.compare = cas ? operand : 0,
	};
	uint8_t f = zd_mlx5_wr_flags(op, event) | (qp->atomic_be ? ZD_MLX5_WR_SWAP64 : 0);

	if (ZD_UNLIKELY(!zd_mlx5_sq_post_wr(&qp->sq, &w, &old, 1, 8, cookie, op, f,
					    event || qp->atomic_be)))
		return ZD_MLX5_SQ_FULL;
	return DAT_SUCCESS;
}

static __attribute__((noinline)) DAT_RETURN post_atomic_flags(struct zd_ep *ep, DAT_DTOS op,
							      const DAT_LMR_TRIPLET *local,
							      DAT_DTO_COOKIE cookie,
							      const DAT_RMR_TRIPLET *remote,
							      uint64_t operand, uint64_t swap,
							      DAT_COMPLETION_FLAGS flags)
{
	return post_atomic_wqe(ep, op, local, cookie, remote, operand, swap, flags);
}

/* The default completion flags (the latency case): the one-block builder
 * (zd_mlx5_sq_put_atomic1), the same bytes as post_atomic_wqe's. */
static ZD_ALWAYS_INLINE DAT_RETURN post_atomic(struct zd_ep *ep, DAT_DTOS op,
					       const DAT_LMR_TRIPLET *local, DAT_DTO_COOKIE cookie,
					       const DAT_RMR_TRIPLET *remote, uint64_t operand,
					       uint64_t swap, DAT_COMPLETION_FLAGS flags)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;
	const bool cas = op == (DAT_DTOS)DAT_IB_DTO_CMP_SWAP;
	const uint32_t pi = qp->sq.pi;

	if (ZD_UNLIKELY(flags != DAT_COMPLETION_DEFAULT_FLAG))
		return post_atomic_flags(ep, op, local, cookie, remote, operand, swap, flags);
	if (ZD_UNLIKELY(!zd_mlx5_sq_room1(&qp->sq, pi)))
		return ZD_MLX5_SQ_FULL;
	zd_mlx5_sq_put_atomic1(&qp->sq, pi, cas ? MLX5_OPCODE_ATOMIC_CS : MLX5_OPCODE_ATOMIC_FA,
			       remote, cas ? swap : operand, cas ? operand : 0, local, cookie, op,
			       (uint8_t)(zd_mlx5_wr_flags(op, true) |
					 (qp->atomic_be ? ZD_MLX5_WR_SWAP64 : 0)),
			       true);
	return DAT_SUCCESS;
}

DAT_RETURN zd_mlx5_post_atomic(struct zd_ep *ep, DAT_DTOS op, const DAT_LMR_TRIPLET *local,
			       DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
			       uint64_t operand, uint64_t swap, DAT_COMPLETION_FLAGS flags)
{
	return post_atomic(ep, op, local, cookie, remote, operand, swap, flags);
}

/* dat_extension_op with the posts above inlined (zd_device_ops.dat_entries). */
DAT_RETURN zd_mlx5_dat_handle_extendedop(DAT_HANDLE h, DAT_EXTENDED_OP op, va_list args)
{
	return zd_handle_extendedop_entry(h, op, args, post_rdma_write_imm, post_atomic);
}

DAT_RETURN zd_mlx5_post_recv(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			     DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	struct zd_mlx5_qp *qp = ep->dev_priv;

	if (ZD_UNLIKELY(!qp->rq.wqe_cnt))
		return DAT_ERROR(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE);
	if (ZD_UNLIKELY((uint32_t)n > qp->rq.max_sge))
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	if (ZD_UNLIKELY(!zd_mlx5_rq_post(&qp->rq, iov, (uint32_t)n, cookie)))
		return ZD_MLX5_SQ_FULL;
	/* dat_ep_set_watermark armed: the receives now held (zd_mlx5_rq_counts) */
	if (ZD_UNLIKELY(zd_ep_hwm_armed(ep))) {
		DAT_COUNT avail, held = DAT_VALUE_UNKNOWN;

		zd_mlx5_rq_counts(ep, NULL, &avail, &held);
		zd_ep_soft_hwm_check(ep, held);
	}
	return DAT_SUCCESS;
}

DAT_RETURN zd_mlx5_srq_post_recv(struct zd_srq *srq, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				 DAT_DTO_COOKIE cookie)
{
	struct zd_mlx5_srq_obj *s = srq->dev_priv;

	if (ZD_UNLIKELY((uint32_t)n > s->q.max_sge))
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	if (ZD_UNLIKELY(!zd_mlx5_srq_post(&s->q, iov, (uint32_t)n, cookie)))
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
	return DAT_SUCCESS;
}
