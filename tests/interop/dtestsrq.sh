#!/bin/sh
# dtestsrq (server and client, unmodified Debian binaries): N RC
# connections whose receives come from one shared receive queue, bursts
# of sends each way.  Passes only if both exit 0, report all N connected
# and the test complete.  Fixed conn_qual 45248: one run at a time.
# usage: dtestsrq.sh <dat.conf> <ia_name> <connections> [dtestsrq args...]
. "$(dirname "$0")/lib.sh"
ia=$2 n=$3
interop_init "$1" dtestsrq
shift 3
server_start server "ready on port" 150 dtestsrq -s -P "$ia" -c "$n" "$@"
client_against_server 120 dtestsrq -P "$ia" -h "$host" -c "$n" "$@"
ok=0
[ $crc -eq 0 ] && [ $src -eq 0 ] &&
	has server "ALL $n CONNECTED on server" && has client "ALL $n CONNECTED on client" &&
	has server "SRQ Test Complete" && has client "SRQ Test Complete" && ok=1
verdict "dtestsrq -c $n $* on $ia" $ok
