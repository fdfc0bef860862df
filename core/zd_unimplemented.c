/*
 * DAT calls zdapl does not implement.  Each still checks its handle (a bad
 * handle is DAT_INVALID_HANDLE, as everywhere) and then answers
 * DAT_NOT_IMPLEMENTED.  README's support matrix lists every one of them.
 */
#include "core/zd_unimplemented.h"

/* Consumer service points (DAT 2.0 CSP): no transport here has them. */
DAT_RETURN zd_csp_create(DAT_IA_HANDLE ia, DAT_COMM *c, DAT_IA_ADDRESS_PTR a, DAT_EVD_HANDLE e,
			 DAT_CSP_HANDLE *csp)
{ ZD_NOT_IMPLEMENTED(ia, ZD_OBJ_IA); }
DAT_RETURN zd_csp_query(DAT_CSP_HANDLE csp, DAT_CSP_PARAM_MASK m, DAT_CSP_PARAM *p)
{ ZD_NOT_IMPLEMENTED(csp, ZD_OBJ_CSP); }
DAT_RETURN zd_csp_free(DAT_CSP_HANDLE csp)
{ ZD_NOT_IMPLEMENTED(csp, ZD_OBJ_CSP); }

