/*
 * Unreliable datagrams (DAT_IB_SERVICE_TYPE_UD): posting to an address
 * handle and freeing the handles and CM objects the UD connection events
 * hand out.  Not built yet: every call answers DAT_NOT_IMPLEMENTED after
 * its handle check, and dat_ia_query says DAT_IB_UD "FALSE".
 */
#include "core/zd_api.h"
#include "core/zd_ep.h"
#include "core/zd_ext.h"
#include "core/zd_obj.h"

DAT_RETURN zd_ep_post_send_ud(DAT_EP_HANDLE h, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			      const DAT_IB_ADDR_HANDLE *ah, DAT_DTO_COOKIE cookie,
			      DAT_COMPLETION_FLAGS flags)
{
	struct zd_ep *ep;

	ZD_GET_OR_RETURN(ep, h, ZD_OBJ_EP);
	return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
}

DAT_RETURN zd_ud_cm_free(DAT_HANDLE h, uint64_t cm)
{
	struct zd_ep *ep;

	ZD_GET_OR_RETURN(ep, h, ZD_OBJ_EP);
	return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
}

DAT_RETURN zd_ud_ah_free(DAT_HANDLE h, DAT_IB_ADDR_HANDLE *ah)
{
	struct zd_ep *ep;

	ZD_GET_OR_RETURN(ep, h, ZD_OBJ_EP);
	return DAT_ERROR(DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
}
