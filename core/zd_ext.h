/* The IB extension operations behind zd_handle_extendedop (zd_ext.c). */
#ifndef ZD_EXT_H
#define ZD_EXT_H

#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>

/* The size of the word an atomic works on. */
#define ZD_ATOMIC_BYTES 8u

/* Posts (zd_dto.c): the checks of the DAT posts one by one, then the
 * device op (the checked path of core/zd_ext_entry.h). */
DAT_RETURN zd_ep_post_rdma_write_imm(DAT_EP_HANDLE h, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				     DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
				     uint32_t imm, DAT_COMPLETION_FLAGS flags);
DAT_RETURN zd_ep_post_atomic(DAT_EP_HANDLE h, DAT_DTOS op, const DAT_LMR_TRIPLET *local,
			     DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET *remote,
			     uint64_t operand, uint64_t swap, DAT_COMPLETION_FLAGS flags);

/* Unreliable datagrams (zd_ud.c). */
DAT_RETURN zd_ep_post_send_ud(DAT_EP_HANDLE h, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
			      const DAT_IB_ADDR_HANDLE *ah, DAT_DTO_COOKIE cookie,
			      DAT_COMPLETION_FLAGS flags);
DAT_RETURN zd_ud_cm_free(DAT_HANDLE ep, uint64_t cm);
DAT_RETURN zd_ud_ah_free(DAT_HANDLE ep, DAT_IB_ADDR_HANDLE *ah);

/* Counters (zd_counters.c): dat_ib_query_counters, dat_ib_print_counters,
 * dat_ib_start/stop_counters on an IA, EP or EVD handle. */
DAT_RETURN zd_counters_query(DAT_HANDLE h, int cntr, uint64_t *out, int reset);
DAT_RETURN zd_counters_print(DAT_HANDLE h, int cntr, int reset);
DAT_RETURN zd_counters_sample(DAT_HANDLE h, bool start, int type);

#endif
