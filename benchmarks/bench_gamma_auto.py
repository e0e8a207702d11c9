"""sd[gamma=auto] against sd: the threshold sweep's cost per call, then both methods on the Qwen pair.

1. `tune_threshold` (core.drafters.draft_model) runs after every step of gamma=auto, over the latest HISTORY (512)
   judged draft tokens: its time per call on a full history (target: < 1 ms).
2. qwen2.5-coder-1.5b drafted by qwen2.5-coder-0.5b on the first HumanEval prompts, greedy, sd and sd[gamma=auto]
   interleaved per item (workbench.evaluation.bench.run_bench), so one run gives the ratio sd[gamma=auto] / sd
   (target: >= 1).

    flock /tmp/bench.lock env OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/bench_gamma_auto.py --threads 1
    python benchmarks/bench_gamma_auto.py --sweep-only
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from core.drafters.draft_model import HISTORY, tune_threshold  # noqa: E402
from core.timing import _cpuinfo  # noqa: E402

METHODS = ["sd", "sd[gamma=auto]"]


def machine(threads: int) -> str:
    cpu, flags = _cpuinfo()
    marks = ", ".join(f"{f}={'yes' if f in flags else 'no'}" for f in ("avx512_bf16", "amx_bf16"))
    return f"{cpu} ({marks}); torch threads {threads}; torch {torch.__version__}"


def sweep_ms(n: int = HISTORY, seed: int = 0) -> float:
    """Milliseconds per tune_threshold call on a history of n draft tokens whose acceptance follows their p."""
    rng = random.Random(seed)
    probs = [round(rng.random(), 4) for _ in range(n)]  # rounded like float32 draft probabilities: some ties
    accepted = [rng.random() < p for p in probs]
    timer = timeit.Timer(lambda: tune_threshold(probs, accepted))
    calls, _ = timer.autorange()
    return min(timer.repeat(5, calls)) / calls * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b")
    ap.add_argument("--limit", type=int, default=4, help="HumanEval prompts")
    ap.add_argument("--start", type=int, default=0, help="the first HumanEval prompt used (its index)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default); 1 on a shared machine")
    ap.add_argument("--sweep-only", action="store_true", help="only time the threshold sweep")
    ap.add_argument("--out", default=str(ROOT / "results" / "bench_gamma_auto.json"))
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"machine: {machine(torch.get_num_threads())}")
    ms = sweep_ms()
    print(f"tune_threshold at a history of {HISTORY}: {ms:.3f} ms per call (target < 1 ms)")
    if args.sweep_only:
        return 0 if ms < 1 else 1

    from core.models import load_model
    from workbench.evaluation.bench import format_table, run_bench
    from workbench.evaluation.tasks import load_humaneval

    tasks = load_humaneval()[args.start : args.start + args.limit]
    target = load_model(args.target, device="cpu", dtype=args.dtype)
    draft = load_model(args.draft, device="cpu", dtype=args.dtype)
    t0 = time.perf_counter()
    result = run_bench(target, tasks, METHODS, {"max_new_tokens": args.max_new_tokens}, draft=draft, scorer=None)
    minutes = (time.perf_counter() - t0) / 60
    s = result["methods"]
    print(format_table(s))
    ratio = s["sd[gamma=auto]"]["tps"] / s["sd"]["tps"]
    print(
        f"{args.target} drafted by {args.draft}, {args.dtype}, {len(tasks)} HumanEval prompts "
        f"({', '.join(t.id for t in tasks)}), {args.max_new_tokens} new tokens, interleaved per item; {minutes:.1f} min"
    )
    print(
        f"tokens/s: sd {s['sd']['tps']:.2f}, sd[gamma=auto] {s['sd[gamma=auto]']['tps']:.2f}, greedy {s['greedy']['tps']:.2f}; "
        f"sd[gamma=auto] / sd = {ratio:.3f} (target >= 1)"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "machine": machine(torch.get_num_threads()),
                "sweep_ms": ms,
                "ratio": ratio,
                "argv": sys.argv[1:],
                "minutes": minutes,
                **result,
            },
            indent=1,
        )
    )
    return 0 if ms < 1 and ratio >= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
