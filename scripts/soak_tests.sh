#!/usr/bin/env bash
# Runs the built test suites again and again under load, to find tests whose outcome depends on
# timing: each run picks the next `ctest -j` of --jobs and, with --burn N, keeps N CPU-burning
# processes busy beside it. Every failure is counted per preset and test in OUT/failures.tsv;
# each run's ctest output and failed-test list stay in OUT/, and a line per run in OUT/runs.txt.
#
#   bash scripts/soak_tests.sh [--runs 10] [--presets "release asan"] [--jobs "2 4"]
#                              [--burn 1] [--out soak-out]
#
# Build the presets first (scripts/test.sh does). A clean soak prints "no test failed".
set -euo pipefail
cd "$(dirname "$0")/.."

runs=10
presets="release asan"
jobs="2 4"
burn=1
out=soak-out
while (($#)); do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --presets) presets=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --burn) burn=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "soak_tests.sh: unknown argument '$1' (see the comment at the top of the script)" >&2
       exit 2 ;;
  esac
done
for preset in $presets; do
  if [[ ! -f build/$preset/CTestTestfile.cmake ]]; then
    echo "soak_tests.sh: build/$preset is not built; run: cmake --preset $preset &&" \
      "cmake --build --preset $preset" >&2
    exit 2
  fi
done
mkdir -p "$out"
read -r -a job_list <<<"$jobs"

burners=()
stop_burners() {
  ((${#burners[@]})) && kill "${burners[@]}" 2>/dev/null
  wait 2>/dev/null || true
  burners=()
}
trap stop_burners EXIT
trap 'exit 130' INT TERM  # through the EXIT trap, which stops the burners

# One row per preset and test that failed at least once in the runs done so far: how many runs
# there were and how many it failed. Written after every run, so a soak stopped early keeps it.
write_table() {
  local done=$1 preset
  {
    printf 'preset\ttest\truns\tfailures\n'
    for preset in $presets; do
      cat "$out/$preset"-run*.failed 2>/dev/null | sed 's/^[0-9]*://' | sort | uniq -c |
        while read -r count name; do printf '%s\t%s\t%s\t%s\n' "$preset" "$name" "$done" "$count"; done
    done
  } >"$out/failures.tsv"
}

for ((run = 1; run <= runs; ++run)); do
  j=${job_list[$(((run - 1) % ${#job_list[@]}))]}
  for ((b = 0; b < burn; ++b)); do
    (while :; do :; done) &
    burners+=($!)
  done
  for preset in $presets; do
    log="$out/$preset-run$run.log"
    failed="build/$preset/Testing/Temporary/LastTestsFailed.log"
    rm -f "$failed"  # left by an earlier run; ctest writes it only when a test fails
    started=$SECONDS
    ctest --preset "$preset" -j "$j" >"$log" 2>&1 || true
    if [[ -f $failed ]]; then cp "$failed" "$out/$preset-run$run.failed"; else : >"$out/$preset-run$run.failed"; fi
    summary=$(grep -E "tests passed|tests failed" "$log" | tail -1 || true)
    echo "run $run/$runs $preset -j $j burn $burn: ${summary:-no summary} ($((SECONDS - started)) s)" |
      tee -a "$out/runs.txt"
  done
  stop_burners
  write_table "$run"
done

if (($(wc -l <"$out/failures.tsv") == 1)); then
  echo "no test failed in $runs runs of: $presets"
else
  column -t -s $'\t' "$out/failures.tsv"
fi
