"""Teacher-forced calibration against SD-based calibration (issue 20, item 1).

Two measurements, both on the Qwen2.5-Coder pair:

1. **Observations per hour.** SD-based calibration counts plain SD's rejections while decoding
   (`calibrate`, `core.memory.rejections`); teacher-forced calibration counts the argmax
   disagreements of one forward of each model over corpus text (`calibrate --mode forced`). The SD
   side is measured here by running `sd` on the benchmark items (the same runs give the rejections
   of part 2); the forced side is read from the `--pairs-log` a forced calibration wrote (per-sequence
   wall and CPU seconds). Both are reported per wall hour and per CPU hour of the process: on a
   shared core the CPU hour is the comparable number.
2. **Coverage of sd's rejections.** The share of plain SD's actual rejections (draft token,
   correction) on benchmark items — which no calibration corpus overlaps — whose pair the memory
   holds at count ≥ λ (λ = 2, 4, 6): CSD can rescue no more than that. Drawn as a curve over the
   number of forced observations (the memory after the first n of them, in the log's order).
   Beside it, SD-based calibration at equal observations: a memory from the rejections of half the
   items (task-specific, as the paper calibrates), coverage of the other half's, and the reverse.

    # the forced memory and its log (resumable; --ship writes it into the package)
    python -m workbench calibrate --mode forced --model qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b \
        --dtype bfloat16 --limit 5000 --ship --pairs-log results/forced_pairs_bf16.jsonl
    # sd on the first 40 HumanEval + 40 GSM8K items (resumable), then the report
    python benchmarks/bench_forced_calibration.py --pairs-log results/forced_pairs_bf16.jsonl --limit 40

Writes results/bench_forced_calibration_<dtype>.json and .md; the sd runs are checkpointed in
results/bench_forced_sd_<dtype>_<max new tokens>.jsonl (one line per item), so a stopped run resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

LAMS = (2, 4, 6)


def coverage(rejections, counts: Counter, lams=LAMS) -> dict[int, float]:
    n = len(rejections)
    return {lam: (sum(counts.get(tuple(p), 0) >= lam for p in rejections) / n if n else 0.0) for lam in lams}


def read_log(path: Path) -> list[dict]:
    from workbench.evaluation.forced_calibration import read_log as read_pairs_log

    return read_pairs_log(path)  # a job may be writing it: a half-written last line is left out


def unseen_share(counts: Counter) -> float | None:
    """Good–Turing: pairs seen once / observations, the share of future rejections of pairs never seen."""
    total = sum(counts.values())
    return sum(1 for c in counts.values() if c == 1) / total if total else None


def forced_curve(log: list[dict], rejections, points: int = 12, marks=None) -> list[dict]:
    """Coverage after the first n observations of the log, at about `points` values of n (doubling from the
    total down), or at the given `marks` (those the log reaches), with the Good–Turing unseen share."""
    total = sum(len(r["pairs"]) for r in log)
    if marks:
        marks = sorted({m for m in marks if 0 < m <= total} | {total})
    else:
        marks, n = [], max(total, 1)
        while n >= 250 and len(marks) < points:
            marks.append(n)
            n //= 2
        marks = sorted(set(marks))
    counts, seen, out, cpu, wall, seqs = Counter(), 0, [], 0.0, 0.0, 0
    todo = list(marks)
    for row in log:
        for p in row["pairs"]:
            counts[tuple(p)] += 1
            seen += 1
            if todo and seen == todo[0]:
                todo.pop(0)
                out.append(
                    {
                        "observations": seen,
                        "pairs": len(counts),
                        "sequences": seqs + 1,
                        "cpu_hours": (cpu + row["cpu_seconds"]) / 3600,
                        "wall_hours": (wall + row["seconds"]) / 3600,
                        "unseen": unseen_share(counts),
                        **{f"lam>={k}": v for k, v in coverage(rejections, counts).items()},
                    }
                )
        cpu += row["cpu_seconds"]
        wall += row["seconds"]
        seqs += 1
    return out


def crossing(curve: list[dict], key: str = "lam>=6", target: float = 0.20) -> dict | None:
    """Where coverage would reach `target`, by a least-squares line of coverage against log2(observations)
    through the curve's points with nonzero coverage (each doubling has added a roughly constant number of
    points so far): the slope per doubling and the observations at the target. An extrapolation, None
    with fewer than two such points or a slope that is not positive."""
    import math

    pts = [(math.log2(p["observations"]), p[key]) for p in curve if p.get(key, 0) > 0]
    if len(pts) < 2:
        return None
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0.0
    if slope <= 0:
        return None
    return {
        "per_doubling": slope,
        "observations": 2 ** (mx + (target - my) / slope),
        "target": target,
        "points": len(pts),
    }


def sd_runs(
    limit: int,
    max_new_tokens: int,
    dtype: str,
    out: Path,
    threads: int,
    run: bool = True,
    code_max_new_tokens: int | None = None,
) -> list[dict]:
    """Plain SD on the first `limit` HumanEval and GSM8K items (alternating), one checkpoint line per item."""
    from bench_csd import pair_items

    items = pair_items(limit, max_new_tokens, code_max_new_tokens or max_new_tokens)
    done = {r["id"]: r for r in (read_log(out) if out.exists() else [])}
    todo = [i for i in items if i.id not in done]
    if todo and run:
        import torch

        from core.memory import rejections
        from core.models import check_pair, encode_prompt, load_model
        from core.stats import run_metrics
        from workbench.methods import run_method

        if threads:
            torch.set_num_threads(threads)
        target = load_model("qwen2.5-coder-1.5b", device="cpu", dtype=dtype)
        draft = load_model("qwen2.5-coder-0.5b", device="cpu", dtype=dtype)
        check_pair(target, draft)
        run_method(
            "sd",
            target,
            encode_prompt(target.tokenizer, "def hello():", chat=False),
            {"max_new_tokens": 4},
            draft=draft,
        )
        with out.open("a", encoding="utf-8") as fh:
            for k, item in enumerate(todo, start=1):
                ids = encode_prompt(target.tokenizer, item.text, chat=item.chat)
                w, c = time.perf_counter(), time.process_time()
                run = run_method(
                    "sd", target, ids, {"max_new_tokens": item.max_new_tokens}, draft=draft, stop_strings=item.stop
                )
                w, c = time.perf_counter() - w, time.process_time() - c
                m = run_metrics(run)
                row = {
                    "id": item.id,
                    "kind": item.kind,
                    "rejections": [list(p) for p in rejections(run.steps)],
                    "tokens": m["tokens"],
                    "steps": m["steps"],
                    "seconds": w,
                    "cpu_seconds": c,
                }
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                done[item.id] = row
                print(
                    f"sd {k}/{len(todo)} {item.id}: {len(row['rejections'])} rejections, {m['tokens']} tokens, "
                    f"{w:.0f} s ({c:.0f} CPU s)",
                    file=sys.stderr,
                )
    return [done[i.id] for i in items if i.id in done]


def split_half(rows: list[dict]) -> dict:
    """SD-based calibration at equal footing: memory from half the items' rejections, coverage of the other half's (both ways)."""
    # Items alternate HumanEval, GSM8K: split by pairs of items, so each half holds both tasks.
    a = [r for i, r in enumerate(rows) if (i // 2) % 2 == 0]
    b = [r for i, r in enumerate(rows) if (i // 2) % 2 == 1]
    out = []
    for cal, test in ((a, b), (b, a)):
        counts = Counter(tuple(p) for r in cal for p in r["rejections"])
        rej = [tuple(p) for r in test for p in r["rejections"]]
        out.append(
            {
                "observations": sum(counts.values()),
                "items": len(cal),
                "test_rejections": len(rej),
                **{f"lam>={k}": v for k, v in coverage(rej, counts).items()},
            }
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--pairs-log",
        default=str(ROOT / "results" / "forced_pairs_bf16.jsonl"),
        help="the JSON Lines log of `calibrate --mode forced --pairs-log`",
    )
    ap.add_argument(
        "--limit", type=int, default=40, help="benchmark items per dataset for sd's rejections (HumanEval, GSM8K)"
    )
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument(
        "--code-max-new-tokens",
        type=int,
        default=None,
        help="HumanEval's new tokens (default --max-new-tokens; bench_csd's runs use 128 with GSM8K's 256)",
    )
    ap.add_argument(
        "--marks",
        default=None,
        help="observation counts to draw the forced curve at, comma-separated (default: doubling from the log's total)",
    )
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--memory",
        default=None,
        help="also report the coverage of this memory file (e.g. the shipped one); "
        "files joined by '+' are counted together",
    )
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument("--sd-only", action="store_true", help="only run (or resume) the sd runs")
    ap.add_argument(
        "--no-run", action="store_true", help="report on the sd runs already in the checkpoint (run nothing)"
    )
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    code_tokens = args.code_max_new_tokens or args.max_new_tokens
    tokens = f"{args.max_new_tokens}" + (f"_code{code_tokens}" if code_tokens != args.max_new_tokens else "")
    ckpt = out / f"bench_forced_sd_{args.dtype}_{tokens}.jsonl"
    rows = sd_runs(
        args.limit,
        args.max_new_tokens,
        args.dtype,
        ckpt,
        args.threads,
        run=not args.no_run,
        code_max_new_tokens=code_tokens,
    )
    rows = rows[: 2 * args.limit]  # a checkpoint of a larger --limit: its balanced prefix
    if args.sd_only:
        return 0
    rejections = [tuple(p) for r in rows for p in r["rejections"]]
    sd_obs, sd_cpu, sd_wall = len(rejections), sum(r["cpu_seconds"] for r in rows), sum(r["seconds"] for r in rows)
    log = read_log(Path(args.pairs_log))
    f_obs = sum(len(r["pairs"]) for r in log)
    f_cpu, f_wall = sum(r["cpu_seconds"] for r in log), sum(r["seconds"] for r in log)
    f_pos = sum(r["tokens"] for r in log)
    gaps = [g for r in log for g in r.get("gaps", [])]
    curve = forced_curve(log, rejections, marks=[int(m) for m in args.marks.split(",")] if args.marks else None)
    halves = split_half(rows)
    kinds = Counter(r["kind"] for r in rows)
    result = {
        "sd_items": dict(kinds),
        "sd_rejections": sd_obs,
        "sd_tokens": sum(r["tokens"] for r in rows),
        "sd_based": {
            "observations": sd_obs,
            "cpu_seconds": sd_cpu,
            "seconds": sd_wall,
            "per_cpu_hour": 3600 * sd_obs / sd_cpu if sd_cpu else None,
            "per_hour": 3600 * sd_obs / sd_wall if sd_wall else None,
        },
        "forced": {
            "observations": f_obs,
            "sequences": len(log),
            "tokens": f_pos,
            "cpu_seconds": f_cpu,
            "seconds": f_wall,
            "per_cpu_hour": 3600 * f_obs / f_cpu if f_cpu else None,
            "per_hour": 3600 * f_obs / f_wall if f_wall else None,
            "gate_pass_share": sum(g >= -4.605170 for g in gaps) / len(gaps) if gaps else None,
        },
        "forced_curve": curve,
        "sd_based_split_half": halves,
        "crossing_20pct": {k: crossing(curve, k) for k in ("lam>=2", "lam>=4", "lam>=6")},
    }
    if args.memory:
        from core.memory import CorrectionMemory

        counts = sum((Counter(CorrectionMemory.load(f).snapshot()) for f in args.memory.split("+")), Counter())
        result["memory"] = {
            "file": args.memory,
            "pairs": len(counts),
            "observations": sum(counts.values()),
            "unseen": unseen_share(counts),
            **{f"lam>={k}": v for k, v in coverage(rejections, counts).items()},
        }
    name = f"bench_forced_calibration_{args.dtype}"
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    s, f = result["sd_based"], result["forced"]
    lines = [
        f"## Teacher-forced vs SD-based calibration, Qwen2.5-Coder 1.5B + 0.5B, {args.dtype}",
        "",
        f"sd's rejections: {sd_obs} on {len(rows)} benchmark items ({', '.join(f'{v} {k}' for k, v in kinds.items())}; "
        f"{args.max_new_tokens} new tokens at most)",
        "",
        "| calibration | observations | wall s | CPU s | observations / hour | observations / CPU hour |",
        "|---|---|---|---|---|---|",
        f"| SD-based (sd's rejections while decoding) | {sd_obs} | {sd_wall:.0f} | {sd_cpu:.0f} | {s['per_hour']:.0f} | {s['per_cpu_hour']:.0f} |",
        f"| teacher-forced ({len(log)} sequences, {f_pos} tokens) | {f_obs} | {f_wall:.0f} | {f_cpu:.0f} | {f['per_hour']:.0f} | {f['per_cpu_hour']:.0f} |",
        "",
        f"forced/SD per CPU hour: {f['per_cpu_hour'] / s['per_cpu_hour']:.1f}×; share of forced pairs CSD's gate (τ 0.01) passes: "
        f"{(f['gate_pass_share'] or 0):.1%}",
        "",
        "Coverage of sd's rejections (count ≥ λ) against forced observations:",
        "",
        "| observations | pairs | sequences | CPU hours | wall hours | λ 2 | λ 4 | λ 6 | Good–Turing unseen |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in curve:
        lines.append(
            f"| {p['observations']} | {p['pairs']} | {p['sequences']} | {p['cpu_hours']:.2f} | {p['wall_hours']:.2f} | "
            f"{p['lam>=2']:.1%} | {p['lam>=4']:.1%} | {p['lam>=6']:.1%} | {p['unseen']:.1%} |"
        )
    per_cpu_hour = f["per_cpu_hour"]
    for k, c in result["crossing_20pct"].items():
        if c is None:
            lines.append(f"\n{k.replace('lam>=', 'λ ')}: too few points to extrapolate to 20 %")
            continue
        cost = (
            f", about {c['observations'] / per_cpu_hour:,.0f} CPU hours at {per_cpu_hour:,.0f} observations per CPU hour"
            if per_cpu_hour
            else ""
        )
        lines.append(
            f"\n{k.replace('lam>=', 'λ ')}: +{c['per_doubling']:.1%} per doubling of observations (fit over "
            f"{c['points']} points); 20 % at about {c['observations']:,.0f} observations{cost} (an extrapolation)"
        )
    lines += [
        "",
        "SD-based calibration from half the items, coverage of the other half's rejections:",
        "",
        "| observations (items) | test rejections | λ 2 | λ 4 | λ 6 |",
        "|---|---|---|---|---|",
    ]
    for h in halves:
        lines.append(
            f"| {h['observations']} ({h['items']}) | {h['test_rejections']} | {h['lam>=2']:.1%} | {h['lam>=4']:.1%} | {h['lam>=6']:.1%} |"
        )
    if "memory" in result:
        m = result["memory"]
        lines += [
            "",
            f"memory {m['file']} ({m['pairs']} pairs, {m['observations']} observations): "
            + ", ".join(f"λ {k}: {m[f'lam>={k}']:.1%}" for k in LAMS)
            + f"; Good–Turing unseen {m['unseen'] or 0:.1%}",
        ]
    command = "python benchmarks/bench_forced_calibration.py " + " ".join(sys.argv[1:])
    (out / f"{name}.md").write_text(f"<!-- written by `{command}` -->\n" + "\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
