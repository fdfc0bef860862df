#!/bin/sh
# The whole test suite, setup included: packages, a release-style build in
# build/ with every suite (unit, core API through libdat2, interop with the
# Debian dapl2-utils clients), then the unit and core suites again under
# AddressSanitizer + UndefinedBehaviorSanitizer in build-asan/, the
# ThreadSanitizer stress programs in build-tsan/ (tests/tsan), then about
# 60 s of libFuzzer on the wire parsers (tools/run_fuzz.sh, one line in the
# totals), then a 2-minute soak on every device (tools/soak.sh, one line).
# Ends with "N passed, N failed" and exits non-zero on any failure.
set -u
cd "$(dirname "$0")/.."
t_start=$(date +%s)
sh tools/setup_deps.sh || exit 1

werror=""
[ "${CI:-}" = "true" ] && werror="-Dwerror=true"

# Each step says when it starts (seconds since the run began): where CI's
# time goes.
step() { echo; echo "==== $* (at $(($(date +%s) - t_start)) s)"; }

configure() { # dir, extra args...
	dir=$1
	shift
	if [ -f "$dir/build.ninja" ]; then
		meson configure "$dir" "$@" >/dev/null
	else
		meson setup "$dir" "$@" >/dev/null
	fi
}

passed=0 failed=0
count() { # testlog.json -> add to totals
	p=$(grep -c '"result": "OK"' "$1" 2>/dev/null || true)
	f=$(grep -c '"result": "\(FAIL\|TIMEOUT\|ERROR\|UNEXPECTEDPASS\)"' "$1" 2>/dev/null || true)
	passed=$((passed + p))
	failed=$((failed + f))
}

step "build (build/)"
configure build $werror || exit 1
meson compile -C build || exit 1
step "tests (build/)"
meson test -C build --print-errorlogs
rc1=$?
count build/meson-logs/testlog.json

step "build with ASan+UBSan (build-asan/)"
# build/'s private jemalloc serves both sanitizer builds (mem/jemalloc:
# the same compiler and flags; sanitizers never reach it).
jereuse="-Djemalloc_reuse=build"
jesrc=$(ls -d "$PWD"/build/mem/jemalloc/work/src/jemalloc-*/ 2>/dev/null | head -n 1)
configure build-asan $werror -Db_sanitize=address,undefined -Db_lundef=false $jereuse \
	${jesrc:+-Djemalloc_src=$jesrc} || exit 1
meson compile -C build-asan || exit 1
step "unit and core suites under ASan+UBSan"
# The interop suite runs uninstrumented Debian binaries; it ran above, as
# did pkg (the Debian packages: built from the tree, not from this build).
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	meson test -C build-asan --print-errorlogs --no-suite interop --no-suite bench --no-suite pkg
rc2=$?
count build-asan/meson-logs/testlog.json

step "build with ThreadSanitizer (build-tsan/)"
# Only the library and the plain stress programs (tests/tsan, evd_stress):
# Criterion cannot run under TSan.  Any report fails its test (exit 66).
configure build-tsan $werror -Db_sanitize=thread $jereuse ${jesrc:+-Djemalloc_src=$jesrc} || exit 1
meson compile -C build-tsan || exit 1
step "stress programs under ThreadSanitizer"
meson test -C build-tsan --print-errorlogs --suite tsan --suite evd
rc4=$?
count build-tsan/meson-logs/testlog.json

step "fuzzing the wire parsers (tools/run_fuzz.sh, about 60 s)"
ZD_FUZZ_DIR=build/fuzz sh tools/run_fuzz.sh
rc3=$?
if [ $rc3 -eq 0 ]; then
	passed=$((passed + 1))
	echo "fuzz: OK"
else
	failed=$((failed + 1))
	echo "fuzz: FAIL"
fi

step "soak (tools/soak.sh 2: every device, long-lived servers flat)"
sh tools/soak.sh 2 build/soak
rc5=$?
case $rc5 in
0) passed=$((passed + 1)); echo "soak: OK" ;;
77) rc5=0; echo "soak: SKIP" ;;
*) failed=$((failed + 1)); echo "soak: FAIL" ;;
esac

echo
echo "$passed passed, $failed failed in $(($(date +%s) - t_start)) s"
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ] && [ $rc4 -eq 0 ] && [ $rc5 -eq 0 ] &&
	[ "$failed" -eq 0 ]
