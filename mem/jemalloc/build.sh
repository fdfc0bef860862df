#!/bin/sh
# Build zdapl's private static jemalloc (see mem/jemalloc/meson.build).
#
#   build.sh <workdir> <jemalloc source tree or ''> <out archive> <out header>
#            [another build's workdir to copy a finished archive from]
#
# Debian's libjemalloc.so.2 uses initial-exec TLS, so a library linking it
# cannot be dlopened by libdat2.  We build Debian's jemalloc source package as
# a PIC archive with global-dynamic TLS, a private symbol prefix and hidden
# visibility, and link it into libzdapl.  Without a source tree we fetch one
# with `apt-get source` into <workdir>.  Quiet on success; on failure the
# build log is printed.  The finished archive is cached in <workdir>.
set -eu

work=$1
src=${2:-}
out_a=$3
out_h=$4
reuse=${5:-}

CC=${CC:-cc}
MAKE=${MAKE:-make}
jobs=$(nproc 2>/dev/null || echo 2)

# Everything that changes the result; a change rebuilds from scratch.
# narenas:1,tcache:false: zdapl only uses its own arena through explicit
# tcaches (mem/zd_pool.c), so the automatic arenas and per-thread caches
# would be dead weight in every thread that touches the pool.
# --disable-cache-oblivious: no extra page and random offset per large
# allocation; registered memory is precious and DMA buffers want exact layout.
conf_args="--disable-initial-exec-tls
--with-jemalloc-prefix=zd_je_
--with-private-namespace=zd_je_int_
--without-export
--disable-cxx
--disable-prof
--disable-shared
--disable-doc
--disable-libdl
--disable-cache-oblivious
--with-malloc-conf=narenas:1,tcache:false"
# -g1: line tables for backtraces without -g3's 40 MB of macro info.
cflags="-fPIC -fvisibility=hidden -g1"

mkdir -p "$work"
work=$(cd "$work" && pwd)
log=$work/build.log
obj=$work/obj
stamp=$work/stamp

fail() {
	echo "zdapl: building the private jemalloc failed: $*" >&2
	if [ -s "$log" ]; then
		echo "---- $log (last 200 lines) ----" >&2
		tail -n 200 "$log" >&2
	fi
	exit 1
}

run() {
	echo "+ $*" >>"$log"
	"$@" >>"$log" 2>&1
}

want="$src|$CC|$cflags|$conf_args"

# Cached: the archive and header already built with the same settings.
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] &&
   [ -f "$obj/lib/libjemalloc_pic.a" ] &&
   [ -f "$obj/include/jemalloc/jemalloc.h" ]; then
	cp "$obj/lib/libjemalloc_pic.a" "$out_a"
	cp "$obj/include/jemalloc/jemalloc.h" "$out_h"
	exit 0
fi

# Another build's archive, built by the same compiler with the same flags
# and options (its stamp says so, whatever source tree it came from): the
# sanitizer builds take build/'s instead of configuring and compiling the
# same code again (sanitizer flags never reach jemalloc: CC is the bare
# compiler).
if [ -n "$reuse" ] && [ -f "$reuse/stamp" ] &&
   [ "${want#*|}" = "$(sed 's/^[^|]*|//' "$reuse/stamp")" ] &&
   [ -f "$reuse/obj/lib/libjemalloc_pic.a" ] &&
   [ -f "$reuse/obj/include/jemalloc/jemalloc.h" ]; then
	cp "$reuse/obj/lib/libjemalloc_pic.a" "$out_a"
	cp "$reuse/obj/include/jemalloc/jemalloc.h" "$out_h"
	exit 0
fi

: >"$log"

have_deb_src() {
	grep -Eqs '^[[:space:]]*(deb-src[[:space:]]|Types:.*deb-src)' \
		/etc/apt/sources.list /etc/apt/sources.list.d/*.list \
		/etc/apt/sources.list.d/*.sources
}

# Mirror the host's binary entries as source entries (deb822 or one-line).
add_deb_src() {
	[ "$(id -u)" = 0 ] || fail "no deb-src entry in apt sources and not root to add one (or pass -Djemalloc_src=<tree>)"
	if [ -f /etc/apt/sources.list.d/debian.sources ]; then
		sed 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
			>/etc/apt/sources.list.d/zdapl-src.sources
	elif [ -f /etc/apt/sources.list ]; then
		sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' /etc/apt/sources.list \
			>/etc/apt/sources.list.d/zdapl-src.list
	else
		fail "cannot find apt sources to derive a deb-src entry from"
	fi
}

# The unpacked jemalloc-*/ tree under $1, if any.
unpacked_tree() {
	for d in "$1"/jemalloc-*/; do
		if [ -x "$d/configure" ]; then
			echo "${d%/}"
			return
		fi
	done
}

fetch_source() {
	dl=$work/src
	src=$(unpacked_tree "$dl")
	[ -z "$src" ] || return 0
	rm -rf "$dl"
	mkdir -p "$dl"
	if ! command -v dpkg-source >/dev/null 2>&1; then
		[ "$(id -u)" = 0 ] || fail "dpkg-dev is needed for apt-get source"
		run apt-get install -y --no-install-recommends dpkg-dev ||
			fail "apt-get install dpkg-dev"
	fi
	have_deb_src || add_deb_src
	# The Sources index may be missing or stale even with a deb-src line.
	if ! (cd "$dl" && run apt-get source -q jemalloc); then
		[ "$(id -u)" = 0 ] || fail "apt-get source jemalloc"
		run apt-get update -q || fail "apt-get update"
		(cd "$dl" && run apt-get source -q jemalloc) ||
			fail "apt-get source jemalloc"
	fi
	src=$(unpacked_tree "$dl")
	[ -n "$src" ] || fail "apt-get source left no jemalloc-*/ tree"
}

if [ -z "$src" ]; then
	fetch_source
fi
src=$(cd "$src" 2>/dev/null && pwd) || fail "no such source tree: $2"
command -v "$MAKE" >/dev/null 2>&1 || fail "'$MAKE' not found (apt-get install make)"
[ -x "$src/configure" ] || fail "$src has no configure script"

# Out-of-tree build: the source tree (maybe the user's) stays untouched.
rm -rf "$obj" "$stamp"
mkdir -p "$obj"
# shellcheck disable=SC2086 # conf_args is a word list on purpose
if ! (cd "$obj" && run env CC="$CC" EXTRA_CFLAGS="$cflags" "$src/configure" $conf_args); then
	[ ! -f "$obj/config.log" ] || tail -n 100 "$obj/config.log" >>"$log"
	fail "configure"
fi
(cd "$obj" && run "$MAKE" -j"$jobs" lib/libjemalloc_pic.a) || fail "make"

printf '%s' "$want" >"$stamp"
cp "$obj/lib/libjemalloc_pic.a" "$out_a"
cp "$obj/include/jemalloc/jemalloc.h" "$out_h"
