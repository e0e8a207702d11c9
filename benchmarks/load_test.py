"""Load test of the app's API: N concurrent gradio_client clients for a bounded time, on 127.0.0.1 only.

    python benchmarks/load_test.py --clients 20 --seconds 120 --max-new-tokens 4
    python benchmarks/load_test.py --url http://127.0.0.1:7860/ --clients 20 --seconds 60   # an app already running

Without --url it starts the app in this process (its own temporary store, SmolLM2 on the CPU) and can
therefore check the store afterwards. Each client loops (until the time is up) over: a comparison of
--methods, then listing its runs. It reports per outcome: completed comparisons, clean "queue full"
answers, other errors, and runs lost (a comparison said it stored them and the store has no complete run
by that id) or half-visible (still `running` once every client has stopped). Exit code 1 when anything
but completions and queue-full answers happened.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def local_only(url: str) -> str:
    host = urlparse(url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"refusing to load-test {host!r}: this test only runs against an app on 127.0.0.1")
    return url


def start_app(queue_size: int):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from workbench.service import ModelPool
    from workbench.ui import build_app, launch

    home = Path(tempfile.mkdtemp(prefix="load-test-"))
    demo = build_app(db=str(home / "traces.db"), pool=ModelPool("cpu", "float32"), queue_size=queue_size)
    launch(demo, prevent_thread_lock=True, quiet=True, server_name="127.0.0.1")
    return demo


def client_loop(
    url: str, deadline: float, args, results: Counter, claimed: list, lock: threading.Lock, latencies: list
):
    from gradio_client import Client

    try:
        client = Client(url, verbose=False)
    except Exception as e:  # noqa: BLE001 - counted, not raised
        with lock:
            results[f"connect error: {type(e).__name__}"] += 1
        return
    methods = args.methods.split(",")
    i = 0
    while time.monotonic() < deadline and i < args.max_requests:  # bounded: by time and by count
        i += 1
        start = time.monotonic()
        try:
            out = client.predict(
                api_name="/compare",
                model_name="smollm2-135m",
                method_list=methods,
                prompt_text=f"Say one word about the number {i}.",
                context_text="",
                max_new_tokens=args.max_new_tokens,
            )
            status = str(out[0])
        except Exception as e:  # noqa: BLE001
            text = str(e).lower()
            key = "queue full" if "queue" in text and "full" in text else f"error: {type(e).__name__}: {str(e)[:120]}"
            with lock:
                results[key] += 1
            time.sleep(0.5)  # back off like a polite client
            continue
        with lock:
            latencies.append(time.monotonic() - start)
            if status.startswith("done"):
                results["completed"] += 1
                claimed.extend(int(x) for x in re.findall(r"#(\d+)", status))
            else:
                results[f"app message: {status[:120]}"] += 1
        try:
            client.predict("", api_name="/list_runs")
            with lock:
                results["listings"] += 1
        except Exception as e:  # noqa: BLE001
            with lock:
                results[f"list error: {type(e).__name__}"] += 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="an app already running on 127.0.0.1 (default: start one in this process)")
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--seconds", type=float, default=120)
    p.add_argument("--max-new-tokens", type=int, default=4)
    p.add_argument("--methods", default="greedy,pld")
    p.add_argument("--queue-size", type=int, default=32, help="the started app's queue bound (Gradio's max_size)")
    p.add_argument("--max-requests", type=int, default=1000, help="comparisons per client at most")
    args = p.parse_args(argv)
    if not 1 <= args.clients <= 200 or not 0 < args.seconds <= 1800:
        raise SystemExit("--clients 1..200 and --seconds up to 1800")
    demo = None
    if args.url:
        url = local_only(args.url)
    else:
        demo = start_app(args.queue_size)
        url = local_only(demo.local_url)
        from gradio_client import Client  # warm the model so the clock measures serving, not loading

        Client(url, verbose=False).predict(
            api_name="/compare", model_name="smollm2-135m", method_list=["greedy"], max_new_tokens=1
        )
    results, claimed, latencies, lock = Counter(), [], [], threading.Lock()
    began = time.monotonic()
    deadline = began + args.seconds
    threads = [
        threading.Thread(target=client_loop, args=(url, deadline, args, results, claimed, lock, latencies), daemon=True)
        for _ in range(args.clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(args.seconds + 600)  # a request in flight at the deadline finishes
    elapsed = time.monotonic() - began
    report = {
        "url": url,
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "methods": args.methods,
        "max_new_tokens": args.max_new_tokens,
        "outcomes": dict(results),
        "latency_s": {
            "median": round(sorted(latencies)[len(latencies) // 2], 2) if latencies else None,
            "max": round(max(latencies), 2) if latencies else None,
        },
        "clients_still_running": sum(t.is_alive() for t in threads),
    }
    if demo is not None:
        time.sleep(2)
        runs = {r.id: r for r in demo.store.list_runs(limit=None)}
        report["runs_claimed"] = len(claimed)
        report["lost_runs"] = sorted(i for i in claimed if i not in runs or runs[i].status != "complete")
        report["half_visible_runs"] = sorted(i for i, r in runs.items() if r.status == "running")
        report["runs_in_store"] = len(runs)
        demo.close()
    print(json.dumps(report, indent=1))
    bad = [k for k in results if k not in ("completed", "queue full", "listings")]
    return (
        1 if bad or report.get("lost_runs") or report.get("half_visible_runs") or report["clients_still_running"] else 0
    )


if __name__ == "__main__":
    sys.exit(main())
