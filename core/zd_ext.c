/*
 * The IB extensions' entry (dat_ib_extensions.h 2.0.9): libdat2 hands every
 * dat_extension_op to DAT_PROVIDER.handle_extendedop_func with the rest of
 * the call as a va_list.  Here each DAT_IB_OP's arguments are read in the
 * order the header's macros pass them and handed to the code that does the
 * work: the posts (zd_dto.c), unreliable datagrams (zd_ud.c), counters
 * (zd_counters.c), the open/close query.  The collectives are
 * DAT_NOT_IMPLEMENTED, as in every OFED dapl build but the one for
 * Intel MPI's collective offload.  The hot posts are read and checked in
 * core/zd_ext_entry.h, which a device may instantiate with its own posts.
 */
#include <stdarg.h>
#include "core/zd_api.h"
#include "core/zd_ext.h"
#include "core/zd_ext_entry.h"
#include "core/zd_ia.h"
#include "core/zd_obj.h"

/* DAT_IB_OPEN_QUERY_OP: libdat2 loaded the provider of @name and passes
 * the name as the handle; an IA opened for the query only, returned raw
 * (libdat2 gives it no handle of its own: the consumer must hand it back to
 * DAT_IB_CLOSE_QUERY_OP, not to dat_ia_close). */
static DAT_RETURN open_query(const char *name, va_list args)
{
	DAT_IA_HANDLE *ia_out = va_arg(args, DAT_IA_HANDLE *);
	DAT_IA_ATTR_MASK ia_mask = va_arg(args, DAT_IA_ATTR_MASK);
	DAT_IA_ATTR *ia_attr = va_arg(args, DAT_IA_ATTR *);
	DAT_PROVIDER_ATTR_MASK prov_mask = va_arg(args, DAT_PROVIDER_ATTR_MASK);
	DAT_PROVIDER_ATTR *prov_attr = va_arg(args, DAT_PROVIDER_ATTR *);
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_IA_HANDLE ia;
	DAT_RETURN ret;

	if (!ia_out)
		return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	ret = zd_ia_open((const DAT_NAME_PTR)name, 8, &async, &ia);
	if (ret != DAT_SUCCESS)
		return ret;
	ret = zd_ia_query(ia, NULL, ia_mask, ia_attr, prov_mask, prov_attr);
	if (ret != DAT_SUCCESS) {
		zd_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
		return ret;
	}
	*ia_out = ia;
	return DAT_SUCCESS;
}

/* Every operation but the hot posts (core/zd_ext_entry.h).  Each checks
 * its own handle (an operation on a freed or wrong one: DAT_INVALID_HANDLE
 * with the subtype of the type it needs); the collectives and unknown
 * operations answer DAT_INVALID_HANDLE for a handle that is no live
 * object at all, DAT_NOT_IMPLEMENTED otherwise. */
__attribute__((noinline)) DAT_RETURN zd_ext_other_op(DAT_HANDLE h, DAT_EXTENDED_OP op,
						     va_list args)
{
	switch ((int)op) {
	case DAT_IB_OPEN_QUERY_OP:
		if (!h)
			return DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
		return open_query((const char *)h, args);
	case DAT_IB_UD_SEND_OP: {
		DAT_COUNT n = va_arg(args, DAT_COUNT);
		DAT_LMR_TRIPLET *iov = va_arg(args, DAT_LMR_TRIPLET *);
		DAT_IB_ADDR_HANDLE *ah = va_arg(args, DAT_IB_ADDR_HANDLE *);
		DAT_DTO_COOKIE cookie = va_arg(args, DAT_DTO_COOKIE);
		DAT_COMPLETION_FLAGS flags = va_arg(args, DAT_COMPLETION_FLAGS);

		return zd_ep_post_send_ud(h, n, iov, ah, cookie, flags);
	}
	case DAT_IB_UD_CM_FREE_OP:
		return zd_ud_cm_free(h, va_arg(args, DAT_UINT64));
	case DAT_IB_UD_AH_FREE_OP:
		return zd_ud_ah_free(h, va_arg(args, DAT_IB_ADDR_HANDLE *));
	case DAT_IB_QUERY_COUNTERS_OP: {
		int cntr = va_arg(args, int);
		DAT_UINT64 *out = va_arg(args, DAT_UINT64 *);
		int reset = va_arg(args, int);

		return zd_counters_query(h, cntr, out, reset);
	}
	case DAT_IB_PRINT_COUNTERS_OP: {
		int cntr = va_arg(args, int);
		int reset = va_arg(args, int);

		return zd_counters_print(h, cntr, reset);
	}
	case DAT_IB_START_COUNTERS_OP:
	case DAT_IB_STOP_COUNTERS_OP:
		return zd_counters_sample(h, op == DAT_IB_START_COUNTERS_OP, va_arg(args, int));
	case DAT_IB_CLOSE_QUERY_OP:
		if (!zd_obj_get(h, ZD_OBJ_IA))
			return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
		return zd_ia_close(h, DAT_CLOSE_ABRUPT_FLAG);
	default:  /* the collectives, and any op this header version lacks */
		if (zd_obj_type_of(h) < 0)
			return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1);
		return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
	}
}

/* The instance for any device: its posts through the EP's device ops. */
DAT_RETURN zd_handle_extendedop(DAT_HANDLE h, DAT_EXTENDED_OP op, va_list args)
{
	return zd_handle_extendedop_entry(h, op, args, NULL, NULL);
}
