/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * dlopen libzdapl.so (argv[1]) as libdat2 does, in a process that links
 * neither zdapl nor any jemalloc, and allocate from the registered pool.
 *
 * Debian's libjemalloc.so.2 uses initial-exec TLS (DF_STATIC_TLS): a library
 * linking it fails to dlopen with "cannot allocate memory in static TLS
 * block".  libzdapl carries a private jemalloc that must need no static TLS
 * and export nothing.  Plain exit code: 0 pass, 1 fail.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef void *(*alloc_fn)(size_t);
typedef void (*free_fn)(void *);

static alloc_fn zalloc;
static free_fn zfree;
static int failures;

#define CHECK(cond, ...)                                              \
	do {                                                          \
		if (!(cond)) {                                        \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                 \
			fputc('\n', stderr);                          \
			failures++;                                   \
		}                                                     \
	} while (0)

static void *use_pool(void *arg)
{
	size_t sizes[] = { 1, 100, 4096, 100000, 3 << 20 };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		unsigned char *p = zalloc(sizes[i]);

		CHECK(p != NULL, "zdapl_mem_alloc(%zu) failed", sizes[i]);
		if (!p)
			continue;
		CHECK((uintptr_t)p % 64 == 0, "%p not 64-byte aligned", (void *)p);
		memset(p, 0x5a, sizes[i]);
		CHECK(p[sizes[i] - 1] == 0x5a, "memory not writable");
		zfree(p);
	}
	return arg;
}

int main(int argc, char **argv)
{
	struct link_map *lm = NULL;
	const char *syms[] = { "zd_je_mallocx", "mallocx", "je_mallocx",
			       "zd_je_mallctl", "zd_pool_alloc", "zd_chunk_lookup" };
	pthread_t th;
	void *h;

	if (argc < 2) {
		fprintf(stderr, "usage: %s /path/to/libzdapl.so\n", argv[0]);
		return 2;
	}
	h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "FAIL: dlopen: %s\n", dlerror());
		return 1;
	}

	/* No static TLS: the property that makes dlopen safe in any process. */
	CHECK(dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm, "dlinfo: %s", dlerror());
	for (const ElfW(Dyn) *d = lm ? lm->l_ld : NULL; d && d->d_tag != DT_NULL; d++)
		if (d->d_tag == DT_FLAGS)
			CHECK(!(d->d_un.d_val & DF_STATIC_TLS),
			      "libzdapl.so needs static TLS (DF_STATIC_TLS)");

	zalloc = (alloc_fn)dlsym(h, "zdapl_mem_alloc");
	zfree = (free_fn)dlsym(h, "zdapl_mem_free");
	CHECK(zalloc && zfree, "zdapl_mem_alloc/free not exported");
	CHECK(dlsym(h, "zdapl_mem_alloc_aligned"), "zdapl_mem_alloc_aligned not exported");
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
		CHECK(!dlsym(h, syms[i]), "internal symbol %s is exported", syms[i]);
	if (!zalloc || !zfree)
		return 1;

	use_pool(NULL);
	/* A thread born after the dlopen: its TLS is set up on demand. */
	CHECK(pthread_create(&th, NULL, use_pool, NULL) == 0, "pthread_create");
	pthread_join(th, NULL);

	if (failures)
		return 1;
	printf("ok: dlopen %s, allocated and freed from the pool\n", argv[1]);
	return 0;
}
