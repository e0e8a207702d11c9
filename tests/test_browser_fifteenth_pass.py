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
