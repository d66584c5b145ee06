#!/usr/bin/env python3
"""A small PyTorch model on the CPU trained 20 steps with torch.optim.AdamW, then again from the
same start with strata.optim.CPUAdam keeping its states on NVMe (states="nvme"): both loss
curves, and what each run held in memory.

  PYTHONPATH=build/release/python /usr/bin/python3 scripts/python_nvme_states.py --nvme-path DIR \
      [--width 2048] [--steps 20]

The model is an MLP (4 linear layers of width x width, GELU) fitting a fixed random target, its
batches drawn from a seeded generator, so both runs see the same data. Each run is a fresh
process (this script runs itself again), so that its resident set size (RSS, from
/proc/self/status) is its own: AdamW's grows by the fp32 moments, 8 bytes a parameter, while
CPUAdam's states stay on the disk and its memory holds only their swap buffers.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch


def rss_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def model(width):
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers[:-1])


def run(args):
    net = model(args.width)
    if args.optimizer == "adamw":
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
    else:
        from strata.optim import CPUAdam
        optimizer = CPUAdam(net.parameters(), lr=1e-3, weight_decay=0.01, states="nvme",
                            nvme_path=args.nvme_path, sub_group_size=1 << 20)
    generator = torch.Generator().manual_seed(1)
    target = torch.randn(args.width, args.width, generator=generator) / args.width ** 0.5
    before = rss_bytes()
    losses = []
    for _ in range(args.steps):
        inputs = torch.randn(64, args.width, generator=generator)
        loss = torch.nn.functional.mse_loss(net(inputs), inputs @ target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    result = {"losses": losses, "rss_before": before, "rss_after": rss_bytes(),
              "params": sum(p.numel() for p in net.parameters())}
    if args.optimizer == "cpuadam":
        result["swap_buffers"] = optimizer._nvme.buffer_bytes
        result["swap_file"] = optimizer._nvme.nvme_bytes
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nvme-path", default=None)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--optimizer", choices=["adamw", "cpuadam"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.optimizer:
        run(args)
        return
    nvme_path = args.nvme_path or tempfile.mkdtemp()
    results = {}
    for optimizer in ("adamw", "cpuadam"):
        child = subprocess.run(
            [sys.executable, __file__, "--optimizer", optimizer, "--nvme-path", nvme_path,
             "--width", str(args.width), "--steps", str(args.steps)],
            check=True, capture_output=True, text=True, env=os.environ)
        results[optimizer] = json.loads(child.stdout.strip().splitlines()[-1])
    mib = 1 << 20
    params = results["adamw"]["params"]
    print(f"an MLP of {params:,} fp32 parameters, {args.steps} steps, the same data")
    print("step  torch.optim.AdamW  strata CPUAdam (states on NVMe)")
    for step, (a, b) in enumerate(zip(results["adamw"]["losses"], results["cpuadam"]["losses"])):
        print(f"{step + 1:4d}  {a:17.6f}  {b:17.6f}")
    for name, label in (("adamw", "torch.optim.AdamW"), ("cpuadam", "strata CPUAdam, nvme")):
        r = results[name]
        print(f"{label:22s} RSS {r['rss_before'] / mib:8.1f} MiB before the first step, "
              f"{r['rss_after'] / mib:8.1f} MiB after the last")
    c = results["cpuadam"]
    print(f"CPUAdam's states: {c['swap_file'] / mib:.1f} MiB in the swap file under {nvme_path}, "
          f"{c['swap_buffers'] / mib:.1f} MiB of swap buffers in memory; AdamW's moments: "
          f"{8 * params / mib:.1f} MiB in memory")


if __name__ == "__main__":
    main()
