"""Replay figures benchmark: the draft-tree and threshold figures of one step, as the replay redraws
them on every step switch (workbench/ui/figures/replay.py, no Gradio, no model).

A synthetic tree of N nodes (root, a mix of sources and decisions, CSD gate fields on some nodes so
the threshold figure draws its second panel) is drawn many times; each sample builds both figures
and serialises them to JSON (what Gradio sends). The first call is reported apart: it imports
Plotly's validators. Target: median per step switch <= 150 ms at 64 nodes (bench_replay.py measures
the whole round trip through the app).

    python benchmarks/bench_views.py [--nodes 64] [--repeats 50]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from core.trace import NodeTrace, StepTrace  # noqa: E402
from workbench.ui.figures.replay import threshold_figure, tree_figure  # noqa: E402

SOURCES = ("context", "alignment", "generated", "draft")
DECISIONS = ("accepted", "rejected", "unreached", "rescued")


def synthetic_step(nodes: int, seed: int = 0) -> StepTrace:
    """A draft tree of `nodes` records (root included) plus a bonus, every field a rule reads filled."""
    rng = random.Random(seed)
    records = [
        NodeTrace(
            step=0,
            cache_pos=0,
            node=0,
            parent=-1,
            depth=0,
            token_id=0,
            token_text="r",
            source="root",
            decision="accepted",
            reason="root",
        )
    ]
    for i in range(1, nodes):
        parent = rng.randrange(i)
        decision = rng.choice(DECISIONS)
        records.append(
            NodeTrace(
                step=0,
                cache_pos=0,
                node=i,
                parent=parent,
                depth=records[parent].depth + 1,
                token_id=i,
                token_text=f" t{i}",
                source=rng.choice(SOURCES),
                decision=decision,
                reason=f"{decision} (bench)",
                p=rng.random(),
                threshold=0.3,
                entropy=rng.random() * 4,
                max_p=rng.random(),
                logit_gap=rng.random() * 3,
                correction_id=i if decision == "rescued" else None,
            )
        )
    records.append(
        NodeTrace(
            step=0,
            cache_pos=0,
            node=nodes,
            parent=1,
            depth=records[1].depth + 1,
            token_id=999,
            token_text=" b",
            source="model",
            decision="bonus",
            reason="bonus",
            p=0.9,
        )
    )
    return StepTrace(index=0, cache_pos=0, tree_size=nodes - 1, accepted=1, emitted=[1, 999], nodes=records)


def switch(step: StepTrace) -> None:
    """What one replay step switch costs in the figures: both figures, built and serialised."""
    tree_figure(step).to_json()
    threshold_figure(step).to_json()


def timed_ms(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - t) * 1000


def percentiles(samples_ms: list[float]) -> tuple[float, float]:
    """(median, 95th percentile) in ms."""
    ordered = sorted(samples_ms)
    return statistics.median(ordered), ordered[max(0, int(0.95 * len(ordered)) - 1)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    step = synthetic_step(args.nodes)
    first = timed_ms(switch, step)
    measured = {
        name: percentiles([timed_ms(fn, step) for _ in range(args.repeats)])
        for name, fn in (("tree_figure", tree_figure), ("threshold_figure", threshold_figure), ("both + JSON", switch))
    }
    print(f"step of {args.nodes} nodes, {args.repeats} repeats; first call (imports validators) {first:.1f} ms")
    for name, (median, p95) in measured.items():
        print(f"{name:<17} median {median:6.2f} ms  p95 {p95:6.2f} ms")
    median = measured["both + JSON"][0]
    verdict = "PASS" if median <= 150 else "MISS"
    print(f"{verdict} figures per step switch median {median:.1f} ms (target <= 150 ms)")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
