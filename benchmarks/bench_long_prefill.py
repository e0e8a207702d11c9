"""A long context's prefill from the command line against the app's path (issue 33, item 4).

A ~20,000-character context (Spec-Bench's summarization and RAG documents, concatenated and cut) goes once
through `python -m workbench generate` (its JSON's prefill_seconds) and once through the running app
(build_app + launch + gradio_client's /compare, the prefill the stored run records), alternately, `--rounds`
times, greedy with a few new tokens, the model's default dtype. Prints the CPU, its bf16 flags and the threads.

    flock /tmp/bench.lock python benchmarks/bench_long_prefill.py [--chars 20000] [--rounds 2]

`--sweep` times core.engine.prefill alone instead, in this process, for each dtype and prefill chunk size
(core.cache.PREFILL_CHUNK, set here for the measurement only), interleaved, the fastest of `--rounds`:

    flock /tmp/bench.lock env OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/bench_long_prefill.py --sweep \
        --threads 1 [--dtypes bfloat16,float32] [--chunks 512,1024,2048,4096]

`--estimate` checks the app's prefill estimate before Run (workbench.service.PrefillClock): it reads a short
prompt (`--seen` tokens of the long one), then prompts of `--lengths` tokens, and prints each estimate, made from
the short prefill and the model's measured t(n, L), beside the measured prefill (the model's default dtype):

    flock /tmp/bench.lock env OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/bench_long_prefill.py --estimate \
        --threads 1 [--seen 300] [--lengths 1000,3000,6000]
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
sys.path.insert(0, str(ROOT))
SPEC_BENCH = ROOT.parent / "shared" / "data" / "spec_bench" / "question.jsonl"
PROMPT = "Summarize the documents above in three sentences."


def long_context(chars: int) -> str:
    text = ""
    for line in SPEC_BENCH.read_text().splitlines():
        row = json.loads(line)
        if row["category"] in ("summarization", "rag"):
            text += row["turns"][0] + "\n\n"
        if len(text) >= chars:
            break
    return text[:chars]


def machine() -> str:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next(
        (ln.split(":", 1)[1].strip() for ln in flags.splitlines() if ln.startswith("model name")), platform.processor()
    )
    import torch

    bf16 = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return f"{model}; flags {', '.join(bf16) or 'no bf16'}; torch threads {torch.get_num_threads()}; load {os.getloadavg()[0]:.1f}"


def cli_prefill(context_file: Path, new_tokens: int, env: dict) -> float:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "workbench",
            "generate",
            "--method",
            "greedy",
            "--context-file",
            str(context_file),
            "--prompt",
            PROMPT,
            "--max-new-tokens",
            str(new_tokens),
            "--json",
            "--no-store",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["metrics"]["prefill_seconds"]


def sweep(args) -> int:
    """core.engine.prefill of the long prompt per (dtype, chunk), interleaved; the fastest of the rounds."""
    import torch

    from core import cache as kv
    from core.engine import prefill
    from core.models import encode_prompt, load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    context = long_context(args.chars)
    models = {d: load_model("smollm2-135m", device="cpu", dtype=d) for d in args.dtypes.split(",")}
    ids = encode_prompt(next(iter(models.values())).tokenizer, f"{context}\n\n{PROMPT}", chat=None)
    print(f"{machine()}\nprompt {len(ids):,} tokens", flush=True)
    chunks = [int(c) for c in args.chunks.split(",")]
    best: dict[tuple[str, int], float] = {}
    for r in range(args.rounds):
        for dtype, target in models.items():
            for chunk in chunks:
                kv.PREFILL_CHUNK = chunk
                t0, c0 = time.perf_counter(), time.process_time()
                prefill(target.model, ids, kv.new_cache(target.model), 0)
                seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
                best[dtype, chunk] = min(best.get((dtype, chunk), (float("inf"), 0.0)), (seconds, cpu))
                print(
                    f"round {r + 1}: {dtype} chunk {chunk}: {seconds:.1f} s wall, {cpu:.1f} s CPU "
                    f"(load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    # The CPU time is what the prefill costs; the wall time adds what other processes took from it.
    print("| dtype | chunk | prefill s (fastest wall) | its CPU s | tokens per CPU s |\n|---|---|---|---|---|")
    for (dtype, chunk), (seconds, cpu) in best.items():
        print(f"| {dtype} | {chunk} | {seconds:.1f} | {cpu:.1f} | {len(ids) / cpu:.0f} |")
    return 0


def estimate(args) -> int:
    """The prefill estimate shown before Run against the prefill that follows, per prompt length."""
    import torch

    from core.methods import run_method
    from core.models import encode_prompt, load_model
    from workbench.service import PrefillClock, cost_model

    if args.threads:
        torch.set_num_threads(args.threads)
    target = load_model("smollm2-135m", device="cpu", dtype=args.dtype)
    if cost_model(target) is None:
        print(
            "no cost model t(n, L) measured here yet: run `python -m workbench calibrate --timing --model smollm2-135m` first"
        )
        return 2
    ids = encode_prompt(target.tokenizer, f"{long_context(args.chars)}\n\n{PROMPT}", chat=None)
    lengths = [n for n in (int(x) for x in args.lengths.split(",")) if n <= len(ids)]
    print(f"{machine()}\ndtype {target.dtype}; prompt cut from {len(ids):,} tokens", flush=True)
    run_method("greedy", target, ids[: args.seen], {"max_new_tokens": 1})  # untimed: the first forward warms up
    clock, seen = PrefillClock(), run_method("greedy", target, ids[: args.seen], {"max_new_tokens": 1})
    clock.observe(target, seen)
    print(
        f"| prompt tokens | estimate from a {args.seen}-token prefill, s | its rate per token alone, s | measured, s "
        "| estimate ÷ measured |\n|---|---|---|---|---|"
    )
    for n in lengths:
        guess, _ = clock.estimate(target, n)
        linear = seen.prefill_seconds * n / args.seen  # what one rate per token (the estimate before) said
        seconds = run_method("greedy", target, ids[:n], {"max_new_tokens": 1}).prefill_seconds
        print(f"| {n:,} | {guess:.2f} | {linear:.2f} | {seconds:.2f} | {guess / seconds:.2f} |", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chars", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=4)
    ap.add_argument("--sweep", action="store_true", help="time core.engine.prefill per dtype and chunk size")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--chunks", default="512,1024,2048,4096")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--estimate", action="store_true", help="the app's prefill estimate against measured prefills")
    ap.add_argument("--seen", type=int, default=300, help="tokens of the prefill the estimate is scaled from")
    ap.add_argument("--lengths", default="1000,3000,6000")
    # the workbench's own precision (service.WORKBENCH_DTYPE): the estimate the app shows is made in it
    ap.add_argument("--dtype", default="float32", help="--estimate's dtype (auto: the machine's fastest)")
    args = ap.parse_args()
    if args.sweep:
        return sweep(args)
    if args.estimate:
        return estimate(args)

    from gradio_client import Client

    from core.models import encode_prompt, load_model
    from workbench.ui import build_app, launch

    context = long_context(args.chars)
    home = Path(tempfile.mkdtemp(prefix="bench-prefill-"))
    cfile = home / "context.txt"
    cfile.write_text(context)
    env = {**os.environ, "WORKBENCH_DB": f"sqlite:///{home / 'cli.db'}"}
    target = load_model("smollm2-135m")
    n_tokens = len(encode_prompt(target.tokenizer, f"{context}\n\n{PROMPT}", chat=None))
    print(
        f"{machine()}\ncontext {len(context):,} characters, {n_tokens:,} prompt tokens, dtype {target.dtype}",
        flush=True,
    )
    demo = build_app(db=str(home / "app.db"), single_user=True)
    launch(demo, prevent_thread_lock=True, quiet=True)
    client = Client(demo.local_url, verbose=False)
    rows = []
    try:
        for r in range(args.rounds):
            cli = cli_prefill(cfile, args.new_tokens, env)
            t0 = time.perf_counter()
            status = client.predict(
                api_name="/compare",
                model_name="smollm2-135m",
                method_list=["greedy"],
                prompt_text=PROMPT,
                context_text=context,
                max_new_tokens=args.new_tokens,
            )[0]
            wall = time.perf_counter() - t0
            assert status.startswith("done"), status
            app = demo.store.list_runs(limit=1)[0]
            app_prefill = demo.store.load_run(app.id, nodes=False).trace.prefill_seconds
            rows.append((cli, app_prefill, wall))
            print(
                f"round {r + 1}: CLI generate prefill {cli:.1f} s · app prefill {app_prefill:.1f} s "
                f"(comparison end to end {wall:.1f} s) · load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    finally:
        demo.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
