"""The CASD compression table (issue 22): greedy, casd and aasd at compression rates 1.0, 0.5 and 0.33,
interleaved per item (each item's context compressed once per rate, then every method on it), in one run.

For each (method, rate): the task score (ROUGE-L / QA F1 against the references), prefill ms, tokens/s
(decoding), end-to-end seconds (compression + prefill + decoding; also without the compression, as when a
compressed document is reused), the rate reached. casd and aasd draft from the full prompt (`pool=full`)
while the model reads the compressed one. Then issue 22's two targets, PASS or MISS:
  1. at rate 0.5, casd recovers ≥ half of the score greedy loses between rate 1.0 and 0.5;
  2. at rate 0.5, casd's end-to-end time ≤ 0.6 × greedy's at rate 1.0, on prompts of ≥ 1,000 tokens.

    python benchmarks/bench_compress.py [--data spec-bench:summarization,rag] [--limit 5] [--dtype bfloat16]
        [--rates 1.0,0.5,0.33] [--methods greedy,casd,aasd] [--compressor selfinfo] [--compressor-model M]

`--compressor selfinfo[layers=K]` scores with the first K decoder layers only (early exit; docs/COMPRESSION.md).
`--scorers selfinfo,selfinfo[layers=8],...` instead compares compressors without decoding: per item, each one's
compression seconds (best of --scorer-repeats) against the target's prefill seconds on the full and on the
compressed prompt, and how far its choice agrees with the first scorer's (Jaccard of the kept context tokens;
Spearman correlation of the per-token self-information); one item's kept text is printed per scorer.

No hub access is needed for the default data (Spec-Bench's summarization and RAG rows, which carry
references); LongBench-format QA files work too: --data longbench:hotpotqa@/path/hotpotqa.jsonl.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.compress import check_compressor, check_rate, make_compressor  # noqa: E402
from core.models import encode_prompt, load_model  # noqa: E402
from core.stats import run_metrics  # noqa: E402
from workbench.evaluation.bench import check_contexts, spread  # noqa: E402
from workbench.evaluation.scores import score_task  # noqa: E402
from workbench.evaluation.tasks import compress_prompt, load_many  # noqa: E402
from workbench.methods import parse_method_spec, run_method, split_method_list  # noqa: E402

RECOVER = 0.5  # target 1: share of greedy's loss casd must win back
E2E = 0.6  # target 2: casd@0.5 end-to-end / greedy@1.0 end-to-end
LONG = 1000  # target 2 holds on prompts of at least this many tokens


def mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def summarise(rows, methods, rates, ids=None):
    """Per (method, rate): means over the items (or those in `ids`)."""
    out = {}
    for m in methods:
        for r in rates:
            rs = [x for x in rows if x["method"] == m and x["rate"] == r and (ids is None or x["id"] in ids)]
            if not rs:
                continue
            decode = sum(x["decode_s"] for x in rs)
            out[(m, r)] = {
                "n": len(rs),
                "score": mean(x["score"] for x in rs),
                "prefill_ms": 1e3 * mean(x["prefill_s"] for x in rs),
                "tps": sum(x["tokens"] for x in rs) / decode if decode else None,
                "mal": sum(x["tokens"] for x in rs) / max(sum(x["steps"] for x in rs), 1),
                "e2e_s": mean(x["e2e_s"] for x in rs),
                "e2e_nocomp_s": mean(x["e2e_s"] - x["compress_s"] for x in rs),
                "compress_s": mean(x["compress_s"] for x in rs),
                "reached": mean(x["reached"] for x in rs),
                "prompt_tokens": mean(x["prompt_tokens"] for x in rs),
            }
    return out


def recovery(g1, g5, c5):
    """The share of greedy's mean score loss from rate 1.0 to 0.5 that a method at 0.5 wins back (None: no loss)."""
    loss = g1 - g5
    return (c5 - g5) / loss if loss > 0 else None


def recovery_margin(rows, method="casd"):
    """How far `method`@0.5 clears target 1, in score points, with a 95 % interval over the items: target 1 holds
    iff mean(c5) >= mean(g5) + RECOVER * (mean(g1) - mean(g5)), i.e. iff the mean of the per-item margins
    c5 - (1 - RECOVER) * g5 - RECOVER * g1 is >= 0 (a ratio of means has no stable interval when the loss is
    small; this linear form does). Returns bench's `spread` of the margins (mean, sd, ci95, n), or None."""
    score = {(x["id"], x["method"], x["rate"]): x["score"] for x in rows}
    margins = []
    for i in dict.fromkeys(x["id"] for x in rows):
        g1, g5, c5 = score.get((i, "greedy", 1.0)), score.get((i, "greedy", 0.5)), score.get((i, method, 0.5))
        if None not in (g1, g5, c5):
            margins.append(c5 - (1 - RECOVER) * g5 - RECOVER * g1)
    return spread(margins) if len(margins) > 1 else None


def recovery_verdict(g1, g5, c5, method="casd", margin=None):
    """Target 1: the share of greedy's score loss from rate 1.0 to 0.5 that `method` at 0.5 wins back."""
    if g1 is None or g5 is None or c5 is None:
        return "MISS (no scores)"
    rec = recovery(g1, g5, c5)
    if rec is None:
        return f"N/A (greedy lost nothing: {g1:.2f} at 1.0, {g5:.2f} at 0.5; {method} {c5:.2f})"
    over = (
        (
            f"; {margin['mean']:+.2f} points over the target's score, 95 % interval over items "
            f"{margin['mean'] - margin['ci95']:+.2f} to {margin['mean'] + margin['ci95']:+.2f}"
        )
        if margin and margin["ci95"]
        else ""
    )
    return (
        f"{'PASS' if rec >= RECOVER else 'MISS'} (greedy {g1:.2f} -> {g5:.2f}, {method}@0.5 {c5:.2f}: "
        f"recovers {rec:.0%} of the loss{over}; target >= {RECOVER:.0%})"
    )


def table(summary, base):
    lines = [
        "| method | rate | reached | items | prompt tok | score | prefill ms | tok/s | MAL | compress s | e2e s | "
        "e2e s w/o compress | e2e vs greedy@1.0 |",
        "|---" * 13 + "|",
    ]
    for (m, r), s in summary.items():
        rel = s["e2e_s"] / base["e2e_s"] if base and base["e2e_s"] else None
        lines.append(
            f"| {m} | {r:g} | {fmt(s['reached'], '.3f')} | {s['n']} | {fmt(s['prompt_tokens'], '.0f')} | "
            f"{fmt(s['score'])} | {fmt(s['prefill_ms'], '.0f')} | {fmt(s['tps'])} | {fmt(s['mal'])} | "
            f"{fmt(s['compress_s'])} | {fmt(s['e2e_s'])} | {fmt(s['e2e_nocomp_s'])} | {fmt(rel, '.3f')} |"
        )
    return "\n".join(lines)


def report(rows, methods, rates, header):
    """Print the table and issue 22's two targets from the rows (each casd variant checked too: casd[delta=...]);
    returns (summary, verdicts)."""
    names = {m: parse_method_spec(m) for m in methods}
    summary = summarise(rows, methods, rates)
    print(header)
    print(table(summary, summary.get(("greedy", 1.0))))
    casds = [m for m in methods if names[m][0] == "casd"]
    # Target 1: score recovery at rate 0.5.
    g1, g5 = (summary[k]["score"] for k in (("greedy", 1.0), ("greedy", 0.5)))
    recovered = {
        m: recovery_verdict(g1, g5, summary[(m, 0.5)]["score"], m, recovery_margin(rows, m))
        for m in casds
        if (m, 0.5) in summary
    }
    # Target 2: end-to-end time on long prompts.
    long_ids = {r["id"] for r in rows if r["full_prompt_tokens"] >= LONG}
    e2e = {}
    for m in casds:
        if not long_ids:
            e2e[m] = (f"N/A (no item of >= {LONG} prompt tokens; pass --min-prompt-tokens {LONG})", "")
            continue
        s = summarise(rows, ["greedy", m], [1.0, 0.5], long_ids)
        ratio = s[(m, 0.5)]["e2e_s"] / s[("greedy", 1.0)]["e2e_s"]
        ratio_nc = s[(m, 0.5)]["e2e_nocomp_s"] / s[("greedy", 1.0)]["e2e_s"]
        e2e[m] = (
            f"{'PASS' if ratio <= E2E else 'MISS'} ({len(long_ids)} items of >= {LONG} tokens: {m}@0.5 "
            f"{s[(m, 0.5)]['e2e_s']:.2f} s vs greedy@1.0 {s[('greedy', 1.0)]['e2e_s']:.2f} s = {ratio:.2f}x, "
            f"compression included; target <= {E2E})",
            f"{'PASS' if ratio_nc <= E2E else 'MISS'} (the same without the compression time, a compressed "
            f"document reused: {ratio_nc:.2f}x)",
        )
    for m in casds:
        print(f"\n{m}:\n  target 1, score recovery at 0.5: {recovered.get(m, 'MISS (no scores)')}")
        print(f"  target 2, end-to-end at 0.5:    {e2e[m][0]}")
        if e2e[m][1]:
            print(f"           without compression:    {e2e[m][1]}")
    verdicts = {
        "recovery": recovered.get("casd"),
        "e2e": e2e["casd"][0],
        "e2e_without_compression": e2e["casd"][1],
        "by_method": {
            m: {"recovery": recovered.get(m), "e2e": e2e[m][0], "e2e_without_compression": e2e[m][1]} for m in casds
        },
    }
    return summary, verdicts


def from_json(path) -> int:
    """--from-json: the table and targets again from a saved run's rows (no model; e.g. after a change to the checks)."""
    saved = json.loads(Path(path).read_text())
    rows, config = saved["rows"], saved.get("config", {})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    rates = sorted({r["rate"] for r in rows}, reverse=True)
    report(
        rows,
        methods,
        rates,
        f"\n{path}: {config.get('model')}, {len({r['id'] for r in rows})} items, "
        f"compressor {config.get('compressor')}\n",
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument(
        "--data", action="append", default=None, help="dataset spec (repeatable; default spec-bench:summarization,rag)"
    )
    ap.add_argument("--limit", type=int, default=5, help="items per category")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--rates", default="1.0,0.5,0.33")
    ap.add_argument("--methods", default="greedy,casd,aasd")
    ap.add_argument(
        "--compressor", default="selfinfo", help="selfinfo, selfinfo[layers=K] (early exit after K layers) or llmlingua"
    )
    ap.add_argument(
        "--scorers",
        default=None,
        help="compare compressors instead of decoding, e.g. selfinfo,selfinfo[layers=8],selfinfo[layers=15] "
        "(the first is the reference for the overlap)",
    )
    ap.add_argument("--scorer-rate", type=float, default=0.5, help="the rate the --scorers comparison compresses to")
    ap.add_argument(
        "--scorer-repeats", type=int, default=3, help="timings per item in the --scorers comparison (best kept)"
    )
    ap.add_argument("--compressor-model", default=None, help="default: the target itself")
    ap.add_argument(
        "--min-prompt-tokens", type=int, default=0, help="only items whose full prompt has at least this many tokens"
    )
    ap.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=0,
        help="only items whose full prompt is shorter than this (0 = no bound): e.g. 1000 picks items held out "
        "from a --min-prompt-tokens 1000 run, to tune a setting on",
    )
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument(
        "--from-json", default=None, help="print the table and targets again from a saved run's JSON (no model)"
    )
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default); 1 on a shared machine")
    args = ap.parse_args()
    if args.from_json:
        return from_json(args.from_json)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    rates = [check_rate(x) for x in args.rates.split(",")]
    if 1.0 not in rates or 0.5 not in rates:
        raise SystemExit("--rates must include 1.0 and 0.5 (the targets compare them)")
    methods = split_method_list(args.methods)
    if "greedy" not in methods or "casd" not in methods:
        raise SystemExit("--methods must include greedy and casd (the targets compare them)")
    names = {m: parse_method_spec(m) for m in methods}
    tasks = load_many(args.data or ["spec-bench:summarization,rag"], limit=None)
    check_contexts(tasks)
    scorers = [check_compressor(x) for x in split_method_list(args.scorers)] if args.scorers else None
    target = load_model(args.model, device="cpu", dtype=args.dtype)
    comp_model = load_model(args.compressor_model, device="cpu", dtype=args.dtype) if args.compressor_model else target
    compressor = make_compressor(scorers[0] if scorers else args.compressor, comp_model)
    full = {(t.category, t.id): encode_prompt(target.tokenizer, t.prompt(), chat=t.chat) for t in tasks}
    longest = args.max_prompt_tokens or float("inf")
    tasks = [t for t in tasks if args.min_prompt_tokens <= len(full[(t.category, t.id)]) < longest]
    by_cat: dict = {}
    for t in tasks:
        by_cat.setdefault(t.category, []).append(t)
    tasks = [t for ts in by_cat.values() for t in ts[: args.limit]]
    if not tasks:
        raise SystemExit("no items left (lower --min-prompt-tokens or raise --max-prompt-tokens)")
    if scorers:
        return compare_scorers(args, scorers, target, comp_model, tasks, full)

    # Warm-up: lazy initialisation (and the compressor's first forward) stays out of the timings.
    warm = tasks[0]
    compress_prompt(warm, compressor, 0.5)
    for m, (name, over) in names.items():
        run_method(name, target, full[(warm.category, warm.id)][:64], {**over, "max_new_tokens": 4})

    rows = []
    started = time.time()
    for i, task in enumerate(tasks, 1):
        full_ids = full[(task.category, task.id)]
        for rate in rates:
            compression = None
            if rate < 1.0:
                text, compression = compress_prompt(task, compressor, rate)
                ids = encode_prompt(target.tokenizer, text, chat=task.chat)
            else:
                text, ids = task.prompt(), full_ids
            for m, (name, over) in names.items():
                p = {**over, "max_new_tokens": args.max_new_tokens or task.max_new_tokens or 128}
                run = run_method(
                    name,
                    target,
                    ids,
                    p,
                    prompt_text=text,
                    context=task.context,
                    stop_strings=task.stop,
                    compression=compression,
                    uncompressed_ids=full_ids,
                )
                met = run_metrics(run)
                comp_s = compression.seconds if compression else 0.0
                rows.append(
                    {
                        "id": task.id,
                        "category": task.category,
                        "method": m,
                        "rate": rate,
                        "reached": compression.reached if compression else 1.0,
                        "score": score_task(task, run.output_text),
                        "prefill_s": run.prefill_seconds,
                        "decode_s": run.decode_seconds,
                        "compress_s": comp_s,
                        "e2e_s": comp_s + run.prefill_seconds + run.decode_seconds,
                        "tokens": met["tokens"],
                        "steps": met["steps"],
                        "prompt_tokens": len(ids),
                        "full_prompt_tokens": len(full_ids),
                        "pool": run.params.get("pool"),
                        "text": run.output_text,
                    }
                )
                print(
                    f"[{i}/{len(tasks)}] {task.category}/{task.id} rate {rate:g} {m}: score {fmt(rows[-1]['score'])}, "
                    f"{len(ids)} prompt tokens, e2e {rows[-1]['e2e_s']:.2f} s",
                    file=sys.stderr,
                    flush=True,
                )

    summary, verdicts = report(
        rows,
        methods,
        rates,
        f"\n{args.model} {str(target.dtype).replace('torch.', '')}, {len(tasks)} items "
        f"({', '.join(f'{c} {len(v[: args.limit])}' for c, v in by_cat.items())}), compressor {compressor.name}"
        f"{' over ' + args.compressor_model if args.compressor_model else ' over the target'}, "
        f"{time.time() - started:.0f} s\n",
    )
    dtype = str(target.dtype).replace("torch.", "")
    label = (
        ""
        if compressor.name == "selfinfo"
        else "_" + "".join(c if c.isalnum() else "-" for c in compressor.name).strip("-")
    )
    out = Path(args.out) / f"bench_compress_{args.model.replace('/', '_')}_{dtype}{label}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "config": vars(args),
                "summary": {f"{m}@{r:g}": v for (m, r), v in summary.items()},
                "targets": verdicts,
                "rows": rows,
            },
            indent=1,
        )
    )
    print(f"wrote {out}", file=sys.stderr)
    return 0


def ranks(x):
    import numpy as np

    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x))
    return r


def spearman(a, b):
    """Spearman's rank correlation (ties broken by position: the values are floats)."""
    import numpy as np

    if len(a) < 2:
        return None
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def jaccard(a, b):
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else 1.0


def timed(fn):
    """(result, wall seconds, CPU seconds of this thread): on a shared core the CPU time is the steadier of the two
    (another process's load stretches the wall clock, not this thread's CPU time; run with one torch thread)."""
    wall, cpu = time.perf_counter(), time.thread_time()
    out = fn()
    return out, time.perf_counter() - wall, time.thread_time() - cpu


def prefill_once(target, ids):
    """(engine prefill wall seconds, CPU seconds of the call): greedy with one new token (the prefill gives it)."""
    run, _, cpu = timed(lambda: run_method("greedy", target, ids, {"max_new_tokens": 1}))
    return run.prefill_seconds, cpu


def compare_scorers(args, scorers, target, comp_model, tasks, full) -> int:
    """--scorers: compression seconds of each scorer against the prefill seconds it saves, and how far its
    kept tokens agree with the first scorer's. No decoding. Every timing is taken --scorer-repeats times, the
    scorers and prefills interleaved within each round, and the best is kept."""
    from workbench.evaluation.tasks import prompt_parts

    rate, reps = check_rate(args.scorer_rate), max(1, args.scorer_repeats)
    comps = {name: make_compressor(name, comp_model) for name in scorers}
    if any(not hasattr(c, "select") for c in comps.values()):
        raise SystemExit("--scorers compares the built-in selfinfo scorers (selfinfo, selfinfo[layers=K])")
    for c in comps.values():  # warm-up: lazy initialisation stays out of the timings
        compress_prompt(tasks[0], c, rate)
    prefill_once(target, full[(tasks[0].category, tasks[0].id)][:64])
    ref = scorers[0]
    rows, started, example = [], time.time(), {}
    for i, task in enumerate(tasks, 1):
        full_ids = full[(task.category, task.id)]
        context = prompt_parts(task)[1]
        best = {}  # key -> (wall, cpu), best of the rounds

        def keep(key, wall, cpu):
            w, c = best.get(key, (wall, cpu))
            best[key] = (min(w, wall), min(c, cpu))

        prompts, done = {}, {}
        for _ in range(reps):
            keep("full", *prefill_once(target, full_ids))
            for name, c in comps.items():
                (text, done[name]), _, cpu = timed(lambda: compress_prompt(task, c, rate))
                keep(("compress", name), done[name].seconds, cpu)
                prompts[name] = encode_prompt(target.tokenizer, text, chat=task.chat)
                keep(("prefill", name), *prefill_once(target, prompts[name]))
        picks = {name: c.select(context, rate)[1:] for name, c in comps.items()}
        example = example or {name: d.text for name, d in done.items()}
        for name in scorers:
            (cw, cc), (pw, pc), (fw, fc) = best[("compress", name)], best[("prefill", name)], best["full"]
            rows.append(
                {
                    "id": task.id,
                    "category": task.category,
                    "scorer": name,
                    "full_prompt_tokens": len(full_ids),
                    "context_tokens": done[name].tokens_in,
                    "prompt_tokens": len(prompts[name]),
                    "reached": done[name].reached,
                    "compress_s": cw,
                    "compress_cpu_s": cc,
                    "prefill_full_s": fw,
                    "prefill_full_cpu_s": fc,
                    "prefill_s": pw,
                    "prefill_cpu_s": pc,
                    "saved_s": fw - pw,
                    "saved_cpu_s": fc - pc,
                    "net_s": fw - pw - cw,
                    "net_cpu_s": fc - pc - cc,
                    "jaccard": jaccard(picks[name][0], picks[ref][0]),
                    "spearman": spearman(picks[name][1], picks[ref][1]),
                }
            )
            r = rows[-1]
            print(
                f"[{i}/{len(tasks)}] {task.category}/{task.id} {name}: compress {cw:.2f} s ({cc:.2f} CPU), prefill "
                f"{fw:.2f} -> {pw:.2f} s ({fc:.2f} -> {pc:.2f} CPU), Jaccard vs {ref} {r['jaccard']:.3f}",
                file=sys.stderr,
                flush=True,
            )
    total = int(getattr(comp_model.model.config, "num_hidden_layers", 0) or 0)
    print(
        f"\n{args.model} {str(target.dtype).replace('torch.', '')}, scoring model "
        f"{args.compressor_model or 'the target'} ({total} decoder layers), rate {rate:g}, {len(tasks)} items, "
        f"best of {reps} timings, {time.time() - started:.0f} s\n"
    )
    print("Seconds are the best of the rounds: wall clock (CPU time of the thread in brackets).\n")
    print(
        "| item | prompt tok | context tok | scorer | compress s | prefill s, full prompt | prefill s, compressed | "
        "prefill saved s | saved − compress s | Jaccard vs " + ref + " | Spearman vs " + ref + " |"
    )
    print("|---" * 11 + "|")
    for r in rows:
        print(
            f"| {r['category']}/{r['id']} | {r['full_prompt_tokens']} | {r['context_tokens']} | {r['scorer']} | "
            f"{r['compress_s']:.2f} ({r['compress_cpu_s']:.2f}) | {r['prefill_full_s']:.2f} ({r['prefill_full_cpu_s']:.2f}) | "
            f"{r['prefill_s']:.2f} ({r['prefill_cpu_s']:.2f}) | {r['saved_s']:.2f} ({r['saved_cpu_s']:.2f}) | "
            f"{r['net_s']:+.2f} ({r['net_cpu_s']:+.2f}) | {r['jaccard']:.3f} | {fmt(r['spearman'], '.3f')} |"
        )
    summary = {}
    print(
        "\n| scorer | items | compress s | prefill saved s | compress ÷ saved | Jaccard | Spearman |\n|---|---|---|---|---|---|---|"
    )
    for name in scorers:
        rs = [r for r in rows if r["scorer"] == name]
        summary[name] = {
            k: mean(r[k] for r in rs)
            for k in ("compress_s", "compress_cpu_s", "saved_s", "saved_cpu_s", "jaccard", "spearman")
        }
        m = summary[name]
        ratio = m["compress_s"] / m["saved_s"] if m["saved_s"] else None
        ratio_cpu = m["compress_cpu_s"] / m["saved_cpu_s"] if m["saved_cpu_s"] else None
        print(
            f"| {name} | {len(rs)} | {m['compress_s']:.2f} ({m['compress_cpu_s']:.2f}) | {m['saved_s']:.2f} "
            f"({m['saved_cpu_s']:.2f}) | {fmt(ratio)} ({fmt(ratio_cpu)}) | {m['jaccard']:.3f} | {fmt(m['spearman'], '.3f')} |"
        )
    first = tasks[0]
    print(f"\nkept text of {first.category}/{first.id} at rate {rate:g} (first 500 characters):")
    print(f"  original: {prompt_parts(first)[1][:500]!r}")
    for name, text in example.items():
        print(f"  {name}: {text[:500]!r}")
    out = (
        Path(args.out)
        / f"bench_compress_scorers_{args.model.replace('/', '_')}_{str(target.dtype).replace('torch.', '')}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"config": vars(args), "summary": summary, "rows": rows, "example": example}, indent=1))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
