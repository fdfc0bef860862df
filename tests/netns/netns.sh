#!/bin/sh
# zdapl-tcp across two hosts: two network namespaces joined by a veth pair
# (server side 10.77.0.1/24, client side 10.77.0.2/24, nothing else
# routed), each with its own dat.conf whose zdapl-tcp line is
# "tcp <its veth>".  Servers run in the first, clients in the second.
#
#   netns.sh <libzdapl> <failtest binary> interop <script> [args...]
#        one of tests/interop's scripts (dtest.sh, dtestsrq.sh, ...) with
#        ia zdapl-tcp, across the namespaces
#   netns.sh <libzdapl> <failtest binary> fail linkdown|kill-server|kill-client
#        zd_failtest server and client streaming at each other, then the
#        link is taken down (both must see BROKEN or DISCONNECTED within
#        BOUND_MS, all DTOs completed, no socket leaked) or one is SIGKILLed
#        (the other must)
#
# NETNS_TCP_OPTS: ia_params options added to both lines (progress=manual).
#
# Exits 77 with the reason where namespaces cannot be made (not root, no
# `ip netns`).  The namespaces (and with them the veth pair) are removed and
# every process started here is killed by its PID on exit, pass or fail.
set -u
lib=$1 failtest=$2 mode=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
BOUND_MS=${BOUND_MS:-10000}

[ "$(id -u)" = 0 ] || { echo "SKIP: network namespaces need root"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: no ip (iproute2)"; exit 77; }
# dtest and dapltest are uninstrumented Debian binaries: they cannot load a
# sanitizer build of the library (its runtime must come first).
if [ "$mode" = interop ] && ldd "$lib" 2>/dev/null | grep -q 'libasan\|libtsan'; then
	echo "SKIP: $lib is a sanitizer build; the stock clients cannot load it"
	exit 77
fi

ns_s=zdapl-test-$$-s ns_c=zdapl-test-$$-c
if_s=zdv$$s if_c=zdv$$c
addr_s=10.77.0.1 addr_c=10.77.0.2
work=$(mktemp -d)
pids=""

cleanup() {
	for p in $pids; do
		kill -9 "$p" 2>/dev/null
	done
	# Whatever still runs inside (a server of an interop script whose own
	# trap did not run): those namespaces are ours alone.
	for ns in $ns_s $ns_c; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do
			kill -9 "$p" 2>/dev/null
		done
		ip netns del "$ns" 2>/dev/null
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if ! ip netns add "$ns_s" 2>"$work/err"; then
	echo "SKIP: cannot make a network namespace: $(cat "$work/err")"
	exit 77
fi
ip netns add "$ns_c" &&
	ip link add "$if_s" type veth peer name "$if_c" &&
	ip link set "$if_s" netns "$ns_s" &&
	ip link set "$if_c" netns "$ns_c" &&
	ip -n "$ns_s" addr add "$addr_s/24" dev "$if_s" &&
	ip -n "$ns_c" addr add "$addr_c/24" dev "$if_c" &&
	ip -n "$ns_s" link set lo up && ip -n "$ns_c" link set lo up &&
	ip -n "$ns_s" link set "$if_s" up && ip -n "$ns_c" link set "$if_c" up ||
	{ echo "FAIL: could not set up the veth pair"; exit 1; }
# Both ends report carrier (state UP) before anything runs.
i=0
until ip -n "$ns_s" link show dev "$if_s" | grep -q "state UP" &&
	ip -n "$ns_c" link show dev "$if_c" | grep -q "state UP"; do
	i=$((i + 1))
	[ $i -lt 50 ] || { echo "FAIL: the veth pair never came up"; exit 1; }
	sleep 0.1
done

conf() { # ifname output
	echo "zdapl-tcp u2.0 nonthreadsafe default $lib dapl.2.0 \"tcp $1${NETNS_TCP_OPTS:+ $NETNS_TCP_OPTS}\" \"\"" >"$2"
}
conf "$if_s" "$work/server.conf"
conf "$if_c" "$work/client.conf"
echo "namespaces $ns_s ($addr_s, $if_s) and $ns_c ($addr_c, $if_c)"

case $mode in
interop)
	script=$1
	shift
	INTEROP_SERVER_WRAP="ip netns exec $ns_s env DAT_OVERRIDE=$work/server.conf" \
	INTEROP_CLIENT_WRAP="ip netns exec $ns_c env DAT_OVERRIDE=$work/client.conf" \
	INTEROP_HOST=$addr_s \
		sh "$here/../interop/$script" "$work/client.conf" zdapl-tcp "$@"
	exit $?
	;;
fail)
	what=$1
	;;
*)
	echo "unknown mode $mode"
	exit 2
	;;
esac

# ---- failure tests ----
port=47000
now_ms() { date +%s%3N; }
ip netns exec "$ns_s" env DAT_OVERRIDE="$work/server.conf" \
	timeout 120 "$failtest" -s zdapl-tcp $port >"$work/server" 2>&1 &
spid=$!
pids="$pids $spid"
i=0
until grep -q LISTENING "$work/server"; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 $spid 2>/dev/null; then
		echo "FAIL: server did not come up"; cat "$work/server"; exit 1
	fi
	sleep 0.1
done
ip netns exec "$ns_c" env DAT_OVERRIDE="$work/client.conf" \
	timeout 120 "$failtest" -c zdapl-tcp $port $addr_s >"$work/client" 2>&1 &
cpid=$!
pids="$pids $cpid"
i=0
until grep -q STREAMING "$work/server" && grep -q STREAMING "$work/client"; do
	i=$((i + 1))
	if [ $i -gt 300 ]; then
		echo "FAIL: no streaming"; cat "$work/server" "$work/client"; exit 1
	fi
	sleep 0.1
done
sleep 0.5  # mid-transfer
t0=$(now_ms)
case $what in
linkdown)
	ip -n "$ns_s" link set "$if_s" down
	survivors="server client"
	;;
kill-server)
	# timeout's child is the test program
	kill -9 "$(pgrep -P $spid)" 2>/dev/null || kill -9 $spid
	survivors="client"
	;;
kill-client)
	kill -9 "$(pgrep -P $cpid)" 2>/dev/null || kill -9 $cpid
	survivors="server"
	;;
*)
	echo "unknown failure $what"; exit 2 ;;
esac
echo "broke it ($what) at $t0"

ok=1
for who in $survivors; do
	[ "$who" = server ] && p=$spid || p=$cpid
	# detection bound + the program's own drain bound + teardown
	i=0
	while kill -0 "$p" 2>/dev/null && [ $i -lt $(( (BOUND_MS + 15000) / 100 )) ]; do
		i=$((i + 1))
		sleep 0.1
	done
	if kill -0 "$p" 2>/dev/null; then
		echo "FAIL: $who hangs"
		command -v gdb >/dev/null && for c in $(pgrep -P "$p"); do
			timeout 30 gdb -batch -p "$c" -ex "thread apply all bt" 2>&1 | grep -E '^(Thread|#)'
		done
		ok=0
		continue
	fi
	wait "$p"
	rc=$?
	echo "---- $who (exit $rc)"
	cat "$work/$who"
	t=$(sed -n 's/^EVENT [A-Z_]* \([0-9]*\)$/\1/p' "$work/$who")
	if [ $rc -ne 0 ] || [ -z "$t" ]; then
		ok=0
		continue
	fi
	echo "$who: event $((t - t0)) ms after the failure (bound $BOUND_MS ms)"
	[ $((t - t0)) -le "$BOUND_MS" ] || ok=0
done
echo "failure test $what: $([ $ok = 1 ] && echo PASS || echo FAIL)"
[ $ok = 1 ]
