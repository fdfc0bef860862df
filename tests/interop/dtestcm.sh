#!/bin/sh
# dtestcm (server and client, unmodified Debian binaries): N connections
# with 48 bytes of private data each way, then disconnects.  Passes only if
# both sides report all N connected and the test complete.  dtestcm's side
# channel is TCP port 15828 (fixed): one run at a time.
# usage: dtestcm.sh <dat.conf> <ia_name> <connections> [dtestcm args...]
. "$(dirname "$0")/lib.sh"
ia=$2 n=$3
interop_init "$1" dtestcm
shift 3
port=$(free_port_block 1)  # the service point
server_start server "waiting for client" 150 dtestcm -s -P "$ia" -c "$n" -p "$port" "$@"
wait_listen server 15828  # its side channel (CONN_PORT)
client_against_server 120 dtestcm -P "$ia" -h "$host" -c "$n" -p "$port" "$@"
ok=0
has server "ALL $n CONNECTED on Server" && has client "ALL $n CONNECTED on Client" &&
	has server "Connection Test Complete" && has client "Connection Test Complete" &&
	[ $crc -eq 0 ] && [ $src -eq 0 ] && ok=1
verdict "dtestcm -c $n on $ia" $ok
