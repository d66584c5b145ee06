#!/usr/bin/env bash
# strata io-bench against fio (ioengine=io_uring) on the same file, block size, queue depth, job
# count and O_DIRECT, alternating the two so that drift of the disk or of a noisy neighbour hits
# both alike. Prints the median GB/s of each (GB = 1e9 bytes, as both report them) and the ratio.
#
#   scripts/fio_compare.sh --path /mnt/nvme/bench [--strata build/release/tools/strata]
#       [--size 4G] [--runs 5] [--threads 1] [--direct 1]
#       [--rows "read:1M:32 read:8M:8 read:128K:128 write:1M:32 write:8M:8 write:128K:128"]
#       [--csv fio_compare.csv]
#
# The targets (docs/benchmarks.md): strata >= 0.97x fio at 1M x QD32 and 8M x QD8, >= 0.9x at 128K x QD128.
# strata io-bench writes its test file first when it is missing (strata-io-bench.dat in --path);
# fio then reuses that file, so both read the same written blocks. Every io-bench run here passes
# --keep, and the script removes the file when it ends. strata runs with --verify off:
# fio neither computes nor checks checksums, so with strata's CRC32C sidecar on (io-bench's and
# the engine's default) the two would not do the same work; `strata io-bench --verify on` gives
# the cost of the checksums on its own.
set -euo pipefail

path=""
strata=""
size="4G"
runs=5
threads=1
direct=1
rows="read:1M:32 read:8M:8 read:128K:128 write:1M:32 write:8M:8 write:128K:128"
csv=""

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --path) path="$2"; shift 2 ;;
    --strata) strata="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --direct) direct="$2"; shift 2 ;;
    --rows) rows="$2"; shift 2 ;;
    --csv) csv="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "fio_compare.sh: unknown argument $1" >&2; usage ;;
  esac
done

here="$(cd "$(dirname "$0")/.." && pwd)"
if [[ -z "$strata" ]]; then
  for candidate in "$here/build/release/tools/strata" "$here/build/tools/strata" "$(command -v strata || true)"; do
    if [[ -n "$candidate" && -x "$candidate" ]]; then strata="$candidate"; break; fi
  done
fi
[[ -n "$path" ]] || { echo "fio_compare.sh: --path DIR is required" >&2; usage; }
[[ -x "$strata" ]] || { echo "fio_compare.sh: no strata binary; pass --strata PATH (build it first)" >&2; exit 2; }
command -v fio > /dev/null || { echo "fio_compare.sh: fio is not installed (apt-get install fio)" >&2; exit 2; }
command -v python3 > /dev/null || { echo "fio_compare.sh: python3 is needed to read fio's JSON" >&2; exit 2; }
[[ "$direct" == 0 || "$direct" == 1 ]] || { echo "fio_compare.sh: --direct is 0 or 1" >&2; exit 2; }
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "fio_compare.sh: --runs is a positive count" >&2; exit 2; }

file="$path/strata-io-bench.dat"
direct_flag=$([[ "$direct" == 1 ]] && echo on || echo off)
size_bytes=$(python3 -c "
import re,sys
m=re.fullmatch(r'(\d+)([KMGT]?)(i?B)?', sys.argv[1], re.I)
if not m: sys.exit('bad --size')
print(int(m.group(1)) * 1024 ** ' KMGT'.index((m.group(2) or ' ').upper()))" "$size")
job_bytes=$((size_bytes / threads))

# Prepare (or reuse) the test file once, outside the timed runs; it goes when the script ends.
trap 'rm -f "$file" "$file.crc32c" "$file.filled"' EXIT
"$strata" io-bench --path "$path" --size "$size" --rw read --block-size 1M --queue-depth 16 \
  --direct "$direct_flag" --json --keep > /dev/null 2> >(grep -v '^io-bench: ' >&2)

strata_gbps() {  # rw bs qd
  "$strata" io-bench --path "$path" --size "$size" --rw "$1" --block-size "$2" --queue-depth "$3" \
    --threads "$threads" --direct "$direct_flag" --verify off --json --keep 2> >(grep -v '^io-bench: kept' >&2) |
    python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['gbps'])"
}

fio_gbps() {  # rw bs qd
  # numjobs jobs of size/numjobs each, side by side, as strata's rings split one transfer.
  fio --name=fio_compare --filename="$file" --ioengine=io_uring --rw="$1" --bs="$2" \
    --iodepth="$3" --numjobs="$threads" --size="$job_bytes" --offset_increment="$job_bytes" \
    --direct="$direct" --thread --group_reporting --output-format=json |
    python3 -c "
import json,sys
job=json.load(sys.stdin)['jobs'][0]
side='read' if sys.argv[1] in ('read','randread') else 'write'
print(job[side]['bw_bytes'] / 1e9)" "$1"
}

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

echo "fio_compare: $file, $size, $threads job(s)/ring(s), O_DIRECT=$direct, median of $runs alternating runs"
echo "strata: $strata ($("$strata" --version)); $(fio --version)"
printf '%-7s %6s %5s %5s %12s %10s %7s %8s  %s\n' rw bs qd jobs "strata GB/s" "fio GB/s" ratio target verdict
if [[ -n "$csv" ]]; then echo "rw,bs,qd,jobs,strata_gbps,fio_gbps,ratio,strata_runs,fio_runs" > "$csv"; fi
for row in $rows; do
  IFS=: read -r rw bs qd <<< "$row"
  strata_runs=""
  fio_runs=""
  for ((run = 0; run < runs; ++run)); do
    strata_runs+="$(strata_gbps "$rw" "$bs" "$qd") "
    fio_runs+="$(fio_gbps "$rw" "$bs" "$qd") "
  done
  s=$(echo "$strata_runs" | median)
  f=$(echo "$fio_runs" | median)
  target=$([[ "$bs" == 128K ]] && echo 0.90 || echo 0.97)
  read -r ratio verdict < <(python3 -c "
r=$s/$f; print(f'{r:.3f}', 'ok' if r >= $target else 'BELOW')")
  printf '%-7s %6s %5s %5s %12.3f %10.3f %7s %8s  %s\n' "$rw" "$bs" "$qd" "$threads" "$s" "$f" "$ratio" ">=$target" "$verdict"
  if [[ -n "$csv" ]]; then echo "$rw,$bs,$qd,$threads,$s,$f,$ratio,${strata_runs% },${fio_runs% }" >> "$csv"; fi
done
