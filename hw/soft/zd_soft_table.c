/* Writers of the shared region and chunk tables (zd_soft_table.h). */
#include "hw/soft/zd_soft_fdx.h"
#include "hw/soft/zd_soft_table.h"
#include "mem/zd_adopt.h"

void zd_soft_mr_publish(struct zd_soft_mr_entry *e, uint32_t key, uint64_t addr, uint64_t len,
			uint32_t access, uint32_t pz, uint32_t chunk)
{
	zd_soft_seq_begin(&e->seq);
	atomic_store_explicit(&e->key, key, memory_order_relaxed);
	atomic_store_explicit(&e->addr, addr, memory_order_relaxed);
	atomic_store_explicit(&e->len, len, memory_order_relaxed);
	atomic_store_explicit(&e->access, access, memory_order_relaxed);
	atomic_store_explicit(&e->pz, pz, memory_order_relaxed);
	atomic_store_explicit(&e->chunk, chunk, memory_order_relaxed);
	zd_soft_seq_end(&e->seq);
}

int zd_soft_chunk_publish(struct zd_soft_chunk_entry *tab, uint32_t n, uint32_t id, int fd,
			  uint64_t base, uint64_t len, uint32_t flags)
{
	for (uint32_t i = 0; i < n; i++) {
		struct zd_soft_chunk_entry *e = &tab[i];

		if (atomic_load_explicit(&e->id, memory_order_relaxed) != 0)
			continue;
		/* Peers obtain the fd from us: only published ones. */
		if (zd_soft_fdx_offer(fd) != 0)
			return -1;
		zd_soft_seq_begin(&e->seq);
		atomic_store_explicit(&e->fd, fd, memory_order_relaxed);
		atomic_store_explicit(&e->base, base, memory_order_relaxed);
		atomic_store_explicit(&e->len, len, memory_order_relaxed);
		atomic_store_explicit(&e->flags, flags, memory_order_relaxed);
		atomic_store_explicit(&e->id, id, memory_order_relaxed);
		zd_soft_seq_end(&e->seq);
		return (int)i;
	}
	return -1;
}

int zd_soft_chunk_retract(struct zd_soft_chunk_entry *tab, uint32_t n, uint32_t id)
{
	for (uint32_t i = 0; i < n; i++) {
		struct zd_soft_chunk_entry *e = &tab[i];

		if (id == 0 || atomic_load_explicit(&e->id, memory_order_relaxed) != id)
			continue;
		zd_soft_fdx_withdraw(atomic_load_explicit(&e->fd, memory_order_relaxed));
		zd_soft_seq_begin(&e->seq);
		atomic_store_explicit(&e->id, 0, memory_order_relaxed);
		atomic_store_explicit(&e->fd, -1, memory_order_relaxed);
		zd_soft_seq_end(&e->seq);
		return 0;
	}
	return -1;
}

int zd_soft_chunk_publish_adopted(struct zd_soft_chunk_entry *tab, uint32_t n)
{
	int fd = zd_adopt_open();

	return fd < 0 ? -1
		      : zd_soft_chunk_publish(tab, n, ZD_SOFT_ADOPT_ID, fd, 0, ZD_ADOPT_SPAN,
					      ZD_SOFT_CHUNK_ADOPTED);
}

uint32_t zd_soft_chunk_find(const struct zd_soft_chunk_entry *tab, uint32_t n, uint64_t addr,
			    uint64_t len)
{
	/* Asked once per range: whether adoption holds it all. */
	bool adopted = zd_adopt_covers(addr, len);
	struct zd_soft_chunk_view v;

	for (uint32_t i = 0; i < n; i++) {
		if (!zd_soft_chunk_read(&tab[i], &v))
			continue;
		if (v.flags & ZD_SOFT_CHUNK_ADOPTED ? adopted
						    : zd_range_in(v.base, v.len, addr, len))
			return v.flags & ZD_SOFT_CHUNK_ADOPTED ? i | ZD_SOFT_CHUNK_INTERIOR : i;
	}
	return ZD_SOFT_NO_CHUNK;
}
