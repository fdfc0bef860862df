#!/bin/sh
# dapltest against a dapltest server (-T S), unmodified Debian binaries, two
# processes on this host: a transaction test (-T T: threads x EPs, SR/RW/RR
# ops, -V data validation, -P polling, -r RSPs) or a performance test
# (-T P), then -T Q, which must make the server clean up and exit 0.
# Passes only if the client exits 0 and says it ended its work (T) or
# printed its results (P), neither side reports an error, and the server
# quits.  The test EPs use ports next to the server's: it and the 64 after
# it are free and below the ephemeral range (where the tcp device's data
# listeners take theirs); still, one run at a time.
# usage: dapltest_trans.sh <dat.conf> <ia_name> <T|P> [client args...]
. "$(dirname "$0")/lib.sh"
ia=$2 type=$3
interop_init "$1" dapltest
shift 3
[ $# -gt 0 ] || set -- client SR 256 server SR 256
port=$(free_port_block 64)
server_start server "Service Point Ready" 150 dapltest -T S -D "$ia" -n "$port"
client client 100 dapltest -T "$type" -s "$host" -D "$ia" -n "$port" "$@"
crc=$?
client quit 20 dapltest -T Q -s "$host" -D "$ia" -n "$port"
qrc=$?
server_wait server 20
src=$?
show client server quit
echo "client exit $crc, quit exit $qrc, server exit $src"
ok=0
case $type in
T) done_pat="End of Work -- Client Exiting" ;;
*) done_pat="^raw: " ;;
esac
[ $crc -eq 0 ] && [ $qrc -eq 0 ] && [ $src -eq 0 ] && has client "$done_pat" &&
	has server "Exiting" && ! has client "[Ee]rror|FAIL" && ! has server "[Ee]rror|FAIL" &&
	ok=1
verdict "dapltest -T $type $* on $ia" $ok
