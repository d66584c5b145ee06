# Several runs' loss curves in one PNG, from the loss.tsv that `strata train --out DIR` writes
# (columns: step, train loss, validation loss or NaN). scripts/gpu_check.sh plot draws the demo
# trained on the CUDA device beside the same run on the host device with it:
#   gnuplot -e "tables='cuda/loss.tsv host/loss.tsv'; titles='CUDA host'; pngfile='demo.png'" \
#     scripts/plot_losses.gp
if (!exists("tables")) tables = "loss.tsv"
if (!exists("titles")) titles = tables
if (!exists("pngfile")) pngfile = "losses.png"
if (!exists("plottitle")) plottitle = "strata train: loss"
set terminal pngcairo size 900,560 noenhanced
set output pngfile
set title plottitle
set xlabel "step"
set ylabel "loss (nats/token)"
set grid
set key top right
set datafile missing "NaN"
plot for [i=1:words(tables)] word(tables, i) using 1:2 with lines lw 2 dt i title word(titles, i)." train", \
     for [i=1:words(tables)] word(tables, i) using 1:3 with points pt 7 ps 1.2 title word(titles, i)." validation"
