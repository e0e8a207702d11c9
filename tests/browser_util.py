"""What the browser tests share: Debian's Chromium driven by Playwright (never a downloaded browser), screenshots,
and small helpers to fill fields, pick from dropdowns and read what Plotly drew."""

from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from core.trace import RunTrace, StepTrace

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = Path(os.environ.get("WORKBENCH_SCREENSHOTS", Path(__file__).resolve().parents[1] / "results" / "screenshots"))


def browser(pw):
    """Debian's Chromium, headless; the test is skipped with the reason when it is missing."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not found: apt-get install chromium (.ci/run does)")
    return pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)


@contextmanager
def open_page(url: str, viewport=(1500, 1100)):
    """A headless Chromium page on the app at `url`, returned once the app has finished loading: its components
    hydrated and its load event answered (the prompt line under Run has text). Acting earlier races the page: a
    value typed before hydration can be replaced by the component's initial one."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        chromium = browser(pw)
        context = chromium.new_context(viewport={"width": viewport[0], "height": viewport[1]}, accept_downloads=True)
        pg = context.new_page()
        pg.set_default_timeout(60_000)
        pg.goto(url)
        sync_api.expect(pg.locator("#compare-prompt-info")).not_to_be_empty(timeout=300_000)
        yield pg
        chromium.close()


def shot(page, name, selector: str | None = None):
    """A screenshot in SHOTS: the whole page, or the element `selector`."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    if selector is None:
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    else:
        page.locator(selector).first.screenshot(path=str(SHOTS / f"{name}.png"))
    return SHOTS / f"{name}.png"


def shot_between(page, name, top: str, bottom: str, margin: int = 12):
    """A screenshot in SHOTS of the page's full width from the top of `top` to the bottom of `bottom`."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    if not (page.locator(top).count() and page.locator(bottom).count()):  # an older page without them: the whole page
        return shot(page, name)
    y0, y1, width = page.evaluate(
        """([a, b]) => [document.querySelector(a).getBoundingClientRect().top + window.scrollY,
        document.querySelector(b).getBoundingClientRect().bottom + window.scrollY, document.documentElement.clientWidth]""",
        [top, bottom],
    )
    page.screenshot(
        path=str(SHOTS / f"{name}.png"),
        full_page=True,
        clip={"x": 0, "y": max(0, y0 - margin), "width": width, "height": y1 - y0 + 2 * margin},
    )
    return SHOTS / f"{name}.png"


def fill_number(page, selector, value):
    """Type `value` into a number field and wait until the field holds it. An accordion's fields mount when it
    first opens (Gradio loads them lazily) and a field typed into while it mounts takes its initial value back,
    so a value that did not stay is typed again (up to three times) before the check."""
    from playwright.sync_api import expect

    box = page.locator(f"{selector} input[type=number]").first
    for _ in range(3):
        box.fill(str(value))
        box.press("Enter")
        page.wait_for_timeout(250)
        if box.input_value() == str(value):
            break
    expect(box).to_have_value(str(value))


def open_run(page, rid):
    """Type the run id and press Load run, until the run is drawn and the field still holds it: the tab's own opening
    (the newest run, when no run was chosen) fills the same field, and a fill racing it once left "22" for 2, so that
    the run drawn was right but the next button (Re-run) read another id. Let the opening finish first, then check
    both the drawing and the field."""
    from playwright.sync_api import expect

    info, field = page.locator("#replay-info"), page.locator("#replay-run-id input")
    try:  # the tab's opening draws the newest run when there is one; with none it leaves the field empty
        expect(info).to_contain_text(re.compile(r"run #\d+"), timeout=20_000)
    except AssertionError:
        pass
    for attempt in range(3):
        field.fill(str(rid))
        page.get_by_role("button", name="Load run").click()
        try:
            expect(info).to_contain_text(re.compile(rf"run #{rid}\b"), timeout=20_000)
            expect(field).to_have_value(str(rid), timeout=2_000)
            return
        except AssertionError:
            if attempt == 2:
                raise


def pick(page, selector, text):
    box = page.locator(f"{selector} input").first
    box.click()
    box.fill(text)
    box.press("Enter")


def choose_methods(page, names):
    page.get_by_role("tab", name="Compare").click()
    page.locator("#compare-methods .remove-all").click()
    box = page.locator("#compare-methods input").first
    for name in names:
        box.click()
        box.fill(name)
        box.press("Enter")
    box.press("Escape")


def open_parameters(page):
    page.get_by_role("tab", name="Compare").click()
    if not page.locator("#param-key_len").is_visible():
        page.get_by_text("Parameters (every method").click()
        page.locator("#compare-max-new input[type=number]").wait_for(state="visible")


def plotly(page, selector, what="data"):
    """The figure Plotly drew in a gr.Plot (its `data` or `layout`), as the browser holds it."""
    return page.locator(f"{selector} .js-plotly-plot").first.evaluate(f"el => JSON.parse(JSON.stringify(el.{what}))")


def boxes(page, selector) -> list[dict]:
    """The bounding boxes of the elements `selector` finds (visible ones)."""
    return page.evaluate(
        """(sel) => Array.from(document.querySelectorAll(sel)).map((e) => e.getBoundingClientRect())
        .filter((r) => r.width > 0 && r.height > 0).map((r) => ({x: r.x, y: r.y, w: r.width, h: r.height}))""",
        selector,
    )


def overlap(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]
    )


def table_rows(page, selector, timeout=30.0):
    """The cells of a gr.Dataframe's rows, once it has drawn them (its grid rows: the <tbody> is only for sizing)."""
    end = time.monotonic() + timeout
    while True:
        rows = [
            [c.strip() for c in r.locator("[role=gridcell]").all_inner_texts()]
            for r in page.locator(f"{selector} [role=row]").all()
        ]
        rows = [r for r in rows if any(r)]
        if rows or time.monotonic() > end:
            return rows
        page.wait_for_timeout(250)


def clipped_texts(page, selector):
    """Texts inside `selector` cut off by their box (content taller or wider than a box that hides overflow)."""
    return page.locator(selector).first.evaluate("""root => [root, ...root.querySelectorAll('*')].filter(el => {
        const s = getComputedStyle(el);
        const hides = v => v === 'hidden' || v === 'clip';
        return el.innerText && el.innerText.trim() && el.offsetParent !== null &&
               ((hides(s.overflowY) && el.scrollHeight > el.clientHeight + 1) ||
                (hides(s.overflowX) && el.scrollWidth > el.clientWidth + 1));
    }).map(el => el.innerText.trim().slice(0, 60))""")


def watch_status(page, selector="#compare-status"):
    """Start recording every text `selector` shows (read back with statuses())."""
    page.evaluate(
        """(sel) => { window.__statuses = []; const el = document.querySelector(sel);
        const note = () => { const t = el.innerText.trim(); const s = window.__statuses;
                             if (t && (!s.length || s[s.length - 1] !== t)) s.push(t); };
        new MutationObserver(note).observe(el, {childList: true, subtree: true, characterData: true}); note(); }""",
        selector,
    )


def statuses(page) -> list[str]:
    return page.evaluate("() => window.__statuses || []")


def synthetic_run(method: str, steps: list[StepTrace] = (), **fields) -> RunTrace:
    """A stored-run-shaped trace built by hand: a complete run of `method` on the default model made of `steps`
    (its output: what they emitted), any field overridden by `fields` (params, model, output_ids, status, …)."""
    steps = list(steps)
    values = dict(
        method=method,
        params={},
        model="smollm2-135m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p",
        prompt_ids=list(range(10)),
        steps=steps,
        output_ids=[t for s in steps for t in s.emitted],
        status="complete",
        decode_seconds=1.0,
    )
    return RunTrace(**{**values, **fields})


def watch_button(page, selector):
    """Start recording the states ("enabled <label>" / "disabled <label>") the button `selector` goes through, as
    they change (read back with button_states()): a state held for a moment between two polls is still seen."""
    page.evaluate(
        """(sel) => { window.__buttons = []; const root = document.querySelector(sel);
        const button = () => root.tagName === 'BUTTON' ? root : root.querySelector('button');
        const note = () => { const b = button(); const s = window.__buttons;
                             const t = (b.disabled ? 'disabled ' : 'enabled ') + b.innerText.trim();
                             if (!s.length || s[s.length - 1] !== t) s.push(t); };
        new MutationObserver(note).observe(root.parentElement,
            {attributes: true, childList: true, subtree: true, characterData: true}); note(); }""",
        selector,
    )


def button_states(page) -> list[str]:
    return page.evaluate("() => window.__buttons || []")


def newest_id(demo) -> int:
    """The id of the newest run in the app's store (0 when it has none)."""
    return max((r.id for r in demo.store.list_runs()), default=0)


def run_and_wait(page, demo, timeout: int = 900_000) -> list[int]:
    """Click Run and wait for this comparison's "done" (it names its first run); the new runs' ids, in order.
    The timeout (ms) is what a comparison may take on a loaded 2-core machine (other jobs share the cores)."""
    from playwright.sync_api import expect

    first = newest_id(demo) + 1
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#compare-status")).to_contain_text(re.compile(rf"done: runs? #{first}\b"), timeout=timeout)
    return sorted(r.id for r in demo.store.list_runs() if r.id >= first)
