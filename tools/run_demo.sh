#!/bin/sh
# The main job, setup included: build zdapl, show the DAT providers of this
# build through libdat2, run the unmodified Debian dapltest against them, and
# measure the EVD ring.  (The perftest-style benchmarks replace the last step
# when they land.)
set -eu
cd "$(dirname "$0")/.."
sh tools/setup_deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build >/dev/null
conf=$PWD/build/dat.conf

echo "==== providers (DAT_OVERRIDE=$conf)"
DAT_OVERRIDE=$conf build/tools/zdapl_info

for f in pz mem; do
	echo "==== dapltest -T F -D zdapl-shm -f $f"
	DAT_OVERRIDE=$conf timeout 120 dapltest -T F -D zdapl-shm -f $f 2>&1 |
		grep -E "Function feature|Result" | sed 's/^[[:space:]]*//'
done

echo "==== EVD ring benchmark"
timeout 300 build/perftest/zd_evd_bench
