/* PZ, LMR, RMR and CNO through libdat2: lifetimes, references, bad input. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include "zd_test_dat.h"
#include <dat2/dat_registry.h>

TestSuite(mem_objs, .init = zd_test_use_conf);

static DAT_IA_HANDLE ia;
static DAT_EVD_HANDLE async;
static DAT_PZ_HANDLE pz;
static char buf[1 << 16];

static void open_ia(void)
{
	cr_assert_eq(zd_test_open("zdapl-shm", &ia, &async), DAT_SUCCESS);
	cr_assert_eq(dat_pz_create(ia, &pz), DAT_SUCCESS);
}

static DAT_RETURN reg(void *addr, DAT_VLEN len, DAT_PZ_HANDLE in_pz, DAT_LMR_HANDLE *lmr,
		      DAT_LMR_CONTEXT *lctx, DAT_RMR_CONTEXT *rctx)
{
	DAT_REGION_DESCRIPTION region = { .for_va = addr };
	DAT_VLEN rlen;
	DAT_VADDR raddr;

	return dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, len, in_pz, DAT_MEM_PRIV_ALL_FLAG,
			      DAT_VA_TYPE_VA, lmr, lctx, rctx, &rlen, &raddr);
}

Test(mem_objs, lmr_create_query_free)
{
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;
	DAT_LMR_PARAM p;

	open_ia();
	cr_assert_eq(reg(buf, sizeof(buf), pz, &lmr, &lctx, &rctx), DAT_SUCCESS);
	cr_assert_eq(dat_lmr_query(lmr, DAT_LMR_FIELD_ALL, &p), DAT_SUCCESS);
	cr_assert_eq(p.ia_handle, ia);
	cr_assert_eq(p.pz_handle, pz);
	cr_assert_eq(p.length, sizeof(buf));
	cr_assert_eq(p.registered_address, (DAT_VADDR)(uintptr_t)buf);
	cr_assert_eq(p.lmr_context, lctx);
	cr_assert_eq(p.rmr_context, rctx);
	cr_assert_eq(p.mem_priv, DAT_MEM_PRIV_ALL_FLAG);
	/* PZ in use while the LMR lives. */
	cr_assert_eq(DAT_GET_TYPE(dat_pz_free(pz)), DAT_INVALID_STATE);
	cr_assert_eq(dat_lmr_free(lmr), DAT_SUCCESS);
	cr_assert_eq(DAT_GET_TYPE(dat_lmr_free(lmr)), DAT_INVALID_HANDLE);
	cr_assert_eq(dat_pz_free(pz), DAT_SUCCESS);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
}

Test(mem_objs, lmr_bad_input)
{
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_REGION_DESCRIPTION region = { .for_va = buf };

	open_ia();
	cr_assert_eq(DAT_GET_TYPE(reg(buf, 0, pz, &lmr, &lctx, NULL)), DAT_LENGTH_ERROR);
	cr_assert_eq(DAT_GET_TYPE(reg(NULL, 64, pz, &lmr, &lctx, NULL)), DAT_INVALID_PARAMETER);
	cr_assert_eq(DAT_GET_TYPE(reg(buf, 64, DAT_HANDLE_NULL, &lmr, &lctx, NULL)),
		     DAT_INVALID_HANDLE);
	cr_assert_eq(DAT_GET_TYPE(reg((void *)~(uintptr_t)0xfff, 1 << 20, pz, &lmr, &lctx, NULL)),
		     DAT_LENGTH_ERROR, "a range that wraps the address space");
	cr_assert_eq(DAT_GET_TYPE(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, 64, pz, 0x8000,
						 DAT_VA_TYPE_VA, &lmr, &lctx, NULL, NULL, NULL)),
		     DAT_INVALID_PARAMETER, "unknown privilege bits");
	cr_assert_eq(DAT_GET_TYPE(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, 64, pz,
						 DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, NULL, &lctx,
						 NULL, NULL, NULL)),
		     DAT_INVALID_PARAMETER);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

Test(mem_objs, lmr_over_lmr_shares_the_region)
{
	DAT_LMR_HANDLE base, shared;
	DAT_LMR_CONTEXT lctx, lctx2;
	DAT_REGION_DESCRIPTION region;
	DAT_LMR_PARAM p;

	open_ia();
	cr_assert_eq(reg(buf, 4096, pz, &base, &lctx, NULL), DAT_SUCCESS);
	region.for_lmr_handle = base;
	cr_assert_eq(dat_lmr_create(ia, DAT_MEM_TYPE_LMR, region, 0, pz, DAT_MEM_PRIV_LOCAL_READ_FLAG,
				    DAT_VA_TYPE_VA, &shared, &lctx2, NULL, NULL, NULL),
		     DAT_SUCCESS);
	cr_assert_neq(lctx, lctx2, "each LMR has its own context");
	cr_assert_eq(dat_lmr_query(shared, DAT_LMR_FIELD_ALL, &p), DAT_SUCCESS);
	cr_assert_eq(p.registered_address, (DAT_VADDR)(uintptr_t)buf);
	cr_assert_eq(p.registered_size, 4096);
	cr_assert_eq(p.mem_type, DAT_MEM_TYPE_LMR);
	/* The base is in use while another LMR shares it. */
	cr_assert_eq(DAT_GET_TYPE(dat_lmr_free(base)), DAT_INVALID_STATE);
	cr_assert_eq(dat_lmr_free(shared), DAT_SUCCESS);
	cr_assert_eq(dat_lmr_free(base), DAT_SUCCESS);
	region.for_lmr_handle = pz;
	cr_assert_eq(DAT_GET_TYPE(dat_lmr_create(ia, DAT_MEM_TYPE_LMR, region, 0, pz,
						 DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &shared,
						 &lctx2, NULL, NULL, NULL)),
		     DAT_INVALID_HANDLE);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

Test(mem_objs, lmr_sync_checks_bounds)
{
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_LMR_TRIPLET t;

	open_ia();
	cr_assert_eq(reg(buf, 4096, pz, &lmr, &lctx, NULL), DAT_SUCCESS);
	t.lmr_context = lctx;
	t.virtual_address = (DAT_VADDR)(uintptr_t)buf + 100;
	t.segment_length = 1000;
	cr_assert_eq(dat_lmr_sync_rdma_read(ia, &t, 1), DAT_SUCCESS);
	cr_assert_eq(dat_lmr_sync_rdma_write(ia, &t, 1), DAT_SUCCESS);
	t.segment_length = 4000;  /* runs past the end */
	cr_assert_eq(DAT_GET_TYPE(dat_lmr_sync_rdma_read(ia, &t, 1)), DAT_INVALID_PARAMETER);
	t.segment_length = 10;
	t.lmr_context = lctx + 1000;  /* no such region */
	cr_assert_eq(DAT_GET_TYPE(dat_lmr_sync_rdma_write(ia, &t, 1)), DAT_INVALID_PARAMETER);
	cr_assert_eq(DAT_GET_TYPE(dat_lmr_sync_rdma_write(ia, NULL, 1)), DAT_INVALID_PARAMETER);
	cr_assert_eq(dat_lmr_free(lmr), DAT_SUCCESS);
	t.lmr_context = lctx;  /* freed region */
	cr_assert_eq(DAT_GET_TYPE(dat_lmr_sync_rdma_read(ia, &t, 1)), DAT_INVALID_PARAMETER);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

Test(mem_objs, rmr_create_query_free)
{
	DAT_RMR_HANDLE rmr, rmr_ep;
	DAT_RMR_PARAM p;

	open_ia();
	cr_assert_eq(dat_rmr_create(pz, &rmr), DAT_SUCCESS);
	/* libdat2 exports no dat_rmr_create_for_ep: call through the table. */
	cr_assert_eq(DAT_HANDLE_TO_PROVIDER(pz)->rmr_create_for_ep_func(pz, &rmr_ep), DAT_SUCCESS);
	cr_assert_eq(dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, &p), DAT_SUCCESS);
	cr_assert_eq(p.pz_handle, pz);
	cr_assert_eq(p.ia_handle, ia);
	cr_assert_eq(DAT_GET_TYPE(dat_pz_free(pz)), DAT_INVALID_STATE);
	cr_assert_eq(DAT_GET_TYPE(dat_rmr_create(async, &rmr)), DAT_INVALID_HANDLE);
	cr_assert_eq(DAT_GET_TYPE(dat_rmr_query(rmr, DAT_RMR_FIELD_ALL, NULL)), DAT_INVALID_PARAMETER);
	cr_assert_eq(dat_rmr_free(rmr), DAT_SUCCESS);
	cr_assert_eq(dat_rmr_free(rmr_ep), DAT_SUCCESS);
	cr_assert_eq(dat_pz_free(pz), DAT_SUCCESS);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
}

static int agent_calls;
static DAT_EVD_HANDLE agent_evd;

static void agent(DAT_PVOID data, DAT_EVD_HANDLE evd)
{
	agent_calls += *(int *)data;
	agent_evd = evd;
}

Test(mem_objs, cno_wait_agent_and_lifetime, .timeout = 30)
{
	DAT_CNO_HANDLE cno;
	DAT_EVD_HANDLE evd, got = DAT_HANDLE_NULL;
	DAT_CNO_PARAM p;
	DAT_EVENT in = { .event_number = DAT_SOFTWARE_EVENT }, ev;
	static int one = 1;
	DAT_OS_WAIT_PROXY_AGENT a = { .instance_data = &one, .proxy_agent_func = agent };

	open_ia();
	cr_assert_eq(dat_cno_create(ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia, 8, cno, DAT_EVD_SOFTWARE_FLAG, &evd), DAT_SUCCESS);
	cr_assert_eq(DAT_GET_TYPE(dat_cno_wait(cno, 10000, &got)), DAT_TIMEOUT_EXPIRED);
	cr_assert_eq(DAT_GET_TYPE(dat_cno_free(cno)), DAT_INVALID_STATE, "an EVD uses it");

	cr_assert_eq(dat_cno_modify_agent(cno, a), DAT_SUCCESS);
	cr_assert_eq(dat_cno_query(cno, DAT_CNO_FIELD_ALL, &p), DAT_SUCCESS);
	cr_assert_eq(p.proxy.agent.proxy_agent_func, agent);
	cr_assert_eq(dat_evd_post_se(evd, &in), DAT_SUCCESS);
	cr_assert_eq(agent_calls, 1, "the proxy agent runs when the CNO triggers");
	cr_assert_eq(agent_evd, evd);
	cr_assert_eq(dat_cno_wait(cno, DAT_TIMEOUT_INFINITE, &got), DAT_SUCCESS);
	cr_assert_eq(got, evd);
	cr_assert_eq(dat_evd_dequeue(evd, &ev), DAT_SUCCESS);

	/* Detach: the CNO is free to go. */
	cr_assert_eq(dat_evd_modify_cno(evd, DAT_HANDLE_NULL), DAT_SUCCESS);
	cr_assert_eq(dat_cno_free(cno), DAT_SUCCESS);
	cr_assert_eq(DAT_GET_TYPE(dat_cno_wait(cno, 0, &got)), DAT_INVALID_HANDLE);
	cr_assert_eq(dat_evd_free(evd), DAT_SUCCESS);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}

static void *post_soon(void *evd)
{
	DAT_EVENT in = { .event_number = DAT_SOFTWARE_EVENT };

	usleep(20000);
	dat_evd_post_se(evd, &in);
	return NULL;
}

Test(mem_objs, cno_wait_woken_from_another_thread, .timeout = 30)
{
	DAT_CNO_HANDLE cno;
	DAT_EVD_HANDLE a, b, got = DAT_HANDLE_NULL;
	pthread_t t;

	open_ia();
	cr_assert_eq(dat_cno_create(ia, DAT_OS_WAIT_PROXY_AGENT_NULL, &cno), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia, 8, cno, DAT_EVD_SOFTWARE_FLAG, &a), DAT_SUCCESS);
	cr_assert_eq(dat_evd_create(ia, 8, DAT_HANDLE_NULL, DAT_EVD_SOFTWARE_FLAG, &b), DAT_SUCCESS);
	cr_assert_eq(dat_evd_modify_cno(b, cno), DAT_SUCCESS);
	pthread_create(&t, NULL, post_soon, b);
	cr_assert_eq(dat_cno_wait(cno, 5000000, &got), DAT_SUCCESS);
	pthread_join(t, NULL);
	cr_assert_eq(got, b);
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG), DAT_SUCCESS);
}
