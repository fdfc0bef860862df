/*
 * The mlx5 devices through libdat2, on a host without a ConnectX: the
 * hardware device ("mlx5_<n> <port>", verbs backend) is found by core's
 * prefix match and fails dat_ia_open cleanly, with one line on stderr;
 * bad arguments are refused before any device is looked for.
 * DAT_OVERRIDE names mlx5_test.conf (tests/mlx5/meson.build).
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <unistd.h>
#include <dat2/udat.h>

#define DAT_ERROR(type, sub) ((DAT_RETURN)(DAT_CLASS_ERROR | (type) | (sub)))

static DAT_RETURN open_ia(const char *name)
{
	DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_RETURN ret = dat_ia_open((DAT_NAME_PTR)name, 8, &async, &ia);

	if (ret == DAT_SUCCESS)
		dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
	return ret;
}

Test(mlx5, open_missing_device_fails_with_one_line, .init = cr_redirect_stderr)
{
	if (access("/sys/class/infiniband/mlx5_0", F_OK) == 0)
		cr_skip_test("this host has an mlx5_0: the missing-device case cannot be shown");
	cr_assert_eq(open_ia("zdapl-mlx5_0-1"),
		     DAT_ERROR(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED));
	fflush(stderr);
	cr_assert_stderr_eq_str("zdapl: mlx5_0: no such mlx5 RDMA device on this host\n");
}

Test(mlx5, open_bad_arguments_refused)
{
	/* no port, a port that is no number, a device word that is only the
	 * prefix (no index: not an mlx5 device name) */
	cr_assert_eq(open_ia("zdapl-mlx5-noport"), DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1));
	cr_assert_eq(open_ia("zdapl-mlx5-badport"), DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1));
	cr_assert_eq(open_ia("zdapl-mlx5-prefix"), DAT_ERROR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1));
}
