#!/usr/bin/env bash
# README command 1: install what is missing, build the release preset, run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target strata

# The built-in demo (configs/demo.json): a GPT under ZeRO-3 with its parameters and optimizer
# states swapped to NVMe under ./strata-demo/ (removed at exit), on the bundled corpus. Extra
# arguments go to `strata train` (e.g. --steps 100 --metrics m.jsonl). A greedy sample from the
# model is printed every 100 steps and at the end.
./build/release/tools/strata train --out strata-out --sample-every 100 "$@"
