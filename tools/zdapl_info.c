/*
 * zdapl_info: opens every DAT provider the registry knows (or those named on
 * the command line) through libdat2 and prints what dat_ia_query reports.
 *   DAT_OVERRIDE=build/dat.conf build/tools/zdapl_info [ia_name...]
 */
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <dat2/udat.h>

#define MAX_PROVIDERS 64

static int show(const char *name)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_IA_ATTR a;
	DAT_PROVIDER_ATTR p;
	DAT_RETURN r;
	char addr[INET_ADDRSTRLEN] = "?";
	const char *maj, *min;

	r = dat_ia_open((DAT_NAME_PTR)name, 8, &async, &ia);
	if (r != DAT_SUCCESS) {
		dat_strerror(r, &maj, &min);
		printf("%-20s cannot open: %s %s\n", name, maj, min);
		return 1;
	}
	r = dat_ia_query(ia, NULL, DAT_IA_ALL, &a, DAT_PROVIDER_FIELD_ALL, &p);
	if (r == DAT_SUCCESS) {
		if (a.ia_address_ptr && a.ia_address_ptr->sa_family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)a.ia_address_ptr)->sin_addr,
				  addr, sizeof(addr));
		printf("%s\n", name);
		printf("  provider          %s %u.%u (DAT %u.%u, %sthread-safe registration)\n",
		       p.provider_name, p.provider_version_major, p.provider_version_minor,
		       p.dapl_version_major, p.dapl_version_minor, p.is_thread_safe ? "" : "non-");
		printf("  adapter           %s\n", a.adapter_name);
		printf("  ia address        %s\n", addr);
		printf("  max eps           %d\n", a.max_eps);
		printf("  max dto per ep    %d\n", a.max_dto_per_ep);
		printf("  max evd qlen      %d\n", a.max_evd_qlen);
		printf("  max iov segments  %d\n", a.max_iov_segments_per_dto);
		printf("  max message size  %u\n", a.max_message_size);
		printf("  max rdma size     %u\n", a.max_rdma_size);
		printf("  max private data  %d\n", p.max_private_data_size);
		printf("  srq supported     %s\n", p.srq_supported ? "yes" : "no");
	}
	dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
	return r != DAT_SUCCESS;
}

int main(int argc, char **argv)
{
	DAT_PROVIDER_INFO info[MAX_PROVIDERS];
	DAT_PROVIDER_INFO *ptrs[MAX_PROVIDERS];
	DAT_COUNT n = 0;
	int bad = 0;

	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			bad |= show(argv[i]);
		return bad;
	}
	for (int i = 0; i < MAX_PROVIDERS; i++)
		ptrs[i] = &info[i];
	if (dat_registry_list_providers(MAX_PROVIDERS, &n, ptrs) != DAT_SUCCESS) {
		fprintf(stderr, "zdapl_info: the DAT registry lists no providers\n");
		return 1;
	}
	for (DAT_COUNT i = 0; i < n; i++)
		bad |= show(info[i].ia_name);
	return bad;
}
