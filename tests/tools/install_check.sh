#!/bin/sh
# meson install into a scratch DESTDIR: every file an installation must
# have is there, and a consumer built with nothing but
# `pkg-config --cflags --libs zdapl` (PKG_CONFIG_SYSROOT_DIR pointing into
# the DESTDIR) calls zdapl_mem_alloc and opens zdapl-shm through libdat2,
# with the dat.conf the installed zdapl_info --datconf writes.
#   install_check.sh <build dir> <pkg_consumer.c>
set -u
build=$1
consumer=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
command -v pkg-config >/dev/null 2>&1 || { echo "pkg-config missing: skipped"; exit 77; }
D=$T/root
meson install -C "$build" --destdir "$D" --no-rebuild --quiet >"$T/install.log" 2>&1 ||
	{ cat "$T/install.log"; echo "not ok - meson install"; exit 1; }
prefix=$(meson introspect "$build" --buildoptions | python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print(o["prefix"], o["prefix"] + "/" + o["libdir"], o["prefix"] + "/" + o["bindir"], o["prefix"] + "/" + o["mandir"])')
set -- $prefix
P=$1 LIBDIR=$2 BINDIR=$3 MANDIR=$4
rc=0
for f in "$LIBDIR/libzdapl.so.1" "$LIBDIR/libzdapl.so" "$P/include/zdapl/zdapl.h" \
	"$LIBDIR/pkgconfig/zdapl.pc" "$BINDIR/zdapl_info" "$BINDIR/zd_write_lat" \
	"$BINDIR/zd_floor" "$BINDIR/zdapl-compare" "$P/share/zdapl/compare_report.py" \
	"$MANDIR/man7/zdapl.7" "$MANDIR/man1/zdapl_info.1" "$MANDIR/man1/zd_perftest.1" \
	"$MANDIR/man1/zd_write_lat.1" "$MANDIR/man1/zd_floor.1"; do
	if [ -e "$D$f" ]; then echo "ok - $f"; else echo "not ok - $f missing"; rc=1; fi
done
soname=$(objdump -p "$D$LIBDIR/libzdapl.so.1" | awk '$1 == "SONAME" { print $2 }')
if [ "$soname" = libzdapl.so.1 ] && [ "$(readlink "$D$LIBDIR/libzdapl.so")" = libzdapl.so.1 ]; then
	echo "ok - soname libzdapl.so.1, libzdapl.so -> libzdapl.so.1"
else
	echo "not ok - soname '$soname', libzdapl.so -> $(readlink "$D$LIBDIR/libzdapl.so")"; rc=1
fi
# What the library exports: zdapl.h's calls and libdat2's entry points only.
extra=$(nm -D --defined-only "$D$LIBDIR/libzdapl.so.1" | awk '{ print $3 }' |
	grep -v -x -e zdapl_mem_alloc -e zdapl_mem_alloc_aligned -e zdapl_mem_free \
		-e dat_provider_init -e dat_provider_fini -e '_init' -e '_fini')
if [ -z "$extra" ]; then echo "ok - exports"; else echo "not ok - also exports: $extra"; rc=1; fi
export PKG_CONFIG_PATH="$D$LIBDIR/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$D"
flags=$(pkg-config --cflags --libs zdapl) || { echo "not ok - pkg-config zdapl"; exit 1; }
# shellcheck disable=SC2086 # flags is a word list
if ${CC:-cc} -o "$T/consumer" "$consumer" $flags 2>"$T/cc.log"; then
	echo "ok - consumer built with: $flags"
else
	cat "$T/cc.log"; echo "not ok - consumer build"; exit 1
fi
"$D$BINDIR/zdapl_info" --datconf --lib "$D$LIBDIR/libzdapl.so.1" shm >"$T/dat.conf" || rc=1
out=$(LD_LIBRARY_PATH="$D$LIBDIR" DAT_OVERRIDE="$T/dat.conf" "$T/consumer" zdapl-shm 2>&1)
if [ "$out" = ok ]; then echo "ok - consumer ran over zdapl-shm"; else echo "not ok - consumer: $out"; rc=1; fi
LD_LIBRARY_PATH="$D$LIBDIR" DAT_OVERRIDE="$T/dat.conf" "$D$BINDIR/zdapl_info" >"$T/info" 2>&1
if grep -q 'ia address' "$T/info"; then echo "ok - installed zdapl_info reports"; else cat "$T/info"; echo "not ok - zdapl_info"; rc=1; fi
exit $rc
