#!/usr/bin/env bash
# Whether two builds of strata train to the same bits: a change that means to keep behaviour
# (a refactor) is run against the commit before it.
#
#   scripts/same_bits.sh BEFORE_STRATA AFTER_STRATA [--steps N]
#
# Each binary trains the built-in demo (configs/demo.json: a GPT under ZeRO-3 with parameters and
# optimizer states on NVMe, gradient clipping 1.0) for N steps (default: the demo's 300),
# saving a checkpoint every 10 steps, and prints `strata estimate --terms` for every shipped
# config, at the config's own model on one GPU and at 7B on four 80 GB GPUs. Compared, and each
# line says same or differs:
# - every step's loss, gradient norm, learning rate, loss scale and bytes moved (the metrics
#   file without its timings and memory readings of the process);
# - every checkpoint's state files, byte for byte (the manifests name their directory, which
#   differs, and are compared without it);
# - every estimate, with the disk's free space masked.
# Builds and runs nothing else; writes under a temporary directory, removed at exit. Exit status
# 0 when everything is the same, 1 when anything differs.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -lt 2 ]]; then
  echo "usage: scripts/same_bits.sh BEFORE_STRATA AFTER_STRATA [--steps N]" >&2
  exit 2
fi
before=$(realpath "$1")
after=$(realpath "$2")
shift 2
steps=()
if [[ $# -ge 2 && $1 == --steps ]]; then steps=(--steps "$2"); fi
for binary in "$before" "$after"; do
  [[ -x $binary ]] || { echo "same_bits.sh: $binary is not an executable strata" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The metrics' fields that do not depend on timing or on the process's own memory.
kept_fields='["step","loss","grad_norm","lr","loss_scale","skipped","loss_tokens","tokens",
  "bytes_h2d","bytes_d2h","bytes_nvme_read","bytes_nvme_write","gpu_peak_bytes",
  "early_sub_groups","late_sub_groups","undone_sub_groups","device_allocations"]'

# The disk's free space changes between the runs: its figures are masked.
free_space='s/[0-9.]+ GiB free/N GiB free/; s/needs [0-9.]+ GiB more free space/needs N GiB more free space/'

run() {
  local binary=$1 out=$2
  mkdir -p "$out"
  "$binary" train --out "$out/plots" --metrics "$out/metrics.jsonl" --save-dir "$out/ckpt" \
    --save-every 10 "${steps[@]}" > "$out/train.log" 2>&1
  python3 - "$out/metrics.jsonl" "$kept_fields" > "$out/metrics.kept" <<'PY'
import json, sys
kept = json.loads(sys.argv[2])
for line in open(sys.argv[1]):
    record = json.loads(line)
    print(json.dumps({key: record[key] for key in kept if key in record}, sort_keys=True))
PY
  (cd "$out/ckpt" && find . -type f ! -name manifest.json -print0 | sort -z |
    xargs -0 sha256sum) > "$out/states.sha256"
  for manifest in "$out"/ckpt/*/manifest.json; do
    python3 - "$manifest" <<'PY'
import json, sys
manifest = json.load(open(sys.argv[1]))
manifest.get("config", {}).get("strata", {}).get("checkpoint", {}).pop("dir", None)
print(sys.argv[1].split("/ckpt/")[1], json.dumps(manifest, sort_keys=True))
PY
  done > "$out/manifests"
  for config in configs/*.json; do
    local name
    name=$(basename "$config" .json)
    "$binary" estimate --config "$config" --model --terms --gpus-per-node 1 2>&1 |
      sed -E "$free_space" > "$out/estimate_$name" || true
    "$binary" estimate --config "$config" --params 7B --terms --gpus-per-node 4 \
      --gpu-memory 80GB 2>&1 | sed -E "$free_space" > "$out/estimate_7b_$name" || true
  done
}

run "$before" "$work/before"
run "$after" "$work/after"

status=0
for file in metrics.kept states.sha256 manifests; do
  if cmp -s "$work/before/$file" "$work/after/$file"; then
    echo "same:    $file ($(wc -l < "$work/before/$file") lines)"
  else
    echo "differs: $file"
    diff "$work/before/$file" "$work/after/$file" | head -5
    status=1
  fi
done
estimates=0
for file in "$work"/before/estimate_*; do
  name=$(basename "$file")
  if cmp -s "$file" "$work/after/$name"; then
    estimates=$((estimates + 1))
  else
    echo "differs: $name"
    diff "$file" "$work/after/$name" | head -5
    status=1
  fi
done
echo "same:    $estimates estimates of $(ls "$work"/before/estimate_* | wc -l)"
exit $status
