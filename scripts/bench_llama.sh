#!/usr/bin/env bash
# A Llama-shaped model of 125M parameters fine-tuned from a Hugging Face folder with ZeRO-3 and
# its parameters and optimizer states on NVMe, beside the same model with nothing offloaded,
# beside sgemm on the model's own matrix products, and its weights' import beside fio reading the
# same bytes (docs/benchmarks.md, "A Llama from a Hugging Face folder").
#
#   scripts/bench_llama.sh --path DIR [--strata build/release/tools/strata] [--steps 8]
#
# DIR is on the disk under test and needs about 3 GB free. The folder is made by strata itself:
# a Llama (12 layers, hidden 768, 12 query heads over 4 k/v heads, MLP 2048, vocabulary 32000,
# untied head) built from its config.json with fresh weights, saved after one step and exported
# with `strata ckpt export --hf --dtype bf16`. The fine-tunes then start from that folder
# (strata.model.from_pretrained) on the built-in corpus, micro-batch 4 x 256 tokens with
# activation checkpointing: offloaded
# under a device budget of 1 GiB (the model states alone are 2 GB), and not offloaded.
set -euo pipefail

path=""
strata=""
steps=8
usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --path) path="$2"; shift 2 ;;
    --strata) strata="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "bench_llama.sh: unknown argument $1" >&2; usage ;;
  esac
done
here="$(cd "$(dirname "$0")/.." && pwd)"
[[ -n "$strata" ]] || strata="$here/build/release/tools/strata"
[[ -n "$path" ]] || { echo "bench_llama.sh: --path DIR is required" >&2; usage; }
[[ -x "$strata" ]] || { echo "bench_llama.sh: no strata binary at $strata; build it first or pass --strata" >&2; exit 2; }
command -v fio > /dev/null || { echo "bench_llama.sh: fio is not installed (apt-get install fio)" >&2; exit 2; }

work="$(mktemp -d "$path/strata-bench-llama.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/llama" "$work/swap"
cat > "$work/llama/config.json" << 'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 12,
 "num_attention_heads": 12, "num_key_value_heads": 4, "hidden_size": 768,
 "intermediate_size": 2048, "vocab_size": 32000, "max_position_embeddings": 2048,
 "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu",
 "tie_word_embeddings": false, "torch_dtype": "bfloat16"}
JSON

# $1: the zero_optimization section; $2: the model section; $3: the device budget.
config() {
  cat << JSON
{
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 1,
  "bf16": {"enabled": true},
  "gradient_clipping": 1.0,
  "activation_checkpointing": {"partition_activations": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.0}},
  "zero_optimization": $1,
  "strata": {"model": $2, "train_steps": $steps, "device_memory_budget": "$3", "seed": 5}
}
JSON
}
nvme='{"stage": 3, "sub_group_size": 2e7, "stage3_param_persistence_threshold": 1e4,
  "offload_param": {"device": "nvme", "nvme_path": "'"$work/swap"'", "pin_memory": false,
                    "buffer_count": 4, "buffer_size": 3e7},
  "offload_optimizer": {"device": "nvme", "nvme_path": "'"$work/swap"'", "pin_memory": false}}'

echo "== the Hugging Face folder: a fresh Llama, one step, exported in bf16"
config '{"stage": 0}' '{"config": "'"$work/llama/config.json"'", "seq_len": 256}' 12GiB \
  > "$work/make.json"
"$strata" train --config "$work/make.json" --steps 1 --save-dir "$work/ckpt" --out "$work/out" > /dev/null
"$strata" ckpt export "$work/ckpt" --hf "$work/hf" --dtype bf16
bytes=$(stat -c %s "$work/hf/model.safetensors")

drop_caches() { sync; echo 1 > /proc/sys/vm/drop_caches 2> /dev/null || true; }

run() {  # $1 name, $2 zero section, $3 budget; the weights come from the disk, not the cache
  config "$2" '{"from_pretrained": "'"$work/hf"'", "seq_len": 256}' "$3" > "$work/$1.json"
  drop_caches
  if ! "$strata" train --config "$work/$1.json" --out "$work/out-$1" > "$work/$1.txt" 2> "$work/$1.log"; then
    cat "$work/$1.log" >&2
    exit 1
  fi
  grep -E '^(throughput|trained)' "$work/$1.txt"
  grep -E "engine ready|pretrained weights read" "$work/$1.log" | sed -E "s/.*(engine ready|pretrained weights read)/\1/"
}
echo "== fine-tune, ZeRO-3 with parameters and optimizer states on NVMe"
run offloaded "$nvme" 1GiB
echo "== fine-tune, stage 0, nothing offloaded"
run plain '{"stage": 0}' 12GiB
echo "== the model's matrix products: strata's op and OpenBLAS sgemm"
"$strata" bench gemm --config "$work/plain.json" | grep -E '^(products|bound)'
echo "== fio reading the weights' $bytes bytes (io_uring, O_DIRECT, 1 MiB x QD32), page cache dropped"
drop_caches
fio --name=r --rw=read --filename="$work/hf/model.safetensors" --bs=1M --iodepth=32 \
  --ioengine=io_uring --direct=1 --size="$bytes" --output-format=json 2> /dev/null | python3 -c "
import json,sys
text = sys.stdin.read(); job = json.loads(text[text.index('{'):])['jobs'][0]['read']
print(f\"fio read {job['io_bytes']/1e9:.3f} GB in {job['runtime']/1000:.3f} s: {job['io_bytes']/job['runtime']/1e6:.3f} GB/s\")"
