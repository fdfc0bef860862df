/* IA open/query/close through libdat2, strict ia_params, handle checks. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <string.h>
#include <sys/resource.h>

#include "zd_test_dat.h"

TestSuite(ia, .init = zd_test_use_conf);

Test(ia, open_query_close)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, q_async = DAT_HANDLE_NULL;
	DAT_IA_ATTR attr;
	DAT_PROVIDER_ATTR pattr;

	cr_assert_eq(zd_test_open("zdapl-shm", &ia, &async), DAT_SUCCESS);
	cr_assert_neq(async, DAT_HANDLE_NULL, "dat_ia_open made no async EVD");
	cr_assert_eq(dat_ia_query(ia, &q_async, DAT_IA_ALL, &attr, DAT_PROVIDER_FIELD_ALL, &pattr),
		     DAT_SUCCESS);
	cr_assert_eq(q_async, async);
	cr_assert_eq(attr.ia_address_ptr->sa_family, AF_INET);
	cr_assert_gt(attr.max_eps, 0);
	cr_assert_gt(attr.max_evd_qlen, 0);
	cr_assert_gt(attr.max_iov_segments_per_dto, 0);
	cr_assert_gt(attr.max_message_size, 0);
	cr_assert_str_eq(pattr.provider_name, "zdapl");
	cr_assert_eq(pattr.dapl_version_major, 2);
	cr_assert_eq(pattr.is_thread_safe, DAT_FALSE, "must echo the dat.conf key");
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
}

/* max_eps is what the process can hold connected: one CM socket per EP
 * (shm; tcp, whose data rides it; tcp with progress=manual has a data
 * socket too), within RLIMIT_NOFILE less 64. */
static DAT_COUNT max_eps_of(const char *name)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;
	DAT_IA_ATTR attr;

	cr_assert_eq(zd_test_open(name, &ia, &async), DAT_SUCCESS);
	cr_assert_eq(dat_ia_query(ia, &async, DAT_IA_ALL, &attr, 0, NULL), DAT_SUCCESS);
	cr_assert_eq(attr.max_ep_per_srq, attr.max_eps);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	return attr.max_eps;
}

Test(ia, max_eps_follows_nofile)
{
	struct rlimit old, r;

	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	r = old;
	r.rlim_cur = 1000;
	if (old.rlim_max < 1000)
		cr_skip_test("hard RLIMIT_NOFILE below 1000");
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &r), 0);
	cr_expect_eq(max_eps_of("zdapl-shm"), 1000 - 64);
	cr_expect_eq(max_eps_of("zdapl-tcp-lo"), 1000 - 64);
	cr_expect_eq(max_eps_of("zdapl-tcp-lo-manual"), (1000 - 64) / 2);
	r.rlim_cur = 2000;
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &r), 0);
	cr_expect_eq(max_eps_of("zdapl-shm"), 2000 - 64, "a raised limit is seen at once");
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
}

Test(ia, tcp_address_is_the_named_interface)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;
	DAT_IA_ATTR attr;
	struct sockaddr_in *sin;

	cr_assert_eq(zd_test_open("zdapl-tcp-lo", &ia, &async), DAT_SUCCESS);
	cr_assert_eq(dat_ia_query(ia, NULL, DAT_IA_ALL, &attr, 0, NULL), DAT_SUCCESS);
	sin = (struct sockaddr_in *)attr.ia_address_ptr;
	cr_assert_eq(sin->sin_family, AF_INET);
	cr_assert_eq(ntohl(sin->sin_addr.s_addr), INADDR_LOOPBACK);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

Test(ia, bad_ia_params_fail_open)
{
	static const char *const bad[] = {
		"zdapl-bad-device", "zdapl-bad-tcp-if", "zdapl-bad-tcp-noarg",
		"zdapl-bad-shm-args", "zdapl-bad-empty", "zdapl-bad-long",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
		DAT_EVD_HANDLE async;
		DAT_RETURN r = zd_test_open(bad[i], &ia, &async);

		cr_assert_eq(ZD_T_TYPE(r), DAT_INVALID_PARAMETER, "%s: got 0x%x", bad[i], r);
	}
}

Test(ia, unknown_name_is_not_found)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;

	cr_assert_eq(ZD_T_TYPE(zd_test_open("zdapl-nosuch", &ia, &async)),
		     DAT_PROVIDER_NOT_FOUND);
}

Test(ia, graceful_close_with_children_is_refused_abrupt_frees_all)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, evd;
	DAT_PZ_HANDLE pz;
	DAT_CNO_HANDLE cno;
	DAT_EP_HANDLE ep;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_REGION_DESCRIPTION region;
	static char buf[4096];

	cr_assert_eq(zd_test_open("zdapl-shm", &ia, &async), DAT_SUCCESS);
	cr_assert_eq(dat_pz_create(ia, &pz), DAT_SUCCESS);
	cr_assert_eq(dat_cno_create(ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia, 16, cno, DAT_EVD_DTO_FLAG, &evd), DAT_SUCCESS);
	cr_assert_eq(dat_ep_create(ia, pz, evd, evd, DAT_HANDLE_NULL, NULL, &ep), DAT_SUCCESS);
	region.for_va = buf;
	cr_assert_eq(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, sizeof(buf), pz,
				    DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lctx, NULL,
				    NULL, NULL),
		     DAT_SUCCESS);

	DAT_RETURN r = dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG);
	cr_assert_eq(ZD_T_TYPE(r), DAT_INVALID_STATE, "got 0x%x", r);
	cr_assert_eq(ZD_T_SUB(r), DAT_INVALID_STATE_IA_IN_USE);
	/* Still fully usable after the refusal. */
	cr_assert_eq(dat_pz_query(pz, DAT_PZ_FIELD_ALL, &(DAT_PZ_PARAM){ 0 }), DAT_SUCCESS);

	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
	/* Every handle is now stale: refused, never a crash. */
	cr_assert_eq(ZD_T_TYPE(dat_ep_free(ep)), DAT_INVALID_HANDLE);
	cr_assert_eq(ZD_T_TYPE(dat_lmr_free(lmr)), DAT_INVALID_HANDLE);
	cr_assert_eq(ZD_T_TYPE(dat_evd_free(evd)), DAT_INVALID_HANDLE);
	cr_assert_eq(ZD_T_TYPE(dat_cno_free(cno)), DAT_INVALID_HANDLE);
	cr_assert_eq(ZD_T_TYPE(dat_pz_free(pz)), DAT_INVALID_HANDLE);
}

Test(ia, reopen_after_close)
{
	for (int i = 0; i < 5; i++) {
		DAT_IA_HANDLE ia;
		DAT_EVD_HANDLE async;

		cr_assert_eq(zd_test_open("zdapl-shm", &ia, &async), DAT_SUCCESS, "round %d", i);
		cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	}
}

Test(ia, two_ias_at_once_are_independent)
{
	DAT_IA_HANDLE a, b;
	DAT_EVD_HANDLE aa, ab;
	DAT_PZ_HANDLE pz;

	cr_assert_eq(zd_test_open("zdapl-shm", &a, &aa), DAT_SUCCESS);
	cr_assert_eq(zd_test_open("zdapl-tcp-lo", &b, &ab), DAT_SUCCESS);
	cr_assert_eq(dat_pz_create(a, &pz), DAT_SUCCESS);
	/* A PZ of one IA cannot register memory in the other. */
	static char buf[64];
	DAT_REGION_DESCRIPTION region = { .for_va = buf };
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	cr_assert_eq(ZD_T_TYPE(dat_lmr_create(b, DAT_MEM_TYPE_VIRTUAL, region, sizeof(buf), pz,
					      DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lctx,
					      NULL, NULL, NULL)),
		     DAT_INVALID_HANDLE);
	cr_assert_eq(dat_ia_close(b, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
	cr_assert_eq(dat_pz_free(pz), DAT_SUCCESS);
	cr_assert_eq(dat_ia_close(a, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
}

Test(ia, close_bad_flags_and_handles)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;

	cr_assert_eq(zd_test_open("zdapl-shm", &ia, &async), DAT_SUCCESS);
	cr_assert_eq(ZD_T_TYPE(dat_ia_close(ia, (DAT_CLOSE_FLAGS)7)), DAT_INVALID_PARAMETER);
	/* The async EVD belongs to the IA: the consumer cannot free it. */
	cr_assert_eq(ZD_T_TYPE(dat_evd_free(async)), DAT_INVALID_STATE);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
}
