#!/usr/bin/env python3
"""strata generate against a PyTorch reference: greedy continuations of the committed Hugging Face
fixture folders (tests/fixtures/hf), the reference a float64 torch forward over the whole sequence
for every new token (scripts/make_hf_fixtures.py's forwards, which mirror transformers' modeling
code), strata's from its KV cache, the prompts of each folder generated as one batch.

  /usr/bin/python3 scripts/generate_reference.py [--strata build/release/tools/strata]
      [--fixtures gpt2,gpt2_noprefix,llama,llama3,qwen2,mistral] [--new-tokens 24]

For each folder and prompt it compares the new ids one by one. Where the reference's two largest
logits differ by less than 1e-4 of its largest magnitude, fp32 and float64 may rightly choose
apart, so the comparison of that prompt stops there (the table says where). Any earlier
difference, or a prompt compared over fewer than 8 tokens, fails the run (exit status 1).
Needs Debian's python3-torch and python3-numpy (scripts/setup.sh installs them).
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_hf_fixtures as fixtures  # noqa: E402

HERE = Path(__file__).resolve().parent.parent
PROMPTS = [[1, 5, 9, 3], [7, 2], [11, 4, 4, 8, 2, 6]]
NEAR_TIE = 1e-4
MIN_COMPARED = 8


def weights(folder):
    """Every tensor of the folder's safetensors (one file or shards), widened to float64."""
    files = sorted(folder.glob("model*.safetensors"))
    stored = {}
    for file in files:
        tensors, _ = fixtures.read_safetensors(file)
        stored.update(tensors)
    return {name: t.double() for name, t in stored.items()}


def forward_for(folder):
    """The folder's float64 forward: logits [1, T, V] of ids [1, T]."""
    config = json.loads((folder / "config.json").read_text())
    w = weights(folder)
    if config["model_type"] == "gpt2":
        prefix = "transformer." if "transformer.wte.weight" in w else ""
        return lambda ids: fixtures.gpt2_forward(w, ids, config, prefix)
    return lambda ids: fixtures.llama_forward(w, ids, config)


def greedy(forward, prompt, new_tokens):
    """The reference's new ids and, for each, whether its top two logits are apart."""
    ids, apart = list(prompt), []
    for _ in range(new_tokens):
        with torch.no_grad():
            logits = forward(torch.tensor([ids], dtype=torch.int64))[0, -1]
        top = torch.topk(logits, 2).values
        apart.append(bool(top[0] - top[1] > NEAR_TIE * logits.abs().max()))
        ids.append(int(torch.argmax(logits)))
    return ids[len(prompt):], apart


def strata_batch(strata, folder, new_tokens):
    """strata generate's new ids for every prompt, the prompts as one batch (--prompts)."""
    with tempfile.TemporaryDirectory() as work:
        prompts = Path(work) / "prompts.jsonl"
        prompts.write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in PROMPTS))
        run = subprocess.run(
            [strata, "generate", "--model", str(folder), "--prompts", str(prompts),
             "--max-new-tokens", str(new_tokens), "--temperature", "0"],
            capture_output=True, text=True, check=False)
    if run.returncode != 0:
        sys.exit(f"generate_reference.py: strata generate failed on {folder}:\n{run.stderr}")
    return [json.loads(line)["ids"] for line in run.stdout.splitlines()]


def compare(theirs, ours, apart):
    """(tokens compared, first differing index or None): compared up to the first near tie."""
    for i, (expected, got) in enumerate(zip(theirs, ours)):
        if got != expected:
            return i, i
        if not apart[i]:
            return i + 1, None
    return len(theirs), None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--strata", default=str(HERE / "build/release/tools/strata"))
    parser.add_argument("--fixtures", default="gpt2,gpt2_noprefix,llama,llama3,qwen2,mistral")
    parser.add_argument("--new-tokens", type=int, default=24)
    args = parser.parse_args()
    failed = False
    print(f"{'folder':<14} {'prompt':<22} {'compared':>8}  result")
    for name in args.fixtures.split(","):
        folder = HERE / "tests/fixtures/hf" / name
        config = json.loads((folder / "config.json").read_text())
        context = config.get("n_positions", config.get("max_position_embeddings"))
        new_tokens = min(args.new_tokens, context - max(len(p) for p in PROMPTS))
        forward = forward_for(folder)
        ours = strata_batch(args.strata, folder, new_tokens)
        for prompt, got in zip(PROMPTS, ours):
            theirs, apart = greedy(forward, prompt, new_tokens)
            compared, differs = compare(theirs, got, apart)
            ok = differs is None and compared >= min(MIN_COMPARED, new_tokens)
            failed |= not ok
            result = "same" if ok else (
                f"differs at new token {differs}: {got} vs {theirs}" if differs is not None
                else f"only {compared} compared before a near tie")
            if ok and compared < len(theirs):
                result += f" (a near tie at new token {compared}: not compared past it)"
            print(f"{name:<14} {str(prompt):<22} {compared:>8}  {result}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
