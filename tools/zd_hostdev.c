/* SPDX-License-Identifier: BSD-3-Clause */
/* This host's zdapl devices (see zd_hostdev.h). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zd_hostdev.h"

/* The interface of the IPv4 default route (/proc/net/route: destination
 * and mask 0), else "lo": where zdapl-tcp listens by default. */
static void default_route_ifname(char *out, size_t size)
{
	FILE *f = fopen("/proc/net/route", "re");
	char line[256], ifname[64];
	unsigned long dest, gw, mask;
	unsigned flags;
	int refcnt, use, metric;

	snprintf(out, size, "lo");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%63s %lx %lx %x %d %d %d %lx", ifname, &dest, &gw,
			   &flags, &refcnt, &use, &metric, &mask) == 8 &&
		    dest == 0 && mask == 0 && (flags & 1 /* RTF_UP */)) {
			snprintf(out, size, "%s", ifname);
			break;
		}
	}
	fclose(f);
}

static int by_name(const void *a, const void *b)
{
	return strverscmp(*(const char *const *)a, *(const char *const *)b);
}

/* The names under dir matching prefix, sorted as versions (mlx5_2 before
 * mlx5_10); returns the count, *names malloc'd. */
static size_t list_dir(const char *dir, const char *prefix, char ***names)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t n = 0, cap = 0;

	*names = NULL;
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char **nn;

		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || e->d_name[0] == '.')
			continue;
		if (n == cap) {
			nn = realloc(*names, (cap = cap ? 2 * cap : 8) * sizeof(*nn));
			if (!nn)
				break;
			*names = nn;
		}
		if (!((*names)[n] = strdup(e->d_name)))
			break;
		n++;
	}
	closedir(d);
	if (n)
		qsort(*names, n, sizeof(**names), by_name);
	return n;
}

static void free_list(char **names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

static size_t add(struct zd_hostdev *out, size_t n, const char *ia_name, const char *params)
{
	if (n < ZD_HOSTDEV_MAX) {
		snprintf(out[n].ia_name, sizeof(out[n].ia_name), "%s", ia_name);
		snprintf(out[n].ia_params, sizeof(out[n].ia_params), "%s", params);
		n++;
	}
	return n;
}

size_t zd_hostdev_list(struct zd_hostdev *out)
{
	const char *ib = getenv("ZDAPL_SYSFS_IB");   /* tests: a fake sysfs tree */
	char ifname[64], params[96], name[64], dir[512];
	char **devs, **ports;
	size_t n = 0, ndevs;

	if (!ib || !*ib)
		ib = "/sys/class/infiniband";
	default_route_ifname(ifname, sizeof(ifname));
	n = add(out, n, "zdapl-shm", "shm");
	snprintf(params, sizeof(params), "tcp %s", ifname);
	n = add(out, n, "zdapl-tcp", params);
	n = add(out, n, "zdapl-mlx5sim", "mlx5sim");
	ndevs = list_dir(ib, "mlx5_", &devs);
	for (size_t d = 0; d < ndevs; d++) {
		size_t nports;

		snprintf(dir, sizeof(dir), "%s/%s/ports", ib, devs[d]);
		nports = list_dir(dir, "", &ports);
		for (size_t p = 0; p < nports; p++) {
			snprintf(name, sizeof(name), "zdapl-%s-%s", devs[d], ports[p]);
			snprintf(params, sizeof(params), "%s %s", devs[d], ports[p]);
			n = add(out, n, name, params);
		}
		free_list(ports, nports);
	}
	free_list(devs, ndevs);
	return n;
}

const struct zd_hostdev *zd_hostdev_find(const struct zd_hostdev *dev, size_t n,
					 const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(dev[i].ia_name, name) == 0 ||
		    (strncmp(dev[i].ia_name, "zdapl-", 6) == 0 &&
		     strcmp(dev[i].ia_name + 6, name) == 0))
			return &dev[i];
	return NULL;
}

bool zd_hostdev_named(const struct zd_hostdev *d, char *const *names, int n)
{
	for (int k = 0; k < n; k++)
		if (zd_hostdev_find(d, 1, names[k]))
			return true;
	return n == 0;
}

const char *zd_hostdev_unknown(const struct zd_hostdev *dev, size_t ndev,
			       char *const *names, int n)
{
	for (int k = 0; k < n; k++)
		if (!zd_hostdev_find(dev, ndev, names[k]))
			return names[k];
	return NULL;
}
