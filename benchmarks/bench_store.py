"""Trace-store benchmark: the issue's three targets.

1. writing one run of 1,000 steps x 16 nodes to SQLite <= 1 s (Store.save_run: one transaction, bulk inserts);
2. loading one step <= 10 ms (median over random steps of that run);
3. storing adds <= 5 % to a bench run on SmolLM2: workbench.evaluation.bench.run_bench over the bundled tasks, with and
   without storing, interleaved task by task. The verdict uses the time spent inside save_run over the
   bench's own time (what storing adds); the ratio of the two wall times is printed as a cross-check,
   noisier on a shared machine.

    python benchmarks/bench_store.py [--rounds 3] [--methods greedy,pld] [--max-new-tokens 48] [--limit 1] [--threads 1] [--skip-model]

One torch thread by default: on a 2-core machine shared with other jobs, two threads were 5x slower.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.trace import NodeTrace, RunTrace, StepTrace  # noqa: E402
from workbench.store import Store  # noqa: E402


def synthetic_run(steps: int = 1000, nodes: int = 16, seed: int = 0) -> RunTrace:
    """A trace shaped like a tree-drafting run: every node column filled, as the engine fills them."""
    rng = random.Random(seed)
    out, emitted_all = [], []
    for i in range(steps):
        ns = [
            NodeTrace(
                step=i,
                cache_pos=500 + 3 * i,
                node=0,
                parent=-1,
                depth=0,
                token_id=rng.randrange(50_000),
                token_text=" tok",
                source="root",
                decision="accepted",
                reason="root",
            )
        ]
        for j in range(1, nodes):
            accepted = j <= 2
            ns.append(
                NodeTrace(
                    step=i,
                    cache_pos=500 + 3 * i,
                    node=j,
                    parent=j - 1 if j <= 4 else rng.randrange(j),
                    depth=min(j, 4),
                    token_id=rng.randrange(50_000),
                    token_text=f" w{j}",
                    source=rng.choice(("context", "alignment", "generated")),
                    decision="accepted" if accepted else "rejected",
                    reason="p >= threshold" if accepted else "p < threshold",
                    p=rng.random(),
                    entropy=rng.random() * 5,
                    max_p=rng.random(),
                    p_eos=rng.random() * 1e-3,
                    rank=rng.randrange(100),
                    logit_gap=rng.random() * 10,
                    threshold=0.1,
                )
            )
        emitted = [rng.randrange(50_000) for _ in range(3)]
        emitted_all += emitted
        out.append(
            StepTrace(
                index=i,
                cache_pos=500 + 3 * i,
                tree_size=nodes - 1,
                accepted=2,
                emitted=emitted,
                draft_ms=rng.random(),
                forward_ms=20 + rng.random(),
                verify_ms=rng.random(),
                bookkeeping_ms=rng.random(),
                nodes=ns,
            )
        )
    return RunTrace(
        method="aasd",
        params={"max_new_tokens": 3000},
        model="bench/model",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p" * 2000,
        prompt_ids=list(range(500)),
        output_text="o" * 9000,
        output_ids=emitted_all,
        steps=out,
        prefill_seconds=0.5,
        decode_seconds=25.0,
        status="complete",
    )


def verdict(value: float, limit: float) -> str:
    return "PASS" if value <= limit else "MISS"


def bench_write_and_load(folder: Path, repeats: int = 3) -> tuple[float, float]:
    run = synthetic_run()
    writes = []
    for k in range(repeats):  # a fresh file each time: the cost of a first run in a new store
        with Store(str(folder / f"w{k}.db")) as store:
            t0 = time.perf_counter()
            run_id = store.save_run(run)
            writes.append(time.perf_counter() - t0)
    with Store(str(folder / "w0.db")) as store:
        rng = random.Random(1)
        store.load_step(run_id, 0)  # the first query compiles the statements
        loads = []
        for _ in range(200):
            t0 = time.perf_counter()
            store.load_step(run_id, rng.randrange(1000))
            loads.append(time.perf_counter() - t0)
    return statistics.median(writes), statistics.median(loads)


def bench_overhead(
    folder: Path, rounds: int, methods: list[str], max_new_tokens: int, limit: int
) -> tuple[float, float]:
    from core.models import load_model
    from workbench.evaluation.bench import run_bench
    from workbench.evaluation.tasks import load_tasks

    target = load_model("smollm2-135m", device="cpu", dtype="float32")
    tasks = load_tasks(str(ROOT / "assets" / "samples.jsonl"), limit=limit)
    store = Store(str(folder / "bench.db"))
    plain, stored, saving = [], [], []

    def save(task, run):
        t0 = time.perf_counter()
        store.save_run(run, tags=["bench", f"task={task.id}"])
        saving[-1] += time.perf_counter() - t0

    # Pairs of bench runs over one task each, the order alternating, so the load of a shared machine,
    # which drifts over seconds to minutes, falls on both sides alike.
    pair = 0
    for r in range(rounds):
        for task in tasks:
            for with_store in (False, True) if pair % 2 == 0 else (True, False):
                saving.append(0.0)
                t0 = time.perf_counter()
                run_bench(
                    target,
                    [task],
                    methods,
                    max_new_tokens=max_new_tokens,
                    on_run=save if with_store else None,
                    progress=False,
                )
                (stored if with_store else plain).append(time.perf_counter() - t0)
            pair += 1
        print(f"  round {r + 1}: {sum(plain):.1f} s without storing, {sum(stored):.1f} s with, so far", flush=True)
    store.close()
    share = sum(saving) / sum(plain)
    ratio = sum(stored) / sum(plain) - 1
    return share, ratio


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3, help="bench rounds with and without storing")
    ap.add_argument("--methods", default="greedy,pld")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--limit", type=int, default=1, help="bundled tasks per category")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--skip-model", action="store_true", help="only the write and load numbers")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_s, load_s = bench_write_and_load(folder)
        print(
            f"write one run of 1000 steps x 16 nodes (SQLite): {write_s:.3f} s   (target <= 1 s)    {verdict(write_s, 1.0)}"
        )
        print(
            f"load one step (median of 200):                   {load_s * 1e3:.2f} ms  (target <= 10 ms)  {verdict(load_s, 0.010)}"
        )
        if args.skip_model:
            return 0
        print(
            f"SmolLM2-135M fp32, bundled tasks ({args.limit} per category), methods {args.methods}, "
            f"{args.max_new_tokens} new tokens, {args.rounds} rounds, {args.threads} torch thread(s):"
        )
        share, ratio = bench_overhead(folder, args.rounds, args.methods.split(","), args.max_new_tokens, args.limit)
        print(
            f"storing adds {share:.2%} to a bench run (save_run time / bench time)  (target <= 5 %)  {verdict(share, 0.05)}"
        )
        print(f"cross-check: total wall time with storing / without - 1 = {ratio:+.2%} (machine noise included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
