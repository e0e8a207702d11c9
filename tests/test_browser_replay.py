"""The replay's step switch in headless Chromium (issue 23): the browser draws each step from the run's step
data (workbench/ui/replay_js.py) with no round trip, so here every drawn step is checked against what the
server says about that step (replay_view, the figures, the /replay_step endpoint): header, titles, nodes, the node
table and the text so far. Behaviour only; benchmarks/bench_replay_browser.py times it."""

from __future__ import annotations

import pytest
from browser_util import open_page, synthetic_run

from core.trace import NodeTrace, RunTrace, StepTrace

pytestmark = pytest.mark.real_model  # the `app` fixture loads the SmolLM2 preset's pool
STEPS = 30
MODULE_RUN = "csd[tau=0.3]"  # make_run as the app names it: its τ is off csd's default


def make_step(i: int, pos: int) -> StepTrace:
    """Step i: a root, a chain of i % 4 copied tokens (the first i % 3 accepted), a rejected sibling, a CSD
    draft node on every fifth step (the gate panel) and a bonus; step 7 drafts nothing. Token texts carry
    markup, which must show as text."""
    nodes = [NodeTrace(i, pos, 0, -1, 0, 100 + i, f" r{i}", "root", "accepted", "root")]
    chain = 0 if i == 7 else i % 4
    accepted = min(i % 3, chain)
    for d in range(1, chain + 1):
        ok = d <= accepted
        nodes.append(
            NodeTrace(
                i,
                pos,
                d,
                d - 1,
                d,
                200 + d,
                f" c{i}.{d}" if d != 2 else "<b>x</b>",
                "context",
                "accepted" if ok else ("rejected" if d == accepted + 1 else "unreached"),
                "p ≥ δ" if ok else "p < δ",
                p=0.9 if ok else 0.05,
                threshold=0.1,
                entropy=0.5 + d / 10,
                max_p=0.9,
                p_eos=0.001,
                rank=0 if ok else 3,
                logit_gap=0.0 if ok else 2.5,
            )
        )
    if chain:
        nodes.append(
            NodeTrace(
                i,
                pos,
                len(nodes),
                0,
                1,
                300,
                f" s{i}",
                "generated",
                "rejected",
                "p < δ",
                p=0.02,
                threshold=0.1,
                entropy=0.6,
                max_p=0.9,
                p_eos=0.001,
                rank=5,
                logit_gap=4.0,
            )
        )
    if i % 5 == 0 and chain:
        nodes.append(
            NodeTrace(
                i,
                pos,
                len(nodes),
                0,
                1,
                400,
                f" d{i}",
                "draft",
                "rejected",
                "gap > −ln τ",
                p=0.01,
                threshold=0.3,
                entropy=0.6,
                max_p=0.9,
                p_eos=0.001,
                rank=7,
                logit_gap=3.0,
                mem_count=2,
                correction_id=17,
            )
        )
    bonus_parent = accepted  # the last accepted node of the chain (0: the root)
    nodes.append(
        NodeTrace(
            i,
            pos,
            len(nodes),
            bonus_parent,
            bonus_parent + 1,
            500 + i,
            f" b{i}",
            "model",
            "bonus",
            "the target's own token",
            p=0.7,
            entropy=0.4,
        )
    )
    emitted = [n.token_id for n in nodes[1 : accepted + 1]] + [500 + i]
    return StepTrace(i, pos, len(nodes) - 2, accepted, emitted, draft_ms=0.5, forward_ms=10.0, nodes=nodes)


def make_run() -> RunTrace:
    steps, pos = [], 10
    for i in range(STEPS):
        steps.append(make_step(i, pos))
        pos += len(steps[-1].emitted)
    return synthetic_run("csd", steps, params={"tau": 0.3}, model="synthetic")


@pytest.fixture(scope="module")
def replay(app):
    """The app with the synthetic run stored and shared, and a page on its Replay tab with the run loaded."""
    sync_api = pytest.importorskip("playwright.sync_api")
    demo = app[0]
    run = make_run()
    rid = demo.store.save_run(run, tags=["shared"])
    with open_page(demo.local_url) as page:
        # The tab opens on the newest run, which is this one: a Load on top of that opening raced it (CI: the step
        # line read "loaded run #1", the second opening's status, after the first had drawn step 0)
        page.get_by_role("tab", name="Replay & tune").click()
        sync_api.expect(page.locator("#replay-info")).to_contain_text(
            f"run #{rid} · {MODULE_RUN} · step 0 (of 0–{STEPS - 1})"
        )
        yield page, rid, demo.store.load_run(rid).trace


def slide(page, k):
    """Move the slider the way a drag does (the range input's input event)."""
    page.evaluate(
        """(k) => { const r = document.querySelector('#replay-step input[type=range]');
                             r.value = String(k); r.dispatchEvent(new Event('input', {bubbles: true})); }""",
        k,
    )


def drawn(page) -> dict:
    """What the page shows of the current step."""
    return page.evaluate("""() => {
      const txt = (s) => (document.querySelector(s) || {}).textContent || '';
      const visible = Array.from(document.querySelectorAll('#replay-text span.tok')).filter((e) => e.offsetParent !== null);
      return {
        info: txt('#replay-info [data-testid=markdown]').trim(),  // not the status tracker's timer beside it
        tree_title: txt('#replay-tree .fig-title'), thr_title: txt('#replay-thresholds .fig-title'),
        tree_nodes: Array.from(document.querySelectorAll('#replay-tree g.node')).map((g) => Number(g.dataset.node)),
        hovers: Array.from(document.querySelectorAll('#replay-tree g.node > title')).map((t) => t.textContent),
        bars: Array.from(document.querySelectorAll('#replay-thresholds g.bar')).map((g) => Number(g.dataset.node)),
        gates: Array.from(document.querySelectorAll('#replay-thresholds g.gate')).map((g) => Number(g.dataset.node)),
        markup: document.querySelectorAll('#replay-tree b, #replay-thresholds b, #replay-nodes b').length,
        head: Array.from(document.querySelectorAll('#replay-nodes th')).map((c) => c.textContent),
        rows: Array.from(document.querySelectorAll('#replay-nodes tbody tr')).map(
          (r) => Array.from(r.children).map((c) => c.textContent)),
        text: visible.map((e) => e.textContent).join(''), tokens: visible.length,
      };
    }""")


def cell(v):
    """A table cell as a value: numbers compared as numbers (pandas shows a rank 0 beside a None as 0.0)."""
    if v is None or (isinstance(v, float) and v != v) or v == "":
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)


def check_step(page, rid, trace, k, api=None):
    """The drawn step k matches replay_view and the server's figures for step k (and the /replay_step answer, when given)."""
    from playwright.sync_api import expect

    from workbench.ui import replay_view as rv
    from workbench.ui import tokens
    from workbench.ui.figures import replay as figures
    from workbench.ui.shared import step_ends

    step = trace.steps[k]
    expect(page.locator("#replay-tree .fig-title")).to_have_text(figures.tree_figure(step).layout.title.text)
    expect(page.locator("#replay-info")).to_contain_text(f"step {k} (of 0–")
    got = drawn(page)
    assert got["info"] == rv.step_info(rid, trace, k)
    assert got["thr_title"] == f"step {k}: thresholds"
    assert sorted(got["tree_nodes"]) == sorted(n.node for n in step.nodes)
    for n, hover in zip(
        sorted(step.nodes, key=lambda n: n.node), sorted(got["hovers"], key=lambda h: int(h[1:].split()[0]))
    ):
        assert hover.startswith(f"#{n.node} ") and n.reason in hover and n.source in hover
    drafts = [n for n in step.nodes if n.parent != -1 and n.decision != "bonus"]
    assert got["bars"] == [n.node for n in drafts]
    if drafts:  # the server's figure has the same bars, in the same order
        fig = figures.threshold_figure(step)
        assert fig.layout.title.text == got["thr_title"]
        cats = [c for t in fig.data if t.type == "bar" and t.yaxis == "y" for c in t.x]
        assert sorted(int(c.split(":")[0]) for c in cats) == sorted(got["bars"])
    assert got["gates"] == [n.node for n in drafts if figures.is_gate_node(n)]
    assert got["markup"] == 0  # token text "<b>x</b>" is shown as text
    frame = rv.nodes_frame(step)
    assert got["head"] == list(rv.NODE_COLUMNS)
    assert [[cell(v) for v in row] for row in got["rows"]] == [[cell(v) for v in row] for row in frame.values.tolist()]
    origins = tokens.token_origins(trace)
    end = step_ends(trace)[k]
    assert got["tokens"] == end
    assert got["text"] == "".join(t for t, _ in origins[:end])
    if api is not None:  # the server's own answer for this step, through the API
        info, text, tree, thresholds, nodes = api.predict(rid, k, api_name="/replay_step")
        assert info == got["info"] and text.count('class="tok ') == end
        assert tree["type"] == "plotly" and figures.tree_figure(step).layout.title.text in tree["plot"]
        assert nodes["headers"] == got["head"] and len(nodes["data"]) == len(got["rows"])


def test_the_slider_draws_the_chosen_step(app, replay):
    page, rid, trace = replay
    check_step(page, rid, trace, 0, api=app[1])
    for k in (17, 5, STEPS - 1, 7, 10, 1):  # 7 drafts nothing; 5 and 10 have a CSD gate node; back and forth
        slide(page, k)
        check_step(page, rid, trace, k, api=app[1] if k in (17, 10) else None)


def test_typing_a_step_and_coming_back_to_the_tab_keep_the_step(app, replay):
    from playwright.sync_api import expect

    page, rid, trace = replay
    box = page.locator("#replay-step input[type=number]")
    box.fill("12")
    box.press("Enter")
    check_step(page, rid, trace, 12)
    page.get_by_role("tab", name="Compare").click()
    page.get_by_role("tab", name="Replay & tune").click()
    expect(page.locator("#replay-info")).to_contain_text("step 12 (of 0–")
    check_step(page, rid, trace, 12)


# ---------------------------------------------------------------- issue 23, item 7: the tab's defects


def choose_rule(page, name):
    from playwright.sync_api import expect

    box = page.locator("#tune-rule input")
    box.click()
    box.fill(name)
    box.press("Enter")
    expect(box).to_have_value(name)


def test_the_rule_list_offers_only_rules_that_re_score(app, replay):
    """Top-k and nucleus sample (T = 1): re-scoring refused them with "temperature is 1.0"; they are not offered,
    and every rule that is offered re-scores this run."""
    from playwright.sync_api import expect

    from workbench.ui import replay_view as rv

    page, rid, trace = replay
    page.locator("#tune-rule input").click()
    expect(page.get_by_role("option").first).to_be_visible()
    offered = [o.replace("✓", "").strip() for o in page.get_by_role("option").all_text_contents()]
    page.keyboard.press("Escape")
    assert "top-k" not in offered and "nucleus" not in offered
    assert offered == rv.rule_choices() and "aasd-fixed" in offered
    for rule in offered:
        summary, _ = app[1].predict(rid, rule, 0.1, 0.1, 0.1, 0.3, 6, api_name="/rescore")
        assert "predicted" in summary and "temperature" not in summary, (rule, summary)
    choose_rule(page, "greedy")
    expect(page.locator("#tune-summary")).to_contain_text("greedy: greedy takes none of δ α β τ λ")
    choose_rule(page, rv.OWN_RULE)


def test_slider_labels_state_the_sliders_own_range(replay):
    """The labels said λ [0, 1000000] and α [0, 10] over sliders running 0–50 and 0–2."""
    from workbench.ui.shared import TUNABLE

    page, _, _ = replay
    for name in TUNABLE:
        low, high = page.evaluate(
            f"() => {{ const r = document.querySelector('#tune-{name} input[type=range]'); "
            "return [Number(r.min), Number(r.max)]; }"
        )
        label = page.locator(f"#tune-{name} [data-testid=block-info]").first.text_content()
        assert f"slider {low:g}–{high:g}" in label, (name, label, low, high)
        assert "1000000" not in label


def test_sliders_of_parameters_the_judging_method_ignores_are_greyed_out(replay):
    """CSD reads τ and λ: δ, α and β are greyed out; judged by AASD's rule, α and β are live, τ, λ, δ not."""
    from playwright.sync_api import expect

    from workbench.ui import replay_view as rv

    page, _, _ = replay

    def expect_live(live):
        for name in ("delta", "alpha", "beta", "tau", "lam"):
            slider = page.locator(f"#tune-{name} input[type=range]")
            if name in live:
                expect(slider).to_be_enabled()
            else:
                expect(slider).to_be_disabled()

    expect_live({"tau", "lam"})  # the run's own method, csd, as loaded
    choose_rule(page, "aasd")
    expect_live({"alpha", "beta"})
    choose_rule(page, "casd")
    expect_live({"delta"})
    choose_rule(page, rv.OWN_RULE)
    expect_live({"tau", "lam"})


def test_the_tab_is_shorter_and_no_label_chip_covers_a_figure_title(replay):
    """The tab was ~2,500 px tall at this width, and the run's figures wore label chips over their own titles."""
    from playwright.sync_api import expect

    page, _, _ = replay
    page.wait_for_selector("#replay-positions .js-plotly-plot")
    height = page.evaluate(
        "() => document.querySelector('#replay-tree').closest('[role=tabpanel]').getBoundingClientRect().height"
    )
    # 2,200 before the figure boxes were sized to hold the run's tallest figure whole; ~2,430 since the node table
    # holds a 16-node tree's 18 rows without an inner scroll (it showed ~4 rows)
    assert height < 2_500, height
    for fig in ("#replay-by-source", "#replay-positions", "#replay-tree", "#replay-thresholds", "#replay-nodes"):
        assert page.locator(f"{fig} [data-testid=block-label]").filter(visible=True).count() == 0, fig
    slide(page, 3)  # the step switch still draws into its slots
    expect(page.locator("#replay-tree .fig-title")).to_contain_text("step 3:")


def test_a_row_click_answers_with_its_run_id_and_the_run_opened(tmp_path):
    """The runs table's select opens the run in the same answer as its id (one round trip, not two); a click on a
    row the table no longer has changes nothing."""
    import gradio as gr

    from workbench.store import Store
    from workbench.ui.replay_tab import OPEN_OUTPUTS, ReplayHandlers
    from workbench.ui.shared import TUNABLE, RunCache, runs_frame

    store = Store(str(tmp_path / "t.db"))
    rids = [store.save_run(make_run(), tags=["shared"]) for _ in range(2)]
    h = ReplayHandlers(store, None, RunCache(store))
    frame = runs_frame(store)  # newest first
    out = h.open_row(None, frame, gr.SelectData(None, {"index": [1, 0], "value": rids[0]}))
    assert len(out) == 1 + OPEN_OUTPUTS and out[0] == rids[0] and out[-1] == rids[0]
    assert out[2] == f"loaded run #{rids[0]}"
    data = out[2 + len(TUNABLE) + 2]  # after the id, the slider, the status, the tuning sliders and the rule
    assert data["run"] == rids[0] and len(data["steps"]) == STEPS
    same = h.open(None, rids[0])  # what Load run answers for the id
    assert [type(o) for o in out[1:]] == [type(o) for o in same] and out[1 + len(TUNABLE) + 4] == same[len(TUNABLE) + 4]
    assert h.open_row(None, frame, gr.SelectData(None, {"index": [5, 0], "value": None})) == (gr.update(),) * (
        1 + OPEN_OUTPUTS
    )


def test_the_step_figures_fill_their_boxes_with_no_blank_band_above_the_node_table(replay):
    """The figure boxes are as tall as the run's tallest figure (a CSD gate panel, 220 px, on a few steps); a step
    without the gate, or with no drafts, drew a shorter figure and left 250-340 px blank above the node table."""
    from browser_util import boxes, shot_between
    from playwright.sync_api import expect

    page, _, _ = replay
    for k in (1, 7, 10):  # no gate node; no drafts at all; a gate node
        slide(page, k)
        expect(page.locator("#replay-tree .fig-title")).to_contain_text(f"step {k}:")
        figs = boxes(page, "#replay-tree svg.replay-fig") + boxes(page, "#replay-thresholds svg.replay-fig")
        slots = boxes(page, "#replay-tree .replay-slot") + boxes(page, "#replay-thresholds .replay-slot")
        table = boxes(page, "#replay-nodes")[0]
        for fig, slot in zip(figs, slots):
            views = page.evaluate(
                "() => Array.from(document.querySelectorAll('svg.replay-fig')).map((e) => e.getAttribute('viewBox'))"
            )
            assert slot["h"] - fig["h"] < 12, (k, fig, slot, views)  # each figure fills its box
        blank = table["y"] - max(f["y"] + f["h"] for f in figs)
        assert blank < 50, (k, blank)  # Gradio's gap between rows, not a band
        shot_between(page, f"replay-figures-fill-step{k}", "#replay-info", "#replay-nodes")


def test_no_blank_band_between_the_node_table_and_the_run_figures(replay):
    """Seventh newcomer pass: the node table's box kept a 16-node tree's height (392 px) on a run of a few nodes per
    step, a large blank gap above the acceptance figures. Fourteenth: a box fitted to the run's largest step left
    ~250 px blank under a 2-node step's table after sliding down from a 15-node step. The box follows each step."""
    from browser_util import boxes
    from playwright.sync_api import expect

    page, _, trace = replay
    sizes = [len(s.nodes) for s in trace.steps]
    largest, smallest = sizes.index(max(sizes)), sizes.index(min(sizes))
    assert max(sizes) >= 3 * min(sizes), sizes  # the run has steps far apart in size, or this test shows nothing
    for k in (largest, smallest, largest, smallest):  # down from the largest step and back up
        slide(page, k)
        expect(page.locator("#replay-tree .fig-title")).to_contain_text(f"step {k}:")
        table, slot = boxes(page, "#replay-nodes table")[0], boxes(page, "#replay-nodes .replay-slot")[0]
        figures = boxes(page, "#replay-run-figures")[0]
        assert slot["h"] - table["h"] < 20, (k, sizes[k], table, slot)  # the step's table fills its box
        assert figures["y"] - (slot["y"] + slot["h"]) < 60, (k, slot, figures)  # Gradio's gap, not a band
        assert slot["h"] < 392 - 100 or sizes[k] > 8, slot


def local_run(method: str, steps: list[StepTrace]) -> RunTrace:
    """A complete run of `method` made of `steps`, on a model this server does not have (browser_util.synthetic_run)."""
    return synthetic_run(method, steps, model="synthetic")


def long_text_run(steps: int = 20) -> RunTrace:
    """Steps that each emit one 40-character token (a root and a bonus only): ~800 characters, several lines."""
    out = []
    for i in range(steps):
        nodes = [
            NodeTrace(i, 10 + i, 0, -1, 0, 100, "x", "root", "accepted", "root"),
            NodeTrace(i, 10 + i, 1, 0, 1, 1000 + i, f" word{i:02d}" + "-abcdefgh" * 4, "model", "bonus", "own", p=0.7),
        ]
        out.append(StepTrace(i, 10 + i, 0, 0, [1000 + i], draft_ms=0.5, forward_ms=10.0, nodes=nodes))
    return local_run("greedy", out)


def load(page, rid, method):
    from playwright.sync_api import expect

    page.locator("#replay-run-id input").fill(str(rid))
    page.get_by_role("button", name="Load run").click()
    expect(page.locator("#replay-info")).to_contain_text(f"run #{rid} · {method} · step 0")


def test_the_text_box_is_as_tall_as_the_text_shown_so_far(app, replay):
    """At step 0 the box held one line of text over the height of the whole run's text (~100 px blank)."""
    from browser_util import shot_between
    from playwright.sync_api import expect

    page, rid, _ = replay
    long = app[0].store.save_run(long_text_run(), tags=["shared"])

    def blank():  # px of the text box under its last shown token, and the line height
        return page.evaluate("""() => { const shown = document.querySelector('#replay-text span.replay-shown');
            const box = shown.parentElement, toks = shown.querySelectorAll('span.tok');
            const last = toks[toks.length - 1].getBoundingClientRect();
            return [box.getBoundingClientRect().bottom - last.bottom, parseFloat(getComputedStyle(box).lineHeight),
                    box.getBoundingClientRect().height]; }""")

    try:
        load(page, long, "greedy")
        under, line, h0 = blank()
        shot_between(page, "replay-text-step0", "#replay-info", "#replay-tree")
        slide(page, 19)
        expect(page.locator("#replay-info")).to_contain_text("step 19 (of 0–")
        under_end, _, h_end = blank()
        assert h_end > 3 * line, (h_end, line)  # the whole text takes several lines here: the test can fail
        assert under < line, (under, line, h0)  # step 0: no blank lines under its one line
        assert under_end < line, (under_end, line, h_end)
    finally:
        load(page, rid, MODULE_RUN)


def test_the_flips_table_shows_each_reason_whole(app, replay):
    """The reason column ran past the table's right edge and was cut off (a 1400 px wide window)."""
    from browser_util import fill_number, shot, table_rows

    from workbench.ui import replay_view as rv
    from workbench.ui.shared import PARAMS

    page, rid, _ = replay
    chain = app[0].store.save_run(long_chain_run(), tags=["shared"])
    page.set_viewport_size({"width": 1400, "height": 1100})  # the newcomer's window
    try:
        load(page, chain, "pld")
        choose_rule(page, "aasd")
        fill_number(page, "#tune-alpha", 0)
        fill_number(page, "#tune-beta", 0.001234)  # θ = 0.001234 < p = 0.01234: the chain's nodes flip
        rows = table_rows(page, "#tune-flips")
        assert rows and any("θ 0.001234" in " ".join(r) for r in rows), rows
        cut = page.evaluate("""() => { const table = document.querySelector('#tune-flips').getBoundingClientRect();
            return Array.from(document.querySelectorAll('#tune-flips [role=gridcell]')).filter((c) => {
              const r = c.getBoundingClientRect();
              return c.textContent.trim() && (r.right > table.right + 1 || c.scrollWidth > c.clientWidth + 1);
            }).map((c) => c.textContent.trim()); }""")
        shot(page, "replay-flips-reason", "#tune-flips")
        assert cut == [], cut
        # The table's fixed height cut its third row of three, reasons of three lines (the twelfth pass); here, of two
        # lines, it cut the fourth: the first five rows show whole, inside the box that scrolls. Mutation caught:
        # max_height back to 260.
        hidden = page.evaluate("""() => {
            const cells = Array.from(document.querySelectorAll('#tune-flips [role=gridcell]'));
            const scroller = (el) => { for (let e = el.parentElement; e; e = e.parentElement) {
                const o = getComputedStyle(e).overflowY; if ((o === 'auto' || o === 'scroll') && e.scrollHeight > e.clientHeight) return e; }
                return document.querySelector('#tune-flips'); };
            const rows = [...new Set(cells.map((c) => c.closest('tr') || c.parentElement))].slice(0, 5);
            return rows.filter((r) => { const box = scroller(r).getBoundingClientRect(), b = r.getBoundingClientRect();
                return b.bottom > box.bottom + 1 || b.top < box.top - 1; }).map((r) => r.textContent.trim().slice(0, 40)); }""")
        assert len(rows) >= 5 and hidden == [], (len(rows), hidden)
    finally:
        fill_number(page, "#tune-alpha", PARAMS["alpha"].default)
        fill_number(page, "#tune-beta", PARAMS["beta"].default)
        choose_rule(page, rv.OWN_RULE)
        page.set_viewport_size({"width": 1500, "height": 1100})
        load(page, rid, MODULE_RUN)


def long_chain_run() -> RunTrace:
    """One step drafting a 10-token chain copied from a system prompt, all rejected (the tree of 40-crop-tree.png)."""
    words = ["You", " are", " a", " helpful", " AI", " assistant", " named", " Sm", "ol", "LM"]
    nodes = [NodeTrace(0, 10, 0, -1, 0, 100, "\n", "root", "accepted", "root")]
    for d, w in enumerate(words, start=1):
        decision = "rejected" if d == 1 else "unreached"
        nodes.append(
            NodeTrace(
                0,
                10,
                d,
                d - 1,
                d,
                200 + d,
                w,
                "context",
                decision,
                "p < δ",
                p=0.01234,
                threshold=0.1077,
                entropy=1.5,
                max_p=0.9,
                p_eos=0.001,
                rank=3,
                logit_gap=2.0,
            )
        )
    nodes.append(NodeTrace(0, 10, len(nodes), 0, 1, 300, "The", "model", "bonus", "the target's own token", p=0.7))
    step = StepTrace(0, 10, len(words), 0, [300], draft_ms=0.5, forward_ms=10.0, nodes=nodes)
    return local_run("pld", [step])


def test_labels_on_a_long_chain_do_not_run_into_each_other(app, replay):
    """On a 10-deep chain each label had 14 characters and ran into the next node's ("assist|t name")."""
    from browser_util import overlap, shot

    page, rid, _ = replay
    chain = app[0].store.save_run(long_chain_run(), tags=["shared"])
    try:
        load(page, chain, "pld")
        nodes = page.evaluate("""() => Array.from(document.querySelectorAll('#replay-tree g.node')).map((g) => {
            const r = (e) => { const b = e.getBoundingClientRect(); return {x: b.x, y: b.y, w: b.width, h: b.height}; };
            return {text: r(g.querySelector('text')), mark: r(g.querySelector('polygon, circle'))}; })""")
        assert len(nodes) == 12
        for i, a in enumerate(nodes):
            for j, b in enumerate(nodes):
                if i < j:
                    assert not overlap(a["text"], b["text"]), (i, j, a, b)
                if i != j:
                    assert not overlap(a["text"], b["mark"]), (i, j, a, b)
        shot(page, "replay-long-chain-tree", "#replay-tree")
    finally:
        load(page, rid, MODULE_RUN)


def wide_gated_run() -> RunTrace:
    """Two steps of a 16-node tree under the root, every draft node judged by CSD's gate (no probability threshold
    line), the rejected ones with p = 1e-4 and entropies of ~0.01 nats (a quarter of the axis printed 0.00, 0.00, ...)."""
    steps = []
    for i in range(2):
        nodes = [NodeTrace(i, 10 + i, 0, -1, 0, 100, " r", "root", "accepted", "root")]
        for j in range(1, 17):
            ok = j == 1
            nodes.append(
                NodeTrace(
                    i, 10 + i, j, 0, 1, 200 + j, f" w{j}", "context", "accepted" if ok else "rejected",
                    "gate", p=0.9 if ok else 1e-4, threshold=0.3, entropy=0.005 + j / 2000, max_p=0.9, p_eos=0.0,
                    rank=0 if ok else 9, logit_gap=0.0 if ok else 5.0, mem_count=1, correction_id=None if ok else 17,
                )
            )  # fmt: skip
        nodes.append(NodeTrace(i, 10 + i, 17, 1, 2, 500, " b", "model", "bonus", "own", p=0.7, entropy=0.4))
        steps.append(StepTrace(i, 10 + i, 16, 1, [201, 500], draft_ms=0.5, forward_ms=10.0, nodes=nodes))
    return local_run("csd", steps)


def test_a_16_node_step_reads_without_inner_scrolls_and_its_thresholds_chart_is_legible(app, replay):
    """Fourth newcomer pass: the node table showed ~4 rows (the bonus row behind an inner scroll); the thresholds
    chart printed quarter-of-the-top ticks (1.05, 0.79, ...; 0.01, 0.01, 0.00, 0.00), a "threshold" legend key with
    no line drawn (CSD: every node is the gate's), and a rejected node's p of 1e-4 as no bar; the header read
    "step 0 of 0–1"."""
    page, _, _ = replay
    rid = app[0].store.save_run(wide_gated_run(), tags=["shared"])
    load(page, rid, "csd")
    seen = page.evaluate("""() => {
      const slot = document.querySelector('#replay-nodes .replay-slot');
      const svg = document.querySelector('#replay-thresholds svg.replay-fig');
      const ticks = Array.from(svg.querySelectorAll('text[dy="4"]'));
      return {
        rows: slot.querySelectorAll('tbody tr').length, scroll: slot.scrollHeight - slot.clientHeight,
        left: ticks.filter((t) => t.getAttribute('text-anchor') === 'end').map((t) => t.textContent),
        right: ticks.filter((t) => t.getAttribute('text-anchor') === 'start').map((t) => t.textContent),
        texts: Array.from(svg.querySelectorAll('text')).map((t) => t.textContent),
        bars: Array.from(svg.querySelectorAll('g.bar rect')).map((r) => Number(r.getAttribute('height'))),
        info: document.querySelector('#replay-info [data-testid=markdown]').textContent,
      };
    }""")
    assert seen["rows"] == 18 and seen["scroll"] <= 1, seen  # root, 16 nodes and the bonus, no inner scroll
    assert seen["left"][:3] == ["0.0", "0.5", "1.0"], seen["left"]  # p; then the gate panel's logit gap
    assert len(set(seen["left"][3:])) == len(seen["left"][3:]), seen["left"]
    assert len(set(seen["right"])) == len(seen["right"]) >= 3, seen["right"]
    assert "threshold" not in seen["texts"] and "entropy (nats)" in seen["texts"]
    assert len(seen["bars"]) == 16 and min(seen["bars"]) >= 2, seen["bars"]
    assert any("a p under 1% is drawn as a 2 px bar" in t for t in seen["texts"])
    assert f"run #{rid} · csd · step 0 (of 0–1) ·" in seen["info"]


def test_the_runs_table_writes_mal_with_two_decimals(app, replay):
    """Greedy's MAL showed as "1" in the runs table while its Compare column said "1.00" (the twelfth pass).
    Mutation caught: the runs table given runs_frame itself (no shown_runs)."""
    from browser_util import table_rows

    page, _, _ = replay
    rid = app[0].store.save_run(long_text_run(), tags=["shared"])
    mal = app[0].store.load_run(rid, nodes=False).metrics["mal"]
    assert mal == 1.0  # greedy: one token per step, the value that printed as "1"
    from playwright.sync_api import expect

    page.locator("#replay-refresh").click()
    expect(page.locator("#replay-runs")).to_contain_text("1.00")
    rows = {r[0]: r for r in table_rows(page, "#replay-runs")}
    assert rows[str(rid)][4:6] == ["20", "1.00"], rows[str(rid)]


def test_figures_are_not_cut_after_the_window_narrows_on_another_tab(replay):
    """Nineteenth newcomer pass, minor: the window was made narrower while Compare was shown; back on Replay, the run
    figures (Plotly) kept the width they were drawn at and were cut at the right. Plotly follows a window resize only
    while its figure is shown, so opening a tab now tells the page to lay its figures out again (builder.PAGE_JS).
    The step figures' boxes follow their figures' height at the new width (no band left blank under a figure drawn
    smaller). Mutations caught: PAGE_JS without the resize on a tab's opening; replay_js without its refit."""
    page, _, _ = replay
    slide(page, 10)

    def cut() -> list:
        return page.evaluate("""() => {
          const out = [];
          for (const id of ['replay-tree', 'replay-thresholds']) {
            const slot = document.querySelector(`#${id} .replay-slot`), svg = slot.querySelector('svg');
            const s = slot.getBoundingClientRect(), f = svg.getBoundingClientRect();
            // cut, or a blank band under it: the box follows the figure's height at the new width (replay_js)
            if (f.bottom > s.bottom + 1 || f.right > s.right + 1 || s.height - f.height > 12) {
              out.push([id, f.right - s.right, f.bottom - s.bottom, s.height - f.height]);
            }
          }
          for (const plot of document.querySelectorAll('#replay-run-figures .js-plotly-plot')) {
            const box = plot.closest('.block').getBoundingClientRect(), svg = plot.querySelector('svg.main-svg');
            const p = svg.getBoundingClientRect();
            if (p.right > box.right + 1 || p.bottom > box.bottom + 1) out.push([plot.closest('[id]').id, p.right - box.right]);
          }
          return out;
        }""")

    try:
        for width in (1024, 800, 1500):
            page.get_by_role("tab", name="Compare").click()
            page.set_viewport_size({"width": width, "height": 1100})
            page.get_by_role("tab", name="Replay & tune").click()
            page.locator("#replay-tree svg.replay-fig").wait_for()
            page.wait_for_timeout(800)  # Plotly's own resize is debounced
            assert cut() == [], (width, cut())
    finally:
        page.set_viewport_size({"width": 1500, "height": 1100})


def test_a_long_variant_label_leaves_every_runs_column_in_view(app, replay):
    """Twentieth newcomer pass, minor: a re-run's label (aasd[alpha=0.008,beta=0.003,alpha_alignment=0.1,
    beta_alignment=0.3]) widened the method column and pushed "created" out of the runs table's view. The label now
    is cut (shared.short_label; the header gives it whole), so rows stay one line and the table shows as many runs.
    Twenty-first pass, minor: at a 1024 px window "created" still needed a sideways scroll; the columns now have shares
    of the table's width (shared.RUN_COLUMN_WIDTHS). Mutations caught: the table without column_widths ("created" out
    of view), "created" with seconds (clipped), tok/s at 6 % (its name clipped)."""
    from browser_util import shot
    from playwright.sync_api import expect

    page, _, _ = replay
    params = {"alpha": 0.008, "beta": 0.003, "alpha_alignment": 0.1, "beta_alignment": 0.3}
    rid = app[0].store.save_run(
        synthetic_run("aasd", [make_step(0, 10)], params=params, model="qwen2.5-coder-1.5b", status="cancelled"),
        ["shared"],
    )
    page.get_by_role("tab", name="Compare").click()
    page.get_by_role("tab", name="Replay & tune").click()  # opening the tab lists the runs
    expect(page.locator("#replay-runs")).to_contain_text("aasd[alpha=0.008,beta=0.003,alpha_a…")
    try:
        for width in (1500, 1024):  # 1024: the twenty-first pass's window, where "created" still needed a scroll
            page.set_viewport_size({"width": width, "height": 1100})
            page.wait_for_timeout(400)
            seen = page.evaluate("""() => {
              const table = document.querySelector('#replay-runs'), box = table.getBoundingClientRect();
              const heads = Array.from(table.querySelectorAll('thead th')).map((th) => [th.textContent.trim(), th.getBoundingClientRect().right]);
              const rows = Array.from(table.querySelectorAll('[role=gridcell]')).map((td) => td.getBoundingClientRect().height);
              const names = Array.from(table.querySelectorAll('thead th')).map((th) => th.textContent.trim().split(/\\s/)[0]);
              const clipped = Array.from(table.querySelectorAll('[role=row]')).flatMap((row) =>
                Array.from(row.querySelectorAll('[role=gridcell]')).map((cell, i) => [names[i], cell])).filter(([name, cell]) =>
                  ['model', 'status', 'created'].includes(name) && Array.from(cell.querySelectorAll('*')).concat([cell]).some(
                    (e) => e.scrollWidth > e.clientWidth)).map(([name, cell]) => name + ': ' + cell.textContent.trim()).concat(
                Array.from(table.querySelectorAll('thead th')).filter((th) => Array.from(th.querySelectorAll('*')).some(
                  (e) => e.scrollWidth > e.clientWidth)).map((th) => 'head ' + th.textContent.trim()));
              return {right: box.right, heads, tallest: Math.max(...rows), page: document.documentElement.scrollWidth, view: innerWidth, clipped};
            }""")
            created = [right for text, right in seen["heads"] if text.startswith("created")]
            assert created and created[0] <= seen["right"] + 1, (width, rid, seen)
            assert seen["page"] <= seen["view"], (width, seen)  # nor is the page wider than the window
            assert seen["tallest"] < 60, (width, seen)  # and rows stay one line: tall rows hid runs (05301c9)
            # and a model, status, time or column name shows whole
            assert seen["clipped"] == [], (width, seen["clipped"])
            if width == 1024:
                shot(page, "replay-runs-long-label", "#replay-runs")
    finally:
        page.set_viewport_size({"width": 1500, "height": 1100})


def test_a_row_click_draws_no_cell_ring_or_handles(replay):
    """Twenty-first newcomer pass, minor: a click on a run's row drew Gradio's ring round the clicked cell (on its text
    span in Gradio 6, the theme's orange) and move handles beside it, covering the next cell and reading as an editable cell. Mutation
    caught: builder.CSS without its two rules for Gradio 6."""
    page, _, _ = replay
    page.locator("#replay-runs [role=gridcell]").first.click()
    page.wait_for_timeout(500)
    seen = page.evaluate("""() => ({
      rings: Array.from(document.querySelectorAll('#replay-runs *')).filter(
        (e) => /inset/.test(getComputedStyle(e).boxShadow) && /249, 115, 22/.test(getComputedStyle(e).boxShadow)).length,
      handles: Array.from(document.querySelectorAll('#replay-runs .selection-button')).filter(
        (e) => e.getBoundingClientRect().width > 0).length,
    })""")
    assert seen == {"rings": 0, "handles": 0}, seen
