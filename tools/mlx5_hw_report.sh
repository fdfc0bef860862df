#!/bin/sh
# For hosts with a ConnectX: runs the stock-client suite and the perftest
# benchmarks over every zdapl-mlx5_<dev>-<port> line of build/dat.conf (the
# hw/mlx5 data path on real hardware, which CI -- with no NIC -- only ever
# drives against the software device, zdapl-mlx5sim) and prints a report.
#
#   sh tools/mlx5_hw_report.sh [build dir]        (default: build)
#
# Server and client run on this host through the port's own loopback, as
# the interop suite runs them for the software devices.  Exit: 0 all
# passed, 1 something failed, 77 no mlx5 port here.  The report is also
# written to <build>/mlx5_hw_report.md.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$top/build}" 2>/dev/null && pwd) || {
	echo "mlx5_hw_report: no build directory (run: meson setup build && meson compile -C build)" >&2
	exit 1
}
conf=$build/dat.conf
interop=$top/tests/interop
perf=$build/perftest
report=$build/mlx5_hw_report.md

[ -f "$conf" ] || { echo "mlx5_hw_report: $conf missing: build first" >&2; exit 1; }
# ZDAPL_REPORT_IAS names other lines instead (e.g. zdapl-mlx5sim, to try
# this script on a host without a NIC).
ports=${ZDAPL_REPORT_IAS:-$(awk '$1 ~ /^zdapl-mlx5_[0-9]+-[0-9]+$/ { print $1 }' "$conf")}
if [ -z "$ports" ]; then
	echo "mlx5_hw_report: no mlx5 port on this host ($conf lists none; /sys/class/infiniband has: $(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' '))"
	exit 77
fi

# name | script | args after <dat.conf> <ia_name>: the interop suite's runs.
runs='dtest-plain|dtest.sh|
dtest-poll|dtest.sh|-p
dtest-cno|dtest.sh|-c
dtest-write-pp-check|dtest.sh|-W -D -a -b 65536
dtestsrq-c10|dtestsrq.sh|10 -b 1024
dtestcm-c1000|dtestcm.sh|1000
dapltest-trans-mixed-v|dapltest_trans.sh|T -V -i 500 -t 2 -w 4 client SR 256 server RW 4096 client RR 4096 server SR 256
dapltest-trans-mixed-v-poll|dapltest_trans.sh|T -V -P -i 500 -t 2 -w 4 client SR 256 server RW 4096 client RR 4096 server SR 256
dapltest-trans-mixed-v-rsp|dapltest_trans.sh|T -V -r -i 500 -t 2 -w 4 client SR 256 server RW 4096 client RR 4096 server SR 256
dapltest-perf-rw|dapltest_trans.sh|P -i 2000 RW 4096
dapltest-perf-rr|dapltest_trans.sh|P -i 2000 RR 4096
dapltest-limit|dapltest_limit.sh|all
dapltest-fft-connmgt|dapltest_fft.sh|connmgt
dapltest-fft-endpoint|dapltest_fft.sh|endpoint
dapltest-fft-hwconn|dapltest_fft.sh|hwconn
dapltest-fft-mem|dapltest_fft.sh|mem
dapltest-fft-pz|dapltest_fft.sh|pz'

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
failed=0
{
	echo "# zdapl mlx5 hardware report, $(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname)"
	echo
	echo "zdapl $(git -C "$top" describe --always --dirty 2>/dev/null || echo '?'); kernel $(uname -r)"
	for ia in $ports; do
		echo
		echo "## $ia"
		echo
		echo "| run | result | seconds |"
		echo "|---|---|---|"
		echo "$runs" | while IFS='|' read -r name script args; do
			t0=$(date +%s)
			# shellcheck disable=SC2086 # args are words
			sh "$interop/$script" "$conf" "$ia" $args >"$logs/$ia-$name.log" 2>&1
			rc=$?
			case $rc in
			0) res=pass ;;
			77) res=skipped ;;
			*) res="FAIL (exit $rc)"; touch "$logs/failed" ;;
			esac
			echo "| $name | $res | $(($(date +%s) - t0)) |"
		done
		echo
		echo "perftest, --loopback (both sides on this host):"
		echo
		echo '```'
		for bench in zd_write_lat zd_read_lat zd_send_lat; do
			DAT_OVERRIDE=$conf "$perf/$bench" --loopback -P "$ia" -s 8 -n 100000 2>&1 | tail -n 3
		done
		for bench in zd_write_bw zd_read_bw zd_send_bw; do
			DAT_OVERRIDE=$conf "$perf/$bench" --loopback -P "$ia" -s 65536 -n 5000 2>&1 | tail -n 3
		done
		echo '```'
	done
} | tee "$report"
[ -e "$logs/failed" ] && failed=1
if [ $failed -ne 0 ]; then
	echo
	echo "Logs of the failed runs:"
	for f in "$logs"/*.log; do
		grep -q . "$f" || continue
		case $(tail -n 1 "$f") in *PASS*) continue ;; esac
		echo "==== $(basename "$f" .log)"
		tail -n 40 "$f"
	done
fi
echo "report: $report"
exit $failed
