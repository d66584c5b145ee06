#!/usr/bin/env bash
# README command 1: install what is missing, build the release preset, run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target strata

# `strata train` arrives with the engine (issue "The model trains"); until then the main job is
# `strata report`, what this machine offers for offloaded training.
echo "strata demo: the training engine is not built yet; running 'strata report' instead"
./build/release/tools/strata report "$@"
