/*
 * The shared completion ring of an shm CQ (one per DTO EVD): where peers
 * publish the receive completions they produce, read by the CQ's consumer
 * straight into its DAT events (zd_shm_cq.c) -- one ring, no QP walk.
 *
 * Region: an unnamed sealed memfd of its own (hw/soft/zd_soft_region.h),
 * whose fd each peer gets at connect with the QP's (struct zd_shm_blob).
 *   struct zd_shm_cq_shared      geometry, the tail hint, the fallback flag
 *   cqe[depth]                   one cache line each
 *
 * A CQE is not a DAT_EVENT: like a NIC's it names the target QP by tag,
 * the receive it completed by position, and the length, status, immediate
 * data and flags; the consumer checks each against its own state (tag in
 * its own table, QP on this CQ, position and sequence the next expected,
 * the receive slot filled by that QP's peer) and takes the cookie from
 * its private rq_cookie.  Nothing a peer wrote is dereferenced.
 *
 * Protocol (many producers in several processes, one consumer):
 *  - Slot state word: zd_shm_slot_word(position, producer tag, ZD_SHM_CQE_*).
 *    FREE(p) means "free for position p"; the consumer writes it, for
 *    p + depth, after it read position p.
 *  - Claim: a producer reads the tail hint t and CASes the state of slot
 *    t from FREE(t) to CLAIMED(t, its tag): the claim names its owner in
 *    the same word.  Whoever finds slot t claimed moves the tail hint on
 *    (helping), so a producer killed right after its claim stalls nobody's
 *    claims.  Bounded: after ZD_SHM_CQE_TRIES attempts, or a slot of the
 *    previous lap not consumed yet (full), or anything unexpected, the
 *    producer gives up and takes the QP's own completion ring (fallback).
 *  - Publish: the entry's fields, then CAS CLAIMED(t, tag) -> PUBLISHED(t,
 *    tag) (release).  A failed CAS means the consumer skipped the slot (it
 *    took the producer for dead or hostile): the completion is lost and
 *    that connection is being broken.
 *  - Consume: the consumer keeps its head privately; it reads slot head,
 *    PUBLISHED(head, *) (acquire), copies the line out once, validates the
 *    copy, then stores FREE(head + depth) (release).  The tail hint is only
 *    a hint: a wild one makes producers fall back (and the consumer puts
 *    it back where its head is, counted, on its slow path).
 *  - A slot CLAIMED at head for long (ZD_SHM_CQE_STUCK_NS) makes the
 *    consumer look at the claimer: a dead process (its pidfd readable) is
 *    skipped at once and every EP of that peer on this CQ reported broken
 *    (zd_cm_dev_broken); a live one is given ZD_SHM_CQE_HOSTILE_NS, then
 *    skipped the same way.  Garbage at head is skipped, counted.
 *
 * Small sends (up to ZD_SHM_CQE_INLINE bytes, a non-SRQ receive whose
 * first segment holds them) travel in the CQE itself: the producer claims
 * the CQE before it would copy, writes the message there instead of into
 * the receive buffer, and the consumer copies it into the buffer (its own
 * memory, whose address it keeps privately: rq_first) when it takes the
 * CQE.  One line then carries data and completion.
 *
 * Order per QP: every completion of a QP carries the QP's sequence number.
 * A producer uses this ring only while the QP's own completion ring is
 * drained (every earlier entry there was reaped into the EVD, as in
 * zd_evd_cq_post_direct), so a CQE never waits for the fallback; a
 * fallback entry whose predecessor is still in this ring waits for it (its
 * sequence is ahead of the consumer's: zd_shm_qp_reap stops there).
 * Fallback entries raise the ring's @fallback flag, which sends the
 * consumer through its QP walk once.
 */
#ifndef ZD_SHM_CQRING_H
#define ZD_SHM_CQRING_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/zd_compiler.h"

#define ZD_SHM_MAGIC_CQ       0x7a64736863713031ull  /* "zdshcq01" */
#define ZD_SHM_CQE_TRIES      8
#define ZD_SHM_CQE_STUCK_NS   (1000ull * 1000)              /* 1 ms: look at the claimer */
#define ZD_SHM_CQE_HOSTILE_NS (2000ull * 1000 * 1000)       /* 2 s: alive, still no publish */

enum zd_shm_cqe_state {
	ZD_SHM_CQE_FREE = 0,
	ZD_SHM_CQE_CLAIMED = 1,
	ZD_SHM_CQE_PUBLISHED = 2,
};

/* Bytes of a message a CQE carries itself (ZD_SHM_CQE_INLINE): what the
 * line leaves beside the header. */
#define ZD_SHM_CQE_INLINE 32

struct zd_shm_cqe {
	_Atomic uint64_t state;   /* zd_shm_slot_word(pos, producer tag, ZD_SHM_CQE_*) */
	uint32_t tag;             /* the target QP: the consumer's tag (= producer tag) */
	uint16_t type_flags;      /* ZD_SHM_COMP_DIRECT | _SOLICITED | _IMMED */
	uint8_t status;           /* DAT_DTO_COMPLETION_STATUS */
	uint8_t inline_len;       /* the message is in @data (not in the buffer) */
	uint32_t seq;             /* the QP's completion sequence (low bits) */
	uint32_t len;
	uint64_t rpos;            /* RQ slot position, or SRQ slot position */
	union {
		uint32_t imm;                     /* with ZD_SHM_COMP_IMMED */
		uint8_t data[ZD_SHM_CQE_INLINE];  /* with inline_len */
	};
} __attribute__((aligned(ZD_CACHE_LINE)));
_Static_assert(sizeof(struct zd_shm_cqe) == ZD_CACHE_LINE, "a CQE is one line");

struct zd_shm_cq_shared {
	/* read-only after creation */
	uint64_t magic;
	uint32_t depth;
	uint32_t pad;
	uint64_t ring_off, size;
	/* producers: the next position to claim (a hint, helped forward) */
	alignas(ZD_CACHE_LINE) _Atomic uint64_t tail;
	/* producers set it after an entry into a QP's own ring; the consumer
	 * clears it before it walks the QPs */
	alignas(ZD_CACHE_LINE) _Atomic uint32_t fallback;
};

/* Ring geometry, checked by both sides: false if @depth or @size is off. */
static inline bool zd_shm_cq_layout(uint32_t depth, uint64_t *ring_off, uint64_t *size)
{
	if (depth < 64 || (depth & (depth - 1)) || depth > (1u << 22))
		return false;
	*ring_off = (sizeof(struct zd_shm_cq_shared) + ZD_CACHE_LINE - 1) &
		    ~(uint64_t)(ZD_CACHE_LINE - 1);
	*size = *ring_off + (uint64_t)depth * sizeof(struct zd_shm_cqe);
	return true;
}

#endif /* ZD_SHM_CQRING_H */
