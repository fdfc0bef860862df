#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The extension benchmarks' command line (meson suite 'bench'): perftest's
# rules for -A and the atomic's fixed size, each refused with exit 2 and a
# message before any DAT call.
#   ext_args.sh <zd_atomic_lat> <zd_write_imm_lat> <zd_write_lat>
set -u
atomic=$1 imm=$2 write=$3
fail=0

# expect <exit status> <stderr pattern> <command...>
expect() {
	want=$1 pat=$2
	shift 2
	err=$("$@" 2>&1 >/dev/null)
	rc=$?
	if [ $rc -ne "$want" ] || ! printf '%s\n' "$err" | grep -q -- "$pat"; then
		echo "FAIL: $(basename "$1") ${*#"$1"}: exit $rc, want $want and /$pat/; stderr:" >&2
		printf '%s\n' "$err" | head -3 >&2
		fail=1
	else
		echo "ok: $(basename "$1") ${*#"$1"}: exit $rc"
	fi
}

expect 2 "invalid atomic type 'FOO'" "$atomic" -A FOO
expect 2 "needs an argument" "$atomic" -A
expect 2 "cannot be changed for atomic tests" "$atomic" -s 16
expect 2 "one size" "$atomic" -a
expect 2 "zd_atomic_lat only" "$write" -A FETCH_AND_ADD
expect 2 "zd_atomic_lat only" "$imm" -A CMP_AND_SWAP
expect 0 "" "$atomic" --help
expect 0 "" "$imm" --help
"$atomic" --help | grep -q -- '-A, --atomic_type' || { echo "FAIL: no -A in zd_atomic_lat --help" >&2; fail=1; }
"$imm" --help | grep -q -- '-r, --rx-depth' || { echo "FAIL: no -r in zd_write_imm_lat --help" >&2; fail=1; }
exit $fail
