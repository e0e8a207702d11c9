"""Issue 33, the seventeenth newcomer pass: the three Replay defects it left open (the pure functions behind the others
are tested in tests/test_ui_seventeenth_pass.py). Each failed on the code before its fix."""

from __future__ import annotations

import re

import pytest
from browser_util import open_run, synthetic_run

from core.trace import StepTrace

pytestmark = [pytest.mark.real_model, pytest.mark.slow]  # the slow set: CI's second phase (README)


def _steps(first: int, n: int) -> list[StepTrace]:
    return [StepTrace(index=i, cache_pos=10 + i, tree_size=0, accepted=0, emitted=[100 + i]) for i in range(first, n)]


def test_a_run_id_with_a_fraction_is_refused_not_rounded(app, page):
    """Minor: typing 2.5 into the run id and Load run opened run 2 (Gradio's number box with precision 0 rounded it
    before the handler saw it). Mutation caught: the box with precision=0 again (run #2 is drawn)."""
    from playwright.sync_api import expect

    store = app[0].store
    for _ in range(2):  # runs #1 and #2 (shared: the page's session sees them)
        store.save_run(synthetic_run("greedy", _steps(0, 3)), tags=["shared"])
    page.get_by_role("tab", name="Replay & tune").click()
    open_run(page, 1)
    field = page.locator("#replay-run-id input")
    field.fill("2.5")
    page.get_by_role("button", name="Load run").click()
    info = page.locator("#replay-info")
    expect(info).to_contain_text("2.5 is not a run id", timeout=30_000)
    expect(info).not_to_contain_text("run #2")


def test_a_step_typed_past_the_runs_end_shows_the_last_step_in_the_box(app, page):
    """Minor: the step box took 39 beside a header saying "step 19" (the drawing clamps; the box did not). Mutation
    caught: STEP_JS without its box correction (the box keeps 39)."""
    from playwright.sync_api import expect

    rid = app[0].store.save_run(synthetic_run("greedy", _steps(0, 20)), tags=["shared"])
    page.get_by_role("tab", name="Replay & tune").click()
    open_run(page, rid)
    box = page.locator("#replay-step input[type=number]")
    box.fill("39")
    box.press("Enter")
    expect(page.locator("#replay-info")).to_contain_text(f"run #{rid} · greedy · step 19 (of 0–19)", timeout=10_000)
    expect(box).to_have_value("19", timeout=5_000)
    expect(page.locator("#replay-step input[type=range]")).to_have_value("19")


def test_a_run_opened_while_it_is_written_is_drawn_again_when_it_finishes(app, page):
    """Minor: Replay kept a half-written run's 20 steps on screen after the run finished with 40 (its header said to
    press Load run). The view now follows it and opens it again, whole, at the step the user was on. Mutation
    caught: without the follow timer's wiring the header keeps "still being written" and the range ends at 19."""
    from playwright.sync_api import expect

    store = app[0].store
    header = synthetic_run("greedy", [], status="running", output_ids=[])
    with store.recording(header, tags=["shared"], flush_seconds=0.0) as rec:
        for step in _steps(0, 20):
            rec.add_step(step)
        rec.flush()
        rid = rec.run_id
        page.get_by_role("tab", name="Replay & tune").click()
        open_run(page, rid)
        info = page.locator("#replay-info")
        expect(info).to_contain_text("still being written: 20 steps so far")
        expect(info).to_contain_text("drawn again when the run finishes")
        slider = page.locator("#replay-step input[type=range]")
        slider.evaluate("(r) => { r.value = '7'; r.dispatchEvent(new Event('input', {bubbles: true})); }")
        expect(info).to_contain_text(f"run #{rid} · greedy · step 7 (of 0–19)", timeout=10_000)
        page.wait_for_timeout(2_500)  # a tick of the follow timer while the run is still running changes nothing
        expect(info).to_contain_text("step 7 (of 0–19)")
        rec.finish(synthetic_run("greedy", _steps(0, 40)))
    expect(info).to_contain_text(f"run #{rid} · greedy · step 7 (of 0–39)", timeout=15_000)
    expect(info).not_to_contain_text("still being written")
    assert re.fullmatch(r"\d+", slider.get_attribute("max") or "") and int(slider.get_attribute("max")) == 39
