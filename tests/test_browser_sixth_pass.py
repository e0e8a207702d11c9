"""Issue 33, the sixth newcomer pass: in headless Chromium on the real default model, the defects that are page
behaviour (the pure functions behind the other fixes are tested in tests/test_ui_sixth_pass.py). Each failed on the
code before its fix."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.real_model

SCREEN_READER_JS = """() => { window.__sr = []; const note = () => document.querySelectorAll('.sr-only, [aria-live]')
  .forEach(el => { const t = el.textContent.trim(); if (t) window.__sr.push(t); });
  new MutationObserver(note).observe(document.body, {subtree: true, childList: true, characterData: true}); }"""


def test_typing_over_a_task_turns_the_picker_to_your_own_text(page):
    """Defect 8: after typing in the prompt box the task picker still showed the sample's name as if it were what
    would run; now it shows "(your own text)", and the typed text stays."""
    from playwright.sync_api import expect

    from workbench.ui.compare_tab import OWN_TEXT

    page.get_by_role("tab", name="Compare").click()
    task = page.locator("#compare-task input").first
    expect(task).not_to_have_value(OWN_TEXT)
    prompt = page.locator("#compare-prompt textarea")
    prompt.click()
    prompt.press("End")
    prompt.press_sequentially(" And in French?", delay=20)
    expect(task).to_have_value(OWN_TEXT, timeout=20_000)
    expect(prompt).to_have_value(__import__("re").compile(r"And in French\?$"))


def test_no_untranslated_gradio_key_reaches_screen_readers(page):
    """Defect 11: Gradio 6's status tracker announced a finished event as "common.complete" (its English table
    lacks the key) in an sr-only aria-live region; the app supplies the text."""
    page.evaluate(SCREEN_READER_JS)
    page.get_by_role("tab", name="Diff").click()
    page.locator("#diff-go").click()
    # the tracker announces at most once every 5 s: wait for the finished event's words
    page.wait_for_function("() => window.__sr.some(t => t === 'done' || t.startsWith('common.'))", timeout=30_000)
    said = page.evaluate("() => window.__sr")
    assert not [t for t in said if "common." in t or "status." in t], said
    assert "done" in said, said


def test_pasting_a_long_context_over_a_task_turns_the_picker_to_your_own_text(page):
    """Twenty-third pass, minor: after a 20,000-character context replaced the sample's (pasted: one input event, as
    Playwright's fill sends), the picker still read "extract-orders" before and after Run."""
    from playwright.sync_api import expect

    from workbench.ui.compare_tab import OWN_TEXT

    page.get_by_role("tab", name="Compare").click()
    task = page.locator("#compare-task input").first
    page.locator("#compare-task input").first.click()
    page.get_by_role("option", name="extract-orders").click()
    expect(task).to_have_value("extract-orders")
    page.wait_for_timeout(1500)  # the task's text fills the boxes
    context = page.locator("#compare-context textarea")
    context.fill("Order 5000 for customer 0: a mug, dispatched from the Leeds warehouse. " * 280)
    context.press("Tab")
    expect(task).to_have_value(OWN_TEXT, timeout=20_000)
