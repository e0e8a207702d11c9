"""Is a process's first timed run slower than its later ones? (issue 33, third newcomer pass)

    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/bench_first_pass.py --threads 1            # with the warm-up
    OMP_NUM_THREADS=1 taskset -c 0 python benchmarks/bench_first_pass.py --threads 1 --no-warm-up

In a fresh process, as `serve` does: load the model through workbench.service.ModelPool (which runs the
warm-up forward unless --no-warm-up), then run the app's default sample as a comparison does, greedy and
aasd interleaved, --passes times, and print each greedy pass's decode tokens/s and its ratio to the median
of the later greedy passes. The first pass lands on greedy because a comparison always runs it first.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cpu_info() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
    return f"{model}; avx512_bf16={'avx512_bf16' in flags}; amx={any(f.startswith('amx') for f in flags)}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--passes", type=int, default=4, help="greedy passes (each followed by one aasd pass)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-warm-up", action="store_true", help="load without the warm-up forward (the old behaviour)")
    ap.add_argument(
        "--app-path",
        action="store_true",
        help="run as a comparison does: service.stream_run, recording into a new trace store, its progress consumed",
    )
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from core.methods import run_method
    from core.stats import run_metrics
    from workbench import service

    pool = service.ModelPool()
    if args.no_warm_up:
        pool.warm_up_forward = False
    t = time.perf_counter()
    models = pool.load(args.model)
    target = models.target
    load_s = time.perf_counter() - t
    store = None
    if args.app_path:
        import tempfile

        from workbench.store import Store

        store = Store(str(Path(tempfile.mkdtemp()) / "runs.db"))
    task = service.sample_tasks()[0]
    _, ids = service.build_prompt(target.tokenizer, task.input, task.context, chat=task.chat)
    rows = []
    for i in range(args.passes):
        for method in ("greedy", "aasd"):
            cpu = time.process_time()
            params = {"max_new_tokens": args.max_new_tokens}
            if store is not None:
                run = list(service.stream_run(method, models, ids, params, prompt_text=task.input, store=store))[-1].run
            else:
                run = run_method(method, target, ids, params, prompt_text=task.input)
            cpu = time.process_time() - cpu
            m = run_metrics(run)
            ms = [st.step_ms for st in run.steps]
            rows.append(
                {
                    "pass": i + 1,
                    "method": method,
                    "tps": m["tps"],
                    "prefill_s": run.prefill_seconds,
                    "first_steps": ms[:3],
                    "median_step": statistics.median(ms),
                    "cpu_s": cpu,
                }
            )
    greedy = [r["tps"] for r in rows if r["method"] == "greedy"]
    later = statistics.median(greedy[1:])
    print(f"machine: {cpu_info()}; torch threads {torch.get_num_threads()}; model {target.name} {target.dtype}")
    print(f"warm-up forward: {'no' if args.no_warm_up else 'yes'}; load (with warm-up) {load_s:.1f} s")
    print(f"path: {'service.stream_run into a trace store (as the app)' if store is not None else 'run_method'}")
    print(f"sample {task.id}: {len(ids)} prompt tokens, {args.max_new_tokens} new tokens")
    print("| pass | method | decode tok/s | prefill s | first 3 steps ms | median step ms | CPU s (whole run) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        first = ", ".join(f"{x:.0f}" for x in r["first_steps"])
        print(
            f"| {r['pass']} | {r['method']} | {r['tps']:.2f} | {r['prefill_s']:.3f} | {first} | {r['median_step']:.1f} "
            f"| {r['cpu_s']:.2f} |"
        )
    print(f"first greedy pass / median of later greedy passes: {greedy[0] / later:.3f}")
    # CPU seconds are what a busy shared core does not distort (wall time there includes other processes' slices)
    cpu = [r["cpu_s"] for r in rows if r["method"] == "greedy"]
    print(f"first greedy pass's CPU s / median of later passes': {cpu[0] / statistics.median(cpu[1:]):.3f}")
    first_steps = [r["first_steps"][0] for r in rows if r["method"] == "greedy"]
    print(
        f"first greedy step of pass 1: {first_steps[0]:.0f} ms; of later passes: {statistics.median(first_steps[1:]):.0f} ms"
    )
    print(
        json.dumps(
            {
                "first_over_later": greedy[0] / later,
                "greedy_tps": greedy,
                "first_step_ms": first_steps,
                "greedy_cpu_s": cpu,
                "cpu_first_over_later": cpu[0] / statistics.median(cpu[1:]),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
