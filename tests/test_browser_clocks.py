"""One clock for a run's speed-ups, in headless Chromium on the real default model: a newcomer saw one run at one
speed-up in Compare (the decoding thread's CPU time) and another in Replay (the stored wall clock). Both now read the
run's stored CPU time (core.stats.speedup) and say so in the same words."""

from __future__ import annotations

import re

import pytest
from browser_util import choose_methods, fill_number, open_parameters, open_run

from core.stats import CLOCK_PHRASES

pytestmark = [pytest.mark.real_model, pytest.mark.slow]  # the slow set: CI's second phase (README)
DONE = 900_000  # ms a comparison or re-run may take on a loaded 2-core machine


def speed_up(text: str) -> str:
    found = re.search(r"speed-up ([\d.]+)×", text)
    assert found, text
    return found.group(1)


def test_compare_and_replay_show_the_same_speed_up_for_one_run(app, page):
    from playwright.sync_api import expect

    demo = app[0]
    choose_methods(page, ["greedy", "pld"])
    open_parameters(page)
    fill_number(page, "#compare-max-new", 32)
    first = max((r.id for r in demo.store.list_runs()), default=0) + 1
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#compare-status")).to_contain_text(re.compile(rf"done: runs? #{first}\b"), timeout=DONE)
    runs = {demo.store.load_run(r.id, nodes=False).trace.method: r.id for r in demo.store.list_runs() if r.id >= first}
    greedy, pld = (demo.store.load_run(runs[m], nodes=False).trace for m in ("greedy", "pld"))
    assert greedy.decode_cpu_seconds and pld.decode_cpu_seconds  # the app's runs store their CPU time
    in_compare = speed_up(page.locator("#col-metrics-1").inner_text())
    expect(page.locator("#compare-speed-note")).to_contain_text("Speed-ups from decoding CPU time")

    page.get_by_role("tab", name="Replay & tune").click()
    open_run(page, runs["pld"])
    page.get_by_role("button", name="Re-run with these settings").click()
    expect(page.locator(".rerun-head", has_text=re.compile(r"re-run #\d+"))).to_be_visible(timeout=DONE)
    said = page.locator("#rerun-md").inner_text()
    original = said.split("re-run #")[0]
    assert f"run #{runs['pld']}" in original, said
    assert f"greedy run #{runs['greedy']}" in said, said  # against the comparison's own greedy run
    assert speed_up(original) == in_compare, said
    assert CLOCK_PHRASES["cpu"] in said, said
