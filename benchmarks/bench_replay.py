"""Replay benchmark: switching steps in the workbench's replay of a stored 1,000-step run.

A real AASD run on SmolLM2 (a bundled sample) gives real draft trees; its steps are repeated, re-indexed,
up to 1,000 steps and stored. The app is started on that store and the replay endpoint is called through
gradio_client for random steps, so each time includes the HTTP round trip, the step's text and
node table, both Plotly figures and their JSON: everything but the browser drawing them.
Target: 95th percentile <= 150 ms.

The browser no longer asks the server when the slider moves: it draws each step from the run's step data,
sent once per load (workbench/ui/replay_js.py). /replay_step stays for API clients, and this script times it;
benchmarks/bench_replay_browser.py times what a user waits for, in Chromium.

    python benchmarks/bench_replay.py [--steps 1000] [--switches 200] [--threads 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def long_run(steps: int):
    from core.models import encode_prompt, load_model
    from workbench.evaluation.tasks import load_tasks
    from workbench.methods import run_method

    target = load_model("smollm2-135m", device="cpu", dtype="float32")
    task = next(t for t in load_tasks(ROOT / "assets" / "samples.jsonl") if t.task == "summarization")
    ids = encode_prompt(target.tokenizer, task.prompt())
    # A fixed tree size: max_nodes=auto would first measure t(n, L) (minutes), which the replay does not need.
    run = run_method("aasd", target, ids, {"max_new_tokens": 256, "max_nodes": 16}, prompt_text=task.prompt())
    base, out, pos = run.steps, [], run.steps[0].cache_pos
    for i in range(steps):
        s = base[i % len(base)]
        nodes = [dataclasses.replace(n, step=i, cache_pos=pos) for n in s.nodes]
        out.append(dataclasses.replace(s, index=i, cache_pos=pos, nodes=nodes))
        pos += len(s.emitted)
    run.steps = out
    run.output_ids = [t for s in out for t in s.emitted]
    return run


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--switches", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    home = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    from core.models import models_dir

    os.environ.setdefault("WORKBENCH_MODELS", str(models_dir()))
    os.environ["WORKBENCH_HOME"] = str(home)
    from gradio_client import Client

    from workbench.store import Store
    from workbench.ui import build_app, launch

    db = str(home / "traces.db")
    run = long_run(args.steps)
    run_id = Store(db).save_run(run, tags=["shared"])  # the app shows a session its own runs and shared ones
    nodes = sum(len(s.nodes) for s in run.steps)
    demo = build_app(db=db)
    launch(demo, prevent_thread_lock=True, quiet=True)
    client = Client(demo.local_url, verbose=False)
    t0 = time.perf_counter()
    client.predict(run_id, api_name="/load_run")
    client.predict(run_id, 0, api_name="/replay_step")
    first = time.perf_counter() - t0
    rng = random.Random(0)
    times = []
    for _ in range(args.switches):
        k = rng.randrange(args.steps)
        t = time.perf_counter()
        info = client.predict(run_id, k, api_name="/replay_step")[0]
        times.append((time.perf_counter() - t) * 1000)
        assert f"step {k} (of 0–" in info, info
    demo.close()
    times.sort()
    p50, p95 = statistics.median(times), times[int(0.95 * len(times)) - 1]
    print(f"stored run: {args.steps} steps, {nodes} nodes (mean tree {nodes / args.steps - 2:.1f} draft nodes)")
    print(f"first load of the run (read from the store, then cached): {first * 1000:.0f} ms")
    print(
        f"step switch over {args.switches} random steps: median {p50:.1f} ms, p95 {p95:.1f} ms, max {times[-1]:.1f} ms"
    )
    ok = p95 <= 150
    print(f"{'PASS' if ok else 'MISS'} replay step switch p95 {p95:.1f} ms (target <= 150 ms)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
