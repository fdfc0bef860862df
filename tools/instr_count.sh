#!/bin/sh
# Instructions the provider spends on one 8-byte RDMA write: the post plus
# polling its completion into a DAT event, counted by callgrind (repeatable,
# unlike time on this shared machine).  See perftest/zd_instr.c.
#
#   tools/instr_count.sh [build dir] [ia_name...]     (default: build zdapl-shm)
#
# ZD_INSTR_OP=imm or faa counts an IB extension instead of the write: an
# 8-byte RDMA write with immediate data, or a fetch-and-add, posted through
# dat_extension_op's path into the provider (zd_instr -o); ZD_INSTR_OP=send
# an 8-byte send, polling both its completion and its receive's;
# ZD_INSTR_OP=unsig one write of a bandwidth loop's stream: 16 writes, 15
# of them DAT_COMPLETION_SUPPRESS_FLAG, per completion polled (the counts
# are per write).
#
# Counts libzdapl's own instructions (libdat2's dispatch, the application's
# calls and callgrind's toggles are outside it); the software NIC's work
# runs on its own thread and is not counted either.  Prints one line per
# provider; exits 77 when valgrind is missing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build}" && pwd)
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- zdapl-shm
iters=${ZD_INSTR_ITERS:-1000}
op=${ZD_INSTR_OP:-write}
case $op in
write) what="8-byte RDMA write" ;;
imm) what="8-byte RDMA write with immediate data" ;;
faa) what="fetch-and-add" ;;
send) what="8-byte send (its receive's completion counted with the poll)" ;;
unsig) what="8-byte RDMA write of a stream, 15 in 16 unsignalled" ;;
*) echo "instr_count: ZD_INSTR_OP is write, imm, faa, send or unsig" >&2; exit 2 ;;
esac
per=1
[ "$op" = unsig ] && per=16   # perftest/zd_instr.c ZD_INSTR_BATCH

command -v valgrind >/dev/null || { echo "instr_count: valgrind not installed" >&2; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# zdapl's instructions in dump $1 (of thread 1: files cg.<dump>-<thread>)
zdapl() { awk -v obj=libzdapl -f "$here/callgrind_self.awk" "$tmp"/cg."$ia"."$1"-01; }

for ia in "$@"; do
	out=$(cd "$tmp" && DAT_OVERRIDE="$build/dat.conf" valgrind --tool=callgrind \
		--collect-atstart=no --separate-threads=yes \
		--callgrind-out-file="$tmp/cg.$ia" \
		"$build/perftest/zd_instr" -P "$ia" -n "$iters" -o "$op" 2>"$tmp/log.$ia") || {
		cat "$tmp/log.$ia" >&2
		echo "instr_count: zd_instr over $ia failed" >&2
		exit 1
	}
	empty=$(echo "$out" | sed -n 's/.*empty_dequeues=\([0-9]*\).*/\1/p')
	# Dumps of thread 1: 1 the posts, 2 the dequeues, 3 empty dequeues.
	awk -v ia="$ia" -v n="$((iters * per))" -v m="$iters" -v post="$(zdapl 1)" -v poll="$(zdapl 2)" \
	    -v idle="$(zdapl 3)" -v empty="$empty" -v what="$what" 'BEGIN {
		per_empty = idle / m
		p = post / n
		q = (poll - empty * per_empty) / n
		printf "%s: %.0f instructions in zdapl per %s: post %.0f + " \
		       "completion polled into a DAT event %.0f (%d empty polls of %.0f " \
		       "left out)\n", ia, p + q, what, p, q, empty, per_empty }'
	rm -f "$tmp"/cg."$ia"*
done
