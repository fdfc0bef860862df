#!/bin/sh
# Soak (issue 15): for <minutes>, on every device (zdapl-shm, zdapl-mlx5sim,
# zdapl-tcp between two network namespaces, or over lo where namespaces
# cannot be made), one dapltest server (-T S) stays up the whole time while
# rounds of clients run against it and beside it:
#   trans    dapltest -T T with data validation (-V): sends both ways,
#            RDMA write and read, 2 threads x 2 EPs
#   kill     a long dapltest -T T client SIGKILLed mid-run
#   stop     (every 4th round) a client SIGSTOPped for longer than
#            ZDAPL_PEER_TIMEOUT_MS (2000 here), then SIGKILLed: the server
#            must drop it by the liveness check alone and keep serving
#   dtest    dtest server + client (tests/interop/dtest.sh)
#   dtestcm  200 connects and disconnects (tests/interop/dtestcm.sh)
# Every few seconds the long-lived servers' resident memory, descriptors
# and threads go into <out>/samples.csv, each trans run's rate into
# <out>/rate.csv.  At the end every server must quit cleanly (-T Q) and
# be flat: after a warm-up (the first fifth of the run), the maximum of
# the last third of the samples may exceed the maximum of the first third
# by at most 10% + 2 MiB of RSS, and the floor of descriptors and threads
# (between tests) by 2 and 1.  A summary
# is printed and <out>/soak.png plotted (tools/soak_plot.sh, gnuplot).
# Any failed step, dead server or growth fails the run (exit 1).
#
#   tools/soak.sh <minutes> [out dir]       (default build/soak)
#
# At the end, tools/scale.sh runs SOAK_SCALE_PAIRS (default 10000; 0:
# none) connected pairs between two processes on shm and tcp.
# SOAK_SKIP: devices left out ("mlx5sim", "shm tcp", ...).
# SOAK_BUILD: the build directory (default build); SOAK_LOCK: a lock file
# each step holds while its stock clients run (default
# /tmp/dapl-clients.lock, shared with other runs of the stock clients on
# this host; empty: none).  Exits 77 without dapltest.
set -u
cd "$(dirname "$0")/.."
top=$PWD
mins=${1:?usage: soak.sh <minutes> [out dir]}
out=${2:-$top/build/soak}
build=$top/${SOAK_BUILD:-build}
conf=$build/dat.conf
lock=${SOAK_LOCK-/tmp/dapl-clients.lock}
interval=${SOAK_SAMPLE_S:-3}
scale_pairs=${SOAK_SCALE_PAIRS:-10000}
export ZDAPL_PEER_TIMEOUT_MS=${ZDAPL_PEER_TIMEOUT_MS:-2000}

for prog in dapltest dtest dtestcm; do
	command -v $prog >/dev/null || { echo "SKIP: $prog not installed (dapl2-utils)"; exit 77; }
done
[ -f "$conf" ] || { echo "soak: no $conf (build first)"; exit 1; }
rm -rf "$out"
mkdir -p "$out" || exit 1
# The run uses a copy of the library: a rebuild meanwhile changes nothing
# under the long-lived servers.
cp "$(sed -n 's/^zdapl-shm .* default \([^ ]*\) .*/\1/p' "$conf")" "$out/libzdapl.so" || exit 1
lib=$out/libzdapl.so
sed "s|default [^ ]*libzdapl[^ ]* |default $lib |" "$conf" >"$out/dat.conf"
conf=$out/dat.conf
pids=""
ns_s="" ns_c=""

cleanup() {
	for p in $pids; do
		kill -9 "$p" 2>/dev/null
	done
	for ns in $ns_s $ns_c; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do
			kill -9 "$p" 2>/dev/null
		done
		ip netns del "$ns" 2>/dev/null
	done
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# A run started under the clients' lock (flock ... run_tests.sh) already
# holds it: taking it again per step would wait for ourselves.
held_by_ancestor() { # lock file: 0 if a process above us holds it
	ino=$(stat -c %i "$1" 2>/dev/null) || return 1
	for h in $(awk -v ino="$ino" '$2 == "FLOCK" { split($6, f, ":"); if (f[3] == ino) print $5 }' /proc/locks); do
		p=$$
		while [ "$p" -gt 1 ]; do
			[ "$p" = "$h" ] && return 0
			p=$(sed -n 's/^PPid:[^0-9]*//p' /proc/$p/status 2>/dev/null)
			[ -n "$p" ] || break
		done
	done
	return 1
}
if [ -n "$lock" ] && held_by_ancestor "$lock"; then
	echo "soak: $lock is held by a process that started this run: steps run without taking it"
	lock=""
fi

now() { date +%s; }
# Line-buffered client output: a client killed by its timeout (a hang)
# still shows how far it got.
linebuf=""
command -v stdbuf >/dev/null && linebuf="stdbuf -oL -eL"
locked() { # cmd...: holds the clients' lock while it runs
	if [ -n "$lock" ]; then
		flock -w 600 "$lock" "$@"
	else
		"$@"
	fi
}
# The same around steps that are not one command (fd 9).
lock_take() { [ -z "$lock" ] || { exec 9>>"$lock" && flock -w 600 9; }; }
lock_drop() { [ -z "$lock" ] || { flock -u 9; exec 9>&-; }; }

# ---- devices: name ia server-wrap client-wrap host dat.conf ----
devs=""
add_dev() { # name ia swrap cwrap host conf
	case " ${SOAK_SKIP:-} " in *" $1 "*) echo "soak: $1 left out (SOAK_SKIP)"; return ;; esac
	devs="$devs $1"
	eval "ia_$1=\$2 swrap_$1=\$3 cwrap_$1=\$4 host_$1=\$5 conf_$1=\$6"
}
add_dev shm zdapl-shm "" "" 127.0.0.1 "$conf"
grep -q '^zdapl-mlx5sim ' "$conf" && add_dev mlx5sim zdapl-mlx5sim "" "" 127.0.0.1 "$conf"

tcp_line() { # ifname
	echo "zdapl-tcp u2.0 nonthreadsafe default $lib dapl.2.0 \"tcp $1\" \"\""
}
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && ip netns add "zdsoak-$$-s" 2>/dev/null; then
	ns_s=zdsoak-$$-s ns_c=zdsoak-$$-c
	ip netns add "$ns_c" &&
		ip link add "zs$$s" type veth peer name "zs$$c" &&
		ip link set "zs$$s" netns "$ns_s" && ip link set "zs$$c" netns "$ns_c" &&
		ip -n "$ns_s" addr add 10.78.0.1/24 dev "zs$$s" &&
		ip -n "$ns_c" addr add 10.78.0.2/24 dev "zs$$c" &&
		ip -n "$ns_s" link set lo up && ip -n "$ns_c" link set lo up &&
		ip -n "$ns_s" link set "zs$$s" up && ip -n "$ns_c" link set "zs$$c" up ||
		{ echo "soak: could not set up the veth pair"; exit 1; }
	tcp_line "zs$$s" >"$out/tcp-server.conf"
	tcp_line "zs$$c" >"$out/tcp-client.conf"
	sleep 1  # carrier
	add_dev tcp zdapl-tcp "ip netns exec $ns_s env DAT_OVERRIDE=$out/tcp-server.conf" \
		"ip netns exec $ns_c env DAT_OVERRIDE=$out/tcp-client.conf" 10.78.0.1 "$out/tcp-client.conf"
	tcp_where="between network namespaces"
else
	tcp_line lo >"$out/tcp-lo.conf"
	add_dev tcp zdapl-tcp "" "" 127.0.0.1 "$out/tcp-lo.conf"
	tcp_where="over lo (no network namespaces here)"
fi

# ---- the long-lived servers ----
# A dapltest server gives each test the next ports after its own (port+1
# up to port+1000, then again from port+1): the servers' ranges must not
# meet, or a test's service point finds another server's port taken
# (DAT_CONN_QUAL_IN_USE), its thread ends before it says its service
# points are ready, and the server waits for that forever.  Below the
# kernel's ephemeral ports, which outgoing connections take.
port=20100
for d in $devs; do
	eval "ia=\$ia_$d sw=\$swrap_$d c=\$conf_$d"
	# shellcheck disable=SC2086
	DAT_OVERRIDE=$c $sw dapltest -T S -D "$ia" -n $port >"$out/server-$d.log" 2>&1 &
	pid=$!
	pids="$pids $pid"
	eval "pid_$d=$pid port_$d=$port"
	port=$((port + 1100))
done
for d in $devs; do
	eval "pid=\$pid_$d"
	i=0
	until grep -q "Service Point Ready" "$out/server-$d.log"; do
		i=$((i + 1))
		if [ $i -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
			echo "soak: the $d server did not come up"; cat "$out/server-$d.log"; exit 1
		fi
		sleep 0.1
	done
done
echo "soak: $mins min on$devs (tcp $tcp_where); servers$(for d in $devs; do eval "printf ' %s=%s' $d \$pid_$d"; done)"

# ---- sampling ----
t0=$(now)
echo "t_s,device,rss_kb,fds,threads,steps_ok,steps_failed" >"$out/samples.csv"
echo "t_s,device,wqe_per_s,send_mb_per_s" >"$out/rate.csv"
: >"$out/steps"
sample() {
	while :; do
		t=$(($(now) - t0))
		ok=$(grep -c ' ok$' "$out/steps")
		bad=$(grep -c ' FAIL$' "$out/steps")
		for d in $devs; do
			eval "pid=\$pid_$d"
			[ -d /proc/$pid ] || continue
			rss=$(sed -n 's/^VmRSS:[^0-9]*\([0-9]*\).*/\1/p' /proc/$pid/status)
			thr=$(sed -n 's/^Threads:[^0-9]*\([0-9]*\).*/\1/p' /proc/$pid/status)
			fds=$(ls /proc/$pid/fd 2>/dev/null | wc -l)
			echo "$t,$d,$rss,$fds,$thr,$ok,$bad" >>"$out/samples.csv"
		done
		sleep "$interval"
	done
}
sample &
sampler=$!
pids="$pids $sampler"

# ---- the steps ----
step_done() { # device step rc [log]: a FAIL keeps the step's log
	ts=$(($(now) - t0))
	if [ "$3" = 0 ]; then r=ok; else r=FAIL; fi
	echo "$ts $1 $2 $r" >>"$out/steps"
	[ $r = ok ] && return
	if [ $# -gt 3 ]; then
		cp "$4" "$out/fail-$1-$2-$ts.log"
		echo "soak: $1 $2 failed (rc $3) at $ts s, log in $out/fail-$1-$2-$ts.log"
	else
		echo "soak: $1 $2 failed (rc $3) at $ts s"
	fi
}

trans() { # device: validated transaction test against the long-lived server
	d=$1
	eval "ia=\$ia_$d cw=\$cwrap_$d h=\$host_$d p=\$port_$d c=\$conf_$d"
	# shellcheck disable=SC2086
	DAT_OVERRIDE=$c locked timeout 60 $cw $linebuf dapltest -T T -s "$h" -D "$ia" -n "$p" -i 400 -t 2 -w 2 -V \
		client SR 1024 server SR 1024 client RW 4096 client RR 4096 >"$out/last-trans-$d.log" 2>&1
	rc=$?
	grep -q "End of Work -- Client Exiting" "$out/last-trans-$d.log" || rc=1
	grep -q "[Ee]rror\|FAIL" "$out/last-trans-$d.log" && rc=2
	if [ "$rc" = 0 ]; then
		w=$(sed -n 's/^Total WQE *: *\([0-9.]*\).*/\1/p' "$out/last-trans-$d.log")
		m=$(sed -n 's/^Total Send .*- *\([0-9.]*\) MB\/Sec.*/\1/p' "$out/last-trans-$d.log")
		echo "$(($(now) - t0)),$d,${w:-0},${m:-0}" >>"$out/rate.csv"
	fi
	step_done "$d" trans "$rc" "$out/last-trans-$d.log"
}

# A long client against the server, killed (or stopped, and killed
# later) in its data phase only: dapltest's server cannot recover from a
# client that dies while it sets up (test/dapltest in dapl's source): a
# test thread waits for each of its EPs' connection requests with
# DAT_TIMEOUT_INFINITE (dapl_transaction_test.c, DT_cr_event_wait), so a
# client gone before it connected them all leaves that thread waiting
# forever; and any error on the server's first connection (the client's
# command lost, a BROKEN where its dat_ep_disconnect expects
# DISCONNECTED) ends the server's loop (dapl_server.c: goto server_exit),
# which then waits for every test thread to end first: the server hangs
# with the next client's connection request pending.  On any provider.
# So the client (-d: it says "Begin..." once its EPs are connected and
# synchronized with the server's thread) is killed a second after that;
# the server must live on (the next trans checks it serves).
hostile() { # device how
	d=$1
	eval "ia=\$ia_$d cw=\$cwrap_$d h=\$host_$d p=\$port_$d c=\$conf_$d spid=\$pid_$d"
	log=$out/last-$2-$d.log pidf=$out/hostile.pid
	lock_take
	rm -f "$pidf"
	: >"$log"  # before the client starts: the last round's says Begin
	# shellcheck disable=SC2086
	DAT_OVERRIDE=$c $cw sh -c 'echo $$ >"$0"; exec "$@"' "$pidf" $linebuf \
		dapltest -T T -d -s "$h" -D "$ia" -n "$p" -i 100000000 -t 1 -w 2 \
		client SR 1024 server SR 1024 2>&1 9>&- |
		grep --line-buffered -e "Begin\.\.\." -e "[Ee]rror" >"$log" 9>&- &
	job=$!
	i=0
	until grep -q "Begin\.\.\." "$log" || [ $i -ge 300 ]; do i=$((i + 1)); sleep 0.1; done
	v=$(cat "$pidf" 2>/dev/null)
	rc=1
	if grep -q "Begin\.\.\." "$log" && [ -n "$v" ]; then
		sleep 1
		if [ "$2" = stop ]; then
			kill -STOP "$v" 2>/dev/null
			sleep $((ZDAPL_PEER_TIMEOUT_MS / 1000 + 2))
		fi
		kill -0 "$spid" 2>/dev/null && rc=0
	else
		echo "soak: no data phase within 30 s" >>"$log"
	fi
	[ -n "$v" ] && kill -9 "$v" 2>/dev/null
	wait "$job" 2>/dev/null
	lock_drop
	step_done "$d" "$2" $rc "$log"
}

interop() { # device script args...
	d=$1 script=$2
	shift 2
	eval "ia=\$ia_$d sw=\$swrap_$d cw=\$cwrap_$d h=\$host_$d c=\$conf_$d"
	INTEROP_SERVER_WRAP=$sw INTEROP_CLIENT_WRAP=$cw INTEROP_HOST=$h \
		locked sh "$top/tests/interop/$script" "$c" "$ia" "$@" >"$out/last-$script-$d.log" 2>&1
	step_done "$d" "${script%.sh}" $? "$out/last-$script-$d.log"
}

end=$((t0 + mins * 60))
round=0
while [ "$(now)" -lt $end ]; do
	round=$((round + 1))
	for d in $devs; do
		[ "$(now)" -lt $end ] || break
		trans "$d"
		hostile "$d" kill
		[ $((round % 4)) = 0 ] && hostile "$d" stop
		trans "$d"
		interop "$d" dtest.sh
		interop "$d" dtestcm.sh 200
	done
done

# ---- the end: servers quit, flatness, summary, plot ----
sleep "$interval"
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
fail=0
for d in $devs; do
	eval "ia=\$ia_$d cw=\$cwrap_$d h=\$host_$d p=\$port_$d c=\$conf_$d pid=\$pid_$d"
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "soak: the $d server died"; tail -20 "$out/server-$d.log"; fail=1; continue
	fi
	# shellcheck disable=SC2086
	DAT_OVERRIDE=$c locked timeout 30 $cw dapltest -T Q -s "$h" -D "$ia" -n "$p" >/dev/null 2>&1
	i=0
	while kill -0 "$pid" 2>/dev/null && [ $i -lt 200 ]; do i=$((i + 1)); sleep 0.1; done
	if kill -0 "$pid" 2>/dev/null; then
		echo "soak: the $d server did not quit"; fail=1
		# Where it waits, for whoever reads the run (dapltest's server
		# waits for its test threads before it quits).
		command -v gdb >/dev/null &&
			gdb -p "$pid" -batch -ex "thread apply all bt 20" >"$out/quit-hang-$d.txt" 2>&1 &&
			echo "soak: its threads in $out/quit-hang-$d.txt"
	else
		wait "$pid"; rc=$?
		[ $rc = 0 ] || { echo "soak: the $d server exited $rc"; fail=1; }
	fi
done

awk -F, -v mins="$mins" '
NR == 1 { next }
{ n[$2]++; t[$2, n[$2]] = $1; rss[$2, n[$2]] = $3; fds[$2, n[$2]] = $4; thr[$2, n[$2]] = $5; last = $1 }
function mx(a, d, from, to,   i, m) { m = 0; for (i = from; i <= to; i++) if (a[d, i] + 0 > m) m = a[d, i] + 0; return m }
function mn(a, d, from, to,   i, m) { m = -1; for (i = from; i <= to; i++) if (m < 0 || a[d, i] + 0 < m) m = a[d, i] + 0; return m }
END {
	bad = 0
	for (d in n) {
		# warm-up: the first fifth of the samples
		w = int(n[d] / 5) + 1; k = int((n[d] - w + 1) / 3)
		if (k < 1) { printf "%-8s too few samples (%d)\n", d, n[d]; bad = 1; continue }
		# RSS: the maxima (memory once taken mostly stays).  Descriptors
		# and threads come and go with each test (a trans holds ~9 more
		# of each while it runs): their floor, where the server sits
		# between tests, is what a leak raises.
		r1 = mx(rss, d, w, w + k - 1); r3 = mx(rss, d, n[d] - k + 1, n[d])
		f1 = mn(fds, d, w, w + k - 1); f3 = mn(fds, d, n[d] - k + 1, n[d])
		h1 = mn(thr, d, w, w + k - 1); h3 = mn(thr, d, n[d] - k + 1, n[d])
		ok = r3 <= r1 * 1.10 + 2048 && f3 <= f1 + 2 && h3 <= h1 + 1
		printf "%-8s server: RSS %d -> %d KiB (maxima), fds %d -> %d, threads %d -> %d (floors) of the first and last third after warm-up, %d samples: %s\n", d, r1, r3, f1, f3, h1, h3, n[d], ok ? "flat" : "GROWS"
		if (!ok) bad = 1
	}
	exit bad
}' "$out/samples.csv" || fail=1

ok=$(grep -c ' ok$' "$out/steps")
bad=$(grep -c ' FAIL$' "$out/steps")
for d in $devs; do
	for s in trans kill stop dtest dtestcm; do
		n=$(grep -c " $d $s ok$" "$out/steps")
		f=$(grep -c " $d $s FAIL$" "$out/steps")
		[ $((n + f)) -gt 0 ] && printf '%s %s: %d ok, %d failed; ' "$d" "$s" "$n" "$f"
	done
	awk -F, -v d="$d" '$2 == d { s += $3; c++; if (!m || $3 < m) m = $3; if ($3 > x) x = $3 }
		END { if (c) printf "trans rate %.0f WQE/s mean (min %.0f, max %.0f)", s / c, m, x }' "$out/rate.csv"
	echo
done
[ "$bad" = 0 ] || fail=1
sh "$top/tools/soak_plot.sh" "$out" >/dev/null 2>&1 && echo "soak: plot $out/soak.png"

# ---- scale: 10,000 connected pairs between two processes per device ----
# (tools/scale.sh: shm and tcp, each pair carrying traffic), after the
# servers quit so it does not disturb their samples.
if [ "$scale_pairs" -gt 0 ]; then
	sh "$top/tools/scale.sh" "$scale_pairs" "$build" >"$out/scale.log" 2>&1
	rc=$?
	grep '^scale.sh:' "$out/scale.log" | sed 's/^scale.sh:/soak: scale/'
	if [ $rc != 0 ]; then
		echo "soak: scale failed, log in $out/scale.log"; fail=1
	fi
fi
echo "soak: $round rounds in $(($(now) - t0)) s, $ok steps ok, $bad failed: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
