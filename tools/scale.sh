#!/bin/sh
# Connection scale on the software devices (issue #15): zd_scale_conn with
# <pairs> connected RC EP pairs between two processes, each carrying a send
# and an RDMA write both ways, on zdapl-shm, zdapl-tcp and (when this build
# has it) zdapl-mlx5sim; prints each
# side's connection rate, descriptors, RSS and PSS per EP and idle CPU.
# meson test runs 2,000 (cm/scale-2000-*); the soak (tools/soak.sh) runs it
# with 10,000 at its end.
# Each side holds one descriptor per connected EP (shm: the CM's socket;
# tcp: the CM's socket, which its data rides) and none per EP not yet
# connected; a run whose descriptors exceed RLIMIT_NOFILE is reported
# skipped (77).
# usage: tools/scale.sh [pairs] [build dir]     exit: 0 all passed, 1 a failure
set -u
pairs=${1:-10000}
build=${2:-$(dirname "$0")/../build}
conf=$build/dat.conf
exe=$build/tests/cm/zd_scale_conn
[ -x "$exe" ] && [ -f "$conf" ] || { echo "scale.sh: build $build first (ninja -C $build)" >&2; exit 1; }
rc=0
devs="zdapl-shm 1|zdapl-tcp 1"
grep -q '^zdapl-mlx5sim ' "$conf" && devs="$devs|zdapl-mlx5sim 1"
IFS='|'
for dev in $devs; do
	unset IFS
	set -- $dev
	DAT_OVERRIDE=$conf "$exe" -P "$1" -n "$pairs" -f "$2" -u 0
	st=$?
	case $st in
	0) echo "scale.sh: $1 $pairs pairs: PASS" ;;
	77) echo "scale.sh: $1 $pairs pairs: SKIPPED (descriptors)" ;;
	*) echo "scale.sh: $1 $pairs pairs: FAIL (exit $st)"; rc=1 ;;
	esac
done
exit $rc
