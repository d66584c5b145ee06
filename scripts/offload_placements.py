#!/usr/bin/env python3
"""A strata GPT config in five placements of its states, on one GPU (docs/benchmarks.md).

For each placement (in GPU memory; optimizer on CPU; parameters and optimizer on CPU; optimizer on
NVMe; parameters and optimizer on NVMe) it derives a config from the given one (ZeRO stage 3
wherever something is offloaded, strata.overlap_optimizer with the optimizer offloaded), trains
`--steps` steps with the timeline of step `--timeline-step`, and writes one row of
placements.tsv: seconds per step and tokens/s over the steps after `--skip`, and the compute
stream's busy fraction of the timed step (the union of the compute row's spans, its waits left
out, over the step's time, from the timeline's .tsv). scripts/gpu_check.sh runs it on the GPU
machine beside scripts/torch_peer.py's in-GPU and FSDP2 peers.

  scripts/offload_placements.py --config configs/gpt_1p3b_in_gpu.json --strata build/release/tools/strata \
      --swap /path/on/nvme [--out DIR] [--steps 5] [--skip 2] [--only gpu,optimizer_cpu]
  --dry-run writes the five configs and prints what it would run.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

# name: (offload_param.device, offload_optimizer.device)
PLACEMENTS = {
    "gpu": ("none", "none"),
    "optimizer_cpu": ("none", "cpu"),
    "params_optimizer_cpu": ("cpu", "cpu"),
    "optimizer_nvme": ("none", "nvme"),
    "params_optimizer_nvme": ("nvme", "nvme"),
}


def placement_config(source, param, optimizer, swap, name):
    config = json.loads(Path(source).read_text())
    zero = config.setdefault("zero_optimization", {})
    if param != "none" or optimizer != "none":
        zero["stage"] = 3
    for key, device in (("offload_param", param), ("offload_optimizer", optimizer)):
        zero[key] = {"device": device, "pin_memory": True, "nvme_path": str(swap)}
    if optimizer != "none":
        # Sub-groups small enough that the optimizer steps them beside backward.
        config["strata"]["overlap_optimizer"] = True
        zero["sub_group_size"] = 100_000_000
    config["strata"]["job_name"] = f"placement-{name}"
    return config


def compute_busy(timeline_tsv, seconds):
    """The union of the compute row's spans but its waits, as a fraction of the step's `seconds`.

    A wait span is the stream held for an event (a copy, the optimizer's new parameters): idle."""
    spans = []
    for line in Path(timeline_tsv).read_text().splitlines():
        if line.startswith("#"):
            continue
        row = line.split("\t")
        if len(row) >= 6 and row[4] == "compute" and not row[5].startswith("wait"):
            spans.append((float(row[2]), float(row[3])))
    busy, reached = 0.0, float("-inf")
    for begin, end in sorted(spans):
        if end > reached:
            busy += end - max(begin, reached)
            reached = end
    return busy / seconds


def step_rows(metrics):
    return [json.loads(line) for line in Path(metrics).read_text().splitlines() if line.strip()]


def run_placement(args, name, folder):
    folder.mkdir(parents=True, exist_ok=True)
    param, optimizer = PLACEMENTS[name]
    config = placement_config(args.config, param, optimizer, args.swap, name)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    command = [args.strata, "train", "--config", "config.json", "--steps", str(args.steps),
               "--eval-every", "1000", "--metrics", "metrics.jsonl", "--out", ".",
               "--timeline", "timeline.png", "--timeline-step", str(args.timeline_step)]
    if args.dry_run:
        print(f"{name}: (cd {folder} && {' '.join(command)})")
        return None
    with open(folder / "train.log", "w") as log:
        done = subprocess.run(command, cwd=folder, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        print(f"{name}: strata train failed ({done.returncode}); see {folder / 'train.log'}")
        return None
    rows = [row for row in step_rows(folder / "metrics.jsonl") if "seconds" in row]
    timed = [row for row in rows if row["step"] > args.skip]
    seconds = sum(row["seconds"] for row in timed) / len(timed)
    tokens = timed[0]["tokens"]
    traced = next(row for row in rows if row["step"] == args.timeline_step)
    busy = compute_busy(folder / "timeline.tsv", traced["seconds"])
    return {"placement": name, "seconds_per_step": seconds, "tokens_per_s": tokens / seconds,
            "compute_busy": busy}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a strata GPT config (configs/*.json)")
    parser.add_argument("--strata", default="strata", help="the strata binary")
    parser.add_argument("--swap", required=True, help="nvme_path for the NVMe placements")
    parser.add_argument("--out", default=".", help="where each placement's folder goes")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--skip", type=int, default=2, help="warm-up steps left out")
    parser.add_argument("--timeline-step", type=int, default=3)
    parser.add_argument("--only", help="comma-separated placements (default: all five)")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(PLACEMENTS)
    unknown = [name for name in names if name not in PLACEMENTS]
    if unknown:
        parser.error(f"unknown placement {unknown[0]}: one of {', '.join(PLACEMENTS)}")
    if not args.skip < args.steps or not 1 <= args.timeline_step <= args.steps:
        parser.error("--skip must be below --steps, and --timeline-step within them")
    out = Path(args.out)
    results, failed = [], False
    for name in names:
        result = run_placement(args, name, out / name)
        if result is None:
            failed = failed or not args.dry_run
            continue
        results.append(result)
        print(json.dumps(result), flush=True)
    if args.dry_run:
        return 0
    with open(out / "placements.tsv", "w") as table:
        table.write("placement\tseconds_per_step\ttokens_per_s\tcompute_busy\n")
        for r in results:
            table.write(f"{r['placement']}\t{r['seconds_per_step']:.3f}\t{r['tokens_per_s']:.0f}\t"
                        f"{r['compute_busy']:.3f}\n")
    print((out / "placements.tsv").read_text(), end="")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
