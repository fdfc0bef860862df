#!/bin/sh
# dat.conf for the core suites: the real devices plus deliberately broken
# ia_params, each of which dat_ia_open must refuse cleanly.
# usage: gen_test_conf.sh <libzdapl path> <output>
set -eu
lib=$1
line() { echo "$1 u2.0 nonthreadsafe default $lib dapl.2.0 \"$2\" \"\""; }
{
	line zdapl-shm "shm"
	line zdapl-tcp-lo "tcp lo"
	line zdapl-tcp-lo-manual "tcp lo progress=manual"
	line zdapl-mlx5sim "mlx5sim"
	line zdapl-bad-device "bogus"
	line zdapl-bad-tcp-if "tcp nosuchif0"
	line zdapl-bad-tcp-noarg "tcp"
	line zdapl-bad-shm-args "shm lo extra"
	line zdapl-bad-empty ""
	line zdapl-bad-long "shm aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
} > "$2"
