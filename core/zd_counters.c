/*
 * dat_ib_query_counters and friends.  Not built yet: DAT_NOT_IMPLEMENTED
 * after the handle check (and DAT_COUNTERS is not advertised).
 */
#include "core/zd_api.h"
#include "core/zd_ext.h"
#include "core/zd_obj.h"

DAT_RETURN zd_counters_query(DAT_HANDLE h, int cntr, uint64_t *out, int reset)
{
	if (zd_obj_type_of(h) < 0)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1);
	return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
}

DAT_RETURN zd_counters_print(DAT_HANDLE h, int cntr, int reset)
{
	if (zd_obj_type_of(h) < 0)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1);
	return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
}

DAT_RETURN zd_counters_sample(DAT_HANDLE h, bool start, int type)
{
	if (zd_obj_type_of(h) < 0)
		return DAT_ERROR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE1);
	return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
}
