"""Does streaming a comparison to the page slow greedy down, and does the page see its progress? (issue 33, fifth
newcomer pass, items 4 and 5)

    flock /tmp/bench.lock env OMP_NUM_THREADS=1 taskset -c 1 python benchmarks/bench_stream_updates.py --threads 1

In one process pinned to one core, with Debian's Chromium on the same core (a newcomer's laptop): greedy on the
app's default sample through core's run_method, as `bench` runs it (--cli-passes before and after), then a
comparison of the default methods at --max-new-tokens with Repeats = --repeats through the app in the browser.
Prints each greedy pass's decode tokens/s both ways, how many times the page's status line changed while greedy
decoded, and the longest time the status line stood still during greedy's decoding (the progress the page shows;
timed when the page's scripts ran, so a page starved of the CPU shows its updates late, in a burst: --dump prints
the timeline to tell the two apart).
The model's t(n, L) is copied from the workbench home, so the comparison does not measure it on the way.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

# Every change of the status line's text (not the empty moments of a re-render), with the page's clock (ms).
WATCH_JS = """
() => { window.__status = []; const el = document.querySelector('#compare-status');
  const note = () => { const t = el.innerText; const last = window.__status[window.__status.length - 1];
    if (t && (!last || last[1] !== t)) window.__status.push([performance.now(), t]); };
  new MutationObserver(note).observe(el, {subtree: true, childList: true, characterData: true}); }
"""


def greedy_stills(status: list) -> tuple[list[float], int]:
    """From the page's status timeline: how long (ms) each of greedy's progress states stood before the next one
    (the prompt being read, then "N of M tokens written"), and how many states there were."""
    states = []  # (ms, state)
    for t, text in status:
        if "running greedy" not in text:  # another method, the end, or only the page's own "processing" timer
            if "running" in text or "done" in text or "stopped" in text:
                states.append((t, None))
            continue
        written = re.search(r"(\d+) of \d+ tokens written", text)
        state = f"{written.group(1)} written" if written else "prompt"
        if not states or states[-1][1] != state:
            states.append((t, state))
    stills = [t2 - t1 for (t1, s1), (t2, _) in zip(states, states[1:]) if s1 is not None]
    return stills, sum(1 for _, s in states if s is not None)


def cli_greedy(target, ids, max_new: int, passes: int) -> list[float]:
    from core.methods import run_method
    from core.stats import run_metrics

    return [run_metrics(run_method("greedy", target, ids, {"max_new_tokens": max_new}))["tps"] for _ in range(passes)]


def cli_speedups(target, task, text, ids, methods, max_new: int, passes: int) -> dict[str, list[float]]:
    """Each method's speed-up against greedy, run as `bench` runs them (no page, no streaming), interleaved per pass
    with the parameters and prompt the app gives them; prints each run's MAL (the app's should match)."""
    from core.methods import run_method
    from core.stats import run_metrics
    from workbench.methods import get_method, parse_method_spec
    from workbench.service import method_params
    from workbench.ui.compare_tab import app_memory_mode

    out: dict[str, list[float]] = {m: [] for m in methods if m != "greedy"}
    for _ in range(passes):
        greedy = run_metrics(run_method("greedy", target, ids, {"max_new_tokens": max_new}))["tps"]
        for spec in out:
            name, over = parse_method_spec(spec)
            extra = {"memory_mode": app_memory_mode(name, over)} if get_method(name).reads_memory else {}
            params = method_params(name, {"max_new_tokens": max_new}, {**extra, **over})
            run = run_method(name, target, ids, params, prompt_text=text, context=(task.context or "").strip() or None)
            m = run_metrics(run)
            print(f"CLI {spec}: MAL {m['mal']:.2f}, {m['tps']:.1f} tok/s, greedy {greedy:.1f} tok/s")
            out[spec].append(m["tps"] / greedy)
    return out


def asked(record) -> str:
    from workbench.ui.shared import asked_as

    return asked_as(record.method, record.params)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cli-passes", type=int, default=3)
    ap.add_argument("--dump", action="store_true", help="print the page's status timeline")
    ap.add_argument("--progress", default=None, help="the Run button's show_progress (full, minimal, hidden)")
    ap.add_argument("--every", type=float, default=None, help="seconds between progress updates (UPDATE_EVERY)")
    args = ap.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from bench_first_pass import cpu_info
    from browser_util import CHROMIUM, FLAGS, fill_number, open_parameters

    from core.models import models_dir

    home = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    real_home = Path(os.environ.get("WORKBENCH_HOME", Path.home() / ".cache" / "spec-workbench"))
    if (real_home / "timing").is_dir():
        shutil.copytree(real_home / "timing", home / "timing")
    os.environ.setdefault("WORKBENCH_MODELS", str(models_dir()))
    os.environ["WORKBENCH_HOME"] = str(home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from playwright.sync_api import expect, sync_playwright

    from core.stats import run_metrics
    from workbench import service
    from workbench.ui import build_app, compare_tab, launch

    if args.every is not None:
        service.UPDATE_EVERY = args.every
    if args.progress is not None:
        compare_tab.COMPARE_PROGRESS = args.progress
    print(f"compare show_progress {compare_tab.COMPARE_PROGRESS!r}")
    print(f"UPDATE_EVERY {service.UPDATE_EVERY} s")
    print(f"machine: {cpu_info()}; torch threads {torch.get_num_threads()}; cores {sorted(os.sched_getaffinity(0))}")
    summaries: list = []  # every speed summary the comparison computed, with the speed-ups behind it
    summary = compare_tab.Speeds.summary

    def keep(self):
        out = summary(self)
        summaries.append([(n, t, {**s, "values": list(v)}, m) for (n, t, s, m), v in zip(out, self.speedups)])
        return out

    compare_tab.Speeds.summary = keep
    demo = build_app(db=str(home / "traces.db"), single_user=True)
    launch(demo, prevent_thread_lock=True, quiet=True)
    models = demo.pool.load(service.default_model())
    task = service.sample_tasks()[0]
    text, ids = service.build_prompt(models.target.tokenizer, task.input, task.context, chat=task.chat)
    cli = cli_greedy(models.target, ids, args.max_new_tokens, args.cli_passes)
    cli_ups = cli_speedups(
        models.target, task, text, ids, service.DEFAULT_METHODS, args.max_new_tokens, args.cli_passes
    )
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.set_default_timeout(120_000)
            page.goto(demo.local_url)
            expect(page.locator("#compare-prompt-info")).not_to_be_empty(timeout=300_000)
            open_parameters(page)
            fill_number(page, "#compare-max-new", args.max_new_tokens)
            fill_number(page, "#compare-repeats", args.repeats)
            page.evaluate(WATCH_JS)
            t0 = time.perf_counter()
            page.get_by_role("button", name="Run", exact=True).click()
            expect(page.locator("#compare-status")).to_contain_text("done: run", timeout=1_800_000)
            seconds = time.perf_counter() - t0
            status = page.evaluate("() => window.__status")
            browser.close()
    finally:
        demo.close()
    cli += cli_greedy(models.target, ids, args.max_new_tokens, args.cli_passes)
    greedy = [
        demo.store.load_run(r.id, nodes=False).trace
        for r in sorted(demo.store.list_runs(), key=lambda r: r.id)
        if r.method == "greedy"
    ]
    app = [run_metrics(t)["tps"] for t in greedy]
    stills, updates = greedy_stills(status)
    if args.dump:
        for t, text in status:
            print(f"  {t / 1000:8.2f} s  {text[:110]!r}")
    print(f"sample {task.id}: {len(ids)} prompt tokens, {args.max_new_tokens} new tokens, repeats {args.repeats}")
    print(
        f"CLI greedy (run_method) decode tok/s: {', '.join(f'{x:.2f}' for x in cli)}; median {statistics.median(cli):.2f}"
    )
    print(f"app greedy (browser) decode tok/s per pass: {', '.join(f'{x:.2f}' for x in app)}")
    print(f"app / CLI median: {statistics.median(app) / statistics.median(cli):.3f}")
    runs = sorted(demo.store.list_runs(), key=lambda r: r.id)
    for name, _, shown, _ in summaries[-1] if summaries else []:  # the app's last speed summary (what it shows)
        if name not in cli_ups or shown["mean"] is None:
            continue
        cli_up = statistics.median(cli_ups[name])
        wall = [  # the same passes' speed-ups on the wall clock, from the stored runs (pass k: the k-th of each)
            run_metrics(demo.store.load_run(m.id, nodes=False).trace)["tps"] / g
            for m, g in zip([r for r in runs if asked(r) == name], app)
        ]
        mals = [run_metrics(demo.store.load_run(r.id, nodes=False).trace)["mal"] for r in runs if asked(r) == name]
        print(
            f"{name} (app MAL {', '.join(f'{x:.2f}' for x in mals)}): app speed-ups (decoding CPU time, shown) {', '.join(f'{x:.2f}' for x in shown['values'])}, "
            f"mean {shown['mean']:.2f}; app wall-clock {', '.join(f'{x:.2f}' for x in wall)}; CLI "
            f"{', '.join(f'{x:.2f}' for x in cli_ups[name])}, median {cli_up:.2f}; app (shown) / CLI "
            f"{shown['mean'] / cli_up:.3f}"
        )
    print(
        f"greedy's progress on the page ({len(greedy)} passes): {updates} distinct states (prompt read, N tokens "
        f"written); longest a state stood: {max(stills, default=0) / 1000:.2f} s, median "
        f"{statistics.median(stills or [0]) / 1000:.2f} s"
    )
    print(f"comparison Run until done: {seconds:.1f} s; load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
