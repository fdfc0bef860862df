#!/bin/sh
# Issue 16's done-when test: the Debian packages built from a clean copy of
# HEAD (tools/deb_prepare.sh: git archive plus the jemalloc component, no
# network in the build), checked with lintian, installed on this machine,
# the stock dtest over zdapl-shm (server and client) and a consumer built
# with nothing but `pkg-config --cflags --libs zdapl` run with no
# DAT_OVERRIDE, then purged: /etc/dat.conf must be byte for byte as before
# and nothing of the packages left (dpkg -L empty, every file gone).
#
#   pkg_test.sh <source root> <build dir> <jemalloc source tree or ''> <pkg_consumer.c>
#
# Skips (77) when not root, without dpkg-buildpackage, debhelper or dtest,
# outside a git checkout, or when a zdapl package is installed already (an
# administrator's install is not ours to purge).  The install..purge window
# holds /tmp/dapl-clients.lock, so stock-client runs of others never see
# zdapl's lines in /etc/dat.conf half-way; /etc/dat.conf is restored from
# a copy if anything goes wrong.  Prints how long each step took.
set -u
src=$1
build=$2
jetree=$3
consumer=$4
PKGS="zdapl-utils libzdapl-dev libzdapl1"
CONF=/etc/dat.conf

skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "not root (installs packages)"
for p in dpkg-buildpackage dh dtest git pkg-config; do
	command -v $p >/dev/null 2>&1 || skip "$p missing"
done
git -C "$src" rev-parse --verify -q HEAD >/dev/null || skip "$src is not a git checkout"
for p in $PKGS; do
	if dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^[ihr]'; then
		skip "$p is installed already (not ours to purge)"
	fi
done
[ -f "$CONF" ] || skip "no $CONF (libdapl2)"

T=$(mktemp -d /tmp/zdapl-pkg.XXXXXX)
t0=$(date +%s)
lap() { t=$(date +%s); echo "== $1: $((t - t0)) s"; t0=$t; }
fail() { echo "FAIL: $*"; exit 1; }

# ---- build ------------------------------------------------------------------
# The jemalloc tarball the build tree's apt-get source left, else the one
# beside -Djemalloc_src's tree, else that tree itself (packed again).
je=$(ls "$build"/mem/jemalloc/work/src/jemalloc_*.orig.tar.bz2 2>/dev/null | head -n 1)
[ -n "$je" ] || [ -z "$jetree" ] || je=$(ls "$(dirname "$jetree")"/jemalloc_*.orig.tar.bz2 2>/dev/null | head -n 1)
[ -n "$je" ] || je=$jetree
tree=$(sh "$src/tools/deb_prepare.sh" --no-orig ${je:+--jemalloc "$je"} "$T") || fail "deb_prepare.sh"
lap "clean tree of HEAD ($(git -C "$src" rev-parse --short HEAD)) with the jemalloc component"
# nocheck: the suites ran from the tree already; noautodbgsym, parallel: speed.
if ! (cd "$tree" && DEB_BUILD_OPTIONS="nocheck noautodbgsym parallel=$(nproc)" \
	dpkg-buildpackage -us -uc -b >"$T/build.log" 2>&1); then
	tail -n 60 "$T/build.log"
	rm -rf "$T"
	fail "dpkg-buildpackage"
fi
lap "dpkg-buildpackage -us -uc -b"
changes=$(ls "$T"/zdapl_*.changes)
if command -v lintian >/dev/null 2>&1; then
	# Every tag of warning level or above fails (overrides in debian/
	# say why the remaining ones stand).
	lintian --pedantic --fail-on warning "$changes" >"$T/lintian.log" 2>&1
	lrc=$?
	grep -v '^N:' "$T/lintian.log" | grep -v 'running with root privileges'
	[ $lrc = 0 ] || { rm -rf "$T"; fail "lintian"; }
	lap "lintian"
else
	echo "lintian missing: not run"
fi

# ---- install .. purge, under the stock clients' lock --------------------------
# Whether the lock is held by a process we run under (`flock
# /tmp/dapl-clients.lock meson test ...`): taking it again would wait for
# ourselves.  /proc/locks names the holder's PID and the file's inode.
lock_held_by_ancestor() {
	ino=$(stat -c %i "$1") || return 1
	holders=$(awk -v ino="$ino" '$2 == "FLOCK" { n = split($6, a, ":"); if (a[n] == ino) print $5 }' /proc/locks)
	p=$$
	while [ -n "$p" ] && [ "$p" -gt 1 ]; do
		for h in $holders; do [ "$h" = "$p" ] && return 0; done
		p=$(awk '{ print $4 }' "/proc/$p/stat" 2>/dev/null)
	done
	return 1
}
exec 9>>/tmp/dapl-clients.lock
if lock_held_by_ancestor /tmp/dapl-clients.lock; then
	echo "/tmp/dapl-clients.lock: held by a process this test runs under"
else
	flock 9
fi
lap "waiting for /tmp/dapl-clients.lock"
sum_before=$(sha256sum <"$CONF")
mode_before=$(stat -c '%a %U %G' "$CONF")
cp -p "$CONF" "$T/dat.conf.before"
installed=0
cleanup() {
	if [ $installed = 1 ]; then
		dpkg --purge $PKGS >"$T/purge.log" 2>&1 || cat "$T/purge.log"
	fi
	if [ "$(sha256sum <"$CONF")" != "$sum_before" ]; then
		echo "restoring $CONF from the copy taken before"
		cp -p "$T/dat.conf.before" "$CONF"
	fi
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

debs=$(ls "$T"/libzdapl1_*.deb "$T"/libzdapl-dev_*.deb "$T"/zdapl-utils_*.deb)
installed=1
dpkg -i $debs >"$T/install.log" 2>&1 || { cat "$T/install.log"; fail "dpkg -i"; }
lap "dpkg -i"
grep -q '^# zdapl: begin' "$CONF" || fail "postinst registered nothing in $CONF"
env -u DAT_OVERRIDE zdapl_info list
env -u DAT_OVERRIDE zdapl_info >"$T/info" 2>&1 || { cat "$T/info"; fail "zdapl_info"; }
echo "ok - zdapl_info reports $(grep -c 'ia address' "$T/info") lines of $CONF"
if [ -e /usr/share/man/man7/zdapl.7.gz ]; then
	man -w zdapl_info >/dev/null 2>&1 && man -w 7 zdapl >/dev/null 2>&1 || fail "man pages not found by man"
	echo "ok - man finds zdapl(7) and zdapl_info(1)"
else
	# Container images often tell dpkg not to install man pages.
	grep -rqs 'path-exclude.*/usr/share/man' /etc/dpkg/dpkg.cfg.d/ || fail "zdapl.7.gz not installed"
	echo "ok - man pages not installed here (dpkg path-exclude)"
fi

zdapl-compare --help >/dev/null || fail "zdapl-compare --help"
echo "ok - zdapl-compare runs"
env -u DAT_OVERRIDE sh "$src/tests/interop/dtest.sh" - zdapl-shm 9>&- || fail "dtest -P zdapl-shm"
echo "ok - dtest -P zdapl-shm, server and client, no DAT_OVERRIDE"

flags=$(pkg-config --cflags --libs zdapl) || fail "pkg-config zdapl"
cc -o "$T/consumer" "$consumer" $flags || fail "consumer build with: $flags"
out=$(env -u DAT_OVERRIDE "$T/consumer" zdapl-shm 9>&- 2>&1)
[ "$out" = ok ] || fail "consumer: $out"
echo "ok - consumer built with '$flags' ran over zdapl-shm, no DAT_OVERRIDE"
lap "installed checks"

files=$(dpkg -L $PKGS 2>/dev/null | sort -u)
dpkg --purge $PKGS >"$T/purge.log" 2>&1 || { cat "$T/purge.log"; fail "dpkg --purge"; }
installed=0
lap "dpkg --purge"
[ "$(sha256sum <"$CONF")" = "$sum_before" ] || { diff "$T/dat.conf.before" "$CONF"; fail "$CONF changed"; }
[ "$(stat -c '%a %U %G' "$CONF")" = "$mode_before" ] || fail "$CONF mode/owner changed"
echo "ok - $CONF byte for byte as before (sha256), mode and owner too"
for p in $PKGS; do
	[ -z "$(dpkg -L "$p" 2>/dev/null)" ] || fail "dpkg -L $p still lists files"
done
echo "ok - dpkg -L lists nothing for $PKGS"
left=0
for f in $files; do
	[ -d "$f" ] && continue         # shared directories (/usr/bin ...) stay
	if [ -e "$f" ] || [ -L "$f" ]; then echo "left behind: $f"; left=1; fi
done
[ $left = 0 ] || fail "files left behind"
echo "ok - none of the $(echo "$files" | wc -l) paths the packages had is left (directories of others aside)"
ls /var/lib/dpkg/info/ | grep -q -e '^zdapl-utils\.' -e '^libzdapl' && fail "dpkg info files left"
echo "PASS"
