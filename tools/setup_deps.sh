#!/bin/sh
# Installs the Debian 12 packages zdapl builds and tests with (idempotent:
# does nothing when all are present).  Run as root.  debhelper, lintian,
# groff-base, man-db and git: the Debian packages' build and test (suite
# pkg) and the man pages' check (suite tools).
set -eu
pkgs="gcc make pkg-config meson ninja-build dpkg-dev
libdapl-dev libdapl2 dapl2-utils
libibverbs-dev ibverbs-providers
liburcu-dev libcriterion-dev
iproute2 gnuplot-nox
clang libclang-rt-dev
debhelper lintian groff-base man-db git"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "zdapl: installing$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
