/* libzdapl loaded the way dtest loads it (libdat2 dlopens it from dat.conf)
 * still allocates from its private jemalloc, and that memory registers. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <string.h>

#include "zd_test_dat.h"

TestSuite(pool_via_dat, .init = zd_test_use_conf);

Test(pool_via_dat, dlopened_provider_allocates_registered_memory)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async;
	DAT_PZ_HANDLE pz;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	void *(*mem_alloc)(size_t);
	void (*mem_free)(void *);

	cr_assert_null(dlsym(RTLD_DEFAULT, "zdapl_mem_alloc"), "not loaded before dat_ia_open");
	cr_assert_eq(zd_test_open("zdapl-shm", &ia, &async), DAT_SUCCESS);
	*(void **)&mem_alloc = dlsym(RTLD_DEFAULT, "zdapl_mem_alloc");
	*(void **)&mem_free = dlsym(RTLD_DEFAULT, "zdapl_mem_free");
	cr_assert_not_null(mem_alloc, "libdat2 loads providers RTLD_GLOBAL");
	cr_assert_not_null(mem_free);

	for (size_t size = 8; size <= (8u << 20); size *= 8) {
		char *p = mem_alloc(size);
		DAT_REGION_DESCRIPTION region = { .for_va = p };

		cr_assert_not_null(p, "size %zu", size);
		cr_assert_eq((uintptr_t)p % 64, 0);
		memset(p, 0xa5, size);
		cr_assert_eq(dat_pz_create(ia, &pz), DAT_SUCCESS);
		cr_assert_eq(dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, size, pz,
					    DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lctx, NULL,
					    NULL, NULL),
			     DAT_SUCCESS);
		cr_assert_eq(dat_lmr_free(lmr), DAT_SUCCESS);
		cr_assert_eq(dat_pz_free(pz), DAT_SUCCESS);
		mem_free(p);
	}
	cr_assert_eq(dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG), DAT_SUCCESS);
}
