"""Token Recycling benchmark (issue 19): Spec-Bench's 13 categories, greedy, pld, transformers' prompt
lookup, recycle, aasd and aasd with the recycle fallback, interleaved per task in one run
(workbench.evaluation.bench.run_bench). Per category and overall: MAL, tokens/s, speed-up vs greedy and the
share of tokens equal to greedy's; a Markdown table and the JSON under --out, then the issue's targets.

    python benchmarks/bench_recycle.py [--limit 2] [--max-new-tokens 96] [--dtype bfloat16] [--threads 1]
    python benchmarks/bench_recycle.py --rank-rates      # acceptance by template rank on held-out items

`--rank-rates` runs recycle with the paper's whole tree on items the benchmark never reports (index
--held-out-from and later in each category) and prints, per rank r, how often a recycled node of rank r
is accepted when its parent was: the rates core.drafters.recycle.RANK_RATE orders the template by.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.models import load_model  # noqa: E402
from core.stats import add_speedups, equal_share, pool  # noqa: E402
from workbench.evaluation.bench import run_bench  # noqa: E402
from workbench.evaluation.tasks import load_tasks  # noqa: E402

SPEC_BENCH = ROOT.parent / "shared" / "data" / "spec_bench" / "question.jsonl"
CATEGORIES = [
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
    "translation",
    "summarization",
    "qa",
    "math_reasoning",
    "rag",
]
OFF_CONTEXT = ["writing", "math", "translation", "roleplay"]  # the categories without a usable context
METHODS = ["greedy", "pld", "hf-prompt-lookup", "recycle", "aasd[fallback=none]", "aasd[fallback=recycle]"]


def equal_to_greedy(rows: list[dict], reference: dict) -> float | None:
    """Tokens equal to greedy's over greedy's tokens (core.stats.equal_share: the common prefix of each output with greedy's)."""
    return equal_share([(reference[(r["category"], r["id"])], r["token_ids"]) for r in rows])


def summary_by(rows: list[dict], methods: list[str]) -> dict[str, dict[str, dict]]:
    """{category or 'overall': {method: pooled summary + equal_to_greedy}}: pooled as bench pools (total
    tokens over total steps / seconds), speed-up against greedy on the same items of the same run."""
    reference = {(r["category"], r["id"]): r["token_ids"] for r in rows if r["method"] == "greedy"}
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        groups[r["category"]].append(r)
        groups["overall"].append(r)
    out = {}
    for group, rs in groups.items():
        s = add_speedups({m: pool([r for r in rs if r["method"] == m]) for m in methods})
        for m in methods:
            s[m]["equal_to_greedy"] = equal_to_greedy([r for r in rs if r["method"] == m], reference)
        out[group] = s
    return out


def category_mean_speedup(by: dict, method: str, categories: list[str]) -> float:
    values = [by[c][method]["speedup"] for c in categories if c in by and by[c][method]["speedup"]]
    return sum(values) / len(values) if values else float("nan")


def markdown(by: dict, methods: list[str]) -> str:
    lines = ["| category | method | MAL | tokens/s | speed-up | % equal to greedy |", "|---|---|---|---|---|---|"]
    for group in [c for c in CATEGORIES if c in by] + ["overall"]:
        for m in methods:
            s = by[group][m]
            eq = s["equal_to_greedy"]
            lines.append(
                f"| {group} | {m} | {s['mal']:.2f} | {s['tps']:.1f} | {s['speedup']:.2f} | "
                f"{'-' if eq is None else f'{100 * eq:.1f}'} |"
            )
    return "\n".join(lines)


def rank_rates(target, tasks, max_new_tokens: int) -> list[float]:
    """Per rank: accepted ÷ judged among recycled nodes whose parent was accepted (or the root)."""
    from core.models import encode_prompt
    from workbench.methods import run_method

    judged, accepted = [0] * 8, [0] * 8
    for task in tasks:
        run = run_method(
            "recycle",
            target,
            encode_prompt(target.tokenizer, task.prompt(), chat=task.chat),
            {"max_new_tokens": max_new_tokens, "max_nodes": 80},
        )
        for step in run.steps:
            by_node = {n.node: n for n in step.nodes}
            siblings: dict[int, int] = defaultdict(int)
            for n in step.nodes:
                if n.source != "recycled":
                    continue
                rank = siblings[n.parent]  # siblings come in rank order and a table row is all or nothing
                siblings[n.parent] += 1
                parent = by_node[n.parent]
                if parent.node == 0 or parent.decision == "accepted":
                    judged[rank] += 1
                    accepted[rank] += n.decision == "accepted"
    return [a / j if j else 0.0 for a, j in zip(accepted, judged)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--data", default=str(SPEC_BENCH))
    ap.add_argument("--limit", type=int, default=2, help="items per category (the first ones)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--methods", default=",".join(METHODS[1:]), help="comma-separated; greedy is always added")
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default); 1 on a shared machine")
    ap.add_argument("--rank-rates", action="store_true", help="measure acceptance by template rank on held-out items")
    ap.add_argument(
        "--held-out-from", type=int, default=8, help="with --rank-rates: first item index used per category"
    )
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    target = load_model(args.model, device="cpu", dtype=args.dtype)
    dtype = str(target.dtype).replace("torch.", "")

    if args.rank_rates:
        tasks = [
            t
            for c in CATEGORIES
            for t in load_tasks(args.data, categories=[c])[args.held_out_from : args.held_out_from + 2]
        ]
        rates = rank_rates(target, tasks, args.max_new_tokens)
        print(
            f"RANK_RATE = ({', '.join(f'{r:.3f}' for r in rates)})  # {len(tasks)} held-out items, {args.model} {dtype}"
        )
        return 0

    from workbench.methods import split_method_list

    methods = list(dict.fromkeys(["greedy", *split_method_list(args.methods)]))
    tasks = load_tasks(args.data, categories=CATEGORIES, limit=args.limit)
    result = run_bench(
        target, tasks, methods, {"max_new_tokens": args.max_new_tokens}, max_new_tokens=args.max_new_tokens
    )
    by = summary_by(result["tasks"], methods)
    command = "python " + " ".join(
        [str(Path(sys.argv[0]).relative_to(ROOT)) if Path(sys.argv[0]).is_absolute() else sys.argv[0], *sys.argv[1:]]
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"bench_recycle_{dtype}.json").write_text(
        json.dumps({"command": command, "by_category": by, **result}, indent=1)
    )
    lines = [
        f"## {args.model} {dtype}: Spec-Bench, {args.limit} item(s) × {len(CATEGORIES)} categories, "
        f"max {args.max_new_tokens} new tokens",
        "",
        f"`{command}`",
        "",
        markdown(by, methods),
        "",
    ]

    checks = []
    if "recycle" in methods:
        checks += [
            ("recycle speed-up, mean over the 13 categories", category_mean_speedup(by, "recycle", CATEGORIES), 1.2),
            (
                "recycle speed-up, mean over writing, math, translation, roleplay",
                category_mean_speedup(by, "recycle", OFF_CONTEXT),
                1.3,
            ),
        ]
    fb, base = "aasd[fallback=recycle]", "aasd[fallback=none]"
    if fb in methods and base in methods:
        worst = min(by[c][fb]["speedup"] / by[c][base]["speedup"] for c in CATEGORIES if c in by)
        checks += [
            ("aasd with fallback ÷ aasd speed-up, worst category", worst, 1.0),
            (
                "aasd with fallback speed-up, mean over the off-context categories",
                category_mean_speedup(by, fb, OFF_CONTEXT),
                1.1,
            ),
        ]
    for name, value, goal in checks:
        lines.append(f"- {'PASS' if value >= goal else 'MISS'} {name}: {value:.3f} (target ≥ {goal})")
    text = "\n".join(lines)
    (out / f"bench_recycle_{dtype}.md").write_text(text + "\n")
    print("\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
