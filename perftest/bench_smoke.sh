#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Smoke test of one perftest-style benchmark (meson suite 'bench').
#   bench_smoke.sh <binary> <dat.conf or ''> <ia_name or ''> <benchmark args...>
# Runs it bounded in time, then checks the output parses: a perftest column
# header followed by at least one row of numbers (as many columns as the
# header announces). Exit 77 (skipped) when the provider answered
# DAT_NOT_IMPLEMENTED (its connection manager or data path is not there
# yet) or does not advertise the extension operation the benchmark measures.
# BENCH_SMOKE_STDERR, if set, is an extended regex that some line of the
# benchmark's stderr must match (what the provider reported about the run).
set -u
bin=$1 conf=$2 ia=$3
shift 3
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

if [ -n "$conf" ]; then
	export DAT_OVERRIDE="$conf"
	set -- -P "$ia" "$@"
fi
# timeout(1) sends TERM, then KILL: the benchmark kills its forked server.
timeout -k 5 50 "$bin" "$@" >"$out" 2>"$err"
rc=$?
cat "$out"
cat "$err" >&2
if [ $rc -eq 77 ]; then
	echo "SKIP: $(grep -m1 -e 'DAT_NOT_IMPLEMENTED' -e 'skipped' "$err")" >&2
	exit 77
fi
if [ $rc -ne 0 ]; then
	echo "FAIL: $(basename "$bin") exited $rc" >&2
	exit 1
fi
if [ -n "${BENCH_SMOKE_STDERR:-}" ] && ! grep -Eq "$BENCH_SMOKE_STDERR" "$err"; then
	echo "FAIL: no line of stderr matches: $BENCH_SMOKE_STDERR" >&2
	exit 1
fi
# Every column header line (starts with " #bytes") must be followed by a row
# of numbers with one field per "[unit]" (or "#iterations"/"#bytes") column.
awk '
	function close_header() {
		if (hdr && !rows_here) { print "FAIL: no row under: " hdr_line > "/dev/stderr"; bad = 1 }
	}
	/^ #bytes/ {
		close_header()
		want = 2; line = $0       # #bytes, #iterations, then one per [unit]
		while (match(line, /\[[^]]*\]/)) { want++; line = substr(line, RSTART + RLENGTH) }
		if ($0 ~ /tps average/) want++
		hdr++; hdr_line = $0; rows_here = 0; next
	}
	hdr && /^ *[0-9]/ {
		ok = NF == want
		for (i = 1; i <= NF; i++) if ($i !~ /^[0-9]+(\.[0-9]+)?$/) ok = 0
		if (!ok) { print "FAIL: row does not parse: " $0 > "/dev/stderr"; bad = 1 }
		rows_here++; rows++; next
	}
	END {
		close_header()
		if (!hdr) { print "FAIL: no column header" > "/dev/stderr"; exit 1 }
		exit bad
	}' "$out" || exit 1
echo "PASS: $(grep -c '^ *[0-9]' "$out") result rows"
