#!/bin/sh
# Prepares a clean Debian source tree of this repository's HEAD for
# dpkg-buildpackage, with the jemalloc component the build needs (network
# only here, if at all: the package build itself never fetches anything).
#
#   sh tools/deb_prepare.sh [--jemalloc TARBALL|DIR] [--no-orig] OUTDIR
#
# Writes into OUTDIR:
#   zdapl-<v>/                          git archive of HEAD, with jemalloc/
#                                       unpacked from the component
#   zdapl_<v>.orig.tar.gz               HEAD without debian/ (skipped with --no-orig)
#   zdapl_<v>.orig-jemalloc.tar.bz2     the component: Debian's jemalloc
#                                       upstream tarball, unchanged
# then: cd OUTDIR/zdapl-<v> && dpkg-buildpackage -us -uc      (source + binary)
#   or                          dpkg-buildpackage -us -uc -b   (binary only)
#
# The jemalloc tarball: --jemalloc (a jemalloc_*.orig.tar.* or an unpacked
# jemalloc-*/ tree), else the one a build directory's `apt-get source`
# left (build/mem/jemalloc/work/src), else `apt-get source --download-only
# jemalloc` into OUTDIR.
set -eu
cd "$(dirname "$0")/.."
root=$PWD
jemalloc=
orig=1
while [ $# -gt 1 ]; do
	case $1 in
	--jemalloc) jemalloc=$2; shift ;;
	--no-orig) orig=0 ;;
	*) echo "deb_prepare.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
	shift
done
[ $# = 1 ] || { echo "usage: sh tools/deb_prepare.sh [--jemalloc TARBALL|DIR] [--no-orig] OUTDIR" >&2; exit 2; }
mkdir -p "$1"
out=$(cd "$1" && pwd)

# 0.1.0-1 -> 0.1.0
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
upstream=${version%-*}
tree=$out/zdapl-$upstream
component=$out/zdapl_$upstream.orig-jemalloc.tar.bz2

if [ -z "$jemalloc" ]; then
	jemalloc=$(ls "$root"/build/mem/jemalloc/work/src/jemalloc_*.orig.tar.* 2>/dev/null | head -n 1 || true)
fi
if [ -z "$jemalloc" ]; then
	(cd "$out" && apt-get source --download-only -q jemalloc >"$out/apt-source.log" 2>&1) ||
		{ cat "$out/apt-source.log" >&2; echo "deb_prepare.sh: apt-get source jemalloc failed (a deb-src line? see mem/jemalloc/build.sh)" >&2; exit 1; }
	jemalloc=$(ls "$out"/jemalloc_*.orig.tar.* | head -n 1)
fi
case $jemalloc in
*.tar.bz2) cp "$jemalloc" "$component" ;;
*.tar.*) echo "deb_prepare.sh: $jemalloc: Debian's jemalloc tarball is .tar.bz2; recompress it" >&2; exit 1 ;;
*)      # an unpacked tree: the same bytes as its tarball, packed again
	[ -x "$jemalloc/configure" ] || { echo "deb_prepare.sh: $jemalloc is no jemalloc tree" >&2; exit 1; }
	tar -C "$(dirname "$jemalloc")" -cjf "$component" "$(basename "$jemalloc")" ;;
esac

rm -rf "$tree"
mkdir -p "$tree"
git archive --format=tar HEAD | tar -C "$tree" -xf -
if [ $orig = 1 ]; then
	git archive --format=tar --prefix="zdapl-$upstream/" HEAD -- . ':(exclude)debian' |
		gzip -n >"$out/zdapl_$upstream.orig.tar.gz"
fi
# What dpkg-source -x does with a component: unpacked into jemalloc/, its
# single top directory dropped.
mkdir -p "$tree/jemalloc"
tar -C "$tree/jemalloc" --strip-components=1 -xjf "$component"
echo "$tree"
