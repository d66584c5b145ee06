#!/usr/bin/env bash
# A fine-tuning run as a new user starts one, end to end on a small model, with every step
# checked: a Hugging Face Llama-shaped folder made from a config.json (`strata.model.config`,
# one step, `strata ckpt export --hf`), token data, a DeepSpeed config written the way the HF
# Trainer's templates write it ("auto" everywhere, ZeRO-3 with parameters and optimizer states
# on NVMe), `strata config check`, a run stopped by SIGTERM (it saves and exits 143), its resume
# to the end (the loss curve continued, the schedule the uninterrupted run's), a resume with
# nothing left, `strata ckpt export --hf` over an earlier export, `strata eval` of the checkpoint
# and of the pretrained folder, the same run from an Accelerate YAML, and the usual mistakes
# (text for a model with its own tokenizer, a typo'd from_pretrained, --save-every without a
# save directory), each refused with its fix. CI runs it (tests/tools/CMakeLists.txt).
#
#   scripts/fine_tune_journey.sh [--strata build/release/tools/strata] [--path DIR] [--keep]
#
# Everything is written under a fresh directory in DIR (default $TMPDIR or /tmp), removed at
# the end unless --keep. About a minute on two cores. Exit status: 0 when every check passed.
set -euo pipefail

strata=""
path="${TMPDIR:-/tmp}"
keep=0
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --strata) strata="$2"; shift 2 ;;
    --path) path="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) usage ;;
    *) echo "fine_tune_journey.sh: unknown argument $1" >&2; usage ;;
  esac
done
here="$(cd "$(dirname "$0")/.." && pwd)"
[[ -n "$strata" ]] || strata="$here/build/release/tools/strata"
[[ -x "$strata" ]] || { echo "fine_tune_journey.sh: no strata binary at $strata; build it first or pass --strata" >&2; exit 2; }
strata="$(cd "$(dirname "$strata")" && pwd)/$(basename "$strata")"

work="$(mktemp -d "$path/strata-journey.XXXXXX")"
run_pid=""
cleanup() {
  [[ -n "$run_pid" ]] && kill -9 "$run_pid" 2>/dev/null || true
  if [[ $keep -eq 1 ]]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
cd "$work"

checks=0
pass() { checks=$((checks + 1)); echo "ok   $*"; }
fail() { echo "FAIL $*" >&2; for f in "${@:2}"; do :; done; exit 1; }
# expect STATUS NAME -- COMMAND...: runs COMMAND (stdout to NAME.out, stderr to NAME.err) and
# checks its exit status.
expect() {
  local want="$1" name="$2"; shift 3
  local got=0
  "$@" >"$name.out" 2>"$name.err" || got=$?
  if [[ "$got" -ne "$want" ]]; then
    echo "--- $name.out"; cat "$name.out"; echo "--- $name.err"; cat "$name.err"
    fail "$name: exit status $got, expected $want"
  fi
  pass "$name exits $want"
}
# has NAME.EXT TEXT: the file holds TEXT (a fixed string).
has() {
  grep -qF -- "$2" "$1" || { echo "--- $1"; cat "$1"; fail "$1 does not say: $2"; }
  pass "$1 says: $2"
}
lacks() {
  ! grep -qF -- "$2" "$1" || { echo "--- $1"; cat "$1"; fail "$1 says: $2"; }
  pass "$1 does not say: $2"
}

# 1. A Llama-shaped Hugging Face folder: the architecture's config.json, one step of fresh
#    weights, exported as save_pretrained lays a folder out.
mkdir -p arch swap
cat > arch/config.json <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
 "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 128, "vocab_size": 320,
 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false, "hidden_act": "silu",
 "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
JSON
cat > arch.json <<JSON
{"train_micro_batch_size_per_gpu": 2,
 "strata": {"model": {"config": "arch/config.json", "seq_len": 32}, "seed": 11}}
JSON
expect 0 make-weights -- "$strata" train --config arch.json --steps 1 --save-dir arch-ckpt --out arch-out
expect 0 export-base -- "$strata" ckpt export arch-ckpt --hf base-model
[[ -f base-model/config.json && -f base-model/model.safetensors ]] || fail "the export lacks config.json or model.safetensors"
pass "base-model/ holds config.json and model.safetensors"

# 2. Token data: the bytes of a text as uint16 ids (below the vocabulary of 320), as a token
#    file made with the model's tokenizer would hold them; and the text itself for the mistake.
for i in $(seq 1 400); do
  echo "the quick brown fox $i jumps over the lazy dog, and the dog sleeps on in the sun."
done > corpus.txt
perl -e 'binmode STDIN; binmode STDOUT; local $/; my $t = <STDIN>; print pack("v*", unpack("C*", $t))' < corpus.txt > corpus.u16

# 3. The HF Trainer's ZeRO-3 template with both offloads on NVMe, "auto" everywhere.
cat > ds_zero3_nvme.json <<JSON
{
  "fp16": {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16},
  "bf16": {"enabled": "auto"},
  "optimizer": {"type": "AdamW",
                "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
  "scheduler": {"type": "WarmupDecayLR",
                "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                           "warmup_num_steps": "auto", "total_num_steps": "auto"}},
  "zero_optimization": {
    "stage": 3,
    "offload_optimizer": {"device": "nvme", "nvme_path": "swap", "pin_memory": true},
    "offload_param": {"device": "nvme", "nvme_path": "swap", "pin_memory": true},
    "overlap_comm": true, "contiguous_gradients": true, "sub_group_size": 1e9,
    "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
    "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": true
  },
  "gradient_accumulation_steps": "auto",
  "gradient_clipping": "auto",
  "steps_per_print": 2000,
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": "auto",
  "wall_clock_breakdown": false,
  "strata": {
    "model": {"from_pretrained": "base-model", "seq_len": 32},
    "data": {"path": "corpus.u16", "dtype": "uint16"},
    "micro_batch_size": 4, "lr": 1e-3, "job_name": "journey"
  }
}
JSON
expect 0 config-check -- "$strata" config check ds_zero3_nvme.json --steps 40
has config-check.out "valid"

# 4. The run, stopped by SIGTERM after a few steps: it saves and exits 143. run1.out exists before
#    the run starts (which appends to it), so `tail -f` below never looks for it first.
: >run1.out
"$strata" train --config ds_zero3_nvme.json --steps 40 --save-dir ckpt --out out \
  --metrics metrics.jsonl >>run1.out 2>run1.err &
run_pid=$!
timeout 120 grep -q -m1 "step     2/40" <(tail -f --pid="$run_pid" run1.out) || fail "the run never reached step 2"
kill -TERM "$run_pid"
status=0; wait "$run_pid" || status=$?; run_pid=""
[[ $status -eq 143 ]] || { cat run1.out run1.err; fail "SIGTERM: exit status $status, expected 143"; }
pass "SIGTERM saves and exits 143"
has run1.out "stopped by SIGTERM after"
has run1.err "scheduler.params.total_num_steps 40"
[[ -f ckpt/latest ]] || fail "SIGTERM left no checkpoint"
stopped_at=$(wc -l < metrics.jsonl)

# 5. The resume runs to the run's end without --steps (the checkpoint keeps the run's length),
#    and the loss curve continues.
expect 0 resume -- "$strata" train --config ds_zero3_nvme.json --resume ckpt --save-dir ckpt --out out \
  --metrics metrics.jsonl
has resume.out "trained $((40 - stopped_at)) steps"
[[ $(grep -vc '^#' out/loss.tsv) -eq 40 ]] || { cat out/loss.tsv; fail "loss.tsv does not hold steps 1 to 40"; }
pass "out/loss.tsv holds steps 1 to 40"
last_lr=$(tail -n 2 metrics.jsonl | head -n 1 | sed 's/.*"lr":\([^,]*\),.*/\1/')
[[ "$last_lr" != "0.0" && "$last_lr" != "0" ]] || fail "the lr is 0 before the last step"
pass "the lr is above 0 at step 39 ($last_lr)"

expect 0 resume-again -- "$strata" train --config ds_zero3_nvme.json --resume ckpt --out out
has resume-again.out "is already at step 40"
lacks resume-again.out "trained 0 steps"

# 6. Export over an earlier export of the other layout, and eval.
expect 0 export-sharded -- "$strata" ckpt export ckpt --hf tuned-model --max-shard-size 64K
[[ -f tuned-model/model.safetensors.index.json ]] || fail "a sharded export wrote no index"
expect 0 export -- "$strata" ckpt export ckpt --hf tuned-model
[[ ! -e tuned-model/model.safetensors.index.json ]] || fail "a single-file export left the index"
! ls tuned-model/model-0*.safetensors >/dev/null 2>&1 || fail "a single-file export left shards"
[[ -f tuned-model/model.safetensors ]] || fail "the single-file export wrote no model.safetensors"
pass "tuned-model/ holds the single-file layout alone"
expect 0 eval-checkpoint -- "$strata" eval --config ds_zero3_nvme.json --checkpoint ckpt --json
has eval-checkpoint.out "\"loss\""
expect 0 eval-pretrained -- "$strata" eval --config ds_zero3_nvme.json --json
has eval-pretrained.out "base-model"
lacks eval-pretrained.out "fresh weights"

# 7. The same run from an Accelerate YAML that names the DeepSpeed file.
cat > accelerate.yaml <<YAML
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  deepspeed_config_file: ds_zero3_nvme.json
  zero3_init_flag: true
num_machines: 1
num_processes: 1
YAML
expect 0 accelerate -- "$strata" train --config accelerate.yaml --steps 2 --out acc-out
has accelerate.out "trained 2 steps"

# 8. The usual mistakes, each refused with its fix.
sed 's/"corpus.u16", "dtype": "uint16"/"corpus.txt"/' ds_zero3_nvme.json > text_for_llama.json
expect 2 text-for-llama -- "$strata" train --config text_for_llama.json --steps 1
has text-for-llama.err "fix:"
sed 's/"from_pretrained": "base-model"/"from_pretrained": "base-modle"/' ds_zero3_nvme.json > typo.json
expect 2 typo-from-pretrained -- "$strata" train --config typo.json --steps 1
has typo-from-pretrained.err "base-modle"
lacks typo-from-pretrained.err "seq_len"
expect 2 save-every-alone -- "$strata" train --config ds_zero3_nvme.json --steps 1 --save-every 1
has save-every-alone.err "fix: add --save-dir DIR"

echo "fine_tune_journey.sh: $checks checks passed"
