#!/usr/bin/env python3
"""strata.aio.aio_handle beside its peers, in one run on one directory: `strata io-bench` (the
C++ engine it calls, the same file size, block and queue depth), and Python's usual ways to move
a tensor to and from a file: numpy's tofile/fromfile and torch.save/torch.load.

  PYTHONPATH=build/release/python /usr/bin/python3 scripts/bench_python_aio.py --path DIR \
      [--size 1G] [--runs 3]

Every write ends on the disk (the handle writes with O_DIRECT; the peers are followed by fsync),
and every read starts cold: the page cache is dropped before each peer's read (as root;
otherwise the peers read from memory and the script says so). The handle moves a page-locked
tensor from new_cpu_locked_tensor with block_size 1 MiB, queue depth 32 and overlapped events,
io-bench's defaults. A figure is the median of --runs after one untimed run (io-bench's too),
in GB/s (1e9 bytes).
"""

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import numpy
import torch

from strata.aio import aio_handle

STRATA = Path(__file__).resolve().parent.parent / "build" / "release" / "tools" / "strata"


def size_of(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def drop_caches():
    """True when the page cache could be dropped (root)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as control:
            control.write("3\n")
        return True
    except OSError:
        return False


def median_gbps(nbytes, runs, action, before=None):
    """The median of `runs` timed runs of `action`, after one untimed."""
    action()
    times = []
    for _ in range(runs):
        if before:
            before()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return nbytes / statistics.median(times) / 1e9


def io_bench(path, size, rw, runs):
    """io-bench's GB/s: the median of `runs` after one untimed run, as the handle is timed."""
    report = subprocess.run(
        [str(STRATA), "io-bench", "--path", str(path), "--size", str(size), "--rw", rw,
         "--block-size", "1M", "--queue-depth", "32", "--loops", str(runs + 1), "--json",
         "--keep"], check=True, capture_output=True, text=True)
    loops = [json.loads(line) for line in report.stdout.splitlines()]
    return statistics.median(loop["gbps"] for loop in loops[1:])


def fsynced(write):
    def action():
        write()
        fd = os.open(FILE_FOR_SYNC[0], os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return action


FILE_FOR_SYNC = [None]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", required=True)
    parser.add_argument("--size", default="1G")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    nbytes = size_of(args.size)
    folder = Path(args.path)
    folder.mkdir(parents=True, exist_ok=True)
    rows = {}
    rows["strata io-bench (C++)"] = (io_bench(folder, nbytes, "write", args.runs),
                                     io_bench(folder, nbytes, "read", args.runs))
    handle = aio_handle(block_size=1 << 20, queue_depth=32, overlap_events=True)
    data = handle.new_cpu_locked_tensor(nbytes // 4, torch.empty(0))
    data.copy_(torch.randn(nbytes // 4))
    target = str(folder / "aio_handle.bin")
    rows["strata.aio aio_handle"] = (
        median_gbps(nbytes, args.runs, lambda: handle.sync_pwrite(data, target)),
        median_gbps(nbytes, args.runs, lambda: handle.sync_pread(data, target)))
    cold = drop_caches()
    array = data.numpy()
    FILE_FOR_SYNC[0] = str(folder / "numpy.bin")
    rows["numpy tofile / fromfile"] = (
        median_gbps(nbytes, args.runs, fsynced(lambda: array.tofile(FILE_FOR_SYNC[0]))),
        median_gbps(nbytes, args.runs, lambda: numpy.fromfile(str(folder / "numpy.bin"),
                                                              dtype=numpy.float32),
                    drop_caches))
    saved = str(folder / "torch.pt")
    FILE_FOR_SYNC[0] = saved
    rows["torch.save / torch.load"] = (
        median_gbps(nbytes, args.runs, fsynced(lambda: torch.save(data, saved))),
        median_gbps(nbytes, args.runs, lambda: torch.load(saved), drop_caches))
    handle.free_cpu_locked_tensor(data)
    for name in ("aio_handle.bin", "numpy.bin", "torch.pt", "strata-io-bench.dat",
                 "strata-io-bench.dat.crc32c"):
        (folder / name).unlink(missing_ok=True)
    best_write, best_read = rows["strata io-bench (C++)"]
    print(f"{nbytes:,} bytes on {folder}; peers' reads from a "
          f"{'cold' if cold else 'warm (not root: the page cache was not dropped)'} cache")
    for name, (write, read_rate) in rows.items():
        print(f"  {name:26s} write {write:6.2f} GB/s ({write / best_write:4.2f}x io-bench)  "
              f"read {read_rate:6.2f} GB/s ({read_rate / best_read:4.2f}x io-bench)")


if __name__ == "__main__":
    main()
