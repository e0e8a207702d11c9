"""The UI's pure rendering on hand-built traces: token origins and HTML (workbench/ui/tokens.py), divergence, and the
step and run figures (workbench/ui/figures/)."""

from __future__ import annotations

import html
import json
import math
import re

import pytest

from core.stats import first_divergence
from core.trace import NodeTrace, RunTrace, StepTrace
from workbench.ui.figures.analytics import (
    accept_by_depth_figure,
    accept_by_source_figure,
    accept_hist_figure,
    runs_bar_figure,
    sweep_figure,
)
from workbench.ui.figures.common import DECISION_COLORS, NO_RUNS, SOURCE_SYMBOLS, run_label
from workbench.ui.figures.replay import position_figure, threshold_figure, tree_figure, tree_layout
from workbench.ui.tokens import (
    ORIGIN_COLORS,
    align,
    diff_counts,
    emitted_nodes,
    flip_title,
    legend_html,
    step_origins,
    token_diff_html,
    token_origins,
    tokens_html,
)


def node(step, i, parent, depth, tok, text, source, decision, **kw) -> NodeTrace:
    return NodeTrace(
        step=step,
        cache_pos=10,
        node=i,
        parent=parent,
        depth=depth,
        token_id=tok,
        token_text=text,
        source=source,
        decision=decision,
        reason=kw.pop("reason", f"{decision} by test"),
        **kw,
    )


def aasd_step(index: int = 0) -> StepTrace:
    """Root -> 1 (context, accepted) -> 3 (alignment, accepted) -> 5 (generated, rejected); 1's sibling 2
    (alignment, rejected) with an unreached child 4; bonus 6 under 3."""
    nodes = [
        node(index, 0, -1, 0, 100, "The", "root", "accepted"),
        node(
            index,
            1,
            0,
            1,
            101,
            " cat",
            "context",
            "accepted",
            p=0.8,
            threshold=0.3,
            entropy=1.2,
            max_p=0.8,
            p_eos=0.01,
            rank=0,
            logit_gap=0.0,
        ),
        node(index, 2, 0, 1, 102, " dog", "alignment", "rejected", p=0.1, threshold=0.3, entropy=1.2, max_p=0.8),
        node(index, 3, 1, 2, 103, " sat", "alignment", "accepted", p=0.6, threshold=0.25, entropy=0.9, max_p=0.6),
        node(index, 4, 2, 2, 104, " ran", "context", "unreached", p=0.05, threshold=0.2, entropy=2.0),
        node(index, 5, 3, 3, 105, " on", "generated", "rejected", p=0.2, threshold=0.4, entropy=1.5),
        node(index, 6, 3, 3, 106, " down", "model", "bonus", p=0.7, entropy=1.5, max_p=0.7),
    ]
    return StepTrace(index=index, cache_pos=10, tree_size=5, accepted=2, emitted=[101, 103, 106], nodes=nodes)


def csd_step(index: int = 1) -> StepTrace:
    """A draft chain: 1 accepted, 2 rescued (count 3, τ 0.3), 3 rejected (correction 11); bonus 11 under 2."""
    nodes = [
        node(index, 0, -1, 0, 106, " down", "root", "accepted"),
        node(index, 1, 0, 1, 7, "<script>", "draft", "accepted", p=0.9, entropy=0.4, draft_p=0.8),
        node(
            index,
            2,
            1,
            2,
            8,
            "\n",
            "draft",
            "rescued",
            p=0.3,
            entropy=1.1,
            threshold=0.3,
            logit_gap=0.5,
            correction_id=9,
            mem_count=3,
            draft_p=0.7,
        ),
        node(
            index,
            3,
            2,
            3,
            10,
            " x",
            "draft",
            "rejected",
            p=0.05,
            entropy=2.2,
            threshold=0.3,
            logit_gap=2.0,
            correction_id=11,
            mem_count=0,
            draft_p=0.6,
        ),
        node(index, 4, 2, 3, 11, " y", "model", "bonus", p=0.6),
    ]
    return StepTrace(index=index, cache_pos=13, tree_size=3, accepted=2, emitted=[7, 8, 11], nodes=nodes)


def make_run(method: str, steps: list[StepTrace], **kw) -> RunTrace:
    ids = [t for s in steps for t in s.emitted]
    return RunTrace(
        method=method,
        params={},
        model="m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p",
        prompt_ids=[1, 2],
        output_ids=ids,
        steps=steps,
        decode_seconds=1.0,
        **kw,
    )


def spans(html_text: str) -> list[str]:
    return re.findall(r"<span class=\"tok [^>]*>.*?</span>", html_text, flags=re.S)


# ---------------------------------------------------------------- origins


def test_origins_follow_decisions_and_sources():
    run = make_run("aasd", [aasd_step(0), csd_step(1)])
    assert token_origins(run) == [
        (" cat", "context"),
        (" sat", "alignment"),
        (" down", "model"),
        ("<script>", "draft"),
        ("\n", "rescued"),
        (" y", "model"),
    ]


def test_path_is_walked_from_the_bonus_not_collected_by_decision():
    step = aasd_step()
    step.nodes[2].decision = "accepted"  # an off-path node a rule marked accepted must not be emitted
    assert [n.node for n in emitted_nodes(step)] == [1, 3, 6]


def test_emitted_cut_at_stop_is_respected():
    cut = aasd_step(0)
    cut.emitted = [101, 103]  # a stop string ended the output after " sat": the bonus was never emitted
    run = make_run("aasd", [cut])
    assert token_origins(run) == [(" cat", "context"), (" sat", "alignment")]


def test_runs_without_steps_are_model_tokens():
    run = make_run("hf-generate", [])
    run.output_ids, run.output_text = [5, 6], "ab"
    assert token_origins(run, decode=lambda t: chr(ord("a") + t - 5)) == [("a", "model"), ("b", "model")]
    assert token_origins(run) == [("ab", "model")]
    run.output_text = ""
    assert token_origins(run) == []


def test_steps_without_node_records_fall_back_to_model():
    step = aasd_step()
    step.nodes = []
    assert token_origins(make_run("aasd", [step]), decode=str) == [("101", "model"), ("103", "model"), ("106", "model")]


def test_step_origins_of_a_streaming_run_take_a_tokenizer():
    class Tokenizer:
        def decode(self, ids):
            return f"<{ids[0]}>"

    bare = aasd_step(1)
    bare.nodes = []
    assert step_origins([aasd_step(0), bare], Tokenizer()) == [
        (" cat", "context"),
        (" sat", "alignment"),
        (" down", "model"),
        ("<101>", "model"),
        ("<103>", "model"),
        ("<106>", "model"),
    ]


# ---------------------------------------------------------------- HTML


def test_tokens_html_escapes_and_colours():
    origins = token_origins(make_run("csd", [csd_step()]))
    out = tokens_html(origins)
    assert "<script>" not in out and "&lt;script&gt;" in out
    assert "white-space:pre-wrap" in out and ">\n</span>" in out  # the newline token stays a newline
    found = spans(out)
    assert len(found) == 3
    assert ORIGIN_COLORS["draft"] in found[0] and 'title="draft"' in found[0]
    assert ORIGIN_COLORS["rescued"] in found[1] and ORIGIN_COLORS["model"] in found[2]
    assert "border-left" not in out


def test_divergence_marker_and_upto():
    origins = [("a", "model"), ("b", "context"), ("c", "model")]
    found = spans(tokens_html(origins, first_divergence=1))
    assert [("border-left" in s) for s in found] == [False, True, False]
    assert "first divergence from greedy" in found[1]
    assert len(spans(tokens_html(origins, upto=2))) == 2
    assert "border-left" not in tokens_html(origins, first_divergence=2, upto=2)
    # The shorter output diverges at its end: a marker after the last token.
    end = tokens_html(origins, first_divergence=3)
    assert all("border-left" not in s for s in spans(end)) and "tok-divergence" in end
    assert "first divergence" in legend_html() and all(c in legend_html() for c in ORIGIN_COLORS.values())


@pytest.mark.parametrize(
    "a,b,expected",
    [
        ([1, 2, 3], [1, 2, 3], None),
        ([1, 2, 3], [1, 5, 3], 1),
        ([1, 2], [1, 2, 3, 4], 2),
        ([1, 2, 3], [1], 1),
        ([], [7], 0),
        ([], [], None),
        ([9], [8, 9], 0),
    ],
)
def test_first_divergence(a, b, expected):
    # core.stats.first_divergence is the one the UI marks in tokens_html (and the store's compare reports)
    assert first_divergence(a, b) == expected


def test_run_label():
    assert run_label(make_run("aasd", [])) == "aasd"
    assert run_label({"id": 12, "method": "aasd"}) == "#12 aasd"
    assert run_label({"run_id": 3, "method": "csd", "label": "mine"}) == "mine"
    assert run_label({"id": 4, "trace": make_run("pld", [])}) == "#4 pld"
    assert run_label(("#9 casd", make_run("casd", []))) == "#9 casd"

    class Stored:
        id, trace = 7, make_run("sd", [])

    assert run_label(Stored()) == "#7 sd"


# ---------------------------------------------------------------- the tree


def markers(fig):
    """node index -> (decision trace name, colour, symbol, hover) over the decision traces."""
    out = {}
    for tr in fig.data:
        if tr.name in DECISION_COLORS and tr.customdata is not None:
            for k, i in enumerate(tr.customdata):
                out[int(i)] = (tr.name, tr.marker.color, tr.marker.symbol[k], tr.hovertext[k])
    return out


def test_tree_figure_markers_colours_and_hover():
    step = aasd_step()
    fig = tree_figure(step)
    m = markers(fig)
    assert sorted(m) == [n.node for n in step.nodes]
    for n in step.nodes:
        decision = "root" if n.parent == -1 else n.decision
        assert m[n.node][0] == decision and m[n.node][1] == DECISION_COLORS[decision]
        assert m[n.node][2] == SOURCE_SYMBOLS[n.source]
    assert "p 0.8" in m[1][3] and "threshold 0.3" in m[1][3] and "accepted" in m[1][3]
    assert "entropy 1.2" in m[1][3] and "rank 0" in m[1][3]
    edges = [tr for tr in fig.data if tr.mode == "lines"]
    assert sum(len(tr.x) for tr in edges) == 3 * (len(step.nodes) - 1)
    path = next(tr for tr in edges if tr.name == "emitted path")
    assert len(path.x) == 3 * 3  # root->1->3->bonus
    assert len(fig.data) < 15  # a handful of traces, not one per node


def test_tree_layout_depth_and_leaf_spread():
    pos = tree_layout(aasd_step().nodes)
    assert {i: x for i, (x, _) in pos.items()} == {0: 0, 1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3}
    leaves = [pos[i][1] for i in (5, 6, 4)]
    assert leaves == [0.0, -1.0, -2.0]  # tree order, one unit apart, top down
    assert pos[3][1] == -0.5 and pos[0][1] == (pos[1][1] + pos[2][1]) / 2


def test_tree_figure_escapes_labels_and_handles_no_nodes():
    fig = tree_figure(csd_step())
    labels = [t for tr in fig.data if tr.text is not None for t in tr.text]
    assert "&lt;script&gt;" in labels and "↵" in labels
    empty = StepTrace(index=0, cache_pos=0, tree_size=0, accepted=0, emitted=[1])
    assert tree_figure(empty).layout.annotations[0].text == "no node records for this step"


def big_step(n: int = 64) -> StepTrace:
    nodes = [node(0, 0, -1, 0, 0, "r", "root", "accepted")]
    for i in range(1, n):
        parent = (i - 1) // 3
        nodes.append(
            node(
                0,
                i,
                parent,
                nodes[parent].depth + 1,
                i,
                f" t{i}",
                ("context", "alignment", "draft")[i % 3],
                ("accepted", "rejected", "unreached", "rescued")[i % 4],
                p=0.5,
                threshold=0.3,
                entropy=1.0,
                logit_gap=0.4,
                correction_id=i if i % 4 == 3 else None,
            )
        )
    nodes.append(node(0, n, 1, 2, 999, " b", "model", "bonus", p=0.9))
    return StepTrace(index=0, cache_pos=0, tree_size=n - 1, accepted=1, emitted=[1, 999], nodes=nodes)


def test_step_figures_of_64_nodes_draw_every_node_in_a_few_traces():
    # The replay redraws both figures per step switch: a trace per node made that slow (the timing is
    # benchmarks/bench_views.py); here, that every node is drawn and the trace count does not grow with the tree.
    step = big_step()
    tree = tree_figure(step)
    assert sorted(markers(tree)) == [n.node for n in step.nodes]
    assert len(tree.data) < 15
    thresholds = threshold_figure(step)
    drawn = sum(len(tr.x) for tr in bars(thresholds))
    assert drawn == len([n for n in step.nodes if n.parent != -1 and n.decision != "bonus"]) == 63
    assert len(thresholds.data) < 15
    for fig in (tree, thresholds):  # what Gradio sends: valid JSON with every trace
        assert len(json.loads(fig.to_json())["data"]) == len(fig.data)


# ---------------------------------------------------------------- thresholds


def bars(fig, row_axis="y"):
    return [tr for tr in fig.data if tr.type == "bar" and (tr.yaxis or "y") == row_axis]


def test_threshold_figure_has_every_draft_node():
    step = aasd_step()
    fig = threshold_figure(step)
    drawn = {x: (tr.name, y) for tr in bars(fig) for x, y in zip(tr.x, tr.y)}
    expected = [n for n in step.nodes if n.parent != -1 and n.decision != "bonus"]
    assert len(drawn) == len(expected) == 5
    assert all(
        drawn[f"{n.node}:{x}"] == (n.decision, n.p) for n, x in zip(expected, ["␣cat", "␣dog", "␣sat", "␣ran", "␣on"])
    )
    thresholds = next(tr for tr in fig.data if tr.name == "threshold")
    assert list(thresholds.y) == [0.3, 0.3, 0.25, 0.2, 0.4]
    entropy = next(tr for tr in fig.data if tr.name == "entropy (nats)")
    assert list(entropy.y) == [1.2, 1.2, 0.9, 2.0, 1.5] and entropy.yaxis == "y2"
    assert not any(tr.name == "−ln τ" for tr in fig.data)  # no CSD nodes, no gate panel


def test_threshold_figure_csd_gate_panel():
    fig = threshold_figure(csd_step(), tau=0.5)
    assert sum(len(tr.x) for tr in bars(fig)) == 3
    assert not any(tr.name == "threshold" for tr in fig.data)  # τ is no probability threshold
    gap = next(tr for tr in fig.data if tr.name == "logit gap")
    assert list(gap.y) == [None, 0.5, 2.0] and list(gap.marker.color) == [
        DECISION_COLORS["accepted"],
        DECISION_COLORS["rescued"],
        DECISION_COLORS["rejected"],
    ]
    limit = next(tr for tr in fig.data if tr.name == "−ln τ")
    # The accepted node has no recorded τ and takes the run's; the walk recorded τ = 0.3 on the others.
    assert list(limit.y) == pytest.approx([-math.log(0.5), -math.log(0.3), -math.log(0.3)])
    assert gap.yaxis == limit.yaxis != "y"


def test_threshold_figure_with_no_drafts():
    step = StepTrace(
        index=0,
        cache_pos=0,
        tree_size=0,
        accepted=0,
        emitted=[5],
        nodes=[node(0, 0, -1, 0, 4, "a", "root", "accepted"), node(0, 1, 0, 1, 5, "b", "model", "bonus")],
    )
    assert threshold_figure(step).layout.annotations[0].text == "this step drafted no tokens"


# ---------------------------------------------------------------- analytics


def test_accept_hist_counts_steps_by_length():
    a = make_run("aasd", [aasd_step(0), csd_step(1)])
    a.steps[1].emitted = [7]
    b = {"id": 3, "method": "greedy", "accept_lengths": [1, 1, 1]}
    fig = accept_hist_figure([a, b])
    series = {tr.name: dict(zip(tr.x, tr.y)) for tr in fig.data}
    assert series == {"aasd": {1: 1, 2: 0, 3: 1}, "#3 greedy": {1: 3, 2: 0, 3: 0}}


def test_accept_by_depth_counts_verified_nodes():
    run = make_run("aasd", [aasd_step(0), csd_step(1)])
    (tr,) = accept_by_depth_figure([run]).data
    # depth 1: 1, 2 (aasd) + 1 (csd) -> 2 of 3; depth 2: 3 (4 unreached) + 2 rescued -> 2 of 2; depth 3: 0 of 2.
    assert list(tr.x) == [1, 2, 3]
    assert list(tr.y) == pytest.approx([2 / 3, 1.0, 0.0])
    assert [list(c) for c in tr.customdata] == [[2, 3], [2, 2], [0, 2]]
    assert accept_by_depth_figure([run]).layout.yaxis.title.text == "node acceptance: accepted ÷ judged"


def test_accept_by_source_and_duplicate_labels():
    runs = [make_run("aasd", [aasd_step(0)]), make_run("aasd", [csd_step(1)])]
    fig = accept_by_source_figure(runs)
    assert [tr.name for tr in fig.data] == ["aasd", "aasd (2)"]
    first = dict(zip(fig.data[0].x, fig.data[0].y))
    assert first == pytest.approx({"alignment": 0.5, "context": 1.0, "generated": 0.0})
    assert dict(zip(fig.data[1].x, fig.data[1].y)) == pytest.approx({"draft": 2 / 3})


def test_a_source_judged_and_never_accepted_is_labelled_0_percent():
    """Issue 33 (first ten minutes), 1: a source whose judged nodes were all rejected drew no bar and no label, which
    read as "no data"; every bar now says its rate, outside the bar (Plotly drops 'auto' and 'inside' text on a
    zero-height bar), and a source with no judged node (only unreached ones) stays out."""
    from workbench.ui.figures.analytics import restyled

    step = aasd_step(0)
    step.nodes.append(node(0, 7, 2, 2, 107, " ran", "recycled", "unreached"))
    (bars,) = accept_by_source_figure([("#5 aasd", make_run("aasd", [step]))]).data
    assert dict(zip(bars.x, bars.text)) == {"alignment": "50%", "context": "100%", "generated": "0%"}
    assert bars.textposition == "outside" and "recycled" not in bars.x
    # all zero: the label still has room (restyled's headroom over the tallest bar made the axis [0, 0])
    only_zero = make_run("aasd", [StepTrace(0, 10, 1, 0, [105], nodes=[step.nodes[0], step.nodes[5]])])
    fig = restyled(accept_by_source_figure([("#6 aasd", only_zero)]), {"#6 aasd": "#123456"})
    assert list(fig.data[0].text) == ["0%"] and fig.layout.yaxis.range[1] >= 1
    # Replay's per-position bars say "accepted/offered" outside the bar for the same reason
    position = position_figure(make_run("aasd", [aasd_step(0)])).data[0]
    assert position.textposition == "outside" and list(position.text)[-1] == "0/1"


def test_label_trace_pairs_are_accepted():
    run = make_run("aasd", [aasd_step(0), csd_step(1)])
    fig = accept_by_depth_figure([("#5 aasd", run)])
    assert fig.data[0].name == "#5 aasd" and list(fig.data[0].y) == pytest.approx([2 / 3, 1.0, 0.0])
    assert accept_hist_figure([("#5 aasd", run)]).data[0].name == "#5 aasd"
    assert list(runs_bar_figure([("#5 aasd", run)]).data[0].y) == [3.0]


def test_sweep_pools_runs_per_method_and_value():
    def run(method, delta, lengths):
        r = make_run(method, [])
        r.params, r.external_accept_lengths = {"delta": delta}, lengths
        return r

    runs = [
        run("casd", 0.1, [3, 3]),
        run("casd", 0.1, [1, 1]),
        run("casd", 0.05, [4]),
        run("aasd", 0.1, [2]),
        make_run("greedy", [aasd_step()]),
    ]  # greedy has no δ, and aasd takes none (a stored δ in its params is not its): both left out
    fig = sweep_figure(runs, "delta")
    lines = {tr.name: (list(tr.x), list(tr.y), list(tr.customdata)) for tr in fig.data}
    assert lines == {"casd": ([0.05, 0.1], [4.0, 2.0], [1, 2])}
    assert sweep_figure(runs[-1:], "delta").layout.annotations[0].text == "no selected run has the parameter 'delta'"
    assert sweep_figure([], "delta").layout.annotations[0].text == NO_RUNS


def test_runs_bar_from_rows():
    rows = [
        {"id": 1, "method": "greedy", "mal": 1.0, "tps": 20.0},
        {"id": 2, "method": "aasd", "metrics": {"mal": 2.5, "tps": 41.0}},
        {"label": "hf", "mal": None, "tps": 18.0},
    ]
    fig = runs_bar_figure(rows)
    mal, tps = fig.data
    assert list(mal.x) == ["#1 greedy", "#2 aasd", "hf"]
    assert list(mal.y) == [1.0, 2.5, None] and list(tps.y) == [20.0, 41.0, 18.0]
    assert mal.xaxis != tps.xaxis


@pytest.mark.parametrize(
    "figure", [accept_hist_figure, accept_by_depth_figure, accept_by_source_figure, runs_bar_figure]
)
def test_empty_inputs_give_an_annotated_figure(figure):
    for empty in ([], None):
        fig = figure(empty)
        assert fig.layout.annotations[0].text == NO_RUNS and not fig.data
    fig.to_json()


def test_runs_without_node_records_say_so():
    hf = make_run("hf-generate", [])
    # one run (Replay's panel) says "this run"; several, "the selected runs" (the twenty-first newcomer pass)
    assert accept_by_depth_figure([hf]).layout.annotations[0].text == "no judged draft nodes in this run"
    assert accept_by_depth_figure([hf, hf]).layout.annotations[0].text == "no judged draft nodes in the selected runs"
    assert accept_hist_figure([hf]).layout.annotations[0].text == "no step lengths in the selected runs"
    hf.external_accept_lengths = [1, 3]
    assert dict(zip(accept_hist_figure([hf]).data[0].x, accept_hist_figure([hf]).data[0].y)) == {1: 1, 2: 0, 3: 1}


# ---------------------------------------------------------------- token diff, positions, flips


def cells(html_text: str) -> list[tuple[str, str, str, str]]:
    """(classes, title, top token, bottom token) per position cell of token_diff_html."""
    return re.findall(
        r'<span class="(pair[^"]*)" title="([^"]*)"[^>]*><span class="side a"[^>]*>(.*?)</span>'
        r'<span class="side b"[^>]*>(.*?)</span></span>',
        html_text,
    )


def test_token_diff_aligns_replacements_and_marks_the_first_divergence():
    out = token_diff_html(
        [" the", " cat", " sat", "<b>"],
        [" the", " dog", " sat"],
        first_divergence([1, 2, 3, 4], [1, 5, 3]),
        ("#1 greedy", "#2 aasd"),
    )
    found = cells(out)
    assert [c[0] for c in found] == ["pair same", "pair differ first", "pair same", "pair deleted"]
    assert [(c[2], c[3]) for c in found] == [("␣the", "␣the"), ("␣cat", "␣dog"), ("␣sat", "␣sat"), ("&lt;b&gt;", "·")]
    assert found[1][1].startswith("#1 greedy token 1 · #2 aasd token 1: #1 greedy") and found[1][1].endswith(
        "(first divergence)"
    )
    assert "only #1 greedy has '<b>'" in html.unescape(found[3][1]) and "<b>" not in out
    assert "top #1 greedy" in out  # the key says which row is which run


def test_one_dropped_line_is_one_deletion_not_every_later_position_red():
    """Issue 33, item 8: aligned by position, one dropped line turned 43 of 64 positions red."""
    line = [" x", " =", " 1", "\n"]
    a = [f" w{i}" for i in range(6)] + line + [f" v{i}" for i in range(50)]
    b = [f" w{i}" for i in range(6)] + [f" v{i}" for i in range(50)]
    ids_a, ids_b = [hash(t) for t in a], [hash(t) for t in b]
    out = token_diff_html(a, b, first_divergence(ids_a, ids_b), ("A", "B"), ids=(ids_a, ids_b))
    kinds = [c[0] for c in cells(out)]
    assert kinds.count("pair same") == 56 and kinds.count("pair deleted") + kinds.count("pair deleted first") == 4
    assert kinds[6] == "pair deleted first" and "differ" not in kinds and "pair inserted" not in kinds
    assert diff_counts(align(ids_a, ids_b)) == {"replaced": 0, "deleted": 4, "inserted": 0}
    inserted = token_diff_html(b, a, first_divergence(ids_b, ids_a), ids=(ids_b, ids_a))
    assert [c[0] for c in cells(inserted)][6:10] == [
        "pair inserted first",
        "pair inserted",
        "pair inserted",
        "pair inserted",
    ]


@pytest.mark.parametrize("a,b", [([1, 2, 3], [1, 2, 3, 4]), ([5, 1, 2], [1, 2]), ([1, 2, 1, 2, 1, 2], [1, 2, 9, 1, 2])])
def test_alignment_starts_its_first_change_at_the_first_divergence(a, b):
    spans = align(a, b)
    changed = next(s for s in spans if s.tag != "equal")
    assert changed.a0 == changed.b0 == first_divergence(a, b)
    assert [t for s in spans for t in a[s.a0 : s.a1]] == a and [t for s in spans for t in b[s.b0 : s.b1]] == b


def test_token_diff_of_identical_outputs_has_no_red_cell():
    out = token_diff_html(["a", "b"], ["a", "b"], None)
    assert [c[0] for c in cells(out)] == ["pair same", "pair same"] and "differ" not in re.sub(
        r"tokdiff-key.*?</div>", "", out
    )


def test_position_figure_plots_accepted_over_offered_per_depth():
    run = make_run("aasd", [aasd_step(0), aasd_step(1)])
    fig = position_figure(run, "#4 aasd").to_plotly_json()
    bar = fig["data"][0]
    # depth 1: both steps offered judged nodes and accepted >= 1; depth 2 likewise; depth 3: offered, accepted 2 < 3
    assert list(bar["x"]) == [1, 2, 3] and list(bar["y"]) == [1.0, 1.0, 0.0]
    assert list(bar["text"]) == ["2/2", "2/2", "0/2"]
    assert (
        "#4 aasd" in fig["layout"]["title"]["text"] and fig["layout"]["yaxis"]["title"]["text"] == "accepted / offered"
    )
    empty = position_figure(make_run("greedy", []))
    assert "no judged draft nodes" in empty.layout.annotations[0].text


def test_a_lossless_flip_gets_its_own_class_and_title():
    origins = [("a", "model"), ("b", "context"), ("c", "model")]
    title = flip_title(1, {"gap": 0.0004, "dtype": "float32", "near_tie": True})
    assert title == "a lossless method left greedy's tokens at position 1: logit gap 0.0004 (float32), a near-tie"
    assert flip_title(2) == "a lossless method left greedy's tokens at position 2"
    found = spans(tokens_html(origins, first_divergence=1, marker_title=title, marker_class="tok-flip"))
    assert ["tok-flip" in s for s in found] == [False, True, False] and "position 1" in found[1]
    assert "tok-flip" not in tokens_html(origins, first_divergence=1)  # other methods keep the plain marker
