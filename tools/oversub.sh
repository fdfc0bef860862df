#!/bin/sh
# tools/oversub.sh: zdapl-tcp when busy-polling processes outnumber the
# cores, as MPI jobs run (issue 14): PAIRS pairs of zd_eager_ring (the
# eager ring MPI's DAT transports use: RDMA writes into the peer's ring,
# both sides spinning on memory and dat_evd_dequeue) at once over
# zdapl-tcp, with progress=thread and progress=manual, beside the same
# pairs over MPICH's own TCP transport (tools/oversub_mpi.c, ch4:ucx with
# UCX_TLS=tcp,self) when mpicc is installed.
#
#   sh tools/oversub.sh [--build DIR] [--pairs N] [--reps N] [--quick]
#                       [--sizes "8 1024 1048576"] [--out FILE.md]
#                       [--evd-every N] [--models "thread manual"]
#                       [--lib LIBZDAPL] (another libzdapl, e.g. a before)
#
# --evd-every N: zd_eager_ring's receiver dequeues its request EVD once
# every N spins on the ring (default 1; 0: never while waiting for a
# message, as MPI transports that look at their EVDs only with a send
# outstanding: progress=manual cannot run that way and is left out).
# Sizes 8 B, 1 KiB, 1 MiB: pingpong one-way latency (average, usec) and
# stream bandwidth (MB/s, 2^20). Each figure is the best pair of the best
# of --reps rounds (3; 1 with --quick); all pairs of a round start
# together. Every process runs under timeout; only PIDs this script started
# are ever signalled; loopback ports of its own (19600 up).
# Output: a markdown table on stdout and in --out (build/oversub/oversub.md);
# raw outputs in build/oversub/raw/.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BUILD=$ROOT/build
PAIRS=2
REPS=3
SIZES="8 1024 1048576"
OUT=
QUICK=0
EVD_EVERY=1
LIB_ARG=
MODELS="thread manual"

while [ $# -gt 0 ]; do
	case $1 in
	--build) BUILD=$(cd "$2" && pwd) || exit 2; shift 2 ;;
	--pairs) PAIRS=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--sizes) SIZES=$2; shift 2 ;;
	--out) OUT=$2; shift 2 ;;
	--evd-every) EVD_EVERY=$2; shift 2 ;;
	--models) MODELS=$2; shift 2 ;;
	--lib) LIB_ARG=$2; shift 2 ;;
	--quick) QUICK=1; REPS=1; shift ;;
	-h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) echo "oversub.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
PERF=$BUILD/perftest
[ -x "$PERF/zd_eager_ring" ] || { echo "oversub.sh: no $PERF/zd_eager_ring (ninja -C $BUILD)" >&2; exit 1; }
DIR=$BUILD/oversub
RAW=$DIR/raw
OUT=${OUT:-$DIR/oversub.md}
rm -rf "$RAW" && mkdir -p "$RAW" || exit 1

# The tcp line of the build's dat.conf, once per progress model.
LIB=$(awk '$1 == "zdapl-tcp" { print $5 }' "$BUILD/dat.conf")
[ -n "$LIB_ARG" ] && LIB=$LIB_ARG
IF=$(awk '$1 == "zdapl-tcp" { gsub(/"/, "", $8); print $8 }' "$BUILD/dat.conf")
[ -n "$LIB" ] && [ -n "$IF" ] || { echo "oversub.sh: no zdapl-tcp line in $BUILD/dat.conf" >&2; exit 1; }
case $IF in
*.*.*.*) HOST=$IF ;;
*) HOST=$(ip -4 -o addr show dev "$IF" | awk '{ split($4, a, "/"); print a[1]; exit }') ;;
esac
[ -n "$HOST" ] || { echo "oversub.sh: no IPv4 address on $IF" >&2; exit 1; }
CONF=$RAW/dat.conf
for p in thread manual; do
	echo "zdapl-tcp-$p u2.0 nonthreadsafe default $LIB dapl.2.0 \"tcp $IF progress=$p\" \"\""
done >"$CONF"

iters() {  # mode size
	if [ "$1" = pingpong ]; then
		case $2 in 1048576) n=100 ;; *) n=2000 ;; esac
	else
		case $2 in 1048576) n=300 ;; *) n=20000 ;; esac
	fi
	[ $QUICK = 1 ] && n=$((n / 4))
	[ $n -lt 20 ] && n=20
	echo $n
}

PORT=19600
PIDS=
# Starts PAIRS server/client pairs of zd_eager_ring at once; waits for all.
eager_round() {  # model mode size tag
	n=$(iters "$2" "$3")
	slots=64
	[ "$3" -ge 65536 ] && slots=8
	PIDS=
	i=0
	while [ $i -lt "$PAIRS" ]; do
		port=$((PORT + i))
		f=$RAW/$4.p$i
		DAT_OVERRIDE=$CONF timeout 45 "$PERF/zd_eager_ring" -P "zdapl-tcp-$1" \
			--mode "$2" -s "$3" -n "$n" --slots $slots --evd-every $EVD_EVERY -p $port --timeout 10 \
			>"$f.srv" 2>&1 &
		PIDS="$PIDS $!"
		i=$((i + 1))
	done
	sleep 0.3
	i=0
	while [ $i -lt "$PAIRS" ]; do
		port=$((PORT + i))
		f=$RAW/$4.p$i
		DAT_OVERRIDE=$CONF timeout 45 "$PERF/zd_eager_ring" -P "zdapl-tcp-$1" \
			--mode "$2" -s "$3" -n "$n" --slots $slots --evd-every $EVD_EVERY -p $port --timeout 10 \
			--json "$f.json" "$HOST" >"$f.txt" 2>&1 &
		PIDS="$PIDS $!"
		i=$((i + 1))
	done
	for p in $PIDS; do wait "$p"; done
	PIDS=
	PORT=$((PORT + PAIRS))
	[ $PORT -gt 19900 ] && PORT=19600
}

MPIBIN=
if command -v mpicc >/dev/null 2>&1 && command -v mpiexec >/dev/null 2>&1; then
	MPIBIN=$DIR/oversub_mpi
	mpicc -O2 -o "$MPIBIN" "$ROOT/tools/oversub_mpi.c" 2>"$RAW/mpicc.txt" || MPIBIN=
fi
mpi_round() {  # mode size tag
	UCX_TLS=tcp,self UCX_NET_DEVICES=lo timeout 60 mpiexec -n $((2 * PAIRS)) \
		"$MPIBIN" "$1" "$2" "$(iters "$1" "$2")" >"$RAW/$3.txt" 2>&1 &
	PIDS=$!         # in the background: a signal reaches the trap at once
	wait "$PIDS"
	PIDS=
}

cleanup() { for p in $PIDS; do kill "$p" 2>/dev/null; done; }
trap 'cleanup; exit 1' INT TERM

r=1
while [ $r -le "$REPS" ]; do
	for mode in pingpong stream; do
		for s in $SIZES; do
			for model in $MODELS; do
				[ "$EVD_EVERY" = 0 ] && [ $model = manual ] && continue
				eager_round $model $mode $s "$model.$mode.$s.r$r"
			done
			[ -n "$MPIBIN" ] && mpi_round $mode $s "mpi.$mode.$s.r$r"
		done
	done
	r=$((r + 1))
done

python3 - "$RAW" "$PAIRS" "$SIZES" "$OUT" "$(nproc)" <<'EOF'
import glob, json, os, re, sys
raw, pairs, sizes, out, ncpu = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4], sys.argv[5]

def eager(model, mode, size):
    best = None
    for f in glob.glob(f"{raw}/{model}.{mode}.{size}.r*.p*.json"):
        try:
            r = json.load(open(f))["results"][0]
        except Exception:
            continue
        v = r["t_avg"] if mode == "pingpong" else r["bw_avg"]
        if best is None or (v < best if mode == "pingpong" else v > best):
            best = v
    return best

def mpi(mode, size):
    best = None
    for f in glob.glob(f"{raw}/mpi.{mode}.{size}.r*.txt"):
        for line in open(f):
            m = re.match(r"pair \d+ (\S+) (\d+) ([\d.]+)", line)
            if m:
                v = float(m.group(3))
                if best is None or (v < best if mode == "pingpong" else v > best):
                    best = v
    return best

def fmt(v, mode):
    if v is None:
        return "n/a"
    return f"{v:.1f}" if mode == "pingpong" or v < 10 else f"{v:.0f}"

rows = []
rows.append(f"{pairs} pairs ({2 * pairs} busy-polling processes) on {ncpu} CPUs, loopback; "
            "pingpong: average one-way usec (lower is better); stream: MB/s (higher is better); "
            "best pair of the best round")
rows.append("")
rows.append("| figure | progress=thread | progress=manual | MPICH TCP (ucx tcp) | thread / MPI | manual / MPI |")
rows.append("|---|---|---|---|---|---|")
for mode in ("pingpong", "stream"):
    for s in sizes:
        t, m, b = eager("thread", mode, s), eager("manual", mode, s), mpi(mode, s)
        def ratio(v):
            if v is None or b is None or b == 0:
                return "n/a"
            # >= 1.0 means zdapl is at least as good as MPI's TCP
            return f"{(b / v if mode == 'pingpong' else v / b):.2f}x"
        name = f"{mode} {s} B"
        rows.append(f"| {name} | {fmt(t, mode)} | {fmt(m, mode)} | {fmt(b, mode)} | {ratio(t)} | {ratio(m)} |")
rows.append("")
rows.append("ratios: how many times as good as MPICH's TCP (>= 1.00x: at least as fast)")
text = "\n".join(rows) + "\n"
open(out, "w").write(text)
print(text, end="")
EOF
