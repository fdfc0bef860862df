#!/bin/sh
# libFuzzer runs of the wire parsers (tests/fuzz): builds each harness with
# clang -fsanitize=fuzzer,address,undefined straight from the few sources
# it needs (no meson), then fuzzes it for a bounded time starting from its
# committed corpus tests/fuzz/corpus/<harness>/.  Fails on any crash,
# sanitizer report, leak or timeout; the input that did it is left in the
# work directory (crash-*, leak-*, timeout-*) to add to the corpus.
#
#   tools/run_fuzz.sh [seconds per harness] [harness...]
#
# Default: 25 s for each of fuzz_tcp_frame, fuzz_cm_frame and fuzz_tcp_ud
# (CI).  Work directory: $ZD_FUZZ_DIR (default build/fuzz); new inputs
# libFuzzer finds go to <work>/corpus/<harness>, never into the committed
# corpus.
# Without clang or its libFuzzer runtime it says so and exits 0.
set -u
cd "$(dirname "$0")/.."

secs=${1:-25}
[ $# -gt 0 ] && shift
harnesses=${*:-fuzz_tcp_frame fuzz_cm_frame fuzz_tcp_ud}
work=${ZD_FUZZ_DIR:-build/fuzz}

cc=""
for c in clang clang-14; do
	if command -v "$c" >/dev/null 2>&1; then
		cc=$c
		break
	fi
done
if [ -z "$cc" ]; then
	echo "run_fuzz: clang not installed, fuzzing skipped (apt-get install clang)"
	exit 0
fi
mkdir -p "$work" || exit 1
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' \
	>"$work/probe.c"
if ! "$cc" -fsanitize=fuzzer "$work/probe.c" -o "$work/probe" >/dev/null 2>&1; then
	echo "run_fuzz: $cc has no libFuzzer runtime (libclang-rt-dev), fuzzing skipped"
	exit 0
fi

cflags="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
-std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers -Werror
-D_GNU_SOURCE -DDAT_EXTENSIONS -I. -Iinclude"

sources() { # harness -> the sources it is built from
	case $1 in
	fuzz_tcp_frame) echo tests/fuzz/fuzz_tcp_frame.c hw/tcp/zd_tcp_wire.c ;;
	fuzz_cm_frame) echo tests/fuzz/fuzz_cm_frame.c ;;
	fuzz_tcp_ud) echo tests/fuzz/fuzz_tcp_ud.c hw/tcp/zd_tcp_ud_wire.c ;;
	*) return 1 ;;
	esac
}

rc=0
for h in $harnesses; do
	src=$(sources "$h") || { echo "run_fuzz: no harness $h"; rc=1; continue; }
	echo "run_fuzz: $h: building"
	# shellcheck disable=SC2086
	if ! "$cc" $cflags $src -o "$work/$h"; then
		echo "run_fuzz: $h: FAILED to build"
		rc=1
		continue
	fi
	mkdir -p "$work/corpus/$h" "$work/artifacts/$h"
	echo "run_fuzz: $h: fuzzing for ${secs}s from tests/fuzz/corpus/$h"
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
	UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
		"$work/$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
		-max_len=4096 -print_final_stats=1 \
		-artifact_prefix="$work/artifacts/$h/" \
		"$work/corpus/$h" "tests/fuzz/corpus/$h" >"$work/$h.log" 2>&1
	r=$?
	grep -E '^(stat::number_of_executed_units|stat::new_units_added)|^Done ' "$work/$h.log"
	if [ $r -ne 0 ]; then
		echo "run_fuzz: $h: FAILED (exit $r), log: $work/$h.log, input: $(ls "$work/artifacts/$h/")"
		grep -E 'ERROR|SUMMARY|runtime error|Assertion' "$work/$h.log" | head -5
		rc=1
	else
		echo "run_fuzz: $h: ok"
	fi
done
exit $rc
