"""Many processes, one benchmark (issue 21): wall time of `bench --num-processes N` against one process on the
same items, and whether the texts are identical; one process gets all cores as threads, N processes cores ÷ N each.

    python benchmarks/bench_processes.py [--limit 20] [--processes 2] [--methods greedy,pld] [--max-new-tokens 64]

Checks the target: N = 2 at most 0.6x one process's wall time, identical texts (float32, so that batching
differences cannot flip near-ties). Also prints each run's share of time spent writing the store.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC_BENCH = ROOT.parent / "shared" / "data" / "spec_bench" / "question.jsonl"


def bench(argv: list[str], out: Path, db: Path) -> tuple[float, dict]:
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "workbench", "bench", *argv, "--out", str(out), "--db", str(db)],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - t, json.loads(out.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--data", default=str(SPEC_BENCH))
    ap.add_argument("--categories", default="summarization,rag")
    ap.add_argument("--limit", type=int, default=20, help="items per category (40 in all by default)")
    ap.add_argument("--methods", default="greedy,pld")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args()
    common = [
        "--data",
        args.data,
        "--categories",
        args.categories,
        "--limit",
        str(args.limit),
        "--methods",
        args.methods,
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--model",
        args.model,
        "--dtype",
        args.dtype,
    ]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        one_s, one = bench(common, tmp / "one.json", tmp / "one.db")
        many_s, many = bench([*common, "--num-processes", str(args.processes)], tmp / "many.json", tmp / "many.db")
        from workbench.evaluation.shards import Shard, shard_times

        walls = [
            shard_times(tmp / "many.json", Shard(k, args.processes)).get("wall_seconds") for k in range(args.processes)
        ]
    key = lambda rows: [(r["id"], r["method"], r["token_ids"]) for r in rows]  # noqa: E731
    same = key(one["tasks"]) == key(many["tasks"])
    ratio = many_s / one_s
    print(
        f"{len(one['tasks'])} runs ({args.methods} on {args.limit} items per category of {args.categories}, "
        f"{args.model} {args.dtype}, {args.max_new_tokens} new tokens)"
    )
    print(
        f"one process: {one_s:.1f} s wall (model load included); {args.processes} processes: {many_s:.1f} s = {ratio:.2f}x"
    )
    for name, r in (("one", one), ("many", many)):
        if r.get("store_seconds") is not None and r.get("wall_seconds"):
            print(f"  {name}: storing {100 * r['store_seconds'] / r['wall_seconds']:.2f} % of the run")
    print("shard wall seconds (each shard's own clock): " + ", ".join(f"{w:.1f}" if w else "?" for w in walls))
    print(f"identical texts: {same}")
    print(
        f"{'PASS' if ratio <= 0.6 and same else 'MISS'}: {args.processes} processes at most 0.6x one process, identical texts"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
