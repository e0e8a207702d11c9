"""Issue 33, the tenth newcomer pass: the defects that are page behaviour (the pure functions behind them are tested
in tests/test_ui_tenth_pass.py). Each failed on the code before its fix."""

from __future__ import annotations

import pytest
from browser_util import synthetic_run

pytestmark = pytest.mark.real_model


def test_a_run_stopped_before_its_first_token_opens_to_a_message(app, page):
    """A run cancelled during prefill (0 steps) opened to a blank Replay screen: the header was written inside the
    body, which builder.CSS hides while the tree slot is empty. Mutation caught: STEP_JS leaving the tree slot empty
    for a run without steps."""
    from playwright.sync_api import expect

    rid = app[0].store.save_run(synthetic_run("greedy", status="cancelled", output_ids=[]), tags=["shared"])
    page.get_by_role("tab", name="Replay & tune").click()
    page.locator("#replay-run-id input").fill(str(rid))
    page.get_by_role("button", name="Load run").click()
    expect(page.locator("#replay-info")).to_contain_text(
        f"run #{rid} (greedy) was cancelled before it wrote a token: nothing to replay", timeout=30_000
    )
    expect(page.locator("#replay-body")).to_be_visible()
    expect(page.locator("#replay-step input[type=range]")).to_be_hidden()
    expect(page.locator("#replay-tree svg")).to_have_count(0)
