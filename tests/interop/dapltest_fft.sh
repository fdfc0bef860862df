#!/bin/sh
# Runs one dapltest FFT (-T F) function with the unmodified Debian client,
# through libdat2 and the build's dat.conf, and passes only if every case
# printed "Result: PASS" (dapltest's exit status does not say).
# usage: dapltest_fft.sh <dat.conf> <ia_name> <function> [dapltest args...]
set -u
conf=$1 ia=$2 func=$3
shift 3
command -v dapltest >/dev/null || { echo "dapltest not installed (dapl2-utils)"; exit 77; }
out=$(DAT_OVERRIDE=$conf timeout 120 dapltest -T F -D "$ia" -f "$func" "$@" 2>&1)
rc=$?
echo "$out"
pass=$(printf '%s\n' "$out" | grep -c "Result: PASS")
fail=$(printf '%s\n' "$out" | grep -c "Result: FAIL")
echo "dapltest -T F -f $func on $ia: $pass passed, $fail failed (exit $rc)"
[ "$rc" -eq 0 ] && [ "$pass" -gt 0 ] && [ "$fail" -eq 0 ]
