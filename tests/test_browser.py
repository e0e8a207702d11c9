"""The workbench in headless Chromium (Debian's, driven by Playwright; no browser is ever downloaded):
run the default comparison on a bundled sample, replay a run step by step, change δ and see decisions
flip, download the CSV. Screenshots go to $WORKBENCH_SCREENSHOTS (default results/screenshots)."""
from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.real_model
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
SHOTS = Path(os.environ.get("WORKBENCH_SCREENSHOTS", Path(__file__).resolve().parents[1] / "results" / "screenshots"))


@pytest.fixture(scope="module")
def page(app):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not found: apt-get install chromium (.ci/run does)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        context = browser.new_context(viewport={"width": 1500, "height": 1100}, accept_downloads=True)
        pg = context.new_page()
        pg.set_default_timeout(60_000)
        pg.goto(app[0].local_url)
        yield pg
        browser.close()


def shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_compare_replay_tune_and_download(app, page, tmp_path):
    demo = app[0]
    from playwright.sync_api import expect

    # Compare: the default comparison (greedy, aasd, csd) on the first bundled sample
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#compare-status")).to_contain_text("done", timeout=300_000)
    for i in range(3):
        expect(page.locator(f"#col-metrics-{i}")).to_contain_text("MAL")
        assert page.locator(f"#col-text-{i} span.tok").count() > 5
    shot(page, "compare")
    ids = {r.method: r.id for r in demo.store.list_runs()}
    assert set(ids) == {"greedy", "aasd", "csd"}

    # Replay: load the AASD run and move the step slider
    page.get_by_role("tab", name="Replay & tune").click()
    page.locator("#replay-run-id input").fill(str(ids["aasd"]))
    page.get_by_role("button", name="Load run").click()
    expect(page.locator("#replay-info")).to_contain_text("step 0 of 0–")
    slider_box = page.locator("#replay-step input[type=number]")
    slider_box.fill("3")
    slider_box.press("Enter")
    expect(page.locator("#replay-info")).to_contain_text("step 3 of 0–")
    expect(page.locator(".js-plotly-plot").first).to_be_visible()

    # Live tuning: judge the same drafts with CASD's fixed δ, then lower δ: decisions flip
    page.locator("#tune-rule input").click()
    page.locator("#tune-rule input").fill("aasd-fixed")
    page.locator("#tune-rule input").press("Enter")
    expect(page.locator("#tune-summary")).to_contain_text("aasd-fixed: δ = 0.1")
    delta = page.locator("#tune-delta input[type=number]")
    delta.fill("0.001")
    delta.press("Enter")
    expect(page.locator("#tune-summary")).to_contain_text(re.compile(r"δ = 0\.001: first change at step \d+"))
    expect(page.locator("#tune-flips")).to_contain_text("accepted")
    shot(page, "replay")

    # Export: the last comparison's runs as a zip of the store's CSV files
    page.get_by_role("tab", name="Export").click()
    page.get_by_role("button", name="Export CSV (zip)").click()
    link = page.locator("#export-file a").first
    expect(link).to_be_visible()
    with page.expect_download() as dl:
        link.click()
    target = tmp_path / "export.zip"
    dl.value.save_as(target)
    with zipfile.ZipFile(target) as z:
        assert set(z.namelist()) == {"runs.csv", "steps.csv", "nodes.csv"}
        runs_csv = z.read("runs.csv").decode()
    assert all(f"\n{i}," in runs_csv for i in ids.values())
