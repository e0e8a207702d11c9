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
    # opening the tab fills in the newest run; wait for it, so it does not overwrite the id typed next
    expect(page.locator("#replay-run-id input")).to_have_value(str(max(ids.values())))
    page.locator("#replay-run-id input").fill(str(ids["aasd"]))
    page.get_by_role("button", name="Load run").click()
    expect(page.locator("#replay-info")).to_contain_text(f"run #{ids['aasd']} · aasd · step 0 of 0–")
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


# ---------------------------------------------------------------- issue 23: a UI that tells the truth

def fill_number(page, selector, value):
    box = page.locator(f"{selector} input[type=number]").first
    box.fill(str(value))
    box.press("Enter")


def open_parameters(page):
    page.get_by_role("tab", name="Compare").click()
    if not page.locator("#param-key_len").is_visible():
        page.get_by_text("Parameters (every method").click()


def test_parameter_labels_name_each_parameter_once(app, page):
    from playwright.sync_api import expect

    open_parameters(page)
    expect(page.locator("#param-key_len")).to_contain_text("key_len: default 6, range [1, 32]")
    assert "key_len key_len" not in page.locator("body").inner_text()


def test_the_seed_range_reads_in_words(app, page):
    from playwright.sync_api import expect

    open_parameters(page)
    expect(page.locator("#param-seed")).to_contain_text("seed: default 0, any integer ≥ 0")
    assert "9223372036854775807" not in page.locator("body").inner_text()


def test_the_upload_box_says_what_a_task_file_holds(app, page):
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Compare").click()
    expect(page.get_by_text("JSON Lines, one task a line")).to_be_visible()
    expect(page.locator("#upload-hint")).to_contain_text('"input"')


def test_an_error_clears_the_last_comparisons_columns(app, page):
    from playwright.sync_api import expect

    open_parameters(page)
    fill_number(page, "#compare-max-new", 4)
    first_new = max((r.id for r in app[0].store.list_runs()), default=0) + 1
    page.get_by_role("button", name="Run", exact=True).click()
    # this comparison's "done" (it names its runs), not the one an earlier test left in the status line
    expect(page.locator("#compare-status")).to_contain_text(re.compile(rf"done: runs #{first_new}\b"), timeout=300_000)
    assert page.locator("#col-text-0 span.tok").count() > 0
    fill_number(page, "#param-alpha", 20)  # out of range for aasd: refused before any model runs
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#compare-status")).to_contain_text("out of range")
    expect(page.locator("#col-text-0 span.tok")).to_have_count(0)  # no stale tokens under the error
    expect(page.locator("#col-metrics-0")).not_to_contain_text("MAL")
    fill_number(page, "#param-alpha", 0.1)


def test_replay_opens_on_the_newest_run_not_on_0(app, page):
    from playwright.sync_api import expect

    demo = app[0]
    page.get_by_role("tab", name="Replay & tune").click()
    fill_number(page, "#replay-run-id", 0)  # no run chosen (an earlier test loaded one; an empty field sends 0)
    page.get_by_role("tab", name="Compare").click()
    page.get_by_role("tab", name="Replay & tune").click()
    newest = max(r.id for r in demo.store.list_runs())  # this session's last comparison made the newest run
    expect(page.locator("#replay-run-id input")).to_have_value(str(newest))


def test_empty_tables_show_their_headers_not_1_2_3(app, page):
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Replay & tune").click()
    expect(page.locator("#replay-nodes")).to_contain_text("decision")
    expect(page.locator("#tune-flips")).to_contain_text("new_decision")


def shared_runs(app, methods, max_new_tokens=48):
    """Runs made through the API (another session), shared so this browser session may see them."""
    demo, client = app
    before = {r.id for r in demo.store.list_runs()}
    status = client.predict(api_name="/compare", model_name="smollm2-135m", method_list=methods,
                            max_new_tokens=max_new_tokens)[0]
    assert status.startswith("done"), status
    new = {r.id: r for r in demo.store.list_runs() if r.id not in before}
    for rid in new:
        demo.store.add_tags(rid, ["shared"])
    return {r.method: rid for rid, r in new.items()}


def pick(page, selector, text):
    box = page.locator(f"{selector} input").first
    box.click()
    box.fill(text)
    box.press("Enter")


def test_diff_of_two_runs_and_acceptance_per_position(app, page):
    from playwright.sync_api import expect

    from core.stats import first_divergence

    demo = app[0]
    ids = shared_runs(app, ["greedy", "casd[delta=0.001]"])  # a lenient δ takes copied tokens greedy would not
    greedy, casd = ids["greedy"], ids["casd"]
    j = first_divergence(*(demo.store.load_run(i).trace.output_ids for i in (greedy, casd)))

    page.get_by_role("tab", name="Diff").click()
    pick(page, "#diff-a", f"#{greedy} greedy")
    pick(page, "#diff-b", f"#{casd} casd")
    page.locator("#diff-go").click()
    summary = page.locator("#diff-summary")
    if j is None:
        expect(summary).to_contain_text("identical")
    else:
        expect(summary).to_contain_text(f"first divergence at token {j}")
        first = page.locator("#diff-tokens .pair.first")
        expect(first).to_have_count(1)
        assert first.get_attribute("title").startswith(f"position {j}")
    assert page.locator("#diff-tokens .pair").count() >= 48
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#tab-diff").screenshot(path=str(SHOTS / "diff.png"))

    page.get_by_role("tab", name="Replay & tune").click()
    fill_number(page, "#replay-run-id", casd)
    page.get_by_role("button", name="Load run").click()
    expect(page.locator("#replay-info")).to_contain_text(f"run #{casd} · casd · step 0 of 0–", timeout=30_000)
    try:
        expect(page.locator("#replay-positions .js-plotly-plot")).to_be_visible(timeout=30_000)
    except AssertionError:
        shot(page, "positions-failed")
        raise
    expect(page.locator("#replay-positions")).to_contain_text("acceptance per draft position")
    expect(page.locator("#replay-by-source .js-plotly-plot")).to_be_visible()
    page.locator("#replay-run-figures").screenshot(path=str(SHOTS / "positions.png"))
