"""Twenty-second newcomer pass: two layout defects, in headless Chromium on the real default model. The Compare tab's
speed table ran past its column with a long method label (its head read "speed-", the speed-up and MAL columns were
cut off at the right edge), and the Replay tab's five live-tuning sliders sat at three heights (their long labels
wrap to different numbers of lines). One test per defect; each failed on the code before the fix."""

from __future__ import annotations

import pytest
from browser_util import choose_methods, fill_number, open_page, open_parameters, run_and_wait, shot, synthetic_run

from core.trace import NodeTrace, StepTrace

pytestmark = pytest.mark.real_model  # the `app` fixture loads the SmolLM2 preset's pool
LONG = "aasd[alpha=0,beta=0.001,max_nodes=8]"  # a variant label longer than the speed table's method column
WIDTHS = (1280, 1024)

# Where the speed table's cells are: the head cells inside its box, and no number cut off (a cell, or anything in it,
# wider than it shows)
SPEED_TABLE_LAYOUT = """(root) => {
  const box = (root.querySelector('.table-wrap') || root).getBoundingClientRect();
  const visible = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  const heads = Array.from(root.querySelectorAll('thead th')).filter(visible).map((th) => {
    const r = th.getBoundingClientRect();
    return {text: th.innerText.trim(), left: r.left, right: r.right};
  });
  const rows = Array.from(root.querySelectorAll('.virtual-row[role=row]')).filter(visible);
  const clipped = [];
  for (const row of rows) {
    Array.from(row.querySelectorAll('[role=gridcell]')).slice(1).forEach((cell) => {  // the first: the method's label
      for (const el of [cell, ...cell.querySelectorAll('*')]) {
        if (el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0) { clipped.push(cell.innerText.trim()); break; }
      }
    });
  }
  return {left: box.left, right: box.right, heads, clipped, rows: rows.length,
          heights: rows.map((r) => r.getBoundingClientRect().height)};
}"""


def check_speed_table(page, name: str, one_line: bool):
    """At each of WIDTHS: the speed table's two rows drawn, its head cells within its box, no number cut off, and
    (`one_line`) each row one line high."""
    table = page.locator("#compare-speed-table")
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 1000})
        page.wait_for_timeout(600)
        table.scroll_into_view_if_needed()
        got = table.evaluate(SPEED_TABLE_LAYOUT)
        shot(page, f"twenty-second-{name}-{width}", "#compare-speed-table")
        assert got["rows"] == 2, got
        assert [h["text"] for h in got["heads"]][:5] == ["method", "runs", "tok/s", "speed-up", "MAL"], got
        outside = [h["text"] for h in got["heads"] if h["left"] < got["left"] - 1 or h["right"] > got["right"] + 1]
        assert not outside, f"{width} px: head cells past the table's box: {outside} ({got})"
        assert not got["clipped"], f"{width} px: number cells cut off: {got['clipped']}"
        if one_line:  # one line of text is 37 px high
            assert max(got["heights"]) < 50, f"{width} px: a row wrapped tall: {got['heights']}"


def test_speed_table_columns_all_in_view_with_a_long_method_label(app):
    """Defect A: with `aasd[alpha=0,beta=0.001,max_nodes=8]` in the speed table, at 1280 and 1024 px every head cell
    lies within the table's box and no number cell is clipped: one repeat (one-line rows), then two (a mean with its
    interval in each number cell). Catches dropping the table's column_widths (the label widened the method column
    and pushed speed-up and MAL past the right edge: a sideways scroll, the head reading "speed-"), and dropping the
    CSS that lets a number wrap in its column (the intervals were then cut with an ellipsis)."""
    demo = app[0]
    with open_page(demo.local_url, viewport=(1280, 1000)) as page:  # closed before the next test opens its own
        choose_methods(page, ["greedy", LONG])
        open_parameters(page)
        fill_number(page, "#compare-max-new", 8)  # a short comparison: the table is what is checked
        run_and_wait(page, demo)
        check_speed_table(page, "speed-table", one_line=True)
        page.set_viewport_size({"width": 1280, "height": 1000})
        fill_number(page, "#compare-repeats", 2)
        run_and_wait(page, demo)
        check_speed_table(page, "speed-table-repeats", one_line=False)


def simple_step(i: int, pos: int) -> StepTrace:
    """A step with one accepted context node and the bonus."""
    nodes = [
        NodeTrace(i, pos, 0, -1, 0, 100 + i, f" r{i}", "root", "accepted", "root"),
        NodeTrace(i, pos, 1, 0, 1, 200 + i, f" c{i}", "context", "accepted", "p ≥ α", p=0.9, threshold=0.1),
        NodeTrace(i, pos, 2, 1, 2, 300 + i, f" b{i}", "model", "bonus", "the target's own token", p=0.7),
    ]
    return StepTrace(i, pos, 1, 1, [200 + i, 300 + i], draft_ms=0.5, forward_ms=10.0, nodes=nodes)


def test_live_tuning_slider_tracks_level_at_1280(app):
    """Defect B: on the Replay tab with an AASD run loaded (α and β say the alignment nodes keep the run's own
    values: the longest labels), the five tuning sliders' range inputs share one vertical centre (within 2 px) at
    1280 px. Catches dropping the CSS that makes each slider block a column with its track at the bottom: the
    labels wrapped to one, two and three lines beside their number boxes and the tracks sat at three heights."""
    from playwright.sync_api import expect

    demo = app[0]
    params = {"alpha": 0.1, "beta": 0.3, "alpha_alignment": 0.1, "beta_alignment": 0.3, "tau": 0.3}
    run = synthetic_run("aasd", [simple_step(i, 10 + 2 * i) for i in range(6)], params=params, model="synthetic")
    rid = demo.store.save_run(run, tags=["shared"])
    with open_page(demo.local_url, viewport=(1280, 1000)) as page:
        page.get_by_role("tab", name="Replay & tune").click()
        expect(page.locator("#replay-info")).to_contain_text(f"run #{rid} · aasd")
        expect(page.locator("#tune-alpha")).to_contain_text("alignment nodes keep the run's α 0.1")
        page.locator("#tune-lam").scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        centres = page.evaluate("""() => ['delta', 'alpha', 'beta', 'tau', 'lam'].map((n) => {
            const r = document.querySelector(`#tune-${n} input[type=range]`).getBoundingClientRect();
            return r.top + r.height / 2; })""")
        shot(page, "twenty-second-tuning-sliders", "#tune-delta >> xpath=..")
        assert max(centres) - min(centres) <= 2, f"slider tracks at different heights: {centres}"
