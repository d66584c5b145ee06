#!/usr/bin/env bash
# The built-in demo (configs/demo.json) computed in bf16, as its config asks, beside the same run
# computed in fp32 (the bf16 section turned off), their loss curves in one PNG
# (docs/benchmarks.md, "Compute precision"). The demo's device is the host backend here, or a GPU
# where the build has one; the comparison holds for either.
#
#   scripts/bench_compute_precision.sh --path DIR [--strata BIN] [--steps N]
#
# DIR gets the swap files and the outputs: bf16/ and fp32/ (train.txt, metrics.jsonl, loss.tsv),
# compute_precision_loss.png, and compare.txt: each run's last training and validation losses and
# the largest gap between the two curves' 20-step means, relative to the fp32 curve.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

path=
steps=300
strata=$root/build/release/tools/strata
while [[ $# -gt 0 ]]; do
  case $1 in
    --path) path=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --strata) strata=$2; shift 2 ;;
    *) echo "bench_compute_precision: unknown argument $1 (expected --path DIR [--steps N] [--strata BIN])" >&2; exit 2 ;;
  esac
done
if [[ -z $path || ! -d $path ]]; then
  echo "bench_compute_precision: --path DIR must name an existing directory" >&2
  exit 2
fi
strata=$(cd "$(dirname "$strata")" && pwd)/$(basename "$strata")
cd "$path"

python3 - "$root/configs/demo.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
json.dump(config, open("demo_bf16.json", "w"), indent=1)
config["bf16"]["enabled"] = False
json.dump(config, open("demo_fp32.json", "w"), indent=1)
PY
for compute in bf16 fp32; do
  mkdir -p "$compute"
  "$strata" train --config "demo_$compute.json" --steps "$steps" --out "$compute" \
    --metrics "$compute/metrics.jsonl" | tee "$compute/train.txt"
done

python3 - <<'PY' | tee compare.txt
import math

def read(table):
    rows = [line.split("\t") for line in open(table) if line[0].isdigit()]
    train = [float(row[1]) for row in rows]
    validation = [float(row[2]) for row in rows if row[2].strip().lower() != "nan"]
    return train, validation

bf16, bf16_val = read("bf16/loss.tsv")
fp32, fp32_val = read("fp32/loss.tsv")
window = 20
gap = max(abs(sum(bf16[i:i + window]) - sum(fp32[i:i + window])) / sum(fp32[i:i + window])
          for i in range(0, len(fp32) - window + 1, window))
print(f"bf16 compute: last loss {bf16[-1]:.4f}, validation {bf16_val[-1]:.4f}")
print(f"fp32 compute: last loss {fp32[-1]:.4f}, validation {fp32_val[-1]:.4f}")
print(f"largest gap between the curves' {window}-step means: {gap:.2%} of fp32's")
print(f"validation: bf16 {(bf16_val[-1] - fp32_val[-1]) / fp32_val[-1]:+.2%} against fp32")
PY
gnuplot -e "tables='bf16/loss.tsv fp32/loss.tsv'; titles='bf16-compute fp32-compute'; pngfile='compute_precision_loss.png'; plottitle='strata train, configs/demo.json: computed in bf16 (as configured) and in fp32'" \
  "$root/scripts/plot_losses.gp"
grep -E "^trained|^throughput" bf16/train.txt fp32/train.txt || true
