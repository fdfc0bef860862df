/* Object zones: see zd_obj.h for the why. */
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "core/zd_obj.h"
#include "core/zd_ia.h"

struct zd_obj_zones zd_obj_zones;

/* Freed slots per type, reused oldest first. Control path only. */
struct zd_obj_free {
	void *head;
	void *tail;
};

static struct zd_obj_free free_slots[ZD_OBJ_TYPE_COUNT];
static pthread_mutex_t zones_lock = PTHREAD_MUTEX_INITIALIZER;

static const DAT_RETURN invalid_subtype[ZD_OBJ_TYPE_COUNT] = {
	[ZD_OBJ_IA] = DAT_INVALID_HANDLE_IA,   [ZD_OBJ_PZ] = DAT_INVALID_HANDLE_PZ,
	[ZD_OBJ_LMR] = DAT_INVALID_HANDLE_LMR, [ZD_OBJ_RMR] = DAT_INVALID_HANDLE_RMR,
	[ZD_OBJ_EVD] = DAT_INVALID_HANDLE_EVD_REQUEST,
	[ZD_OBJ_CNO] = DAT_INVALID_HANDLE_CNO, [ZD_OBJ_EP] = DAT_INVALID_HANDLE_EP,
	[ZD_OBJ_SRQ] = DAT_INVALID_HANDLE_SRQ, [ZD_OBJ_PSP] = DAT_INVALID_HANDLE_PSP,
	[ZD_OBJ_RSP] = DAT_INVALID_HANDLE_RSP, [ZD_OBJ_CR] = DAT_INVALID_HANDLE_CR,
	[ZD_OBJ_CSP] = DAT_INVALID_HANDLE_CSP,
};

int zd_obj_init(void)
{
	static const unsigned shifts[ZD_OBJ_TYPE_COUNT] = {
		[ZD_OBJ_IA] = ZD_OBJ_SLOT_SHIFT_IA,   [ZD_OBJ_PZ] = ZD_OBJ_SLOT_SHIFT_PZ,
		[ZD_OBJ_LMR] = ZD_OBJ_SLOT_SHIFT_LMR, [ZD_OBJ_RMR] = ZD_OBJ_SLOT_SHIFT_RMR,
		[ZD_OBJ_EVD] = ZD_OBJ_SLOT_SHIFT_EVD, [ZD_OBJ_CNO] = ZD_OBJ_SLOT_SHIFT_CNO,
		[ZD_OBJ_EP] = ZD_OBJ_SLOT_SHIFT_EP,   [ZD_OBJ_SRQ] = ZD_OBJ_SLOT_SHIFT_SRQ,
		[ZD_OBJ_PSP] = ZD_OBJ_SLOT_SHIFT_PSP, [ZD_OBJ_RSP] = ZD_OBJ_SLOT_SHIFT_RSP,
		[ZD_OBJ_CR] = ZD_OBJ_SLOT_SHIFT_CR,   [ZD_OBJ_CSP] = ZD_OBJ_SLOT_SHIFT_CSP,
	};
	size_t len = (size_t)ZD_OBJ_TYPE_COUNT << ZD_OBJ_ZONE_SHIFT;
	void *base;

	if (zd_obj_zones.base)
		return 0;
	/* Address space only: pages are backed when a slot is first touched. */
	base = mmap(NULL, len, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED)
		return -1;
	for (int t = 0; t < ZD_OBJ_TYPE_COUNT; t++)
		zd_obj_zones.slot_shift[t] = shifts[t];
	zd_obj_zones.base = (uintptr_t)base;
	return 0;
}

DAT_RETURN zd_obj_invalid_handle(enum zd_obj_type type)
{
	return DAT_ERROR(DAT_INVALID_HANDLE, invalid_subtype[type]);
}

int zd_obj_type_of(const void *h)
{
	uintptr_t t = ((uintptr_t)h - zd_obj_zones.base) >> ZD_OBJ_ZONE_SHIFT;

	if (t >= ZD_OBJ_TYPE_COUNT || !zd_obj_get(h, (enum zd_obj_type)t))
		return -1;
	return (int)t;
}

/* A freed slot links through its header (ia_next is unused once the
 * object has left its IA), so nothing in the body matters after release. */
static void **free_link(void *slot)
{
	return (void **)&((struct zd_obj *)slot)->ia_next;
}

void *zd_obj_alloc(enum zd_obj_type type, size_t size, struct zd_ia *ia)
{
	size_t slot = (size_t)1 << zd_obj_zones.slot_shift[type];
	struct zd_obj_free *fl = &free_slots[type];
	struct zd_obj *o = NULL;

	if (size > slot)
		return NULL;
	pthread_mutex_lock(&zones_lock);
	if (fl->head) {
		o = fl->head;
		fl->head = *free_link(o);
		if (!fl->head)
			fl->tail = NULL;
	} else {
		uintptr_t n = atomic_load_explicit(&zd_obj_zones.nslots[type],
						   memory_order_relaxed);
		uintptr_t off = n * slot;

		if (off + slot <= ((uintptr_t)1 << ZD_OBJ_ZONE_SHIFT)) {
			o = (struct zd_obj *)(zd_obj_zones.base +
					      ((uintptr_t)type << ZD_OBJ_ZONE_SHIFT) + off);
			/* Publish the new count only after the slot is usable;
			 * its magic is still 0 so checks refuse it meanwhile. */
			atomic_store_explicit(&zd_obj_zones.nslots[type], n + 1,
					      memory_order_release);
		}
	}
	pthread_mutex_unlock(&zones_lock);
	if (!o)
		return NULL;

	memset((char *)o + sizeof(o->provider) + sizeof(o->magic), 0,
	       slot - sizeof(o->provider) - sizeof(o->magic));
	o->type = (uint16_t)type;
	o->ia = ia;
	o->provider = ia ? ia->obj.provider : NULL;
	/* Pairs with the acquire load of the magic in zd_obj_get(). */
	atomic_store_explicit(&o->magic, ZD_OBJ_MAGIC_LIVE(type), memory_order_release);
	return o;
}

void zd_obj_fork_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	zones_lock = fresh;
}

void zd_obj_forget_ia(const struct zd_ia *ia)
{
	for (int t = 0; t < ZD_OBJ_TYPE_COUNT; t++) {
		uintptr_t n = atomic_load_explicit(&zd_obj_zones.nslots[t], memory_order_relaxed);
		uintptr_t zone = zd_obj_zones.base + ((uintptr_t)t << ZD_OBJ_ZONE_SHIFT);

		for (uintptr_t i = 0; i < n; i++) {
			struct zd_obj *o = (struct zd_obj *)(zone + (i << zd_obj_zones.slot_shift[t]));

			/* relaxed: the child has one thread; o->ia of a live
			 * slot never changes. */
			if (atomic_load_explicit(&o->magic, memory_order_relaxed) ==
			    ZD_OBJ_MAGIC_LIVE(t) && o->ia == ia)
				zd_obj_kill(o);
		}
	}
}

void zd_obj_kill(void *obj)
{
	atomic_store_explicit(&((struct zd_obj *)obj)->magic, ZD_OBJ_MAGIC_DEAD,
			      memory_order_release);
}

void zd_obj_release(void *obj)
{
	struct zd_obj *o = obj;
	struct zd_obj_free *fl = &free_slots[o->type];

	zd_obj_kill(o);
	pthread_mutex_lock(&zones_lock);
	*free_link(o) = NULL;
	if (fl->tail)
		*free_link(fl->tail) = o;
	else
		fl->head = o;
	fl->tail = o;
	pthread_mutex_unlock(&zones_lock);
}
