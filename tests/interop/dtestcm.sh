#!/bin/sh
# Runs the unmodified Debian dtestcm (connection setup/teardown benchmark)
# as a server and a client on this host through libdat2 and the build's
# dat.conf: N connections with 48 bytes of private data each way, then
# disconnects.  Passes only if both sides report all N connected and the
# test complete.  dtestcm's side channel is TCP port 15828 (fixed), so two
# runs must not overlap (meson: is_parallel false).
# usage: dtestcm.sh <dat.conf> <ia_name> <connections> [extra dtestcm args...]
set -u
conf=$1 ia=$2 n=$3
shift 3
command -v dtestcm >/dev/null || { echo "dtestcm not installed (dapl2-utils)"; exit 77; }
export DAT_OVERRIDE=$conf
dir=$(mktemp -d)
spid=""
cleanup() {
	[ -n "$spid" ] && kill "$spid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

# A service point port nobody uses right now.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])' \
       2>/dev/null || echo $((40000 + $$ % 20000)))

timeout 120 dtestcm -s -P "$ia" -c "$n" -p "$port" "$@" >"$dir/server" 2>&1 &
spid=$!
# The client needs the server's side channel up: wait for it (bounded).
i=0
while ! grep -q "waiting for client" "$dir/server" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 "$spid" 2>/dev/null; then
		echo "dtestcm server did not come up:"; cat "$dir/server"; exit 1
	fi
	sleep 0.1
done
timeout 120 dtestcm -P "$ia" -h 127.0.0.1 -c "$n" -p "$port" "$@" >"$dir/client" 2>&1
crc=$?
# The server ends once every connection is torn down.
i=0
while kill -0 "$spid" 2>/dev/null && [ $i -lt 300 ]; do
	i=$((i + 1))
	sleep 0.1
done
wait "$spid" 2>/dev/null
src=$?
spid=""
echo "---- server (exit $src)"; cat "$dir/server"
echo "---- client (exit $crc)"; cat "$dir/client"
ok=0
grep -q "ALL $n CONNECTED on Server" "$dir/server" &&
	grep -q "ALL $n CONNECTED on Client" "$dir/client" &&
	grep -q "Connection Test Complete" "$dir/server" &&
	grep -q "Connection Test Complete" "$dir/client" &&
	[ "$crc" -eq 0 ] && [ "$src" -eq 0 ] && ok=1
echo "dtestcm -c $n on $ia: $([ $ok = 1 ] && echo PASS || echo FAIL)"
[ $ok = 1 ]
