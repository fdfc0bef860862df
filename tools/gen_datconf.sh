#!/bin/sh
# Writes a dat.conf naming this build's libzdapl: one zdapl-shm, one
# zdapl-tcp and one zdapl-mlx5sim (software mlx5 device) line, plus one
# line per mlx5 port present on this host.
# usage: gen_datconf.sh <absolute path of libzdapl.so> <output file>
set -eu
lib=$1
out=$2

# The tcp device listens on the interface of the default route (else lo).
tcp_if=$(ip -4 route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}')
[ -n "$tcp_if" ] || tcp_if=lo

tmp="$out.tmp.$$"
{
	echo "# zdapl providers of this build tree: DAT_OVERRIDE=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
	echo "zdapl-shm u2.0 nonthreadsafe default $lib dapl.2.0 \"shm\" \"\""
	echo "zdapl-tcp u2.0 nonthreadsafe default $lib dapl.2.0 \"tcp $tcp_if\" \"\""
	echo "zdapl-mlx5sim u2.0 nonthreadsafe default $lib dapl.2.0 \"mlx5sim\" \"\""
	for port in /sys/class/infiniband/mlx5_*/ports/*; do
		[ -d "$port" ] || continue
		dev=$(basename "$(dirname "$(dirname "$port")")")
		num=$(basename "$port")
		echo "zdapl-$dev-$num u2.0 nonthreadsafe default $lib dapl.2.0 \"$dev $num\" \"\""
	done
} > "$tmp"
mv "$tmp" "$out"
