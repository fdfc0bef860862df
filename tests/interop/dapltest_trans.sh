#!/bin/sh
# dapltest transaction test (-T T) against a dapltest server (-T S), both
# unmodified Debian binaries on this host: connection setup through the CM,
# then send/receive traffic, which needs the device's data path.
# usage: dapltest_trans.sh <dat.conf> <ia_name> [client op args...]
set -u
conf=$1 ia=$2
shift 2
command -v dapltest >/dev/null || { echo "dapltest not installed (dapl2-utils)"; exit 77; }
export DAT_OVERRIDE=$conf
dir=$(mktemp -d)
spid=""
cleanup() {
	[ -n "$spid" ] && kill "$spid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM
[ $# -gt 0 ] || set -- client SR 256 server SR 256

timeout 120 dapltest -T S -D "$ia" >"$dir/server" 2>&1 &
spid=$!
i=0
while ! grep -q "Service Point Ready" "$dir/server" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 "$spid" 2>/dev/null; then
		echo "dapltest server did not come up:"; cat "$dir/server"; exit 1
	fi
	sleep 0.1
done
timeout 60 dapltest -T T -s 127.0.0.1 -D "$ia" -i 1000 -t 1 -w 1 "$@" >"$dir/client" 2>&1
crc=$?
echo "---- client (exit $crc)"; cat "$dir/client"
echo "---- server"; cat "$dir/server"
grep -q "Test Error" "$dir/client" "$dir/server" && crc=1
echo "dapltest -T T on $ia: $([ $crc = 0 ] && echo PASS || echo FAIL)"
[ $crc = 0 ]
