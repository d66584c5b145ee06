#!/usr/bin/env bash
# The scale run (docs/benchmarks.md, "Past CPU RAM"): configs/scale_2b.json, a 2.07B GPT
# whose model states (about 33 GB) exceed this machine's RAM, trained with parameters, gradients
# and optimizer states on NVMe under a 1 GiB device budget (its optimizer stepping beside
# backward: strata.overlap_optimizer, no clipping), beside its two bounds measured in the same
# run: the step's matrix products alone (`strata bench gemm` on the same shape) and the step's
# NVMe bytes alone (fio reading and writing on the same directory, each at its measured
# throughput). --config runs another config of the same kind (e.g. a copy with clipping on).
#
#   scripts/bench_scale.sh --path DIR [--steps N] [--strata BIN] [--config FILE]
#
# DIR gets the swap files (about 35 GiB, removed at the end of the run) and the outputs:
# train.txt, time.txt (/usr/bin/time -v), metrics.jsonl, gemm.txt, fio-*.json, summary.txt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

path=
steps=6
strata=$root/build/release/tools/strata
config=$root/configs/scale_2b.json
while [[ $# -gt 0 ]]; do
  case $1 in
    --path) path=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --strata) strata=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    *) echo "bench_scale: unknown argument $1 (expected --path DIR [--steps N] [--strata BIN] [--config FILE])" >&2; exit 2 ;;
  esac
done
if [[ -z $path || ! -d $path ]]; then
  echo "bench_scale: --path DIR must name an existing directory on the disk to measure" >&2
  exit 2
fi
strata=$(cd "$(dirname "$strata")" && pwd)/$(basename "$strata")
config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")
cd "$path"
mkdir -p strata-swap

/usr/bin/time -v -o time.txt "$strata" train --config "$config" --steps "$steps" \
  --metrics metrics.jsonl --out out --eval-every "$steps" | tee train.txt
"$strata" bench gemm --config "$config" | tee gemm.txt

# The disk alone: 8 GiB written then read back, O_DIRECT, 1 MiB blocks, queue depth 32; then
# reads and writes at once in the step's proportion of bytes (the step overlaps them, and a disk
# may move more bytes mixed than one way: the I/O bound is the faster of the two schedules).
fio_run() {
  fio --name="$1" --filename=fio-scale.bin --rw="$1" --bs=1M --size=8G --direct=1 \
    --ioengine=io_uring --iodepth=32 --output-format=json "${@:2}" >"fio-$1.json"
}
read_percent=$(python3 -c '
import json
rows = [json.loads(line) for line in open("metrics.jsonl")][1:]
read = sum(r["bytes_nvme_read"] for r in rows)
print(round(100 * read / (read + sum(r["bytes_nvme_write"] for r in rows))))')
fio_run write
fio_run read
fio_run rw --rwmixread="$read_percent"
rm -f fio-scale.bin

python3 - "$steps" <<'PY' | tee summary.txt
import json, re, sys
steps = int(sys.argv[1])
rows = [json.loads(line) for line in open("metrics.jsonl")]
later = rows[1:] or rows  # the first step also records the module trace
mean = lambda key: sum(r[key] for r in later) / len(later)
# The median, not the mean: this virtual disk stalls now and then for a whole step.
seconds = sorted(r["seconds"] for r in later)
step_s = (seconds[(len(seconds) - 1) // 2] + seconds[len(seconds) // 2]) / 2
read_b, write_b = mean("bytes_nvme_read"), mean("bytes_nvme_write")
bw = {rw: json.load(open(f"fio-{rw}.json"))["jobs"][0][rw]["bw_bytes"] for rw in ("read", "write")}
serial_s = read_b / bw["read"] + write_b / bw["write"]
mixed = json.load(open("fio-rw.json"))["jobs"][0]
mixed_bw = mixed["read"]["bw_bytes"] + mixed["write"]["bw_bytes"]
mixed_s = (read_b + write_b) / mixed_bw
io_s = min(serial_s, mixed_s)
gemm = open("gemm.txt").read()
gflop, rate = re.search(r"\(forward and backward, ([\d.e+]+) GFLOP\): strata's op ([\d.]+)",
                        gemm).groups()
# bench gemm times one micro-batch's products; the config's activation checkpointing recomputes
# the forward once more in backward: 3 forward-equivalents of products become 4.
compute_s = float(gflop) * 4 / 3 / float(rate)
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open("time.txt").read()).group(1)) * 1024
print(f"steps {steps}, loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}")
print(f"step time (median of steps 2-{steps}): {step_s:.1f} s; each: " +
      ", ".join(f"{r['seconds']:.1f}" for r in later))
print(f"NVMe per step: read {read_b/2**30:.2f} GiB, write {write_b/2**30:.2f} GiB")
print(f"fio: read {bw['read']/1e9:.3f} GB/s, write {bw['write']/1e9:.3f} GB/s -> one way, then the other {serial_s:.1f} s")
print(f"fio mixed ({mixed['job options']['rwmixread']}% read): {mixed_bw/1e9:.3f} GB/s -> both at once {mixed_s:.1f} s")
print(f"NVMe I/O alone (the faster): {io_s:.1f} s")
print(f"compute alone (matrix products, recompute included): {compute_s:.1f} s")
print(f"step / max(compute, I/O) = {step_s / max(compute_s, io_s):.2f}x (target <= 1.2x)")
print(f"peak RSS {rss/2**30:.2f} GiB")
PY
