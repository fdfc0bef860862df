/*
 * BlueFlame checks of the software mlx5 device: the data path's doorbell
 * discipline, counted in the NIC's statistics (db_order, bf_checked,
 * bf_mismatch) and logged with ZDAPL_MLX5SIM_DEBUG=1.  Every engine pass
 * observes each QP's two BlueFlame halves, whose doorbells the doorbell
 * record must already cover; the engine keeps a shadow of the last WQEs
 * it executed, and a BlueFlame copy, once its writer has provably finished
 * it, must equal its WQE as executed.
 */
#include <endian.h>
#include <stdio.h>
#include <string.h>

#include "hw/mlx5/sim/zd_mlx5sim_priv.h"

void zd_ms_bf_shadow(struct zd_ms_qpe *e, uint16_t idx, uint32_t nbb, const uint8_t *w)
{
	struct zd_ms_shadow *s = &e->shadow[e->shadow_next++ % ZD_MS_SHADOWS];

	s->valid = true;
	s->idx = idx;
	s->nbb = (uint16_t)nbb;
	s->len = ZD_MIN(nbb * MLX5_SEND_WQE_BB, ZD_MS_BF_SIZE);
	memcpy(s->b, w, s->len);
}

/*
 * A change in the first 8 bytes of a BlueFlame half is a doorbell (8-byte
 * or a full BlueFlame copy).  Order check: the writer stores the doorbell
 * record, then (after its barrier) the BlueFlame bytes; we load the half,
 * then (acquire) the record, so the record must already cover the WQE.
 */
void zd_ms_bf_observe(struct zd_mlx5sim_nic *nic, struct zd_ms_qp *qp, struct zd_ms_qpe *e)
{
	const uint8_t *bf = zd_ms_at(nic->sh, qp->uar_off + ZD_MS_BF_OFFSET);
	volatile __be32 *db = zd_ms_own_qbuf(nic, qp->db_chunk, qp->db_off);

	for (int h = 0; h < 2; h++) {
		uint64_t w = __atomic_load_n((const uint64_t *)(bf + h * ZD_MS_BF_SIZE),
					     __ATOMIC_ACQUIRE);
		uint32_t idx, pi;

		if (w == e->bf_last[h])
			continue;
		e->bf_last[h] = w;
		idx = (zd_ms_rd_be32(&w) >> 8) & 0xffff;
		pi = be32toh(zd_dev_load(&db[MLX5_SND_DBR])) & 0xffff;
		if (((pi - idx) & 0xffff) == 0 || ((pi - idx) & 0xffff) > 0x8000) {
			atomic_fetch_add(&nic->cnt_db_order, 1);
			if (nic->debug)
				fprintf(stderr, "zdapl: mlx5sim: qp %#x: doorbell for WQE %u before "
					"its doorbell record (%u)\n", qp->qpn, idx, pi);
		}
		if (e->bf_pending[h])
			e->bf_prev_unknown[h] = true;   /* the earlier write went unchecked */
		e->bf_pending[h] = true;
		e->bf_idx[h] = (uint16_t)idx;
		e->bf_hist[h][e->bf_writes[h]++ % 4] = (uint16_t)idx;
	}
}

/*
 * Is bf_prev[h] what half h held just before the write of the WQE in
 * shadow slot k?  The polling engine may miss writes, so only when it saw
 * the doorbells on both sides of it: the previous write to h was the WQE
 * two before (or none since reset) and the WQE one before rang the other
 * half.  Otherwise a half that differs may be an 8-byte doorbell over an
 * unseen copy, and is not counted.
 */
static bool bf_trusted(const struct zd_ms_qpe *e, int h, uint32_t k)
{
	uint32_t n = e->shadow_next, back;
	uint16_t prev1, prev2;
	bool seen = false;

	if (e->bf_prev_unknown[h])
		return false;
	/* how far back from the newest shadow is slot k? */
	back = (n - 1 - k) % ZD_MS_SHADOWS;
	if (n - back == 1)                  /* the first WQE since reset */
		return e->bf_writes[h] == 1;
	if (n - back == 2)                  /* the second: first on its half */
		return e->bf_writes[h] == 1 && e->bf_writes[!h] >= 1;
	if (back + 2 >= ZD_MS_SHADOWS)
		return false;
	prev1 = e->shadow[(k + ZD_MS_SHADOWS - 1) % ZD_MS_SHADOWS].idx;
	prev2 = e->shadow[(k + ZD_MS_SHADOWS - 2) % ZD_MS_SHADOWS].idx;
	for (uint32_t i = 0; i < 4 && i < e->bf_writes[!h]; i++)
		seen |= e->bf_hist[!h][i] == prev1;
	return seen && e->bf_prev_idx[h] == prev2;
}

/*
 * Copy check, once the writer has provably finished the copy: its doorbell
 * record has moved past the WQE (the next post's record store follows the
 * copy and its flush).  The half is read back to front, so a consistent
 * snapshot is one whose first 8 bytes still name the WQE (the writer
 * stores them first).  Bytes 8.. unchanged since the half's last snapshot
 * mean an 8-byte doorbell; otherwise the copy must equal the WQE as we
 * executed it.  After a write we could not check, the previous content is
 * unknown: a copy that differs is then not counted (it may be a doorbell).
 */
void zd_ms_bf_resolve(struct zd_mlx5sim_nic *nic, struct zd_ms_qp *qp, struct zd_ms_qpe *e,
		      bool final)
{
	const uint8_t *bf = zd_ms_at(nic->sh, qp->uar_off + ZD_MS_BF_OFFSET);
	volatile __be32 *db = zd_ms_own_qbuf(nic, qp->db_chunk, qp->db_off);

	for (int h = 0; h < 2; h++) {
		struct zd_ms_shadow *s = NULL;
		alignas(8) uint8_t now[ZD_MS_BF_SIZE];
		uint32_t pi, ci;
		uint64_t w;
		bool doorbell, same;

		if (!e->bf_pending[h])
			continue;
		int k = -1;

		for (int i = 0; i < ZD_MS_SHADOWS; i++)
			if (e->shadow[i].valid && e->shadow[i].idx == e->bf_idx[h]) {
				s = &e->shadow[i];
				k = i;
			}
		if (!s) {
			/* Not executed yet, or executed too long ago. */
			ci = atomic_load(&qp->sq_ci);
			if (final || (((ci - e->bf_idx[h]) & 0xffff) < 0x8000 && ci != e->bf_idx[h])) {
				e->bf_pending[h] = false;
				e->bf_prev_unknown[h] = true;
			}
			continue;
		}
		pi = be32toh(zd_dev_load(&db[MLX5_SND_DBR])) & 0xffff;
		if (!final && ((pi - s->idx) & 0xffff) <= s->nbb)
			continue;
		for (uint32_t i = ZD_MS_BF_SIZE - 8; i >= 8; i -= 8)
			__atomic_load((const uint64_t *)(bf + h * ZD_MS_BF_SIZE + i),
				      (uint64_t *)(now + i), __ATOMIC_RELAXED);
		atomic_thread_fence(memory_order_acquire);
		w = __atomic_load_n((const uint64_t *)(bf + h * ZD_MS_BF_SIZE), __ATOMIC_RELAXED);
		e->bf_pending[h] = false;
		if (w != e->bf_last[h]) {
			e->bf_prev_unknown[h] = true;   /* rewritten meanwhile */
			continue;
		}
		memcpy(now, &w, 8);
		doorbell = memcmp(now + 8, e->bf_prev[h] + 8, s->len - 8) == 0;
		same = memcmp(now, s->b, s->len) == 0;
		if (same || (!doorbell && bf_trusted(e, h, (uint32_t)k))) {
			atomic_fetch_add(&nic->cnt_bf_checked, 1);
			if (!same) {
				atomic_fetch_add(&nic->cnt_bf_mismatch, 1);
				if (nic->debug)
					fprintf(stderr, "zdapl: mlx5sim: qp %#x: BlueFlame copy of WQE %u "
						"differs from the SQ\n", qp->qpn, s->idx);
			}
		}
		memcpy(e->bf_prev[h], now, ZD_MS_BF_SIZE);
		e->bf_prev_unknown[h] = false;
		e->bf_prev_idx[h] = s->idx;
	}
}

void zd_ms_qp_bf_final(struct zd_mlx5sim_nic *nic, uint32_t i)
{
	struct zd_ms_qp *qp = zd_ms_qp_ctx(nic->sh, i);

	zd_ms_bf_observe(nic, qp, &nic->qpe[i]);
	zd_ms_bf_resolve(nic, qp, &nic->qpe[i], true);
}
