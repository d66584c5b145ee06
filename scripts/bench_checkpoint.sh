#!/usr/bin/env bash
# Checkpoint save and load of a large model with its states on NVMe, beside fio writing and
# reading the same bytes on the same disk in the same run, and the peak RSS of `strata ckpt
# export` beside the model's size (docs/benchmarks.md, "Checkpoints").
#
#   scripts/bench_checkpoint.sh --path DIR [--strata build/release/tools/strata]
#       [--layers 18] [--d-model 1536] [--runs 3] [--optimizer nvme|cpu]
#
# DIR is on the disk under test and needs about 24 bytes per parameter free (swap files, the
# checkpoint, the export). The model: a GPT of --layers x --d-model (18 x 1536: 511M parameters)
# under ZeRO-3 with parameters and optimizer states on NVMe in DIR (--optimizer cpu: the states
# in CPU memory, so that a save only writes and a load only reads the disk). Six `strata train`
# steps saving after the fourth and the sixth (`--save-dir`, `--save-every 4`); a second `strata
# train --resume` loads the sixth's checkpoint and trains one step. With the states on NVMe the
# fourth step makes its save as its optimizer writes the states back (Engine::plan_checkpoint), so
# the save's time is what it took outside the step (its log line) plus what it added to the step:
# that step's time less the mean of the third's and the fifth's (the first two steps of a run are
# slower: the first records the order of the modules, the second is the first to follow it). A load with the states on NVMe
# reads the masters (for the parameters) and leaves the optimizer's states to the first step,
# which reads them from the checkpoint where it would read them from swap: its time is the load's
# own plus what it added to that step, against the first run's first step (a run's first step
# also records the order of its modules and allocates). Otherwise the times are the engine's own,
# from its log lines.
# fio (ioengine=io_uring, O_DIRECT) then writes and reads as many bytes as the checkpoint
# holds, in 1 MiB blocks at queue depth 32 (the config's aio block_size and queue_depth), one file
# per state as the checkpoint has, and "copies" them: reads one set of files while writing
# another, which is the disk traffic of a save whose states live in swap files on the same disk
# (and of a load into them). Each figure is the median of --runs alternating runs.
set -euo pipefail

path=""
strata=""
layers=18
d_model=1536
runs=3
optimizer=nvme

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --path) path="$2"; shift 2 ;;
    --strata) strata="$2"; shift 2 ;;
    --layers) layers="$2"; shift 2 ;;
    --d-model) d_model="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --optimizer) optimizer="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "bench_checkpoint.sh: unknown argument $1" >&2; usage ;;
  esac
done

here="$(cd "$(dirname "$0")/.." && pwd)"
[[ -n "$strata" ]] || strata="$here/build/release/tools/strata"
[[ -n "$path" ]] || { echo "bench_checkpoint.sh: --path DIR is required" >&2; usage; }
[[ -x "$strata" ]] || { echo "bench_checkpoint.sh: no strata binary at $strata; build it first or pass --strata" >&2; exit 2; }
command -v fio > /dev/null || { echo "bench_checkpoint.sh: fio is not installed (apt-get install fio)" >&2; exit 2; }
[[ "$optimizer" == nvme || "$optimizer" == cpu ]] || { echo "bench_checkpoint.sh: --optimizer is nvme or cpu" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "bench_checkpoint.sh: /usr/bin/time is missing (apt-get install time)" >&2; exit 2; }

work="$(mktemp -d "$path/strata-bench-ckpt.XXXXXX")"
trap 'rm -rf "$work"' EXIT
config="$work/config.json"
cat > "$config" << EOF
{
  "train_micro_batch_size_per_gpu": 1,
  "gradient_accumulation_steps": 1,
  "bf16": {"enabled": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
  "zero_optimization": {
    "stage": 3,
    "sub_group_size": 1e8,
    "reduce_bucket_size": 5e7,
    "stage3_prefetch_bucket_size": 5e7,
    "stage3_param_persistence_threshold": 1e4,
    "offload_param": {"device": "nvme", "nvme_path": "$work/swap", "pin_memory": false,
                      "buffer_count": 4, "buffer_size": 1e8},
    "offload_optimizer": {"device": "$optimizer", "nvme_path": "$work/swap", "pin_memory": false,
                          "buffer_count": 4}
  },
  "aio": {"block_size": 1048576, "queue_depth": 32},
  "strata": {
    "model": {"n_layer": $layers, "n_head": 16, "d_model": $d_model, "seq_len": 64, "vocab": 256},
    "train_steps": 1,
    "device_memory_budget": "2GiB",
    "job_name": "bench-ckpt"
  }
}
EOF
mkdir -p "$work/swap"

# The value of `key` (" in 12.34 s" -> 12.34) on the engine's log line matching `pattern`.
seconds_of() { grep "$1" "$2" | sed -E 's/.* in ([0-9.]+) s.*/\1/' | tail -1; }
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

ckpt="$work/ckpt"
echo "== three steps and a save: $layers layers x $d_model, optimizer states on $optimizer"
"$strata" train --config "$config" --steps 3 --save-dir "$ckpt" --out "$work/out" 2> "$work/save.log" > /dev/null
bytes=$(du -sb "$ckpt"/global_step3 | cut -f1)
files=$(ls "$ckpt"/global_step3/*.safetensors | wc -l)
params=$("$strata" ckpt inspect "$ckpt" --json | python3 -c "
import json,sys; m=json.load(sys.stdin)['manifest']
import math; print(sum(math.prod(t['shape']) for t in m['tensors']))")
echo "checkpoint: $params parameters, $bytes bytes in $files state files"

# fio (io_uring, O_DIRECT, 1 MiB x QD32, one job per state file of `per_file` bytes) in `dir`:
# write, read, or copy (reading one set of files while writing another, concurrently: the disk
# traffic of a save whose states are in swap files on the same disk, and of a load into them).
# Prints GB/s of the bytes moved one way: bytes / the longer side's runtime.
fio_gbs() {
  local common="--bs=1M --iodepth=32 --ioengine=io_uring --direct=1 --numjobs=$files --size=$per_file"
  local jobs
  case "$1" in
    write) jobs="--name=w --rw=write --directory=$2/w $common" ;;
    read) jobs="--name=r --rw=read --directory=$2/w $common" ;;
    copy) jobs="--name=r --rw=read --directory=$2/w $common --name=c --rw=write --directory=$2/c $common" ;;
  esac
  mkdir -p "$2/w" "$2/c"
  # shellcheck disable=SC2086
  fio $jobs --group_reporting --output-format=json | python3 -c "
import json,sys
text = sys.stdin.read()
jobs = json.loads(text[text.index('{'):])['jobs']  # fio prints a line per job name before it
seconds = max(j[side]['runtime'] for j in jobs for side in ('read','write') if j[side]['io_bytes'])
moved = max(sum(j[side]['io_bytes'] for j in jobs) for side in ('read','write'))
print(moved/(seconds/1000)/1e9)"
}

drop_caches() { sync; echo 1 > /proc/sys/vm/drop_caches 2> /dev/null || true; }

# The seconds of the metrics file's line N (from 1).
step_seconds() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[int(sys.argv[2]) - 1])['seconds'])" "$1" "$2"; }
calc() { python3 -c "print($1)"; }

per_file=$((bytes / files))
save_s=(); load_s=(); fio_w=(); fio_r=(); fio_c=()
for ((run = 1; run <= runs; ++run)); do
  rm -rf "$ckpt" "$work"/*.jsonl
  # Six steps saving after the fourth and the sixth: the fourth against its neighbours.
  "$strata" train --config "$config" --steps 6 --save-every 4 --save-dir "$ckpt" \
    --metrics "$work/saving.jsonl" --out "$work/out" 2> "$work/save.log" > /dev/null
  saved=$(grep 'saved .*(step 4)' "$work/save.log" | sed -E 's/.* in ([0-9.]+) s.*/\1/')
  for s in 1 3 4 5; do declare "t$s=$(step_seconds "$work/saving.jsonl" $s)"; done
  if grep -q "(step 4).*written during the step" "$work/save.log"; then
    save_s+=("$(calc "$saved + $t4 - ($t3 + $t5) / 2")")
  else
    save_s+=("$saved")
  fi
  drop_caches
  # The latest checkpoint is step 6's; the resumed run's one step is its first.
  "$strata" train --config "$config" --steps 7 --resume "$ckpt" --metrics "$work/loaded.jsonl" \
    --out "$work/out" 2> "$work/load.log" > /dev/null
  loaded=$(seconds_of 'resumed from' "$work/load.log")
  t_loaded=$(step_seconds "$work/loaded.jsonl" 1)
  if grep -q "read by the first step" "$work/load.log"; then
    load_s+=("$(calc "$loaded + $t_loaded - $t1")")
  else
    load_s+=("$loaded")
  fi
  fio_w+=("$(fio_gbs write "$work/fio")")
  drop_caches
  fio_r+=("$(fio_gbs read "$work/fio")")
  drop_caches
  fio_c+=("$(fio_gbs copy "$work/fio")")
  rm -rf "$work/fio"
  echo "run $run: save ${save_s[-1]} s (steps 3-5: $t3, $t4 saving, $t5 s; outside the step $saved s)," \
    "load ${load_s[-1]} s (itself $loaded s, the step after it $t_loaded s, a run's first $t1 s);" \
    "fio GB/s: write ${fio_w[-1]}, read ${fio_r[-1]}, copy ${fio_c[-1]}"
done

save=$(printf '%s\n' "${save_s[@]}" | median)
load=$(printf '%s\n' "${load_s[@]}" | median)
fw=$(printf '%s\n' "${fio_w[@]}" | median)
fr=$(printf '%s\n' "${fio_r[@]}" | median)
fc=$(printf '%s\n' "${fio_c[@]}" | median)

echo "== export to bf16 safetensors"
/usr/bin/time -v "$strata" ckpt export "$ckpt" --out "$work/model.safetensors" --dtype bf16 \
  2> "$work/export.time" > "$work/export.log"
rss_kb=$(grep 'Maximum resident set size' "$work/export.time" | awk '{print $NF}')
export_s=$(grep 'Elapsed (wall clock)' "$work/export.time" | awk '{print $NF}')
out_bytes=$(stat -c %s "$work/model.safetensors")

python3 - "$bytes" "$save" "$load" "$fw" "$fr" "$fc" "$params" "$rss_kb" "$export_s" "$out_bytes" << 'EOF'
import sys
b, save, load, fw, fr, fc = int(sys.argv[1]), *map(float, sys.argv[2:7])
params, rss_kb, export_s, out_bytes = int(sys.argv[7]), int(sys.argv[8]), sys.argv[9], int(sys.argv[10])
sw, lr = b / save / 1e9, b / load / 1e9
print(f"checkpoint {b/1e9:.2f} GB ({params/1e6:.0f}M parameters, fp32 master + exp_avg + exp_avg_sq)")
print(f"save  {save:.2f} s  {sw:.3f} GB/s   fio write {fw:.3f} GB/s (ratio {sw/fw:.3f})   "
      f"fio copy {fc:.3f} GB/s (ratio {sw/fc:.3f})")
print(f"load  {load:.2f} s  {lr:.3f} GB/s   fio read  {fr:.3f} GB/s (ratio {lr/fr:.3f})   "
      f"fio copy {fc:.3f} GB/s (ratio {lr/fc:.3f})")
print(f"export bf16: {out_bytes/1e9:.2f} GB written in {export_s}, peak RSS {rss_kb/1024:.1f} MiB "
      f"({rss_kb*1024/(params*4)*100:.2f}% of the fp32 model's {params*4/1e9:.2f} GB)")
EOF
