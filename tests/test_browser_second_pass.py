"""Issue 33, the second newcomer pass: in headless Chromium on the real default model, one test per defect that is
UI behaviour (the pure functions behind the fixes are tested in tests/test_ui_second_pass.py). Each failed on the
code before its fix. Screenshots of what they show go to results/screenshots."""

from __future__ import annotations

import re

import pytest
from browser_util import (
    choose_methods,
    fill_number,
    newest_id,
    open_parameters,
    run_and_wait,
    shot,
    shot_between,
    synthetic_run,
)

from core.trace import NodeTrace, StepTrace

pytestmark = [pytest.mark.real_model, pytest.mark.slow]  # the slow set: CI's second phase (README)
MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def first(app, page):
    """A newcomer's first comparison, short: greedy, aasd and csd on the default sample at 24 tokens."""
    demo = app[0]
    choose_methods(page, ["greedy", "aasd", "csd"])
    open_parameters(page)
    fill_number(page, "#compare-max-new", 24)
    ids = run_and_wait(page, demo)
    return {demo.store.load_run(i, nodes=False).trace.method: i for i in ids}


# ---------------------------------------------------------------- item 1: the default csd repeats; a grown memory says so


def test_the_default_csd_reads_the_shipped_memory_and_an_online_run_says_how_far_it_grew(app, page, first):
    from playwright.sync_api import expect

    from core.memory import shared_memory, shipped_memory
    from core.params import MEMORY_MODES, SHIPPED_MEMORY

    demo = app[0]
    trace = demo.store.load_run(first["csd"], nodes=False).trace
    target = demo.pool.loaded(MODEL).target
    assert trace.params["memory_mode"] == SHIPPED_MEMORY
    assert trace.params["memory_sha"] == shipped_memory(target).fingerprint()
    expect(page.locator("#col-metrics-2")).to_contain_text("the table shipped for smollm2-135m, context drafts (")
    expect(page.locator("#col-metrics-2")).to_contain_text("read only")
    # The server's online memory grows as a few online runs would grow it (here: 300 rejections of one pair) ...
    grown = shared_memory(target)
    for _ in range(300):
        grown.observe(1, 2)
    choose_methods(page, ["csd[memory_mode=online]", "csd"])
    ids = run_and_wait(page, demo)
    runs = {demo.store.load_run(i, nodes=False).trace.params["memory_mode"]: i for i in ids}
    online = page.locator("#col-metrics-0")
    expect(online).to_contain_text(re.compile(r"[\d,]+ observations added since the shipped table"))
    added = int(re.search(r"([\d,]+) observations added", online.inner_text()).group(1).replace(",", ""))
    assert added >= 300, online.inner_text()
    expect(online).to_contain_text("to reset")
    expect(page.locator("#col-metrics-0")).to_contain_text("every rejection adds to it")
    # ... and the default csd gives the answer it gave before the memory grew
    again = demo.store.load_run(runs[SHIPPED_MEMORY], nodes=False).trace
    assert again.output_ids == trace.output_ids
    assert demo.store.load_run(runs[MEMORY_MODES["online"]], nodes=False).trace.params["memory_mode"] == 0
    expect(page.locator("#col-metrics-1")).not_to_contain_text("observations added")
    shot_between(page, "compare-memory-grown", "#compare-status", "#col-text-1")


# ---------------------------------------------------------------- item 2: the Diff tab opens on the last comparison


def test_the_diff_tab_opens_on_the_last_comparisons_first_two_runs_and_follows_the_next(app, page, first):
    from playwright.sync_api import expect

    demo = app[0]
    choose_methods(page, ["greedy", "aasd", "csd"])
    ids = run_and_wait(page, demo)
    methods = [demo.store.load_run(i, nodes=False).trace.method for i in ids]
    assert methods[:2] == ["greedy", "aasd"], methods  # greedy runs first: the reference
    page.get_by_role("tab", name="Diff").click()
    expect(page.locator("#diff-a input")).to_have_value(re.compile(rf"^#{ids[0]} greedy\b"))
    expect(page.locator("#diff-b input")).to_have_value(re.compile(rf"^#{ids[1]} aasd\b"))
    # side by side at one height (twelfth pass: A's longer label wrapped and set its box about 20 px lower)
    tops = [page.locator(f"#diff-{x} input").bounding_box()["y"] for x in "ab"]
    assert abs(tops[0] - tops[1]) <= 2, tops
    page.locator("#diff-go").click()
    expect(page.locator("#diff-summary")).to_contain_text(f"#{ids[0]} greedy")
    page.get_by_role("tab", name="Compare").click()
    choose_methods(page, ["greedy", "pld"])
    fill_number(page, "#compare-max-new", 8)
    nxt = run_and_wait(page, demo)
    page.get_by_role("tab", name="Diff").click()
    expect(page.locator("#diff-a input")).to_have_value(re.compile(rf"^#{nxt[0]} greedy\b"))
    expect(page.locator("#diff-b input")).to_have_value(re.compile(rf"^#{nxt[1]} pld\b"))
    page.get_by_role("tab", name="Compare").click()
    fill_number(page, "#compare-max-new", 24)


# ---------------------------------------------------------------- item 3: every parameter says what it is


def test_the_parameter_fields_say_in_words_what_they_are_and_what_named_values_mean(page):
    from playwright.sync_api import expect

    open_parameters(page)
    words = {
        "key_len": "the longest run of last tokens looked up in the context",
        "ngram": "tokens copied after each match",
        "align_m": "alignment alternatives (m)",
        "align_graft": "no (0) = it stays one token, yes (1) = the continuation follows it too",
        "gamma": "auto (0) = up to 16",
    }
    for name, text in words.items():
        expect(page.locator(f"#param-{name}")).to_contain_text(text)
    expect(page.locator("#param-align_graft")).to_contain_text("0 = no, 1 = yes")
    expect(page.locator("#param-align_m")).to_contain_text("0 = none")
    shot_between(page, "parameters", "#compare-max-new", "#param-seed")


# ---------------------------------------------------------------- item 4: a newline token is not a blank cell


def test_the_node_table_shows_whitespace_tokens_visibly(app, page):
    from playwright.sync_api import expect

    demo = app[0]
    texts = ["\n", "\t", "  x", " the"]
    nodes = [NodeTrace(0, 10, 0, -1, 0, 100, "x", "root", "accepted", "root")]
    for i, text in enumerate(texts, start=1):
        nodes.append(NodeTrace(0, 10, i, i - 1, i, 200 + i, text, "context", "accepted", "p ≥ δ", p=0.9))
    nodes.append(NodeTrace(0, 10, 5, 4, 5, 300, "\n", "model", "bonus", "own", p=0.5))
    step = StepTrace(0, 10, 4, 4, [201, 202, 203, 204, 300], draft_ms=0.5, forward_ms=10.0, nodes=nodes)
    rid = demo.store.save_run(synthetic_run("pld", [step]), tags=["shared"])
    page.get_by_role("tab", name="Replay & tune").click()
    page.locator("#replay-run-id input").fill(str(rid))
    page.get_by_role("button", name="Load run").click()
    expect(page.locator("#replay-info")).to_contain_text(f"run #{rid} · pld", timeout=30_000)
    expect(page.locator("#replay-nodes tbody tr")).to_have_count(6)
    rows = page.evaluate("""() => Array.from(document.querySelectorAll('#replay-nodes tbody tr')).map(
        (r) => Array.from(r.children).map((c) => c.textContent))""")
    assert [r[3] for r in rows] == ["x", "↵", "⇥", "␣␣x", "␣the", "↵"], rows
    labels = page.evaluate("() => Array.from(document.querySelectorAll('#replay-tree text')).map((t) => t.textContent)")
    assert "↵" in labels and any(t.startswith("␣␣x") for t in labels), labels  # the tree's labels: the same signs
    shot(page, "replay-whitespace-tokens", "#replay-nodes")


# ---------------------------------------------------------------- item 8: a bad task file is said at upload


@pytest.mark.parametrize(
    "name,content,says",
    [
        ("notes.jsonl", b"this is not JSON\n", "task file could not be read"),
        ("picture.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "task file could not be read"),
        ("rows.jsonl", b'{"id": "q1", "context": "no input here"}\n', "task file could not be read"),
    ],
)
def test_a_bad_task_file_is_reported_beside_the_upload_at_once_and_run_refuses(
    app, page, tmp_path, name, content, says
):
    from playwright.sync_api import expect

    demo = app[0]
    page.get_by_role("tab", name="Compare").click()
    bad = tmp_path / name
    bad.write_bytes(content)
    box = page.locator("#upload-box")
    if not page.locator("#task-file input[type=file]").count() or not box.locator("#upload-hint").is_visible():
        page.get_by_text("…or upload a task file").click()
    page.locator("#task-file input[type=file]").set_input_files(str(bad))
    note = page.locator("#upload-note")
    expect(note).to_contain_text(says, timeout=30_000)  # at upload, beside the control: before any Run
    expect(note).to_contain_text("⚠")
    shot(page, f"upload-error-{name.split('.')[1]}", "#upload-box")
    before = newest_id(demo)
    page.get_by_role("button", name="Run", exact=True).click()
    status = page.locator("#compare-status")
    expect(status).to_contain_text("nothing runs until you fix it")
    page.wait_for_timeout(1500)
    expect(status).not_to_contain_text("done")
    assert newest_id(demo) == before  # the bundled sample did not run in its place
    page.locator("#task-file button[aria-label='Clear']").first.click()
    expect(note).to_be_empty()
