"""AASD benchmark (issues 3 and 18): context drafting, alignment sampling and conditional verification
against greedy, PLD and transformers' prompt lookup (`prompt_lookup_num_tokens=10`), in one interleaved run.

SmolLM2-135M on Spec-Bench summarization + RAG (20 + 20 items by default). Reports MAL, tokens/s,
speed-up vs greedy, acceptance (per source), the task score (ROUGE-L / QA F1 against Spec-Bench's
references) and where a step's time goes (forward vs the rest), then checks issue 18's targets.
`--ablations` adds the ablations of issue 3 (no alignment, fixed threshold, top-k, graft, generated).

    python benchmarks/bench_aasd.py [--limit 20] [--max-new-tokens 128] [--dtype auto] [--extra casd] [--ablations]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.models import load_model  # noqa: E402
from workbench.evaluation.bench import format_table, run_bench  # noqa: E402
from workbench.evaluation.tasks import load_tasks  # noqa: E402

SPEC_BENCH = ROOT.parent / "shared" / "data" / "spec_bench" / "question.jsonl"
METHODS = [
    "greedy",
    "hf-prompt-lookup",
    "pld",
    "aasd-strict",
    "aasd-strict[fallback=recycle]",
    "aasd",
    "aasd[max_nodes=16]",
]
ABLATIONS = [
    "casd",
    "casd-mixed",
    "aasd-no-align",
    "aasd-fixed",
    "aasd-topk",
    "aasd[align_graft=1]",
    "aasd-strict[align_graft=1]",
    "aasd[align_generated=1]",
]


def ratio(a, b):
    return a / b if a and b else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="auto", help="auto = bf16 where the CPU has bf16 units, else float32")
    ap.add_argument("--data", default=str(SPEC_BENCH))
    ap.add_argument("--limit", type=int, default=20, help="items per category")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--extra", default="", help="more methods, comma-separated (e.g. casd, 'aasd[alpha=0,beta=0.03]')")
    ap.add_argument("--ablations", action="store_true", help="add issue 3's ablations")
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default); 1 on a shared machine")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    tasks = load_tasks(args.data, categories=["summarization", "rag"], limit=args.limit)
    target = load_model(args.model, device="cpu", dtype=args.dtype)
    from workbench.methods import split_method_list

    methods = METHODS + (ABLATIONS if args.ablations else []) + split_method_list(args.extra)
    result = run_bench(target, tasks, methods, {"max_new_tokens": args.max_new_tokens})
    dtype = str(target.dtype).replace("torch.", "")
    out = Path(args.out) / f"bench_aasd_{dtype}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))

    s = result["methods"]
    print(
        f"\n## {args.model} {dtype}: {len(tasks)} Spec-Bench items (summarization + rag), max {args.max_new_tokens} new tokens\n"
    )
    print(format_table(s))
    hf = s["hf-prompt-lookup"]["tps"]
    strict = max(("aasd-strict", "aasd-strict[fallback=recycle]"), key=lambda m: s[m]["tps"])

    def context_rate(m):
        return (s[m].get("accept_rate_by_source") or {}).get("context", float("nan"))

    print("\nwhere a step's time goes (share outside the target's forward: drafting, verification, bookkeeping):")
    for m in methods:
        if s[m].get("forward_share") is not None:
            print(
                f"  {m}: forward {100 * s[m]['forward_share']:.1f} %, rest {100 * (1 - s[m]['forward_share']):.1f} % "
                f"of {s[m]['step_ms']:.1f} ms"
            )
    checks = [
        ("aasd speed-up vs greedy", s["aasd"]["speedup"], 2.2),
        ("aasd tokens/s vs hf-prompt-lookup", ratio(s["aasd"]["tps"], hf), 1.3),
        ("aasd score minus greedy's", s["aasd"]["score"] - s["greedy"]["score"], 0.0),
        (f"{strict} (the faster lossless) tokens/s vs hf-prompt-lookup", ratio(s[strict]["tps"], hf), 1.15),
        (
            "aasd acceptance on context nodes minus aasd-strict's",
            context_rate("aasd") - context_rate("aasd-strict"),
            0.10,
        ),
        ("aasd work inside the forward (share of a step)", s["aasd"]["forward_share"], 0.90),
        ("aasd-strict work inside the forward (share of a step)", s["aasd-strict"]["forward_share"], 0.90),
    ]
    print()
    ok = True
    for name, value, goal in checks:
        passed = value >= goal
        ok &= passed
        print(f"{'PASS' if passed else 'MISS'} {name}: {value:.3f} (target >= {goal})")
    if args.ablations:
        graft, plain = s["aasd[align_graft=1]"], s["aasd"]
        print(
            f"alignment graft vs none (aasd): MAL {graft['mal']:.3f} vs {plain['mal']:.3f}, tokens/s ratio {ratio(graft['tps'], plain['tps']):.3f}"
        )
        g2, p2 = s["aasd-strict[align_graft=1]"], s["aasd-strict"]
        print(
            f"alignment graft vs none (aasd-strict): MAL {g2['mal']:.3f} vs {p2['mal']:.3f}, tokens/s ratio {ratio(g2['tps'], p2['tps']):.3f}"
        )
        gen = s["aasd[align_generated=1]"]
        print(
            f"alignment on generated text (aasd): MAL {gen['mal']:.3f} vs {plain['mal']:.3f}, tokens/s ratio {ratio(gen['tps'], plain['tps']):.3f}"
        )
    print(f"wrote {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
