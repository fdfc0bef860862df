#!/bin/sh
# Instructions the poster spends on one 8-byte RDMA write: the post plus
# polling its completion into a DAT event, counted by callgrind (repeatable,
# unlike time on this shared machine).  See perftest/zd_instr.c.
#
#   tools/instr_count.sh [build dir] [ia_name...]     (default: build zdapl-shm)
#
# Prints one line per provider; exits 77 when valgrind is missing.
set -eu
build=$(cd "${1:-build}" && pwd)
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- zdapl-shm
iters=${ZD_INSTR_ITERS:-1000}

command -v valgrind >/dev/null || { echo "instr_count: valgrind not installed" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for ia in "$@"; do
	out=$(cd "$tmp" && DAT_OVERRIDE="$build/dat.conf" valgrind --tool=callgrind \
		--collect-atstart=no --separate-threads=yes \
		--callgrind-out-file="$tmp/cg.$ia" \
		"$build/perftest/zd_instr" -P "$ia" -n "$iters" 2>"$tmp/log.$ia") || {
		cat "$tmp/log.$ia" >&2
		echo "instr_count: zd_instr over $ia failed" >&2
		exit 1
	}
	empty=$(echo "$out" | sed -n 's/.*empty_dequeues=\([0-9]*\).*/\1/p')
	# Thread 1's dumps: part 1 is post+poll, part 2 the empty dequeues,
	# part 3 empty counted windows (what the toggles themselves cost in
	# each window; the post and the dequeue are one window each).
	post=$(grep -h "^totals:" "$tmp"/cg."$ia".1-01 | awk '{print $2}')
	idle=$(grep -h "^totals:" "$tmp"/cg."$ia".2-01 | awk '{print $2}')
	win=$(grep -h "^totals:" "$tmp"/cg."$ia".3-01 2>/dev/null | awk '{print $2}')
	awk -v ia="$ia" -v n="$iters" -v post="$post" -v idle="$idle" -v empty="$empty" \
	    -v win="${win:-0}" 'BEGIN {
		per_win = win / n
		per_empty = idle / n - per_win
		printf "%s: %.0f instructions per 8-byte RDMA write post + completion poll " \
		       "(%d empty polls of %.0f instructions each and the toggles %.0f per " \
		       "window left out)\n",
		       ia, (post - empty * (per_empty + per_win)) / n - 2 * per_win, empty,
		       per_empty, per_win }'
	rm -f "$tmp"/cg."$ia"*
done
