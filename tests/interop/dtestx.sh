#!/bin/sh
# dtestx (unmodified Debian binary): the IB extensions through libdat2.
#   RC (no -u/-U): server and client connect, exchange RMRs with a
#      suppressed send, RDMA write with immediate data each way, then
#      compare-and-swap and fetch-and-add (each skipped, and still passing,
#      unless the provider lists DAT_IB_CMP_AND_SWAP / DAT_IB_FETCH_AND_ADD
#      as "TRUE").  Passes only if both exit 0 and print "IB extension test -
#      immed/atomic test PASSED".
#   UD (-u: 4 connections, -U n: n; -m: one EP per connection): UD
#      "connections" both ways on the same EPs, address handles from the
#      extension events, UD sends.  The client needs -c as well as -h (with
#      UD, -h alone leaves it a server).  Passes only if both exit 0 and
#      print "IB extension test - UD test PASSED".
#   -q: one process, dat_ib_open_query / dat_ib_close_query; passes if it
#      exits 0.
# A provider whose IA does not report DAT_EXTENSION_IB makes dtestx exit 1
# with "IB extension not supported": that is a failure, not a skip.
# dtestx's side channel is TCP port 15828 and its conn_quals 31111/31112
# (fixed): one run at a time.
# usage: dtestx.sh <dat.conf> <ia_name> [dtestx args...]
#   (-s, -c, -h and -P are the script's; the args go to both sides)
. "$(dirname "$0")/lib.sh"
ia=$2
interop_init "$1" dtestx
shift 2

# The mode, from the args as dtestx's own getopt reads them
# ("qcsvumpU:h:b:P:"; -q wins, then any -u or -U makes it UD).
mode=rc
OPTIND=1
while getopts ":qcsvumpU:h:b:P:" opt "$@"; do
	case $opt in
	q) query=1 ;;
	u | U) mode=ud ;;
	c | s | h | P)
		echo "dtestx.sh: -$opt is set by the script"
		exit 2
		;;
	:)
		echo "dtestx.sh: -$OPTARG needs a value"
		exit 2
		;;
	\?)
		echo "dtestx.sh: dtestx has no -$OPTARG"
		exit 2
		;;
	esac
done
[ "${query:-0}" = 1 ] && mode=query

# However the script ends (lib.sh's own exits included, such as a server
# that dies before it listens): a run that stopped at dtestx's extension
# probe says so last, and fails.
unsupported() {
	if grep -qs "IB extension not supported" "$dir"/*; then
		echo "FAIL: $ia does not report the IB extension" \
			"(ia_attr.extension_supported != DAT_EXTENSION_IB):" \
			"dtestx stops at its probe"
		return 0
	fi
	return 1
}
trap 'unsupported && { interop_cleanup; exit 1; }; interop_cleanup' EXIT

if [ $mode = query ]; then
	client query 30 dtestx -P "$ia" "$@"
	qrc=$?
	show query
	echo "dtestx -q exit $qrc"
	has query "dat_ib_open_query returned" &&
		echo "dat_ib_open_query failed: $ia's DAT_IB_OPEN_QUERY_OP (libdat2's open path)"
	has query "dat_ib_close_query returned" &&
		echo "dat_ib_close_query failed: $ia's DAT_IB_CLOSE_QUERY_OP"
	ok=0
	[ $qrc -eq 0 ] && ok=1
	verdict "dtestx $* on $ia" $ok
fi

if [ $mode = ud ]; then
	pass="IB extension test - UD test PASSED"
	cflags="-c"
else
	pass="IB extension test - immed/atomic test PASSED"
	cflags=""  # without UD, -h alone makes it the client
fi
# The server prints "waiting to snd addr" just before it binds and listens
# on 15828 (send_server_params); it prints the probe's failure and exits
# before that.
server_start server "waiting to snd addr|IB extension not supported" 100 \
	dtestx -s -P "$ia" "$@"
if has server "IB extension not supported"; then
	server_wait server 5
	show server
	exit 1  # the EXIT trap names the cause
fi
wait_listen server 15828  # its side channel (CONN_PORT)
client_against_server 60 dtestx $cflags -P "$ia" -h "$host" "$@"
ok=0
[ $crc -eq 0 ] && [ $src -eq 0 ] && has client "$pass" && has server "$pass" && ok=1
# What dtestx passes without having run (not failures: dtestx's choice).
has server "Provider not built with counters" &&
	echo "note: $ia lists no DAT_COUNTERS: -p ran without the counter calls"
has server "Skipping CMP and SWAP" &&
	echo "note: $ia lists no DAT_IB_CMP_AND_SWAP=TRUE: compare-and-swap not run"
has server "Skipping FETCH and ADD" &&
	echo "note: $ia lists no DAT_IB_FETCH_AND_ADD=TRUE: fetch-and-add not run"
verdict "dtestx $* on $ia ($mode)" $ok
