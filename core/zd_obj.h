/*
 * Object header shared by every DAT handle zdapl returns, and the handle
 * checks that turn a bad handle into DAT_INVALID_HANDLE instead of a crash.
 *
 * libdat2 dispatches a call by reading the first word of the handle as a
 * DAT_PROVIDER pointer, so struct zd_obj starts with it.
 *
 * Objects live in per-type zones carved from one address range reserved at
 * load time and never unmapped.  Slots have a power-of-two size, so a handle
 * is checked with a subtraction, a rotation, one compare and one load of the
 * magic: a pointer outside the zone of the expected type, misaligned in it,
 * or to a freed slot is refused.  Freed slots stay mapped and keep their type
 * (type-stable, as SLAB_TYPESAFE_BY_RCU), and are reused in FIFO order so a
 * stale handle rarely meets a new object.
 */
#ifndef ZD_OBJ_H
#define ZD_OBJ_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <dat2/udat.h>
#include <dat2/dat_registry.h>

#include "core/zd_compiler.h"

enum zd_obj_type {
	ZD_OBJ_IA,
	ZD_OBJ_PZ,
	ZD_OBJ_LMR,
	ZD_OBJ_RMR,
	ZD_OBJ_EVD,
	ZD_OBJ_CNO,
	ZD_OBJ_EP,
	ZD_OBJ_SRQ,
	ZD_OBJ_PSP,
	ZD_OBJ_RSP,
	ZD_OBJ_CR,
	ZD_OBJ_CSP,
	ZD_OBJ_TYPE_COUNT
};

/* log2 of the virtual size of one type zone: 64 MiB, lazily backed. */
#define ZD_OBJ_ZONE_SHIFT 26

/* log2 of each type's slot size; modules static-assert their struct fits. */
#define ZD_OBJ_SLOT_SHIFT_IA  12
#define ZD_OBJ_SLOT_SHIFT_PZ  8
#define ZD_OBJ_SLOT_SHIFT_LMR 9
#define ZD_OBJ_SLOT_SHIFT_RMR 8
#define ZD_OBJ_SLOT_SHIFT_EVD 10
#define ZD_OBJ_SLOT_SHIFT_CNO 9
#define ZD_OBJ_SLOT_SHIFT_EP  12
#define ZD_OBJ_SLOT_SHIFT_SRQ 10
#define ZD_OBJ_SLOT_SHIFT_PSP 9
#define ZD_OBJ_SLOT_SHIFT_RSP 9
#define ZD_OBJ_SLOT_SHIFT_CR  10
#define ZD_OBJ_SLOT_SHIFT_CSP 9
#define ZD_OBJ_FITS(TYPE, st) \
	_Static_assert(sizeof(st) <= (1u << ZD_OBJ_SLOT_SHIFT_##TYPE), \
		       #st " outgrew its object slot")

/* DAT_RETURN of an error class and subtype (the DAT headers leave it to
 * providers). */
#define DAT_ERROR(type, subtype) ((DAT_RETURN)(DAT_CLASS_ERROR | (type) | (subtype)))

#define ZD_OBJ_MAGIC_LIVE(t) (0x5a440000u | (uint32_t)(t))
#define ZD_OBJ_MAGIC_DEAD    0xdeadd0d0u

struct zd_ia;

struct zd_obj {
	const DAT_PROVIDER *provider;  /* must stay first: see file comment */
	_Atomic uint32_t magic;        /* ZD_OBJ_MAGIC_LIVE(type) while live */
	uint16_t type;                 /* enum zd_obj_type */
	uint16_t pad;
	struct zd_ia *ia;              /* owner IA (the IA itself for an IA) */
	DAT_CONTEXT context;           /* dat_set_consumer_context */
	_Atomic uint32_t refs;         /* other objects that use this one */
	uint32_t pad2;
	struct zd_obj *ia_next;        /* the owner IA's list of children */
	struct zd_obj *ia_prev;
};

struct zd_obj_zones {
	uintptr_t base;
	uint32_t slot_shift[ZD_OBJ_TYPE_COUNT];
	_Atomic uintptr_t nslots[ZD_OBJ_TYPE_COUNT]; /* slots handed out so far */
};

extern ZD_HIDDEN struct zd_obj_zones zd_obj_zones;

/* log2 slot size of @type: a constant when @type is (every handle check
 * in the tree), else the zone table's copy. */
static ZD_ALWAYS_INLINE unsigned zd_obj_slot_shift(enum zd_obj_type type)
{
	if (!__builtin_constant_p(type))
		return zd_obj_zones.slot_shift[type];
	switch (type) {
	case ZD_OBJ_IA:  return ZD_OBJ_SLOT_SHIFT_IA;
	case ZD_OBJ_PZ:  return ZD_OBJ_SLOT_SHIFT_PZ;
	case ZD_OBJ_LMR: return ZD_OBJ_SLOT_SHIFT_LMR;
	case ZD_OBJ_RMR: return ZD_OBJ_SLOT_SHIFT_RMR;
	case ZD_OBJ_EVD: return ZD_OBJ_SLOT_SHIFT_EVD;
	case ZD_OBJ_CNO: return ZD_OBJ_SLOT_SHIFT_CNO;
	case ZD_OBJ_EP:  return ZD_OBJ_SLOT_SHIFT_EP;
	case ZD_OBJ_SRQ: return ZD_OBJ_SLOT_SHIFT_SRQ;
	case ZD_OBJ_PSP: return ZD_OBJ_SLOT_SHIFT_PSP;
	case ZD_OBJ_RSP: return ZD_OBJ_SLOT_SHIFT_RSP;
	case ZD_OBJ_CR:  return ZD_OBJ_SLOT_SHIFT_CR;
	case ZD_OBJ_CSP: return ZD_OBJ_SLOT_SHIFT_CSP;
	default:         return zd_obj_zones.slot_shift[type];
	}
}

/*
 * Returns @h if it is the start of a slot of @type's zone handed out so
 * far, live or freed (its memory stays), NULL otherwise.  Never faults for
 * any pointer value.  A caller that reads a word of the object which its
 * release clears (the EP's dto_qp) needs no magic check besides.
 */
static ZD_ALWAYS_INLINE void *zd_obj_slot(const void *h, enum zd_obj_type type)
{
	/* Offset into @type's zone, rotated right by the slot size: the slot
	 * index of an aligned pointer, and a huge value for a misaligned one
	 * (its low bits rotate to the top) or one below the zone (it wraps),
	 * so one unsigned compare with the slots handed out (never more than
	 * the zone holds) refuses every pointer but a slot's start. */
	const unsigned shift = zd_obj_slot_shift(type);
	uintptr_t off = (uintptr_t)h - zd_obj_zones.base - ((uintptr_t)type << ZD_OBJ_ZONE_SHIFT);
	uintptr_t idx = off >> shift | off << (sizeof(off) * 8 - shift);

	if (ZD_UNLIKELY(idx >= atomic_load_explicit(&zd_obj_zones.nslots[type],
						    memory_order_relaxed)))
		return NULL;
	/* NULL is below every zone (base > 0) and failed the compare above. */
	if (h == NULL)
		__builtin_unreachable();
	return (void *)h;
}

/*
 * Returns the live object behind @h if it is of type @type, NULL otherwise.
 * Never faults for any pointer value: the zone range is checked before the
 * magic is read.
 */
static ZD_ALWAYS_INLINE void *zd_obj_get(const void *h, enum zd_obj_type type)
{
	struct zd_obj *o = zd_obj_slot(h, type);

	if (ZD_UNLIKELY(o == NULL))
		return NULL;
	if (ZD_UNLIKELY(atomic_load_explicit(&o->magic, memory_order_acquire) !=
			ZD_OBJ_MAGIC_LIVE(type)))
		return NULL;
	/* NULL is below every zone (base > 0) and failed the compare above:
	 * tells the callers' NULL checks they are already done. */
	if (o == NULL)
		__builtin_unreachable();
	return o;
}

/* Type of a live object of any type, or -1. */
int zd_obj_type_of(const void *h);

/* DAT_INVALID_HANDLE subtype naming the expected type. */
DAT_RETURN zd_obj_invalid_handle(enum zd_obj_type type);

/* Zero-filled slot of @size bytes (<= zone slot size); header filled. */
void *zd_obj_alloc(enum zd_obj_type type, size_t size, struct zd_ia *ia);
/* Marks the object dead: its handle fails every check from now on, while
 * the caller may still tear down what the body points to. */
void zd_obj_kill(void *obj);
/* Kills the object if need be and queues its slot for reuse: the last
 * touch of the object. */
void zd_obj_release(void *obj);

static inline void zd_obj_ref(void *obj)
{
	atomic_fetch_add_explicit(&((struct zd_obj *)obj)->refs, 1, memory_order_relaxed);
}

static inline void zd_obj_unref(void *obj)
{
	atomic_fetch_sub_explicit(&((struct zd_obj *)obj)->refs, 1, memory_order_release);
}

static inline bool zd_obj_in_use(const void *obj)
{
	return atomic_load_explicit(&((const struct zd_obj *)obj)->refs,
				    memory_order_acquire) != 0;
}

/* Sets up the zones; called once from the library constructor. */
int zd_obj_init(void);

/* A fork() child: the zones' lock may have been held by a parent thread
 * that is not here (zd_fork.c). */
void zd_obj_fork_child(void);

/* Kills every live object of @ia and @ia itself, without touching their
 * bodies or any lock: a forked child forgetting an IA it inherited, whose
 * slots it never reuses (zd_fork.h). */
void zd_obj_forget_ia(const struct zd_ia *ia);

/* Fetch a typed handle or return the DAT error for it from the caller. */
#define ZD_GET_OR_RETURN(var, handle, type)                        \
	do {                                                       \
		(var) = zd_obj_get((handle), (type));              \
		if (ZD_UNLIKELY((var) == NULL))                    \
			return zd_obj_invalid_handle(type);        \
	} while (0)

#endif /* ZD_OBJ_H */
