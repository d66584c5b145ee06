#!/usr/bin/env python3
"""torch.nn.functional.scaled_dot_product_attention on the shapes of `strata bench attention`,
the peer of strata's fused causal attention, with each of PyTorch's SDPA backends.

`torch` runs causal attention on the GPU in the compute type asked for, once per backend
(torch.nn.attention.sdpa_kernel with SDPBackend FLASH_ATTENTION, EFFICIENT_ATTENTION,
CUDNN_ATTENTION and MATH): the forward alone, and the forward followed by the backward, each call
timed between two CUDA events, the calls back to back after one untimed call, the median counting:
what `strata bench attention --device cuda` does with its own ops. q, k and v are views of one
(B, T, H + 2 * KV, D) tensor, the layout strata's attention reads and a GPT's qkv product writes;
the inputs require gradients in both figures, so the forward keeps what its backward needs, as a
training step's does. A backend that raises on a shape (no kernel for this GPU, type or head
count) is recorded as unavailable there, with torch's reason. The shapes come from that command's
--json (--shapes) or from --shape (default: the command's two). Flops are counted as the command
counts them: forward 4 * B * H * T * T * D / 2 (causal), forward plus backward 3.5x that. It
writes JSON in the schema of `strata bench attention --json`, one list of shape rows per backend.

`compare` reads strata's JSON and torch's and writes one TSV row per shape and direction (shape,
direction, strata TFLOP/s, each backend's, the best backend's, strata's ratio to it) and prints
each row with the verdict against the target strata's JSON states (target_vs_peer, 0.9x). It
needs no torch. scripts/gpu_check.sh runs both on the GPU machine.

  scripts/torch_sdpa_peer.py torch [--shapes STRATA.json | --shape BxHxTxD ...] [--kv-heads N]
                                   [--dtype bfloat16] [--repeats 20] [--out TORCH.json]
                                   [--dry-run]
  scripts/torch_sdpa_peer.py compare STRATA.json TORCH.json [--tsv attention.tsv]
"""

import argparse
import json
import re
import sys
from pathlib import Path

DTYPES = ("float32", "bfloat16", "float16")
BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
# `strata bench attention`'s default shapes (bench/bench_attention.cpp).
DEFAULT_SHAPES = ("8x16x1024x128", "4x16x2048x128")
DIRECTIONS = ("forward", "forward_backward")


def parse_shape(text, kv_heads):
    """A shape row (shape, batch, heads, kv_heads, seq_len, head_dim, flops) from BxHxTxD."""
    match = re.fullmatch(r"([1-9]\d*)x([1-9]\d*)x([1-9]\d*)x([1-9]\d*)", text)
    if not match:
        sys.exit(f"torch_sdpa_peer: --shape {text} is not BxHxTxD: give four positive whole "
                 "numbers joined by x, as 8x16x1024x128")
    batch, heads, seq_len, head_dim = map(int, match.groups())
    kv_heads = kv_heads or heads
    if heads % kv_heads:
        sys.exit(f"torch_sdpa_peer: --kv-heads {kv_heads} does not divide the {heads} query "
                 f"heads of --shape {text}: give a divisor, or leave it out")
    forward = 4.0 * batch * heads * seq_len * seq_len * head_dim / 2  # causal: half the scores
    return {"shape": text, "batch": batch, "heads": heads, "kv_heads": kv_heads,
            "seq_len": seq_len, "head_dim": head_dim, "forward_flops": forward,
            "forward_backward_flops": 3.5 * forward}


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


def time_shape(torch, backend, row, dtype, repeats):
    """The row with the backend's forward and forward+backward figures."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    b, h, kv, t, d = (row[key] for key in ("batch", "heads", "kv_heads", "seq_len", "head_dim"))
    qkv = torch.rand(b, t, h + 2 * kv, d, device="cuda", dtype=dtype) * 2 - 1
    leaf = lambda part: part.transpose(1, 2).detach().requires_grad_()  # (B, heads, T, D) views
    q, k, v = leaf(qkv[:, :, :h]), leaf(qkv[:, :, h:h + kv]), leaf(qkv[:, :, h + kv:])
    dout = torch.rand(b, h, t, d, device="cuda", dtype=dtype) * 2 - 1
    gqa = {"enable_gqa": True} if kv != h else {}

    def forward():
        return sdpa(q, k, v, is_causal=True, **gqa)

    def forward_backward():
        q.grad = k.grad = v.grad = None
        forward().backward(dout)

    with sdpa_kernel(backend):
        forward_s = median_seconds(torch, forward, repeats)
        forward_backward_s = median_seconds(torch, forward_backward, repeats)
    return dict(row, forward_ms=forward_s * 1e3, forward_backward_ms=forward_backward_s * 1e3,
                forward_tflops=row["forward_flops"] / forward_s / 1e12,
                forward_backward_tflops=row["forward_backward_flops"] / forward_backward_s / 1e12)


def run_backend(torch, name, rows, dtype, repeats):
    """One backend over every shape; a shape it cannot run keeps torch's reason instead."""
    from torch.nn.attention import SDPBackend

    backend = getattr(SDPBackend, name, None)
    if backend is None:
        return {"name": name, "available": False, "reason": f"torch {torch.__version__} has no "
                f"SDPBackend.{name}", "shapes": []}
    measured = []
    for row in rows:
        try:
            measured.append(time_shape(torch, backend, row, dtype, repeats))
        except Exception as error:  # noqa: BLE001 - any refusal of the backend is recorded
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            measured.append(dict(row, unavailable=reason))
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    available = any("unavailable" not in row for row in measured)
    return {"name": name, "available": available, "shapes": measured}


def shapes_and_dtype(args):
    if args.shapes:
        strata = json.loads(Path(args.shapes).read_text())
        rows = [parse_shape(row["shape"], row["kv_heads"]) for row in strata["shapes"]]
        return rows, args.dtype or strata["dtype"]
    rows = [parse_shape(text, args.kv_heads) for text in (args.shape or DEFAULT_SHAPES)]
    return rows, args.dtype or "bfloat16"


def run_torch(args):
    rows, dtype_name = shapes_and_dtype(args)
    if dtype_name not in DTYPES:
        sys.exit(f"torch_sdpa_peer: dtype {dtype_name} is not one of {', '.join(DTYPES)}")
    if args.dry_run:
        for row in rows:
            print(f"{row['shape']:<16} kv_heads {row['kv_heads']:>4} {dtype_name} causal "
                  f"forward {row['forward_flops'] / 1e9:.1f} GFLOP; backends {', '.join(BACKENDS)}")
        return
    import torch  # only here: --dry-run and compare run without it

    torch.backends.cuda.matmul.allow_tf32 = False  # strata's fp32 attention is fp32 throughout
    dtype = getattr(torch, dtype_name)
    backends = [run_backend(torch, name, rows, dtype, args.repeats) for name in BACKENDS]
    result = {"peer": "torch.nn.functional.scaled_dot_product_attention",
              "torch": torch.__version__, "device": torch.cuda.get_device_name(),
              "backend": "cuda", "dtype": dtype_name, "causal": True, "repeats": args.repeats,
              "sdpa_backends": backends}
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


def peer_figures(peer, shape, direction):
    """{backend name: TFLOP/s or None} for one shape and direction."""
    figures = {}
    for backend in peer["sdpa_backends"]:
        row = next((r for r in backend["shapes"] if r["shape"] == shape), None)
        ran = row is not None and "unavailable" not in row
        figures[backend["name"]] = row[f"{direction}_tflops"] if ran else None
    return figures


def run_compare(args):
    strata = json.loads(Path(args.strata).read_text())
    peer = json.loads(Path(args.torch).read_text())
    target = strata.get("target_vs_peer")
    names = [backend["name"] for backend in peer["sdpa_backends"]]
    lines = ["\t".join(["shape", "direction", "strata_tflops"] +
                       [f"{name.lower()}_tflops" for name in names] +
                       ["best_backend", "best_tflops", "ratio_to_best"])]
    print(f"causal attention in {strata['dtype']} on {strata['device']}: strata's ops beside "
          f"{peer['peer']} (torch {peer['torch']}), TFLOP/s; backends {', '.join(names)}")
    for backend in peer["sdpa_backends"]:
        if "reason" in backend:
            print(f"  {backend['name']} unavailable: {backend['reason']}")
        for row in backend["shapes"]:
            if "unavailable" in row:
                print(f"  {backend['name']} unavailable at {row['shape']}: {row['unavailable']}")
    below = []
    for row in strata["shapes"]:
        for direction in DIRECTIONS:
            ours = row[f"{direction}_tflops"]
            figures = peer_figures(peer, row["shape"], direction)
            ran = {name: value for name, value in figures.items() if value is not None}
            if not ran:
                sys.exit(f"torch_sdpa_peer: no backend ran {row['shape']} {direction}: run both "
                         "on the same shapes and dtype on a GPU torch supports")
            best = max(ran, key=ran.get)
            ratio = ours / ran[best]
            cells = [f"{value:.1f}" if value is not None else "-" for value in figures.values()]
            lines.append("\t".join([row["shape"], direction, f"{ours:.1f}"] + cells +
                                   [best, f"{ran[best]:.1f}", f"{ratio:.3f}"]))
            verdict = ""
            if target is not None:
                verdict = f"{'ok' if ratio >= target else 'BELOW'} {target}x"
                if ratio < target:
                    below.append(f"{row['shape']} {direction} {ratio:.3f}x")
            print(f"{row['shape']:<16} {direction:<17} {ours:7.1f}  " + " ".join(
                f"{name.split('_')[0].lower()} {cell:>6}" for name, cell in zip(names, cells)) +
                f"  best {best.split('_')[0].lower()} {ratio:6.3f}x  {verdict}")
    if args.tsv:
        Path(args.tsv).write_text("\n".join(lines) + "\n")
    if target is not None:
        print(f"target >= {target}x the best backend: " +
              ("met" if not below else "not met: " + "; ".join(below)))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    torch_parser = commands.add_parser("torch", help="time torch's SDPA backends on the GPU")
    source = torch_parser.add_mutually_exclusive_group()
    source.add_argument("--shapes", help="the --json of strata bench attention")
    source.add_argument("--shape", action="append",
                        help=f"BxHxTxD, repeatable (default: {' and '.join(DEFAULT_SHAPES)})")
    torch_parser.add_argument("--kv-heads", type=int, default=0,
                              help="key/value heads with --shape (default: the heads)")
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
        if args.kv_heads < 0:
            parser.error("--kv-heads must be positive")
        run_torch(args)
    else:
        run_compare(args)


if __name__ == "__main__":
    main()
