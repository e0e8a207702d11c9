"""The eleventh newcomer pass: the defects that are page behaviour (the pure functions behind them are tested in
tests/test_ui_eleventh_pass.py). Each failed on the code before its fix."""

from __future__ import annotations

import pytest
from browser_util import fill_number, open_parameters

pytestmark = pytest.mark.real_model


@pytest.mark.parametrize("typed", [5000, -3, 0])
def test_a_token_cap_out_of_range_is_refused_on_the_page(app, page, typed):
    """Typed 5000 (then −3, then 0) into max_new_tokens and clicked Run: the slider's page clamped it to 1024 (or 1)
    without a word and the runs were stored so. Mutation caught: the field back to a gr.Slider."""
    from playwright.sync_api import expect

    open_parameters(page)
    fill_number(page, "#compare-max-new", typed)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#compare-status")).to_contain_text(
        f"max_new_tokens = {typed} is out of range [1, 1024]", timeout=30_000
    )
    expect(page.locator("#compare-max-new input[type=number]")).to_have_value(str(typed))
