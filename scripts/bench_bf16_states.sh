#!/usr/bin/env bash
# bf16 optimizer states beside fp32 states (docs/benchmarks.md, "bf16 optimizer states"), in one
# run: the built-in demo (configs/demo.json, everything on NVMe) trained with fp32 states and with
# bf16.bf16_master_weights_and_grads + bf16_optimizer_states, their loss curves in one PNG; then
# `strata bench offload --states both`, the offloaded optimizer step with each, beside its stages
# alone.
#
#   scripts/bench_bf16_states.sh --path DIR [--strata BIN] [--params N]
#
# DIR (on the disk to measure) gets the swap files and the outputs: fp32/, bf16/ (train.txt,
# metrics.jsonl, loss.tsv), bf16_states_loss.png, offload.txt, offload.json.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

path=
params=256M
strata=$root/build/release/tools/strata
while [[ $# -gt 0 ]]; do
  case $1 in
    --path) path=$2; shift 2 ;;
    --params) params=$2; shift 2 ;;
    --strata) strata=$2; shift 2 ;;
    *) echo "bench_bf16_states: unknown argument $1 (expected --path DIR [--params N] [--strata BIN])" >&2; exit 2 ;;
  esac
done
if [[ -z $path || ! -d $path ]]; then
  echo "bench_bf16_states: --path DIR must name an existing directory on the disk to measure" >&2
  exit 2
fi
strata=$(cd "$(dirname "$strata")" && pwd)/$(basename "$strata")
cd "$path"

python3 - "$root/configs/demo.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
json.dump(config, open("demo_fp32.json", "w"), indent=1)
config["bf16"]["bf16_master_weights_and_grads"] = True
config["bf16"]["bf16_optimizer_states"] = True
json.dump(config, open("demo_bf16.json", "w"), indent=1)
PY
for states in fp32 bf16; do
  mkdir -p "$states"
  "$strata" train --config "demo_$states.json" --out "$states" --metrics "$states/metrics.jsonl" |
    tee "$states/train.txt"
done
gnuplot <<'GP'
set terminal pngcairo size 900,500
set output "bf16_states_loss.png"
set title "configs/demo.json, ZeRO-3 on NVMe: fp32 states vs bf16 master weights, gradients and moments"
set xlabel "step"
set ylabel "training loss (nats/token)"
set logscale y
set grid
plot "fp32/loss.tsv" using 1:2 with lines lw 2 title "fp32 master, gradients, moments", \
     "bf16/loss.tsv" using 1:2 with lines lw 2 title "bf16 master, gradients, moments"
GP
"$strata" bench offload --params "$params" --device nvme --path . --sub-group-size 16M --no-pin \
  --states both | tee offload.txt
"$strata" bench offload --params "$params" --device nvme --path . --sub-group-size 16M --no-pin \
  --states both --json >offload.json
grep -E "^trained|^throughput" fp32/train.txt bf16/train.txt
