#!/bin/sh
# dat.conf for the pollers suite: the three devices, tcp on loopback (with
# and without its progress thread).
# usage: gen_pollers_conf.sh <libzdapl path> <output>
set -eu
lib=$1
line() { echo "$1 u2.0 nonthreadsafe default $lib dapl.2.0 \"$2\" \"\""; }
{
	line zdapl-shm "shm"
	line zdapl-mlx5sim "mlx5sim"
	line zdapl-tcp-lo "tcp lo"
	line zdapl-tcp-lo-manual "tcp lo progress=manual"
} > "$2"
