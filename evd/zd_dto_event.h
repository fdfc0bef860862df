/*
 * A DTO completion as the DAT event the consumer dequeues: a plain
 * DAT_DTO_COMPLETION_EVENT for the DAT 2.0 operations, a DAT_IB_DTO_EVENT
 * with its extension data for the IB extension operations
 * (dat_ib_extensions.h: DAT_IB_DTOS, operation >= DAT_DTO_EXTENSION_BASE).
 *
 * Devices carry only the operation (and, for immediate data, 32 bits)
 * through their completion paths; this is the one place that knows which
 * operation becomes which extension type, as OFED dapl reports them
 * (docs/ib-extensions-brief.md, "Completion -> event").
 */
#ifndef ZD_DTO_EVENT_H
#define ZD_DTO_EVENT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <netinet/in.h>   /* dat_ib_extensions.h uses struct sockaddr_in6 */
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>

#include "core/zd_compiler.h"

_Static_assert(sizeof(DAT_IB_EXTENSION_EVENT_DATA) <=
	       sizeof(((DAT_EVENT *)0)->event_extension_data),
	       "the extension data fits event_extension_data");

/* An IB extension operation (its completion is a DAT_IB_DTO_EVENT). */
static ZD_ALWAYS_INLINE bool zd_dto_is_ext(DAT_DTOS op)
{
	return (unsigned)op >= DAT_DTO_EXTENSION_BASE;
}

/* Does a completion of @op carry immediate data? */
static inline bool zd_dto_has_immed(DAT_DTOS op)
{
	return op == (DAT_DTOS)DAT_IB_DTO_RECV_IMMED || op == (DAT_DTOS)DAT_IB_DTO_RECV_MSG_IMMED ||
	       op == (DAT_DTOS)DAT_IB_DTO_RECV_UD_IMMED;
}

/* The extension type an operation's completion reports. */
static inline DAT_IB_EXT_TYPE zd_dto_ext_type(DAT_DTOS op)
{
	switch ((int)op) {
	case DAT_IB_DTO_RDMA_WRITE_IMMED: return DAT_IB_RDMA_WRITE_IMMED;
	case DAT_IB_DTO_RECV_IMMED:       return DAT_IB_RDMA_WRITE_IMMED_DATA;
	case DAT_IB_DTO_FETCH_ADD:        return DAT_IB_FETCH_AND_ADD;
	case DAT_IB_DTO_CMP_SWAP:         return DAT_IB_CMP_AND_SWAP;
	case DAT_IB_DTO_RECV_MSG_IMMED:   return DAT_IB_RECV_IMMED_DATA;
	case DAT_IB_DTO_SEND_UD:          return DAT_IB_UD_SEND;
	default:                          return DAT_IB_UD_RECV;  /* RECV_UD(_IMMED) */
	}
}

/* Writes the whole of @ev (all 120 bytes: padding and unused extension
 * words zero) for a completion of @op; @imm is used only for operations
 * that carry immediate data. */
static inline void zd_dto_event_fill(DAT_EVENT *ev, DAT_EVD_HANDLE evd, DAT_EP_HANDLE ep,
				     DAT_DTO_COOKIE cookie, DAT_DTO_COMPLETION_STATUS st,
				     DAT_SEG_LENGTH len, DAT_DTOS op, uint32_t imm)
{
	DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;

	memset(ev, 0, sizeof(*ev));
	ev->evd_handle = evd;
	d->ep_handle = ep;
	d->user_cookie = cookie;
	d->status = st;
	d->transfered_length = len;
	d->operation = op;
	if (!zd_dto_is_ext(op)) {
		ev->event_number = DAT_DTO_COMPLETION_EVENT;
		return;
	}
	DAT_IB_EXTENSION_EVENT_DATA *x = (DAT_IB_EXTENSION_EVENT_DATA *)ev->event_extension_data;

	ev->event_number = (DAT_EVENT_NUMBER)DAT_IB_DTO_EVENT;
	x->type = zd_dto_ext_type(op);
	x->status = st == DAT_DTO_SUCCESS ? DAT_OP_SUCCESS : DAT_IB_OP_ERR;
	if (zd_dto_has_immed(op))
		x->val.immed.data = imm;
}

#endif
