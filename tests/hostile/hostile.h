/*
 * What the hostile-peer suites share: the devices they run on (through
 * the cm suite's dat.conf) and a look at this process's own resources.
 */
#ifndef HOSTILE_H
#define HOSTILE_H

#include <stdio.h>
#include <string.h>

#include "dat_peer.h"
#include "proc_status.h"

static const struct peer_dev shm = { .ia = "zdapl-shm" };
static const struct peer_dev tcp = { .ia = "zdapl-tcp-lo" };
static const struct peer_dev mlx5sim = { .ia = "zdapl-mlx5sim" };

#endif
