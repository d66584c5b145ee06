#!/usr/bin/env python3
"""strata's Hugging Face export against transformers itself (docs/models.md), on a machine that
has torch and transformers (the GPU machine; scripts/gpu_check.sh runs it as `hf_transformers`).

For each fixture folder of tests/fixtures/hf: strata fine-tunes it for 3 steps from
`from_pretrained`, saves, and exports the checkpoint with `strata ckpt export --hf`; then
transformers' AutoModelForCausalLM.from_pretrained loads the exported folder, and its mean loss
over the same consecutive windows of a token file must equal `strata eval --checkpoint`'s within
1e-4 relative (fp32, TF32 off). Prints one line per folder and exits 1 if any differs.

  scripts/hf_transformers_check.py --strata PATH/TO/strata --work DIR [--device cuda|cpu]
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM

FIXTURES = ["gpt2", "gpt2_noprefix", "llama", "llama3", "qwen2", "mistral"]
SEQ_LEN, BATCH, TOKENS = 7, 2, 400


def strata(binary, *args):
    return subprocess.run([binary, *args], check=True, capture_output=True, text=True).stdout


def transformers_loss(folder, tokens, device):
    """The mean next-token loss over windows j: inputs [jT, jT+T), targets one later, as
    `strata eval` walks a file."""
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).to(device)
    model.eval()
    windows = (len(tokens) - 1) // SEQ_LEN
    total, count = 0.0, 0
    with torch.no_grad():
        for j in range(windows):
            window = torch.tensor(tokens[j * SEQ_LEN:(j + 1) * SEQ_LEN + 1], dtype=torch.long)
            logits = model(window[None, :-1].to(device)).logits[0].double()
            loss = torch.nn.functional.cross_entropy(logits, window[1:].to(device), reduction="sum")
            total += loss.item()
            count += SEQ_LEN
    return total / count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    root = Path(__file__).resolve().parent.parent
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    failed = False
    for name in FIXTURES:
        folder = root / "tests" / "fixtures" / "hf" / name
        vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
        tokens = np.random.default_rng(7).integers(0, vocab, TOKENS).astype(np.uint16)
        data = work / f"{name}.bin"
        tokens.tofile(data)
        config = work / f"{name}.json"
        config.write_text(json.dumps({
            "train_micro_batch_size_per_gpu": BATCH,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            "strata": {"model": {"from_pretrained": str(folder), "seq_len": SEQ_LEN},
                       "data": {"path": str(data), "dtype": "uint16"}},
        }))
        ckpt, exported = work / f"{name}-ckpt", work / f"{name}-hf"
        strata(args.strata, "train", "--config", str(config), "--steps", "3", "--save-dir",
               str(ckpt), "--out", str(work / f"{name}-out"))
        strata(args.strata, "ckpt", "export", str(ckpt), "--hf", str(exported))
        ours = json.loads(strata(args.strata, "eval", "--config", str(config), "--checkpoint",
                                 str(ckpt), "--data", str(data), "--json"))["loss"]
        theirs = transformers_loss(exported, tokens.tolist(), args.device)
        ok = abs(ours - theirs) <= 1e-4 * abs(theirs)
        failed |= not ok
        print(f"{name:14s} strata {ours:.7f}  transformers {theirs:.7f}  "
              f"{'same' if ok else 'DIFFERENT'} ({args.device})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
