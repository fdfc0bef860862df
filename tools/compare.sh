#!/bin/sh
# tools/compare.sh: zdapl beside UCX, libfabric and this machine's floor, in
# one run on this host (issue 4). Prints one table, writes it as markdown and
# JSON, and draws a PNG (latency and bandwidth against message size).
#
#   sh tools/compare.sh [--quick] [--out FILE.md] [--outdir DIR] [--build DIR]
#                       [--reps N] [--no-install] [--require-peers] [--check]
# Default output: build/compare/compare.{md,json,png} (raw outputs in raw/);
# installed as zdapl-compare it runs the installed benchmarks and writes
# ./zdapl-compare/ (--build does not apply).
# --check: then check that the table parses (the meson test, suite 'bench').
#
# What runs (every process under timeout, loopback 127.0.0.1 only, ports of
# its own, only the PIDs it started are ever signalled):
#   floor       build/perftest/zd_floor --json (cache line, memcpy, TCP)
#   zdapl-shm   zd_write_lat, zd_send_lat, zd_write_bw per size (the 8 B
#               write_bw run gives the message rate), --mem pool and malloc
#   zdapl-tcp   the same (pool buffers), if its data path answers; else "n/a"
#   consumer memory (issue 13)  malloc'd against pool buffers, same run,
#               over zdapl-shm and zdapl-mlx5sim: zd_write_lat 8 B,
#               zd_write_bw 1 MiB, zd_send_lat 8 B, zd_read_lat 8 B (shm's
#               first three from its set above), with malloc / pool and
#               the goals (latency <= 1.2x, bandwidth >= 0.9x); and
#               zd_eager_ring (the MPI eager ring) --mode pingpong and
#               stream, 8 B..64 KiB, latency and message rate; and what
#               registration costs (zd_reg_cost: dat_lmr_create +
#               dat_lmr_free at 4 KiB, 1 MiB, 16 MiB) over both devices on
#               malloc'd memory (adopted), the pool, and malloc'd memory
#               with ZDAPL_MEM_ADOPT=0
#   IB extensions  zd_write_imm_lat and zd_atomic_lat (-A FETCH_AND_ADD,
#               CMP_AND_SWAP) at 8 B beside the 8 B zd_write_lat, over
#               zdapl-shm, zdapl-tcp and zdapl-mlx5sim (pool buffers; "n/a"
#               where the device does not advertise the operation)
#   UCX         ucx_perftest ucp_put_lat, tag_lat, ucp_put_bw
#               (UCX_TLS=posix,cma,self and UCX_TLS=tcp on lo)
#   libfabric   fi_pingpong (-p shm -e rdm, -p tcp -e msg -d lo); Debian's
#               libfabric-bin ships no RMA benchmark (no fabtests)
# Every figure is the best of --reps interleaved rounds (3; 1 with --quick),
# fewer if a round would overrun the time budget (230 s; 120 s quick).
# The parsing, ratios, table, JSON and gnuplot script are tools/compare_report.py.
#
# Exit status: 0 done; 1 error; 2 bad arguments; 77 (only with
# --require-peers) the peers are missing and could not be installed.
set -u
CALLER=$PWD
# Set by meson install (tools/meson.build) in the installed zdapl-compare:
# the benchmarks, the library and the report script; empty here, where the
# build tree's are used.  Installed, outputs default to ./zdapl-compare/.
ZD_INSTALLED_BINDIR=
ZD_INSTALLED_LIB=
ZD_INSTALLED_REPORT=
if [ -n "$ZD_INSTALLED_BINDIR" ]; then
	REPORT=$ZD_INSTALLED_REPORT
else
	cd "$(dirname "$0")/.." || exit 1
	ROOT=$PWD
	REPORT=$ROOT/tools/compare_report.py
fi

QUICK=0
BUILD=
OUTDIR=
OUT=
REPS=
INSTALL=1
REQUIRE_PEERS=0
CHECK=0

usage() {
	if [ "${1:-0}" = 0 ]; then
		awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
	else
		awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
	fi
	exit "${1:-0}"
}

while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1 ;;
	--out) [ $# -ge 2 ] || usage 2; OUT=$2; shift ;;
	--out=*) OUT=${1#--out=} ;;
	--outdir) [ $# -ge 2 ] || usage 2; OUTDIR=$2; shift ;;
	--outdir=*) OUTDIR=${1#--outdir=} ;;
	--build) [ $# -ge 2 ] || usage 2; BUILD=$2; shift ;;
	--build=*) BUILD=${1#--build=} ;;
	--reps) [ $# -ge 2 ] || usage 2; REPS=$2; shift ;;
	--reps=*) REPS=${1#--reps=} ;;
	--no-install) INSTALL=0 ;;
	--require-peers) REQUIRE_PEERS=1 ;;
	--check) CHECK=1 ;;
	-h|--help) usage 0 ;;
	*) echo "compare.sh: unknown argument '$1'" >&2; usage 2 ;;
	esac
	shift
done

# Paths given on the command line are the caller's; the defaults are the
# source tree's (build/, build/compare/).
abs() { case $1 in /*) echo "$1" ;; *) echo "$CALLER/$1" ;; esac; }
if [ -n "$ZD_INSTALLED_BINDIR" ]; then
	[ -z "$BUILD" ] || { echo "compare.sh: --build: this is the installed zdapl-compare" >&2; exit 2; }
	if [ -n "$OUTDIR" ]; then OUTDIR=$(abs "$OUTDIR"); else OUTDIR=$CALLER/zdapl-compare; fi
elif [ -n "$BUILD" ]; then BUILD=$(abs "$BUILD"); else BUILD=$ROOT/build; fi
[ -n "$OUTDIR" ] || OUTDIR=$BUILD/compare
OUTDIR=$(abs "$OUTDIR")
if [ -n "$OUT" ]; then OUT=$(abs "$OUT"); else OUT=$OUTDIR/compare.md; fi
if [ -z "$REPS" ]; then
	if [ $QUICK = 1 ]; then REPS=1; else REPS=3; fi
fi
case $REPS in ''|*[!0-9]*|0) echo "compare.sh: --reps wants a positive number" >&2; exit 2 ;; esac

log() { printf 'compare: %s\n' "$*" >&2; }

T0=$(date +%s)
# Past this many seconds no new measurement starts (each one is bounded by
# its own timeout), so the whole run stays under about 5 minutes.
if [ $QUICK = 1 ]; then BUDGET=120; else BUDGET=230; fi
over_budget() { [ $(($(date +%s) - T0)) -ge $BUDGET ]; }

# ---- peers from Debian (idempotent) ----------------------------------------
missing_pkgs() {
	m=
	command -v ucx_perftest >/dev/null 2>&1 || m="$m ucx-utils"
	command -v fi_pingpong >/dev/null 2>&1 || m="$m libfabric-bin"
	command -v gnuplot >/dev/null 2>&1 || m="$m gnuplot-nox"
	echo $m
}

need=$(missing_pkgs)
if [ -n "$need" ] && [ $INSTALL = 1 ]; then
	if [ "$(id -u)" = 0 ]; then
		SUDO=
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		SUDO="sudo -n"
	else
		SUDO=none
	fi
	if [ "$SUDO" = none ]; then
		log "missing $need and not root: cannot install"
	else
		log "installing $need"
		apt_install() {
			DEBIAN_FRONTEND=noninteractive timeout 300 $SUDO apt-get install -y -q \
				--no-install-recommends -o DPkg::Lock::Timeout=60 $need >"$1" 2>&1
		}
		mkdir -p "$OUTDIR"
		# Try the package lists we have; apt-get update once only if that fails.
		if ! apt_install "$OUTDIR/apt.log"; then
			log "apt-get update (once)"
			DEBIAN_FRONTEND=noninteractive timeout 300 $SUDO apt-get update -q \
				-o DPkg::Lock::Timeout=60 >>"$OUTDIR/apt.log" 2>&1
			apt_install "$OUTDIR/apt.log" || log "apt-get install failed (see $OUTDIR/apt.log)"
		fi
	fi
	need=$(missing_pkgs)
fi
HAVE_UCX=0; HAVE_FI=0
command -v ucx_perftest >/dev/null 2>&1 && HAVE_UCX=1
command -v fi_pingpong >/dev/null 2>&1 && HAVE_FI=1
if [ $HAVE_UCX = 0 ] || [ $HAVE_FI = 0 ]; then
	if [ $REQUIRE_PEERS = 1 ]; then
		log "peers missing ($need) and not installable: skipped"
		exit 77
	fi
	log "peers missing ($need): their rows will say n/a"
fi

# ---- zdapl build ------------------------------------------------------------
if [ -n "$ZD_INSTALLED_BINDIR" ]; then
	PERF=$ZD_INSTALLED_BINDIR
	LIB=$ZD_INSTALLED_LIB
elif [ ! -x "$BUILD/perftest/zd_write_lat" ] || [ ! -x "$BUILD/perftest/zd_floor" ] ||
   [ ! -x "$BUILD/perftest/zd_write_imm_lat" ] || [ ! -x "$BUILD/perftest/zd_atomic_lat" ] ||
   [ ! -x "$BUILD/perftest/zd_read_lat" ] || [ ! -x "$BUILD/perftest/zd_eager_ring" ] ||
   [ ! -x "$BUILD/perftest/zd_reg_cost" ] ||
   [ ! -f "$BUILD/dat.conf" ]; then
	log "building zdapl in $BUILD"
	[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" >/dev/null || exit 1
	meson compile -C "$BUILD" >/dev/null || exit 1
fi
if [ -z "$ZD_INSTALLED_BINDIR" ]; then
	PERF=$BUILD/perftest
	LIB=$(awk '$1 == "zdapl-shm" { print $5; exit }' "$BUILD/dat.conf")
	[ -n "$LIB" ] || { log "no zdapl-shm line in $BUILD/dat.conf"; exit 1; }
fi
RAW=$OUTDIR/raw
rm -rf "$RAW"
mkdir -p "$RAW" || exit 1
: >"$RAW/index.tsv"

# A snapshot of this build's library and benchmarks, so that a rebuild of
# the tree during the run cannot change what is measured half-way; zdapl's
# software devices bound to 127.0.0.1 (the build's dat.conf names eth0), in
# a dat.conf of our own.
mkdir -p "$RAW/bin"
for b in zd_write_lat zd_send_lat zd_read_lat zd_write_bw zd_write_imm_lat zd_atomic_lat \
	zd_eager_ring zd_reg_cost zd_floor; do
	cp "$PERF/$b" "$RAW/bin/" || exit 1
done
cp "$LIB" "$RAW/bin/libzdapl.so" || exit 1
PERF=$RAW/bin
cat >"$RAW/dat.conf" <<EOF
zdapl-shm u2.0 nonthreadsafe default $RAW/bin/libzdapl.so dapl.2.0 "shm 127.0.0.1" ""
zdapl-tcp u2.0 nonthreadsafe default $RAW/bin/libzdapl.so dapl.2.0 "tcp 127.0.0.1" ""
zdapl-mlx5sim u2.0 nonthreadsafe default $RAW/bin/libzdapl.so dapl.2.0 "mlx5sim" ""
EOF

# ---- sizes, iterations ------------------------------------------------------
if [ $QUICK = 1 ]; then
	SIZES="8 4096 1048576"
	FLOOR_ARGS=--quick
	REG_TIME=0.02
else
	SIZES="8 64 512 4096 32768 262144 1048576"
	FLOOR_ARGS=
	REG_TIME=0.05
fi
# The same iterations for every system: latency runs by size; bandwidth
# runs move ~512 MiB (32 MiB quick), at most 1M messages (the 8 B run is
# also the message-rate run).
lat_iters() {
	if [ "$1" -le 4096 ]; then n=10000; elif [ "$1" -le 262144 ]; then n=2000; else n=500; fi
	[ $QUICK = 1 ] && n=$((n / 5))
	echo $n
}
bw_iters() {
	if [ $QUICK = 1 ]; then n=$((33554432 / $1)); else n=$((536870912 / $1)); fi
	[ $n -gt 1000000 ] && n=1000000
	[ $n -lt 500 ] && n=500
	echo $n
}

# Ports of our own: a base from our PID, one fresh port per server.
PORT=$((21000 + ($$ % 400) * 20))
next_port() {
	PORT=$((PORT + 1))
	while ss -Htan "sport = :$PORT" 2>/dev/null | grep -q .; do PORT=$((PORT + 1)); done
}

# index.tsv: system class test size rep rc file
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RAW/index.tsv"; }

# Waits until $1 (TCP port) listens, or the process $2 has gone (5 s at most).
wait_listen() {
	i=0
	while [ $i -lt 100 ]; do
		ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.05
		i=$((i + 1))
	done
	return 1
}

# Waits for our server $1 to end on its own (5 s), then stops it (the PID is
# that of its `timeout`, which passes SIGTERM on to the benchmark).
reap() {
	i=0
	while kill -0 "$1" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
	kill -0 "$1" 2>/dev/null && kill "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}

SRV=
cleanup() { [ -n "$SRV" ] && kill "$SRV" 2>/dev/null; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

# run_ucx class tls test size iters warmup rep
run_ucx() {
	f=$RAW/ucx-$1-$3-$4-$7.txt
	if over_budget; then record UCX "$1" "$3" "$4" "$7" budget "$f"; return; fi
	next_port
	UCX_TLS=$2 UCX_NET_DEVICES=lo timeout 60 ucx_perftest -p $PORT >"$f.srv" 2>&1 &
	SRV=$!
	if wait_listen $PORT $SRV; then
		UCX_TLS=$2 UCX_NET_DEVICES=lo timeout 30 ucx_perftest 127.0.0.1 -p $PORT \
			-t "$3" -s "$4" -n "$5" -w "$6" >"$f" 2>&1
		rc=$?
	else
		rc=124
	fi
	reap $SRV
	SRV=
	record UCX "$1" "$3" "$4" "$7" $rc "$f"
}

# run_fi class provider ep_type size iters rep
run_fi() {
	f=$RAW/fi-$1-$4-$6.txt
	if over_budget; then record libfabric "$1" pingpong "$4" "$6" budget "$f"; return; fi
	next_port
	set -- "$@" -p "$2" -e "$3" -I "$5" -S "$4"
	[ "$2" = tcp ] && set -- "$@" -d lo
	cls=$1 size=$4 rep=$6
	shift 6
	FI_TCP_IFACE=lo timeout 60 fi_pingpong "$@" -B $PORT >"$f.srv" 2>&1 &
	SRV=$!
	if wait_listen $PORT $SRV; then
		FI_TCP_IFACE=lo timeout 30 fi_pingpong "$@" -P $PORT 127.0.0.1 >"$f" 2>&1
		rc=$?
	else
		rc=124
	fi
	reap $SRV
	SRV=
	record libfabric "$cls" pingpong "$size" "$rep" $rc "$f"
}

# run_zd ia mem test size rep args...: one --loopback run (it forks its server).
# The tests are the benchmarks' names, faa_lat / cas_lat for zd_atomic_lat's
# two operations, and eager_lat / eager_rate for zd_eager_ring's two modes
# (size "all": its sweep, 8 B..64 KiB).
run_zd() {
	ia=$1 mem=$2 t=$3 size=$4 rep=$5
	shift 5
	f=$RAW/zd-$ia-$mem-$t-$size-$rep.json
	if over_budget; then record "$ia-$mem" "${ia#zdapl-}" "$t" "$size" "$rep" budget "$f"; return; fi
	case $t in
	faa_lat) bin=zd_atomic_lat; set -- -A FETCH_AND_ADD "$@" ;;
	cas_lat) bin=zd_atomic_lat; set -- -A CMP_AND_SWAP "$@" ;;
	eager_lat) bin=zd_eager_ring; set -- --mode pingpong "$@" ;;
	eager_rate) bin=zd_eager_ring; set -- --mode stream "$@" ;;
	*) bin=zd_$t ;;
	esac
	[ "$size" = all ] || set -- -s "$size" "$@"
	next_port
	DAT_OVERRIDE=$RAW/dat.conf timeout 30 "$PERF/$bin" --loopback -P "$ia" \
		--mem "$mem" -p $PORT --timeout 10 --json "$f" "$@" >"$f.txt" 2>&1
	rc=$?
	record "$ia-$mem" "${ia#zdapl-}" "$t" "$size" "$rep" $rc "$f"
}

# zd_set ia mem rep [latency-iterations cap] [bandwidth-iterations cap]
zd_set() {
	for s in $SIZES; do
		n=$(lat_iters $s)
		[ -n "${4:-}" ] && [ $n -gt $4 ] && n=$4
		run_zd "$1" "$2" write_lat $s "$3" -n $n
		run_zd "$1" "$2" send_lat $s "$3" -n $n
		n=$(bw_iters $s)
		[ -n "${5:-}" ] && [ $n -gt $5 ] && n=$5
		run_zd "$1" "$2" write_bw $s "$3" -n $n
	done
}

# zd_ext ia rep [latency-iterations cap]: the IB extensions at 8 B (exit 77
# where the device does not advertise one: the report says n/a). Beside the
# 8 B write zd_set (zd_consumer for mlx5sim) measured.
zd_ext() {
	n=$(lat_iters 8)
	[ -n "${3:-}" ] && [ $n -gt $3 ] && n=$3
	for t in write_imm_lat faa_lat cas_lat; do
		run_zd "$1" pool $t 8 "$2" -n $n
	done
}

# zd_consumer ia rep [latency-iterations cap]: issue 13's malloc'd against
# pool buffers, the two memories one after the other: the 8 B write, send
# and read latency and the 1 MiB write bandwidth (zdapl-shm's set has all
# but the read already), and zd_eager_ring's latency and message rate.
zd_consumer() {
	n=$(lat_iters 8)
	[ -n "${3:-}" ] && [ $n -gt $3 ] && n=$3
	if [ $QUICK = 1 ]; then el=200 er=2000; else el=1000 er=10000; fi
	if [ -n "${3:-}" ]; then        # a slow device: the sweep's 14 sizes
		[ $el -gt $(($3 / 10)) ] && el=$(($3 / 10))
		[ $el -lt 20 ] && el=20
		[ $er -gt $3 ] && er=$3
	fi
	for mem in pool malloc; do
		if [ "$1" != zdapl-shm ]; then
			run_zd "$1" $mem write_lat 8 "$2" -n $n
			run_zd "$1" $mem send_lat 8 "$2" -n $n
			run_zd "$1" $mem write_bw 1048576 "$2" -n $(bw_iters 1048576)
		fi
		run_zd "$1" $mem read_lat 8 "$2" -n $n
		run_zd "$1" $mem eager_lat all "$2" -n $el
		run_zd "$1" $mem eager_rate all "$2" -n $er
	done
}

# reg_cost ia rep: issue 13's registration cost, zd_reg_cost at 4 KiB,
# 1 MiB and 16 MiB for REG_TIME s a size (3 pairs at least), on malloc'd
# memory (adopted), the pool, and malloc'd memory with ZDAPL_MEM_ADOPT=0
# (noadopt: cross-memory attach). About 0.3 s a run.
reg_cost() {
	for v in malloc pool noadopt; do
		f=$RAW/reg-$1-$v-$2.json
		if over_budget; then record regcost "${1#zdapl-}" $v all "$2" budget "$f"; continue; fi
		if [ $v = noadopt ]; then
			mem=malloc adopt="ZDAPL_MEM_ADOPT=0"
		else
			mem=$v adopt="-u ZDAPL_MEM_ADOPT"
		fi
		DAT_OVERRIDE=$RAW/dat.conf timeout 30 env $adopt "$PERF/zd_reg_cost" -P "$1" \
			--mem $mem -s 4k,1m,16m --time $REG_TIME --no-held --json "$f" >"$f.txt" 2>&1
		record regcost "${1#zdapl-}" $v all "$2" $? "$f"
	done
}

ucx_set() { # class tls rep
	for s in $SIZES; do
		n=$(lat_iters $s)
		run_ucx "$1" "$2" ucp_put_lat $s $n $((n / 10)) "$3"
		run_ucx "$1" "$2" tag_lat $s $n $((n / 10)) "$3"
		n=$(bw_iters $s)
		run_ucx "$1" "$2" ucp_put_bw $s $n $((n / 10)) "$3"
	done
}

fi_set() { # class provider ep rep (no warm-up in fi_pingpong: 10000 at least)
	for s in $SIZES; do
		n=$(lat_iters $s)
		[ $s -le 4096 ] && [ $n -lt 10000 ] && n=10000
		run_fi "$1" "$2" "$3" $s $n "$4"
	done
}

log "results in $OUTDIR (reps $REPS, sizes $SIZES, budget ${BUDGET}s)"

# zdapl-tcp: two probes (8 B latency and message rate); the full set (pool
# buffers only) if its data path answers, with iterations capped so that a
# run takes about 2 s at the probed speed.
ZD_TCP=0
json_val() {
	python3 -c 'import json, sys
try:
    print(json.load(open(sys.argv[1]))["results"][0][sys.argv[2]])
except Exception:
    print(0)' "$1" "$2" 2>/dev/null
}
run_zd zdapl-tcp pool write_lat 8 0 -n 100
rc=$(tail -n 1 "$RAW/index.tsv" | cut -f6)
if [ "$rc" = 0 ]; then
	run_zd zdapl-tcp pool write_bw 8 0 -n 2000
	lat=$(json_val "$RAW/zd-zdapl-tcp-pool-write_lat-8-0.json" t_typical)
	mr=$(json_val "$RAW/zd-zdapl-tcp-pool-write_bw-8-0.json" msg_rate_mpps)
	ZD_TCP_LAT_CAP=$(awk -v l="$lat" 'BEGIN { n = l > 0 ? 1e6 / l : 20; if (n < 20) n = 20; printf "%d", n }')
	ZD_TCP_BW_CAP=$(awk -v r="$mr" 'BEGIN { n = r * 2e6; if (n < 200) n = 200; printf "%d", n }')
	ZD_TCP=1
	log "zdapl-tcp answers (8 B: $lat us, $mr Mmsg/s): iterations capped at $ZD_TCP_LAT_CAP / $ZD_TCP_BW_CAP"
else
	log "zdapl-tcp: no data path yet (exit $rc)"
fi
# zdapl-mlx5sim (the software mlx5 NIC; the extension and consumer-memory
# tables, not the main one): the same probe
# and iteration cap as tcp.
ZD_MLX5SIM=0
run_zd zdapl-mlx5sim pool write_lat 8 0 -n 100
rc=$(tail -n 1 "$RAW/index.tsv" | cut -f6)
if [ "$rc" = 0 ]; then
	lat=$(json_val "$RAW/zd-zdapl-mlx5sim-pool-write_lat-8-0.json" t_typical)
	ZD_MLX5SIM_LAT_CAP=$(awk -v l="$lat" 'BEGIN { n = l > 0 ? 1e6 / l : 20; if (n < 20) n = 20; printf "%d", n }')
	# issue 13's four latency runs there: about 0.5 s each
	ZD_MLX5SIM_CONS_CAP=$((ZD_MLX5SIM_LAT_CAP / 4 < 20 ? 20 : ZD_MLX5SIM_LAT_CAP / 4))
	ZD_MLX5SIM=1
	log "zdapl-mlx5sim answers (8 B: $lat us): iterations capped at $ZD_MLX5SIM_LAT_CAP"
else
	log "zdapl-mlx5sim: no data path (exit $rc)"
fi

# Rounds are whole or not at all (the report keeps only complete rounds, so
# every system gets as many tries): a round starts only if the last one
# would still fit in the budget.
rep=1
ROUND=0
while [ $rep -le $REPS ]; do
	RT=$(($(date +%s) - T0))
	if [ $rep -gt 1 ] && [ $((RT + ROUND + ROUND / 10)) -ge $BUDGET ]; then
		log "round $rep/$REPS would not fit in the ${BUDGET}s budget: stopping after $((rep - 1))"
		break
	fi
	log "round $rep/$REPS: floor ($(($(date +%s) - T0))s)"
	f=$RAW/floor-$rep.json
	if over_budget; then
		record floor both floor all $rep budget "$f"
	else
		timeout 60 "$PERF/zd_floor" $FLOOR_ARGS --json="$f" >"$f.txt" 2>&1
		record floor both floor all $rep $? "$f"
	fi
	log "round $rep/$REPS: zdapl ($(($(date +%s) - T0))s)"
	zd_set zdapl-shm pool $rep
	zd_set zdapl-shm malloc $rep
	[ $ZD_TCP = 1 ] && zd_set zdapl-tcp pool $rep $ZD_TCP_LAT_CAP $ZD_TCP_BW_CAP
	zd_consumer zdapl-shm $rep
	[ $ZD_MLX5SIM = 1 ] && zd_consumer zdapl-mlx5sim $rep $ZD_MLX5SIM_CONS_CAP
	zd_ext zdapl-shm $rep
	[ $ZD_TCP = 1 ] && zd_ext zdapl-tcp $rep $ZD_TCP_LAT_CAP
	[ $ZD_MLX5SIM = 1 ] && zd_ext zdapl-mlx5sim $rep $ZD_MLX5SIM_LAT_CAP
	reg_cost zdapl-shm $rep
	[ $ZD_MLX5SIM = 1 ] && reg_cost zdapl-mlx5sim $rep
	if [ $HAVE_UCX = 1 ]; then
		log "round $rep/$REPS: UCX ($(($(date +%s) - T0))s)"
		ucx_set shm posix,cma,self $rep
		ucx_set tcp tcp $rep
	fi
	if [ $HAVE_FI = 1 ]; then
		log "round $rep/$REPS: libfabric ($(($(date +%s) - T0))s)"
		fi_set shm shm rdm $rep
		fi_set tcp tcp msg $rep
	fi
	ROUND=$(($(date +%s) - T0 - RT))
	rep=$((rep + 1))
done
log "measured in $(($(date +%s) - T0))s"

set -- --raw "$RAW" --out "$OUT" --json "$OUTDIR/compare.json" \
	--png "$OUTDIR/compare.png" --sizes "$SIZES" --reps $((rep - 1)) \
	--seconds $(($(date +%s) - T0)) --reg-time $REG_TIME
[ $QUICK = 1 ] && set -- "$@" --quick
[ $HAVE_UCX = 1 ] || set -- "$@" --no-ucx
[ $HAVE_FI = 1 ] || set -- "$@" --no-fi
python3 "$REPORT" "$@" || exit 1
if [ $CHECK = 1 ]; then
	python3 "$REPORT" --check "$OUT" || exit 1
	[ $HAVE_UCX = 1 ] && [ $HAVE_FI = 1 ] && [ -s "$OUTDIR/compare.png" ] &&
		python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$OUTDIR/compare.json" ||
		{ log "check: JSON or PNG missing"; exit 1; }
fi
