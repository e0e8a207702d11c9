"""The thirteenth newcomer pass: the Compare tab's Run while a comparison runs, and its columns' output texts read
across. Each test failed on the code before its fix."""

from __future__ import annotations

import re

import pytest
from browser_util import (
    boxes,
    button_states,
    fill_number,
    newest_id,
    open_parameters,
    shot_between,
    watch_button,
)

pytestmark = [pytest.mark.real_model, pytest.mark.slow]  # the slow set: CI's second phase (README)
DONE = 900_000  # ms a comparison may take on a loaded 2-core machine
RUN = "#compare-run"


def run_button(page):
    """The Run button, whatever its label (get_by_role by name finds it only while it reads "Run")."""
    return page.locator(RUN)


@pytest.fixture(scope="module")
def default_comparison(app, page):
    """The defaults (greedy, aasd[auto], csd on the first sample) at 24 tokens, with the Run button's states
    recorded from the click to the end; its runs' ids and those states."""
    from playwright.sync_api import expect

    demo = app[0]
    open_parameters(page)
    fill_number(page, "#compare-max-new", 24)
    first = newest_id(demo) + 1
    watch_button(page, RUN)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#compare-status")).to_contain_text(re.compile(rf"done: runs? #{first}\b"), timeout=DONE)
    expect(run_button(page)).to_be_enabled()
    return [r.id for r in demo.store.list_runs() if r.id >= first], button_states(page)


def test_run_is_greyed_out_while_its_comparison_runs_and_comes_back_when_it_is_done(app, page, default_comparison):
    """A second click on Run during a comparison was dropped without a word (Run stayed orange and clickable) and
    the results stood under a token cap changed since. Mutation caught: Run wired straight to the comparison again
    (no running_button / idle_button steps around it)."""
    from playwright.sync_api import expect

    ids, states = default_comparison
    assert len(ids) == 3
    assert "disabled Running…" in states, states
    assert states[-1] == "enabled Run", states
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled()


def test_the_output_texts_start_level_across_the_columns(app, page, default_comparison):
    """The csd column's notes (no draft model, the memory it read, the clocks) sat above its output text, 130 px
    below greedy's and aasd[auto]'s: lines could not be read across. Mutation caught: the notes back in the head,
    or the metrics back above the text."""
    tops = [boxes(page, f"#col-text-{i}")[0]["y"] for i in range(3)]
    shot_between(page, "thirteenth-columns-level", "#compare-status", "#compare-speed")
    assert max(tops) - min(tops) <= 2, tops
    assert "no draft model" in page.locator("#col-metrics-2").inner_text()  # the notes are still shown, under it


def test_stop_during_a_comparison_brings_run_back(app, page):
    """Stop must still work while Run is greyed out, and Run comes back once the comparison says stopped.
    Mutation caught: the re-enabling step chained only on success (`.success` for `.then`)."""
    from playwright.sync_api import expect

    open_parameters(page)
    fill_number(page, "#compare-max-new", 200)
    watch_button(page, RUN)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#compare-status")).to_contain_text("tokens written", timeout=DONE)
    expect(run_button(page)).to_be_disabled()
    expect(run_button(page)).to_have_text("Running…")
    shot_between(page, "thirteenth-running", "#compare-run", "#compare-status")
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(page.locator("#compare-status")).to_contain_text("stopped", timeout=120_000)
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled(timeout=30_000)
    states = button_states(page)
    assert "disabled Running…" in states and states[-1] == "enabled Run", states


def test_an_input_refused_before_any_model_work_brings_run_back(app, page):
    """A token cap refused at once: Run greys out for the moment it takes and comes back with the refusal."""
    from playwright.sync_api import expect

    open_parameters(page)
    fill_number(page, "#compare-max-new", 5000)
    watch_button(page, RUN)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#compare-status")).to_contain_text("max_new_tokens = 5000 is out of range", timeout=30_000)
    expect(page.get_by_role("button", name="Run", exact=True)).to_be_enabled(timeout=30_000)
    states = button_states(page)
    assert "disabled Running…" in states and states[-1] == "enabled Run", states
