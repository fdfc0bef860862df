/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The zdapl devices this host has, as dat.conf lines name them: the
 * software devices everywhere (zdapl-shm, zdapl-tcp on the interface of the
 * default route, zdapl-mlx5sim) and one zdapl-mlx5_<n>-<port> per port of
 * each mlx5 device in /sys/class/infiniband.
 */
#ifndef ZD_HOSTDEV_H
#define ZD_HOSTDEV_H

#include <stdbool.h>
#include <stddef.h>

#define ZD_HOSTDEV_MAX 64

struct zd_hostdev {
	char ia_name[64];       /* "zdapl-shm", "zdapl-mlx5_0-1" */
	char ia_params[96];     /* "shm", "tcp eth0", "mlx5_0 1" */
};

/* Fills out[] (ZD_HOSTDEV_MAX entries) in dat.conf order; returns the count. */
size_t zd_hostdev_list(struct zd_hostdev *out);

/* The device called name ("zdapl-shm" or just "shm"), or NULL. */
const struct zd_hostdev *zd_hostdev_find(const struct zd_hostdev *dev, size_t n,
					 const char *name);

/* Whether d is one of names[0..n) (any device when n is 0). */
bool zd_hostdev_named(const struct zd_hostdev *d, char *const *names, int n);

/* The first of names[0..n) that is none of dev[0..ndev), or NULL. */
const char *zd_hostdev_unknown(const struct zd_hostdev *dev, size_t ndev,
			       char *const *names, int n);

#endif /* ZD_HOSTDEV_H */
