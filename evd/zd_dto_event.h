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
#include <stddef.h>
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
static ZD_ALWAYS_INLINE bool zd_dto_has_immed(DAT_DTOS op)
{
	return op == (DAT_DTOS)DAT_IB_DTO_RECV_IMMED || op == (DAT_DTOS)DAT_IB_DTO_RECV_MSG_IMMED ||
	       op == (DAT_DTOS)DAT_IB_DTO_RECV_UD_IMMED;
}

/* One of the IB extension operations zdapl completes (DAT_IB_DTOS up to
 * the UD receive with immediate data: not the collectives). */
static ZD_ALWAYS_INLINE bool zd_dto_ext_known(DAT_DTOS op)
{
	return (unsigned)op - DAT_DTO_EXTENSION_BASE <=
	       (unsigned)DAT_IB_DTO_RECV_UD_IMMED - DAT_DTO_EXTENSION_BASE;
}

/* The extension type an operation's completion reports: a table lookup
 * (no test at all where the caller knows zd_dto_ext_known(op)). */
static ZD_ALWAYS_INLINE DAT_IB_EXT_TYPE zd_dto_ext_type(DAT_DTOS op)
{
	static const uint8_t type[] = {
		[DAT_IB_DTO_RDMA_WRITE_IMMED - DAT_DTO_EXTENSION_BASE] = DAT_IB_RDMA_WRITE_IMMED,
		[DAT_IB_DTO_RECV_IMMED - DAT_DTO_EXTENSION_BASE] = DAT_IB_RDMA_WRITE_IMMED_DATA,
		[DAT_IB_DTO_FETCH_ADD - DAT_DTO_EXTENSION_BASE] = DAT_IB_FETCH_AND_ADD,
		[DAT_IB_DTO_CMP_SWAP - DAT_DTO_EXTENSION_BASE] = DAT_IB_CMP_AND_SWAP,
		[DAT_IB_DTO_RECV_MSG_IMMED - DAT_DTO_EXTENSION_BASE] = DAT_IB_RECV_IMMED_DATA,
		[DAT_IB_DTO_SEND_UD - DAT_DTO_EXTENSION_BASE] = DAT_IB_UD_SEND,
		[DAT_IB_DTO_RECV_UD - DAT_DTO_EXTENSION_BASE] = DAT_IB_UD_RECV,
		[DAT_IB_DTO_RECV_UD_IMMED - DAT_DTO_EXTENSION_BASE] = DAT_IB_UD_RECV,
	};
	_Static_assert(sizeof(type) == DAT_IB_DTO_RECV_UD_IMMED - DAT_DTO_EXTENSION_BASE + 1 &&
		       DAT_IB_COLLECTIVE_BARRIER_STATUS <= UINT8_MAX,
		       "one byte per operation zd_dto_ext_known accepts");

	if (!zd_dto_ext_known(op))
		return DAT_IB_UD_RECV;  /* none of zdapl's: as before the table */
	return (DAT_IB_EXT_TYPE)type[(unsigned)op - DAT_DTO_EXTENSION_BASE];
}

/* The layout the word stores below write (DAT_EVENT: the number and its
 * 32-bit pad, the EVD, then DAT_DTO_COMPLETION_EVENT_DATA and one word of
 * the event_data union after it; DAT_IB_EXTENSION_EVENT_DATA: type and
 * status, then the immediate data alone in its 8-byte word). */
_Static_assert(sizeof(DAT_EVENT_NUMBER) == 4 && offsetof(DAT_EVENT, evd_handle) == 8 &&
	       offsetof(DAT_EVENT, event_data) == 16 &&
	       sizeof(DAT_DTO_COMPLETION_EVENT_DATA) == 32 &&
	       sizeof(((DAT_EVENT *)0)->event_data) == 40 &&
	       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, status) == 16 &&
	       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, transfered_length) == 20 &&
	       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, operation) == 24 &&
	       offsetof(DAT_DTO_COMPLETION_EVENT_DATA, rmr_context) == 28 &&
	       offsetof(DAT_EVENT, event_extension_data) == 56 &&
	       sizeof(((DAT_EVENT *)0)->event_extension_data) == 64 &&
	       offsetof(DAT_IB_EXTENSION_EVENT_DATA, status) == 4 &&
	       offsetof(DAT_IB_EXTENSION_EVENT_DATA, val) == 8 &&
	       sizeof(((DAT_IB_EXTENSION_EVENT_DATA *)0)->val) == 4 &&
	       offsetof(DAT_IB_EXTENSION_EVENT_DATA, remote_ah) == 16,
	       "the DAT_EVENT words zd_dto_event_fill writes");

/* Two adjacent 32-bit fields (@lo first in memory) as one 64-bit word. */
static ZD_ALWAYS_INLINE uint64_t zd_dto_event_pair(uint32_t lo, uint32_t hi)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (uint64_t)hi << 32 | lo;
#else
	return (uint64_t)lo << 32 | hi;
#endif
}

/* The head of @ev -- every byte before event_extension_data: the event
 * number, its 32-bit pad (the solicited mark's place, here 0), the EVD,
 * the DTO completion data with rmr_context 0 and the union's last word 0
 * -- for a completion of @op: seven word stores. */
static ZD_ALWAYS_INLINE void zd_dto_event_head(DAT_EVENT *ev, DAT_EVD_HANDLE evd, DAT_EP_HANDLE ep,
					       DAT_DTO_COOKIE cookie,
					       DAT_DTO_COMPLETION_STATUS st, DAT_SEG_LENGTH len,
					       DAT_DTOS op)
{
	DAT_DTO_COMPLETION_EVENT_DATA *d = &ev->event_data.dto_completion_event_data;
	const uint64_t number = zd_dto_event_pair(
		zd_dto_is_ext(op) ? (uint32_t)DAT_IB_DTO_EVENT : (uint32_t)DAT_DTO_COMPLETION_EVENT,
		0);
	const uint64_t st_len = zd_dto_event_pair((uint32_t)st, len);
	const uint64_t op_rmr = zd_dto_event_pair((uint32_t)op, 0);

	memcpy(ev, &number, 8);
	ev->evd_handle = evd;
	d->ep_handle = ep;
	d->user_cookie = cookie;
	memcpy(&d->status, &st_len, 8);
	memcpy(&d->operation, &op_rmr, 8);
	memset((char *)&ev->event_data + sizeof(*d), 0, sizeof(ev->event_data) - sizeof(*d));
}

/* The 64 bytes of @ev's event_extension_data for a completion of @op:
 * for an IB extension operation its DAT_IB_EXTENSION_EVENT_DATA -- type,
 * status, @imm for the operations that carry immediate data (0 for the
 * rest), every other word zero; for a DAT 2.0 operation all zero. */
static ZD_ALWAYS_INLINE void zd_dto_event_ext_words(DAT_EVENT *ev, DAT_DTO_COMPLETION_STATUS st,
						    DAT_DTOS op, uint32_t imm)
{
	char *x = (char *)ev->event_extension_data;
	uint64_t type_status = 0, val = 0;

	if (zd_dto_is_ext(op)) {
		type_status = zd_dto_event_pair((uint32_t)zd_dto_ext_type(op),
						st == DAT_DTO_SUCCESS ? (uint32_t)DAT_OP_SUCCESS
								      : (uint32_t)DAT_IB_OP_ERR);
		if (zd_dto_has_immed(op))
			val = imm;  /* val.immed.data, then the padding */
	}
	memcpy(x, &type_status, 8);
	memcpy(x + 8, &val, 8);
	memset(x + 16, 0, sizeof(ev->event_extension_data) - 16);
}

/* Writes the whole of @ev (all 120 bytes: padding and unused extension
 * words zero) for a completion of @op -- word by word, no memset of the
 * event first; @imm is used only for operations that carry immediate
 * data. */
static ZD_ALWAYS_INLINE void zd_dto_event_fill(DAT_EVENT *ev, DAT_EVD_HANDLE evd, DAT_EP_HANDLE ep,
					       DAT_DTO_COOKIE cookie, DAT_DTO_COMPLETION_STATUS st,
					       DAT_SEG_LENGTH len, DAT_DTOS op, uint32_t imm)
{
	zd_dto_event_head(ev, evd, ep, cookie, st, len, op);
	zd_dto_event_ext_words(ev, st, op, imm);
}

#endif
