/*
 * Device registration: the hardware device is registered as "mlx5_*" and
 * core's zd_device_find matches it by prefix (mlx5_0, mlx5_12), never a
 * bare prefix or another device; exact names still match exactly.
 */
#include <criterion/criterion.h>

#include "core/zd_device.h"

Test(mlx5, device_find_prefix_match)
{
	const struct zd_device_ops *hw = zd_device_find("mlx5_0");

	cr_assert_not_null(hw, "mlx5_0 finds the mlx5 device");
	cr_assert_str_eq(hw->name, "mlx5_*");
	cr_assert_str_eq(hw->adapter_name, "zdapl-mlx5");
	cr_assert_eq(zd_device_find("mlx5_12"), hw);
	cr_assert_null(zd_device_find("mlx5_"), "the prefix alone is no device");
	cr_assert_null(zd_device_find("mlx5"));
	cr_assert_null(zd_device_find("mlx4_0"));
	cr_assert_neq(zd_device_find("mlx5sim"), hw, "mlx5sim is not mlx5_<n>");
	cr_assert_not_null(zd_device_find("shm"), "exact names still match");
	cr_assert_null(zd_device_find("sh"));
}

Test(mlx5, ops_table_complete)
{
	const struct zd_device_ops *d = zd_device_find("mlx5_0");

	cr_assert(d->ia_open && d->ia_close && d->pz_create && d->pz_destroy &&
		  d->mr_register && d->mr_deregister && d->cq_create && d->cq_destroy &&
		  d->cq_poll && d->cq_arm && d->qp_create && d->qp_local_blob &&
		  d->qp_connect && d->qp_flush && d->qp_reset && d->qp_destroy &&
		  d->srq_create && d->srq_resize && d->srq_destroy && d->post_send &&
		  d->post_recv && d->post_rdma_write && d->post_rdma_read && d->srq_post_recv);
	cr_assert(!d->cm_bind_any, "a NIC listens on its IA address only");
}
