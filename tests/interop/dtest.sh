#!/bin/sh
# dtest (server and client, unmodified Debian binaries, two processes on
# this host): connect, send/recv with RMR exchange, RDMA write and read,
# or with -W the RDMA write ping-pong (-D: with data validation, -a: every
# size up to -b).  Passes only if both exit 0 and print "PASSED".  dtest's
# side channel and conn_qual are fixed (port 45248): one run at a time.
# The client may take 240 s: -W -a over zdapl-tcp takes 80-100 s on a quiet
# 2-core host (both sides spin while the target's progress thread places
# each write), more when other work shares the cores.
# ZD_EXPECT_ADOPTED=1: each side must also report (ZDAPL_MEM_REPORT) that
# its registrations of dtest's malloc'd buffers were shared in place.
# usage: dtest.sh <dat.conf> <ia_name> [dtest args...]
. "$(dirname "$0")/lib.sh"
[ "${ZD_EXPECT_ADOPTED:-0}" = 1 ] && export ZDAPL_MEM_REPORT=1
ia=$2
interop_init "$1" dtest
shift 2
server_start server "waiting for client connection" 270 dtest -s -P "$ia" "$@"
wait_listen server 15828  # its side channel (CONN_PORT)
client_against_server 240 dtest -P "$ia" -h "$host" "$@"
ok=0
[ $crc -eq 0 ] && [ $src -eq 0 ] && has client "Test Complete. PASSED" &&
	has server "Test Complete. PASSED" && ok=1
if [ "${ZD_EXPECT_ADOPTED:-0}" = 1 ]; then
	for side in client server; do
		has $side "registrations: [1-9][0-9]* shared in place" || {
			echo "dtest on $ia: $side registered nothing shared in place"
			ok=0
		}
	done
fi
verdict "dtest $* on $ia" $ok
