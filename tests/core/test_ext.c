/* The IB extension API (dat_ib_extensions.h) through libdat2: what
 * dat_ia_query advertises, the open/close query, and the errors of every
 * extension call that need no peer (bad and freed handles, wrong EP kind,
 * wrong state, missing arguments, operations zdapl does not do).  The
 * operations themselves are tested per device (tests/shm, tests/tcp,
 * tests/mlx5sim) and by the stock dtestx (tests/interop). */
#include <criterion/criterion.h>
#include <string.h>
#include <netinet/in.h>

#include "zd_test_dat.h"
#include <dat2/dat_ib_extensions.h>

TestSuite(ext, .init = zd_test_use_conf);

#define EXPECT_RET(call, type, sub)                                              \
	do {                                                                     \
		DAT_RETURN r_ = (call);                                          \
		cr_assert_eq(DAT_GET_TYPE(r_), (type), #call ": 0x%x", r_);      \
		cr_assert_eq(DAT_GET_SUBTYPE(r_), (sub), #call ": subtype 0x%x", r_); \
	} while (0)

static const char *attr_value(const DAT_PROVIDER_ATTR *p, const char *name)
{
	for (DAT_COUNT i = 0; i < p->num_provider_specific_attr; i++)
		if (strcmp(p->provider_specific_attr[i].name, name) == 0)
			return p->provider_specific_attr[i].value;
	return NULL;
}

static void check_ext_attrs(const DAT_IA_ATTR *ia, const DAT_PROVIDER_ATTR *p)
{
	cr_assert_eq(ia->extension_supported, DAT_EXTENSION_IB);
	cr_assert_eq(ia->extension_version, DAT_IB_EXTENSION_VERSION);
	cr_assert_not_null(ia->ia_address_ptr);
	cr_assert_str_eq(attr_value(p, "DAT_EXTENSION_INTERFACE"), "TRUE");
	/* Each operation's attribute is there, "TRUE" or "FALSE"; the two
	 * atomics come together (dtestx waits for one side's CAS in its
	 * FAA test). */
	cr_assert_not_null(attr_value(p, DAT_IB_ATTR_IMMED_DATA));
	cr_assert_not_null(attr_value(p, DAT_IB_ATTR_UD));
	cr_assert_str_eq(attr_value(p, DAT_IB_ATTR_FETCH_AND_ADD),
			 attr_value(p, DAT_IB_ATTR_CMP_AND_SWAP));
}

Test(ext, ia_query_advertises_the_ib_extension)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;
	DAT_IA_ATTR a;
	DAT_PROVIDER_ATTR p;

	cr_assert_eq(zd_test_open(zd_test_ia("zdapl-shm"), &ia, &async), DAT_SUCCESS);
	cr_assert_eq(dat_ia_query(ia, NULL, DAT_IA_FIELD_ALL, &a, DAT_PROVIDER_FIELD_ALL, &p),
		     DAT_SUCCESS);
	check_ext_attrs(&a, &p);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

/* dtestx -q: an IA opened for the query only, handed back to close_query. */
Test(ext, open_query_and_close_query)
{
	DAT_IA_HANDLE ia = DAT_HANDLE_NULL;
	DAT_IA_ATTR a;
	DAT_PROVIDER_ATTR p;

	cr_assert_eq(dat_ib_open_query((DAT_NAME_PTR)zd_test_ia("zdapl-shm"), &ia,
				       DAT_IA_FIELD_ALL, &a, DAT_PROVIDER_FIELD_ALL, &p),
		     DAT_SUCCESS);
	cr_assert_not_null(ia);
	check_ext_attrs(&a, &p);
	cr_assert_eq(dat_ib_close_query(ia), DAT_SUCCESS);
	/* A name no dat.conf line has. */
	cr_assert_neq(dat_ib_open_query((DAT_NAME_PTR)"zdapl-no-such-line", &ia, DAT_IA_FIELD_ALL,
					&a, DAT_PROVIDER_FIELD_ALL, &p),
		      DAT_SUCCESS);
}

struct fixture {
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async, evd, conn;
	DAT_PZ_HANDLE pz;
	DAT_EP_HANDLE ep;
};

static void open_fixture(struct fixture *f)
{
	cr_assert_eq(zd_test_open(zd_test_ia("zdapl-shm"), &f->ia, &f->async), DAT_SUCCESS);
	cr_assert_eq(dat_pz_create(f->ia, &f->pz), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(f->ia, 8, DAT_HANDLE_NULL, DAT_EVD_DTO_FLAG, &f->evd),
		     DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(f->ia, 8, DAT_HANDLE_NULL, DAT_EVD_CONNECTION_FLAG, &f->conn),
		     DAT_SUCCESS);
	cr_assert_eq(dat_ep_create(f->ia, f->pz, f->evd, f->evd, f->conn, NULL, &f->ep),
		     DAT_SUCCESS);
}

Test(ext, posts_check_state_and_arguments_before_the_device)
{
	struct fixture f;
	DAT_LMR_TRIPLET l = { .lmr_context = 1, .virtual_address = 0x1000, .segment_length = 8 };
	DAT_RMR_TRIPLET r = { .rmr_context = 1, .virtual_address = 0x2000, .segment_length = 8 };
	DAT_DTO_COOKIE c = { .as_64 = 1 };

	open_fixture(&f);
	/* An RC EP that is not connected: the state, as for the DAT posts. */
	EXPECT_RET(dat_ib_post_fetch_and_add(f.ep, 1, &l, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		   DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED);
	EXPECT_RET(dat_ib_post_cmp_and_swap(f.ep, 1, 2, &l, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		   DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED);
	EXPECT_RET(dat_ib_post_rdma_write_immed(f.ep, 1, &l, c, &r, 7,
						DAT_COMPLETION_DEFAULT_FLAG),
		   DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONNECTED);
	/* The UD calls on an RC EP. */
	DAT_IB_ADDR_HANDLE ah = { 0 };
	EXPECT_RET(dat_ib_post_send_ud(f.ep, 1, &l, &ah, c, DAT_COMPLETION_DEFAULT_FLAG),
		   DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	EXPECT_RET(dat_ib_ud_ah_free(f.ep, &ah), DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	EXPECT_RET(dat_ib_ud_cm_free(f.ep, NULL), DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	cr_assert_eq(dat_ia_close(f.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

Test(ext, freed_and_wrong_handles)
{
	struct fixture f;
	DAT_LMR_TRIPLET l = { .lmr_context = 1, .virtual_address = 0x1000, .segment_length = 8 };
	DAT_RMR_TRIPLET r = { .rmr_context = 1, .virtual_address = 0x2000, .segment_length = 8 };
	DAT_DTO_COOKIE c = { .as_64 = 1 };
	DAT_IB_ADDR_HANDLE ah = { 0 };

	open_fixture(&f);
	/* A freed EP keeps its provider pointer (libdat2 dispatches on it)
	 * and is refused by us: no live EP behind it. */
	cr_assert_eq(dat_ep_free(f.ep), DAT_SUCCESS);
	EXPECT_RET(dat_ib_post_fetch_and_add(f.ep, 1, &l, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		   DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	EXPECT_RET(dat_ib_post_cmp_and_swap(f.ep, 1, 2, &l, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		   DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	EXPECT_RET(dat_ib_post_rdma_write_immed(f.ep, 1, &l, c, &r, 7,
						DAT_COMPLETION_DEFAULT_FLAG),
		   DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	EXPECT_RET(dat_ib_post_send_ud(f.ep, 1, &l, &ah, c, DAT_COMPLETION_DEFAULT_FLAG),
		   DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	EXPECT_RET(dat_ib_ud_ah_free(f.ep, &ah), DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	EXPECT_RET(dat_ib_ud_cm_free(f.ep, NULL), DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	/* ... and by the calls that take any handle or an IA's. */
	DAT_UINT64 v[DCNT_EP_ALL_COUNTERS + 1];
	EXPECT_RET(dat_ib_query_counters(f.ep, DCNT_EP_ALL_COUNTERS, v, 0), DAT_INVALID_HANDLE,
		   DAT_INVALID_HANDLE1);
	EXPECT_RET(dat_extension_op(f.ep, DAT_IB_START_COUNTERS_OP, (int)DCNT_IA_CM),
		   DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	EXPECT_RET(dat_extension_op(f.ep, DAT_IB_CLOSE_QUERY_OP), DAT_INVALID_HANDLE,
		   DAT_INVALID_HANDLE_IA);
	EXPECT_RET(dat_extension_op(f.ep, (DAT_EXTENDED_OP)999), DAT_INVALID_HANDLE,
		   DAT_INVALID_HANDLE1);
	/* A live handle of another type: an EVD is no EP. */
	EXPECT_RET(dat_ib_post_fetch_and_add(f.evd, 1, &l, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		   DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	EXPECT_RET(dat_ib_post_cmp_and_swap(f.evd, 1, 2, &l, c, &r, DAT_COMPLETION_DEFAULT_FLAG),
		   DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	EXPECT_RET(dat_ib_post_rdma_write_immed(f.pz, 1, &l, c, &r, 7,
						DAT_COMPLETION_DEFAULT_FLAG),
		   DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	EXPECT_RET(dat_ib_ud_ah_free(f.pz, &ah), DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
	cr_assert_eq(dat_ia_close(f.ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

Test(ext, collectives_and_unknown_ops_are_not_implemented)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;

	cr_assert_eq(zd_test_open(zd_test_ia("zdapl-shm"), &ia, &async), DAT_SUCCESS);
	EXPECT_RET(dat_extension_op(ia, DAT_IB_COLLECTIVE_BARRIER_OP, NULL, (DAT_CONTEXT){ 0 },
				    DAT_COMPLETION_DEFAULT_FLAG),
		   DAT_NOT_IMPLEMENTED, DAT_NO_SUBTYPE);
	EXPECT_RET(dat_extension_op(ia, (DAT_EXTENDED_OP)999), DAT_NOT_IMPLEMENTED,
		   DAT_NO_SUBTYPE);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}
