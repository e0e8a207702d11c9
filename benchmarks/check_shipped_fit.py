"""The shipped threshold fit on evaluation items it never saw (issue 32: "aasd[auto] with the shipped fit keeps each
family's score within the interval").

`aasd[auto]` reads the model's shipped fit (core/fits/), which `calibrate --thresholds` chose on the families'
held-out items. Here it runs beside greedy and `aasd-strict` on the evaluation split of every family, interleaved per
item, each output scored in its family's metric; per family: the mean score change against greedy with its paired
95 % bootstrap interval and whether its lower end stays above -1 point (workbench.evaluation.admissibility, the rule
the fit was chosen by). The run refuses items the fit was made on. Speed is not this script's measure (it may run
outside the bench lock): MAL is printed; the timed gate is benchmarks/bench_auto_size.py.

    taskset -c 0 python benchmarks/check_shipped_fit.py --dtype float32 --items 8 --max-new-tokens 64 \\
        --out results/shipped_fit_check
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

SWEEPS = {"shipped fit": ("aasd[auto]",), "strict": ("aasd-strict",)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--families", default=None, help="comma-separated (default: all five of the gate)")
    ap.add_argument("--items", type=int, default=8, help="evaluation items per family")
    ap.add_argument("--first-item", type=int, default=0, help="skip this many evaluation items per family first")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", default="results/shipped_fit_check")
    args = ap.parse_args(argv)
    if args.items < 1 or args.first_item < 0:
        ap.error("--items must be at least 1 and --first-item at least 0")
    torch.set_num_threads(args.threads)

    from core import timing
    from core.models import load_model
    from core.thresholds import stored_fit
    from workbench.evaluation.families import family_tasks, parse_families
    from workbench.evaluation.frontier import format_frontier, sweep
    from workbench.evaluation.thresholds import describe_overlap, family_scorer, fit_overlap

    families = parse_families(args.families)
    tasks = [
        t for f in families for t in family_tasks(f, "evaluation", args.first_item + args.items)[args.first_item :]
    ]
    target = load_model(args.model, device="cpu", dtype=args.dtype)
    fit, origin = stored_fit(target, "aasd")
    if fit is None:
        print(f"{target.name} has no aasd fit (shipped or the user's): nothing to check", file=sys.stderr)
        return 2
    overlap = fit_overlap(target, ["aasd[auto]"], None, tasks)
    if overlap:
        print(f"refused: {describe_overlap(overlap)}; choose other items (--first-item)", file=sys.stderr)
        return 2
    machine = timing.machine_signature(target)
    print(
        f"fit: {origin}, values {fit.get('values')}; machine: {machine['cpu']}, flags {' '.join(machine['cpu_flags'])}, "
        f"torch threads {machine['threads']}, {args.dtype}; {len(tasks)} evaluation items "
        f"({args.items} per family from item {args.first_item + 1}), {args.max_new_tokens} new tokens",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    result = sweep(target, tasks, SWEEPS, max_new_tokens=args.max_new_tokens, scorer=family_scorer())
    result["config"] = {
        "model": target.name,
        "dtype": args.dtype,
        "fit": {"origin": origin, "values": fit.get("values")},
        "evaluation_items": {f: [t.id for t in tasks if t.category == f] for f in families},
        "machine": machine,
        "minutes": (time.perf_counter() - t0) / 60,
        "command": "python benchmarks/check_shipped_fit.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "check.json").write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    md = format_frontier(result)
    (out / "check.md").write_text(md + "\n", encoding="utf-8")
    print(md)
    print(f"\n{result['config']['minutes']:.1f} min; wrote {out / 'check.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
