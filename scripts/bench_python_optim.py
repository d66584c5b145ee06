#!/usr/bin/env python3
"""strata.optim.CPUAdam beside its peers, in one run: torch.optim.AdamW with foreach (torch's
fastest on the CPU) and with its for-loop, and `strata bench adam`, the C++ path the Python
package calls (its bound: the memory traffic of the step).

  PYTHONPATH=build/release/python /usr/bin/python3 scripts/bench_python_optim.py \
      [--params 100M,1B] [--steps 5] [--foreach-up-to 100M] [--nvme-path DIR]

Each model is fp32 parameters in tensors of 10M elements with fp32 gradients; AdamW with
lr 1e-3 and weight decay 0.01 in every optimizer. A time is the median of `steps` steps after one
untimed step, torch on every core. torch's foreach AdamW takes temporaries as large as the model, so it runs only up to
--foreach-up-to parameters (a 1B model's 16 GB of states and its temporaries exceed 24 GiB).
Prints one line per model and optimizer: seconds per step, parameters per second, and the ratio
to torch's best and to the C++ path. With --nvme-path, CPUAdam(states="nvme") too (sub-groups of
100M), beside its bound: the larger of the step in memory and the disk's time to read and write
the states (12 bytes a parameter each way, at `strata io-bench`'s read and write rates on DIR).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from strata.optim import CPUAdam

CHUNK = 10_000_000
STRATA = Path(__file__).resolve().parent.parent / "build" / "release" / "tools" / "strata"


def count(text):
    units = {"K": 1e3, "M": 1e6, "B": 1e9}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def model(params):
    tensors = []
    left = params
    while left > 0:
        size = min(CHUNK, left)
        p = torch.nn.Parameter(torch.randn(size) * 0.02)
        p.grad = torch.randn(size) * 1e-3
        tensors.append(p)
        left -= size
    return tensors


def seconds_per_step(make_optimizer, params, steps):
    tensors = model(params)
    optimizer = make_optimizer(tensors)
    optimizer.step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    del optimizer, tensors
    return statistics.median(times)


def cpp_seconds_per_step(params, steps):
    report = subprocess.run(
        [str(STRATA), "bench", "adam", "--params", str(params), "--copy", "none", "--optimizer",
         "adamw", "--steps", str(steps), "--json"], check=True, capture_output=True, text=True)
    return json.loads(report.stdout)


def disk_gbps(path, rw, size="2G"):
    """io-bench's rate on DIR: the median of 3 after an untimed one."""
    report = subprocess.run(
        [str(STRATA), "io-bench", "--path", str(path), "--size", size, "--rw", rw, "--loops",
         "4", "--json", "--keep"], check=True, capture_output=True, text=True)
    loops = [json.loads(line)["gbps"] for line in report.stdout.splitlines()]
    return statistics.median(loops[1:])


def nvme_rows(params, steps, path, in_memory_s):
    """CPUAdam with its states on NVMe, and its bound."""
    seconds = seconds_per_step(
        lambda t: CPUAdam(t, lr=1e-3, weight_decay=0.01, states="nvme", nvme_path=path,
                          sub_group_size=100_000_000), params, steps)
    read, write = disk_gbps(path, "read"), disk_gbps(path, "write")
    for name in ("strata-io-bench.dat", "strata-io-bench.dat.crc32c"):
        (Path(path) / name).unlink(missing_ok=True)
    disk_s = 12 * params / (read * 1e9) + 12 * params / (write * 1e9)
    bound = max(in_memory_s, disk_s)
    print(f"  {'CPUAdam, states on NVMe':26s} {seconds:8.4f} s  bound {bound:.4f} s "
          f"(in memory {in_memory_s:.4f} s; disk {disk_s:.4f} s: read {read:.2f} GB/s, "
          f"write {write:.2f} GB/s)  {bound / seconds:5.2f}x the bound")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="100M,1B")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--foreach-up-to", default="100M")
    parser.add_argument("--nvme-path", default=None)
    args = parser.parse_args()
    # Every core for torch too (Debian's torch may start with one thread).
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for params in [count(p) for p in args.params.split(",")]:
        cpp = cpp_seconds_per_step(params, args.steps)
        rows = {"strata bench adam (C++)": cpp["seconds_per_step"]}
        rows["strata.optim.CPUAdam"] = seconds_per_step(
            lambda t: CPUAdam(t, lr=1e-3, weight_decay=0.01), params, args.steps)
        rows["torch AdamW for-loop"] = seconds_per_step(
            lambda t: torch.optim.AdamW(t, lr=1e-3, weight_decay=0.01, foreach=False), params,
            args.steps)
        if params <= count(args.foreach_up_to):
            rows["torch AdamW foreach"] = seconds_per_step(
                lambda t: torch.optim.AdamW(t, lr=1e-3, weight_decay=0.01, foreach=True), params,
                args.steps)
        torch_best = min(v for k, v in rows.items() if k.startswith("torch"))
        bound = cpp["bound"]["seconds_per_step"]
        print(f"{params:,} parameters (bound: {bound:.4f} s a step, "
              f"{cpp['bound']['gbps']:.1f} GB/s over {cpp['bytes_per_param']} B a parameter)")
        for name, seconds in rows.items():
            print(f"  {name:26s} {seconds:8.4f} s  {params / seconds / 1e9:6.3f} G params/s  "
                  f"{torch_best / seconds:5.2f}x torch's best  "
                  f"{cpp['seconds_per_step'] / seconds:5.2f}x the C++ path  "
                  f"{bound / seconds:5.2f}x the bound")
        if args.nvme_path:
            nvme_rows(params, args.steps, args.nvme_path, rows["strata.optim.CPUAdam"])
        sys.stdout.flush()


if __name__ == "__main__":
    main()
