#!/bin/sh
# The main job, setup included: build zdapl, show its DAT providers through
# libdat2, measure this machine's floor, then run the perftest-style
# loopback benchmarks over zdapl-shm (all sizes 2 B..8 MiB).
set -eu
cd "$(dirname "$0")/.."
sh tools/setup_deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build >/dev/null
export DAT_OVERRIDE="$PWD/build/dat.conf"

echo "==== providers (DAT_OVERRIDE=$DAT_OVERRIDE)"
build/tools/zdapl_info zdapl-shm

echo "==== this machine's floor"
timeout 300 build/perftest/zd_floor

for t in write_lat send_lat read_lat write_bw send_bw read_bw; do
	echo "==== zd_$t --loopback -a -P zdapl-shm"
	timeout 300 "build/perftest/zd_$t" --loopback -a -P zdapl-shm
done

echo "==== zdapl beside UCX, libfabric and the floor (tools/compare.sh)"
sh tools/compare.sh
