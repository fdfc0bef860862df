#!/bin/sh
# dat.conf for the tcp suite: zdapl-tcp on loopback with each progress
# option, and an unknown option dat_ia_open must refuse.
# usage: gen_tcp_conf.sh <libzdapl path> <output>
set -eu
lib=$1
line() { echo "$1 u2.0 nonthreadsafe default $lib dapl.2.0 \"$2\" \"\""; }
{
	line zdapl-tcp-lo "tcp lo"
	line zdapl-tcp-lo-manual "tcp lo progress=manual"
	line zdapl-tcp-lo-thread "tcp lo progress=thread"
	line zdapl-tcp-lo-badopt "tcp lo progress=sometimes"
} > "$2"
