"""How much `max_nodes=auto` depends on where its acceptance estimate starts (issue 32): aasd[auto] on the app's
bundled samples, started from the default rate (an empty store), then from low stored priors (what the store gives
after runs of the same method and model on prompts where little was accepted), and optionally with every draft
node made k times dearer than this machine's measured t(n, L) (a noisy measurement of the cost curve).

A request learns its own acceptance only from the nodes it verifies: a prior low enough that no tree pays leaves
it drafting nearly nothing, whatever this prompt would accept. Each row is one greedy run and one aasd[auto] run
on the same prompt, back to back (one pass: a guide to the size of the effect, not a speed measurement).

    OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/bench_prior_pull.py --samples 3 --rates none,0.10,0.05
    OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/bench_prior_pull.py --samples 3 --rates none --steeper 2.5
    OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/bench_prior_pull.py --samples 1 --rates 0.05 --no-probe --sources

--no-probe runs the sizer without its probes (core.sizing.PROBE, change 14), as it ran before them; --sources adds,
per row, the draft nodes the run judged by source (accepted of judged).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

STORED = 2000  # verified nodes behind a low prior at depth 1 (deeper depths: STORED / depth)


def low_prior(rate: float):
    """A stored prior of `rate` at every depth for the context drafter's sources, resting on many nodes."""
    from core.acceptance_prior import AcceptancePrior

    rows = [
        (source, depth, round(rate * STORED / depth), STORED // depth)
        for source in ("context", "generated")
        for depth in range(1, 9)
    ]
    return AcceptancePrior.from_counts(rows)


def steeper(model, k: float):
    """t(n, L) = t(0, L) + k (t(n, L) - t(0, L)): every draft node k times dearer than measured."""
    from core.cost_model import CostModel

    rows = tuple(tuple(row[0] + k * (t - row[0]) for t in row) for row in model.seconds)
    return CostModel(model.sizes, model.lengths, rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=3, help="the first N bundled samples")
    ap.add_argument("--rates", default="none,0.10,0.05", help="stored prior rates to start from (none: empty store)")
    ap.add_argument("--steeper", type=float, default=1.0, help="k: draft nodes k times dearer than measured")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-probe", action="store_true", help="the sizer without its probes (core.sizing.PROBE)")
    ap.add_argument("--sources", action="store_true", help="per row, judged draft nodes by source")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.no_probe:
        from core import sizing

        sizing.PROBE = False  # read by every TreeSizer when it is built

    from bench_gamma_auto import machine

    from core import timing
    from core.methods import run_method
    from core.models import load_model
    from workbench import service
    from workbench.ui.compare_tab import task_fields

    target = load_model("smollm2-135m", device="cpu", dtype="float32")
    cost = timing.cost_model(target)
    if args.steeper != 1.0:
        cost = steeper(cost, args.steeper)
        timing.cost_model = lambda t, remeasure=False: cost  # what core.methods.build's sizer reads
    print(f"# {machine(args.threads)}; SmolLM2-135M float32; {args.max_new_tokens} tokens")
    print(f"# t(1)/t(0), t(16)/t(0) at 256 cached tokens: {cost.ratio(1, 256):.2f}, {cost.ratio(16, 256):.2f}")
    print(f"# sizer probes: {'off' if args.no_probe else 'on'}")
    print(f"{'prior':>6} {'sample':<18} {'MAL':>5} {'nodes':>6} {'speed-up':>9}  same text as greedy")
    for rate in args.rates.split(","):
        prior = None if rate.strip() == "none" else low_prior(float(rate))
        for task in service.sample_tasks()[: args.samples]:
            context, prompt, _, chat = task_fields(task)
            _, ids = service.build_prompt(target.tokenizer, prompt, context, chat)
            cap = {"max_new_tokens": args.max_new_tokens}
            greedy = run_method("greedy", target, ids, cap)
            auto = run_method("aasd", target, ids, {**cap, "max_nodes": "auto"}, prior=prior)
            steps = max(len(auto.steps), 1)
            speed = (len(auto.output_ids) / auto.decode_seconds) / (len(greedy.output_ids) / greedy.decode_seconds)
            print(
                f"{rate.strip():>6} {task.id:<18} {len(auto.output_ids) / steps:5.2f} "
                f"{sum(s.tree_size for s in auto.steps) / steps:6.1f} {speed:8.2f}×  {auto.output_ids == greedy.output_ids}",
                flush=True,
            )
            if args.sources:
                from core.stats import acceptance_by

                judged = acceptance_by(auto, lambda n: n.source)
                print("       judged nodes: " + ", ".join(f"{k} {a} of {v}" for k, (a, v) in judged.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
