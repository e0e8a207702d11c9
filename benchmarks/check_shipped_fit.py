"""The shipped threshold fit on evaluation items it never saw (issue 32: "aasd[auto] with the shipped fit keeps each
family's score within the interval").

`aasd[auto]` reads the model's shipped fit (core/fits/), which `calibrate --thresholds` chose on the families'
held-out items. Here it runs beside greedy and `aasd-strict` on the evaluation split of every family, interleaved per
item, each output scored in its family's metric; per family: the mean score change against greedy with its paired
95 % bootstrap interval and whether its lower end stays above -1 point (workbench.evaluation.admissibility, the rule
the fit was chosen by). The run refuses items the fit was made on. Speed is not this script's measure (it may run
outside the bench lock): MAL is printed; the timed gate is benchmarks/bench_auto_size.py.

`--tasks FILE` checks a reviewer's own task file instead (workbench.evaluation.family_file: each row's category is
its family; items a fit or a held-out split has seen are refused before anything runs).

    taskset -c 0 python benchmarks/check_shipped_fit.py --dtype float32 --items 8 --max-new-tokens 64 \\
        --out results/shipped_fit_check
    taskset -c 0 python benchmarks/check_shipped_fit.py --tasks assets/reviewer_tasks.jsonl --max-new-tokens 32 \\
        --out results/shipped_fit_reviewer
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
    from core.errors import WorkbenchError

    try:
        return run(argv)
    except WorkbenchError as e:  # a bad --tasks file, an item already seen, ...: one line, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2


def run(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--families", default=None, help="comma-separated (default: all five of the gate, or all of --tasks' families)"
    )
    ap.add_argument(
        "--tasks",
        metavar="FILE",
        default=None,
        help="a task file (JSON Lines) whose rows' categories are the families, in place of the project's own",
    )
    ap.add_argument("--items", type=int, default=None, help="evaluation items per family (default 8; --tasks: all)")
    ap.add_argument("--first-item", type=int, default=0, help="skip this many evaluation items per family first")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", default="results/shipped_fit_check")
    args = ap.parse_args(argv)
    if (args.items is not None and args.items < 1) or args.first_item < 0:
        ap.error("--items must be at least 1 and --first-item at least 0")
    from core import timing
    from core.models import load_model
    from core.thresholds import stored_fit
    from workbench.evaluation.families import family_tasks, parse_families
    from workbench.evaluation.family_file import check_run_unseen, read_family_file
    from workbench.evaluation.frontier import format_frontier, sweep
    from workbench.evaluation.thresholds import describe_overlap, family_scorer, fit_overlap

    if args.tasks:  # a bad file fails here, before the model loads
        groups = read_family_file(args.tasks, args.families, first=args.first_item, items=args.items)
    else:
        items = args.items or 8
        groups = {
            f: family_tasks(f, "evaluation", args.first_item + items)[args.first_item :]
            for f in parse_families(args.families)
        }
    tasks = [t for group in groups.values() for t in group]
    torch.set_num_threads(args.threads)
    target = load_model(args.model, device="cpu", dtype=args.dtype)
    fit, origin = stored_fit(target, "aasd")
    if fit is None:
        print(f"{target.name} has no aasd fit (shipped or the user's): nothing to check", file=sys.stderr)
        return 2
    if args.tasks:  # an error when the fit (by id or text) or a held-out split has seen an item
        for line in check_run_unseen(target, tasks, ["aasd[auto]"], where=Path(args.tasks).name):
            print(line, file=sys.stderr)
    else:
        overlap = fit_overlap(target, ["aasd[auto]"], None, tasks)
        if overlap:
            print(f"refused: {describe_overlap(overlap)}; choose other items (--first-item)", file=sys.stderr)
            return 2
    machine = timing.machine_signature(target)
    print(
        f"fit: {origin}, values {fit.get('values')}; machine: {machine['cpu']}, flags {' '.join(machine['cpu_flags'])}, "
        f"torch threads {machine['threads']}, {args.dtype}; {len(tasks)} evaluation items "
        f"({', '.join(f'{f} {len(g)}' for f, g in groups.items())}, from item {args.first_item + 1} of each"
        f"{' of ' + args.tasks if args.tasks else ''}), {args.max_new_tokens} new tokens",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    result = sweep(target, tasks, SWEEPS, max_new_tokens=args.max_new_tokens, scorer=family_scorer())
    result["config"] = {
        "model": target.name,
        "dtype": args.dtype,
        "fit": {"origin": origin, "values": fit.get("values")},
        "tasks_file": args.tasks,
        "metrics": {f: g[0].metric for f, g in groups.items()} if args.tasks else None,  # built-in: FAMILIES
        "evaluation_items": {f: [t.id for t in g] for f, g in groups.items()},
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
