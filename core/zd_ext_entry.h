/*
 * The DAT entry of the IB extensions (DAT_PROVIDER.handle_extendedop_func,
 * where libdat2's dat_extension_op lands) as an inline template, as the
 * plain posts' (core/zd_dto_entry.h): the hot operations -- a write with
 * immediate data, fetch-and-add, compare-and-swap -- are read from the
 * va_list here, checked by one folded test and handed to the device's
 * post, which a device that instantiates the template passes as a
 * constant (its zd_device_ops.dat_entries.handle_extendedop), so that the
 * call is one function from the va_list to the doorbell.  Core's
 * instance (zd_handle_extendedop) calls the EP's device ops.
 *
 * A call the fast test does not pass takes core's checked post (core/
 * zd_dto.c), which runs the checks one by one and returns the error the
 * spec names; every other operation goes to core's decoding of it
 * (zd_ext_other_op, core/zd_ext.c), so the errors are the same whichever
 * instance a dat.conf line has.  A post the device took is counted here,
 * as the plain posts are.
 */
#ifndef ZD_EXT_ENTRY_H
#define ZD_EXT_ENTRY_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>

#include "core/zd_compiler.h"
#include "core/zd_device.h"
#include "core/zd_dto_entry.h"
#include "core/zd_ep.h"
#include "core/zd_ext.h"
#include "core/zd_ia.h"
#include "core/zd_obj.h"

/* Every operation but the three below (core/zd_ext.c): the va_list
 * untouched. */
DAT_RETURN zd_ext_other_op(DAT_HANDLE h, DAT_EXTENDED_OP op, va_list args);

/*
 * Reading the arguments.  On x86-64 (System V psABI, "Variable Argument
 * Lists") the va_list says where the next argument is: gp_offset bytes
 * into reg_save_area while that is below 48 (the six integer argument
 * registers, saved there by the caller's va_start), then consecutive
 * 8-byte slots at overflow_arg_area.  A caller declared (handle, op, ...)
 * that read nothing before handing the list over -- libdat2's
 * dat_extension_op, the target of every dat_ib_* macro -- gives
 * gp_offset 16: the next four arguments are the saved rdx, rcx, r8 and r9
 * at reg_save_area + 16, the rest the stack slots.  Every argument of the
 * hot operations is of the integer class (integers, enums, pointers, the
 * 8-byte cookie union) and so takes one 8-byte slot, its value in the low
 * bytes (x86-64 is little-endian): read as slots, they are what va_arg returns, without va_arg's
 * offset test and update per argument (~7 instructions each).  The list
 * is not advanced: its caller may only va_end it.  Any other state of
 * the list, or another ABI, takes va_arg.
 */
struct zd_ext_va {
	const uint64_t *reg;    /* the first register slot, or NULL: va_arg */
	const uint64_t *stack;  /* the first stack slot */
	unsigned next;          /* slots read so far */
};

static ZD_ALWAYS_INLINE void zd_ext_va_begin(struct zd_ext_va *v, va_list args)
{
	v->reg = NULL;
	v->stack = NULL;
	v->next = 0;
#if defined(__x86_64__) && !defined(_WIN64) && !defined(__ILP32__)
	if (ZD_LIKELY(args[0].gp_offset == 2 * sizeof(uint64_t))) {
		v->reg = (const uint64_t *)((const char *)args[0].reg_save_area +
					    2 * sizeof(uint64_t));
		v->stack = (const uint64_t *)args[0].overflow_arg_area;
	}
#endif
}

/* The next slot of the fixed layout (four register slots, then the
 * stack's). */
static ZD_ALWAYS_INLINE uint64_t zd_ext_va_slot(struct zd_ext_va *v)
{
	const unsigned i = v->next++;

	return i < 4 ? v->reg[i] : v->stack[i - 4];
}

/* The next argument, of integer-class @type, from @args (see above). */
#define ZD_EXT_ARG(v, args, type)                                                  \
	__extension__({                                                            \
		type arg_;                                                         \
		_Static_assert(sizeof(type) <= sizeof(uint64_t), "one slot");      \
		if ((v)->reg) {                                                    \
			const uint64_t slot_ = zd_ext_va_slot(v);                  \
			memcpy(&arg_, &slot_, sizeof(arg_)); /* its low bytes */   \
		} else {                                                           \
			arg_ = va_arg(args, type);                                 \
		}                                                                  \
		arg_;                                                              \
	})

/* dat_ib_post_rdma_write_immed: the write's folded test (zd_request_fast_ok,
 * zd_ep_post_rdma_entry); @post: the device's op, or NULL for the EP's
 * device ops.  Connected implies RC: a UD EP is never CONNECTED (its
 * address exchanges leave its state alone, zd_ud_cm.c) and the service
 * type changes only before a connection (zd_ep_modify.c). */
static ZD_ALWAYS_INLINE DAT_RETURN
zd_ep_post_rdma_write_imm_entry(DAT_EP_HANDLE h, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote, uint32_t imm,
				DAT_COMPLETION_FLAGS flags, zd_device_post_rdma_write_imm_fn *post)
{
	struct zd_ep *ep;

	/* A device's instance: its latency shape (zd_request_fast1), the rest
	 * checked. */
	if (post) {
		ep = zd_obj_slot(h, ZD_OBJ_EP);
		if (ZD_LIKELY(ep != NULL) && ZD_LIKELY(zd_request_fast1(ep, n, iov, flags) != NULL) &&
		    ZD_LIKELY(remote != NULL)) {
			DAT_RETURN ret = post(ep, 1, iov, cookie, remote, imm,
					      DAT_COMPLETION_DEFAULT_FLAG);

			if (ZD_LIKELY(ret == DAT_SUCCESS))
				zd_count_ep_post_bytes(&ep->cnt, ZD_POST_WRITE_IMM,
						       iov->segment_length);
			return ret;
		}
		return zd_ep_post_rdma_write_imm(h, n, iov, cookie, remote, imm, flags);
	}
	ep = zd_obj_get(h, ZD_OBJ_EP);
	if (ZD_LIKELY(ep != NULL) &&
	    ZD_LIKELY(zd_request_fast_ok(ep, n, iov,
					 zd_rdma_iov_max(ep, ep->attr.max_rdma_write_iov),
					 flags) &&
		      remote != NULL)) {
		zd_device_post_rdma_write_imm_fn *fn =
			post ? post : ep->obj.ia->dev->post_rdma_write_imm;

		if (ZD_LIKELY(fn != NULL)) {
			DAT_RETURN ret = fn(ep, n, iov, cookie, remote, imm, flags);

			if (ZD_LIKELY(ret == DAT_SUCCESS))
				zd_count_ep_post(&ep->cnt, ZD_POST_WRITE_IMM, n, iov);
			return ret;
		}
	}
	return zd_ep_post_rdma_write_imm(h, n, iov, cookie, remote, imm, flags);
}

/* dat_ib_post_fetch_and_add (@op DAT_IB_DTO_FETCH_ADD) and
 * dat_ib_post_cmp_and_swap: the request's folded test (connected: RC, as
 * above), and the
 * 8-byte word: the local segment holds it, the remote one is aligned and
 * holds it.  @post as above. */
static ZD_ALWAYS_INLINE DAT_RETURN zd_ep_post_atomic_entry(DAT_EP_HANDLE h, DAT_DTOS op,
							   const DAT_LMR_TRIPLET *local,
							   DAT_DTO_COOKIE cookie,
							   const DAT_RMR_TRIPLET *remote,
							   uint64_t operand, uint64_t swap,
							   DAT_COMPLETION_FLAGS flags,
							   zd_device_post_atomic_fn *post)
{
	const enum zd_ep_post_kind kind =
		op == (DAT_DTOS)DAT_IB_DTO_CMP_SWAP ? ZD_POST_CMP_SWAP : ZD_POST_FETCH_ADD;
	struct zd_ep *ep;

	/* A device's instance: its latency shape (zd_request_fast1), the rest
	 * checked. */
	if (post) {
		ep = zd_obj_slot(h, ZD_OBJ_EP);
		if (ZD_LIKELY(ep != NULL) &&
		    ZD_LIKELY(zd_request_fast1(ep, 1, local, flags) != NULL) &&
		    ZD_LIKELY(remote != NULL && local->segment_length >= ZD_ATOMIC_BYTES &&
			      remote->virtual_address % ZD_ATOMIC_BYTES == 0 &&
			      remote->segment_length >= ZD_ATOMIC_BYTES)) {
			DAT_RETURN ret = post(ep, op, local, cookie, remote, operand, swap,
					      DAT_COMPLETION_DEFAULT_FLAG);

			if (ZD_LIKELY(ret == DAT_SUCCESS))
				zd_count_ep_post_op(&ep->cnt, kind);
			return ret;
		}
		return zd_ep_post_atomic(h, op, local, cookie, remote, operand, swap, flags);
	}
	ep = zd_obj_get(h, ZD_OBJ_EP);
	if (ZD_LIKELY(ep != NULL) && ZD_LIKELY(zd_request_fast_ok(ep, 1, local, 1, flags)) &&
	    ZD_LIKELY(remote != NULL && local->segment_length >= ZD_ATOMIC_BYTES &&
		      remote->virtual_address % ZD_ATOMIC_BYTES == 0 &&
		      remote->segment_length >= ZD_ATOMIC_BYTES)) {
		zd_device_post_atomic_fn *fn = post ? post : ep->obj.ia->dev->post_atomic;

		if (ZD_LIKELY(fn != NULL)) {
			DAT_RETURN ret = fn(ep, op, local, cookie, remote, operand, swap, flags);

			if (ZD_LIKELY(ret == DAT_SUCCESS))
				zd_count_ep_post_op(&ep->cnt, kind);
			return ret;
		}
	}
	return zd_ep_post_atomic(h, op, local, cookie, remote, operand, swap, flags);
}

/* DAT_IB_RDMA_WRITE_IMMED_OP's arguments, read in the order of the
 * header's macro, then its entry. */
static ZD_ALWAYS_INLINE DAT_RETURN zd_ext_write_imm_op(DAT_HANDLE h, va_list args,
						       zd_device_post_rdma_write_imm_fn *post)
{
	struct zd_ext_va v;

	zd_ext_va_begin(&v, args);
	DAT_COUNT n = ZD_EXT_ARG(&v, args, DAT_COUNT);
	const DAT_LMR_TRIPLET *iov = ZD_EXT_ARG(&v, args, const DAT_LMR_TRIPLET *);
	DAT_DTO_COOKIE cookie = ZD_EXT_ARG(&v, args, DAT_DTO_COOKIE);
	const DAT_RMR_TRIPLET *remote = ZD_EXT_ARG(&v, args, const DAT_RMR_TRIPLET *);
	DAT_UINT32 data = ZD_EXT_ARG(&v, args, DAT_UINT32);
	DAT_COMPLETION_FLAGS flags = ZD_EXT_ARG(&v, args, DAT_COMPLETION_FLAGS);

	return zd_ep_post_rdma_write_imm_entry(h, n, iov, cookie, remote, data, flags, post);
}

/* DAT_IB_FETCH_AND_ADD_OP's (@cas false) or DAT_IB_CMP_AND_SWAP_OP's. */
static ZD_ALWAYS_INLINE DAT_RETURN zd_ext_atomic_op(DAT_HANDLE h, va_list args, bool cas,
						    zd_device_post_atomic_fn *post)
{
	struct zd_ext_va v;

	zd_ext_va_begin(&v, args);
	DAT_UINT64 operand = ZD_EXT_ARG(&v, args, DAT_UINT64);
	DAT_UINT64 swap = cas ? ZD_EXT_ARG(&v, args, DAT_UINT64) : 0;
	const DAT_LMR_TRIPLET *local = ZD_EXT_ARG(&v, args, const DAT_LMR_TRIPLET *);
	DAT_DTO_COOKIE cookie = ZD_EXT_ARG(&v, args, DAT_DTO_COOKIE);
	const DAT_RMR_TRIPLET *remote = ZD_EXT_ARG(&v, args, const DAT_RMR_TRIPLET *);
	DAT_COMPLETION_FLAGS flags = ZD_EXT_ARG(&v, args, DAT_COMPLETION_FLAGS);

	return zd_ep_post_atomic_entry(h,
				       cas ? (DAT_DTOS)DAT_IB_DTO_CMP_SWAP
					   : (DAT_DTOS)DAT_IB_DTO_FETCH_ADD,
				       local, cookie, remote, operand, swap, flags, post);
}

/*
 * handle_extendedop_func: the hot operations to their readers above (the
 * write with immediate data first: the latency case), every other one to
 * core's (zd_ext_other_op); @imm and @atomic: the device's posts, or NULL
 * for the EP's device ops.
 */
static ZD_ALWAYS_INLINE DAT_RETURN zd_handle_extendedop_entry(DAT_HANDLE h, DAT_EXTENDED_OP op,
							      va_list args,
							      zd_device_post_rdma_write_imm_fn *imm,
							      zd_device_post_atomic_fn *atomic)
{
	if (ZD_LIKELY(op == DAT_IB_RDMA_WRITE_IMMED_OP))
		return zd_ext_write_imm_op(h, args, imm);
	if (op == DAT_IB_FETCH_AND_ADD_OP)
		return zd_ext_atomic_op(h, args, false, atomic);
	if (op == DAT_IB_CMP_AND_SWAP_OP)
		return zd_ext_atomic_op(h, args, true, atomic);
	return zd_ext_other_op(h, op, args);
}

#endif /* ZD_EXT_ENTRY_H */
