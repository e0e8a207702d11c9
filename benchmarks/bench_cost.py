"""t(n, L) on this machine: the time of one verification forward with n draft nodes after L cached tokens,
and its ratio to a single-token step, t(n, L) / t(0, L) (what `max_nodes=auto` weighs a tree's expected
tokens against). Also checks the two shortcuts core.timing takes:

- the cost model's linear extrapolation in L: a model built from the lengths up to --fit-up-to predicts the
  longer measured lengths (printed beside the measurement);
- `--check-prefill`: a cache filled by repeating a short real prefill (core.cache.repeat_to, what core.timing
  measures with) against a cache filled by a real prefill of the same length, timed in the same rounds.

    flock /tmp/bench.lock env OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/bench_cost.py --threads 1
    flock /tmp/bench.lock env OMP_NUM_THREADS=2 python benchmarks/bench_cost.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core import cache as kv  # noqa: E402
from core import timing  # noqa: E402
from core.cost_model import CostModel  # noqa: E402
from core.engine import forward_tree, prefill  # noqa: E402
from core.models import load_model  # noqa: E402
from core.step import sync  # noqa: E402


def ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def table(title: str, sizes, lengths, cell) -> str:
    head = f"| L \\ n | {' | '.join(map(str, sizes))} |\n|---" + "|---" * len(sizes) + "|"
    rows = [
        f"| {length} | " + " | ".join(cell(j, i) for i in range(len(sizes))) + " |" for j, length in enumerate(lengths)
    ]
    return f"{title}\n\n{head}\n" + "\n".join(rows)


@torch.inference_mode()
def prefill_check(target, length: int, sizes, repeats: int) -> list[tuple[int, float, float]]:
    """(n, ms with a real prefill, ms with a repeated one) at one length, the two interleaved per round."""
    gen = torch.Generator().manual_seed(1)
    ids = [int(i) for i in torch.randint(2, min(target.vocab_size, 30000), (length,), generator=gen)]
    real = kv.new_cache(target.model)
    prefill(target.model, ids, real)
    tiled = timing._filled_caches(target, (length,))[0]
    trees = [timing._tree(n, target.vocab_size) for n in sizes]
    clock = getattr(time, timing.clock_name(target))
    best = {(c, i): float("inf") for c in ("real", "tiled") for i in range(len(sizes))}
    for r in range(repeats + 1):
        for name, cache in (("real", real), ("tiled", tiled)):
            for i, tree in enumerate(trees):
                t0 = clock()
                forward_tree(target.model, tree, length, cache)
                sync(target.device)
                if r:
                    best[(name, i)] = min(best[(name, i)], clock() - t0)
                kv.crop(cache, length)
    return [(n, best[("real", i)] * 1e3, best[("tiled", i)] * 1e3) for i, n in enumerate(sizes)]


def kernel_check(
    dtype: torch.dtype, lengths=(256, 4096), heads: int = 9, head_dim: int = 64, hidden: int = 576, out: int = 1536
) -> list[str]:
    """Why one token can cost as much as two: one attention layer (SmolLM2's shape) with 1 and 2 queries after L
    keys, and one linear layer on 1, 2 and 4 rows; ms, fastest of many, CPU time of this thread."""
    F = torch.nn.functional

    def best(fn, reps: int = 30) -> float:
        fn()
        fastest = float("inf")
        for _ in range(reps):
            t0 = time.thread_time()
            fn()
            fastest = min(fastest, time.thread_time() - t0)
        return fastest * 1e3

    lines = []
    for length in lengths:
        k, v = (torch.randn(1, heads, length + 2, head_dim, dtype=dtype) for _ in range(2))
        cells = []
        for q_len in (1, 2):
            q = torch.randn(1, heads, q_len, head_dim, dtype=dtype)
            cells.append(
                best(lambda: F.scaled_dot_product_attention(q, k[:, :, : length + q_len], v[:, :, : length + q_len]))
            )
        lines.append(f"| attention, L = {length} | {cells[0]:.3f} | {cells[1]:.3f} | - |")
    w = torch.randn(out, hidden, dtype=dtype)
    rows = []
    for r in (1, 2, 4):
        x = torch.randn(1, r, hidden, dtype=dtype)
        rows.append(best(lambda: F.linear(x, w), 200))
    lines.append(f"| linear {hidden} -> {out} | {rows[0]:.4f} | {rows[1]:.4f} | {rows[2]:.4f} |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sizes", type=ints, default=(0, 1, 2, 4, 8, 16, 32, 64))
    ap.add_argument("--lengths", type=ints, default=(256, 1024, 4096, 6144))
    ap.add_argument("--fit-up-to", type=int, default=4096, help="lengths up to this build the extrapolating model")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chains", action="store_true", help="also time chains (no tree mask) of the same sizes")
    ap.add_argument("--check-prefill", type=int, default=0, metavar="L", help="compare real and repeated prefill at L")
    ap.add_argument(
        "--kernels",
        action="store_true",
        help="also time one attention layer with 1 and 2 queries and one linear layer on 1, 2, 4 rows (one thread)",
    )
    ap.add_argument("--only-kernels", action="store_true", help="the --kernels table alone")
    ap.add_argument(
        "--wall",
        action="store_true",
        help="time by the wall clock even with one thread (core.timing uses the thread's CPU time then)",
    )
    ap.add_argument("--out", default="results/bench_cost.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.wall:
        timing.clock_name = lambda target: "perf_counter"
    results = []
    if args.kernels or args.only_kernels:
        for dtype in args.dtypes.split(","):
            print(f"\none layer, {dtype}, ms (queries or rows: 1 | 2 | 4)\n\n| kernel | 1 | 2 | 4 |\n|---|---|---|---|")
            print("\n".join(kernel_check(getattr(torch, dtype))))
        if args.only_kernels:
            return 0
    for dtype in args.dtypes.split(","):
        target = load_model(args.model, device="cpu", dtype=dtype)
        machine = timing.machine_signature(target)
        print(
            f"\n## {args.model} {dtype}: {machine['cpu']} ({', '.join(machine['cpu_flags'])}), {machine['threads']} "
            f"thread(s), torch {machine['torch']}, clock {timing.clock_name(target)}, load average "
            f"{os.getloadavg()[0]:.1f}\n"
        )
        kinds = [("tree", timing._tree)] + ([("chain", timing.chain)] if args.chains else [])
        for kind, make in kinds:
            t0 = time.perf_counter()
            grid = timing.measure_grid(target, args.sizes, args.lengths, args.repeats, trees=make)
            took = time.perf_counter() - t0
            measured = CostModel(args.sizes, args.lengths, grid)
            short = [j for j, n in enumerate(args.lengths) if n <= args.fit_up_to]
            fitted = CostModel(args.sizes, tuple(args.lengths[j] for j in short), tuple(tuple(grid[j]) for j in short))
            print(
                table(
                    f"{kind}: forward ms (fastest of {args.repeats}; measured in {took:.0f} s)",
                    args.sizes,
                    args.lengths,
                    lambda j, i: f"{grid[j][i] * 1e3:.1f}",
                )
            )
            print()
            print(
                table(
                    f"{kind}: t(n, L) / t(0, L) (measured; monotone grid)",
                    args.sizes,
                    args.lengths,
                    lambda j, i: f"{measured.ratio(args.sizes[i], args.lengths[j]):.2f}",
                )
            )
            longer = [n for n in args.lengths if n > args.fit_up_to]
            if longer:
                print()
                print(
                    table(
                        f"{kind}: t(n, L) predicted from L ≤ {args.fit_up_to} / measured",
                        args.sizes,
                        longer,
                        lambda j, i: f"{fitted(args.sizes[i], longer[j]) / measured(args.sizes[i], longer[j]):.2f}",
                    )
                )
            print()
            results.append(
                {
                    "model": args.model,
                    "dtype": dtype,
                    "kind": kind,
                    "machine": machine,
                    "clock": timing.clock_name(target),
                    "load_average": os.getloadavg()[0],
                    "sizes": list(args.sizes),
                    "lengths": list(args.lengths),
                    "seconds": grid,
                    "measure_seconds": round(took, 1),
                }
            )
        if args.check_prefill:
            rows = prefill_check(target, args.check_prefill, args.sizes, args.repeats)
            print(
                f"real vs repeated prefill at L = {args.check_prefill} (ms)\n\n| n | real | repeated | ratio |\n|---|---|---|---|"
            )
            for n, real, tiled in rows:
                print(f"| {n} | {real:.1f} | {tiled:.1f} | {tiled / real:.2f} |")
            results.append({"dtype": dtype, "prefill_check": rows, "length": args.check_prefill})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
