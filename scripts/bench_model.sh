#!/usr/bin/env bash
# The model's speed beside its bound, in one run (docs/benchmarks.md): `strata train` on the demo
# (or --config FILE) prints tokens/s and achieved GFLOP/s (6 x params x tokens plus attention),
# then `strata bench gemm` measures the same model's matrix products through strata's host matmul
# op and through OpenBLAS's own sgemm, and sgemm on a 1024^3 square as the BLAS ceiling.
#
#   scripts/bench_model.sh [--config FILE] [other strata train arguments]
#
# STRATA=path/to/strata picks the binary (default build/release/tools/strata); the outputs
# (train.txt, metrics.jsonl, loss.png, gemm.txt, gemm.json) go to STRATA_BENCH_OUT (default
# strata-bench-model).
set -euo pipefail
cd "$(dirname "$0")/.."

strata=${STRATA:-build/release/tools/strata}
out=${STRATA_BENCH_OUT:-strata-bench-model}
config=()
if [[ ${1:-} == --config ]]; then
  config=(--config "$2")
  shift 2
fi
mkdir -p "$out"

"$strata" train "${config[@]}" --out "$out" --metrics "$out/metrics.jsonl" "$@" |
  tee "$out/train.txt"
"$strata" bench gemm "${config[@]}" | tee "$out/gemm.txt"
"$strata" bench gemm "${config[@]}" --json >"$out/gemm.json"
echo "bench_model: $(grep '^throughput' "$out/train.txt")"
echo "bench_model: $(grep '^products' "$out/gemm.txt")"
echo "bench_model: $(grep '^bound' "$out/gemm.txt")"
