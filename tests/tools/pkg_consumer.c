/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A DAT consumer as an installation's user writes it, built with nothing
 * but `pkg-config --cflags --libs zdapl`: it opens an IA through libdat2
 * (whichever dat.conf is in force), takes a buffer from zdapl_mem_alloc,
 * registers it with dat_lmr_create and releases everything.
 *   pkg_consumer [ia_name]     (default zdapl-shm); prints "ok" on success
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <dat2/udat.h>
#include <zdapl/zdapl.h>

static int failed(const char *what, DAT_RETURN r)
{
	const char *maj = "", *min = "";

	dat_strerror(r, &maj, &min);
	fprintf(stderr, "pkg_consumer: %s: %s %s\n", what, maj, min);
	return 1;
}

int main(int argc, char **argv)
{
	const char *ia_name = argc > 1 ? argv[1] : "zdapl-shm";
	DAT_IA_HANDLE ia;
	DAT_PZ_HANDLE pz;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_LMR_HANDLE lmr;
	DAT_LMR_CONTEXT lctx;
	DAT_RMR_CONTEXT rctx;
	DAT_REGION_DESCRIPTION region;
	DAT_VLEN reg_size;
	DAT_VADDR reg_addr;
	DAT_RETURN r;
	const size_t size = 1 << 16;
	char *buf;

	r = dat_ia_open(ia_name, 8, &async, &ia);
	if (r != DAT_SUCCESS)
		return failed("dat_ia_open", r);
	/* The library libdat2 loaded is the one this program linked. */
	if (dlsym(RTLD_DEFAULT, "zdapl_mem_alloc") != (void *)zdapl_mem_alloc) {
		fprintf(stderr, "pkg_consumer: two copies of libzdapl are loaded\n");
		return 1;
	}
	buf = zdapl_mem_alloc(size);
	if (!buf) {
		perror("pkg_consumer: zdapl_mem_alloc");
		return 1;
	}
	memset(buf, 0x5a, size);
	r = dat_pz_create(ia, &pz);
	if (r != DAT_SUCCESS)
		return failed("dat_pz_create", r);
	region.for_va = buf;
	r = dat_lmr_create(ia, DAT_MEM_TYPE_VIRTUAL, region, size, pz,
			   DAT_MEM_PRIV_ALL_FLAG, DAT_VA_TYPE_VA, &lmr, &lctx, &rctx,
			   &reg_size, &reg_addr);
	if (r != DAT_SUCCESS)
		return failed("dat_lmr_create over zdapl_mem_alloc memory", r);
	if ((r = dat_lmr_free(lmr)) != DAT_SUCCESS)
		return failed("dat_lmr_free", r);
	zdapl_mem_free(buf);
	if ((r = dat_pz_free(pz)) != DAT_SUCCESS)
		return failed("dat_pz_free", r);
	if ((r = dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG)) != DAT_SUCCESS)
		return failed("dat_ia_close", r);
	printf("ok\n");
	return 0;
}
