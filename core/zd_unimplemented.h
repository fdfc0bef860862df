/* DAT calls not implemented (yet): check the handle, then say so. */
#ifndef ZD_UNIMPLEMENTED_H
#define ZD_UNIMPLEMENTED_H

#include "core/zd_api.h"
#include "core/zd_obj.h"

#define ZD_NOT_IMPLEMENTED(handle, type)                           \
	do {                                                       \
		void *obj_;                                        \
		ZD_GET_OR_RETURN(obj_, (handle), (type));          \
		(void)obj_;                                        \
		return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE); \
	} while (0)

#endif
