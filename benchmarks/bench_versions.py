"""Decode speed of this checkout against another version of the code (a git ref), interleaved.

Each round runs every version in a fresh process of its own (the order alternates between rounds), and each
process decodes the same Spec-Bench items (summarization + rag) with each method in turn, item by item, on
SmolLM2. It reports tokens/s per method and version pooled over the rounds (Σ tokens / Σ decode seconds), the
ratio this checkout / the other, the ratio per round, and whether both versions gave the same tokens.

    python benchmarks/bench_versions.py --base main [--methods greedy,pld,aasd] [--limit 6] [--rounds 3] --threads 1

The other version is extracted with `git archive` into a temporary folder (nothing in the repository changes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC_BENCH = ROOT.parent / "shared" / "data" / "spec_bench" / "question.jsonl"


def worker(args: argparse.Namespace) -> None:
    """One version's run: its code first on sys.path; writes {method: {tokens, seconds, outputs}} to --out."""
    sys.path.insert(0, args.code)
    import torch

    torch.set_num_threads(args.threads)
    import core

    assert Path(core.__file__).resolve().is_relative_to(Path(args.code).resolve()), (
        core.__file__
    )  # the version asked for
    from core.methods import run_method
    from core.models import encode_prompt, load_model

    rows = [json.loads(line) for line in SPEC_BENCH.read_text().splitlines() if line.strip()]
    items = [r for cat in ("summarization", "rag") for r in [r for r in rows if r["category"] == cat][: args.limit]]
    target = load_model(args.model, device="cpu", dtype=args.dtype)
    methods = args.methods.split(",")
    out = {m: {"tokens": 0, "seconds": 0.0, "outputs": []} for m in methods}
    run_method(methods[0], target, encode_prompt(target.tokenizer, "Warm up."), {"max_new_tokens": 8})
    for row in items:
        ids = encode_prompt(target.tokenizer, row["turns"][0])
        for m in methods:
            run = run_method(m, target, ids, {"max_new_tokens": args.max_new_tokens})
            out[m]["tokens"] += len(run.output_ids)
            out[m]["seconds"] += run.decode_seconds
            out[m]["outputs"].append(run.output_ids)
    Path(args.out).write_text(json.dumps(out))


def cpu_line(threads: int) -> str:
    model, flags = platform.processor() or "?", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    marks = ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in ("avx512_bf16", "amx_bf16"))
    return f"{model}; {marks}; torch threads {threads}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="main", help="the git ref to compare this checkout against")
    ap.add_argument("--methods", default="greedy,pld,aasd")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--limit", type=int, default=6, help="items per category (summarization, rag)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_versions.json"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--code", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-versions-") as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        versions = {"this": str(ROOT), args.base: str(base)}
        results: dict[str, list[dict]] = {v: [] for v in versions}
        for r in range(args.rounds):
            for v in list(versions) if r % 2 == 0 else list(versions)[::-1]:
                out = Path(tmp) / f"{v.replace('/', '_')}-{r}.json"
                cmd = [
                    sys.executable,
                    __file__,
                    "--worker",
                    "--code",
                    versions[v],
                    "--out",
                    str(out),
                    "--methods",
                    args.methods,
                    "--model",
                    args.model,
                    "--dtype",
                    args.dtype,
                    "--limit",
                    str(args.limit),
                    "--max-new-tokens",
                    str(args.max_new_tokens),
                    "--threads",
                    str(args.threads),
                ]
                subprocess.run(cmd, check=True, cwd=tmp, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
                results[v].append(json.loads(out.read_text()))
                print(f"round {r + 1}/{args.rounds}: {v} done", flush=True)
    methods = args.methods.split(",")
    this, other = results["this"], results[args.base]
    print(
        f"\n## decode tokens/s, this checkout against {args.base}: {args.model} {args.dtype}, {2 * args.limit} Spec-Bench items "
        f"(summarization + rag), {args.max_new_tokens} new tokens, {args.rounds} rounds interleaved"
    )
    print(cpu_line(args.threads))
    print("\n| method | this tok/s | base tok/s | this / base | per round | same tokens |\n|---|---|---|---|---|---|")
    summary = {}
    for m in methods:
        tps = {v: sum(x[m]["tokens"] for x in results[v]) / sum(x[m]["seconds"] for x in results[v]) for v in results}
        rounds = [(a[m]["tokens"] / a[m]["seconds"]) / (b[m]["tokens"] / b[m]["seconds"]) for a, b in zip(this, other)]
        same = sum(x == y for x, y in zip(this[0][m]["outputs"], other[0][m]["outputs"]))
        summary[m] = {
            "this_tps": tps["this"],
            "base_tps": tps[args.base],
            "ratio": tps["this"] / tps[args.base],
            "ratio_per_round": rounds,
            "same_outputs": same,
            "items": len(this[0][m]["outputs"]),
        }
        print(
            f"| {m} | {tps['this']:.1f} | {tps[args.base]:.1f} | {tps['this'] / tps[args.base]:.3f} | "
            f"{', '.join(f'{x:.3f}' for x in rounds)} | {same}/{len(this[0][m]['outputs'])} |"
        )
    print(f"\ntook {time.perf_counter() - started:.0f} s")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps({"base": args.base, "cpu": cpu_line(args.threads), "args": vars(args), "methods": summary}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
