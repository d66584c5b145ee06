#!/usr/bin/env python3
"""Plain torch.matmul on the shapes of `strata bench gemm`, the peer of strata's GPU products.

`torch` runs each linear layer's products on the GPU in the compute type asked for: the forward
out = inp @ weight^T, and the backward dinp += dout @ weight and dweight += dout^T @ inp (addmm_,
accumulating as strata's matmul_backward does), each call timed between two CUDA events, the calls
back to back after one untimed call, the median counting: what `strata bench gemm --device cuda`
does with its own ops. The shapes come from that command's --json (--shapes) or from a GPT config,
computed as bench/bench_gemm_shapes.cpp computes them (--config). It writes JSON in the schema of
`strata bench gemm --json`: one row per layer with op_forward_gflops and op_backward_gflops, here
torch's.

`compare` reads strata's JSON and torch's and writes one TSV row per layer and direction (shape,
m, n, k, direction, strata TFLOP/s, torch TFLOP/s, ratio), a layer whose forward strata runs with
its GELU (op_gelu_forward_gflops) getting a forward_gelu row beside plain torch.matmul too, and a
last row for one micro-batch's products; it prints each row with the verdict against the targets
strata's JSON states (target_vs_peer, target_large_gflops on its large rows). It needs no torch.
scripts/gpu_check.sh runs both on the GPU machine.

  scripts/torch_matmul_peer.py torch (--shapes STRATA.json | --config C.json) [--dtype bfloat16]
                                     [--repeats 20] [--out TORCH.json] [--dry-run]
  scripts/torch_matmul_peer.py compare STRATA.json TORCH.json [--tsv gemm_bf16.tsv]
"""

import argparse
import json
import sys
from pathlib import Path

DTYPES = ("float32", "bfloat16", "float16")


def gpt_layers(config_path):
    """The GPT's linear layers of a strata config (strata.model's shape keys), as
    bench/bench_gemm_shapes.cpp lists them: name, m (rows), n (out), k (in), count."""
    config = json.loads(Path(config_path).read_text())
    model = config.get("strata", {}).get("model", {})
    needed = ("n_layer", "d_model", "seq_len", "vocab")
    if any(key not in model for key in needed) or "train_micro_batch_size_per_gpu" not in config:
        sys.exit(f"torch_matmul_peer: {config_path} does not spell out a GPT's shape (strata.model "
                 f"{', '.join(needed)} and train_micro_batch_size_per_gpu): pass --shapes with the "
                 "--json of `strata bench gemm --config` instead")
    c, layers = int(model["d_model"]), int(model["n_layer"])
    rows = int(config["train_micro_batch_size_per_gpu"]) * int(model["seq_len"])
    return [
        {"name": "qkv", "m": rows, "n": 3 * c, "k": c, "count": layers},
        {"name": "attn_proj", "m": rows, "n": c, "k": c, "count": layers},
        {"name": "mlp_fc", "m": rows, "n": 4 * c, "k": c, "count": layers},
        {"name": "mlp_proj", "m": rows, "n": c, "k": 4 * c, "count": layers},
        {"name": "lm_head", "m": rows, "n": int(model["vocab"]), "k": c, "count": 1},
    ]


def median_seconds(torch, call, repeats):
    """One untimed call, then `repeats` calls each between two events, back to back."""
    call()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(repeats)]
    for start, end in events:
        start.record()
        call()
        end.record()
    torch.cuda.synchronize()
    seconds = sorted(start.elapsed_time(end) / 1e3 for start, end in events)
    return seconds[len(seconds) // 2]


def time_layer(torch, layer, dtype, repeats):
    """Seconds of the layer's forward and of its backward, each the median call."""
    m, n, k = layer["m"], layer["n"], layer["k"]
    uniform = lambda *shape: torch.rand(*shape, device="cuda", dtype=dtype) * 2 - 1
    inp, weight, dout = uniform(m, k), uniform(n, k), uniform(m, n)
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    dinp = torch.zeros(m, k, device="cuda", dtype=dtype)
    dweight = torch.zeros(n, k, device="cuda", dtype=dtype)

    def backward():
        dinp.addmm_(dout, weight)
        dweight.addmm_(dout.t(), inp)

    forward_s = median_seconds(torch, lambda: torch.matmul(inp, weight.t(), out=out), repeats)
    return forward_s, median_seconds(torch, backward, repeats)


def run_torch(args):
    if args.shapes:
        strata = json.loads(Path(args.shapes).read_text())
        layers = [{key: row[key] for key in ("name", "m", "n", "k", "count")}
                  for row in strata["shapes"]]
        dtype_name, source = args.dtype or strata["dtype"], strata["source"]
    else:
        layers, dtype_name, source = gpt_layers(args.config), args.dtype or "bfloat16", args.config
    if dtype_name not in DTYPES:
        sys.exit(f"torch_matmul_peer: dtype {dtype_name} is not one of {', '.join(DTYPES)}")
    if args.dry_run:
        for layer in layers:
            print("{name:<10} m {m:>6} n {n:>6} k {k:>6} x{count}".format(**layer))
        return
    import torch  # only here: --dry-run and compare run without it

    torch.backends.cuda.matmul.allow_tf32 = False  # strata's fp32 products are fp32 throughout
    dtype = getattr(torch, dtype_name)
    rows, step_flops, step_s = [], 0.0, 0.0
    for layer in layers:
        forward_s, backward_s = time_layer(torch, layer, dtype, args.repeats)
        flops = 2.0 * layer["m"] * layer["n"] * layer["k"]  # forward; backward twice that
        rows.append(dict(layer, op_forward_gflops=flops / forward_s / 1e9,
                         op_backward_gflops=2 * flops / backward_s / 1e9))
        step_flops += layer["count"] * 3 * flops
        step_s += layer["count"] * (forward_s + backward_s)
    result = {"source": source, "peer": "torch.matmul", "torch": torch.__version__,
              "device": torch.cuda.get_device_name(), "backend": "cuda", "dtype": dtype_name,
              "repeats": args.repeats, "shapes": rows,
              "linear_flops_per_micro_batch": step_flops, "op_gflops": step_flops / step_s / 1e9}
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


def compare_rows(strata, peer):
    """(shape, m, n, k, direction, strata GFLOP/s, torch GFLOP/s, large) per layer and direction."""
    peer_rows = {row["name"]: row for row in peer["shapes"]}
    for row in strata["shapes"]:
        theirs = peer_rows.get(row["name"])
        if theirs is None or [theirs[key] for key in "mnk"] != [row[key] for key in "mnk"]:
            sys.exit(f"torch_matmul_peer: {row['name']} {row['m']}x{row['n']}x{row['k']} is not "
                     "among torch's shapes: run both on the same config")
        shape = (row["name"], row["m"], row["n"], row["k"])
        large = row.get("large", False)
        yield shape + ("forward", row["op_forward_gflops"], theirs["op_forward_gflops"], large)
        if "op_gelu_forward_gflops" in row:
            yield shape + ("forward_gelu", row["op_gelu_forward_gflops"],
                           theirs["op_forward_gflops"], large)
        yield shape + ("backward", row["op_backward_gflops"], theirs["op_backward_gflops"], large)


def run_compare(args):
    strata = json.loads(Path(args.strata).read_text())
    peer = json.loads(Path(args.torch).read_text())
    target_ratio = strata.get("target_vs_peer")
    target_large = strata.get("target_large_gflops")
    rows = list(compare_rows(strata, peer))
    lines = ["shape\tm\tn\tk\tdirection\tstrata_tflops\ttorch_tflops\tratio"]
    below = []
    print(f"{strata['dtype']} products on {strata['device']}: strata's ops beside "
          f"{peer.get('peer', 'torch.matmul')} (torch {peer.get('torch', '?')}), TFLOP/s")
    rows.append(("micro_batch", "-", "-", "-", "forward+backward", strata["op_gflops"],
                 peer["op_gflops"], False))
    for name, m, n, k, direction, ours, theirs, large in rows:
        ratio = ours / theirs if theirs > 0 else 0.0
        lines.append(f"{name}\t{m}\t{n}\t{k}\t{direction}\t{ours / 1e3:.1f}\t{theirs / 1e3:.1f}"
                     f"\t{ratio:.3f}")
        verdicts = []
        if target_ratio is not None:
            verdicts.append(f"{'ok' if ratio >= target_ratio else 'BELOW'} {target_ratio}x")
            if ratio < target_ratio:
                below.append(f"{name} {direction} {ratio:.3f}x")
        if large and target_large is not None:
            met = ours >= target_large
            verdicts.append(f"{'ok' if met else 'BELOW'} {target_large / 1e3:.0f} TFLOP/s")
            if not met:
                below.append(f"{name} {direction} {ours / 1e3:.0f} TFLOP/s")
        print(f"{name:<11} {direction:<16} {ours / 1e3:8.1f} {theirs / 1e3:8.1f} {ratio:6.3f}x"
              f"  {', '.join(verdicts)}")
    if args.tsv:
        Path(args.tsv).write_text("\n".join(lines) + "\n")
    if target_ratio is not None:
        print("targets: " + ("met" if not below else "not met: " + "; ".join(below)))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    torch_parser = commands.add_parser("torch", help="time torch.matmul on the GPU")
    source = torch_parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--shapes", help="the --json of strata bench gemm")
    source.add_argument("--config", help="a strata GPT config (strata.model's shape keys)")
    torch_parser.add_argument("--dtype", help="float32, bfloat16 or float16 (default: the "
                              "--shapes file's, or bfloat16)")
    torch_parser.add_argument("--repeats", type=int, default=20)
    torch_parser.add_argument("--out", help="also write the JSON here")
    torch_parser.add_argument("--dry-run", action="store_true",
                              help="print the shapes without torch or a GPU")
    compare = commands.add_parser("compare", help="strata's JSON beside torch's, as a TSV")
    compare.add_argument("strata")
    compare.add_argument("torch")
    compare.add_argument("--tsv")
    args = parser.parse_args()
    if args.command == "torch":
        if args.repeats < 1:
            parser.error("--repeats must be at least 1")
        run_torch(args)
    else:
        run_compare(args)


if __name__ == "__main__":
    main()
