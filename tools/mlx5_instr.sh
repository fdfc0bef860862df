#!/bin/sh
# Instructions the mlx5 hot path costs the poster: one 8-byte inline RDMA
# write post plus polling its completion into a DAT event, counted by
# callgrind on queues in plain memory (tests/mlx5/bench_mlx5_instr.c: the
# harness writes the CQE as the NIC would, outside the counted region).
#
#   tools/mlx5_instr.sh [build dir]        (default: build)
#
# Prints two lines: the device ops alone (post op + cq_poll op), and the
# DAT entry points (zd_ep_post_rdma_write + zd_evd_dequeue, libdat2 aside),
# each counted between CALLGRIND_TOGGLE_COLLECT pairs (the call's argument
# set-up included, the toggles' own cost subtracted).  With -f, also the
# exact inclusive cost of each function, from callgrind's --toggle-collect
# (no client requests; a cross-check and a per-function split).
# Exits 77 when valgrind is missing.
set -eu
funcs=0
[ "${1:-}" = -f ] && { funcs=1; shift; }
build=$(cd "${1:-build}" && pwd)
bin="$build/tests/mlx5/bench_mlx5_instr"
iters=${ZD_INSTR_ITERS:-1000}

command -v valgrind >/dev/null || { echo "mlx5_instr: valgrind not installed" >&2; exit 77; }
[ -x "$bin" ] || { echo "mlx5_instr: $bin not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

total() { grep -h "^totals:" "$1" | awk '{print $2}'; }

for mode in dev core; do
	valgrind --tool=callgrind --collect-atstart=no \
		--callgrind-out-file="$tmp/cg.$mode" \
		"$bin" -m "$mode" -n "$iters" >"$tmp/out.$mode" 2>"$tmp/log.$mode" || {
		cat "$tmp/log.$mode" >&2
		echo "mlx5_instr: bench_mlx5_instr -m $mode failed" >&2
		exit 1
	}
	# Dumps: 1 posts, 2 polls, 3 empty toggle pairs (subtracted).
	post=$(total "$tmp/cg.$mode.1")
	poll=$(total "$tmp/cg.$mode.2")
	tog=$(total "$tmp/cg.$mode.3")
	awk -v m="$mode" -v n="$iters" -v post="$post" -v poll="$poll" -v tog="$tog" 'BEGIN {
		t = tog / n
		p = post / n - t; q = poll / n - t
		if (m == "dev")
			what = "device ops (post_rdma_write + cq_poll)"
		else
			what = "DAT entry points (zd_ep_post_rdma_write + zd_evd_dequeue)"
		printf "mlx5 %-4s %.1f instructions: post %.1f + poll %.1f  -- %s\n",
		       m, p + q, p, q, what }'
done

[ "$funcs" = 1 ] || exit 0
# Exact per-function costs: callgrind counts each function inclusively.
fn_cost() {  # mode function
	valgrind --tool=callgrind --collect-atstart=no --toggle-collect="$2" \
		--callgrind-out-file="$tmp/fn" "$bin" -m "$1" -n "$iters" -q \
		>/dev/null 2>"$tmp/log.fn" || { cat "$tmp/log.fn" >&2; exit 1; }
	awk -v n="$iters" '/^totals:/ { printf "%.1f", $2 / n }' "$tmp/fn"
	rm -f "$tmp/fn"*
}
for f in "dev zd_mlx5_post_rdma_write" "dev zd_mlx5_cq_poll" \
	 "core zd_ep_post_rdma_write" "core zd_evd_dequeue"; do
	set -- $f
	printf '  %-26s %s instructions per call\n' "$2" "$(fn_cost "$1" "$2")"
done
