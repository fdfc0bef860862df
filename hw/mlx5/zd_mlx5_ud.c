/*
 * Unreliable datagrams on the mlx5 device (core/zd_device.h's contract).
 *
 * A UD QP (qp->ud: zd_mlx5_qp.c creates it through the backend, ready at
 * once, never connected) sends SEND WQEs whose datagram segment names the
 * destination -- ctrl, the 48-byte address vector (struct
 * mlx5_wqe_datagram_seg), then the data segments -- as rdma-core's mlx5
 * provider builds them (set_datagram_seg).  Its receives are the RC ones;
 * zd_mlx5_cq.c reports them as DAT_IB_DTO_RECV_UD, whose length counts the
 * 40-byte GRH the NIC writes before the payload.
 *
 * Address handles: core asks for one per remote UD QP (core/zd_ud.c keeps
 * them per IA until it closes); the backend resolves the peer's qp_blob
 * into an address vector (verbs: ibv_create_ah, then mlx5dv_init_obj), and
 * the handle keeps that AV with the remote QPN (extended AV) and Q_Key
 * filled in, so a post copies it whole.
 *
 * Local data always goes as data segments, for the NIC to check their
 * keys; a UD send is not a latency path here.
 */
#include <endian.h>
#include <string.h>
#include <netinet/in.h>          /* before dat_ib_extensions.h */
#include <dat2/udat.h>
#include <dat2/dat_ib_extensions.h>

#include "core/zd_ep.h"
#include "core/zd_ia.h"
#include "hw/mlx5/zd_mlx5.h"

/* The device's share of core's address handle. */
struct zd_mlx5_ud_ah {
	struct mlx5_wqe_av av;       /* the datagram segment, complete */
	void *bah;                   /* the backend's handle */
};

_Static_assert(sizeof(struct zd_mlx5_ud_ah) <= ZD_UD_AH_BYTES, "an mlx5 AH fits core's");
_Static_assert(sizeof(struct mlx5_wqe_ctrl_seg) + sizeof(struct mlx5_wqe_datagram_seg) ==
	       MLX5_SEND_WQE_BB, "ctrl and the datagram segment fill the first block");

DAT_RETURN zd_mlx5_ud_ah_create(struct zd_ia *ia, const void *blob, size_t len, void *ah,
				uint32_t *qpn)
{
	struct zd_mlx5_dev *dev = ia->dev_priv;
	struct zd_mlx5_ud_ah *a = ah;
	uint32_t rqpn = 0, qkey = 0;
	DAT_RETURN ret;

	if (!dev->be->ah_create)
		return DAT_ERROR(DAT_MODEL_NOT_SUPPORTED, DAT_NO_SUBTYPE);
	memset(a, 0, sizeof(*a));
	ret = dev->be->ah_create(dev->bctx, blob, len, &a->av, &rqpn, &qkey, &a->bah);
	if (ret != DAT_SUCCESS)
		return ret;
	/* What rdma-core writes per WQE from the work request, once here. */
	a->av.dqp_dct = htobe32((rqpn & 0xffffff) | MLX5_EXTENDED_UD_AV);
	a->av.key.qkey.qkey = htobe32(qkey);
	*qpn = rqpn & 0xffffff;
	return DAT_SUCCESS;
}

void zd_mlx5_ud_ah_destroy(struct zd_ia *ia, void *ah)
{
	struct zd_mlx5_dev *dev = ia->dev_priv;
	struct zd_mlx5_ud_ah *a = ah;

	dev->be->ah_destroy(dev->bctx, a->bah);
}

DAT_RETURN zd_mlx5_post_send_ud(struct zd_ep *ep, DAT_COUNT n, const DAT_LMR_TRIPLET *iov,
				const void *ah, DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags)
{
	const struct zd_mlx5_ud_ah *a = ah;
	struct zd_mlx5_qp *qp = ep->dev_priv;
	struct zd_mlx5_sq *sq = &qp->sq;
	const bool event = zd_mlx5_wants_event(flags, qp->req_flags);
	bool signaled = event;
	uint32_t nseg = 0, total = 0, ds, nbb;
	uint8_t *ctrl, *seg;

	/* Core checked the EP is UD and the payload is within the MTU. */
	for (DAT_COUNT i = 0; i < n; i++) {
		if (iov[i].segment_length) {
			nseg++;
			total += iov[i].segment_length;
		}
	}
	ds = MLX5_SEND_WQE_BB / 16 + nseg;
	nbb = (ds * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
	if (ZD_UNLIKELY(ds > ZD_MLX5_MAX_DS))
		return DAT_ERROR(DAT_LENGTH_ERROR, DAT_NO_SUBTYPE);
	if (ZD_UNLIKELY(nbb > zd_mlx5_sq_room(sq)))
		return DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
	if (!signaled)
		signaled = zd_mlx5_sq_unsig_full(sq);
	ctrl = zd_mlx5_sq_bb(sq, sq->pi);
	memcpy(ctrl + sizeof(struct mlx5_wqe_ctrl_seg), &a->av, sizeof(a->av));
	/* The data segments from the next block, which may wrap. */
	seg = zd_mlx5_sq_next_seg(sq, ctrl + MLX5_SEND_WQE_BB - 16);
	for (DAT_COUNT i = 0; i < n; i++) {
		if (!iov[i].segment_length)
			continue;   /* byte_count 0 would mean 2 GiB to the NIC */
		zd_mlx5_set_dseg((void *)seg, iov[i].virtual_address, iov[i].segment_length,
				 iov[i].lmr_context);
		seg = zd_mlx5_sq_next_seg(sq, seg);
	}
	zd_mlx5_set_ctrl((void *)ctrl, sq->pi, MLX5_OPCODE_SEND, sq->qpn8, ds,
			 zd_mlx5_fm_ce_se(flags, signaled, true), 0);
	/* Its completion is a DAT_IB_DTO_EVENT (zd_mlx5_cq.c: WR_EXT). */
	zd_mlx5_sq_wr_set(&sq->wr[sq->pi & sq->mask], cookie, total,
			  (DAT_DTOS)DAT_IB_DTO_SEND_UD, sq->pi, (uint8_t)nbb,
			  (uint8_t)(zd_mlx5_wr_flags((DAT_DTOS)DAT_IB_DTO_SEND_UD, event) |
				    (signaled ? ZD_MLX5_WR_SIGNALED : 0)));
	zd_mlx5_sq_doorbell(sq, nbb);
	return DAT_SUCCESS;
}
