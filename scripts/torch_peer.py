#!/usr/bin/env python3
"""PyTorch's in-GPU figure beside strata's, for a strata GPT config (docs/benchmarks.md).

`torch` trains transformers' GPT2LMHeadModel at the config's shape on one GPU as PyTorch users
train it when the model fits: SDPA attention, fp32 weights under bf16 autocast, fused AdamW with
the config's hyper-parameters, gradient checkpointing (when the config checkpoints activations),
gradient clipping at the config's norm, random tokens; it times steps after a warm-up and prints
tokens/s and MFU. `fsdp2` trains the same model as PyTorch users train one that does not fit:
FSDP2 (`fully_shard` per block and at the root) with `CPUOffloadPolicy`, so the parameters,
gradients and AdamW's states live in pinned CPU memory and the optimizer steps on the CPU, with
bf16 compute and fp32 gradient reduction (`MixedPrecisionPolicy`); one rank. `strata` reads a `strata train --metrics` file of the same config and prints the
same figures for strata, counted the same way: FLOPs per token are 6 x parameters plus 12 x
layers x d_model x seq_len for attention (GptShape::flops_per_token, PaLM's count), and MFU is
against the GPU's dense bf16 peak. scripts/gpu_check.sh runs both on the GPU machine.

  scripts/torch_peer.py torch --config configs/gpt_1p3b_in_gpu.json [--steps 10] [--warmup 3]
  scripts/torch_peer.py fsdp2 --config configs/gpt_1p3b_in_gpu.json [--steps 5] [--warmup 2]
  scripts/torch_peer.py strata --config configs/gpt_1p3b_in_gpu.json --metrics M.jsonl [--skip 2]
  add --peak-tflops X where the GPU is not in the table below; --dry-run prints the shape and
  the FLOP count without torch or a GPU.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

# Dense bf16 peaks in TFLOP/s (NVIDIA's data sheets; llm.c llmc/mfu.h has the same table). The
# H200 is the H100's chip with more memory. The PCIe H100 must be matched before the SXM one.
PEAKS_TFLOPS = [("H100 PCIe", 756.0), ("H100", 989.0), ("H200", 989.0), ("A100", 312.0)]


def shape_of(config_path):
    """The model, batch and optimizer settings of a strata config (a DeepSpeed JSON)."""
    config = json.loads(Path(config_path).read_text())
    model = config["strata"]["model"]
    optimizer = config.get("optimizer", {}).get("params", {})
    checkpointing = config.get("activation_checkpointing", {})
    return {
        "n_layer": int(model["n_layer"]),
        "n_head": int(model["n_head"]),
        "d_model": int(model["d_model"]),
        "seq_len": int(model["seq_len"]),
        "vocab": int(model["vocab"]),
        "micro_batch": int(config["train_micro_batch_size_per_gpu"]),
        "accumulation": int(config.get("gradient_accumulation_steps", 1)),
        "lr": float(optimizer.get("lr", 1e-3)),
        "betas": tuple(float(b) for b in optimizer.get("betas", [0.9, 0.999])),
        "eps": float(optimizer.get("eps", 1e-8)),
        "weight_decay": float(optimizer.get("weight_decay", 0.01)),
        "clip": float(config.get("gradient_clipping", 0.0)),
        "checkpointing": bool(checkpointing.get("partition_activations", False)
                              or (checkpointing.get("number_checkpoints") or 0) > 0),
        "bf16": bool(config.get("bf16", {}).get("enabled", False)),
    }


def parameter_count(s):
    """GptShape::parameter_count: embeddings, blocks with biases and two norms, the final norm;
    the output projection is tied to the token embedding, as GPT2LMHeadModel ties it."""
    c = s["d_model"]
    return s["vocab"] * c + s["seq_len"] * c + s["n_layer"] * (12 * c * c + 13 * c) + 2 * c


def flops_per_token(s):
    return 6.0 * parameter_count(s) + 12.0 * s["n_layer"] * s["d_model"] * s["seq_len"]


def peak_tflops(gpu_name, override):
    if override:
        return override
    for key, peak in PEAKS_TFLOPS:
        if key in gpu_name:
            return peak
    sys.exit(f"torch_peer: no bf16 peak known for '{gpu_name}': pass --peak-tflops")


def tokens_per_step(s):
    return s["micro_batch"] * s["accumulation"] * s["seq_len"]


def report(who, s, gpu_name, peak, seconds_per_step):
    """One line and one JSON object, the same for both systems."""
    tokens_per_s = tokens_per_step(s) / seconds_per_step
    achieved = tokens_per_s * flops_per_token(s) / 1e12
    print(f"{who}: {s['n_layer']} layers, d_model {s['d_model']}, {s['n_head']} heads, seq "
          f"{s['seq_len']}, vocab {s['vocab']}, {tokens_per_step(s):,} tokens a step on {gpu_name}: "
          f"{seconds_per_step:.3f} s/step, {tokens_per_s:,.0f} tokens/s, {achieved:.1f} TFLOP/s, "
          f"{100 * achieved / peak:.1f}% MFU of {peak:.0f} TFLOP/s")
    print(json.dumps({"system": who, "gpu": gpu_name, "seconds_per_step": seconds_per_step,
                      "tokens_per_s": tokens_per_s, "tflops": achieved,
                      "mfu": achieved / peak, "peak_tflops": peak,
                      "flops_per_token": flops_per_token(s),
                      "parameters": parameter_count(s)}))


def import_torch():
    try:
        import torch
        from transformers import AutoModelForCausalLM, GPT2Config
    except ImportError as missing:
        sys.exit(f"torch_peer: {missing}: the torch peers need torch and transformers (the GPU "
                 "machine has them; --dry-run needs neither)")
    if not torch.cuda.is_available():
        sys.exit("torch_peer: torch sees no GPU: the torch peers train on one")
    return torch, AutoModelForCausalLM, GPT2Config


def build_model(s, args, torch, AutoModelForCausalLM, GPT2Config):
    """GPT2LMHeadModel at the config's shape, fp32 weights on the CPU, checked against strata's
    parameter count."""
    torch.manual_seed(args.seed)
    # No dropout: strata's GPT has none, and it changes the work per step.
    config = GPT2Config(vocab_size=s["vocab"], n_positions=s["seq_len"], n_embd=s["d_model"],
                        n_layer=s["n_layer"], n_head=s["n_head"], resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa",
                                             torch_dtype=torch.float32)
    counted = sum(p.numel() for p in model.parameters())
    if counted != parameter_count(s):
        sys.exit(f"torch_peer: {type(model).__name__} has {counted} parameters, strata's "
                 f"GPT {parameter_count(s)}: not the same model")
    if s["checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def time_steps(s, args, torch, model, optimizer, device, autocast):
    """Seconds per step after the warm-up, and the last loss."""
    batch = (s["micro_batch"], s["seq_len"])

    def step():
        for _ in range(s["accumulation"]):
            tokens = torch.randint(0, s["vocab"], batch, device=device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                loss = model(input_ids=tokens, labels=tokens).loss
            (loss / s["accumulation"]).backward()
        if s["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), s["clip"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / args.steps, loss


def run_torch(s, args):
    torch, AutoModelForCausalLM, GPT2Config = import_torch()
    device = torch.device("cuda")
    model = build_model(s, args, torch, AutoModelForCausalLM, GPT2Config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], betas=s["betas"],
                                  eps=s["eps"], weight_decay=s["weight_decay"], fused=True)
    seconds, loss = time_steps(s, args, torch, model, optimizer, device, s["bf16"])
    name = torch.cuda.get_device_name(device)
    print(f"torch {torch.__version__}, {type(model).__name__}, attention "
          f"{model.config._attn_implementation}, loss {loss.item():.4f}, peak memory "
          f"{torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB")
    report("pytorch", s, name, peak_tflops(name, args.peak_tflops), seconds)


def run_fsdp2(s, args):
    torch, AutoModelForCausalLM, GPT2Config = import_torch()
    import os
    import torch.distributed as dist
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1)
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    model = build_model(s, args, torch, AutoModelForCausalLM, GPT2Config)
    precision = MixedPrecisionPolicy(
        param_dtype=torch.bfloat16 if s["bf16"] else torch.float32, reduce_dtype=torch.float32)
    for block in model.transformer.h:
        fully_shard(block, offload_policy=CPUOffloadPolicy(), mp_policy=precision)
    fully_shard(model, offload_policy=CPUOffloadPolicy(), mp_policy=precision)
    # The parameters (and so AdamW's states) are in pinned CPU memory: the step runs on the CPU.
    optimizer = torch.optim.AdamW(model.parameters(), lr=s["lr"], betas=s["betas"],
                                  eps=s["eps"], weight_decay=s["weight_decay"])
    seconds, loss = time_steps(s, args, torch, model, optimizer, device, False)
    name = torch.cuda.get_device_name(device)
    print(f"torch {torch.__version__}, FSDP2 with CPUOffloadPolicy, {type(model).__name__}, "
          f"loss {loss.item():.4f}, peak GPU memory "
          f"{torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB")
    report("pytorch-fsdp2-cpu-offload", s, name, peak_tflops(name, args.peak_tflops), seconds)
    dist.destroy_process_group()


def run_strata(s, args):
    """strata's figure from its metrics file: the mean step time after `--skip` warm-up steps."""
    rows = [json.loads(line) for line in Path(args.metrics).read_text().splitlines() if line]
    timed = [row for row in rows if row["step"] > args.skip]
    if not timed:
        sys.exit(f"torch_peer: {args.metrics} has no step after step {args.skip}")
    if any(row["tokens"] != tokens_per_step(s) for row in timed):
        sys.exit(f"torch_peer: {args.metrics} is not a run of {args.config}: its steps train "
                 f"{timed[0]['tokens']} tokens, the config {tokens_per_step(s)}")
    seconds = sum(row["seconds"] for row in timed) / len(timed)
    name = args.gpu or subprocess.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
        check=True, capture_output=True, text=True).stdout.strip()
    report("strata", s, name, peak_tflops(name, args.peak_tflops), seconds)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("system", choices=["torch", "fsdp2", "strata"])
    parser.add_argument("--config", required=True, help="a strata GPT config (configs/*.json)")
    parser.add_argument("--steps", type=int, default=10, help="torch, fsdp2: steps timed")
    parser.add_argument("--warmup", type=int, default=3,
                        help="torch, fsdp2: steps before the timing")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--metrics", help="strata: the strata train --metrics file")
    parser.add_argument("--skip", type=int, default=2, help="strata: warm-up steps left out")
    parser.add_argument("--gpu", help="strata: the GPU's name (default: nvidia-smi's)")
    parser.add_argument("--peak-tflops", type=float, help="the GPU's dense bf16 peak")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the shape and FLOP count only (no torch, no GPU)")
    args = parser.parse_args(argv)
    if args.system == "strata" and not args.metrics and not args.dry_run:
        parser.error("strata needs --metrics, the strata train --metrics file")
    if args.steps < 1 or args.warmup < 0 or args.skip < 0:
        parser.error("--steps must be at least 1, --warmup and --skip at least 0")
    return args


def main(argv):
    args = parse_args(argv)
    s = shape_of(args.config)
    if args.dry_run:
        print(json.dumps({**s, "parameters": parameter_count(s),
                          "flops_per_token": flops_per_token(s),
                          "tokens_per_step": tokens_per_step(s)}))
        return
    {"torch": run_torch, "fsdp2": run_fsdp2, "strata": run_strata}[args.system](s, args)


if __name__ == "__main__":
    main(sys.argv[1:])
