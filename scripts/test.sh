#!/usr/bin/env bash
# README command 2 (and CI): install what is missing, then build and test twice: the release
# preset (with CUDA compiled and linked where nvcc exists) and the ASan+UBSan preset, which also
# runs the config fuzzer for a short while. Warnings are errors in both.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
started=$SECONDS

echo "== format: clang-format --dry-run --Werror"
git ls-files -- '*.h' '*.cpp' '*.cu' | xargs clang-format --dry-run --Werror

echo "== release: build and test"
cmake --preset release >/dev/null
cmake --build --preset release
ctest --preset release -j "$(nproc)"
echo "== release took $((SECONDS - started)) s"

echo "== asan: build, fuzz, test"
cmake --preset asan >/dev/null
cmake --build --preset asan
if [[ -x build/asan/tests/engine/config_fuzzer ]]; then
  mkdir -p build/asan/fuzz-corpus
  build/asan/tests/engine/config_fuzzer -seed=1 -max_total_time=60 -print_final_stats=1 \
    -artifact_prefix=build/asan/ build/asan/fuzz-corpus configs tests/engine/configs/good \
    tests/engine/configs/bad
fi
# Last, so that its summary is the closing line CI reads.
ctest --preset asan -j "$(nproc)"
