# GB/s against queue depth, one line per block size, from the plot data that
# `strata io-bench --sweep` writes beside its CSV (<csv>.dat: one block per block size, headed by
# its name, rows "queue_depth gbps" with the best of threads/single_submit/overlap_events).
# strata io-bench runs this same program itself; to redraw by hand:
#   gnuplot -e "datafile='io-sweep.csv.dat'; pngfile='io-sweep.png'; plottitle='read'" \
#     scripts/plot_io_sweep.gp
if (!exists("datafile")) datafile = "sweep.csv.dat"
if (!exists("pngfile")) pngfile = "sweep.png"
if (!exists("plottitle")) plottitle = ""
set terminal pngcairo size 1000,640 noenhanced font ",11"
set output pngfile
set title "strata io-bench --sweep: GB/s against queue depth per block size".(plottitle eq "" ? "" : " (".plottitle.")")
set xlabel "queue depth (requests in flight per ring)"
set ylabel "GB/s (10^9 bytes/s)"
set logscale x 2
set xrange [0.8:160]
set xtics (1, 2, 4, 8, 16, 32, 64, 128)
set yrange [0:*]
set grid
set key outside right top title "block size"
# io-bench passes `blocks`; by hand, count them (gnuplot warns about the header lines).
if (!exists("blocks")) { stats datafile using 1 nooutput; blocks = STATS_blocks }
plot for [i=0:blocks-1] datafile index i using 1:2 with linespoints lw 2 pt 7 \
  title columnheader(1)
