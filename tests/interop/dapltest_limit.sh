#!/bin/sh
# dapltest limit test (-T L, no server): creates objects until creation
# fails.  "all": every limit test with dapltest's default cap of 1000
# objects; "exhaust <tests>": each named test run with a cap of 100000,
# which must end in DAT_INSUFFICIENT_RESOURCES (a real limit), never a
# crash, a hang or another error.
# usage: dapltest_limit.sh <dat.conf> <ia_name> all|exhaust [limit tests...]
. "$(dirname "$0")/lib.sh"
ia=$2 mode=$3
interop_init "$1" dapltest
shift 3
ok=1
if [ "$mode" = all ]; then
	client limit 120 dapltest -T L -D "$ia" "$@"
	rc=$?
	grep -v '#[0-9]*$' "$dir/limit"
	# Service points take any 64-bit qualifier (dapltest counts up from
	# 0xAffab1e): both run to dapltest's cap.
	[ $rc -eq 0 ] && ! has limit "Test Error" && has limit "limit_size_lmr" &&
		has limit "PSPs created: 1000" && has limit "RSPs created: 1000" || ok=0
else
	for t in "$@"; do
		client "$t" 120 dapltest -T L -D "$ia" -m 100000 "$t"
		rc=$?
		grep -v '#[0-9]*$' "$dir/$t"
		echo "$t: exit $rc"
		[ $rc -eq 0 ] && has "$t" "fails: DAT_INSUFFICIENT_RESOURCES" || ok=0
	done
fi
verdict "dapltest -T L $mode $* on $ia" $ok
