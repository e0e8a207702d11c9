"""The thirteenth newcomer pass, on the page: Replay & tune opens on the newest run with steps to draw (the pure rule
is tested in tests/test_ui_thirteenth_pass_rest.py). Failed on the code before its fix."""

from __future__ import annotations

import pytest
from browser_util import open_page, synthetic_run

from core.trace import StepTrace

pytestmark = pytest.mark.real_model


def test_the_replay_tab_opens_on_a_drawable_run_past_one_cancelled_before_its_first_token(app):
    """The pass opened the tab on "run #111 (greedy) was cancelled before it wrote a token: nothing to replay", an
    empty tree and node table, with complete runs listed below. Mutation caught: newest_run_id back to the newest
    id whatever its run."""
    from playwright.sync_api import expect

    store = app[0].store
    drawable = store.save_run(
        synthetic_run("greedy", [StepTrace(0, 10, 0, 0, [5]), StepTrace(1, 11, 0, 0, [6])]), tags=["shared"]
    )
    empty = store.save_run(synthetic_run("greedy", status="cancelled"), tags=["shared"])
    assert empty > drawable
    with open_page(app[0].local_url) as page:
        page.get_by_role("tab", name="Replay & tune").click()
        expect(page.locator("#replay-info")).to_contain_text(f"run #{drawable} · greedy · step 0", timeout=30_000)
        expect(page.locator("#replay-info")).not_to_contain_text("nothing to replay")
