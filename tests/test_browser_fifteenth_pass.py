"""Issue 33, the fifteenth newcomer pass: the defects that are page behaviour (the pure functions behind them are
tested in tests/test_ui_fifteenth_pass.py). Each failed on the code before its fix."""

from __future__ import annotations

import pytest
from browser_util import choose_methods, newest_id, shot_between

pytestmark = pytest.mark.real_model


def test_a_method_typed_twice_is_refused_and_nothing_runs(app, page):
    """Defect 1: greedy typed into Methods beside the defaults ran four columns with two greedy rows ("1.00×" at 3.1
    and 4.8 tok/s) and no word on which one the speed-ups were measured against. Mutation caught: check_methods
    without its duplicate check (four runs are stored and the status says done)."""
    from playwright.sync_api import expect

    demo = app[0]
    before = newest_id(demo)
    choose_methods(page, ["greedy", "aasd[auto]", "greedy"])
    chips = page.locator("#compare-methods .token").all_inner_texts()
    assert [c.strip() for c in chips].count("greedy") == 2, chips  # the box took the second greedy: Run must refuse
    page.get_by_role("button", name="Run", exact=True).click()
    status = page.locator("#compare-status")
    expect(status).to_contain_text("'greedy' is chosen twice", timeout=30_000)
    expect(status).to_contain_text("a comparison runs each method once")
    shot_between(page, "fifteenth-duplicate-method", "#compare-methods", "#compare-status")
    page.wait_for_timeout(1500)
    expect(status).not_to_contain_text("done")
    assert newest_id(demo) == before  # nothing ran
    choose_methods(page, ["greedy", "aasd[auto]", "csd"])


def test_free_text_keeps_a_typed_prompt_and_an_upload_renames_the_task_picker(app, page, tmp_path):
    """Sixteenth pass, defect 2: picking "(free text)" emptied the prompt and context, wiping what the user had typed.
    Defect 4: after a task file was uploaded, the picker (now listing upload:q1) was still labelled "bundled samples"."""
    import json

    from browser_util import pick
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Compare").click()
    prompt = page.locator("#compare-prompt textarea")
    prompt.fill("My own carefully written prompt")
    prompt.dispatch_event("input")
    pick(page, "#compare-task", "(free text)")
    page.wait_for_timeout(1500)  # the task change's answer, which emptied the box
    expect(prompt).to_have_value("My own carefully written prompt")
    label = page.locator("#compare-task [data-testid=block-info]")
    expect(label).to_contain_text("Task (bundled samples)")
    upload = tmp_path / "two.jsonl"
    upload.write_text(
        "".join(json.dumps({"id": f"q{i}", "task": "qa", "input": f"Question {i}?"}) + "\n" for i in (1, 2))
    )
    page.get_by_text("…or upload a task file").click()
    page.locator("#task-file input[type=file]").set_input_files(str(upload))
    expect(prompt).to_have_value("Question 1?")
    expect(label).to_contain_text("your file's 2 tasks")
    shot_between(page, "sixteenth-upload-label", "#compare-task", "#compare-prompt")
    page.locator("#task-file button[aria-label='Clear']").first.click()
    page.get_by_text("…or upload a task file").click()
    pick(page, "#compare-task", "extract-orders")


def test_run_pickers_find_a_run_by_its_id_and_a_table_click_draws_no_cell_ring(app, page):
    """Sixteenth pass, two minor defects. (1) Typing a run's id, "1", into a run picker suggested every run: the
    suggestions match the text anywhere in a label, and every label ends with the model's "135m". Every run picker
    now says to type "#1", which matches the labels' ids only. (2) A click on Replay's runs table drew Gradio's
    ring around the one clicked cell, as if a cell (not the row's run) were chosen, or editable. Mutations caught:
    the help dropped from Analytics (its picker has no help) and the CSS rule removed (the ring is drawn)."""
    from browser_util import synthetic_run
    from playwright.sync_api import expect

    from workbench.ui.shared import RUN_PICKER_HELP

    demo = app[0]
    for _ in range(12):  # ids 1..12 at least: "#1" must find #1 and #10-#12 and not #2-#9, all on a "135m" model
        demo.store.save_run(synthetic_run("greedy"), tags=["shared"])
    page.get_by_role("tab", name="Analytics").click()
    picker = page.locator("#analytics-runs")
    expect(picker).to_contain_text("type #12 to find run 12")
    assert "#12" in RUN_PICKER_HELP
    box = picker.locator("input").first
    box.click()
    options = page.get_by_role("option")
    expect(options.first).to_contain_text("#", timeout=10_000)  # the tab's opening listed the runs
    box.fill("#1")
    page.wait_for_timeout(300)
    shown = [o.replace("✓", "").strip() for o in options.all_text_contents()]
    assert shown and all(o.startswith("#1") for o in shown), shown
    assert any(o.startswith("#10 ") for o in shown), shown  # the runs whose ids start with 1 are all offered
    box.press("Escape")
    for tab, picker_id in (("Diff", "#diff-a"), ("CSD memory", "#memory-runs"), ("Export", "#export-runs")):
        page.get_by_role("tab", name=tab).click()
        expect(page.locator(picker_id)).to_contain_text("type #12 to find run 12")

    page.get_by_role("tab", name="Replay & tune").click()
    cell = page.locator("#replay-runs [role=gridcell]").nth(2)
    cell.click()
    page.wait_for_timeout(500)
    ring = page.evaluate(
        """() => { const c = document.querySelector('#replay-runs .cell-selected');
                   return c ? getComputedStyle(c).boxShadow : 'no selected cell'; }"""
    )
    assert ring == "none", ring
