"""Issue 33's timings as a newcomer feels them, measured in headless Chromium (Debian's, driven by Playwright; no
browser is downloaded) against the app started here. One benchmark per run (`--which`):

  row-click   Replay & tune: from a click on a row of the runs table until that run's step 0 is drawn (the header
              names the run and both figures show step 0). The runs are 200-step AASD runs; each is clicked once
              cold (read from the store) and then again warm. Target: ≤ 1 s.
  rescore     A slider moved on a 200-step AASD run (α, a new value each time, the range input's input event) until
              the re-score summary shows the new value. Target: ≤ 300 ms.
  first       The first comparison of a fresh app on the default sample: greedy, aasd and csd at 64 tokens, from the
              click on Run until "done", with the model fetched but nothing else warm (a new workbench home: the
              cost curve aasd sizes its trees with is measured on the way, as on a newcomer's machine). Target:
              ≤ 60 s on 2 cores; run it when the machine is otherwise idle. `--warm-up S` starts what `serve`
              does at launch (the default model's t(n, L) measured in the background) and presses Run S seconds later.

The runs of row-click and rescore are a real AASD run on SmolLM2 repeated to 200 steps (benchmarks/bench_replay.py's
long_run), or random well-formed trees with --synthetic. Prints the CPU, its bf16 flags, torch's threads and the
load average beside the numbers.

    flock /tmp/bench.lock python benchmarks/bench_newcomer_browser.py --which row-click [--steps 200] [--clicks 20]
    flock /tmp/bench.lock python benchmarks/bench_newcomer_browser.py --which rescore [--moves 30]
    flock /tmp/bench.lock python benchmarks/bench_newcomer_browser.py --which first [--threads 2] [--warm-up 30]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

TAG = "bench-newcomer"

# Click the table cell holding run `rid`, then wait until the header names it at step 0 and both figures show
# step 0 (one more animation frame, so the drawing is laid out). Resolves to the milliseconds taken (-1: timeout).
CLICK_JS = """
([rid, method, timeout]) => new Promise((resolve) => {
  const cell = Array.from(document.querySelectorAll('[role=gridcell]')).find((c) => c.textContent.trim() === String(rid));
  if (!cell) { resolve(-2); return; }
  const title = (id) => { const t = document.querySelector(`#${id} .fig-title`); return t ? t.textContent : ''; };
  const done = () => (document.querySelector('#replay-info') || {}).textContent.includes(`run #${rid} · ${method} · step 0 (of 0–`)
    && title('replay-tree').startsWith('step 0:') && title('replay-thresholds').startsWith('step 0:');
  let finished = false;
  const t0 = performance.now();
  const finish = (v) => { if (!finished) { finished = true; obs.disconnect(); resolve(v); } };
  const check = () => { if (done()) { const now = performance.now(); requestAnimationFrame(() => finish(now - t0 + (performance.now() - now))); } };
  const obs = new MutationObserver(check);
  obs.observe(document.body, {subtree: true, childList: true, characterData: true});
  // A user's click, event by event: Gradio's table selects on the pointer and mouse events, not on a bare click()
  for (const type of ['pointerdown', 'mousedown', 'pointerup', 'mouseup', 'click']) {
    cell.dispatchEvent(new MouseEvent(type, {bubbles: true, cancelable: true, view: window, button: 0}));
  }
  setTimeout(() => finish(-1), timeout);
})
"""

# Move the α slider to `value` the way a drag does, and wait until the re-score summary shows it.
RESCORE_JS = """
([value, timeout]) => new Promise((resolve) => {
  const want = `α = ${value}`;
  const box = () => (document.querySelector('#tune-summary') || {}).textContent || '';
  let finished = false;
  const t0 = performance.now();
  const finish = (v) => { if (!finished) { finished = true; obs.disconnect(); resolve(v); } };
  const check = () => { if (box().includes(want)) { const now = performance.now(); requestAnimationFrame(() => finish(now - t0 + (performance.now() - now))); } };
  const obs = new MutationObserver(check);
  obs.observe(document.body, {subtree: true, childList: true, characterData: true});
  const range = document.querySelector('#tune-alpha input[type=range]');
  range.value = String(value);
  range.dispatchEvent(new Event('input', {bubbles: true}));
  setTimeout(() => finish(-1), timeout);
})
"""


def machine() -> str:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next(
        (ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), platform.processor()
    )
    import torch

    flags = [f for f in ("avx512_bf16", "amx_bf16", "amx_tile") if f in info]
    return (
        f"{model}; {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} allowed here); flags {', '.join(flags) or 'no bf16'}; torch threads {torch.get_num_threads()}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * len(xs)) - 1))]


def report(name: str, xs: list[float], target: float) -> bool:
    ok = bool(xs) and pct(xs, 0.95) <= target
    print(
        f"  {name}: n {len(xs)}  p50 {statistics.median(xs):.0f} ms  p95 {pct(xs, 0.95):.0f} ms  max {max(xs):.0f} ms"
        f"  ({'PASS' if ok else 'MISS'}: target ≤ {target:g} ms)"
        if xs
        else f"  {name}: no measurement"
    )
    return ok


def stored_runs(store, n: int, steps: int, synthetic: bool) -> list[int]:
    """`n` shared 200-step AASD runs (a real run repeated, or synthetic trees)."""
    from bench_replay_browser import synthetic_run

    if synthetic:
        base = synthetic_run(steps)
        base.method, base.params, base.model = "aasd", {"alpha": 0.1, "beta": 0.1}, "smollm2-135m"
    else:
        from bench_replay import long_run

        base = long_run(steps)
    return [store.save_run(base, tags=[TAG, "shared"]) for _ in range(n)]


def open_app(db: str, single_user: bool = False):
    from workbench.ui import build_app, launch

    demo = build_app(db=db, single_user=single_user)
    launch(demo, prevent_thread_lock=True, quiet=True)
    return demo


def bench_row_click(args, page, demo) -> bool:
    from playwright.sync_api import expect

    ids = stored_runs(demo.store, args.runs, args.steps, args.synthetic)
    page.goto(demo.local_url)
    page.get_by_role("tab", name="Replay & tune").click()
    expect(page.locator("#replay-info")).to_contain_text(f"run #{ids[-1]} · aasd · step 0 (of 0–", timeout=120_000)
    cold, warm = [], []
    order = ids[:-1] + ids[:-1] * max(1, args.clicks // max(1, len(ids) - 1))
    for k, rid in enumerate(order):
        ms = page.evaluate(CLICK_JS, [rid, "aasd", 30_000])
        (cold if k < len(ids) - 1 else warm).append(ms)
        time.sleep(args.pause)
    misses = [x for x in cold + warm if x < 0]
    print(f"row click until the {args.steps}-step run's step 0 is drawn ({len(misses)} timed out):")
    ok_cold = report(
        "cold (first click on the run: read from the store)", [x for x in cold if x >= 0], args.budget or 1000
    )
    ok_warm = report("warm (run cached)", [x for x in warm if x >= 0], args.budget or 1000)
    return ok_cold and ok_warm and not misses


def bench_rescore(args, page, demo) -> bool:
    from playwright.sync_api import expect

    rid = stored_runs(demo.store, 1, args.steps, args.synthetic)[0]
    page.goto(demo.local_url)
    page.get_by_role("tab", name="Replay & tune").click()
    expect(page.locator("#replay-info")).to_contain_text(f"run #{rid} · aasd · step 0 (of 0–", timeout=120_000)
    values = [round(0.02 + 0.013 * i, 3) for i in range(args.moves + 3)]
    times = []
    for k, value in enumerate(values):
        ms = page.evaluate(RESCORE_JS, [value, 30_000])
        if k >= 3:  # the first moves build the run's re-scoring inputs: warm-up
            times.append(ms)
        time.sleep(args.pause)
    misses = [x for x in times if x < 0]
    print(f"slider move until the re-score of the {args.steps}-step run is shown ({len(misses)} timed out):")
    return report("re-score", [x for x in times if x >= 0], args.budget or 300) and not misses


def bench_first(args, page, demo) -> bool:
    from browser_util import fill_number, open_parameters
    from playwright.sync_api import expect

    if args.warm_up is not None:  # what `serve` does: the default model's t(n, L) measured while the page opens
        from workbench.service import default_model

        warming = demo.pool.warm_up(default_model())
        time.sleep(args.warm_up)
        print(
            f"  warm-up {'still measuring' if warming.is_alive() else 'done'} after {args.warm_up:g} s"
        )  # a newcomer reading the page before pressing Run
    page.goto(demo.local_url)
    open_parameters(page)
    fill_number(page, "#compare-max-new", 64)
    t0 = time.perf_counter()
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#compare-status")).to_contain_text("done: runs", timeout=1_800_000)
    seconds = time.perf_counter() - t0
    runs = demo.store.list_runs()
    from core.stats import run_metrics

    for r in sorted(runs, key=lambda r: r.id):
        trace = demo.store.load_run(r.id, nodes=False).trace
        m = run_metrics(trace)
        print(
            f"  {r.method}: {m['tokens']} tokens, MAL {m['mal']:.2f}, {m['tps']:.1f} tok/s, prefill {trace.prefill_seconds:.2f} s, "
            f"decode {trace.decode_seconds:.2f} s"
        )
    import json

    for timing_file in (Path(os.environ["WORKBENCH_HOME"]) / "timing").glob("*.json"):  # measured on the way, or before
        took = json.loads(timing_file.read_text()).get("measure_seconds")
        print(f"  t(n, L) of {timing_file.name}: measured in {took} s")
    target = (args.budget or 60_000) / 1000
    ok = seconds <= target
    print(
        f"first comparison (greedy, aasd, csd at 64 tokens, default sample), Run until done: {seconds:.1f} s "
        f"({'PASS' if ok else 'MISS'}: target ≤ {target:g} s); load average now {os.getloadavg()[0]:.2f}"
    )
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--which", choices=("row-click", "rescore", "first"), required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--runs", type=int, default=6, help="row-click: distinct runs (each clicked once cold)")
    ap.add_argument("--clicks", type=int, default=20, help="row-click: warm clicks")
    ap.add_argument("--moves", type=int, default=30, help="rescore: slider moves timed")
    ap.add_argument("--pause", type=float, default=0.3, help="seconds between actions (a user reading)")
    ap.add_argument("--synthetic", action="store_true", help="random well-formed trees instead of a real AASD run")
    ap.add_argument("--budget", type=float, default=None, help="override the target (ms)")
    ap.add_argument(
        "--warm-up",
        type=float,
        default=None,
        metavar="SECONDS",
        help="first: start serve's warm-up (t(n, L) measured in the background), wait SECONDS, then press Run",
    )
    ap.add_argument("--threads", type=int, default=None, help="torch threads of the app (default: torch's own)")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from browser_util import CHROMIUM, FLAGS

    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} not found: apt-get install chromium")
        return 2
    home = Path(tempfile.mkdtemp(prefix="bench-newcomer-"))
    from core.models import models_dir

    os.environ.setdefault("WORKBENCH_MODELS", str(models_dir()))
    os.environ["WORKBENCH_HOME"] = str(home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from playwright.sync_api import sync_playwright

    print(machine())
    demo = open_app(str(home / "traces.db"), single_user=args.which == "first")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.set_default_timeout(120_000)
            ok = {"row-click": bench_row_click, "rescore": bench_rescore, "first": bench_first}[args.which](
                args, page, demo
            )
            browser.close()
    finally:
        demo.close()
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
