/*
 * The DAT entry points evd/ implements itself: those that need only the
 * EVD or CNO and its event machinery, not its IA.  core/zd_api.h, which
 * names every entry point of the provider table, includes this header;
 * the EVD and CNO calls that need the IA (create, free, query, modify_cno,
 * resize) are core's (core/zd_evd_obj.c, core/zd_cno_obj.c).
 */
#ifndef ZD_EVD_API_H
#define ZD_EVD_API_H

#include <dat2/udat.h>

/* EVD (evd/zd_evd.c) */
DAT_RETURN zd_evd_enable(DAT_EVD_HANDLE);
DAT_RETURN zd_evd_disable(DAT_EVD_HANDLE);
DAT_RETURN zd_evd_wait(DAT_EVD_HANDLE, DAT_TIMEOUT, DAT_COUNT, DAT_EVENT *, DAT_COUNT *);
DAT_RETURN zd_evd_post_se(DAT_EVD_HANDLE, const DAT_EVENT *);
DAT_RETURN zd_evd_dequeue(DAT_EVD_HANDLE, DAT_EVENT *);
DAT_RETURN zd_evd_set_unwaitable(DAT_EVD_HANDLE);
DAT_RETURN zd_evd_clear_unwaitable(DAT_EVD_HANDLE);

/* CNO (evd/zd_cno.c) */
DAT_RETURN zd_cno_modify_agent(DAT_CNO_HANDLE, DAT_OS_WAIT_PROXY_AGENT);
DAT_RETURN zd_cno_wait(DAT_CNO_HANDLE, DAT_TIMEOUT, DAT_EVD_HANDLE *);
DAT_RETURN zd_cno_trigger(DAT_CNO_HANDLE, DAT_EVD_HANDLE *);

#endif
