/* One-sided atomics on a peer's memory (zd_soft_atomic.h). */
#include <sys/uio.h>

#include "evd/zd_ring_arch.h"   /* zd_cpu_relax */
#include "hw/soft/zd_soft_atomic.h"

int zd_soft_peer_atomic(struct zd_soft_peer *p, _Atomic uint32_t *lock, uint32_t chunk,
			uint64_t addr, zd_soft_atomic_fn *apply, const void *arg, uint64_t *old)
{
	/* Chunk memory: every initiator maps it, so all use CPU atomics.
	 * Other memory, even in this process: initiators elsewhere reach it
	 * by cross-memory attach, so everyone takes the lock. */
	void *ptr = chunk != ZD_SOFT_NO_CHUNK ? zd_soft_peer_ptr(p, chunk, addr, 8) : NULL;
	struct iovec li = { old, 8 }, ri = { (void *)(uintptr_t)addr, 8 };
	uint64_t nv;
	bool store;
	int rc = -1;

	if (ptr) {
		uint64_t *t = ptr;

		*old = __atomic_load_n(t, __ATOMIC_RELAXED);
		do {
			nv = apply(*old, arg, &store);
		} while (store && !__atomic_compare_exchange_n(t, old, nv, true, __ATOMIC_SEQ_CST,
							      __ATOMIC_RELAXED));
		return 0;
	}
	/* acquire: pairs with the release store unlocking: the previous
	 * holder's write is visible to our read. */
	for (uint32_t z = 0; !atomic_compare_exchange_weak_explicit(lock, &z, 1,
			memory_order_acquire, memory_order_relaxed); z = 0)
		zd_cpu_relax();
	if (p->self) {
		volatile uint64_t *t = (volatile uint64_t *)(uintptr_t)addr;

		*old = *t;
		nv = apply(*old, arg, &store);
		if (store)
			*t = nv;
		rc = 0;
	} else if (process_vm_readv(p->pid, &li, 1, &ri, 1, 0) == 8) {
		nv = apply(*old, arg, &store);
		li.iov_base = &nv;
		rc = !store || process_vm_writev(p->pid, &li, 1, &ri, 1, 0) == 8 ? 0 : -1;
	}
	atomic_store_explicit(lock, 0, memory_order_release);
	return rc;
}
