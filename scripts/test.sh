#!/usr/bin/env bash
# README command 2 (and CI): install what is missing, then build and test twice: the release
# preset (with CUDA compiled and linked where nvcc exists) and the ASan+UBSan preset, which also
# runs the config fuzzer for a short while; the Python package's pytest suite runs after the
# release tests. Warnings are errors in both. Each phase prints its
# time as it ends, and a table of them closes the run (about 35 minutes on 2 cores from a clean
# clone, without ccache; docs/benchmarks.md, "The test command"). The release tests fetch npm
# packages for the tokenizer's reference check (scripts/tokenizer_oracle.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
phases=()
# The phases done so far and their seconds, and the one that failed, at exit.
report_phases() {
  local status=$?
  echo "== phase times (s)"
  printf '%s\n' "${phases[@]}"
  if ((status == 0)); then
    echo "== every phase passed in $((SECONDS - started)) s"
  else
    echo "== failed in phase '${current:-setup}' after $((SECONDS - started)) s (exit $status)"
  fi
}
trap report_phases EXIT

# phase NAME COMMAND...: runs one phase, timed.
phase() {
  current=$1
  shift
  echo "== $current"
  local begun=$SECONDS
  "$@"
  phases+=("$(printf '%-14s %5d' "$current" $((SECONDS - begun)))")
  echo "== $current took $((SECONDS - begun)) s"
}

format() {
  git ls-files -- '*.h' '*.cpp' '*.cu' | xargs clang-format --dry-run --Werror
}

build() {
  cmake --preset "$1" >/dev/null
  cmake --build --preset "$1"
}

fuzz() {
  [[ -x build/asan/tests/engine/config/config_fuzzer ]] || return 0
  mkdir -p build/asan/fuzz-corpus
  build/asan/tests/engine/config/config_fuzzer -seed=1 -max_total_time=60 -print_final_stats=1 \
    -artifact_prefix=build/asan/ build/asan/fuzz-corpus configs tests/engine/configs/good \
    tests/engine/configs/bad
}

# The Python package (python/) of the release build, under Debian's interpreter: the one with
# python3-torch. The ASan build's module would need the sanitizer runtime preloaded into Python.
python_tests() {
  PYTHONPATH=build/release/python /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests
}

phase setup bash scripts/setup.sh
phase format format
phase "release build" build release
phase "release tests" ctest --preset release -j "$(nproc)"
phase "python tests" python_tests
phase "asan build" build asan
phase fuzz fuzz
phase "asan tests" ctest --preset asan -j "$(nproc)"
