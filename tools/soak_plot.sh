#!/bin/sh
# Plots a soak run (tools/soak.sh): <out>/samples.csv and <out>/rate.csv
# into <out>/soak.png: the long-lived servers' resident memory,
# descriptors and threads, and the validated transaction tests' rate,
# over time, one line per device.  Needs gnuplot.
#   tools/soak_plot.sh <out dir> [png]
set -eu
out=$1
png=${2:-$out/soak.png}
command -v gnuplot >/dev/null || { echo "soak_plot: gnuplot not installed"; exit 1; }
devs=$(awk -F, 'NR > 1 && !s[$2]++ { printf "%s ", $2 }' "$out/samples.csv")
plot() { # column scale
	sep=""
	for d in $devs; do
		printf '%s"< grep ,%s, %s" using 1:($%s / %s) with lines lw 2 title "%s"' \
			"$sep" "$d" "$3" "$1" "$2" "$d"
		sep=", "
	done
}
gnuplot <<GP
set terminal pngcairo size 1000,1000 font ",10"
set output "$png"
set datafile separator ","
set key outside right top
set multiplot layout 4,1 title "zdapl soak: long-lived dapltest servers (-T S), one per device"
set xlabel "seconds"
set ylabel "RSS (MiB)"
set yrange [0:*]
plot $(plot 3 1024.0 "$out/samples.csv")
set ylabel "open descriptors"
plot $(plot 4 1 "$out/samples.csv")
set ylabel "threads"
plot $(plot 5 1 "$out/samples.csv")
set ylabel "dapltest -T T -V (WQE/s)"
plot $(plot 3 1 "$out/rate.csv" | sed 's/with lines lw 2/with linespoints pt 7 ps 0.5/g')
unset multiplot
GP
