/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * zdapl_info: what zdapl offers on this host, in the manner of ucx_info and
 * fi_info, and the registration of its lines in dat.conf.
 *
 *   zdapl_info [-v] [ia_name...]      the zdapl lines of the dat.conf in force
 *   zdapl_info --datconf [device...]  dat.conf lines for this host's devices
 *   zdapl_info register|unregister|list ...   (zdapl_info_reg.c)
 *
 * The first opens each line's IA through libdat2 and prints what
 * dat_ia_query reports: device, IA address, limits, the DAT calls and
 * extensions it answers, and where its memory comes from.
 */
#include <dlfcn.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <dat2/udat.h>

#include "zd_datconf.h"
#include "zd_hostdev.h"
#include "zdapl_info.h"

#define DAT_CONF_DEFAULT "/etc/dat.conf"   /* libdat2's, without DAT_OVERRIDE */

void zd_info_err(const char *fmt, ...)
{
	va_list ap;

	fputs("zdapl_info: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* --- --datconf ----------------------------------------------------------- */

int zd_info_datconf(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "lib", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct zd_hostdev dev[ZD_HOSTDEV_MAX];
	size_t ndev = zd_hostdev_list(dev);
	const char *lib = ZDAPL_LIBPATH, *unknown;
	char line[1024];
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "l:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'l': lib = optarg; break;
		case 'h':
			printf("usage: zdapl_info --datconf [-l LIB] [device...]\n");
			return ZD_EXIT_OK;
		default: return ZD_EXIT_USAGE;
		}
	}
	unknown = zd_hostdev_unknown(dev, ndev, argv + optind, argc - optind);
	if (unknown) {
		zd_info_err("no device %s on this host", unknown);
		return ZD_EXIT_FAIL;
	}
	for (size_t d = 0; d < ndev; d++) {
		if (!zd_hostdev_named(&dev[d], argv + optind, argc - optind))
			continue;
		zd_dc_format_entry(line, sizeof(line), dev[d].ia_name, lib, dev[d].ia_params);
		fputs(line, stdout);
	}
	return fflush(stdout) == 0 ? ZD_EXIT_OK : ZD_EXIT_FAIL;
}

/* --- the lines in force -------------------------------------------------- */

/* What each device is, how its data moves and where its memory lives, by
 * the first word of ia_params (the same table README's devices section
 * gives; the library does not report it). */
struct device_kind {
	const char *word;       /* ia_params' first word; "mlx5_" a prefix */
	const char *what;
	const char *consumer_memory;
};

static const struct device_kind kinds[] = {
	{ "shm", "shared memory between processes of this host; RDMA one-sided",
	  "whole pages shared in place at dat_lmr_create (edge pages and "
	  "ZDAPL_MEM_ADOPT=0: cross-memory attach)" },
	{ "tcp", "TCP between hosts; an RDMA target progresses in its own "
	  "process (progress=thread, the default, or manual)",
	  "stays private; the target's zdapl reads and writes it" },
	{ "mlx5sim", "the mlx5 data path driving a software mlx5 NIC, processes of this host",
	  "whole pages shared in place at dat_lmr_create (as shm)" },
	{ "mlx5_", "a ConnectX port through mlx5dv (WQEs, doorbell and BlueFlame, CQEs by owner bit)",
	  "registered with the NIC (verbs MR; an identical range reuses the live MR)" },
};

static const struct device_kind *kind_of(const char *ia_params)
{
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		size_t n = strlen(kinds[i].word);

		if (strncmp(ia_params, kinds[i].word, n) == 0 &&
		    (kinds[i].word[n - 1] == '_' || ia_params[n] == '\0' || ia_params[n] == ' '))
			return &kinds[i];
	}
	return NULL;
}

/* "  label   text", text wrapped at 78 columns under its first column. */
static void print_wrapped(const char *label, const char *text)
{
	const int indent = 20, width = 78;
	int col = printf("  %-*s", indent - 2, label);

	while (*text) {
		size_t word = strcspn(text, " ");

		if (col > indent && col + 1 + (int)word > width) {
			col = printf("\n%*s", indent, "") - 1;
		} else if (col > indent) {
			putchar(' ');
			col++;
		}
		col += printf("%.*s", (int)word, text);
		text += word;
		text += strspn(text, " ");
	}
	putchar('\n');
}

static bool named_true(const DAT_PROVIDER_ATTR *p, const char *name)
{
	for (DAT_COUNT i = 0; i < p->num_provider_specific_attr; i++)
		if (strcmp(p->provider_specific_attr[i].name, name) == 0)
			return strcmp(p->provider_specific_attr[i].value, "TRUE") == 0;
	return false;
}

/* The DAT calls this IA answers: all of DAT 2.0 but the ones README's
 * support matrix lists as not implemented, and what the device lacks. */
static void print_calls(const DAT_IA_ATTR *a, const DAT_PROVIDER_ATTR *p)
{
	printf("  DAT calls         every DAT 2.0 call but dat_cno_fd_create, dat_cno_trigger,\n"
	       "                    dat_ep_common_connect, dat_ep_post_send_with_invalidate,\n"
	       "                    dat_ep_post_rdma_read_to_rmr, dat_cr_handoff, dat_csp_*\n"
	       "                    (DAT_NOT_IMPLEMENTED) and dat_ia_ha_related (no HA)\n");
	if (a->max_rmrs == 0)
		printf("                    dat_rmr_bind: DAT_NOT_IMPLEMENTED on this device\n");
	if (!p->ep_recv_info_supported)
		printf("                    dat_ep_recv_query, dat_srq_query counts: DAT_VALUE_UNKNOWN\n");
	printf("  extensions        IB %u:", (unsigned)a->extension_version);
	for (DAT_COUNT i = 0; i < p->num_provider_specific_attr; i++) {
		const DAT_NAMED_ATTR *n = &p->provider_specific_attr[i];

		if (strncmp(n->name, "DAT_IB_", 7) == 0 || strcmp(n->name, "DAT_COUNTERS") == 0)
			printf(" %s%s", n->name + (n->name[4] == 'I' ? 7 : 4),
			       strcmp(n->value, "TRUE") == 0 ? "" : "(no)");
	}
	printf("%s\n", named_true(p, "DAT_EXTENSION_INTERFACE") ? "" : " (no extension interface)");
}

/* The mapping that holds addr, from /proc/self/maps ("" if none found). */
static void mapping_of(const void *addr, char *out, size_t size)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];

	*out = '\0';
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		uintptr_t lo, hi;
		int off = 0;

		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &off) >= 2 &&
		    (uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(out, size, "%s", off ? line + off : "");
			break;
		}
	}
	fclose(f);
}

static void print_memory(const struct device_kind *k)
{
	void *(*alloc)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "zdapl_mem_alloc");
	void (*release)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "zdapl_mem_free");
	const char *chunk = getenv("ZDAPL_MEM_CHUNK_SIZE");
	char map[256] = "";
	void *p;

	printf("  memory            zdapl_mem_alloc: a private jemalloc arena over sealed memfd\n"
	       "                    chunks of %s (ZDAPL_MEM_CHUNK_SIZE), registered with every\n"
	       "                    open device; queues and EVD rings come from the same pool\n",
	       chunk && *chunk ? chunk : "64m");
	if (alloc && release && (p = alloc(64))) {
		mapping_of(p, map, sizeof(map));
		printf("                    (64 bytes just taken from %s)\n", *map ? map : "an anonymous mapping");
		release(p);
	}
	if (k) {
		char line[512];

		snprintf(line, sizeof(line), "the application's memory: %s", k->consumer_memory);
		print_wrapped("", line);
	}
}

static const char *yes(DAT_BOOLEAN b) { return b ? "yes" : "no"; }

/* -v: every attribute dat_ia_query reports. */
static void print_attrs(const DAT_IA_ATTR *a, const DAT_PROVIDER_ATTR *p)
{
	printf("  IA attributes\n"
	       "    vendor %s, hardware %u.%u, firmware %u.%u\n"
	       "    max_eps %d, max_dto_per_ep %d, max_rdma_read_per_ep_in/out %d/%d\n"
	       "    max_evds %d, max_evd_qlen %d, max_iov_segments_per_dto %d\n"
	       "    max_lmrs %d, max_lmr_block_size %llu, max_lmr_virtual_address 0x%llx\n"
	       "    max_pzs %d, max_message_size %llu, max_rdma_size %llu\n"
	       "    max_rmrs %d, max_rmr_target_address 0x%llx\n"
	       "    max_srqs %d, max_ep_per_srq %d, max_recv_per_srq %d\n"
	       "    max_iov_segments_per_rdma_read/write %d/%d, max_rdma_read_in/out %d/%d\n"
	       "    zb_supported %s, extension_supported %d, extension_version %d\n",
	       a->vendor_name, a->hardware_version_major, a->hardware_version_minor,
	       a->firmware_version_major, a->firmware_version_minor,
	       a->max_eps, a->max_dto_per_ep, a->max_rdma_read_per_ep_in, a->max_rdma_read_per_ep_out,
	       a->max_evds, a->max_evd_qlen, a->max_iov_segments_per_dto,
	       a->max_lmrs, (unsigned long long)a->max_lmr_block_size,
	       (unsigned long long)a->max_lmr_virtual_address,
	       a->max_pzs, (unsigned long long)a->max_message_size,
	       (unsigned long long)a->max_rdma_size,
	       a->max_rmrs, (unsigned long long)a->max_rmr_target_address,
	       a->max_srqs, a->max_ep_per_srq, a->max_recv_per_srq,
	       a->max_iov_segments_per_rdma_read, a->max_iov_segments_per_rdma_write,
	       a->max_rdma_read_in, a->max_rdma_read_out,
	       yes(a->zb_supported), (int)a->extension_supported, (int)a->extension_version);
	printf("  provider attributes\n"
	       "    %s %u.%u, DAT %u.%u, %sthread-safe\n"
	       "    lmr_mem_types_supported 0x%x, iov_ownership_on_return %d, dat_qos_supported 0x%x\n"
	       "    completion_flags_supported 0x%x, max_private_data_size %d\n"
	       "    supports_multipath %s, ep_creator %d, pz_support %d, optimal_buffer_alignment %d\n"
	       "    srq_supported %s, srq_watermarks_supported %s, srq_ep_pz_difference_supported %s\n"
	       "    srq_info_supported %s, ep_recv_info_supported %s, lmr_sync_req %s\n"
	       "    dto_async_return_guaranteed %s, rdma_write_for_rdma_read_req %s\n"
	       "    rdma_read_lmr_rmr_context_exposure %s, rmr_scope_supported %d\n"
	       "    is_signal_safe %s, ha_supported %s, ha_loadbalancing %d\n",
	       p->provider_name, p->provider_version_major, p->provider_version_minor,
	       p->dapl_version_major, p->dapl_version_minor, p->is_thread_safe ? "" : "non-",
	       (unsigned)p->lmr_mem_types_supported, (int)p->iov_ownership_on_return,
	       (unsigned)p->dat_qos_supported, (unsigned)p->completion_flags_supported,
	       p->max_private_data_size, yes(p->supports_multipath), (int)p->ep_creator,
	       (int)p->pz_support, p->optimal_buffer_alignment, yes(p->srq_supported),
	       yes(p->srq_watermarks_supported), yes(p->srq_ep_pz_difference_supported),
	       yes(p->srq_info_supported), yes(p->ep_recv_info_supported), yes(p->lmr_sync_req),
	       yes(p->dto_async_return_guaranteed), yes(p->rdma_write_for_rdma_read_req),
	       yes(p->rdma_read_lmr_rmr_context_exposure), (int)p->rmr_scope_supported,
	       yes(p->is_signal_safe), yes(p->ha_supported), (int)p->ha_loadbalancing);
	printf("  provider-specific attributes\n");
	for (DAT_COUNT i = 0; i < p->num_provider_specific_attr; i++)
		printf("    %s = %s\n", p->provider_specific_attr[i].name,
		       p->provider_specific_attr[i].value);
}

/* Opens line l's IA and prints it; 0, or 1 after a message on stderr. */
static int show_line(const struct zd_datconf *dc, size_t i, const char *file, bool verbose)
{
	const struct zd_dc_line *l = &dc->line[i];
	const char *name = l->field[ZD_DC_IA_NAME];
	const struct device_kind *k = kind_of(l->field[ZD_DC_IA_PARAMS]);
	const char *pollers = getenv("ZDAPL_POLLERS");
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_IA_ATTR a;
	DAT_PROVIDER_ATTR p;
	DAT_RETURN r;
	char addr[INET6_ADDRSTRLEN] = "?";
	const char *maj, *min;

	/* libdat2 keeps a name's first line only. */
	for (size_t j = 0; j < i; j++)
		if (dc->line[j].kind == ZD_DC_ENTRY &&
		    strcmp(dc->line[j].field[ZD_DC_IA_NAME], name) == 0) {
			zd_info_err("%s (%s:%zu): shadowed by line %zu of the same name", name,
				    file, zd_dc_lineno(i), zd_dc_lineno(j));
			return 1;
		}
	printf("%s\n", name);
	printf("  dat.conf          %s:%zu (%s, %s)\n", file, zd_dc_lineno(i),
	       l->field[ZD_DC_THREADSAFE], zd_dc_in_block(dc, i) ? "registered by zdapl_info" : "added by hand");
	printf("  library           %s\n", l->field[ZD_DC_LIB]);
	printf("  ia_params         \"%s\"\n", l->field[ZD_DC_IA_PARAMS]);
	print_wrapped("device", k ? k->what : "unknown to this zdapl_info");
	fflush(stdout);
	r = dat_ia_open((DAT_NAME_PTR)name, 8, &async, &ia);
	if (r != DAT_SUCCESS) {
		dat_strerror(r, &maj, &min);
		zd_info_err("%s: dat_ia_open: %s %s", name, maj, min);
		return 1;
	}
	r = dat_ia_query(ia, NULL, DAT_IA_ALL, &a, DAT_PROVIDER_FIELD_ALL, &p);
	if (r != DAT_SUCCESS) {
		dat_strerror(r, &maj, &min);
		zd_info_err("%s: dat_ia_query: %s %s", name, maj, min);
		dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
		return 1;
	}
	if (a.ia_address_ptr && a.ia_address_ptr->sa_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)a.ia_address_ptr)->sin_addr,
			  addr, sizeof(addr));
	else if (a.ia_address_ptr && a.ia_address_ptr->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)a.ia_address_ptr)->sin6_addr,
			  addr, sizeof(addr));
	printf("  adapter           %s (%s %u.%u)\n", a.adapter_name, p.provider_name,
	       p.provider_version_major, p.provider_version_minor);
	printf("  ia address        %s\n", addr);
	printf("  limits            %d EPs, %d DTOs per EP, EVDs of %d, %d segments,\n"
	       "                    messages %llu B, RDMA %llu B, private data %d B,\n"
	       "                    %d LMRs, %d RMRs, %d SRQs of %d\n",
	       a.max_eps, a.max_dto_per_ep, a.max_evd_qlen, a.max_iov_segments_per_dto,
	       (unsigned long long)a.max_message_size, (unsigned long long)a.max_rdma_size,
	       p.max_private_data_size, a.max_lmrs, a.max_rmrs, a.max_srqs, a.max_recv_per_srq);
	printf("  progress          %s\n", pollers && *pollers ?
	       "poller threads (ZDAPL_POLLERS) poll every EVD's device CQ" :
	       "manual: the thread that dequeues or waits polls (ZDAPL_POLLERS unset)");
	print_calls(&a, &p);
	print_memory(k);
	if (verbose)
		print_attrs(&a, &p);
	dat_ia_close(ia, DAT_CLOSE_ABRUPT_FLAG);
	return 0;
}

int zd_info_show(int argc, char **argv)
{
	const char *file = getenv("DAT_OVERRIDE");
	bool verbose = false;
	struct zd_datconf dc;
	char err[512];
	int c, bad = 0, shown = 0;

	optind = 1;
	while ((c = getopt(argc, argv, "v")) != -1) {
		if (c != 'v')
			return ZD_EXIT_USAGE;
		verbose = true;
	}
	if (!file || !*file)
		file = DAT_CONF_DEFAULT;
	/* Read as libdat2 reads it: a line it would skip is no reason not to
	 * report the others. */
	if (zd_datconf_load(&dc, file, true, err, sizeof(err)) < 0) {
		zd_info_err("%s", err);
		return ZD_EXIT_FAIL;
	}
	for (int k = optind; k < argc; k++) {
		bool found = false;

		for (size_t i = 0; i < dc.nlines && !found; i++)
			if (dc.line[i].kind == ZD_DC_ENTRY &&
			    strcmp(dc.line[i].field[ZD_DC_IA_NAME], argv[k]) == 0) {
				found = true;
				bad |= show_line(&dc, i, file, verbose);
				shown++;
			}
		if (!found) {
			zd_info_err("%s: no line named %s", file, argv[k]);
			bad = 1;
		}
	}
	for (size_t i = 0; optind == argc && i < dc.nlines; i++)
		if (zd_dc_is_zdapl(&dc.line[i])) {
			if (shown++)
				printf("\n");
			bad |= show_line(&dc, i, file, verbose);
		}
	if (shown == 0 && optind == argc) {
		zd_info_err("%s: no zdapl line (zdapl_info register adds them)", file);
		bad = 1;
	}
	zd_datconf_free(&dc);
	return bad ? ZD_EXIT_FAIL : ZD_EXIT_OK;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: zdapl_info [-v] [ia_name...]\n"
		"       zdapl_info --datconf [-l LIB] [device...]\n"
		"       zdapl_info register|unregister|list [options] [device...]\n"
		"       zdapl_info --version | --help\n"
		"Without arguments: every zdapl line of the dat.conf in force ($DAT_OVERRIDE,\n"
		"else " DAT_CONF_DEFAULT "), each IA opened through libdat2: its device, address,\n"
		"limits, DAT calls and extensions, and where its memory comes from.\n"
		"  -v          every attribute dat_ia_query reports as well\n"
		"  --datconf   print dat.conf lines for this host's devices (or those named)\n"
		"  register    add them to zdapl's block of /etc/dat.conf (zdapl_info register -h)\n"
		"  unregister  remove them; list: print the zdapl lines of /etc/dat.conf\n"
		"See zdapl_info(1) and zdapl(7).\n");
}

int main(int argc, char **argv)
{
	if (argc > 1) {
		const char *cmd = argv[1];

		if (!strcmp(cmd, "register") || !strcmp(cmd, "unregister") || !strcmp(cmd, "list"))
			return zd_info_registration(argc - 1, argv + 1);
		if (!strcmp(cmd, "--datconf"))
			return zd_info_datconf(argc - 1, argv + 1);
		if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
			usage(stdout);
			return ZD_EXIT_OK;
		}
		if (!strcmp(cmd, "--version")) {
			printf("zdapl_info %s\n", ZDAPL_VERSION);
			return ZD_EXIT_OK;
		}
		if (cmd[0] == '-' && strcmp(cmd, "-v") != 0) {
			zd_info_err("unknown option '%s'", cmd);
			usage(stderr);
			return ZD_EXIT_USAGE;
		}
	}
	return zd_info_show(argc, argv);
}
