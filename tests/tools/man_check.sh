#!/bin/sh
# Each man page renders without a warning: groff -ww -man -z (what man -l
# runs, all warnings on, output discarded); any line on stderr fails it.
#   man_check.sh <page>...
command -v groff >/dev/null 2>&1 || { echo "groff missing: skipped"; exit 77; }
rc=0
for page in "$@"; do
	err=$(LC_ALL=C.UTF-8 groff -ww -man -z "$page" 2>&1)
	if [ -n "$err" ] || ! grep -q '^\.TH ' "$page"; then
		echo "not ok - $page"
		printf '%s\n' "$err"
		rc=1
	else
		echo "ok - $page"
	fi
done
exit $rc
