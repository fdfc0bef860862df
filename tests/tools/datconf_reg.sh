#!/bin/sh
# zdapl_info register/unregister/list on scratch dat.conf files: adding
# twice, removing twice, foreign lines and comments kept byte for byte (no
# final newline either, as Debian's /etc/dat.conf), a read-only file, the
# malformed files it must refuse, mode and owner kept, a symlink, dry run,
# a name another line already uses, and concurrent invocations (one lock).
#   datconf_reg.sh <zdapl_info>
set -u
Z=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
no() { n=$((n + 1)); echo "not ok $n - $*"; fails=$((fails + 1)); }
# rc and stderr of the last command were $1 and $2, wanted $3 and /$4/.
failed_with() { [ "$1" = "$3" ] && printf '%s\n' "$2" | grep -q "$4"; }
check() { # description, command...
	d=$1; shift
	if "$@"; then ok "$d"; else no "$d"; fi
}
LIB=/opt/zdapl/lib/libzdapl.so.1
reg() { "$Z" register --lib "$LIB" -q "$@"; }
unreg() { "$Z" unregister -q "$@"; }
# The administrator's file: comments, blanks, another provider's entries
# (a quoted field with a blank and an escaped quote, a trailing comment,
# tabs) and no newline at the end.
foreign() {
	printf '# DAT v2.0\n#\n\n  # indented comment\nofa-v2-ib0 u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 "ib0 0" ""\n'
	printf 'other\tu2.0\tnonthreadsafe default /x/libo.so dapl.2.0 "say \\"hi\\" there" "" # trailing\n'
	printf 'last u2.0 nonthreadsafe default libl.so dapl.2.0 "l 1" ""'
}
# Offline sysfs: one mlx5 device with two ports.
export ZDAPL_SYSFS_IB=$T/sys
mkdir -p "$T/sys/mlx5_0/ports/1" "$T/sys/mlx5_0/ports/2"

# --- add twice, remove twice ------------------------------------------------
F=$T/dat.conf
foreign >"$F"; cp "$F" "$T/orig"
check "register succeeds" reg -f "$F"
check "the original bytes stay in front" sh -c "head -c $(wc -c <"$T/orig") '$F' | cmp -s - '$T/orig'"
check "one line per device (3 software + 2 mlx5 ports)" [ "$("$Z" list -f "$F" | wc -l)" = 5 ]
check "lines name --lib" grep -q "^zdapl-mlx5_0-2 u2.0 nonthreadsafe default $LIB dapl.2.0 \"mlx5_0 2\" \"\"\$" "$F"
cp "$F" "$T/once"
check "register again succeeds" reg -f "$F"
check "register again changes nothing" cmp -s "$F" "$T/once"
check "libdat2's grammar: zdapl_info reads the file back" "$Z" list -f "$F" >/dev/null
check "unregister one device" unreg -f "$F" mlx5_0-1
check "its line went" sh -c "! grep -q '^zdapl-mlx5_0-1 ' '$F'"
check "register one device back" reg -f "$F" zdapl-mlx5_0-1
check "unregister succeeds" unreg -f "$F"
check "unregister gives back the original file byte for byte" cmp -s "$F" "$T/orig"
check "unregister again succeeds" unreg -f "$F"
check "unregister again changes nothing" cmp -s "$F" "$T/orig"

# --- lines appended after the block survive its removal ----------------------
foreign >"$F"; reg -f "$F"
printf 'after u2.0 nonthreadsafe default liba.so dapl.2.0 "a" ""\n' >>"$F"
unreg -f "$F"
check "a line added after the block is kept" grep -q '^after ' "$F"
check "and the file still parses" "$Z" list -f "$F"

# --- dry run ----------------------------------------------------------------
foreign >"$F"
out=$("$Z" register -n --lib "$LIB" -f "$F")
check "dry run writes nothing" cmp -s "$F" "$T/orig"
check "dry run shows the lines it would add" failed_with 0 "$out" 0 '^+zdapl-shm ' 

# --- mode, owner, symlink ---------------------------------------------------
foreign >"$F"; chmod 0640 "$F"
if [ "$(id -u)" = 0 ]; then chown nobody:nogroup "$F"; fi
before=$(stat -c '%a %U %G' "$F")
reg -f "$F"
check "mode and owner kept ($before)" [ "$(stat -c '%a %U %G' "$F")" = "$before" ]
chmod 0644 "$F"
ln -s dat.conf "$T/link.conf"
reg -f "$T/link.conf"
check "a symlink stays a symlink, its target is edited" sh -c "[ -L '$T/link.conf' ] && grep -q '^zdapl-shm ' '$F'"
unreg -f "$T/link.conf"
check "no temporary file left behind" [ "$(ls -A "$T" | grep -c zdapl-)" = 0 ]

# --- refusals: the file stays as it was ---------------------------------------
refused() { # description, expected stderr pattern, file contents (printf format)
	printf "$3" >"$F"; cp "$F" "$T/bad"
	err=$(reg -f "$F" 2>&1 >/dev/null); rc=$?
	if [ $rc = 1 ] && cmp -s "$F" "$T/bad" && echo "$err" | grep -q "$2"; then
		ok "refused: $1"
	else
		no "refused: $1 (rc $rc, stderr: $err)"
	fi
}
refused "7 fields" "line 2: 7 fields" '# c\nx u2.0 nonthreadsafe default l.so dapl.2.0 "p"\n'
refused "9 fields" "line 1: more than 8" 'x u2.0 nonthreadsafe default l.so dapl.2.0 "p" "" extra\n'
refused "an open quote" "line 1: a quote that is not closed" 'x u2.0 nonthreadsafe default l.so dapl.2.0 "p ""\n'
refused "a NUL byte" "line 1: a NUL byte" 'x u2.0 \000 nonthreadsafe\n'
refused "a block not closed" "not closed" '# zdapl: begin of the lines zdapl_info register manages (see zdapl_info(1)); edit only outside this block\n'
refused "an end without begin" "end marker without" '# zdapl: end\n'
refused "a damaged marker" "damaged zdapl marker" '# zdapl: begin of something else\n'
refused "a foreign line inside the block" "not a zdapl entry" '# zdapl: begin of the lines zdapl_info register manages (see zdapl_info(1)); edit only outside this block\nx u2.0 nonthreadsafe default l.so dapl.2.0 "p" ""\n# zdapl: end\n'
refused "a name another line uses" "line 1 already names zdapl-shm" 'zdapl-shm u2.0 nonthreadsafe default /else/libzdapl.so dapl.2.0 "shm" ""\n'

foreign >"$F"; chmod 0444 "$F"
err=$(reg -f "$F" 2>&1); rc=$?
check "a read-only file (0444) is refused, even for root" failed_with $rc "$err" 1 'read-only' 
check "and left as it was" cmp -s "$F" "$T/orig"
chmod 0644 "$F"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	chmod 0755 "$T"; chmod 0644 "$F"
	err=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$Z" register -q -f "$F" 2>&1); rc=$?
	check "a file the caller cannot write is refused" failed_with $rc "$err" 1 'Permission denied' 
	check "and left as it was" cmp -s "$F" "$T/orig"
fi
check "a missing file is an error" sh -c "! '$Z' register -q -f '$T/none' 2>/dev/null"
check "an unknown device is an error" sh -c "! '$Z' register -q -f '$F' nosuch 2>/dev/null"
"$Z" register --bogus >/dev/null 2>&1
check "bad usage exits 2" [ $? = 2 ]

# --- concurrent invocations ---------------------------------------------------
foreign >"$F"
flock "$F" sleep 2 &
holder=$!
sleep 0.3
err=$(reg -f "$F" --lock-timeout 0.3 2>&1); rc=$?
check "a held lock times out (exit 1)" failed_with $rc "$err" 1 'locked by another process'
check "and leaves the file unchanged" cmp -s "$F" "$T/orig"
reg -f "$F" 2>/dev/null
rc=$?
wait $holder
check "a writer waits for the lock, then writes" sh -c "[ $rc = 0 ] && grep -q '^zdapl-shm ' '$F'"
foreign >"$F"
pids=
for d in shm tcp mlx5sim mlx5_0-1 mlx5_0-2 shm tcp mlx5sim; do
	reg -f "$F" "$d" 2>/dev/null &
	pids="$pids $!"
done
all=0
for p in $pids; do wait "$p" || all=1; done
check "8 concurrent registrations all succeed" [ $all = 0 ]
check "none lost (5 lines, one block)" sh -c "[ \$('$Z' list -f '$F' | wc -l) = 5 ] && [ \$(grep -c '^# zdapl: begin' '$F') = 1 ]"
unreg -f "$F"
check "and removal restores the file" cmp -s "$F" "$T/orig"

# --- the report reads as libdat2 does: a line it skips is no error ----------
printf 'bad line\n' >"$F"
"$Z" --datconf --lib "$LIB" shm >>"$F"
out=$(DAT_OVERRIDE=$F "$Z" 2>&1); rc=$?
check "the report skips an unparsable line and opens the rest (exit 1: the library is not there)" \
	failed_with $rc "$out" 1 "zdapl-shm: dat_ia_open"
printf '# only comments\n' >"$F"
out=$(DAT_OVERRIDE=$F "$Z" 2>&1); rc=$?
check "the report: no zdapl line is exit 1 with a message" failed_with $rc "$out" 1 "no zdapl line"
out=$(DAT_OVERRIDE=$T/none "$Z" 2>&1); rc=$?
check "the report: a missing dat.conf is exit 1 with a message" failed_with $rc "$out" 1 "No such file"

# --- --datconf ----------------------------------------------------------------
check "--datconf: one line per device" [ "$("$Z" --datconf --lib "$LIB" | wc -l)" = 5 ]
check "--datconf names a device" sh -c "'$Z' --datconf --lib '$LIB' mlx5_0-2 | grep -q '\"mlx5_0 2\"'"
check "--datconf: an unknown device is an error" sh -c "! '$Z' --datconf nosuch 2>/dev/null"

echo "1..$n"
[ $fails = 0 ]
