"""Issue 33, seventh newcomer pass: the prefill estimate after a Stop, the diff summary's first difference, errors
shown in Markdown, the CLI's cancelled run, replay's step label, the re-score's reason for no change."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


def _run(tokens: int, seconds: float, status: str, steps: int):
    return SimpleNamespace(prompt_ids=[0] * tokens, prefill_seconds=seconds, status=status, steps=[object()] * steps)


def test_a_prefill_cut_short_by_stop_is_not_observed(monkeypatch):
    """A 3,658-token prompt Stopped while reading (7 s of a 14 s read), then the same prompt: the estimate said 6.8 s,
    priced from the cut read. Only a whole read is observed: a complete run, or one that took a step."""
    from workbench import service

    monkeypatch.setattr(service, "cost_model", lambda target: None)
    target = SimpleNamespace(name="m", device="cpu", dtype="float32")
    clock = service.PrefillClock()
    clock.observe(target, _run(3658, 7.0, "cancelled", 0))  # Stopped mid-prompt
    assert clock.estimate(target, 3658) is None
    clock.observe(target, _run(3658, 14.0, "cancelled", 3))  # Stopped while decoding: its read was whole
    assert clock.estimate(target, 3658)[0] == pytest.approx(14.0)
    clock.observe(target, _run(3658, 7.0, "cancelled", 0))
    assert clock.estimate(target, 3658)[0] == pytest.approx(14.0)
    clock.observe(target, _run(3658, 13.0, "complete", 0))
    assert clock.estimate(target, 3658)[0] == pytest.approx(13.0)


def _trace(method: str, output_ids):
    from core.trace import RunTrace

    return RunTrace(
        method=method,
        params={},
        model="m",
        draft_model=None,
        device="cpu",
        dtype="float32",
        prompt="p",
        prompt_ids=[1],
        output_ids=list(output_ids),
        steps=[],
        decode_seconds=1.0,
    )


def test_the_diff_summary_names_both_tokens_at_the_first_difference():
    """greedy #385 vs aasd[auto] #386 parted at token 8 (greedy ':', aasd '␣for'); the alignment matched greedy's ':'
    further on, and the summary said "#385 greedy has no token there" against the divergence note's "greedy's `:`,
    here `␣for`". The summary names both runs' tokens at the first differing position; the alignment's insertion is
    said as what the alignment shows, never as "no token there"."""
    from workbench.ui.diff_tab import diff_outputs

    words_a, words_b = ["a", "b", ":", "c"], ["a", "b", "␣for", ":", "c"]
    a, b = _trace("greedy", [4, 5, 7, 8]), _trace("aasd", [4, 5, 9, 7, 8])
    head, _ = diff_outputs(385, a, [(t, "model") for t in words_a], 386, b, [(t, "model") for t in words_b])
    assert "first divergence at token 2" in head
    assert "#385 greedy `':'` (id 7)" in head and "#386 aasd `'␣for'` (id 9)" in head, head
    assert "no token there" not in head
    assert "shows this as `'␣for'` (id 9) only in #386 aasd, #385 greedy's `':'` (id 7) matched further on" in head


def test_an_error_in_markdown_keeps_its_stars():
    """τ = −5: the status read "…top token t, z(t) − z(x)… t\\*'s probability)**", t* turned into italics and a
    stray ** left. error_md escapes Markdown, so the rendered status is the message as written, in bold."""
    from markdown_it import MarkdownIt

    from core.errors import InvalidInputError
    from core.params import PARAMS, validate
    from workbench.ui.shared import error_md

    with pytest.raises(InvalidInputError) as caught:
        validate({"tau": -5}, {"tau": PARAMS["tau"]})
    html = MarkdownIt().render(error_md(caught.value))
    assert "<em>" not in html and "**" not in html, html
    assert html.count("<strong>") == 1 and "top token t*, z(t*) − z(x)" in html and "t*'s probability)" in html
    assert "&lt;|im_end|&gt;" in MarkdownIt().render(error_md("stops at <|im_end|>"))  # a tag is text, not HTML


def test_the_cli_says_a_cancelled_run_ended_where_it_was_stopped():
    """`store compare 407 409`, 409 cancelled: "run 409 has its end (step None)". The end of a cancelled run is said
    as its cancellation at its token count; no None leaks."""
    from workbench.commands.store import _said
    from workbench.store.compare import compare_traces

    done, stopped = _trace("greedy", [4, 5, 7, 8]), _trace("csd", [4, 5])
    done.status, stopped.status = "complete", "cancelled"
    result = compare_traces(done, stopped)
    assert _said(result, "b") == "its end (it was cancelled at token 2)"
    assert "None" not in _said(result, "a") and "(id 7)" in _said(result, "a")
    stopped.status = "complete"
    assert _said(compare_traces(done, stopped), "b") == "its end"


def test_replays_step_label_counts_as_the_slider_does():
    """ "step 10 of 26" for a 27-step run, "step 0 of 72" for a 73-step run: read as one step short. The slider counts
    from 0, so the label gives its range: step 10 (of 0–26)."""
    from workbench.ui.replay_view import step_info, step_label

    assert step_label(10, 27) == "step 10 (of 0–26)" and step_label(0, 73) == "step 0 (of 0–72)"
    assert step_label(0, 1) == "step 0 (its only step)"
    trace = _trace("greedy", [4, 5])
    trace.steps = [SimpleNamespace(tree_size=1, accepted=0, step_ms=1.0, draft_ms=0.0, forward_ms=1.0)] * 27
    assert " · step 10 (of 0–26) · " in step_info(7, trace, 10)


def _node(node: int, reason: str, decision: str = "rejected", rank: int = 3):
    from workbench.rescore import NodeRescore

    return NodeRescore(node, 0, 1, 7, "x", "draft", 0.01, decision, None, reason, decision, None, reason, rank)


def test_a_rescore_that_changes_nothing_says_why_the_pairs_were_not_rescued():
    """csd at λ = 1: "no decision changes" and nothing more, though Compare's column said the largest count was 1.
    The summary says how many rejected tokens' pairs reached λ and that the τ gate refused them."""
    from core.rules import Rescue, rescue_decision
    from workbench.rescore import RunRescore, StepRescore
    from workbench.ui.replay_view import rescore_summary

    rule = Rescue(lam=1, tau=0.1)
    gated = rescue_decision(rule, 1, -4.0)  # count 1 reached λ 1; z(x) − z(t*) = −4 < log 0.1
    unseen = rescue_decision(rule, 0, -0.5)  # count 0 < λ
    assert gated[0] is False and unseen[0] is False
    steps = [StepRescore(0, 0, 0, [_node(1, gated[1]), _node(2, gated[1]), _node(3, unseen[1])])]
    result = RunRescore("csd", {"lam": 1, "tau": 0.1}, steps, None, 1, 1.0, 1.0, False, 1.0)
    said = rescore_summary(result, {"lam": 1, "tau": 0.1})
    assert "no decision changes: 2 rejected draft tokens' pair counts reached λ = 1; the τ gate refused 2" in said
    none_reached = RunRescore("csd", {"lam": 1}, [StepRescore(0, 0, 0, [_node(3, unseen[1])])], None, 1, 1, 1, False, 1)
    assert "no rejected draft token's pair count reached λ = 1" in rescore_summary(none_reached, {"lam": 1})


def test_the_rerun_panels_speed_up_says_its_clock():
    """One run read 2.56× in Compare (decoding CPU time) and 2.55× in Replay's re-run panel (the stored wall clock),
    nothing saying why: the re-run panel names its clock in Compare's words (both now read the stored CPU time)."""
    from core.stats import CLOCK_PHRASES
    from workbench.ui.replay_view import speedup_source

    trace = _trace("aasd", [4, 5])
    trace.status = "complete"
    for greedy in ((3, _trace("greedy", [4, 5])), (9, trace)):
        assert speedup_source(trace, 9, greedy, {"cpu"}).endswith(CLOCK_PHRASES["cpu"])
        said = speedup_source(trace, 9, greedy, {"wall"})
        assert said.endswith(CLOCK_PHRASES["wall"]) and "CPU time not recorded" in said, said


def test_the_speed_note_says_its_tree_size_is_a_mean(monkeypatch):
    """ "aasd[auto]: trees of 4 nodes" while a step showed a 10-node tree: the note's size is the run's mean."""
    import torch

    from core.sizing import CostCurve
    from workbench import service

    monkeypatch.setattr(service, "cached_curve", lambda target, length=None: CostCurve((0, 4, 16), (0.05, 0.06, 0.1)))
    note = service.speed_note(
        SimpleNamespace(device=torch.device("cpu")), {"aasd[auto]": 4.2, "csd": 0.4}, {"aasd[auto]": 2.4, "csd": 1.0}
    )
    assert "aasd[auto]: trees of 4 nodes on average take" in note and "trees of 0.4 nodes on average" in note, note


def test_opening_the_frontier_tab_says_whether_a_frontier_exists(tmp_path):
    """The Frontier tab showed an empty plot until Draw, though README says "until one exists it says so": opening
    the tab runs the same view as Draw (which says "no frontier at …: run …" when there is none)."""
    from workbench.service import ModelPool
    from workbench.ui import build_app
    from workbench.ui.figures.frontier import frontier_view

    demo = build_app(db=str(tmp_path / "t.db"), pool=ModelPool("cpu", "float32"))
    triggers = {event for f in demo.fns.values() if getattr(f, "fn", None) is frontier_view for _, event in f.targets}
    assert triggers == {"click", "select"}, triggers


def test_a_cancelled_runs_speed_is_a_dash_in_compare_and_in_the_runs_list(tmp_path):
    """A cancelled run: Compare's column said "– tok/s", the Replay list 12.4 tok/s. Both show "–" beside its status
    (its speed measured part of a run)."""
    from core.trace import StepTrace
    from workbench.store import Store
    from workbench.ui.shared import metrics_md, runs_frame

    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    ids = {}
    for status in ("cancelled", "complete"):
        run = _trace("greedy", [4, 5, 6])
        run.steps = [StepTrace(i, 1 + i, 1, 0, [4 + i], draft_ms=0.0, forward_ms=80.0) for i in range(3)]
        run.decode_seconds, run.status = 0.25, status
        ids[status] = store.save_run(run)
        said = metrics_md(run, ids[status], None)
        assert (" – tok/s" in said) == (status == "cancelled"), said
    frame = runs_frame(store).set_index("id")
    assert frame.loc[ids["complete"], "tok/s"] == 12.0 and frame.loc[ids["cancelled"], "status"] == "cancelled"
    assert frame.loc[ids["cancelled"], "tok/s"] is None or frame["tok/s"].isna()[ids["cancelled"]]


def test_the_original_and_rerun_texts_have_headings():
    """The original and re-run texts sat side by side without headings: each now says which it is."""
    from workbench.ui.replay_view import rerun_outputs

    original, new = _trace("aasd", [4, 5]), _trace("aasd", [4, 6])
    left, right, _ = rerun_outputs(240, original, new, 250)
    assert ">original #240</div>" in left and ">re-run #250</div>" in right


def test_an_uploaded_image_is_said_not_to_be_a_text_file(tmp_path):
    """A PNG upload said "pic.png is not UTF-8 text … save it as UTF-8", pointing at an encoding; a binary file is
    said not to be a text file, and what a task file is. A text file that is not UTF-8 keeps the reader's words."""
    from workbench.ui.compare_tab import CompareHandlers

    png = tmp_path / "pic.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01" + bytes(range(256)))
    h = CompareHandlers(store=None, pool=None, tasks={})
    status, error = h.upload(str(png))[2:4]
    assert "pic.png is not a text file" in error and "JSON Lines" in error and "UTF-8" not in error, error
    assert "pic.png is not a text file" in status
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"id": "q", "task": "qa", "input": "caf\xe9"}\n'.encode("latin-1"))
    assert "UTF-8" in h.upload(str(latin))[3]


def test_the_bench_table_says_what_each_column_is():
    """`bash run.sh table` printed e2e_tps, forward_share, rescued_share, equal_to_greedy, step_ms with no word on
    them: a one-line legend per column follows the table (repeats' columns too)."""
    from workbench.evaluation.bench import format_table

    row = {"mal": 2.0, "tps": 10.0, "speedup": 1.5, "speedup_spread": {"n": 2, "sd": 0.1, "ci95": 0.9}}
    table = format_table({"greedy": {"mal": 1.0, "tps": 8.0}, "csd": row})
    header = [c.strip() for c in table.splitlines()[0].strip("|").split("|")][1:]
    legend = dict(line.strip().split(": ", 1) for line in table.splitlines() if line.startswith("  "))
    assert set(header) == set(legend) and "speedup_ci95" in legend, (header, legend)
    assert "forward" in legend["forward_share"] and "prefill included" in legend["e2e_tps"]
